// MatMul / Gemm / FusedGemm with constant weights on each fp32 GEMM backend (gemm_backend.h):
// oneDNN, OpenBLAS and Kiln's packed AVX2 kernel, forced with KILN_GEMM_BACKEND, against a
// double-precision reference written from the ONNX definitions; batch 1 (OpenBLAS's sgemv) and 32,
// transposed inputs, Gemm's alpha, beta and C, NaN and infinities. CMake runs this file twice: at
// the CPU's own ISA and capped to AVX2 (KILN_MAX_ISA=avx2, OPENBLAS_CORETYPE=Haswell), so both
// ISAs' code runs on an AVX-512 machine; AVX-512-only expectations skip on an AVX2 machine.
#include "kernels/cpu/gemm_backend.h"

#include <cblas.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemv_int8_avx2.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/determinism.h"
#include "kiln/kernels/testing.h"

namespace kiln::kernels {
namespace {

using nn::GemmBackend;
using testing::RunKernel;

Tensor Random(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Sets KILN_GEMM_BACKEND for one scope (the kernels read it at Reshape).
class ScopedBackend {
 public:
  explicit ScopedBackend(const std::string& name) { setenv("KILN_GEMM_BACKEND", name.c_str(), 1); }
  ~ScopedBackend() { unsetenv("KILN_GEMM_BACKEND"); }
};

// y = alpha * op(A) op(B) + beta * broadcast(C), in double; A and B are 2-D.
std::vector<double> Reference(const Tensor& a, const Tensor& b, bool ta, bool tb, float alpha,
                              const Tensor* c, float beta) {
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t n = tb ? b.dim(0) : b.dim(1);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = a.data<float>()[ta ? p * m + i : i * k + p];
        const double bv = b.data<float>()[tb ? j * k + p : p * n + j];
        acc += av * bv;
      }
      double v = alpha * acc;
      if (c != nullptr) {
        const Shape& cs = c->shape();
        const int64_t rows = cs.rank() == 2 ? cs.dim(0) : 1;
        const int64_t cols = cs.rank() >= 1 ? cs.dim(cs.rank() - 1) : 1;
        v += beta * c->data<float>()[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
      }
      y[static_cast<size_t>(i * n + j)] = v;
    }
  }
  return y;
}

// fp32 GEMM tolerance: relative to the magnitude of the sum (inputs are in [-1, 1]).
void ExpectNear(const Tensor& actual, const std::vector<double>& expected, int64_t k) {
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.size()));
  const double tol = 1e-6 * static_cast<double>(k) + 1e-5;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i], v = actual.data<float>()[i];
    if (std::isnan(e)) {
      ASSERT_TRUE(std::isnan(v)) << "element " << i << " is " << v << ", expected NaN";
    } else if (std::isinf(e)) {
      ASSERT_EQ(v, e) << "element " << i;
    } else {
      ASSERT_NEAR(v, e, tol * (1 + std::fabs(e))) << "element " << i;
    }
  }
}

class GemmBackendTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GemmBackendTest, MatMulBatch1And32) {
  ScopedBackend backend(GetParam());
  for (int64_t m : {1, 32}) {
    Tensor a = Random(Shape{m, 256}, 1), b = Random(Shape{256, 192}, 2);
    auto out = RunKernel("MatMul", {a, b}, {}, {.constant_inputs = {1}, .intra_op_threads = 2});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectNear((*out)[0], Reference(a, b, false, false, 1, nullptr, 0), 256);
  }
}

TEST_P(GemmBackendTest, MatMulFoldsLeadingDimensionsIntoRows) {
  ScopedBackend backend(GetParam());
  Tensor a = Random(Shape{2, 16, 128}, 3), b = Random(Shape{128, 96}, 4);
  auto out = RunKernel("MatMul", {a, b}, {}, {.constant_inputs = {1}, .intra_op_threads = 2});
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor a2(DType::kFloat32, Shape{32, 128});
  std::copy(a.data<float>(), a.data<float>() + a.num_elements(), a2.data<float>());
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 16, 96}));
  ExpectNear((*out)[0], Reference(a2, b, false, false, 1, nullptr, 0), 128);
}

