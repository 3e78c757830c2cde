// Optimizations preserve semantics: every rewrite the optimizer performs must compute what the
// unoptimized graph computes, special values included. Each test builds a graph that one pass
// rewrites, loads it twice through kiln::runtime::Model (optimizer off and on), feeds inputs
// (and, where the pass folds weights, constants) holding NaN, +Inf, -Inf, -0.0 and denormals,
// and compares: NaN where the reference has NaN, the same signed infinity, the same sign of
// zero where both are zero, other values within rtol 1e-4 / atol 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/runtime/model.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;
using runtime::Model;
using runtime::ModelOptions;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kDenorm = 1e-40f;                                        // subnormal
constexpr float kTinyDenorm = std::numeric_limits<float>::denorm_min();  // 1.4e-45

// Values every special-value input cycles through, spread over normal random numbers.
const std::vector<float>& Specials() {
  static const std::vector<float> v = {kNaN,     kInf,        -kInf,        -0.0f, 0.0f,  kDenorm,
                                       -kDenorm, kTinyDenorm, -kTinyDenorm, 1e30f, -1e30f};
  return v;
}

Tensor Random(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Random values with every `stride`-th element replaced by the next special value.
Tensor WithSpecials(Shape shape, uint32_t seed, int stride = 3, float lo = -2.0f, float hi = 2.0f) {
  Tensor t = Random(shape, seed, lo, hi);
  auto span = t.span<float>();
  size_t k = seed % Specials().size();
  for (size_t i = seed % stride; i < span.size(); i += stride)
    span[i] = Specials()[k++ % Specials().size()];
  return t;
}

Tensor Filled(Shape shape, float value) {
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = value;
  return t;
}

Tensor Values(std::vector<float> v, Shape shape) { return Tensor::FromVector<float>(v, shape); }

ValueId Const(Graph& g, const std::string& name, Tensor t) {
  return g.AddConstant(name, std::move(t));
}
ValueId Scalar(Graph& g, const std::string& name, float v) {
  return g.AddConstant(name, Tensor::Scalar<float>(v));
}

ValueId Op(Graph& g, const std::string& op, std::vector<ValueId> inputs,
           std::map<std::string, ir::Attribute> attrs = {}) {
  const ir::NodeId id = g.AddNode(op, std::move(inputs), 1, std::move(attrs), op);
  return g.node(id).outputs[0];
}

// A graph under test: its inputs (name, shape) in order; outputs are named y0, y1, ...
struct TestGraph {
  Graph graph;
  std::vector<std::pair<std::string, Shape>> inputs;

  ValueId Input(const std::string& name, Shape shape) {
    const ValueId v = graph.AddValue(name, TensorType::Of(DType::kFloat32, shape.ToVector()));
    graph.inputs.push_back(v);
    inputs.emplace_back(name, shape);
    return v;
  }
};

import::ImportedModel ToModel(const TestGraph& t){import::ImportedModel m;
m.platform = "onnx";
m.path = "semantics_test";
import::SignatureGraph sig;
sig.key = "serving_default";
sig.method_name = "tensorflow/serving/predict";
for (const auto& [name, shape] : t.inputs) {
  sig.input_keys.push_back(name);
  import::TensorInfo info;
  info.name = name;
  info.dtype = DType::kFloat32;
  info.rank_known = true;
  info.shape = shape.ToVector();
  sig.inputs[name] = info;
}
for (size_t i = 0; i < t.graph.outputs.size(); ++i) {
  const std::string key = absl::StrCat("y", i);
  sig.output_keys.push_back(key);
  import::TensorInfo info;
  info.name = key;
  info.dtype = DType::kFloat32;
  sig.outputs[key] = info;
}
sig.graph = t.graph;
m.signatures.push_back(std::move(sig));
return m;
}  // namespace

std::string Show(float v) {
  char bits[16];
  uint32_t u;
  std::memcpy(&u, &v, 4);
  std::snprintf(bits, sizeof(bits), "%08x", u);
  return absl::StrCat(v, " (0x", bits, ")");
}

// Empty when `actual` matches `expected` under the rules at the top of this file; else the
// first mismatches.
std::string Mismatches(const Tensor& expected, const Tensor& actual,
                       const Tensor* input = nullptr) {
  if (expected.shape() != actual.shape()) {
    return absl::StrCat("shape ", actual.shape().ToString(), ", expected ",
                        expected.shape().ToString());
  }
  std::string out;
  int shown = 0, bad = 0;
  const float* e = expected.data<float>();
  const float* a = actual.data<float>();
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const float r = e[i], x = a[i];
    bool ok;
    if (std::isnan(r) || std::isnan(x)) {
      ok = std::isnan(r) && std::isnan(x);
    } else if (std::isinf(r) || std::isinf(x)) {
      ok = r == x;
    } else if (r == 0 && x == 0) {
      ok = std::signbit(r) == std::signbit(x);
    } else {
      ok = std::fabs(static_cast<double>(x) - r) <= 1e-5 + 1e-4 * std::fabs(static_cast<double>(r));
    }
    if (ok) continue;
    ++bad;
    if (shown++ < 6) {
      absl::StrAppend(&out, "\n  [", i, "] optimized ", Show(x), ", unoptimized ", Show(r));
      if (input != nullptr && input->num_elements() == expected.num_elements()) {
        absl::StrAppend(&out, ", input ", Show(input->data<float>()[i]));
      }
    }
  }
  if (bad > 0) out = absl::StrCat(bad, " of ", expected.num_elements(), " values differ:", out);
  return out;
}

