#include "kiln/core/cpu_isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

std::optional<CpuIsa> ParseIsa(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "avx2") return CpuIsa::kAvx2;
  if (lower == "avx512" || lower == "avx512_core") return CpuIsa::kAvx512;
  return std::nullopt;
}

// The cap is process-wide because oneDNN's is (dnnl::set_max_cpu_isa); it is set once, from
// main or the environment, before kernels are created.
std::mutex cap_mutex;
std::optional<CpuIsa> requested_cap ABSL_GUARDED_BY(cap_mutex);
bool cap_fixed ABSL_GUARDED_BY(cap_mutex) = false;

}  // namespace

const char* CpuIsaName(CpuIsa isa) { return isa == CpuIsa::kAvx512 ? "avx512" : "avx2"; }

CpuIsa DetectedCpuIsa() {
  static const CpuIsa detected = [] {
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return avx512 ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
  }();
  return detected;
}

CpuIsa EffectiveCpuIsa() {
  static const CpuIsa effective = [] {
    std::lock_guard<std::mutex> lock(cap_mutex);
    cap_fixed = true;
    CpuIsa isa = DetectedCpuIsa();
    std::optional<CpuIsa> cap = requested_cap;
    if (!cap) {
      const char* env = std::getenv("KILN_MAX_ISA");
      if (env != nullptr && env[0] != '\0') {
        cap = ParseIsa(env);
        if (!cap) {
          std::fprintf(stderr, "kiln: KILN_MAX_ISA=%s is not avx2 or avx512; not capping\n", env);
        }
      }
    }
    if (cap && *cap < isa) isa = *cap;
    return isa;
  }();
  return effective;
}

absl::Status SetMaxCpuIsa(absl::string_view name) {
  const std::optional<CpuIsa> isa = ParseIsa(name);
  if (!isa) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ISA '", name, "': expected avx2 or avx512"));
  }
  std::lock_guard<std::mutex> lock(cap_mutex);
  if (cap_fixed) {
    return absl::FailedPreconditionError(
        "the ISA cap must be set before the first kernel is created");
  }
  requested_cap = isa;
  return absl::OkStatus();
}

}  // namespace kiln
