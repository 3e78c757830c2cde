#include "kiln/runtime/model.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/runtime/inputs.h"
#include "kiln/runtime/loader.h"
#include "../exec/test_kernels.h"

namespace kiln::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using exec::testing::AddOp;
using exec::testing::Floats;
using exec::testing::ToVector;
namespace fs = std::filesystem;

TensorInfo Info(DType dtype, std::vector<int64_t> shape) {
  TensorInfo info;
  info.dtype = dtype;
  info.rank_known = true;
  info.shape = std::move(shape);
  return info;
}

// y = relu(x + b) * 2 with b a constant the optimizer folds through a Count node; plus an
// unused branch for dead-code elimination. Input "x" is declared [-1, 1].
import::ImportedModel SmallModel() {
  import::ImportedModel m;
  m.platform = "onnx";
  m.path = "small";
  import::SignatureGraph sig;
  sig.key = "serving_default";
  sig.method_name = "tensorflow/serving/predict";
  sig.input_keys = {"x"};
  sig.output_keys = {"y"};
  sig.inputs["x"] = Info(DType::kFloat32, {-1, 1});
  sig.outputs["y"] = Info(DType::kFloat32, {-1, 1});
  ir::Graph& g = sig.graph;
  const auto x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {-1, 1}));
  g.inputs = {x};
  const auto b = AddOp(g, "Count", {g.AddConstant("b", Floats({1}, {1}))});
  AddOp(g, "Relu", {x});  // unused
  g.outputs = {AddOp(g, "Scale", {AddOp(g, "Relu", {AddOp(g, "AddBroadcast1", {x, b})})},
                     {{"factor", 2.0f}})};
  m.signatures.push_back(std::move(sig));
  return m;
}

