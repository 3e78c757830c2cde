// AVX-512 (F, DQ, BW, VL) primitives for vec_math.inc / loops.inc. Included inside namespace
// ...::simd::avx512 in a translation unit compiled with the AVX-512 target pragma.
// NOLINT(build/header_guard)
using F = __m512;
using M = __mmask16;
using I = __m512i;
inline constexpr int kLanes = 16;

inline F Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
inline F Set1(float x) { return _mm512_set1_ps(x); }
inline F Zero() { return _mm512_setzero_ps(); }
inline F Add(F a, F b) { return _mm512_add_ps(a, b); }
inline F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
inline F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
inline F Div(F a, F b) { return _mm512_div_ps(a, b); }
inline F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
inline F Fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
inline F MinRaw(F a, F b) { return _mm512_min_ps(a, b); }
inline F MaxRaw(F a, F b) { return _mm512_max_ps(a, b); }
inline F Sqrt(F a) { return _mm512_sqrt_ps(a); }
inline F Floor(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline F Ceil(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
inline F RoundEven(F a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline F Trunc(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline F AndF(F a, F b) { return _mm512_and_ps(a, b); }
inline F XorF(F a, F b) { return _mm512_xor_ps(a, b); }
inline F OrF(F a, F b) { return _mm512_or_ps(a, b); }
inline F Abs(F a) { return _mm512_andnot_ps(_mm512_set1_ps(-0.f), a); }
inline F Neg(F a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.f)); }
inline F SignBit(F a) { return _mm512_and_ps(a, _mm512_set1_ps(-0.f)); }
inline M Lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline M Le(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
inline M Gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline M Ge(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline M Eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline M Ne(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
inline M IsNan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
inline M MaskOr(M a, M b) { return static_cast<M>(a | b); }
inline M MaskAnd(M a, M b) { return static_cast<M>(a & b); }
inline F Select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
inline F Pow2(F n) {
  I e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
// p * 2^n, rounded once, for integer-valued n: vscalefps, which also gives the subnormal and
// overflowed results.
inline F ScaleByPow2(F p, F n) { return _mm512_scalef_ps(p, n); }
inline F Frexp(F x, F* exponent) {
  I bits = _mm512_castps_si512(x);
  I e = _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(126));
  *exponent = _mm512_cvtepi32_ps(e);
  I m = _mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff)),
                        _mm512_set1_epi32(0x3f000000));
  return _mm512_castsi512_ps(m);
}
inline float HorizontalAdd(F v) { return _mm512_reduce_add_ps(v); }
inline float HorizontalMax(F v) { return _mm512_reduce_max_ps(v); }
inline float HorizontalMin(F v) { return _mm512_reduce_min_ps(v); }
inline bool AnyTrue(M m) { return m != 0; }
