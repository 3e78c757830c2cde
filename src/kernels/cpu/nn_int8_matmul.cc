// kiln::DynamicQuantMatMul and kiln::Bf16MatMul, the compressed Linear layers written by
// src/opt/compress_matmul.cc, and kiln::Int8MatMul (src/opt/fuse_qdq_matmul.cc); the operator
// contract is include/kiln/ir/compressed_matmul.h.
//
// int8: A is quantized per row (u8, its own scale and zero point) into scratch, oneDNN's
// matmul multiplies u8 x s8 into int32 with the weights packed once per model (the
// PackedConstantCache), and one pass over the int32 result dequantizes, adds the bias and
// applies the post-ops. The zero points are not given to oneDNN: per-row zero points are not
// among its matmul attributes, and acc - a_zero[m] * colsum[n] is exact in int32.
//
// Int8MatMul: already-quantized models' MatMuls (QLinearMatMul, MatMulInteger, QDQ) on
// oneDNN's u8 x s8 matmul, exact in int32 against the reference kernels (below).
//
// bf16: oneDNN's bf16 matmul (A rounded to bf16 in scratch, fp32 accumulation) where the CPU
// has avx512_bf16/AMX; elsewhere products of a few rows widen the bf16 weights as they read
// them (half the bytes of fp32: these products wait on memory), and larger ones use an fp32
// copy packed once per model.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gemv_int8_avx2.h"
#include "kernels/cpu/simd/ops.h"
#include "kiln/core/status.h"
#include "kiln/ir/compressed_matmul.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/kernels/compressed_matmul.h"
#include "kiln/kernels/kernel.h"
#include "nn_dnnl.h"
#include "nn_dnnl_run_state.h"

