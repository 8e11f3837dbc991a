#include "kernels/row_split.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <unistd.h>

namespace fxopt {
namespace {

constexpr int64_t kMinBytesPerPart = int64_t(1) << 17;

// Workers wait for a new generation of work. They spin briefly first: a decoding step calls the
// kernels back to back, and waking from a condition variable took longer than a small Linear.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  // Runs part(i) for i in [0, parts): part 0 on the caller, the others on workers.
  void run(int parts, const std::function<void(int)>& part) {
    while (int(workers_.size()) < parts - 1) {
      // The generation it starts from is read here, before this call's: read by the new
      // thread, it could already be this call's, which the worker would then never serve.
      int index = int(workers_.size()) + 1;
      uint64_t start = generation_.load();
      workers_.emplace_back([this, index, start] { serve(index, start); });
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      part_ = &part;
      parts_ = parts;
      pending_.store(parts - 1);
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    part(0);
    while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
  }

  std::mutex busy;  // held by the call using the pool

 private:
  void serve(int index, uint64_t seen) {
    for (;;) {
      auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (generation_.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < spin_until)
        _mm_pause();
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stopping_) return;
      const std::function<void(int)>* part = part_;
      bool mine = index < parts_;
      lock.unlock();
      if (!mine) continue;
      (*part)(index);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int)>* part_ = nullptr;
  int parts_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

void split_rows(int64_t n, int64_t bytes_per_row, int threads, int64_t align,
                const std::function<void(int64_t, int64_t)>& work) {
  int64_t most = std::max<int64_t>(1, n * bytes_per_row / kMinBytesPerPart);
  int parts = int(std::min<int64_t>({threads, most, (n + align - 1) / align}));
  // A forked child has the pool's object but not its threads.
  static const pid_t owner = getpid();
  if (parts <= 1 || getpid() != owner) return work(0, n);
  std::unique_lock<std::mutex> busy(pool().busy, std::try_to_lock);
  if (!busy.owns_lock()) return work(0, n);
  int64_t step = (n / parts + align - 1) / align * align;
  pool().run(parts, [&](int i) {
    int64_t begin = std::min(n, i * step), end = i == parts - 1 ? n : std::min(n, begin + step);
    if (begin < end) work(begin, end);
  });
}

}  // namespace fxopt
