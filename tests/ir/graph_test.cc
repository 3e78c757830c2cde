#include "kiln/ir/graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/ir/conv_geometry.h"
#include "kiln/ir/op_traits.h"

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;

Graph SmallGraph() {
  Graph g;
  g.name = "small";
  const ValueId x = g.AddValue("x", TensorType{DType::kFloat32, true,
                                               {Dim::Symbol("batch"), Dim::Known(4)}});
  g.inputs.push_back(x);
  const ValueId w = g.AddConstant("w", Tensor::FromVector<float>({1, 2, 3, 4}, Shape{4, 1}));
  const NodeId mm = g.AddNode("MatMul", {x, w}, 1, {}, "mm");
  const NodeId relu = g.AddNode("Relu", {g.node(mm).outputs[0]}, 1, {}, "relu");
  g.outputs.push_back(g.node(relu).outputs[0]);
  return g;
}

TEST(GraphTest, AddNodeSetsProducers) {
  Graph g = SmallGraph();
  const ValueId out = g.outputs[0];
  EXPECT_EQ(g.value(out).producer, 1);
  EXPECT_EQ(g.node(1).op, "Relu");
  EXPECT_TRUE(g.IsConstant(*g.FindValue("w")));
  EXPECT_FALSE(g.IsConstant(*g.FindValue("x")));
}

TEST(GraphTest, UniqueNamesOnClash) {
  Graph g;
  const ValueId a = g.AddValue("t");
  const ValueId b = g.AddValue("t");
  EXPECT_NE(g.value(a).name, g.value(b).name);
  EXPECT_EQ(g.UniqueName("t"), "t_2");
}

TEST(GraphTest, TopologicalOrderFollowsData) {
  Graph g;
  const ValueId x = g.AddValue("x");
  g.inputs.push_back(x);
  // Nodes added out of order: the consumer first.
  const ValueId mid = g.AddValue("mid");
  const ValueId out = g.AddValue("out");
  Node consumer;
  consumer.op = "Relu";
  consumer.inputs = {mid};
  consumer.outputs = {out};
  g.AddNode(consumer);
  Node producer;
  producer.op = "Neg";
  producer.inputs = {x};
  producer.outputs = {mid};
  g.AddNode(producer);
  g.outputs.push_back(out);
  auto order = g.TopologicalOrder();
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(*order, (std::vector<NodeId>{1, 0}));
  EXPECT_TRUE(Verify(g).ok());
}

TEST(GraphTest, CycleIsReportedWithNode) {
  Graph g;
  const ValueId a = g.AddValue("a");
  const ValueId b = g.AddValue("b");
  Node n1;
  n1.op = "Neg";
  n1.name = "first";
  n1.inputs = {b};
  n1.outputs = {a};
  g.AddNode(n1);
  Node n2;
  n2.op = "Neg";
  n2.name = "second";
  n2.inputs = {a};
  n2.outputs = {b};
  g.AddNode(n2);
  g.outputs.push_back(b);
  auto order = g.TopologicalOrder();
  ASSERT_FALSE(order.ok());
  EXPECT_THAT(order.status().message(), HasSubstr("cycle"));
  EXPECT_FALSE(Verify(g).ok());
}

TEST(GraphTest, VerifyRejectsUndefinedInput) {
  Graph g;
  const ValueId dangling = g.AddValue("dangling");
  const NodeId n = g.AddNode("Relu", {dangling}, 1, {}, "r");
  g.outputs.push_back(g.node(n).outputs[0]);
  absl::Status s = Verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("Relu 'r'"));
  EXPECT_THAT(s.message(), HasSubstr("dangling"));
}

TEST(GraphTest, VerifyRejectsDoubleProducer) {
  Graph g = SmallGraph();
  Node dup;
  dup.op = "Neg";
  dup.inputs = {g.inputs[0]};
  dup.outputs = {g.outputs[0]};
  g.nodes().push_back(dup);
  EXPECT_THAT(Verify(g).message(), HasSubstr("produced by both"));
}

TEST(GraphTest, VerifyChecksSubgraphs) {
  Graph g = SmallGraph();
  auto body = std::make_shared<Graph>();
  const ValueId bad = body->AddValue("nowhere");
  body->outputs.push_back(bad);
  g.AddNode("If", {g.inputs[0]}, 1, {{"then_branch", body}, {"else_branch", body}}, "cond");
  EXPECT_THAT(Verify(g).message(), HasSubstr("subgraph of If 'cond'"));
}

TEST(GraphTest, CompactDropsRemovedNodesAndUnusedValues) {
  Graph g = SmallGraph();
  g.AddConstant("unused", Tensor::Scalar<float>(1.0f));
  const NodeId extra = g.AddNode("Neg", {g.inputs[0]}, 1, {}, "dead");
  g.node(extra).removed = true;
  const int before = g.num_values();
  g.Compact();
  EXPECT_EQ(g.num_nodes(), 2);
  EXPECT_LT(g.num_values(), before);
  EXPECT_FALSE(g.FindValue("unused").has_value());
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
  EXPECT_EQ(g.node(g.value(g.outputs[0]).producer).op, "Relu");
}

