#include "kiln/serving/inference.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/core/status.h"
#include "kiln/data/formats/tfrecord.h"
#include "kiln/serving/tensor_proto.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace kiln::serving {

using tensorflow::serving::ClassificationResult;
using tensorflow::serving::Input;
using tensorflow::serving::RegressionResult;

absl::StatusOr<const runtime::SignatureInfo*> FindServingSignature(const runtime::Model& model,
                                                                   absl::string_view name) {
  const std::string key = name.empty() ? std::string(kDefaultSignature) : std::string(name);
  auto it = model.signatures().find(key);
  if (it == model.signatures().end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Serving signature key \"", key, "\" not found."));
  }
  return &it->second;
}

namespace {

std::string KeySet(const std::set<std::string>& keys) {
  return absl::StrCat("{", absl::StrJoin(keys, ","), "}");
}

}  // namespace

absl::StatusOr<PredictResult> RunPredict(const ServableVersion& servable,
                                         absl::string_view signature_name,
                                         std::map<std::string, Tensor> inputs,
                                         const std::vector<std::string>& output_filter) {
  PredictResult result;
  KILN_ASSIGN_OR_RETURN(result.signature, FindServingSignature(servable.model(), signature_name));
  const runtime::SignatureInfo& signature = *result.signature;
  std::set<std::string> sent, required, extra, missing;
  for (const auto& [key, tensor] : inputs) sent.insert(key);
  for (const auto& [key, info] : signature.inputs) required.insert(key);
  std::set_difference(sent.begin(), sent.end(), required.begin(), required.end(),
                      std::inserter(extra, extra.end()));
  std::set_difference(required.begin(), required.end(), sent.begin(), sent.end(),
                      std::inserter(missing, missing.end()));
  if (!extra.empty() || !missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input size does not match signature: ", sent.size(), "!=", required.size(), " len(",
        KeySet(sent), ") != len(", KeySet(required), "). Sent extra: ", KeySet(extra),
        ". Missing but required: ", KeySet(missing), "."));
  }
  for (const auto& [key, tensor] : inputs) {
    const DType expected = signature.inputs.at(key).dtype;
    if (expected != DType::kInvalid && tensor.dtype() != expected) {
      return absl::InvalidArgumentError(absl::StrCat("input '", key, "': expects dtype ",
                                                     DTypeName(expected), " but ",
                                                     DTypeName(tensor.dtype()), " is provided"));
    }
  }
  if (output_filter.empty()) {
    result.output_order = signature.output_keys;
  } else {
    std::set<std::string> seen;
    for (const std::string& key : output_filter) {
      if (signature.outputs.count(key) == 0) {
        std::set<std::string> known(signature.output_keys.begin(), signature.output_keys.end());
        return absl::InvalidArgumentError(
            absl::StrCat("output tensor alias not found in signature: ", key,
                         " Outputs expected to be in the set ", KeySet(known), "."));
      }
      if (!seen.insert(key).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate output tensor alias in output_filter: ", key));
      }
      result.output_order.push_back(key);
    }
  }
  KILN_ASSIGN_OR_RETURN(auto outputs, servable.Run(signature.key, std::move(inputs)));
  for (const std::string& key : result.output_order) {
    auto it = outputs.find(key);
    if (it == outputs.end()) {
      return absl::InternalError(absl::StrCat("the model did not produce output '", key, "'"));
    }
    result.outputs.emplace(key, std::move(it->second));
  }
  return result;
}

