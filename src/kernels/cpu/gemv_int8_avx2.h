// Kiln's own u8 x s8 -> int32 product for a few rows on AVX2 without VNNI, on constant int8
// weights packed once per model: the int8 analog of gemm_avx2_packed.h for
// kiln::DynamicQuantMatMul (nn_int8_matmul.cc).
//
// Why: there oneDNN 2.6 runs the int8 matmul as gemm:jit on plain weights, which at one row
// reads them at about 16 GB/s (1x4096x4096: 1.05 ms for 16 MB, `DNNL_VERBOSE=1`, 2-core EPYC
// capped to AVX2), slower than the fp32 GEMV reads four times the bytes: int8 MLP layers at
// batch 1 ran no faster than fp32. Streaming packed panels reads them at memory speed.
//
// Exactness: the weights must lie in [-64, 64] (the compression pass's 7-bit weights where
// the CPU has no VNNI), so that vpmaddubsw's pair sums of u8 x s8 products (at most
// 255 * 64 * 2 = 32640) never saturate int16; vpmaddwd then adds pairs into int32. Every
// output is the exact integer sum, the same as oneDNN's.
//
// Layout: columns in panels of 16; panel p holds, for each group of 4 k's, 16 columns x 4
// bytes (column j's w[4g..4g+3][16p + j]) = 64 bytes, so a panel is one stream over K. K and
// the last panel are padded with zeros.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace kiln::kernels::nn {

class PackedInt8GemvB {
 public:
  static constexpr int64_t kPanel = 16;     // columns per panel
  static constexpr int64_t kMaxRows = 4;    // rows per product (accumulators per panel)
  static constexpr int kMaxMagnitude = 64;  // |w| bound for exact int16 pair sums

  // Packs w ([k, n] row-major). FailedPrecondition when a weight is outside [-64, 64];
  // ResourceExhausted when the panels cannot be allocated.
  static absl::StatusOr<std::shared_ptr<const PackedInt8GemvB>> Pack(const int8_t* w, int64_t k,
                                                                     int64_t n);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  size_t bytes() const { return bytes_; }

  // acc[r * n + j] = sum_i a[r * lda + i] * w[i][j] for rows r < rows (at most kMaxRows) and
  // the columns of panels [p0, p1).
  void Multiply(int64_t rows, const uint8_t* a, int64_t lda, int64_t p0, int64_t p1,
                int32_t* acc) const;

 private:
  struct Free {
    void operator()(int8_t* p) const;
  };
  PackedInt8GemvB(int64_t k, int64_t n, size_t bytes, int8_t* data)
      : k_(k), n_(n), bytes_(bytes), data_(data) {}
  int64_t groups() const { return (k_ + 3) / 4; }

  int64_t k_, n_;
  size_t bytes_;
  std::unique_ptr<int8_t[], Free> data_;
};

}  // namespace kiln::kernels::nn
