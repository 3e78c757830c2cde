// The instruction set Kiln's kernels may use, and a cap on it for measurement.
//
// Kiln is built for any x86-64 with AVX2 and picks wider code at run time. To measure the
// AVX2 path on an AVX-512 machine, cap the ISA: `KILN_MAX_ISA=avx2` in the environment, or
// `kiln run --isa=avx2` (which calls SetMaxCpuIsa before any kernel runs). The cap applies to
// Kiln's own vector loops and to oneDNN (the kernels library passes it on with
// dnnl::set_max_cpu_isa), and it changes layout decisions made from the ISA.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kiln {

// Ordered: a wider set compares greater.
enum class CpuIsa { kAvx2 = 0, kAvx512 = 1 };

// "avx2" or "avx512".
const char* CpuIsaName(CpuIsa isa);

// What this CPU supports: AVX-512 means F, DQ, BW and VL (what Kiln's AVX-512 code needs).
CpuIsa DetectedCpuIsa();

// The ISA kernels use: the detected one, lowered by KILN_MAX_ISA or SetMaxCpuIsa. Fixed at
// the first call (kernels choose their code once).
CpuIsa EffectiveCpuIsa();

// Caps the ISA ("avx2" or "avx512"; a cap above the CPU's is the CPU's). Must run before the
// first EffectiveCpuIsa() call, i.e. before any kernel is created: FailedPrecondition after.
absl::Status SetMaxCpuIsa(absl::string_view name);

}  // namespace kiln
