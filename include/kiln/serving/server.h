// `kiln serve`: tensorflow_model_server's command line and the process that runs it (gRPC on
// --port, REST on --rest_api_port, config polling, graceful shutdown on SIGTERM/SIGINT).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::serving {

struct ServeFlags {
  // tensorflow_model_server's flags, same names and defaults.
  int port = 8500;
  std::string grpc_socket_path;
  int rest_api_port = 0;  // 0: no REST API
  int rest_api_num_threads = 0;  // 0: 4 x cores
  int rest_api_timeout_in_ms = 30000;
  bool rest_api_enable_cors_support = false;
  bool enable_batching = false;
  std::string batching_parameters_file;
  bool allow_version_labels_for_unavailable_models = false;
  std::string model_config_file;
  int model_config_file_poll_wait_seconds = 0;
  std::string model_name = "default";
  std::string model_base_path;
  int max_num_load_retries = 5;
  int64_t load_retry_interval_micros = 60000000;
  int file_system_poll_wait_seconds = 1;
  bool flush_filesystem_caches = true;
  int64_t tensorflow_session_parallelism = 0;
  int64_t tensorflow_intra_op_parallelism = 0;
  int64_t tensorflow_inter_op_parallelism = 0;
  std::string saved_model_tags = "serve";
  std::string grpc_channel_arguments;
  int grpc_max_threads = 0;
  bool enable_model_warmup = true;
  int num_request_iterations_for_warmup = 1;
  std::string monitoring_config_file;
  bool enable_signature_method_name_check = false;
  int num_load_threads = 0;
  int num_unload_threads = 0;
  bool version = false;
  bool help = false;
  // Kiln's own switches.
  bool allow_precompilation = false;
  bool allow_compression = false;
  bool disable_optimizer = false;
  int64_t rest_api_max_body_bytes = 256ll << 20;
  int64_t run_memory_budget_bytes = 0;  // 0: half of the machine's RAM
  std::string rest_api_address = "0.0.0.0";
  std::string grpc_address = "0.0.0.0";
};

// Parses "--name=value" (and "--name" / "--noname" for booleans; one or two dashes). An
// unknown flag or a bad value is INVALID_ARGUMENT naming it.
absl::StatusOr<ServeFlags> ParseServeFlags(const std::vector<std::string>& args);
std::string ServeUsage();

// Every flag with its value as `--help` writes it (strings quoted), for the status page.
struct ServeFlagValue {
  std::string name;
  std::string value;
  bool changed = false;  // differs from the default
};
std::vector<ServeFlagValue> ServeFlagValues(const ServeFlags& flags);

// What `--version` prints (the status page shows it too).
inline constexpr char kServerVersion[] =
    "TensorFlow ModelServer: kiln\nTensorFlow Library: none (kiln runtime)";

// How long requests in flight may take to finish after SIGTERM or SIGINT. The drain: at the
// signal /v2/health/ready answers 503, both front ends stop accepting connections (the REST
// listener is shut at once, so a load balancer's new connections are refused and go to
// another replica), replies to requests still arriving on open connections close those
// connections, and requests in flight get up to this long before the process exits.
// deploy/k8s sizes terminationGracePeriodSeconds from it (tests/deploy checks that).
inline constexpr int kShutdownGraceSeconds = 10;

// Runs the server until SIGTERM or SIGINT; returns the process exit code.
int RunServer(const ServeFlags& flags);

}  // namespace kiln::serving
