// One element of a dataset: a tuple of tensors, optionally named ({"image", "label"}).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

struct Element {
  std::vector<Tensor> tensors;
  // Empty, or one name per tensor. Shared between elements of one dataset (cheap to copy).
  std::shared_ptr<const std::vector<std::string>> names;

  Element() = default;
  explicit Element(std::vector<Tensor> t) : tensors(std::move(t)) {}
  Element(std::vector<Tensor> t, std::shared_ptr<const std::vector<std::string>> n)
      : tensors(std::move(t)), names(std::move(n)) {}

  size_t size() const { return tensors.size(); }
  Tensor& operator[](size_t i) { return tensors[i]; }
  const Tensor& operator[](size_t i) const { return tensors[i]; }
  // Index of the tensor called `name`, or -1.
  int IndexOf(const std::string& name) const {
    if (!names) return -1;
    for (size_t i = 0; i < names->size(); ++i) {
      if ((*names)[i] == name) return static_cast<int>(i);
    }
    return -1;
  }
};

// A function from one element to another, as passed to Dataset::Map. Must be thread-safe:
// parallel map calls it from several threads at once.
using MapFn = std::function<absl::StatusOr<Element>(Element)>;

}  // namespace kiln::data
