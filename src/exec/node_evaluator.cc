#include "kiln/exec/node_evaluator.h"

#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "kiln/core/memory_budget.h"
#include "kiln/core/status.h"

namespace kiln::exec {
namespace {

absl::StatusOr<std::vector<Tensor>> Evaluate(const ir::Node& node, absl::Span<const Tensor> inputs,
                                             size_t max_output_bytes) {
  const kernels::KernelFactory* factory =
      kernels::KernelRegistry::Global().Find(node.domain, node.op);
  if (factory == nullptr) {
    return absl::UnimplementedError(absl::StrCat("no CPU kernel for ", node.Describe()));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<kernels::OpKernel> kernel, (*factory)(node));
  // The whole lifecycle on one object, run once: Create sees every input as the constant it is
  // (packing into the kernel's own copy), then Reshape reads what Create made from itself.
  kernels::CreateContext create;
  create.node = &node;
  for (const Tensor& t : inputs) {
    kernels::InputInfo info;
    if (t.valid()) {
      info.dtype = t.dtype();
      info.shape = t.shape();
      info.constant = &t;
    }
    create.inputs.push_back(info);
  }
  KILN_RETURN_IF_ERROR(kernel->Create(create));
  kernels::ReshapeContext prepare;
  prepare.node = &node;
  prepare.created = kernel.get();
  prepare.inputs = create.inputs;
  prepare.SetNumOutputs(static_cast<int>(node.outputs.size()));
  KILN_RETURN_IF_ERROR(kernel->Reshape(prepare));
  MemoryBudget budget(max_output_bytes);
  std::vector<Tensor> outputs(node.outputs.size());
  kernels::ComputeContext ctx;
  ctx.inputs = inputs;
  ctx.outputs = absl::MakeSpan(outputs);
  ctx.node = &node;
  ctx.memory = &budget;
  KILN_RETURN_IF_ERROR(RunPrepared(*kernel, prepare, ctx));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].valid() && node.outputs[i] != ir::kNoValue) {
      return absl::InternalError(absl::StrCat(node.Describe(), " produced no output ", i));
    }
  }
  return outputs;
}

}  // namespace

bool AllOutputsEmpty(const kernels::ReshapeContext& prepare) {
  if (prepare.output_shapes.empty()) return false;
  for (size_t i = 0; i < prepare.output_shapes.size(); ++i) {
    if (prepare.output_dynamic[i] || prepare.output_shapes[i].num_elements() != 0) return false;
  }
  return true;
}

absl::Status RunPrepared(const kernels::OpKernel& kernel, const kernels::ReshapeContext& prepare,
                         kernels::ComputeContext& ctx) {
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    ctx.outputs[i] = Tensor();
    if (i >= prepare.output_dtypes.size() || prepare.output_dynamic[i]) continue;
    KILN_RETURN_IF_ERROR(
        ctx.Allocate(static_cast<int>(i), prepare.output_dtypes[i], prepare.output_shapes[i])
            .status());
  }
  if (AllOutputsEmpty(prepare)) return absl::OkStatus();
  std::shared_ptr<Buffer> scratch;
  if (prepare.scratch_bytes > 0) {
    if (ctx.memory != nullptr && !ctx.memory->TryReserve(prepare.scratch_bytes)) {
      return kernels::OverBudgetError(ctx.node, "scratch", DType::kUInt8,
                                      Shape{static_cast<int64_t>(prepare.scratch_bytes)},
                                      prepare.scratch_bytes, *ctx.memory);
    }
    scratch = Buffer::Allocate(prepare.scratch_bytes);
  }
  ctx.scratch = scratch ? scratch->data() : nullptr;
  return kernel.Compute(ctx);
}

absl::StatusOr<std::vector<Tensor>> KernelEvaluator::Evaluate(const ir::Node& node,
                                                              absl::Span<const Tensor> inputs,
                                                              size_t max_output_bytes) const {
  try {
    return exec::Evaluate(node, inputs, max_output_bytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(node.Describe(), ": out of memory"));
  }
}

}  // namespace kiln::exec
