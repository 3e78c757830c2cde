// compress_matmul (src/opt/compress_matmul.cc) and its kernels (nn_int8_matmul.cc): Linear
// layers optimized with CompressionOptions, run on the real kernels, against the fp32 graph.
// Each int8 result must lie within the error bound that the quantization steps imply for that
// element (computed here from the inputs: a wrong scale, zero point or weight layout misses it
// by orders of magnitude), each bf16 result within bf16's rounding of the weights (and of A
// where oneDNN computes in bf16). Built twice: as is (AVX-512 with VNNI and bf16 on the dev
// machine) and capped to AVX2 (7-bit weights, the bf16 fallbacks).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kiln/core/cpu_isa.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/compressed_matmul.h"
#include "kiln/kernels/compressed_matmul.h"
#include "kiln/opt/pass.h"

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
using ir::ValueId;

Tensor Random(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

std::vector<Tensor> RunGraph(const Graph& graph, const std::vector<Tensor>& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  exec::CompileOptions options;
  options.intra_op_threads = 2;
  options.intra_op_openmp = true;
  auto plan = exec::CompiledPlan::Compile(std::make_shared<Graph>(graph), shapes, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  std::vector<Tensor> outputs;
  absl::Status status = (*plan)->Run(inputs, &outputs);
  EXPECT_TRUE(status.ok()) << status;
  return outputs;
}

// The graph optimized as the runtime does, with `compression` (null: fp32).
Graph Optimized(Graph graph, const CompressionOptions* compression, OptimizationLog* log) {
  PassOptions options;
  const exec::KernelEvaluator evaluator;
  options.evaluator = &evaluator;
  options.compression = compression;
  absl::Status status = Optimize(graph, options, log);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(ir::InferShapes(graph).ok());
  return graph;
}

int CountOp(const Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += !node.removed && node.op == op;
  return n;
}

// x [rows, k] @ w [k, n] + b, then Relu: fused into FusedMatMul before compression.
struct Mlp {
  Graph graph;
  Tensor w, b;
};
Mlp LinearRelu(int64_t k, int64_t n, uint32_t seed, bool relu = true) {
  Mlp m;
  Graph& g = m.graph;
  const ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {-1, k}));
  g.inputs = {x};
  m.w = Random(Shape{k, n}, seed, -0.5f, 0.5f);
  m.b = Random(Shape{n}, seed + 1);
  const ValueId w = g.AddConstant("w", m.w);
  const ValueId b = g.AddConstant("b", m.b);
  ValueId y = g.node(g.AddNode("MatMul", {x, w}, 1, {}, "fc")).outputs[0];
  y = g.node(g.AddNode("Add", {y, b}, 1, {}, "bias")).outputs[0];
  if (relu) y = g.node(g.AddNode("Relu", {y}, 1, {}, "relu")).outputs[0];
  g.outputs = {y};
  return m;
}

// The worst-case error of one output element of the dynamic int8 product: A's row quantized
// with step sa (error <= sa/2 per element), W's column with step sw (<= sw/2), so
// |a.w - qa.qw| <= sum_k |a_k| sw/2 + |w_k| sa/2 + sa sw / 4.
double Int8Bound(const float* a_row, const Tensor& w, int64_t col, int bits) {
  const int64_t k = w.dim(0), n = w.dim(1);
  float lo = 0, hi = 0, wmax = 0;
  for (int64_t i = 0; i < k; ++i) {
    lo = std::min(lo, a_row[i]);
    hi = std::max(hi, a_row[i]);
    wmax = std::max(wmax, std::fabs(w.data<float>()[i * n + col]));
  }
  const double sa = (hi - lo) / 255.0, sw = wmax / ((1 << (bits - 1)) - 1);
  double bound = 0;
  for (int64_t i = 0; i < k; ++i) {
    bound += std::fabs(a_row[i]) * sw / 2 + std::fabs(w.data<float>()[i * n + col]) * sa / 2 +
             sa * sw / 4;
  }
  return bound * 1.01 + 1e-5;  // float rounding of the fp32 reference and the epilogue
}

