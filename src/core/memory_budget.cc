#include "kiln/core/memory_budget.h"

#include <unistd.h>

namespace kiln {

MemoryBudget::MemoryBudget(size_t limit_bytes)
    : limit_(limit_bytes == 0 ? DefaultLimit() : limit_bytes) {}

size_t MemoryBudget::DefaultLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return size_t{4} << 30;  // unknown machine: 4 GiB
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size) / 2;
}

bool MemoryBudget::TryReserve(size_t bytes) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || used > limit_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

}  // namespace kiln
