// TensorFlow sparse-tensor ops that feature columns use for inference (embedding lookups over
// tf.Example sparse features), in domain "kiln" with TF's semantics and output layouts:
//   SparseFillEmptyRows(indices [N,R] i64, values [N], dense_shape [R] i64, default scalar)
//     -> output_indices, output_values, empty_row_indicator [rows] bool, reverse_index_map [N]
//   SparseReshape(indices [N,R] i64, shape [R] i64, new_shape [R'] i64)
//     -> output_indices [N,R'], output_shape [R']
//   SparseSegmentReduce(data, indices, segment_ids[, num_segments]) attr mode "sum" | "mean" |
//     "sqrtn" -> [segments, data.shape[1:]...]
//   SparseToDense(indices, output_shape, values, default) -> dense
//   UpperBound(sorted [B,N], values [B,M]) attr out_type (ONNX) -> [B,M]
//   AsString(x) -> strings as TF's AsString with default attributes formats them
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

absl::Status Err(const std::string& node, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(node, ": ", msg));
}

int64_t IntAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

void CopyElement(const Tensor& src, int64_t i, Tensor& dst, int64_t j) {
  if (src.dtype() == DType::kString) {
    dst.data<std::string>()[j] = src.data<std::string>()[i];
  } else {
    const size_t e = DTypeSize(src.dtype());
    std::memcpy(static_cast<char*>(dst.raw_data()) + j * e,
                static_cast<const char*>(src.raw_data()) + i * e, e);
  }
}

class SparseFillEmptyRowsKernel : public OpKernel {
 public:
  explicit SparseFillEmptyRowsKernel(const ir::Node& node) : node_(node.Describe()) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 4 || ctx.inputs[0].dtype != DType::kInt64 ||
        ctx.inputs[2].dtype != DType::kInt64 || ctx.inputs[1].dtype != ctx.inputs[3].dtype) {
      return Err(node_, "expects int64 indices, values, int64 dense_shape, default value");
    }
    ctx.SetNumOutputs(4);
    ctx.output_dtypes = {DType::kInt64, ctx.inputs[1].dtype, DType::kBool, DType::kInt64};
    ctx.output_dynamic = {true, true, true, true};
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& indices = ctx.inputs[0];
    const Tensor& values = ctx.inputs[1];
    const Tensor& shape = ctx.inputs[2];
    if (indices.rank() != 2 || shape.num_elements() != indices.dim(1) || shape.num_elements() < 1) {
      return Err(node_, "indices must be [N, rank] with dense_shape [rank]");
    }
    const int64_t n = indices.dim(0), rank = indices.dim(1);
    const int64_t rows = shape.data<int64_t>()[0];
    if (rows < 0 || values.num_elements() != n) return Err(node_, "bad dense_shape or values");
    std::vector<int64_t> count(rows, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = indices.data<int64_t>()[i * rank];
      if (r < 0 || r >= rows) return Err(node_, absl::StrCat("row index ", r, " out of range"));
      ++count[r];
    }
    int64_t empty = 0;
    for (int64_t r = 0; r < rows; ++r) empty += count[r] == 0;
    const int64_t total = n + empty;
    KILN_ASSIGN_OR_RETURN(Tensor* const out_idx_ptr,
                          ctx.Allocate(0, DType::kInt64, Shape{total, rank}));
    Tensor& out_idx = *out_idx_ptr;
    KILN_ASSIGN_OR_RETURN(Tensor* const out_val_ptr, ctx.Allocate(1, values.dtype(), Shape{total}));
    Tensor& out_val = *out_val_ptr;
    KILN_ASSIGN_OR_RETURN(Tensor* const indicator_ptr, ctx.Allocate(2, DType::kBool, Shape{rows}));
    Tensor& indicator = *indicator_ptr;
    KILN_ASSIGN_OR_RETURN(Tensor* const reverse_ptr, ctx.Allocate(3, DType::kInt64, Shape{n}));
    Tensor& reverse = *reverse_ptr;
    // Output is ordered by row (TF sorts by row, keeping the input order within a row).
    std::vector<int64_t> start(rows + 1, 0);
    for (int64_t r = 0; r < rows; ++r) start[r + 1] = start[r] + std::max<int64_t>(count[r], 1);
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = indices.data<int64_t>()[i * rank];
      const int64_t o = next[r]++;
      std::memcpy(out_idx.data<int64_t>() + o * rank, indices.data<int64_t>() + i * rank,
                  rank * sizeof(int64_t));
      CopyElement(values, i, out_val, o);
      reverse.data<int64_t>()[i] = o;
    }
    for (int64_t r = 0; r < rows; ++r) {
      indicator.data<bool>()[r] = count[r] == 0;
      if (count[r] != 0) continue;
      const int64_t o = start[r];
      int64_t* row = out_idx.data<int64_t>() + o * rank;
      std::fill(row, row + rank, 0);
      row[0] = r;
      CopyElement(ctx.inputs[3], 0, out_val, o);
    }
    return absl::OkStatus();
  }
 private:
  std::string node_;
};

