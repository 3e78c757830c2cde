// fuse_qdq (src/opt/fuse_qdq.cc): quantized ONNX graphs, QOperator (QLinearConv) and QDQ
// (DequantizeLinear -> Conv -> Relu -> QuantizeLinear), run on kiln::Int8Conv, compared with
// the same graph optimized without the pass (the reference kernels of quantize_ops.cc).
// Expected: at most one quantization step of difference per conv, where float rounding of the
// scaled sum falls on the other side of a tie (QLinearConv), or where the QDQ reference's float
// convolution rounds differently from the exact int32 sum; nearly all outputs bit-exact.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../testing/quant_test_util.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;

using test_util::F;
using test_util::Node1;
using test_util::RandomFloats;
using test_util::RandomInts;

ValueId U8(Graph& g, const std::string& name, uint8_t v) {
  return g.AddConstant(name, Tensor::FromVector<uint8_t>({v}, Shape{}));
}

std::vector<float> ChannelScales(int64_t m, float base) {
  std::vector<float> s(m);
  for (int64_t i = 0; i < m; ++i) s[i] = base * (1 + 0.25f * (i % 4));
  return s;
}

// QuantizeLinear(x) -> QLinearConv 3x3 (8 -> 16) -> QLinearConv 1x1 (16 -> 8); both int8
// outputs are graph outputs (the first through the NCHW transpose the pass leaves).
Graph QOperatorChain() {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 8, 10, 10}));
  g.inputs = {x};
  const ValueId xs = F(g, "xs", 0.02f), xz = U8(g, "xz", 3);
  const ValueId xq = Node1(g, "QuantizeLinear", {x, xs, xz}, "xq");
  g.value(xq).type = TensorType::Of(DType::kUInt8, {2, 8, 10, 10});
  const ValueId w1 = g.AddConstant("w1", RandomInts<int8_t>({16, 8, 3, 3}, 1, -127, 127));
  const ValueId w1s = g.AddConstant("w1s", Tensor::FromVector<float>(ChannelScales(16, 0.002f)));
  const ValueId w1z = g.AddConstant("w1z", Tensor::Zeros(DType::kInt8, Shape{16}));
  const ValueId b1 = g.AddConstant("b1", RandomInts<int32_t>({16}, 2, -2000, 2000));
  const ValueId y1s = F(g, "y1s", 0.05f), y1z = U8(g, "y1z", 128);
  const ValueId y1 = Node1(g, "QLinearConv", {xq, xs, xz, w1, w1s, w1z, y1s, y1z, b1}, "conv1",
                           {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  g.value(y1).type = TensorType::Of(DType::kUInt8, {2, 16, 10, 10});
  const ValueId w2 = g.AddConstant("w2", RandomInts<int8_t>({8, 16, 1, 1}, 3, -127, 127));
  const ValueId w2s = g.AddConstant("w2s", Tensor::FromVector<float>({0.003f}));
  const ValueId y2s = F(g, "y2s", 0.04f), y2z = U8(g, "y2z", 120);
  const ValueId y2 =
      Node1(g, "QLinearConv", {y1, y1s, y1z, w2, w2s, ir::kNoValue, y2s, y2z}, "conv2");
  g.value(y2).type = TensorType::Of(DType::kUInt8, {2, 8, 10, 10});
  g.outputs = {y1, y2};
  return g;
}

// Q -> DQ -> Conv(DQ(w) per channel on axis 0, float B) -> Relu -> Q -> DQ.
Graph QdqConv() {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {2, 8, 9, 9}));
  g.inputs = {x};
  const ValueId xs = F(g, "xs", 0.02f), xz = U8(g, "xz", 128);
  const ValueId xq = Node1(g, "QuantizeLinear", {x, xs, xz}, "xq");
  g.value(xq).type = TensorType::Of(DType::kUInt8, {2, 8, 9, 9});
  const ValueId xd = Node1(g, "DequantizeLinear", {xq, xs, xz}, "xd");
  const ValueId wq = g.AddConstant("wq", RandomInts<int8_t>({16, 8, 3, 3}, 5, -127, 127));
  const ValueId ws = g.AddConstant("ws", Tensor::FromVector<float>(ChannelScales(16, 0.004f)));
  const ValueId wz = g.AddConstant("wz", Tensor::Zeros(DType::kInt8, Shape{16}));
  const ValueId wd = Node1(g, "DequantizeLinear", {wq, ws, wz}, "wd", {{"axis", int64_t{0}}});
  const ValueId b = g.AddConstant("b", RandomFloats({16}, 6, -0.5f, 0.5f));
  const ValueId c =
      Node1(g, "Conv", {xd, wd, b}, "conv",
            {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}});
  const ValueId r = Node1(g, "Relu", {c}, "relu");
  const ValueId ys = F(g, "ys", 0.03f), yz = U8(g, "yz", 0);
  const ValueId yq = Node1(g, "QuantizeLinear", {r, ys, yz}, "yq");
  g.value(yq).type = TensorType::Of(DType::kUInt8, {2, 16, 5, 5});
  g.outputs = {yq, Node1(g, "DequantizeLinear", {yq, ys, yz}, "y")};
  return g;
}

