// Relu and Clip run inside oneDNN's convolution on the runs whose input cannot make a sum NaN
// (GuardedActivation, src/kernels/cpu/nn_dnnl.h), in the epilogue otherwise. A MobileNet-style
// chain (1x1 conv + ReLU6, depthwise 3x3 + ReLU6, 1x1 conv + Relu), optimized and compiled as
// the runtime does, must give the bits of the same plan with every activation in the epilogue
// (KILN_GUARDED_ACTIVATION=0) on finite inputs, on NaN, on inputs large enough to overflow,
// and on zeros (the sign of zero), and must take the path each case calls for. The same guard
// decides whether a FusedConvDepthwise (1x1 + ReLU6 + depthwise as one primitive) runs fused or
// apart: the ConvDepthwise tests below. Built twice: as is and capped to AVX2 (another layout,
// nChw8c, and other oneDNN kernels).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/nn_dnnl.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/opt/pass.h"
#include "kiln/runtime/inputs.h"

namespace kiln {
namespace {

#ifdef KILN_TEST_MAX_ISA
const bool kIsaCapped = [] {
  if (!SetMaxCpuIsa(KILN_TEST_MAX_ISA).ok()) std::abort();
  return true;
}();
#endif

using ir::Graph;
using ir::NodeId;
using ir::ValueId;
using kernels::nn::GuardedActivationRunCounts;
using kernels::nn::GuardedActivationRuns;

class ScopedGuardOff {
 public:
  ScopedGuardOff() { setenv("KILN_GUARDED_ACTIVATION", "0", 1); }
  ~ScopedGuardOff() { unsetenv("KILN_GUARDED_ACTIVATION"); }
};

// Uniform in [-scale, scale) (runtime::RandomTensor's [-1, 1), scaled).
Tensor Random(Shape shape, uint32_t seed, float scale) {
  std::mt19937_64 rng(seed);
  Tensor t = runtime::RandomTensor(DType::kFloat32, shape, rng);
  for (float& v : t.span<float>()) v *= scale;
  return t;
}

constexpr int64_t kBatch = 2, kIn = 16, kMid = 48, kSize = 12;

// x -> Conv 1x1 (+bias) -> Clip(0, 6) -> depthwise Conv 3x3 (+bias) -> Clip(0, 6)
//   -> Conv 1x1 (no bias) -> Relu, optimized (fusion, activation layouts). A nonzero `sign`
// gives every weight and bias that sign.
Graph Chain(float sign = 0.0f) {
  Graph g;
  const ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {-1, kIn, kSize, kSize}));
  g.inputs = {x};
  auto constant = [&](Shape shape, uint32_t seed) {
    Tensor w = Random(shape, seed, 0.5f);
    if (sign != 0.0f) {
      for (float& v : w.span<float>()) v = sign * (std::fabs(v) + 0.01f);
    }
    return w;
  };
  const ValueId w1 = g.AddConstant("w1", constant(Shape{kMid, kIn, 1, 1}, 1));
  const ValueId b1 = g.AddConstant("b1", constant(Shape{kMid}, 2));
  const ValueId w2 = g.AddConstant("w2", constant(Shape{kMid, 1, 3, 3}, 3));
  const ValueId b2 = g.AddConstant("b2", constant(Shape{kMid}, 4));
  const ValueId w3 = g.AddConstant("w3", constant(Shape{kIn, kMid, 1, 1}, 5));
  const ValueId lo = g.AddConstant("lo", Tensor::Scalar(0.0f));
  const ValueId hi = g.AddConstant("hi", Tensor::Scalar(6.0f));
  auto out = [&](NodeId id) { return g.node(id).outputs[0]; };
  ValueId y = out(g.AddNode("Conv", {x, w1, b1}, 1, {}, "expand"));
  y = out(g.AddNode("Clip", {y, lo, hi}, 1, {}, "relu6_1"));
  y = out(g.AddNode("Conv", {y, w2, b2}, 1,
                    {{"group", kMid}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}, "depthwise"));
  y = out(g.AddNode("Clip", {y, lo, hi}, 1, {}, "relu6_2"));
  y = out(g.AddNode("Conv", {y, w3}, 1, {}, "project"));
  y = out(g.AddNode("Relu", {y}, 1, {}, "relu"));
  g.outputs = {y};
  opt::PassOptions options;
  const exec::KernelEvaluator evaluator;
  options.evaluator = &evaluator;
  // Three FusedConvs, each with its own guard (the depthwise fusion would join the first two:
  // the ConvDepthwise tests below cover that).
  options.fuse_conv_depthwise = false;
  opt::OptimizationLog log;
  EXPECT_TRUE(opt::Optimize(g, options, &log).ok());
  EXPECT_TRUE(ir::InferShapes(g).ok());
  return g;
}

