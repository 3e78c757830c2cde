// Compiled plans of one graph, keyed by the concrete input shapes, least recently used
// evicted beyond `capacity`. Lookups make no heap allocation; compiles of new shapes are
// serialized (a warmup storm compiles each shape once) while runs of cached plans proceed.
//
// Thread safety: every method may be called from any thread at once (one cache serves all
// the requests of a signature). The plans it hands out are immutable and shared; a plan
// evicted while a run holds it lives until that run drops it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/exec/plan.h"

namespace kiln::exec {

class PlanCache {
 public:
  PlanCache(std::shared_ptr<const ir::Graph> graph, CompileOptions options, size_t capacity);

  // The plan for these input shapes, compiled on a miss (`compiled` tells which).
  absl::StatusOr<std::shared_ptr<const CompiledPlan>> Get(absl::Span<const Shape> input_shapes,
                                                          bool* compiled = nullptr);
  size_t size() const;
  size_t capacity() const { return capacity_; }
  int64_t compiles() const;
  int64_t evictions() const;
  // Shapes of the cached plans, most recently used first.
  std::vector<std::vector<Shape>> CachedShapes() const;
  // The cached plans, most recently used first.
  std::vector<std::shared_ptr<const CompiledPlan>> CachedPlans() const;
  // Weights packed for primitives, shared by every plan of this cache.
  const kernels::PackedConstantCache& packed_constants() const {
    return *options_.packed_constants;
  }
  // The kernels Create ran on, one per node, shared by every plan of this cache.
  const CreatedKernels& created_kernels() const { return *options_.created_kernels; }

 private:
  std::shared_ptr<const CompiledPlan> Find(absl::Span<const Shape> input_shapes);

  std::shared_ptr<const ir::Graph> graph_;
  CompileOptions options_;
  size_t capacity_;
  mutable std::mutex mutex_;
  // most recently used first
  std::list<std::shared_ptr<const CompiledPlan>> plans_ ABSL_GUARDED_BY(mutex_);
  std::mutex compile_mutex_;  // held for a whole compile; guards no member
  int64_t compiles_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace kiln::exec
