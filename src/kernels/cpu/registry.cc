#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

// Each kernel file's registration function (KILN_KERNEL_FILE in kiln/kernels/kernel.h).
#define KILN_KERNEL_FILE_ENTRY(name) \
  extern "C" void KilnRegisterKernels_##name(::kiln::kernels::KernelRegistry* registry);
#include "kernels/cpu/kernel_files.inc"
#undef KILN_KERNEL_FILE_ENTRY

namespace kiln::kernels {
namespace {
std::string RegistryKey(const std::string& domain, const std::string& op) {
  return domain.empty() ? op : domain + "::" + op;
}

struct KernelFile {
  const char* name;
  void (*register_kernels)(KernelRegistry*);
};

constexpr KernelFile kKernelFiles[] = {
#define KILN_KERNEL_FILE_ENTRY(name) {#name, &KilnRegisterKernels_##name},
#include "kernels/cpu/kernel_files.inc"
#undef KILN_KERNEL_FILE_ENTRY
};
}  // namespace

KernelRegistry& KernelRegistry::Global() {
  // Built once, on first use, from the table above. Never destroyed: lookups may happen from
  // threads that outlive main's statics.
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    for (const KernelFile& file : kKernelFiles) {
      r->set_source(file.name);
      file.register_kernels(r);
    }
    r->set_source("");
    return r;
  }();
  return *registry;
}

absl::Status KernelRegistry::Register(const std::string& domain, const std::string& op,
                                      KernelFactory factory) {
  const std::string key = RegistryKey(domain, op);
  auto [it, inserted] = factories_.try_emplace(key, Entry{std::move(factory), source_});
  if (inserted) return absl::OkStatus();
  absl::Status duplicate =
      absl::AlreadyExistsError(absl::StrCat("kernel for ", key, " registered twice: by '",
                                            it->second.source, "' and by '", source_, "'"));
  if (status_.ok()) status_ = duplicate;
  return duplicate;
}

const KernelFactory* KernelRegistry::Find(const std::string& domain, const std::string& op) const {
  auto it = factories_.find(RegistryKey(domain, op));
  return it == factories_.end() ? nullptr : &it->second.factory;
}

std::vector<std::string> KernelRegistry::RegisteredOps() const {
  std::vector<std::string> ops;
  ops.reserve(factories_.size());
  for (const auto& [key, entry] : factories_) ops.push_back(key);
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
