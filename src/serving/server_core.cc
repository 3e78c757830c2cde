// Why one file of ~1,100 lines: ServerCore's config reload, file-system polling, (re)loading
// with retries, unloading and lookup all read and write the same ModelEntry table under one
// mutex, and TF Serving's version rules (aspired versions, labels, per-model batching, the
// metadata-only signatures) are the helpers they share. Split by concern, each part would
// need that private state exposed in a header.
#include "kiln/serving/server_core.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/wire_format_lite.h"
#include "google/protobuf/text_format.h"
#include "kiln/core/clock.h"
#include "kiln/core/status.h"
#include "kiln/serving/deadline.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/tensor_proto.h"
#include "kiln/serving/warmup_calibration.h"
#include "tensorflow/core/protobuf/saved_model.pb.h"

namespace kiln::serving {

namespace fs = std::filesystem;
using tensorflow::serving::ModelConfig;
using tensorflow::serving::ModelServerConfig;
using tensorflow::serving::ModelVersionStatus;

std::string StatusCodeName(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return "OK";
    case absl::StatusCode::kCancelled:
      return "CANCELLED";
    case absl::StatusCode::kUnknown:
      return "UNKNOWN";
    case absl::StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case absl::StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case absl::StatusCode::kNotFound:
      return "NOT_FOUND";
    case absl::StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case absl::StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case absl::StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case absl::StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case absl::StatusCode::kAborted:
      return "ABORTED";
    case absl::StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case absl::StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case absl::StatusCode::kInternal:
      return "INTERNAL";
    case absl::StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case absl::StatusCode::kDataLoss:
      return "DATA_LOSS";
    case absl::StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    default:
      break;
  }
  return "UNKNOWN";
}

std::string ModelSpecRef::DebugString() const {
  if (version.has_value()) return absl::StrCat("Specific(", name, ", ", *version, ")");
  if (!label.empty()) return absl::StrCat("Label(", name, ", ", label, ")");
  return absl::StrCat("Latest(", name, ")");
}

ServableVersion::ServableVersion(std::string name, int64_t version,
                                 std::shared_ptr<runtime::Model> model,
                                 std::optional<BatchingOptions> batching, ServingMetrics* metrics,
                                 bool check_signature_method_name,
                                 std::map<std::string, runtime::SignatureInfo> metadata_only_signatures)
    : name_(std::move(name)),
      version_(version),
      model_(std::move(model)),
      batching_(std::move(batching)),
      metrics_(metrics),
      check_signature_method_name_(check_signature_method_name),
      metadata_only_signatures_(std::move(metadata_only_signatures)) {}

namespace {

// Parses a text-format proto; when it is not one, false with the parser's errors in `errors`
// ("line:column: message", 1-based, "; " between them).
bool ParseTextProto(const std::string& text, google::protobuf::Message* proto,
                    std::string* errors) {
  google::protobuf::TextFormat::Parser parser;
  struct Collector : google::protobuf::io::ErrorCollector {
    std::string* errors;
    void AddError(int line, int column, const std::string& message) override {
      absl::StrAppend(errors, errors->empty() ? "" : "; ", line + 1, ":", column + 1, ": ",
                      message);
    }
  } collector;
  collector.errors = errors;
  parser.RecordErrorsTo(&collector);
  return parser.ParseFromString(text, proto);
}

// Runs the model and records the time spent in the runtime (TF Serving's runtime_latency).
absl::StatusOr<std::map<std::string, Tensor>> TimedRun(const runtime::Model& model,
                                                       const std::string& signature,
                                                       const std::map<std::string, Tensor>& inputs,
                                                       ServingMetrics* metrics,
                                                       const std::string& model_name,
                                                       const std::string& api) {
  const int64_t start_ns = NowNanos();
  auto outputs = model.Run(signature, inputs);
  if (metrics != nullptr) {
    metrics->runtime_latency.Observe({model_name, api, "kiln"}, (NowNanos() - start_ns) / 1e3);
  }
  return outputs;
}

}  // namespace

absl::StatusOr<std::map<std::string, Tensor>> ServableVersion::Run(
    const std::string& signature, std::map<std::string, Tensor> inputs,
    const std::string& api) const {
  // A request whose deadline already passed (it waited for a gRPC thread, or decoding took
  // it) is not run: its client has stopped waiting (deadline.h).
  if (absl::Status expired = CheckRequestDeadline("before the model ran"); !expired.ok()) {
    return expired;
  }
  if (!batching_.has_value()) return TimedRun(*model_, signature, inputs, metrics_, name_, api);
  Batcher* batcher;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = batchers_[{signature, api}];
    if (slot == nullptr) {
      std::shared_ptr<runtime::Model> model = model_;
      slot = std::make_unique<Batcher>(
          *batching_,
          [model, signature, metrics = metrics_, name = name_,
           api](const Batcher::TensorMap& batch) {
            return TimedRun(*model, signature, batch, metrics, name, api);
          },
          name_, metrics_);
    }
    batcher = slot.get();
  }
  return batcher->Run(std::move(inputs));
}