TEST_P(GemmBackendTest, GemmTransposedAlphaBetaAndC) {
  ScopedBackend backend(GetParam());
  for (int64_t m : {1, 32}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(::testing::Message() << "m " << m << " transA " << ta << " transB " << tb);
        const int64_t k = 200, n = 144;
        Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, 5);
        Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, 6);
        for (const Shape& cs : {Shape{m, n}, Shape{n}, Shape{m, 1}}) {
          Tensor c = Random(cs, 7);
          auto out = RunKernel(
              "Gemm", {a, b, c},
              {{"transA", int64_t{ta}}, {"transB", int64_t{tb}}, {"alpha", 0.5f}, {"beta", 2.0f}},
              {.constant_inputs = {1}, .intra_op_threads = 2});
          ASSERT_TRUE(out.ok()) << out.status();
          ExpectNear((*out)[0], Reference(a, b, ta, tb, 0.5f, &c, 2.0f), k);
        }
      }
    }
  }
}

// A row bias with alpha = beta = 1 is the bias path (not a pre-filled C), then a fused Relu.
TEST_P(GemmBackendTest, FusedGemmBiasThenRelu) {
  ScopedBackend backend(GetParam());
  for (int64_t m : {1, 32}) {
    Tensor a = Random(Shape{m, 160}, 8), b = Random(Shape{160, 128}, 9);
    Tensor bias = Random(Shape{128}, 10);
    auto out =
        RunKernel("FusedGemm", {a, b, bias}, {{"post_ops", std::vector<std::string>{"Relu"}}},
                  {.domain = "kiln", .constant_inputs = {1, 2}, .intra_op_threads = 2});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<double> expected = Reference(a, b, false, false, 1, &bias, 1);
    for (double& v : expected) v = v > 0 ? v : 0;
    ExpectNear((*out)[0], expected, 160);
  }
}

// NaN and infinities in A reach the output as the unoptimized product computes them: a NaN
// row stays NaN, inf times a weight of either sign gives +-inf, inf times 0 gives NaN.
TEST_P(GemmBackendTest, NanAndInfinityPropagate) {
  ScopedBackend backend(GetParam());
  for (int64_t m : {1, 32}) {
    Tensor a = Random(Shape{m, 128}, 11), b = Random(Shape{128, 80}, 12);
    for (int64_t j = 0; j < 80; ++j) b.data<float>()[5 * 80 + j] = j % 3 == 0 ? 0.0f : 1.0f;
    a.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
    if (m > 1) a.data<float>()[128 + 5] = std::numeric_limits<float>::infinity();
    auto out = RunKernel("MatMul", {a, b}, {}, {.constant_inputs = {1}, .intra_op_threads = 2});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectNear((*out)[0], Reference(a, b, false, false, 1, nullptr, 0), 128);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmBackendTest,
                         ::testing::Values("onednn", "openblas", "packed"),
                         [](const auto& info) { return info.param; });

// KILN_GEMM_BACKEND=openblas reaches OpenBLAS: the kernel's output is bit for bit what
// cblas_sgemm gives (oneDNN sums in another order), so the tests above did run OpenBLAS.
TEST(GemmBackendChoice, ForcedOpenBlasRunsOpenBlas) {
  ScopedBackend backend("openblas");
  Tensor a = Random(Shape{32, 300}, 13), b = Random(Shape{300, 70}, 14);
  auto out = RunKernel("MatMul", {a, b}, {}, {.constant_inputs = {1}, .intra_op_threads = 2});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<float> direct(32 * 70);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 32, 70, 300, 1.0f, a.data<float>(), 300,
              b.data<float>(), 70, 0.0f, direct.data(), 70);
  for (size_t i = 0; i < direct.size(); ++i) {
    ASSERT_EQ((*out)[0].data<float>()[i], direct[i]) << "element " << i;
  }
}

