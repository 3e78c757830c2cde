#include "kiln/serving/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace kiln::serving {
namespace {

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> buckets;
  double bound = start;
  for (int i = 0; i < count; ++i) {
    buckets.push_back(bound);
    bound *= factor;
  }
  return buckets;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> buckets;
  for (int i = 0; i < count; ++i) buckets.push_back(start + width * i);
  return buckets;
}

std::string FormatNumber(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out.append("\\n");
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

MetricFamily::MetricFamily(std::string name, std::string help,
                           std::vector<std::string> label_names, std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {}

void MetricFamily::Increment(const std::vector<std::string>& label_values, double delta) {
  std::lock_guard<std::mutex> lock(mu_);
  series_[label_values].value += delta;
}

void MetricFamily::Observe(const std::vector<std::string>& label_values, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& series = series_[label_values];
  if (series.bucket_counts.empty()) series.bucket_counts.assign(buckets_.size() + 1, 0);
  const size_t bucket =
      std::lower_bound(buckets_.begin(), buckets_.end(), value) - buckets_.begin();
  ++series.bucket_counts[bucket];
  series.value += value;
  ++series.count;
}

double MetricFamily::Value(const std::vector<std::string>& label_values) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(label_values);
  return it == series_.end() ? 0 : it->second.value;
}

uint64_t MetricFamily::Count(const std::vector<std::string>& label_values) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(label_values);
  return it == series_.end() ? 0 : it->second.count;
}

std::vector<MetricFamily::SeriesSnapshot> MetricFamily::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SeriesSnapshot> out;
  out.reserve(series_.size());
  for (const auto& [values, series] : series_) {
    out.push_back({values, series.value, series.count, series.bucket_counts});
  }
  return out;
}

void MetricFamily::AppendPrometheus(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StrAppend(out, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " ",
                  is_histogram() ? "histogram" : "counter", "\n");
  for (const auto& [values, series] : series_) {
    std::string labels;
    for (size_t i = 0; i < label_names_.size() && i < values.size(); ++i) {
      absl::StrAppend(&labels, i ? "," : "", label_names_[i], "=\"", EscapeLabel(values[i]),
                      "\"");
    }
    if (!is_histogram()) {
      absl::StrAppend(out, name_, "{", labels, "} ", FormatNumber(series.value), "\n");
      continue;
    }
    const std::string prefix = labels.empty() ? "" : labels + ",";
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= buckets_.size(); ++b) {
      cumulative += series.bucket_counts[b];
      const std::string bound =
          b < buckets_.size() ? FormatNumber(buckets_[b]) : std::string("+Inf");
      absl::StrAppend(out, name_, "_bucket{", prefix, "le=\"", bound, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(out, name_, "_sum{", labels, "} ", FormatNumber(series.value), "\n");
    absl::StrAppend(out, name_, "_count{", labels, "} ", series.count, "\n");
  }
}

ServingMetrics::ServingMetrics()
    : request_count(":tensorflow:serving:request_count", "The total number of requests.",
                    {"model_name", "status"}),
      request_latency(":tensorflow:serving:request_latency",
                      "Distribution of wall time (in microseconds) for Tensorflow Serving "
                      "request.",
                      {"model_name", "API", "entrypoint"}, ExponentialBuckets(10, 1.8, 33)),
      runtime_latency(":tensorflow:serving:runtime_latency",
                      "Distribution of wall time (in microseconds) for Tensorflow runtime.",
                      {"model_name", "API", "runtime"}, ExponentialBuckets(10, 1.8, 33)),
      load_attempt_count(":tensorflow:cc:saved_model:load_attempt_count",
                         "The number of times a SavedModel was successfully loaded.",
                         {"model_path", "status"}),
      load_latency(":tensorflow:cc:saved_model:load_latency",
                   "Latency in microseconds for SavedModels that were successfully loaded.",
                   {"model_path"}),
      model_warmup_latency(":tensorflow:serving:model_warmup_latency",
                           "Distribution of wall time (in microseconds) for warming up the "
                           "model.",
                           {"model_path"}, ExponentialBuckets(10, 1.8, 33)),
      batch_size(":tensorflow:serving:batching_session:input_batch_size",
                 "Tracks the batch size distribution on the inputs by model_name (if "
                 "available).",
                 {"model_name"}, ExponentialBuckets(1, 2, 14)),
      padding_size(":tensorflow:serving:batching_session:padding_size",
                   "Tracks the padding size distribution on batches by model_name (if "
                   "available).",
                   {"model_name"}, LinearBuckets(0, 4, 64)),
      queuing_latency(":tensorflow:serving:batching_session:queuing_latency",
                      "Tracks the latency spent in the batching queue (in microseconds).",
                      {"model_name"}, ExponentialBuckets(10, 1.8, 33)),
      signature_request_latency(
          ":kiln:serving:signature_request_latency",
          "Distribution of wall time (in microseconds) for requests, per model version and "
          "signature.",
          {"model_name", "version", "signature", "API", "entrypoint"},
          ExponentialBuckets(10, 1.8, 33)),
      request_log_records(":kiln:serving:request_log_records",
                          "Request log records (logging_config), by outcome: written or dropped.",
                          {"model_name", "outcome"}) {
  all_ = {&request_count,   &request_latency,           &runtime_latency,    &load_attempt_count,
          &load_latency,    &model_warmup_latency,      &batch_size,         &padding_size,
          &queuing_latency, &signature_request_latency, &request_log_records};
}

std::string ServingMetrics::ToPrometheusText() const {
  std::string out;
  for (const MetricFamily* family : all_) family->AppendPrometheus(&out);
  return out;
}

}  // namespace kiln::serving
