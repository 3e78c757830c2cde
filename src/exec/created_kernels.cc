#include "kiln/exec/created_kernels.h"

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

namespace kiln::exec {

kernels::CreateContext ModelCreateContext(const ir::Graph& graph, const ir::Node& node,
                                          kernels::PackedConstantCache* packed) {
  kernels::CreateContext ctx;
  ctx.node = &node;
  ctx.packed_constants = packed;
  ctx.inputs.resize(node.inputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const ir::ValueId v = node.inputs[i];
    if (v == ir::kNoValue || v < 0 || v >= graph.num_values()) continue;
    const ir::Value& value = graph.value(v);
    kernels::InputInfo& info = ctx.inputs[i];
    info.layout = value.layout;
    if (value.constant.has_value()) {
      info.dtype = value.constant->dtype();
      info.shape = value.constant->shape();
      info.constant = &*value.constant;
      continue;
    }
    info.dtype = value.type.dtype;
    if (value.type.rank_known) {
      for (const ir::Dim& d : value.type.dims) info.shape.push_back(d.value >= 0 ? d.value : -1);
    }
  }
  return ctx;
}

absl::StatusOr<const kernels::OpKernel*> CreatedKernels::GetOrCreate(
    const std::shared_ptr<const ir::Graph>& graph, const ir::Node& node,
    absl::FunctionRef<kernels::CreateContext()> make_context, bool* made) {
  if (made != nullptr) *made = false;
  absl::MutexLock lock(&mutex_);
  auto it = kernels_.find(&node);
  if (it != kernels_.end()) return it->second.kernel.get();
  const kernels::KernelFactory* factory =
      kernels::KernelRegistry::Global().Find(node.domain, node.op);
  if (factory == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "no CPU kernel for operator ", node.domain.empty() ? "" : node.domain + "::", node.op,
        " (node ", node.Describe(), ")"));
  }
  auto kernel = (*factory)(node);
  if (!kernel.ok()) return Annotate(kernel.status(), node.Describe());
  kernels::CreateContext ctx = make_context();
  absl::Status status;
  // Create packs weights: a failed allocation is this compile's error, not the process's end.
  try {
    status = (*kernel)->Create(ctx);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("out of memory packing constant weights");
  }
  if (!status.ok()) return Annotate(status, absl::StrCat("creating ", node.Describe()));
  ++creates_;
  if (made != nullptr) *made = true;
  const kernels::OpKernel* created = kernel->get();
  kernels_.emplace(&node, Entry{std::move(*kernel), graph});
  return created;
}

int64_t CreatedKernels::creates() const {
  absl::MutexLock lock(&mutex_);
  return creates_;
}

size_t CreatedKernels::size() const {
  absl::MutexLock lock(&mutex_);
  return kernels_.size();
}

}  // namespace kiln::exec
