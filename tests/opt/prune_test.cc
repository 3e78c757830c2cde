// prune_zero_channels (src/opt/prune.cc): graphs with trained-looking random weights in which
// some output channels are zero, as magnitude pruning leaves them. Each test checks which
// channels went (the constants' new shapes) and that the pruned graph computes what the
// unpruned one computes: within float summation-order error on random inputs, NaN where it
// has NaN, and non-finite where it is non-finite.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/exec/plan.h"
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

// Zeroes the slices of `t` along `axis` whose index is in `channels`.
Tensor ZeroAlong(Tensor t, int axis, const std::set<int64_t>& channels) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= t.dim(i);
  for (int i = axis + 1; i < t.rank(); ++i) inner *= t.dim(i);
  const int64_t n = t.dim(axis);
  float* p = t.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c : channels) std::fill_n(p + (o * n + c) * inner, inner, 0.0f);
  }
  return t;
}

ValueId Const(Graph& g, const std::string& name, Tensor t) {
  return g.AddConstant(name, std::move(t));
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

struct Optimized {
  Graph graph;
  std::string log;
};

// Which graph the pass sees: the imported one (false), or, as at load
// (src/runtime/compression.cc), the one the fp32 optimizer already made, with Conv/MatMul/Gemm
// and their activations fused and convolution layouts chosen (true).
bool g_after_fp32_optimization = false;

Optimized Prune(const Graph& graph, bool compress = true, bool prune = true) {
  Optimized out{graph, ""};
  PassOptions options;
  // The layout the CPU's convolutions want, so that the fp32 graph has blocked values whose
  // channel counts the pruning changes.
  options.conv_activation_layout = ir::MemoryLayout::kNchw8c;
  // As at load with compression on (src/runtime/model.cc): the fp32 graph keeps its 1x1 and
  // depthwise convolutions apart.
  options.fuse_conv_depthwise = false;
  OptimizationLog log;
  if (g_after_fp32_optimization) {
    absl::Status st = Optimize(out.graph, options, &log);
    EXPECT_TRUE(st.ok()) << st;
    log = OptimizationLog();
  }
  CompressionOptions compression;
  compression.int8_dynamic_matmul = false;
  compression.int8_static = false;
  compression.prune_zero_channels = prune;
  options.compression = compress ? &compression : nullptr;
  absl::Status st = Optimize(out.graph, options, &log);
  EXPECT_TRUE(st.ok()) << st;
  out.log = log.ToString(50);
  return out;
}

class PruneTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { g_after_fp32_optimization = GetParam(); }
};

// The shape of the constant `name`'s pruned replacement (or of itself when not pruned; fusion
// renames a MatMul's bias "<name>_bias").
Shape ConstantShape(const Graph& g, const std::string& name) {
  for (int v = 0; v < g.num_values(); ++v) {
    const ir::Value& value = g.value(v);
    if (value.constant && (value.name == name || value.name.rfind(name + "_pruned", 0) == 0 ||
                           value.name.rfind(name + "_bias", 0) == 0)) {
      return value.constant->shape();
    }
  }
  return Shape{-1};
}

// Pruned outputs match: finite values within summation-order error (max abs error reported),
// non-finite where the reference is, NaN where the reference is NaN when `same_nan`.
void ExpectSame(const Graph& original, const Graph& pruned, const std::vector<Tensor>& inputs,
                bool same_nan = true) {
  const std::vector<Tensor> expected = Run(original, inputs);
  const std::vector<Tensor> actual = Run(pruned, inputs);
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t o = 0; o < expected.size(); ++o) {
    ASSERT_EQ(expected[o].shape(), actual[o].shape());
    const float* e = expected[o].data<float>();
    const float* a = actual[o].data<float>();
    double max_abs = 0;
    int64_t non_finite = 0;
    for (int64_t i = 0; i < expected[o].num_elements(); ++i) {
      ASSERT_EQ(std::isfinite(e[i]), std::isfinite(a[i]))
          << "[" << i << "] " << e[i] << " vs " << a[i];
      if (same_nan) {
        ASSERT_EQ(std::isnan(e[i]), std::isnan(a[i])) << "[" << i << "]";
      }
      if (!std::isfinite(e[i])) {
        ++non_finite;
        continue;
      }
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(e[i]) - a[i]));
      ASSERT_LE(std::fabs(static_cast<double>(e[i]) - a[i]), 2e-6 * (1 + std::fabs(e[i])))
          << "[" << i << "] " << e[i] << " vs " << a[i];
    }
    std::printf("output %zu: %lld values, %lld non-finite, max abs error %.3g\n", o,
                static_cast<long long>(expected[o].num_elements()),
                static_cast<long long>(non_finite), max_abs);
  }
}