TEST(GemmBackendChoice, UnknownOverrideIsAnError) {
  ScopedBackend backend("mkl");
  Tensor a = Random(Shape{32, 300}, 13), b = Random(Shape{300, 70}, 14);
  auto out = RunKernel("MatMul", {a, b}, {}, {.constant_inputs = {1}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("KILN_GEMM_BACKEND=mkl"), std::string::npos)
      << out.status();
}

// The linked OpenBLAS is its OpenMP build (one owner of the threads, with oneDNN), and within
// the ISA cap (the AVX2 run sets OPENBLAS_CORETYPE=Haswell).
TEST(GemmBackendChoice, OpenBlasIsTheOpenMpBuildWithinTheCap) {
  std::string why;
  EXPECT_TRUE(nn::OpenBlasUsable(&why)) << why;
}

nn::GemmShape Shape32x1024x1024() {
  nn::GemmShape s;
  s.rows = 32;
  s.n = 1024;
  s.k = 1024;
  s.lda = 1024;
  s.ldb = 1024;
  return s;
}

TEST(GemmBackendChoice, Avx512KeepsOneDnn) {
  if (EffectiveCpuIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "runs at AVX2";
  std::vector<float> b(1024 * 1024, 0.0f);
  int onednn_runs = 0;
  auto choice = nn::ChooseGemmBackend(nullptr, nullptr, Shape32x1024x1024(), b.data(), 2, false,
                                      [&](const float*, float*) { ++onednn_runs; });
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->backend, GemmBackend::kOneDnn);
  EXPECT_EQ(onednn_runs, 0);  // not timed
}

// On AVX2 the two are timed, once per model (cache) and shape: a second plan of the same shape
// reuses the decision without timing again.
TEST(GemmBackendChoice, Avx2TimesOncePerModelAndShape) {
  if (EffectiveCpuIsa() != CpuIsa::kAvx2) GTEST_SKIP() << "runs at AVX-512";
  std::vector<float> b(1024 * 1024, 0.0f);
  PackedConstantCache cache;
  int onednn_runs = 0;
  auto run = [&](const float*, float*) { ++onednn_runs; };
  auto first = nn::ChooseGemmBackend(&cache, nullptr, Shape32x1024x1024(), b.data(), 2, false, run);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE(first->reason.find("timed"), std::string::npos) << first->reason;
  EXPECT_EQ(onednn_runs, 4);  // one warm run and three timed
  auto second =
      nn::ChooseGemmBackend(&cache, nullptr, Shape32x1024x1024(), b.data(), 2, false, run);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->backend, first->backend);
  EXPECT_EQ(onednn_runs, 4);
  // oneDNN's packed layout is its own kernel's: kept without timing.
  nn::GemmShape other = Shape32x1024x1024();
  other.rows = 64;
  auto packed = nn::ChooseGemmBackend(&cache, nullptr, other, b.data(), 2, true, run);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->backend, GemmBackend::kOneDnn);
  EXPECT_EQ(onednn_runs, 4);
}

// Operands too large to allocate for a timing (before the plan's memory budget is checked)
// are not timed: a model's shapes must not drive a large allocation at plan compile.
TEST(GemmBackendChoice, Avx2DoesNotTimeLargeOperands) {
  if (EffectiveCpuIsa() != CpuIsa::kAvx2) GTEST_SKIP() << "runs at AVX-512";
  nn::GemmShape s;
  s.rows = int64_t{1} << 20;  // A alone is 64 MiB; 2^24 multiply-adds would be timed
  s.n = 1;
  s.k = 16;
  s.lda = 16;
  s.ldb = 1;
  std::vector<float> b(16, 0.0f);
  int onednn_runs = 0;
  auto choice = nn::ChooseGemmBackend(nullptr, nullptr, s, b.data(), 2, false,
                                      [&](const float*, float*) { ++onednn_runs; });
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(onednn_runs, 0);
  EXPECT_NE(choice->reason.find("not timed"), std::string::npos) << choice->reason;
}

// OpenBLAS's dimensions are 32-bit ints: a dimension beyond that stays on oneDNN even when
// OpenBLAS is forced (it would be truncated).
TEST(GemmBackendChoice, DimensionsBeyondInt32StayOnOneDnn) {
  ScopedBackend backend("openblas");
  nn::GemmShape s;
  s.rows = 1;
  s.n = 1;
  s.k = int64_t{1} << 31;
  s.lda = s.k;
  s.ldb = 1;
  auto choice =
      nn::ChooseGemmBackend(nullptr, nullptr, s, nullptr, 2, false, [](const float*, float*) {});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->backend, GemmBackend::kOneDnn) << choice->reason;
}

