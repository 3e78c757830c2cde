// MemoryBudget: how many bytes one model run may hold at once (its planned arena, its outputs
// and every tensor a kernel sizes from input values). A request that asks for more, such as a
// ConstantOfShape of [100000, 100000, 100000] or a batch far beyond the machine, gets
// RESOURCE_EXHAUSTED for itself instead of taking the process down with std::bad_alloc or the
// kernel's OOM killer. Reservations are only counted, never returned within a run: a run's
// peak is at most what it allocated, so the sum is a safe (if loose) bound.
#pragma once

#include <atomic>
#include <cstddef>

namespace kiln {

class MemoryBudget {
 public:
  // `limit_bytes` 0 means the default, DefaultLimit().
  explicit MemoryBudget(size_t limit_bytes = 0);

  // Half of the machine's physical memory: one run may use a lot, but never so much that the
  // next request, the server and the OS have nothing left.
  static size_t DefaultLimit();

  // Counts `bytes` against the budget; false (and nothing counted) when they do not fit.
  bool TryReserve(size_t bytes);
  // Starts a new run that already holds `bytes` (its planned arena and outputs).
  void Reset(size_t bytes) { used_.store(bytes, std::memory_order_relaxed); }

  size_t limit() const { return limit_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace kiln
