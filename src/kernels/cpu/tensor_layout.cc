// Layout ops that reduce to strided copies: Transpose, Concat, Split, Slice, kiln::StridedSlice,
// DepthToSpace, SpaceToDepth.
#include <algorithm>
#include <limits>

#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::tensor_ops {
namespace {

// A strided view of input 0 that becomes output 0 (offset and strides in elements).
struct View {
  Shape out_shape;
  int64_t offset = 0;
  Dims shape, strides;
};

// Base for ops whose output is one strided view of the input, with parameters from inputs
// 1.. that may be constant (shape fixed at Reshape) or not (dynamic output).
class ViewCopyKernel : public TensorKernel {
 public:
  ViewCopyKernel(const ir::Node& node, std::vector<int> param_inputs)
      : TensorKernel(node), param_inputs_(std::move(param_inputs)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty() || !ctx.inputs[0].present()) return Error("data input is missing");
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    std::vector<const Tensor*> params;
    dynamic_ = !ConstantParams(ctx, param_inputs_, &params);
    if (dynamic_) return absl::OkStatus();
    auto view = MakeView(ctx.inputs[0].shape, params);
    if (!view.ok()) return Annotate(view.status(), where());
    view_ = *std::move(view);
    ctx.output_shapes[0] = view_.out_shape;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    if (dynamic_) {
      std::vector<const Tensor*> params;
      for (const Tensor& t : ctx.inputs) params.push_back(t.valid() ? &t : nullptr);
      auto view = MakeView(in.shape(), params);
      if (!view.ok()) return Annotate(view.status(), where());
      KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, in.dtype(), view->out_shape));
      Tensor& out = *out_ptr;
      StridedCopy(in.dtype(), in.raw_data(), view->offset, view->shape, view->strides,
                  out.raw_data(), &ctx);
      return absl::OkStatus();
    }
    StridedCopy(in.dtype(), in.raw_data(), view_.offset, view_.shape, view_.strides,
                ctx.outputs[0].raw_data(), &ctx);
    return absl::OkStatus();
  }

 protected:
  virtual absl::StatusOr<View> MakeView(const Shape& in,
                                        const std::vector<const Tensor*>& params) const = 0;

 private:
  std::vector<int> param_inputs_;
  bool dynamic_ = false;
  View view_;
};

// Transpose(data), perm (default: reversed dims).
class TransposeKernel : public ViewCopyKernel {
 public:
  explicit TransposeKernel(const ir::Node& node)
      : ViewCopyKernel(node, {}), perm_(node.GetInts("perm")) {}

 protected:
  absl::StatusOr<View> MakeView(const Shape& in, const std::vector<const Tensor*>&) const override {
    const int rank = in.rank();
    std::vector<int64_t> perm = perm_;
    if (perm.empty()) {
      for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
    }
    if (static_cast<int>(perm.size()) != rank) {
      return Error("perm has ", perm.size(), " entries for input of rank ", rank);
    }
    std::vector<bool> seen(rank, false);
    const Dims in_strides = RowMajorStrides(in.dims());
    View v;
    for (int64_t p : perm) {
      KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(p, rank, "perm entry"));
      if (seen[axis]) return Error("perm repeats axis ", p);
      seen[axis] = true;
      v.out_shape.push_back(in.dim(axis));
      v.shape.push_back(in.dim(axis));
      v.strides.push_back(in_strides[axis]);
    }
    return v;
  }

 private:
  std::vector<int64_t> perm_;
};

// Slice(data, starts, ends, axes?, steps?) with ONNX's clamping and negative steps.
class SliceKernel : public ViewCopyKernel {
 public:
  explicit SliceKernel(const ir::Node& node) : ViewCopyKernel(node, {1, 2, 3, 4}) {}

