// Normalization kernels (ONNX semantics, float): BatchNormalization (inference form),
// InstanceNormalization, LayerNormalization (with optional Mean / InvStdDev outputs),
// GroupNormalization (opset 18), LRN, MeanVarianceNormalization, and the optimizer's "kiln"
// LayerNormalization variant "SkipLayerNormalization" is not needed: the optimizer rewrites
// decomposed LayerNorm patterns into LayerNormalization itself.
//
// Statistics accumulate in double so that long rows (hidden sizes in the thousands) keep
// float32 accuracy comparable to the references.
#include <cmath>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernel_base.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels::nn {
namespace {

absl::Status RequireFloat(const ir::Node& node, const ReshapeContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (ctx.inputs[i].present() && ctx.inputs[i].dtype != DType::kFloat32) {
      return absl::UnimplementedError(absl::StrCat(node.Describe(), ": input ", i, " is ",
                                                   DTypeName(ctx.inputs[i].dtype),
                                                   "; only float is supported"));
    }
  }
  return absl::OkStatus();
}

// Base of the normalization kernels: the node for its attributes, and float inputs only,
// checked before each kernel's own PrepareFloat.
class FloatNormKernel : public OpKernel {
 public:
  explicit FloatNormKernel(const ir::Node& node)
      : node_(node), epsilon_(node.GetFloat("epsilon", 1e-5f)) {}
  absl::Status Reshape(ReshapeContext& ctx) final {
    KILN_RETURN_IF_ERROR(RequireFloat(node_, ctx));
    return PrepareFloat(ctx);
  }

 protected:
  virtual absl::Status PrepareFloat(ReshapeContext& ctx) = 0;

  ir::Node node_;
  const float epsilon_;  // for the kernels with an epsilon attribute
};

// Output 0 is float of x's shape, in place of x; outputs 1... (as many as the node has) are
// float statistics of shape `stats`: BatchNormalization's running mean and variance,
// LayerNormalization's Mean and InvStdDev.
void DeclareNormOutputs(ReshapeContext& ctx, const ir::Node& node, const Shape& x,
                        const Shape& stats) {
  ctx.SetNumOutputs(static_cast<int>(node.outputs.size()));
  ctx.output_dtypes[0] = DType::kFloat32;
  ctx.output_shapes[0] = x;
  ctx.output_in_place_of[0] = 0;
  for (size_t i = 1; i < node.outputs.size(); ++i) {
    ctx.output_dtypes[i] = DType::kFloat32;
    ctx.output_shapes[i] = stats;
  }
}

// BatchNormalization, inference: y = (x - mean) / sqrt(var + eps) * scale + bias per channel
// (dimension 1).
class BatchNormKernel : public FloatNormKernel {
 public:
  using FloatNormKernel::FloatNormKernel;
  absl::Status PrepareFloat(ReshapeContext& ctx) override {
    if (node_.GetInt("training_mode", 0) != 0) {
      return absl::UnimplementedError(
          absl::StrCat(node_.Describe(), ": training_mode=1 is not supported for inference"));
    }
    if (ctx.inputs.size() < 5) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": needs X, scale, B, mean, var"));
    }
    const Shape& x = ctx.inputs[0].shape;
    const int64_t c = x.rank() >= 2 ? x.dim(1) : 1;
    for (int i = 1; i < 5; ++i) {
      if (ctx.inputs[i].shape.num_elements() != c) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": input ", i, " has shape ",
                         ctx.inputs[i].shape.ToString(), "; expected [", c, "]"));
      }
    }
    DeclareNormOutputs(ctx, node_, x, Shape{c});  // running mean/var outputs: pass-through
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const int64_t n = x.rank() >= 1 ? x.dim(0) : 1;
    const int64_t c = x.rank() >= 2 ? x.dim(1) : 1;
    const int64_t inner = c == 0 || n == 0 ? 0 : x.num_elements() / (n * c);
    const float* scale = ctx.inputs[1].data<float>();
    const float* bias = ctx.inputs[2].data<float>();
    const float* mean = ctx.inputs[3].data<float>();
    const float* var = ctx.inputs[4].data<float>();
    const float* xv = x.data<float>();
    float* yv = ctx.outputs[0].data<float>();
    ctx.ParallelFor(n * c, 4, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t ch = p % c;
        const float a = scale[ch] / std::sqrt(var[ch] + epsilon_);
        const float b = bias[ch] - mean[ch] * a;
        const float* in = xv + p * inner;
        float* out = yv + p * inner;
        for (int64_t i = 0; i < inner; ++i) out[i] = in[i] * a + b;
      }
    });
    for (size_t i = 1; i < ctx.outputs.size(); ++i) {
      if (ctx.outputs[i].valid()) ctx.outputs[i].CopyFrom(ctx.inputs[i + 2]);
    }
    return absl::OkStatus();
  }
};

