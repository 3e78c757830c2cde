// The static int8 pass (src/opt/compress_conv.cc) end to end on real kernels: a small CNN
// (Conv+Relu -> MaxPool -> [Conv+Relu -> Conv + residual Add + Relu] -> Conv) is optimized in fp32,
// calibrated with CollectActivationRanges, optimized again with CompressionOptions, and compared
// with fp32. The chain must stay int8 from one Int8Quantize to the last conv (which writes float
// itself), and the outputs must agree within the error the scales imply: each int8 value
// carries at most half a step of rounding (range / 255 for uint8), which the following
// layers pass on; for this network of unit-scale weights that is a few percent of the output
// range, the bound checked below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kiln/core/status.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/opt/pass.h"
#include "kiln/runtime/calibration.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;

Tensor Random(Shape shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

ValueId Op(Graph& g, const std::string& op, std::vector<ValueId> inputs, const std::string& name,
           std::map<std::string, ir::Attribute> attrs = {}) {
  const ir::NodeId id = g.AddNode(op, std::move(inputs), 1, std::move(attrs), name);
  g.value(g.node(id).outputs[0]).name = name;
  return g.node(id).outputs[0];
}

ValueId Conv(Graph& g, ValueId x, int64_t in, int64_t out, int64_t k, const std::string& name,
             uint32_t seed) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in * k * k));
  const ValueId w = g.AddConstant(name + "/w", Random({out, in, k, k}, seed, -bound, bound));
  const ValueId b = g.AddConstant(name + "/b", Random({out}, seed + 1, -0.1f, 0.1f));
  const int64_t p = k / 2;
  return Op(g, "Conv", {x, w, b}, name, {{"pads", std::vector<int64_t>{p, p, p, p}}});
}