// x[2,3,8,8] -> Conv 3->8 (channels 1, 4, 6 zero) -> Relu -> MaxPool -> Mul by a per-channel
// scale -> Conv 8->6 (channel 2 zero) -> Relu -> GlobalAveragePool -> Flatten -> Gemm 6->10.
Graph SmallCnn() {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3, 8, 8}));
  g.inputs = {x};
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  ValueId y = Op(g, "Conv",
                 {x, Const(g, "w1", ZeroAlong(Random(Shape{8, 3, 3, 3}, 1), 0, {1, 4, 6})),
                  Const(g, "b1", ZeroAlong(Random(Shape{8}, 2), 0, {1, 4, 6}))},
                 {{"pads", pads}}, "conv1");
  y = Op(g, "MaxPool", {Op(g, "Relu", {y})},
         {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  y = Op(g, "Mul", {y, Const(g, "scale", Random(Shape{1, 8, 1, 1}, 3, 0.5f, 2.0f))});
  y = Op(g, "Conv",
         {y, Const(g, "w2", ZeroAlong(Random(Shape{6, 8, 3, 3}, 4), 0, {2})),
          Const(g, "b2", ZeroAlong(Random(Shape{6}, 5), 0, {2}))},
         {{"pads", pads}}, "conv2");
  y = Op(g, "Flatten", {Op(g, "GlobalAveragePool", {Op(g, "Relu", {y})})});
  y = Op(g, "Gemm",
         {y, Const(g, "fc", Random(Shape{6, 10}, 6)), Const(g, "fc_b", Random(Shape{10}, 7))}, {},
         "fc");
  g.outputs = {y};
  return g;
}

TEST_P(PruneTest, ConvChainLosesItsZeroChannelsExactly) {
  const Graph g = SmallCnn();
  const Optimized p = Prune(g);
  EXPECT_EQ(ConstantShape(p.graph, "w1"), (Shape{5, 3, 3, 3})) << p.log;
  EXPECT_EQ(ConstantShape(p.graph, "b1"), (Shape{5}));
  EXPECT_EQ(ConstantShape(p.graph, "scale"), (Shape{1, 5, 1, 1}));
  EXPECT_EQ(ConstantShape(p.graph, "w2"), (Shape{5, 5, 3, 3}));
  EXPECT_EQ(ConstantShape(p.graph, "fc"), (Shape{5, 10}));
  EXPECT_NE(p.log.find("pruned 3 of 8 all-zero output channels of "), std::string::npos) << p.log;
  EXPECT_NE(p.log.find("Conv 'conv1'"), std::string::npos) << p.log;
  EXPECT_NE(p.log.find("pruned 1 of 6 all-zero output channels of "), std::string::npos) << p.log;
  for (uint32_t seed : {11u, 12u, 13u}) ExpectSame(g, p.graph, {Random(Shape{2, 3, 8, 8}, seed)});
}

TEST_P(PruneTest, NaNInputsGiveNaNWhereTheUnprunedGraphDoes) {
  const Graph g = SmallCnn();
  const Optimized p = Prune(g);
  Tensor x = Random(Shape{2, 3, 8, 8}, 21);
  x.data<float>()[5] = std::nanf("");  // image 0: every class score NaN (global pool)
  ExpectSame(g, p.graph, {x});
  // Infinities: the removed channel would be 0 * Inf = NaN; here its siblings are +-Inf or
  // NaN too, so the output stays non-finite (docs/COMPRESSION.md: NaN may read as Inf).
  Graph linear;
  const ValueId in = linear.AddValue("x", TensorType::Of(DType::kFloat32, {1, 4, 5, 5}));
  linear.inputs = {in};
  ValueId y = Op(linear, "Conv",
                 {in, Const(linear, "w1", ZeroAlong(Random(Shape{6, 4, 1, 1}, 1), 0, {0, 3}))});
  y = Op(linear, "Conv", {y, Const(linear, "w2", Random(Shape{3, 6, 1, 1}, 2))});
  linear.outputs = {y};
  const Optimized lp = Prune(linear);
  EXPECT_EQ(ConstantShape(lp.graph, "w2"), (Shape{3, 4, 1, 1})) << lp.log;
  Tensor xi = Random(Shape{1, 4, 5, 5}, 22);
  xi.data<float>()[3] = std::numeric_limits<float>::infinity();
  xi.data<float>()[40] = -std::numeric_limits<float>::infinity();
  xi.data<float>()[77] = std::nanf("");
  ExpectSame(linear, lp.graph, {xi}, /*same_nan=*/false);
}

TEST_P(PruneTest, SigmoidOfAZeroChannelGoesOnlyWhereTheConsumerWeightsAreZero) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {3, 4, 6, 6}));
  g.inputs = {x};
  ValueId y = Op(g, "Conv", {x, Const(g, "w1", ZeroAlong(Random(Shape{6, 4, 3, 3}, 1), 0, {0, 2}))},
                 {}, "conv1");
  y = Op(g, "Sigmoid", {y});  // Sigmoid(0) = 0.5 on channels 0 and 2
  // The consumer ignores channel 0 (its weights are zero) but reads 0.5 * w from channel 2.
  y = Op(g, "Conv", {y, Const(g, "w2", ZeroAlong(Random(Shape{5, 6, 1, 1}, 2), 1, {0}))}, {},
         "conv2");
  g.outputs = {y};
  const Optimized p = Prune(g);
  EXPECT_EQ(ConstantShape(p.graph, "w1"), (Shape{5, 4, 3, 3})) << p.log;
  EXPECT_EQ(ConstantShape(p.graph, "w2"), (Shape{5, 5, 1, 1}));
  ExpectSame(g, p.graph, {Random(Shape{3, 4, 6, 6}, 3)});
}

