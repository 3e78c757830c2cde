// kiln serve's calibration data for compression: the PredictRequests of a version's warmup
// file reach the runtime as ModelOptions::calibration_inputs (through the real ServerCore
// load path, on a real warmup file), and only when compression is on.
#include "kiln/serving/warmup_calibration.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "kiln/data/formats/tfrecord.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/server_core.h"
#include "kiln/serving/tensor_proto.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace kiln::serving {
namespace {

namespace fs = std::filesystem;

const std::string kHalfPlusTwo =
    std::string(KILN_SOURCE_DIR) + "/examples/models/half_plus_two/1/model.onnx";

std::string VersionWithWarmup(const std::string& name) {
  const fs::path base = fs::temp_directory_path() /
                        ("kiln_warmup_calibration_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(base);
  fs::create_directories(base / "1" / "assets.extra");
  fs::copy_file(kHalfPlusTwo, base / "1" / "model.onnx");
  std::ofstream file(base / "1" / "assets.extra" / kWarmupFileName, std::ios::binary);
  for (int i = 0; i < 3; ++i) {
    tensorflow::serving::PredictionLog log;
    auto* request = log.mutable_predict_log()->mutable_request();
    TensorToProto(Tensor::FromVector<float>({float(i), float(i + 1)}, Shape{2, 1}),
                  &(*request->mutable_inputs())["x"]);
    file << data::formats::SerializeRecord(log.SerializeAsString());
  }
  // A classify record carries tf.Examples, not tensors: skipped.
  tensorflow::serving::PredictionLog classify;
  classify.mutable_classify_log()->mutable_request();
  file << data::formats::SerializeRecord(classify.SerializeAsString());
  return base.string();
}

TEST(WarmupCalibrationTest, PredictRequestsBecomeCalibrationBatches) {
  const std::string base = VersionWithWarmup("read");
  auto inputs = WarmupCalibrationInputs(base + "/1");
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 3u);
  const Tensor& x = (*inputs)[2].at("x");
  EXPECT_EQ(x.shape(), (Shape{2, 1}));
  EXPECT_EQ(x.data<float>()[1], 3.0f);
  // No warmup file: no calibration data, no error.
  auto none = WarmupCalibrationInputs(base + "/missing");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  fs::remove_all(base);
}

TEST(WarmupCalibrationTest, ServerCoreHandsThemToTheRuntimeWhenCompressionIsOn) {
  const std::string base = VersionWithWarmup("core");
  for (bool compression : {false, true}) {
    size_t seen = 99;
    ServerCoreOptions options;
    options.file_system_poll_wait_seconds = 0;
    options.model_options.allow_compression = compression;
    options.enable_model_warmup = false;  // its classify record is not for this model
    options.loader = [&seen](const std::string& path, const runtime::ModelOptions& model_options) {
      seen = model_options.calibration_inputs.size();
      return runtime::Model::Load(path, model_options);
    };
    auto config = SingleModelConfig("m", base);
    config.mutable_model_config_list()->mutable_config(0)->set_model_platform("onnx");
    auto core = ServerCore::Create(options, config);
    ASSERT_TRUE(core.ok()) << core.status();
    EXPECT_EQ(seen, compression ? 3u : 0u);
  }
  fs::remove_all(base);
}

}  // namespace
}  // namespace kiln::serving
