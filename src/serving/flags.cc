#include "kiln/serving/server.h"

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
  std::variant<int*, int64_t*, bool*, std::string*> target;
  const char* help;
};

std::vector<FlagSpec> FlagTable(ServeFlags* f) {
  return {
      {"port", &f->port, "Port to listen on for gRPC API"},
      {"grpc_socket_path", &f->grpc_socket_path,
       "If non-empty, listen to a UNIX socket for gRPC API on the given path"},
      {"rest_api_port", &f->rest_api_port,
       "Port to listen on for HTTP/REST API. If set to zero HTTP/REST API will not be exported"},
      {"rest_api_num_threads", &f->rest_api_num_threads,
       "Number of threads for HTTP/REST API processing (0: 4 x cores)"},
      {"rest_api_timeout_in_ms", &f->rest_api_timeout_in_ms, "Timeout for HTTP/REST API calls"},
      {"rest_api_enable_cors_support", &f->rest_api_enable_cors_support,
       "Enable CORS headers in response"},
      {"enable_batching", &f->enable_batching, "enable batching"},
      {"batching_parameters_file", &f->batching_parameters_file,
       "If non-empty, read an ascii BatchingParameters protobuf from the supplied file name"},
      {"allow_version_labels_for_unavailable_models",
       &f->allow_version_labels_for_unavailable_models,
       "If true, allows assigning unused version labels to models that are not available yet"},
      {"model_config_file", &f->model_config_file,
       "If non-empty, read an ascii ModelServerConfig protobuf from the supplied file name"},
      {"model_config_file_poll_wait_seconds", &f->model_config_file_poll_wait_seconds,
       "Interval in seconds between each poll of the model config file (0: read once)"},
      {"model_name", &f->model_name, "name of model (ignored if --model_config_file is set)"},
      {"model_base_path", &f->model_base_path,
       "path to export (ignored if --model_config_file is set)"},
      {"max_num_load_retries", &f->max_num_load_retries,
       "maximum number of times it retries loading a model after the first failure"},
      {"load_retry_interval_micros", &f->load_retry_interval_micros,
       "The interval, in microseconds, between each servable load retry"},
      {"file_system_poll_wait_seconds", &f->file_system_poll_wait_seconds,
       "Interval in seconds between each poll of the filesystem for new model versions"},
      {"flush_filesystem_caches", &f->flush_filesystem_caches, "accepted for compatibility"},
      {"tensorflow_session_parallelism", &f->tensorflow_session_parallelism,
       "Number of threads to use for running a model (0: auto)"},
      {"tensorflow_intra_op_parallelism", &f->tensorflow_intra_op_parallelism,
       "Number of threads to use to parallelize the execution of an individual op (0: auto)"},
      {"tensorflow_inter_op_parallelism", &f->tensorflow_inter_op_parallelism,
       "Controls the number of operators that can be executed simultaneously (0: auto)"},
      {"saved_model_tags", &f->saved_model_tags,
       "Comma-separated set of tags of the MetaGraph to load from a SavedModel"},
      {"grpc_channel_arguments", &f->grpc_channel_arguments,
       "A comma separated list of arguments to be passed to the grpc server (key=value)"},
      {"grpc_max_threads", &f->grpc_max_threads,
       "Max grpc server threads to handle grpc messages (0: gRPC's default)"},
      {"enable_model_warmup", &f->enable_model_warmup,
       "Enables model warmup, which triggers lazy initializations (such as plan compilation) "
       "at load time"},
      {"num_request_iterations_for_warmup", &f->num_request_iterations_for_warmup,
       "Number of times a warmup request is replayed"},
      {"monitoring_config_file", &f->monitoring_config_file,
       "If non-empty, read an ascii MonitoringConfig protobuf from the supplied file name"},
      {"enable_signature_method_name_check", &f->enable_signature_method_name_check,
       "Enable method_name check for SignatureDef"},
      {"num_load_threads", &f->num_load_threads, "The number of threads used to load models"},
      {"num_unload_threads", &f->num_unload_threads, "accepted for compatibility"},
      {"version", &f->version, "Display version"},
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
  };
}

absl::Status SetFlag(const FlagSpec& spec, absl::string_view value, bool has_value,
                     bool negated) {
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
    return absl::InvalidArgumentError(absl::StrCat("unknown command line flag 'no", spec.name, "'"));
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
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\" (flags are --name=value)"));
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
      return absl::InvalidArgumentError(absl::StrCat("unknown command line flag '", name, "'"));
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
           {"run_memory_budget_bytes", flags.run_memory_budget_bytes}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid value \"", value, "\" for flag --", name, " (must be >= 0)"));
    }
  }
  return flags;
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
