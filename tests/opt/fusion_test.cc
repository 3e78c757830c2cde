// The fusion passes on small graphs built here: each test checks the rewritten structure and
// that the optimized graph computes what the original computes.
#include <gtest/gtest.h>

#include <random>

#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/op_traits.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;

Tensor Random(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

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

// Optimizes a copy of `graph` and checks it still computes the same outputs.
Graph OptimizeAndCompare(const Graph& graph, const std::vector<Tensor>& inputs,
                         std::string* log_text = nullptr) {
  Graph optimized = graph;
  OptimizationLog log;
  const exec::KernelEvaluator evaluator;
  PassOptions options;
  options.evaluator = &evaluator;
  absl::Status st = Optimize(optimized, options, &log);
  EXPECT_TRUE(st.ok()) << st;
  if (log_text) *log_text = log.ToString();
  const std::vector<Tensor> expected = Run(graph, inputs);
  const std::vector<Tensor> actual = Run(optimized, inputs);
  EXPECT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    EXPECT_TRUE(TensorsAllClose(actual[i], expected[i], 1e-4, 1e-5))
        << "output " << i << "\nexpected " << expected[i].DebugString() << "\nactual   "
        << actual[i].DebugString();
  }
  return optimized;
}

std::multiset<std::string> LiveOps(const Graph& g) {
  std::multiset<std::string> ops;
  for (const ir::Node& n : g.nodes()) {
    if (!n.removed) ops.insert(n.op);
  }
  return ops;
}

TEST(FusionTest, ResidualBlockBecomesTwoFusedConvs) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 8, 6, 6}));
  g.inputs = {x};
  auto bn = [&](ValueId in, int seed) {
    return Op(g, "BatchNormalization",
              {in, Const(g, "s", Random(Shape{8}, seed, 0.5f, 1.5f)),
               Const(g, "b", Random(Shape{8}, seed + 1)), Const(g, "m", Random(Shape{8}, seed + 2)),
               Const(g, "v", Random(Shape{8}, seed + 3, 0.5f, 2.0f))});
  };
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  ValueId y =
      Op(g, "Conv",
         {x, Const(g, "w1", Random(Shape{8, 8, 3, 3}, 1)), Const(g, "b1", Random(Shape{8}, 2))},
         {{"pads", pads}});
  y = Op(g, "Relu", {bn(y, 10)});
  y = Op(g, "Conv", {y, Const(g, "w2", Random(Shape{8, 8, 3, 3}, 3))}, {{"pads", pads}});
  y = Op(g, "Relu", {Op(g, "Add", {bn(y, 20), x})});
  g.outputs = {y};
  std::string log;
  Graph opt = OptimizeAndCompare(g, {Random(Shape{1, 8, 6, 6}, 99)}, &log);
  EXPECT_EQ(LiveOps(opt), (std::multiset<std::string>{"FusedConv", "FusedConv"}))
      << opt.ToString() << log;
  EXPECT_NE(log.find("batchnorm_folding"), std::string::npos) << log;
}

TEST(FusionTest, DecomposedGeluAfterLinearBecomesFusedMatMul) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {4, 16}));
  g.inputs = {x};
  ValueId h = Op(g, "MatMul", {x, Const(g, "w", Random(Shape{16, 8}, 1))});
  h = Op(g, "Add", {h, Const(g, "bias", Random(Shape{8}, 2))});
  ValueId e = Op(g, "Erf", {Op(g, "Div", {h, Scalar(g, "sqrt2", 1.4142135f)})});
  ValueId y =
      Op(g, "Mul",
         {Op(g, "Mul", {h, Op(g, "Add", {e, Scalar(g, "one", 1.0f)})}), Scalar(g, "half", 0.5f)});
  g.outputs = {y};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{4, 16}, 5)});
  EXPECT_EQ(LiveOps(opt), (std::multiset<std::string>{"FusedMatMul"})) << opt.ToString();
}

