// The runtime side of pipelines: clean destruction with work in flight, the RAM budget,
// statistics, traces and the autotuner's decisions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "data/async_stage.h"
#include "data/autotune/autotuner.h"
#include "kiln/core/clock.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using ::kiln::data::testing::AddFn;
using ::kiln::data::testing::AsInt64;
using ::kiln::data::testing::CollectInt64;
using ::kiln::data::testing::Int64Element;
using ::kiln::data::testing::Iota;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

MapFn SleepMap(int64_t nanos) {
  return [nanos](Element e) -> absl::StatusOr<Element> {
    SleepForNanos(nanos);
    return e;
  };
}

TEST(DestructionTest, IteratorWithWorkInFlightIsDestroyedPromptly) {
  // Slow parallel map, prefetch and parallel interleave of nested parallel maps, all busy.
  DatasetFn nested = [](Element e) -> absl::StatusOr<Dataset> {
    return Dataset::Range(AsInt64(e) * 100, AsInt64(e) * 100 + 50).Map(SleepMap(5'000'000), 2);
  };
  Dataset ds =
      Dataset::Range(8).Interleave(nested, 4, 1, 4).Map(SleepMap(20'000'000), 4).Prefetch(8);
  for (int consumed : {0, 1, 5}) {
    auto it = *ds.MakeIterator();
    for (int i = 0; i < consumed; ++i) ASSERT_TRUE(it->GetNext().ok());
    const int64_t start = NowNanos();
    it.reset();
    // Only the calls already running finish (20 ms at most here); nothing waits for the data.
    EXPECT_LT(NowNanos() - start, 500'000'000) << consumed;
  }
}

TEST(DestructionTest, BlockingGeneratorUpstreamOfParallelStages) {
  std::atomic<int> produced{0};
  Dataset ds = Dataset::FromGenerator([&produced] {
                 return [&produced]() -> absl::StatusOr<std::optional<Element>> {
                   SleepForNanos(2'000'000);
                   return std::optional<Element>(Int64Element(produced++));
                 };
               })
                   .Map(AddFn(1), kAutotune)
                   .Batch(4, false, 2)
                   .Prefetch(kAutotune);
  auto it = *ds.MakeIterator();
  ASSERT_TRUE(it->GetNext().ok());
  it.reset();
  const int after = produced.load();
  SleepForNanos(20'000'000);
  EXPECT_EQ(produced.load(), after);  // no thread still runs the generator
}

TEST(RamBudgetTest, BuffersNeverExceedTheBudget) {
  constexpr int64_t kElementBytes = 100 << 10;
  constexpr int64_t kBudget = 1 << 20;
  MapFn big = [](Element e) -> absl::StatusOr<Element> {
    Tensor t(DType::kUInt8, Shape{kElementBytes});
    std::memset(t.raw_data(), static_cast<int>(AsInt64(e)), kElementBytes);
    return Element({t});
  };
  Options options;
  options.ram_budget_bytes = kBudget;
  options.cpu_budget = 4;
  // A fast producer and a slow consumer: every buffer fills as far as it is allowed to.
  auto it = *Dataset::Range(200)
                 .Map(big, kAutotune)
                 .Prefetch(kAutotune)
                 .Map([](Element e) -> absl::StatusOr<Element> { return e; })
                 .Prefetch(16)
                 .MakeIterator(options);
  EXPECT_EQ(it->ram_budget_bytes(), kBudget);
  int n = 0;
  while (true) {
    auto next = it->GetNext();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    ASSERT_EQ((**next)[0].data<uint8_t>()[kElementBytes - 1], static_cast<uint8_t>(n));
    ++n;
    if (n % 10 == 0) SleepForNanos(3'000'000);
  }
  EXPECT_EQ(n, 200);
  EXPECT_GT(it->peak_buffered_bytes(), 2 * kElementBytes);  // the buffers were used...
  EXPECT_LE(it->peak_buffered_bytes(), kBudget);            // ...within the budget
}

