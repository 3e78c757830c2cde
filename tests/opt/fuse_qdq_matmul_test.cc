// fuse_qdq_matmul (src/opt/fuse_qdq_matmul.cc): the MatMuls ONNX Runtime's quantizers write
// (QLinearMatMul, DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul, QDQ MatMul and Gemm)
// on kiln::Int8MatMul, compared with the same graph optimized without compression (the
// reference kernels of quantize_ops.cc). MatMulInteger and QLinearMatMul must be bit-identical;
// the QDQ form within one step of its float reference. Built twice: at this CPU's ISA and
// capped to AVX2, where 8-bit weights take the kernel's split (two 7-bit halves) path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "../testing/quant_test_util.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/compressed_matmul.h"
#include "kiln/kernels/compressed_matmul.h"
#include "kiln/opt/pass.h"
#include "kiln/runtime/model.h"

namespace kiln::opt {
namespace {

#ifdef KILN_TEST_MAX_ISA
// Before any kernel exists: the cap is fixed at the first use.
const bool kIsaCapped = [] {
  absl::Status status = SetMaxCpuIsa(KILN_TEST_MAX_ISA);
  if (!status.ok()) std::abort();
  return true;
}();
#endif

using ir::Graph;
using ir::TensorType;
using ir::ValueId;

using test_util::F;
using test_util::Node1;
using test_util::RandomFloats;
using test_util::RandomInts;

template <typename T>
ValueId Z(Graph& g, const std::string& name, T v) {
  return g.AddConstant(name, Tensor::FromVector<T>({v}, Shape{}));
}

Tensor ColumnScales(int64_t n, float base) {
  std::vector<float> s(n);
  for (int64_t i = 0; i < n; ++i) s[i] = base * (1 + 0.3f * (i % 5));
  return Tensor::FromVector<float>(s);
}

struct Result {
  std::vector<Tensor> outputs;
  Graph graph;
  OptimizationLog log;
};

// fuse_qdq_matmul's log lines that contain `what`.
int Notes(const OptimizationLog& log, const std::string& what) {
  int n = 0;
  for (const OptimizationLogEntry& e : log.entries) {
    if (e.pass != "fuse_qdq_matmul") continue;
    for (const std::string& c : e.changes) n += c.find(what) != std::string::npos;
  }
  return n;
}

// Optimized with compression (the pass runs) or without (the reference kernels), then run.
Result OptimizeAndRun(const Graph& source, bool compress, const std::vector<Tensor>& inputs) {
  Result r;
  auto g = std::make_shared<Graph>(source);
  PassOptions options;
  CompressionOptions compression;
  compression.vnni = kernels::CpuHasInt8Vnni();
  if (compress) options.compression = &compression;
  OptimizationLog log;
  absl::Status s = Optimize(*g, options, &log);
  EXPECT_TRUE(s.ok()) << s;
  r.graph = *g;
  r.log = log;
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  auto plan = exec::CompiledPlan::Compile(g, shapes);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return r;
  s = (*plan)->Run(inputs, &r.outputs);
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += !node.removed && node.op == op;
  return n;
}

void ExpectBitIdentical(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.byte_size(), want.byte_size());
  const uint8_t* a = static_cast<const uint8_t*>(got.raw_data());
  const uint8_t* b = static_cast<const uint8_t*>(want.raw_data());
  int64_t differ = 0;
  for (size_t i = 0; i < got.byte_size(); ++i) differ += a[i] != b[i];
  EXPECT_EQ(differ, 0) << "bytes differ out of " << got.byte_size();
}

// QuantizeLinear(x) -> QLinearMatMul with B's scales and zero points per column (uint8 B,
// zero points near 128: ONNX Runtime's asymmetric QUInt8 weights, 8 bits wide).
Graph QLinearMatMulGraph(int64_t k, int64_t n, DType b_type) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, k}));
  g.inputs = {x};
  const ValueId xs = F(g, "xs", 0.02f), xz = Z<uint8_t>(g, "xz", 7);
  const ValueId xq = Node1(g, "QuantizeLinear", {x, xs, xz}, "xq");
  ValueId b, bz;
  if (b_type == DType::kUInt8) {
    b = g.AddConstant("b", RandomInts<uint8_t>({k, n}, 1, 0, 255));
    bz = g.AddConstant("bz", RandomInts<uint8_t>({n}, 2, 120, 136));
  } else {
    b = g.AddConstant("b", RandomInts<int8_t>({k, n}, 1, -128, 127));
    bz = g.AddConstant("bz", RandomInts<int8_t>({n}, 2, -3, 3));
  }
  const ValueId bs = g.AddConstant("bs", ColumnScales(n, 0.003f));
  const ValueId ys = F(g, "ys", 0.05f), yz = Z<uint8_t>(g, "yz", 128);
  const ValueId y = Node1(g, "QLinearMatMul", {xq, xs, xz, b, bs, bz, ys, yz}, "qmm");
  g.outputs = {y};
  return g;
}

