// The AVX-512 build of the shared fp32 loops. Every standard header is included before the
// target pragma so that no inline library function is compiled for AVX-512 (the linker could
// otherwise keep that copy for the whole program and break AVX2-only CPUs); the loops live in
// an anonymous namespace for the same reason.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/cpu/simd/ops.h"
#include "kiln/core/cpu_isa.h"

#if defined(__clang__)
// Clang has no target pragma; the attribute is applied to every function up to the pop.
// clang-format off
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2"))), apply_to = function)
// clang-format on
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2")
// GCC 12 warns about its own _mm512_undefined_* helpers and about the (internal) ABI of
// functions passing __m512; neither applies to code that only runs after the CPU check.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kiln::kernels::simd {
namespace avx512 {
namespace {
// The loops need the primitives and the vector math before them: not sorted.
// clang-format off
#include "kernels/cpu/simd/prims_avx512.h"
#include "kernels/cpu/simd/vec_math.inc"
#include "kernels/cpu/simd/loops.inc"
// clang-format on

// isa_avx2.cc's QuantizeRowU8Impl 16 floats at a time: the same FMA for the same elements
// (all but the last k % 16), and min, max and the non-finite check do not depend on the
// order. No standard-library template is used here (see the top of this file).
bool QuantizeRowU8Impl(const float* a, int64_t k, uint8_t* q, float* scale, int32_t* zero) {
  const __m512 zero_ps = _mm512_setzero_ps();
  __m512 lo16 = zero_ps, hi16 = zero_ps, poison16 = zero_ps;
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m512 v = _mm512_loadu_ps(a + i);
    lo16 = _mm512_min_ps(lo16, v);
    hi16 = _mm512_max_ps(hi16, v);
    poison16 = _mm512_add_ps(poison16, _mm512_mul_ps(v, zero_ps));
  }
  if (i < k) {  // masked lanes read as 0, which changes neither bound nor the check
    const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (k - i)) - 1), a + i);
    lo16 = _mm512_min_ps(lo16, v);
    hi16 = _mm512_max_ps(hi16, v);
    poison16 = _mm512_add_ps(poison16, _mm512_mul_ps(v, zero_ps));
  }
  const float lo = _mm512_reduce_min_ps(lo16), hi = _mm512_reduce_max_ps(hi16);
  const float poison = _mm512_reduce_add_ps(poison16);
  RowQuantization rq;
  if (!StartRowQuantization(lo, hi, poison, k, q, scale, zero, &rq)) return false;
  const __m512 inv16 = _mm512_set1_ps(rq.inverse), zf16 = _mm512_set1_ps(rq.zero_plus_half);
  const __m512 max16 = _mm512_set1_ps(255.0f);
  for (i = 0; i + 16 <= k; i += 16) {
    const __m512 v = _mm512_min_ps(
        _mm512_max_ps(_mm512_fmadd_ps(_mm512_loadu_ps(a + i), inv16, zf16), zero_ps), max16);
    // Truncated to int32 in [0, 255], narrowed to bytes.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
  }
  QuantizeRowTail(rq, a, i, k, q);
  return true;
}

void DequantizeRowImpl(const int32_t* acc, const int32_t* colsum, const float* w_scale,
                       int32_t zero, float scale, float* out, int64_t n) {
  const __m512i z16 = _mm512_set1_epi32(zero);
  const __m512 s16 = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512i d = _mm512_sub_epi32(_mm512_loadu_si512(acc + j),
                                       _mm512_mullo_epi32(z16, _mm512_loadu_si512(colsum + j)));
    _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_cvtepi32_ps(d),
                                            _mm512_mul_ps(s16, _mm512_loadu_ps(w_scale + j))));
  }
  for (; j < n; ++j) {
    out[j] = static_cast<float>(acc[j] - zero * colsum[j]) * (scale * w_scale[j]);
  }
}
}  // namespace
}  // namespace avx512
}  // namespace kiln::kernels::simd

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

namespace kiln::kernels::simd {

const Kernels* Avx512Kernels() {
  static const Kernels* kernels = []() -> const Kernels* {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl")) {
      return nullptr;
    }
    static const Kernels k = {
        "avx512",
        avx512::UnaryImpl,
        avx512::BinaryImpl,
        avx512::ReduceSumImpl,
        avx512::ReduceSumSquareImpl,
        avx512::ReduceSumAbsImpl,
        avx512::ReduceMaxImpl,
        avx512::ReduceMinImpl,
        avx512::ExpShiftSumImpl,
        avx512::ScaleBiasImpl,
        avx512::FusedImpl,
        avx512::QuantizeRowU8Impl,
        avx512::DequantizeRowImpl,
    };
    return &k;
  }();
  return kernels;
}

const Kernels& Best() {
  static const Kernels* best = [] {
    const Kernels* k = EffectiveCpuIsa() == CpuIsa::kAvx512 ? Avx512Kernels() : nullptr;
    return k != nullptr ? k : &Avx2Kernels();
  }();
  return *best;
}

}  // namespace kiln::kernels::simd
