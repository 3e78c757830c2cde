#include <cstdio>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {
std::string RegistryKey(const std::string& domain, const std::string& op) {
  return domain.empty() ? op : domain + "::" + op;
}
}  // namespace

KernelRegistry& KernelRegistry::Global() {
  // Never destroyed: registrations run from static initializers of other files, and lookups
  // may happen from threads that outlive main's statics.
  static KernelRegistry* registry = new KernelRegistry();
  return *registry;
}

void KernelRegistry::Register(const std::string& domain, const std::string& op,
                              KernelFactory factory) {
  const std::string key = RegistryKey(domain, op);
  if (factories_.count(key) > 0) {
    // Two kernels for one op is a build mistake; say so rather than silently picking one.
    std::fprintf(stderr, "kiln: kernel for %s registered twice; keeping the first\n",
                 key.c_str());
    return;
  }
  factories_.emplace(key, std::move(factory));
}

const KernelFactory* KernelRegistry::Find(const std::string& domain, const std::string& op) const {
  auto it = factories_.find(RegistryKey(domain, op));
  return it == factories_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::RegisteredOps() const {
  std::vector<std::string> ops;
  ops.reserve(factories_.size());
  for (const auto& [key, factory] : factories_) ops.push_back(key);
  return ops;  // std::map keeps them sorted
}

absl::Status OverBudgetError(const ir::Node* node, const std::string& what, DType dtype,
                             const Shape& shape, size_t bytes, const MemoryBudget& budget) {
  return absl::ResourceExhaustedError(absl::StrCat(
      node != nullptr ? node->Describe() : std::string("a kernel"), ": ", what, " ",
      DTypeName(dtype), shape.ToString(), " needs ", bytes, " bytes; this run already holds ",
      budget.used(), " of its memory budget of ", budget.limit(),
      " bytes (ModelOptions::run_memory_budget_bytes, kiln serve --run_memory_budget_bytes)"));
}

absl::StatusOr<Tensor*> ComputeContext::Allocate(int index, DType dtype, Shape shape) {
  auto bytes = CheckedByteSize(dtype, shape);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(node != nullptr ? node->Describe() : std::string("a kernel"), ": output ",
                     index, ": ", bytes.status().message()));
  }
  if (memory != nullptr && !memory->TryReserve(*bytes)) {
    return OverBudgetError(node, absl::StrCat("output ", index), dtype, shape, *bytes, *memory);
  }
  auto tensor = Tensor::Allocate(dtype, std::move(shape));
  if (!tensor.ok()) {
    return Annotate(tensor.status(),
                    absl::StrCat(node != nullptr ? node->Describe() : std::string("a kernel"),
                                 ": output ", index));
  }
  outputs[index] = *std::move(tensor);
  return &outputs[index];
}

}  // namespace kiln::kernels
