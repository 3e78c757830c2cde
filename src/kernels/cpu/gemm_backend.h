// The fp32 GEMM backend of a MatMul/Gemm with constant weights, chosen per shape and ISA when a
// plan is compiled (issue 9, item 5).
//
// Candidates:
//  - oneDNN's matmul (libdnnl): on AVX-512 it is brgemm with weights packed once per model
//    (nn_matmul.cc, PackConstant) and wins by about 3x; it is always chosen there.
//  - OpenBLAS (libopenblas-openmp-dev): cblas_sgemm, and cblas_sgemv for a single row (its
//    sgemm does not switch to a matrix-vector product and is 5x slower there). Debian's
//    oneDNN 2.6 runs fp32 matmul on AVX2 as `gemm:jit` on plain weights, which OpenBLAS beats
//    at batch 32 on AVX2 servers; OpenBLAS reads the constant weights in place, so it packs
//    nothing and every plan (batch size) shares the model's own weight tensor. But it repacks
//    them on every call (Debian's 0.3.21 has no pack-once API), as gemm:jit does.
//  - "packed", Kiln's own AVX2+FMA kernel (gemm_avx2_packed.h): the weights packed once per
//    model into 16-column panels, a 6x16 register block, a GEMV for one row. It does not
//    repack per call, which is what the two above lose at inference batch sizes (MLAS, ONNX
//    Runtime's GEMM, does the same). Its panels are made only for a node whose product it
//    wins, and kept in the model's PackedConstantCache (one copy for every plan, counted in
//    its bytes); a losing candidate's panels are freed after the timing.
// On AVX2 the candidates are timed on the plan's shape (zeros in, interleaved, best of three)
// and the fastest wins (oneDNN unless another is 3% faster); the choice is made once per model
// and shape, kept in the model's PackedConstantCache (so plans for the same shape, and nodes of
// the same shape, reuse it), and printed on stderr with the times, which is what the load log
// and `kiln inspect` show.
//
// Threads: Kiln links OpenBLAS's OpenMP build, which runs on the calling thread's OpenMP team
// (the one oneDNN uses) and takes its thread count from omp_get_max_threads() on every call,
// so ScopedDnnlThreads sets both and there is one owner of the intra-op threads; the packed
// kernel splits its panels over the same team. A pthread or serial OpenBLAS found at run time
// is not used (it would bring its own threads).
//
// XNNPACK (libxnnpack-dev, 2022 snapshot) is not a candidate: its fully-connected operator
// clamps to [output_min, output_max] even when they are infinite, which turns NaN into -inf,
// and its ISA dispatch cannot be capped for measurement (docs/RUNTIME.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gemm_avx2_packed.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/packed_constants.h"

namespace kiln::kernels::nn {

enum class GemmBackend { kOneDnn, kOpenBlas, kPacked };
const char* GemmBackendName(GemmBackend backend);

// C[rows, n] = alpha * op(A)[rows, k] x op(B)[k, n] (+ C when `accumulate`), all row-major.
// op(A) is A^T stored [k, rows] with leading dimension lda when trans_a; likewise B.
struct GemmShape {
  int64_t rows = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0;
  float alpha = 1.0f;
  bool accumulate = false;  // beta = 1: C holds what the product is added to
};

// Runs the product on OpenBLAS with as many threads as omp_get_max_threads() says.
void OpenBlasGemm(const GemmShape& shape, const float* a, const float* b, float* c);

// Runs the product on the packed weights of op(B) (PackedGemmB::Pack(b, shape.k, shape.n,
// shape.trans_b, shape.ldb)) with as many threads as omp_get_max_threads() says.
void PackedGemm(const GemmShape& shape, const float* a, const PackedGemmB& b, float* c);

// Whether the loaded OpenBLAS may stand in for oneDNN in this process: its OpenMP build, and
// kernels no wider than Kiln's ISA cap (OpenBLAS picks them when it loads, from the CPU or
// OPENBLAS_CORETYPE). Otherwise false, with the reason in *why.
bool OpenBlasUsable(std::string* why);

struct GemmChoice {
  GemmBackend backend = GemmBackend::kOneDnn;
  std::string reason;  // what decided it (times, ISA, or the override)
  // kPacked: the node's weights packed for it, shared with every plan of the model.
  std::shared_ptr<const PackedGemmB> packed;
};

// The backend for an fp32 product with constant weights `b` of `node`, chosen once per `cache`
// (the model) and shape. `run_onednn(a, c)` runs the oneDNN primitive the plan would run, with
// zeros in `a` and its output in `c`; `onednn_packs` says oneDNN chose brgemm with weights
// packed for it (its own fast kernel: kept). KILN_GEMM_BACKEND=onednn|openblas|packed forces
// one (for measurement and the tests of each backend); "auto" or unset chooses; anything else
// is an InvalidArgument. `cache` may be null (a kernel outside a model): the choice and the
// packed weights are then made for this call and not kept.
absl::StatusOr<GemmChoice> ChooseGemmBackend(
    PackedConstantCache* cache, const ir::Node* node, const GemmShape& shape, const float* b,
    int threads, bool onednn_packs, absl::FunctionRef<void(const float*, float*)> run_onednn);

}  // namespace kiln::kernels::nn