// param: the options' vnni (8-bit weights); only where the CPU has VNNI, since without it
// oneDNN's u8 x s8 products saturate at 8 bits (EightBitWeightsSaturateWithoutVnni).
class CompressMatMulTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !kernels::CpuHasInt8Vnni()) GTEST_SKIP() << "no VNNI under this ISA";
  }
};

TEST_P(CompressMatMulTest, Int8LinearReluIsWithinTheQuantizationBound) {
  // K = 107: the vector loops' tails (K mod 16, K mod 8) are exercised too.
  const int64_t k = 107, n = 40, rows = 13;
  Mlp m = LinearRelu(k, n, 7);
  CompressionOptions options;
  options.vnni = GetParam();
  OptimizationLog log;
  const Graph fp32 = Optimized(m.graph, nullptr, &log);
  const Graph int8 = Optimized(m.graph, &options, &log);
  EXPECT_EQ(CountOp(int8, ir::kDynamicQuantMatMulOp), 1) << int8.ToString();
  EXPECT_NE(log.ToString().find(options.vnni ? "8-bit weights" : "7-bit weights"),
            std::string::npos)
      << log.ToString();
  Tensor x = Random(Shape{rows, k}, 3, -2.0f, 3.0f);
  const std::vector<Tensor> ref = RunGraph(fp32, {x});
  const std::vector<Tensor> got = RunGraph(int8, {x});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].shape(), (Shape{rows, n}));
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const double bound = Int8Bound(x.data<float>() + r * k, m.w, c, options.vnni ? 8 : 7);
      const double diff =
          std::fabs(ref[0].data<float>()[r * n + c] - got[0].data<float>()[r * n + c]);
      // Relu is 1-Lipschitz: the bound holds after it too.
      ASSERT_LE(diff, bound) << "row " << r << " col " << c;
      worst = std::max(worst, diff);
    }
  }
  EXPECT_GT(worst, 0.0);  // it did quantize
}

TEST_P(CompressMatMulTest, FewRowsGiveWhatTheSameRowsGiveInALargerBatch) {
  // Up to 4 rows without VNNI run Kiln's own int8 product (gemv_int8_avx2.h), more rows
  // oneDNN's: both sum in int32 exactly, and each row is quantized on its own, so a row's
  // output must be the same bits either way (K and N leave tails of both loops).
  const int64_t k = 1001, n = 45;
  Mlp m = LinearRelu(k, n, 11, /*relu=*/false);
  CompressionOptions options;
  options.vnni = GetParam();
  OptimizationLog log;
  const Graph int8 = Optimized(m.graph, &options, &log);
  ASSERT_EQ(CountOp(int8, ir::kDynamicQuantMatMulOp), 1) << int8.ToString();
  const Tensor batch = Random(Shape{9, k}, 5, -2.0f, 3.0f);
  const std::vector<Tensor> all = RunGraph(int8, {batch});
  ASSERT_EQ(all.size(), 1u);
  for (int64_t rows = 1; rows <= 4; ++rows) {
    const std::vector<Tensor> few = RunGraph(int8, {batch.Slice(0, rows)});
    ASSERT_EQ(few.size(), 1u);
    ASSERT_EQ(std::memcmp(few[0].raw_data(), all[0].raw_data(), few[0].byte_size()), 0)
        << rows << " rows";
  }
}