TEST(GraphTest, CompactKeepsValuesCapturedBySubgraphs) {
  Graph g;
  const ValueId cond = g.AddValue("cond", TensorType::Of(DType::kBool, {}));
  g.inputs.push_back(cond);
  g.AddConstant("outer_const", Tensor::Scalar<float>(3.0f));
  auto branch = std::make_shared<Graph>();
  const ValueId local = branch->AddValue("outer_const");
  branch->captures.push_back({local, "outer_const"});
  branch->outputs.push_back(local);
  const NodeId n = g.AddNode("If", {cond}, 1, {{"then_branch", branch}, {"else_branch", branch}});
  g.outputs.push_back(g.node(n).outputs[0]);
  g.Compact();
  EXPECT_TRUE(g.FindValue("outer_const").has_value());
  auto consumers = g.Consumers();
  EXPECT_EQ(consumers[*g.FindValue("outer_const")].size(), 1u);
}

TEST(GraphTest, ReplaceAllUsesUpdatesNodesAndOutputs) {
  Graph g = SmallGraph();
  const ValueId x = g.inputs[0];
  const ValueId relu_out = g.outputs[0];
  const ValueId mm_out = g.node(0).outputs[0];
  g.ReplaceAllUses(mm_out, x);
  EXPECT_EQ(g.node(1).inputs[0], x);
  g.ReplaceAllUses(relu_out, x);
  EXPECT_EQ(g.outputs[0], x);
}