TEST_P(PruneTest, BatchNormKeepsAChannelItShiftsAwayFromZero) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 3, 5, 5}));
  g.inputs = {x};
  ValueId y = Op(g, "Conv", {x, Const(g, "w1", ZeroAlong(Random(Shape{6, 3, 3, 3}, 1), 0, {2, 3}))},
                 {}, "conv1");
  y = Op(g, "Relu", {y});  // a BatchNorm after an activation is not folded into the conv
  // Channel 2: mean and shift 0, so BN(0) = 0. Channel 3: shift 0.7, so BN(0) = 0.7.
  Tensor mean = ZeroAlong(Random(Shape{6}, 2), 0, {2});
  Tensor shift = ZeroAlong(Random(Shape{6}, 3), 0, {2});
  shift.data<float>()[3] = 0.7f;
  y = Op(g, "BatchNormalization",
         {y, Const(g, "gamma", Random(Shape{6}, 4, 0.5f, 1.5f)), Const(g, "beta", shift),
          Const(g, "mean", mean), Const(g, "var", Random(Shape{6}, 5, 0.5f, 2.0f))});
  y = Op(g, "Conv", {y, Const(g, "w2", Random(Shape{4, 6, 3, 3}, 6))}, {}, "conv2");
  g.outputs = {y};
  const Optimized p = Prune(g);
  EXPECT_EQ(ConstantShape(p.graph, "w1"), (Shape{5, 3, 3, 3})) << p.log;
  EXPECT_EQ(ConstantShape(p.graph, "gamma"), (Shape{5}));
  EXPECT_EQ(ConstantShape(p.graph, "w2"), (Shape{4, 5, 3, 3}));
  ExpectSame(g, p.graph, {Random(Shape{2, 3, 5, 5}, 7)});
}

TEST_P(PruneTest, MlpNeuronsGoWithTheirBiasAndTheNextLayersRows) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {4, 16}));
  g.inputs = {x};
  // MatMul + Add(bias): neurons 3, 7, 8 have zero weights; 8 has a nonzero bias, so it stays.
  ValueId y = Op(g, "MatMul",
                 {x, Const(g, "w1", ZeroAlong(Random(Shape{16, 32}, 1), 1, {3, 7, 8}))}, {}, "fc1");
  y = Op(g, "Add", {y, Const(g, "b1", ZeroAlong(Random(Shape{32}, 2), 0, {3, 7}))});
  y = Op(g, "Relu", {y});
  // Gemm with transB: neurons are rows of B; C is [1, 12].
  y = Op(g, "Gemm",
         {y, Const(g, "w2", ZeroAlong(Random(Shape{12, 32}, 3), 0, {0, 5})),
          Const(g, "b2", ZeroAlong(Random(Shape{1, 12}, 4), 1, {0, 5}))},
         {{"transB", int64_t{1}}}, "fc2");
  y = Op(g, "Tanh", {y});
  y = Op(g, "MatMul", {y, Const(g, "w3", Random(Shape{12, 10}, 5))}, {}, "fc3");
  g.outputs = {y};
  const Optimized p = Prune(g);
  EXPECT_EQ(ConstantShape(p.graph, "w1"), (Shape{16, 30})) << p.log;
  EXPECT_EQ(ConstantShape(p.graph, "b1"), (Shape{30}));
  EXPECT_EQ(ConstantShape(p.graph, "w2"), (Shape{10, 30}));
  EXPECT_EQ(ConstantShape(p.graph, "b2"), (Shape{1, 10}));
  EXPECT_EQ(ConstantShape(p.graph, "w3"), (Shape{10, 10}));
  ExpectSame(g, p.graph, {Random(Shape{4, 16}, 6, -3.0f, 3.0f)});
}

