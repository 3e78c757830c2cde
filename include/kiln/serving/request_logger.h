// Request logging as TF Serving's logging_config configures it (ModelConfig.logging_config:
// sampling_config.sampling_rate and log_collector_config.filename_prefix): a sampled share of
// a model's requests is written as tensorflow.serving.PredictionLog records (request,
// response, and LogMetadata with the model spec, sampling config and SavedModel tags) to
// TFRecord files, which kiln::data's Dataset::TFRecord (or tf.data) reads back.
//
// Files: <filename_prefix>-<pid>-<n>.tfrecord, n counting from 0; a file is closed and the
// next one started once it holds max_file_bytes (rotation by size), so a long-running server
// never grows one file without bound and finished files can be shipped away.
//
// A request never waits for the disk: Log() appends to a bounded in-memory queue that one
// writer thread per model drains. When the queue is full (the disk is slower than the traffic)
// or a write fails (a full disk, a removed directory), records are dropped and counted in
// :kiln:serving:request_log_records{outcome="dropped_queue_full"|"dropped_write_error"}; after
// a write error the writer starts a new file at most once a second.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "kiln/serving/metrics.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"
#include "tensorflow_serving/config/logging_config.pb.h"
#include "tensorflow_serving/config/model_server_config.pb.h"

namespace kiln::serving {

struct RequestLogOptions {
  int64_t max_file_bytes = 64ll << 20;  // --request_log_max_file_bytes
  size_t max_queued_records = 4096;
  std::vector<std::string> saved_model_tags = {"serve"};  // LogMetadata.saved_model_tags
};

// The logger of one model.
// Thread safety: Log and Sample may be called from any thread at once; records go through a
// bounded queue (mu_) to the one writer thread, so a slow disk never blocks a request.
class RequestLogger {
 public:
  // Checks the config: sampling_rate in [0, 1], a filename_prefix whose directory exists.
  static absl::StatusOr<std::unique_ptr<RequestLogger>> Create(
      const std::string& model_name, const tensorflow::serving::LoggingConfig& config,
      const RequestLogOptions& options, ServingMetrics* metrics);
  // Writes what is queued, then closes the file.
  ~RequestLogger();
  RequestLogger(const RequestLogger&) = delete;
  RequestLogger& operator=(const RequestLogger&) = delete;

  // Whether to log this request (a draw against sampling_rate); call it before building the
  // record, so unsampled requests cost nothing more.
  bool Sample();
  // Fills log_metadata (model_spec as answered, sampling config, tags) and queues the record.
  // Never blocks on I/O.
  void Log(tensorflow::serving::PredictionLog log,
           const tensorflow::serving::ModelSpec& model_spec);

  const tensorflow::serving::LoggingConfig& config() const { return config_; }
  // Waits until every record queued so far is written or dropped (tests, shutdown).
  void Flush();

 private:
  RequestLogger(std::string model_name, tensorflow::serving::LoggingConfig config,
                RequestLogOptions options, ServingMetrics* metrics);
  void WriterLoop();
  void Count(const char* outcome, size_t n);

  const std::string model_name_;
  const tensorflow::serving::LoggingConfig config_;
  const RequestLogOptions options_;
  ServingMetrics* const metrics_;

  std::mutex mu_;
  std::condition_variable cv_;                          // records queued, or stopping
  std::condition_variable drained_;                     // the writer finished a batch
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);  // serialized records
  uint64_t queued_total_ ABSL_GUARDED_BY(mu_) = 0;      // records ever queued
  uint64_t done_total_ ABSL_GUARDED_BY(mu_) = 0;        // written or dropped by the writer
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::mt19937_64 random_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

// The loggers of every model whose config has a logging_config.
// Thread safety: SampledLogger may be called from any thread at once, also while Configure
// replaces loggers (a request keeps the shared_ptr it got).
class RequestLoggers {
 public:
  RequestLoggers(RequestLogOptions options, ServingMetrics* metrics)
      : options_(std::move(options)), metrics_(metrics) {}

  // Applies each model's logging_config; a model whose config did not change keeps its
  // logger (and its file). An invalid config changes nothing and names the model.
  absl::Status Configure(const tensorflow::serving::ModelServerConfig& config);
  // The model's logger when it logs and this request is sampled, else null. Shared, so that a
  // reconfiguration cannot free a logger a request is using.
  std::shared_ptr<RequestLogger> SampledLogger(const std::string& model);

 private:
  const RequestLogOptions options_;
  ServingMetrics* const metrics_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<RequestLogger>> loggers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::serving
