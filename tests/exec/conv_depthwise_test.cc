// kiln::FusedConvDepthwise (src/opt/fuse_depthwise.cc, src/kernels/cpu/nn_conv_depthwise.cc):
// MobileNet's 1x1 conv + ReLU6 + depthwise 3x3 conv (+ activation), optimized and compiled as
// the runtime does (the CPU's activation layout), must compute what the same graph computes
// with the two convolutions apart: on finite inputs (the fused primitive), and on NaN or on
// inputs large enough to overflow (the two convolutions apart, each with its activation in
// Kiln's loops), where NaN and infinities must land where the unfused graph has them. Built
// twice: as is and capped to AVX2 (nChw8c and oneDNN's AVX2 kernels).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
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

Tensor Random(Shape shape, uint32_t seed, float scale) {
  std::mt19937_64 rng(seed);
  Tensor t = runtime::RandomTensor(DType::kFloat32, shape, rng);
  for (float& v : t.span<float>()) v *= scale;
  return t;
}

constexpr int64_t kBatch = 2, kIn = 16, kMid = 48, kSize = 14;

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
  setenv("KILN_GUARDED_ACTIVATION", "0", 1);
  const GuardedActivationRuns runs = Compare(Block(), Random(Input(), 10, 3)).runs;
  unsetenv("KILN_GUARDED_ACTIVATION");
  EXPECT_EQ(runs.inside + runs.epilogue, 0);  // not guarded at all: always apart
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

}  // namespace
}  // namespace kiln