TEST_P(PruneTest, DepthwiseConvBetweenPointwiseConvsLosesTheChannelToo) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 4, 7, 7}));
  g.inputs = {x};
  ValueId y =
      Op(g, "Conv", {x, Const(g, "expand", ZeroAlong(Random(Shape{8, 4, 1, 1}, 1), 0, {5}))}, {},
         "expand");
  y = Op(g, "Clip",
         {y, Const(g, "lo", Tensor::Scalar<float>(0)), Const(g, "hi", Tensor::Scalar<float>(6))});
  y = Op(g, "Conv",
         {y, Const(g, "dw", Random(Shape{8, 1, 3, 3}, 2)),
          Const(g, "dw_b", ZeroAlong(Random(Shape{8}, 3), 0, {5}))},
         {{"group", int64_t{8}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}, "depthwise");
  y = Op(g, "Relu", {y});
  y = Op(g, "Conv", {y, Const(g, "project", Random(Shape{4, 8, 1, 1}, 4))}, {}, "project");
  g.outputs = {y};
  const Optimized p = Prune(g);
  EXPECT_EQ(ConstantShape(p.graph, "dw"), (Shape{7, 1, 3, 3})) << p.log;
  EXPECT_EQ(ConstantShape(p.graph, "project"), (Shape{4, 7, 1, 1}));
  ExpectSame(g, p.graph, {Random(Shape{1, 4, 7, 7}, 5)});
}

TEST_P(PruneTest, ResidualAddAndGraphOutputsKeepEveryChannel) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 4, 5, 5}));
  g.inputs = {x};
  ValueId y = Op(g, "Conv", {x, Const(g, "w1", ZeroAlong(Random(Shape{4, 4, 3, 3}, 1), 0, {1}))},
                 {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  y = Op(g, "Relu", {Op(g, "Add", {y, x})});  // channel 1 carries x there, not 0
  ValueId z = Op(g, "Conv", {x, Const(g, "w2", ZeroAlong(Random(Shape{3, 4, 1, 1}, 2), 0, {0}))});
  g.outputs = {y, z};  // z's channel 0 is part of what the caller gets
  const Optimized p = Prune(g);
  EXPECT_EQ(ConstantShape(p.graph, "w1"), (Shape{4, 4, 3, 3})) << p.log;
  EXPECT_EQ(ConstantShape(p.graph, "w2"), (Shape{3, 4, 1, 1})) << p.log;
  EXPECT_EQ(p.log.find("prune_zero_channels"), std::string::npos) << p.log;
}

TEST_P(PruneTest, NothingChangesUnlessCompressionAllowsIt) {
  const Graph g = SmallCnn();
  for (const auto& [compress, prune] : {std::pair{false, true}, std::pair{true, false}}) {
    const Optimized p = Prune(g, compress, prune);
    EXPECT_EQ(ConstantShape(p.graph, "w1"), (Shape{8, 3, 3, 3})) << p.log;
    EXPECT_EQ(p.log.find("prune_zero_channels"), std::string::npos) << p.log;
  }
}

TEST_P(PruneTest, AnAllZeroLayerKeepsOneChannel) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 8}));
  g.inputs = {x};
  ValueId y = Op(g, "MatMul", {x, Const(g, "w1", Tensor::Zeros(DType::kFloat32, Shape{8, 4}))});
  y = Op(g, "MatMul", {Op(g, "Relu", {y}), Const(g, "w2", Random(Shape{4, 3}, 1))});
  g.outputs = {y};
  const Optimized p = Prune(g);
  EXPECT_EQ(ConstantShape(p.graph, "w1"), (Shape{8, 1})) << p.log;
  ExpectSame(g, p.graph, {Random(Shape{2, 8}, 2)});
}

INSTANTIATE_TEST_SUITE_P(Graphs, PruneTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AfterFp32Optimization" : "Imported";
                         });

}  // namespace
}  // namespace kiln::opt