std::vector<ServableVersion::BatchQueue> ServableVersion::BatchQueues() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<BatchQueue> out;
  for (const auto& [key, batcher] : batchers_) {
    out.push_back({key.first, key.second, batcher->Depth()});
  }
  return out;
}

absl::StatusOr<ModelServerConfig> ReadModelServerConfig(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read model config file ", path));
  std::stringstream text;
  text << file.rdbuf();
  ModelServerConfig config;
  std::string errors;
  if (!ParseTextProto(text.str(), &config, &errors)) {
    // TF Serving's words: scripts and TF Serving's own tests look for them.
    return absl::InvalidArgumentError(
        absl::StrCat("Error parsing text-format tensorflow.serving.ModelServerConfig: ", errors,
                     " (model config file ", path, ")"));
  }
  return config;
}

ModelServerConfig SingleModelConfig(const std::string& name, const std::string& base_path) {
  ModelServerConfig config;
  ModelConfig* model = config.mutable_model_config_list()->add_config();
  model->set_name(name);
  // --model_base_path may be relative to the working directory (config lists may not, as in
  // TF Serving): resolved here, once, so that a later chdir cannot change what is served.
  std::error_code error;
  const fs::path absolute = fs::absolute(base_path, error);
  model->set_base_path(error || base_path.empty() ? base_path : absolute.string());
  model->set_model_platform("tensorflow");
  return config;
}

namespace {

absl::Status ValidateConfig(const ModelServerConfig& config) {
  if (config.has_custom_model_config()) {
    return absl::InvalidArgumentError(
        "custom_model_config is not supported; use model_config_list");
  }
  std::set<std::string> names;
  for (const ModelConfig& model : config.model_config_list().config()) {
    if (model.name().empty()) return absl::InvalidArgumentError("a model config has no name");
    if (!names.insert(model.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Illegal to list model ", model.name(), " multiple times in config list"));
    }
    if (model.base_path().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", model.name(), " has an empty base_path"));
    }
    // TF Serving's check and words: a relative path would depend on the server's working
    // directory.
    if (model.base_path()[0] != '/' && !absl::StrContains(model.base_path(), "://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expected model ", model.name(),
                       " to have an absolute path or URI; got base_path()=", model.base_path()));
    }
    const std::string& platform = model.model_platform();
    if (!platform.empty() && platform != "tensorflow" && platform != "onnx") {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", model.name(), ": model_platform \"", platform,
                       "\" is not supported (\"tensorflow\" or \"onnx\")"));
    }
  }
  return absl::OkStatus();
}