Graph SmallCnn() {
  Graph g;
  // A named batch dimension, as exported models have: fusion adds a residual only when it
  // can prove the shapes equal.
  TensorType type = TensorType::Of(DType::kFloat32, {-1, 8, 12, 12});
  type.dims[0] = ir::Dim::Symbol("batch");
  const ValueId x = g.AddValue("x", type);
  g.inputs = {x};
  const ValueId a = Op(g, "Relu", {Conv(g, x, 8, 16, 3, "conv1", 1)}, "relu1");
  const ValueId p =
      Op(g, "MaxPool", {a}, "pool",
         {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  // A residual block as ResNet's: the shortcut `p` is conv2's input and conv3's residual.
  const ValueId c2 = Op(g, "Relu", {Conv(g, p, 16, 16, 3, "conv2", 3)}, "relu2");
  const ValueId c3 = Conv(g, c2, 16, 16, 3, "conv3", 5);
  const ValueId s = Op(g, "Relu", {Op(g, "Add", {c3, p}, "add")}, "relu3");
  g.outputs = {Conv(g, s, 16, 8, 1, "conv4", 7)};
  return g;
}

struct Optimized {
  std::shared_ptr<Graph> graph;
  OptimizationLog log;
};

absl::StatusOr<Optimized> OptimizeWith(const Graph& source, const CompressionOptions* compression) {
  Optimized out;
  out.graph = std::make_shared<Graph>(source);
  PassOptions options;
  options.compression = compression;
  options.conv_activation_layout = kernels::PreferredConvActivationLayout();
  absl::Status s = Optimize(*out.graph, options, &out.log);
  if (!s.ok()) return s;
  s = ir::InferShapes(*out.graph);
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Tensor> RunGraph(std::shared_ptr<const Graph> g, const Tensor& x) {
  auto plan = exec::CompiledPlan::Compile(g, {x.shape()});
  if (!plan.ok()) return plan.status();
  std::vector<Tensor> outputs;
  absl::Status s = (*plan)->Run({x}, &outputs);
  if (!s.ok()) return s;
  return outputs[0];
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += !node.removed && node.op == op;
  return n;
}

class CompressConvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fp32 = OptimizeWith(source_, nullptr);
    ASSERT_TRUE(fp32.ok()) << fp32.status();
    fp32_ = *fp32;
    std::vector<std::map<std::string, Tensor>> examples;
    for (uint32_t i = 0; i < 16; ++i)
      examples.push_back({{"x", Random({1, 8, 12, 12}, 100 + i, -1, 1)}});
    // Min/max calibration: no value of the held-out inputs below leaves the calibrated ranges
    // by much, so the error is rounding alone (percentile calibration adds clipping).
    runtime::CalibrationOptions calibration;
    calibration.method = runtime::CalibrationOptions::Method::kMinMax;
    auto ranges = runtime::CollectActivationRanges(*fp32_.graph, examples, calibration);
    ASSERT_TRUE(ranges.ok()) << ranges.status();
    compression_.activation_ranges = *ranges;
    auto clipped = runtime::CollectActivationRanges(*fp32_.graph, examples);
    ASSERT_TRUE(clipped.ok()) << clipped.status();
    percentile_ranges_ = *clipped;
    compression_.vnni = true;
  }

  // Max |int8 - fp32| over held-out inputs, relative to the fp32 output's largest magnitude.
  double RelativeError(const Graph& source_or_optimized) {
    auto int8 = OptimizeWith(source_or_optimized, &compression_);
    EXPECT_TRUE(int8.ok()) << int8.status();
    if (!int8.ok()) return 1e9;
    int8_ = *int8;
    const Tensor x = Random({4, 8, 12, 12}, 7, -1, 1);
    auto want = RunGraph(fp32_.graph, x);
    auto got = RunGraph(int8_.graph, x);
    EXPECT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(got.ok()) << got.status();
    if (!want.ok() || !got.ok()) return 1e9;
    EXPECT_EQ(got->shape(), want->shape());
    double max_diff = 0, max_abs = 0, sum_diff = 0;
    for (int64_t i = 0; i < want->num_elements(); ++i) {
      sum_diff += std::fabs(got->data<float>()[i] - want->data<float>()[i]);
      max_diff =
          std::max(max_diff, double{std::fabs(got->data<float>()[i] - want->data<float>()[i])});
      max_abs = std::max(max_abs, double{std::fabs(want->data<float>()[i])});
    }
    mean_error_ = sum_diff / want->num_elements() / max_abs;
    return max_diff / max_abs;
  }

  double mean_error_ = 0;  // of the last RelativeError: mean |int8 - fp32| / max |fp32|

  Graph source_ = SmallCnn();
  Optimized fp32_, int8_;
  CompressionOptions compression_;
  absl::flat_hash_map<std::string, ActivationRange> percentile_ranges_;
};

TEST_F(CompressConvTest, ChainStaysInt8AndMatchesFp32WithinTheScales) {
  const double error = RelativeError(source_);
  std::printf("error relative to the output range: max %.4f, mean %.4f (min/max calibration)\n",
              error, mean_error_);
  // Five roundings of half a step (1/254 of a uint8 range) each, amplified by random weights:
  // a few percent at the worst element, well under one percent on average. A wrong scale or
  // bias moves whole channels and fails both.
  EXPECT_LT(error, 0.08);
  EXPECT_LT(mean_error_, 0.01);
  const Graph& g = *int8_.graph;
  EXPECT_EQ(Count(g, ir::kInt8ConvOp), 4) << g.ToString();
  EXPECT_EQ(Count(g, ir::kInt8PoolOp), 1) << g.ToString();
  // One quantization at the chain's start; the last conv dequantizes through its scale.
  EXPECT_EQ(Count(g, ir::kInt8QuantizeOp), 1) << g.ToString();
  EXPECT_EQ(Count(g, ir::kInt8DequantizeOp), 0) << g.ToString();
  EXPECT_EQ(Count(g, "FusedConv") + Count(g, "Conv") + Count(g, "MaxPool"), 0) << g.ToString();
}

TEST_F(CompressConvTest, PercentileCalibrationClipsButStaysClose) {
  compression_.activation_ranges = percentile_ranges_;
  const double error = RelativeError(source_);
  std::printf("error relative to the output range: max %.4f, mean %.4f (99.99th percentile)\n",
              error, mean_error_);
  EXPECT_LT(error, 0.1);
  EXPECT_LT(mean_error_, 0.01);
}

TEST_F(CompressConvTest, AlreadyOptimizedGraphWithConvLayoutsCompressesToo) {
  // The runtime may compress its optimized fp32 graph, whose conv values carry layouts.
  EXPECT_LT(RelativeError(*fp32_.graph), 0.08);
  EXPECT_EQ(Count(*int8_.graph, ir::kInt8ConvOp), 4);
  EXPECT_TRUE(ir::Verify(*int8_.graph).ok());
}

TEST_F(CompressConvTest, KeepFp32SplitsTheChain) {
  compression_.keep_fp32.insert("conv2");
  EXPECT_LT(RelativeError(source_), 0.08);
  const Graph& g = *int8_.graph;
  EXPECT_EQ(Count(g, ir::kInt8ConvOp), 3) << g.ToString();
  EXPECT_EQ(Count(g, "FusedConv"), 1) << g.ToString();
  // The pool output feeds the float conv2: the pool dequantizes; the float values entering
  // the chain again (conv2's output, and the pool's output as conv3's residual) are quantized.
  EXPECT_EQ(Count(g, ir::kInt8DequantizeOp), 1) << g.ToString();
  EXPECT_EQ(Count(g, ir::kInt8QuantizeOp), 3) << g.ToString();
}

TEST_F(CompressConvTest, WithoutVnniWeightsHaveSevenBits) {
  compression_.vnni = false;
  EXPECT_LT(RelativeError(source_), 0.1);
  EXPECT_LT(mean_error_, 0.015);
  int int8_constants = 0;
  const Graph& g = *int8_.graph;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    if (!g.IsConstant(v) || g.value(v).constant->dtype() != DType::kInt8) continue;
    ++int8_constants;
    for (int8_t q : g.value(v).constant->span<int8_t>()) {
      ASSERT_LE(std::abs(int{q}), 63) << g.value(v).name;
    }
  }
  EXPECT_EQ(int8_constants, 4);
}

