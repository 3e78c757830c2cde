// One request must not be able to end the process: batch 0, zero inner dimensions, outputs
// sized by request values and shapes beyond the machine each get an answer or a clear error
// for that request alone, and the model keeps serving good requests afterwards.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <tuple>

#include "kiln/core/memory_budget.h"
#include "kiln/runtime/model.h"

namespace kiln::runtime {
namespace {

using ::testing::HasSubstr;

TensorInfo Info(DType dtype, std::vector<int64_t> shape) {
  TensorInfo info;
  info.dtype = dtype;
  info.rank_known = true;
  info.shape = std::move(shape);
  return info;
}

Tensor Floats(std::vector<float> values, Shape shape) {
  return Tensor::FromVector(values, std::move(shape));
}

Tensor Filled(Shape shape, float value) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (float& v : t.span<float>()) v = value;
  return t;
}

// A one-signature model "m" with inputs and outputs named as in the graph.
struct ModelBuilder {
  import::ImportedModel model;
  import::SignatureGraph sig;
  ir::Graph& g = sig.graph;

  ModelBuilder() {
    model.platform = "onnx";
    model.path = "robustness";
    sig.key = "serving_default";
    sig.method_name = "tensorflow/serving/predict";
  }
  ir::ValueId Input(const std::string& name, DType dtype, std::vector<int64_t> dims) {
    const ir::ValueId v = g.AddValue(name, ir::TensorType::Of(dtype, dims));
    g.inputs.push_back(v);
    sig.input_keys.push_back(name);
    sig.inputs[name] = Info(dtype, dims);
    return v;
  }
  ir::ValueId Op(const std::string& op, std::vector<ir::ValueId> inputs,
                 std::map<std::string, ir::Attribute> attrs = {}) {
    const ir::NodeId id =
        g.AddNode(op, std::move(inputs), 1, std::move(attrs), absl::StrCat(op, "_", g.num_nodes()));
    return g.node(id).outputs[0];
  }
  void Output(const std::string& key, ir::ValueId v, DType dtype = DType::kFloat32) {
    g.outputs.push_back(v);
    sig.output_keys.push_back(key);
    sig.outputs[key] = Info(dtype, {});
    sig.outputs[key].rank_known = false;
  }
  std::shared_ptr<Model> Build(ModelOptions options = {}) {
    model.signatures.push_back(std::move(sig));
    auto loaded = Model::FromImported(std::move(model), options);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *loaded : nullptr;
  }
};

// x[-1, 4] -> MatMul(W[4, 3]) -> Add(b) -> Relu: the optimizer fuses it into one FusedMatMul.
std::shared_ptr<Model> DenseModel(ModelOptions options = {}) {
  ModelBuilder b;
  const auto x = b.Input("x", DType::kFloat32, {-1, 4});
  const auto w = b.g.AddConstant("w", Filled({4, 3}, 0.5f));
  const auto bias = b.g.AddConstant("b", Floats({1, -2, 3}, {3}));
  b.Output("y", b.Op("Relu", {b.Op("Add", {b.Op("MatMul", {x, w}), bias})}));
  return b.Build(options);
}

class BothWays : public ::testing::TestWithParam<bool> {
 protected:
  ModelOptions Options() const {
    ModelOptions options;
    options.disable_optimizer = GetParam();
    return options;
  }
};

TEST_P(BothWays, DenseLayerWithBatchZeroAnswersAnEmptyBatch) {
  auto model = DenseModel(Options());
  ASSERT_NE(model, nullptr);
  auto out = model->Run("serving_default", {{"x", Tensor(DType::kFloat32, Shape{0, 4})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("y").shape(), (Shape{0, 3}));
  // And the next request is served as before.
  out = model->Run("serving_default", {{"x", Filled({2, 4}, 1.0f)}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("y").span<float>()[0], 3.0f);
}

TEST_P(BothWays, ConvolutionWithBatchZeroAnswersAnEmptyBatch) {
  ModelBuilder b;
  const auto x = b.Input("x", DType::kFloat32, {-1, 3, 8, 8});
  const auto w = b.g.AddConstant("w", Filled({2, 3, 3, 3}, 0.1f));
  const auto bias = b.g.AddConstant("b", Floats({1, 2}, {2}));
  const auto conv = b.Op("Conv", {x, w, bias}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  b.Output("y", b.Op("Relu", {conv}));
  auto model = b.Build(Options());
  ASSERT_NE(model, nullptr);
  auto out = model->Run("serving_default", {{"x", Tensor(DType::kFloat32, Shape{0, 3, 8, 8})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("y").shape(), (Shape{0, 2, 8, 8}));
}

TEST_P(BothWays, ZeroInnerDimensionSumsNothing) {
  // [2, 0] x [0, 3] is a [2, 3] of zeros; Gemm then adds beta * C.
  ModelBuilder b;
  const auto a = b.Input("a", DType::kFloat32, {2, -1});
  const auto w = b.Input("w", DType::kFloat32, {-1, 3});
  const auto c = b.g.AddConstant("c", Floats({1, 2, 3}, {3}));
  b.Output("product", b.Op("MatMul", {a, w}));
  b.Output("gemm", b.Op("Gemm", {a, w, c}, {{"beta", 2.0f}}));
  auto model = b.Build(Options());
  ASSERT_NE(model, nullptr);
  auto out = model->Run("serving_default", {{"a", Tensor(DType::kFloat32, Shape{2, 0})},
                                            {"w", Tensor(DType::kFloat32, Shape{0, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->at("product").shape(), (Shape{2, 3}));
  for (float v : out->at("product").span<float>()) EXPECT_EQ(v, 0.0f);
  const std::vector<float> gemm(out->at("gemm").span<float>().begin(),
                                out->at("gemm").span<float>().end());
  EXPECT_EQ(gemm, (std::vector<float>{2, 4, 6, 2, 4, 6}));
}

// Found by onnx_graph_fuzz: constant folding allocated whatever a constant shape said, and
// Range converted a count of 3.5e30 (or of an infinite limit) to int64.
TEST_P(BothWays, HugeConstantShapesAndRangeCountsAreErrorsAtLoadOrRun) {
  ModelBuilder b;
  const auto x = b.Input("x", DType::kFloat32, {1});
  const auto tiled =
      b.Op("Tile", {b.g.AddConstant("t", Floats({1}, {1})),
                    b.g.AddConstant("reps", Tensor::FromVector<int64_t>({int64_t{1} << 40}))});
  b.Output("tiled", b.Op("Add", {tiled, x}));
  auto model = b.Build(Options());
  ASSERT_NE(model, nullptr);
  auto out = model->Run("serving_default", {{"x", Floats({1}, {1})}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();

  for (auto [start, limit, delta] : std::vector<std::tuple<float, float, float>>{
           {-2.0f, std::numeric_limits<float>::infinity(), 1.0f}, {0.5f, 4.0f, 1e-30f}}) {
    ModelBuilder r;
    const auto y = r.Input("y", DType::kFloat32, {});
    r.Output("range", r.Op("Range", {r.g.AddConstant("start", Tensor::Scalar(start)),
                                     r.g.AddConstant("limit", Tensor::Scalar(limit)),
                                     r.g.AddConstant("delta", Tensor::Scalar(delta))}));
    r.Output("y", r.Op("Abs", {y}));
    auto range_model = r.Build(Options());
    ASSERT_NE(range_model, nullptr);
    auto ranged = range_model->Run("serving_default", {{"y", Tensor::Scalar(1.0f)}});
    EXPECT_FALSE(ranged.ok());
    EXPECT_THAT(ranged.status().message(), HasSubstr("elements")) << ranged.status();
  }
}

// onnx_graph_fuzz: Clip(Clip(x, min=0.75), min=inf) is inf everywhere; the fused chain dropped
// the infinite bound as if it were the default. Tile and Pad sizes from a request overflowed.
TEST_P(BothWays, InfiniteClipBoundsAndOverflowingTileAndPadSizes) {
  ModelBuilder b;
  const auto x = b.Input("x", DType::kFloat32, {2, 2});
  const auto repeats = b.Input("repeats", DType::kInt64, {2});
  const auto pads = b.Input("pads", DType::kInt64, {4});
  const auto clipped = b.Op("Clip", {b.Op("Clip", {x, b.g.AddConstant("lo", Tensor::Scalar(0.75f))}),
                                     b.g.AddConstant("inf", Tensor::Scalar(
                                                                std::numeric_limits<float>::infinity()))});
  b.Output("clipped", clipped);
  b.Output("tiled", b.Op("Tile", {x, repeats}));
  b.Output("padded", b.Op("Pad", {x, pads}));
  auto model = b.Build(Options());
  ASSERT_NE(model, nullptr);
  auto run = [&](std::vector<int64_t> reps, std::vector<int64_t> pad) {
    return model->Run("serving_default", {{"x", Floats({2.5f, -1, 0, 4}, {2, 2})},
                                          {"repeats", Tensor::FromVector(reps)},
                                          {"pads", Tensor::FromVector(pad)}});
  };
  auto ok = run({1, 2}, {0, 1, 0, 1});
  ASSERT_TRUE(ok.ok()) << ok.status();
  for (float v : ok->at("clipped").span<float>()) EXPECT_EQ(v, std::numeric_limits<float>::infinity());
  EXPECT_EQ(ok->at("tiled").shape(), (Shape{2, 4}));
  EXPECT_EQ(ok->at("padded").shape(), (Shape{2, 4}));
  auto tile_overflow = run({int64_t{1} << 62, int64_t{1} << 62}, {0, 0, 0, 0});
  EXPECT_FALSE(tile_overflow.ok());
  EXPECT_NE(tile_overflow.status().code(), absl::StatusCode::kInternal) << tile_overflow.status();
  auto pad_overflow = run({1, 1}, {std::numeric_limits<int64_t>::max(), 0, 1, 0});
  EXPECT_FALSE(pad_overflow.ok());
  auto pad_huge = run({1, 1}, {int64_t{1} << 40, 0, 0, 0});
  EXPECT_EQ(pad_huge.status().code(), absl::StatusCode::kResourceExhausted) << pad_huge.status();
  EXPECT_TRUE(run({1, 1}, {0, 0, 0, 0}).ok());
}

// onnx_graph_fuzz: merging Reshape(Reshape(x, []), [-1]) made an invalid graph run.
TEST_P(BothWays, ReshapeChainsFailOrSucceedTogether) {
  for (auto [inner, ok] : std::vector<std::pair<std::vector<int64_t>, bool>>{
           {{}, false}, {{3, -1}, false}, {{-1, 5}, true}, {{10, 2}, true}}) {
    ModelBuilder b;
    const auto x = b.Input("x", DType::kFloat32, {2, 1, 2, 5});
    const auto once = b.Op("Reshape", {x, b.g.AddConstant("inner", Tensor::FromVector(inner))});
    b.Output("y", b.Op("Reshape", {once, b.g.AddConstant("outer", Tensor::FromVector<int64_t>(
                                                                       {-1, 10}))}));
    auto model = b.Build(Options());
    ASSERT_NE(model, nullptr);
    auto out = model->Run("serving_default", {{"x", Filled({2, 1, 2, 5}, 1.0f)}});
    EXPECT_EQ(out.ok(), ok) << Shape(inner).ToString() << ": " << out.status();
    if (out.ok()) {
      EXPECT_EQ(out->at("y").shape(), (Shape{2, 10}));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OptimizedAndNot, BothWays, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "unoptimized" : "optimized"; });

// ConstantOfShape, Range, Tile and Expand size their outputs from input values.
TEST(RunMemoryBudget, OutputsSizedByRequestValuesAreResourceExhausted) {
  ModelBuilder b;
  const auto shape = b.Input("shape", DType::kInt64, {3});
  const auto limit = b.Input("limit", DType::kFloat32, {});
  const auto repeats = b.Input("repeats", DType::kInt64, {2});
  const auto x = b.g.AddConstant("x", Filled({2, 2}, 1.0f));
  b.Output("filled", b.Op("ConstantOfShape", {shape}));
  b.Output("range", b.Op("Range", {b.g.AddConstant("start", Tensor::Scalar(0.0f)), limit,
                                   b.g.AddConstant("delta", Tensor::Scalar(1.0f))}));
  b.Output("tiled", b.Op("Tile", {x, repeats}));
  b.Output("expanded", b.Op("Expand", {x, b.Op("Abs", {repeats})}));
  auto model = b.Build();
  ASSERT_NE(model, nullptr);
  auto run = [&](std::vector<int64_t> dims, float range_limit, std::vector<int64_t> reps) {
    return model->Run("serving_default", {{"shape", Tensor::FromVector(dims)},
                                          {"limit", Tensor::Scalar(range_limit)},
                                          {"repeats", Tensor::FromVector(reps)}});
  };
  auto ok = run({2, 3, 4}, 5.0f, {2, 2});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->at("filled").shape(), (Shape{2, 3, 4}));

  auto huge = run({100000, 100000, 100000}, 5.0f, {2, 2});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(huge.status().message(), HasSubstr("ConstantOfShape"));
  EXPECT_THAT(huge.status().message(), HasSubstr("[100000, 100000, 100000]"));

  auto overflow = run({int64_t{1} << 40, int64_t{1} << 40, 4}, 5.0f, {2, 2});
  EXPECT_FALSE(overflow.ok());

  auto long_range = run({1, 1, 1}, 1e15f, {2, 2});
  EXPECT_EQ(long_range.status().code(), absl::StatusCode::kResourceExhausted)
      << long_range.status();
  EXPECT_THAT(long_range.status().message(), HasSubstr("Range"));

  auto tiled = run({1, 1, 1}, 5.0f, {int64_t{1} << 31, int64_t{1} << 31});
  EXPECT_FALSE(tiled.ok());
  EXPECT_NE(tiled.status().code(), absl::StatusCode::kInternal) << tiled.status();

  // Nothing was lost: the same model still answers.
  ok = run({1, 2, 3}, 3.0f, {1, 1});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->at("range").num_elements(), 3);
}

TEST(RunMemoryBudget, IsAModelOptionAndNamesTheLargestValueAtCompile) {
  // x[-1, 4] -> MatMul(W[4, 64]) -> Relu -> MatMul(W2[64, 1]): the hidden layer is the
  // largest value, 64 floats per row.
  ModelOptions options;
  options.run_memory_budget_bytes = 1 << 20;
  ModelBuilder b;
  const auto x = b.Input("x", DType::kFloat32, {-1, 4});
  const auto hidden =
      b.Op("Relu", {b.Op("MatMul", {x, b.g.AddConstant("w", Filled({4, 64}, 0.5f))})});
  b.Output("y", b.Op("MatMul", {hidden, b.g.AddConstant("w2", Filled({64, 1}, 0.5f))}));
  auto model = b.Build(options);
  ASSERT_NE(model, nullptr);
  auto big = model->Run("serving_default", {{"x", Filled({5000, 4}, 1.0f)}});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  EXPECT_THAT(big.status().message(), HasSubstr("1048576"));
  EXPECT_THAT(big.status().message(), HasSubstr("[5000, 64]"));
  // An input alone over the budget is refused before any kernel sees its shape.
  auto huge_input = model->Run("serving_default", {{"x", Filled({100000, 4}, 1.0f)}});
  EXPECT_EQ(huge_input.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(huge_input.status().message(), HasSubstr("graph input 'x'"));
  auto small = model->Run("serving_default", {{"x", Filled({4, 4}, 1.0f)}});
  EXPECT_TRUE(small.ok()) << small.status();
}

TEST(RunMemoryBudget, ShapesBeyondTheMachineFailToCompileWithoutAllocating) {
  auto model = DenseModel();
  ASSERT_NE(model, nullptr);
  absl::Status status = model->Precompile("serving_default", {{"x", Shape{int64_t{1} << 40, 4}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  status = model->Precompile("serving_default", {{"x", Shape{int64_t{1} << 32, int64_t{1} << 32}}});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("63 bits"));
}

TEST(RunMemoryBudget, DefaultIsHalfOfTheMachinesMemory) {
  const size_t limit = MemoryBudget::DefaultLimit();
  EXPECT_GT(limit, size_t{64} << 20);
  MemoryBudget budget(1000);
  EXPECT_TRUE(budget.TryReserve(600));
  EXPECT_FALSE(budget.TryReserve(600));
  EXPECT_EQ(budget.used(), 600u);
  EXPECT_FALSE(budget.TryReserve(~size_t{0}));
}

}  // namespace
}  // namespace kiln::runtime