TEST(FuseQdqMatMulTest, QLinearMatMulIsBitIdenticalToTheReference) {
  for (DType b_type : {DType::kUInt8, DType::kInt8}) {
    const Graph source = QLinearMatMulGraph(96, 40, b_type);
    for (int64_t batch : {1, 32}) {
      SCOPED_TRACE(testing::Message() << DTypeName(b_type) << " batch " << batch);
      const Tensor x = RandomFloats({batch, 96}, 3 + batch, -2.5f, 2.5f);
      const Result got = OptimizeAndRun(source, true, {x});
      const Result want = OptimizeAndRun(source, false, {x});
      EXPECT_EQ(Count(got.graph, ir::kInt8MatMulOp), 1) << got.graph.ToString();
      EXPECT_EQ(Count(got.graph, "QLinearMatMul"), 0);
      EXPECT_EQ(Count(want.graph, "QLinearMatMul"), 1);
      ASSERT_EQ(got.outputs.size(), 1u);
      ASSERT_EQ(want.outputs.size(), 1u);
      ExpectBitIdentical(got.outputs[0], want.outputs[0]);
    }
  }
}

// What quantize_dynamic writes for a MatMul: DynamicQuantizeLinear(x) -> MatMulInteger(x_q,
// B, x_zp, B_zp) -> Cast(float) -> Mul(Mul(x_scale, B_scale)). A is 3-D ([batch, seq, K]).
Graph DynamicMatMulGraph(int64_t k, int64_t n, bool per_column) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, 4, k}));
  g.inputs = {x};
  const ir::NodeId dql = g.AddNode("DynamicQuantizeLinear", {x}, 3, {}, "dql");
  const ValueId xq = g.node(dql).outputs[0], xs = g.node(dql).outputs[1],
                xz = g.node(dql).outputs[2];
  const ValueId b = g.AddConstant("b", RandomInts<int8_t>({k, n}, 11, -127, 127));
  const ValueId bz =
      per_column ? g.AddConstant("bz", RandomInts<int8_t>({n}, 12, -2, 2)) : Z<int8_t>(g, "bz", 0);
  const ValueId bs = per_column ? g.AddConstant("bs", ColumnScales(n, 0.01f)) : F(g, "bs", 0.01f);
  const ValueId acc = Node1(g, "MatMulInteger", {xq, b, xz, bz}, "mmi");
  const ValueId accf = Node1(g, "Cast", {acc}, "cast", {{"to", int64_t{1}}});  // 1: ONNX FLOAT
  const ValueId scale = Node1(g, "Mul", {xs, bs}, "scale");
  g.outputs = {Node1(g, "Mul", {accf, scale}, "y")};
  return g;
}

