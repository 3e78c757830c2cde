// Indexing ops: Gather, kiln::GatherV2, GatherElements, GatherND, ScatterND,
// ScatterElements, Compress, OneHot. Index tensors are int32 or int64; out-of-range indices
// are errors naming the index and the dim, never out-of-bounds reads.
#include <algorithm>

#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::tensor_ops {
namespace {

constexpr int64_t kParallelElements = 1 << 15;

int64_t Product(absl::Span<const int64_t> dims, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// Checks every index of `indices` against [-dim, dim) (or [0, dim) without negatives).
absl::Status CheckIndices(const Tensor& indices, int64_t dim, bool allow_negative,
                          absl::string_view what) {
  const int64_t n = indices.num_elements();
  const int64_t lo = allow_negative ? -dim : 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = IndexAt(indices, i);
    if (v < lo || v >= dim) {
      return absl::InvalidArgumentError(absl::StrCat(what, " index ", v, " (at flat position ", i,
                                                     ") is out of range for a dim of size ", dim));
    }
  }
  return absl::OkStatus();
}

// An "axis" attribute and its value normalized at Reshape against a rank.
struct Axis {
  Axis(const ir::Node& node, int64_t default_axis) : attr(node.GetInt("axis", default_axis)) {}
  // Normalizes `attr` for `rank` into `value`; the error names `where`.
  absl::Status Resolve(int rank, absl::string_view where) {
    auto a = NormalizeAxis(attr, rank, "axis");
    if (!a.ok()) return Annotate(a.status(), where);
    value = *a;
    return absl::OkStatus();
  }
  int64_t attr;
  int value = 0;
};

// The one output of the gathers: input 0's dtype, `shape`.
void DeclareGatherOutput(ReshapeContext& ctx, const Shape& shape) {
  ctx.SetNumOutputs(1);
  ctx.output_dtypes[0] = ctx.inputs[0].dtype;
  ctx.output_shapes[0] = shape;
}

// The flat offset in data of index tuple t of GatherND / ScatterND: its k entries name dims
// first .. first + k - 1 (negative entries count from the end). INVALID_ARGUMENT for an entry
// outside its dim.
absl::StatusOr<int64_t> TupleOffset(const Tensor& indices, int64_t t, int k, int first,
                                    absl::Span<const int64_t> dims, const Dims& strides) {
  int64_t off = 0;
  for (int j = 0; j < k; ++j) {
    const int64_t dim = dims[first + j];
    int64_t v = IndexAt(indices, t * k + j);
    if (v < -dim || v >= dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("index ", v, " out of range for dim ", first + j, " of size ", dim));
    }
    if (v < 0) v += dim;
    off += v * strides[first + j];
  }
  return off;
}