// Numeric folders under the base path. Others (temporary export folders) are ignored, as TF
// Serving does.
absl::StatusOr<std::vector<int64_t>> ListVersions(const std::string& base_path) {
  std::error_code error;
  if (!fs::is_directory(base_path, error)) {
    return absl::NotFoundError(absl::StrCat("File system source path does not exist: ", base_path));
  }
  std::vector<int64_t> versions;
  for (const auto& entry : fs::directory_iterator(base_path, error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 18 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) {
      continue;
    }
    if (!entry.is_directory(error)) continue;
    versions.push_back(std::stoll(name));
  }
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot list ", base_path, ": ", error.message()));
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::set<int64_t> AspiredVersions(const ModelConfig& config, const std::vector<int64_t>& present) {
  std::set<int64_t> aspired;
  const auto& policy = config.model_version_policy();
  if (policy.has_all()) {
    aspired.insert(present.begin(), present.end());
  } else if (policy.has_specific()) {
    for (int64_t v : policy.specific().versions()) {
      if (std::binary_search(present.begin(), present.end(), v)) aspired.insert(v);
    }
  } else {
    const size_t n = policy.has_latest() && policy.latest().num_versions() > 0
                         ? policy.latest().num_versions()
                         : 1;
    for (size_t i = 0; i < n && i < present.size(); ++i) {
      aspired.insert(present[present.size() - 1 - i]);
    }
  }
  return aspired;
}

// Reads the SignatureDefs of `dir`'s SavedModel whose keys start with "__" (TF2's
// __saved_model_init_op), from the MetaGraph with tag set `tags` (comma-separated). The runtime
// does not import them (no request can run them), but TF Serving's GetModelMetadata lists
// every SignatureDef, and clients compare that list. The binary form is scanned field by field
// so that the graph and its constants are skipped, not parsed a second time.
std::map<std::string, runtime::SignatureInfo> MetadataOnlySignatures(const std::string& dir,
                                                                     const std::string& tags) {
  using google::protobuf::internal::WireFormatLite;
  std::vector<std::string> wanted_tags = absl::StrSplit(tags, ',', absl::SkipWhitespace());
  for (auto& tag : wanted_tags) tag = std::string(absl::StripAsciiWhitespace(tag));
  std::sort(wanted_tags.begin(), wanted_tags.end());
  wanted_tags.erase(std::unique(wanted_tags.begin(), wanted_tags.end()), wanted_tags.end());

  std::vector<std::pair<std::vector<std::string>, std::map<std::string, tensorflow::SignatureDef>>>
      meta_graphs;
  std::error_code error;
  if (fs::exists(fs::path(dir) / "saved_model.pb", error)) {
    std::ifstream file(fs::path(dir) / "saved_model.pb", std::ios::binary);
    if (!file) return {};
    google::protobuf::io::IstreamInputStream stream(&file);
    google::protobuf::io::CodedInputStream in(&stream);
    in.SetTotalBytesLimit(INT32_MAX);
    auto read_message = [&in](auto&& parse_fields) {
      uint32_t length;
      if (!in.ReadVarint32(&length)) return false;
      const auto limit = in.PushLimit(static_cast<int>(length));
      const bool ok = parse_fields();
      in.PopLimit(limit);
      return ok;
    };
    while (uint32_t tag = in.ReadTag()) {
      if (tag != WireFormatLite::MakeTag(2, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
        if (!WireFormatLite::SkipField(&in, tag)) return {};
        continue;
      }
      auto& meta = meta_graphs.emplace_back();
      const bool ok = read_message([&] {  // MetaGraphDef
        while (uint32_t field = in.ReadTag()) {
          if (field == WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
            if (!read_message([&] {  // MetaInfoDef
                  while (uint32_t info = in.ReadTag()) {
                    if (info ==
                        WireFormatLite::MakeTag(4, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
                      if (!WireFormatLite::ReadString(&in, &meta.first.emplace_back())) {
                        return false;
                      }
                    } else if (!WireFormatLite::SkipField(&in, info)) {
                      return false;
                    }
                  }
                  return true;
                })) {
              return false;
            }
          } else if (field ==
                     WireFormatLite::MakeTag(5, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
            std::string key, value;
            if (!read_message([&] {  // map entry: key = 1, value = 2
                  while (uint32_t entry = in.ReadTag()) {
                    const int number = WireFormatLite::GetTagFieldNumber(entry);
                    if (number == 1 || number == 2) {
                      if (!WireFormatLite::ReadString(&in, number == 1 ? &key : &value)) {
                        return false;
                      }
                    } else if (!WireFormatLite::SkipField(&in, entry)) {
                      return false;
                    }
                  }
                  return true;
                })) {
              return false;
            }
            if (absl::StartsWith(key, "__") && !meta.second[key].ParseFromString(value)) {
              return false;
            }
          } else if (!WireFormatLite::SkipField(&in, field)) {
            return false;
          }
        }
        return true;
      });
      if (!ok) return {};
    }
  } else if (fs::exists(fs::path(dir) / "saved_model.pbtxt", error)) {
    std::ifstream file(fs::path(dir) / "saved_model.pbtxt");
    std::stringstream text;
    text << file.rdbuf();
    tensorflow::SavedModel saved_model;
    google::protobuf::TextFormat::Parser parser;
    parser.AllowUnknownField(true);
    if (!parser.ParseFromString(text.str(), &saved_model)) return {};
    for (const auto& graph : saved_model.meta_graphs()) {
      auto& meta = meta_graphs.emplace_back();
      meta.first.assign(graph.meta_info_def().tags().begin(), graph.meta_info_def().tags().end());
      for (const auto& [key, signature] : graph.signature_def()) {
        if (absl::StartsWith(key, "__")) meta.second[key] = signature;
      }
    }
  }

  for (auto& [have, signatures] : meta_graphs) {
    std::sort(have.begin(), have.end());
    have.erase(std::unique(have.begin(), have.end()), have.end());
    if (have != wanted_tags) continue;
    std::map<std::string, runtime::SignatureInfo> result;
    for (const auto& [key, def] : signatures) {
      runtime::SignatureInfo& info = result[key];
      info.key = key;
      info.method_name = def.method_name();
      for (const auto* side : {&def.inputs(), &def.outputs()}) {
        auto& out = side == &def.inputs() ? info.inputs : info.outputs;
        auto& keys = side == &def.inputs() ? info.input_keys : info.output_keys;
        for (const auto& [name, tensor] : *side) {
          runtime::TensorInfo& t = out[name];
          t.name = tensor.name();
          t.dtype = DTypeFromProto(tensor.dtype()).value_or(DType::kInvalid);
          t.rank_known = tensor.has_tensor_shape() && !tensor.tensor_shape().unknown_rank();
          for (const auto& dim : tensor.tensor_shape().dim()) t.shape.push_back(dim.size());
          keys.push_back(name);
        }
      }
    }
    return result;
  }
  return {};
}

// The file or folder Model::Load gets for a version folder.
std::string ModelPathInVersion(const ModelConfig& config, const std::string& dir) {
  std::error_code error;
  if (fs::exists(fs::path(dir) / "saved_model.pb", error) ||
      fs::exists(fs::path(dir) / "saved_model.pbtxt", error)) {
    return dir;
  }
  std::vector<std::string> onnx_files;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".onnx") onnx_files.push_back(entry.path().string());
  }
  std::sort(onnx_files.begin(), onnx_files.end());
  if (!onnx_files.empty()) {
    for (const auto& file : onnx_files) {
      if (fs::path(file).filename() == "model.onnx") return file;
    }
    return onnx_files[0];
  }
  return dir;
}

// The folder of `version` under the base path; version folders may be zero-padded
// ("00000123").
std::string VersionDir(const ModelConfig& config, int64_t version) {
  const std::string dir = (fs::path(config.base_path()) / std::to_string(version)).string();
  std::error_code error;
  if (fs::is_directory(dir, error)) return dir;
  for (const auto& entry : fs::directory_iterator(config.base_path(), error)) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() &&
        std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); }) &&
        name.size() <= 18 && std::stoll(name) == version) {
      return entry.path().string();
    }
  }
  return dir;
}

