#include "kiln/core/determinism.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"

namespace kiln {
namespace {

std::atomic<bool> enabled{false};

bool EnvironmentAsksForDeterminism() {
  const char* value = std::getenv("TF_DETERMINISTIC_OPS");
  if (value == nullptr) return false;
  const std::string v = absl::AsciiStrToLower(value);
  return v == "1" || v == "true";
}

}  // namespace

void EnableOpDeterminism() { enabled.store(true, std::memory_order_relaxed); }

// Read at each call (plan compiles, not runs), like KILN_THREAD_CHOICE.
bool OpDeterminismEnabled() {
  return enabled.load(std::memory_order_relaxed) || EnvironmentAsksForDeterminism();
}

}  // namespace kiln
