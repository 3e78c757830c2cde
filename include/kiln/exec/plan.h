// The plan compiler and executor.
//
// Compile() turns an IR graph plus concrete input shapes into a CompiledPlan: nodes in
// dependency order, each with its own kernel object Reshaped for those shapes (the model's
// kernel for the node, on which Create ran once, shared through CompileOptions::created_kernels:
// created_kernels.h); nodes whose inputs are all known at compile time (constants, and
// Shape/Size of inputs whose shapes are now known) evaluated once and turned into constants;
// nodes nothing needs dropped; one arena per run with offsets from value liveness, outputs
// written in place of inputs where the kernel allows it. Nodes downstream of data-dependent
// shapes (NonZero, control flow) are Reshaped at run time instead.
//
// Run() executes the plan. Runs take a per-run state (arena, bound tensors) from a pool, so a
// run of a static plan makes no heap allocation once the pool is warm when the caller passes
// output tensors of the right shape (or reuses the vector of a previous run) and kernels run
// on the calling thread. Independent nodes run in parallel when inter_op_threads > 1 (nodes
// grouped by depth; a group runs on the inter-op pool). Any number of Runs may proceed at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/core/tensor.h"
#include "kiln/core/thread_pool.h"
#include "kiln/exec/thread_choice.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::exec {

class CreatedKernels;

struct CompileOptions {
  // Threads each kernel may use, on the OpenMP team oneDNN uses when `intra_op_openmp`: one
  // set of intra-op threads, instead of a pool whose workers would compete with oneDNN's.
  int intra_op_threads = 1;
  bool intra_op_openmp = false;
  // Whether each step runs on intra_op_threads or on 1, timed at compile (thread_choice.h).
  ThreadChoiceMode thread_choice = ThreadChoiceMode::kEnvironment;
  // Nodes run at once; > 1 needs `inter_op_pool`.
  int inter_op_threads = 1;
  ThreadPool* inter_op_pool = nullptr;
  bool fold_constants = true;
  // Weights that kernels pack for their primitives, shared by every plan compiled with these
  // options (PlanCache: every batch size of a signature); Compile makes one when null.
  std::shared_ptr<kernels::PackedConstantCache> packed_constants;
  // The model's kernels on which Create ran, one per node, shared by every plan compiled with
  // these options (PlanCache: every batch size of a signature); Compile makes one when null.
  // Create packs into `packed_constants`, which stays the one store of packed bytes.
  std::shared_ptr<CreatedKernels> created_kernels;
  // Bytes one run may hold (arena, outputs, tensors kernels size from input values); 0 means
  // MemoryBudget::DefaultLimit(). A plan whose planned memory alone exceeds it does not
  // compile; a run that would exceed it fails with RESOURCE_EXHAUSTED naming the node.
  size_t run_memory_budget_bytes = 0;
  // Subgraph plans compiled per (subgraph, input shapes) and kept per parent plan.
  size_t subgraph_plan_capacity = 64;
  // Overrides for subgraphs and tests: the values bound to the run's inputs (default: the
  // graph's inputs) and their dtypes (default: the values' declared dtypes).
  std::vector<ir::ValueId> input_values;
  std::vector<DType> input_dtypes;
};

struct PlanStats {
  int steps = 0;                   // kernels run per execution
  int folded_nodes = 0;            // nodes evaluated at compile time
  int pruned_nodes = 0;            // nodes no output needs
  int runtime_prepared_steps = 0;  // steps after data-dependent shapes
  int in_place_outputs = 0;
  int parallel_levels = 0;    // groups of independent steps (when inter_op_threads > 1)
  size_t arena_bytes = 0;     // planned peak of intermediate values (incl. scratch)
  size_t planned_bytes = 0;   // arena, graph outputs and persistent values of one run
  int empty_steps = 0;        // steps whose outputs are all empty: never computed
  size_t unshared_bytes = 0;  // the same without buffer reuse
  int64_t compile_ns = 0;
  int kernels_created = 0;  // Create calls this compile made (0 once the model's kernels exist)
  // Activation reorders kernels run per execution (a value whose layout is not the one its
  // primitive reads or writes); the conv layout pass keeps this near 0 on CNNs.
  int activation_reorders = 0;
  // Convolutions that run their Relu/Clip inside oneDNN on runs whose input is bounded (and in
  // Kiln's epilogue on the others: docs/RUNTIME.md).
  int guarded_activations = 0;
  // Threads per step (thread_choice.h): the mode used, the steps that run on 1 of
  // intra_op_threads (> 1), the steps timed both ways, and the time spent timing.
  ThreadChoiceMode thread_choice = ThreadChoiceMode::kOff;
  int one_thread_steps = 0;
  int thread_timed_steps = 0;
  int64_t thread_choice_ns = 0;
};

