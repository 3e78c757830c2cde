// The channels-last conv layout pass and the LayerNorm fusion on inputs of unknown type: each
// test checks what the optimizer marked or fused and that the optimized graph computes what
// the original computes (kernels run for real, through the plan compiler).
#include <random>

#include <gtest/gtest.h>

#include "kiln/exec/plan.h"
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
  const ir::NodeId id = g.AddNode(op, std::move(inputs), 1, std::move(attrs), name.empty() ? op : name);
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

Graph OptimizeAndCompare(const Graph& graph, const std::vector<Tensor>& inputs) {
  Graph optimized = graph;
  OptimizationLog log;
  absl::Status st = Optimize(optimized, PassOptions{}, &log);
  EXPECT_TRUE(st.ok()) << st;
  const std::vector<Tensor> expected = Run(graph, inputs);
  const std::vector<Tensor> actual = Run(optimized, inputs);
  EXPECT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    EXPECT_TRUE(TensorsAllClose(actual[i], expected[i], 1e-4, 1e-5))
        << "output " << i << "\nexpected " << expected[i].DebugString() << "\nactual   "
        << actual[i].DebugString() << "\n" << log.ToString();
  }
  return optimized;
}

const ir::Node* Producer(const Graph& g, ValueId v) {
  const ir::NodeId id = g.value(v).producer;
  return id == ir::kNoNode ? nullptr : &g.node(id);
}

// Conv+Relu -> MaxPool -> Conv+Relu -> Conv + residual(MaxPool) + Relu -> GlobalAveragePool ->
// Flatten, with the second conv's output also a graph output.
TEST(ChannelsLastLayoutTest, ConvChainRunsChannelsLastAndMatches) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 8, 10, 10}));
  g.inputs = {x};
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  auto conv = [&](ValueId in, int seed, const std::string& name) {
    return Op(g, "Conv",
              {in, g.AddConstant(name + "_w", Random(Shape{8, 8, 3, 3}, seed)),
               g.AddConstant(name + "_b", Random(Shape{8}, seed + 1))},
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
  y = Op(g, "Flatten", {Op(g, "GlobalAveragePool", {y}, {}, "gap")});
  g.outputs = {y, escaping};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{2, 8, 10, 10}, 99)});

  int channels_last_outputs = 0;
  for (const ir::Node& n : opt.nodes()) {
    if (!n.removed && n.GetInt("y_channels_last", 0) != 0) ++channels_last_outputs;
  }
  EXPECT_GE(channels_last_outputs, 2) << opt.ToString();
  // A graph output keeps plain NCHW bytes: callers read it.
  const ir::Node* escaping_producer = Producer(opt, opt.outputs[1]);
  ASSERT_NE(escaping_producer, nullptr);
  EXPECT_EQ(escaping_producer->GetInt("y_channels_last", 0), 0) << opt.ToString();
  // The global pool reads the last conv's NHWC bytes; Flatten sees NCHW [N, C, 1, 1].
  for (const ir::Node& n : opt.nodes()) {
    if (!n.removed && n.op == "GlobalAveragePool") {
      EXPECT_EQ(n.GetInt("x_channels_last", 0), 1) << opt.ToString();
    }
  }
}

// A conv feeding anything else (here Concat) keeps NCHW, and so does its reader.
TEST(ChannelsLastLayoutTest, ConvReadByOtherOpsStaysPlain) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 4, 6, 6}));
  g.inputs = {x};
  const ValueId a = Op(g, "Conv", {x, g.AddConstant("w", Random(Shape{4, 4, 1, 1}, 1))}, {}, "a");
  const ValueId b = Op(g, "Conv", {a, g.AddConstant("w2", Random(Shape{4, 4, 1, 1}, 2))}, {}, "b");
  g.outputs = {Op(g, "Concat", {a, b}, {{"axis", int64_t{1}}})};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{1, 4, 6, 6}, 7)});
  for (const ir::Node& n : opt.nodes()) {
    if (n.removed) continue;
    EXPECT_EQ(n.GetInt("y_channels_last", 0), 0) << n.Describe();
    EXPECT_EQ(n.GetInt("x_channels_last", 0), 0) << n.Describe();
  }
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
  const ValueId var =
      Op(g, "ReduceMean", {Op(g, "Pow", {d, g.AddConstant("two", Tensor::Scalar<float>(2))}), axes});
  const ValueId n = Op(g, "Div", {d, Op(g, "Sqrt", {Op(g, "Add", {var, g.AddConstant("eps", Tensor::Scalar<float>(1e-5f))})})});
  g.outputs = {Op(g, "Add", {Op(g, "Mul", {n, g.AddConstant("gamma", Random(Shape{10}, 3))}),
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
