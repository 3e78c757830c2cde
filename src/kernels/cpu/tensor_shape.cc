// Shape-only and view ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// Dropout (inference), and the ops that fill a new tensor from a shape: ConstantOfShape,
// kiln::Fill, Range, EyeLike, Expand, kiln::BroadcastTo, Tile.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::tensor_ops {
namespace {

// ---------------------------------------------------------------------------------------
// Shape(data) -> int64[rank] (opset 15: start/end attributes select a range of dims).
class ShapeKernel : public TensorKernel {
 public:
  explicit ShapeKernel(const ir::Node& node)
      : TensorKernel(node),
        has_end_(node.HasAttr("end")),
        start_(node.GetInt("start", 0)),
        end_(node.GetInt("end", 0)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1) return Error("expects 1 input");
    const int rank = ctx.inputs[0].shape.rank();
    auto clamp = [rank](int64_t v) {
      if (v < 0) v += rank;
      return std::clamp<int64_t>(v, 0, rank);
    };
    begin_ = clamp(start_);
    stop_ = has_end_ ? clamp(end_) : rank;
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kInt64;
    ctx.output_shapes[0] = Shape{std::max<int64_t>(0, stop_ - begin_)};
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Shape& s = ctx.inputs[0].shape();
    int64_t* out = ctx.outputs[0].data<int64_t>();
    for (int64_t i = begin_; i < stop_; ++i) out[i - begin_] = s.dim(static_cast<int>(i));
    return absl::OkStatus();
  }

 private:
  bool has_end_;
  int64_t start_, end_;
  int64_t begin_ = 0, stop_ = 0;
};

// Size(data) -> int64 scalar.
class SizeKernel : public TensorKernel {
 public:
  explicit SizeKernel(const ir::Node& node) : TensorKernel(node) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1) return Error("expects 1 input");
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kInt64;
    ctx.output_shapes[0] = Shape{};
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    *ctx.outputs[0].data<int64_t>() = ctx.inputs[0].num_elements();
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------------------------------
// View ops: the output holds the input's elements unchanged under another shape. The planner
// may give the output the input's memory (output_in_place_of); otherwise Compute copies.
// When the shape depends on a non-constant input (Reshape's shape, Squeeze's axes) the output
// is dynamic and computed at run time.
class ViewKernel : public TensorKernel {
 public:
  ViewKernel(const ir::Node& node, int param_input, int num_outputs = 1)
      : TensorKernel(node), param_input_(param_input), num_outputs_(num_outputs) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty() || !ctx.inputs[0].present()) return Error("data input is missing");
    ctx.SetNumOutputs(num_outputs_);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_in_place_of[0] = 0;
    const bool has_param = param_input_ >= 0 && InputPresent(ctx, param_input_);
    const Tensor* param = has_param ? ConstantInput(ctx, param_input_) : nullptr;
    if (has_param && param == nullptr) {
      dynamic_ = true;
      ctx.output_dynamic[0] = true;
      ctx.output_in_place_of[0] = -1;
    } else {
      auto shape = OutputShape(ctx.inputs[0].shape, param);
      if (!shape.ok()) return Annotate(shape.status(), where());
      ctx.output_shapes[0] = *shape;
    }
    return PrepareExtraOutputs(ctx);
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    if (dynamic_) {
      auto shape = OutputShape(in.shape(), &ctx.inputs[param_input_]);
      if (!shape.ok()) return Annotate(shape.status(), where());
      KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, in.dtype(), *std::move(shape)));
      Tensor& out = *out_ptr;
      CopyTensorData(in, out, &ctx);
    } else {
      CopyTensorData(in, ctx.outputs[0], &ctx);
    }
    return ComputeExtraOutputs(ctx);
  }

 protected:
  // `param` is the value of the parameter input (null when absent).
  virtual absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor* param) const = 0;
  virtual absl::Status PrepareExtraOutputs(ReshapeContext& ctx) { return absl::OkStatus(); }
  virtual absl::Status ComputeExtraOutputs(ComputeContext& ctx) const { return absl::OkStatus(); }

 private:
  int param_input_;
  int num_outputs_;
  bool dynamic_ = false;
};

