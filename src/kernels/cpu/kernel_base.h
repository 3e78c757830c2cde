// The base of the CPU kernels that name their node in errors: math_* kernels know it as
// math::MathKernel and tensor_* kernels as tensor_ops::TensorKernel (aliases of one class).
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {

// Keeps the node's description for error messages and the first attribute error:
// constructors cannot fail, so Reshape reports it (KILN_RETURN_IF_ERROR(attr_status())).
class NodeKernel : public OpKernel {
 protected:
  explicit NodeKernel(const ir::Node& node) : where_(node.Describe()) {}

  // INVALID_ARGUMENT "<node>: <args...>".
  template <typename... Args>
  absl::Status Error(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", args...));
  }
  void SetAttrError(absl::Status status) {
    if (attr_status_.ok()) attr_status_ = std::move(status);
  }
  const absl::Status& attr_status() const { return attr_status_; }
  const std::string& where() const { return where_; }

 private:
  std::string where_;
  absl::Status attr_status_;
};

// Declares one output of input 0's shape and `dtype` (an elementwise op's output), which the
// plan may place over input 0's memory when `in_place_of_input0`.
inline void DeclareOutputLikeInput0(ReshapeContext& ctx, DType dtype, bool in_place_of_input0) {
  ctx.SetNumOutputs(1);
  ctx.output_dtypes[0] = dtype;
  ctx.output_shapes[0] = ctx.inputs[0].shape;
  if (in_place_of_input0) ctx.output_in_place_of[0] = 0;
}

}  // namespace kiln::kernels
