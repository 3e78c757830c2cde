// The conv activation layout pass (every layout it can pick, whatever this CPU prefers) and
// the LayerNorm fusion on inputs of unknown type: each
// test checks what the optimizer marked or fused and that the optimized graph computes what
// the original computes (kernels run for real, through the plan compiler).
#include <gtest/gtest.h>

#include <random>

#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;

Tensor Random(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

ValueId Op(Graph& g, const std::string& op, std::vector<ValueId> inputs,
           std::map<std::string, ir::Attribute> attrs = {}, const std::string& name = "") {
  const ir::NodeId id =
      g.AddNode(op, std::move(inputs), 1, std::move(attrs), name.empty() ? op : name);
  return g.node(id).outputs[0];
}

std::vector<Tensor> Run(const Graph& graph, const std::vector<Tensor>& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  auto plan = exec::CompiledPlan::Compile(std::make_shared<Graph>(graph), shapes);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  std::vector<Tensor> outputs;
  absl::Status st = (*plan)->Run(inputs, &outputs);
  EXPECT_TRUE(st.ok()) << st;
  return outputs;
}

Graph OptimizeAndCompare(const Graph& graph, const std::vector<Tensor>& inputs,
                         ir::MemoryLayout conv_layout = ir::MemoryLayout::kPlain,
                         ir::MemoryLayout winograd_layout = ir::MemoryLayout::kPlain,
                         OptimizationLog* log_out = nullptr) {
  Graph optimized = graph;
  OptimizationLog log;
  PassOptions options;
  options.conv_activation_layout = conv_layout;
  options.winograd_conv_layout = winograd_layout;
  const exec::KernelEvaluator evaluator;
  options.evaluator = &evaluator;
  absl::Status st = Optimize(optimized, options, &log);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(ir::Verify(optimized).ok()) << ir::Verify(optimized);
  const std::vector<Tensor> expected = Run(graph, inputs);
  const std::vector<Tensor> actual = Run(optimized, inputs);
  EXPECT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    EXPECT_TRUE(TensorsAllClose(actual[i], expected[i], 1e-4, 1e-5))
        << "output " << i << "\nexpected " << expected[i].DebugString() << "\nactual   "
        << actual[i].DebugString() << "\n"
        << log.ToString();
  }
  if (log_out != nullptr) *log_out = log;
  return optimized;
}

constexpr ir::MemoryLayout kLayouts[] = {ir::MemoryLayout::kNhwc, ir::MemoryLayout::kNchw8c,
                                         ir::MemoryLayout::kNchw16c};

// Conv+Relu -> MaxPool -> Conv+Relu -> Conv + residual(MaxPool) + Relu -> GlobalAveragePool ->
// Flatten, with the second conv's output also a graph output; 16 channels so that every
// layout (NHWC, nChw8c, nChw16c) applies.
TEST(ConvActivationLayoutTest, ConvChainKeepsTheLayoutAndMatches) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 16, 10, 10}));
  g.inputs = {x};
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  auto conv = [&](ValueId in, int seed, const std::string& name) {
    return Op(g, "Conv",
              {in, g.AddConstant(name + "_w", Random(Shape{16, 16, 3, 3}, seed)),
               g.AddConstant(name + "_b", Random(Shape{16}, seed + 1))},
              {{"pads", pads}}, name);
  };
  ValueId y = Op(g, "Relu", {conv(x, 1, "conv1")});
  const ValueId pooled = Op(g, "MaxPool", {y},
                            {{"kernel_shape", std::vector<int64_t>{3, 3}},
                             {"strides", std::vector<int64_t>{2, 2}},
                             {"pads", pads}},
                            "pool");
  const ValueId escaping = Op(g, "Relu", {conv(pooled, 3, "conv2")});
  y = Op(g, "Relu", {Op(g, "Add", {conv(escaping, 5, "conv3"), pooled})});
  y = Op(g, "AveragePool", {y},
         {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}},
         "avg");
  y = Op(g, "Flatten", {Op(g, "GlobalAveragePool", {y}, {}, "gap")});
  g.outputs = {y, escaping};
  for (ir::MemoryLayout layout : kLayouts) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Graph opt = OptimizeAndCompare(g, {Random(Shape{2, 16, 10, 10}, 99)}, layout);
    int kept = 0;
    for (ValueId v = 0; v < opt.num_values(); ++v) {
      const ir::MemoryLayout l = opt.value(v).layout;
      EXPECT_TRUE(l == ir::MemoryLayout::kPlain || l == layout) << opt.value(v).name;
      kept += l == layout;
    }
    // conv1 (fused Relu), the max pool, conv3 (fused residual Add and Relu), the average pool.
    EXPECT_EQ(kept, 4) << opt.ToString();
    // A graph output keeps plain NCHW bytes: callers read it.
    EXPECT_EQ(opt.value(opt.outputs[1]).layout, ir::MemoryLayout::kPlain);
  }
  // kPlain (no preference) keeps every value NCHW.
  Graph plain = OptimizeAndCompare(g, {Random(Shape{2, 16, 10, 10}, 99)});
  for (ValueId v = 0; v < plain.num_values(); ++v) {
    EXPECT_EQ(plain.value(v).layout, ir::MemoryLayout::kPlain) << plain.value(v).name;
  }
}

