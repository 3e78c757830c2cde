// Kernels of the mutable variables a loaded model keeps between runs (kiln/ir/variable.h has
// the operators' contract): kiln::ReadVariable, kiln::AssignVariable, kiln::AssignAddVariable,
// kiln::AssignSubVariable, and kiln::OrderAfter. TensorFlow's VariableV2 +
// Identity/Assign/AssignAdd/AssignSub and resource variables'
// ReadVariableOp/AssignVariableOp/AssignAddVariableOp/AssignSubVariableOp import to them
// (src/import/tf/converter_variables.cc).
//
// Each kernel holds the variable's lock for its whole read-modify-write and returns a copy of
// the value it left, so an increment is never lost under concurrent runs and each run sees the
// value its own write produced (TensorFlow returns a reference read later, which another run
// may have changed meanwhile; the copy is the linearizable answer). Outputs are dynamic: a
// variable's shape is only known when the kernel runs (an assign with validate_shape=false may
// change it), and a dynamic output is never skipped as empty.
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/variable.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

enum class VariableOp { kRead, kAssign, kAssignAdd, kAssignSub };

// TensorFlow's message for a read of a variable nothing initialized (ref variables say
// "Attempting to use uninitialized value <name>").
absl::Status Uninitialized(const ir::Node* node, const ir::Variable& variable) {
  return absl::FailedPreconditionError(
      absl::StrCat(node != nullptr ? node->Describe() + ": " : std::string(),
                   "Attempting to use uninitialized value ", variable.name()));
}

// value += delta (or -=) elementwise. Integers wrap around as TensorFlow's do (computed in
// unsigned arithmetic: signed overflow would be undefined behaviour); floats follow IEEE, NaN
// and Inf included.
template <typename T>
void AddInPlace(Tensor& value, const Tensor& delta, bool subtract) {
  T* v = value.data<T>();
  const T* d = delta.data<T>();
  const int64_t n = value.num_elements();
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    for (int64_t i = 0; i < n; ++i) {
      const U a = static_cast<U>(v[i]), b = static_cast<U>(d[i]);
      v[i] = static_cast<T>(subtract ? a - b : a + b);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = subtract ? v[i] - d[i] : v[i] + d[i];
  }
}

bool Addable(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kInt32 ||
         dtype == DType::kInt64;
}

class VariableKernel : public OpKernel {
 public:
  VariableKernel(const ir::Node& node, VariableOp op, Tensor handle, ir::Variable* variable)
      : node_(node.Describe()),
        op_(op),
        handle_(std::move(handle)),
        variable_(variable),
        validate_shape_(node.GetInt("validate_shape", 1) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (op_ != VariableOp::kRead) {
      if (ctx.inputs.empty() || !ctx.inputs[0].present()) {
        return absl::InvalidArgumentError(absl::StrCat(node_, ": expects the value to write"));
      }
      if (ctx.inputs[0].dtype != variable_->dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_, ": variable '", variable_->name(), "' holds ", DTypeName(variable_->dtype()),
            ", the value written is ", DTypeName(ctx.inputs[0].dtype)));
      }
      if ((op_ == VariableOp::kAssignAdd || op_ == VariableOp::kAssignSub) &&
          !Addable(variable_->dtype())) {
        return absl::UnimplementedError(absl::StrCat(
            node_, ": adding to a ", DTypeName(variable_->dtype()), " variable is not supported"));
      }
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = variable_->dtype();
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    return variable_->WithLock([&](Tensor& value) -> absl::Status {
      switch (op_) {
        case VariableOp::kRead:
          if (!value.valid()) return Uninitialized(ctx.node, *variable_);
          break;
        case VariableOp::kAssign: {
          const Tensor& update = ctx.inputs[0];
          if (value.valid() && validate_shape_ && value.shape() != update.shape()) {
            return absl::InvalidArgumentError(absl::StrCat(
                node_, ": Assign requires shapes of both tensors to match. lhs shape= ",
                value.shape().ToString(), " rhs shape= ", update.shape().ToString()));
          }
          if (value.valid() && value.shape() == update.shape()) {
            value.CopyFrom(update);  // the variable owns its buffer alone (Variable's contract)
          } else {
            KILN_ASSIGN_OR_RETURN(Tensor fresh, Tensor::Allocate(update.dtype(), update.shape()));
            fresh.CopyFrom(update);
            value = std::move(fresh);
          }
          break;
        }
        case VariableOp::kAssignAdd:
        case VariableOp::kAssignSub: {
          if (!value.valid()) return Uninitialized(ctx.node, *variable_);
          const Tensor& delta = ctx.inputs[0];
          if (value.shape() != delta.shape()) {
            return absl::InvalidArgumentError(absl::StrCat(
                node_, ": Cannot update variable '", variable_->name(), "' with shape ",
                value.shape().ToString(), " using a Tensor with shape ", delta.shape().ToString(),
                ", shapes must be equal."));
          }
          const bool subtract = op_ == VariableOp::kAssignSub;
          switch (value.dtype()) {
            case DType::kFloat32:
              AddInPlace<float>(value, delta, subtract);
              break;
            case DType::kFloat64:
              AddInPlace<double>(value, delta, subtract);
              break;
            case DType::kInt32:
              AddInPlace<int32_t>(value, delta, subtract);
              break;
            case DType::kInt64:
              AddInPlace<int64_t>(value, delta, subtract);
              break;
            default:
              return absl::InternalError(absl::StrCat(node_, ": unchecked dtype"));
          }
          break;
        }
      }
      KILN_ASSIGN_OR_RETURN(Tensor * out, ctx.Allocate(0, value.dtype(), value.shape()));
      out->CopyFrom(value);
      return absl::OkStatus();
    });
  }

 private:
  std::string node_;
  VariableOp op_;
  Tensor handle_;  // keeps variable_ alive
  ir::Variable* variable_;
  bool validate_shape_;
};

// kiln::OrderAfter(x, writes...) -> x: TensorFlow's Identity(x, ^write) when nothing after it
// reads a variable. Its extra inputs keep the writes in the graph and run them first.
class OrderAfterKernel : public OpKernel {
 public:
  explicit OrderAfterKernel(const ir::Node& node) : node_(node.Describe()) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty() || !ctx.inputs[0].present()) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": expects the value to pass on"));
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    ctx.output_in_place_of[0] = 0;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    if (out.raw_data() != in.raw_data()) out.CopyFrom(in);
    return absl::OkStatus();
  }

 private:
  std::string node_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "OrderAfter", OrderAfterKernel);

KernelFactory VariableKernelFactory(VariableOp op) {
  return [op](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    const Tensor* handle = node.GetTensor(ir::kVariableAttr);
    ir::Variable* variable = handle != nullptr ? ir::VariableFromHandle(*handle) : nullptr;
    if (variable == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Describe(), ": attribute '", ir::kVariableAttr,
                       "' does not name a variable of a loaded model"));
    }
    return std::unique_ptr<OpKernel>(new VariableKernel(node, op, *handle, variable));
  };
}

KILN_REGISTER_KERNEL("kiln", "ReadVariable", VariableKernelFactory(VariableOp::kRead));
KILN_REGISTER_KERNEL("kiln", "AssignVariable", VariableKernelFactory(VariableOp::kAssign));
KILN_REGISTER_KERNEL("kiln", "AssignAddVariable", VariableKernelFactory(VariableOp::kAssignAdd));
KILN_REGISTER_KERNEL("kiln", "AssignSubVariable", VariableKernelFactory(VariableOp::kAssignSub));

}  // namespace

KILN_KERNEL_FILE(tf_variables);

}  // namespace kiln::kernels