TEST(FuseQdqMatMulTest, DynamicQuantizeLinearMatMulIntegerIsBitIdentical) {
  for (bool per_column : {false, true}) {
    const Graph source = DynamicMatMulGraph(64, 48, per_column);
    for (int64_t batch : {1, 32}) {
      SCOPED_TRACE(testing::Message() << "per_column " << per_column << " batch " << batch);
      const Tensor x = RandomFloats({batch, 4, 64}, 21 + batch, -1.5f, 3.0f);
      const Result got = OptimizeAndRun(source, true, {x});
      const Result want = OptimizeAndRun(source, false, {x});
      EXPECT_EQ(Count(got.graph, ir::kInt8MatMulOp), 1) << got.graph.ToString();
      EXPECT_EQ(Count(got.graph, "MatMulInteger"), 0);
      EXPECT_EQ(Count(want.graph, "MatMulInteger"), 1);
      ASSERT_EQ(got.outputs.size(), 1u);
      ASSERT_EQ(want.outputs.size(), 1u);
      ExpectBitIdentical(got.outputs[0], want.outputs[0]);
    }
  }
}

// MatMulInteger on int8 A with constant zero points, and extreme values: every product at the
// int16 pair-sum limit (A = 255 as uint8 after the kernel's sign flip, B = -128 and 127), which
// saturates oneDNN's u8 x s8 pairs without VNNI unless the weights are split.
TEST(FuseQdqMatMulTest, MatMulIntegerExtremeValuesAreExact) {
  for (bool int8_a : {false, true}) {
    SCOPED_TRACE(int8_a ? "int8 A" : "uint8 A");
    Graph g;
    const DType a_type = int8_a ? DType::kInt8 : DType::kUInt8;
    const ValueId a = g.AddValue("a", TensorType::Of(a_type, {-1, 64}));
    g.inputs = {a};
    Tensor b(DType::kInt8, Shape{64, 24});
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      b.data<int8_t>()[i] = (i / 24) % 3 == 0 ? -128 : 127;
    }
    const ValueId az = int8_a ? Z<int8_t>(g, "az", -5) : Z<uint8_t>(g, "az", 3);
    const ValueId bv = g.AddConstant("b", b);
    const ValueId bz = Z<int8_t>(g, "bz", 1);
    g.outputs = {Node1(g, "MatMulInteger", {a, bv, az, bz}, "mmi")};
    for (int64_t batch : {1, 32}) {
      Tensor x = int8_a ? RandomInts<int8_t>({batch, 64}, 31, -128, 127)
                        : RandomInts<uint8_t>({batch, 64}, 31, 0, 255);
      // First row at the extremes: 127 as int8 is 255 after the flip.
      for (int64_t i = 0; i < 64; ++i) {
        if (int8_a) {
          x.data<int8_t>()[i] = 127;
        } else {
          x.data<uint8_t>()[i] = 255;
        }
      }
      const Result got = OptimizeAndRun(g, true, {x});
      const Result want = OptimizeAndRun(g, false, {x});
      EXPECT_EQ(Count(got.graph, ir::kInt8MatMulOp), 1);
      ASSERT_EQ(got.outputs.size(), 1u);
      ASSERT_EQ(want.outputs.size(), 1u);
      ExpectBitIdentical(got.outputs[0], want.outputs[0]);
    }
  }
}

