// Accuracy of the vector math (both instruction sets) against double-precision references:
// ulp bounds over a dense sweep of the float range, and exact NaN/Inf handling.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/simd/ops.h"

namespace kiln::kernels::simd {
namespace {

int64_t UlpDistance(float a, float b) {
  if (a == b) return 0;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

std::vector<const Kernels*> AllIsas() {
  std::vector<const Kernels*> out = {&Avx2Kernels()};
  if (Avx512Kernels() != nullptr) out.push_back(Avx512Kernels());
  return out;
}

std::vector<float> Sweep(float lo, float hi, int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + (hi - lo) * i / (n - 1));
  return v;
}

struct UlpCase {
  UnaryOp op;
  double (*ref)(double);
  float lo, hi;
  int64_t max_ulp;
};

double RefSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double RefExp(double x) { return std::exp(x); }
double RefLog(double x) { return std::log(x); }
double RefTanh(double x) { return std::tanh(x); }
double RefErf(double x) { return std::erf(x); }
double RefGelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double RefSoftplus(double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); }
double RefElu(double x) { return x < 0 ? std::expm1(x) : x; }

TEST(SimdAccuracy, TranscendentalsWithinUlpBounds) {
  const UlpCase cases[] = {
      {UnaryOp::kExp, RefExp, -103.f, 88.7f, 2},
      {UnaryOp::kLog, RefLog, 1e-30f, 1e30f, 2},
      {UnaryOp::kLog, RefLog, 0.5f, 2.f, 2},
      {UnaryOp::kTanh, RefTanh, -10.f, 10.f, 3},
      {UnaryOp::kTanh, RefTanh, -0.7f, 0.7f, 3},
      {UnaryOp::kSigmoid, RefSigmoid, -100.f, 30.f, 3},
      {UnaryOp::kErf, RefErf, -5.f, 5.f, 4},
      {UnaryOp::kErf, RefErf, -1e-3f, 1e-3f, 2},
      {UnaryOp::kGelu, RefGelu, -9.f, 9.f, 40},  // tail: ~1e-6 relative
      {UnaryOp::kSoftplus, RefSoftplus, -80.f, 80.f, 4},
      {UnaryOp::kElu, RefElu, -20.f, 5.f, 4},
  };
  for (const Kernels* k : AllIsas()) {
    for (const UlpCase& c : cases) {
      std::vector<float> in = Sweep(c.lo, c.hi, 200003);
      if (c.op == UnaryOp::kLog) {  // geometric sweep
        for (size_t i = 0; i < in.size(); ++i) {
          in[i] =
              static_cast<float>(c.lo * std::pow(double(c.hi) / c.lo, double(i) / (in.size() - 1)));
        }
      }
      std::vector<float> out(in.size());
      UnaryParams p;
      p.alpha = 1.f;
      k->unary(c.op, p, in.data(), out.data(), static_cast<int64_t>(in.size()));
      int64_t worst = 0;
      float worst_x = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        const float expected = static_cast<float>(c.ref(in[i]));
        const int64_t d = UlpDistance(out[i], expected);
        if (d > worst) {
          worst = d;
          worst_x = in[i];
        }
      }
      EXPECT_LE(worst, c.max_ulp) << k->isa << " op " << static_cast<int>(c.op)
                                  << " worst at x=" << worst_x;
    }
  }
}

TEST(SimdAccuracy, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = 1e-40f;
  for (const Kernels* k : AllIsas()) {
    auto run = [&](UnaryOp op, float x) {
      float in[1] = {x}, out[1];
      k->unary(op, {}, in, out, 1);
      return out[0];
    };
    EXPECT_EQ(run(UnaryOp::kExp, inf), inf) << k->isa;
    EXPECT_EQ(run(UnaryOp::kExp, -inf), 0.f) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kExp, nan))) << k->isa;
    EXPECT_EQ(run(UnaryOp::kExp, 100.f), inf) << k->isa;
    EXPECT_EQ(run(UnaryOp::kExp, -88.f), std::exp(-88.f)) << k->isa;
    EXPECT_EQ(run(UnaryOp::kLog, 0.f), -inf) << k->isa;
    EXPECT_EQ(run(UnaryOp::kLog, inf), inf) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kLog, -1.f))) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kLog, nan))) << k->isa;
    EXPECT_NEAR(run(UnaryOp::kLog, denorm), std::log(1e-40), 1e-5) << k->isa;
    EXPECT_EQ(run(UnaryOp::kTanh, inf), 1.f) << k->isa;
    EXPECT_EQ(run(UnaryOp::kTanh, -inf), -1.f) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kTanh, nan))) << k->isa;
    EXPECT_EQ(run(UnaryOp::kSigmoid, inf), 1.f) << k->isa;
    EXPECT_EQ(run(UnaryOp::kSigmoid, -inf), 0.f) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kSigmoid, nan))) << k->isa;
    EXPECT_EQ(run(UnaryOp::kErf, inf), 1.f) << k->isa;
    EXPECT_EQ(run(UnaryOp::kErf, -inf), -1.f) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kErf, nan))) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kRelu, nan))) << k->isa;
    EXPECT_TRUE(std::isnan(run(UnaryOp::kSoftplus, nan))) << k->isa;
    EXPECT_EQ(run(UnaryOp::kSoftplus, inf), inf) << k->isa;
    EXPECT_EQ(run(UnaryOp::kRound, 2.5f), 2.f) << k->isa;
    EXPECT_EQ(run(UnaryOp::kRound, -1.5f), -2.f) << k->isa;
  }
}

