#include "kiln/exec/plan_cache.h"

#include <malloc.h>

#include <algorithm>

#include "kiln/exec/created_kernels.h"

namespace kiln::exec {

PlanCache::PlanCache(std::shared_ptr<const ir::Graph> graph, CompileOptions options,
                     size_t capacity)
    : graph_(std::move(graph)),
      options_(std::move(options)),
      capacity_(std::max<size_t>(1, capacity)) {
  // One created kernel per node and one set of packed weights for every plan of this
  // signature: a new batch size reshapes, it does not create or pack again.
  if (!options_.packed_constants) {
    options_.packed_constants = std::make_shared<kernels::PackedConstantCache>();
  }
  if (!options_.created_kernels) options_.created_kernels = std::make_shared<CreatedKernels>();
}

std::shared_ptr<const CompiledPlan> PlanCache::Find(absl::Span<const Shape> input_shapes) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    const std::vector<Shape>& shapes = (*it)->input_shapes();
    if (shapes.size() != input_shapes.size() ||
        !std::equal(shapes.begin(), shapes.end(), input_shapes.begin())) {
      continue;
    }
    if (it != plans_.begin()) plans_.splice(plans_.begin(), plans_, it);  // no allocation
    return plans_.front();
  }
  return nullptr;
}

absl::StatusOr<std::shared_ptr<const CompiledPlan>> PlanCache::Get(
    absl::Span<const Shape> input_shapes, bool* compiled) {
  if (compiled != nullptr) *compiled = false;
  if (auto plan = Find(input_shapes)) return plan;
  // One compile at a time: concurrent first requests for a shape wait for its plan.
  std::lock_guard<std::mutex> compile_lock(compile_mutex_);
  if (auto plan = Find(input_shapes)) return plan;
  auto plan = CompiledPlan::Compile(graph_, input_shapes, options_);
  if (!plan.ok()) return plan.status();
  if (compiled != nullptr) *compiled = true;
  std::lock_guard<std::mutex> lock(mutex_);
  ++compiles_;
  plans_.push_front(*plan);
  while (plans_.size() > capacity_) {
    plans_.pop_back();
    ++evictions_;
  }
  // What compiling timed (threads per step, the AVX2 GEMM backend, Winograd) ran on made-up
  // inputs and outputs the size of the plan's values, since freed. glibc keeps freed heap
  // pages, and after large frees it raises its mmap threshold so that they come from the heap:
  // ResNet-18 with Winograd kept 92-173 MB more per extra batch size at compile; with this trim
  // (and the timing's tensors outside the tensor block cache) -7 to +2 MB
  // (docs/performance/runtime.md). A compile takes 0.1-2 s; the trim, milliseconds.
  malloc_trim(0);
  return std::shared_ptr<const CompiledPlan>(*plan);
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plans_.size();
}

int64_t PlanCache::compiles() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return compiles_;
}

int64_t PlanCache::evictions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return evictions_;
}

std::vector<std::vector<Shape>> PlanCache::CachedShapes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::vector<Shape>> out;
  for (const auto& plan : plans_) out.push_back(plan->input_shapes());
  return out;
}

std::vector<std::shared_ptr<const CompiledPlan>> PlanCache::CachedPlans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::vector<std::shared_ptr<const CompiledPlan>>(plans_.begin(), plans_.end());
}

}  // namespace kiln::exec