// The sum of in[i] (or of (in[i] - center)^2) in double. Eight independent accumulators, so
// the adds do not wait on each other (GCC keeps them scalar; the gain is the independent
// chains): one running sum is a chain of dependent adds, which made BERT-4's nine LayerNorms 7%
// of its batch-32 run (perf, issue 9). In double the order of the additions does not show in
// the float result; NaN and infinities propagate in any order.
double SumAsDouble(const float* in, int64_t n, double center, bool squares) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double d = static_cast<double>(in[i + j]) - center;
      acc[j] += squares ? d * d : d;
    }
  }
  for (; i < n; ++i) {
    const double d = static_cast<double>(in[i]) - center;
    acc[i % 8] += squares ? d * d : d;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Normalizes contiguous groups of `group_size` elements; then applies per-channel or
// per-element affine parameters. Shared by Instance, Group and Layer normalization.
void NormalizeGroups(const ComputeContext& ctx, const float* x, float* y, int64_t groups,
                     int64_t group_size, float epsilon, float* mean_out, float* inv_std_out,
                     absl::FunctionRef<void(int64_t group, float* row)> affine) {
  ctx.ParallelFor(groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const float* in = x + g * group_size;
      float* out = y + g * group_size;
      const double sum = SumAsDouble(in, group_size, 0.0, /*squares=*/false);
      const double mean = group_size > 0 ? sum / static_cast<double>(group_size) : 0;
      const double sq = SumAsDouble(in, group_size, mean, /*squares=*/true);
      const double var = group_size > 0 ? sq / static_cast<double>(group_size) : 0;
      const float inv_std = static_cast<float>(1.0 / std::sqrt(var + epsilon));
      const float m = static_cast<float>(mean);
      for (int64_t i = 0; i < group_size; ++i) out[i] = (in[i] - m) * inv_std;
      if (mean_out) mean_out[g] = m;
      if (inv_std_out) inv_std_out[g] = inv_std;
      affine(g, out);
    }
  });
}

// Instance and Group normalization: x [N, C, ...] as N * `groups` runs of consecutive elements,
// each normalized; then affine(group within its sample, row, run length) applies scale and bias.
void NormalizeChannelGroups(
    const ComputeContext& ctx, int64_t groups, float epsilon,
    absl::FunctionRef<void(int64_t group, float* row, int64_t size)> affine) {
  const Tensor& x = ctx.inputs[0];
  const int64_t total_groups = x.dim(0) * groups;
  const int64_t size = total_groups == 0 ? 0 : x.num_elements() / total_groups;
  NormalizeGroups(ctx, x.data<float>(), ctx.outputs[0].data<float>(), total_groups, size, epsilon,
                  nullptr, nullptr, [&](int64_t g, float* row) { affine(g % groups, row, size); });
}

class InstanceNormKernel : public FloatNormKernel {
 public:
  using FloatNormKernel::FloatNormKernel;
  absl::Status PrepareFloat(ReshapeContext& ctx) override {
    const Shape& x = ctx.inputs[0].shape;
    if (x.rank() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": input must be N, C, D1...; got ", x.ToString()));
    }
    DeclareOutputLikeInput0(ctx, DType::kFloat32, /*in_place_of_input0=*/true);
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const float* scale = ctx.inputs[1].data<float>();
    const float* bias = ctx.inputs[2].data<float>();
    NormalizeChannelGroups(ctx, ctx.inputs[0].dim(1), epsilon_,
                           [&](int64_t ch, float* row, int64_t size) {
                             const float s = scale[ch], b = bias[ch];
                             for (int64_t i = 0; i < size; ++i) row[i] = row[i] * s + b;
                           });
    return absl::OkStatus();
  }
};

