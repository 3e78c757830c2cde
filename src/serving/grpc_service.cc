#include "kiln/serving/grpc_service.h"

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"
#include "kiln/core/status.h"
#include "kiln/serving/deadline.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/request_logger.h"
#include "kiln/serving/tensor_proto.h"
#include "tensorflow_serving/apis/signature_def_map_wire.pb.h"

namespace kiln::serving {

using namespace tensorflow::serving;  // NOLINT: the service's message types

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::StatusOr<ModelSpecRef> SpecFromProto(const ModelSpec& spec) {
  if (spec.name().empty()) return absl::InvalidArgumentError("Missing ModelSpec");
  ModelSpecRef ref;
  ref.name = spec.name();
  if (spec.has_version()) ref.version = spec.version().value();
  if (spec.version_choice_case() == ModelSpec::kVersionLabel) ref.label = spec.version_label();
  return ref;
}

namespace {

absl::StatusOr<std::shared_ptr<const ServableVersion>> LookupProto(ServerCore* core,
                                                                   const ModelSpec& spec) {
  KILN_ASSIGN_OR_RETURN(ModelSpecRef ref, SpecFromProto(spec));
  return core->Lookup(ref);
}

// The version and the key of the signature `name` names ("" = serving_default) in
// `servable`, when the signature exists: the labels of the per-signature latency.
struct Resolved {
  std::string version;
  std::string signature;
};
void Resolve(const ServableVersion& servable, const std::string& name, Resolved* out) {
  auto found = FindServingSignature(servable.model(), name);
  if (!found.ok()) return;
  out->version = std::to_string(servable.version());
  out->signature = (*found)->key;
}

// The client's deadline; none for an in-process call without a context (tests make those).
int64_t DeadlineOf(const grpc::ServerContext* context) {
  return context == nullptr ? 0 : RequestDeadlineScope::FromSystemDeadline(context->deadline());
}

// logging_config: a sampled share of the model's successful requests, with the spec they were
// answered with (the version and signature they resolved to).
template <typename Fill>
void LogRequest(RequestLoggers* loggers, const std::string& model, const ModelSpec& spec,
                Fill&& fill) {
  if (loggers == nullptr) return;
  std::shared_ptr<RequestLogger> logger = loggers->SampledLogger(model);
  if (logger == nullptr) return;
  PredictionLog log;
  fill(&log);
  logger->Log(std::move(log), spec);
}

void FillSpec(const ServableVersion& servable, const std::string& signature, ModelSpec* spec) {
  spec->set_name(servable.name());
  spec->mutable_version()->set_value(servable.version());
  spec->set_signature_name(signature);
}

}  // namespace

void PredictionServiceImpl::Record(const std::string& model, const char* api,
                                   const absl::Status& status, int64_t start_ns,
                                   const std::string& version, const std::string& signature) {
  if (metrics_ == nullptr) return;
  const double micros = (NowNanos() - start_ns) / 1e3;
  metrics_->request_count.Increment({model, StatusCodeName(status.code())});
  metrics_->request_latency.Observe({model, api, "GRPC"}, micros);
  if (!signature.empty()) {
    metrics_->signature_request_latency.Observe({model, version, signature, api, "GRPC"}, micros);
  }
}

// The RPC is counted and bounded by the client's deadline; the servable that the request's
// model_spec names is looked up and its signature resolved (the latency's labels); `run` answers;
// the latency is recorded and a sampled successful request logged with its response.
template <typename Request, typename Response, typename Run, typename LogOf>
grpc::Status PredictionServiceImpl::ServeModelSpec(grpc::ServerContext* context, const char* api,
                                                   const Request* request, Response* response,
                                                   Run&& run, LogOf&& log_of) {
  RpcCounter::Scope rpc(counter_);
  // The client's deadline bounds the run and its wait in a batch queue (deadline.h).
  RequestDeadlineScope deadline(DeadlineOf(context));
  const int64_t start_ns = NowNanos();
  const ModelSpec& spec = request->model_spec();
  Resolved resolved;
  const absl::Status status = GuardedRpc([&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto servable, LookupProto(core_, spec));
    Resolve(*servable, spec.signature_name(), &resolved);
    return run(*servable);
  });
  Record(spec.name(), api, status, start_ns, resolved.version, resolved.signature);
  if (status.ok()) {
    LogRequest(loggers_, spec.name(), response->model_spec(), [&](PredictionLog* log) {
      auto* entry = log_of(log);
      *entry->mutable_request() = *request;
      *entry->mutable_response() = *response;
    });
  }
  return ToGrpcStatus(status);
}