// Where 3x3 stride-1 convolutions (Winograd's shape) carry most of the work, the chains are
// kept in Winograd's layout instead of the CPU's direct-convolution one, so those convolutions
// and the strided ones between run without a reorder; a graph of mostly 1x1 convolutions keeps
// the direct layout.
TEST(ConvActivationLayoutTest, WinogradShapedGraphKeepsWinogradsLayout) {
  auto build = [](int64_t kernel) {
    Graph g;
    const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 16, 16, 16}));
    g.inputs = {x};
    auto conv = [&](ValueId in, int64_t k, int64_t stride, int seed, const std::string& name) {
      const int64_t p = k / 2;
      return Op(g, "Conv",
                {in, g.AddConstant(name + "_w", Random(Shape{16, 16, k, k}, seed)),
                 g.AddConstant(name + "_b", Random(Shape{16}, seed + 1))},
                {{"pads", std::vector<int64_t>{p, p, p, p}},
                 {"strides", std::vector<int64_t>{stride, stride}}},
                name);
    };
    // A strided 1x1 stem, two convolutions of `kernel` with a residual, a strided 3x3 conv:
    // with kernel 3, 85% of the multiply-adds are Winograd-shaped.
    const ValueId stem = Op(g, "Relu", {conv(x, 1, 2, 1, "stem")});
    ValueId y = Op(g, "Relu", {conv(stem, kernel, 1, 3, "a")});
    y = Op(g, "Relu", {Op(g, "Add", {conv(y, kernel, 1, 5, "b"), stem})});
    y = Op(g, "Relu", {conv(y, 3, 2, 7, "down")});
    g.outputs = {Op(g, "Flatten", {Op(g, "GlobalAveragePool", {y}, {}, "gap")})};
    return g;
  };
  const Tensor input = Random(Shape{1, 16, 16, 16}, 42);
  OptimizationLog log;
  Graph winograd = OptimizeAndCompare(build(3), {input}, ir::MemoryLayout::kNhwc,
                                      ir::MemoryLayout::kNchw16c, &log);
  EXPECT_NE(log.ToString(20).find("Winograd's layout"), std::string::npos) << log.ToString(20);
  int kept = 0;
  for (ValueId v = 0; v < winograd.num_values(); ++v) {
    EXPECT_NE(winograd.value(v).layout, ir::MemoryLayout::kNhwc) << winograd.value(v).name;
    kept += winograd.value(v).layout == ir::MemoryLayout::kNchw16c;
  }
  EXPECT_EQ(kept, 4) << winograd.ToString();  // the outputs of stem, a, b and down
  // Where this CPU's Winograd runs in nChw16c (AVX-512), the plan runs the kept chain without
  // reordering (the strided convolutions read and write nChw16c as well): at most the NCHW
  // graph input's reorder into the stem. (Capped to AVX2 the runtime never asks for nChw16c.)
  if (kernels::WinogradConvActivationLayout() == ir::MemoryLayout::kNchw16c) {
    auto plan = exec::CompiledPlan::Compile(std::make_shared<Graph>(winograd), {input.shape()});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_LE((*plan)->stats().activation_reorders, 1);
  }

  Graph direct =
      OptimizeAndCompare(build(1), {input}, ir::MemoryLayout::kNhwc, ir::MemoryLayout::kNchw16c);
  for (ValueId v = 0; v < direct.num_values(); ++v) {
    EXPECT_NE(direct.value(v).layout, ir::MemoryLayout::kNchw16c) << direct.value(v).name;
  }
}

// A blocked layout needs a channel count that is a multiple of its block: 12 channels take
// NHWC but neither nChw8c nor nChw16c.
TEST(ConvActivationLayoutTest, BlockedLayoutNeedsWholeBlocks) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 12, 6, 6}));
  g.inputs = {x};
  const ValueId a = Op(g, "Conv", {x, g.AddConstant("w", Random(Shape{12, 12, 1, 1}, 1))}, {}, "a");
  const ValueId b =
      Op(g, "Conv", {a, g.AddConstant("w2", Random(Shape{12, 12, 1, 1}, 2))}, {}, "b");
  g.outputs = {b};
  for (ir::MemoryLayout layout : kLayouts) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    Graph opt = OptimizeAndCompare(g, {Random(Shape{1, 12, 6, 6}, 7)}, layout);
    const ir::MemoryLayout expected =
        layout == ir::MemoryLayout::kNhwc ? layout : ir::MemoryLayout::kPlain;
    EXPECT_EQ(opt.value(a).layout, expected);
  }
}

