// AVX2 primitives for vec_math.inc / loops.inc. Included inside namespace ...::simd::avx2
// after <immintrin.h>; no include guard on purpose (one ISA per translation unit).
// NOLINT(build/header_guard)
using F = __m256;
using M = __m256;  // comparison mask (all-ones lanes)
using I = __m256i;
inline constexpr int kLanes = 8;

inline F Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
inline F Set1(float x) { return _mm256_set1_ps(x); }
inline F Zero() { return _mm256_setzero_ps(); }
inline F Add(F a, F b) { return _mm256_add_ps(a, b); }
inline F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
inline F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
inline F Div(F a, F b) { return _mm256_div_ps(a, b); }
inline F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }    // a*b+c
inline F Fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }  // c-a*b
inline F MinRaw(F a, F b) { return _mm256_min_ps(a, b); }           // b when either is NaN
inline F MaxRaw(F a, F b) { return _mm256_max_ps(a, b); }
inline F Sqrt(F a) { return _mm256_sqrt_ps(a); }
inline F Floor(F a) { return _mm256_floor_ps(a); }
inline F Ceil(F a) { return _mm256_ceil_ps(a); }
inline F RoundEven(F a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline F Trunc(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline F AndF(F a, F b) { return _mm256_and_ps(a, b); }
inline F XorF(F a, F b) { return _mm256_xor_ps(a, b); }
inline F OrF(F a, F b) { return _mm256_or_ps(a, b); }
inline F Abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
inline F Neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.f)); }
inline F SignBit(F a) { return _mm256_and_ps(a, _mm256_set1_ps(-0.f)); }
inline M Lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline M Le(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
inline M Gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
inline M Ge(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
inline M Eq(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
inline M Ne(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
inline M IsNan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
inline M MaskOr(M a, M b) { return _mm256_or_ps(a, b); }
inline M MaskAnd(M a, M b) { return _mm256_and_ps(a, b); }
// m ? a : b
inline F Select(M m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
// 2^n for integer-valued n in [-126, 127].
inline F Pow2(F n) {
  I e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
// p * 2^n, rounded once, for integer-valued n in [-252, 254] and p in [0.5, 2]: in two steps
// of at most 2^+-127, the first exact, so that subnormal and overflowed results round once as a
// single scale would.
inline F ScaleByPow2(F p, F n) {
  F n1 = _mm256_floor_ps(_mm256_mul_ps(n, _mm256_set1_ps(0.5f)));
  return _mm256_mul_ps(_mm256_mul_ps(p, Pow2(n1)), Pow2(_mm256_sub_ps(n, n1)));
}
// Splits a positive normal x into mantissa in [0.5, 1) and exponent (as float).
inline F Frexp(F x, F* exponent) {
  I bits = _mm256_castps_si256(x);
  I e = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126));
  *exponent = _mm256_cvtepi32_ps(e);
  I m = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                        _mm256_set1_epi32(0x3f000000));
  return _mm256_castsi256_ps(m);
}
inline float HorizontalAdd(F v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline float HorizontalMax(F v) {  // no NaNs (callers check)
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_max_ps(lo, hi);
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline float HorizontalMin(F v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_min_ps(lo, hi);
  lo = _mm_min_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_min_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline bool AnyTrue(M m) { return _mm256_movemask_ps(m) != 0; }