// ---------------------------------------------------------------------------------------
// Gather with batch dims: params [B..., A..., axis, I...], indices [B..., J...] ->
// [B..., A..., J..., I...]. ONNX Gather is batch_dims = 0 with negative indices allowed;
// TensorFlow's GatherV2 allows batch_dims and rejects negative indices.
class GatherKernel : public TensorKernel {
 public:
  GatherKernel(const ir::Node& node, bool tf_semantics)
      : TensorKernel(node),
        tf_(tf_semantics),
        axis_attr_(node.GetInt("axis", 0)),
        batch_dims_attr_(node.GetInt("batch_dims", 0)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 2) return Error("expects (data, indices)");
    if (!IsIndexType(ctx.inputs[1].dtype)) {
      return Error("indices must be int32 or int64, got ", DTypeName(ctx.inputs[1].dtype));
    }
    const Shape& data = ctx.inputs[0].shape;
    const Shape& indices = ctx.inputs[1].shape;
    int64_t axis = axis_attr_;
    if (tf_ && InputPresent(ctx, 2)) {
      const Tensor* a = ConstantInput(ctx, 2);
      if (a == nullptr) return Error("axis input must be a constant");
      auto v = ReadScalarInt(*a, "axis");
      if (!v.ok()) return Annotate(v.status(), where());
      axis = *v;
    }
    int64_t batch = batch_dims_attr_;
    if (batch < 0) batch += indices.rank();
    if (batch < 0 || batch > indices.rank()) {
      return Error("batch_dims ", batch_dims_attr_, " invalid for indices of rank ",
                   indices.rank());
    }
    auto a = NormalizeAxis(axis, data.rank(), "axis");
    if (!a.ok() || data.rank() == 0) return Error("axis ", axis, " invalid for ", data.ToString());
    axis_ = *a;
    batch_ = static_cast<int>(batch);
    if (axis_ < batch_) return Error("axis ", axis_, " must be >= batch_dims ", batch_);
    for (int i = 0; i < batch_; ++i) {
      if (data.dim(i) != indices.dim(i)) {
        return Error("batch dim ", i, " differs: data ", data.ToString(), ", indices ",
                     indices.ToString());
      }
    }
    Shape out;
    for (int i = 0; i < axis_; ++i) out.push_back(data.dim(i));
    for (int i = batch_; i < indices.rank(); ++i) out.push_back(indices.dim(i));
    for (int i = axis_ + 1; i < data.rank(); ++i) out.push_back(data.dim(i));
    DeclareGatherOutput(ctx, out);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& data = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    Tensor& out = ctx.outputs[0];
    const auto dd = data.shape().dims();
    const int64_t batches = Product(dd, 0, batch_);
    const int64_t outer = Product(dd, batch_, axis_);
    const int64_t dim = dd[axis_];
    const int64_t inner = Product(dd, axis_ + 1, data.rank());
    const int64_t per_batch = Product(indices.shape().dims(), batch_, indices.rank());
    if (out.num_elements() == 0) return absl::OkStatus();
    KILN_RETURN_IF_ERROR(Annotate(CheckIndices(indices, dim, !tf_, "Gather"), where()));
    VisitBySize(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* src = data.data<T>();
      T* dst = out.data<T>();
      // One unit = one (batch, outer, index) row of `inner` elements.
      auto rows = [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const int64_t j = u % per_batch;
          const int64_t bo = u / per_batch;  // batch * outer + o
          const int64_t b = bo / outer;
          int64_t idx = IndexAt(indices, b * per_batch + j);
          if (idx < 0) idx += dim;
          const T* from = src + (bo * dim + idx) * inner;
          std::copy(from, from + inner, dst + u * inner);
        }
      };
      const int64_t units = batches * outer * per_batch;
      if (units * inner >= kParallelElements) {
        ctx.ParallelFor(units, std::max<int64_t>(1, kParallelElements / std::max<int64_t>(inner, 1)),
                        rows);
      } else {
        rows(0, units);
      }
    });
    return absl::OkStatus();
  }

 private:
  bool tf_;
  int64_t axis_attr_, batch_dims_attr_;
  int axis_ = 0, batch_ = 0;
};

class OnnxGatherKernel : public GatherKernel {
 public:
  explicit OnnxGatherKernel(const ir::Node& node) : GatherKernel(node, false) {}
};
class GatherV2Kernel : public GatherKernel {
 public:
  explicit GatherV2Kernel(const ir::Node& node) : GatherKernel(node, true) {}
};

// ---------------------------------------------------------------------------------------
// Walks every element of `shape`, calling fn(flat_index, coords) in row-major order over
// [begin, end) — for the element-wise index ops.
template <typename Fn>
void ForEachCoord(const Shape& shape, int64_t begin, int64_t end, Fn&& fn) {
  const int rank = shape.rank();
  Dims coord(rank, 0);
  int64_t rem = begin;
  for (int d = rank - 1; d >= 0; --d) {
    coord[d] = rem % shape.dim(d);
    rem /= shape.dim(d);
  }
  for (int64_t i = begin; i < end; ++i) {
    fn(i, coord);
    for (int d = rank - 1; d >= 0; --d) {
      if (++coord[d] < shape.dim(d)) break;
      coord[d] = 0;
    }
  }
}

// The flat offset in data of element i of indices (at coordinates c) for GatherElements and
// ScatterElements: c with its `axis` coordinate replaced by indices[i] (negative counts from
// the end of a dim of size `dim`).
int64_t ElementOffset(const Tensor& indices, int64_t i, const Dims& c, int axis, int64_t dim,
                      const Dims& strides) {
  int64_t off = 0;
  for (int d = 0; d < static_cast<int>(c.size()); ++d) {
    if (d == axis) {
      const int64_t v = IndexAt(indices, i);
      off += (v < 0 ? v + dim : v) * strides[d];
    } else {
      off += c[d] * strides[d];
    }
  }
  return off;
}