// Reshape(data, shape), allowzero: 0 copies the input dim (allowzero=0) or means 0
// (allowzero=1); one -1 is inferred.
class ReshapeKernel : public ViewKernel {
 public:
  explicit ReshapeKernel(const ir::Node& node)
      : ViewKernel(node, 1), allow_zero_(node.GetInt("allowzero", 0) != 0) {}

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor* param) const override {
    if (param == nullptr) return Error("shape input is missing");
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ReadInts(*param, "shape"));
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == 0 && !allow_zero_) {
        if (static_cast<int>(i) >= in.rank()) {
          return Error("shape ", absl::StrJoin(dims, ","), " copies dim ", i,
                       " that input shape ", in.ToString(), " lacks");
        }
        dims[i] = in.dim(static_cast<int>(i));
      }
      if (dims[i] == -1) {
        if (infer >= 0) return Error("shape has more than one -1");
        infer = static_cast<int>(i);
      } else if (dims[i] < 0) {
        return Error("shape has negative dim ", dims[i]);
      } else {
        known *= dims[i];
      }
    }
    const int64_t total = in.num_elements();
    if (infer >= 0) {
      if (known == 0 || total % known != 0) {
        return Error("cannot reshape ", in.ToString(), " (", total, " elements) to [",
                     absl::StrJoin(dims, ","), "]");
      }
      dims[infer] = total / known;
    } else if (known != total) {
      return Error("cannot reshape ", in.ToString(), " (", total, " elements) to [",
                   absl::StrJoin(dims, ","), "]");
    }
    return Shape(dims);
  }

 private:
  bool allow_zero_;
};

// Flatten(input), axis: [prod(dims[:axis]), prod(dims[axis:])].
class FlattenKernel : public ViewKernel {
 public:
  explicit FlattenKernel(const ir::Node& node)
      : ViewKernel(node, -1), axis_(node.GetInt("axis", 1)) {}

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor*) const override {
    const int rank = in.rank();
    if (axis_ < -rank || axis_ > rank) return Error("axis ", axis_, " out of range for rank ", rank);
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < rank; ++i) (i < axis ? outer : inner) *= in.dim(i);
    return Shape{outer, inner};
  }

 private:
  int64_t axis_;
};

// Squeeze(data, axes?): removes the listed unit dims, or every unit dim when axes is absent.
class SqueezeKernel : public ViewKernel {
 public:
  explicit SqueezeKernel(const ir::Node& node)
      : ViewKernel(node, 1), attr_axes_(node.GetInts("axes")), has_attr_(node.HasAttr("axes")) {}

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor* param) const override {
    std::vector<int64_t> axes = attr_axes_;
    if (param != nullptr) {
      KILN_ASSIGN_OR_RETURN(axes, ReadInts(*param, "axes"));
    }
    std::vector<bool> drop(in.rank(), false);
    if (param == nullptr && !has_attr_) {
      for (int i = 0; i < in.rank(); ++i) drop[i] = in.dim(i) == 1;
    } else {
      for (int64_t a : axes) {
        KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a, in.rank(), "axis"));
        if (in.dim(axis) != 1) {
          return Error("cannot squeeze axis ", a, " of size ", in.dim(axis), " in shape ",
                       in.ToString());
        }
        drop[axis] = true;
      }
    }
    Shape out;
    for (int i = 0; i < in.rank(); ++i) {
      if (!drop[i]) out.push_back(in.dim(i));
    }
    return out;
  }

 private:
  std::vector<int64_t> attr_axes_;
  bool has_attr_;
};

// Unsqueeze(data, axes): inserts unit dims at `axes` (positions in the output).
class UnsqueezeKernel : public ViewKernel {
 public:
  explicit UnsqueezeKernel(const ir::Node& node)
      : ViewKernel(node, 1), attr_axes_(node.GetInts("axes")) {}

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor* param) const override {
    std::vector<int64_t> axes = attr_axes_;
    if (param != nullptr) {
      KILN_ASSIGN_OR_RETURN(axes, ReadInts(*param, "axes"));
    }
    const int out_rank = in.rank() + static_cast<int>(axes.size());
    std::vector<bool> is_new(out_rank, false);
    for (int64_t a : axes) {
      KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a, out_rank, "axis"));
      if (is_new[axis]) return Error("axis ", a, " is repeated");
      is_new[axis] = true;
    }
    Shape out;
    int next = 0;
    for (int i = 0; i < out_rank; ++i) out.push_back(is_new[i] ? 1 : in.dim(next++));
    return out;
  }

 private:
  std::vector<int64_t> attr_axes_;
};

