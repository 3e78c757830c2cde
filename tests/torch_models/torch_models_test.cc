// Models exported from PyTorch 1.13 (export_models.py, run once per build into the build
// directory) must import, run and match PyTorch's outputs within 1e-4 relative (plus a small
// absolute tolerance for values near zero).
#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/core/npy.h"
#include "kiln/import/onnx.h"
#if KILN_HAVE_RUNTIME
#include "kiln/runtime/model.h"
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

fs::path ModelDir(const std::string& name) { return fs::path(TORCH_MODELS_DIR) / name; }

std::map<std::string, Tensor> ReadNpyDir(const fs::path& dir) {
  std::map<std::string, Tensor> tensors;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".npy") continue;
    absl::StatusOr<Tensor> t = ReadNpy(entry.path().string());
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) tensors[entry.path().stem().string()] = *std::move(t);
  }
  return tensors;
}

// Largest |a - e| / (atol + rtol |e|); <= 1 means within tolerance.
[[maybe_unused]] double WorstRatio(const Tensor& actual, const Tensor& expected, int64_t* worst_index) {
  double worst = 0;
  const float* a = actual.data<float>();
  const float* e = expected.data<float>();
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double r = std::abs(static_cast<double>(a[i]) - e[i]) / (kAtol + kRtol * std::abs(e[i]));
    if (!(r <= worst)) {
      worst = std::isnan(r) ? 1e30 : r;
      *worst_index = i;
    }
  }
  return worst;
}

class TorchModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchModelTest, MatchesPyTorch) {
  const fs::path dir = ModelDir(GetParam());
  const std::string model_path = (dir / "model.onnx").string();
  if (!fs::exists(model_path)) {
    GTEST_SKIP() << model_path << " is missing: the torch_models_data target exports it with "
                 << "/usr/bin/python3 and python3-torch";
  }
  absl::StatusOr<import::ImportedModel> imported = import::ImportOnnxFile(model_path);
  ASSERT_TRUE(imported.ok()) << imported.status();
  ASSERT_TRUE(ir::Verify(imported->signatures[0].graph).ok());
  const std::map<std::string, Tensor> inputs = ReadNpyDir(dir / "inputs");
  const std::map<std::string, Tensor> expected = ReadNpyDir(dir / "outputs");
  ASSERT_FALSE(inputs.empty());
  ASSERT_FALSE(expected.empty());
  for (const auto& [name, t] : inputs) {
    EXPECT_EQ(imported->signatures[0].inputs.count(name), 1u) << name;
  }
#if KILN_HAVE_RUNTIME
  absl::StatusOr<std::shared_ptr<runtime::Model>> model = runtime::Model::Load(model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::map<std::string, Tensor>> outputs =
      (*model)->Run("serving_default", inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (const auto& [name, want] : expected) {
    auto it = outputs->find(name);
    ASSERT_NE(it, outputs->end()) << "output " << name;
    const Tensor& got = it->second;
    ASSERT_EQ(got.dtype(), want.dtype()) << name;
    ASSERT_EQ(got.shape(), want.shape()) << name;
    int64_t index = 0;
    const double ratio = WorstRatio(got, want, &index);
    EXPECT_LE(ratio, 1.0) << GetParam() << " output " << name << " element " << index << ": got "
                          << got.data<float>()[index] << ", PyTorch "
                          << want.data<float>()[index];
  }
#else
  GTEST_SKIP() << "imported only: this build has no kiln_runtime";
#endif
}

INSTANTIATE_TEST_SUITE_P(Exported, TorchModelTest,
                         ::testing::Values("mlp", "cnn_batchnorm", "mobilenet_v2",
                                           "transformer_encoder", "tabular_embeddings"));

}  // namespace
}  // namespace kiln
