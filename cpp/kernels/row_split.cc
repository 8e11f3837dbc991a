#include "kernels/row_split.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <immintrin.h>

namespace fxopt {
namespace {

constexpr int64_t kMinBytesPerPart = int64_t(1) << 20;
constexpr int64_t kMinBytesPerTeamPart = int64_t(1) << 16;
constexpr int kPartsPerThread = 4;

// libgomp's entry for a parallel region: fn(data) on each of `threads` threads (the caller's
// included), returning when all are done.
using ParallelEntry = void (*)(void (*fn)(void*), void* data, unsigned threads, unsigned flags);
std::atomic<ParallelEntry> team_entry{nullptr};

// One split call on the team: each member claims parts until none is left.
struct TeamJob {
  const std::function<void(int)>* part;
  int parts;
  std::atomic<int> next{0};
};

void team_member(void* data) {
  auto& job = *static_cast<TeamJob*>(data);
  for (int i; (i = job.next.fetch_add(1)) < job.parts;) (*job.part)(i);
}

// Parts are claimed, not assigned: the caller and the workers take the next unclaimed part until
// none is left, so a worker that wakes late (torch's own OpenMP threads may hold the other
// cores, spinning after their last parallel region) only takes less of the work, and at worst
// the caller does it all. Workers sleep between calls rather than spin: spinning, they took the
// cores torch's threads needed for the ops between the Linears, and a decoding step at two
// threads ran at half the speed of one.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  // Runs part(i) for every i in [0, parts) on the caller and up to `helpers` workers.
  void run(int parts, int helpers, const std::function<void(int)>& part) {
    while (int(workers_.size()) < helpers) workers_.emplace_back([this] { serve(); });
    uint32_t generation;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      generation = uint32_t(++generation_);
      part_ = &part;
      parts_ = parts;
      helpers_ = helpers;
      joined_ = 0;
      done_.store(0);
      ticket_.store(uint64_t(generation) << 32);
    }
    wake_.notify_all();
    work(generation, parts, part);
    while (done_.load(std::memory_order_acquire) != parts) _mm_pause();
  }

  std::mutex busy;  // held by the call using the pool

 private:
  // Claims and runs parts of `generation` until none is left.
  void work(uint32_t generation, int parts, const std::function<void(int)>& part) {
    for (;;) {
      uint64_t ticket = ticket_.load();
      int index;
      do {
        index = int(ticket & 0xFFFFFFFFu);
        if (uint32_t(ticket >> 32) != generation || index >= parts) return;
      } while (!ticket_.compare_exchange_weak(ticket, ticket + 1));
      part(index);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void serve() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stopping_) return;
      // A pool grown by an earlier call with more threads lends this one only those it asked for.
      if (joined_ == helpers_) continue;
      ++joined_;
      const std::function<void(int)>* part = part_;
      int parts = parts_;
      lock.unlock();
      work(uint32_t(seen), parts, *part);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  uint64_t generation_ = 0;  // guarded by mutex_
  const std::function<void(int)>* part_ = nullptr;
  int parts_ = 0;
  int helpers_ = 0;  // workers the current call may use
  int joined_ = 0;   // workers that joined it
  bool stopping_ = false;
  std::atomic<uint64_t> ticket_{0};  // the generation, then the next part to claim
  std::atomic<int> done_{0};
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

bool use_openmp_team(const std::string& library) {
  if (library.empty()) {
    team_entry.store(nullptr);
    return true;
  }
  // RTLD_NOLOAD: only a runtime already loaded; a second one would bring a second team. The
  // handle stays open, so the entry outlives the caller's hold on the library.
  void* handle = dlopen(library.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return false;
  auto entry = reinterpret_cast<ParallelEntry>(dlsym(handle, "GOMP_parallel"));
  if (!entry) {
    dlclose(handle);
    return false;
  }
  team_entry.store(entry);
  return true;
}

void split_rows(int64_t n, int64_t bytes_per_row, int threads, int64_t align,
                const std::function<void(int64_t, int64_t)>& work) {
  const ParallelEntry team = team_entry.load();
  int64_t most =
      std::max<int64_t>(1, n * bytes_per_row / (team ? kMinBytesPerTeamPart : kMinBytesPerPart));
  int parts =
      int(std::min<int64_t>({int64_t(threads) * kPartsPerThread, most, (n + align - 1) / align}));
  // A forked child has the pool's object but not its threads (nor, usable, the team's).
  static const pid_t owner = getpid();
  if (threads <= 1 || parts <= 1 || getpid() != owner) return work(0, n);
  std::unique_lock<std::mutex> busy(pool().busy, std::try_to_lock);
  if (!busy.owns_lock()) return work(0, n);
  int64_t step = (n / parts + align - 1) / align * align;
  // An exception must not leave a worker (std::terminate) nor cross the OpenMP runtime's frames:
  // the first is kept, the parts not yet started are dropped, and the caller gets it at the end.
  std::mutex failure;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  const std::function<void(int)> part = [&](int i) {
    int64_t begin = std::min(n, i * step), end = i == parts - 1 ? n : std::min(n, begin + step);
    if (begin >= end || failed.load(std::memory_order_relaxed)) return;
    try {
      work(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure);
      if (!error) error = std::current_exception();
      failed.store(true);
    }
  };
  if (team) {
    TeamJob job{&part, parts};
    team(team_member, &job, unsigned(threads), 0);
  } else {
    pool().run(parts, threads - 1, part);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fxopt
