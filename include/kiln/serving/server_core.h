// The servable manager: which models and versions are loaded, polling of their base paths,
// version policies and labels, warmup, and the lookup that every request goes through.
//
// A loaded version is held by a shared_ptr: a request that looked it up keeps it alive, so a
// version being unloaded finishes its in-flight requests. A new version is loaded (and warmed
// up) before the version it replaces is unloaded, so a model never becomes unavailable during
// a version transition; a version that fails to load is reported in the model's status and
// the versions already serving keep serving.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "kiln/runtime/model.h"
#include "kiln/serving/batcher.h"
#include "kiln/serving/metrics.h"
#include "tensorflow_serving/apis/get_model_status.pb.h"
#include "tensorflow_serving/config/model_server_config.pb.h"

namespace kiln::serving {

using ModelLoader = std::function<absl::StatusOr<std::shared_ptr<runtime::Model>>(
    const std::string& path, const runtime::ModelOptions& options)>;

// One loaded version of a model.
// Thread safety: immutable after construction except for its batch queues (created on first
// use under mu_); Run() may be called from any thread at once, and a version stays valid while
// a request holds its shared_ptr, even after it is unloaded.
class ServableVersion {
 public:
  // `metadata_only_signatures`: SignatureDefs that GetModelMetadata lists but that cannot be
  // run (a TF2 SavedModel's __saved_model_init_op), as TF Serving lists them.
  ServableVersion(std::string name, int64_t version, std::shared_ptr<runtime::Model> model,
                  std::optional<BatchingOptions> batching, ServingMetrics* metrics,
                  bool check_signature_method_name = false,
                  std::map<std::string, runtime::SignatureInfo> metadata_only_signatures = {});

  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  const runtime::Model& model() const { return *model_; }
  // --enable_signature_method_name_check: Classify and Regress refuse signatures whose
  // method_name is not theirs (TF Serving's default is not to check).
  bool check_signature_method_name() const { return check_signature_method_name_; }
  // The batching this version runs with (the global parameters, or its own
  // batching_params.pbtxt); nullopt: it does not batch.
  const std::optional<BatchingOptions>& batching() const { return batching_; }
  const std::map<std::string, runtime::SignatureInfo>& metadata_only_signatures() const {
    return metadata_only_signatures_;
  }

  // Runs a signature, through the batcher when batching is on. `api` ("Predict", "Classify",
  // "Regress") labels the runtime_latency metric; each API has its own batch queue.
  absl::StatusOr<std::map<std::string, Tensor>> Run(const std::string& signature,
                                                    std::map<std::string, Tensor> inputs,
                                                    const std::string& api = "Predict") const;

  // The batch queues opened so far (one per signature and API; none without batching).
  struct BatchQueue {
    std::string signature;
    std::string api;
    Batcher::QueueDepth depth;
  };
  std::vector<BatchQueue> BatchQueues() const;

 private:
  const std::string name_;
  const int64_t version_;
  const std::shared_ptr<runtime::Model> model_;
  const std::optional<BatchingOptions> batching_;
  ServingMetrics* const metrics_;
  const bool check_signature_method_name_;
  const std::map<std::string, runtime::SignatureInfo> metadata_only_signatures_;
  mutable std::mutex mu_;
  // By signature and API.
  mutable std::map<std::pair<std::string, std::string>, std::unique_ptr<Batcher>> batchers_
      ABSL_GUARDED_BY(mu_);
};

// What a request names: a model and optionally a version or a label.
struct ModelSpecRef {
  std::string name;
  std::optional<int64_t> version;
  std::string label;  // non-empty: a version label

  // "Latest(name)", "Specific(name, 3)" or "Label(name, stable)" as TF Serving writes them.
  std::string DebugString() const;
};

struct VersionStatus {
  int64_t version = 0;
  tensorflow::serving::ModelVersionStatus::State state =
      tensorflow::serving::ModelVersionStatus::UNKNOWN;
  absl::Status status;
};

struct ServerCoreOptions {
  runtime::ModelOptions model_options;
  ModelLoader loader;  // empty: runtime::Model::Load
  bool enable_model_warmup = true;
  int num_warmup_iterations = 1;
  // <= 0: the base paths are read once (TF Serving: 0 polls once; negative never polls).
  int64_t file_system_poll_wait_seconds = 1;
  std::optional<BatchingOptions> batching;  // set: --enable_batching
  // --enable_per_model_batching_parameters (with batching on): a version batches with the
  // BatchingParameters of batching_params.pbtxt in its version folder (only num_batch_threads
  // comes from `batching`), and a version without that file does not batch, as in TF Serving.
  bool enable_per_model_batching_parameters = false;
  // --max_num_load_retries / --load_retry_interval_micros: a failed load is tried again this
  // many times, this long apart (negative: no wait), before the version counts as failed.
  int max_num_load_retries = 0;
  int64_t load_retry_interval_micros = 0;
  // --num_load_threads / --num_unload_threads: 0 loads (unloads) one version at a time on the
  // thread that applies the config or polls; N loads up to N versions at once (unloads on N
  // background threads, so a large model's release never holds up the poll).
  int num_load_threads = 0;
  int num_unload_threads = 0;
  // --flush_filesystem_caches: once versions are loaded, the page cache of their files is
  // dropped (their bytes now live in the model), after the initial load of all and after each
  // later load when loads are not parallel (num_load_threads <= 1), as TF Serving does.
  bool flush_filesystem_caches = false;
  // Print each loaded version's Model::Inspect() (signatures, optimization log, compression
  // report) to stderr, as a server's load log.
  bool log_loaded_models = false;
  bool allow_precompilation = false;
  bool allow_version_labels_for_unavailable_models = false;
  bool enable_signature_method_name_check = false;
  // --enable_serialization_as_tensor_content: gRPC Predict replies carry each output's bytes in
  // tensor_content (strings stay in string_val) instead of the typed *_val fields.
  bool enable_serialization_as_tensor_content = false;
  ServingMetrics* metrics = nullptr;
};

// Thread safety: Lookup, GetStatus, ResolveLabel, ModelNames and AllModelsAvailable may be
// called from any thread at once (request threads); ReloadConfig and PollNow serialize on
// poll_mu_ (one reload or poll pass at a time) and swap versions under mu_, so a request sees
// either the old or the new set, never a half-applied one.
class ServerCore {
 public:
  // Validates `config`, loads the models it names (waiting until every model's first versions
  // were tried) and starts polling. Fails when the config is invalid or a model's version
  // fails to load at startup (as tensorflow_model_server exits then).
  static absl::StatusOr<std::unique_ptr<ServerCore>> Create(
      ServerCoreOptions options, const tensorflow::serving::ModelServerConfig& config);
  ~ServerCore();