TEST(GraphTest, AttributeGetters) {
  Node n;
  n.op = "Conv";
  n.name = "c1";
  n.attrs["group"] = int64_t{2};
  n.attrs["alpha"] = 0.5f;
  n.attrs["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  n.attrs["mode"] = std::string("constant");
  EXPECT_EQ(n.GetInt("group", 1), 2);
  EXPECT_EQ(n.GetInt("missing", 7), 7);
  EXPECT_FLOAT_EQ(n.GetFloat("alpha", 1.0f), 0.5f);
  EXPECT_EQ(n.GetInts("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(n.GetString("mode", ""), "constant");
  EXPECT_EQ(n.GetTensor("value"), nullptr);
  EXPECT_EQ(n.GetGraph("body"), nullptr);
  EXPECT_EQ(n.Describe(), "Conv 'c1'");
}

TEST(GraphTest, PrinterShowsTypesAttributesAndSubgraphs) {
  Graph g = SmallGraph();
  g.node(1).attrs["alpha"] = 0.25f;
  const std::string text = g.ToString();
  EXPECT_THAT(text, HasSubstr("input %x: float[batch, 4]"));
  EXPECT_THAT(text, HasSubstr("const %w"));
  EXPECT_THAT(text, HasSubstr("= MatMul(%x, %w)"));
  EXPECT_THAT(text, HasSubstr("alpha=0.25"));
  EXPECT_THAT(text, HasSubstr("return %relu"));
}

TEST(ShapeInferenceTest, PropagatesSymbolicDims) {
  Graph g = SmallGraph();
  ASSERT_TRUE(InferShapes(g).ok());
  EXPECT_EQ(g.value(g.outputs[0]).type.ToString(), "float[batch, 1]");
}

TEST(ShapeInferenceTest, BroadcastAndComparison) {
  Graph g;
  const ValueId a = g.AddValue("a", TensorType{DType::kFloat32, true, {Dim::Symbol("n"),
                                                                       Dim::Known(1)}});
  const ValueId b = g.AddValue("b", TensorType::Of(DType::kFloat32, {3}));
  g.inputs = {a, b};
  const NodeId add = g.AddNode("Add", {a, b}, 1);
  const NodeId less = g.AddNode("Less", {a, b}, 1);
  const NodeId shape = g.AddNode("Shape", {g.node(add).outputs[0]}, 1);
  ASSERT_TRUE(InferShapes(g).ok());
  EXPECT_EQ(g.value(g.node(add).outputs[0]).type.ToString(), "float[n, 3]");
  EXPECT_EQ(g.value(g.node(less).outputs[0]).type.ToString(), "bool[n, 3]");
  EXPECT_EQ(g.value(g.node(shape).outputs[0]).type.ToString(), "int64[2]");
}

TEST(ShapeInferenceTest, UnknownOpsStayUnknown) {
  Graph g;
  const ValueId a = g.AddValue("a", TensorType::Of(DType::kFloat32, {2}));
  g.inputs = {a};
  const NodeId n = g.AddNode("SomethingNew", {a}, 1, {}, "", "custom");
  ASSERT_TRUE(InferShapes(g).ok());
  EXPECT_FALSE(g.value(g.node(n).outputs[0]).type.rank_known);
}

// ONNX's rule, with the examples of its Conv and MaxPool documentation.
TEST(ConvGeometryTest, OutputSizeAndPaddingPerAutoPad) {
  // 7 inputs, 3 taps, stride 2: SAME pads 2 in all, the odd one at the end (UPPER) or start.
  WindowAxis a = WindowOutputAxis(7, 3, 2, 1, 0, 0, AutoPad::kSameUpper);
  EXPECT_EQ(a.out, 4);
  EXPECT_EQ(a.pad_begin, 1);
  EXPECT_EQ(a.pad_end, 1);
  a = WindowOutputAxis(6, 3, 2, 1, 0, 0, AutoPad::kSameUpper);
  EXPECT_EQ(a.out, 3);
  EXPECT_EQ(a.pad_begin, 0);
  EXPECT_EQ(a.pad_end, 1);
  a = WindowOutputAxis(6, 3, 2, 1, 0, 0, AutoPad::kSameLower);
  EXPECT_EQ(a.pad_begin, 1);
  EXPECT_EQ(a.pad_end, 0);
  // VALID ignores the explicit pads; NOTSET uses them; dilation 2 makes 3 taps span 5.
  a = WindowOutputAxis(7, 3, 1, 2, 1, 1, AutoPad::kValid);
  EXPECT_EQ(a.out, 3);
  EXPECT_EQ(a.pad_begin + a.pad_end, 0);
  a = WindowOutputAxis(7, 3, 1, 2, 1, 1, AutoPad::kNotSet);
  EXPECT_EQ(a.out, 5);
  EXPECT_EQ(a.pad_begin, 1);
  // ceil_mode: 32 inputs, 3 taps, stride 2 -> 15 windows floor, 16 ceil.
  EXPECT_EQ(WindowOutputAxis(32, 3, 2, 1, 0, 0, AutoPad::kNotSet).out, 15);
  EXPECT_EQ(WindowOutputAxis(32, 3, 2, 1, 0, 0, AutoPad::kNotSet, true).out, 16);
  // A window larger than the (padded) input fits nowhere: floor(-1 / 2) + 1 = 0 windows,
  // where truncating division once gave 1.
  EXPECT_EQ(WindowOutputAxis(2, 3, 2, 1, 0, 0, AutoPad::kValid).out, 0);
  EXPECT_EQ(WindowOutputAxis(2, 3, 2, 1, 0, 0, AutoPad::kNotSet).out, 0);
  EXPECT_EQ(WindowOutputAxis(2, 3, 2, 1, 0, 0, AutoPad::kNotSet, true).out, 1);  // ceil(-1/2)
  EXPECT_LE(WindowOutputAxis(1, 5, 2, 1, 0, 0, AutoPad::kNotSet, true).out, 0);
  EXPECT_EQ(ParseAutoPad("SAME_LOWER"), AutoPad::kSameLower);
  EXPECT_EQ(ParseAutoPad("same_upper"), std::nullopt);
}

// Bad attributes of a model leave the shape unknown (the kernel reports them); stride 0 once
// divided by zero here.
TEST(ShapeInferenceTest, ConvWithBadStrideOrAutoPadStaysUnknown) {
  for (const auto& attrs : std::vector<std::map<std::string, Attribute>>{
           {{"strides", std::vector<int64_t>{0, 1}}},
           {{"auto_pad", std::string("SAME")}},
       }) {
    Graph g;
    const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 2, 8, 8}));
    g.inputs = {x};
    const ValueId w = g.AddConstant("w", Tensor::Zeros(DType::kFloat32, Shape{4, 2, 3, 3}));
    const NodeId conv = g.AddNode("Conv", {x, w}, 1, attrs, "conv");
    ASSERT_TRUE(InferShapes(g).ok());
    const TensorType& t = g.value(g.node(conv).outputs[0]).type;
    EXPECT_FALSE(t.rank_known && t.dims[2].is_known()) << t.ToString();
  }
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 2, 8, 8}));
  g.inputs = {x};
  const ValueId w = g.AddConstant("w", Tensor::Zeros(DType::kFloat32, Shape{4, 2, 3, 3}));
  const NodeId conv =
      g.AddNode("Conv", {x, w}, 1, {{"strides", std::vector<int64_t>{2, 2}}}, "conv");
  ASSERT_TRUE(InferShapes(g).ok());
  EXPECT_EQ(g.value(g.node(conv).outputs[0]).type.ToString(), "float[1, 4, 3, 3]");
}

TEST(OpTraitsTest, RandomOperatorsAreNondeterministicInTheirDomain) {
  EXPECT_TRUE(TraitsOf("", "Bernoulli").nondeterministic);
  EXPECT_TRUE(TraitsOf("kiln", "RandomUniform").nondeterministic);
  EXPECT_FALSE(TraitsOf("", "Relu").nondeterministic);
  EXPECT_FALSE(TraitsOf("custom", "Bernoulli").nondeterministic);
}

}  // namespace
}  // namespace kiln::ir
