// Calibration data for compression at load in `kiln serve` (docs/COMPRESSION.md): the inputs
// of the PredictRequests in a version's warmup file (assets.extra/tf_serving_warmup_requests),
// which the server hands to the runtime as ModelOptions::calibration_inputs. They are the
// examples the model owner chose as typical traffic, so the accuracy guard measures there.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"

namespace kiln::serving {

// One map of input key -> tensor per PredictRequest (Classify/Regress/MultiInference records
// carry tf.Examples, not tensors, and are skipped) of `<version_dir>/assets.extra/
// tf_serving_warmup_requests`, at most kMaxWarmupRecords records as TF Serving reads. Empty
// when the version has no warmup file. A corrupt file or record is an error naming it.
absl::StatusOr<std::vector<std::map<std::string, Tensor>>> WarmupCalibrationInputs(
    const std::string& version_dir);

}  // namespace kiln::serving
