#include <cstdio>

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

}  // namespace kiln::kernels
