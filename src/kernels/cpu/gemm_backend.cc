#include "gemm_backend.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/status.h"
#include "nn_dnnl.h"

namespace kiln::kernels::nn {
namespace {

// Products below this many multiply-adds stay on oneDNN untimed: nn_matmul.cc runs them on one
// thread, and a choice between two sub-100-microsecond runs would be decided by noise.
constexpr int64_t kMinChoiceMacs = int64_t{1} << 18;
// Products above this are not timed (one run takes tens of milliseconds on two AVX2 cores, and
// plan compile would take seconds); OpenBLAS's blocked sgemm is taken for them on AVX2 (issue
// 9's AVX2 EPYC: 110 GFLOP/s against oneDNN 2.6's gemm:jit at 67 for 32x4096x4096).
constexpr int64_t kMaxTimedMacs = int64_t{1} << 30;
// Nor when A and C (zeros allocated for the timing, before the plan's memory budget is
// checked) would take more than this: a model's shapes must not drive a large allocation here.
constexpr int64_t kMaxTimedBytes = int64_t{64} << 20;
// OpenBLAS must be this much faster to replace oneDNN: ties keep the default.
constexpr double kMinGain = 1.03;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

const char* GemmBackendName(GemmBackend backend) {
  return backend == GemmBackend::kOpenBlas ? "openblas" : "onednn";
}

void OpenBlasGemm(const GemmShape& s, const float* a, const float* b, float* c) {
  const float beta = s.accumulate ? 1.0f : 0.0f;
  const blasint rows = static_cast<blasint>(s.rows), n = static_cast<blasint>(s.n),
                k = static_cast<blasint>(s.k);
  if (s.rows == 1) {
    // One row: y[n] = alpha * sum_k x[k] op(B)[k, n]. With B stored [k, n] that is B^T x;
    // stored transposed ([n, k]) it is B x. x is A's only row (or, transposed, its column).
    const blasint incx = s.trans_a ? static_cast<blasint>(s.lda) : 1;
    if (s.trans_b) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, s.alpha, b, static_cast<blasint>(s.ldb), a,
                  incx, beta, c, 1);
    } else {
      cblas_sgemv(CblasRowMajor, CblasTrans, k, n, s.alpha, b, static_cast<blasint>(s.ldb), a, incx,
                  beta, c, 1);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
              s.trans_b ? CblasTrans : CblasNoTrans, rows, n, k, s.alpha, a,
              static_cast<blasint>(s.lda), b, static_cast<blasint>(s.ldb), beta, c, n);
}

bool OpenBlasUsable(std::string* why) {
  // 2 is OpenBLAS's OpenMP build (0 serial, 1 pthreads): the build that shares Kiln's threads.
  if (openblas_get_parallel() != 2) {
    *why = absl::StrCat("the loaded OpenBLAS is not its OpenMP build (openblas_get_parallel() = ",
                        openblas_get_parallel(), ")");
    return false;
  }
  if (EffectiveCpuIsa() < DetectedCpuIsa()) {
    const std::string core = absl::AsciiStrToLower(openblas_get_corename());
    // OpenBLAS's AVX-512 kernels (SkylakeX, CooperLake, SapphireRapids) would run under an AVX2
    // cap; its AVX2 ones are Haswell and Zen. OPENBLAS_CORETYPE=Haswell selects them.
    if (core != "haswell" && core != "zen") {
      *why = absl::StrCat("Kiln is capped to ", CpuIsaName(EffectiveCpuIsa()),
                          " but OpenBLAS runs its ", openblas_get_corename(),
                          " kernels (set OPENBLAS_CORETYPE=Haswell)");
      return false;
    }
  }
  return true;
}

absl::StatusOr<GemmChoice> ChooseGemmBackend(
    PackedConstantCache* cache, const GemmShape& shape, const float* b, int threads,
    bool onednn_packs, absl::FunctionRef<void(const float*, float*)> run_onednn) {
  // Debian's OpenBLAS takes 32-bit dimensions (blasint is int): a larger one stays on oneDNN,
  // whatever is asked for.
  constexpr int64_t kMaxBlasDim = std::numeric_limits<blasint>::max();
  if (std::max({shape.rows, shape.n, shape.k, shape.lda, shape.ldb}) > kMaxBlasDim) {
    return GemmChoice{GemmBackend::kOneDnn, "a dimension exceeds OpenBLAS's 32-bit int"};
  }
  const char* forced = std::getenv("KILN_GEMM_BACKEND");
  if (forced != nullptr && forced[0] != '\0' && !absl::EqualsIgnoreCase(forced, "auto")) {
    if (absl::EqualsIgnoreCase(forced, "onednn")) {
      return GemmChoice{GemmBackend::kOneDnn, "KILN_GEMM_BACKEND=onednn"};
    }
    if (absl::EqualsIgnoreCase(forced, "openblas")) {
      return GemmChoice{GemmBackend::kOpenBlas, "KILN_GEMM_BACKEND=openblas"};
    }
    return absl::InvalidArgumentError(
        absl::StrCat("KILN_GEMM_BACKEND=", forced, " is not one of auto, onednn, openblas"));
  }
  const int64_t macs = shape.rows * shape.n * shape.k;
  // A's extent follows lda. The operands fit in memory (the kernel's shapes are checked), so
  // these products do not overflow.
  const int64_t a_floats = shape.trans_a ? shape.k * shape.lda : shape.rows * shape.lda;
  const int64_t c_floats = shape.rows * shape.n;
  const bool too_large =
      macs > kMaxTimedMacs ||
      (a_floats + c_floats) * static_cast<int64_t>(sizeof(float)) > kMaxTimedBytes;
  auto decide = [&]() -> absl::StatusOr<std::pair<std::shared_ptr<const GemmChoice>, size_t>> {
    GemmChoice choice;
    std::string why;
    if (EffectiveCpuIsa() >= CpuIsa::kAvx512) {
      choice = {GemmBackend::kOneDnn, "avx512: oneDNN brgemm"};
    } else if (macs < kMinChoiceMacs) {
      choice = {GemmBackend::kOneDnn, "small product"};
    } else if (onednn_packs) {
      choice = {GemmBackend::kOneDnn, "oneDNN brgemm with its packed weights"};
    } else if (!OpenBlasUsable(&why)) {
      choice = {GemmBackend::kOneDnn, why};
    } else if (too_large) {
      choice = {GemmBackend::kOpenBlas, "avx2, large product (not timed)"};
    } else {
      // Zeros in, like a real input in speed (no denormals).
      std::vector<float> a(static_cast<size_t>(a_floats), 0.0f);
      std::vector<float> c(static_cast<size_t>(c_floats), 0.0f);
      ScopedDnnlThreads scoped(threads);
      GemmShape timed = shape;
      timed.accumulate = false;
      // A warm call each (oneDNN's first call and OpenBLAS's buffers), then the best of three,
      // interleaved so that a burst of load on the machine hits both.
      run_onednn(a.data(), c.data());
      OpenBlasGemm(timed, a.data(), b, c.data());
      double best_onednn = 1e30, best_openblas = 1e30;
      for (int round = 0; round < 3; ++round) {
        double t0 = Seconds();
        run_onednn(a.data(), c.data());
        best_onednn = std::min(best_onednn, Seconds() - t0);
        t0 = Seconds();
        OpenBlasGemm(timed, a.data(), b, c.data());
        best_openblas = std::min(best_openblas, Seconds() - t0);
      }
      const bool blas = best_openblas * kMinGain < best_onednn;
      choice = {blas ? GemmBackend::kOpenBlas : GemmBackend::kOneDnn,
                absl::StrFormat("avx2, timed: openblas %.3f ms, onednn %.3f ms",
                                best_openblas * 1e3, best_onednn * 1e3)};
    }
    // The load log (stderr, as the model's other load lines): once per model and shape; not
    // for the small products, which every model has many of and which have no choice.
    if (macs >= kMinChoiceMacs) {
      std::fprintf(stderr, "kiln: fp32 GEMM %lldx%lldx%lld%s%s on %d threads: %s (%s)\n",
                   static_cast<long long>(shape.rows), static_cast<long long>(shape.n),
                   static_cast<long long>(shape.k), shape.trans_a ? " transA" : "",
                   shape.trans_b ? " transB" : "", threads, GemmBackendName(choice.backend),
                   choice.reason.c_str());
    }
    return std::make_pair(std::make_shared<const GemmChoice>(std::move(choice)), size_t{0});
  };
  if (cache == nullptr) {
    KILN_ASSIGN_OR_RETURN(auto made, decide());
    return *made.first;
  }
  const std::string key =
      absl::StrCat("gemm-backend:", shape.rows, "x", shape.n, "x", shape.k, ":", shape.trans_a,
                   shape.trans_b, ":", shape.lda, ",", shape.ldb, ":", threads);
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const GemmChoice> choice,
                        cache->GetOrCreate<GemmChoice>(nullptr, key, decide));
  return *choice;
}

}  // namespace kiln::kernels::nn
