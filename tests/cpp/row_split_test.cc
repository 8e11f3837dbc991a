// split_rows on the own thread pool and on an OpenMP runtime's team (kernels/row_split.h).
#include "kernels/row_split.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace fxopt {
namespace {

// The runtime GCC's OpenMP programs load; the tests load it as torch loads its own copy.
constexpr const char* kRuntime = "libgomp.so.1";

enum class Threads { Pool, Team };

class SplitRows : public testing::TestWithParam<Threads> {
 protected:
  void SetUp() override {
    if (GetParam() == Threads::Pool) return;
    runtime_ = dlopen(kRuntime, RTLD_NOW);
    ASSERT_NE(runtime_, nullptr) << kRuntime << " is installed with g++ (scripts/setup.sh)";
    ASSERT_TRUE(use_openmp_team(kRuntime));
  }
  void TearDown() override {
    EXPECT_TRUE(use_openmp_team(""));
    if (runtime_) dlclose(runtime_);
  }

 private:
  void* runtime_ = nullptr;
};

// Every row in exactly one range, ranges starting at multiples of `align`, the work spread over
// both threads and no more (each range takes long enough that the second thread is up before the
// first has claimed them all).
TEST_P(SplitRows, CoverEveryRowOnceOnEveryThread) {
  constexpr int64_t kRows = 1003, kAlign = 4;
  // A call with more threads first: the own pool then holds more workers than this call asks for.
  split_rows(kRows, int64_t(1) << 20, 4, kAlign, [](int64_t, int64_t) {});
  std::vector<std::atomic<int>> seen(kRows);
  std::mutex mutex;
  std::set<std::thread::id> workers;
  split_rows(kRows, int64_t(1) << 20, 2, kAlign, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(begin % kAlign, 0);
    for (int64_t row = begin; row < end; ++row) seen[size_t(row)].fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> lock(mutex);
    workers.insert(std::this_thread::get_id());
  });
  for (int64_t row = 0; row < kRows; ++row) ASSERT_EQ(seen[size_t(row)].load(), 1) << row;
  EXPECT_EQ(workers.size(), 2u);
}

// Rows too few to pay for a second thread, and a single thread, run on the caller alone.
TEST_P(SplitRows, SmallWorkStaysOnTheCaller) {
  for (auto [rows, threads] : {std::pair<int64_t, int>{3, 2}, {1000, 1}}) {
    const std::thread::id caller = std::this_thread::get_id();
    std::vector<std::pair<int64_t, int64_t>> ranges;
    split_rows(rows, 16, threads, 1, [&](int64_t begin, int64_t end) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      ranges.emplace_back(begin, end);
    });
    ASSERT_EQ(ranges.size(), 1u);
    EXPECT_EQ(ranges[0], std::make_pair(int64_t(0), rows));
  }
}

// A part's exception reaches the caller (none may cross the OpenMP runtime's frames), and the
// threads serve the next call.
TEST_P(SplitRows, APartsExceptionReachesTheCaller) {
  auto failing = [](int64_t begin, int64_t) {
    if (begin == 0) throw std::runtime_error("part failed");
  };
  EXPECT_THROW(split_rows(1000, int64_t(1) << 20, 2, 1, failing), std::runtime_error);
  std::atomic<int64_t> rows{0};
  split_rows(1000, int64_t(1) << 20, 2, 1,
             [&](int64_t begin, int64_t end) { rows.fetch_add(end - begin); });
  EXPECT_EQ(rows.load(), 1000);
}

INSTANTIATE_TEST_SUITE_P(OwnPoolAndOpenMpTeam, SplitRows,
                         testing::Values(Threads::Pool, Threads::Team),
                         [](const testing::TestParamInfo<Threads>& info) {
                           return info.param == Threads::Pool ? "Pool" : "Team";
                         });

// Only a runtime this process already loaded, and one with libgomp's entry, is taken.
TEST(OpenMpTeam, NeedsALoadedRuntimeWithGompsEntry) {
  EXPECT_FALSE(use_openmp_team("libfxopt-no-such-runtime.so"));
  EXPECT_FALSE(use_openmp_team("libc.so.6"));  // loaded, but no GOMP_parallel
  std::atomic<int64_t> rows{0};
  split_rows(1000, int64_t(1) << 20, 2, 1,
             [&](int64_t begin, int64_t end) { rows.fetch_add(end - begin); });
  EXPECT_EQ(rows.load(), 1000);
}

}  // namespace
}  // namespace fxopt
