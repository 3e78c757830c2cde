// Evaluating one node whose inputs are all known. The optimizer folds constants through this
// interface and the runtime implements it with its kernels (exec::KernelEvaluator), so that
// the optimizer computes exactly what a run computes without linking the kernels.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/core/tensor.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {

class NodeEvaluator {
 public:
  virtual ~NodeEvaluator() = default;

  // The node's outputs (one per node output; an omitted output stays invalid) for `inputs`
  // (one per node input; an invalid Tensor for an omitted optional input). Outputs over
  // `max_output_bytes` together (a Tile or ConstantOfShape of a huge constant shape) are
  // RESOURCE_EXHAUSTED before they are allocated. Must be safe to call from several threads.
  virtual absl::StatusOr<std::vector<Tensor>> Evaluate(const Node& node,
                                                       absl::Span<const Tensor> inputs,
                                                       size_t max_output_bytes) const = 0;
};

}  // namespace kiln::ir