absl::StatusOr<std::vector<Tensor>> OptimizeAndRun(const Graph& source, bool fuse, const Tensor& x,
                                                   Graph* optimized) {
  auto g = std::make_shared<Graph>(source);
  PassOptions options;
  // The pass runs under --allow_compression only; no calibration is needed.
  const CompressionOptions compression;
  options.compression = &compression;
  if (!fuse) options.disabled_passes = {"fuse_qdq"};
  OptimizationLog log;
  absl::Status s = Optimize(*g, options, &log);
  if (!s.ok()) return s;
  *optimized = *g;
  auto plan = exec::CompiledPlan::Compile(g, {x.shape()});
  if (!plan.ok()) return plan.status();
  std::vector<Tensor> out;
  s = (*plan)->Run({x}, &out);
  if (!s.ok()) return s;
  return out;
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += !node.removed && node.op == op;
  return n;
}

// Max |a - b| over uint8 tensors, and the fraction of equal elements.
std::pair<int, double> Compare(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dtype(), DType::kUInt8);
  EXPECT_EQ(b.dtype(), DType::kUInt8);
  EXPECT_EQ(a.shape(), b.shape());
  int max_diff = 0;
  int64_t equal = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const int d = std::abs(int{a.data<uint8_t>()[i]} - int{b.data<uint8_t>()[i]});
    max_diff = std::max(max_diff, d);
    equal += d == 0;
  }
  return {max_diff, static_cast<double>(equal) / a.num_elements()};
}

TEST(FuseQdqTest, QLinearConvChainRunsNhwcOnInt8Conv) {
  const Graph source = QOperatorChain();
  const Tensor x = RandomFloats({2, 8, 10, 10}, 9, -2.5f, 2.5f);
  Graph fused, reference;
  auto got = OptimizeAndRun(source, true, x, &fused);
  auto want = OptimizeAndRun(source, false, x, &reference);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(Count(fused, ir::kInt8ConvOp), 2) << fused.ToString();
  EXPECT_EQ(Count(fused, "QLinearConv"), 0) << fused.ToString();
  // One transpose into the chain, one out per graph output: none between the two convs.
  EXPECT_EQ(Count(fused, "Transpose"), 3) << fused.ToString();
  EXPECT_EQ(Count(reference, "QLinearConv"), 2);
  // conv1 against the reference kernel: within one step, nearly all exact.
  auto [d1, exact1] = Compare((*got)[0], (*want)[0]);
  EXPECT_LE(d1, 1);
  EXPECT_GT(exact1, 0.99);
  // conv2 reads conv1's output: a one-step difference there can move conv2 by its weight
  // times the scale ratio, a few steps at most for these scales.
  auto [d2, exact2] = Compare((*got)[1], (*want)[1]);
  EXPECT_LE(d2, 4);
  EXPECT_GT(exact2, 0.95);
}

TEST(FuseQdqTest, QdqConvReluIsOneInt8ConvWithinOneStep) {
  const Graph source = QdqConv();
  const Tensor x = RandomFloats({2, 8, 9, 9}, 10, -2.5f, 2.5f);
  Graph fused, reference;
  auto got = OptimizeAndRun(source, true, x, &fused);
  auto want = OptimizeAndRun(source, false, x, &reference);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(Count(fused, ir::kInt8ConvOp), 1) << fused.ToString();
  EXPECT_EQ(Count(fused, "Conv") + Count(fused, "FusedConv") + Count(fused, "Relu"), 0)
      << fused.ToString();
  auto [d, exact] = Compare((*got)[0], (*want)[0]);
  EXPECT_LE(d, 1);
  EXPECT_GT(exact, 0.98);
  // The dequantized output follows: within one output step (ys = 0.03).
  for (int64_t i = 0; i < (*want)[1].num_elements(); ++i) {
    ASSERT_LE(std::fabs((*got)[1].data<float>()[i] - (*want)[1].data<float>()[i]), 0.0301f);
  }
}

TEST(FuseQdqTest, WithoutCompressionTheReferenceKernelsRun) {
  auto g = std::make_shared<Graph>(QOperatorChain());
  PassOptions options;  // compression null: --allow_compression off
  OptimizationLog log;
  ASSERT_TRUE(Optimize(*g, options, &log).ok());
  EXPECT_EQ(Count(*g, "QLinearConv"), 2);
  EXPECT_EQ(Count(*g, ir::kInt8ConvOp), 0);
}

TEST(FuseQdqTest, NonZeroWeightZeroPointIsLeftToTheReference) {
  Graph source = QOperatorChain();
  for (ValueId v = 0; v < source.num_values(); ++v) {
    if (source.value(v).name == "w1z") {
      source.value(v).constant = RandomInts<int8_t>({16}, 4, 1, 3);
    }
  }
  const Tensor x = RandomFloats({2, 8, 10, 10}, 9, -2.5f, 2.5f);
  Graph fused;
  auto got = OptimizeAndRun(source, true, x, &fused);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Count(fused, "QLinearConv"), 1);
  EXPECT_EQ(Count(fused, ir::kInt8ConvOp), 1);
}

}  // namespace
}  // namespace kiln::opt
