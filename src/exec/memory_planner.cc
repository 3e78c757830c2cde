#include "kiln/exec/memory_planner.h"

#include <algorithm>
#include <numeric>

namespace kiln::exec {
namespace {
size_t AlignUp(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }
}  // namespace

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, size_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by earlier first use so that the plan is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes) return requests[a].bytes > requests[b].bytes;
    return requests[a].first_use < requests[b].first_use;
  });
  struct Placed {
    size_t offset, end;
    int first, last;
  };
  std::vector<Placed> placed;
  placed.reserve(requests.size());
  std::vector<std::pair<size_t, size_t>> busy;
  for (size_t index : order) {
    const BufferRequest& r = requests[index];
    const size_t bytes = AlignUp(std::max<size_t>(r.bytes, 1), alignment);
    plan.unshared_bytes += bytes;
    if (r.bytes == 0) {
      plan.offsets[index] = 0;
      continue;
    }
    busy.clear();
    for (const Placed& p : placed) {
      if (p.last < r.first_use || r.last_use < p.first) continue;  // lifetimes disjoint
      busy.emplace_back(p.offset, p.end);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + bytes <= begin) break;  // fits in the gap before this buffer
      offset = std::max(offset, end);
    }
    plan.offsets[index] = offset;
    placed.push_back({offset, offset + bytes, r.first_use, r.last_use});
    plan.arena_bytes = std::max(plan.arena_bytes, offset + bytes);
  }
  return plan;
}

}  // namespace kiln::exec
