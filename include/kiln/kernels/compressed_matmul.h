// What the CPU offers the compressed MatMul kernels (kiln/ir/compressed_matmul.h), for the
// runtime that chooses the compression options.
#pragma once

namespace kiln::kernels {

// What this CPU gives the compressed kernels, under Kiln's ISA cap (KILN_MAX_ISA): int8
// dot products without int16 saturation (avx512_vnni or avx_vnni), and bf16 matmul with fp32
// accumulation (avx512_bf16 or AMX). Defined with the kernels (nn_int8_matmul.cc).
bool CpuHasInt8Vnni();
bool CpuHasBf16MatMul();

}  // namespace kiln::kernels
