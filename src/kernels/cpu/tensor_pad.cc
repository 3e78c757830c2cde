// Pad (constant/reflect/edge/wrap), kiln::MirrorPad (REFLECT/SYMMETRIC), Trilu,
// ReverseSequence, kiln::Bucketize.
#include <algorithm>

#include "kernels/cpu/tensor_common.h"
#include "kiln/core/memory_budget.h"

namespace kiln::kernels::tensor_ops {
namespace {

enum class PadMode { kConstant, kReflect, kEdge, kWrap, kSymmetric };

// Source index along one axis for output position i, or -1 for the constant value.
int64_t MapPadIndex(int64_t i, int64_t begin, int64_t dim, PadMode mode) {
  const int64_t s = i - begin;
  if (s >= 0 && s < dim) return s;
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return std::clamp<int64_t>(s, 0, dim - 1);
    case PadMode::kWrap:
      return ((s % dim) + dim) % dim;
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      const int64_t period = 2 * (dim - 1);
      const int64_t m = ((s % period) + period) % period;
      return m < dim ? m : period - m;
    }
    case PadMode::kSymmetric: {
      const int64_t period = 2 * dim;
      const int64_t m = ((s % period) + period) % period;
      return m < dim ? m : period - 1 - m;
    }
  }
  return -1;
}

struct PadPlan {
  Shape out_shape;
  std::vector<std::vector<int64_t>> maps;  // per axis: source index per output position
};