std::shared_ptr<Model> LoadSmall(ModelOptions options = {}) {
  auto model = Model::FromImported(SmallModel(), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

TEST(ModelTest, RunsAndAcceptsWhatTheGraphCanRun) {
  auto model = LoadSmall();
  auto out = model->Run("serving_default", {{"x", Floats({-3, 1, 2}, {3, 1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(ToVector(out->at("y")), ElementsAre(0, 4, 6));
  // TF Serving's own tests feed [3] to an input declared [-1, 1]: accepted when it runs.
  auto flat = model->Run("serving_default", {{"x", Floats({-3, 1, 2}, {3})}});
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_THAT(ToVector(flat->at("y")), ElementsAre(0, 4, 6));
}

TEST(ModelTest, ErrorsNameTheInputAndWhatWasExpected) {
  auto model = LoadSmall();
  auto unknown = model->Run("serving_default", {{"z", Floats({1}, {1, 1})}});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown input 'z'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("x"));

  auto missing = model->Run("serving_default", {});
  EXPECT_THAT(missing.status().message(), HasSubstr("missing input 'x'"));
  EXPECT_THAT(missing.status().message(), HasSubstr("float[-1, 1]"));

  auto dtype = model->Run("serving_default", {{"x", Tensor::FromVector<int32_t>({1})}});
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.status().message(), HasSubstr("input 'x' must be float[-1, 1], got int32[1]"));

  // A shape the graph cannot run (the constant is [1]; test::AddBroadcast1 wants a last
  // dimension of 1 or a rank-1 input) is reported against the declared shape.
  auto shape = model->Run("serving_default", {{"x", Floats({1, 2, 3, 4}, {2, 2})}});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.status().message(), HasSubstr("input 'x' has shape [2, 2], expected float[-1, 1]"));

  auto signature = model->Run("predict", {{"x", Floats({1}, {1, 1})}});
  EXPECT_EQ(signature.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(signature.status().message(), HasSubstr("serving_default"));

  auto output = model->Run("serving_default", {{"x", Floats({1}, {1, 1})}}, {"nope"});
  EXPECT_THAT(output.status().message(), HasSubstr("unknown output 'nope'"));
}

TEST(ModelTest, PrecompileBuildsThePlanAheadOfTraffic) {
  auto model = LoadSmall();
  ASSERT_TRUE(model->Precompile("serving_default", {{"x", Shape{8, 1}}}).ok());
  RunStats stats;
  auto out = model->Run("serving_default", {{"x", Floats(std::vector<float>(8, 1), {8, 1})}}, {},
                        &stats);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(stats.compiled_plan);
  out = model->Run("serving_default", {{"x", Floats({1}, {1, 1})}}, {}, &stats);
  EXPECT_TRUE(stats.compiled_plan);
  EXPECT_THAT(model->Precompile("serving_default", {{"y", Shape{1}}}).message(),
              HasSubstr("no shape for input 'x'"));
}

TEST(ModelTest, OptimizerFoldsConstantsRemovesDeadCodeAndLogsIt) {
  exec::testing::CountCalls() = 0;
  auto model = LoadSmall();
  EXPECT_EQ(exec::testing::CountCalls().load(), 1);  // folded once at load
  const std::string text = model->Inspect();
  EXPECT_THAT(text, HasSubstr("constant_folding"));
  EXPECT_THAT(text, HasSubstr("folded Count"));
  EXPECT_THAT(text, HasSubstr("dead_code_elimination"));
  EXPECT_THAT(text, HasSubstr("5 -> 3 nodes"));
  EXPECT_THAT(text, HasSubstr("test::Relu: 1"));
  EXPECT_THAT(text, HasSubstr("x: float[-1, 1]"));
  EXPECT_THAT(text, HasSubstr("planned memory for inputs [1, 1]"));
  auto out = model->Run("serving_default", {{"x", Floats({1}, {1, 1})}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(exec::testing::CountCalls().load(), 1);
}

TEST(ModelTest, DisableOptimizerRunsTheGraphAsImported) {
  ModelOptions options;
  options.disable_optimizer = true;
  exec::testing::CountCalls() = 0;
  auto model = LoadSmall(options);
  EXPECT_THAT(model->Inspect(), HasSubstr("optimizer disabled"));
  EXPECT_THAT(model->Inspect(), HasSubstr("5 nodes"));
  auto out = model->Run("serving_default", {{"x", Floats({1}, {1, 1})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(ToVector(out->at("y")), ElementsAre(4));
  EXPECT_GE(exec::testing::CountCalls().load(), 1);  // ran, not folded
}

TEST(ModelTest, PlanCacheKeepsAtMostItsCapacity) {
  ModelOptions options;
  options.plan_cache_capacity = 2;
  auto model = LoadSmall(options);
  RunStats stats;
  for (int64_t n : {1, 2, 3, 1}) {
    ASSERT_TRUE(model->Run("serving_default",
                           {{"x", Floats(std::vector<float>(n, 1), {n, 1})}}, {}, &stats)
                    .ok());
  }
  EXPECT_TRUE(stats.compiled_plan);  // 1 was evicted by 3
  ASSERT_TRUE(model->Run("serving_default", {{"x", Floats({1}, {1, 1})}}, {}, &stats).ok());
  EXPECT_FALSE(stats.compiled_plan);
}

TEST(ModelTest, ConcurrentRunsWithManyShapes) {
  ModelOptions options;
  options.plan_cache_capacity = 3;
  options.intra_op_threads = 2;
  auto model = LoadSmall(options);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const int64_t n = 1 + (t + i) % 5;
        std::vector<float> in(n, static_cast<float>(t));
        auto out = model->Run("serving_default", {{"x", Floats(in, {n, 1})}});
        if (!out.ok() || out->at("y").num_elements() != n ||
            out->at("y").data<float>()[n - 1] != 2.0f * (t + 1)) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(LoaderTest, BasePathTakesTheHighestNumericVersion) {
  const fs::path base = fs::path(testing::TempDir()) / "kiln_versions";
  fs::remove_all(base);
  for (const char* v : {"1", "3", "10", "not_a_version"}) {
    fs::create_directories(base / v);
    std::ofstream(base / v / "model.onnx") << "x";
  }
  fs::create_directories(base / "20");  // empty: no model in it
  auto resolved = ResolveModelPath(base.string());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->version, 10);
  EXPECT_EQ(resolved->format, ModelFormat::kOnnx);
  EXPECT_THAT(resolved->path, HasSubstr("10/model.onnx"));

  fs::create_directories(base / "11");
  std::ofstream(base / "11" / "saved_model.pb") << "x";
  resolved = ResolveModelPath(base.string());
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved->format, ModelFormat::kSavedModel);
  EXPECT_EQ(resolved->version, 11);

  EXPECT_EQ(ResolveModelPath((base / "missing").string()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(ResolveModelPath((base / "20").string()).status().message(),
              HasSubstr("numeric version folders"));
  fs::remove_all(base);
}

TEST(LoaderTest, ThreadSplitNeverOversubscribes) {
  for (int cores : {1, 2, 8, 64}) {
    for (int intra : {0, 1, 3, 100}) {
      for (int inter : {0, 1, 2, 100}) {
        ThreadSplit s = ChooseThreads(intra, inter, cores);
        EXPECT_GE(s.intra, 1);
        EXPECT_GE(s.inter, 1);
        EXPECT_LE(s.intra * s.inter, cores) << intra << " " << inter << " " << cores;
      }
    }
  }
  EXPECT_EQ(ChooseThreads(0, 0, 8).intra, 8);
  EXPECT_EQ(ChooseThreads(2, 0, 8).inter, 4);
}

TEST(InputsTest, RandomFillAndTiling) {
  std::mt19937_64 rng(1);
  Tensor ids = RandomTensor(DType::kInt64, ConcreteShape(Info(DType::kInt64, {-1, 4}), 3), rng);
  EXPECT_EQ(ids.shape(), (Shape{3, 4}));
  for (int64_t v : ids.span<int64_t>()) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 10);
  }
  auto tiled = TileRows(Floats({1, 2, 3, 4}, {2, 2}), 5);
  ASSERT_TRUE(tiled.ok());
  EXPECT_THAT(ToVector(*tiled), ElementsAre(1, 2, 3, 4, 1, 2, 3, 4, 1, 2));
  EXPECT_FALSE(TileRows(Tensor::Scalar<float>(1), 2).ok());
}

#ifdef KILN_HAVE_ONNX_IMPORT
TEST(ModelTest, LoadsAndRunsARealOnnxModel) {
  const std::string path =
      std::string(KILN_SHARED_DIR) + "/testdata/models/onnx_light_zoo/light_squeezenet.onnx";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not available";
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sig = (*model)->FindSignature("serving_default");
  ASSERT_TRUE(sig.ok());
  std::mt19937_64 rng(0);
  std::map<std::string, Tensor> inputs;
  for (const auto& key : (*sig)->input_keys) {
    const TensorInfo& info = (*sig)->inputs.at(key);
    inputs[key] = RandomTensor(info.dtype, ConcreteShape(info, 1), rng);
  }
  auto out = (*model)->Run("serving_default", inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->size(), (*sig)->output_keys.size());
  EXPECT_THAT((*model)->Inspect(), HasSubstr("planned memory"));
}

TEST(ModelTest, MalformedOnnxFileIsAClearError) {
  const fs::path path = fs::path(testing::TempDir()) / "kiln_bad.onnx";
  std::ofstream(path) << "this is not a protobuf";
  auto model = Model::Load(path.string());
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("kiln_bad.onnx"));
  fs::remove(path);
}
#endif

}  // namespace
}  // namespace kiln::runtime