// Kiln's packed AVX2 kernel (gemm_avx2_packed.h) called directly on odd shapes: every tail of
// the 6x16 register block (M = 1 is the GEMV), of the 16-column panels (N = 1, 15, 17, 1000)
// and of the 256-deep K blocks (K = 300), with transposes, alpha and accumulation, against a
// double-precision reference.
TEST(PackedGemm, OddShapesTransposesAlphaAccumulate) {
  int combo = 0;
  for (int64_t m : {1, 5, 6, 7, 33}) {
    for (int64_t n : {1, 15, 16, 17, 1000}) {
      for (int64_t k : {1, 3, 300}) {
        const bool ta = combo % 2 == 1, tb = combo / 2 % 2 == 1, acc = combo % 3 == 0;
        const float alpha = combo % 5 == 0 ? 1.0f : -0.75f;
        ++combo;
        SCOPED_TRACE(::testing::Message()
                     << "m " << m << " n " << n << " k " << k << " transA " << ta << " transB "
                     << tb << " alpha " << alpha << " accumulate " << acc);
        Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, 20 + combo);
        Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, 40 + combo);
        Tensor c0 = Random(Shape{m, n}, 60 + combo);
        nn::GemmShape s;
        s.rows = m;
        s.n = n;
        s.k = k;
        s.trans_a = ta;
        s.trans_b = tb;
        s.lda = ta ? m : k;
        s.ldb = tb ? k : n;
        s.alpha = alpha;
        s.accumulate = acc;
        auto packed = nn::PackedGemmB::Pack(b.data<float>(), k, n, tb, s.ldb);
        ASSERT_TRUE(packed.ok()) << packed.status();
        EXPECT_GE((*packed)->bytes(), static_cast<size_t>(k * n) * sizeof(float));
        Tensor c = c0.Clone();
        nn::PackedGemm(s, a.data<float>(), **packed, c.data<float>());
        ExpectNear(c, Reference(a, b, ta, tb, alpha, acc ? &c0 : nullptr, 1.0f), k);
      }
    }
  }
}

// Both ways of splitting the work over two threads give the one-thread answer bit for bit
// (each output is summed by one thread, in the same order): over panels (N = 1000) and, with
// few panels and many rows, over rows (N = 17, M = 100).
TEST(PackedGemm, ThreadSplitsAgreeWithOneThread) {
  for (int64_t n : {1000, 17}) {
    const int64_t m = 100, k = 300;
    Tensor a = Random(Shape{m, k}, 80), b = Random(Shape{k, n}, 81);
    auto packed = nn::PackedGemmB::Pack(b.data<float>(), k, n, false, n);
    ASSERT_TRUE(packed.ok()) << packed.status();
    std::vector<float> one(m * n), two(m * n);
    nn::PackedGemmAvx2(m, a.data<float>(), k, 1, **packed, 1.0f, false, one.data(), n, 1);
    nn::PackedGemmAvx2(m, a.data<float>(), k, 1, **packed, 1.0f, false, two.data(), n, 2);
    ASSERT_EQ(one, two) << "n " << n;
    Tensor out(DType::kFloat32, Shape{m, n});
    std::copy(two.begin(), two.end(), out.data<float>());
    ExpectNear(out, Reference(a, b, false, false, 1, nullptr, 0), k);
  }
}