int CountFusedConvs(const Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += !node.removed && node.op == ir::kFusedConvOp;
  return n;
}

Tensor RunPlan(const Graph& graph, const Tensor& x) {
  exec::CompileOptions options;
  options.intra_op_threads = 2;
  options.intra_op_openmp = true;
  auto plan = exec::CompiledPlan::Compile(std::make_shared<Graph>(graph), {x.shape()}, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return Tensor();
  std::vector<Tensor> outputs;
  const absl::Status status = (*plan)->Run({x}, &outputs);
  EXPECT_TRUE(status.ok()) << status;
  return outputs.empty() ? Tensor() : outputs[0];
}

// Runs the chain with the guard and with every activation in the epilogue; expects the same
// bits, and returns how many convolutions ran their activation inside and in the epilogue.
GuardedActivationRuns RunBoth(const Graph& graph, const Tensor& x) {
  const GuardedActivationRuns before = GuardedActivationRunCounts();
  const Tensor guarded = RunPlan(graph, x);
  const GuardedActivationRuns after = GuardedActivationRunCounts();
  Tensor epilogue;
  {
    ScopedGuardOff off;
    epilogue = RunPlan(graph, x);
  }
  const GuardedActivationRuns untouched = GuardedActivationRunCounts();
  EXPECT_EQ(untouched.inside, after.inside);  // the switch turns the guard off
  EXPECT_EQ(untouched.epilogue, after.epilogue);
  EXPECT_EQ(guarded.shape(), epilogue.shape());
  EXPECT_EQ(guarded.shape(), (Shape{kBatch, kIn, kSize, kSize}));
  if (guarded.shape() == epilogue.shape()) {
    const float* a = guarded.data<float>();
    const float* b = epilogue.data<float>();
    for (int64_t i = 0; i < guarded.num_elements(); ++i) {
      uint32_t bits_a, bits_b;
      std::memcpy(&bits_a, a + i, 4);
      std::memcpy(&bits_b, b + i, 4);
      if (bits_a != bits_b) {
        ADD_FAILURE() << "element " << i << ": " << a[i] << " guarded, " << b[i] << " epilogue";
        break;
      }
    }
  }
  // The plan compile times its steps on made-up inputs too: count runs of this run only by
  // looking at the difference, which includes those timing runs (all finite: inside).
  return {after.inside - before.inside, after.epilogue - before.epilogue};
}

TEST(GuardedActivation, FiniteInputsRunInsideWithTheSameBits) {
  const Graph g = Chain();
  ASSERT_EQ(CountFusedConvs(g), 3) << g.ToString();
  const GuardedActivationRuns runs = RunBoth(g, Random(Shape{kBatch, kIn, kSize, kSize}, 7, 3));
  EXPECT_GE(runs.inside, 3);
  EXPECT_EQ(runs.epilogue, 0);
}

TEST(GuardedActivation, PlanStatsCountTheGuardedConvolutions) {
  // What `kiln inspect` prints: the three convolutions, none with the switch off.
  const Graph g = Chain();
  exec::CompileOptions options;
  options.intra_op_threads = 2;
  options.intra_op_openmp = true;
  const Shape shape{kBatch, kIn, kSize, kSize};
  auto plan = exec::CompiledPlan::Compile(std::make_shared<Graph>(g), {shape}, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().guarded_activations, 3);
  ScopedGuardOff off;
  plan = exec::CompiledPlan::Compile(std::make_shared<Graph>(g), {shape}, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().guarded_activations, 0);
}

TEST(GuardedActivation, NaNInputRunsTheEpilogueAndStaysNaN) {
  const Graph g = Chain();
  Tensor x = Random(Shape{kBatch, kIn, kSize, kSize}, 8, 3);
  x.data<float>()[5 * kSize + 5] = NAN;  // image 0, channel 0
  const GuardedActivationRuns runs = RunBoth(g, x);
  // Each conv reads NaN: the first in the graph input, the next two in what the epilogue
  // left (the plan hands no bound on from a conv that ran its epilogue).
  EXPECT_GE(runs.epilogue, 3);
  const Tensor y = RunPlan(g, x);
  EXPECT_TRUE(std::isnan(y.data<float>()[5 * kSize + 5]));
}

TEST(GuardedActivation, InputsThatCouldOverflowRunTheEpilogue) {
  const Graph g = Chain();
  Tensor x = Random(Shape{kBatch, kIn, kSize, kSize}, 9, 3);
  for (int64_t c = 0; c < kIn; ++c) x.data<float>()[c * kSize * kSize] = c % 2 ? 3e38f : -3e38f;
  const GuardedActivationRuns runs = RunBoth(g, x);
  EXPECT_GE(runs.epilogue, 1);
}

TEST(GuardedActivation, ZeroInputsKeepTheSignOfZero) {
  // With negative weights and biases, zero inputs give negative sums, clipped to zeros, so the
  // last conv (no bias) sums only -0.0 products: the sums must come out as the epilogue path
  // has them (oneDNN's accumulators start at +0.0), Relu and Clip of them alike.
  for (float sign : {-1.0f, 1.0f}) {
    const Graph g = Chain(sign);
    Tensor x(DType::kFloat32, Shape{kBatch, kIn, kSize, kSize});
    for (float& v : x.span<float>()) v = 0.0f;
    const GuardedActivationRuns runs = RunBoth(g, x);
    EXPECT_GE(runs.inside, 3) << sign;
    Tensor neg(DType::kFloat32, Shape{kBatch, kIn, kSize, kSize});
    for (float& v : neg.span<float>()) v = -0.0f;
    RunBoth(g, neg);
  }
}

TEST(GuardedActivation, PlanChecksTheEpilogueAndTheConstants) {
  using kernels::nn::PlanGuardedActivation;
  using kernels::nn::PostOp;
  const float w[] = {1.0f, -2.0f, 3.0f, 0.5f};  // two channels: sum |w| = 3 and 3.5
  const float bias[] = {0.5f, -1.0f};
  const float kMax = std::numeric_limits<float>::max();
  auto guard = PlanGuardedActivation({PostOp{"Clip", 0.0f, 6.0f}}, w, 2, 2, bias);
  ASSERT_TRUE(guard.usable);
  EXPECT_FLOAT_EQ(guard.input_limit, static_cast<float>((kMax / 8.0 - 1.0) / 3.5));
  EXPECT_EQ(guard.output_bound, 6.0f);
  guard = PlanGuardedActivation({PostOp{"Relu", 0.0f, 0.0f}}, w, 2, 2, nullptr);
  ASSERT_TRUE(guard.usable);
  EXPECT_EQ(guard.output_bound, std::numeric_limits<float>::infinity());  // Relu: unbounded
  // Not usable: another activation, two of them, a -0.0 bias or Clip bound, a NaN bound,
  // a weight or bias that is not finite.
  EXPECT_FALSE(PlanGuardedActivation({PostOp{"Sigmoid", 0, 0}}, w, 2, 2, bias).usable);
  EXPECT_FALSE(
      PlanGuardedActivation({PostOp{"Relu", 0, 0}, PostOp{"Relu", 0, 0}}, w, 2, 2, bias).usable);
  const float negative_zero_bias[] = {0.5f, -0.0f};
  EXPECT_FALSE(PlanGuardedActivation({PostOp{"Relu", 0, 0}}, w, 2, 2, negative_zero_bias).usable);
  EXPECT_FALSE(PlanGuardedActivation({PostOp{"Clip", -0.0f, 6.0f}}, w, 2, 2, bias).usable);
  EXPECT_FALSE(PlanGuardedActivation({PostOp{"Clip", 0.0f, NAN}}, w, 2, 2, bias).usable);
  const float inf_w[] = {1.0f, INFINITY, 3.0f, 0.5f};
  EXPECT_FALSE(PlanGuardedActivation({PostOp{"Relu", 0, 0}}, inf_w, 2, 2, bias).usable);
  const float nan_bias[] = {NAN, 1.0f};
  EXPECT_FALSE(PlanGuardedActivation({PostOp{"Relu", 0, 0}}, w, 2, 2, nan_bias).usable);
  {
    ScopedGuardOff off;
    EXPECT_FALSE(PlanGuardedActivation({PostOp{"Relu", 0, 0}}, w, 2, 2, bias).usable);
  }
}

namespace depthwise {

// kiln::FusedConvDepthwise (src/opt/fuse_depthwise.cc, src/kernels/cpu/nn_conv_depthwise.cc):
// 1x1 conv + ReLU6 + depthwise conv as one oneDNN primitive, guarded as above: with the fusion
// on, the graph must compute what it computes with the two convolutions apart, on finite inputs
// (the fused primitive), NaN, infinities and inputs that could overflow (the two apart).

constexpr int64_t kBatch = 2, kIn = 16, kMid = 48, kSize = 14;  // (shadows the chain's)

struct Block {
  int64_t stride = 1;
  bool biases = true;
  std::string depthwise_activation = "Clip";  // "Clip", "Relu" or "" (none)
  std::string expand_activation = "Clip";
  bool expanded_is_output = false;  // the 1x1's output is also a graph output
};

// x -> Conv 1x1 -> expand_activation -> depthwise Conv 3x3 -> depthwise_activation -> Conv 1x1,
// optimized with the CPU's activation layout, the depthwise fusion on or off.
Graph Make(const Block& b, bool fuse) {
  Graph g;
  const ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {-1, kIn, kSize, kSize}));
  g.inputs = {x};
  const ValueId lo = g.AddConstant("lo", Tensor::Scalar(0.0f));
  const ValueId hi = g.AddConstant("hi", Tensor::Scalar(6.0f));
  auto out = [&](NodeId id) { return g.node(id).outputs[0]; };
  auto activation = [&](ValueId y, const std::string& kind, const std::string& name) {
    if (kind == "Clip") return out(g.AddNode("Clip", {y, lo, hi}, 1, {}, name));
    if (kind == "Relu") return out(g.AddNode("Relu", {y}, 1, {}, name));
    return y;
  };
  std::vector<ValueId> expand_in = {x,
                                    g.AddConstant("w1", Random(Shape{kMid, kIn, 1, 1}, 1, 0.5f))};
  if (b.biases) expand_in.push_back(g.AddConstant("b1", Random(Shape{kMid}, 2, 0.5f)));
  const ValueId expanded =
      activation(out(g.AddNode("Conv", expand_in, 1, {}, "expand")), b.expand_activation, "act1");
  std::vector<ValueId> dw_in = {expanded,
                                g.AddConstant("w2", Random(Shape{kMid, 1, 3, 3}, 3, 0.5f))};
  if (b.biases) dw_in.push_back(g.AddConstant("b2", Random(Shape{kMid}, 4, 0.5f)));
  ValueId y = out(g.AddNode("Conv", dw_in, 1,
                            {{"group", kMid},
                             {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                             {"strides", std::vector<int64_t>{b.stride, b.stride}}},
                            "depthwise"));
  y = activation(y, b.depthwise_activation, "act2");
  y = out(g.AddNode("Conv", {y, g.AddConstant("w3", Random(Shape{kIn, kMid, 1, 1}, 5, 0.5f))}, 1,
                    {}, "project"));
  g.outputs = {y};
  if (b.expanded_is_output) g.outputs.push_back(expanded);
  opt::PassOptions options;
  const exec::KernelEvaluator evaluator;
  options.evaluator = &evaluator;
  options.conv_activation_layout = kernels::PreferredConvActivationLayout();
  options.fuse_conv_depthwise = fuse;
  opt::OptimizationLog log;
  EXPECT_TRUE(opt::Optimize(g, options, &log).ok());
  EXPECT_TRUE(ir::InferShapes(g).ok());
  return g;
}

int CountFused(const Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += !node.removed && ir::IsFusedConvDepthwise(node);
  return n;
}

// Same shape; NaN where the reference has NaN, the same infinities, finite values within a
// few float roundings of the reference's largest magnitude (the fused primitive is another
// oneDNN implementation, which may sum in another order). Returns the reference's NaN and
// infinities.
int64_t ExpectSameValues(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 0;
  const float* a = got.data<float>();
  const float* b = want.data<float>();
  float scale = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    if (std::isfinite(b[i])) scale = std::max(scale, std::fabs(b[i]));
  }
  int64_t non_finite = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    if (std::isnan(b[i]) || std::isinf(b[i])) {
      ++non_finite;
      if (std::isnan(b[i]) ? !std::isnan(a[i]) : a[i] != b[i]) {
        ADD_FAILURE() << "element " << i << ": " << a[i] << " fused, " << b[i] << " apart";
        return non_finite;
      }
      continue;
    }
    if (!(std::fabs(a[i] - b[i]) <= 1e-5f * scale)) {
      ADD_FAILURE() << "element " << i << ": " << a[i] << " fused, " << b[i] << " apart";
      return non_finite;
    }
  }
  return non_finite;
}