// Without VNNI, where fp32 3x3 convolutions run as Winograd and carry most of the work (the
// small CNN: 3 of its 4 convolutions, 98% of the multiply-adds), every conv stays fp32.
TEST_F(CompressConvTest, WithoutVnniAWinogradHeavyGraphStaysFp32) {
  compression_.vnni = false;
  compression_.fp32_winograd = true;
  EXPECT_EQ(RelativeError(source_), 0.0);
  EXPECT_EQ(Count(*int8_.graph, ir::kInt8ConvOp), 0) << int8_.graph->ToString();
  EXPECT_NE(int8_.log.ToString(50).find("Conv layers kept fp32: without VNNI, fp32 Winograd"),
            std::string::npos)
      << int8_.log.ToString(50);
  // With VNNI int8 wins: every conv is int8.
  compression_.vnni = true;
  RelativeError(source_);
  EXPECT_EQ(Count(*int8_.graph, ir::kInt8ConvOp), 4);
}

TEST_F(CompressConvTest, NothingChangesWithoutRangesOrWhenDisabled) {
  CompressionOptions none;
  auto a = OptimizeWith(source_, &none);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Count(*a->graph, ir::kInt8ConvOp), 0);
  compression_.int8_static = false;
  auto b = OptimizeWith(source_, &compression_);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(Count(*b->graph, ir::kInt8ConvOp), 0);
}

