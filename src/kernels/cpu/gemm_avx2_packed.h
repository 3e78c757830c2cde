// Kiln's own fp32 GEMM for AVX2 + FMA on constant weights packed once per model (issue 9,
// item 5): the third candidate of gemm_backend.h beside oneDNN and OpenBLAS.
//
// Why: on AVX2 Debian's oneDNN 2.6 runs fp32 matmul as gemm:jit on plain weights and Debian's
// OpenBLAS 0.3.21 has no pack-once API, so both repack the whole weight matrix on every call
// (64 MB per call for a 4096x4096 layer). ONNX Runtime's MLAS packs B once (MlasGemmPackB) and
// runs a 6x16 FMA kernel on the panels; this file does the same.
//
// Layout: B (op(B) is [k, n]) is cut into panels of 16 columns; panel p holds op(B)[0..k,
// 16p..16p+16) row by row, 16 contiguous floats per k, so a micro-kernel reads one panel as a
// single stream. The last panel is padded with zeros (those lanes are computed and never
// stored, so a NaN or infinity in A cannot leak into them). Panels are 64-byte aligned.
//
// Product: a 6x16 register block (12 accumulators, 2 panel loads and 6 broadcasts of A per k).
// A is read in place (row- or column-major), not packed: the products this backend wins are
// the short-and-wide ones of inference (batch 1-64 against a large weight), where A is small
// and stays in cache. K is blocked by 256 (a 16 KB panel slice stays in L1 while every row
// block of A uses it) and rows by up to 96 (the A block stays in L2 across panels). Row blocks
// are balanced (32 rows = 2x6 + 4x5, not 5x6 + 2), since a short block has too few
// independent accumulators to keep both FMA pipes busy. One row (GEMV) streams each panel
// over the whole K with four independent accumulator pairs. Work is split over panels (rows
// when there are too few panels) on the calling thread's OpenMP team, the one oneDNN and
// OpenBLAS use.
//
// Arithmetic: each output is alpha * (a sum of products in fp32 with FMA), added to C when
// accumulating; no reassociation beyond the K blocking and the GEMV's four partial sums, no
// fast-math, so NaN and infinities propagate as in a plain sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace kiln::kernels::nn {

class PackedGemmB {
 public:
  static constexpr int64_t kPanel = 16;  // columns per panel (NR)

  // Packs op(B) ([k, n]; B stored [n, k] with leading dimension ldb when trans_b, else [k, n]).
  // ResourceExhausted when the panels cannot be allocated.
  static absl::StatusOr<std::shared_ptr<const PackedGemmB>> Pack(const float* b, int64_t k,
                                                                 int64_t n, bool trans_b,
                                                                 int64_t ldb);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  size_t bytes() const { return bytes_; }  // what the panels hold in memory
  const float* panel(int64_t p) const { return data_.get() + p * k_ * kPanel; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  PackedGemmB(int64_t k, int64_t n, size_t bytes, float* data)
      : k_(k), n_(n), bytes_(bytes), data_(data) {}

  int64_t k_, n_;
  size_t bytes_;
  std::unique_ptr<float[], Free> data_;
};

// C[rows, n] = alpha * A x B, or C += alpha * A x B when `accumulate`; C is row-major with
// leading dimension ldc. A[i][p] is a[i * a_row_stride + p * a_k_stride] (row-major A: lda and
// 1; transposed: 1 and lda). Runs on at most `threads` threads of the calling thread's OpenMP
// team. The caller checks that AVX2 and FMA are available (Kiln's baseline).
void PackedGemmAvx2(int64_t rows, const float* a, int64_t a_row_stride, int64_t a_k_stride,
                    const PackedGemmB& b, float alpha, bool accumulate, float* c, int64_t ldc,
                    int threads);

}  // namespace kiln::kernels::nn