namespace {

// Serialized tf.Examples, one per row; a context's features are merged into every example
// (an example's own feature of the same name wins), as TF Serving's input util does.
absl::StatusOr<Tensor> SerializedExamples(const Input& input) {
  std::vector<std::string> serialized;
  if (input.has_example_list()) {
    for (const auto& example : input.example_list().examples()) {
      serialized.push_back(example.SerializeAsString());
    }
  } else if (input.has_example_list_with_context()) {
    const auto& list = input.example_list_with_context();
    for (const auto& example : list.examples()) {
      tensorflow::Example merged = list.context();
      merged.MergeFrom(example);
      serialized.push_back(merged.SerializeAsString());
    }
  }
  if (serialized.empty()) return absl::InvalidArgumentError("Input is empty.");
  Tensor tensor(DType::kString, Shape{static_cast<int64_t>(serialized.size())});
  std::move(serialized.begin(), serialized.end(), tensor.data<std::string>());
  return tensor;
}

absl::StatusOr<const runtime::SignatureInfo*> ExampleSignature(const ServableVersion& servable,
                                                               absl::string_view name,
                                                               absl::string_view method,
                                                               absl::string_view what) {
  KILN_ASSIGN_OR_RETURN(const runtime::SignatureInfo* signature,
                        FindServingSignature(servable.model(), name));
  // TF Serving checks only under --enable_signature_method_name_check (default off): TF2
  // exports write tensorflow/serving/predict into every signature.
  if (servable.check_signature_method_name() && signature->method_name != method) {
    return absl::InvalidArgumentError(absl::StrCat("Expected ", what,
                                                   " signature method_name to be ", method,
                                                   ". Was: ", signature->method_name));
  }
  if (signature->inputs.size() != 1) {
    return absl::InvalidArgumentError("Expected one input Tensor.");
  }
  const auto& input = signature->inputs.begin()->second;
  if (input.dtype != DType::kString) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what, " signature's input must be DT_STRING (serialized tf.Examples), it is ",
        DTypeName(input.dtype)));
  }
  return signature;
}

absl::StatusOr<float> ScoreAt(const Tensor& scores, int64_t index) {
  switch (scores.dtype()) {
    case DType::kFloat32:
      return scores.data<float>()[index];
    case DType::kFloat64:
      return static_cast<float>(scores.data<double>()[index]);
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Expected scores Tensor of DT_FLOAT. Got: ", DTypeName(scores.dtype())));
}

}  // namespace

absl::StatusOr<ClassificationResult> RunClassify(const ServableVersion& servable,
                                                 absl::string_view signature_name,
                                                 const Input& input) {
  KILN_ASSIGN_OR_RETURN(
      const runtime::SignatureInfo* signature,
      ExampleSignature(servable, signature_name, kClassifyMethod, "classification"));
  const bool has_classes = signature->outputs.count("classes") > 0;
  const bool has_scores = signature->outputs.count("scores") > 0;
  if (!has_classes && !has_scores) {
    return absl::InvalidArgumentError(
        "Expected classification signature outputs: classes and/or scores");
  }
  KILN_ASSIGN_OR_RETURN(Tensor examples, SerializedExamples(input));
  const int64_t batch = examples.dim(0);
  std::map<std::string, Tensor> inputs = {{signature->inputs.begin()->first, examples}};
  KILN_ASSIGN_OR_RETURN(auto outputs, servable.Run(signature->key, std::move(inputs), "Classify"));
  Tensor classes, scores;
  int64_t num_classes = -1;
  auto check = [&](const char* key, Tensor* out) -> absl::Status {
    auto it = outputs.find(key);
    if (it == outputs.end()) return absl::OkStatus();
    *out = it->second;
    if (out->rank() == 0 || out->rank() > 2 || out->dim(0) != batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("Expected Tensor shape: [", batch, " num_classes] but got ",
                       out->shape().ToString(), " for output '", key, "'"));
    }
    const int64_t n = out->rank() == 2 ? out->dim(1) : 1;
    if (num_classes >= 0 && n != num_classes) {
      return absl::InvalidArgumentError("Tensors class and score should match in dim[1]");
    }
    num_classes = n;
    return absl::OkStatus();
  };
  if (has_classes) KILN_RETURN_IF_ERROR(check("classes", &classes));
  if (has_scores) KILN_RETURN_IF_ERROR(check("scores", &scores));
  if (classes.valid() && classes.dtype() != DType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("Expected classes Tensor of DT_STRING. Got: ", DTypeName(classes.dtype())));
  }
  ClassificationResult result;
  for (int64_t i = 0; i < batch; ++i) {
    auto* classifications = result.add_classifications();
    for (int64_t c = 0; c < num_classes; ++c) {
      auto* cls = classifications->add_classes();
      if (classes.valid()) cls->set_label(classes.data<std::string>()[i * num_classes + c]);
      if (scores.valid()) {
        KILN_ASSIGN_OR_RETURN(float score, ScoreAt(scores, i * num_classes + c));
        cls->set_score(score);
      }
    }
  }
  return result;
}

