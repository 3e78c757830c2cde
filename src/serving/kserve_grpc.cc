#include "kiln/serving/kserve_grpc.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"
#include "kiln/core/status.h"
#include "kiln/serving/deadline.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/json_tensor.h"

namespace kiln::serving {

using inference::InferTensorContents;

namespace {

template <typename T, typename Field>
absl::StatusOr<Tensor> FromField(const std::string& name, DType dtype,
                                 const std::vector<int64_t>& dims, const Field& field) {
  auto count = CheckedNumElements(dims);
  if (!count.ok() || *count != field.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "': shape ", Shape(dims).ToString(), " needs ",
                     count.ok() ? *count : -1, " values, contents has ", field.size()));
  }
  KILN_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, Shape(dims)));
  T* out = tensor.data<T>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field.Get(i));
  return tensor;
}

absl::StatusOr<Tensor> FromContents(const std::string& name, DType dtype,
                                    const std::vector<int64_t>& dims,
                                    const InferTensorContents& c) {
  switch (dtype) {
    case DType::kBool:
      return FromField<bool>(name, dtype, dims, c.bool_contents());
    case DType::kInt8:
      return FromField<int8_t>(name, dtype, dims, c.int_contents());
    case DType::kInt16:
      return FromField<int16_t>(name, dtype, dims, c.int_contents());
    case DType::kInt32:
      return FromField<int32_t>(name, dtype, dims, c.int_contents());
    case DType::kInt64:
      return FromField<int64_t>(name, dtype, dims, c.int64_contents());
    case DType::kUInt8:
      return FromField<uint8_t>(name, dtype, dims, c.uint_contents());
    case DType::kUInt16:
      return FromField<uint16_t>(name, dtype, dims, c.uint_contents());
    case DType::kUInt32:
      return FromField<uint32_t>(name, dtype, dims, c.uint_contents());
    case DType::kUInt64:
      return FromField<uint64_t>(name, dtype, dims, c.uint64_contents());
    case DType::kFloat32:
      return FromField<float>(name, dtype, dims, c.fp32_contents());
    case DType::kFloat64:
      return FromField<double>(name, dtype, dims, c.fp64_contents());
    case DType::kString:
      return FromField<std::string>(name, dtype, dims, c.bytes_contents());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "': ", V2DatatypeName(dtype),
                       " has no typed contents field; send it in raw_input_contents"));
  }
}

template <typename T, typename Field>
void ToField(const Tensor& tensor, Field* field) {
  const T* values = tensor.data<T>();
  field->Reserve(static_cast<int>(tensor.num_elements()));
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    if constexpr (std::is_same_v<T, std::string>) {
      field->Add()->assign(values[i]);  // RepeatedPtrField<std::string> has no Add(const&)
    } else {
      field->Add(values[i]);
    }
  }
}

// False when the dtype has no typed field (FP16, BF16): then the caller sends raw bytes.
bool ToContents(const Tensor& tensor, InferTensorContents* c) {
  switch (tensor.dtype()) {
    case DType::kBool:
      ToField<bool>(tensor, c->mutable_bool_contents());
      return true;
    case DType::kInt8:
      ToField<int8_t>(tensor, c->mutable_int_contents());
      return true;
    case DType::kInt16:
      ToField<int16_t>(tensor, c->mutable_int_contents());
      return true;
    case DType::kInt32:
      ToField<int32_t>(tensor, c->mutable_int_contents());
      return true;
    case DType::kInt64:
      ToField<int64_t>(tensor, c->mutable_int64_contents());
      return true;
    case DType::kUInt8:
      ToField<uint8_t>(tensor, c->mutable_uint_contents());
      return true;
    case DType::kUInt16:
      ToField<uint16_t>(tensor, c->mutable_uint_contents());
      return true;
    case DType::kUInt32:
      ToField<uint32_t>(tensor, c->mutable_uint_contents());
      return true;
    case DType::kUInt64:
      ToField<uint64_t>(tensor, c->mutable_uint64_contents());
      return true;
    case DType::kFloat32:
      ToField<float>(tensor, c->mutable_fp32_contents());
      return true;
    case DType::kFloat64:
      ToField<double>(tensor, c->mutable_fp64_contents());
      return true;
    case DType::kString:
      ToField<std::string>(tensor, c->mutable_bytes_contents());
      return true;
    default:
      return false;
  }
}

// name + version string ("" = latest) as a lookup spec.
absl::StatusOr<ModelSpecRef> Spec(const std::string& name, const std::string& version) {
  if (name.empty()) return absl::InvalidArgumentError("the request names no model");
  ModelSpecRef spec;
  spec.name = name;
  if (!version.empty()) {
    int64_t number;
    if (!absl::SimpleAtoi(version, &number)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model version \"", version, "\" is not a version number"));
    }
    spec.version = number;
  }
  return spec;
}

}  // namespace

