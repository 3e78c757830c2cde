// The real ONNX models in ../shared/testdata/models (see PROVENANCE.md) load, run, and match
// where expected outputs are given.
//  - onnx_light_zoo: model-zoo topologies whose weights are constants (ConstantOfShape), so
//    every class gets the same logit and the expected softmax is 0.001 everywhere whatever
//    the input; the reference *_output_0.pb files say exactly that.
//  - ultraface (face detector, opset 9, box decoding in the graph) and silero VAD (If
//    subgraphs with LSTM): no reference outputs, so the checks are the properties the model
//    promises (shapes, softmax rows summing to 1, probabilities in [0, 1], finite state).
#include <cmath>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/import/onnx.h"
#if KILN_HAVE_RUNTIME
#include "kiln/runtime/model.h"
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path ModelsDir() { return fs::path(KILN_SHARED_DIR) / "testdata" / "models"; }

[[maybe_unused]] Tensor RandomFloats(Shape shape, float lo, float hi, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

[[maybe_unused]] bool AllFinite(const Tensor& t) {
  for (float v : t.span<float>()) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

class LightZooTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LightZooTest, MatchesReferenceOutput) {
  const fs::path model = ModelsDir() / "onnx_light_zoo" / (GetParam() + ".onnx");
  const fs::path expected_file = ModelsDir() / "onnx_light_zoo" / (GetParam() + "_output_0.pb");
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing";
  absl::StatusOr<import::ImportedModel> imported = import::ImportOnnxFile(model.string());
  ASSERT_TRUE(imported.ok()) << imported.status();
  absl::StatusOr<Tensor> expected = import::ReadOnnxTensorFile(expected_file.string());
  ASSERT_TRUE(expected.ok()) << expected.status();
  const import::SignatureGraph& sig = imported->signatures[0];
  ASSERT_EQ(sig.input_keys.size(), 1u);
  ASSERT_EQ(sig.output_keys.size(), 1u);
  EXPECT_EQ(sig.outputs.at(sig.output_keys[0]).shape, expected->shape().ToVector());
#if KILN_HAVE_RUNTIME
  absl::StatusOr<std::shared_ptr<runtime::Model>> m = runtime::Model::Load(model.string());
  ASSERT_TRUE(m.ok()) << m.status();
  const import::TensorInfo& in = sig.inputs.at(sig.input_keys[0]);
  auto outputs = (*m)->Run("serving_default",
                           {{sig.input_keys[0], RandomFloats(Shape(in.shape), 0, 1, 7)}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const Tensor& got = outputs->at(sig.output_keys[0]);
  ASSERT_EQ(got.shape(), expected->shape());
  EXPECT_TRUE(TensorsAllClose(got, *expected, 1e-4, 1e-7))
      << got.DebugString() << " vs " << expected->DebugString();
#endif
}

INSTANTIATE_TEST_SUITE_P(Models, LightZooTest,
                         ::testing::Values("light_squeezenet", "light_resnet50",
                                           "light_inception_v1", "light_shufflenet"));

TEST(RealOnnxModels, UltrafaceDetectorRuns) {
  const fs::path model = ModelsDir() / "onnx_ultraface_rfb320" / "version-RFB-320.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing";
  absl::StatusOr<import::ImportedModel> imported = import::ImportOnnxFile(model.string());
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->signatures[0].output_keys, (std::vector<std::string>{"scores", "boxes"}));
#if KILN_HAVE_RUNTIME
  absl::StatusOr<std::shared_ptr<runtime::Model>> m = runtime::Model::Load(model.string());
  ASSERT_TRUE(m.ok()) << m.status();
  auto outputs = (*m)->Run("serving_default",
                           {{"input", RandomFloats(Shape{1, 3, 240, 320}, -1, 1, 11)}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const Tensor& scores = outputs->at("scores");
  const Tensor& boxes = outputs->at("boxes");
  ASSERT_EQ(scores.shape(), (Shape{1, 4420, 2}));
  ASSERT_EQ(boxes.shape(), (Shape{1, 4420, 4}));
  ASSERT_TRUE(AllFinite(scores));
  ASSERT_TRUE(AllFinite(boxes));
  for (int64_t i = 0; i < 4420; ++i) {
    const float* row = scores.data<float>() + 2 * i;
    ASSERT_NEAR(row[0] + row[1], 1.0f, 1e-5) << "anchor " << i;
    ASSERT_GE(row[0], 0.0f);
  }
#endif
}

TEST(RealOnnxModels, SileroVadRunsWithItsIfSubgraphs) {
  const fs::path model = ModelsDir() / "onnx_silero_vad" / "silero_vad_16k_op15.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " missing";
  absl::StatusOr<import::ImportedModel> imported = import::ImportOnnxFile(model.string());
  ASSERT_TRUE(imported.ok()) << imported.status();
#if KILN_HAVE_RUNTIME
  absl::StatusOr<std::shared_ptr<runtime::Model>> m = runtime::Model::Load(model.string());
  ASSERT_TRUE(m.ok()) << m.status();
  Tensor state = Tensor::Zeros(DType::kFloat32, Shape{2, 1, 128});
  for (int chunk = 0; chunk < 3; ++chunk) {
    auto outputs = (*m)->Run("serving_default",
                             {{"input", RandomFloats(Shape{1, 512}, -0.3f, 0.3f, 100 + chunk)},
                              {"state", state},
                              {"sr", Tensor::Scalar<int64_t>(16000)}});
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    const Tensor& prob = outputs->at("output");
    ASSERT_EQ(prob.shape(), (Shape{1, 1}));
    EXPECT_GE(prob.data<float>()[0], 0.0f);
    EXPECT_LE(prob.data<float>()[0], 1.0f);
    state = outputs->at("stateN");
    ASSERT_EQ(state.shape(), (Shape{2, 1, 128}));
    ASSERT_TRUE(AllFinite(state));
  }
  // The LSTM state moved away from its zero start.
  double norm = 0;
  for (float v : state.span<float>()) norm += std::abs(v);
  EXPECT_GT(norm, 0.0);
#endif
}

}  // namespace
}  // namespace kiln