grpc::Status PredictionServiceImpl::Predict(grpc::ServerContext* context,
                                            const PredictRequest* request,
                                            PredictResponse* response) {
  return ServeModelSpec(
      context, "predict", request, response,
      [&](const ServableVersion& servable) -> absl::Status {
        std::map<std::string, Tensor> inputs;
        // A single value fills the shape the client sends: held to the budget a run has.
        const size_t budget = core_->options().model_options.run_memory_budget_bytes;
        for (const auto& [key, proto] : request->inputs()) {
          KILN_ASSIGN_OR_RETURN(inputs[key], TensorFromProto(proto, key, budget));
        }
        std::vector<std::string> filter(request->output_filter().begin(),
                                        request->output_filter().end());
        KILN_ASSIGN_OR_RETURN(PredictResult result,
                              RunPredict(servable, request->model_spec().signature_name(),
                                         std::move(inputs), filter));
        const bool as_content = core_->options().enable_serialization_as_tensor_content;
        for (const std::string& key : result.output_order) {
          tensorflow::TensorProto& out = (*response->mutable_outputs())[key];
          if (as_content) {
            out = ToTensorProto(result.outputs.at(key));  // TF's Tensor::AsProtoTensorContent
          } else {
            TensorToProto(result.outputs.at(key), &out);
          }
        }
        FillSpec(servable, result.signature->key, response->mutable_model_spec());
        return absl::OkStatus();
      },
      [](PredictionLog* log) { return log->mutable_predict_log(); });
}

grpc::Status PredictionServiceImpl::Classify(grpc::ServerContext* context,
                                             const ClassificationRequest* request,
                                             ClassificationResponse* response) {
  return ServeModelSpec(
      context, "classify", request, response,
      [&](const ServableVersion& servable) -> absl::Status {
        const std::string& name = request->model_spec().signature_name();
        KILN_ASSIGN_OR_RETURN(*response->mutable_result(),
                              RunClassify(servable, name, request->input()));
        FillSpec(servable, name.empty() ? kDefaultSignature : name, response->mutable_model_spec());
        return absl::OkStatus();
      },
      [](PredictionLog* log) { return log->mutable_classify_log(); });
}

grpc::Status PredictionServiceImpl::Regress(grpc::ServerContext* context,
                                            const RegressionRequest* request,
                                            RegressionResponse* response) {
  return ServeModelSpec(
      context, "regress", request, response,
      [&](const ServableVersion& servable) -> absl::Status {
        const std::string& name = request->model_spec().signature_name();
        KILN_ASSIGN_OR_RETURN(*response->mutable_result(),
                              RunRegress(servable, name, request->input()));
        FillSpec(servable, name.empty() ? kDefaultSignature : name, response->mutable_model_spec());
        return absl::OkStatus();
      },
      [](PredictionLog* log) { return log->mutable_regress_log(); });
}

grpc::Status PredictionServiceImpl::MultiInference(grpc::ServerContext* context,
                                                   const MultiInferenceRequest* request,
                                                   MultiInferenceResponse* response) {
  RpcCounter::Scope rpc(counter_);
  // The client's deadline bounds the run and its wait in a batch queue (deadline.h).
  RequestDeadlineScope deadline(DeadlineOf(context));
  const int64_t start_ns = NowNanos();
  std::string model;
  const absl::Status status = GuardedRpc([&]() -> absl::Status {
    if (request->tasks().empty()) return absl::InvalidArgumentError("Empty tasks list");
    model = request->tasks(0).model_spec().name();
    KILN_ASSIGN_OR_RETURN(auto servable, LookupProto(core_, request->tasks(0).model_spec()));
    KILN_ASSIGN_OR_RETURN(*response, RunMultiInference(*servable, *request));
    return absl::OkStatus();
  });
  Record(model, "multi_inference", status, start_ns);
  if (status.ok()) {
    LogRequest(loggers_, model, request->tasks(0).model_spec(), [&](PredictionLog* log) {
      *log->mutable_multi_inference_log()->mutable_request() = *request;
      *log->mutable_multi_inference_log()->mutable_response() = *response;
    });
  }
  return ToGrpcStatus(status);
}