 protected:
  absl::StatusOr<View> MakeView(const Shape& in,
                                const std::vector<const Tensor*>& params) const override {
    const int rank = in.rank();
    if (params.size() < 3 || params[1] == nullptr || params[2] == nullptr) {
      return Error("starts and ends are required");
    }
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> starts, ReadInts(*params[1], "starts"));
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ends, ReadInts(*params[2], "ends"));
    std::vector<int64_t> axes, steps;
    if (params.size() > 3 && params[3] != nullptr) {
      KILN_ASSIGN_OR_RETURN(axes, ReadInts(*params[3], "axes"));
    } else {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (params.size() > 4 && params[4] != nullptr) {
      KILN_ASSIGN_OR_RETURN(steps, ReadInts(*params[4], "steps"));
    } else {
      steps.assign(starts.size(), 1);
    }
    if (ends.size() != starts.size() || axes.size() != starts.size() ||
        steps.size() != starts.size()) {
      return Error("starts, ends, axes and steps must have the same length");
    }
    const Dims in_strides = RowMajorStrides(in.dims());
    std::vector<int64_t> begin(rank, 0), count(in.dims().begin(), in.dims().end()),
        step(rank, 1);
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < starts.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axes[i], rank, "axis"));
      if (seen[axis]) return Error("axis ", axes[i], " is repeated");
      seen[axis] = true;
      const int64_t dim = in.dim(axis), s = steps[i];
      if (s == 0) return Error("step must not be 0");
      int64_t b = starts[i], e = ends[i];
      if (b < 0) b += dim;
      if (e < 0) e += dim;
      if (s > 0) {
        b = std::clamp<int64_t>(b, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
        count[axis] = e > b ? (e - b + s - 1) / s : 0;
      } else {
        b = std::clamp<int64_t>(b, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
        count[axis] = b > e ? (b - e - s - 1) / (-s) : 0;
      }
      begin[axis] = count[axis] > 0 ? b : 0;
      step[axis] = s;
    }
    View v;
    for (int i = 0; i < rank; ++i) {
      v.out_shape.push_back(count[i]);
      v.shape.push_back(count[i]);
      v.strides.push_back(in_strides[i] * step[i]);
      v.offset += begin[i] * in_strides[i];
    }
    return v;
  }
};

// kiln::StridedSlice(input, begin, end, strides): TensorFlow's StridedSlice, with int attrs
// begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask (bit i refers to entry
// i of begin/end/strides). Follows TF's dense-spec construction: a missing ellipsis is
// implied at the end, new axes insert unit dims, shrunk axes take one element and drop the dim.
class StridedSliceKernel : public ViewCopyKernel {
 public:
  explicit StridedSliceKernel(const ir::Node& node)
      : ViewCopyKernel(node, {1, 2, 3}),
        begin_mask_(node.GetInt("begin_mask", 0)),
        end_mask_(node.GetInt("end_mask", 0)),
        ellipsis_mask_(node.GetInt("ellipsis_mask", 0)),
        new_axis_mask_(node.GetInt("new_axis_mask", 0)),
        shrink_axis_mask_(node.GetInt("shrink_axis_mask", 0)) {}