// Shared by Pad and MirrorPad: builds the per-axis maps and copies row by row.
class PadKernelBase : public TensorKernel {
 public:
  PadKernelBase(const ir::Node& node, std::vector<int> param_inputs)
      : TensorKernel(node), param_inputs_(std::move(param_inputs)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() < 2) return Error("expects (data, pads)");
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    if (InputPresent(ctx, 2) && ctx.inputs[2].dtype != ctx.inputs[0].dtype &&
        constant_input_ == 2) {
      return Error("constant_value dtype ", DTypeName(ctx.inputs[2].dtype), " differs from data ",
                   DTypeName(ctx.inputs[0].dtype));
    }
    std::vector<const Tensor*> params;
    dynamic_ = !ConstantParams(ctx, param_inputs_, &params);
    if (dynamic_) return absl::OkStatus();
    auto plan = MakePlan(ctx.inputs[0].shape, params);
    if (!plan.ok()) return Annotate(plan.status(), where());
    plan_ = *std::move(plan);
    ctx.output_shapes[0] = plan_.out_shape;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    const PadPlan* plan = &plan_;
    PadPlan dynamic_plan;
    if (dynamic_) {
      std::vector<const Tensor*> params;
      for (const Tensor& t : ctx.inputs) params.push_back(t.valid() ? &t : nullptr);
      auto p = MakePlan(in.shape(), params);
      if (!p.ok()) return Annotate(p.status(), where());
      dynamic_plan = *std::move(p);
      plan = &dynamic_plan;
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, in.dtype(), plan->out_shape).status());
    }
    Tensor& out = ctx.outputs[0];
    const Tensor* cval = constant_input_ >= 0 && InputPresent(ctx, constant_input_) &&
                                 ctx.inputs[constant_input_].num_elements() > 0
                             ? &ctx.inputs[constant_input_]
                             : nullptr;
    Run(in, *plan, cval, out, ctx);
    return absl::OkStatus();
  }

 protected:
  virtual absl::StatusOr<PadPlan> MakePlan(const Shape& in,
                                           const std::vector<const Tensor*>& params) const = 0;

  // pads_begin/pads_end per axis -> plan.
  absl::StatusOr<PadPlan> PlanFromPads(const Shape& in, const std::vector<int64_t>& pb,
                                       const std::vector<int64_t>& pe) const {
    PadPlan plan;
    for (int d = 0; d < in.rank(); ++d) {
      const int64_t dim = in.dim(d);
      int64_t od;
      if (__builtin_add_overflow(dim, pb[d], &od) || __builtin_add_overflow(od, pe[d], &od)) {
        return Error("pads ", pb[d], ",", pe[d], " overflow axis ", d);
      }
      if (od < 0) return Error("pads ", pb[d], ",", pe[d], " make axis ", d, " negative");
      if (mode_ != PadMode::kConstant && dim == 0 && od > 0) {
        return Error("cannot pad empty axis ", d, " in a non-constant mode");
      }
      plan.out_shape.push_back(od);
    }
    // The index maps below are as long as the output's axes: pads from a request must not
    // size them beyond what any run could hold.
    auto elements = CheckedNumElements(plan.out_shape.dims());
    if (!elements.ok()) return Error(elements.status().message());
    if (static_cast<size_t>(*elements) > MemoryBudget::DefaultLimit()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "Pad to ", plan.out_shape.ToString(), " is larger than any run's memory budget"));
    }
    for (int d = 0; d < in.rank(); ++d) {
      const int64_t dim = in.dim(d), od = plan.out_shape.dim(d);
      std::vector<int64_t> map(od);
      for (int64_t i = 0; i < od; ++i) map[i] = MapPadIndex(i, pb[d], dim, mode_);
      plan.maps.push_back(std::move(map));
    }
    return plan;
  }

  PadMode mode_ = PadMode::kConstant;
  int constant_input_ = -1;

 private:
  void Run(const Tensor& in, const PadPlan& plan, const Tensor* cval, Tensor& out,
           const ComputeContext& ctx) const {
    const int rank = in.rank();
    if (out.num_elements() == 0) return;
    if (rank == 0) {
      CopyElements(in.dtype(), in.raw_data(), out.raw_data(), 1);
      return;
    }
    const Dims strides = RowMajorStrides(in.shape().dims());
    const std::vector<int64_t>& last = plan.maps[rank - 1];
    const int64_t width = plan.out_shape.dim(rank - 1);
    // The contiguous run of the last axis that copies straight from the input.
    int64_t run_begin = 0, run_end = 0;
    for (int64_t i = 0; i < width;) {
      if (last[i] < 0) {
        ++i;
        continue;
      }
      int64_t j = i + 1;
      while (j < width && last[j] == last[j - 1] + 1) ++j;
      if (j - i > run_end - run_begin) {
        run_begin = i;
        run_end = j;
      }
      i = j;
    }
    const int64_t rows = out.num_elements() / width;
    VisitBySize(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* src = in.data<T>();
      T* dst = out.data<T>();
      const T c = cval != nullptr ? *cval->data<T>() : T{};
      auto work = [&](int64_t begin, int64_t end) {
        Dims coord(rank, 0);
        int64_t rem = begin;
        for (int d = rank - 2; d >= 0; --d) {
          coord[d] = rem % plan.out_shape.dim(d);
          rem /= plan.out_shape.dim(d);
        }
        for (int64_t row = begin; row < end; ++row) {
          T* o = dst + row * width;
          int64_t off = 0;
          bool constant_row = false;
          for (int d = 0; d < rank - 1; ++d) {
            const int64_t m = plan.maps[d][coord[d]];
            if (m < 0) {
              constant_row = true;
              break;
            }
            off += m * strides[d];
          }
          if (constant_row) {
            std::fill_n(o, width, c);
          } else {
            const T* s = src + off;
            for (int64_t i = 0; i < run_begin; ++i) o[i] = last[i] < 0 ? c : s[last[i]];
            if (run_end > run_begin) {
              std::copy(s + last[run_begin], s + last[run_begin] + (run_end - run_begin),
                        o + run_begin);
            }
            for (int64_t i = run_end; i < width; ++i) o[i] = last[i] < 0 ? c : s[last[i]];
          }
          for (int d = rank - 2; d >= 0; --d) {
            if (++coord[d] < plan.out_shape.dim(d)) break;
            coord[d] = 0;
          }
        }
      };
      ctx.ParallelFor(rows, std::max<int64_t>(1, (1 << 15) / width), work);
    });
  }

  std::vector<int> param_inputs_;
  bool dynamic_ = false;
  PadPlan plan_;
};

// Pad(data, pads, constant_value?, axes?), mode constant (default), reflect, edge, wrap.
// pads = [begin of each axis..., end of each axis...]; negative pads crop.
class PadKernel : public PadKernelBase {
 public:
  explicit PadKernel(const ir::Node& node) : PadKernelBase(node, {1, 3}) {
    const std::string mode = node.GetString("mode", "constant");
    if (mode == "constant") {
      mode_ = PadMode::kConstant;
    } else if (mode == "reflect") {
      mode_ = PadMode::kReflect;
    } else if (mode == "edge") {
      mode_ = PadMode::kEdge;
    } else if (mode == "wrap") {
      mode_ = PadMode::kWrap;
    } else {
      SetAttrError(Error("unknown mode '", mode, "'"));
    }
    constant_input_ = 2;
  }

