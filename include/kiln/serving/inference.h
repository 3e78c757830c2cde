// The request handlers shared by REST, gRPC and warmup: predict, classify, regress and
// multi-inference on a loaded version, with TF Serving's checks and messages.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/serving/server_core.h"
#include "tensorflow_serving/apis/classification.pb.h"
#include "tensorflow_serving/apis/inference.pb.h"
#include "tensorflow_serving/apis/input.pb.h"
#include "tensorflow_serving/apis/predict.pb.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"
#include "tensorflow_serving/apis/regression.pb.h"

namespace kiln::serving {

inline constexpr char kDefaultSignature[] = "serving_default";
inline constexpr char kPredictMethod[] = "tensorflow/serving/predict";
inline constexpr char kClassifyMethod[] = "tensorflow/serving/classify";
inline constexpr char kRegressMethod[] = "tensorflow/serving/regress";

// The signature `name` names ("" = serving_default), or FAILED_PRECONDITION as TF Serving
// answers: Serving signature key "x" not found.
absl::StatusOr<const runtime::SignatureInfo*> FindServingSignature(const runtime::Model& model,
                                                                   absl::string_view name);

struct PredictResult {
  const runtime::SignatureInfo* signature = nullptr;
  std::map<std::string, Tensor> outputs;
  std::vector<std::string> output_order;  // the signature's output order, filtered
};

// Checks the inputs against the signature (every input given, no extra ones, dtypes) and
// runs it. `output_filter` empty: every output.
absl::StatusOr<PredictResult> RunPredict(const ServableVersion& servable,
                                         absl::string_view signature_name,
                                         std::map<std::string, Tensor> inputs,
                                         const std::vector<std::string>& output_filter);

absl::StatusOr<tensorflow::serving::ClassificationResult> RunClassify(
    const ServableVersion& servable, absl::string_view signature_name,
    const tensorflow::serving::Input& input);
absl::StatusOr<tensorflow::serving::RegressionResult> RunRegress(
    const ServableVersion& servable, absl::string_view signature_name,
    const tensorflow::serving::Input& input);
absl::StatusOr<tensorflow::serving::MultiInferenceResponse> RunMultiInference(
    const ServableVersion& servable, const tensorflow::serving::MultiInferenceRequest& request);

// Replays assets.extra/tf_serving_warmup_requests (a TFRecord of PredictionLog) against a
// version that is not yet available. OK when the model has no warmup file. The file is looked
// up in the model's assets.extra folder, else in `fallback_dir` (the version folder's
// assets.extra, where ONNX models in TF Serving's layout keep it).
absl::Status RunWarmup(const ServableVersion& servable, int iterations,
                       const std::string& fallback_dir = "");

// The warmup file of `servable` (its assets.extra, else `fallback_dir`), or "" when there is
// none.
std::string WarmupFilePath(const ServableVersion& servable, const std::string& fallback_dir = "");
// Every record of a warmup file, parsed; at most kMaxWarmupRecords, as TF Serving allows.
absl::StatusOr<std::vector<tensorflow::serving::PredictionLog>> ReadWarmupLogs(
    const std::string& path);

inline constexpr char kWarmupFileName[] = "tf_serving_warmup_requests";
inline constexpr int kMaxWarmupRecords = 1000;

}  // namespace kiln::serving
