#include "kiln/serving/flags.h"

#include <fstream>
#include <thread>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kiln::serving {
namespace {

struct FlagSpec {
  const char* name;
  std::variant<int*, int64_t*, bool*, float*, std::string*> target;
  const char* help;
};

// tensorflow_model_server's flags first, in main.cc's order with its help text (a sentence
// after "Kiln:" says what differs), then --use_tfrt, then Kiln's own.
std::vector<FlagSpec> FlagTable(ServeFlags* f) {
  return {
      {"port", &f->port,
       "TCP port to listen on for gRPC API. Kiln: 0 listens on a free port (TF Serving: 0 "
       "disables gRPC)."},
      {"grpc_socket_path", &f->grpc_socket_path,
       "If non-empty, listen to a UNIX socket for gRPC API on the given path. Can be either "
       "relative or absolute path."},
      {"rest_api_port", &f->rest_api_port,
       "Port to listen on for HTTP/REST API. If set to zero HTTP/REST API will not be exported. "
       "This port must be different than the one specified in --port."},
      {"rest_api_num_threads", &f->rest_api_num_threads,
       "Number of threads for HTTP/REST API processing. If not set, will be auto set based on "
       "number of CPUs (0: 4 x cores)."},
      {"rest_api_timeout_in_ms", &f->rest_api_timeout_in_ms, "Timeout for HTTP/REST API calls."},
      {"rest_api_enable_cors_support", &f->rest_api_enable_cors_support,
       "Enable CORS headers in response"},
      {"enable_batching", &f->enable_batching, "enable batching"},
      {"allow_version_labels_for_unavailable_models",
       &f->allow_version_labels_for_unavailable_models,
       "If true, allows assigning unused version labels to models that are not available yet."},
      {"batching_parameters_file", &f->batching_parameters_file,
       "If non-empty, read an ascii BatchingParameters protobuf from the supplied file name and "
       "use the contained values instead of the defaults."},
      {"enable_per_model_batching_parameters", &f->enable_per_model_batching_parameters,
       "Enables model specific batching params like batch sizes, timeouts, batching feature "
       "flags to be read from `batching_params.pbtxt` file present in SavedModel dir of the "
       "model. Associated params in the global config from --batching_parameters_file are "
       "*ignored*. Only threadpool (name and size) related params are used from the global "
       "config. This option is only applicable when --enable_batching flag is set."},
      {"model_config_file", &f->model_config_file,
       "If non-empty, read an ascii ModelServerConfig protobuf from the supplied file name, and "
       "serve the models in that file. (If used, --model_name, --model_base_path are "
       "ignored.)"},
      {"model_config_file_poll_wait_seconds", &f->model_config_file_poll_wait_seconds,
       "Interval in seconds between each poll of the filesystem for model_config_file. If unset "
       "or set to zero, poll will be done exactly once and not periodically."},
      {"model_name", &f->model_name, "name of model (ignored if --model_config_file flag is set)"},
      {"model_base_path", &f->model_base_path,
       "path to export (ignored if --model_config_file flag is set, otherwise required)"},
      {"num_load_threads", &f->num_load_threads,
       "The number of threads in the thread-pool used to load servables. If set as 0, we don't "
       "use a thread-pool, and servable loads are performed serially."},
      {"num_unload_threads", &f->num_unload_threads,
       "The number of threads in the thread-pool used to unload servables. If set as 0, we "
       "don't use a thread-pool, and servable unloads are performed serially."},
      {"max_num_load_retries", &f->max_num_load_retries,
       "maximum number of times it retries loading a model after the first failure, before "
       "giving up. If set to 0, a load is attempted only once."},
      {"load_retry_interval_micros", &f->load_retry_interval_micros,
       "The interval, in microseconds, between each servable load retry. If set negative, it "
       "doesn't wait. Default: 1 minute"},
      {"file_system_poll_wait_seconds", &f->file_system_poll_wait_seconds,
       "Interval in seconds between each poll of the filesystem for new model version. If set "
       "to zero poll will be exactly done once and not periodically."},
      {"flush_filesystem_caches", &f->flush_filesystem_caches,
       "If true (the default), filesystem caches will be flushed after the initial load of all "
       "servables, and after each subsequent individual servable reload (if the number of load "
       "threads is 1)."},
      {"tensorflow_session_parallelism", &f->tensorflow_session_parallelism,
       "Number of threads to use for running a Tensorflow session. Auto-configured by default. "
       "Kiln: sets both the intra- and inter-op threads unless those are given."},
      {"tensorflow_session_config_file", &f->tensorflow_session_config_file,
       "If non-empty, read an ascii TensorFlow Session ConfigProto protobuf from the supplied "
       "file name. Kiln: must be readable; its options configure TensorFlow's session, not "
       "Kiln's runtime (use --tensorflow_intra_op_parallelism and friends)."},
      {"tensorflow_intra_op_parallelism", &f->tensorflow_intra_op_parallelism,
       "Number of threads to use to parallelize the execution of an individual op. "
       "Auto-configured by default."},
      {"tensorflow_inter_op_parallelism", &f->tensorflow_inter_op_parallelism,
       "Controls the number of operators that can be executed simultaneously. Auto-configured "
       "by default."},
      {"use_alts_credentials", &f->use_alts_credentials,
       "Use Google ALTS credentials. Kiln: not available (the server refuses to start with it; "
       "use --ssl_config_file)."},
      {"ssl_config_file", &f->ssl_config_file,
       "If non-empty, read an ascii SSLConfig protobuf from the supplied file name and set up a "
       "secure gRPC channel"},
      {"platform_config_file", &f->platform_config_file,
       "If non-empty, read an ascii PlatformConfigMap protobuf from the supplied file name, and "
       "use that platform config instead of the Tensorflow platform. Kiln: must be readable; "
       "Kiln serves the tensorflow and onnx platforms with its own runtime."},
      {"per_process_gpu_memory_fraction", &f->per_process_gpu_memory_fraction,
       "Fraction that each process occupies of the GPU memory space the value is between 0.0 "
       "and 1.0 (with 0.0 as the default)."},
      {"saved_model_tags", &f->saved_model_tags,
       "Comma-separated set of tags corresponding to the meta graph def to load from "
       "SavedModel."},
      {"grpc_channel_arguments", &f->grpc_channel_arguments,
       "A comma separated list of arguments to be passed to the grpc server. (e.g. "
       "grpc.max_connection_age_ms=2000)"},
      {"grpc_max_threads", &f->grpc_max_threads,
       "Max grpc server threads to handle grpc messages (0: gRPC's default)."},
      {"enable_model_warmup", &f->enable_model_warmup,
       "Enables model warmup, which triggers lazy initializations (such as plan compilation) at "
       "load time, to reduce first request latency."},
      {"num_request_iterations_for_warmup", &f->num_request_iterations_for_warmup,
       "Number of times a request is iterated during warmup replay. This value is used only if "
       "> 0."},
      {"version", &f->version, "Display version"},
      {"monitoring_config_file", &f->monitoring_config_file,
       "If non-empty, read an ascii MonitoringConfig protobuf from the supplied file name"},
      {"remove_unused_fields_from_bundle_metagraph", &f->remove_unused_fields_from_bundle_metagraph,
       "Removes unused fields from MetaGraphDef proto message to save memory. Kiln: always so "
       "(the imported graph replaces the MetaGraphDef)."},
      {"prefer_tflite_model", &f->prefer_tflite_model,
       "Prefer TensorFlow Lite model from `model.tflite` file in SavedModel directory, instead "
       "of the TensorFlow model from `saved_model.pb` file. If no TensorFlow Lite model found, "
       "fallback to TensorFlow model. Kiln: has no TFLite importer; a version with only "
       "model.tflite fails to load saying so."},
      {"num_tflite_pools", &f->num_tflite_pools,
       "Number of TFLite interpreters in an interpreter pool of TfLiteSession. Kiln: no effect "
       "(no TFLite)."},
      {"num_tflite_interpreters_per_pool", &f->num_tflite_interpreters_per_pool,
       "Number of TFLite interpreters in an interpreter pool of TfLiteSession. Kiln: no effect "
       "(no TFLite)."},
      {"enable_signature_method_name_check", &f->enable_signature_method_name_check,
       "Enable method_name check for SignatureDef. Disable this if serving native TF2 "
       "regression/classification models."},
      {"xla_cpu_compilation_enabled", &f->xla_cpu_compilation_enabled,
       "Enable XLA:CPU JIT (default is disabled). Kiln: compiles each version's plans at load "
       "(as --allow_precompilation)."},
      {"xla_gpu_compilation_enabled", &f->xla_gpu_compilation_enabled,
       "Enable both XLA:CPU JIT and XLA:GPU JIT (default is disabled). Kiln: as "
       "--xla_cpu_compilation_enabled."},
      {"enable_profiler", &f->enable_profiler,
       "Enable profiler service. Kiln: no TensorFlow profiler service; traces come from "
       "`kiln run --trace`."},
      {"thread_pool_factory_config_file", &f->thread_pool_factory_config_file,
       "If non-empty, read an ascii ThreadPoolConfig protobuf from the supplied file name. "
       "Kiln: must be readable; Kiln's runtime has its own thread pool per model."},
      {"mixed_precision", &f->mixed_precision,
       "specify mixed_precision mode. Kiln: \"bfloat16\" runs the bf16 compression pass."},
      {"skip_initialize_tpu", &f->skip_initialize_tpu,
       "Whether to skip auto initializing TPU. Kiln: no TPU support."},
      {"enable_grpc_healthcheck_service", &f->enable_grpc_healthcheck_service,
       "Enable the standard gRPC healthcheck service."},
      {"enable_serialization_as_tensor_content", &f->enable_serialization_as_tensor_content,
       "Enable serialization of predict response as tensor content."},
      {"use_tfrt", &f->use_tfrt,
       "The optimized TensorFlow runtime's switch to TFRT. Kiln: accepted and logged (Kiln's "
       "executor is its own, always)."},
      {"help", &f->help, "Show this help"},
      {"allow_precompilation", &f->allow_precompilation,
       "Kiln: compile plans for every allowed batch size when a version loads"},
      {"allow_compression", &f->allow_compression,
       "Kiln: apply the runtime's compression passes (int8/bf16) when loading"},
      {"disable_optimizer", &f->disable_optimizer, "Kiln: run imported graphs unoptimized"},
      {"rest_api_max_body_bytes", &f->rest_api_max_body_bytes,
       "Kiln: largest accepted HTTP request body; larger ones get 413"},
      {"run_memory_budget_bytes", &f->run_memory_budget_bytes,
       "Kiln: bytes one model run may hold (intermediate values, outputs, tensors sized by "
       "request values); a request beyond it gets RESOURCE_EXHAUSTED / 429 (0: half of RAM)"},
      {"rest_api_address", &f->rest_api_address, "Kiln: address the REST API listens on"},
      {"grpc_address", &f->grpc_address, "Kiln: address the gRPC API listens on"},
      {"rest_api_ssl", &f->rest_api_ssl,
       "Kiln: serve the REST API over HTTPS with --ssl_config_file's key and certificate"},
      {"request_log_max_file_bytes", &f->request_log_max_file_bytes,
       "Kiln: request log files (a model's logging_config) are rotated at this size"},
      {"explain_max_evaluations", &f->explain_max_evaluations,
       "Kiln: :explain refuses requests needing more model evaluations than this"},
  };
}

absl::Status SetFlag(const FlagSpec& spec, absl::string_view value, bool has_value, bool negated) {
  auto bad = [&](absl::string_view expected) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", value, "\" for flag --",
                                                   spec.name, " (expected ", expected, ")"));
  };
  if (auto* b = std::get_if<bool*>(&spec.target)) {
    if (!has_value) {
      **b = !negated;
      return absl::OkStatus();
    }
    if (negated) return bad("no value with --no prefix");
    const std::string lower = absl::AsciiStrToLower(value);
    if (lower == "true" || lower == "1") {
      **b = true;
    } else if (lower == "false" || lower == "0") {
      **b = false;
    } else {
      return bad("true or false");
    }
    return absl::OkStatus();
  }
  if (negated) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command line flag 'no", spec.name, "'"));
  }
  if (!has_value) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", spec.name, " needs a value: --", spec.name, "=..."));
  }
  if (auto* i = std::get_if<int*>(&spec.target)) {
    if (!absl::SimpleAtoi(value, *i)) return bad("an integer");
    return absl::OkStatus();
  }
  if (auto* i = std::get_if<int64_t*>(&spec.target)) {
    if (!absl::SimpleAtoi(value, *i)) return bad("an integer");
    return absl::OkStatus();
  }
  if (auto* x = std::get_if<float*>(&spec.target)) {
    if (!absl::SimpleAtof(value, *x)) return bad("a number");
    return absl::OkStatus();
  }
  *std::get<std::string*>(spec.target) = std::string(value);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServeFlags> ParseServeFlags(const std::vector<std::string>& args) {
  ServeFlags flags;
  const std::vector<FlagSpec> table = FlagTable(&flags);
  for (const std::string& arg : args) {
    absl::string_view text = arg;
    if (!absl::ConsumePrefix(&text, "--") && !absl::ConsumePrefix(&text, "-")) {
      flags.unknown_arguments.push_back(arg);
      continue;
    }
    const size_t eq = text.find('=');
    const bool has_value = eq != absl::string_view::npos;
    absl::string_view name = text.substr(0, eq);
    const absl::string_view value = has_value ? text.substr(eq + 1) : absl::string_view();
    const FlagSpec* found = nullptr;
    bool negated = false;
    for (const FlagSpec& spec : table) {
      if (name == spec.name) found = &spec;
    }
    if (found == nullptr && absl::StartsWith(name, "no")) {
      for (const FlagSpec& spec : table) {
        if (name.substr(2) == spec.name && std::holds_alternative<bool*>(spec.target)) {
          found = &spec;
          negated = true;
        }
      }
    }
    if (found == nullptr) {
      // TF Serving leaves what its flag parser does not know in argv, prints "unknown
      // argument" and starts: a command line written for a newer or older tensorflow_model_server
      // keeps working.
      flags.unknown_arguments.push_back(arg);
      continue;
    }
    if (absl::Status status = SetFlag(*found, value, has_value, negated); !status.ok()) {
      return status;
    }
  }
  auto check_port = [](const char* name, int port) -> absl::Status {
    if (port < 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid value \"", port, "\" for flag --", name, " (a port, 0-65535)"));
    }
    return absl::OkStatus();
  };
  if (auto s = check_port("port", flags.port); !s.ok()) return s;
  if (auto s = check_port("rest_api_port", flags.rest_api_port); !s.ok()) return s;
  if (flags.rest_api_port != 0 && flags.rest_api_port == flags.port) {
    return absl::InvalidArgumentError(
        "--port and --rest_api_port must differ (gRPC and REST listen on separate ports)");
  }
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"rest_api_num_threads", flags.rest_api_num_threads},
           {"rest_api_timeout_in_ms", flags.rest_api_timeout_in_ms},
           {"model_config_file_poll_wait_seconds", flags.model_config_file_poll_wait_seconds},
           {"tensorflow_intra_op_parallelism", flags.tensorflow_intra_op_parallelism},
           {"tensorflow_inter_op_parallelism", flags.tensorflow_inter_op_parallelism},
           {"grpc_max_threads", flags.grpc_max_threads},
           {"num_load_threads", flags.num_load_threads},
           {"rest_api_max_body_bytes", flags.rest_api_max_body_bytes},
           {"run_memory_budget_bytes", flags.run_memory_budget_bytes},
           {"num_unload_threads", flags.num_unload_threads},
           {"tensorflow_session_parallelism", flags.tensorflow_session_parallelism},
           {"num_tflite_pools", flags.num_tflite_pools},
           {"num_tflite_interpreters_per_pool", flags.num_tflite_interpreters_per_pool}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid value \"", value, "\" for flag --", name, " (must be >= 0)"));
    }
  }
  if (flags.explain_max_evaluations < 1) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"",
                                                   flags.explain_max_evaluations,
                                                   "\" for flag --explain_max_evaluations (must "
                                                   "be >= 1)"));
  }
  if (!(flags.per_process_gpu_memory_fraction >= 0 && flags.per_process_gpu_memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value \"", flags.per_process_gpu_memory_fraction,
                     "\" for flag --per_process_gpu_memory_fraction (between 0.0 and 1.0)"));
  }
  return flags;
}