namespace kiln::kernels {

bool CpuHasInt8Vnni() {
  nn::CpuEngine();  // applies Kiln's ISA cap to oneDNN first
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
         (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
}

bool CpuHasBf16MatMul() {
  nn::CpuEngine();
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

namespace nn {
namespace {

using dnnl::memory;

// Rows x K products below this many multiply-adds run on the calling thread (as MatMul).
constexpr int64_t kSerialMacs = int64_t{1} << 18;
// Elementwise passes (quantizing A, dequantizing the product) give each thread at least this
// many elements: a parallel region costs microseconds (more when other processes hold the
// cores), and 64K elements of these loops take tens of microseconds. (At 256K, BERT-4's
// 128 x 1024 FFN input at batch 1 was quantized on one thread: int8 batch 1 p50 3.44-3.57 ->
// 3.39-3.48 ms on AVX2, 1.83-1.95 -> 1.73-1.79 ms with VNNI, interleaved.)
constexpr int64_t kMinElementsPerThread = int64_t{1} << 16;

// What both kernels share: A [..., K] as rows, the [K, N] weight, bias, residual, post-ops.
class CompressedMatMulBase : public DnnlKernel {
 protected:
  using DnnlKernel::DnnlKernel;

  // Checks A and the weight (input 1, `weight_dtype`), sets the output; `first_optional` is
  // the index of the bias input.
  absl::Status PrepareShapes(ReshapeContext& ctx, DType weight_dtype, size_t first_optional) {
    KILN_ASSIGN_OR_RETURN(post_ops_, ReadPostOps(node_));
    heavy_post_ops_ = HasHeavyActivation(post_ops_);
    const bool has_residual = std::any_of(post_ops_.begin(), post_ops_.end(),
                                          [](const PostOp& p) { return p.kind == "Add"; });
    if (ctx.inputs.size() < first_optional || !ctx.inputs[0].present() ||
        !ctx.inputs[1].present()) {
      return Error("needs inputs A and the weight");
    }
    if (ctx.inputs[0].dtype != DType::kFloat32) return Error("A must be float");
    const Shape& a = ctx.inputs[0].shape;
    const Shape& w = ctx.inputs[1].shape;
    if (ctx.inputs[1].dtype != weight_dtype || w.rank() != 2) {
      return Error("the weight must be ", DTypeName(weight_dtype), " [K, N]; got ",
                   DTypeName(ctx.inputs[1].dtype), w.ToString());
    }
    k_ = w.dim(0);
    n_ = w.dim(1);
    if (a.rank() < 1 || a.dim(a.rank() - 1) != k_) {
      return Error("A ", a.ToString(), " does not end in K = ", k_);
    }
    rows_ = k_ == 0 ? 0 : a.num_elements() / k_;
    bias_index_ = ctx.inputs.size() > first_optional && ctx.inputs[first_optional].present()
                      ? static_cast<int>(first_optional)
                      : -1;
    if (bias_index_ >= 0 && (ctx.inputs[bias_index_].dtype != DType::kFloat32 ||
                             ctx.inputs[bias_index_].shape.num_elements() != n_)) {
      return Error("bias must be float [", n_, "]");
    }
    Shape out = a;
    out.erase(out.rank() - 1);
    out.push_back(n_);
    residual_index_ = has_residual ? static_cast<int>(ctx.inputs.size()) - 1 : -1;
    if (residual_index_ >= 0 && (residual_index_ <= static_cast<int>(first_optional) ||
                                 ctx.inputs[residual_index_].shape != out)) {
      return Error("residual must match the output ", out.ToString());
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = out;
    return absl::OkStatus();
  }

  template <typename... Args>
  absl::Status Error(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", args...));
  }

  // Bias and post-ops on rows [r0, r1) of y, whose values are the bare products.
  void FinishRows(const ComputeContext& ctx, float* y, int64_t r0, int64_t r1) const {
    FinishRows(ctx, y, r0, r1, [](int64_t, int64_t) {});
  }

  // As above, with `produce(b0, b1)` first writing the bare products of rows [b0, b1). The
  // rows go in blocks of about kBlockFloats, so a block stays in cache from the pass that
  // writes it to the last post-op: whole-output passes, one per step, read an output larger
  // than the cache again each time (BERT's 4096 x 1024 FFN activations at batch 32).
  template <typename Produce>
  void FinishRows(const ComputeContext& ctx, float* y, int64_t r0, int64_t r1,
                  Produce produce) const {
    const float* bias = bias_index_ >= 0 ? ctx.inputs[bias_index_].data<float>() : nullptr;
    const float* residual =
        residual_index_ >= 0 ? ctx.inputs[residual_index_].data<float>() : nullptr;
    const int64_t block = std::max<int64_t>(1, kBlockFloats / std::max<int64_t>(n_, 1));
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
      const int64_t b1 = std::min(r1, b0 + block);
      produce(b0, b1);
      if (bias != nullptr) {
        for (int64_t r = b0; r < b1; ++r) {
          float* row = y + r * n_;
          for (int64_t j = 0; j < n_; ++j) row[j] += bias[j];
        }
      }
      if (!post_ops_.empty()) {
        ApplyPostOpsInOrder(post_ops_, residual != nullptr ? residual + b0 * n_ : nullptr,
                            y + b0 * n_, (b1 - b0) * n_);
      }
    }
  }

  // Rows per thread for FinishRows: at least kMinElementsPerThread outputs, or
  // kMinHeavyElementsPerThread when a post-op is heavy (BERT's FFN Gelu over 128 x 1024 at
  // batch 1 ran on one thread).
  int64_t FinishRowsPerThread() const {
    const int64_t elements = heavy_post_ops_ ? kMinHeavyElementsPerThread : kMinElementsPerThread;
    return std::max<int64_t>(1, elements / std::max<int64_t>(n_, 1));
  }

  // 32 KB: a block of rows fits the first-level data cache.
  static constexpr int64_t kBlockFloats = 8192;

  std::vector<PostOp> post_ops_;
  bool heavy_post_ops_ = false;  // HasHeavyActivation(post_ops_), decided at Reshape
  int64_t k_ = 0, n_ = 0, rows_ = 0;
  int bias_index_ = -1, residual_index_ = -1;
};

class DynamicQuantMatMulKernel : public CompressedMatMulBase {
 public:
  explicit DynamicQuantMatMulKernel(const ir::Node& node) : CompressedMatMulBase(node) {}

 private:
  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareShapes(ctx, DType::kInt8, 4));
    for (int i : {2, 3}) {
      const DType want = i == 2 ? DType::kFloat32 : DType::kInt32;
      if (!ctx.inputs[i].present() || ctx.inputs[i].dtype != want ||
          ctx.inputs[i].shape.num_elements() != n_) {
        return Error(i == 2 ? "w_scale must be float [" : "w_colsum must be int32 [", n_, "]");
      }
    }
    packed_w_.reset();
    gemv_w_.reset();
    ctx.scratch_bytes = 0;
    if (rows_ == 0 || n_ == 0) return absl::OkStatus();
    const bool w_constant = ctx.inputs[1].constant != nullptr;
    const ir::Node& cache_node = ctx.node ? *ctx.node : node_;
    if (w_constant && rows_ <= PackedInt8GemvB::kMaxRows && k_ > 0 && !CpuHasInt8Vnni()) {
      // A few rows without VNNI: Kiln's streaming product (gemv_int8_avx2.h), where the
      // weights are 7-bit; oneDNN otherwise.
      const int8_t* w = ctx.inputs[1].constant->data<int8_t>();
      absl::StatusOr<std::shared_ptr<const PackedInt8GemvB>> packed;
      if (ctx.packed_constants == nullptr) {
        packed = PackedInt8GemvB::Pack(w, k_, n_);
      } else {
        packed = ctx.packed_constants->GetOrCreate<PackedInt8GemvB>(
            &cache_node, "int8-gemv-avx2",
            [&]() -> absl::StatusOr<std::pair<std::shared_ptr<const PackedInt8GemvB>, size_t>> {
              KILN_ASSIGN_OR_RETURN(auto made, PackedInt8GemvB::Pack(w, k_, n_));
              const size_t bytes = made->bytes();
              return std::make_pair(std::move(made), bytes);
            });
      }
      if (packed.ok()) {
        gemv_w_ = *std::move(packed);
      } else if (!absl::IsFailedPrecondition(packed.status())) {
        return packed.status();  // out of memory
      }
    }
    src_desc_ = memory::desc({rows_, k_}, memory::data_type::u8, memory::format_tag::ab);
    user_w_desc_ = memory::desc({k_, n_}, memory::data_type::s8, memory::format_tag::ab);
    acc_desc_ = memory::desc({rows_, n_}, memory::data_type::s32, memory::format_tag::ab);
    dnnl_scratch_bytes_ = 0;
    if (gemv_w_ == nullptr) {  // oneDNN's product
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const memory::desc w_any =
          w_constant ? memory::desc({k_, n_}, memory::data_type::s8, memory::format_tag::any)
                     : user_w_desc_;
      dnnl::matmul::desc d(src_desc_, w_any, acc_desc_);
      dnnl::matmul::primitive_desc pd(d, attr, CpuEngine());
      w_desc_ = pd.weights_desc();
      if (w_constant && w_desc_ != user_w_desc_) {
        KILN_ASSIGN_OR_RETURN(packed_w_,
                              PackConstant(ctx.packed_constants, cache_node, user_w_desc_,
                                           ctx.inputs[1].constant->raw_data(), w_desc_));
      } else {
        w_desc_ = user_w_desc_;
      }
      primitive_ = dnnl::matmul(pd);
      scratch_desc_ = pd.scratchpad_desc();
      dnnl_scratch_bytes_ = Align64(scratch_desc_.get_size());
    }
    // Scratch: oneDNN's | A as u8 | int32 products | per row: scale, zero point, non-finite.
    src_offset_ = dnnl_scratch_bytes_;
    acc_offset_ = src_offset_ + Align64(rows_ * k_);
    scale_offset_ = acc_offset_ + Align64(rows_ * n_ * sizeof(int32_t));
    zero_offset_ = scale_offset_ + Align64(rows_ * sizeof(float));
    bad_offset_ = zero_offset_ + Align64(rows_ * sizeof(int32_t));
    ctx.scratch_bytes = bad_offset_ + Align64(rows_);
    macs_ = rows_ * k_ * n_;
    return absl::OkStatus();
  }

  // Per run state: the primitive's memory objects and arguments (kernel.h's KernelRunState).
  std::unique_ptr<SrcWeightsDstRunState> MakeRunState() const {
    return SrcWeightsDstRunState::Make(src_desc_, w_desc_, packed_w_.get(), memory::desc(),
                                       acc_desc_, scratch_desc_);
  }
  std::unique_ptr<KernelRunState> NewRunState() const override {
    if (gemv_w_ != nullptr) return nullptr;  // no oneDNN call
    return NewDnnlRunState([&] { return MakeRunState(); });
  }

  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    Tensor& y = ctx.outputs[0];
    if (y.num_elements() == 0) return absl::OkStatus();
    float* yv = y.data<float>();
    if (k_ == 0) {  // an empty sum: bias and post-ops of zeros
      std::fill(yv, yv + y.num_elements(), 0.0f);
      FinishRows(ctx, yv, 0, rows_);
      return absl::OkStatus();
    }
    char* scratch = static_cast<char*>(ctx.scratch);
    uint8_t* src = reinterpret_cast<uint8_t*>(scratch + src_offset_);
    int32_t* acc = reinterpret_cast<int32_t*>(scratch + acc_offset_);
    float* a_scale = reinterpret_cast<float*>(scratch + scale_offset_);
    int32_t* a_zero = reinterpret_cast<int32_t*>(scratch + zero_offset_);
    uint8_t* bad = reinterpret_cast<uint8_t*>(scratch + bad_offset_);
    const float* a = ctx.inputs[0].data<float>();
    const int64_t row_chunk =
        std::max<int64_t>(1, kMinElementsPerThread / std::max<int64_t>(k_, 1));
    // Row r of A into u8 with its own scale and zero point, at the widest ISA allowed; rows
    // holding NaN or Inf are marked.
    const simd::Kernels& vector = simd::Best();
    ctx.ParallelFor(rows_, row_chunk, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        bad[r] = !vector.quantize_row_u8(a + r * k_, k_, src + r * k_, &a_scale[r], &a_zero[r]);
      }
    });
    if (gemv_w_ != nullptr) {
      // Panels of 16 columns, at least 8 per thread (a 4096-deep panel is 64 KB).
      ctx.ParallelFor(
          gemv_w_->panels(), macs_ < kSerialMacs ? gemv_w_->panels() : 8,
          [&](int64_t p0, int64_t p1) { gemv_w_->Multiply(rows_, src, k_, p0, p1, acc); });
    } else {
      ScopedDnnlThreads threads(macs_ < kSerialMacs ? 1 : ctx.intra_op_threads);
      auto& stream = ThreadStream();
      std::unique_ptr<SrcWeightsDstRunState> owned;
      const SrcWeightsDstRunState& s = RunStateFor(ctx, owned, [&] { return MakeRunState(); });
      s.Execute(primitive_, stream, src, ctx.inputs[1].raw_data(), nullptr, acc, scratch);
    }
    const float* w_scale = ctx.inputs[2].data<float>();
    const int32_t* colsum = ctx.inputs[3].data<int32_t>();
    const int8_t* wq = ctx.inputs[1].data<int8_t>();
    ctx.ParallelFor(rows_, FinishRowsPerThread(), [&](int64_t r0, int64_t r1) {
      FinishRows(ctx, yv, r0, r1, [&](int64_t b0, int64_t b1) {
        for (int64_t r = b0; r < b1; ++r) {
          float* row = yv + r * n_;
          if (bad[r]) {
            // NaN/Inf in this row: float products on the dequantized weights, as fp32 would.
            const float* ar = a + r * k_;
            std::fill(row, row + n_, 0.0f);
            for (int64_t i = 0; i < k_; ++i) {
              const int8_t* wr = wq + i * n_;
              for (int64_t j = 0; j < n_; ++j) row[j] += ar[i] * (wr[j] * w_scale[j]);
            }
            continue;
          }
          vector.dequantize_row(acc + r * n_, colsum, w_scale, a_zero[r], a_scale[r], row, n_);
        }
      });
    });
    return absl::OkStatus();
  }