TEST(SimdAccuracy, ReductionsMatchAndPropagateNaN) {
  for (const Kernels* k : AllIsas()) {
    for (int n : {0, 1, 7, 16, 33, 100, 1001}) {
      std::vector<float> v(n);
      double sum = 0, sq = 0;
      float mx = -std::numeric_limits<float>::infinity();
      for (int i = 0; i < n; ++i) {
        v[i] = std::sin(i * 0.37f) * 3;
        sum += v[i];
        sq += double(v[i]) * v[i];
        mx = std::max(mx, v[i]);
      }
      EXPECT_NEAR(k->reduce_sum(v.data(), n), sum, 1e-4) << k->isa << " n=" << n;
      EXPECT_NEAR(k->reduce_sum_square(v.data(), n), sq, 1e-3) << k->isa << " n=" << n;
      EXPECT_EQ(k->reduce_max(v.data(), n), mx) << k->isa << " n=" << n;
      if (n > 5) {
        v[n - 2] = std::numeric_limits<float>::quiet_NaN();
        EXPECT_TRUE(std::isnan(k->reduce_max(v.data(), n))) << k->isa << " n=" << n;
        EXPECT_TRUE(std::isnan(k->reduce_min(v.data(), n))) << k->isa << " n=" << n;
      }
    }
  }
}

// The int8 MatMul's row quantization gives the same codes, scale and zero point at every ISA
// (the AVX-512 loop steps 16 floats where the AVX2 one steps 2 x 8, the tails differ), and its
// dequantization the same floats; NaN and infinite rows are refused.
TEST(SimdAccuracy, RowQuantizationIsTheSameAtEveryIsa) {
  const std::vector<const Kernels*> isas = AllIsas();
  for (int k : {1, 7, 15, 16, 17, 31, 33, 256, 1000, 1024}) {
    for (int variant = 0; variant < 5; ++variant) {
      std::vector<float> a(k);
      for (int i = 0; i < k; ++i) a[i] = std::sin(i * 0.731f + variant) * (variant + 1) * 1.7f;
      if (variant == 1) {
        for (float& v : a) v = std::fabs(v);  // all >= 0: zero point 0
      } else if (variant == 2) {
        for (float& v : a) v = -std::fabs(v) - 0.25f;  // all < 0: zero point 255
      } else if (variant == 3) {
        a[k / 2] = std::numeric_limits<float>::quiet_NaN();
      } else if (variant == 4) {
        a[k - 1] = -std::numeric_limits<float>::infinity();
      }
      std::vector<std::vector<uint8_t>> codes;
      std::vector<float> scales;
      std::vector<int32_t> zeros;
      for (const Kernels* isa : isas) {
        std::vector<uint8_t> q(k, 77);
        float scale = -1;
        int32_t zero = -1;
        const bool finite = isa->quantize_row_u8(a.data(), k, q.data(), &scale, &zero);
        EXPECT_EQ(finite, variant < 3) << isa->isa << " k=" << k << " variant " << variant;
        if (finite) {
          // Each code decodes to within half a step of its value.
          for (int i = 0; i < k; ++i) {
            EXPECT_NEAR((q[i] - zero) * scale, a[i], 0.5f * scale * 1.001f)
                << isa->isa << " k=" << k << " at " << i;
          }
        } else {
          EXPECT_EQ(scale, 0.0f);
          EXPECT_EQ(zero, 0);
          EXPECT_EQ(std::count(q.begin(), q.end(), 0), k);
        }
        codes.push_back(q);
        scales.push_back(scale);
        zeros.push_back(zero);
      }
      for (size_t i = 1; i < isas.size(); ++i) {
        EXPECT_EQ(codes[i], codes[0]) << isas[i]->isa << " k=" << k << " variant " << variant;
        EXPECT_EQ(scales[i], scales[0]);
        EXPECT_EQ(zeros[i], zeros[0]);
      }
    }
  }
  for (int n : {1, 15, 16, 17, 100, 1024}) {
    std::vector<int32_t> acc(n), colsum(n);
    std::vector<float> w_scale(n);
    for (int j = 0; j < n; ++j) {
      acc[j] = (j * 7919) % 200001 - 100000;
      colsum[j] = (j * 104729) % 4001 - 2000;
      w_scale[j] = 1e-3f * (1 + j % 13);
    }
    std::vector<std::vector<float>> outs;
    for (const Kernels* isa : isas) {
      std::vector<float> out(n);
      isa->dequantize_row(acc.data(), colsum.data(), w_scale.data(), 37, 0.0123f, out.data(), n);
      for (int j = 0; j < n; ++j) {
        EXPECT_EQ(out[j], static_cast<float>(acc[j] - 37 * colsum[j]) * (0.0123f * w_scale[j]));
      }
      outs.push_back(out);
    }
    for (size_t i = 1; i < isas.size(); ++i) EXPECT_EQ(outs[i], outs[0]) << n;
  }
}

}  // namespace
}  // namespace kiln::kernels::simd
