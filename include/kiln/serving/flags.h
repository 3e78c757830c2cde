// tensorflow_model_server's command line as `kiln serve` reads it: every flag of TF Serving's
// main.cc with its name, type and default, plus the optimized runtime's --use_tfrt and Kiln's
// own switches. docs/SERVING.md says, flag by flag, what each one does in Kiln.
//
// Kept apart from server.h (RunServer) so that kiln_serving_base, which parses flags, does not
// depend on the server process.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::serving {

struct ServeFlags {
  // tensorflow_model_server's flags, in main.cc's order, with its names and defaults.
  int port = 8500;
  std::string grpc_socket_path;
  int rest_api_port = 0;         // 0: no REST API
  int rest_api_num_threads = 0;  // 0: 4 x cores, as TF Serving's default
  int rest_api_timeout_in_ms = 30000;
  bool rest_api_enable_cors_support = false;
  bool enable_batching = false;
  bool allow_version_labels_for_unavailable_models = false;
  std::string batching_parameters_file;
  bool enable_per_model_batching_parameters = false;
  std::string model_config_file;
  int model_config_file_poll_wait_seconds = 0;
  std::string model_name = "default";
  std::string model_base_path;
  int num_load_threads = 0;
  int num_unload_threads = 0;
  int max_num_load_retries = 5;
  int64_t load_retry_interval_micros = 60000000;
  int file_system_poll_wait_seconds = 1;
  bool flush_filesystem_caches = true;
  int64_t tensorflow_session_parallelism = 0;
  std::string tensorflow_session_config_file;
  int64_t tensorflow_intra_op_parallelism = 0;
  int64_t tensorflow_inter_op_parallelism = 0;
  bool use_alts_credentials = false;
  std::string ssl_config_file;
  std::string platform_config_file;
  float per_process_gpu_memory_fraction = 0;
  std::string saved_model_tags = "serve";  // TF Serving: empty means "serve"
  std::string grpc_channel_arguments;
  int grpc_max_threads = 0;  // 0: gRPC's own default
  bool enable_model_warmup = true;
  int num_request_iterations_for_warmup = 0;  // used only if > 0; otherwise once per record
  bool version = false;
  std::string monitoring_config_file;
  bool remove_unused_fields_from_bundle_metagraph = true;
  bool prefer_tflite_model = false;
  int num_tflite_pools = static_cast<int>(std::thread::hardware_concurrency());
  int num_tflite_interpreters_per_pool = 1;
  bool enable_signature_method_name_check = false;
  bool xla_cpu_compilation_enabled = false;
  bool xla_gpu_compilation_enabled = false;
  bool enable_profiler = true;
  std::string thread_pool_factory_config_file;
  std::string mixed_precision;
  bool skip_initialize_tpu = false;
  bool enable_grpc_healthcheck_service = false;
  bool enable_serialization_as_tensor_content = false;
  // The optimized TensorFlow runtime's switch (Vertex AI's image).
  bool use_tfrt = false;
  bool help = false;
  // Kiln's own switches.
  bool allow_precompilation = false;
  bool allow_compression = false;
  bool disable_optimizer = false;
  int64_t rest_api_max_body_bytes = 256ll << 20;
  int64_t run_memory_budget_bytes = 0;  // 0: half of the machine's RAM
  std::string rest_api_address = "0.0.0.0";
  std::string grpc_address = "0.0.0.0";
  // HTTPS on the REST port with --ssl_config_file's key and certificate (and client
  // verification when it asks for it). TF Serving's REST port is plain HTTP.
  bool rest_api_ssl = false;
  // logging_config's TFRecord files are rotated when they reach this size.
  int64_t request_log_max_file_bytes = 64ll << 20;
  // :explain refuses a request needing more model evaluations than this (all instances and
  // baselines together; see docs/EXPLAIN.md "Cost model and limits").
  int64_t explain_max_evaluations = int64_t{1} << 22;

  // Arguments that name no flag (or are not flags at all). TF Serving prints "unknown
  // argument" for them and starts anyway; `kiln serve` does the same.
  std::vector<std::string> unknown_arguments;
};

// The names of tensorflow_model_server's own flags (main.cc), in its order: the contract a
// TF Serving command line is held to. Every one is a field of ServeFlags.
const std::vector<std::string>& TensorflowModelServerFlagNames();

// Parses "--name=value" (and "--name" / "--noname" for booleans; one or two dashes). A bad
// value of a known flag is INVALID_ARGUMENT naming it; an unknown argument is collected in
// unknown_arguments, not an error.
absl::StatusOr<ServeFlags> ParseServeFlags(const std::vector<std::string>& args);
std::string ServeUsage();

// Every flag with its value as `--help` writes it (strings quoted), for the status page.
struct ServeFlagValue {
  std::string name;
  std::string value;
  bool changed = false;  // differs from the default
};
std::vector<ServeFlagValue> ServeFlagValues(const ServeFlags& flags);

// What the server says at start about flags that ask for something Kiln does not do (ALTS,
// TPU, a GPU memory fraction without a GPU, ...) or that it maps onto its own mechanism
// (--use_tfrt, --xla_cpu_compilation_enabled). Errors (a flag that cannot be honoured and
// must not be silently ignored) come back as a status; notes are for the log.
struct FlagNotes {
  std::vector<std::string> notes;
};
absl::StatusOr<FlagNotes> CheckServeFlags(const ServeFlags& flags);

}  // namespace kiln::serving
