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
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2"))), apply_to = function)
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
#include "kernels/cpu/simd/prims_avx512.h"
#include "kernels/cpu/simd/vec_math.inc"
#include "kernels/cpu/simd/loops.inc"
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