// GatherElements(data, indices), axis: out[i..] = data[i.. with axis := indices[i..]].
class GatherElementsKernel : public TensorKernel {
 public:
  explicit GatherElementsKernel(const ir::Node& node) : TensorKernel(node), axis_(node, 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2) return Error("expects (data, indices)");
    if (!IsIndexType(ctx.inputs[1].dtype)) return Error("indices must be int32 or int64");
    const Shape& data = ctx.inputs[0].shape;
    const Shape& idx = ctx.inputs[1].shape;
    if (data.rank() != idx.rank() || data.rank() == 0) {
      return Error("data ", data.ToString(), " and indices ", idx.ToString(),
                   " must have the same rank >= 1");
    }
    KILN_RETURN_IF_ERROR(axis_.Resolve(data.rank(), where()));
    DeclareGatherOutput(ctx, idx);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& data = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    Tensor& out = ctx.outputs[0];
    const int64_t dim = data.dim(axis_.value);
    KILN_RETURN_IF_ERROR(Annotate(CheckIndices(indices, dim, true, "GatherElements"), where()));
    const Dims strides = RowMajorStrides(data.shape().dims());
    VisitBySize(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* src = data.data<T>();
      T* dst = out.data<T>();
      auto work = [&](int64_t begin, int64_t end) {
        ForEachCoord(indices.shape(), begin, end, [&](int64_t i, const Dims& c) {
          dst[i] = src[ElementOffset(indices, i, c, axis_.value, dim, strides)];
        });
      };
      ctx.ParallelFor(indices.num_elements(), kParallelElements, work);
    });
    return absl::OkStatus();
  }

 private:
  Axis axis_;
};

// GatherND(data, indices), batch_dims.
class GatherNDKernel : public TensorKernel {
 public:
  explicit GatherNDKernel(const ir::Node& node)
      : TensorKernel(node), batch_(node.GetInt("batch_dims", 0)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2) return Error("expects (data, indices)");
    if (!IsIndexType(ctx.inputs[1].dtype)) return Error("indices must be int32 or int64");
    const Shape& data = ctx.inputs[0].shape;
    const Shape& idx = ctx.inputs[1].shape;
    if (idx.rank() < 1 || batch_ < 0 || batch_ >= idx.rank() || batch_ >= data.rank()) {
      return Error("batch_dims ", batch_, " invalid for data ", data.ToString(), " and indices ",
                   idx.ToString());
    }
    const int64_t k = idx.dim(idx.rank() - 1);
    if (k < 1 || batch_ + k > data.rank()) {
      return Error("indices last dim ", k, " invalid for data ", data.ToString());
    }
    for (int i = 0; i < batch_; ++i) {
      if (data.dim(i) != idx.dim(i)) return Error("batch dims of data and indices differ");
    }
    Shape out;
    for (int i = 0; i < idx.rank() - 1; ++i) out.push_back(idx.dim(i));
    for (int i = static_cast<int>(batch_ + k); i < data.rank(); ++i) out.push_back(data.dim(i));
    DeclareGatherOutput(ctx, out);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& data = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    const int b = static_cast<int>(batch_);
    const int k = static_cast<int>(indices.dim(indices.rank() - 1));
    const auto dd = data.shape().dims();
    const int64_t batches = Product(dd, 0, b);
    const int64_t batch_size = Product(dd, b, data.rank());
    const int64_t slice = Product(dd, b + k, data.rank());
    const int64_t tuples = indices.num_elements() / k;  // over all batches
    const int64_t per_batch = batches == 0 ? 0 : tuples / batches;
    const Dims strides = RowMajorStrides(dd);
    // Validate and turn each index tuple into an element offset.
    std::vector<int64_t> offsets(tuples);
    for (int64_t t = 0; t < tuples; ++t) {
      const absl::StatusOr<int64_t> off = TupleOffset(indices, t, k, b, dd, strides);
      if (!off.ok()) return Annotate(off.status(), where());
      offsets[t] = (per_batch == 0 ? 0 : t / per_batch) * batch_size + *off;
    }
    VisitBySize(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* src = data.data<T>();
      T* dst = ctx.outputs[0].data<T>();
      ctx.ParallelFor(tuples, std::max<int64_t>(1, kParallelElements / std::max<int64_t>(slice, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t t = begin; t < end; ++t) {
                          std::copy(src + offsets[t], src + offsets[t] + slice, dst + t * slice);
                        }
                      });
    });
    return absl::OkStatus();
  }

 private:
  int64_t batch_;
};

