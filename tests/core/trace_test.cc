#include "kiln/core/trace.h"

#include <gtest/gtest.h>

#include "kiln/core/clock.h"

namespace kiln {
namespace {

TEST(TraceTest, WritesNamedTracksAndEvents) {
  TraceRecorder trace;
  trace.AddEvent("map", "element", 1000, 5000);
  trace.AddCounter("prefetch", "buffer", 2000, 3);
  { ScopedTraceEvent e(&trace, "batch", "batch \"1\""); }
  const std::string json = trace.ToJson();
  EXPECT_NE(json.find("\"thread_name\",\"args\":{\"name\":\"map\"}"), std::string::npos);
  EXPECT_NE(json.find("\"ph\":\"C\""), std::string::npos);
  EXPECT_NE(json.find("batch \\\"1\\\""), std::string::npos);
  EXPECT_EQ(trace.num_events(), 3u);
}

TEST(ClockTest, SleepUntilReachesDeadline) {
  const int64_t start = NowNanos();
  SleepUntilNanos(start + 2'000'000);
  EXPECT_GE(NowNanos() - start, 2'000'000);
}

}  // namespace
}  // namespace kiln