 protected:
  absl::StatusOr<View> MakeView(const Shape& in,
                                const std::vector<const Tensor*>& params) const override {
    if (params.size() < 3 || params[1] == nullptr || params[2] == nullptr) {
      return Error("begin and end are required");
    }
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sbegin, ReadInts(*params[1], "begin"));
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> send, ReadInts(*params[2], "end"));
    std::vector<int64_t> sstrides(sbegin.size(), 1);
    if (params.size() > 3 && params[3] != nullptr) {
      KILN_ASSIGN_OR_RETURN(sstrides, ReadInts(*params[3], "strides"));
    }
    if (send.size() != sbegin.size() || sstrides.size() != sbegin.size()) {
      return Error("begin, end and strides must have the same length");
    }
    if (ellipsis_mask_ & (ellipsis_mask_ - 1)) return Error("more than one ellipsis");
    int sparse_dims = static_cast<int>(sbegin.size());
    int64_t ellipsis_mask = ellipsis_mask_;
    int add_after_ellipsis = 0;
    bool ellipsis_seen = false;
    for (int i = 0; i < sparse_dims; ++i) {
      if (ellipsis_seen && ((1LL << i) & new_axis_mask_)) ++add_after_ellipsis;
      if ((1LL << i) & ellipsis_mask) ellipsis_seen = true;
    }
    if (!ellipsis_seen) {
      ellipsis_mask |= 1LL << sparse_dims;
      ++sparse_dims;
    }
    const int rank = in.rank();
    constexpr int64_t kNewAxis = -1, kShrinkAxis = -2;
    std::vector<int64_t> begin(rank, 0), end(rank, 0), stride(rank, 1);
    std::vector<bool> bmask(rank, false), emask(rank, false), shrink(rank, false);
    std::vector<int64_t> final_gather;
    int full = 0;
    for (int i = 0; i < sparse_dims; ++i) {
      const int64_t bit = 1LL << i;
      if (ellipsis_mask & bit) {
        const int next = std::min(rank - (sparse_dims - i) + 1 + add_after_ellipsis, rank);
        for (; full < next; ++full) {
          bmask[full] = emask[full] = true;
          final_gather.push_back(full);
        }
      } else if (new_axis_mask_ & bit) {
        final_gather.push_back(kNewAxis);
      } else {
        if (full >= rank) {
          return Error("slice index ", i, " exceeds input rank ", rank, " (shape ",
                       in.ToString(), ")");
        }
        begin[full] = sbegin[i];
        end[full] = send[i];
        stride[full] = sstrides[i];
        bmask[full] = (begin_mask_ & bit) != 0;
        emask[full] = (end_mask_ & bit) != 0;
        shrink[full] = (shrink_axis_mask_ & bit) != 0;
        final_gather.push_back(shrink[full] ? kShrinkAxis : full);
        ++full;
      }
    }
    const Dims in_strides = RowMajorStrides(in.dims());
    View v;
    std::vector<int64_t> processing(rank);
    for (int i = 0; i < rank; ++i) {
      const int64_t dim = in.dim(i), s = stride[i];
      if (s == 0) return Error("stride ", i, " is 0");
      int64_t b, count;
      if (shrink[i]) {
        b = begin[i] < 0 ? begin[i] + dim : begin[i];
        if (b < 0 || b >= dim) {
          return Error("index ", begin[i], " out of bounds for dim ", i, " of size ", dim);
        }
        count = 1;
      } else {
        auto canonical = [&](int64_t x, bool masked, bool is_begin) -> int64_t {
          if (masked) return s > 0 ? (is_begin ? 0 : dim) : (is_begin ? dim - 1 : -1);
          const int64_t fwd = x < 0 ? x + dim : x;
          return s > 0 ? std::clamp<int64_t>(fwd, 0, dim) : std::clamp<int64_t>(fwd, -1, dim - 1);
        };
        b = canonical(begin[i], bmask[i], true);
        const int64_t e = canonical(end[i], emask[i], false);
        count = s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e - s - 1) / (-s) : 0);
      }
      processing[i] = count;
      v.shape.push_back(count);
      v.strides.push_back(in_strides[i] * s);
      if (count > 0) v.offset += b * in_strides[i];
    }
    for (int64_t g : final_gather) {
      if (g == kNewAxis) {
        v.out_shape.push_back(1);
      } else if (g >= 0) {
        v.out_shape.push_back(processing[g]);
      }
    }
    return v;
  }

 private:
  int64_t begin_mask_, end_mask_, ellipsis_mask_, new_axis_mask_, shrink_axis_mask_;
};

// DepthToSpace(input[N, C, H, W]), blocksize, mode DCR (default) or CRD.
class DepthToSpaceKernel : public ViewCopyKernel {
 public:
  explicit DepthToSpaceKernel(const ir::Node& node)
      : ViewCopyKernel(node, {}),
        block_(node.GetInt("blocksize", 0)),
        crd_(node.GetString("mode", "DCR") == "CRD") {
    const std::string mode = node.GetString("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") SetAttrError(Error("unknown mode '", mode, "'"));
  }

 protected:
  absl::StatusOr<View> MakeView(const Shape& in, const std::vector<const Tensor*>&) const override {
    if (in.rank() != 4) return Error("input must be 4-D [N, C, H, W], got ", in.ToString());
    const int64_t b = block_, n = in.dim(0), c = in.dim(1), h = in.dim(2), w = in.dim(3);
    if (b <= 0 || c % (b * b) != 0) {
      return Error("channels ", c, " not divisible by blocksize^2 (blocksize ", b, ")");
    }
    const int64_t oc = c / (b * b), hw = h * w;
    View v;
    v.out_shape = Shape{n, oc, h * b, w * b};
    // Output viewed as [N, C', H, b1, W, b2].
    v.shape = {n, oc, h, b, w, b};
    if (crd_) {
      v.strides = {c * hw, b * b * hw, w, b * hw, 1, hw};
    } else {
      v.strides = {c * hw, hw, w, b * oc * hw, 1, oc * hw};
    }
    return v;
  }

 private:
  int64_t block_;
  bool crd_;
};

// SpaceToDepth(input[N, C, H, W]), blocksize -> [N, C*b*b, H/b, W/b].
class SpaceToDepthKernel : public ViewCopyKernel {
 public:
  explicit SpaceToDepthKernel(const ir::Node& node)
      : ViewCopyKernel(node, {}), block_(node.GetInt("blocksize", 0)) {}

