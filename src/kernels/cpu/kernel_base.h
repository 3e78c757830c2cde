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
// constructors cannot fail, so Prepare reports it (KILN_RETURN_IF_ERROR(attr_status())).
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

}  // namespace kiln::kernels