// ---------------------------------------------------------------------------------------
enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

absl::StatusOr<Reduction> ParseReduction(const std::string& s) {
  if (s == "none") return Reduction::kNone;
  if (s == "add") return Reduction::kAdd;
  if (s == "mul") return Reduction::kMul;
  if (s == "max") return Reduction::kMax;
  if (s == "min") return Reduction::kMin;
  return absl::InvalidArgumentError(absl::StrCat("unknown reduction '", s, "'"));
}

template <typename T>
void Combine(T& dst, const T& src, Reduction r) {
  if constexpr (std::is_same_v<T, std::string>) {
    dst = src;  // Reshape rejects reductions on strings
  } else if constexpr (std::is_same_v<T, bool>) {
    switch (r) {
      case Reduction::kNone: dst = src; break;
      case Reduction::kAdd: case Reduction::kMax: dst = dst || src; break;
      case Reduction::kMul: case Reduction::kMin: dst = dst && src; break;
    }
  } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    float d = static_cast<float>(dst);
    const float s = static_cast<float>(src);
    Combine(d, s, r);
    dst = T(d);
  } else {
    switch (r) {
      case Reduction::kNone: dst = src; break;
      case Reduction::kAdd: dst = static_cast<T>(dst + src); break;
      case Reduction::kMul: dst = static_cast<T>(dst * src); break;
      case Reduction::kMax: dst = std::max(dst, src); break;
      case Reduction::kMin: dst = std::min(dst, src); break;
    }
  }
}

class ScatterBase : public TensorKernel {
 public:
  explicit ScatterBase(const ir::Node& node) : TensorKernel(node) {
    auto r = ParseReduction(node.GetString("reduction", "none"));
    if (r.ok()) {
      reduction_ = *r;
    } else {
      SetAttrError(Error(r.status().message()));
    }
  }

 protected:
  absl::Status PrepareCommon(ReshapeContext& ctx) {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() != 3) return Error("expects (data, indices, updates)");
    if (!IsIndexType(ctx.inputs[1].dtype)) return Error("indices must be int32 or int64");
    if (ctx.inputs[2].dtype != ctx.inputs[0].dtype) return Error("updates dtype differs from data");
    if (ctx.inputs[0].dtype == DType::kString && reduction_ != Reduction::kNone) {
      return Error("reduction on string tensors");
    }
    DeclareOutputLikeInput0(ctx, ctx.inputs[0].dtype, /*in_place_of_input0=*/true);
    return absl::OkStatus();
  }
  Reduction reduction_ = Reduction::kNone;
};

// ScatterND(data, indices, updates), reduction none/add/mul/max/min.
class ScatterNDKernel : public ScatterBase {
 public:
  using ScatterBase::ScatterBase;

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareCommon(ctx));
    const Shape& data = ctx.inputs[0].shape;
    const Shape& idx = ctx.inputs[1].shape;
    const Shape& upd = ctx.inputs[2].shape;
    if (idx.rank() < 1) return Error("indices must have rank >= 1");
    const int64_t k = idx.dim(idx.rank() - 1);
    if (k > data.rank()) return Error("indices last dim ", k, " exceeds data rank ", data.rank());
    Shape expected;
    for (int i = 0; i < idx.rank() - 1; ++i) expected.push_back(idx.dim(i));
    for (int i = static_cast<int>(k); i < data.rank(); ++i) expected.push_back(data.dim(i));
    if (upd != expected) {
      return Error("updates has shape ", upd.ToString(), ", expected ", expected.ToString());
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& data = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    const Tensor& updates = ctx.inputs[2];
    Tensor& out = ctx.outputs[0];
    CopyTensorData(data, out, &ctx);
    const int k = static_cast<int>(indices.dim(indices.rank() - 1));
    const auto dd = data.shape().dims();
    const Dims strides = RowMajorStrides(dd);
    const int64_t slice = Product(dd, k, data.rank());
    const int64_t tuples = Product(indices.shape().dims(), 0, indices.rank() - 1);
    absl::Status status;
    VisitDType(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* upd = updates.data<T>();
      T* dst = out.data<T>();
      for (int64_t t = 0; t < tuples; ++t) {
        const absl::StatusOr<int64_t> off = TupleOffset(indices, t, k, 0, dd, strides);
        if (!off.ok()) {
          status = Annotate(off.status(), where());
          return;
        }
        for (int64_t e = 0; e < slice; ++e) Combine(dst[*off + e], upd[t * slice + e], reduction_);
      }
    });
    return status;
  }
};