 protected:
  absl::StatusOr<View> MakeView(const Shape& in, const std::vector<const Tensor*>&) const override {
    if (in.rank() != 4) return Error("input must be 4-D [N, C, H, W], got ", in.ToString());
    const int64_t b = block_, n = in.dim(0), c = in.dim(1), h = in.dim(2), w = in.dim(3);
    if (b <= 0 || h % b != 0 || w % b != 0) {
      return Error("spatial dims ", h, "x", w, " not divisible by blocksize ", b);
    }
    View v;
    v.out_shape = Shape{n, c * b * b, h / b, w / b};
    // Output viewed as [N, b1, b2, C, H', W'].
    v.shape = {n, b, b, c, h / b, w / b};
    v.strides = {c * h * w, w, 1, h * w, b * w, b};
    return v;
  }

 private:
  int64_t block_;
};

// ---------------------------------------------------------------------------------------
// Concat(inputs...), axis.
class ConcatKernel : public TensorKernel {
 public:
  explicit ConcatKernel(const ir::Node& node)
      : TensorKernel(node), axis_attr_(node.GetInt("axis", 0)) {
    if (!node.HasAttr("axis")) SetAttrError(Error("axis attribute is required"));
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty()) return Error("expects at least one input");
    const Shape& first = ctx.inputs[0].shape;
    const int rank = first.rank();
    auto axis = NormalizeAxis(axis_attr_, rank, "axis");
    if (!axis.ok() || rank == 0) return Error("axis ", axis_attr_, " invalid for rank ", rank);
    axis_ = *axis;
    Shape out = first;
    int64_t total = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const InputInfo& in = ctx.inputs[i];
      if (in.dtype != ctx.inputs[0].dtype) {
        return Error("input ", i, " has dtype ", DTypeName(in.dtype), ", expected ",
                     DTypeName(ctx.inputs[0].dtype));
      }
      if (in.shape.rank() != rank) {
        return Error("input ", i, " has shape ", in.shape.ToString(), ", expected rank ", rank);
      }
      for (int d = 0; d < rank; ++d) {
        if (d != axis_ && in.shape.dim(d) != first.dim(d)) {
          return Error("input ", i, " has shape ", in.shape.ToString(), ", incompatible with ",
                       first.ToString(), " outside axis ", axis_);
        }
      }
      total += in.shape.dim(axis_);
    }
    out.set_dim(axis_, total);
    // The layout pass (ir/layout_transparent.h) keeps a channel Concat's inputs and output in
    // one layout. Blocked layouts concatenate per image exactly as NCHW; NHWC per pixel.
    channels_last_ = rank == 4 && axis_ == 1 && ctx.inputs[0].layout == ir::MemoryLayout::kNhwc;
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = out;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    Tensor& out = ctx.outputs[0];
    const Shape& os = out.shape();
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis_; ++d) outer *= os.dim(d);
    for (int d = axis_ + 1; d < os.rank(); ++d) inner *= os.dim(d);
    if (channels_last_) {  // rows are the N*H*W pixels, each holding every channel
      outer *= inner;
      inner = 1;
    }
    const int64_t out_row = os.dim(axis_) * inner;
    const DType dtype = out.dtype();
    const size_t esize = DTypeSize(dtype);
    char* dst = static_cast<char*>(out.raw_data());
    auto rows = [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        int64_t at = o * out_row;
        for (const Tensor& in : ctx.inputs) {
          const int64_t chunk = in.dim(axis_) * inner;
          CopyElements(dtype, static_cast<const char*>(in.raw_data()) + o * chunk * esize,
                       dst + at * esize, chunk);
          at += chunk;
        }
      }
    };
    if (outer * out_row >= (1 << 16)) {
      ctx.ParallelFor(outer, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(out_row, 1)),
                      rows);
    } else {
      rows(0, outer);
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_attr_;
  int axis_ = 0;
  bool channels_last_ = false;
};

