// SavedModel loading on TensorFlow Serving's own test models and on real exports.
#include "kiln/import/saved_model.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "import/tf/converter.h"
#include "import/tf/tensor_bundle.h"
#include "test_util.h"
#include "tf_graph_builder.h"
#include "tensorflow/core/example/example.pb.h"
#include "tensorflow/core/protobuf/saved_model.pb.h"

namespace kiln::import::tf {
namespace {

using testing::FindSignature;
using testing::ModelsDir;
using testing::RunSignature;
using testing::TfServingDir;

std::string Example(const std::map<std::string, std::vector<float>>& floats,
                    const std::map<std::string, std::vector<std::string>>& bytes = {}) {
  tensorflow::Example example;
  auto* features = example.mutable_features()->mutable_feature();
  for (const auto& [k, v] : floats) {
    for (float f : v) (*features)[k].mutable_float_list()->add_value(f);
  }
  for (const auto& [k, v] : bytes) {
    for (const auto& s : v) (*features)[k].mutable_bytes_list()->add_value(s);
  }
  return example.SerializeAsString();
}

Tensor Strings(const std::vector<std::string>& v) {
  Tensor t(DType::kString, Shape{static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

const char* kHalfPlusTwoVariants[] = {
    "saved_model_half_plus_two_cpu/00000123",
    "saved_model_half_plus_two_gpu/00000123",
    "saved_model_half_plus_two_mkl/00000123",
    "saved_model_half_plus_two_mlmd/00000123",
    "saved_model_half_plus_two_cpu_with_saved_model_config/00000123",
    "saved_model_half_plus_two_cpu_with_empty_saved_model_config/00000123",
    "saved_model_half_plus_two_2_versions/00000123",
    "saved_model_half_plus_two_2_versions/00000124",
    "saved_model_half_plus_two_tf2_cpu/00000123",
};

TEST(SavedModelTest, EveryTfServingModelLoadsOrFailsClearly) {
  namespace fs = std::filesystem;
  int loaded = 0;
  for (const auto& model_dir : fs::directory_iterator(TfServingDir(""))) {
    if (!model_dir.is_directory()) continue;
    for (const auto& version : fs::directory_iterator(model_dir.path())) {
      const std::string dir = version.path().string();
      if (!IsSavedModelDir(dir)) continue;
      // saved_model_counter loads too: its counter is a mutable variable
      // (import_tf_variables_test runs it).
      auto model = ImportSavedModel(dir);
      ASSERT_TRUE(model.ok()) << dir << ": " << model.status();
      EXPECT_EQ(model->platform, "tensorflow");
      EXPECT_FALSE(model->signatures.empty()) << dir;
      for (const auto& sig : model->signatures) {
        EXPECT_TRUE(ir::Verify(sig.graph).ok()) << dir << " " << sig.key;
        EXPECT_EQ(sig.graph.inputs.size(), sig.input_keys.size());
        EXPECT_EQ(sig.graph.outputs.size(), sig.output_keys.size());
      }
      ++loaded;
    }
  }
  EXPECT_GE(loaded, 10);
  auto bad = ImportSavedModel(TfServingDir("bad_half_plus_two/00000123"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "export.meta")) << bad.status();
}

TEST(SavedModelTest, HalfPlusTwoPredictAllVariantsAgree) {
  for (const char* variant : kHalfPlusTwoVariants) {
    auto model = ImportSavedModel(TfServingDir(variant));
    ASSERT_TRUE(model.ok()) << variant << ": " << model.status();
    const SignatureGraph* sig = FindSignature(*model, "serving_default");
    ASSERT_NE(sig, nullptr) << variant;
    ASSERT_EQ(sig->input_keys.size(), 1u);
    EXPECT_EQ(sig->inputs.at(sig->input_keys[0]).dtype, DType::kFloat32);
    // TF Serving feeds a [3] tensor to the [-1, 1] input; TensorFlow accepts it.
    auto out = RunSignature(*sig, {Tensor::FromVector<float>({1.f, 2.f, 5.f})});
    ASSERT_TRUE(out.ok()) << variant << ": " << out.status();
    const bool tf2_declares_one = absl::StrContains(variant, "tf2");
    (void)tf2_declares_one;
    EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{2.5f, 3.f, 4.5f})) << variant;
  }
}

TEST(SavedModelTest, HalfPlusThreePredict) {
  auto model = ImportSavedModel(TfServingDir("saved_model_half_plus_three/00000123"));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph* sig = FindSignature(*model, "serving_default");
  ASSERT_NE(sig, nullptr);
  auto out = RunSignature(*sig, {Tensor::FromVector<float>({1.f, 2.f, 5.f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{3.5f, 4.f, 5.5f}));
}

TEST(SavedModelTest, HalfPlusTwoRegressAndClassifyParseExamples) {
  for (const char* variant : kHalfPlusTwoVariants) {
    // The MKL export's y2 branch is a different graph (a conv over [1, 10, 10, 1]); its
    // predict signature is checked above.
    if (absl::StrContains(variant, "mkl")) continue;
    auto model = ImportSavedModel(TfServingDir(variant));
    ASSERT_TRUE(model.ok()) << model.status();
    const Tensor examples = Strings({Example({{"x", {1.f}}}), Example({{"x", {2.f}}, {"x2", {4.f}}}),
                                     Example({{"x", {5.f}}})});
    struct Case {
      const char* signature;
      std::vector<float> expected;
    };
    for (const Case& c : {Case{"regress_x_to_y", {2.5f, 3.f, 4.5f}},
                          Case{"regress_x_to_y2", {3.5f, 4.f, 5.5f}},
                          Case{"classify_x_to_y", {2.5f, 3.f, 4.5f}}}) {
      const SignatureGraph* sig = FindSignature(*model, c.signature);
      ASSERT_NE(sig, nullptr) << variant << " " << c.signature;
      auto out = RunSignature(*sig, {examples});
      ASSERT_TRUE(out.ok()) << variant << " " << c.signature << ": " << out.status();
      std::vector<float> got = Floats((*out)[0]);
      EXPECT_EQ(got, c.expected) << variant << " " << c.signature;
    }
  }
}

// regress_x2_to_y3 takes x2 itself (x2:0, float [-1, 1]), as TF Serving's
// PredictionWithNamedRegressionSignature feeds it: 2.0 -> 4.0. Upstream, x2 is parsed from
// tf.Example feature "x2" with default 0, so an example without it gives y3 = 3.
TEST(SavedModelTest, HalfPlusTwoRegressX2ToY3) {
  for (const char* variant : kHalfPlusTwoVariants) {
    // The MKL export's y2/y3 are a different graph (a conv over [1, 10, 10, 1]).
    if (absl::StrContains(variant, "mkl")) continue;
    SCOPED_TRACE(variant);
    const std::string dir = TfServingDir(variant);
    auto model = ImportSavedModel(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    const SignatureGraph* sig = FindSignature(*model, "regress_x2_to_y3");
    ASSERT_NE(sig, nullptr);
    const bool tf2 = absl::StrContains(variant, "tf2");
    // The TF2 export writes every signature as a predict function of its own input.
    EXPECT_EQ(sig->method_name, tf2 ? "tensorflow/serving/predict" : "tensorflow/serving/regress");
    EXPECT_EQ(sig->inputs.at("inputs").name, tf2 ? "regress_x2_to_y3_inputs:0" : "x2:0");
    EXPECT_EQ(sig->inputs.at("inputs").dtype, DType::kFloat32);
    auto out = RunSignature(*sig, {Tensor::FromVector<float>({2.f})});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{4.f}));
    if (tf2) {
      const SignatureGraph* classify = FindSignature(*model, "classify_x2_to_y3");
      ASSERT_NE(classify, nullptr);
      auto scores = RunSignature(*classify, {Tensor::FromVector<float>({2.f})});
      ASSERT_TRUE(scores.ok()) << scores.status();
      EXPECT_EQ(Floats((*scores)[0]), (std::vector<float>{4.f}));
      continue;  // no tf_example:0 tensor below
    }
    auto column = RunSignature(*sig, {Tensor::FromVector<float>({1.f, 0.f, -6.f}, Shape{3, 1})});
    ASSERT_TRUE(column.ok()) << column.status();
    EXPECT_EQ((*column)[0].shape(), (Shape{3, 1}));
    EXPECT_EQ(Floats((*column)[0]), (std::vector<float>{3.5f, 3.f, 0.f}));

    // The same graph from serialized examples (tf_example:0 -> y3:0): x2's default is 0.
    auto bytes = ReadFileToString(dir + "/saved_model.pb");
    ASSERT_TRUE(bytes.ok());
    tensorflow::SavedModel saved;
    ASSERT_TRUE(saved.ParseFromString(*bytes));
    auto bundle = BundleReader::Open(dir + "/variables/variables");
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    ImportSource source;
    source.graph = &saved.meta_graphs(0).graph_def();
    source.meta_graph = &saved.meta_graphs(0);
    source.export_dir = dir;
    source.variables = bundle->get();
    Converter converter(source);
    ASSERT_TRUE(converter.Prepare().ok());
    auto graph = converter.BuildGraph({{"tf_example:0", "examples", DType::kString, 1}}, {"y3:0"});
    ASSERT_TRUE(graph.ok()) << graph.status();
    SignatureGraph from_examples;
    from_examples.graph = *std::move(graph);
    auto y3 = RunSignature(from_examples,
                           {Strings({Example({{"x", {1.f}}, {"x2", {4.f}}}), Example({{"x", {2.f}}}),
                                     Example({{"x", {3.f}}, {"x2", {-2.f}}})})});
    ASSERT_TRUE(y3.ok()) << y3.status();
    EXPECT_EQ(Floats((*y3)[0]), (std::vector<float>{5.f, 3.f, 2.f}));
  }
}

TEST(SavedModelTest, UnknownTagSetNamesTheAvailableOnes) {
  auto model = ImportSavedModel(TfServingDir("saved_model_half_plus_two_cpu/00000123"), {"train"});
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::StrContains(model.status().message(), "{serve}")) << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(), "{train}")) << model.status();
}

TEST(SavedModelTest, DescribeListsSignaturesLikeSavedModelCli) {
  auto summary = DescribeSavedModel(TfServingDir("saved_model_half_plus_two_cpu/00000123"));
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::string text = FormatSavedModelSummary(*summary);
  EXPECT_TRUE(absl::StrContains(text, "MetaGraphDef with tag-set: 'serve'")) << text;
  EXPECT_TRUE(absl::StrContains(text, "signature_def['serving_default']")) << text;
  EXPECT_TRUE(absl::StrContains(text, "dtype: DT_FLOAT")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Method name is: tensorflow/serving/regress")) << text;
  EXPECT_TRUE(absl::StrContains(text, "    inputs['x'] tensor_info:\n        dtype: DT_FLOAT\n"
                                      "        shape: (-1, 1)\n        name: x:0\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "The MetaGraph with tag set ['serve'] contains the "
                                      "following ops: {'Add', "))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "'ParseExample', ")) << text;
  // A vector shape prints as saved_model_cli prints it.
  auto tf2 = DescribeSavedModel(TfServingDir("saved_model_half_plus_two_tf2_cpu/00000123"));
  ASSERT_TRUE(tf2.ok()) << tf2.status();
  const std::string tf2_text = FormatSavedModelSummary(*tf2);
  EXPECT_TRUE(absl::StrContains(tf2_text, "shape: (1)\n")) << tf2_text;
}

