#include "kiln/exec/memory_planner.h"

#include <random>

#include <gtest/gtest.h>

namespace kiln::exec {
namespace {

TEST(MemoryPlannerTest, SequentialBuffersShareMemory) {
  // a -> b -> c: a is dead when c is written, so c reuses a's memory.
  std::vector<BufferRequest> requests = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}};
  MemoryPlan plan = PlanMemory(requests, 64);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_NE(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.arena_bytes, 2 * 1024u);
  EXPECT_EQ(plan.unshared_bytes, 3 * 1024u);
}

TEST(MemoryPlannerTest, OffsetsAreAligned) {
  MemoryPlan plan = PlanMemory({{3, 0, 5}, {5, 0, 5}, {7, 0, 5}}, 64);
  for (size_t off : plan.offsets) EXPECT_EQ(off % 64, 0u);
  EXPECT_EQ(plan.arena_bytes, 3 * 64u);
}

TEST(MemoryPlannerTest, RandomPlansNeverOverlapLiveBuffers) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> requests;
    for (int i = 0; i < 60; ++i) {
      const int first = static_cast<int>(rng() % 40);
      requests.push_back({1 + rng() % 5000, first, first + static_cast<int>(rng() % 10)});
    }
    MemoryPlan plan = PlanMemory(requests, 64);
    size_t peak_live = 0;
    for (int t = 0; t < 50; ++t) {
      size_t live = 0;
      for (const auto& r : requests) {
        if (r.first_use <= t && t <= r.last_use) live += (r.bytes + 63) / 64 * 64;
      }
      peak_live = std::max(peak_live, live);
    }
    EXPECT_GE(plan.arena_bytes, peak_live);  // cannot beat the live peak
    EXPECT_LT(plan.arena_bytes, plan.unshared_bytes);
    for (size_t a = 0; a < requests.size(); ++a) {
      for (size_t b = a + 1; b < requests.size(); ++b) {
        const bool live_together = !(requests[a].last_use < requests[b].first_use ||
                                     requests[b].last_use < requests[a].first_use);
        if (!live_together) continue;
        const size_t a_end = plan.offsets[a] + requests[a].bytes;
        const size_t b_end = plan.offsets[b] + requests[b].bytes;
        EXPECT_TRUE(a_end <= plan.offsets[b] || b_end <= plan.offsets[a])
            << "buffers " << a << " and " << b << " overlap in trial " << trial;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::exec