grpc::Status KServeGrpcService::ServerLive(grpc::ServerContext*,
                                           const inference::ServerLiveRequest*,
                                           inference::ServerLiveResponse* response) {
  response->set_live(true);
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ServerReady(grpc::ServerContext*,
                                            const inference::ServerReadyRequest*,
                                            inference::ServerReadyResponse* response) {
  const bool draining = draining_ != nullptr && draining_->load();
  response->set_ready(!draining && core_->AllModelsAvailable());
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ModelReady(grpc::ServerContext*,
                                           const inference::ModelReadyRequest* request,
                                           inference::ModelReadyResponse* response) {
  RpcCounter::Scope rpc(counter_);
  auto spec = Spec(request->name(), request->version());
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  auto servable = core_->Lookup(*spec);
  if (servable.ok()) {
    response->set_ready(true);
    return grpc::Status::OK;
  }
  // A configured model without that version available is "not ready"; a model this server
  // does not know is an error, as on REST's /v2/models/<m>/ready.
  for (const std::string& name : core_->ModelNames()) {
    if (name == request->name()) {
      response->set_ready(false);
      return grpc::Status::OK;
    }
  }
  return ToGrpcStatus(servable.status());
}

grpc::Status KServeGrpcService::ServerMetadata(grpc::ServerContext*,
                                               const inference::ServerMetadataRequest*,
                                               inference::ServerMetadataResponse* response) {
  // The same answer as REST's GET /v2.
  response->set_name("kiln");
  response->set_version("1");
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ModelMetadata(grpc::ServerContext*,
                                              const inference::ModelMetadataRequest* request,
                                              inference::ModelMetadataResponse* response) {
  RpcCounter::Scope rpc(counter_);
  const absl::Status status = GuardedRpc([&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(ModelSpecRef spec, Spec(request->name(), request->version()));
    KILN_ASSIGN_OR_RETURN(auto servable, core_->Lookup(spec));
    const runtime::Model& model = servable->model();
    KILN_ASSIGN_OR_RETURN(const SignatureInfo* signature,
                          FindServingSignature(model, kDefaultSignature));
    response->set_name(spec.name);
    response->add_versions(std::to_string(servable->version()));
    response->set_platform(model.platform() == "onnx" ? "onnxruntime_onnx"
                                                      : "tensorflow_savedmodel");
    for (const auto* side : {&signature->inputs, &signature->outputs}) {
      for (const auto& [key, info] : *side) {
        auto* out = side == &signature->inputs ? response->add_inputs() : response->add_outputs();
        out->set_name(key);
        out->set_datatype(std::string(V2DatatypeName(info.dtype)));
        for (int64_t d : info.shape) out->add_shape(d);
      }
    }
    return absl::OkStatus();
  });
  return ToGrpcStatus(status);
}

grpc::Status KServeGrpcService::ModelInfer(grpc::ServerContext* context,
                                           const inference::ModelInferRequest* request,
                                           inference::ModelInferResponse* response) {
  RpcCounter::Scope rpc(counter_);
  // None for an in-process call without a context.
  RequestDeadlineScope deadline(
      context == nullptr ? 0 : RequestDeadlineScope::FromSystemDeadline(context->deadline()));
  const int64_t start_ns = NowNanos();
  std::string version, signature_key;
  const absl::Status status = GuardedRpc([&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(ModelSpecRef spec, Spec(request->model_name(), request->model_version()));
    KILN_ASSIGN_OR_RETURN(auto servable, core_->Lookup(spec));
    version = std::to_string(servable->version());
    const bool raw = request->raw_input_contents_size() > 0;
    if (raw && request->raw_input_contents_size() != request->inputs_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_input_contents has ", request->raw_input_contents_size(),
                       " entries for ", request->inputs_size(), " inputs; it needs one per input"));
    }
    std::map<std::string, Tensor> inputs;
    for (int i = 0; i < request->inputs_size(); ++i) {
      const auto& input = request->inputs(i);
      KILN_ASSIGN_OR_RETURN(DType dtype, V2DatatypeFromName(input.datatype()));
      std::vector<int64_t> dims(input.shape().begin(), input.shape().end());
      for (int64_t d : dims) {
        if (d < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("input '", input.name(), "': shape entries must be non-negative"));
        }
      }
      if (raw && input.has_contents()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input.name(),
            "' has contents although raw_input_contents is used (the protocol allows one form)"));
      }
      KILN_ASSIGN_OR_RETURN(
          Tensor tensor,
          raw ? TensorFromRawBytes(input.name(), dtype, dims, request->raw_input_contents(i))
              : FromContents(input.name(), dtype, dims, input.contents()));
      if (!inputs.emplace(input.name(), std::move(tensor)).second) {
        return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' is repeated"));
      }
    }
    std::vector<std::string> requested;
    for (const auto& output : request->outputs()) requested.push_back(output.name());
    KILN_ASSIGN_OR_RETURN(PredictResult result,
                          RunPredict(*servable, kDefaultSignature, std::move(inputs), requested));
    signature_key = result.signature->key;
    response->set_model_name(servable->name());
    response->set_model_version(version);
    response->set_id(request->id());
    // Raw replies to raw requests; once one output needs raw bytes (FP16/BF16), all are raw,
    // since the protocol does not mix the two forms in one message.
    bool raw_reply = raw;
    for (const std::string& key : result.output_order) {
      const DType dtype = result.outputs.at(key).dtype();
      raw_reply |= dtype == DType::kFloat16 || dtype == DType::kBFloat16;
    }
    for (const std::string& key : result.output_order) {
      const Tensor& tensor = result.outputs.at(key);
      auto* out = response->add_outputs();
      out->set_name(key);
      out->set_datatype(std::string(V2DatatypeName(tensor.dtype())));
      for (int d = 0; d < tensor.rank(); ++d) out->add_shape(tensor.dim(d));
      if (raw_reply) {
        response->add_raw_output_contents(TensorToRawBytes(tensor));
      } else {
        ToContents(tensor, out->mutable_contents());
      }
    }
    return absl::OkStatus();
  });
  if (metrics_ != nullptr) {
    const std::string& model = request->model_name();
    metrics_->request_count.Increment({model, StatusCodeName(status.code())});
    const double micros = (NowNanos() - start_ns) / 1e3;
    metrics_->request_latency.Observe({model, "predict", "GRPC"}, micros);
    if (!signature_key.empty()) {
      metrics_->signature_request_latency.Observe(
          {model, version, signature_key, "predict", "GRPC"}, micros);
    }
  }
  return ToGrpcStatus(status);
}

}  // namespace kiln::serving