const std::vector<std::string>& TensorflowModelServerFlagNames() {
  // main.cc's flag_list, in order (48 flags).
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "port",
      "grpc_socket_path",
      "rest_api_port",
      "rest_api_num_threads",
      "rest_api_timeout_in_ms",
      "rest_api_enable_cors_support",
      "enable_batching",
      "allow_version_labels_for_unavailable_models",
      "batching_parameters_file",
      "enable_per_model_batching_parameters",
      "model_config_file",
      "model_config_file_poll_wait_seconds",
      "model_name",
      "model_base_path",
      "num_load_threads",
      "num_unload_threads",
      "max_num_load_retries",
      "load_retry_interval_micros",
      "file_system_poll_wait_seconds",
      "flush_filesystem_caches",
      "tensorflow_session_parallelism",
      "tensorflow_session_config_file",
      "tensorflow_intra_op_parallelism",
      "tensorflow_inter_op_parallelism",
      "use_alts_credentials",
      "ssl_config_file",
      "platform_config_file",
      "per_process_gpu_memory_fraction",
      "saved_model_tags",
      "grpc_channel_arguments",
      "grpc_max_threads",
      "enable_model_warmup",
      "num_request_iterations_for_warmup",
      "version",
      "monitoring_config_file",
      "remove_unused_fields_from_bundle_metagraph",
      "prefer_tflite_model",
      "num_tflite_pools",
      "num_tflite_interpreters_per_pool",
      "enable_signature_method_name_check",
      "xla_cpu_compilation_enabled",
      "xla_gpu_compilation_enabled",
      "enable_profiler",
      "thread_pool_factory_config_file",
      "mixed_precision",
      "skip_initialize_tpu",
      "enable_grpc_healthcheck_service",
      "enable_serialization_as_tensor_content",
  };
  return *names;
}