class GroupNormKernel : public FloatNormKernel {
 public:
  using FloatNormKernel::FloatNormKernel;
  absl::Status PrepareFloat(ReshapeContext& ctx) override {
    const Shape& x = ctx.inputs[0].shape;
    groups_ = node_.GetInt("num_groups", 1);
    if (x.rank() < 2 || groups_ <= 0 || x.dim(1) % groups_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          node_.Describe(), ": ", x.dim(1), " channels do not split into num_groups=", groups_));
    }
    DeclareOutputLikeInput0(ctx, DType::kFloat32, /*in_place_of_input0=*/true);
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const int64_t c = ctx.inputs[0].dim(1);
    const float* scale = ctx.inputs[1].data<float>();
    const float* bias = ctx.inputs[2].data<float>();
    // Opset 18 has scale/bias per group; opset 21 per channel.
    const bool per_group = ctx.inputs[1].num_elements() == groups_ && groups_ != c;
    NormalizeChannelGroups(ctx, groups_, epsilon_, [&](int64_t group, float* row, int64_t size) {
      const int64_t per_channel = c == 0 ? 0 : size * groups_ / c;
      for (int64_t i = 0; i < size; ++i) {
        const int64_t ch = per_group ? group : group * (c / groups_) + i / per_channel;
        row[i] = row[i] * scale[ch] + bias[ch];
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t groups_ = 1;
};

// LayerNormalization: normalizes over dimensions [axis, rank); scale and bias broadcast over
// the normalized dimensions.
class LayerNormKernel : public FloatNormKernel {
 public:
  using FloatNormKernel::FloatNormKernel;
  absl::Status PrepareFloat(ReshapeContext& ctx) override {
    const Shape& x = ctx.inputs[0].shape;
    int64_t axis = node_.GetInt("axis", -1);
    if (axis < 0) axis += x.rank();
    if (axis < 0 || axis >= x.rank()) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": axis ",
                                                     node_.GetInt("axis", -1),
                                                     " is out of range for input ", x.ToString()));
    }
    axis_ = axis;
    int64_t inner = 1;
    for (int i = static_cast<int>(axis); i < x.rank(); ++i) inner *= x.dim(i);
    inner_ = inner;
    scale_size_ = ctx.inputs[1].shape.num_elements();
    bias_size_ =
        ctx.inputs.size() > 2 && ctx.inputs[2].present() ? ctx.inputs[2].shape.num_elements() : 0;
    if (inner_ % std::max<int64_t>(1, scale_size_) != 0 ||
        (bias_size_ && inner_ % bias_size_ != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": scale ", ctx.inputs[1].shape.ToString(),
                       " does not broadcast over the normalized size ", inner_));
    }
    Shape stats = x;
    for (int i = static_cast<int>(axis); i < x.rank(); ++i) stats.set_dim(i, 1);
    DeclareNormOutputs(ctx, node_, x, stats);
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const int64_t groups = inner_ == 0 ? 0 : x.num_elements() / inner_;
    const float* scale = ctx.inputs[1].data<float>();
    const float* bias = bias_size_ ? ctx.inputs[2].data<float>() : nullptr;
    float* mean =
        ctx.outputs.size() > 1 && ctx.outputs[1].valid() ? ctx.outputs[1].data<float>() : nullptr;
    float* inv_std =
        ctx.outputs.size() > 2 && ctx.outputs[2].valid() ? ctx.outputs[2].data<float>() : nullptr;
    const int64_t inner = inner_, ss = scale_size_, bs = bias_size_;
    NormalizeGroups(ctx, x.data<float>(), ctx.outputs[0].data<float>(), groups, inner, epsilon_,
                    mean, inv_std, [&](int64_t, float* row) {
                      // Without B nothing is added: -0.0 + 0.0 would turn a -0.0 into +0.0.
                      if (bias == nullptr && ss == inner) {
                        for (int64_t i = 0; i < inner; ++i) row[i] = row[i] * scale[i];
                      } else if (bias == nullptr) {
                        for (int64_t i = 0; i < inner; ++i) row[i] = row[i] * scale[i % ss];
                      } else if (ss == inner && bs == inner) {
                        for (int64_t i = 0; i < inner; ++i) row[i] = row[i] * scale[i] + bias[i];
                      } else {
                        for (int64_t i = 0; i < inner; ++i) {
                          row[i] = row[i] * scale[i % ss] + bias[i % bs];
                        }
                      }
                    });
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = -1, inner_ = 1, scale_size_ = 1, bias_size_ = 0;
};

