// Exact pruning in the real load path: a model with all-zero filters loaded with
// allow_compression (no calibration data, no MatMul: only prune_zero_channels can change the
// conv-only graph) runs the pass on the fp32-optimized graph, as its optimization log shows,
// and answers what the uncompressed model answers: equal within float summation order on
// random inputs, NaN where it has NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "kiln/runtime/model.h"

namespace kiln::runtime {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;

Tensor Random(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Random filters, of which those in `zero` are all zero (weights and bias).
std::pair<Tensor, Tensor> Filters(Shape shape, const std::set<int64_t>& zero, uint32_t seed) {
  Tensor w = Random(shape, seed);
  Tensor b = Random(Shape{shape.dim(0)}, seed + 1);
  const int64_t per = w.num_elements() / shape.dim(0);
  for (int64_t c : zero) {
    std::fill_n(w.data<float>() + c * per, per, 0.0f);
    b.data<float>()[c] = 0.0f;
  }
  return {w, b};
}

ValueId Conv(Graph& g, ValueId x, Shape shape, const std::set<int64_t>& zero, uint32_t seed,
             const std::string& name, int64_t group = 1) {
  auto [w, b] = Filters(shape, zero, seed);
  const ValueId wv = g.AddConstant(name + "_w", w);
  const ValueId bv = g.AddConstant(name + "_b", b);
  const ir::NodeId id = g.AddNode(
      "Conv", {x, wv, bv}, 1, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", group}}, name);
  return g.node(id).outputs[0];
}

ValueId Unary(Graph& g, const std::string& op, ValueId x) {
  return g.node(g.AddNode(op, {x}, 1, {}, op)).outputs[0];
}

// clang-format reads "import::" as a C++20 module import and mangles what follows.
// clang-format off
import::ImportedModel MobileNetStyle() {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, 8, 10, 10}));
  g.inputs = {x};
  // expand 8 -> 32 (8 zero filters), Relu, depthwise 32, Relu, project 32 -> 16 (4 zero),
  // Relu, conv 16 -> 16. The depthwise filters of the expand's zero channels are zero too (a
  // bias there would make the channel a nonzero constant that the project conv reads).
  const std::set<int64_t> expand_zero = {1, 5, 6, 9, 17, 20, 30, 31};
  ValueId y = Unary(g, "Relu", Conv(g, x, Shape{32, 8, 3, 3}, expand_zero, 1, "expand"));
  y = Unary(g, "Relu", Conv(g, y, Shape{32, 1, 3, 3}, expand_zero, 3, "depthwise", 32));
  y = Unary(g, "Relu", Conv(g, y, Shape{16, 32, 3, 3}, {0, 7, 8, 15}, 5, "project"));
  y = Conv(g, y, Shape{16, 16, 3, 3}, {}, 7, "head");
  g.outputs = {y};

  import::ImportedModel m;
  m.platform = "onnx";
  m.path = "prune_at_load_test";
  import::SignatureGraph sig;
  sig.key = "serving_default";
  sig.method_name = "tensorflow/serving/predict";
  sig.input_keys = {"x"};
  sig.inputs["x"] = TensorInfo{"x", DType::kFloat32, true, {-1, 8, 10, 10}};
  sig.output_keys = {"y"};
  sig.outputs["y"] = TensorInfo{"y", DType::kFloat32, false, {}};
  sig.graph = g;
  m.signatures.push_back(std::move(sig));
  return m;
}
// clang-format on

TEST(PruneAtLoadTest, AllowCompressionRemovesZeroFiltersAndAnswersTheSame) {
  // Direct convolutions only: pruning leaves 12 channels, which Winograd does not take, while
  // the unpruned 16-channel head may run Winograd (its rounding differs by ~1e-6 of the
  // output's range): the comparison is about pruning, exact up to the sums' order.
  ASSERT_EQ(setenv("KILN_CONV_WINOGRAD", "0", 1), 0);
  struct Restore {
    ~Restore() { unsetenv("KILN_CONV_WINOGRAD"); }
  } restore;
  ModelOptions plain_options;
  auto plain = Model::FromImported(MobileNetStyle(), plain_options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ModelOptions options;
  options.allow_compression = true;
  auto pruned = Model::FromImported(MobileNetStyle(), options);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  const std::string inspect = (*pruned)->Inspect();
  EXPECT_NE(inspect.find("pruned 8 of 32 all-zero output channels"), std::string::npos) << inspect;
  EXPECT_NE(inspect.find("pruned 4 of 16 all-zero output channels"), std::string::npos) << inspect;
  EXPECT_EQ((*plain)->Inspect().find("prune_zero_channels"), std::string::npos);

  Tensor finite = Random(Shape{3, 8, 10, 10}, 11);
  Tensor with_nan = Random(Shape{3, 8, 10, 10}, 12);
  with_nan.data<float>()[123] = std::nanf("");
  for (const Tensor& x : {finite, with_nan}) {
    auto expected = (*plain)->Run("serving_default", {{"x", x}});
    auto actual = (*pruned)->Run("serving_default", {{"x", x}});
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(actual.ok()) << actual.status();
    const Tensor& e = expected->at("y");
    const Tensor& a = actual->at("y");
    ASSERT_EQ(e.shape(), a.shape());
    int64_t nans = 0;
    for (int64_t i = 0; i < e.num_elements(); ++i) {
      const float r = e.data<float>()[i], p = a.data<float>()[i];
      ASSERT_EQ(std::isnan(r), std::isnan(p)) << i;
      nans += std::isnan(r);
      if (!std::isnan(r)) {
        ASSERT_NEAR(p, r, 2e-6 * (1 + std::fabs(r))) << i;
      }
    }
    if (&x == &with_nan) {
      EXPECT_GT(nans, 0);
    }
  }
}

}  // namespace kiln::runtime
}  // namespace kiln::runtime