TEST_P(CompressMatMulTest, GemmTransBAlphaBetaAndRank3ResidualMatMul) {
  const int64_t k = 64, n = 24;
  CompressionOptions options;
  options.vnni = GetParam();
  // Gemm(x, wt, c, transB=1, alpha=0.5, beta=2).
  {
    Graph g;
    const ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {-1, k}));
    g.inputs = {x};
    Tensor wt = Random(Shape{n, k}, 11);
    const ValueId w = g.AddConstant("wt", wt);
    const ValueId c = g.AddConstant("c", Random(Shape{n}, 12));
    g.outputs = {
        g.node(g.AddNode("Gemm", {x, w, c}, 1,
                         {{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}}, "gemm"))
            .outputs[0]};
    OptimizationLog log;
    const Graph int8 = Optimized(g, &options, &log);
    EXPECT_EQ(CountOp(int8, ir::kDynamicQuantMatMulOp), 1) << int8.ToString();
    Tensor xin = Random(Shape{5, k}, 13);
    const auto ref = RunGraph(Optimized(g, nullptr, &log), {xin});
    const auto got = RunGraph(int8, {xin});
    // W as [K, N] scaled by alpha for the bound.
    Tensor w_kn(DType::kFloat32, Shape{k, n});
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < n; ++j)
        w_kn.data<float>()[i * n + j] = 0.5f * wt.data<float>()[j * k + i];
    }
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_LE(std::fabs(ref[0].data<float>()[r * n + j] - got[0].data<float>()[r * n + j]),
                  Int8Bound(xin.data<float>() + r * k, w_kn, j, options.vnni ? 8 : 7))
            << r << "," << j;
      }
    }
  }
  // x [2, 7, K] @ w + x2 (a residual the fusion pass folds into FusedMatMul).
  {
    Graph g;
    const ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {2, 7, k}));
    const ValueId skip = g.AddValue("skip", ir::TensorType::Of(DType::kFloat32, {2, 7, n}));
    g.inputs = {x, skip};
    Tensor wt = Random(Shape{k, n}, 21);
    const ValueId w = g.AddConstant("w", wt);
    ValueId y = g.node(g.AddNode("MatMul", {x, w}, 1, {}, "mm")).outputs[0];
    y = g.node(g.AddNode("Add", {y, skip}, 1, {}, "res")).outputs[0];
    g.outputs = {y};
    OptimizationLog log;
    const Graph int8 = Optimized(g, &options, &log);
    EXPECT_EQ(CountOp(int8, ir::kDynamicQuantMatMulOp), 1) << int8.ToString();
    Tensor xin = Random(Shape{2, 7, k}, 22), sin = Random(Shape{2, 7, n}, 23, -10, 10);
    const auto ref = RunGraph(Optimized(g, nullptr, &log), {xin, sin});
    const auto got = RunGraph(int8, {xin, sin});
    ASSERT_EQ(got[0].shape(), (Shape{2, 7, n}));
    for (int64_t r = 0; r < 14; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_LE(std::fabs(ref[0].data<float>()[r * n + j] - got[0].data<float>()[r * n + j]),
                  Int8Bound(xin.data<float>() + r * k, wt, j, options.vnni ? 8 : 7))
            << r << "," << j;
      }
    }
  }
}