  memory::desc src_desc_, user_w_desc_, w_desc_, acc_desc_, scratch_desc_;
  std::shared_ptr<const dnnl::memory> packed_w_;   // shared by the model's plans
  std::shared_ptr<const PackedInt8GemvB> gemv_w_;  // set: the product runs there, not oneDNN
  dnnl::matmul primitive_;
  size_t dnnl_scratch_bytes_ = 0, src_offset_ = 0, acc_offset_ = 0, scale_offset_ = 0,
         zero_offset_ = 0, bad_offset_ = 0;
  int64_t macs_ = 0;
};

class Bf16MatMulKernel : public CompressedMatMulBase {
 public:
  explicit Bf16MatMulKernel(const ir::Node& node) : CompressedMatMulBase(node) {}

 private:
  // Products of at most this many rows widen the weights as they read them (bytes-bound).
  static constexpr int64_t kStreamingRows = 8;
  enum class Path { kNone, kDnnlBf16, kStreaming, kWidenedF32 };

  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareShapes(ctx, DType::kBFloat16, 2));
    packed_w_.reset();
    ctx.scratch_bytes = 0;
    path_ = Path::kNone;
    if (rows_ == 0 || n_ == 0 || k_ == 0) return absl::OkStatus();
    macs_ = rows_ * k_ * n_;
    const bool w_constant = ctx.inputs[1].constant != nullptr;
    const ir::Node& cache_node = ctx.node ? *ctx.node : node_;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dst_desc_ = memory::desc({rows_, n_}, memory::data_type::f32, memory::format_tag::ab);
    if (CpuHasBf16MatMul()) {
      path_ = Path::kDnnlBf16;
      src_desc_ = memory::desc({rows_, k_}, memory::data_type::bf16, memory::format_tag::ab);
      user_w_desc_ = memory::desc({k_, n_}, memory::data_type::bf16, memory::format_tag::ab);
    } else if (rows_ <= kStreamingRows || !w_constant) {
      path_ = Path::kStreaming;
      return absl::OkStatus();
    } else {
      path_ = Path::kWidenedF32;
      src_desc_ = memory::desc({rows_, k_}, memory::data_type::f32, memory::format_tag::ab);
      user_w_desc_ = memory::desc({k_, n_}, memory::data_type::f32, memory::format_tag::ab);
    }
    const memory::desc w_any =
        w_constant ? memory::desc({k_, n_}, user_w_desc_.data_type(), memory::format_tag::any)
                   : user_w_desc_;
    dnnl::matmul::desc d(src_desc_, w_any, dst_desc_);
    dnnl::matmul::primitive_desc pd(d, attr, CpuEngine());
    w_desc_ = pd.weights_desc();
    if (path_ == Path::kWidenedF32) {
      // The fp32 copy exists only in packed form; the widened plain rows are temporary.
      std::vector<float> widened(static_cast<size_t>(k_ * n_));
      const uint16_t* wb = static_cast<const uint16_t*>(ctx.inputs[1].constant->raw_data());
      for (size_t i = 0; i < widened.size(); ++i) widened[i] = BFloat16ToFloat(wb[i]);
      KILN_ASSIGN_OR_RETURN(packed_w_, PackConstant(ctx.packed_constants, cache_node, user_w_desc_,
                                                    widened.data(), w_desc_));
    } else if (w_constant && w_desc_ != user_w_desc_) {
      KILN_ASSIGN_OR_RETURN(packed_w_, PackConstant(ctx.packed_constants, cache_node, user_w_desc_,
                                                    ctx.inputs[1].constant->raw_data(), w_desc_));
    } else {
      w_desc_ = user_w_desc_;
    }
    primitive_ = dnnl::matmul(pd);
    scratch_desc_ = pd.scratchpad_desc();
    src_offset_ = Align64(scratch_desc_.get_size());
    ctx.scratch_bytes =
        src_offset_ + (path_ == Path::kDnnlBf16 ? Align64(rows_ * k_ * sizeof(uint16_t)) : 0);
    return absl::OkStatus();
  }

  // Per run state: the primitive's memory objects and arguments (kernel.h's KernelRunState).
  std::unique_ptr<SrcWeightsDstRunState> MakeRunState() const {
    return SrcWeightsDstRunState::Make(src_desc_, w_desc_, packed_w_.get(), memory::desc(),
                                       dst_desc_, scratch_desc_);
  }
  std::unique_ptr<KernelRunState> NewRunState() const override {
    return NewDnnlRunState([&] { return MakeRunState(); });
  }

  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    Tensor& y = ctx.outputs[0];
    if (y.num_elements() == 0) return absl::OkStatus();
    float* yv = y.data<float>();
    const float* a = ctx.inputs[0].data<float>();
    const uint16_t* wb = static_cast<const uint16_t*>(ctx.inputs[1].raw_data());
    if (path_ == Path::kNone) {  // K == 0: an empty sum
      std::fill(yv, yv + y.num_elements(), 0.0f);
      FinishRows(ctx, yv, 0, rows_);
      return absl::OkStatus();
    }
    if (path_ == Path::kStreaming) {
      // Each thread owns a block of columns and walks K once, widening each bf16 weight
      // (its bits shifted up) as it is read.
      const int64_t col_chunk = std::max<int64_t>(64, 65536 / std::max<int64_t>(k_, 1));
      ctx.ParallelFor(n_, col_chunk, [&](int64_t c0, int64_t c1) {
        for (int64_t r = 0; r < rows_; ++r) {
          float* row = yv + r * n_;
          std::fill(row + c0, row + c1, 0.0f);
          const float* ar = a + r * k_;
          for (int64_t i = 0; i < k_; ++i) {
            const float av = ar[i];
            const uint16_t* wr = wb + i * n_;
            for (int64_t j = c0; j < c1; ++j) {
              const uint32_t bits = static_cast<uint32_t>(wr[j]) << 16;
              float w;
              std::memcpy(&w, &bits, sizeof(w));
              row[j] += av * w;
            }
          }
        }
      });
      FinishRows(ctx, yv, 0, rows_);
      return absl::OkStatus();
    }
    char* scratch = static_cast<char*>(ctx.scratch);
    const void* src = a;
    if (path_ == Path::kDnnlBf16) {
      uint16_t* a16 = reinterpret_cast<uint16_t*>(scratch + src_offset_);
      ctx.ParallelFor(rows_ * k_, kMinElementsPerThread, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) a16[i] = FloatToBFloat16(a[i]);
      });
      src = a16;
    }
    {
      ScopedDnnlThreads threads(macs_ < kSerialMacs ? 1 : ctx.intra_op_threads);
      auto& stream = ThreadStream();
      std::unique_ptr<SrcWeightsDstRunState> owned;
      const SrcWeightsDstRunState& s = RunStateFor(ctx, owned, [&] { return MakeRunState(); });
      s.Execute(primitive_, stream, src, wb, nullptr, yv, scratch);
    }
    ctx.ParallelFor(rows_, FinishRowsPerThread(),
                    [&](int64_t r0, int64_t r1) { FinishRows(ctx, yv, r0, r1); });
    return absl::OkStatus();
  }

  Path path_ = Path::kNone;
  memory::desc src_desc_, user_w_desc_, w_desc_, dst_desc_, scratch_desc_;
  std::shared_ptr<const dnnl::memory> packed_w_;
  dnnl::matmul primitive_;
  size_t src_offset_ = 0;
  int64_t macs_ = 0;
};