// ScatterElements(data, indices, updates), axis, reduction.
class ScatterElementsKernel : public ScatterBase {
 public:
  explicit ScatterElementsKernel(const ir::Node& node) : ScatterBase(node), axis_(node, 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareCommon(ctx));
    const Shape& data = ctx.inputs[0].shape;
    const Shape& idx = ctx.inputs[1].shape;
    if (idx != ctx.inputs[2].shape) return Error("indices and updates shapes differ");
    if (idx.rank() != data.rank() || data.rank() == 0) return Error("indices rank must equal data rank");
    KILN_RETURN_IF_ERROR(axis_.Resolve(data.rank(), where()));
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& data = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    const Tensor& updates = ctx.inputs[2];
    Tensor& out = ctx.outputs[0];
    CopyTensorData(data, out, &ctx);
    const int64_t dim = data.dim(axis_.value);
    KILN_RETURN_IF_ERROR(Annotate(CheckIndices(indices, dim, true, "ScatterElements"), where()));
    const Dims strides = RowMajorStrides(data.shape().dims());
    VisitDType(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* upd = updates.data<T>();
      T* dst = out.data<T>();
      ForEachCoord(indices.shape(), 0, indices.num_elements(), [&](int64_t i, const Dims& c) {
        Combine(dst[ElementOffset(indices, i, c, axis_.value, dim, strides)], upd[i], reduction_);
      });
    });
    return absl::OkStatus();
  }

 private:
  Axis axis_;
};

// ---------------------------------------------------------------------------------------
// Compress(input, condition), axis (absent: the input is flattened). The output length is
// the number of true entries of condition; condition may be shorter than the axis.
class CompressKernel : public TensorKernel {
 public:
  explicit CompressKernel(const ir::Node& node)
      : TensorKernel(node), has_axis_(node.HasAttr("axis")), axis_(node, 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2) return Error("expects (input, condition)");
    if (ctx.inputs[1].dtype != DType::kBool || ctx.inputs[1].shape.rank() != 1) {
      return Error("condition must be a 1-D bool tensor");
    }
    const Shape& in = ctx.inputs[0].shape;
    if (has_axis_) {
      auto a = NormalizeAxis(axis_.attr, in.rank(), "axis");
      if (!a.ok() || in.rank() == 0)
        return Error("axis ", axis_.attr, " invalid for ", in.ToString());
      axis_.value = *a;
    }
    const int64_t len = has_axis_ ? in.dim(axis_.value) : in.num_elements();
    if (ctx.inputs[1].shape.dim(0) > len) {
      return Error("condition has ", ctx.inputs[1].shape.dim(0), " entries, axis has ", len);
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    const Tensor& cond = ctx.inputs[1];
    const bool* c = cond.data<bool>();
    int64_t selected = 0;
    for (int64_t i = 0; i < cond.num_elements(); ++i) selected += c[i] ? 1 : 0;
    int64_t outer = 1, dim = in.num_elements(), inner = 1;
    Shape out_shape{selected};
    if (has_axis_) {
      const auto d = in.shape().dims();
      outer = Product(d, 0, axis_.value);
      dim = d[axis_.value];
      inner = Product(d, axis_.value + 1, in.rank());
      out_shape = in.shape();
      out_shape.set_dim(axis_.value, selected);
    }
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, in.dtype(), out_shape));
    Tensor& out = *out_ptr;
    const size_t es = DTypeSize(in.dtype());
    const char* src = static_cast<const char*>(in.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < cond.num_elements(); ++i) {
        if (!c[i]) continue;
        CopyElements(in.dtype(), src + ((o * dim + i) * inner) * es, dst, inner);
        dst += inner * es;
      }
    }
    return absl::OkStatus();
  }

 private:
  bool has_axis_;
  Axis axis_;
};