TEST(StatsTest, NamesTheSlowStageAsBottleneck) {
  auto it = *Dataset::Range(40).Map(SleepMap(2'000'000)).Map(AddFn(1)).Prefetch(2).MakeIterator();
  while (it->GetNext()->has_value()) {
  }
  PipelineStats stats = it->Stats();
  EXPECT_EQ(stats.bottleneck, "Prefetch/Map/Map");
  bool found = false;
  for (const StageStats& s : stats.stages) {
    if (s.name == "Prefetch/Map/Map") {
      found = true;
      EXPECT_EQ(s.elements, 40);
      EXPECT_GT(s.busy_ns, 40 * 1'500'000);
    }
    if (s.name == "Prefetch") {
      EXPECT_GT(s.wait_ns, 40 * 1'000'000);
    }
  }
  EXPECT_TRUE(found) << stats.ToString();
  EXPECT_THAT(stats.ToString(), HasSubstr("bottleneck: Prefetch/Map/Map"));
}

TEST(StatsTest, ConsumerIsTheBottleneckWhenThePipelineKeepsUp) {
  // Enough elements that the sampled consumer timing (one call in 16) averages out, also
  // under a sanitizer's slowdown.
  auto it = *Dataset::Range(64).Prefetch(8).MakeIterator();
  SleepForNanos(5'000'000);
  while (true) {
    auto next = *it->GetNext();
    if (!next) break;
    SleepForNanos(2'000'000);
  }
  EXPECT_EQ(it->Stats().bottleneck, "consumer");
}