// Runs fn(0) ... fn(count - 1) on up to `threads` threads (0 or 1: here, in order).
void RunParallel(int threads, size_t count, const std::function<void(size_t)>& fn) {
  if (threads <= 1 || count <= 1) {
    for (size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads && static_cast<size_t>(t) < count; ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < count; i = next++) fn(i);
    });
  }
  for (std::thread& worker : workers) worker.join();
}

// TF Serving's --flush_filesystem_caches asks its file systems to drop their caches once the
// models are in memory. For local files that cache is the kernel's page cache: Kiln reads
// model files into its own buffers (no mapping), so their cached pages are a second copy.
void FlushFileCaches(const std::string& dir) {
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(dir, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (!it->is_regular_file(error)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// TF Serving's per-model batching (bundle_factory_util.cc GetPerModelBatchingParams): the
// version folder's batching_params.pbtxt, or no batching when it has none.
absl::StatusOr<std::optional<BatchingOptions>> PerModelBatching(const std::string& version_dir,
                                                                const BatchingOptions& global) {
  const fs::path file = fs::path(version_dir) / "batching_params.pbtxt";
  std::error_code error;
  if (!fs::exists(file, error)) return std::optional<BatchingOptions>();
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", file.string()));
  tensorflow::serving::BatchingParameters params;
  std::string errors;
  if (!ParseTextProto(text.str(), &params, &errors)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.string(), " is not a valid BatchingParameters text proto: ", errors));
  }
  auto options = BatchingOptionsFromProto(params);
  if (!options.ok()) return Annotate(options.status(), file.string());
  // The batch threads are shared by every model in TF Serving: they come from the global
  // parameters, not from the model's file.
  options->num_batch_threads = global.num_batch_threads;
  return std::optional<BatchingOptions>(*options);
}

// A version folder with only a TensorFlow Lite model: say what is missing instead of the
// SavedModel importer's "no saved_model.pb".
absl::Status CheckNotTfliteOnly(const std::string& version_dir) {
  std::error_code error;
  const fs::path dir(version_dir);
  if (!fs::exists(dir / "model.tflite", error) || fs::exists(dir / "saved_model.pb", error) ||
      fs::exists(dir / "saved_model.pbtxt", error)) {
    return absl::OkStatus();
  }
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".onnx") return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat((dir / "model.tflite").string(),
                   ": Kiln cannot run TensorFlow Lite models (--prefer_tflite_model); serve the "
                   "SavedModel or an ONNX export of it"));
}

}  // namespace

ServerCore::ServerCore(ServerCoreOptions options) : options_(std::move(options)) {
  for (int i = 0; i < options_.num_unload_threads; ++i) {
    unload_threads_.emplace_back([this] { UnloadLoop(); });
  }
}

ServerCore::~ServerCore() {
  Stop();
  {
    std::lock_guard<std::mutex> lock(unload_mu_);
    unload_stopping_ = true;
  }
  unload_cv_.notify_all();
  for (std::thread& thread : unload_threads_) thread.join();
}

void ServerCore::UnloadLoop() {
  std::unique_lock<std::mutex> lock(unload_mu_);
  while (true) {
    if (unload_queue_.empty()) {
      if (unload_stopping_) return;
      unload_cv_.wait(lock);
      continue;
    }
    std::shared_ptr<const ServableVersion> version = std::move(unload_queue_.back());
    unload_queue_.pop_back();
    lock.unlock();
    version.reset();  // the model's memory is freed here (unless a request still holds it)
    lock.lock();
  }
}

void ServerCore::Release(std::vector<std::shared_ptr<const ServableVersion>> retired) {
  if (retired.empty()) return;
  if (unload_threads_.empty()) return;  // dropped here, as `retired` goes out of scope
  {
    std::lock_guard<std::mutex> lock(unload_mu_);
    for (auto& version : retired) unload_queue_.push_back(std::move(version));
  }
  unload_cv_.notify_all();
}

absl::StatusOr<std::shared_ptr<const ServableVersion>> ServerCore::LoadVersionWithRetries(
    const ModelConfig& config, int64_t version) {
  for (int attempt = 0;; ++attempt) {
    auto loaded = LoadVersion(config, version);
    if (loaded.ok() || attempt >= options_.max_num_load_retries) return loaded;
    std::fprintf(stderr,
                 "kiln serve: model %s version %lld failed to load (attempt %d of %d), retrying "
                 "in %lld us: %s\n",
                 config.name().c_str(), static_cast<long long>(version), attempt + 1,
                 options_.max_num_load_retries + 1,
                 static_cast<long long>(std::max<int64_t>(0, options_.load_retry_interval_micros)),
                 std::string(loaded.status().message()).c_str());
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (options_.load_retry_interval_micros > 0) {
      stop_cv_.wait_for(lock, std::chrono::microseconds(options_.load_retry_interval_micros),
                        [this] { return stopping_; });
    }
    if (stopping_) return loaded;
  }
}

