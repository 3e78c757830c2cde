// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 13 semantics), the losses
// PyTorch exports for nn.NLLLoss / nn.CrossEntropyLoss.
//
// Both see the class scores as [N, C, D] (D = product of d1..dk, 1 for a 2-D input) and the
// targets as [N, D]. Per element: loss = -weight[t] * logp[n, t, d], where a target equal to
// ignore_index contributes 0 and no weight. Reductions follow the ONNX spec and reference:
// "none" keeps the target's shape; "sum" adds everything; "mean" divides the weighted sum by
// the sum of the weights actually used (the count of non-ignored targets when there is no
// weight input), so an all-ignored batch gives 0/0 = NaN as in the reference.
// Sums accumulate in double; results are stored in the input's float type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/math_common.h"
#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::loss {
namespace {

using math::InputOrEmpty;
using math::IsFloat;
using math::MathKernel;
using math::Present;
using math::VisitFloat;
using tensor_ops::AsDouble;
using tensor_ops::FromDouble;

enum class Reduction { kNone, kSum, kMean };

class LossKernel : public MathKernel {
 protected:
  explicit LossKernel(const ir::Node& node)
      : MathKernel(node),
        has_ignore_index_(node.HasAttr("ignore_index")),
        ignore_index_(node.GetInt("ignore_index", 0)),
        num_outputs_(static_cast<int>(node.outputs.size())) {
    const std::string reduction = node.GetString("reduction", "mean");
    if (reduction == "none") {
      reduction_ = Reduction::kNone;
    } else if (reduction == "sum") {
      reduction_ = Reduction::kSum;
    } else if (reduction == "mean") {
      reduction_ = Reduction::kMean;
    } else {
      SetAttrError(Error("reduction '", reduction, "' is not one of none, sum, mean"));
    }
  }

  // Checks (scores, target, weight?) and sets n_, c_, d_ and output 0.
  absl::Status PrepareLoss(ReshapeContext& ctx, const char* scores_name, const char* target_name) {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() < 2 || !ctx.inputs[0].present() || !ctx.inputs[1].present()) {
      return Error("needs inputs '", scores_name, "' and '", target_name, "'");
    }
    const InputInfo& scores = ctx.inputs[0];
    const InputInfo& target = ctx.inputs[1];
    if (!IsFloat(scores.dtype)) {
      return Error("input '", scores_name, "' must be a float tensor, got ",
                   DTypeName(scores.dtype));
    }
    if (target.dtype != DType::kInt32 && target.dtype != DType::kInt64) {
      return Error("input '", target_name, "' must be int32 or int64, got ",
                   DTypeName(target.dtype));
    }
    const Shape& s = scores.shape;
    const Shape& t = target.shape;
    if (s.rank() < 2) {
      return Error("input '", scores_name, "' must be [N, C] or [N, C, d1, ...], got ",
                   s.ToString());
    }
    bool shapes_match = t.rank() == s.rank() - 1 && t[0] == s[0];
    for (int i = 1; shapes_match && i < t.rank(); ++i) shapes_match = t[i] == s[i + 1];
    if (!shapes_match) {
      return Error("input '", target_name, "' has shape ", t.ToString(),
                   "; expected [N, d1, ...] = ", "the shape of '", scores_name, "' ", s.ToString(),
                   " without its class axis");
    }
    n_ = s[0];
    c_ = s[1];
    d_ = 1;
    for (int i = 2; i < s.rank(); ++i) d_ *= s[i];
    if (Present(ctx, 2)) {
      const InputInfo& w = ctx.inputs[2];
      if (w.dtype != scores.dtype || w.shape.rank() != 1 || w.shape[0] != c_) {
        return Error("input 'weight' must be ", DTypeName(scores.dtype), "[", c_, "], got ",
                     DTypeName(w.dtype), w.shape.ToString());
      }
    }
    ctx.SetNumOutputs(std::max(num_outputs_, 1));
    ctx.output_dtypes[0] = scores.dtype;
    ctx.output_shapes[0] = reduction_ == Reduction::kNone ? t : Shape{};
    return absl::OkStatus();
  }

  // The scratch of Compute: the log-probabilities as doubles.
  void DeclareScratch(ReshapeContext& ctx) const {
    ctx.scratch_bytes = sizeof(double) * static_cast<size_t>(std::max<int64_t>(n_ * c_ * d_, 1));
  }

