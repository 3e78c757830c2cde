// Softmax, LogSoftmax and Hardmax with opset-13 semantics: one `axis` (default -1), the
// others are batch dimensions. Numerically stable: the row maximum is subtracted before exp.
// fp32 rows run the vector exp; fp64 and fp16/bf16 use the same algorithm in scalar code.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cpu/math_common.h"

namespace kiln::kernels::math {
namespace {

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// One row of `n` elements with stride 1 (the axis is innermost).
void SoftmaxRowF32(SoftmaxKind kind, const float* in, float* out, int64_t n) {
  const simd::Kernels& k = simd::Best();
  const float max = k.reduce_max(in, n);
  if (kind == SoftmaxKind::kHardmax) {
    int64_t arg = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (in[i] == max) {
        arg = i;
        break;
      }
    }
    for (int64_t i = 0; i < n; ++i) out[i] = 0.f;
    if (n > 0) out[arg] = 1.f;
    return;
  }
  if (kind == SoftmaxKind::kSoftmax) {
    const float sum = k.exp_shift_sum(in, out, n, max);
    k.scale_bias(out, out, n, 1.f / sum, 0.f);
  } else {
    // The exps are only summed: they go through a stack buffer so that `out` (which may be
    // `in`, run in place) is written once, with x - max - log(sum).
    constexpr int64_t kChunk = 1024;
    alignas(64) float buf[kChunk];
    float sum = 0.f;
    for (int64_t i = 0; i < n; i += kChunk) {
      sum += k.exp_shift_sum(in + i, buf, std::min(kChunk, n - i), max);
    }
    // (x - max) is exact for the values that matter; subtracting log(sum) separately keeps
    // max's magnitude from eating log(sum)'s digits.
    k.scale_bias(in, out, n, 1.f, -max);
    k.scale_bias(out, out, n, 1.f, -std::log(sum));
  }
}

template <typename C>
void SoftmaxStrided(SoftmaxKind kind, const C* in, C* out, int64_t n, int64_t stride) {
  C max = -std::numeric_limits<C>::infinity();
  int64_t arg = 0;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const C v = in[i * stride];
    if (v != v) nan = true;
    if (v > max) {
      max = v;
      arg = i;
    }
  }
  if (kind == SoftmaxKind::kHardmax) {
    for (int64_t i = 0; i < n; ++i) out[i * stride] = C(0);
    if (n > 0) out[arg * stride] = C(1);
    return;
  }
  if (nan) max = std::numeric_limits<C>::quiet_NaN();
  C sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const C e = std::exp(in[i * stride] - max);
    if (kind == SoftmaxKind::kSoftmax) out[i * stride] = e;
    sum += e;
  }
  if (kind == SoftmaxKind::kSoftmax) {
    const C inv = C(1) / sum;
    for (int64_t i = 0; i < n; ++i) out[i * stride] *= inv;
  } else {
    const C shift = max + std::log(sum);
    for (int64_t i = 0; i < n; ++i) out[i * stride] = in[i * stride] - shift;
  }
}

class SoftmaxKernel : public MathKernel {
 public:
  SoftmaxKernel(const ir::Node& node, SoftmaxKind kind)
      : MathKernel(node), kind_(kind), axis_attr_(node.GetInt("axis", -1)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1 || !ctx.inputs[0].present()) {
      return Error("expects exactly one input");
    }
    const DType dt = ctx.inputs[0].dtype;
    if (!IsFloat(dt)) return Error("input dtype ", DTypeName(dt), " is not a float type");
    const Shape& s = ctx.inputs[0].shape;
    KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_attr_, s.rank(), where()));
    outer_ = 1;
    inner_ = 1;
    axis_size_ = s.rank() == 0 ? 1 : s[axis];
    for (int d = 0; d < axis; ++d) outer_ *= s[d];
    for (int d = axis + 1; d < s.rank(); ++d) inner_ *= s[d];
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dt;
    ctx.output_shapes[0] = s;
    // Hardmax reads the whole row before writing it; softmax rows only read element i
    // before writing it, so every variant can run in place.
    ctx.output_in_place_of[0] = 0;
    if (dt != DType::kFloat32 && dt != DType::kFloat64) {
      ctx.scratch_bytes = 2 * sizeof(float) * axis_size_ * inner_;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    if (in.num_elements() == 0) return absl::OkStatus();
    const int64_t n = axis_size_, inner = inner_, block = n * inner;
    switch (in.dtype()) {
      case DType::kFloat32: {
        const float* x = in.data<float>();
        float* y = out.data<float>();
        if (inner == 1) {
          ctx.ParallelFor(outer_, std::max<int64_t>(1, kParallelGrainHeavy / n),
                          [&](int64_t b, int64_t e) {
                            for (int64_t r = b; r < e; ++r) SoftmaxRowF32(kind_, x + r * n, y + r * n, n);
                          });
        } else {
          ParallelStrided<float>(ctx, x, y, n, inner, block);
        }
        break;
      }
      case DType::kFloat64:
        ParallelStrided<double>(ctx, in.data<double>(), out.data<double>(), n, inner, block);
        break;
      default: {
        // fp16/bf16: through float, one outer block at a time in scratch memory.
        float* xf = static_cast<float*>(ctx.scratch);
        float* yf = xf + block;
        for (int64_t o = 0; o < outer_; ++o) {
          VisitNumeric(in.dtype(), [&](auto tag) {
            using T = decltype(tag);
            if constexpr (kIsHalf<T>) {
              HalfToFloatArray(in.data<T>() + o * block, xf, block);
              for (int64_t j = 0; j < inner; ++j) SoftmaxStrided<float>(kind_, xf + j, yf + j, n, inner);
              FloatToHalfArray(yf, out.data<T>() + o * block, block);
            }
          });
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  template <typename C>
  void ParallelStrided(const ComputeContext& ctx, const C* x, C* y, int64_t n, int64_t inner,
                       int64_t block) const {
    // Independent (outer, inner) columns, each a strided row along the axis.
    const int64_t columns = outer_ * inner;
    ctx.ParallelFor(columns, std::max<int64_t>(1, kParallelGrainHeavy / n),
                    [&](int64_t b, int64_t e) {
                      for (int64_t c = b; c < e; ++c) {
                        const int64_t o = c / inner, j = c % inner;
                        SoftmaxStrided<C>(kind_, x + o * block + j, y + o * block + j, n, inner);
                      }
                    });
  }

  SoftmaxKind kind_;
  int64_t axis_attr_;
  int64_t outer_ = 1, inner_ = 1, axis_size_ = 1;
};

KernelFactory SoftmaxFactory(SoftmaxKind kind) {
  return [kind](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new SoftmaxKernel(node, kind));
  };
}

KILN_REGISTER_KERNEL("", "Softmax", SoftmaxFactory(SoftmaxKind::kSoftmax));
KILN_REGISTER_KERNEL("", "LogSoftmax", SoftmaxFactory(SoftmaxKind::kLogSoftmax));
KILN_REGISTER_KERNEL("", "Hardmax", SoftmaxFactory(SoftmaxKind::kHardmax));

}  // namespace

KILN_KERNEL_FILE(math_softmax);

}  // namespace kiln::kernels::math
