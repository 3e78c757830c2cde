#include "gemm_backend.h"

#include <cblas.h>
#include <omp.h>

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
#include "kiln/core/determinism.h"
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
// Another backend must be this much faster to replace oneDNN: ties keep the default.
constexpr double kMinGain = 1.03;
// The packed candidate pads N to whole 16-column panels: below 16 columns that is up to 16x
// the weights' memory, for products that are too narrow to gain from a 16-wide kernel anyway.
// Narrower ones are left to the others unless KILN_GEMM_BACKEND=packed.
constexpr int64_t kMinPackedN = PackedGemmB::kPanel;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string PackedKey(const GemmShape& s) {
  return absl::StrCat("gemm-avx2-packed:", s.k, "x", s.n, ":", s.trans_b, ":", s.ldb);
}

// The node's packed weights if the model already holds them, else null. The cache has no plain
// lookup; a `make` that fails inserts nothing.
std::shared_ptr<const PackedGemmB> FindPacked(PackedConstantCache* cache, const ir::Node* node,
                                              const GemmShape& shape) {
  auto found = cache->GetOrCreate<PackedGemmB>(
      node, PackedKey(shape),
      []() -> absl::StatusOr<std::pair<std::shared_ptr<const PackedGemmB>, size_t>> {
        return absl::NotFoundError("not packed yet");
      });
  return found.ok() ? *found : nullptr;
}

}  // namespace

const char* GemmBackendName(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kOpenBlas:
      return "openblas";
    case GemmBackend::kPacked:
      return "packed";
    default:
      return "onednn";
  }
}