TEST_P(CompressMatMulTest, BiasResidualAndReluOverManyRowBlocks) {
  // The kernel dequantizes, adds the bias, the residual and applies Relu block by block of
  // rows (8192 floats: 128 rows of N = 64): 300 rows make several blocks, full and partial,
  // however the threads share them, and a NaN row past the first block stays in its row.
  const int64_t k = 48, n = 64, rows = 300, nan_row = 170;
  Graph g;
  const ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {rows, k}));
  const ValueId skip = g.AddValue("skip", ir::TensorType::Of(DType::kFloat32, {rows, n}));
  g.inputs = {x, skip};
  Tensor wt = Random(Shape{k, n}, 61, -0.5f, 0.5f);
  const ValueId w = g.AddConstant("w", wt);
  const ValueId b = g.AddConstant("b", Random(Shape{n}, 62));
  ValueId y = g.node(g.AddNode("MatMul", {x, w}, 1, {}, "mm")).outputs[0];
  y = g.node(g.AddNode("Add", {y, b}, 1, {}, "bias")).outputs[0];
  y = g.node(g.AddNode("Add", {y, skip}, 1, {}, "res")).outputs[0];
  y = g.node(g.AddNode("Relu", {y}, 1, {}, "relu")).outputs[0];
  g.outputs = {y};
  CompressionOptions options;
  options.vnni = GetParam();
  OptimizationLog log;
  const Graph int8 = Optimized(g, &options, &log);
  ASSERT_EQ(CountOp(int8, ir::kDynamicQuantMatMulOp), 1) << int8.ToString();
  Tensor xin = Random(Shape{rows, k}, 63), sin = Random(Shape{rows, n}, 64, -3, 3);
  xin.data<float>()[nan_row * k + 5] = NAN;
  const auto ref = RunGraph(Optimized(g, nullptr, &log), {xin, sin});
  const auto got = RunGraph(int8, {xin, sin});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].shape(), (Shape{rows, n}));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const float want = ref[0].data<float>()[r * n + j], have = got[0].data<float>()[r * n + j];
      if (r == nan_row) {
        ASSERT_TRUE(std::isnan(want)) << j;
        ASSERT_TRUE(std::isnan(have)) << j;
        continue;
      }
      // Relu is 1-Lipschitz and the bias and residual are added exactly as in fp32.
      ASSERT_LE(std::fabs(want - have),
                Int8Bound(xin.data<float>() + r * k, wt, j, options.vnni ? 8 : 7))
          << r << "," << j;
    }
  }
}

TEST_P(CompressMatMulTest, NaNAndInfRowsPropagateAsInFp32) {
  const int64_t k = 32, n = 16;
  Mlp m = LinearRelu(k, n, 31, /*relu=*/false);
  // Weights away from 0, so that none quantizes to 0 (Inf * 0 would be NaN, not Inf).
  for (float& v : m.w.span<float>()) v = v < 0 ? v - 0.5f : v + 0.5f;
  m.graph.value(*m.graph.FindValue("w")).constant = m.w;
  CompressionOptions options;
  options.vnni = GetParam();
  OptimizationLog log;
  const Graph int8 = Optimized(m.graph, &options, &log);
  ASSERT_EQ(CountOp(int8, ir::kDynamicQuantMatMulOp), 1);
  Tensor x = Random(Shape{4, k}, 5);
  x.data<float>()[0 * k + 3] = NAN;
  x.data<float>()[1 * k + 9] = INFINITY;
  x.data<float>()[2 * k + 0] = INFINITY;
  x.data<float>()[2 * k + 1] = -INFINITY;
  const auto ref = RunGraph(Optimized(m.graph, nullptr, &log), {x});
  const auto got = RunGraph(int8, {x});
  for (int64_t i = 0; i < 4 * n; ++i) {
    const float r = ref[0].data<float>()[i], g = got[0].data<float>()[i];
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(g)) << i;
    } else if (std::isinf(r)) {
      EXPECT_EQ(r, g) << i;
    } else {
      EXPECT_TRUE(std::isfinite(g)) << i;
    }
  }
  // Row 3 is finite and quantized as usual.
  for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isfinite(got[0].data<float>()[3 * n + j]));
}