absl::StatusOr<RegressionResult> RunRegress(const ServableVersion& servable,
                                            absl::string_view signature_name, const Input& input) {
  KILN_ASSIGN_OR_RETURN(const runtime::SignatureInfo* signature,
                        ExampleSignature(servable, signature_name, kRegressMethod, "regression"));
  if (signature->outputs.count("outputs") == 0) {
    return absl::InvalidArgumentError("No output Tensor with name 'outputs' in the signature");
  }
  KILN_ASSIGN_OR_RETURN(Tensor examples, SerializedExamples(input));
  const int64_t batch = examples.dim(0);
  std::map<std::string, Tensor> inputs = {{signature->inputs.begin()->first, examples}};
  KILN_ASSIGN_OR_RETURN(auto outputs, servable.Run(signature->key, std::move(inputs), "Regress"));
  const Tensor& values = outputs.at("outputs");
  if (values.rank() == 0 || values.rank() > 2 || values.dim(0) != batch ||
      (values.rank() == 2 && values.dim(1) != 1)) {
    return absl::InvalidArgumentError(absl::StrCat("Expected output Tensor shape to be either [",
                                                   batch, "] or [", batch, ", 1] but got ",
                                                   values.shape().ToString()));
  }
  RegressionResult result;
  for (int64_t i = 0; i < batch; ++i) {
    KILN_ASSIGN_OR_RETURN(float value, ScoreAt(values, i));
    result.add_regressions()->set_value(value);
  }
  return result;
}

absl::StatusOr<tensorflow::serving::MultiInferenceResponse> RunMultiInference(
    const ServableVersion& servable, const tensorflow::serving::MultiInferenceRequest& request) {
  if (request.tasks().empty()) return absl::InvalidArgumentError("Empty tasks list");
  tensorflow::serving::MultiInferenceResponse response;
  std::set<std::string> signatures;
  for (const auto& task : request.tasks()) {
    if (task.model_spec().name() != servable.name()) {
      return absl::InvalidArgumentError(
          "All ModelSpecs in a MultiInferenceRequest must access the same model name.");
    }
    const std::string& signature = task.model_spec().signature_name();
    if (!signatures.insert(signature).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Duplicate evaluation of signature: ", signature));
    }
    auto* result = response.add_results();
    *result->mutable_model_spec() = task.model_spec();
    result->mutable_model_spec()->mutable_version()->set_value(servable.version());
    if (task.method_name() == kClassifyMethod) {
      KILN_ASSIGN_OR_RETURN(*result->mutable_classification_result(),
                            RunClassify(servable, signature, request.input()));
    } else if (task.method_name() == kRegressMethod) {
      KILN_ASSIGN_OR_RETURN(*result->mutable_regression_result(),
                            RunRegress(servable, signature, request.input()));
    } else {
      return absl::UnimplementedError(
          absl::StrCat("Unsupported signature method_name: ", task.method_name()));
    }
  }
  return response;
}

namespace {

// Reads at most kMaxWarmupRecords + 1 records (one more tells that the file is over the limit)
// through kiln_data's TFRecord reader, which checks both CRCs of every record, so a corrupted
// warmup file fails the load naming the file and the byte offset instead of replaying garbage.
absl::StatusOr<std::vector<std::string>> ReadWarmupRecords(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto reader,
                        data::formats::RecordReader::Open(path, data::formats::Compression::kNone));
  std::vector<std::string> records;
  while (records.size() <= static_cast<size_t>(kMaxWarmupRecords)) {
    std::string record;
    absl::Status status = reader->Read(&record);
    if (absl::IsOutOfRange(status)) break;
    KILN_RETURN_IF_ERROR(status);
    records.push_back(std::move(record));
  }
  return records;
}