absl::StatusOr<FlagNotes> CheckServeFlags(const ServeFlags& flags) {
  FlagNotes out;
  auto note = [&](auto&&... parts) { out.notes.push_back(absl::StrCat(parts...)); };
  if (flags.use_alts_credentials) {
    // Starting without the transport security the command line asks for would expose the
    // models on a plaintext port: refuse instead.
    return absl::UnimplementedError(
        "--use_alts_credentials: Kiln has no ALTS (Google's Application Layer Transport "
        "Security); secure the gRPC port with --ssl_config_file instead");
  }
  if (flags.tensorflow_intra_op_parallelism > 0 && flags.tensorflow_inter_op_parallelism > 0 &&
      flags.tensorflow_session_parallelism > 0) {
    return absl::InvalidArgumentError(
        "Either configure --tensorflow_session_parallelism or (--tensorflow_intra_op_parallelism, "
        "--tensorflow_inter_op_parallelism) separately. You cannot configure all.");
  }
  // Files TF Serving reads at start: a path that cannot be read stops it, so it stops Kiln too,
  // even though their contents configure TensorFlow's own runtime.
  for (auto [name, path] : std::vector<std::pair<const char*, const std::string*>>{
           {"tensorflow_session_config_file", &flags.tensorflow_session_config_file},
           {"platform_config_file", &flags.platform_config_file},
           {"thread_pool_factory_config_file", &flags.thread_pool_factory_config_file}}) {
    if (path->empty()) continue;
    std::ifstream file(*path);
    if (!file) {
      return absl::NotFoundError(absl::StrCat("--", name, ": cannot read file ", *path));
    }
    note("--", name, "=", *path,
         ": read; it configures TensorFlow's runtime, which Kiln does not use (no effect)");
  }
  if (flags.mixed_precision == "bfloat16") {
    note("--mixed_precision=bfloat16: each version runs the bf16 compression pass");
  } else if (!flags.mixed_precision.empty()) {
    // TF Serving acts only on "bfloat16" and ignores any other value.
    note("--mixed_precision=", flags.mixed_precision,
         ": no effect (only \"bfloat16\" selects a mode)");
  }
  if (flags.xla_cpu_compilation_enabled || flags.xla_gpu_compilation_enabled) {
    note(flags.xla_cpu_compilation_enabled ? "--xla_cpu_compilation_enabled"
                                           : "--xla_gpu_compilation_enabled",
         ": Kiln's ahead-of-time compilation is plan precompilation; plans are compiled at "
         "load (as --allow_precompilation)");
  }
  if (flags.use_tfrt) {
    note("--use_tfrt: accepted; Kiln always runs its own asynchronous executor");
  }
  if (flags.per_process_gpu_memory_fraction != 0) {
    note("--per_process_gpu_memory_fraction=", flags.per_process_gpu_memory_fraction,
         ": no effect (Kiln reserves no GPU memory up front)");
  }
  if (flags.skip_initialize_tpu) note("--skip_initialize_tpu: no effect (Kiln has no TPU support)");
  if (flags.prefer_tflite_model) {
    note(
        "--prefer_tflite_model: Kiln has no TensorFlow Lite runtime; it loads saved_model.pb "
        "or model.onnx, and a version with only model.tflite fails to load saying so");
  }
  if (flags.enable_per_model_batching_parameters && !flags.enable_batching) {
    note("--enable_per_model_batching_parameters: no effect without --enable_batching");
  }
  return out;
}

