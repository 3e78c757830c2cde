// TensorFlow TensorList ops as the TF importer lowers them: a list is a dense tensor
// [num_elements, element...]. TensorListReserve gives a list whose unknown element dims are 0
// (no storage yet); the first TensorListSetItem allocates it from the item's shape. This is
// how Keras RNN loops (StatelessWhile over TensorListReserve/SetItem/Stack) run.
// Also kiln::SelectCondition(cond, x): TF v1 Select's rank-1 condition reshaped to pick rows.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/onnx_types.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

class TensorListReserveKernel : public OpKernel {
 public:
  explicit TensorListReserveKernel(const ir::Node& node)
      : node_(node.Describe()), onnx_dtype_(node.GetInt("element_dtype", 1)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2 || ctx.inputs[0].dtype != DType::kInt64 ||
        ctx.inputs[1].dtype != DType::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_, ": expects int64 element_shape and num_elements"));
    }
    dtype_ = FromOnnx(onnx_dtype_);
    if (dtype_ == DType::kInvalid) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": bad element_dtype"));
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dtype_;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& element_shape = ctx.inputs[0];
    const int64_t n = *ctx.inputs[1].data<int64_t>();
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": num_elements ", n,
                                                     " (lists of unknown length are not "
                                                     "supported)"));
    }
    Shape shape{n};
    if (element_shape.rank() == 1) {
      for (int64_t d : element_shape.span<int64_t>()) shape.push_back(d < 0 ? 0 : d);
    } else {
      shape.push_back(0);
    }
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, dtype_, shape));
    Tensor& out = *out_ptr;
    if (dtype_ != DType::kString && out.byte_size() > 0) std::memset(out.raw_data(), 0, out.byte_size());
    return absl::OkStatus();
  }

  // The element dtypes TensorList kernels support; others are kInvalid (refused).
  static DType FromOnnx(int64_t t) {
    const DType dtype = ir::DTypeFromOnnxCode(t);
    switch (dtype) {
      case DType::kFloat32:
      case DType::kInt32:
      case DType::kInt64:
      case DType::kBool:
      case DType::kFloat64:
      case DType::kString:
        return dtype;
      default: return DType::kInvalid;
    }
  }

 private:
  std::string node_;
  int64_t onnx_dtype_;
  DType dtype_ = DType::kInvalid;
};

class TensorListSetItemKernel : public OpKernel {
 public:
  explicit TensorListSetItemKernel(const ir::Node& node) : node_(node.Describe()) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 3 || ctx.inputs[1].dtype != DType::kInt64) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": expects list, int64 index, item"));
    }
    if (ctx.inputs[0].dtype != ctx.inputs[2].dtype) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": item type differs from the list's"));
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& list = ctx.inputs[0];
    const Tensor& item = ctx.inputs[2];
    if (list.rank() < 1) return absl::InvalidArgumentError(absl::StrCat(node_, ": not a list"));
    const int64_t n = list.dim(0);
    const int64_t index = *ctx.inputs[1].data<int64_t>();
    if (index < 0 || index >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_, ": index ", index, " out of range for a list of ", n));
    }
    Shape shape{n};
    for (int64_t d : item.shape().dims()) shape.push_back(d);
    bool same = list.rank() == shape.rank();
    for (int i = 1; same && i < shape.rank(); ++i) same = list.dim(i) == shape.dim(i);
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, list.dtype(), shape));
    Tensor& out = *out_ptr;
    const int64_t row = item.num_elements();
    if (same) {
      out.CopyFrom(list);
    } else if (list.num_elements() == 0) {
      if (list.dtype() != DType::kString && out.byte_size() > 0) {
        std::memset(out.raw_data(), 0, out.byte_size());
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": item shape ",
                                                     item.shape().ToString(),
                                                     " does not match list ", list.shape().ToString()));
    }
    if (list.dtype() == DType::kString) {
      for (int64_t i = 0; i < row; ++i) {
        out.data<std::string>()[index * row + i] = item.data<std::string>()[i];
      }
    } else {
      const size_t bytes = static_cast<size_t>(row) * DTypeSize(list.dtype());
      if (bytes > 0) {
        std::memcpy(static_cast<char*>(out.raw_data()) + index * bytes, item.raw_data(), bytes);
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string node_;
};

class SelectConditionKernel : public OpKernel {
 public:
  explicit SelectConditionKernel(const ir::Node& node) : node_(node.Describe()) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2 || ctx.inputs[0].dtype != DType::kBool) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": expects bool cond and values"));
    }
    Shape shape = ctx.inputs[0].shape;
    const Shape& values = ctx.inputs[1].shape;
    if (shape.rank() == 1 && values.rank() > 1) {
      if (shape.dim(0) != values.dim(0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_, ": condition ", shape.ToString(), " does not match the rows of ",
            values.ToString()));
      }
      while (shape.rank() < values.rank()) shape.push_back(1);
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kBool;
    ctx.output_shapes[0] = shape;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    if (ctx.inputs[0].byte_size() > 0) {
      std::memcpy(ctx.outputs[0].raw_data(), ctx.inputs[0].raw_data(), ctx.inputs[0].byte_size());
    }
    return absl::OkStatus();
  }

 private:
  std::string node_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "TensorListReserve", TensorListReserveKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "TensorListSetItem", TensorListSetItemKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "SelectCondition", SelectConditionKernel);

}  // namespace

KILN_KERNEL_FILE(tf_tensor_list);

}  // namespace kiln::kernels