// quantize_static's QDQ form: Q -> DQ -> MatMul(DQ(B) per column, axis 1) -> Relu -> Q -> DQ,
// and a Gemm (transB, weights [N, K] per channel on axis 0) with ONNX Runtime's int32 bias.
// `w_max` bounds the weights: 127 (8 bits) or 63 (7 bits, ONNX Runtime's reduce_range).
Graph QdqGraph(int64_t k, int64_t n, int w_max = 127) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, k}));
  g.inputs = {x};
  const float xs_v = 0.02f;
  const ValueId xs = F(g, "xs", xs_v), xz = Z<uint8_t>(g, "xz", 120);
  const ValueId xq = Node1(g, "QuantizeLinear", {x, xs, xz}, "xq");
  const ValueId xd = Node1(g, "DequantizeLinear", {xq, xs, xz}, "xd");
  const ValueId wq = g.AddConstant("wq", RandomInts<int8_t>({k, n}, 41, -w_max, w_max));
  const ValueId ws = g.AddConstant("ws", ColumnScales(n, 0.004f));
  const ValueId wz = g.AddConstant("wz", Tensor::Zeros(DType::kInt8, Shape{n}));
  const ValueId wd = Node1(g, "DequantizeLinear", {wq, ws, wz}, "wd", {{"axis", int64_t{1}}});
  const ValueId mm = Node1(g, "MatMul", {xd, wd}, "matmul");
  const ValueId r = Node1(g, "Relu", {mm}, "relu");
  const ValueId hs = F(g, "hs", 0.03f), hz = Z<uint8_t>(g, "hz", 0);
  const ValueId hq = Node1(g, "QuantizeLinear", {r, hs, hz}, "hq");
  const ValueId hd = Node1(g, "DequantizeLinear", {hq, hs, hz}, "hd");
  // Gemm: [n] -> [16], weights [16, n], per-channel axis 0, bias int32 with scale hs * w2s.
  const Tensor w2s = ColumnScales(16, 0.005f);
  const ValueId w2q = g.AddConstant("w2q", RandomInts<int8_t>({16, n}, 42, -w_max, w_max));
  const ValueId w2sv = g.AddConstant("w2s", w2s);
  const ValueId w2d = Node1(g, "DequantizeLinear", {w2q, w2sv}, "w2d", {{"axis", int64_t{0}}});
  std::vector<float> bias_scale(16);
  for (int j = 0; j < 16; ++j) bias_scale[j] = 0.03f * w2s.data<float>()[j];
  const ValueId bq = g.AddConstant("bq", RandomInts<int32_t>({16}, 43, -3000, 3000));
  const ValueId bs = g.AddConstant("bs", Tensor::FromVector<float>(bias_scale));
  const ValueId bd = Node1(g, "DequantizeLinear", {bq, bs}, "bd", {{"axis", int64_t{0}}});
  const ValueId gm = Node1(g, "Gemm", {hd, w2d, bd}, "gemm", {{"transB", int64_t{1}}});
  const ValueId ys = F(g, "ys", 0.04f), yz = Z<int8_t>(g, "yz", -10);
  const ValueId yq = Node1(g, "QuantizeLinear", {gm, ys, yz}, "yq");
  g.outputs = {hq, yq, Node1(g, "DequantizeLinear", {yq, ys, yz}, "y")};
  return g;
}

// Max |a - b| over 8-bit tensors, and the fraction of equal elements.
std::pair<int, double> Compare(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape());
  int max_diff = 0;
  int64_t equal = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const int va = a.dtype() == DType::kInt8 ? a.data<int8_t>()[i] : a.data<uint8_t>()[i];
    const int vb = b.dtype() == DType::kInt8 ? b.data<int8_t>()[i] : b.data<uint8_t>()[i];
    max_diff = std::max(max_diff, std::abs(va - vb));
    equal += va == vb;
  }
  return {max_diff, static_cast<double>(equal) / a.num_elements()};
}

