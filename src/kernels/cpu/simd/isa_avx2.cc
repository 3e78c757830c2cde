// The AVX2 build of the shared fp32 loops (the baseline every supported CPU runs).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd/ops.h"

namespace kiln::kernels::simd {
namespace avx2 {
namespace {
#include "kernels/cpu/simd/prims_avx2.h"
#include "kernels/cpu/simd/vec_math.inc"
#include "kernels/cpu/simd/loops.inc"
}  // namespace
}  // namespace avx2

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
  };
  return kernels;
}

}  // namespace kiln::kernels::simd
