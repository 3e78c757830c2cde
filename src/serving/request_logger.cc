#include "kiln/serving/request_logger.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "kiln/core/clock.h"
#include "kiln/data/formats/tfrecord.h"

namespace kiln::serving {

using tensorflow::serving::LoggingConfig;
using tensorflow::serving::ModelSpec;
using tensorflow::serving::PredictionLog;

namespace {
// Bytes a record adds to a TFRecord file: length, its CRC, the data, the data's CRC.
constexpr int64_t kRecordFraming = 8 + 4 + 4;
// After a failed open or write, how long the writer drops records before it tries a new file.
constexpr int64_t kRetryAfterErrorNs = 1000000000;
}  // namespace

absl::StatusOr<std::unique_ptr<RequestLogger>> RequestLogger::Create(
    const std::string& model_name, const LoggingConfig& config, const RequestLogOptions& options,
    ServingMetrics* metrics) {
  const double rate = config.sampling_config().sampling_rate();
  if (!(rate >= 0 && rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model_name, ": logging_config.sampling_config.sampling_rate ", rate,
                     " is not in [0, 1]"));
  }
  const std::string& prefix = config.log_collector_config().filename_prefix();
  if (prefix.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", model_name, ": logging_config.log_collector_config.filename_prefix is empty"));
  }
  std::filesystem::path directory = std::filesystem::path(prefix).parent_path();
  if (directory.empty()) directory = ".";
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model_name, ": logging_config.log_collector_config.filename_prefix ",
                     prefix, ": directory ", directory.string(), " does not exist"));
  }
  if (options.max_file_bytes <= 0) {
    return absl::InvalidArgumentError("--request_log_max_file_bytes must be positive");
  }
  return std::unique_ptr<RequestLogger>(new RequestLogger(model_name, config, options, metrics));
}

RequestLogger::RequestLogger(std::string model_name, LoggingConfig config,
                             RequestLogOptions options, ServingMetrics* metrics)
    : model_name_(std::move(model_name)),
      config_(std::move(config)),
      options_(std::move(options)),
      metrics_(metrics),
      random_(std::random_device{}()) {
  writer_ = std::thread([this] { WriterLoop(); });
}

RequestLogger::~RequestLogger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

bool RequestLogger::Sample() {
  const double rate = config_.sampling_config().sampling_rate();
  if (rate >= 1) return true;
  if (rate <= 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return std::uniform_real_distribution<double>(0, 1)(random_) < rate;
}

void RequestLogger::Count(const char* outcome, size_t n) {
  if (metrics_ != nullptr && n > 0) {
    metrics_->request_log_records.Increment({model_name_, outcome}, static_cast<double>(n));
  }
}

void RequestLogger::Log(PredictionLog log, const ModelSpec& model_spec) {
  auto* metadata = log.mutable_log_metadata();
  *metadata->mutable_model_spec() = model_spec;
  *metadata->mutable_sampling_config() = config_.sampling_config();
  for (const std::string& tag : options_.saved_model_tags) metadata->add_saved_model_tags(tag);
  std::string record = log.SerializeAsString();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queued_records) {
      ++queued_total_;
      ++done_total_;
    } else {
      queue_.push_back(std::move(record));
      ++queued_total_;
      record.clear();
    }
  }
  if (!record.empty()) {
    Count("dropped_queue_full", 1);
    return;
  }
  cv_.notify_one();
}

void RequestLogger::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = queued_total_;
  drained_.wait(lock, [&] { return done_total_ >= target; });
}

void RequestLogger::WriterLoop() {
  const std::string& prefix = config_.log_collector_config().filename_prefix();
  std::unique_ptr<data::formats::RecordWriter> file;
  int64_t file_bytes = 0;
  int file_index = 0;
  int64_t retry_at_ns = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() && stopping_) break;
    std::deque<std::string> batch;
    batch.swap(queue_);
    lock.unlock();

    // `pending`: records written to the current file in this batch but not yet flushed or
    // closed; they count as written only once that succeeds (buffered writes fail late).
    size_t written = 0, failed = 0, pending = 0;
    auto finish_file = [&](bool close) {
      const absl::Status done = close ? file->Close() : file->Flush();
      (done.ok() ? written : failed) += pending;
      pending = 0;
      if (!done.ok()) retry_at_ns = NowNanos() + kRetryAfterErrorNs;
      if (close || !done.ok()) file.reset();
    };
    for (std::string& record : batch) {
      const int64_t size = static_cast<int64_t>(record.size()) + kRecordFraming;
      if (file != nullptr && file_bytes > 0 && file_bytes + size > options_.max_file_bytes) {
        finish_file(/*close=*/true);
      }
      if (file == nullptr) {
        if (NowNanos() < retry_at_ns) {
          ++failed;
          continue;
        }
        const std::string path = absl::StrCat(prefix, "-", static_cast<int64_t>(getpid()), "-",
                                              file_index++, ".tfrecord");
        auto opened = data::formats::RecordWriter::Open(path, data::formats::Compression::kNone);
        if (!opened.ok()) {
          retry_at_ns = NowNanos() + kRetryAfterErrorNs;
          ++failed;
          continue;
        }
        file = *std::move(opened);
        file_bytes = 0;
      }
      if (file->Write(record).ok()) {
        ++pending;
        file_bytes += size;
      } else {
        failed += pending + 1;
        pending = 0;
        file.reset();
        retry_at_ns = NowNanos() + kRetryAfterErrorNs;
      }
    }
    // Flushed after every batch, so that a record is in the file within moments of its
    // request, and a failing disk shows here.
    if (file != nullptr && pending > 0) finish_file(/*close=*/false);
    Count("written", written);
    Count("dropped_write_error", failed);

    lock.lock();
    done_total_ += batch.size();
    drained_.notify_all();
  }
  lock.unlock();
  if (file != nullptr) file->Close().IgnoreError();  // every record was flushed already
}

absl::Status RequestLoggers::Configure(const tensorflow::serving::ModelServerConfig& config) {
  std::map<std::string, const LoggingConfig*> wanted;
  for (const auto& model : config.model_config_list().config()) {
    if (model.has_logging_config()) wanted[model.name()] = &model.logging_config();
  }
  std::map<std::string, std::shared_ptr<RequestLogger>> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, logging] : wanted) {
      auto found = loggers_.find(name);
      if (found != loggers_.end() &&
          google::protobuf::util::MessageDifferencer::Equals(found->second->config(), *logging)) {
        next[name] = found->second;
      }
    }
  }
  for (const auto& [name, logging] : wanted) {
    if (next.count(name) > 0) continue;
    auto created = RequestLogger::Create(name, *logging, options_, metrics_);
    if (!created.ok()) return created.status();
    next[name] = std::move(*created);
  }
  std::map<std::string, std::shared_ptr<RequestLogger>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired.swap(loggers_);
    loggers_ = std::move(next);
  }
  // `retired` is freed here, outside the lock: a logger no longer wanted writes what it has
  // queued and closes its file (or later, once the last request using it lets it go).
  return absl::OkStatus();
}

std::shared_ptr<RequestLogger> RequestLoggers::SampledLogger(const std::string& model) {
  std::shared_ptr<RequestLogger> logger;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto found = loggers_.find(model);
    if (found == loggers_.end()) return nullptr;
    logger = found->second;
  }
  return logger->Sample() ? logger : nullptr;
}

}  // namespace kiln::serving
