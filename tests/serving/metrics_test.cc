#include "kiln/serving/metrics.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::serving {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, PrometheusTextUsesTfServingNames) {
  ServingMetrics metrics;
  metrics.request_count.Increment({"half_plus_two", "OK"});
  metrics.request_count.Increment({"half_plus_two", "OK"});
  metrics.request_latency.Observe({"half_plus_two", "predict", "REST"}, 150);
  const std::string text = metrics.ToPrometheusText();
  EXPECT_THAT(text, HasSubstr("# TYPE :tensorflow:serving:request_count counter"));
  EXPECT_THAT(text, HasSubstr(
      ":tensorflow:serving:request_count{model_name=\"half_plus_two\",status=\"OK\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE :tensorflow:serving:request_latency histogram"));
  EXPECT_THAT(text, HasSubstr(":tensorflow:serving:request_latency_bucket{model_name=\"half_plus_"
                              "two\",API=\"predict\",entrypoint=\"REST\",le=\"+Inf\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(":tensorflow:serving:request_latency_count{model_name=\"half_plus_"
                              "two\",API=\"predict\",entrypoint=\"REST\"} 1\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricFamily family("h", "help", {"l"}, {1, 10});
  family.Observe({"a"}, 0.5);
  family.Observe({"a"}, 5);
  family.Observe({"a"}, 50);
  std::string text;
  family.AppendPrometheus(&text);
  EXPECT_THAT(text, HasSubstr("h_bucket{l=\"a\",le=\"1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{l=\"a\",le=\"10\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{l=\"a\",le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("h_sum{l=\"a\"} 55.5\n"));
}

}  // namespace
}  // namespace kiln::serving
