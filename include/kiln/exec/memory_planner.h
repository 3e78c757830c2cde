// Arena planning: given buffers with sizes and live intervals (in execution time steps), give
// each an offset in one arena so that buffers live at the same time never overlap, keeping
// the arena small. Greedy by size (as TFLite's arena planner): the largest buffers are placed
// first, each at the lowest offset that fits between the buffers whose lifetimes it overlaps.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln::exec {

struct BufferRequest {
  size_t bytes = 0;
  int first_use = 0;  // time step that writes it
  int last_use = 0;   // last time step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request, aligned
  size_t arena_bytes = 0;       // planned peak: the arena size
  size_t unshared_bytes = 0;    // what one buffer per request would take
};

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, size_t alignment = 64);

}  // namespace kiln::exec