 protected:
  absl::StatusOr<PadPlan> MakePlan(const Shape& in,
                                   const std::vector<const Tensor*>& params) const override {
    if (params.size() < 2 || params[1] == nullptr) return Error("pads input is missing");
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pads, ReadInts(*params[1], "pads"));
    const int rank = in.rank();
    std::vector<int64_t> axes;
    if (params.size() > 3 && params[3] != nullptr) {
      KILN_ASSIGN_OR_RETURN(axes, ReadInts(*params[3], "axes"));
    } else {
      for (int i = 0; i < rank; ++i) axes.push_back(i);
    }
    if (pads.size() != 2 * axes.size()) {
      return Error("pads has ", pads.size(), " values, expected ", 2 * axes.size(),
                   " for input ", in.ToString());
    }
    std::vector<int64_t> pb(rank, 0), pe(rank, 0);
    const size_t n = axes.size();
    for (size_t i = 0; i < n; ++i) {
      KILN_ASSIGN_OR_RETURN(int a, NormalizeAxis(axes[i], rank, "axis"));
      pb[a] = pads[i];
      pe[a] = pads[n + i];
    }
    return PlanFromPads(in, pb, pe);
  }
};

// kiln::MirrorPad(input, paddings[rank, 2]), mode "REFLECT" or "SYMMETRIC": TensorFlow's
// MirrorPad. REFLECT pads at most dim-1 per side (edge not repeated), SYMMETRIC at most dim
// (edge repeated); ONNX Pad has no symmetric mode, hence a Kiln op.
class MirrorPadKernel : public PadKernelBase {
 public:
  explicit MirrorPadKernel(const ir::Node& node) : PadKernelBase(node, {1}) {
    const std::string mode = node.GetString("mode", "REFLECT");
    if (mode == "REFLECT") {
      mode_ = PadMode::kReflect;
    } else if (mode == "SYMMETRIC") {
      mode_ = PadMode::kSymmetric;
    } else {
      SetAttrError(Error("mode must be REFLECT or SYMMETRIC, got '", mode, "'"));
    }
  }

 protected:
  absl::StatusOr<PadPlan> MakePlan(const Shape& in,
                                   const std::vector<const Tensor*>& params) const override {
    if (params.size() < 2 || params[1] == nullptr) return Error("paddings input is missing");
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> p, ReadInts(*params[1], "paddings"));
    const int rank = in.rank();
    if (static_cast<int>(p.size()) != 2 * rank) {
      return Error("paddings must have shape [", rank, ", 2], got ", params[1]->shape().ToString());
    }
    std::vector<int64_t> pb(rank), pe(rank);
    const int64_t slack = mode_ == PadMode::kReflect ? 1 : 0;
    for (int d = 0; d < rank; ++d) {
      pb[d] = p[2 * d];
      pe[d] = p[2 * d + 1];
      if (pb[d] < 0 || pe[d] < 0 || pb[d] > in.dim(d) - slack || pe[d] > in.dim(d) - slack) {
        return Error("paddings ", pb[d], ",", pe[d], " invalid for dim ", d, " of size ",
                     in.dim(d), " in ", mode_ == PadMode::kReflect ? "REFLECT" : "SYMMETRIC",
                     " mode");
      }
    }
    return PlanFromPads(in, pb, pe);
  }
};

// ---------------------------------------------------------------------------------------
// Trilu(input, k?), upper (1): keeps the upper (j - i >= k) or lower (j - i <= k) triangle
// of the last two dims, zeroing the rest.
class TriluKernel : public TensorKernel {
 public:
  explicit TriluKernel(const ir::Node& node)
      : TensorKernel(node), upper_(node.GetInt("upper", 1) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty() || ctx.inputs[0].shape.rank() < 2) {
      return Error("input must have rank >= 2");
    }
    if (InputPresent(ctx, 1) && ctx.inputs[1].shape.num_elements() != 1) {
      return Error("k must be a scalar");
    }
    DeclareOutputLikeInput0(ctx, ctx.inputs[0].dtype, /*in_place_of_input0=*/true);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    int64_t k = 0;
    if (InputPresent(ctx, 1)) {
      KILN_ASSIGN_OR_RETURN(k, ReadScalarInt(ctx.inputs[1], "k"));
    }
    const int64_t rows = in.dim(in.rank() - 2), cols = in.dim(in.rank() - 1);
    const int64_t mats = rows * cols == 0 ? 0 : in.num_elements() / (rows * cols);
    VisitBySize(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* s = in.data<T>();
      T* d = out.data<T>();
      ctx.ParallelFor(mats * rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t r = begin; r < end; ++r) {
                          const int64_t i = r % rows;
                          for (int64_t j = 0; j < cols; ++j) {
                            const bool keep = upper_ ? j - i >= k : j - i <= k;
                            d[r * cols + j] = keep ? s[r * cols + j] : T{};
                          }
                        }
                      });
    });
    return absl::OkStatus();
  }

 private:
  bool upper_;
};

