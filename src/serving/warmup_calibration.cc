#include "kiln/serving/warmup_calibration.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/data/formats/tfrecord.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/tensor_proto.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace kiln::serving {

absl::StatusOr<std::vector<std::map<std::string, Tensor>>> WarmupCalibrationInputs(
    const std::string& version_dir) {
  std::vector<std::map<std::string, Tensor>> inputs;
  const std::string path =
      (std::filesystem::path(version_dir) / "assets.extra" / kWarmupFileName).string();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return inputs;
  // The TFRecord reader warmup replay uses: both CRCs of every record are checked.
  KILN_ASSIGN_OR_RETURN(auto reader,
                        data::formats::RecordReader::Open(path, data::formats::Compression::kNone));
  for (int i = 0; i < kMaxWarmupRecords; ++i) {
    std::string record;
    absl::Status status = reader->Read(&record);
    if (absl::IsOutOfRange(status)) break;
    KILN_RETURN_IF_ERROR(status);
    tensorflow::serving::PredictionLog log;
    if (!log.ParseFromString(record)) {
      return absl::DataLossError(
          absl::StrCat(path, ": record ", i, " is not a valid PredictionLog"));
    }
    if (log.log_type_case() != tensorflow::serving::PredictionLog::kPredictLog) continue;
    std::map<std::string, Tensor> example;
    for (const auto& [key, proto] : log.predict_log().request().inputs()) {
      absl::StatusOr<Tensor> t = TensorFromProto(proto, key);
      if (!t.ok()) return Annotate(t.status(), absl::StrCat(path, ": record ", i));
      example[key] = *std::move(t);
    }
    inputs.push_back(std::move(example));
  }
  return inputs;
}

}  // namespace kiln::serving