TEST(FusionTest, DecomposedLayerNormBecomesLayerNormalization) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {3, 10}));
  g.inputs = {x};
  const ValueId axes = Const(g, "axes", Tensor::FromVector<int64_t>({-1}));
  ValueId mean = Op(g, "ReduceMean", {x, axes});
  ValueId d = Op(g, "Sub", {x, mean});
  ValueId var = Op(g, "ReduceMean", {Op(g, "Pow", {d, Scalar(g, "two", 2.0f)}), axes});
  ValueId n = Op(g, "Div", {d, Op(g, "Sqrt", {Op(g, "Add", {var, Scalar(g, "eps", 1e-5f)})})});
  ValueId y = Op(g, "Add",
                 {Op(g, "Mul", {n, Const(g, "gamma", Random(Shape{10}, 3))}),
                  Const(g, "beta", Random(Shape{10}, 4))});
  g.outputs = {y};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{3, 10}, 7)});
  EXPECT_EQ(LiveOps(opt), (std::multiset<std::string>{"LayerNormalization"})) << opt.ToString();
}

TEST(FusionTest, ElementwiseChainBecomesOneNode) {
  Graph g;
  const ValueId a = g.AddValue("a", TensorType::Of(DType::kFloat32, {2, 5}));
  const ValueId b = g.AddValue("b", TensorType::Of(DType::kFloat32, {5}));
  g.inputs = {a, b};
  ValueId y = Op(g, "Sigmoid",
                 {Op(g, "Mul", {Op(g, "Relu", {Op(g, "Add", {a, b})}), Scalar(g, "k", 2.0f)})});
  g.outputs = {y};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{2, 5}, 1), Random(Shape{5}, 2)});
  EXPECT_EQ(LiveOps(opt), (std::multiset<std::string>{"FusedElementwise"})) << opt.ToString();
}

// A chain longer than one program's registers becomes several fused nodes that each compile,
// not one that no plan can run (the fuzzer's 1900-Relu chain failed to compile).
TEST(FusionTest, ChainBeyondTheRegisterLimitIsSplit) {
  Graph g;
  const ValueId a = g.AddValue("a", TensorType::Of(DType::kFloat32, {2, 5}));
  g.inputs = {a};
  ValueId y = a;
  for (int i = 0; i < 150; ++i) {
    // Each Add reads its own tensor constant: one more input register per step.
    y = Op(g, "Add", {Op(g, "Sin", {y}), Const(g, "c" + std::to_string(i),
                                                Random(Shape{5}, 100 + i, -0.1f, 0.1f))});
  }
  g.outputs = {y};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{2, 5}, 1)});
  const std::multiset<std::string> ops = LiveOps(opt);
  EXPECT_EQ(ops.count("FusedElementwise"), ops.size()) << opt.ToString();
  EXPECT_GE(ops.size(), 5u);  // 300 nodes, at most 64 registers each
}

TEST(FusionTest, CancellingTransposesAndDuplicatesDisappear) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3, 4}));
  g.inputs = {x};
  const std::vector<int64_t> perm = {0, 2, 1};
  ValueId t = Op(g, "Transpose", {Op(g, "Transpose", {x}, {{"perm", perm}})}, {{"perm", perm}});
  ValueId e1 = Op(g, "Exp", {t});
  ValueId e2 = Op(g, "Exp", {t});
  g.outputs = {Op(g, "Sub", {e1, e2})};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{2, 3, 4}, 3)});
  const auto ops = LiveOps(opt);
  EXPECT_EQ(ops.count("Transpose"), 0u) << opt.ToString();
  EXPECT_LE(ops.size(), 2u) << opt.ToString();
}

