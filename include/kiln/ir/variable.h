// Mutable variables: the state a loaded model keeps between runs (TensorFlow's VariableV2 and
// resource variables that a signature writes, such as TF Serving's saved_model_counter).
//
// The contract shared by the TF importer, which writes the nodes, and the kernels in
// src/kernels/cpu/tf_variables.cc, which run them:
//   kiln::ReadVariable(ordering...)               -> a copy of the variable's value
//   kiln::AssignVariable(value, ordering...)      -> the new value (a copy)
//   kiln::AssignAddVariable(delta, ordering...)   -> the new value (a copy)
//   kiln::AssignSubVariable(delta, ordering...)   -> the new value (a copy)
//   kiln::OrderAfter(x, writes...)               -> x (runs after the writes)
// Every such node but OrderAfter names its variable with the attribute kVariableAttr (a handle made
// by VariableHandle). Inputs after the first (all inputs of ReadVariable) only order the node after
// the writes that produce them (TensorFlow's control dependencies); their values are not read.
// OrderAfter stands for a TensorFlow node that waits for writes but reads no variable
// (Identity(x, ^assign)): its extra inputs keep the writes in the graph and run them first.
// AssignVariable takes the attribute "validate_shape" (int, default 1): 0 lets the write change
// the variable's shape, as TensorFlow's Assign(validate_shape=false) and AssignVariableOp do.
//
// Why state lives here and not in the runtime: the importer makes one Variable per TensorFlow
// variable of one import, and the graphs of every signature of that import share it through
// their nodes' attributes. A fresh load makes fresh variables (starting from the checkpointed
// value), so two loaded versions of a model have separate state, as TF Serving keeps one
// Session per version. ir/op_traits.cc marks the four variable operators nondeterministic, so
// that neither the optimizer nor the plan compiler evaluates them ahead of time or merges two of
// them (OrderAfter needs no entry: its inputs, writes among them, are never all constant).
//
// Thread safety: a Variable's value is read and written only under its mutex, and a kernel
// holds it for the whole read-modify-write, so concurrent runs never lose an update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "kiln/core/tensor.h"

namespace kiln::ir {

inline constexpr char kVariableAttr[] = "variable";

class Variable {
 public:
  // `initial` is copied: the variable owns its buffer alone, so that writes may change it in
  // place while no one else can see it. An invalid `initial` leaves the variable uninitialized.
  Variable(std::string name, DType dtype, const Tensor& initial)
      : name_(std::move(name)),
        dtype_(dtype),
        value_(initial.valid() ? initial.Clone() : Tensor()) {}
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }

  // Runs fn(Tensor& value) with the variable locked; fn may change the value's elements in
  // place or assign a new tensor (which it must own alone). Returns what fn returns.
  template <typename Fn>
  auto WithLock(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    return fn(value_);
  }

 private:
  const std::string name_;
  const DType dtype_;
  std::mutex mu_;
  Tensor value_ ABSL_GUARDED_BY(mu_);  // invalid: not initialized
};

namespace variable_internal {
// The bytes a handle tensor shows: a magic number and the address of the block itself. A
// tensor that did not come from VariableHandle (an ONNX model's attribute of the same name,
// say) cannot hold its own heap address, so VariableFromHandle refuses it instead of following
// a pointer read from a file.
struct HandleBlock {
  uint64_t magic;
  const void* self;
  Variable* variable;  // kept alive by the handle tensor's buffer
};
static_assert(std::is_standard_layout_v<HandleBlock>);
inline constexpr uint64_t kHandleMagic = 0x4b494c4e56415231ull;  // "KILNVAR1"
inline constexpr size_t kHandleBytes = offsetof(HandleBlock, variable);
}  // namespace variable_internal

// An attribute value naming `variable` (uint8[16]). Copies of the tensor (and of graphs that
// hold it) share the variable and keep it alive.
inline Tensor VariableHandle(std::shared_ptr<Variable> variable) {
  using variable_internal::HandleBlock;
  auto block = std::make_unique<HandleBlock>();
  block->magic = variable_internal::kHandleMagic;
  block->self = block.get();
  block->variable = variable.get();
  HandleBlock* raw = block.release();
  auto buffer = Buffer::Wrap(raw, variable_internal::kHandleBytes,
                             [raw, keep = std::move(variable)]() mutable {
                               delete raw;
                               keep.reset();
                             });
  return Tensor(DType::kUInt8, Shape{static_cast<int64_t>(variable_internal::kHandleBytes)},
                std::move(buffer));
}

// The variable a handle names, alive as long as `handle` (or a copy) is; null when `handle` is
// not a tensor VariableHandle made.
inline Variable* VariableFromHandle(const Tensor& handle) {
  using variable_internal::HandleBlock;
  if (handle.dtype() != DType::kUInt8 || handle.byte_size() != variable_internal::kHandleBytes ||
      handle.byte_offset() != 0 || handle.raw_data() == nullptr) {
    return nullptr;
  }
  uint64_t magic;
  const void* self;
  std::memcpy(&magic, handle.raw_data(), sizeof(magic));
  std::memcpy(&self, static_cast<const char*>(handle.raw_data()) + offsetof(HandleBlock, self),
              sizeof(self));
  if (magic != variable_internal::kHandleMagic || self != handle.raw_data()) return nullptr;
  return static_cast<const HandleBlock*>(handle.raw_data())->variable;
}

}  // namespace kiln::ir