// A Concat carries the layout through (layout_chain_test.cc), but not into a graph output,
// which is NCHW: so the convs it concatenates keep NCHW too.
TEST(ConvActivationLayoutTest, ConvReadByOtherOpsStaysPlain) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 16, 6, 6}));
  g.inputs = {x};
  const ValueId a = Op(g, "Conv", {x, g.AddConstant("w", Random(Shape{16, 16, 1, 1}, 1))}, {}, "a");
  const ValueId b =
      Op(g, "Conv", {a, g.AddConstant("w2", Random(Shape{16, 16, 1, 1}, 2))}, {}, "b");
  g.outputs = {Op(g, "Concat", {a, b}, {{"axis", int64_t{1}}})};
  for (ir::MemoryLayout layout : kLayouts) {
    Graph opt = OptimizeAndCompare(g, {Random(Shape{1, 16, 6, 6}, 7)}, layout);
    for (ValueId v = 0; v < opt.num_values(); ++v) {
      EXPECT_EQ(opt.value(v).layout, ir::MemoryLayout::kPlain) << opt.value(v).name;
    }
  }
}

// Verify refuses a layout that a reader would misread.
TEST(ConvActivationLayoutTest, VerifyRejectsALayoutReadAsNchw) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 16, 6, 6}));
  g.inputs = {x};
  const ValueId a = Op(g, "Conv", {x, g.AddConstant("w", Random(Shape{16, 16, 1, 1}, 1))}, {}, "a");
  g.value(a).type = TensorType::Of(DType::kFloat32, {1, 16, 6, 6});
  g.outputs = {Op(g, "Relu", {a})};
  ASSERT_TRUE(ir::Verify(g).ok());
  g.value(a).layout = ir::MemoryLayout::kNchw8c;
  const absl::Status st = ir::Verify(g);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reads it (input 0) as NCHW"), std::string::npos) << st;
  // The same value read only by a conv is fine; with 12 channels nChw8c is not.
  g.outputs = {Op(g, "Conv", {a, g.AddConstant("w2", Random(Shape{16, 16, 1, 1}, 2))}, {}, "b")};
  for (ir::Node& n : g.nodes()) n.removed = n.op == "Relu";
  EXPECT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
  g.value(a).type = TensorType::Of(DType::kFloat32, {1, 12, 6, 6});
  EXPECT_FALSE(ir::Verify(g).ok());
}

// BERT's embedding sum reaches the first LayerNorm with no inferred type; axes [-1] and a 1-D
// gamma are enough to fuse it.
TEST(LayerNormFusionTest, FusesWhenInputTypeIsUnknown) {
  Graph g;
  const ValueId in = g.AddValue("in", TensorType::Of(DType::kFloat32, {3, 10}));
  g.inputs = {in};
  // Tile has no shape rule, so its output type stays unknown.
  const ValueId x = Op(g, "Tile", {in, g.AddConstant("reps", Tensor::FromVector<int64_t>({1, 1}))});
  const ValueId axes = g.AddConstant("axes", Tensor::FromVector<int64_t>({-1}));
  const ValueId mean = Op(g, "ReduceMean", {x, axes});
  const ValueId d = Op(g, "Sub", {x, mean});
  const ValueId var = Op(g, "ReduceMean",
                         {Op(g, "Pow", {d, g.AddConstant("two", Tensor::Scalar<float>(2))}), axes});
  const ValueId n = Op(
      g, "Div",
      {d,
       Op(g, "Sqrt", {Op(g, "Add", {var, g.AddConstant("eps", Tensor::Scalar<float>(1e-5f))})})});
  g.outputs = {Op(g, "Add",
                  {Op(g, "Mul", {n, g.AddConstant("gamma", Random(Shape{10}, 3))}),
                   g.AddConstant("beta", Random(Shape{10}, 4))})};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{3, 10}, 7)});
  int layer_norms = 0, reduce_means = 0;
  for (const ir::Node& node : opt.nodes()) {
    if (node.removed) continue;
    layer_norms += node.op == "LayerNormalization";
    reduce_means += node.op == "ReduceMean";
  }
  EXPECT_EQ(layer_norms, 1) << opt.ToString();
  EXPECT_EQ(reduce_means, 0) << opt.ToString();
}

}  // namespace
}  // namespace kiln::opt