TEST(SavedModelTest, CorruptAndTruncatedSavedModelsFailClearly) {
  const std::string src = TfServingDir("saved_model_half_plus_two_cpu/00000123");
  auto bytes = ReadFileToString(src + "/saved_model.pb");
  ASSERT_TRUE(bytes.ok());
  const std::string dir = testing::TempDir("corrupt");
  std::filesystem::create_directories(dir + "/variables");
  std::filesystem::copy(src + "/variables", dir + "/variables",
                        std::filesystem::copy_options::recursive |
                            std::filesystem::copy_options::overwrite_existing);
  for (size_t cut : {size_t{0}, size_t{1}, bytes->size() / 3, bytes->size() - 1}) {
    ASSERT_TRUE(WriteStringToFile(dir + "/saved_model.pb", bytes->substr(0, cut)).ok());
    auto model = ImportSavedModel(dir);
    // A truncated proto may still parse (as fewer fields); it must never crash, and a model
    // without its MetaGraph or signatures is an error.
    if (!model.ok()) {
      EXPECT_FALSE(model.status().message().empty());
    }
  }
  ASSERT_TRUE(WriteStringToFile(dir + "/saved_model.pb", *bytes).ok());
  std::filesystem::remove(dir + "/variables/variables.data-00000-of-00001");
  auto missing = ImportSavedModel(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "data-00000-of-00001"))
      << missing.status();
}

}  // namespace
}  // namespace kiln::import::tf