// Identity(input); also serves kiln::StopGradient-like pass-throughs.
class IdentityKernel : public ViewKernel {
 public:
  explicit IdentityKernel(const ir::Node& node) : ViewKernel(node, -1) {}

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor*) const override { return in; }
};

// Dropout(data, ratio?, training_mode?) at inference: output = data, mask = all true.
class DropoutKernel : public ViewKernel {
 public:
  explicit DropoutKernel(const ir::Node& node)
      : ViewKernel(node, -1, static_cast<int>(node.outputs.size())) {}

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor*) const override { return in; }
  absl::Status PrepareExtraOutputs(ReshapeContext& ctx) override {
    if (InputPresent(ctx, 2)) {
      const Tensor* training = ConstantInput(ctx, 2);
      if (training == nullptr || training->dtype() != DType::kBool || *training->data<bool>()) {
        return Error("training_mode must be a constant false at inference");
      }
    }
    if (ctx.output_dtypes.size() > 1) {
      ctx.output_dtypes[1] = DType::kBool;
      ctx.output_shapes[1] = ctx.inputs[0].shape;
    }
    return absl::OkStatus();
  }
  absl::Status ComputeExtraOutputs(ComputeContext& ctx) const override {
    if (ctx.outputs.size() > 1 && ctx.outputs[1].valid()) {
      std::fill_n(ctx.outputs[1].data<bool>(), ctx.outputs[1].num_elements(), true);
    }
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------------------------------
// Ops whose output shape comes from an input's value. When that input is constant the shape
// is fixed at Reshape; otherwise the output is dynamic.
class ShapeFromValueKernel : public TensorKernel {
 public:
  ShapeFromValueKernel(const ir::Node& node, std::vector<int> value_inputs)
      : TensorKernel(node), value_inputs_(std::move(value_inputs)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    KILN_RETURN_IF_ERROR(CheckInputs(ctx));
    ctx.SetNumOutputs(1);
    std::vector<const Tensor*> values(ctx.inputs.size(), nullptr);
    dynamic_ = false;
    for (int i : value_inputs_) {
      if (!InputPresent(ctx, i)) continue;
      values[i] = ConstantInput(ctx, i);
      if (values[i] == nullptr) dynamic_ = true;
    }
    ctx.output_dtypes[0] = OutputDType(ctx);
    if (dynamic_) {
      ctx.output_dynamic[0] = true;
    } else {
      std::vector<Shape> shapes;
      for (const InputInfo& in : ctx.inputs) shapes.push_back(in.shape);
      auto shape = OutputShape(shapes, values);
      if (!shape.ok()) return Annotate(shape.status(), where());
      ctx.output_shapes[0] = *shape;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    if (dynamic_) {
      std::vector<Shape> shapes;
      std::vector<const Tensor*> values;
      for (const Tensor& t : ctx.inputs) {
        shapes.push_back(t.shape());
        values.push_back(t.valid() ? &t : nullptr);
      }
      auto shape = OutputShape(shapes, values);
      if (!shape.ok()) return Annotate(shape.status(), where());
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, OutputDTypeAtRun(ctx), *std::move(shape)).status());
    }
    return Fill(ctx, ctx.outputs[0]);
  }

 protected:
  virtual absl::Status CheckInputs(const ReshapeContext& ctx) { return absl::OkStatus(); }
  virtual DType OutputDType(const ReshapeContext& ctx) = 0;
  virtual DType OutputDTypeAtRun(const ComputeContext& ctx) const = 0;
  // `values[i]` is the value of input i where known (always at run time).
  virtual absl::StatusOr<Shape> OutputShape(const std::vector<Shape>& shapes,
                                            const std::vector<const Tensor*>& values) const = 0;
  virtual absl::Status Fill(ComputeContext& ctx, Tensor& out) const = 0;

 private:
  std::vector<int> value_inputs_;
  bool dynamic_ = false;
};

absl::StatusOr<Shape> ShapeFromTensor(const Tensor& t, absl::string_view what) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ReadInts(t, what));
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, " has negative dim ", d));
  }
  return Shape(dims);
}

// ConstantOfShape(shape), value: a one-element tensor (default float 0).
class ConstantOfShapeKernel : public ShapeFromValueKernel {
 public:
  explicit ConstantOfShapeKernel(const ir::Node& node) : ShapeFromValueKernel(node, {0}) {
    const Tensor* v = node.GetTensor("value");
    if (v != nullptr) {
      if (v->num_elements() != 1) {
        SetAttrError(Error("value must hold one element, got ", v->shape().ToString()));
      }
      value_ = v->Clone();
    } else {
      value_ = Tensor::Scalar<float>(0.0f);
    }
  }

