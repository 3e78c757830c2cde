#include "kiln/serving/rest_handler.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kiln/core/clock.h"
#include "kiln/core/status.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/json_tensor.h"
#include "kiln/serving/request_logger.h"
#include "kiln/serving/tensor_proto.h"

namespace kiln::serving {

int HttpStatusFromCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kUnauthenticated: return 401;
    default: return 500;
  }
}

HttpResponse ErrorResponse(const absl::Status& status) {
  HttpResponse response;
  response.status = HttpStatusFromCode(status.code());
  response.body = "{ \"error\": ";
  AppendJsonString(status.message(), &response.body);
  response.body.append(" }");
  return response;
}

namespace {

// KServe's binary tensor extension: the size of the JSON part of a body that continues with
// tensor bytes (requests and replies).
constexpr char kInferenceHeaderContentLength[] = "Inference-Header-Content-Length";

HttpResponse JsonResponse(std::string body) {
  HttpResponse response;
  response.body = std::move(body);
  return response;
}

HttpResponse Malformed(const HttpRequest& request) {
  return ErrorResponse(absl::InvalidArgumentError(
      absl::StrCat("Malformed request: ", request.method, " ", request.target)));
}

// Decodes %XX escapes of one path segment, as TF Serving does for model names and labels
// ("hp%20two" is "hp two"); nullopt for a malformed escape. '+' stays '+' in a path.
std::optional<std::string> UrlDecode(absl::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out.push_back(segment[i]);
      continue;
    }
    if (i + 2 >= segment.size()) return std::nullopt;
    const char hi = segment[i + 1], lo = segment[i + 2];
    if (!absl::ascii_isxdigit(hi) || !absl::ascii_isxdigit(lo)) return std::nullopt;
    auto value = [](char c) {
      return absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10;
    };
    out.push_back(static_cast<char>(value(hi) * 16 + value(lo)));
    i += 2;
  }
  return out;
}

// "{name}[/versions/{v}|/labels/{l}]" -> spec, the name and label URL-decoded; nullopt when
// it does not have that form. Segments are split before decoding, so "%2F" stays in a name.
std::optional<ModelSpecRef> ParseModelPath(absl::string_view path) {
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  ModelSpecRef spec;
  if (parts.empty() || parts[0].empty()) return std::nullopt;
  std::optional<std::string> name = UrlDecode(parts[0]);
  if (!name.has_value() || name->empty()) return std::nullopt;
  spec.name = *std::move(name);
  if (parts.size() == 1) return spec;
  if (parts.size() != 3 || parts[2].empty()) return std::nullopt;
  if (absl::EqualsIgnoreCase(parts[1], "versions")) {
    int64_t version;
    if (!absl::SimpleAtoi(parts[2], &version) ||
        !std::all_of(parts[2].begin(), parts[2].end(), absl::ascii_isdigit)) {
      return std::nullopt;
    }
    spec.version = version;
    return spec;
  }
  if (absl::EqualsIgnoreCase(parts[1], "labels")) {
    std::optional<std::string> label = UrlDecode(parts[2]);
    if (!label.has_value() || label->empty()) return std::nullopt;
    spec.label = *std::move(label);
    return spec;
  }
  return std::nullopt;
}

const char* StateName(tensorflow::serving::ModelVersionStatus::State state) {
  switch (state) {
    case tensorflow::serving::ModelVersionStatus::START: return "START";
    case tensorflow::serving::ModelVersionStatus::LOADING: return "LOADING";
    case tensorflow::serving::ModelVersionStatus::AVAILABLE: return "AVAILABLE";
    case tensorflow::serving::ModelVersionStatus::UNLOADING: return "UNLOADING";
    case tensorflow::serving::ModelVersionStatus::END: return "END";
    default: return "UNKNOWN";
  }
}

