// Kiln's own Winograd F(4x4, 3x3) convolution for AVX2 (issue 9): 3x3, stride 1, no dilation,
// no groups, fp32, activations in nChw8c (the layout AVX2 plans keep between convolutions).
//
// Why: oneDNN 2.6 has Winograd only for AVX-512, so on an AVX2 server every 3x3 convolution
// ran direct, where ONNX Runtime's and Kiln's direct convolutions are both near the FMA peak
// and can only tie; F(4,3) does the same convolution with 4x fewer multiplies (36 per 4x4
// output tile and channel pair instead of 144).
//
// How (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", with the points
// 0, +-1, +-2 and infinity, as oneDNN's and NNPACK's F(4,3)):
//  - weights: U = G g G^T (6x6 per output and input channel), computed once per model in
//    double and rounded to float, as 36 [C, K] matrices packed for gemm_avx2_packed.h;
//  - per block of output tiles (a thread each): V = B^T d B for each 6x6 input tile (8
//    channels per vector, zero outside the image), 36 products M = V x U on the packed
//    weights, then Y = A^T M A + bias for each 4x4 output tile.
// A block's V and M (36 x tiles x channels each) are sized to stay in L2.
//
// Rounding differs from the direct sum (max |error| / max |output| ~1e-6 on ResNet-18's
// shapes, as oneDNN's Winograd). The transforms mix a whole tile, so a NaN or infinity in the
// input reaches outputs the direct sum leaves finite: Run reports whether every output it
// wrote (convolution plus bias, before post-ops) is finite, and the caller recomputes the
// convolution directly when not (nn_conv_winograd.h's rule).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "gemm_avx2_packed.h"

namespace kiln::kernels::nn {

// The transformed weights, shared by every plan of a model.
class WinogradF43Weights {
 public:
  static constexpr int kPoints = 36;  // 6x6 transformed positions

  // `w` is the plain [K, C, 3, 3] weight. ResourceExhausted when memory runs out.
  static absl::StatusOr<std::shared_ptr<const WinogradF43Weights>> Make(const float* w, int64_t k,
                                                                        int64_t c);
  int64_t k() const { return k_; }
  int64_t c() const { return c_; }
  const PackedGemmB& u(int point) const { return *u_[point]; }
  size_t bytes() const;

 private:
  int64_t k_ = 0, c_ = 0;
  std::vector<std::shared_ptr<const PackedGemmB>> u_;  // kPoints of [C, K]
};

// One convolution's geometry: X [n, c, h, w] and Y [n, k, out_h, out_w], both nChw8c (c and k
// multiples of 8), padded by pad_top/pad_left before the first row/column (the bottom and
// right padding follow from the sizes).
struct WinogradF43Shape {
  int64_t n = 0, c = 0, k = 0, h = 0, w = 0, out_h = 0, out_w = 0, pad_top = 0, pad_left = 0;
};

class WinogradF43 {
 public:
  // Whether the geometry is one this kernel runs (channels in whole blocks of 8).
  static bool Supports(const WinogradF43Shape& s);

  WinogradF43(const WinogradF43Shape& shape, int threads);
  // Scratch Run needs: per thread, a block's V and M.
  size_t scratch_bytes() const { return static_cast<size_t>(chunks_) * chunk_bytes_; }
  int64_t output_floats() const { return s_.n * s_.k * s_.out_h * s_.out_w; }
  // Y = conv(X) + bias (bias may be null), on up to `threads` OpenMP threads; `scratch` is
  // scratch_bytes() long and 64-byte aligned. Returns whether every output is finite.
  bool Run(const WinogradF43Weights& weights, const float* x, const float* bias, float* y,
           char* scratch) const;

 private:
  WinogradF43Shape s_;
  int threads_ = 1;
  int64_t tiles_h_ = 0, tiles_w_ = 0, tiles_ = 0;
  int64_t block_tiles_ = 0;  // tiles per block
  int64_t blocks_ = 0, chunks_ = 0;
  size_t chunk_bytes_ = 0;
};

}  // namespace kiln::kernels::nn
