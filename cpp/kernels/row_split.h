// row_split: a weight-streaming kernel's output channels split over a few threads.
//
// At batch 1 a weight-only Linear's time is the time its weight takes to stream in, and one core
// streams only part of what the memory system can deliver, so a second core reading the other
// half of the rows helps. torch's own threads (OpenMP) are not reachable from the engine, which
// never includes torch; the bindings pass torch's thread count instead and the parts run on a
// small pool of std::threads kept between calls: starting a thread costs more than a small
// Linear's whole step.
//
// Parts are contiguous ranges of output channels, each a multiple of `align` (the kernels' row
// blocks) except the last, a few per thread, claimed by whichever thread is free (row_split.cc).
// Below 1 MB of weight per part the call stays on one thread: waking a sleeping worker took
// about as long as a 768x2048 int8 Linear's whole step, so only the large ones (a vocabulary
// projection: 768x32000 int8 0.92 -> 0.57 ms at two threads) are split. A call while another is
// running (two Python threads, GIL released) runs on the caller's thread alone.
#pragma once

#include <cstdint>
#include <functional>

namespace fxopt {

// Calls work(begin, end) on disjoint ranges covering [0, n), on up to `threads` threads (the
// caller's included); returns when every range is done.
void split_rows(int64_t n, int64_t bytes_per_row, int threads, int64_t align,
                const std::function<void(int64_t begin, int64_t end)>& work);

}  // namespace fxopt