// Split(input, split?), axis, num_outputs: `split` gives each output's length; without it
// the axis is split evenly (the last part smaller when it does not divide, as opset 18).
class SplitKernel : public TensorKernel {
 public:
  explicit SplitKernel(const ir::Node& node)
      : TensorKernel(node),
        axis_attr_(node.GetInt("axis", 0)),
        num_outputs_(static_cast<int>(node.outputs.size())),
        attr_split_(node.GetInts("split")) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty()) return Error("expects an input");
    const Shape& in = ctx.inputs[0].shape;
    auto axis = NormalizeAxis(axis_attr_, in.rank(), "axis");
    if (!axis.ok() || in.rank() == 0) return Error("axis ", axis_attr_, " invalid for ", in.ToString());
    axis_ = *axis;
    ctx.SetNumOutputs(num_outputs_);
    dynamic_ = InputPresent(ctx, 1) && ConstantInput(ctx, 1) == nullptr;
    for (int i = 0; i < num_outputs_; ++i) {
      ctx.output_dtypes[i] = ctx.inputs[0].dtype;
      ctx.output_dynamic[i] = dynamic_;
    }
    if (dynamic_) return absl::OkStatus();
    auto lengths = Lengths(in, InputPresent(ctx, 1) ? ConstantInput(ctx, 1) : nullptr);
    if (!lengths.ok()) return lengths.status();
    for (int i = 0; i < num_outputs_; ++i) {
      Shape s = in;
      s.set_dim(axis_, (*lengths)[i]);
      ctx.output_shapes[i] = s;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    if (dynamic_) {
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lengths, Lengths(in.shape(), &ctx.inputs[1]));
      for (int i = 0; i < num_outputs_; ++i) {
        Shape s = in.shape();
        s.set_dim(axis_, lengths[i]);
        KILN_RETURN_IF_ERROR(ctx.Allocate(i, in.dtype(), s).status());
      }
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis_; ++d) outer *= in.dim(d);
    for (int d = axis_ + 1; d < in.rank(); ++d) inner *= in.dim(d);
    const int64_t in_row = in.dim(axis_) * inner;
    int64_t start = 0;
    for (int i = 0; i < num_outputs_; ++i) {
      Tensor& out = ctx.outputs[i];
      const int64_t len = out.valid() ? out.dim(axis_) : 0;
      if (out.valid()) {
        const int64_t shape[2] = {outer, len * inner};
        const int64_t strides[2] = {in_row, 1};
        StridedCopy(in.dtype(), in.raw_data(), start * inner, shape, strides, out.raw_data(),
                    &ctx);
      }
      start += len;
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::vector<int64_t>> Lengths(const Shape& in, const Tensor* split) const {
    const int64_t dim = in.dim(axis_);
    std::vector<int64_t> lengths = attr_split_;
    if (split != nullptr) {
      KILN_ASSIGN_OR_RETURN(lengths, ReadInts(*split, "split"));
    }
    if (lengths.empty()) {
      const int64_t part = (dim + num_outputs_ - 1) / num_outputs_;
      for (int i = 0; i < num_outputs_; ++i) {
        lengths.push_back(std::clamp<int64_t>(dim - part * i, 0, part));
      }
      return lengths;
    }
    if (static_cast<int>(lengths.size()) != num_outputs_) {
      return Error("split has ", lengths.size(), " entries for ", num_outputs_, " outputs");
    }
    // One -1 takes the rest (TensorFlow's SplitV convention; ONNX exporters never emit it).
    int64_t sum = 0;
    int infer = -1;
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (lengths[i] == -1 && infer < 0) {
        infer = static_cast<int>(i);
      } else if (lengths[i] < 0) {
        return Error("invalid split length ", lengths[i]);
      } else {
        sum += lengths[i];
      }
    }
    if (infer >= 0) {
      if (sum > dim) return Error("split lengths sum to ", sum, ", axis has ", dim);
      lengths[infer] = dim - sum;
      sum = dim;
    }
    if (sum != dim) return Error("split lengths sum to ", sum, ", axis has ", dim);
    return lengths;
  }

  int64_t axis_attr_;
  int num_outputs_;
  std::vector<int64_t> attr_split_;
  int axis_ = 0;
  bool dynamic_ = false;
};

KILN_REGISTER_KERNEL_CLASS("", "Transpose", TransposeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Slice", SliceKernel);
KILN_REGISTER_KERNEL_CLASS("", "DepthToSpace", DepthToSpaceKernel);
KILN_REGISTER_KERNEL_CLASS("", "SpaceToDepth", SpaceToDepthKernel);
KILN_REGISTER_KERNEL_CLASS("", "Concat", ConcatKernel);
KILN_REGISTER_KERNEL_CLASS("", "Split", SplitKernel);
// kiln::StridedSlice(input, begin, end, strides?): TensorFlow's StridedSlice. Attributes
// (ints, default 0): begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask,
// with TF's meaning (bit i concerns entry i of begin/end/strides). ONNX Slice cannot express
// new axes, shrinking or ellipses, hence a Kiln op.
KILN_REGISTER_KERNEL_CLASS("kiln", "StridedSlice", StridedSliceKernel);

}  // namespace

KILN_KERNEL_FILE(tensor_layout);

}  // namespace kiln::kernels::tensor_ops