 protected:
  DType OutputDType(const ReshapeContext&) override { return value_.dtype(); }
  DType OutputDTypeAtRun(const ComputeContext&) const override { return value_.dtype(); }
  absl::StatusOr<Shape> OutputShape(const std::vector<Shape>&,
                                    const std::vector<const Tensor*>& values) const override {
    return ShapeFromTensor(*values[0], "shape input");
  }
  absl::Status Fill(ComputeContext& ctx, Tensor& out) const override {
    FillElements(out.dtype(), value_.raw_data(), out.raw_data(), out.num_elements());
    return absl::OkStatus();
  }

 private:
  Tensor value_;
};

// kiln::Fill(dims, value): TensorFlow's Fill. `dims` is a 1-D int32/int64 tensor, `value` a
// scalar of any dtype (strings too); the output has shape `dims` and value's dtype.
class FillKernel : public ShapeFromValueKernel {
 public:
  explicit FillKernel(const ir::Node& node) : ShapeFromValueKernel(node, {0}) {}

 protected:
  absl::Status CheckInputs(const ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2) return Error("expects inputs (dims, value)");
    if (ctx.inputs[1].shape.num_elements() != 1) {
      return Error("value must be a scalar, got ", ctx.inputs[1].shape.ToString());
    }
    return absl::OkStatus();
  }
  DType OutputDType(const ReshapeContext& ctx) override { return ctx.inputs[1].dtype; }
  DType OutputDTypeAtRun(const ComputeContext& ctx) const override {
    return ctx.inputs[1].dtype();
  }
  absl::StatusOr<Shape> OutputShape(const std::vector<Shape>&,
                                    const std::vector<const Tensor*>& values) const override {
    return ShapeFromTensor(*values[0], "dims");
  }
  absl::Status Fill(ComputeContext& ctx, Tensor& out) const override {
    FillElements(out.dtype(), ctx.inputs[1].raw_data(), out.raw_data(), out.num_elements());
    return absl::OkStatus();
  }
};

// Range(start, limit, delta): ceil((limit - start) / delta) values, at least 0.
class RangeKernel : public ShapeFromValueKernel {
 public:
  explicit RangeKernel(const ir::Node& node) : ShapeFromValueKernel(node, {0, 1, 2}) {}

 protected:
  absl::Status CheckInputs(const ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 3) return Error("expects inputs (start, limit, delta)");
    for (int i = 0; i < 3; ++i) {
      if (ctx.inputs[i].dtype != ctx.inputs[0].dtype) return Error("inputs must share a dtype");
      if (ctx.inputs[i].shape.num_elements() != 1) return Error("inputs must be scalars");
    }
    if (ctx.inputs[0].dtype == DType::kString || ctx.inputs[0].dtype == DType::kBool) {
      return Error("unsupported dtype ", DTypeName(ctx.inputs[0].dtype));
    }
    return absl::OkStatus();
  }
  DType OutputDType(const ReshapeContext& ctx) override { return ctx.inputs[0].dtype; }
  DType OutputDTypeAtRun(const ComputeContext& ctx) const override {
    return ctx.inputs[0].dtype();
  }
  absl::StatusOr<Shape> OutputShape(const std::vector<Shape>&,
                                    const std::vector<const Tensor*>& values) const override {
    int64_t n = 0;
    absl::Status status;
    VisitDType(values[0]->dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        const int64_t start = *values[0]->data<T>(), limit = *values[1]->data<T>(),
                      delta = *values[2]->data<T>();
        if (delta == 0) {
          status = Error("delta must not be 0");
          return;
        }
        // In 128 bits: limit - start and the rounding cannot overflow (uint64 inputs and
        // int64 extremes are values a request can send).
        const __int128 span = static_cast<__int128>(limit) - static_cast<__int128>(start);
        const __int128 count = delta > 0 ? (span + delta - 1) / delta : (span + delta + 1) / delta;
        if (count > (__int128{1} << 62)) {
          status = Error("Range would have more than 2^62 elements");
          return;
        }
        n = static_cast<int64_t>(count);
        if ((delta > 0 && span <= 0) || (delta < 0 && span >= 0)) n = 0;
      } else if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, bool>) {
        const double start = AsDouble(*values[0]->data<T>()),
                     limit = AsDouble(*values[1]->data<T>()),
                     delta = AsDouble(*values[2]->data<T>());
        if (delta == 0 || !std::isfinite(delta)) {
          status = Error("delta must be finite and non-zero");
          return;
        }
        const double count = std::max(0.0, std::ceil((limit - start) / delta));
        // NaN, Inf or a count beyond int64 (start -2, limit inf; or delta 1e-30) is the
        // request's error; converting it would be undefined behaviour.
        if (!(count <= 4611686018427387904.0)) {
          status = Error(absl::StrCat("Range(", start, ", ", limit, ", ", delta, ") would have ",
                                      count, " elements"));
          return;
        }
        n = static_cast<int64_t>(count);
      }
    });
    KILN_RETURN_IF_ERROR(status);
    return Shape{n};
  }
  absl::Status Fill(ComputeContext& ctx, Tensor& out) const override {
    VisitDType(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, bool>) {
        T* o = out.data<T>();
        if constexpr (std::is_integral_v<T>) {
          const T start = *ctx.inputs[0].data<T>(), delta = *ctx.inputs[2].data<T>();
          for (int64_t i = 0; i < out.num_elements(); ++i) o[i] = static_cast<T>(start + i * delta);
        } else {
          // Accumulate like ONNX's reference (start + i * delta in the element type).
          const double start = AsDouble(*ctx.inputs[0].data<T>()),
                       delta = AsDouble(*ctx.inputs[2].data<T>());
          for (int64_t i = 0; i < out.num_elements(); ++i) o[i] = FromDouble<T>(start + i * delta);
        }
      }
    });
    return absl::OkStatus();
  }
};