std::shared_ptr<Model> Load(const TestGraph& t, bool optimize) {
  ModelOptions options;
  options.disable_optimizer = !optimize;
  auto model = Model::FromImported(ToModel(t), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// Runs `t` with and without the optimizer on `inputs` and checks the outputs agree. Checks
// that every pass named in `passes` changed the graph (so the test exercises the rewrite).
void ExpectSameResults(const TestGraph& t, const std::vector<Tensor>& inputs,
                       const std::vector<std::string>& passes) {
  std::shared_ptr<Model> plain = Load(t, false);
  std::shared_ptr<Model> optimized = Load(t, true);
  ASSERT_TRUE(plain && optimized);
  const std::string inspect = optimized->Inspect();
  for (const std::string& pass : passes) {
    EXPECT_NE(inspect.find(pass), std::string::npos) << "pass " << pass << " did not run:\n"
                                                     << inspect;
  }
  std::map<std::string, Tensor> feed;
  for (size_t i = 0; i < inputs.size(); ++i) feed[t.inputs[i].first] = inputs[i];
  auto expected = plain->Run("serving_default", feed);
  auto actual = optimized->Run("serving_default", feed);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  for (const auto& [key, value] : *expected) {
    ASSERT_TRUE(actual->count(key)) << key;
    const Tensor* input = inputs.size() == 1 ? &inputs[0] : nullptr;
    const std::string diff = Mismatches(value, actual->at(key), input);
    EXPECT_TRUE(diff.empty()) << "output " << key << ": " << diff << "\n" << inspect;
  }
}

// --- Conv / MatMul / Gemm with post-ops (conv_matmul_post_op_fusion) ---------------------

struct Activation {
  std::string op;
  std::map<std::string, ir::Attribute> attrs;
  std::vector<float> bounds;  // Clip min/max as constant inputs (NaN: absent)
};

std::vector<Activation> Activations() {
  return {{"Relu", {}, {}},
          {"LeakyRelu", {{"alpha", 0.1f}}, {}},
          {"LeakyRelu", {{"alpha", 0.0f}}, {}},
          {"Clip", {}, {0.0f, 6.0f}},
          {"Clip", {}, {-1.0f}},
          {"Sigmoid", {}, {}},
          {"Tanh", {}, {}},
          {"Elu", {{"alpha", 1.0f}}, {}},
          {"HardSwish", {}, {}},
          {"Softplus", {}, {}},
          {"Gelu", {}, {}},
          {"Gelu", {{"approximate", std::string("tanh")}}, {}}};
}

ValueId Activate(Graph& g, ValueId x, const Activation& a, int index) {
  std::vector<ValueId> inputs = {x};
  for (size_t i = 0; i < a.bounds.size(); ++i)
    inputs.push_back(Scalar(g, absl::StrCat("bound", index, i), a.bounds[i]));
  return Op(g, a.op, inputs, a.attrs);
}

TEST(SemanticsTest, ConvBiasActivation) {
  int index = 0;
  for (const Activation& act : Activations()) {
    SCOPED_TRACE(act.op);
    TestGraph t;
    const ValueId x = t.Input("x", Shape{1, 3, 6, 6});
    ValueId y = Op(t.graph, "Conv", {x, Const(t.graph, "w", Random(Shape{4, 3, 1, 1}, 1))});
    y = Op(t.graph, "Add", {y, Const(t.graph, "b", Random(Shape{1, 4, 1, 1}, 2))});
    t.graph.outputs = {Activate(t.graph, y, act, index++)};
    ExpectSameResults(t, {WithSpecials(Shape{1, 3, 6, 6}, 3, 5)}, {"conv_matmul_post_op_fusion"});
    // A NaN image: every output is NaN whatever the activation.
    ExpectSameResults(t, {Filled(Shape{1, 3, 6, 6}, kNaN)}, {});
  }
}

TEST(SemanticsTest, ConvResidualAddRelu) {
  TestGraph t;
  const ValueId x = t.Input("x", Shape{1, 4, 5, 5});
  const ValueId r = t.Input("r", Shape{1, 4, 5, 5});
  ValueId y = Op(t.graph, "Conv",
                 {x, Const(t.graph, "w", Random(Shape{4, 4, 3, 3}, 1)),
                  Const(t.graph, "b", Random(Shape{4}, 2))},
                 {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  t.graph.outputs = {Op(t.graph, "Relu", {Op(t.graph, "Add", {y, r})})};
  // x finite, the residual carries the special values (so they reach the Relu unsmeared).
  ExpectSameResults(t, {Random(Shape{1, 4, 5, 5}, 3), WithSpecials(Shape{1, 4, 5, 5}, 4, 2)},
                    {"conv_matmul_post_op_fusion"});
}

TEST(SemanticsTest, ConvWithSpecialWeightsRelu) {
  TestGraph t;
  const ValueId x = t.Input("x", Shape{1, 2, 4, 4});
  Tensor w = Random(Shape{6, 2, 1, 1}, 1);
  w.data<float>()[0] = kNaN;
  w.data<float>()[3] = kInf;
  w.data<float>()[5] = -kInf;
  w.data<float>()[7] = -0.0f;
  w.data<float>()[9] = kDenorm;
  ValueId y = Op(t.graph, "Conv", {x, Const(t.graph, "w", w)});
  t.graph.outputs = {Op(t.graph, "Relu", {y})};
  ExpectSameResults(t, {Random(Shape{1, 2, 4, 4}, 2)}, {"conv_matmul_post_op_fusion"});
}

TEST(SemanticsTest, GemmAndMatMulActivations) {
  int index = 0;
  for (const Activation& act : Activations()) {
    SCOPED_TRACE(act.op);
    {
      TestGraph t;
      const ValueId x = t.Input("x", Shape{5, 8});
      ValueId y = Op(t.graph, "Gemm",
                     {x, Const(t.graph, "w", Random(Shape{6, 8}, 1)),
                      Const(t.graph, "c", Random(Shape{6}, 2))},
                     {{"transB", int64_t{1}}, {"alpha", 2.0f}});
      t.graph.outputs = {Activate(t.graph, y, act, index++)};
      ExpectSameResults(t, {WithSpecials(Shape{5, 8}, 3, 4)}, {"conv_matmul_post_op_fusion"});
    }
    {
      TestGraph t;
      const ValueId x = t.Input("x", Shape{2, 3, 8});
      ValueId y = Op(t.graph, "MatMul", {x, Const(t.graph, "w", Random(Shape{8, 6}, 1))});
      y = Op(t.graph, "Add", {y, Const(t.graph, "b", Random(Shape{6}, 2))});
      t.graph.outputs = {Activate(t.graph, y, act, index++)};
      ExpectSameResults(t, {WithSpecials(Shape{2, 3, 8}, 5, 7)}, {"conv_matmul_post_op_fusion"});
    }
  }
}

// x @ W + x: the fused node's residual is also its product's input, which the kernel must not
// overwrite with its output while it still reads it (same for a conv's input added back).
TEST(SemanticsTest, ResidualThatIsAlsoTheProductInput) {
  {
    TestGraph t;
    const ValueId x = t.Input("x", Shape{6, 8});
    ValueId y = Op(t.graph, "MatMul", {x, Const(t.graph, "w", Random(Shape{8, 8}, 1))});
    t.graph.outputs = {Op(t.graph, "Relu", {Op(t.graph, "Add", {y, x})})};
    ExpectSameResults(t, {WithSpecials(Shape{6, 8}, 2, 5)}, {});
    ExpectSameResults(t, {Random(Shape{6, 8}, 3)}, {});
  }
  {
    TestGraph t;
    const ValueId x = t.Input("x", Shape{1, 4, 5, 5});
    ValueId y = Op(t.graph, "Conv", {x, Const(t.graph, "w", Random(Shape{4, 4, 3, 3}, 1))},
                   {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    t.graph.outputs = {Op(t.graph, "Add", {y, x})};
    ExpectSameResults(t, {Random(Shape{1, 4, 5, 5}, 3)}, {});
  }
}

// A tabular model: rows with NaN or Inf features must give NaN, not finite probabilities.
TEST(SemanticsTest, TabularMlpWithNanRows) {
  TestGraph t;
  const ValueId x = t.Input("x", Shape{4, 6});
  ValueId h = Op(t.graph, "MatMul", {x, Const(t.graph, "w1", Random(Shape{6, 8}, 1))});
  h = Op(t.graph, "Relu", {Op(t.graph, "Add", {h, Const(t.graph, "b1", Random(Shape{8}, 2))})});
  h = Op(
      t.graph, "Gemm",
      {h, Const(t.graph, "w2", Random(Shape{8, 3}, 3)), Const(t.graph, "b2", Random(Shape{3}, 4))});
  t.graph.outputs = {Op(t.graph, "Softmax", {h}, {{"axis", int64_t{-1}}})};
  Tensor in = Random(Shape{4, 6}, 5);
  in.data<float>()[1] = kNaN;    // row 0
  in.data<float>()[8] = kInf;    // row 1
  in.data<float>()[15] = -kInf;  // row 2
  ExpectSameResults(t, {in}, {"conv_matmul_post_op_fusion"});
}

// --- BatchNormalization folding (batchnorm_folding) -----------------------------------------

TestGraph ConvBatchNorm(Tensor w, Tensor scale, Tensor shift, Tensor mean, Tensor var, float eps,
                        bool relu) {
  TestGraph t;
  const ValueId x = t.Input("x", Shape{1, 2, 4, 4});
  ValueId y = Op(t.graph, "Conv", {x, Const(t.graph, "w", std::move(w))});
  y = Op(t.graph, "BatchNormalization",
         {y, Const(t.graph, "scale", std::move(scale)), Const(t.graph, "shift", std::move(shift)),
          Const(t.graph, "mean", std::move(mean)), Const(t.graph, "var", std::move(var))},
         {{"epsilon", eps}});
  if (relu) y = Op(t.graph, "Relu", {y});
  t.graph.outputs = {y};
  return t;
}

TEST(SemanticsTest, ConvBatchNormReluOnSpecialInputs) {
  TestGraph t = ConvBatchNorm(Random(Shape{4, 2, 1, 1}, 1), Random(Shape{4}, 2, 0.5f, 1.5f),
                              Random(Shape{4}, 3), Random(Shape{4}, 4),
                              Random(Shape{4}, 5, 0.5f, 2.0f), 1e-5f, true);
  ExpectSameResults(t, {WithSpecials(Shape{1, 2, 4, 4}, 6, 3)}, {"batchnorm_folding"});
  ExpectSameResults(t, {Filled(Shape{1, 2, 4, 4}, kNaN)}, {});
}

TEST(SemanticsTest, ConvBatchNormFoldsSpecialStatisticsExactly) {
  // Per output channel: 0 normal with Inf, NaN, -0.0 and denormal weights; 1 var = Inf (factor
  // 0); 2 mean = Inf; 3 scale = 0; 4 mean NaN; 5 shift Inf; 6 tiny scale (denormal weights).
  Tensor w = Random(Shape{7, 2, 1, 1}, 1);
  w.data<float>()[0] = kInf;
  w.data<float>()[1] = -0.0f;
  w.data<float>()[3] = kDenorm;
  Tensor scale = Values({1.0f, 1.0f, 1.0f, 0.0f, 1.0f, 1.0f, 1e-38f}, Shape{7});
  Tensor shift = Values({0.5f, 0.25f, -1.0f, 2.0f, 0.0f, kInf, -0.0f}, Shape{7});
  Tensor mean = Values({0.1f, 0.5f, kInf, 0.2f, kNaN, 0.0f, 0.0f}, Shape{7});
  Tensor var = Values({1.0f, kInf, 1.0f, 1.0f, 1.0f, 2.0f, 1.0f}, Shape{7});
  TestGraph t = ConvBatchNorm(w, scale, shift, mean, var, 1e-5f, true);
  Tensor in = WithSpecials(Shape{1, 2, 4, 4}, 7, 4);
  ExpectSameResults(t, {in}, {"batchnorm_folding"});
}

// Statistics whose folding would change results: the BatchNorm must stay (or fold exactly).
TEST(SemanticsTest, ConvBatchNormWithSpecialStatistics) {
  // Per output channel: 0 normal; 1 var + eps == 0 (infinite scale factor); 2 var = Inf;
  // 3 mean = Inf; 4 scale = 0; 5 var NaN; 6 scale tiny (weights underflow when folded);
  // 7 scale huge (weights overflow when folded).
  Tensor w = Random(Shape{8, 2, 1, 1}, 1);
  w.data<float>()[1] = kInf;  // channel 0 has an infinite weight too
  Tensor scale = Values({1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 1.0f, 1e-38f, 1e38f}, Shape{8});
  Tensor shift = Random(Shape{8}, 2);
  Tensor mean = Values({0.1f, 0.5f, 0.0f, kInf, 0.2f, 0.0f, 0.0f, 0.0f}, Shape{8});
  Tensor var = Values({1.0f, 0.0f, kInf, 1.0f, 1.0f, kNaN, 1.0f, 1e-6f}, Shape{8});
  TestGraph t = ConvBatchNorm(w, scale, shift, mean, var, 0.0f, false);
  Tensor in = Random(Shape{1, 2, 4, 4}, 7);
  in.data<float>()[0] = kInf;
  in.data<float>()[5] = 0.0f;
  in.data<float>()[17] = 0.0f;
  in.data<float>()[21] = -kInf;
  ExpectSameResults(t, {in}, {});
}

// --- GELU and LayerNorm pattern fusion ------------------------------------------------------

TEST(SemanticsTest, DecomposedGelu) {
  for (bool half_first : {false, true}) {
    TestGraph t;
    const ValueId x = t.Input("x", Shape{3, 11});
    ValueId e = Op(t.graph, "Erf", {Op(t.graph, "Div", {x, Scalar(t.graph, "sqrt2", 1.4142135f)})});
    ValueId one_plus = Op(t.graph, "Add", {e, Scalar(t.graph, "one", 1.0f)});
    ValueId y;
    if (half_first) {
      y = Op(t.graph, "Mul", {Op(t.graph, "Mul", {x, Scalar(t.graph, "half", 0.5f)}), one_plus});
    } else {
      y = Op(t.graph, "Mul", {Op(t.graph, "Mul", {x, one_plus}), Scalar(t.graph, "half", 0.5f)});
    }
    t.graph.outputs = {y};
    ExpectSameResults(t, {WithSpecials(Shape{3, 11}, 1, 2, -12.0f, 12.0f)}, {"gelu_fusion"});
  }
}

TEST(SemanticsTest, GeluWithNearbyConstantIsNotRewrittenToGelu) {
  // 0.5001 is not 0.5: the pattern must match the constants GELU has, not approximately.
  TestGraph t;
  const ValueId x = t.Input("x", Shape{2, 8});
  ValueId e = Op(t.graph, "Erf", {Op(t.graph, "Div", {x, Scalar(t.graph, "sqrt2", 1.4142135f)})});
  ValueId y = Op(t.graph, "Mul",
                 {Op(t.graph, "Mul", {x, Op(t.graph, "Add", {e, Scalar(t.graph, "one", 1.0f)})}),
                  Scalar(t.graph, "half", 0.50004f)});
  t.graph.outputs = {y};
  Tensor in = Filled(Shape{2, 8}, 3000.0f);
  std::shared_ptr<Model> plain = Load(t, false);
  std::shared_ptr<Model> optimized = Load(t, true);
  ASSERT_TRUE(plain && optimized);
  auto expected = plain->Run("serving_default", {{"x", in}});
  auto actual = optimized->Run("serving_default", {{"x", in}});
  ASSERT_TRUE(expected.ok() && actual.ok());
  // Exactly, not within a tolerance: the optimizer may fuse the chain but not change its constant.
  EXPECT_EQ(actual->at("y0").data<float>()[0], expected->at("y0").data<float>()[0]);
}

TEST(SemanticsTest, DecomposedLayerNorm) {
  for (int affine = 0; affine < 3; ++affine) {  // none, * gamma, * gamma + beta
    SCOPED_TRACE(affine);
    TestGraph t;
    const ValueId x = t.Input("x", Shape{6, 8});
    const ValueId axes = Const(t.graph, "axes", Tensor::FromVector<int64_t>({-1}));
    ValueId mean = Op(t.graph, "ReduceMean", {x, axes});
    ValueId d = Op(t.graph, "Sub", {x, mean});
    ValueId var =
        Op(t.graph, "ReduceMean", {Op(t.graph, "Pow", {d, Scalar(t.graph, "two", 2.0f)}), axes});
    ValueId y =
        Op(t.graph, "Div",
           {d, Op(t.graph, "Sqrt", {Op(t.graph, "Add", {var, Scalar(t.graph, "eps", 1e-5f)})})});
    Tensor gamma = Random(Shape{8}, 3);
    gamma.data<float>()[0] = -1.0f;
    if (affine >= 1) y = Op(t.graph, "Mul", {y, Const(t.graph, "gamma", gamma)});
    if (affine >= 2) y = Op(t.graph, "Add", {y, Const(t.graph, "beta", Random(Shape{8}, 4))});
    t.graph.outputs = {y};
    // Rows: 0 normal; 1 one NaN; 2 one +Inf; 3 one -Inf; 4 all -0.0; 5 denormals.
    Tensor in = Random(Shape{6, 8}, 5, -3.0f, 3.0f);
    float* v = in.data<float>();
    v[8 + 2] = kNaN;
    v[16 + 3] = kInf;
    v[24 + 4] = -kInf;
    for (int i = 0; i < 8; ++i) v[32 + i] = -0.0f;
    for (int i = 0; i < 8; ++i) v[40 + i] = (i % 2 ? -1 : 1) * kDenorm * (i + 1);
    ExpectSameResults(t, {in}, {"layernorm_fusion"});
  }
}

// --- Elementwise chains (elementwise_chain_fusion) -----------------------------------------

TEST(SemanticsTest, ElementwiseChains) {
  TestGraph t;
  const ValueId a = t.Input("a", Shape{4, 9});
  const ValueId b = t.Input("b", Shape{9});
  Graph& g = t.graph;
  // x + 0, x * 1, x - x, x * 0 and a chain of activations, with special-valued immediates.
  ValueId s = Op(g, "Add", {a, Scalar(g, "zero", 0.0f)});
  s = Op(g, "Mul", {s, Scalar(g, "one", 1.0f)});
  ValueId d = Op(g, "Sub", {s, s});
  ValueId z = Op(g, "Mul", {Op(g, "Relu", {d}), Scalar(g, "zero2", 0.0f)});
  ValueId m = Op(g, "Max", {Op(g, "Add", {z, b}), Scalar(g, "nzero", -0.0f)});
  m = Op(g, "Min", {m, Scalar(g, "big", 1e30f)});
  m = Op(g, "Mul", {m, Scalar(g, "denorm", kDenorm)});
  m = Op(g, "Div", {m, Scalar(g, "tiny", kTinyDenorm)});
  m = Op(g, "Sigmoid", {Op(g, "LeakyRelu", {m}, {{"alpha", 0.2f}})});
  ValueId c = Op(g, "Clip", {Op(g, "Sub", {a, b}), Scalar(g, "lo", -1.0f), Scalar(g, "hi", kInf)});
  c = Op(g, "Pow", {Op(g, "Abs", {c}), Scalar(g, "half", 0.5f)});
  c = Op(g, "Add", {Op(g, "Neg", {c}), Scalar(g, "nan", kNaN)});
  t.graph.outputs = {m, c, Op(g, "Add", {a, Scalar(g, "negzero", -0.0f)})};
  ExpectSameResults(t, {WithSpecials(Shape{4, 9}, 1, 2), WithSpecials(Shape{9}, 2, 3)},
                    {"elementwise_chain_fusion"});
}

TEST(SemanticsTest, ElementwiseChainKeepsBroadcastRankOfOneElementConstant) {
  TestGraph t;
  const ValueId x = t.Input("x", Shape{5});
  ValueId y = Op(t.graph, "Add", {x, Const(t.graph, "c", Values({1.0f}, Shape{1, 1}))});
  t.graph.outputs = {Op(t.graph, "Relu", {y})};
  ExpectSameResults(t, {WithSpecials(Shape{5}, 1, 2)}, {});
}

// --- Cleanup passes -------------------------------------------------------------------------

TEST(SemanticsTest, ConstantFoldingCseAndIdentityElimination) {
  TestGraph t;
  const ValueId x = t.Input("x", Shape{2, 3, 4});
  Graph& g = t.graph;
  // Constant subexpressions with special values: folded at load time.
  ValueId k = Op(g, "Add",
                 {Const(g, "k1", Values({-0.0f, kInf, kNaN, 1.0f}, Shape{4})),
                  Const(g, "k2", Values({-0.0f, -kInf, 1.0f, kDenorm}, Shape{4}))});
  k = Op(g, "Mul", {k, Const(g, "k3", Values({1.0f, 0.0f, 2.0f, 1e30f}, Shape{4}))});
  const std::vector<int64_t> perm = {0, 2, 1};
  ValueId tr = Op(g, "Transpose", {Op(g, "Transpose", {x}, {{"perm", perm}})}, {{"perm", perm}});
  ValueId e1 = Op(g, "Exp", {Op(g, "Identity", {tr})});
  ValueId e2 = Op(g, "Exp", {tr});
  t.graph.outputs = {Op(g, "Sub", {Op(g, "Mul", {e1, k}), e2})};
  ExpectSameResults(t, {WithSpecials(Shape{2, 3, 4}, 3, 2)}, {"constant_folding"});
}

// --- This CPU's conv layout over conv / pool chains (conv_activation_layout) --------------

TEST(SemanticsTest, ChannelsLastConvPoolChain) {
  TestGraph t;
  const ValueId x = t.Input("x", Shape{1, 3, 8, 8});
  Graph& g = t.graph;
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  ValueId y =
      Op(g, "Conv",
         {x, Const(g, "w1", Random(Shape{8, 3, 3, 3}, 1)), Const(g, "b1", Random(Shape{8}, 2))},
         {{"pads", pads}});
  y = Op(g, "Relu", {y});
  y = Op(g, "MaxPool", {y},
         {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  ValueId z = Op(g, "Conv", {y, Const(g, "w2", Random(Shape{8, 8, 3, 3}, 3))}, {{"pads", pads}});
  z = Op(g, "Relu", {Op(g, "Add", {z, y})});
  z = Op(g, "AveragePool", {z},
         {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  z = Op(g, "Conv", {z, Const(g, "w3", Random(Shape{4, 8, 1, 1}, 4))});
  t.graph.outputs = {Op(g, "GlobalAveragePool", {z})};
  // Few special pixels so that most outputs stay finite and the NaN ones are localized.
  Tensor in = Random(Shape{1, 3, 8, 8}, 5);
  in.data<float>()[9] = kNaN;
  in.data<float>()[64 + 40] = kInf;
  in.data<float>()[128 + 63] = -0.0f;
  ExpectSameResults(t, {in}, {"conv_activation_layout"});
  ExpectSameResults(t, {Filled(Shape{1, 3, 8, 8}, kNaN)}, {});
  ExpectSameResults(t, {Filled(Shape{1, 3, 8, 8}, -0.0f)}, {});
}

// --- End to end: a real ONNX ResNet on an all-NaN image ------------------------------------

TEST(SemanticsTest, RealResNetOnNanImageGivesNanWithAndWithoutOptimizer) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(KILN_SHARED_DIR) / "testdata" / "models" / "onnx_light_zoo";
  for (const char* name : {"light_resnet50.onnx", "light_squeezenet.onnx"}) {
    SCOPED_TRACE(name);
    const fs::path path = dir / name;
    if (!fs::exists(path)) GTEST_SKIP() << path << " not available";
    std::map<bool, std::map<std::string, Tensor>> results;
    for (bool optimize : {false, true}) {
      ModelOptions options;
      options.disable_optimizer = !optimize;
      auto model = Model::Load(path.string(), options);
      ASSERT_TRUE(model.ok()) << model.status();
      auto sig = (*model)->FindSignature("serving_default");
      ASSERT_TRUE(sig.ok()) << sig.status();
      std::map<std::string, Tensor> feed;
      for (const std::string& key : (*sig)->input_keys) {
        const runtime::TensorInfo& info = (*sig)->inputs.at(key);
        std::vector<int64_t> dims = info.shape;
        for (int64_t& d : dims) d = d < 0 ? 1 : d;
        feed[key] = Filled(Shape(dims), kNaN);
      }
      auto out = (*model)->Run("serving_default", feed);
      ASSERT_TRUE(out.ok()) << out.status();
      results[optimize] = *out;
    }
    for (const auto& [key, expected] : results[false]) {
      const Tensor& actual = results[true].at(key);
      int nan_expected = 0, nan_actual = 0;
      for (float v : expected.span<float>()) nan_expected += std::isnan(v);
      for (float v : actual.span<float>()) nan_actual += std::isnan(v);
      EXPECT_EQ(nan_expected, expected.num_elements()) << key << ": the unoptimized graph";
      EXPECT_EQ(nan_actual, nan_expected) << key << ": the optimized graph";
      EXPECT_EQ(Mismatches(expected, actual), "") << key;
    }
  }
}

}  // namespace kiln::opt
}  // namespace kiln::opt