absl::StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(ServerCoreOptions options,
                                                               const ModelServerConfig& config) {
  if (!options.loader) {
    options.loader = [](const std::string& path, const runtime::ModelOptions& model_options)
        -> absl::StatusOr<std::shared_ptr<runtime::Model>> {
#ifdef KILN_SERVING_HAVE_RUNTIME
      return runtime::Model::Load(path, model_options);
#else
      return absl::UnimplementedError(
          absl::StrCat("cannot load ", path, ": this build has no model runtime"));
#endif
    };
  }
  std::unique_ptr<ServerCore> core(new ServerCore(std::move(options)));
  KILN_RETURN_IF_ERROR(core->ReloadConfig(config));
  if (core->options_.file_system_poll_wait_seconds > 0) {
    core->poll_thread_ = std::thread([raw = core.get()] { raw->PollLoop(); });
  }
  return core;
}

void ServerCore::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (poll_thread_.joinable()) poll_thread_.join();
}

void ServerCore::PollLoop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, std::chrono::seconds(options_.file_system_poll_wait_seconds));
    if (stopping_) break;
    lock.unlock();
    PollNow();
    lock.lock();
  }
}

absl::Status ServerCore::ReloadConfig(const ModelServerConfig& config) {
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  if (config.config_case() == ModelServerConfig::CONFIG_NOT_SET) {
    // As TF Serving: an empty first config loads nothing; an empty one later would unload
    // every model by accident (a client that sent a default-constructed request), so it is
    // refused and nothing changes.
    if (!has_config_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "Cannot transition to requested config. It is only legal to transition from one "
        "ModelConfigList to another.");
  }
  KILN_RETURN_IF_ERROR(ValidateConfig(config));

  // What each model serves now: its config and which versions serve from which path.
  struct Current {
    ModelConfig config;
    std::map<int64_t, std::string> serving;  // version -> the base path it was loaded from
    std::set<int64_t> failed;  // failed to load from the current base path: not retried
  };
  std::map<std::string, Current> current;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, entry] : models_) {
      Current& c = current[name];
      c.config = entry.config;
      for (const auto& [v, version] : entry.versions) {
        if (version.servable != nullptr) c.serving[v] = version.source_path;
        if (version.servable == nullptr && !version.status.status.ok() &&
            version.source_path == entry.config.base_path()) {
          c.failed.insert(v);
        }
      }
    }
  }

  // 1. Validate against the current state; plan which versions to load.
  struct Plan {
    const ModelConfig* config;
    bool listed = false;  // the base path could be listed
    std::vector<int64_t> present;
    std::set<int64_t> aspired;
    std::vector<int64_t> to_load;
    std::map<int64_t, std::shared_ptr<const ServableVersion>> loaded;
  };
  std::vector<Plan> plans;
  for (const ModelConfig& model : config.model_config_list().config()) {
    auto it = current.find(model.name());
    if (it != current.end()) {
      const std::string& was = it->second.config.model_platform();
      if (!was.empty() && !model.model_platform().empty() && was != model.model_platform()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Illegal to change a model's platform. For model ", model.name(), " platform was ",
            was, " and new platform requested is ", model.model_platform()));
      }
    }
    Plan& plan = plans.emplace_back();
    plan.config = &model;
    auto present = ListVersions(model.base_path());
    std::set<int64_t> available_after;
    if (present.ok()) {
      plan.listed = true;
      plan.present = *std::move(present);
      plan.aspired = AspiredVersions(model, plan.present);
      const bool same_path =
          it != current.end() && it->second.config.base_path() == model.base_path();
      bool skipped_failed = false;
      for (int64_t v : plan.aspired) {
        // A version that already failed here is not retried (as the poll does not retry it):
        // a known bad export of one model does not block changes to the others.
        if (same_path && it->second.failed.count(v)) {
          skipped_failed = true;
          continue;
        }
        available_after.insert(v);
        const bool serving_from_here =
            it != current.end() && it->second.serving.count(v) &&
            it->second.serving.at(v) == model.base_path();
        if (!serving_from_here) plan.to_load.push_back(v);
      }
      if (skipped_failed) {  // the versions standing in for it keep serving
        for (const auto& [v, path] : it->second.serving) available_after.insert(v);
      }
    } else {
      // Nothing to load from there yet; what serves now keeps serving (TF Serving does the
      // same), and the poll loads versions once they appear.
      std::fprintf(stderr, "kiln serve: model %s: %s\n", model.name().c_str(),
                   std::string(present.status().message()).c_str());
      if (it != current.end()) {
        for (const auto& [v, path] : it->second.serving) available_after.insert(v);
      }
    }
    // 2. Labels must point at versions that will be available, unless allowed otherwise.
    if (!options_.allow_version_labels_for_unavailable_models) {
      for (const auto& [label, version] : model.version_labels()) {
        if (available_after.count(version) == 0) {
          return absl::FailedPreconditionError(
              absl::StrCat("Request to assign label to version ", version, " of model ",
                           model.name(), ", which is not currently available for inference"));
        }
      }
    }
  }

  // 3. Load every new version while the current ones keep serving (num_load_threads at a
  // time). A failure drops what was loaded: the request changes nothing.
  struct Job {
    Plan* plan;
    int64_t version;
    absl::StatusOr<std::shared_ptr<const ServableVersion>> result;
  };
  std::vector<Job> jobs;
  for (Plan& plan : plans) {
    for (int64_t version : plan.to_load) {
      jobs.push_back({&plan, version, absl::UnknownError("not loaded")});
    }
  }
  RunParallel(options_.num_load_threads, jobs.size(), [&](size_t i) {
    jobs[i].result = LoadVersionWithRetries(*jobs[i].plan->config, jobs[i].version);
  });
  for (Job& job : jobs) {
    if (!job.result.ok()) {
      std::fprintf(stderr, "kiln serve: model %s version %lld failed to load: %s\n",
                   job.plan->config->name().c_str(), static_cast<long long>(job.version),
                   std::string(job.result.status().message()).c_str());
      return Annotate(job.result.status(),
                      absl::StrCat("model ", job.plan->config->name(), " version ", job.version,
                                   " (the config was not applied)"));
    }
  }
  for (Job& job : jobs) job.plan->loaded[job.version] = *std::move(job.result);
  if (options_.flush_filesystem_caches) {
    for (const Job& job : jobs) FlushFileCaches(VersionDir(*job.plan->config, job.version));
  }

  // 4. Swap in the new configs and versions; unload what is no longer wanted (released after
  // mu_ is let go, so that freeing a model never holds up a request's lookup).
  std::vector<std::shared_ptr<const ServableVersion>> retired;
  std::unique_lock<std::mutex> lock(mu_);
  std::set<std::string> wanted;
  for (Plan& plan : plans) {
    const std::string& name = plan.config->name();
    wanted.insert(name);
    ModelEntry& entry = models_[name];
    entry.config = *plan.config;
    entry.last_listing_error.clear();
    for (auto& [version, servable] : plan.loaded) {
      VersionEntry& v = entry.versions[version];
      v.servable = std::move(servable);
      v.source_path = plan.config->base_path();
      v.status.version = version;
      v.status.state = ModelVersionStatus::AVAILABLE;
      v.status.status = absl::OkStatus();
      std::fprintf(stderr, "kiln serve: model %s version %lld is available\n", name.c_str(),
                   static_cast<long long>(version));
    }
    if (plan.listed) {
      size_t deficit = 0;
      for (int64_t version : plan.aspired) {
        auto v = entry.versions.find(version);
        if (v == entry.versions.end() || v->second.servable == nullptr) ++deficit;
      }
      RetireVersions(name, entry, plan.aspired, plan.present, deficit, &retired);
    }
  }
  for (auto it = models_.begin(); it != models_.end();) {
    if (wanted.count(it->first) == 0) {
      for (auto& [version, v] : it->second.versions) {
        if (v.servable != nullptr) retired.push_back(std::move(v.servable));
      }
      it = models_.erase(it);  // in-flight requests keep their versions alive
    } else {
      ++it;
    }
  }
  has_config_ = true;
  lock.unlock();
  Release(std::move(retired));
  return absl::OkStatus();
}