// kiln::Int8MatMul: the MatMuls of already-quantized models (ir/compressed_matmul.h). oneDNN
// multiplies A (as u8) by the s8 weights into int32; the zero points are applied here, exactly
// in int32: with P = A_u . Wq,
//   acc = P - w_zero[n] * rowsum(A_u)[m] - a_zero * colsum[n] + K * a_zero * w_zero[n]
// (wrap-around arithmetic, like the reference's int32 sum), so the result is the reference's
// bit for bit whatever the zero points, which oneDNN 2.6's matmul does not take per column.
class Int8MatMulKernel : public DnnlKernel {
 public:
  explicit Int8MatMulKernel(const ir::Node& node) : DnnlKernel(node) {}

 private:
  template <typename... Args>
  absl::Status Error(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", args...));
  }

  // Once per node per model: the attributes, then the weights packed (split in halves first
  // where the ISA needs it) into the layout oneDNN picks for the rows the graph records (1
  // where it leaves them open), shared by the plans whose primitive picks the same.
  absl::Status CreateImpl(CreateContext& ctx) override {
    const std::string out_type = node_.GetString("out_type", "int32");
    if (out_type != "int32" && out_type != "uint8" && out_type != "int8") {
      return Error("out_type must be int32, uint8 or int8");
    }
    if (out_type == "int32" && node_.GetInt("relu", 0) != 0) {
      return Error("relu needs an 8-bit out_type");
    }
    if (out_type != "int32") {
      const int64_t y_zero = node_.GetInt("y_zero_point", 0);
      const int64_t lo = out_type == "uint8" ? 0 : -128;
      if (y_zero < lo || y_zero > lo + 255) return Error("y_zero_point out of range");
    }
    if (ctx.inputs.size() < 4 || ctx.inputs[0].shape.rank() < 1) return absl::OkStatus();
    Shape a_shape = ctx.inputs[0].shape;
    for (int i = 0; i < a_shape.rank(); ++i) {
      if (a_shape.dim(i) < 0) a_shape.set_dim(i, 1);
    }
    const absl::Status packed = ReshapeForCreate(ctx, a_shape, &creating_,
                                                 [&](ReshapeContext& c) { return ReshapeImpl(c); });
    // Not a shape the plans will have: Reshape reports it, or packs for the plan's shape.
    if (!packed.ok()) packed_w_.reset();
    return absl::OkStatus();
  }

  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    // What Create packed, read before this object changes (`created` may be this object).
    const Int8MatMulKernel* created = static_cast<const Int8MatMulKernel*>(ctx.created);
    std::shared_ptr<const dnnl::memory> created_w = created ? created->packed_w_ : nullptr;
    const bool created_split = created ? created->split_ : false;
    out_type_ = ir::Int8TypeFromName(node_.GetString("out_type", "int32"));
    if (node_.GetString("out_type", "int32") == "int32") out_type_ = DType::kInt32;
    if (out_type_ != DType::kInt32 && out_type_ != DType::kUInt8 && out_type_ != DType::kInt8) {
      return Error("out_type must be int32, uint8 or int8");
    }
    if (ctx.inputs.size() < 4) return Error("needs inputs A, Wq, w_zero and w_colsum");
    for (size_t i = 0; i < 4; ++i) {
      if (!ctx.inputs[i].present()) return Error("input ", i, " is missing");
    }
    const InputInfo& a = ctx.inputs[0];
    const InputInfo& w = ctx.inputs[1];
    if (a.dtype != DType::kUInt8 && a.dtype != DType::kInt8) {
      return Error("A must be uint8 or int8");
    }
    if (w.dtype != DType::kInt8 || w.shape.rank() != 2 || w.constant == nullptr) {
      return Error("Wq must be a constant int8 [K, N]");
    }
    k_ = w.shape.dim(0);
    n_ = w.shape.dim(1);
    if (a.shape.rank() < 1 || a.shape.dim(a.shape.rank() - 1) != k_) {
      return Error("A ", a.shape.ToString(), " does not end in K = ", k_);
    }
    for (int i : {2, 3}) {
      if (ctx.inputs[i].dtype != DType::kInt32 || ctx.inputs[i].shape.num_elements() != n_) {
        return Error(i == 2 ? "w_zero" : "w_colsum", " must be int32 [", n_, "]");
      }
    }
    a_zero_index_ = ctx.inputs.size() > 4 && ctx.inputs[4].present() ? 4 : -1;
    if (a_zero_index_ >= 0 &&
        (ctx.inputs[4].dtype != a.dtype || ctx.inputs[4].shape.num_elements() != 1)) {
      return Error("a_zero must be one ", DTypeName(a.dtype));
    }
    bias_index_ = ctx.inputs.size() > 5 && ctx.inputs[5].present() ? 5 : -1;
    if (bias_index_ >= 0 &&
        (ctx.inputs[5].dtype != DType::kInt32 || ctx.inputs[5].shape.num_elements() != n_)) {
      return Error("bias must be int32 [", n_, "]");
    }
    relu_ = node_.GetInt("relu", 0) != 0;
    if (out_type_ != DType::kInt32) {
      out_scales_ = node_.GetFloats("out_scales");
      if (out_scales_.size() != 1 && static_cast<int64_t>(out_scales_.size()) != n_) {
        return Error("out_scales has ", out_scales_.size(), " values for ", n_, " columns");
      }
      if (out_scales_.size() == 1) out_scales_.assign(n_, out_scales_[0]);
      y_zero_ = node_.GetInt("y_zero_point", 0);
      const int64_t lo = out_type_ == DType::kUInt8 ? 0 : -128;
      if (y_zero_ < lo || y_zero_ > lo + 255) return Error("y_zero_point out of range");
    } else if (relu_) {
      return Error("relu needs an 8-bit out_type");
    }
    Shape out = a.shape;
    out.erase(out.rank() - 1);
    out.push_back(n_);
    rows_ = k_ == 0 ? 0 : a.shape.num_elements() / k_;
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = out_type_;
    ctx.output_shapes[0] = out;
    flip_a_ = a.dtype == DType::kInt8;
    packed_w_.reset();
    ctx.scratch_bytes = 0;
    if (rows_ == 0 || n_ == 0) return absl::OkStatus();