TEST(FuseQdqMatMulTest, QdqMatMulReluAndGemmWithinOneStep) {
  for (int w_max : {127, 63}) {
    SCOPED_TRACE(testing::Message() << "weights in +-" << w_max);
    const Graph source = QdqGraph(80, 56, w_max);
    // Without VNNI only 7-bit weights are rewritten: 8-bit ones would take the slower split path.
    const bool rewritten = kernels::CpuHasInt8Vnni() || w_max <= 63;
    for (int64_t batch : {1, 32}) {
      SCOPED_TRACE(testing::Message() << "batch " << batch);
      const Tensor x = RandomFloats({batch, 80}, 50 + batch, -2.0f, 2.0f);
      const Result got = OptimizeAndRun(source, true, {x});
      const Result want = OptimizeAndRun(source, false, {x});
      EXPECT_EQ(Count(got.graph, ir::kInt8MatMulOp), rewritten ? 2 : 0) << got.graph.ToString();
      if (rewritten) {
        EXPECT_EQ(Count(got.graph, "MatMul") + Count(got.graph, "Gemm") + Count(got.graph, "Relu") +
                      Count(got.graph, "FusedMatMul") + Count(got.graph, "FusedGemm"),
                  0)
            << got.graph.ToString();
      }
      ASSERT_EQ(got.outputs.size(), 3u);
      ASSERT_EQ(want.outputs.size(), 3u);
      auto [d1, exact1] = Compare(got.outputs[0], want.outputs[0]);
      EXPECT_LE(d1, 1);
      EXPECT_GT(exact1, 0.97);
      // The Gemm reads the first layer's output: one step there moves it by a few at most.
      auto [d2, exact2] = Compare(got.outputs[1], want.outputs[1]);
      EXPECT_LE(d2, 3);
      EXPECT_GT(exact2, 0.9);
    }
  }
}

// onnxruntime's QDQ form for transformers: DQ(x) [batch, seq, K], DQ(W) -> MatMul ->
// Add(float bias) -> [Relu] -> Q. The bias is a float constant (or DequantizeLinear of an int8
// constant, `dq_bias`), on either side of the Add. `y_scale` sets out_scale = xs * ws / ys.
Graph QdqFloatBiasGraph(int64_t k, int64_t n, int w_max, bool dq_bias, bool bias_first, bool relu,
                        float y_scale) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, 4, k}));
  g.inputs = {x};
  const ValueId xs = F(g, "xs", 0.02f), xz = Z<uint8_t>(g, "xz", 128);
  const ValueId xq = Node1(g, "QuantizeLinear", {x, xs, xz}, "xq");
  const ValueId xd = Node1(g, "DequantizeLinear", {xq, xs, xz}, "xd");
  const ValueId wq = g.AddConstant("wq", RandomInts<int8_t>({k, n}, 71, -w_max, w_max));
  const ValueId ws = g.AddConstant("ws", ColumnScales(n, 0.004f));
  const ValueId wd = Node1(g, "DequantizeLinear", {wq, ws}, "wd", {{"axis", int64_t{1}}});
  const ValueId mm = Node1(g, "MatMul", {xd, wd}, "matmul");
  ValueId bias;
  if (dq_bias) {
    const ValueId bq = g.AddConstant("bq", RandomInts<int8_t>({n}, 72, -127, 127));
    bias = Node1(g, "DequantizeLinear", {bq, F(g, "bs", 0.013f), Z<int8_t>(g, "bz", 3)}, "bias");
  } else {
    bias = g.AddConstant("bias", RandomFloats({n}, 73, -1.5f, 1.5f));
  }
  ValueId y =
      Node1(g, "Add", bias_first ? std::vector<ValueId>{bias, mm} : std::vector<ValueId>{mm, bias},
            "add");
  if (relu) y = Node1(g, "Relu", {y}, "relu");
  const ValueId ys = F(g, "ys", y_scale), yz = Z<uint8_t>(g, "yz", relu ? 0 : 128);
  g.outputs = {Node1(g, "QuantizeLinear", {y, ys, yz}, "yq")};
  return g;
}