TEST(TraceTest, WritesATrackPerStage) {
  const std::string path = testing::TempPath("trace.json");
  {
    Options options;
    options.trace_path = path;
    auto it = *Dataset::Range(10).Map(SleepMap(100'000), 2).Prefetch(2).MakeIterator(options);
    while (it->GetNext()->has_value()) {
    }
  }
  std::ifstream file(path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string json = buffer.str();
  EXPECT_THAT(json, HasSubstr("\"traceEvents\""));
  EXPECT_THAT(json, HasSubstr("\"Prefetch/ParallelMap #"));
  EXPECT_THAT(json, HasSubstr("\"Prefetch/ParallelMap/Range\""));
  std::remove(path.c_str());
}

TEST(AutotuneTest, GrowsAStarvedSaturatedStageWithinTheCpuBudget) {
  std::vector<Autotuner::StageView> views(1);
  views[0].tunes_parallelism = true;
  views[0].max_parallelism = 32;
  views[0].m.parallelism = 2;
  views[0].m.busy_ns = 2 * 20'000'000;  // both workers busy the whole 20 ms window
  views[0].m.consumer_wait_ns = 10'000'000;
  views[0].m.cpu_fraction = 1.0;
  Autotuner::Decide(views, 20'000'000, /*cpu_budget=*/3, 1 << 30, 0);
  EXPECT_EQ(views[0].new_parallelism, 3);  // +1 would be wanted, the budget allows one core
  // The same stage blocked in I/O costs no CPU and may grow beyond the core count.
  views[0].m.cpu_fraction = 0.0;
  views[0].m.consumer_wait_ns = 20'000'000;
  Autotuner::Decide(views, 20'000'000, 3, 1 << 30, 0);
  EXPECT_EQ(views[0].new_parallelism, 4);
}

// Two threads spinning on one CPU each spend about half their time waiting for it: what the
// autotuner must tell from blocking in I/O (which costs no CPU and no waiting).
TEST(AutotuneTest, SampleThreadCpuSeesTimeSpentWaitingForACpu) {
  if (::access("/proc/thread-self/schedstat", R_OK) != 0) {
    GTEST_SKIP() << "this kernel does not report scheduler statistics";
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  if (sched_getaffinity(0, sizeof(one), &one) != 0) GTEST_SKIP() << "no affinity";
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &one)) ++cpu;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ThreadCpuTimes spent[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
      const ThreadCpuTimes before = SampleThreadCpu();
      const int64_t end = NowNanos() + 200'000'000;
      while (NowNanos() < end) {
      }
      const ThreadCpuTimes after = SampleThreadCpu();
      spent[t] = {after.on_cpu_ns - before.on_cpu_ns, after.waiting_ns - before.waiting_ns};
    });
  }
  for (std::thread& t : threads) t.join();
  for (const ThreadCpuTimes& s : spent) {
    EXPECT_GT(s.on_cpu_ns, 20'000'000);
    EXPECT_GT(s.waiting_ns, 20'000'000);  // about 100 ms each
  }
  // A sleeping thread waits for nothing.
  const ThreadCpuTimes before = SampleThreadCpu();
  ::usleep(50'000);
  const ThreadCpuTimes after = SampleThreadCpu();
  EXPECT_LT(after.waiting_ns - before.waiting_ns, 20'000'000);
  EXPECT_LT(after.on_cpu_ns - before.on_cpu_ns, 20'000'000);
}

// 8 workers of a CPU-bound map on 2 cores: each is busy the whole window but on a CPU a
// quarter of it, and waits for one most of the rest. That is not I/O: the stage must not grow
// (it did, to all its threads) but shrink to the cores it can have.
TEST(AutotuneTest, WorkersWaitingForACpuAreNotFreeCapacity) {
  std::vector<Autotuner::StageView> views(1);
  views[0].tunes_parallelism = true;
  views[0].max_parallelism = 8;
  views[0].m.parallelism = 8;
  views[0].m.busy_ns = 8 * 20'000'000;
  views[0].m.consumer_wait_ns = 10'000'000;  // starved
  views[0].m.cpu_fraction = 0.25;
  views[0].m.cpu_wait_fraction = 0.72;
  Autotuner::Decide(views, 20'000'000, /*cpu_budget=*/2, 1 << 30, 0);
  EXPECT_EQ(views[0].new_parallelism, 2);
  // At 2 workers on 2 cores they hardly wait: kept, and not grown although starved.
  views[0].m.parallelism = 2;
  views[0].m.busy_ns = 2 * 20'000'000;
  views[0].m.cpu_fraction = 0.97;
  views[0].m.cpu_wait_fraction = 0.03;
  Autotuner::Decide(views, 20'000'000, 2, 1 << 30, 0);
  EXPECT_EQ(views[0].new_parallelism, 2);
  // The same waits within the budget (4 cores, other processes busy): no shrink.
  views[0].m.parallelism = 3;
  views[0].m.busy_ns = 3 * 20'000'000;
  views[0].m.consumer_wait_ns = 0;
  views[0].m.cpu_fraction = 0.6;
  views[0].m.cpu_wait_fraction = 0.4;
  Autotuner::Decide(views, 20'000'000, 4, 1 << 30, 0);
  EXPECT_EQ(views[0].new_parallelism, 3);
}

TEST(AutotuneTest, ShrinksIdleStagesAndBuffersUnderRamPressure) {
  std::vector<Autotuner::StageView> views(2);
  views[0].tunes_parallelism = true;
  views[0].max_parallelism = 16;
  views[0].m.parallelism = 8;
  views[0].m.busy_ns = 8 * 20'000'000 / 10;  // 10% busy, consumer never waits
  views[1].tunes_buffer = true;
  views[1].m.buffer_limit = 8;
  views[1].m.busy_ns = 1;
  views[1].m.element_bytes = 1000;
  Autotuner::Decide(views, 20'000'000, 8, 10000, 9500);
  EXPECT_EQ(views[0].new_parallelism, 2);
  EXPECT_EQ(views[1].new_buffer, 4);
}

TEST(AutotuneTest, AutotunedPipelineProducesEverythingInOrder) {
  Options options;
  options.cpu_budget = 2;
  auto out = *CollectInt64(Dataset::Range(300)
                               .Map(SleepMap(200'000), kAutotune)
                               .Batch(10, false, kAutotune)
                               .Unbatch()
                               .Prefetch(kAutotune),
                           options);
  EXPECT_THAT(out, ElementsAreArray(Iota(0, 300)));
}

}  // namespace
}  // namespace kiln::data