// LRN across channels: y = x / (bias + alpha / size * sum(x^2 over the window))^beta.
class LrnKernel : public FloatNormKernel {
 public:
  using FloatNormKernel::FloatNormKernel;
  absl::Status PrepareFloat(ReshapeContext& ctx) override {
    if (ctx.inputs[0].shape.rank() < 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          node_.Describe(), ": input must be N, C, D1...; got ", ctx.inputs[0].shape.ToString()));
    }
    size_ = node_.GetInt("size", 1);
    alpha_ = node_.GetFloat("alpha", 1e-4f);
    beta_ = node_.GetFloat("beta", 0.75f);
    bias_ = node_.GetFloat("bias", 1.0f);
    DeclareOutputLikeInput0(ctx, DType::kFloat32, /*in_place_of_input0=*/false);
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const int64_t n = x.dim(0), c = x.dim(1);
    const int64_t inner = n * c == 0 ? 0 : x.num_elements() / (n * c);
    const float* xv = x.data<float>();
    float* yv = ctx.outputs[0].data<float>();
    const int64_t lo = (size_ - 1) / 2, hi = size_ - 1 - lo;  // floor and ceil halves
    ctx.ParallelFor(n * c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t b = p / c, ch = p % c;
        const int64_t c0 = std::max<int64_t>(0, ch - lo), c1 = std::min<int64_t>(c - 1, ch + hi);
        for (int64_t i = 0; i < inner; ++i) {
          float sq = 0;
          for (int64_t k = c0; k <= c1; ++k) {
            const float v = xv[(b * c + k) * inner + i];
            sq += v * v;
          }
          yv[p * inner + i] = xv[p * inner + i] / std::pow(bias_ + alpha_ / size_ * sq, beta_);
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  float alpha_, beta_, bias_;
};

// MeanVarianceNormalization: (x - mean) / sqrt(var) over `axes` (default 0, 2, 3).
class MvnKernel : public FloatNormKernel {
 public:
  using FloatNormKernel::FloatNormKernel;
  absl::Status PrepareFloat(ReshapeContext& ctx) override {
    const Shape& x = ctx.inputs[0].shape;
    std::vector<int64_t> axes = node_.GetInts("axes", {0, 2, 3});
    reduced_.assign(x.rank(), false);
    for (int64_t a : axes) {
      if (a < 0) a += x.rank();
      if (a < 0 || a >= x.rank()) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": axis out of range for ", x.ToString()));
      }
      reduced_[a] = true;
    }
    shape_ = x;
    DeclareOutputLikeInput0(ctx, DType::kFloat32, /*in_place_of_input0=*/false);
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const int rank = shape_.rank();
    const int64_t total = shape_.num_elements();
    // Map each element to the index of its statistics slot (the non-reduced coordinates).
    std::vector<int64_t> slot(total);
    int64_t slots = 1;
    for (int i = 0; i < rank; ++i) {
      if (!reduced_[i]) slots *= shape_.dim(i);
    }
    std::vector<int64_t> idx(rank, 0);
    for (int64_t e = 0; e < total; ++e) {
      int64_t s = 0;
      for (int i = 0; i < rank; ++i) {
        if (!reduced_[i]) s = s * shape_.dim(i) + idx[i];
      }
      slot[e] = s;
      for (int i = rank - 1; i >= 0; --i) {
        if (++idx[i] < shape_.dim(i)) break;
        idx[i] = 0;
      }
    }
    std::vector<double> sum(slots, 0), sq(slots, 0);
    std::vector<int64_t> count(slots, 0);
    const float* x = ctx.inputs[0].data<float>();
    float* y = ctx.outputs[0].data<float>();
    for (int64_t e = 0; e < total; ++e) {
      sum[slot[e]] += x[e];
      sq[slot[e]] += static_cast<double>(x[e]) * x[e];
      count[slot[e]]++;
    }
    for (int64_t e = 0; e < total; ++e) {
      const double m = sum[slot[e]] / count[slot[e]];
      const double var = sq[slot[e]] / count[slot[e]] - m * m;
      y[e] = static_cast<float>((x[e] - m) / (std::sqrt(std::max(var, 0.0)) + 1e-9));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<bool> reduced_;
  Shape shape_;
};

KILN_REGISTER_KERNEL_CLASS("", "BatchNormalization", BatchNormKernel);
KILN_REGISTER_KERNEL_CLASS("", "InstanceNormalization", InstanceNormKernel);
KILN_REGISTER_KERNEL_CLASS("", "GroupNormalization", GroupNormKernel);
KILN_REGISTER_KERNEL_CLASS("", "LayerNormalization", LayerNormKernel);
KILN_REGISTER_KERNEL_CLASS("", "LRN", LrnKernel);
KILN_REGISTER_KERNEL_CLASS("", "MeanVarianceNormalization", MvnKernel);

}  // namespace

KILN_KERNEL_FILE(nn_norm);

}  // namespace kiln::kernels::nn