TEST_P(CompressMatMulTest, KeepFp32LeavesTheLayerExact) {
  Mlp m = LinearRelu(48, 20, 41);
  CompressionOptions options;
  options.vnni = GetParam();
  options.keep_fp32.insert("fc");
  OptimizationLog log;
  const Graph kept = Optimized(m.graph, &options, &log);
  EXPECT_EQ(CountOp(kept, ir::kDynamicQuantMatMulOp), 0);
  Tensor x = Random(Shape{3, 48}, 42);
  const auto ref = RunGraph(Optimized(m.graph, nullptr, &log), {x});
  const auto got = RunGraph(kept, {x});
  ASSERT_EQ(ref[0].byte_size(), got[0].byte_size());
  EXPECT_EQ(std::memcmp(ref[0].raw_data(), got[0].raw_data(), ref[0].byte_size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Vnni, CompressMatMulTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Vnni" : "SevenBit"; });

// bf16 weights: each weight rounds with relative error <= 2^-9, and A too where oneDNN
// multiplies in bf16, so |y - y_bf16| <= sum_k |a_k w_k| (2^-8 + 2^-18) plus fp32 rounding.
void ExpectBf16Close(const Graph& graph, int64_t rows, int64_t k, int64_t n, const Tensor& w,
                     const Tensor& b) {
  CompressionOptions options;
  options.int8_dynamic_matmul = false;
  options.bf16 = true;
  OptimizationLog log;
  const Graph bf16 = Optimized(graph, &options, &log);
  ASSERT_EQ(CountOp(bf16, ir::kBf16MatMulOp), 1) << bf16.ToString();
  Tensor x = Random(Shape{rows, k}, 51);
  const auto ref = RunGraph(Optimized(graph, nullptr, &log), {x});
  const auto got = RunGraph(bf16, {x});
  ASSERT_EQ(got.size(), 1u);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double mag = std::fabs(b.data<float>()[j]);
      for (int64_t i = 0; i < k; ++i) {
        mag += std::fabs(x.data<float>()[r * k + i] * w.data<float>()[i * n + j]);
      }
      const double diff =
          std::fabs(ref[0].data<float>()[r * n + j] - got[0].data<float>()[r * n + j]);
      ASSERT_LE(diff, mag * (1.0 / 256 + 1e-5) + 1e-6) << r << "," << j;
      worst = std::max(worst, diff);
    }
  }
  EXPECT_GT(worst, 0.0);
}

TEST(CompressMatMulBf16, FewRowsAndManyRows) {
  // 1 row: the streaming path where the CPU lacks bf16; 40 rows: the widened fp32 copy.
  Mlp m = LinearRelu(160, 72, 61);
  ExpectBf16Close(m.graph, 1, 160, 72, m.w, m.b);
  ExpectBf16Close(m.graph, 40, 160, 72, m.w, m.b);
}

// Why 7-bit weights without VNNI: oneDNN's AVX2 u8 x s8 kernels add pairs of products in
// int16 (vpmaddubsw), which 8-bit weights overflow (255 * 127 * 2 > 32767); the result then
// misses the quantization bound. Where the CPU has VNNI the same weights are fine.
TEST(CompressMatMul, EightBitWeightsSaturateWithoutVnni) {
  const int64_t k = 96, n = 40, rows = 13;
  Mlp m = LinearRelu(k, n, 7);
  CompressionOptions options;
  options.vnni = true;  // 8-bit weights whatever the CPU
  OptimizationLog log;
  const Graph int8 = Optimized(m.graph, &options, &log);
  Tensor x = Random(Shape{rows, k}, 3, -2.0f, 3.0f);
  const std::vector<Tensor> ref = RunGraph(Optimized(m.graph, nullptr, &log), {x});
  const std::vector<Tensor> got = RunGraph(int8, {x});
  int beyond = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      beyond += std::fabs(ref[0].data<float>()[r * n + c] - got[0].data<float>()[r * n + c]) >
                Int8Bound(x.data<float>() + r * k, m.w, c, 8);
    }
  }
  if (kernels::CpuHasInt8Vnni()) {
    EXPECT_EQ(beyond, 0);
  } else {
    EXPECT_GT(beyond, 0) << "8-bit weights no longer saturate on this ISA: 7-bit may be moot";
  }
}

TEST(CompressMatMul, NullOptionsChangeNothing) {
  Mlp m = LinearRelu(16, 8, 71);
  OptimizationLog log;
  const Graph g = Optimized(m.graph, nullptr, &log);
  EXPECT_EQ(CountOp(g, ir::kDynamicQuantMatMulOp), 0);
  EXPECT_EQ(CountOp(g, ir::kBf16MatMulOp), 0);
  EXPECT_EQ(log.ToString().find("compress_matmul"), std::string::npos);
}

}  // namespace
}  // namespace kiln::opt
