// Winograd convolution for 3x3 stride-1 fp32 Conv, on oneDNN's Winograd implementations
// (jit_fp32_wino_2x3 / jit_wino_4x3 on avx512_core) and, where oneDNN has none (oneDNN 2.6 has
// none for AVX2), on Kiln's own F(4,3) for activations in nChw8c, the layout AVX2 plans keep
// (conv_winograd_avx2.h).
//
// Winograd F(2,3)/F(4,3) computes the same convolution with 2.25-4x fewer multiplies, through
// input/output tile transforms whose rounding differs from the direct sum: an fp32-accuracy-
// bounded transform (measured max |error| / max |output| ~1e-6 on ResNet-18's shapes; see
// docs/performance/runtime.md), the trade ONNX Runtime and oneDNN make when they use it.
//
// The transforms mix every input of a tile into every output of the tile, so a NaN or infinity
// in the input (or one the transform's intermediate sums overflow to) would reach outputs the
// direct convolution leaves finite, and Inf - Inf turns infinities into NaN. Kiln's rule is that
// an optimization never changes what the unoptimized graph computes there: after a Winograd run
// the output is scanned, and if it holds any NaN or infinity the convolution is recomputed
// directly (on the plan's layouts and the weights' plain bytes), so such inputs give exactly
// the direct convolution's result. Winograd is used only with post-ops inside oneDNN that keep
// a NaN or infinity non-finite (none, ReLU, the residual sum), so the scan cannot miss one.
//
// Kiln's own F(4,3) runs before the direct primitive, which it leaves unused unless an output
// is not finite: then the direct primitive computes the whole output. It applies every
// post-op itself, after its non-finite check.
//
// Per convolution, at plan compile, both algorithms are timed on scratch data for the plan's
// shapes and layouts (reorders into Winograd's blocked layout included) and Winograd is taken
// when it is faster by kMinWinogradGain. KILN_CONV_WINOGRAD=0 (or off) keeps every convolution
// direct; =1 (or on) takes Winograd wherever oneDNN has it (tests, measurements); unset or auto
// times. Either way the transformed weights are packed once per layout, node and model, and
// shared by the plans of every batch size oneDNN runs on that layout (its layout depends on
// the batch size, one layout covering a range of them); a node packs at most
// kMaxWinogradLayouts (3) layouts, and a plan that fits none of them once all are taken stays
// direct.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv_winograd_avx2.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"
#include "kiln/kernels/packed_constants.h"

namespace kiln::kernels::nn {

enum class WinogradMode { kAuto, kOff, kOn };

// KILN_CONV_WINOGRAD: unset, "" or auto -> kAuto; 0/off -> kOff; 1/on -> kOn; anything else is
// InvalidArgument (naming the variable and value).
absl::StatusOr<WinogradMode> ReadWinogradMode();

// Whether all n floats are finite, scanned on up to `threads` OpenMP threads.
bool AllFinite(const float* data, int64_t n, int threads);

// What a convolution's Reshape knows when it chooses its algorithm.
struct WinogradQuery {
  const ir::Node* node = nullptr;
  bool creating = false;  // Create's packing pass: stays direct (the plans choose)
  int64_t group = 1, c = 0, m = 0;
  std::vector<int64_t> kernel, strides, dilations;
  const InputInfo* w = nullptr;
  const std::vector<ir::PostOp>* post_ops = nullptr;  // the node's fused post-ops
  const std::vector<ir::PostOp>* epilogue = nullptr;  // those run after the primitive
  bool has_residual = false;
  // The direct convolution's descriptor; its Winograd twin differs only in the algorithm.
  const dnnl::convolution_forward::desc* direct = nullptr;
  const dnnl::primitive_attr* attr = nullptr;
  // The plan's layouts of X, Y and the residual, and the weights' plain layout.
  dnnl::memory::desc user_x, user_y, user_r, user_w, bias;
  ir::MemoryLayout x_layout = ir::MemoryLayout::kPlain, y_layout = ir::MemoryLayout::kPlain,
                   r_layout = ir::MemoryLayout::kPlain;
  dnnl::memory::dims strides_dnnl, dilations_dnnl, pads_begin, pads_end;
  int threads = 1;
  // The model's store (ReshapeContext::packed_constants), where the timed decision is kept per
  // shape, layouts and post-ops; null: timed on every call.
  PackedConstantCache* cache = nullptr;
};

// One convolution's algorithm, chosen per plan (ReshapeImpl), and the direct fallback a
// Winograd run needs when its output is not finite.
class ConvWinograd {
 public:
  // Chooses the algorithm for `q` (see the file comment). Leaves the object inactive (direct)
  // when the geometry, weights or post-ops do not allow Winograd, oneDNN has no Winograd
  // implementation, or direct is as fast.
  absl::Status Choose(const WinogradQuery& q);
  // oneDNN's Winograd primitive replaces the direct one.
  bool active() const { return active_; }
  // Kiln's own F(4,3) runs first (RunOwn); the direct primitive stays for non-finite outputs.
  bool own() const { return own_weights_ != nullptr; }
  // The descriptor to build the primitive from (only when active).
  const dnnl::convolution_forward::desc& desc() const { return *winograd_desc_; }
  // Why this algorithm (for logs and tests).
  const std::string& why() const { return why_; }
  // Reserves the fallback's oneDNN scratchpad, or Kiln's Winograd's blocks, at *offset
  // (advancing it); nothing when direct.
  void ReserveScratch(size_t* offset);
  // Kiln's own F(4,3): Y = conv(X) + bias, then the node's post-ops (`residual` for the sum;
  // read, not overwritten). Returns false, having written garbage to Y, when the convolution
  // gave a NaN or infinity: the caller then runs the direct primitive.
  bool RunOwn(const float* x, const float* bias, const float* residual, float* y, char* scratch,
              int threads) const;
  // After the Winograd primitive wrote `y` (the plan's layout, before the epilogue): if any
  // output is NaN or infinite, recomputes it with the direct convolution from `x` (the plan's
  // layout), the weights' plain bytes `w`, `bias` (or null) and `residual` (or null; copied
  // into y first, as the sum post-op reads it). Returns whether it recomputed.
  bool RecomputeIfNotFinite(const void* x, const void* w, const void* bias, const void* residual,
                            void* y, char* scratch, int threads, dnnl::stream& stream) const;

 private:
  bool active_ = false;
  std::string why_;
  std::optional<dnnl::convolution_forward::desc> winograd_desc_;
  dnnl::memory::desc user_x_, user_y_, user_w_, bias_, fallback_scratch_;
  dnnl::primitive fallback_;
  size_t fallback_offset_ = 0;

  absl::Status ChooseOwn(const WinogradQuery& q, WinogradMode mode);
  std::shared_ptr<const WinogradF43Weights> own_weights_;  // shared by the model's plans
  std::optional<WinogradF43> own_;
  std::vector<ir::PostOp> own_post_ops_;
  size_t own_offset_ = 0;
};

}  // namespace kiln::kernels::nn