std::string StatusJson(const std::vector<VersionStatus>& versions) {
  std::string out = "{\n \"model_version_status\": [";
  for (size_t i = 0; i < versions.size(); ++i) {
    const VersionStatus& v = versions[i];
    absl::StrAppend(&out, i ? "," : "", "\n  {\n   \"version\": \"", v.version,
                    "\",\n   \"state\": \"", StateName(v.state),
                    "\",\n   \"status\": {\n    \"error_code\": \"",
                    StatusCodeName(v.status.code()), "\",\n    \"error_message\": ");
    AppendJsonString(v.status.message(), &out);
    out.append("\n   }\n  }");
  }
  out.append("\n ]\n}\n");
  return out;
}

void AppendIndent(int level, std::string* out) {
  out->push_back('\n');
  out->append(level, ' ');
}

void AppendTensorInfoJson(const runtime::TensorInfo& info, int level, std::string* out) {
  out->push_back('{');
  AppendIndent(level + 1, out);
  absl::StrAppend(out, "\"dtype\": \"", DataTypeEnumName(info.dtype), "\",");
  AppendIndent(level + 1, out);
  out->append("\"tensor_shape\": {");
  AppendIndent(level + 2, out);
  if (!info.rank_known) {
    out->append("\"dim\": [],");
    AppendIndent(level + 2, out);
    out->append("\"unknown_rank\": true");
  } else {
    out->append("\"dim\": [");
    for (size_t d = 0; d < info.shape.size(); ++d) {
      if (d) out->push_back(',');
      AppendIndent(level + 3, out);
      out->push_back('{');
      AppendIndent(level + 4, out);
      absl::StrAppend(out, "\"size\": \"", info.shape[d], "\",");
      AppendIndent(level + 4, out);
      out->append("\"name\": \"\"");
      AppendIndent(level + 3, out);
      out->push_back('}');
    }
    if (!info.shape.empty()) AppendIndent(level + 2, out);
    out->append("],");
    AppendIndent(level + 2, out);
    out->append("\"unknown_rank\": false");
  }
  AppendIndent(level + 1, out);
  out->append("},");
  AppendIndent(level + 1, out);
  out->append("\"name\": ");
  AppendJsonString(info.name, out);
  AppendIndent(level, out);
  out->push_back('}');
}

void AppendTensorInfoMap(const std::map<std::string, runtime::TensorInfo>& infos, int level,
                         std::string* out) {
  out->push_back('{');
  bool first = true;
  for (const auto& [key, info] : infos) {
    if (!first) out->push_back(',');
    first = false;
    AppendIndent(level + 1, out);
    AppendJsonString(key, out);
    out->append(": ");
    AppendTensorInfoJson(info, level + 1, out);
  }
  if (!infos.empty()) AppendIndent(level, out);
  out->push_back('}');
}

// GetModelMetadata's JSON, laid out as TF Serving prints it.
std::string MetadataJson(const ServableVersion& servable) {
  std::string out = "{\n \"model_spec\": {\n  \"name\": ";
  AppendJsonString(servable.name(), &out);
  absl::StrAppend(&out, ",\n  \"signature_name\": \"\",\n  \"version\": \"", servable.version(),
                  "\"\n },\n \"metadata\": {\n  \"signature_def\": {\n   \"signature_def\": {");
  bool first = true;
  std::map<std::string, const runtime::SignatureInfo*> signatures;
  for (const auto& [key, signature] : servable.metadata_only_signatures()) {
    signatures[key] = &signature;
  }
  for (const auto& [key, signature] : servable.model().signatures()) signatures[key] = &signature;
  for (const auto& [key, signature_ptr] : signatures) {
    const runtime::SignatureInfo& signature = *signature_ptr;
    // TF Serving's golden JSON has no "defaults" for __saved_model_init_op.
    const bool metadata_only = servable.metadata_only_signatures().count(key) > 0 &&
                               servable.model().signatures().count(key) == 0;
    if (!first) out.push_back(',');
    first = false;
    AppendIndent(4, &out);
    AppendJsonString(key, &out);
    out.append(": {");
    AppendIndent(5, &out);
    out.append("\"inputs\": ");
    AppendTensorInfoMap(signature.inputs, 5, &out);
    out.push_back(',');
    AppendIndent(5, &out);
    out.append("\"outputs\": ");
    AppendTensorInfoMap(signature.outputs, 5, &out);
    out.push_back(',');
    AppendIndent(5, &out);
    out.append("\"method_name\": ");
    AppendJsonString(signature.method_name, &out);
    if (!metadata_only) {
      out.push_back(',');
      AppendIndent(5, &out);
      out.append("\"defaults\": {}");
    }
    AppendIndent(4, &out);
    out.push_back('}');
  }
  out.append("\n   }\n  }\n }\n}\n");
  return out;
}