class SparseReshapeKernel : public OpKernel {
 public:
  explicit SparseReshapeKernel(const ir::Node& node) : node_(node.Describe()) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 3) return Err(node_, "expects indices, shape, new_shape");
    ctx.SetNumOutputs(2);
    ctx.output_dtypes = {DType::kInt64, DType::kInt64};
    ctx.output_dynamic = {true, true};
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& indices = ctx.inputs[0];
    const Tensor& shape = ctx.inputs[1];
    const Tensor& target = ctx.inputs[2];
    const int64_t rank = shape.num_elements(), new_rank = target.num_elements();
    if (indices.rank() != 2 || indices.dim(1) != rank) return Err(node_, "indices must be [N, rank]");
    int64_t dense = 1;
    for (int64_t i = 0; i < rank; ++i) dense *= IntAt(shape, i);
    std::vector<int64_t> out_shape(new_rank);
    int64_t known = 1, unknown = -1;
    for (int64_t i = 0; i < new_rank; ++i) {
      out_shape[i] = IntAt(target, i);
      if (out_shape[i] == -1) {
        if (unknown >= 0) return Err(node_, "more than one -1 in new_shape");
        unknown = i;
      } else {
        known *= out_shape[i];
      }
    }
    if (unknown >= 0) out_shape[unknown] = known == 0 ? 0 : dense / known;
    int64_t product = 1;
    for (int64_t d : out_shape) product *= d;
    if (product != dense) {
      return Err(node_, absl::StrCat("cannot reshape ", dense, " elements to the new shape"));
    }
    const int64_t n = indices.dim(0);
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr,
                          ctx.Allocate(0, DType::kInt64, Shape{n, new_rank}));
    Tensor& out = *out_ptr;
    KILN_ASSIGN_OR_RETURN(Tensor* const out_shape_t_ptr,
                          ctx.Allocate(1, DType::kInt64, Shape{new_rank}));
    Tensor& out_shape_t = *out_shape_t_ptr;
    std::copy(out_shape.begin(), out_shape.end(), out_shape_t.data<int64_t>());
    for (int64_t i = 0; i < n; ++i) {
      int64_t linear = 0;
      for (int64_t d = 0; d < rank; ++d) {
        linear = linear * IntAt(shape, d) + indices.data<int64_t>()[i * rank + d];
      }
      for (int64_t d = new_rank - 1; d >= 0; --d) {
        const int64_t size = out_shape[d];
        out.data<int64_t>()[i * new_rank + d] = size == 0 ? 0 : linear % size;
        if (size != 0) linear /= size;
      }
    }
    return absl::OkStatus();
  }
 private:
  std::string node_;
};

class SparseSegmentReduceKernel : public OpKernel {
 public:
  explicit SparseSegmentReduceKernel(const ir::Node& node)
      : node_(node.Describe()), mode_(node.GetString("mode", "sum")) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 3 || ctx.inputs[0].dtype != DType::kFloat32) {
      return Err(node_, "expects float data, indices, segment_ids");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& data = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    const Tensor& segments = ctx.inputs[2];
    if (data.rank() < 1 || indices.num_elements() != segments.num_elements()) {
      return Err(node_, "indices and segment_ids differ in length");
    }
    const int64_t n = indices.num_elements();
    int64_t num_segments = n == 0 ? 0 : IntAt(segments, n - 1) + 1;
    if (ctx.inputs.size() > 3 && ctx.inputs[3].num_elements() == 1) {
      num_segments = IntAt(ctx.inputs[3], 0);
    }
    const int64_t row = data.num_elements() / std::max<int64_t>(data.dim(0), 1);
    Shape shape = data.shape();
    shape.set_dim(0, num_segments);
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, DType::kFloat32, shape));
    Tensor& out = *out_ptr;
    float* o = out.data<float>();
    std::fill(o, o + out.num_elements(), 0.f);
    std::vector<int64_t> counts(num_segments, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = IntAt(segments, i), idx = IntAt(indices, i);
      if (s < 0 || s >= num_segments) return Err(node_, "segment id out of range");
      if (idx < 0 || idx >= data.dim(0)) return Err(node_, absl::StrCat("index ", idx, " out of range"));
      const float* src = data.data<float>() + idx * row;
      for (int64_t k = 0; k < row; ++k) o[s * row + k] += src[k];
      ++counts[s];
    }
    if (mode_ != "sum") {
      for (int64_t s = 0; s < num_segments; ++s) {
        if (counts[s] == 0) continue;
        const float scale = mode_ == "mean" ? 1.f / counts[s] : 1.f / std::sqrt(float(counts[s]));
        for (int64_t k = 0; k < row; ++k) o[s * row + k] *= scale;
      }
    }
    return absl::OkStatus();
  }
 private:
  std::string node_;
  std::string mode_;
};

