// The conv activation layout kept across whole CNN chains (opt/layout.cc with the
// layout-transparent nodes of ir/layout_transparent.h): convolutions, pools, unfused
// elementwise ops, residual adds, channel concats and global pools. Each test runs the
// optimized graph through the real plan compiler and kernels in every layout (and in the one
// this CPU prefers) against the unoptimized graph, NaN and Inf included, and counts the
// activation reorders a run does. Registered twice: at this CPU's ISA and capped to AVX2
// (KILN_TEST_MAX_ISA), where oneDNN's jit convolutions and the preferred layout differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "kiln/core/cpu_isa.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/layout_transparent.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

#ifdef KILN_TEST_MAX_ISA
// Before any kernel is created: the cap is fixed at the first EffectiveCpuIsa() call.
const bool kIsaCapped = [] {
  absl::Status status = SetMaxCpuIsa(KILN_TEST_MAX_ISA);
  return status.ok();
}();
#endif

using ir::Graph;
using ir::MemoryLayout;
using ir::TensorType;
using ir::ValueId;

Tensor Random(Shape shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// A random image with a NaN, a +Inf and a -Inf in it: they must reach the same output
// elements whatever layout the values between are kept in.
Tensor ImageWithNonFinite(Shape shape, uint32_t seed) {
  Tensor t = Random(shape, seed);
  float* p = t.data<float>();
  const int64_t n = t.num_elements();
  p[n / 7] = std::numeric_limits<float>::quiet_NaN();
  p[n / 2 + 3] = std::numeric_limits<float>::infinity();
  p[n - 5] = -std::numeric_limits<float>::infinity();
  return t;
}

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}
  ValueId Op(const std::string& op, std::vector<ValueId> inputs,
             std::map<std::string, ir::Attribute> attrs = {}) {
    const std::string name = absl::StrCat(op, "_", count_++);
    return g_.node(g_.AddNode(op, std::move(inputs), 1, std::move(attrs), name)).outputs[0];
  }
  ValueId Const(Tensor t) { return g_.AddConstant(absl::StrCat("c", count_++), std::move(t)); }
  ValueId Scalar(float v) { return Const(Tensor::Scalar<float>(v)); }
  // Conv with bias; `k` square kernel, "same" padding for odd k.
  ValueId Conv(ValueId x, int64_t in, int64_t out, int64_t k, int64_t stride = 1,
               int64_t group = 1) {
    const int64_t p = k / 2;
    return Op("Conv",
              {x, Const(Random(Shape{out, in / group, k, k}, count_ + 1, 0.5f)),
               Const(Random(Shape{out}, count_ + 2, 0.1f))},
              {{"pads", std::vector<int64_t>{p, p, p, p}},
               {"strides", std::vector<int64_t>{stride, stride}},
               {"group", group}});
  }
  ValueId MaxPool(ValueId x) {
    return Op("MaxPool", {x},
              {{"kernel_shape", std::vector<int64_t>{3, 3}},
               {"strides", std::vector<int64_t>{2, 2}},
               {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  }
  ValueId Relu6(ValueId x) { return Op("Clip", {x, Scalar(0.0f), Scalar(6.0f)}); }
  // GlobalAveragePool (or, with `window` > 0, an AveragePool of that window covering the whole
  // image, as Caffe2's ResNet-50 ends) -> Flatten -> Gemm to `classes`: a classifier head.
  ValueId Head(ValueId x, int64_t channels, int64_t classes, int64_t window = 0) {
    const ValueId pooled = window > 0 ? Op("AveragePool", {x},
                                           {{"kernel_shape", std::vector<int64_t>{window, window}}})
                                      : Op("GlobalAveragePool", {x});
    return Op("Gemm",
              {Op("Flatten", {pooled}), Const(Random(Shape{classes, channels}, 5)),
               Const(Random(Shape{classes}, 6))},
              {{"transB", int64_t{1}}});
  }

 private:
  Graph& g_;
  int count_ = 0;
};

std::vector<Tensor> RunPlan(const Graph& graph, const std::vector<Tensor>& inputs,
                            int* reorders = nullptr) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  auto plan = exec::CompiledPlan::Compile(std::make_shared<Graph>(graph), shapes);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  if (reorders != nullptr) *reorders = (*plan)->stats().activation_reorders;
  std::vector<Tensor> outputs;
  absl::Status st = (*plan)->Run(inputs, &outputs);
  EXPECT_TRUE(st.ok()) << st;
  return outputs;
}

struct Optimized {
  Graph graph;
  int reorders = 0;
};

// Optimizes `graph` keeping convolution activations in `layout`, checks Verify and that every
// output equals the unoptimized graph's (NaN where it has NaN, the same infinities).
Optimized OptimizeAndCompare(const Graph& graph, const std::vector<Tensor>& inputs,
                             MemoryLayout layout) {
  Optimized result{graph, 0};
  OptimizationLog log;
  PassOptions options;
  options.conv_activation_layout = layout;
  const exec::KernelEvaluator evaluator;
  options.evaluator = &evaluator;
  absl::Status st = Optimize(result.graph, options, &log);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(ir::Verify(result.graph).ok()) << ir::Verify(result.graph);
  const std::vector<Tensor> expected = RunPlan(graph, inputs);
  // Reorders are counted with direct convolutions: Winograd (nn_conv_winograd.h) adds a pair
  // around each convolution it takes, a per-convolution choice timed with them included, not
  // the layout planning counted here.
  const char* winograd = std::getenv("KILN_CONV_WINOGRAD");
  const std::string saved = winograd != nullptr ? winograd : "";
  setenv("KILN_CONV_WINOGRAD", "0", 1);
  const std::vector<Tensor> actual = RunPlan(result.graph, inputs, &result.reorders);
  if (winograd != nullptr) {
    setenv("KILN_CONV_WINOGRAD", saved.c_str(), 1);
  } else {
    unsetenv("KILN_CONV_WINOGRAD");
  }
  EXPECT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    EXPECT_TRUE(TensorsAllClose(actual[i], expected[i], 1e-4, 1e-4))
        << "output " << i << "\nexpected " << expected[i].DebugString() << "\nactual   "
        << actual[i].DebugString() << "\n"
        << log.ToString() << result.graph.ToString();
  }
  return result;
}