  // Replaces the served models, all of the request or none of it, as TF Serving does:
  //  - the whole config is validated first (names, absolute base paths, no model changing its
  //    platform: INVALID_ARGUMENT; a config with no model list after one that had it:
  //    FAILED_PRECONDITION), then every label is checked against the versions that will be
  //    available (FAILED_PRECONDITION), then every new version is loaded (this waits for
  //    them) while the current ones keep serving; any failure leaves everything as it was;
  //  - only then are the new configs, versions and labels swapped in and the versions no
  //    longer wanted unloaded;
  //  - a base path that does not exist (yet) loads nothing and unloads nothing: the versions
  //    serving keep serving until versions appear there.
  absl::Status ReloadConfig(const tensorflow::serving::ModelServerConfig& config);

  absl::StatusOr<std::shared_ptr<const ServableVersion>> Lookup(const ModelSpecRef& spec) const;
  // The versions of a model (one when `version` is set), ascending.
  absl::StatusOr<std::vector<VersionStatus>> GetStatus(const std::string& name,
                                                       std::optional<int64_t> version) const;
  // Resolves a label to its version.
  absl::StatusOr<int64_t> ResolveLabel(const std::string& name, const std::string& label) const;
  std::vector<std::string> ModelNames() const;
  // True when every configured model has an available version.
  bool AllModelsAvailable() const;

  // One pass over every base path (the poll thread calls this; tests call it directly).
  void PollNow();
  // Stops the poll thread; loaded versions stay until destruction.
  void Stop();

  const ServerCoreOptions& options() const { return options_; }

 private:
  struct VersionEntry {
    VersionStatus status;
    std::shared_ptr<const ServableVersion> servable;
    // The base path `servable` was loaded from: after the model's base_path changes, versions
    // from the old path serve until the new path has versions to replace them.
    std::string source_path;
  };
  struct ModelEntry {
    tensorflow::serving::ModelConfig config;
    std::map<int64_t, VersionEntry> versions;
    std::string last_listing_error;
  };

  explicit ServerCore(ServerCoreOptions options);
  absl::Status ApplyConfig(const tensorflow::serving::ModelServerConfig& config);
  // Loads what each model's policy wants and unloads what it no longer wants; returns the
  // load errors of this pass.
  absl::Status PollModels(const std::vector<std::string>& names);
  absl::Status PollModel(const std::string& name);
  // Unloads the versions of `entry` that are neither aspired nor kept to stand in for an
  // aspired version that failed to load. `present`: the listing of its base path. Needs mu_.
  void RetireVersions(const std::string& name, ModelEntry& entry, const std::set<int64_t>& aspired,
                      const std::vector<int64_t>& present, size_t deficit,
                      std::vector<std::shared_ptr<const ServableVersion>>* retired);
  absl::StatusOr<std::shared_ptr<const ServableVersion>> LoadVersion(
      const tensorflow::serving::ModelConfig& config, int64_t version);
  // LoadVersion, retried as max_num_load_retries says (a retry's wait ends early at Stop()).
  absl::StatusOr<std::shared_ptr<const ServableVersion>> LoadVersionWithRetries(
      const tensorflow::serving::ModelConfig& config, int64_t version);
  // Drops the references to versions no longer served: here, or on the unload threads.
  void Release(std::vector<std::shared_ptr<const ServableVersion>> retired);
  void UnloadLoop();
  void PollLoop();

  const ServerCoreOptions options_;
  mutable std::mutex mu_;  // guards models_
  std::map<std::string, ModelEntry> models_ ABSL_GUARDED_BY(mu_);
  std::mutex poll_mu_;                                 // one poll pass or reload at a time
  bool has_config_ ABSL_GUARDED_BY(poll_mu_) = false;  // a model list was applied
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread poll_thread_;
  // --num_unload_threads > 0: versions to release, and the threads that release them.
  std::mutex unload_mu_;
  std::condition_variable unload_cv_;
  std::vector<std::shared_ptr<const ServableVersion>> unload_queue_ ABSL_GUARDED_BY(unload_mu_);
  bool unload_stopping_ ABSL_GUARDED_BY(unload_mu_) = false;
  std::vector<std::thread> unload_threads_;
};

// Reads a ModelServerConfig text proto file (errors name the file and the parse error).
absl::StatusOr<tensorflow::serving::ModelServerConfig> ReadModelServerConfig(
    const std::string& path);
// A config serving one model (--model_name + --model_base_path).
tensorflow::serving::ModelServerConfig SingleModelConfig(const std::string& name,
                                                         const std::string& base_path);

// tensorflow.error.Code / absl::StatusCode names ("OK", "INVALID_ARGUMENT", ...).
std::string StatusCodeName(absl::StatusCode code);

}  // namespace kiln::serving