// OneHot(indices, depth, values[off, on]), axis (default -1). Negative indices count from
// the end of depth; indices outside [-depth, depth) give an all-off row.
class OneHotKernel : public TensorKernel {
 public:
  explicit OneHotKernel(const ir::Node& node) : TensorKernel(node), axis_(node, -1) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 3) return Error("expects (indices, depth, values)");
    if (ctx.inputs[2].shape.num_elements() != 2) return Error("values must hold [off, on]");
    if (ctx.inputs[0].dtype == DType::kString || ctx.inputs[1].dtype == DType::kString) {
      return Error("indices and depth must be numeric");
    }
    const int out_rank = ctx.inputs[0].shape.rank() + 1;
    KILN_RETURN_IF_ERROR(axis_.Resolve(out_rank, where()));
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[2].dtype;
    const Tensor* depth = ConstantInput(ctx, 1);
    dynamic_ = depth == nullptr;
    if (dynamic_) {
      ctx.output_dynamic[0] = true;
      return absl::OkStatus();
    }
    auto s = OutShape(ctx.inputs[0].shape, *depth);
    if (!s.ok()) return s.status();
    ctx.output_shapes[0] = *s;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& indices = ctx.inputs[0];
    const Tensor& values = ctx.inputs[2];
    if (dynamic_) {
      KILN_ASSIGN_OR_RETURN(Shape s, OutShape(indices.shape(), ctx.inputs[1]));
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, values.dtype(), s).status());
    }
    Tensor& out = ctx.outputs[0];
    const int64_t depth = out.dim(axis_.value);
    const auto od = out.shape().dims();
    const int64_t outer = Product(od, 0, axis_.value),
                  inner = Product(od, axis_.value + 1, out.rank());
    VisitBySize(values.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T off = values.data<T>()[0], on = values.data<T>()[1];
      T* dst = out.data<T>();
      std::fill_n(dst, out.num_elements(), off);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          int64_t v = static_cast<int64_t>(ReadAsDouble(indices, o * inner + i));
          if (v < 0) v += depth;
          if (v >= 0 && v < depth) dst[(o * depth + v) * inner + i] = on;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Shape> OutShape(const Shape& indices, const Tensor& depth_t) const {
    if (depth_t.num_elements() != 1) return Error("depth must be a scalar");
    const int64_t depth = static_cast<int64_t>(ReadAsDouble(depth_t, 0));
    if (depth < 1) return Error("depth must be positive, got ", depth);
    Shape s = indices;
    s.insert(axis_.value, depth);
    return s;
  }

  Axis axis_;
  bool dynamic_ = false;
};

KILN_REGISTER_KERNEL_CLASS("", "Gather", OnnxGatherKernel);
KILN_REGISTER_KERNEL_CLASS("", "GatherElements", GatherElementsKernel);
KILN_REGISTER_KERNEL_CLASS("", "GatherND", GatherNDKernel);
KILN_REGISTER_KERNEL_CLASS("", "ScatterND", ScatterNDKernel);
KILN_REGISTER_KERNEL_CLASS("", "ScatterElements", ScatterElementsKernel);
KILN_REGISTER_KERNEL_CLASS("", "Compress", CompressKernel);
KILN_REGISTER_KERNEL_CLASS("", "OneHot", OneHotKernel);
// kiln::GatherV2(params, indices, axis?): TensorFlow's GatherV2 / ResourceGather. Attribute
// batch_dims (int, default 0; negative counts from the indices' rank); the axis comes from
// input 2 (must be a compile-time constant) or else the "axis" attribute. Unlike ONNX Gather
// it supports batch_dims and rejects negative indices, as TensorFlow's CPU kernel does.
KILN_REGISTER_KERNEL_CLASS("kiln", "GatherV2", GatherV2Kernel);

}  // namespace

KILN_KERNEL_FILE(tensor_gather);

}  // namespace kiln::kernels::tensor_ops