// NaN and infinities in A and in the weights reach the output as in a plain sum, in the
// register blocks, the GEMV and the padded last panel (whose zero padding times an infinity
// is NaN and must not be stored anywhere).
TEST(PackedGemm, NanAndInfinityPropagateThroughEveryPath) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t m : {1, 7}) {
    const int64_t n = 17, k = 300;
    Tensor a = Random(Shape{m, k}, 90), b = Random(Shape{k, n}, 91);
    for (int64_t j = 0; j < n; ++j) b.data<float>()[5 * n + j] = j % 3 == 0 ? 0.0f : 1.0f;
    a.data<float>()[5] = inf;  // row 0: +-inf, or NaN where the weight is 0
    b.data<float>()[7 * n + 16] = std::numeric_limits<float>::quiet_NaN();  // column 16: NaN
    if (m > 1) a.data<float>()[2 * k + 9] = std::numeric_limits<float>::quiet_NaN();  // row 2
    auto packed = nn::PackedGemmB::Pack(b.data<float>(), k, n, false, n);
    ASSERT_TRUE(packed.ok()) << packed.status();
    // C is wider than N: the columns past N must be left untouched by the padded lanes.
    const int64_t ldc = 24;
    std::vector<float> c(m * ldc, 42.0f);
    nn::PackedGemmAvx2(m, a.data<float>(), k, 1, **packed, 1.0f, false, c.data(), ldc, 2);
    Tensor out(DType::kFloat32, Shape{m, n});
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        if (j < n) {
          out.data<float>()[i * n + j] = c[i * ldc + j];
        } else {
          ASSERT_EQ(c[i * ldc + j], 42.0f) << "row " << i << " column " << j;
        }
      }
    }
    ExpectNear(out, Reference(a, b, false, false, 1, nullptr, 0), k);
  }
}

// KILN_GEMM_BACKEND=packed reaches the packed kernel: the MatMul's output is bit for bit what
// the kernel gives when called directly, so the parameterized tests above did run it.
TEST(GemmBackendChoice, ForcedPackedRunsThePackedKernel) {
  ScopedBackend backend("packed");
  for (int64_t m : {1, 32}) {
    Tensor a = Random(Shape{m, 300}, 15), b = Random(Shape{300, 70}, 16);
    auto out = RunKernel("MatMul", {a, b}, {}, {.constant_inputs = {1}, .intra_op_threads = 2});
    ASSERT_TRUE(out.ok()) << out.status();
    auto packed = nn::PackedGemmB::Pack(b.data<float>(), 300, 70, false, 70);
    ASSERT_TRUE(packed.ok());
    std::vector<float> direct(m * 70);
    nn::PackedGemmAvx2(m, a.data<float>(), 300, 1, **packed, 1.0f, false, direct.data(), 70, 2);
    for (size_t i = 0; i < direct.size(); ++i) {
      ASSERT_EQ((*out)[0].data<float>()[i], direct[i]) << "m " << m << " element " << i;
    }
  }
}

// The packed weights belong to the node and the model: a second plan (another batch size)
// of the same node reuses them, counted once in the cache; another node packs its own.
TEST(GemmBackendChoice, PackedWeightsAreMadeOncePerNodeAndModel) {
  ScopedBackend backend("packed");
  std::vector<float> b(1024 * 1024, 0.5f);
  PackedConstantCache cache;
  ir::Node first_node, second_node;
  auto no_onednn = [](const float*, float*) {};
  nn::GemmShape batch1 = Shape32x1024x1024();
  batch1.rows = 1;
  auto p1 = nn::ChooseGemmBackend(&cache, &first_node, batch1, b.data(), 2, false, no_onednn);
  ASSERT_TRUE(p1.ok()) << p1.status();
  ASSERT_EQ(p1->backend, GemmBackend::kPacked);
  ASSERT_NE(p1->packed, nullptr);
  const size_t bytes = cache.bytes();
  EXPECT_EQ(bytes, p1->packed->bytes());
  EXPECT_GE(bytes, size_t{1024 * 1024 * sizeof(float)});
  auto p32 = nn::ChooseGemmBackend(&cache, &first_node, Shape32x1024x1024(), b.data(), 2, false,
                                   no_onednn);
  ASSERT_TRUE(p32.ok()) << p32.status();
  EXPECT_EQ(p32->packed, p1->packed);
  EXPECT_EQ(cache.bytes(), bytes);
  auto other = nn::ChooseGemmBackend(&cache, &second_node, Shape32x1024x1024(), b.data(), 2, false,
                                     no_onednn);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->packed, p1->packed);
  EXPECT_EQ(cache.bytes(), 2 * bytes);
}