class CompiledPlan;
class RunState;
class PlanSubgraphRunner;

// Thread safety: immutable after Compile() except for its pools of run states and subgraph
// plans, which are guarded; Run() may be called from any number of threads at once.
class CompiledPlan : public std::enable_shared_from_this<CompiledPlan> {
 public:
  // `input_shapes` are in the order of graph->inputs (or options.input_values).
  static absl::StatusOr<std::shared_ptr<CompiledPlan>> Compile(
      std::shared_ptr<const ir::Graph> graph, absl::Span<const Shape> input_shapes,
      const CompileOptions& options = {});

  ~CompiledPlan();

  // Runs with inputs in graph input order. `outputs` is resized to the graph's outputs; an
  // entry that already has the output's dtype and shape (and owns its memory alone) is
  // written in place, which avoids the allocation.
  absl::Status Run(absl::Span<const Tensor> inputs, std::vector<Tensor>* outputs) const;

  const PlanStats& stats() const { return stats_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<DType>& input_dtypes() const { return input_dtypes_; }
  const ir::Graph& graph() const { return *graph_; }
  // One line per step: op, node, output shapes, arena offsets ("in place" where aliased).
  std::string DebugString() const;

 private:
  friend class PlanSubgraphRunner;
  struct Step;
  struct ValueSlot;
  CompiledPlan() = default;

  absl::Status Build(absl::Span<const Shape> input_shapes);
  absl::Status PlanArena();
  absl::Status CheckPlannedMemory();
  absl::Status RunWithParent(absl::Span<const Tensor> inputs, std::vector<Tensor>* outputs,
                             const PlanSubgraphRunner* parent) const;
  absl::Status RunStep(const Step& step, RunState& state, absl::Span<const Tensor> inputs,
                       const PlanSubgraphRunner* parent) const;
  absl::Status RunStepPreparedAtRunTime(const Step& step, RunState& state,
                                        kernels::ComputeContext& ctx) const;
  void Publish(const Step& step, RunState& state) const;
  std::unique_ptr<RunState> AcquireState() const;
  void ReleaseState(std::unique_ptr<RunState> state) const;
  // The tensor a value holds in this run (for subgraph captures); null when not available.
  const Tensor* Lookup(ir::ValueId value, const RunState& state,
                       absl::Span<const Tensor> inputs) const;
  absl::StatusOr<std::shared_ptr<CompiledPlan>> SubgraphPlan(
      const ir::Graph& subgraph, const std::vector<ir::ValueId>& input_values,
      const std::vector<Tensor>& inputs) const;

  std::shared_ptr<const ir::Graph> graph_;
  CompileOptions options_;
  std::vector<ir::ValueId> input_values_;
  std::vector<Shape> input_shapes_;
  std::vector<DType> input_dtypes_;
  std::vector<ValueSlot> values_;  // indexed by ir::ValueId
  std::vector<Step> steps_;
  struct InPlaceRequest {
    int step, output, input;
  };
  std::vector<InPlaceRequest> in_place_requests_;
  std::vector<ir::ValueId> per_run_values_;  // inputs, outputs, dynamic: rebound every run
  std::vector<int> level_begin_;             // step index where each parallel level begins (+ end)
  int total_step_inputs_ = 0;
  int total_step_outputs_ = 0;
  size_t arena_bytes_ = 0;
  size_t planned_bytes_ = 0;  // counted against each run's memory budget up front
  size_t memory_limit_ = 0;   // options_.run_memory_budget_bytes resolved
  PlanStats stats_;

  // Everything above is fixed at compile; Runs on many threads share it read-only. The pools
  // below are what concurrent Runs change.
  mutable std::mutex state_mutex_;
  mutable std::vector<std::unique_ptr<RunState>> free_states_ ABSL_GUARDED_BY(state_mutex_);

  struct SubplanEntry;
  mutable std::mutex subplan_mutex_;
  mutable std::vector<SubplanEntry> subplans_ ABSL_GUARDED_BY(subplan_mutex_);
};

}  // namespace kiln::exec