// EyeLike(input), dtype (ONNX enum, default input's), k: ones on diagonal k of a 2-D tensor.
class EyeLikeKernel : public TensorKernel {
 public:
  explicit EyeLikeKernel(const ir::Node& node) : TensorKernel(node), k_(node.GetInt("k", 0)) {
    if (node.HasAttr("dtype")) {
      auto d = DTypeFromOnnx(node.GetInt("dtype", 1));
      if (d.ok()) {
        dtype_ = *d;
      } else {
        SetAttrError(Error(d.status().message()));
      }
    }
  }
  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() != 1 || ctx.inputs[0].shape.rank() != 2) {
      return Error("expects one 2-D input");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dtype_ == DType::kInvalid ? ctx.inputs[0].dtype : dtype_;
    if (ctx.output_dtypes[0] == DType::kString) return Error("string output is not supported");
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    Tensor& out = ctx.outputs[0];
    const int64_t rows = out.dim(0), cols = out.dim(1);
    VisitDType(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, std::string>) {
        T* o = out.data<T>();
        std::fill_n(o, rows * cols, FromDouble<T>(0));
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t c = r + k_;
          if (c >= 0 && c < cols) o[r * cols + c] = FromDouble<T>(1);
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t k_;
  DType dtype_ = DType::kInvalid;
};

// ---------------------------------------------------------------------------------------
// Broadcasting copies: Expand (bidirectional), kiln::BroadcastTo (unidirectional), Tile.
class BroadcastCopyKernel : public TensorKernel {
 public:
  BroadcastCopyKernel(const ir::Node& node) : TensorKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2) return Error("expects 2 inputs");
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    const Tensor* param = ConstantInput(ctx, 1);
    dynamic_ = param == nullptr;
    if (dynamic_) {
      ctx.output_dynamic[0] = true;
      return absl::OkStatus();
    }
    auto shape = OutputShape(ctx.inputs[0].shape, *param);
    if (!shape.ok()) return Annotate(shape.status(), where());
    ctx.output_shapes[0] = *shape;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    if (dynamic_) {
      auto shape = OutputShape(in.shape(), ctx.inputs[1]);
      if (!shape.ok()) return Annotate(shape.status(), where());
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, in.dtype(), *std::move(shape)).status());
    }
    Tensor& out = ctx.outputs[0];
    Dims view_shape, view_strides;
    SourceView(in.shape(), out.shape(), view_shape, view_strides);
    StridedCopy(in.dtype(), in.raw_data(), 0, view_shape, view_strides, out.raw_data(), &ctx);
    return absl::OkStatus();
  }

 protected:
  virtual absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor& param) const = 0;
  // The output as a strided view of the input (default: broadcast with zero strides).
  virtual void SourceView(const Shape& in, const Shape& out, Dims& shape, Dims& strides) const {
    const Dims in_strides = RowMajorStrides(in.dims());
    const int off = out.rank() - in.rank();
    for (int i = 0; i < out.rank(); ++i) {
      shape.push_back(out.dim(i));
      const int j = i - off;
      strides.push_back(j < 0 || in.dim(j) == 1 ? 0 : in_strides[j]);
    }
  }

 private:
  bool dynamic_ = false;
};

