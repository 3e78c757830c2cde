// One way to run a node once outside a compiled plan's arena: the plan compiler evaluates
// constant nodes with it, the executor runs nodes whose shapes are known only at run time with
// it, and KernelEvaluator hands it to the optimizer (ir::NodeEvaluator) for constant folding.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "kiln/ir/evaluator.h"
#include "kiln/kernels/kernel.h"

namespace kiln::exec {

// True when every output of a prepared node is empty: nothing to compute (and kernels need
// not handle calling oneDNN or dividing by a zero dimension for no work).
bool AllOutputsEmpty(const kernels::ReshapeContext& prepare);

// Runs `kernel`, already prepared as `prepare` says, on ctx.inputs: allocates each output that
// is not dynamic with the prepared dtype and shape (ctx.Allocate: counted against ctx.memory
// when set), and the scratch (reserved from ctx.memory too), then Compute; skips Compute when
// every output is empty. ctx.outputs must hold one Tensor per node output.
absl::Status RunPrepared(const kernels::OpKernel& kernel, const kernels::ReshapeContext& prepare,
                         kernels::ComputeContext& ctx);

// The CPU kernels as an ir::NodeEvaluator: each call makes the node's kernel, Creates it (every
// input a constant), Reshapes it for the inputs' dtypes and shapes (created = itself) and runs
// it once. Holds no state.
class KernelEvaluator final : public ir::NodeEvaluator {
 public:
  absl::StatusOr<std::vector<Tensor>> Evaluate(const ir::Node& node,
                                               absl::Span<const Tensor> inputs,
                                               size_t max_output_bytes) const override;
};

}  // namespace kiln::exec