// The layout this process's CPU (or cap) prefers: the runtime's choice, for which the reorder
// target holds. In the others oneDNN may have no convolution that reads the layout at this
// ISA (nChw16c on AVX2) and reorders, but the results must still be right.
MemoryLayout Preferred() { return kernels::PreferredConvActivationLayout(); }

// Every layout a CPU may prefer.
std::vector<MemoryLayout> Layouts() {
  return {MemoryLayout::kNhwc, MemoryLayout::kNchw8c, MemoryLayout::kNchw16c};
}

int CountNonFinite(const Tensor& t) {
  int n = 0;
  for (float v : t.span<float>()) n += !std::isfinite(v);
  return n;
}

// The layout of the (single) output of the first live node running `op`.
MemoryLayout LayoutOfOp(const Graph& g, const std::string& op) {
  for (const ir::Node& n : g.nodes()) {
    if (!n.removed && n.op == op) return g.value(n.outputs[0]).layout;
  }
  ADD_FAILURE() << "no " << op << " in\n" << g.ToString();
  return MemoryLayout::kPlain;
}

// conv -> relu -> maxpool -> conv -> add(pool) -> concat(add, pool) -> clip -> mul(scalar)
// -> 1x1 conv -> sum(add) -> relu -> {conv, global pool}: every value between the first conv
// and the outputs stays in the layout, and the outputs equal the plain graph's.
TEST(LayoutChainTest, ConvReluPoolConvAddConcatChainMatchesInEveryLayout) {
  Graph g;
  Builder b(g);
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 16, 24, 24}));
  g.inputs = {x};
  const ValueId pooled = b.MaxPool(b.Op("Relu", {b.Conv(x, 16, 16, 3)}));
  const ValueId added = b.Op("Add", {b.Conv(pooled, 16, 16, 3), pooled});
  const ValueId cat = b.Op("Concat", {added, pooled}, {{"axis", int64_t{1}}});
  const ValueId scaled = b.Op("Mul", {b.Relu6(cat), b.Scalar(0.5f)});
  const ValueId summed = b.Op("Sum", {b.Conv(scaled, 32, 16, 1), added});
  const ValueId relu = b.Op("Relu", {summed});
  g.outputs = {b.Conv(relu, 16, 16, 3), b.Op("GlobalAveragePool", {relu})};
  const std::vector<Tensor> inputs = {ImageWithNonFinite(Shape{2, 16, 24, 24}, 3)};
  for (MemoryLayout layout : Layouts()) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Optimized opt = OptimizeAndCompare(g, inputs, layout);
    EXPECT_EQ(LayoutOfOp(opt.graph, "Concat"), layout) << opt.graph.ToString();
    // Whatever the fusion passes made of them, no node other than the global pool writes NCHW
    // between the graph input and the output.
    for (ValueId v = 0; v < opt.graph.num_values(); ++v) {
      const ir::Value& value = opt.graph.value(v);
      if (value.producer == ir::kNoNode || value.constant.has_value()) continue;
      const ir::Node& producer = opt.graph.node(value.producer);
      if (producer.removed || producer.op == "GlobalAveragePool") continue;
      if (std::count(opt.graph.outputs.begin(), opt.graph.outputs.end(), v) > 0) continue;
      EXPECT_EQ(value.layout, layout) << value.name << " from " << producer.Describe();
    }
    // At most the graph input's reorder into the layout and the last conv's out of it.
    if (layout == Preferred()) {
      EXPECT_LE(opt.reorders, 2);
    }
  }
  // The non-finite inputs reached part of the output (the test would not see them otherwise).
  const Tensor plain = RunPlan(g, inputs)[0];
  EXPECT_GT(CountNonFinite(plain), 0);
  EXPECT_LT(CountNonFinite(plain), plain.num_elements());
}