struct Outcome {
  GuardedActivationRuns runs;  // the guarded kernels' paths on the fused graph's run
  int64_t non_finite = 0;      // NaN and infinities in the output
};

// Runs the fused and the unfused graph and compares their outputs.
Outcome Compare(const Block& b, const Tensor& x) {
  const Graph fused = Make(b, true), apart = Make(b, false);
  EXPECT_EQ(CountFused(apart), 0);
  const GuardedActivationRuns before = GuardedActivationRunCounts();
  const Tensor y = RunPlan(fused, x);
  const GuardedActivationRuns after = GuardedActivationRunCounts();
  Outcome outcome;
  outcome.non_finite = ExpectSameValues(y, RunPlan(apart, x));
  outcome.runs = {after.inside - before.inside, after.epilogue - before.epilogue};
  return outcome;
}

Shape Input() { return Shape{kBatch, kIn, kSize, kSize}; }

TEST(ConvDepthwise, MobileNetBlocksFuseAndComputeWhatTheyComputeApart) {
  for (int64_t stride : {1, 2}) {
    for (bool biases : {true, false}) {
      for (const char* act : {"Clip", "Relu", ""}) {
        Block b;
        b.stride = stride;
        b.biases = biases;
        b.depthwise_activation = act;
        SCOPED_TRACE(testing::Message()
                     << "stride " << stride << " biases " << biases << " '" << act << "'");
        EXPECT_EQ(CountFused(Make(b, true)), 1);
        const GuardedActivationRuns runs = Compare(b, Random(Input(), 7, 3)).runs;
        EXPECT_GE(runs.inside, 1);  // the fused primitive ran
        EXPECT_EQ(runs.epilogue, 0);
      }
    }
  }
}