void PackedGemm(const GemmShape& s, const float* a, const PackedGemmB& b, float* c) {
  PackedGemmAvx2(s.rows, a, s.trans_a ? 1 : s.lda, s.trans_a ? s.lda : 1, b, s.alpha, s.accumulate,
                 c, s.n, omp_get_max_threads());
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
    PackedConstantCache* cache, const ir::Node* node, const GemmShape& shape, const float* b,
    int threads, bool onednn_packs, absl::FunctionRef<void(const float*, float*)> run_onednn) {
  // Debian's OpenBLAS takes 32-bit dimensions (blasint is int): a larger one is never run
  // there, whatever is asked for.
  constexpr int64_t kMaxBlasDim = std::numeric_limits<blasint>::max();
  const bool blas_dims =
      std::max({shape.rows, shape.n, shape.k, shape.lda, shape.ldb}) <= kMaxBlasDim;
  const char* kBlasDims = "a dimension exceeds OpenBLAS's 32-bit int";
  auto pack = [&]() { return PackedGemmB::Pack(b, shape.k, shape.n, shape.trans_b, shape.ldb); };
  // The node's packed weights, once per model: those the cache holds, else `made` (packed for
  // the timing) or packed now. Without a cache, this call's own.
  auto packed_for_node = [&](std::shared_ptr<const PackedGemmB> made)
      -> absl::StatusOr<std::shared_ptr<const PackedGemmB>> {
    if (cache == nullptr) return made != nullptr ? std::move(made) : pack();
    return cache->GetOrCreate<PackedGemmB>(
        node, PackedKey(shape),
        [&]() -> absl::StatusOr<std::pair<std::shared_ptr<const PackedGemmB>, size_t>> {
          if (made == nullptr) {
            KILN_ASSIGN_OR_RETURN(made, pack());
          }
          const size_t bytes = made->bytes();
          return std::make_pair(std::move(made), bytes);
        });
  };
  const char* forced = std::getenv("KILN_GEMM_BACKEND");
  if (forced != nullptr && forced[0] != '\0' && !absl::EqualsIgnoreCase(forced, "auto")) {
    if (absl::EqualsIgnoreCase(forced, "onednn")) {
      return GemmChoice{GemmBackend::kOneDnn, "KILN_GEMM_BACKEND=onednn", nullptr};
    }
    if (absl::EqualsIgnoreCase(forced, "openblas")) {
      if (!blas_dims) return GemmChoice{GemmBackend::kOneDnn, kBlasDims, nullptr};
      return GemmChoice{GemmBackend::kOpenBlas, "KILN_GEMM_BACKEND=openblas", nullptr};
    }
    if (absl::EqualsIgnoreCase(forced, "packed")) {
      KILN_ASSIGN_OR_RETURN(std::shared_ptr<const PackedGemmB> packed, packed_for_node(nullptr));
      return GemmChoice{GemmBackend::kPacked, "KILN_GEMM_BACKEND=packed", std::move(packed)};
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "KILN_GEMM_BACKEND=", forced, " is not one of auto, onednn, openblas, packed"));
  }
  const int64_t macs = shape.rows * shape.n * shape.k;
  // A's extent follows lda. The operands fit in memory (the kernel's shapes are checked), so
  // these products do not overflow.
  const int64_t a_floats = shape.trans_a ? shape.k * shape.lda : shape.rows * shape.lda;
  const int64_t c_floats = shape.rows * shape.n;
  const bool too_large =
      macs > kMaxTimedMacs ||
      (a_floats + c_floats) * static_cast<int64_t>(sizeof(float)) > kMaxTimedBytes;
  const bool avx2_choice =
      EffectiveCpuIsa() < CpuIsa::kAvx512 && macs >= kMinChoiceMacs && !onednn_packs;
  const bool packed_ok = shape.n >= kMinPackedN;
  // Weights another plan of this model already packed are timed as they are (looked up here:
  // the cache is locked while `decide` runs).
  std::shared_ptr<const PackedGemmB> timed_packed;
  if (avx2_choice && packed_ok && !too_large && cache != nullptr) {
    timed_packed = FindPacked(cache, node, shape);
  }
  auto decide = [&]() -> absl::StatusOr<std::pair<std::shared_ptr<const GemmChoice>, size_t>> {
    GemmChoice choice;
    std::string why = kBlasDims;
    const bool blas_ok = blas_dims && OpenBlasUsable(&why);
    if (EffectiveCpuIsa() >= CpuIsa::kAvx512) {
      choice = {GemmBackend::kOneDnn, "avx512: oneDNN brgemm", nullptr};
    } else if (macs < kMinChoiceMacs) {
      choice = {GemmBackend::kOneDnn, "small product", nullptr};
    } else if (onednn_packs) {
      choice = {GemmBackend::kOneDnn, "oneDNN brgemm with its packed weights", nullptr};
    } else if (!blas_ok && !packed_ok) {
      choice = {GemmBackend::kOneDnn, why, nullptr};
    } else if (too_large) {
      // Large products amortize the per-call packing of B, and both library GEMMs pack A too,
      // which the packed kernel does not: OpenBLAS beat it at 2048^3 (0.85-0.96x,
      // docs/performance/runtime.md). Without OpenBLAS, oneDNN's gemm:jit, as before.
      choice = blas_ok
                   ? GemmChoice{GemmBackend::kOpenBlas, "avx2, large product (not timed)", nullptr}
                   : GemmChoice{GemmBackend::kOneDnn,
                                absl::StrCat("avx2, large product (not timed); ", why), nullptr};
    } else if (OpDeterminismEnabled()) {
      // Backends round differently, and timings can differ between two loads of one model.
      choice = {GemmBackend::kOneDnn, "avx2, op determinism: oneDNN (not timed)", nullptr};
    } else {
      if (packed_ok && timed_packed == nullptr) {
        KILN_ASSIGN_OR_RETURN(timed_packed, pack());
      }
      // Zeros in, like a real input in speed (no denormals).
      std::vector<float> a(static_cast<size_t>(a_floats), 0.0f);
      std::vector<float> c(static_cast<size_t>(c_floats), 0.0f);
      ScopedDnnlThreads scoped(threads);
      GemmShape timed = shape;
      timed.accumulate = false;
      auto run_openblas = [&] { OpenBlasGemm(timed, a.data(), b, c.data()); };
      auto run_packed = [&] { PackedGemm(timed, a.data(), *timed_packed, c.data()); };
      // A warm call each (oneDNN's first call and OpenBLAS's buffers), then the best of three,
      // interleaved so that a burst of load on the machine hits all of them.
      run_onednn(a.data(), c.data());
      if (blas_ok) run_openblas();
      if (packed_ok) run_packed();
      double best_onednn = 1e30, best_openblas = 1e30, best_packed = 1e30;
      for (int round = 0; round < 3; ++round) {
        double t0 = Seconds();
        run_onednn(a.data(), c.data());
        best_onednn = std::min(best_onednn, Seconds() - t0);
        if (blas_ok) {
          t0 = Seconds();
          run_openblas();
          best_openblas = std::min(best_openblas, Seconds() - t0);
        }
        if (packed_ok) {
          t0 = Seconds();
          run_packed();
          best_packed = std::min(best_packed, Seconds() - t0);
        }
      }
      const bool packed_best = best_packed <= best_openblas;
      const double best_other = std::min(best_packed, best_openblas);
      choice.backend = best_other * kMinGain < best_onednn
                           ? (packed_best ? GemmBackend::kPacked : GemmBackend::kOpenBlas)
                           : GemmBackend::kOneDnn;
      choice.reason = absl::StrFormat("avx2, timed: onednn %.3f ms", best_onednn * 1e3);
      if (blas_ok) absl::StrAppendFormat(&choice.reason, ", openblas %.3f ms", best_openblas * 1e3);
      if (packed_ok) absl::StrAppendFormat(&choice.reason, ", packed %.3f ms", best_packed * 1e3);
      if (!blas_ok) absl::StrAppend(&choice.reason, "; no openblas: ", why);
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
  GemmChoice choice;
  if (cache == nullptr) {
    KILN_ASSIGN_OR_RETURN(auto made, decide());
    choice = *made.first;
  } else {
    const std::string key =
        absl::StrCat("gemm-backend:", shape.rows, "x", shape.n, "x", shape.k, ":", shape.trans_a,
                     shape.trans_b, ":", shape.lda, ",", shape.ldb, ":", threads);
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const GemmChoice> kept,
                          cache->GetOrCreate<GemmChoice>(nullptr, key, decide));
    choice = *kept;
  }
  // The packed weights belong to the node, the choice to the shape (shared by nodes of that
  // shape): a losing candidate's panels (timed_packed) are freed on return.
  if (choice.backend == GemmBackend::kPacked) {
    KILN_ASSIGN_OR_RETURN(choice.packed, packed_for_node(std::move(timed_packed)));
  }
  return choice;
}

}  // namespace kiln::kernels::nn