tensorflow::serving::Input InputFromJson(const ExamplesJsonRequest& request) {
  tensorflow::serving::Input input;
  if (request.has_context) {
    auto* list = input.mutable_example_list_with_context();
    *list->mutable_context() = request.context;
    for (const auto& example : request.examples) *list->add_examples() = example;
  } else {
    auto* list = input.mutable_example_list();
    for (const auto& example : request.examples) *list->add_examples() = example;
  }
  return input;
}

}  // namespace

absl::string_view FindHeader(const HttpRequest& request, absl::string_view name) {
  for (const auto& [key, value] : request.headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return {};
}

RestHandler::RestHandler(ServerCore* core, ServingMetrics* metrics, std::string metrics_path,
                         bool enable_cors_support, int64_t explain_max_evaluations)
    : core_(core),
      metrics_(metrics),
      metrics_path_(std::move(metrics_path)),
      enable_cors_support_(enable_cors_support),
      explain_max_evaluations_(explain_max_evaluations) {}

namespace {

// The paths TF Serving's REST dispatcher owns ("(?i)/v1/.*"), and KServe v2's beside them.
bool IsApiPath(absl::string_view path) {
  return absl::StartsWithIgnoreCase(path, "/v1/") || absl::StartsWithIgnoreCase(path, "/v2");
}

// TF Serving's CORS preflight: no handler runs; an Origin with an http(s) scheme is enough.
HttpResponse Preflight(const HttpRequest& request) {
  const absl::string_view origin = FindHeader(request, "Origin");
  if (!absl::StrContains(origin, "http://") && !absl::StrContains(origin, "https://")) {
    return ErrorResponse(
        absl::FailedPreconditionError("Origin header is missing in CORS preflight"));
  }
  return HttpResponse();  // 200, empty body
}

}  // namespace

HttpResponse RestHandler::Handle(const HttpRequest& request) const {
  absl::string_view path = request.target;
  path = path.substr(0, path.find('?'));
  const bool api = IsApiPath(path);
  HttpResponse response = [&] {
    if (api && request.method == "OPTIONS") return Preflight(request);
    // The last line of defence: whatever escapes a handler (a failed allocation while
    // decoding or encoding) is this request's error, never the server's end.
    try {
      return Route(request);
    } catch (const std::bad_alloc&) {
      return ErrorResponse(
          absl::ResourceExhaustedError("out of memory while handling this request"));
    } catch (const std::exception& e) {
      return ErrorResponse(absl::InternalError(absl::StrCat("unexpected error: ", e.what())));
    }
  }();
  // TF Serving adds them to every reply of its API paths, errors included, so that a browser
  // shows the error instead of a CORS failure.
  if (enable_cors_support_ && api) {
    response.headers.emplace_back("Access-Control-Allow-Origin", "*");
    response.headers.emplace_back("Access-Control-Allow-Methods", "POST, GET");
    response.headers.emplace_back("Access-Control-Allow-Headers", "Content-Type");
  }
  return response;
}

HttpResponse RestHandler::Route(const HttpRequest& request) const {
  absl::string_view path = request.target;
  path = path.substr(0, path.find('?'));
  if (!metrics_path_.empty() && path == metrics_path_ && request.method == "GET") {
    HttpResponse response;
    response.content_type = "text/plain; version=0.0.4";
    response.body = metrics_->ToPrometheusText();
    return response;
  }
  if (absl::StartsWithIgnoreCase(path, "/v1/models")) {
    return HandleV1(request, path.substr(strlen("/v1/models")));
  }
  if (absl::StartsWithIgnoreCase(path, "/v2")) return HandleV2(request, path.substr(3));
  if (absl::StartsWithIgnoreCase(path, "/v1/")) return Malformed(request);
  return ErrorResponse(absl::NotFoundError(absl::StrCat("Not found: ", request.target)));
}

HttpResponse RestHandler::HandleV1(const HttpRequest& request, absl::string_view path) const {
  if (!absl::ConsumePrefix(&path, "/") || path.empty()) return Malformed(request);
  if (request.method == "POST") {
    const size_t colon = path.rfind(':');
    if (colon == absl::string_view::npos) return Malformed(request);
    const std::string verb = absl::AsciiStrToLower(path.substr(colon + 1));
    std::optional<ModelSpecRef> spec = ParseModelPath(path.substr(0, colon));
    if (!spec.has_value() || (verb != "predict" && verb != "classify" && verb != "regress" &&
                              verb != "explain")) {
      return Malformed(request);
    }
    const int64_t start_ns = NowNanos();
    absl::StatusCode code = absl::StatusCode::kOk;
    auto fail = [&code](const absl::Status& status) {
      code = status.code();
      return ErrorResponse(status);
    };
    // The version and signature the request resolved to, for the per-signature latency.
    std::string signature;
    int64_t version = 0;
    auto resolve = [&](const ServableVersion& servable, absl::string_view name) {
      auto found = FindServingSignature(servable.model(), name);
      if (!found.ok()) return;
      signature = (*found)->key;
      version = servable.version();
    };
    HttpResponse response = [&]() -> HttpResponse {
      auto servable = core_->Lookup(*spec);
      if (!servable.ok()) return fail(servable.status());
      if (verb == "explain") {
        ExplainLimits limits;
        limits.max_evaluations = explain_max_evaluations_;
        // Each model call must fit one batch of the batcher, which refuses larger ones.
        if ((*servable)->batching().has_value()) {
          limits.batch_rows =
              std::min<int64_t>(limits.batch_rows, (*servable)->batching()->max_batch_size);
        }
        auto body = ExplainJson(**servable, request.body, limits);
        if (!body.ok()) return fail(body.status());
        return JsonResponse(std::move(*body));
      }
      if (verb == "predict") {
        const runtime::Model& model = (*servable)->model();
        auto parsed = ParsePredictRequest(request.body, [&](absl::string_view name) {
          return FindServingSignature(model, name);
        });
        if (!parsed.ok()) return fail(parsed.status());
        resolve(**servable, parsed->signature_name);
        // logging_config: the request as the PredictRequest TF Serving's REST API builds.
        std::shared_ptr<RequestLogger> logger =
            loggers_ != nullptr ? loggers_->SampledLogger(spec->name) : nullptr;
        tensorflow::serving::PredictionLog log;
        if (logger != nullptr) {
          auto* logged = log.mutable_predict_log()->mutable_request();
          logged->mutable_model_spec()->set_name(spec->name);
          if (spec->version.has_value()) {
            logged->mutable_model_spec()->mutable_version()->set_value(*spec->version);
          }
          if (!spec->label.empty()) logged->mutable_model_spec()->set_version_label(spec->label);
          logged->mutable_model_spec()->set_signature_name(parsed->signature_name);
          for (const auto& [key, tensor] : parsed->inputs) {
            TensorToProto(tensor, &(*logged->mutable_inputs())[key]);
          }
        }
        auto result = RunPredict(**servable, parsed->signature_name, std::move(parsed->inputs), {});
        if (!result.ok()) return fail(result.status());
        if (logger != nullptr) {
          auto* logged = log.mutable_predict_log()->mutable_response();
          for (const std::string& key : result->output_order) {
            TensorToProto(result->outputs.at(key), &(*logged->mutable_outputs())[key]);
          }
          logged->mutable_model_spec()->set_name((*servable)->name());
          logged->mutable_model_spec()->mutable_version()->set_value((*servable)->version());
          logged->mutable_model_spec()->set_signature_name(result->signature->key);
          const tensorflow::serving::ModelSpec answered = logged->model_spec();
          logger->Log(std::move(log), answered);
        }
        auto body = WritePredictResponse(result->outputs, result->output_order, parsed->format);
        if (!body.ok()) return fail(body.status());
        return JsonResponse(std::move(*body));
      }
      auto parsed = ParseExamplesRequest(request.body);
      if (!parsed.ok()) return fail(parsed.status());
      resolve(**servable, parsed->signature_name);
      const tensorflow::serving::Input input = InputFromJson(*parsed);
      // logging_config: the request and result as the ClassifyRequest / RegressRequest and
      // response TF Serving's REST API converts them to.
      std::shared_ptr<RequestLogger> logger =
          loggers_ != nullptr ? loggers_->SampledLogger(spec->name) : nullptr;
      auto log_request = [&](tensorflow::serving::ModelSpec* requested,
                             tensorflow::serving::Input* logged_input,
                             tensorflow::serving::ModelSpec* answered) {
        requested->set_name(spec->name);
        if (spec->version.has_value()) requested->mutable_version()->set_value(*spec->version);
        if (!spec->label.empty()) requested->set_version_label(spec->label);
        requested->set_signature_name(parsed->signature_name);
        *logged_input = input;
        answered->set_name((*servable)->name());
        answered->mutable_version()->set_value((*servable)->version());
        answered->set_signature_name(signature);
      };
      std::string out = "{\"results\": [";
      if (verb == "classify") {
        auto result = RunClassify(**servable, parsed->signature_name, input);
        if (!result.ok()) return fail(result.status());
        if (logger != nullptr) {
          tensorflow::serving::PredictionLog log;
          auto* logged = log.mutable_classify_log();
          log_request(logged->mutable_request()->mutable_model_spec(),
                      logged->mutable_request()->mutable_input(),
                      logged->mutable_response()->mutable_model_spec());
          *logged->mutable_response()->mutable_result() = *result;
          const tensorflow::serving::ModelSpec answered = logged->response().model_spec();
          logger->Log(std::move(log), answered);
        }
        for (int i = 0; i < result->classifications_size(); ++i) {
          if (i) out.append(", ");
          out.push_back('[');
          const auto& classes = result->classifications(i).classes();
          for (int c = 0; c < classes.size(); ++c) {
            if (c) out.append(", ");
            out.push_back('[');
            AppendJsonString(classes[c].label(), &out);
            out.append(", ");
            AppendFloatJson(classes[c].score(), &out);
            out.push_back(']');
          }
          out.push_back(']');
        }
      } else {
        auto result = RunRegress(**servable, parsed->signature_name, input);
        if (!result.ok()) return fail(result.status());
        if (logger != nullptr) {
          tensorflow::serving::PredictionLog log;
          auto* logged = log.mutable_regress_log();
          log_request(logged->mutable_request()->mutable_model_spec(),
                      logged->mutable_request()->mutable_input(),
                      logged->mutable_response()->mutable_model_spec());
          *logged->mutable_response()->mutable_result() = *result;
          const tensorflow::serving::ModelSpec answered = logged->response().model_spec();
          logger->Log(std::move(log), answered);
        }
        for (int i = 0; i < result->regressions_size(); ++i) {
          if (i) out.append(", ");
          AppendFloatJson(result->regressions(i).value(), &out);
        }
      }
      out.append("]}");
      return JsonResponse(std::move(out));
    }();
    if (metrics_ != nullptr) {
      metrics_->request_count.Increment({spec->name, StatusCodeName(code)});
      const double micros = (NowNanos() - start_ns) / 1e3;
      metrics_->request_latency.Observe({spec->name, verb, "REST"}, micros);
      if (!signature.empty()) {
        metrics_->signature_request_latency.Observe(
            {spec->name, std::to_string(version), signature, verb, "REST"}, micros);
      }
    }
    return response;
  }
  if (request.method != "GET") return Malformed(request);
  bool metadata = false;
  if (absl::EndsWithIgnoreCase(path, "/metadata")) {
    metadata = true;
    path.remove_suffix(strlen("/metadata"));
  }
  if (path.find(':') != absl::string_view::npos) return Malformed(request);
  std::optional<ModelSpecRef> spec = ParseModelPath(path);
  if (!spec.has_value()) return Malformed(request);
  if (metadata) {
    auto servable = core_->Lookup(*spec);
    if (!servable.ok()) return ErrorResponse(servable.status());
    return JsonResponse(MetadataJson(**servable));
  }
  std::optional<int64_t> version = spec->version;
  if (!spec->label.empty()) {
    auto resolved = core_->ResolveLabel(spec->name, spec->label);
    if (!resolved.ok()) return ErrorResponse(resolved.status());
    version = *resolved;
  }
  auto status = core_->GetStatus(spec->name, version);
  if (!status.ok()) return ErrorResponse(status.status());
  return JsonResponse(StatusJson(*status));
}

HttpResponse RestHandler::HandleV2(const HttpRequest& request, absl::string_view path) const {
  if (request.method == "GET" && path == "/health/live") return JsonResponse("{\"live\": true}");
  if (request.method == "GET" && path == "/health/ready") {
    if (core_->AllModelsAvailable()) return JsonResponse("{\"ready\": true}");
    HttpResponse response = JsonResponse("{\"ready\": false}");
    response.status = 503;
    return response;
  }
  if (request.method == "GET" && (path.empty() || path == "/")) {
    return JsonResponse("{\"name\": \"kiln\", \"version\": \"1\", \"extensions\": []}");
  }
  if (!absl::ConsumePrefix(&path, "/models/")) return Malformed(request);
  std::string action;
  for (const char* suffix : {"/ready", "/infer"}) {
    if (absl::EndsWith(path, suffix)) {
      action = suffix + 1;
      path.remove_suffix(strlen(suffix));
      break;
    }
  }
  std::optional<ModelSpecRef> spec = ParseModelPath(path);
  if (!spec.has_value() || !spec->label.empty()) return Malformed(request);
  const bool post = request.method == "POST";
  if ((action == "infer") != post) return Malformed(request);
  auto servable = core_->Lookup(*spec);
  if (action == "ready") {
    if (!servable.ok()) {
      HttpResponse response = ErrorResponse(servable.status());
      return response;
    }
    std::string out = "{\"name\": ";
    AppendJsonString(spec->name, &out);
    out.append(", \"ready\": true}");
    return JsonResponse(std::move(out));
  }
  if (!servable.ok()) return ErrorResponse(servable.status());
  const runtime::Model& model = (*servable)->model();
  auto signature = FindServingSignature(model, kDefaultSignature);
  if (!signature.ok()) return ErrorResponse(signature.status());
  const std::string version = std::to_string((*servable)->version());
  if (action.empty()) {
    std::string out = "{\"name\": ";
    AppendJsonString(spec->name, &out);
    absl::StrAppend(&out, ", \"versions\": [\"", version, "\"], \"platform\": \"",
                    model.platform() == "onnx" ? "onnxruntime_onnx" : "tensorflow_savedmodel",
                    "\"");
    for (const auto* side : {&(*signature)->inputs, &(*signature)->outputs}) {
      out.append(side == &(*signature)->inputs ? ", \"inputs\": [" : ", \"outputs\": [");
      bool first = true;
      for (const auto& [key, info] : *side) {
        if (!first) out.append(", ");
        first = false;
        out.append("{\"name\": ");
        AppendJsonString(key, &out);
        absl::StrAppend(&out, ", \"datatype\": \"", V2DatatypeName(info.dtype), "\", \"shape\": [");
        for (size_t d = 0; d < info.shape.size(); ++d) {
          absl::StrAppend(&out, d ? ", " : "", info.shape[d]);
        }
        out.append("]}");
      }
      out.push_back(']');
    }
    out.push_back('}');
    return JsonResponse(std::move(out));
  }
  const int64_t start_ns = NowNanos();
  // The binary tensor extension: Inference-Header-Content-Length is the JSON header's size,
  // the tensors' bytes follow it.
  absl::string_view json = request.body, binary;
  if (absl::string_view header = FindHeader(request, kInferenceHeaderContentLength);
      !header.empty()) {
    size_t length;
    if (!absl::SimpleAtoi(header, &length) || length > request.body.size()) {
      return ErrorResponse(absl::InvalidArgumentError(
          absl::StrCat(kInferenceHeaderContentLength, " \"", header, "\" is not a size within the ",
                       request.body.size(), "-byte body")));
    }
    binary = json.substr(length);
    json = json.substr(0, length);
  }
  auto parsed = ParseV2InferRequest(json, **signature, binary);
  if (!parsed.ok()) return ErrorResponse(parsed.status());
  auto result = RunPredict(**servable, kDefaultSignature, std::move(parsed->inputs),
                           parsed->requested_outputs);
  if (metrics_ != nullptr) {
    metrics_->request_count.Increment(
        {spec->name, StatusCodeName(result.ok() ? absl::StatusCode::kOk : result.status().code())});
    const double micros = (NowNanos() - start_ns) / 1e3;
    metrics_->request_latency.Observe({spec->name, "predict", "REST"}, micros);
    metrics_->signature_request_latency.Observe(
        {spec->name, version, (*signature)->key, "predict", "REST"}, micros);
  }
  if (!result.ok()) return ErrorResponse(result.status());
  std::string out = "{\"model_name\": ";
  AppendJsonString(spec->name, &out);
  absl::StrAppend(&out, ", \"model_version\": \"", version, "\"");
  if (!parsed->id.empty()) {
    out.append(", \"id\": ");
    AppendJsonString(parsed->id, &out);
  }
  out.append(", \"outputs\": [");
  std::string binary_out;
  bool any_binary = false;
  for (size_t i = 0; i < result->output_order.size(); ++i) {
    const std::string& key = result->output_order[i];
    const Tensor& tensor = result->outputs.at(key);
    if (i) out.append(", ");
    out.append("{\"name\": ");
    AppendJsonString(key, &out);
    absl::StrAppend(&out, ", \"datatype\": \"", V2DatatypeName(tensor.dtype()), "\", \"shape\": [");
    for (int d = 0; d < tensor.rank(); ++d) absl::StrAppend(&out, d ? ", " : "", tensor.dim(d));
    if (parsed->OutputIsBinary(key)) {
      const std::string bytes = TensorToRawBytes(tensor);
      absl::StrAppend(&out, "], \"parameters\": {\"binary_data_size\": ", bytes.size(), "}}");
      binary_out.append(bytes);
      any_binary = true;
      continue;
    }
    out.append("], \"data\": ");
    auto flat = tensor.Reshape(Shape{tensor.num_elements()});
    AppendTensorJson(flat.ok() ? *flat : tensor, false, &out);
    out.push_back('}');
  }
  out.append("]}");
  if (!any_binary) return JsonResponse(std::move(out));
  HttpResponse response;
  response.content_type = "application/octet-stream";
  response.headers.emplace_back(kInferenceHeaderContentLength, std::to_string(out.size()));
  response.body = std::move(out);
  response.body.append(binary_out);
  return response;
}

}  // namespace kiln::serving
