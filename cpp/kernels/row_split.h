// row_split: a kernel's rows (output channels, tokens, pixels) split over a few threads.
//
// At batch 1 a weight-only Linear's time is the time its weight takes to stream in, and one core
// streams only part of what the memory system can deliver, so a second core reading the other
// half of the rows helps; a kernel of many rows (per-token int8, a 1x1 convolution) splits its
// compute. The engine never includes torch; the bindings pass torch's thread count, and where
// they found torch's OpenMP runtime loaded (use_openmp_team) the parts run on its team: the
// threads torch's own ops ran on a moment before, still spinning when the next kernel starts.
// Elsewhere they run on a small pool of std::threads kept between calls (starting a thread costs
// more than a small Linear's whole step), whose workers share their cores with torch's spinning
// threads: on a two-core Zen 3, fxopt's per-token int8 Linears scaled worse than float32 from
// one thread to two (int8/float32 0.71-1.02 at one thread, 0.84-1.28 at two).
//
// Parts are contiguous ranges of rows, each a multiple of `align` (the kernels' row blocks)
// except the last, a few per thread, claimed by whichever thread is free (row_split.cc). On the
// own pool, below 1 MB of weight per part the call stays on one thread: waking a sleeping
// worker took about as long as a 768x2048 int8 Linear's whole step, so only the large ones (a
// vocabulary projection: 768x32000 int8 0.92 -> 0.57 ms at two threads) are split; the team's
// threads are awake, and parts of 64 KB pay there. A call while another is running (two Python
// threads, GIL released) runs on the caller's thread alone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace fxopt {

// From now on, split work runs on the team of the OpenMP runtime at `library` (a path), which
// must already be loaded in this process (torch's libgomp or libiomp5, both of which have
// libgomp's GOMP_parallel entry). Returns false and keeps the current choice where it is not
// loaded or has no such entry; "" goes back to the own pool.
bool use_openmp_team(const std::string& library);

// Calls work(begin, end) on disjoint ranges covering [0, n), on up to `threads` threads (the
// caller's included); returns when every range is done.
void split_rows(int64_t n, int64_t bytes_per_row, int threads, int64_t align,
                const std::function<void(int64_t begin, int64_t end)>& work);

}  // namespace fxopt