  // Fills the scratch with log-probabilities, fill(x, logp) with x the scores in their own
  // type, and reduces them to the loss (output 0).
  template <typename Fill>
  absl::Status ComputeLoss(ComputeContext& ctx, Fill&& fill) const {
    absl::Status status;
    VisitFloat(ctx.inputs[0].dtype(), [&](auto tag) {
      using T = decltype(tag);
      double* logp = static_cast<double*>(ctx.scratch);
      fill(ctx.inputs[0].data<T>(), logp);
      status = ReduceLoss<T>(ctx, logp, ctx.outputs[0]);
    });
    return status;
  }

  // The loss from log-probabilities `logp` ([N, C, D], as double) into output 0.
  template <typename T>
  absl::Status ReduceLoss(const ComputeContext& ctx, const double* logp, Tensor& out) const {
    const Tensor& target = ctx.inputs[1];
    const Tensor& weight = InputOrEmpty(ctx, 2);
    const T* w = weight.valid() ? weight.data<T>() : nullptr;
    T* y = out.data<T>();
    double total = 0, weight_sum = 0;
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t d = 0; d < d_; ++d) {
        const int64_t i = n * d_ + d;
        const int64_t t = tensor_ops::IndexAt(target, i);
        double loss = 0, wt = 0;
        if (!(has_ignore_index_ && t == ignore_index_)) {
          if (t < 0 || t >= c_) {
            return Error("target value ", t, " at element ", i, " is outside [0, ", c_,
                         ") and is not ignore_index");
          }
          wt = w != nullptr ? AsDouble(w[t]) : 1.0;
          loss = -wt * logp[(n * c_ + t) * d_ + d];
        }
        if (reduction_ == Reduction::kNone) {
          y[i] = FromDouble<T>(loss);
        } else {
          total += loss;
          weight_sum += wt;
        }
      }
    }
    if (reduction_ == Reduction::kSum) y[0] = FromDouble<T>(total);
    if (reduction_ == Reduction::kMean) y[0] = FromDouble<T>(total / weight_sum);
    return absl::OkStatus();
  }

  Reduction reduction_ = Reduction::kMean;
  bool has_ignore_index_;
  int64_t ignore_index_;
  int num_outputs_;
  int64_t n_ = 0, c_ = 0, d_ = 0;
};

// NegativeLogLikelihoodLoss(input [N, C, ...] log-probabilities, target, weight?).
class NllLossKernel : public LossKernel {
 public:
  explicit NllLossKernel(const ir::Node& node) : LossKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareLoss(ctx, "input", "target"));
    DeclareScratch(ctx);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    return ComputeLoss(ctx, [&](const auto* x, double* logp) {
      for (int64_t i = 0; i < n_ * c_ * d_; ++i) logp[i] = AsDouble(x[i]);
    });
  }
};

// SoftmaxCrossEntropyLoss(scores, labels, weights?) -> (output, log_prob?): log-softmax over
// the class axis, then the negative log-likelihood loss above.
class SoftmaxCrossEntropyKernel : public LossKernel {
 public:
  explicit SoftmaxCrossEntropyKernel(const ir::Node& node) : LossKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareLoss(ctx, "scores", "labels"));
    if (num_outputs_ > 1) {
      ctx.output_dtypes[1] = ctx.inputs[0].dtype;
      ctx.output_shapes[1] = ctx.inputs[0].shape;
    }
    DeclareScratch(ctx);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    return ComputeLoss(ctx, [&](const auto* x, double* logp) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
      for (int64_t n = 0; n < n_; ++n) {
        for (int64_t d = 0; d < d_; ++d) {
          const int64_t base = n * c_ * d_ + d;
          double max = -std::numeric_limits<double>::infinity();
          for (int64_t c = 0; c < c_; ++c) max = std::max(max, AsDouble(x[base + c * d_]));
          double sum = 0;
          for (int64_t c = 0; c < c_; ++c) sum += std::exp(AsDouble(x[base + c * d_]) - max);
          const double shift = max + std::log(sum);
          for (int64_t c = 0; c < c_; ++c) {
            logp[base + c * d_] = AsDouble(x[base + c * d_]) - shift;
          }
        }
      }
      if (ctx.outputs.size() > 1 && ctx.outputs[1].valid()) {
        T* log_prob = ctx.outputs[1].data<T>();
        for (int64_t i = 0; i < n_ * c_ * d_; ++i) log_prob[i] = FromDouble<T>(logp[i]);
      }
    });
  }
};

KILN_REGISTER_KERNEL_CLASS("", "NegativeLogLikelihoodLoss", NllLossKernel);
KILN_REGISTER_KERNEL_CLASS("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyKernel);

}  // namespace

KILN_KERNEL_FILE(loss_ops);

}  // namespace kiln::kernels::loss