void ServerCore::PollNow() {
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  PollModels(ModelNames()).IgnoreError();
}

absl::Status ServerCore::PollModels(const std::vector<std::string>& names) {
  std::mutex error_mu;
  absl::Status first_error;
  // With num_load_threads > 1, models are polled (and their versions loaded) side by side.
  RunParallel(options_.num_load_threads, names.size(), [&](size_t i) {
    absl::Status status = PollModel(names[i]);
    std::lock_guard<std::mutex> lock(error_mu);
    if (first_error.ok()) first_error = status;
  });
  return first_error;
}

absl::Status ServerCore::PollModel(const std::string& name) {
  absl::Status first_error;
  std::vector<std::shared_ptr<const ServableVersion>> retired;
  {
    ModelConfig config;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = models_.find(name);
      if (it == models_.end()) return absl::OkStatus();
      config = it->second.config;
    }
    auto present = ListVersions(config.base_path());
    if (!present.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = models_.find(name);
      if (it != models_.end() && it->second.last_listing_error != present.status().message()) {
        it->second.last_listing_error = std::string(present.status().message());
        std::fprintf(stderr, "kiln serve: model %s: %s\n", name.c_str(),
                     it->second.last_listing_error.c_str());
      }
      return absl::OkStatus();
    }
    const std::set<int64_t> aspired = AspiredVersions(config, *present);
    // Load first: the versions being replaced keep serving until the new ones are ready.
    for (int64_t version : aspired) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = models_.find(name);
        if (it == models_.end()) break;
        it->second.last_listing_error.clear();
        auto v = it->second.versions.find(version);
        // A version that failed is not retried until its folder is replaced (it disappears
        // from the listing and comes back). One serving from an old base path is replaced.
        if (v != it->second.versions.end() &&
            ((v->second.servable != nullptr && v->second.source_path == config.base_path()) ||
             !v->second.status.status.ok())) {
          continue;
        }
        VersionEntry& entry = it->second.versions[version];
        entry.status.version = version;
        if (entry.servable == nullptr) entry.status.state = ModelVersionStatus::LOADING;
        entry.status.status = absl::OkStatus();
      }
      auto loaded = LoadVersionWithRetries(config, version);
      std::lock_guard<std::mutex> lock(mu_);
      auto it = models_.find(name);
      if (it == models_.end()) break;
      VersionEntry& entry = it->second.versions[version];
      if (loaded.ok()) {
        entry.servable = *loaded;
        entry.source_path = config.base_path();
        entry.status.state = ModelVersionStatus::AVAILABLE;
        std::fprintf(stderr, "kiln serve: model %s version %lld is available\n", name.c_str(),
                     static_cast<long long>(version));
        // TF Serving flushes after each later load only when loads are not parallel (a
        // parallel load may still be reading its files).
        if (options_.flush_filesystem_caches && options_.num_load_threads <= 1) {
          FlushFileCaches(VersionDir(config, version));
        }
      } else {
        // A version of the same number from an old base path keeps serving.
        if (entry.servable == nullptr) {
          entry.status.state = ModelVersionStatus::END;
          entry.source_path = config.base_path();
        }
        entry.status.status = loaded.status();
        std::fprintf(stderr, "kiln serve: model %s version %lld failed to load: %s\n", name.c_str(),
                     static_cast<long long>(version),
                     std::string(loaded.status().message()).c_str());
        if (first_error.ok()) first_error = loaded.status();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) return first_error;
    // An aspired version that failed to load is replaced by the newest versions already
    // serving, so a bad export never takes a model down.
    size_t deficit = 0;
    for (int64_t version : aspired) {
      auto v = it->second.versions.find(version);
      if (v == it->second.versions.end() || v->second.servable == nullptr) ++deficit;
    }
    RetireVersions(name, it->second, aspired, *present, deficit, &retired);
  }
  Release(std::move(retired));
  return first_error;
}