// A residual Add whose other input is the graph input (plain) makes that Add, and the conv
// output it reads, plain: a transparent node never mixes layouts.
TEST(LayoutChainTest, AddOfAGraphInputStaysPlain) {
  Graph g;
  Builder b(g);
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 16, 6, 6}));
  g.inputs = {x};
  const ValueId y = b.Op("Relu", {b.Op("Add", {b.Conv(x, 16, 16, 3), x})});
  g.outputs = {b.Conv(y, 16, 16, 3)};
  for (MemoryLayout layout : Layouts()) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Optimized opt = OptimizeAndCompare(g, {Random(Shape{1, 16, 6, 6}, 9)}, layout);
    EXPECT_TRUE(ir::Verify(opt.graph).ok());
  }
}

// Broadcasting a per-channel [C,1,1] tensor would pair the wrong elements in any layout
// but NCHW: such an Add is not transparent, so its input stays plain.
TEST(LayoutChainTest, ChannelBroadcastIsNotTransparent) {
  Graph g;
  Builder b(g);
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 16, 6, 6}));
  g.inputs = {x};
  const ValueId c = b.Conv(x, 16, 16, 3);
  const ValueId biased = b.Op("Mul", {b.Op("Relu", {c}), b.Const(Random(Shape{16, 1, 1}, 4))});
  g.outputs = {b.Conv(biased, 16, 16, 3)};
  for (MemoryLayout layout : Layouts()) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Optimized opt = OptimizeAndCompare(g, {Random(Shape{1, 16, 6, 6}, 9)}, layout);
    for (const ir::Node& n : opt.graph.nodes()) {
      if (n.removed) continue;
      std::vector<size_t> carrying;
      if (n.op == "Mul" || n.op == "FusedElementwise") {
        EXPECT_FALSE(ir::LayoutTransparentInputs(opt.graph, n, &carrying)) << n.Describe();
        for (ValueId v : n.inputs) EXPECT_EQ(opt.graph.value(v).layout, MemoryLayout::kPlain);
      }
    }
  }
}

// Verify refuses a transparent node whose inputs and output disagree on the layout.
TEST(LayoutChainTest, VerifyRejectsMixedLayoutsAtATransparentNode) {
  Graph g;
  Builder b(g);
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 16, 6, 6}));
  g.inputs = {x};
  const ValueId c1 = b.Conv(x, 16, 16, 1);
  const ValueId c2 = b.Conv(x, 16, 16, 1);
  const ValueId sum = b.Op("Add", {c1, c2});
  g.outputs = {b.Conv(sum, 16, 16, 1)};
  for (ValueId v : {c1, c2, sum}) g.value(v).type = TensorType::Of(DType::kFloat32, {1, 16, 6, 6});
  g.value(c1).layout = g.value(c2).layout = g.value(sum).layout = MemoryLayout::kNchw8c;
  EXPECT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
  g.value(c2).layout = MemoryLayout::kNhwc;
  EXPECT_FALSE(ir::Verify(g).ok());
  g.value(c2).layout = MemoryLayout::kPlain;
  EXPECT_FALSE(ir::Verify(g).ok());
  g.value(c2).layout = MemoryLayout::kNchw8c;
  g.value(sum).layout = MemoryLayout::kPlain;
  EXPECT_FALSE(ir::Verify(g).ok());
}

