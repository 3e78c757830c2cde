// Prometheus metrics under TF Serving's metric names. TF Serving names metrics like paths
// ("/tensorflow/serving/request_count"); its Prometheus exporter turns '/' into ':', so
// scrapers and dashboards see ":tensorflow:serving:request_count". We keep those names.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace kiln::serving {

// A counter or histogram family: one series per label-value tuple.
// Thread safety: every method may be called from any thread at once (request threads record
// while the /metrics handler and the status page read); each call takes the family's lock.
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, std::vector<std::string> label_names,
               std::vector<double> buckets = {});

  // Counters: adds `delta` to the series.
  void Increment(const std::vector<std::string>& label_values, double delta = 1);
  // Histograms: records one observation.
  void Observe(const std::vector<std::string>& label_values, double value);
  // Counters: the current value (0 when absent).
  double Value(const std::vector<std::string>& label_values) const;
  // Histograms: number of observations.
  uint64_t Count(const std::vector<std::string>& label_values) const;

  void AppendPrometheus(std::string* out) const;
  bool is_histogram() const { return !buckets_.empty(); }

  // A copy of every series (the status page reads the counters Prometheus exports).
  struct SeriesSnapshot {
    std::vector<std::string> label_values;
    double value = 0;  // counter value or histogram sum
    uint64_t count = 0;
    std::vector<uint64_t> bucket_counts;  // per bucket (not cumulative), then +Inf
  };
  std::vector<SeriesSnapshot> Snapshot() const;
  const std::vector<double>& buckets() const { return buckets_; }

 private:
  struct Series {
    double value = 0;  // counter value or histogram sum
    uint64_t count = 0;
    std::vector<uint64_t> bucket_counts;
  };
  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
  std::vector<double> buckets_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, Series> series_ ABSL_GUARDED_BY(mu_);
};

// The server's metrics. Latencies are in microseconds, as TF Serving records them.
class ServingMetrics {
 public:
  ServingMetrics();

  // labels: model_name, status ("OK" or the error code name)
  MetricFamily request_count;
  // labels: model_name, API ("predict", "classify", ...), entrypoint ("REST", "GRPC")
  MetricFamily request_latency;
  // labels: model_name, API, runtime
  MetricFamily runtime_latency;
  // labels: model_path, status
  MetricFamily load_attempt_count;
  // labels: model_path, stage ("load"); microseconds spent loading
  MetricFamily load_latency;
  // labels: model_path
  MetricFamily model_warmup_latency;
  // labels: thread_pool_name
  MetricFamily batch_size;
  MetricFamily padding_size;
  MetricFamily queuing_latency;
  // Kiln's own family, not TF Serving's (whose names and labels clients scrape unchanged):
  // request latency per model_name, version, signature, API, entrypoint, for the status
  // page's per-signature rows. Recorded only once the version and signature resolved (the
  // signature exists in the model), so a client cannot add series by naming signatures.
  MetricFamily signature_request_latency;
  // Kiln's own: request log records (logging_config) per model_name and outcome ("written",
  // "dropped_queue_full", "dropped_write_error"): a full disk drops records, never slows a
  // request, and shows here.
  MetricFamily request_log_records;

  // Prometheus text exposition (version 0.0.4) of every family.
  std::string ToPrometheusText() const;

 private:
  std::vector<const MetricFamily*> all_;
};

}  // namespace kiln::serving