    // Without VNNI, u8 x s8 pairs are summed into int16 (vpmaddubsw): exact only while
    // |w| <= 64 (2 * 255 * 64 < 32768). Weights beyond that are split in two halves,
    // floor(w / 2) and w - floor(w / 2), each within [-64, 64], multiplied side by side.
    const int8_t* wq = static_cast<const int8_t*>(w.constant->raw_data());
    bool fits_7_bits = true;
    for (int64_t i = 0; i < k_ * n_ && fits_7_bits; ++i) fits_7_bits = wq[i] >= -64 && wq[i] <= 64;
    split_ = !fits_7_bits && !CpuHasInt8Vnni();
    cols_ = split_ ? 2 * n_ : n_;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    src_desc_ = memory::desc({rows_, k_}, memory::data_type::u8, memory::format_tag::ab);
    const memory::desc user_w_desc({k_, cols_}, memory::data_type::s8, memory::format_tag::ab);
    acc_desc_ = memory::desc({rows_, cols_}, memory::data_type::s32, memory::format_tag::ab);
    dnnl::matmul::desc d(src_desc_,
                         memory::desc({k_, cols_}, memory::data_type::s8, memory::format_tag::any),
                         acc_desc_);
    dnnl::matmul::primitive_desc pd(d, attr, CpuEngine());
    const ir::Node& cache_node = ctx.node ? *ctx.node : node_;
    if (created_w && created_split == split_ && created_w->get_desc() == pd.weights_desc()) {
      packed_w_ = std::move(created_w);
    } else if (split_) {
      std::vector<int8_t> halves(static_cast<size_t>(k_ * cols_));
      for (int64_t i = 0; i < k_; ++i) {
        for (int64_t j = 0; j < n_; ++j) {
          const int v = wq[i * n_ + j];
          const int lo = v >> 1;  // floor(v / 2)
          halves[i * cols_ + j] = static_cast<int8_t>(lo);
          halves[i * cols_ + n_ + j] = static_cast<int8_t>(v - lo);
        }
      }
      KILN_ASSIGN_OR_RETURN(packed_w_, PackConstant(ctx.packed_constants, cache_node, user_w_desc,
                                                    halves.data(), pd.weights_desc()));
    } else {
      KILN_ASSIGN_OR_RETURN(packed_w_, PackConstant(ctx.packed_constants, cache_node, user_w_desc,
                                                    wq, pd.weights_desc()));
    }
    if (creating_) return absl::OkStatus();  // Create keeps only the packed weights
    primitive_ = dnnl::matmul(pd);
    scratch_desc_ = pd.scratchpad_desc();
    // Scratch: oneDNN's | A as u8 (int8 A only) | the int32 products.
    src_offset_ = Align64(scratch_desc_.get_size());
    acc_offset_ = src_offset_ + (flip_a_ ? Align64(rows_ * k_) : 0);
    ctx.scratch_bytes = acc_offset_ + Align64(rows_ * cols_ * sizeof(int32_t));
    macs_ = rows_ * k_ * cols_;
    return absl::OkStatus();
  }

  template <typename Q>
  void WriteRow(const uint32_t* acc, Q* y) const {
    constexpr float lo = std::is_same_v<Q, uint8_t> ? 0.0f : -128.0f;
    const float zero = static_cast<float>(y_zero_);
    for (int64_t j = 0; j < n_; ++j) {
      int32_t v = static_cast<int32_t>(acc[j]);
      if (relu_) v = std::max(v, 0);
      // The reference's requantization: the float product, rounded half to even.
      const float r = std::nearbyint(static_cast<float>(v) * out_scales_[j]);
      y[j] = std::isnan(r) ? Q(0) : static_cast<Q>(std::clamp(r + zero, lo, lo + 255.0f));
    }
  }

  // Per run state: the primitive's memory objects and arguments (kernel.h's KernelRunState).
  std::unique_ptr<SrcWeightsDstRunState> MakeRunState() const {
    return SrcWeightsDstRunState::Make(src_desc_, memory::desc(), packed_w_.get(), memory::desc(),
                                       acc_desc_, scratch_desc_);
  }
  std::unique_ptr<KernelRunState> NewRunState() const override {
    return NewDnnlRunState([&] { return MakeRunState(); });
  }

  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    Tensor& y = ctx.outputs[0];
    if (y.num_elements() == 0) return absl::OkStatus();
    char* scratch = static_cast<char*>(ctx.scratch);
    const uint8_t* a = static_cast<const uint8_t*>(ctx.inputs[0].raw_data());
    const int32_t* w_zero = ctx.inputs[2].data<int32_t>();
    const int32_t* colsum = ctx.inputs[3].data<int32_t>();
    const int32_t* bias = bias_index_ >= 0 ? ctx.inputs[bias_index_].data<int32_t>() : nullptr;
    // Zero points of A as u8: an int8 A is read as uint8 with every byte's top bit flipped,
    // which adds 128 to each value and to its zero point.
    int32_t a_zero = 0;
    if (a_zero_index_ >= 0) {
      a_zero = flip_a_ ? ctx.inputs[a_zero_index_].data<int8_t>()[0]
                       : ctx.inputs[a_zero_index_].data<uint8_t>()[0];
    }
    if (flip_a_) a_zero += 128;
    bool any_w_zero = false;
    for (int64_t j = 0; j < n_; ++j) any_w_zero |= w_zero[j] != 0;
    uint32_t* acc = reinterpret_cast<uint32_t*>(scratch + acc_offset_);
    const uint8_t* src = a;
    if (flip_a_) {
      uint8_t* flipped = reinterpret_cast<uint8_t*>(scratch + src_offset_);
      ctx.ParallelFor(rows_ * k_, kMinElementsPerThread, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) flipped[i] = a[i] ^ 0x80;
      });
      src = flipped;
    }
    if (k_ > 0) {
      ScopedDnnlThreads threads(macs_ < kSerialMacs ? 1 : ctx.intra_op_threads);
      auto& stream = ThreadStream();
      std::unique_ptr<SrcWeightsDstRunState> owned;
      const SrcWeightsDstRunState& s = RunStateFor(ctx, owned, [&] { return MakeRunState(); });
      s.Execute(primitive_, stream, src, nullptr, nullptr, acc, scratch);
    } else {
      std::fill(acc, acc + rows_ * cols_, 0u);
    }
    const uint32_t az = static_cast<uint32_t>(a_zero);
    const uint32_t k = static_cast<uint32_t>(k_);
    const int64_t chunk =
        std::max<int64_t>(1, kMinElementsPerThread / std::max<int64_t>(k_ + n_, 1));
    ctx.ParallelFor(rows_, chunk, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        uint32_t* row = acc + r * cols_;
        uint32_t rowsum = 0;
        if (any_w_zero) {
          const uint8_t* ar = src + r * k_;
          for (int64_t i = 0; i < k_; ++i) rowsum += ar[i];
        }
        // Unsigned arithmetic: the reference's int32 sum modulo 2^32, without signed overflow.
        for (int64_t j = 0; j < n_; ++j) {
          const uint32_t wz = static_cast<uint32_t>(w_zero[j]);
          uint32_t v = row[j] + (split_ ? row[n_ + j] : 0u);
          v += k * az * wz - wz * rowsum - az * static_cast<uint32_t>(colsum[j]);
          if (bias != nullptr) v += static_cast<uint32_t>(bias[j]);
          row[j] = v;
        }
        if (out_type_ == DType::kInt32) {
          std::memcpy(y.data<int32_t>() + r * n_, row, n_ * sizeof(int32_t));
        } else if (out_type_ == DType::kUInt8) {
          WriteRow(row, y.data<uint8_t>() + r * n_);
        } else {
          WriteRow(row, y.data<int8_t>() + r * n_);
        }
      }
    });
    return absl::OkStatus();
  }

  DType out_type_ = DType::kInt32;
  int64_t k_ = 0, n_ = 0, rows_ = 0, cols_ = 0, y_zero_ = 0, macs_ = 0;
  int a_zero_index_ = -1, bias_index_ = -1;
  bool relu_ = false, flip_a_ = false, split_ = false;
  bool creating_ = false;  // ReshapeImpl runs for Create: pack the weights, make no primitive
  std::vector<float> out_scales_;
  memory::desc src_desc_, acc_desc_, scratch_desc_;
  std::shared_ptr<const dnnl::memory> packed_w_;  // shared by the model's plans
  dnnl::matmul primitive_;
  size_t src_offset_ = 0, acc_offset_ = 0;
};

KILN_REGISTER_KERNEL_CLASS("kiln", ir::kDynamicQuantMatMulOp, DynamicQuantMatMulKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", ir::kBf16MatMulOp, Bf16MatMulKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", ir::kInt8MatMulOp, Int8MatMulKernel);

}  // namespace

KILN_KERNEL_FILE(nn_int8_matmul);

}  // namespace nn
}  // namespace kiln::kernels