// A QDQ conv that fuse_qdq leaves (uint8 weights with a zero point of 5: Int8Conv takes int8
// weights with zero point 0) keeps the model's own quantization: calibration ranges exist for
// every value around it, but quantizing its DequantizeLinear output again on calibrated scales
// would be a second rounding on another grid. Nothing int8 of Kiln's own appears, and the
// result is the uncompressed graph's.
TEST(CompressConvQdqTest, QdqConvIsNotRecalibrated) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, 4, 8, 8}));
  g.inputs = {x};
  auto scalar = [&](const std::string& name, auto v) {
    return g.AddConstant(name, Tensor::FromVector<decltype(v)>({v}, Shape{}));
  };
  const ValueId xs = scalar("xs", 0.02f), xz = scalar("xz", uint8_t{128});
  const ValueId xd =
      Op(g, "DequantizeLinear", {Op(g, "QuantizeLinear", {x, xs, xz}, "xq"), xs, xz}, "xd");
  Tensor wq(DType::kUInt8, Shape{6, 4, 3, 3});
  std::mt19937 rng(3);
  for (int64_t i = 0; i < wq.num_elements(); ++i) wq.data<uint8_t>()[i] = rng() % 256;
  const ValueId wd =
      Op(g, "DequantizeLinear",
         {g.AddConstant("wq", wq), scalar("ws", 0.003f), scalar("wz", uint8_t{5})}, "wd");
  const ValueId c = Op(g, "Conv", {xd, wd}, "conv", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  const ValueId ys = scalar("ys", 0.05f), yz = scalar("yz", uint8_t{128});
  g.outputs = {
      Op(g, "DequantizeLinear", {Op(g, "QuantizeLinear", {c, ys, yz}, "yq"), ys, yz}, "y")};

  // The types an exported model declares (value_info): the conv's input and output are float
  // [N, C, H, W], which the static pass requires.
  for (const char* name : {"xd", "conv", "y"}) {
    for (ValueId v = 0; v < g.num_values(); ++v) {
      if (g.value(v).name == name) {
        g.value(v).type =
            TensorType::Of(DType::kFloat32, {-1, name == std::string("xd") ? 4 : 6, 8, 8});
      }
    }
  }
  // As the runtime optimizes (model.cc): shapes known, constants folded by the kernels, so
  // that DequantizeLinear(w) becomes the float weights the static pass looks for.
  const exec::KernelEvaluator evaluator;
  auto optimize = [&](const CompressionOptions* compression) -> absl::StatusOr<Optimized> {
    Optimized out;
    out.graph = std::make_shared<Graph>(g);
    KILN_RETURN_IF_ERROR(ir::InferShapes(*out.graph));
    PassOptions options;
    options.compression = compression;
    options.evaluator = &evaluator;
    options.conv_activation_layout = kernels::PreferredConvActivationLayout();
    KILN_RETURN_IF_ERROR(Optimize(*out.graph, options, &out.log));
    KILN_RETURN_IF_ERROR(ir::InferShapes(*out.graph));
    return out;
  };
  auto fp32 = optimize(nullptr);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  std::vector<std::map<std::string, Tensor>> examples;
  for (uint32_t i = 0; i < 4; ++i) examples.push_back({{"x", Random({2, 4, 8, 8}, 40 + i, -2, 2)}});
  auto ranges = runtime::CollectActivationRanges(*fp32->graph, examples);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  ASSERT_TRUE(ranges->contains("xd")) << "the conv's input must be calibrated for this test";
  CompressionOptions compression;
  compression.activation_ranges = *ranges;
  compression.vnni = true;
  auto int8 = optimize(&compression);
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_EQ(Count(*int8->graph, ir::kInt8ConvOp), 0) << int8->graph->ToString();
  EXPECT_EQ(Count(*int8->graph, ir::kInt8QuantizeOp), 0) << int8->graph->ToString();
  const Tensor in = Random({2, 4, 8, 8}, 50, -2, 2);
  auto want = RunGraph(fp32->graph, in);
  auto got = RunGraph(int8->graph, in);
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ(got->shape(), want->shape());
  EXPECT_EQ(0, std::memcmp(got->raw_data(), want->raw_data(), want->byte_size()));
}

}  // namespace
}  // namespace kiln::opt