// ReverseSequence(input, sequence_lens), batch_axis (1), time_axis (0): reverses the first
// sequence_lens[b] steps along time_axis for each batch entry b.
class ReverseSequenceKernel : public TensorKernel {
 public:
  explicit ReverseSequenceKernel(const ir::Node& node)
      : TensorKernel(node),
        batch_attr_(node.GetInt("batch_axis", 1)),
        time_attr_(node.GetInt("time_axis", 0)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2) return Error("expects (input, sequence_lens)");
    const Shape& in = ctx.inputs[0].shape;
    auto b = NormalizeAxis(batch_attr_, in.rank(), "batch_axis");
    auto t = NormalizeAxis(time_attr_, in.rank(), "time_axis");
    if (!b.ok() || !t.ok() || *b == *t || in.rank() < 2) {
      return Error("batch_axis ", batch_attr_, " and time_axis ", time_attr_, " invalid for ",
                   in.ToString());
    }
    batch_ = *b;
    time_ = *t;
    if (ctx.inputs[1].shape != Shape{in.dim(batch_)}) {
      return Error("sequence_lens has shape ", ctx.inputs[1].shape.ToString(), ", expected [",
                   in.dim(batch_), "]");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = in;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lens, ReadInts(ctx.inputs[1], "sequence_lens"));
    const int64_t steps = in.dim(time_);
    for (int64_t l : lens) {
      if (l < 0 || l > steps) return Error("sequence length ", l, " outside [0, ", steps, "]");
    }
    const Dims strides = RowMajorStrides(in.shape().dims());
    const int rank = in.rank();
    VisitBySize(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* s = in.data<T>();
      T* d = ctx.outputs[0].data<T>();
      Dims coord(rank, 0);
      for (int64_t i = 0; i < in.num_elements(); ++i) {
        const int64_t t = coord[time_], len = lens[coord[batch_]];
        const int64_t src_t = t < len ? len - 1 - t : t;
        d[i] = s[i + (src_t - t) * strides[time_]];
        for (int dd = rank - 1; dd >= 0; --dd) {
          if (++coord[dd] < in.dim(dd)) break;
          coord[dd] = 0;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t batch_attr_, time_attr_;
  int batch_ = 1, time_ = 0;
};

// kiln::Bucketize(input), boundaries (floats, sorted ascending) -> int32 of the same shape:
// the number of boundaries <= each value (TensorFlow's Bucketize).
class BucketizeKernel : public TensorKernel {
 public:
  explicit BucketizeKernel(const ir::Node& node)
      : TensorKernel(node), boundaries_(node.GetFloats("boundaries")) {
    if (!std::is_sorted(boundaries_.begin(), boundaries_.end())) {
      SetAttrError(Error("boundaries must be sorted"));
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() != 1) return Error("expects one input");
    const DType d = ctx.inputs[0].dtype;
    if (d == DType::kString || d == DType::kBool) {
      return Error("input must be numeric, got ", DTypeName(d));
    }
    DeclareOutputLikeInput0(ctx, DType::kInt32, /*in_place_of_input0=*/false);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    int32_t* out = ctx.outputs[0].data<int32_t>();
    VisitDType(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, std::string>) {
        const T* s = in.data<T>();
        ctx.ParallelFor(in.num_elements(), 1 << 14, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const double v = AsDouble(s[i]);
            out[i] = static_cast<int32_t>(
                std::upper_bound(boundaries_.begin(), boundaries_.end(), v,
                                 [](double x, float bound) { return x < bound; }) -
                boundaries_.begin());
          }
        });
      }
    });
    return absl::OkStatus();
  }

 private:
  std::vector<float> boundaries_;
};

KILN_REGISTER_KERNEL_CLASS("", "Pad", PadKernel);
KILN_REGISTER_KERNEL_CLASS("", "Trilu", TriluKernel);
KILN_REGISTER_KERNEL_CLASS("", "ReverseSequence", ReverseSequenceKernel);
// kiln::MirrorPad(input, paddings): see MirrorPadKernel. Attribute mode: "REFLECT" (default)
// or "SYMMETRIC"; paddings is int32/int64 [rank, 2] of (before, after) per dim.
KILN_REGISTER_KERNEL_CLASS("kiln", "MirrorPad", MirrorPadKernel);
// kiln::Bucketize(input) -> int32: TensorFlow's Bucketize; attribute boundaries (floats).
KILN_REGISTER_KERNEL_CLASS("kiln", "Bucketize", BucketizeKernel);

}  // namespace

KILN_KERNEL_FILE(tensor_pad);

}  // namespace kiln::kernels::tensor_ops