// Replays the whole predict path of a request, not only the model run: the reply is encoded
// and serialized as the gRPC handler does, so that the first real request finds those code
// paths (and protobuf's lazily built tables for the reply messages) warm as well.
absl::Status WarmupPredict(const ServableVersion& servable,
                           const tensorflow::serving::PredictRequest& request) {
  std::map<std::string, Tensor> inputs;
  for (const auto& [key, proto] : request.inputs()) {
    KILN_ASSIGN_OR_RETURN(inputs[key], TensorFromProto(proto, key));
  }
  std::vector<std::string> filter(request.output_filter().begin(), request.output_filter().end());
  KILN_ASSIGN_OR_RETURN(
      PredictResult result,
      RunPredict(servable, request.model_spec().signature_name(), std::move(inputs), filter));
  tensorflow::serving::PredictResponse response;
  for (const std::string& key : result.output_order) {
    TensorToProto(result.outputs.at(key), &(*response.mutable_outputs())[key]);
  }
  response.mutable_model_spec()->set_name(servable.name());
  response.mutable_model_spec()->mutable_version()->set_value(servable.version());
  response.mutable_model_spec()->set_signature_name(result.signature->key);
  std::string wire;
  if (!response.SerializeToString(&wire)) {
    return absl::InternalError("warmup: the PredictResponse could not be serialized");
  }
  return absl::OkStatus();
}

}  // namespace

std::string WarmupFilePath(const ServableVersion& servable, const std::string& fallback_dir) {
  const std::string dir = servable.model().assets_extra_dir().empty()
                              ? fallback_dir
                              : servable.model().assets_extra_dir();
  if (dir.empty()) return "";
  const std::string path = (std::filesystem::path(dir) / kWarmupFileName).string();
  std::error_code error;
  return std::filesystem::exists(path, error) ? path : "";
}

absl::StatusOr<std::vector<tensorflow::serving::PredictionLog>> ReadWarmupLogs(
    const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> records, ReadWarmupRecords(path));
  if (records.size() > static_cast<size_t>(kMaxWarmupRecords)) {
    return absl::InvalidArgumentError(absl::StrCat("Number of warmup records exceeds the maximum (",
                                                   kMaxWarmupRecords, ") at ", path));
  }
  std::vector<tensorflow::serving::PredictionLog> logs(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    if (!logs[i].ParseFromString(records[i])) {
      return absl::DataLossError(
          absl::StrCat(path, ": record ", i, " is not a valid PredictionLog"));
    }
  }
  return logs;
}

absl::Status RunWarmup(const ServableVersion& servable, int iterations,
                       const std::string& fallback_dir) {
  const std::string path = WarmupFilePath(servable, fallback_dir);
  if (path.empty()) return absl::OkStatus();
  KILN_ASSIGN_OR_RETURN(std::vector<tensorflow::serving::PredictionLog> logs,
                        ReadWarmupLogs(path));
  for (size_t i = 0; i < logs.size(); ++i) {
    const tensorflow::serving::PredictionLog& log = logs[i];
    for (int iteration = 0; iteration < std::max(1, iterations); ++iteration) {
      absl::Status status;
      switch (log.log_type_case()) {
        case tensorflow::serving::PredictionLog::kPredictLog:
          status = WarmupPredict(servable, log.predict_log().request());
          break;
        case tensorflow::serving::PredictionLog::kClassifyLog:
          status = RunClassify(servable, log.classify_log().request().model_spec().signature_name(),
                               log.classify_log().request().input())
                       .status();
          break;
        case tensorflow::serving::PredictionLog::kRegressLog:
          status = RunRegress(servable, log.regress_log().request().model_spec().signature_name(),
                              log.regress_log().request().input())
                       .status();
          break;
        case tensorflow::serving::PredictionLog::kMultiInferenceLog: {
          auto request = log.multi_inference_log().request();
          for (auto& task : *request.mutable_tasks()) {
            task.mutable_model_spec()->set_name(servable.name());
          }
          status = RunMultiInference(servable, request).status();
          break;
        }
        default:
          return absl::UnimplementedError(
              absl::StrCat(path, ": record ", i, " has an unsupported log type"));
      }
      if (!status.ok()) return Annotate(status, absl::StrCat("warmup record ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::serving