// Two draws are two random tensors, however alike the nodes look: CSE once merged two
// Bernoulli nodes (its own list of random operators missed it) while constant folding and the
// plan compiler, which had a third list, protected them.
TEST(FusionTest, RandomNodesAreNeverMerged) {
  const std::pair<const char*, const char*> random_ops[] = {
      {"", "Bernoulli"},        {"", "Multinomial"},       {"", "RandomUniformLike"},
      {"", "RandomNormalLike"}, {"kiln", "RandomUniform"},
  };
  for (const auto& [domain, op] : random_ops) {
    ASSERT_TRUE(ir::TraitsOf(domain, op).nondeterministic) << domain << "::" << op;
    Graph g;
    const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3}));
    g.inputs = {x};
    const ValueId a = Op(g, op, {x}, {{"seed", 1.0f}});
    const ValueId b = Op(g, op, {x}, {{"seed", 1.0f}});
    for (ir::Node& n : g.nodes()) n.domain = domain;
    g.outputs = {Op(g, "Sub", {a, b})};
    auto merged = RunPass("common_subexpression_elimination", g, PassOptions{});
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_TRUE(merged->empty()) << op;
    EXPECT_EQ(LiveOps(g).count(op), 2u) << g.ToString();
  }
  // The same graph with a deterministic operator is merged: the check above can fail.
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3}));
  g.inputs = {x};
  g.outputs = {Op(g, "Sub", {Op(g, "Exp", {x}), Op(g, "Exp", {x})})};
  auto merged = RunPass("common_subexpression_elimination", g, PassOptions{});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(*merged, std::vector<std::string>{"merged Exp 'Exp' into its twin Exp 'Exp'"});
}

// The optimizer evaluates constant nodes only through the evaluator the runtime hands it (the
// kernels); without one it folds nothing rather than linking kernels of its own.
TEST(ConstantFoldingTest, FoldsThroughTheEvaluatorItIsHanded) {
  class CountingEvaluator : public ir::NodeEvaluator {
   public:
    absl::StatusOr<std::vector<Tensor>> Evaluate(const ir::Node& node,
                                                 absl::Span<const Tensor> inputs,
                                                 size_t max_output_bytes) const override {
      ++calls;
      return kernels_.Evaluate(node, inputs, max_output_bytes);
    }
    mutable int calls = 0;

   private:
    exec::KernelEvaluator kernels_;
  };
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2}));
  g.inputs = {x};
  const ValueId sum = Op(g, "Add", {Scalar(g, "a", 2.0f), Scalar(g, "b", 3.0f)});
  g.outputs = {Op(g, "Mul", {x, sum})};

  // Elementwise fusion would take the Add into a FusedElementwise program either way.
  PassOptions options;
  options.disabled_passes = {"elementwise_chain_fusion"};
  Graph unfolded = g;
  OptimizationLog log;
  ASSERT_TRUE(Optimize(unfolded, options, &log).ok());
  EXPECT_EQ(LiveOps(unfolded).count("Add"), 1u) << unfolded.ToString();

  CountingEvaluator evaluator;
  options.evaluator = &evaluator;
  Graph folded = g;
  ASSERT_TRUE(Optimize(folded, options, &log).ok());
  EXPECT_EQ(LiveOps(folded).count("Add"), 0u) << folded.ToString();
  EXPECT_GE(evaluator.calls, 1);
  const std::vector<Tensor> out = opt::Run(folded, {Tensor::FromVector<float>({1, -2}, Shape{2})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].span<float>()[0], 5.0f);
  EXPECT_EQ(out[0].span<float>()[1], -10.0f);
}

TEST(FusionTest, SharedIntermediateIsNotFused) {
  // The Conv output is read twice, so the Relu must not be folded into it.
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 2, 4, 4}));
  g.inputs = {x};
  ValueId c = Op(g, "Conv", {x, Const(g, "w", Random(Shape{2, 2, 1, 1}, 1))});
  g.outputs = {Op(g, "Relu", {c}), c};
  Graph opt = OptimizeAndCompare(g, {Random(Shape{1, 2, 4, 4}, 2)});
  EXPECT_EQ(LiveOps(opt).count("Conv"), 1u) << opt.ToString();
}

}  // namespace
}  // namespace kiln::opt
