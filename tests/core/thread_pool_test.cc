#include "kiln/core/thread_pool.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(1000, 10, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, NestedParallelForDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(100, 1, [&](int64_t b2, int64_t e2) { sum += e2 - b2; });
    }
  });
  EXPECT_EQ(sum.load(), 400);
}

TEST(ThreadPoolTest, DestructorRunsScheduledTasks) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 100; ++i) pool.Schedule([&] { done++; });
  }
  EXPECT_EQ(done.load(), 100);
}

}  // namespace
}  // namespace kiln
