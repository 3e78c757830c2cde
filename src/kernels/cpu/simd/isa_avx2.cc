// The AVX2 build of the shared fp32 loops (the baseline every supported CPU runs).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/simd/ops.h"

namespace kiln::kernels::simd {
namespace avx2 {
namespace {
// The loops need the primitives and the vector math before them: not sorted.
// clang-format off
#include "kernels/cpu/simd/prims_avx2.h"
#include "kernels/cpu/simd/vec_math.inc"
#include "kernels/cpu/simd/loops.inc"
// clang-format on

// The row scan and its conversion: float min/max and the non-finite check stay in vectors
// (the compiler keeps them scalar: NaN and associativity rules); 16 codes per step with FMA,
// the tail without (the AVX-512 build steps 16 at a time too, for the same codes).
bool QuantizeRowU8Impl(const float* a, int64_t k, uint8_t* q, float* scale, int32_t* zero) {
  const __m256 zero_ps = _mm256_setzero_ps();
  __m256 lo8 = zero_ps, hi8 = zero_ps, poison8 = zero_ps;
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_loadu_ps(a + i);
    lo8 = _mm256_min_ps(lo8, v);
    hi8 = _mm256_max_ps(hi8, v);
    // NaN exactly when some element is NaN or +-Inf (x * 0).
    poison8 = _mm256_add_ps(poison8, _mm256_mul_ps(v, zero_ps));
  }
  alignas(32) float lo_l[8], hi_l[8], poison_l[8];
  _mm256_store_ps(lo_l, lo8);
  _mm256_store_ps(hi_l, hi8);
  _mm256_store_ps(poison_l, poison8);
  float lo = 0.0f, hi = 0.0f, poison = 0.0f;
  for (int l = 0; l < 8; ++l) {
    lo = lo_l[l] < lo ? lo_l[l] : lo;
    hi = hi_l[l] > hi ? hi_l[l] : hi;
    poison += poison_l[l];
  }
  for (; i < k; ++i) {
    lo = a[i] < lo ? a[i] : lo;
    hi = a[i] > hi ? a[i] : hi;
    poison += a[i] * 0.0f;
  }
  RowQuantization rq;
  if (!StartRowQuantization(lo, hi, poison, k, q, scale, zero, &rq)) return false;
  const __m256 inv8 = _mm256_set1_ps(rq.inverse), zf8 = _mm256_set1_ps(rq.zero_plus_half);
  const __m256 max8 = _mm256_set1_ps(255.0f);
  for (i = 0; i + 16 <= k; i += 16) {
    const __m256 v0 = _mm256_min_ps(
        _mm256_max_ps(_mm256_fmadd_ps(_mm256_loadu_ps(a + i), inv8, zf8), zero_ps), max8);
    const __m256 v1 = _mm256_min_ps(
        _mm256_max_ps(_mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), inv8, zf8), zero_ps), max8);
    // Truncate to int32, pack to 16 x int16 then 16 x u8 (values are in [0, 255], so the
    // saturating packs change nothing); the packs work per 128-bit lane, hence the permute.
    const __m256i w = _mm256_packs_epi32(_mm256_cvttps_epi32(v0), _mm256_cvttps_epi32(v1));
    const __m256i w_ordered = _mm256_permute4x64_epi64(w, 0xD8);
    const __m128i b =
        _mm_packus_epi16(_mm256_castsi256_si128(w_ordered), _mm256_extracti128_si256(w_ordered, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), b);
  }
  QuantizeRowTail(rq, a, i, k, q);
  return true;
}

void DequantizeRowImpl(const int32_t* acc, const int32_t* colsum, const float* w_scale,
                       int32_t zero, float scale, float* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    out[j] = static_cast<float>(acc[j] - zero * colsum[j]) * (scale * w_scale[j]);
  }
}
}  // namespace
}  // namespace avx2

bool StartRowQuantization(float lo, float hi, float poison, int64_t k, uint8_t* q, float* scale,
                          int32_t* zero, RowQuantization* rq) {
  if (poison != 0.0f || poison != poison) {
    *scale = 0;
    *zero = 0;
    std::fill(q, q + k, uint8_t{0});
    return false;
  }
  *scale = hi > lo ? (hi - lo) / 255.0f : 1.0f;
  rq->inverse = 1.0f / *scale;
  // lo <= 0 <= hi, so 0 is a code: zero = round(-lo / s) in [0, 255].
  *zero = std::clamp(static_cast<int32_t>(-lo * rq->inverse + 0.5f), 0, 255);
  // a * inv + zero lies in [-0.5, 255.5] up to rounding: + 0.5 and truncation rounds it.
  rq->zero_plus_half = static_cast<float>(*zero) + 0.5f;
  return true;
}

void QuantizeRowTail(const RowQuantization& rq, const float* a, int64_t begin, int64_t k,
                     uint8_t* q) {
  for (int64_t i = begin; i < k; ++i) {
    q[i] = static_cast<uint8_t>(std::clamp(a[i] * rq.inverse + rq.zero_plus_half, 0.0f, 255.0f));
  }
}

const Kernels& Avx2Kernels() {
  static const Kernels kernels = {
      "avx2",
      avx2::UnaryImpl,
      avx2::BinaryImpl,
      avx2::ReduceSumImpl,
      avx2::ReduceSumSquareImpl,
      avx2::ReduceSumAbsImpl,
      avx2::ReduceMaxImpl,
      avx2::ReduceMinImpl,
      avx2::ExpShiftSumImpl,
      avx2::ScaleBiasImpl,
      avx2::FusedImpl,
      avx2::QuantizeRowU8Impl,
      avx2::DequantizeRowImpl,
  };
  return kernels;
}

}  // namespace kiln::kernels::simd