TEST(FuseQdqMatMulTest, QdqMatMulFloatBiasAddWithinOneStep) {
  for (int w_max : {127, 63}) {
    for (bool dq_bias : {false, true}) {
      for (bool relu : {false, true}) {
        SCOPED_TRACE(testing::Message() << "weights +-" << w_max << (dq_bias ? " DQ bias" : "")
                                        << (relu ? " relu" : ""));
        const Graph source = QdqFloatBiasGraph(96, 48, w_max, dq_bias, dq_bias, relu, 0.05f);
        const bool rewritten = kernels::CpuHasInt8Vnni() || w_max <= 63;
        for (int64_t batch : {1, 8}) {
          const Tensor x = RandomFloats({batch, 4, 96}, 80 + batch, -2.5f, 2.5f);
          const Result got = OptimizeAndRun(source, true, {x});
          const Result want = OptimizeAndRun(source, false, {x});
          EXPECT_EQ(Count(got.graph, ir::kInt8MatMulOp), rewritten ? 1 : 0) << got.graph.ToString();
          EXPECT_EQ(Notes(got.log, "+Add(float bias)"), rewritten ? 1 : 0) << got.log.ToString();
          if (rewritten) {
            EXPECT_EQ(Count(got.graph, "Add") + Count(got.graph, "MatMul") +
                          Count(got.graph, "FusedMatMul") + Count(got.graph, "Relu"),
                      0)
                << got.graph.ToString();
          }
          ASSERT_EQ(got.outputs.size(), 1u);
          ASSERT_EQ(want.outputs.size(), 1u);
          auto [diff, exact] = Compare(got.outputs[0], want.outputs[0]);
          EXPECT_LE(diff, 1);
          EXPECT_GT(exact, 0.95);
        }
      }
    }
  }
}

// An output scale above 1 (x_scale * w_scale > y_scale): half an accumulator unit of bias
// rounding could move the result by more than one step, so the Add stays float and the
// MatMul + Add + Q is left to the reference path.
TEST(FuseQdqMatMulTest, FloatBiasIsNotRoundedWhereOneStepIsNotGuaranteed) {
  const Graph source = QdqFloatBiasGraph(64, 16, 63, false, false, false, 0.00005f);
  const Tensor x = RandomFloats({2, 4, 64}, 90, -1.0f, 1.0f);
  const Result got = OptimizeAndRun(source, true, {x});
  EXPECT_EQ(Count(got.graph, ir::kInt8MatMulOp), 0) << got.graph.ToString();
  EXPECT_EQ(Notes(got.log, "Int8MatMul"), 0);
  const Result want = OptimizeAndRun(source, false, {x});
  ExpectBitIdentical(got.outputs[0], want.outputs[0]);
}

// The other transformer pattern, DQ -> MatMul -> Q -> DQ -> Add(DQ(bias)) -> Q (Add quantized
// too): the MatMul -> Q becomes Int8MatMul; the Add stays between its own DQ and Q, since
// folding it into the MatMul would skip the rounding and saturation of the Q between them
// (more than one step where that Q clips).
TEST(FuseQdqMatMulTest, MatMulQdqAddRewritesTheMatMulAndKeepsTheAdd) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, 4, 64}));
  g.inputs = {x};
  const ValueId xs = F(g, "xs", 0.02f), xz = Z<uint8_t>(g, "xz", 128);
  const ValueId xd =
      Node1(g, "DequantizeLinear", {Node1(g, "QuantizeLinear", {x, xs, xz}, "xq"), xs, xz}, "xd");
  const ValueId wq = g.AddConstant("wq", RandomInts<int8_t>({64, 32}, 91, -63, 63));
  const ValueId wd = Node1(g, "DequantizeLinear", {wq, F(g, "ws", 0.004f)}, "wd");
  const ValueId mm = Node1(g, "MatMul", {xd, wd}, "matmul");
  const ValueId ms = F(g, "ms", 0.03f), mz = Z<uint8_t>(g, "mz", 128);
  const ValueId mq = Node1(g, "QuantizeLinear", {mm, ms, mz}, "mq");
  const ValueId md = Node1(g, "DequantizeLinear", {mq, ms, mz}, "md");
  const ValueId bq = g.AddConstant("bq", RandomInts<uint8_t>({32}, 92, 0, 255));
  const ValueId bd =
      Node1(g, "DequantizeLinear", {bq, F(g, "bs", 0.01f), Z<uint8_t>(g, "bz", 100)}, "bd");
  const ValueId add = Node1(g, "Add", {md, bd}, "add");
  const ValueId ys = F(g, "ys", 0.04f), yz = Z<uint8_t>(g, "yz", 128);
  g.outputs = {mq, Node1(g, "QuantizeLinear", {add, ys, yz}, "yq")};
  for (int64_t batch : {1, 8}) {
    const Tensor in = RandomFloats({batch, 4, 64}, 93 + batch, -2.0f, 2.0f);
    const Result got = OptimizeAndRun(g, true, {in});
    const Result want = OptimizeAndRun(g, false, {in});
    EXPECT_EQ(Count(got.graph, ir::kInt8MatMulOp), 1) << got.graph.ToString();
    EXPECT_EQ(Notes(got.log, "QDQ MatMul 'matmul' -> kiln Int8MatMul"), 1) << got.log.ToString();
    EXPECT_EQ(Count(got.graph, "MatMul") + Count(got.graph, "FusedMatMul"), 0);
    ASSERT_EQ(got.outputs.size(), 2u);
    ASSERT_EQ(want.outputs.size(), 2u);
    auto [d1, e1] = Compare(got.outputs[0], want.outputs[0]);
    EXPECT_LE(d1, 1);
    EXPECT_GT(e1, 0.95);
    // One step of the MatMul's Q moves the Add's result by at most ms / ys < 1 step, plus its
    // own rounding.
    auto [d2, e2] = Compare(got.outputs[1], want.outputs[1]);
    EXPECT_LE(d2, 1);
    EXPECT_GT(e2, 0.95);
  }
}