class SparseToDenseKernel : public OpKernel {
 public:
  explicit SparseToDenseKernel(const ir::Node& node) : node_(node.Describe()) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 4 || ctx.inputs[2].dtype != ctx.inputs[3].dtype) {
      return Err(node_, "expects indices, output_shape, values, default of the values' type");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[2].dtype;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& indices = ctx.inputs[0];
    const Tensor& shape_t = ctx.inputs[1];
    const Tensor& values = ctx.inputs[2];
    Shape shape;
    for (int64_t i = 0; i < shape_t.num_elements(); ++i) shape.push_back(IntAt(shape_t, i));
    const int64_t rank = shape.rank();
    const int64_t n = indices.rank() == 0 ? 1 : indices.dim(0);
    const int64_t per = indices.rank() <= 1 ? 1 : indices.dim(1);
    if (per != rank && !(rank == 1 && per == 1)) return Err(node_, "indices do not match the shape");
    if (values.num_elements() != 1 && values.num_elements() != n) {
      return Err(node_, "values must be a scalar or one per index");
    }
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, values.dtype(), shape));
    Tensor& out = *out_ptr;
    for (int64_t i = 0; i < out.num_elements(); ++i) CopyElement(ctx.inputs[3], 0, out, i);
    for (int64_t i = 0; i < n; ++i) {
      int64_t linear = 0;
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t v = IntAt(indices, i * per + d);
        if (v < 0 || v >= shape.dim(d)) return Err(node_, "index out of range");
        linear = linear * shape.dim(d) + v;
      }
      CopyElement(values, values.num_elements() == 1 ? 0 : i, out, linear);
    }
    return absl::OkStatus();
  }
 private:
  std::string node_;
};

class UpperBoundKernel : public OpKernel {
 public:
  explicit UpperBoundKernel(const ir::Node& node)
      : node_(node.Describe()), out_int64_(node.GetInt("out_type", 6) == 7) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2 || ctx.inputs[0].dtype != DType::kFloat32 ||
        ctx.inputs[1].dtype != DType::kFloat32 || ctx.inputs[0].shape.rank() != 2 ||
        ctx.inputs[1].shape.rank() != 2 || ctx.inputs[0].shape.dim(0) != ctx.inputs[1].shape.dim(0)) {
      return Err(node_, "expects float sorted_inputs [B, N] and values [B, M]");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = out_int64_ ? DType::kInt64 : DType::kInt32;
    ctx.output_shapes[0] = ctx.inputs[1].shape;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& sorted = ctx.inputs[0];
    const Tensor& values = ctx.inputs[1];
    const int64_t b = sorted.dim(0), n = sorted.dim(1), m = values.dim(1);
    for (int64_t i = 0; i < b; ++i) {
      const float* row = sorted.data<float>() + i * n;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t pos = std::upper_bound(row, row + n, values.data<float>()[i * m + j]) - row;
        if (out_int64_) ctx.outputs[0].data<int64_t>()[i * m + j] = pos;
        else ctx.outputs[0].data<int32_t>()[i * m + j] = static_cast<int32_t>(pos);
      }
    }
    return absl::OkStatus();
  }
 private:
  std::string node_;
  bool out_int64_;
};

class AsStringKernel : public OpKernel {
 public:
  explicit AsStringKernel(const ir::Node& node) : node_(node.Describe()) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1) return Err(node_, "expects one input");
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kString;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    std::string* out = ctx.outputs[0].data<std::string>();
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      switch (x.dtype()) {
        case DType::kInt64: out[i] = absl::StrCat(x.data<int64_t>()[i]); break;
        case DType::kInt32: out[i] = absl::StrCat(x.data<int32_t>()[i]); break;
        case DType::kBool: out[i] = x.data<bool>()[i] ? "true" : "false"; break;
        case DType::kFloat32: out[i] = absl::StrFormat("%f", x.data<float>()[i]); break;
        case DType::kFloat64: out[i] = absl::StrFormat("%f", x.data<double>()[i]); break;
        case DType::kString: out[i] = x.data<std::string>()[i]; break;
        default: return Err(node_, absl::StrCat("unsupported type ", DTypeName(x.dtype())));
      }
    }
    return absl::OkStatus();
  }
 private:
  std::string node_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "SparseFillEmptyRows", SparseFillEmptyRowsKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "SparseReshape", SparseReshapeKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "SparseSegmentReduce", SparseSegmentReduceKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "SparseToDense", SparseToDenseKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "UpperBound", UpperBoundKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "AsString", AsStringKernel);

}  // namespace

KILN_KERNEL_FILE(tf_sparse);

}  // namespace kiln::kernels