// On AVX2 the packed kernel is timed beside oneDNN and OpenBLAS (all three printed in the
// reason), and when it wins the model keeps its panels; when it loses, none are kept.
TEST(GemmBackendChoice, Avx2TimesThePackedKernel) {
  if (EffectiveCpuIsa() != CpuIsa::kAvx2) GTEST_SKIP() << "runs at AVX-512";
  std::vector<float> b(1024 * 1024, 0.0f);
  PackedConstantCache cache;
  ir::Node node;
  // A oneDNN run that takes 20 ms: one of the other two wins.
  auto slow_onednn = [](const float*, float*) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  auto choice =
      nn::ChooseGemmBackend(&cache, &node, Shape32x1024x1024(), b.data(), 2, false, slow_onednn);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_NE(choice->backend, GemmBackend::kOneDnn) << choice->reason;
  EXPECT_NE(choice->reason.find("packed"), std::string::npos) << choice->reason;
  EXPECT_NE(choice->reason.find("openblas"), std::string::npos) << choice->reason;
  if (choice->backend == GemmBackend::kPacked) {
    ASSERT_NE(choice->packed, nullptr);
    EXPECT_EQ(cache.bytes(), choice->packed->bytes());
  } else {
    EXPECT_EQ(choice->packed, nullptr);
    EXPECT_EQ(cache.bytes(), 0u);
  }
}

// Under op determinism (TF_DETERMINISTIC_OPS=1) two loads of one model must compute the same
// bits: the backend is not timed. Last in the file: determinism stays on in this process.
TEST(GemmBackendChoice, OpDeterminismDoesNotTime) {
  if (EffectiveCpuIsa() != CpuIsa::kAvx2) GTEST_SKIP() << "runs at AVX-512";
  EnableOpDeterminism();
  std::vector<float> b(1024 * 1024, 0.0f);
  PackedConstantCache cache;
  int onednn_runs = 0;
  auto choice = nn::ChooseGemmBackend(&cache, nullptr, Shape32x1024x1024(), b.data(), 2, false,
                                      [&](const float*, float*) { ++onednn_runs; });
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(onednn_runs, 0);
  EXPECT_EQ(choice->backend, GemmBackend::kOneDnn);
  EXPECT_NE(choice->reason.find("op determinism"), std::string::npos) << choice->reason;
}

// Kiln's AVX2 u8 x s8 product of a few rows (gemv_int8_avx2.h): the exact int32 sums, over
// depths that are not a multiple of 4, widths that leave a partial panel, every row count, any
// panel range, and the extreme operands (255 against +-64, whose int16 pair sums come closest
// to saturating).
TEST(PackedInt8Gemv, ExactSumsForOddShapesAndExtremes) {
  std::mt19937 rng(5);
  for (auto [k, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 17}, {64, 16}, {1001, 45}}) {
    std::vector<int8_t> w(k * n);
    std::uniform_int_distribution<int> wd(-64, 64);
    for (auto& v : w) v = static_cast<int8_t>(wd(rng));
    if (k * n >= 2) w[0] = 64, w[1] = -64;
    auto packed = nn::PackedInt8GemvB::Pack(w.data(), k, n);
    ASSERT_TRUE(packed.ok()) << packed.status();
    for (int64_t rows = 1; rows <= nn::PackedInt8GemvB::kMaxRows; ++rows) {
      std::vector<uint8_t> a(rows * k);
      std::uniform_int_distribution<int> ad(0, 255);
      for (auto& v : a) v = static_cast<uint8_t>(ad(rng));
      std::fill(a.begin(), a.begin() + std::min<int64_t>(k, 8), 255);
      std::vector<int32_t> got(rows * n, -7);
      const int64_t panels = (*packed)->panels();
      (*packed)->Multiply(rows, a.data(), k, 0, panels / 2, got.data());
      (*packed)->Multiply(rows, a.data(), k, panels / 2, panels, got.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          int64_t want = 0;
          for (int64_t i = 0; i < k; ++i) want += int64_t{a[r * k + i]} * w[i * n + j];
          ASSERT_EQ(got[r * n + j], want)
              << "k " << k << " n " << n << " row " << r << " col " << j;
        }
      }
    }
  }
}

TEST(PackedInt8Gemv, RefusesWeightsBeyondSevenBits) {
  const std::vector<int8_t> w = {1, -65, 3, 4};
  auto packed = nn::PackedInt8GemvB::Pack(w.data(), 2, 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(packed.status())) << packed.status();
}

}  // namespace
}  // namespace kiln::kernels