// ResNet-like: stem conv 7x7/2 + relu, max pool, a basic block whose residual Sum and Relu
// are separate nodes, a downsampling block (1x1/2 projection), a 4x4 AveragePool over the
// whole 4x4 image (which ends the chain: its one-pixel output is plain) and a classifier.
// Reorders per run: at most 2 (into the layout at the graph input, out of it at the output).
TEST(LayoutChainTest, ResNetLikeGraphReordersAtMostTwice) {
  Graph g;
  Builder b(g);
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3, 32, 32}));
  g.inputs = {x};
  ValueId y = b.MaxPool(b.Op("Relu", {b.Conv(x, 3, 16, 7, 2)}));
  ValueId body = b.Conv(b.Op("Relu", {b.Conv(y, 16, 16, 3)}), 16, 16, 3);
  y = b.Op("Relu", {b.Op("Sum", {body, y})});
  body = b.Conv(b.Op("Relu", {b.Conv(y, 16, 32, 3, 2)}), 32, 32, 3);
  y = b.Op("Relu", {b.Op("Add", {body, b.Conv(y, 16, 32, 1, 2)})});
  g.outputs = {b.Head(y, 32, 10, /*window=*/4)};
  for (MemoryLayout layout : Layouts()) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Optimized opt = OptimizeAndCompare(g, {Random(Shape{2, 3, 32, 32}, 11)}, layout);
    if (layout == Preferred()) {
      EXPECT_LE(opt.reorders, 2) << opt.graph.ToString();
    }
  }
}

// MobileNet-v2-like: stem conv + Relu6, inverted residual blocks (1x1 expand + Relu6,
// depthwise 3x3 + Relu6, 1x1 project, residual Add), a strided block, head.
TEST(LayoutChainTest, MobileNetLikeGraphReordersAtMostTwice) {
  Graph g;
  Builder b(g);
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3, 32, 32}));
  g.inputs = {x};
  auto inverted = [&](ValueId in, int64_t c_in, int64_t c_out, int64_t stride) {
    const int64_t hidden = c_in * 4;
    ValueId h = b.Relu6(b.Conv(in, c_in, hidden, 1));
    h = b.Relu6(b.Conv(h, hidden, hidden, 3, stride, hidden));
    h = b.Conv(h, hidden, c_out, 1);
    return stride == 1 && c_in == c_out ? b.Op("Add", {in, h}) : h;
  };
  ValueId y = b.Relu6(b.Conv(x, 3, 16, 3, 2));
  y = inverted(y, 16, 16, 1);
  y = inverted(y, 16, 24, 2);
  y = inverted(y, 24, 24, 1);
  y = b.Relu6(b.Conv(y, 24, 64, 1));
  g.outputs = {b.Head(y, 64, 10)};
  for (MemoryLayout layout : Layouts()) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Optimized opt = OptimizeAndCompare(g, {Random(Shape{2, 3, 32, 32}, 13)}, layout);
    if (layout == Preferred()) {
      EXPECT_LE(opt.reorders, 2) << opt.graph.ToString();
    }
  }
}

// Inception-like: four branches concatenated along channels, twice, then a head.
TEST(LayoutChainTest, InceptionLikeConcatReordersAtMostTwice) {
  Graph g;
  Builder b(g);
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3, 24, 24}));
  g.inputs = {x};
  ValueId y = b.MaxPool(b.Op("Relu", {b.Conv(x, 3, 32, 3, 2)}));
  int64_t c = 32;
  for (int i = 0; i < 2; ++i) {
    const ValueId b1 = b.Op("Relu", {b.Conv(y, c, 16, 1)});
    const ValueId b2 = b.Op("Relu", {b.Conv(b.Op("Relu", {b.Conv(y, c, 16, 1)}), 16, 16, 3)});
    const ValueId b3 = b.Op("Relu", {b.Conv(y, c, 16, 5)});
    const ValueId pool = b.Op(
        "MaxPool", {y},
        {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    const ValueId b4 = b.Op("Relu", {b.Conv(pool, c, 16, 1)});
    y = b.Op("Concat", {b1, b2, b3, b4}, {{"axis", int64_t{1}}});
    c = 64;
  }
  g.outputs = {b.Head(y, 64, 10)};
  for (MemoryLayout layout : Layouts()) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Optimized opt = OptimizeAndCompare(g, {Random(Shape{2, 3, 24, 24}, 17)}, layout);
    EXPECT_EQ(LayoutOfOp(opt.graph, "Concat"), layout);
    if (layout == Preferred()) {
      EXPECT_LE(opt.reorders, 2) << opt.graph.ToString();
    }
  }
}

}  // namespace
}  // namespace kiln::opt