TEST(ConvDepthwise, NaNInputRunsTheConvolutionsApart) {
  for (int64_t stride : {1, 2}) {
    Block b;
    b.stride = stride;
    Tensor x = Random(Input(), 8, 3);
    x.data<float>()[5 * kSize + 5] = NAN;
    x.data<float>()[kIn * kSize * kSize + 3] = INFINITY;  // image 1
    const Outcome outcome = Compare(b, x);
    EXPECT_GE(outcome.runs.epilogue, 1) << stride;
    EXPECT_GT(outcome.non_finite, 0) << stride;  // NaN spreads through both convolutions
  }
}

TEST(ConvDepthwise, InputsThatCouldOverflowRunTheConvolutionsApart) {
  Tensor x = Random(Input(), 9, 3);
  for (int64_t c = 0; c < kIn; ++c) x.data<float>()[c * kSize * kSize] = c % 2 ? 3e38f : -3e38f;
  EXPECT_GE(Compare(Block(), x).runs.epilogue, 1);
}

TEST(ConvDepthwise, WithTheGuardOffTheConvolutionsRunApart) {
  GuardedActivationRuns runs;
  {
    ScopedGuardOff off;
    runs = Compare(Block(), Random(Input(), 10, 3)).runs;
  }
  EXPECT_EQ(runs.inside + runs.epilogue, 0);  // not guarded at all: always apart
}

TEST(ConvDepthwise, AnEmptyBatchGivesAnEmptyOutput) {
  for (int64_t stride : {1, 2}) {
    Block b;
    b.stride = stride;
    const Tensor y = RunPlan(Make(b, true), Tensor(DType::kFloat32, Shape{0, kIn, kSize, kSize}));
    const int64_t out = (kSize + stride - 1) / stride;
    EXPECT_EQ(y.shape(), (Shape{0, kIn, out, out})) << stride;
    EXPECT_EQ(
        y.shape(),
        RunPlan(Make(b, false), Tensor(DType::kFloat32, Shape{0, kIn, kSize, kSize})).shape());
  }
}

TEST(ConvDepthwise, OnlyAPrivateClippedExpansionFuses) {
  Block output;
  output.expanded_is_output = true;  // the expanded activation must be written
  EXPECT_EQ(CountFused(Make(output, true)), 0);
  Block relu;
  relu.expand_activation = "Relu";  // unbounded: the depthwise sums could overflow
  EXPECT_EQ(CountFused(Make(relu, true)), 0);
  Block none;
  none.expand_activation = "";
  EXPECT_EQ(CountFused(Make(none, true)), 0);
}

}  // namespace depthwise

}  // namespace
}  // namespace kiln