grpc::Status PredictionServiceImpl::GetModelMetadata(grpc::ServerContext*,
                                                     const GetModelMetadataRequest* request,
                                                     GetModelMetadataResponse* response) {
  RpcCounter::Scope rpc(counter_);
  const absl::Status status = GuardedRpc([&]() -> absl::Status {
    if (request->metadata_field().empty()) {
      return absl::InvalidArgumentError(
          "GetModelMetadataRequest must specify at least one metadata_field");
    }
    for (const std::string& field : request->metadata_field()) {
      if (field != "signature_def") {
        return absl::InvalidArgumentError(
            absl::StrCat("Metadata field ", field, " is not supported"));
      }
    }
    KILN_ASSIGN_OR_RETURN(auto servable, LookupProto(core_, request->model_spec()));
    kiln::serving_wire::SignatureDefMapWire map;
    std::map<std::string, runtime::SignatureInfo> signatures =
        servable->metadata_only_signatures();
    for (const auto& [key, signature] : servable->model().signatures()) {
      signatures.insert_or_assign(key, signature);
    }
    for (const auto& [key, signature] : signatures) {
      auto& def = (*map.mutable_signature_def())[key];
      def.set_method_name(signature.method_name);
      for (const auto* side : {&signature.inputs, &signature.outputs}) {
        auto* out = side == &signature.inputs ? def.mutable_inputs() : def.mutable_outputs();
        for (const auto& [name, info] : *side) {
          auto& wire = (*out)[name];
          wire.set_name(info.name);
          wire.set_dtype(ToTfDataType(info.dtype));
          ShapeToProto(info.rank_known, info.shape, wire.mutable_tensor_shape());
        }
      }
    }
    auto& any = (*response->mutable_metadata())["signature_def"];
    any.set_type_url("type.googleapis.com/tensorflow.serving.SignatureDefMap");
    any.set_value(map.SerializeAsString());
    response->mutable_model_spec()->set_name(servable->name());
    response->mutable_model_spec()->mutable_version()->set_value(servable->version());
    return absl::OkStatus();
  });
  return ToGrpcStatus(status);
}

grpc::Status ModelServiceImpl::GetModelStatus(grpc::ServerContext*,
                                              const GetModelStatusRequest* request,
                                              GetModelStatusResponse* response) {
  RpcCounter::Scope rpc(counter_);
  const absl::Status status = GuardedRpc([&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(ModelSpecRef ref, SpecFromProto(request->model_spec()));
    std::optional<int64_t> version = ref.version;
    if (!ref.label.empty()) {
      KILN_ASSIGN_OR_RETURN(int64_t resolved, core_->ResolveLabel(ref.name, ref.label));
      version = resolved;
    }
    KILN_ASSIGN_OR_RETURN(auto versions, core_->GetStatus(ref.name, version));
    for (const VersionStatus& v : versions) {
      auto* out = response->add_model_version_status();
      out->set_version(v.version);
      out->set_state(v.state);
      out->mutable_status()->set_error_code(static_cast<int>(v.status.code()));
      out->mutable_status()->set_error_message(std::string(v.status.message()));
    }
    return absl::OkStatus();
  });
  return ToGrpcStatus(status);
}

grpc::Status ModelServiceImpl::HandleReloadConfigRequest(grpc::ServerContext*,
                                                         const ReloadConfigRequest* request,
                                                         ReloadConfigResponse* response) {
  RpcCounter::Scope rpc(counter_);
  absl::Status status = core_->ReloadConfig(request->config());
  if (status.ok() && loggers_ != nullptr) status = loggers_->Configure(request->config());
  response->mutable_status()->set_error_code(static_cast<int>(status.code()));
  response->mutable_status()->set_error_message(std::string(status.message()));
  return ToGrpcStatus(status);
}

}  // namespace kiln::serving