// Expand(input, shape): numpy broadcast of input and shape.
class ExpandKernel : public BroadcastCopyKernel {
 public:
  using BroadcastCopyKernel::BroadcastCopyKernel;

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor& param) const override {
    KILN_ASSIGN_OR_RETURN(Shape target, ShapeFromTensor(param, "shape"));
    return BroadcastShapes(in, target);
  }
};

// kiln::BroadcastTo(input, shape): TensorFlow's BroadcastTo. Unlike ONNX Expand, the output
// shape is exactly `shape`; input dims must equal the target dims or be 1.
class BroadcastToKernel : public BroadcastCopyKernel {
 public:
  using BroadcastCopyKernel::BroadcastCopyKernel;

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor& param) const override {
    KILN_ASSIGN_OR_RETURN(Shape target, ShapeFromTensor(param, "shape"));
    auto b = BroadcastShapes(in, target);
    if (!b.ok() || *b != target) {
      return Error("cannot broadcast ", in.ToString(), " to ", target.ToString());
    }
    return target;
  }
};

// Tile(input, repeats): output dim i = dim i * repeats[i].
class TileKernel : public BroadcastCopyKernel {
 public:
  using BroadcastCopyKernel::BroadcastCopyKernel;

 protected:
  absl::StatusOr<Shape> OutputShape(const Shape& in, const Tensor& param) const override {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> reps, ReadInts(param, "repeats"));
    if (static_cast<int>(reps.size()) != in.rank()) {
      return Error("repeats has ", reps.size(), " values for input of rank ", in.rank());
    }
    Shape out;
    for (int i = 0; i < in.rank(); ++i) {
      if (reps[i] < 0) return Error("negative repeat ", reps[i]);
      int64_t dim;
      if (__builtin_mul_overflow(in.dim(i), reps[i], &dim)) {
        return Error("repeating dimension ", i, " of ", in.ToString(), " ", reps[i],
                     " times overflows");
      }
      out.push_back(dim);
    }
    return out;
  }
  // Output viewed as [r0, d0, r1, d1, ...]: the repeat dims have stride 0.
  void SourceView(const Shape& in, const Shape& out, Dims& shape, Dims& strides) const override {
    const Dims in_strides = RowMajorStrides(in.dims());
    for (int i = 0; i < in.rank(); ++i) {
      const int64_t reps = in.dim(i) == 0 ? 0 : out.dim(i) / in.dim(i);
      shape.push_back(reps);
      strides.push_back(0);
      shape.push_back(in.dim(i));
      strides.push_back(in_strides[i]);
    }
  }
};

KILN_REGISTER_KERNEL_CLASS("", "Shape", ShapeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Size", SizeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Reshape", ReshapeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Flatten", FlattenKernel);
KILN_REGISTER_KERNEL_CLASS("", "Squeeze", SqueezeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Unsqueeze", UnsqueezeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Identity", IdentityKernel);
KILN_REGISTER_KERNEL_CLASS("", "Dropout", DropoutKernel);
KILN_REGISTER_KERNEL_CLASS("", "ConstantOfShape", ConstantOfShapeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Range", RangeKernel);
KILN_REGISTER_KERNEL_CLASS("", "EyeLike", EyeLikeKernel);
KILN_REGISTER_KERNEL_CLASS("", "Expand", ExpandKernel);
KILN_REGISTER_KERNEL_CLASS("", "Tile", TileKernel);
// kiln::Fill(dims, value) -> value's dtype, shape `dims`: TensorFlow's Fill (ONNX's
// ConstantOfShape takes its value as an attribute, TF's Fill as an input).
KILN_REGISTER_KERNEL_CLASS("kiln", "Fill", FillKernel);
// kiln::BroadcastTo(input, shape): TensorFlow's BroadcastTo, unidirectional (the output
// shape is exactly `shape`; ONNX Expand would also accept a target smaller than the input).
KILN_REGISTER_KERNEL_CLASS("kiln", "BroadcastTo", BroadcastToKernel);

}  // namespace

KILN_KERNEL_FILE(tensor_shape);

}  // namespace kiln::kernels::tensor_ops