void ServerCore::RetireVersions(const std::string& name, ModelEntry& entry,
                                const std::set<int64_t>& aspired,
                                const std::vector<int64_t>& present, size_t deficit,
                                std::vector<std::shared_ptr<const ServableVersion>>* retired) {
  auto listed = [&](int64_t version) {
    return std::binary_search(present.begin(), present.end(), version);
  };
  // Stand-ins: the newest versions serving from a folder that is still there, or from the
  // model's previous base path.
  std::set<int64_t> keep;
  for (auto v = entry.versions.rbegin(); v != entry.versions.rend() && deficit > 0; ++v) {
    if (!aspired.count(v->first) && v->second.servable != nullptr &&
        (v->second.source_path != entry.config.base_path() || listed(v->first))) {
      keep.insert(v->first);
      --deficit;
    }
  }
  for (auto& [version, v] : entry.versions) {
    if (!aspired.count(version) && !keep.count(version) && v.servable != nullptr) {
      retired->push_back(std::move(v.servable));
      v.servable.reset();
      v.status.state = ModelVersionStatus::END;
      std::fprintf(stderr, "kiln serve: model %s version %lld unloaded\n", name.c_str(),
                   static_cast<long long>(version));
    }
    // A failed version whose folder went away may be retried when it reappears.
    if (!listed(version) && !v.status.status.ok()) v.status.status = absl::OkStatus();
  }
}

