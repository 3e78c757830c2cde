// Compression at load (src/runtime/compression.cc) through Model: the accuracy guard, its
// report, calibration from a directory of .npy files and from memory, bf16 alone, and that a
// tolerance of 0 gives fp32's outputs exactly. The models are small MLPs with real kernels.
#include "runtime/compression.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "kiln/core/npy.h"
#include "kiln/runtime/model.h"

namespace kiln::runtime {
namespace {

Tensor Random(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

TensorInfo Info(std::vector<int64_t> shape) {
  TensorInfo t;
  t.dtype = DType::kFloat32;
  t.rank_known = true;
  t.shape = std::move(shape);
  return t;
}

// x [-1, 32] -> fc1 (64, Relu) -> fc2 (10): class scores "logits". With `outlier`, fc1's
// channel 0 is 10^4 times larger and fc2 reads it through a weight 10^4 times smaller: fc2's
// input rows then span a range whose 256 steps are coarser than all its other values, which
// per-row int8 quantization cannot represent (fc2 is the sensitive layer; fc1 is benign).
import::ImportedModel Mlp(bool outlier){import::ImportedModel m;
m.platform = "onnx";
m.path = outlier ? "mlp_outlier" : "mlp";
import::SignatureGraph sig;
sig.key = "serving_default";
sig.method_name = "tensorflow/serving/predict";
sig.input_keys = {"x"};
sig.output_keys = {"logits"};
sig.inputs["x"] = Info({-1, 32});
sig.outputs["logits"] = Info({-1, 10});
ir::Graph& g = sig.graph;
const ir::ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {-1, 32}));
g.inputs = {x};
Tensor w1 = Random(Shape{32, 64}, 1, -0.3f, 0.3f), w2 = Random(Shape{64, 10}, 2, -0.3f, 0.3f);
if (outlier) {
  for (int64_t i = 0; i < 32; ++i)
    w1.data<float>()[i * 64] = 1e4f * std::fabs(w1.data<float>()[i * 64]);
  for (int64_t j = 0; j < 10; ++j) w2.data<float>()[j] *= 1e-4f;
}
auto op = [&](const std::string& type, std::vector<ir::ValueId> in, const std::string& name) {
  return g.node(g.AddNode(type, std::move(in), 1, {}, name)).outputs[0];
};
ir::ValueId h = op("MatMul", {x, g.AddConstant("w1", w1)}, "fc1");
h = op("Add", {h, g.AddConstant("b1", Random(Shape{64}, 3))}, "fc1_bias");
h = op("Relu", {h}, "fc1_relu");
h = op("MatMul", {h, g.AddConstant("w2", w2)}, "fc2");
g.outputs = {op("Add", {h, g.AddConstant("b2", Random(Shape{10}, 4))}, "fc2_bias")};
m.signatures.push_back(std::move(sig));
return m;
}  // namespace

std::vector<std::map<std::string, Tensor>> Calibration(int batches, uint32_t seed,
                                                       int64_t rows = 16) {
  std::vector<std::map<std::string, Tensor>> out;
  for (int b = 0; b < batches; ++b) out.push_back({{"x", Random(Shape{rows, 32}, seed + b, 0, 2)}});
  return out;
}

std::shared_ptr<Model> Load(bool outlier, ModelOptions options) {
  auto model = Model::FromImported(Mlp(outlier), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

Tensor RunLogits(const Model& model, const Tensor& x) {
  auto out = model.Run("serving_default", {{"x", x}});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->at("logits") : Tensor();
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(CompressionTest, WithinToleranceEveryLayerIsInt8AndTheReportSaysHowClose) {
  ModelOptions options;
  options.allow_compression = true;
  // This untrained MLP's logits are nearly tied: 2 of the 64 calibration examples change
  // their top-1 class under int8 (the default 0.02 keeps fc2 in fp32 for that).
  options.compression_tolerance = 0.05;
  options.calibration_inputs = Calibration(4, 10);
  auto model = Load(false, options);
  ASSERT_NE(model, nullptr);
  const std::string text = model->Inspect();
  EXPECT_EQ(Count(text, "kiln::DynamicQuantMatMul: 2"), 1) << text;
  EXPECT_NE(text.find("output 'logits': max abs error"), std::string::npos) << text;
  EXPECT_NE(text.find("top-1 agreement"), std::string::npos) << text;
  EXPECT_NE(text.find("64 examples in 4 batches"), std::string::npos) << text;
  EXPECT_NE(text.find("(tolerance 0.05)"), std::string::npos) << text;
  EXPECT_NE(text.find("2 compressed, none kept fp32"), std::string::npos) << text;
  // The guard's fp32 reference comes from the calibration runs: one fp32 pass, not two.
  EXPECT_NE(text.find("fp32 reference from the calibration runs"), std::string::npos) << text;
  // The outputs stay close to fp32 on other inputs of the same kind.
  auto fp32 = Load(false, {});
  const Tensor x = Random(Shape{8, 32}, 99, 0, 2);
  const Tensor a = RunLogits(*fp32, x), b = RunLogits(*model, x);
  float max_ref = 0, max_diff = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    max_ref = std::max(max_ref, std::fabs(a.data<float>()[i]));
    max_diff = std::max(max_diff, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  }
  EXPECT_GT(max_diff, 0.0f);
  EXPECT_LT(max_diff, 0.05f * max_ref);
}

TEST(CompressionTest, TheGuardKeepsTheSensitiveLayerFp32) {
  ModelOptions options;
  options.allow_compression = true;
  options.calibration_inputs = Calibration(4, 20);
  auto model = Load(true, options);
  ASSERT_NE(model, nullptr);
  const std::string text = model->Inspect();
  EXPECT_NE(text.find("1 compressed, 1 kept fp32 (most sensitive first): 'fc2'"), std::string::npos)
      << text;
  EXPECT_EQ(Count(text, "kiln::DynamicQuantMatMul: 1"), 1) << text;
  // The ranking runs on the first batch only (16 of the 64 examples); the final accuracy is
  // measured on all of them.
  EXPECT_NE(text.find("2 layers ranked alone on the first 16 examples"), std::string::npos) << text;
  EXPECT_NE(text.find("64 examples in 4 batches"), std::string::npos) << text;
  // fc2 compressed alone runs from fc2 on: fc1's output is kept from one fp32 run.
  EXPECT_NE(text.find("(each from where it changes the graph: 3 of 4 nodes run)"),
            std::string::npos)
      << text;
  // With both layers int8 the first batch is already beyond the tolerance over all 64
  // examples (0 of its 16 keep their class): the other three batches do not run.
  EXPECT_NE(text.find("all 2 layers compressed: beyond it on the first 16 examples already"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("top-1 agreement 0.00% (0/16)"), std::string::npos) << text;
  EXPECT_NE(text.find("top-1 agreement 100.00% (64/64)"), std::string::npos) << text;
}

TEST(CompressionTest, TheRankingRunsOnSixteenExamplesCutFromALargerBatch) {
  ModelOptions options;
  options.allow_compression = true;
  options.calibration_inputs = Calibration(3, 20, 25);
  auto model = Load(true, options);
  ASSERT_NE(model, nullptr);
  const std::string text = model->Inspect();
  EXPECT_NE(text.find("75 examples in 3 batches"), std::string::npos) << text;
  EXPECT_NE(text.find("2 layers ranked alone on the first 16 examples"), std::string::npos) << text;
  EXPECT_NE(text.find("1 compressed, 1 kept fp32 (most sensitive first): 'fc2'"), std::string::npos)
      << text;
  EXPECT_NE(text.find("top-1 agreement 100.00% (75/75)"), std::string::npos) << text;
}

TEST(CompressionTest, ToleranceZeroGivesFp32Exactly) {
  ModelOptions options;
  options.allow_compression = true;
  options.compression_tolerance = 0;
  options.calibration_inputs = Calibration(2, 30);
  auto model = Load(false, options);
  ASSERT_NE(model, nullptr);
  const std::string text = model->Inspect();
  EXPECT_NE(text.find("the model runs in fp32"), std::string::npos) << text;
  EXPECT_EQ(text.find("DynamicQuantMatMul"), std::string::npos) << text;
  auto fp32 = Load(false, {});
  const Tensor x = Random(Shape{5, 32}, 31, -3, 3);
  const Tensor a = RunLogits(*fp32, x), b = RunLogits(*model, x);
  ASSERT_EQ(a.byte_size(), b.byte_size());
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0);
}

TEST(CompressionTest, Bf16AloneAndWithoutCalibrationDataIsNotMeasured) {
  ModelOptions options;
  options.mixed_precision_bf16 = true;
  auto model = Load(false, options);
  ASSERT_NE(model, nullptr);
  const std::string text = model->Inspect();
  EXPECT_EQ(Count(text, "kiln::Bf16MatMul: 2"), 1) << text;
  EXPECT_NE(text.find("accuracy: not measured"), std::string::npos) << text;
  EXPECT_EQ(text.find("DynamicQuantMatMul"), std::string::npos) << text;
}

TEST(CompressionTest, WithoutTheSwitchesNothingChanges) {
  ModelOptions options;
  options.calibration_inputs = Calibration(1, 40);  // given, but compression is off
  auto model = Load(false, options);
  ASSERT_NE(model, nullptr);
  const std::string text = model->Inspect();
  EXPECT_EQ(text.find("compression:"), std::string::npos) << text;
  EXPECT_EQ(text.find("DynamicQuantMatMul"), std::string::npos) << text;
}

// Batches of one size where the count allows: one plan per graph instead of two (each plan
// compile of the fp32 graph times its kernel choices again).
TEST(CompressionTest, CalibrationDirectoryBatchesShareOneSize) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_calib_sizes_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  SignatureInfo signature;
  signature.input_keys = {"x"};
  signature.inputs["x"].dtype = DType::kFloat32;
  for (auto [examples, want] : std::vector<std::pair<int64_t, std::vector<int64_t>>>{
           {200, std::vector<int64_t>(8, 25)}, {64, {32, 32}}, {37, {32, 5}}, {20, {20}}}) {
    ASSERT_TRUE(WriteNpy(dir + "/x.npy", Random(Shape{examples, 3}, 7)).ok());
    auto batches = LoadCalibrationDir(dir, signature);
    ASSERT_TRUE(batches.ok()) << batches.status();
    std::vector<int64_t> sizes;
    for (const CalibrationBatch& b : *batches) sizes.push_back(b[0].dim(0));
    EXPECT_EQ(sizes, want) << examples << " examples";
  }
  std::filesystem::remove_all(dir);
}

TEST(CompressionTest, CalibrationDirectoryOfNpyFiles) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_calib_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  // float64, as numpy writes by default: narrowed to the float input.
  Tensor x64(DType::kFloat64, Shape{40, 32});
  std::mt19937 rng(5);
  for (double& v : x64.span<double>()) v = std::uniform_real_distribution<double>(0, 2)(rng);
  ASSERT_TRUE(WriteNpy(dir + "/x.npy", x64).ok());
  ModelOptions options;
  options.allow_compression = true;
  options.calibration_inputs_dir = dir;
  auto model = Load(false, options);
  ASSERT_NE(model, nullptr);
  const std::string text = model->Inspect();
  EXPECT_NE(text.find("40 examples in 2 batches from " + dir), std::string::npos) << text;

  // A model with a fixed batch dimension of 4 gets batches of 4 (the 40 examples: 10).
  import::ImportedModel fixed = Mlp(false);
  fixed.signatures[0].inputs["x"].shape = {4, 32};
  auto fixed_model = Model::FromImported(std::move(fixed), options);
  ASSERT_TRUE(fixed_model.ok()) << fixed_model.status();
  EXPECT_NE((*fixed_model)->Inspect().find("40 examples in 10 batches"), std::string::npos)
      << (*fixed_model)->Inspect();

  // A file whose shape does not fit the input fails the load, naming the file.
  ASSERT_TRUE(WriteNpy(dir + "/x.npy", Random(Shape{4, 8, 4}, 6)).ok());
  auto bad = Model::FromImported(Mlp(false), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir + "/x.npy"), std::string::npos) << bad.status();

  // A directory without this signature's inputs: no calibration, said in the report.
  std::filesystem::remove(dir + "/x.npy");
  auto none = Load(false, options);
  ASSERT_NE(none, nullptr);
  EXPECT_NE(none->Inspect().find("no calibration for it"), std::string::npos) << none->Inspect();
  std::filesystem::remove_all(dir);
}

}  // namespace kiln::runtime
}  // namespace kiln::runtime