namespace {

std::string FlagValueText(const FlagSpec& spec) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          return *p ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return absl::StrCat("\"", *p, "\"");
        } else {
          return absl::StrCat(*p);
        }
      },
      spec.target);
}

}  // namespace

std::string ServeUsage() {
  ServeFlags defaults;
  std::string out =
      "usage: kiln serve [--flag=value ...]   (also installed as tensorflow_model_server)\n\n"
      "Serves SavedModels and ONNX models with TensorFlow Serving's gRPC and REST APIs.\n\n"
      "Flags:\n";
  for (const FlagSpec& spec : FlagTable(&defaults)) {
    absl::StrAppend(&out, "  --", spec.name, "=", FlagValueText(spec), "\n      ", spec.help, "\n");
  }
  return out;
}

std::vector<ServeFlagValue> ServeFlagValues(const ServeFlags& flags) {
  ServeFlags copy = flags;
  ServeFlags defaults;
  const std::vector<FlagSpec> table = FlagTable(&copy);
  const std::vector<FlagSpec> default_table = FlagTable(&defaults);
  std::vector<ServeFlagValue> out;
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string value = FlagValueText(table[i]);
    out.push_back({table[i].name, value, value != FlagValueText(default_table[i])});
  }
  return out;
}

}  // namespace kiln::serving
