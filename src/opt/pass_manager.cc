#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"
#include "kiln/core/memory_budget.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {

PassRegistry& PassRegistry::Global() {
  static PassRegistry* registry = new PassRegistry();
  return *registry;
}

void PassRegistry::Register(std::string name, int order, PassFunction run) {
  passes_.push_back({std::move(name), order, std::move(run)});
}

std::vector<PassInfo> PassRegistry::Passes() const {
  std::vector<PassInfo> sorted = passes_;
  std::sort(sorted.begin(), sorted.end(), [](const PassInfo& a, const PassInfo& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return sorted;
}

std::string OptimizationLog::ToString(int max_changes_per_pass) const {
  if (disabled) return "optimizer disabled\n";
  std::string out = absl::StrCat(nodes_before, " -> ", nodes_after, " nodes\n");
  if (entries.empty()) absl::StrAppend(&out, "  no pass changed the graph\n");
  for (const OptimizationLogEntry& e : entries) {
    absl::StrAppend(&out, "  ", e.pass, " (round ", e.round, "): ", e.changes.size(),
                    " change", e.changes.size() == 1 ? "" : "s", ", ", e.nodes_before, " -> ",
                    e.nodes_after, " nodes, ", e.duration_ns / 1000, " us\n");
    for (size_t i = 0; i < e.changes.size() && static_cast<int>(i) < max_changes_per_pass; ++i) {
      absl::StrAppend(&out, "    ", e.changes[i], "\n");
    }
    if (static_cast<int>(e.changes.size()) > max_changes_per_pass) {
      absl::StrAppend(&out, "    ... ", e.changes.size() - max_changes_per_pass, " more\n");
    }
  }
  return out;
}

absl::Status Optimize(ir::Graph& graph, const PassOptions& options, OptimizationLog* log) {
  log->nodes_before = graph.num_live_nodes();
  const std::vector<PassInfo> passes = PassRegistry::Global().Passes();
  for (int round = 1; round <= std::max(1, options.max_rounds); ++round) {
    bool changed = false;
    for (const PassInfo& pass : passes) {
      if (std::find(options.disabled_passes.begin(), options.disabled_passes.end(), pass.name) !=
          options.disabled_passes.end()) {
        continue;
      }
      PassContext ctx(options);
      OptimizationLogEntry entry;
      entry.pass = pass.name;
      entry.round = round;
      entry.nodes_before = graph.num_live_nodes();
      const int64_t start = NowNanos();
      absl::Status status = pass.run(graph, ctx);
      if (!status.ok()) return Annotate(status, absl::StrCat("optimizer pass ", pass.name));
      entry.changes = ctx.TakeChanges();
      if (entry.changes.empty()) continue;
      changed = true;
      graph.Compact();
      absl::Status verified = ir::Verify(graph);
      if (!verified.ok()) {
        return absl::InternalError(absl::StrCat("optimizer pass ", pass.name,
                                                " left an invalid graph: ", verified.message()));
      }
      entry.nodes_after = graph.num_live_nodes();
      entry.duration_ns = NowNanos() - start;
      log->entries.push_back(std::move(entry));
    }
    if (!changed) break;
  }
  log->nodes_after = graph.num_live_nodes();
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::vector<Tensor>> EvaluateNodeWithin(const ir::Node& node,
                                                       const std::vector<Tensor>& inputs,
                                                       size_t max_output_bytes) {
  const kernels::KernelFactory* factory =
      kernels::KernelRegistry::Global().Find(node.domain, node.op);
  if (factory == nullptr) {
    return absl::UnimplementedError(absl::StrCat("no CPU kernel for ", node.Describe()));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<kernels::OpKernel> kernel, (*factory)(node));
  kernels::PrepareContext prepare;
  prepare.node = &node;
  for (const Tensor& t : inputs) {
    kernels::InputInfo info;
    if (t.valid()) {
      info.dtype = t.dtype();
      info.shape = t.shape();
      info.constant = &t;
    }
    prepare.inputs.push_back(info);
  }
  prepare.SetNumOutputs(static_cast<int>(node.outputs.size()));
  KILN_RETURN_IF_ERROR(kernel->Prepare(prepare));
  MemoryBudget budget(max_output_bytes);
  std::vector<Tensor> outputs(node.outputs.size());
  for (size_t i = 0; i < outputs.size() && i < prepare.output_dtypes.size(); ++i) {
    if (prepare.output_dynamic[i]) continue;
    KILN_ASSIGN_OR_RETURN(size_t bytes,
                          CheckedByteSize(prepare.output_dtypes[i], prepare.output_shapes[i]));
    if (!budget.TryReserve(bytes)) {
      return kernels::OverBudgetError(&node, "folded output", prepare.output_dtypes[i],
                                      prepare.output_shapes[i], bytes, budget);
    }
    outputs[i] = Tensor(prepare.output_dtypes[i], prepare.output_shapes[i]);
  }
  std::shared_ptr<Buffer> scratch;
  if (prepare.scratch_bytes > 0) scratch = Buffer::Allocate(prepare.scratch_bytes);
  kernels::ComputeContext ctx;
  ctx.inputs = absl::MakeConstSpan(inputs);
  ctx.outputs = absl::MakeSpan(outputs);
  ctx.scratch = scratch ? scratch->data() : nullptr;
  ctx.node = &node;
  ctx.memory = &budget;  // dynamic outputs count against the same limit
  KILN_RETURN_IF_ERROR(kernel->Compute(ctx));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].valid() && node.outputs[i] != ir::kNoValue) {
      return absl::InternalError(absl::StrCat(node.Describe(), " produced no output ", i));
    }
  }
  return outputs;
}
}  // namespace

absl::StatusOr<std::vector<Tensor>> EvaluateNode(const ir::Node& node,
                                                 const std::vector<Tensor>& inputs,
                                                 size_t max_output_bytes) {
  try {
    return EvaluateNodeWithin(node, inputs, max_output_bytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(node.Describe(), ": out of memory"));
  }
}

}  // namespace kiln::opt