TEST(FuseQdqMatMulTest, WithoutCompressionNothingIsRewritten) {
  const Tensor x = RandomFloats({2, 96}, 60, -1.0f, 1.0f);
  const Result r = OptimizeAndRun(QLinearMatMulGraph(96, 8, DType::kInt8), false, {x});
  EXPECT_EQ(Count(r.graph, ir::kInt8MatMulOp), 0);
  EXPECT_EQ(Count(r.graph, "QLinearMatMul"), 1);
}

// At load: the runtime optimizes the fp32 graph first, whose constant folding turns
// DequantizeLinear(w) into float weights; a QDQ model must be compressed from the imported
// graph, or no QDQ layer is rewritten (as happened before model.cc kept that graph).
TEST(FuseQdqMatMulTest, QdqModelIsRewrittenAtLoad) {
  auto imported = [] {
    import::ImportedModel m;
    m.platform = "onnx";
    m.path = "qdq_mlp";
    import::SignatureGraph sig;
    sig.key = "serving_default";
    sig.method_name = "tensorflow/serving/predict";
    sig.graph = QdqGraph(80, 56, 63);  // 7-bit weights: rewritten on every ISA
    const std::vector<std::pair<std::string, DType>> outs = {
        {"hq", DType::kUInt8}, {"yq", DType::kInt8}, {"y", DType::kFloat32}};
    sig.input_keys = {"x"};
    sig.inputs["x"].dtype = DType::kFloat32;
    sig.inputs["x"].rank_known = true;
    sig.inputs["x"].shape = {-1, 80};
    for (const auto& [key, dtype] : outs) {
      sig.output_keys.push_back(key);
      sig.outputs[key].dtype = dtype;
    }
    m.signatures.push_back(std::move(sig));
    return m;
  };
  runtime::ModelOptions options;
  options.allow_compression = true;
  auto compressed = runtime::Model::FromImported(imported(), options);
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  const std::string text = (*compressed)->Inspect();
  EXPECT_NE(text.find("kiln::Int8MatMul: 2"), std::string::npos) << text;
  EXPECT_NE(text.find("2 layers compressed"), std::string::npos) << text;
  auto plain = runtime::Model::FromImported(imported(), runtime::ModelOptions());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->Inspect().find("Int8MatMul"), std::string::npos);
}

#ifdef KILN_TEST_MAX_ISA
// Under the AVX2 cap the 8-bit weights above ran on the split path: the cap must hide VNNI.
TEST(FuseQdqMatMulTest, Avx2CapHidesVnni) { EXPECT_FALSE(kernels::CpuHasInt8Vnni()); }
#endif

}  // namespace
}  // namespace kiln::opt