absl::StatusOr<std::shared_ptr<const ServableVersion>> ServerCore::LoadVersion(
    const ModelConfig& config, int64_t version) {
  const std::string version_dir = VersionDir(config, version);
  std::optional<BatchingOptions> batching = options_.batching;
  if (batching.has_value() && options_.enable_per_model_batching_parameters) {
    KILN_ASSIGN_OR_RETURN(batching, PerModelBatching(version_dir, *options_.batching));
  }
  const std::string path = ModelPathInVersion(config, version_dir);
  KILN_RETURN_IF_ERROR(CheckNotTfliteOnly(version_dir));
  const int64_t start_ns = NowNanos();
  runtime::ModelOptions model_options = options_.model_options;
  if ((model_options.allow_compression || model_options.mixed_precision_bf16) &&
      model_options.calibration_inputs.empty() && model_options.calibration_inputs_dir.empty()) {
    // The version's warmup requests calibrate compression and feed its accuracy guard.
    KILN_ASSIGN_OR_RETURN(model_options.calibration_inputs, WarmupCalibrationInputs(version_dir));
  }
  auto model = options_.loader(path, model_options);
  ServingMetrics* metrics = options_.metrics;
  if (metrics != nullptr) {
    metrics->load_attempt_count.Increment({path, model.ok() ? "success" : "fail"});
  }
  if (!model.ok()) return Annotate(model.status(), absl::StrCat("loading ", path));
  if (metrics != nullptr) metrics->load_latency.Increment({path}, (NowNanos() - start_ns) / 1e3);
  auto servable = std::make_shared<ServableVersion>(
      config.name(), version, *model, batching, metrics,
      options_.enable_signature_method_name_check,
      (*model)->platform() == "tensorflow"
          ? MetadataOnlySignatures(path, options_.model_options.tags)
          : std::map<std::string, runtime::SignatureInfo>{});
  if (options_.allow_precompilation) {
    std::vector<int64_t> batch_sizes = {1};
    if (batching.has_value() && !batching->allowed_batch_sizes.empty()) {
      batch_sizes = batching->allowed_batch_sizes;
    }
    for (const auto& [key, signature] : (*model)->signatures()) {
      for (int64_t batch : batch_sizes) {
        std::map<std::string, Shape> shapes;
        bool known = true;
        for (const auto& [input, info] : signature.inputs) {
          if (!info.rank_known || info.shape.empty()) {
            known = false;
            break;
          }
          Shape shape(info.shape);
          if (shape.dim(0) < 0) shape.set_dim(0, batch);
          for (int d = 1; d < shape.rank(); ++d) known &= shape.dim(d) >= 0;
          shapes[input] = shape;
        }
        if (!known) break;
        KILN_RETURN_IF_ERROR(
            Annotate((*model)->Precompile(key, shapes),
                     absl::StrCat("precompiling signature ", key, " for batch size ", batch)));
      }
    }
  }
  if (options_.enable_model_warmup) {
    const int64_t warmup_start_ns = NowNanos();
    KILN_RETURN_IF_ERROR(Annotate(RunWarmup(*servable, options_.num_warmup_iterations,
                                            (fs::path(version_dir) / "assets.extra").string()),
                                  absl::StrCat("warmup of ", path)));
    if (metrics != nullptr) {
      metrics->model_warmup_latency.Observe({path}, (NowNanos() - warmup_start_ns) / 1e3);
    }
  }
  if (options_.log_loaded_models) {
    // The server's load log: what the importer and the optimizer made of this version.
    std::fprintf(stderr, "kiln serve: model %s version %lld loaded from %s%s\n%s",
                 config.name().c_str(), static_cast<long long>(version), path.c_str(),
                 batching.has_value() && options_.enable_per_model_batching_parameters
                     ? " (batching_params.pbtxt)"
                     : "",
                 (*model)->Inspect().c_str());
  }
  return std::shared_ptr<const ServableVersion>(std::move(servable));
}

absl::StatusOr<std::shared_ptr<const ServableVersion>> ServerCore::Lookup(
    const ModelSpecRef& spec) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(spec.name);
  const absl::Status not_found =
      absl::NotFoundError(absl::StrCat("Servable not found for request: ", spec.DebugString()));
  if (it == models_.end()) return not_found;
  const ModelEntry& entry = it->second;
  if (!spec.label.empty()) {
    auto label = entry.config.version_labels().find(spec.label);
    if (label == entry.config.version_labels().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Unrecognized servable version label: ", spec.label));
    }
    auto v = entry.versions.find(label->second);
    if (v == entry.versions.end() || v->second.servable == nullptr) return not_found;
    return v->second.servable;
  }
  if (spec.version.has_value()) {
    auto v = entry.versions.find(*spec.version);
    if (v == entry.versions.end() || v->second.servable == nullptr) return not_found;
    return v->second.servable;
  }
  for (auto v = entry.versions.rbegin(); v != entry.versions.rend(); ++v) {
    if (v->second.servable != nullptr) return v->second.servable;
  }
  return not_found;
}

absl::StatusOr<int64_t> ServerCore::ResolveLabel(const std::string& name,
                                                 const std::string& label) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("Could not find any versions of model ", name));
  }
  auto found = it->second.config.version_labels().find(label);
  if (found == it->second.config.version_labels().end()) {
    return absl::InvalidArgumentError(absl::StrCat("Unrecognized servable version label: ", label));
  }
  return found->second;
}

absl::StatusOr<std::vector<VersionStatus>> ServerCore::GetStatus(
    const std::string& name, std::optional<int64_t> version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.versions.empty()) {
    return absl::NotFoundError(absl::StrCat("Could not find any versions of model ", name));
  }
  std::vector<VersionStatus> result;
  for (const auto& [v, entry] : it->second.versions) {
    if (version.has_value() && v != *version) continue;
    result.push_back(entry.status);
  }
  if (result.empty()) {
    return absl::NotFoundError(
        absl::StrCat("Could not find version ", *version, " of model ", name));
  }
  return result;
}

std::vector<std::string> ServerCore::ModelNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, entry] : models_) names.push_back(name);
  return names;
}

bool ServerCore::AllModelsAvailable() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, entry] : models_) {
    bool any = false;
    for (const auto& [v, version] : entry.versions) any |= version.servable != nullptr;
    if (!any) return false;
  }
  return true;
}

}  // namespace kiln::serving
