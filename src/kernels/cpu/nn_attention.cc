// kiln::Attention (include/kiln/ir/attention.h): per (batch, head), scores = Q x K^T into a
// [M x N] buffer that stays in this thread's cache, scale + mask + softmax on each row in place,
// then scores x V written straight into the output. Q, K, V and the output are read and written
// through the strides of the Transposes the pattern had, so no Transpose copies run, and the
// [B, H, M, N] score tensor of the unfused graph (8 MB for BERT at batch 32) never exists.
//
// The products are oneDNN's sgemm (dnnl_sgemm: row-major, leading dimensions, transposes),
// called from inside the parallel loop over (batch, head), where it runs on its calling thread;
// it honours the ISA cap (KILN_MAX_ISA). The softmax is the Softmax kernel's own sequence of
// vector primitives (math_softmax.cc), so a row of scores gives the same probabilities, NaN and
// -inf rows included.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/kernel_base.h"
#include "kernels/cpu/simd/ops.h"
#include "kiln/core/status.h"
#include "kiln/ir/attention.h"
#include "kiln/kernels/openmp_threads.h"

namespace kiln::kernels::nn {
namespace {

enum class ScaleOp { kNone, kDiv, kMul };

// One rank-4 operand as the attention reads it: the logical dims (after its perm) and the
// element strides of each logical dim in the stored, contiguous tensor.
struct Operand {
  int64_t dims[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};
};

Operand Permuted(const Shape& shape, const std::vector<int64_t>& perm) {
  int64_t contiguous[4];
  int64_t s = 1;
  for (int d = 3; d >= 0; --d) {
    contiguous[d] = s;
    s *= shape[d];
  }
  Operand op;
  for (int i = 0; i < 4; ++i) {
    op.dims[i] = shape[perm[i]];
    op.strides[i] = contiguous[perm[i]];
  }
  return op;
}

// How sgemm reads a [rows x cols] matrix with the given element strides: plain row-major with
// leading dimension ld, or the transpose of a row-major [cols x rows] one. False when neither
// dimension has unit stride (the pass never writes such perms).
struct MatrixArg {
  char trans = 'N';
  int64_t ld = 1;
};
bool ToMatrixArg(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                 MatrixArg* arg) {
  if (col_stride == 1 || cols <= 1) {
    arg->trans = 'N';
    // A stride of a dimension of size 1 is never stepped; sgemm still wants ld >= cols.
    arg->ld = std::max<int64_t>({rows > 1 ? row_stride : 1, cols, 1});
    return rows <= 1 || row_stride >= cols;
  }
  if (row_stride == 1 || rows <= 1) {
    arg->trans = 'T';
    arg->ld = std::max<int64_t>({cols > 1 ? col_stride : 1, rows, 1});
    return cols <= 1 || col_stride >= rows;
  }
  return false;
}

// The broadcast of two dimensions (ONNX rules), or -1 when they do not broadcast.
int64_t Broadcast(int64_t a, int64_t b) {
  if (a == b || b == 1) return a;
  if (a == 1) return b;
  return -1;
}

class AttentionKernel : public NodeKernel {
 public:
  explicit AttentionKernel(const ir::Node& node) : NodeKernel(node) {
    q_perm_ = node.GetInts(ir::kAttentionQPermAttr);
    k_perm_ = node.GetInts(ir::kAttentionKPermAttr);
    v_perm_ = node.GetInts(ir::kAttentionVPermAttr);
    out_perm_ = node.GetInts(ir::kAttentionOutPermAttr);
    for (const auto* perm : {&q_perm_, &k_perm_, &v_perm_, &out_perm_}) {
      if (!ir::IsPerm4(*perm)) {
        SetAttrError(
            Error("perms must be permutations of 0..3, got [", absl::StrJoin(*perm, ","), "]"));
      }
    }
    const std::string op = node.GetString(ir::kAttentionScaleOpAttr, "");
    scale_op_ = op == "Div" ? ScaleOp::kDiv : op == "Mul" ? ScaleOp::kMul : ScaleOp::kNone;
    if (!op.empty() && scale_op_ == ScaleOp::kNone) {
      SetAttrError(Error("scale_op must be Div, Mul or empty, got '", op, "'"));
    }
    scale_ = node.GetFloat(ir::kAttentionScaleAttr, 1.0f);
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() < 3 || ctx.inputs.size() > 4) {
      return Error("expects q, k, v and an optional mask, got ", ctx.inputs.size(), " inputs");
    }
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const InputInfo& in = ctx.inputs[i];
      if (i == 3 && !in.present()) continue;
      if (!in.present() || in.dtype != DType::kFloat32) {
        return Error("input ", i, " must be float32, got ", DTypeName(in.dtype));
      }
      if (i < 3 && in.shape.rank() != 4) {
        return Error("input ", i, " must have rank 4, got shape ", in.shape.ToString());
      }
    }
    q_ = Permuted(ctx.inputs[0].shape, q_perm_);
    kt_ = Permuted(ctx.inputs[1].shape, k_perm_);
    v_ = Permuted(ctx.inputs[2].shape, v_perm_);
    const int64_t m = q_.dims[2], d = q_.dims[3], n = kt_.dims[3];
    if (kt_.dims[2] != d) {
      return Error("Q x K^T: inner dimensions ", d, " and ", kt_.dims[2], " differ");
    }
    // The scores' dims: batch dims broadcast as MatMul does, then the mask's broadcast (which
    // may also widen a single query row or key column, as Add would).
    int64_t scores[4] = {Broadcast(q_.dims[0], kt_.dims[0]), Broadcast(q_.dims[1], kt_.dims[1]), m,
                         n};
    if (scores[0] < 0 || scores[1] < 0) {
      return Error("Q x K^T: batch dimensions of ", ctx.inputs[0].shape.ToString(), " and ",
                   ctx.inputs[1].shape.ToString(), " do not broadcast");
    }
    has_mask_ = ctx.inputs.size() == 4 && ctx.inputs[3].present();
    int64_t mask_dims[4] = {1, 1, 1, 1};
    if (has_mask_) {
      const Shape& ms = ctx.inputs[3].shape;
      if (ms.rank() > 4) return Error("mask rank ", ms.rank(), " is above 4");
      for (int i = 0; i < ms.rank(); ++i) mask_dims[4 - ms.rank() + i] = ms[i];
      for (int i = 0; i < 4; ++i) {
        scores[i] = Broadcast(scores[i], mask_dims[i]);
        if (scores[i] < 0) {
          return Error("mask ", ms.ToString(), " does not broadcast to the scores");
        }
      }
      int64_t s = 1;
      for (int i = 3; i >= 0; --i) {
        mask_strides_[i] = mask_dims[i] == 1 ? 0 : s;
        s *= mask_dims[i];
      }
    }
    rows_ = scores[2];
    cols_ = scores[3];
    if (v_.dims[2] != cols_) {
      return Error("scores x V: inner dimensions ", cols_, " and ", v_.dims[2], " differ");
    }
    out_batch_[0] = Broadcast(scores[0], v_.dims[0]);
    out_batch_[1] = Broadcast(scores[1], v_.dims[1]);
    if (out_batch_[0] < 0 || out_batch_[1] < 0) {
      return Error("scores x V: batch dimensions do not broadcast with ",
                   ctx.inputs[2].shape.ToString());
    }
    const int64_t logical_out[4] = {out_batch_[0], out_batch_[1], rows_, v_.dims[3]};
    // Batch strides of 0 where an operand broadcasts.
    for (int i = 0; i < 2; ++i) {
      q_batch_[i] = q_.dims[i] == 1 ? 0 : q_.strides[i];
      k_batch_[i] = kt_.dims[i] == 1 ? 0 : kt_.strides[i];
      v_batch_[i] = v_.dims[i] == 1 ? 0 : v_.strides[i];
    }
    // The output is Transpose(ctx, out_perm): its dim i is logical dim out_perm[i].
    std::vector<int64_t> out_shape(4);
    for (int i = 0; i < 4; ++i) out_shape[i] = logical_out[out_perm_[i]];
    int64_t s = 1;
    for (int i = 3; i >= 0; --i) {
      out_strides_[out_perm_[i]] = s;
      s *= out_shape[i];
    }
    if (!ToMatrixArg(m, d, q_.strides[2], q_.strides[3], &q_arg_) ||
        !ToMatrixArg(d, n, kt_.strides[2], kt_.strides[3], &k_arg_) ||
        !ToMatrixArg(cols_, v_.dims[3], v_.strides[2], v_.strides[3], &v_arg_) ||
        (out_strides_[3] != 1 && v_.dims[3] > 1)) {
      return Error("an operand's matrix has no unit-stride dimension (perms q [",
                   absl::StrJoin(q_perm_, ","), "] k [", absl::StrJoin(k_perm_, ","), "] v [",
                   absl::StrJoin(v_perm_, ","), "] out [", absl::StrJoin(out_perm_, ","), "])");
    }
    // One score buffer per thread; rows padded to 16 floats keep each buffer 64-byte aligned.
    const int64_t items = out_batch_[0] * out_batch_[1];
    threads_ =
        static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ctx.intra_op_threads, items)));
    buffer_floats_ = (rows_ * cols_ + 15) / 16 * 16;
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = Shape(out_shape);
    ctx.scratch_bytes = sizeof(float) * buffer_floats_ * threads_;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const float* q = ctx.inputs[0].data<float>();
    const float* k = ctx.inputs[1].data<float>();
    const float* v = ctx.inputs[2].data<float>();
    const float* mask = has_mask_ ? ctx.inputs[3].data<float>() : nullptr;
    float* out = ctx.outputs[0].data<float>();
    const int64_t items = out_batch_[0] * out_batch_[1];
    if (items == 0 || rows_ == 0 || v_.dims[3] == 0) return absl::OkStatus();
    float* scratch = static_cast<float*>(ctx.scratch);
    const int threads = static_cast<int>(std::min<int64_t>(threads_, ctx.intra_op_threads));
    std::atomic<bool> failed{false};
    // One chunk per thread, each with its own score buffer.
    ctx.ParallelFor(std::max(threads, 1), 1, [&](int64_t t_begin, int64_t t_end) {
      // Each head's products run on this thread: a team of its own per 128 x 128 x 64 product
      // (what sgemm starts outside a parallel region, as on the single-thread path) costs more
      // than the product; inside the loop's team this is a no-op.
      ScopedOpenMpThreads one_thread(1);
      for (int64_t t = t_begin; t < t_end; ++t) {
        float* scores = scratch + t * buffer_floats_;
        const int64_t begin = items * t / threads, end = items * (t + 1) / threads;
        for (int64_t item = begin; item < end; ++item) {
          if (!Head(item / out_batch_[1], item % out_batch_[1], q, k, v, mask, out, scores)) {
            failed.store(true, std::memory_order_relaxed);
          }
        }
      }
    });
    if (failed.load()) return absl::InternalError(absl::StrCat(where(), ": oneDNN sgemm failed"));
    return absl::OkStatus();
  }

 private:
  // One (batch, head) pair; false when sgemm fails.
  bool Head(int64_t b0, int64_t b1, const float* q, const float* k, const float* v,
            const float* mask, float* out, float* scores) const {
    const int64_t m = q_.dims[2], d = q_.dims[3], n = kt_.dims[3];
    const float* qh = q + b0 * q_batch_[0] + b1 * q_batch_[1];
    const float* kh = k + b0 * k_batch_[0] + b1 * k_batch_[1];
    // Q x K^T into the first m rows and n columns of the [rows_ x cols_] buffer.
    if (m > 0 && n > 0) {
      if (d == 0) {
        for (int64_t r = 0; r < m; ++r) std::fill_n(scores + r * cols_, n, 0.0f);
      } else if (dnnl_sgemm(q_arg_.trans, k_arg_.trans, m, n, d, 1.0f, qh, q_arg_.ld, kh, k_arg_.ld,
                            0.0f, scores, cols_) != dnnl_success) {
        return false;
      }
    }
    // The mask widened one key column or one query row: the scores broadcast as Add does.
    if (n == 1 && cols_ > 1) {
      for (int64_t r = 0; r < m; ++r)
        std::fill_n(scores + r * cols_ + 1, cols_ - 1, scores[r * cols_]);
    }
    if (m == 1 && rows_ > 1) {
      for (int64_t r = 1; r < rows_; ++r)
        std::memcpy(scores + r * cols_, scores, sizeof(float) * cols_);
    }
    const simd::Kernels& kernels = simd::Best();
    const float scale = scale_;
    for (int64_t r = 0; r < rows_ && cols_ > 0; ++r) {
      float* row = scores + r * cols_;
      // The unfused nodes' order: the scaled score is rounded, then the mask is added.
      if (scale_op_ == ScaleOp::kDiv) {
        for (int64_t c = 0; c < cols_; ++c) row[c] = row[c] / scale;
      } else if (scale_op_ == ScaleOp::kMul) {
        for (int64_t c = 0; c < cols_; ++c) row[c] = row[c] * scale;
      }
      if (mask != nullptr) {
        const float* mrow =
            mask + b0 * mask_strides_[0] + b1 * mask_strides_[1] + r * mask_strides_[2];
        if (mask_strides_[3] == 1) {
          for (int64_t c = 0; c < cols_; ++c) row[c] = row[c] + mrow[c];
        } else {
          const float mv = mrow[0];
          for (int64_t c = 0; c < cols_; ++c) row[c] = row[c] + mv;
        }
      }
      // Softmax as math_softmax.cc's SoftmaxRowF32 computes it.
      const float max = kernels.reduce_max(row, cols_);
      const float sum = kernels.exp_shift_sum(row, row, cols_, max);
      kernels.scale_bias(row, row, cols_, 1.f / sum, 0.f);
    }
    // scores x V straight into the output rows.
    const int64_t dv = v_.dims[3];
    float* oh = out + b0 * out_strides_[0] + b1 * out_strides_[1];
    const int64_t ldo = std::max<int64_t>({rows_ > 1 ? out_strides_[2] : 1, dv, 1});
    if (cols_ == 0) {
      for (int64_t r = 0; r < rows_; ++r) std::fill_n(oh + r * out_strides_[2], dv, 0.0f);
      return true;
    }
    const float* vh = v + b0 * v_batch_[0] + b1 * v_batch_[1];
    return dnnl_sgemm('N', v_arg_.trans, rows_, dv, cols_, 1.0f, scores, cols_, vh, v_arg_.ld, 0.0f,
                      oh, ldo) == dnnl_success;
  }

  std::vector<int64_t> q_perm_, k_perm_, v_perm_, out_perm_;
  ScaleOp scale_op_ = ScaleOp::kNone;
  float scale_ = 1.0f;
  bool has_mask_ = false;
  Operand q_, kt_, v_;
  MatrixArg q_arg_, k_arg_, v_arg_;
  int64_t q_batch_[2] = {0, 0}, k_batch_[2] = {0, 0}, v_batch_[2] = {0, 0};
  int64_t mask_strides_[4] = {0, 0, 0, 0};
  int64_t out_batch_[2] = {0, 0};
  int64_t out_strides_[4] = {0, 0, 0, 0};
  int64_t rows_ = 0, cols_ = 0;
  int64_t buffer_floats_ = 0;
  int threads_ = 1;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "Attention", AttentionKernel);

}  // namespace

KILN_KERNEL_FILE(nn_attention);

}  // namespace kiln::kernels::nn
