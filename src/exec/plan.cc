// CompiledPlan: the plan compiler (Build: each node's kernel Reshaped for the input shapes,
// reading what the model's kernel for the node made in Create (created_kernels.h), constants
// folded for the input shapes; PlanArena: value liveness into arena offsets and in-place
// outputs) and the executor (Run: per-run states from a pool, steps by parallel level,
// subgraph plans for If/Loop/Scan bodies).
//
// Why one file of ~900 lines: compile and run share the private layout of a plan (ValueSlot,
// Step, RunState, the positions of each step's inputs and outputs in the run state's flat
// arrays), which exists for one reason, that Run touches no map and allocates nothing. Split
// across files, that layout would become a header that every part of the plan edits. The
// algorithms with a contract of their own already live apart: the memory planner
// (memory_planner.h), the node evaluator (node_evaluator.h), the plan cache (plan_cache.h).
#include "kiln/exec/plan.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/core/clock.h"
#include "kiln/core/memory_budget.h"
#include "kiln/core/status.h"
#include "kiln/exec/created_kernels.h"
#include "kiln/exec/memory_planner.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/thread_choice.h"
#include "kiln/ir/op_traits.h"
#include "kiln/kernels/openmp_threads.h"

namespace kiln::exec {

using ir::kNoValue;
using ir::ValueId;

namespace {

// ComputeContext's bound of a value about which nothing is known.
constexpr float kNoBound = std::numeric_limits<float>::infinity();

enum class SlotKind : uint8_t {
  kUnused,
  kGraphInput,
  kConstant,
  kArena,        // fixed shape, memory in the run's arena at a planned offset
  kPersistent,   // fixed shape strings: a tensor per run state, reused across runs
  kGraphOutput,  // fixed shape, memory handed to the caller (allocated or reused per run)
  kDynamic,      // shape known only when the producing kernel runs
};

// Operators that read only their input's shape, so they fold once shapes are known.
bool ReadsOnlyShape(const ir::Node& node) {
  return node.domain.empty() && (node.op == "Shape" || node.op == "Size");
}

std::string DescribeInputs(const std::vector<kernels::InputInfo>& infos) {
  std::vector<std::string> parts;
  for (const auto& info : infos) {
    parts.push_back(info.present() ? absl::StrCat(DTypeName(info.dtype), info.shape.ToString())
                                   : std::string("<none>"));
  }
  return absl::StrJoin(parts, ", ");
}

size_t AlignUp(size_t n) {
  return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

}  // namespace

struct CompiledPlan::ValueSlot {
  SlotKind kind = SlotKind::kUnused;
  DType dtype = DType::kInvalid;
  Shape shape;
  Tensor constant;
  int input_index = -1;
  int step = -1;
  int step_output = -1;
  int out_position = -1;
  size_t arena_offset = 0;
  ValueId alias_root = kNoValue;  // the value whose memory this one reuses (in place)
  std::vector<int> consumer_positions;
  int readers = 0;  // steps reading it (inputs or captures)
  int first_use = -1;
  int last_use = -1;
  size_t bytes() const { return static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype); }
};

struct CompiledPlan::Step {
  const ir::Node* node = nullptr;
  std::unique_ptr<kernels::OpKernel> kernel;  // null when prepared at run time
  // The model's kernel for this node, on which Create ran (owned by options_.created_kernels).
  const kernels::OpKernel* created = nullptr;
  bool prepare_at_run_time = false;
  bool has_subgraphs = false;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;  // hidden slots stand in for omitted outputs
  std::vector<ValueId> captured;
  std::vector<int> dynamic_outputs;
  bool outputs_empty = false;  // every output has zero elements: Compute is skipped
  int input_begin = 0;
  int output_begin = 0;
  size_t scratch_bytes = 0;
  size_t scratch_offset = 0;
  int level = 0;
  int time = 0;
  StepThreads threads;  // its intra-op threads (thread_choice.h); not for run-time reshapes
};

struct CompiledPlan::SubplanEntry {
  const ir::Graph* graph = nullptr;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  std::shared_ptr<CompiledPlan> plan;
};

class RunState {
 public:
  explicit RunState(size_t memory_limit) : memory(memory_limit) {}
  MemoryBudget memory;
  std::shared_ptr<Buffer> arena;
  std::vector<Tensor> step_inputs;
  std::vector<Tensor> step_outputs;
  // ComputeContext::input_bounds and output_bounds of every step, positioned as the tensors.
  std::vector<float> step_input_bounds;
  std::vector<float> step_output_bounds;
  // One per step (null where the kernel has none): the kernel's per-run objects (oneDNN
  // memory objects re-pointed each run), made with the run state so Compute allocates nothing.
  std::vector<std::unique_ptr<kernels::KernelRunState>> kernel_states;
  std::mutex error_mutex;
  // The first failure of the steps of a parallel level (they run on the inter-op pool).
  absl::Status error ABSL_GUARDED_BY(error_mutex);
};

// Runs If/Loop/Scan bodies for kernels: binds the body's captures to tensors of the
// enclosing runs (innermost first) and runs a plan compiled for the body's input shapes.
class PlanSubgraphRunner : public kernels::SubgraphRunner {
 public:
  PlanSubgraphRunner(const CompiledPlan* plan, const RunState* state,
                     absl::Span<const Tensor> inputs, const PlanSubgraphRunner* parent)
      : plan_(plan), state_(state), inputs_(inputs), parent_(parent) {}

  const Tensor* Resolve(const std::string& name) const {
    if (auto id = plan_->graph_->FindValue(name)) {
      const Tensor* t = plan_->Lookup(*id, *state_, inputs_);
      if (t != nullptr && t->valid()) return t;
    }
    return parent_ != nullptr ? parent_->Resolve(name) : nullptr;
  }

  absl::StatusOr<std::vector<Tensor>> Run(const ir::Graph& graph,
                                          const std::vector<Tensor>& inputs) override {
    if (inputs.size() != graph.inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("subgraph '", graph.name, "' takes ",
                                                     graph.inputs.size(), " inputs, got ",
                                                     inputs.size()));
    }
    std::vector<ValueId> input_values = graph.inputs;
    std::vector<Tensor> bound = inputs;
    for (const auto& [local, outer_name] : graph.captures) {
      const Tensor* t = Resolve(outer_name);
      if (t == nullptr) {
        return absl::NotFoundError(absl::StrCat("subgraph '", graph.name, "' reads '", outer_name,
                                                "', which no enclosing graph computes"));
      }
      input_values.push_back(local);
      bound.push_back(*t);
    }
    KILN_ASSIGN_OR_RETURN(auto plan, plan_->SubgraphPlan(graph, input_values, bound));
    std::vector<Tensor> outputs;
    KILN_RETURN_IF_ERROR(plan->RunWithParent(bound, &outputs, this));
    return outputs;
  }

 private:
  const CompiledPlan* plan_;
  const RunState* state_;
  absl::Span<const Tensor> inputs_;
  const PlanSubgraphRunner* parent_;
};

CompiledPlan::~CompiledPlan() = default;

absl::StatusOr<std::shared_ptr<CompiledPlan>> CompiledPlan::Compile(
    std::shared_ptr<const ir::Graph> graph, absl::Span<const Shape> input_shapes,
    const CompileOptions& options) {
  // Two kernels for one op (a build mistake): refuse to guess which one should run.
  KILN_RETURN_IF_ERROR(kernels::KernelRegistry::Global().status());
  const int64_t start = NowNanos();
  std::shared_ptr<CompiledPlan> plan(new CompiledPlan());
  plan->graph_ = std::move(graph);
  plan->options_ = options;
  if (!plan->options_.packed_constants) {
    plan->options_.packed_constants = std::make_shared<kernels::PackedConstantCache>();
  }
  if (!plan->options_.created_kernels) {
    plan->options_.created_kernels = std::make_shared<CreatedKernels>();
  }
  plan->memory_limit_ = options.run_memory_budget_bytes != 0 ? options.run_memory_budget_bytes
                                                             : MemoryBudget::DefaultLimit();
  if (plan->options_.inter_op_pool == nullptr) plan->options_.inter_op_threads = 1;
  if (!plan->options_.intra_op_openmp) {
    plan->options_.intra_op_threads = 1;
  }
  KILN_ASSIGN_OR_RETURN(plan->options_.thread_choice,
                        ResolveThreadChoiceMode(options.thread_choice));
  KILN_RETURN_IF_ERROR(plan->Build(input_shapes));
  KILN_RETURN_IF_ERROR(plan->PlanArena());
  KILN_RETURN_IF_ERROR(plan->CheckPlannedMemory());
  plan->free_states_.reserve(64);
  plan->stats_.compile_ns = NowNanos() - start;
  return plan;
}

absl::Status CompiledPlan::Build(absl::Span<const Shape> input_shapes) {
  const ir::Graph& graph = *graph_;
  input_values_ = options_.input_values.empty() ? graph.inputs : options_.input_values;
  if (input_shapes.size() != input_values_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("graph '", graph.name, "' has ",
                                                   input_values_.size(), " inputs, got ",
                                                   input_shapes.size(), " shapes"));
  }
  input_shapes_.assign(input_shapes.begin(), input_shapes.end());
  size_t hidden = 0;
  for (const ir::Node& node : graph.nodes()) hidden += node.outputs.size();
  // Kernels may keep pointers to constant inputs they saw in Reshape: never reallocate.
  values_.reserve(graph.num_values() + hidden);
  values_.resize(graph.num_values());
  for (ValueId v = 0; v < graph.num_values(); ++v) {
    if (graph.value(v).constant.has_value()) {
      values_[v].kind = SlotKind::kConstant;
      values_[v].constant = *graph.value(v).constant;
      values_[v].dtype = values_[v].constant.dtype();
      values_[v].shape = values_[v].constant.shape();
    }
  }
  for (size_t i = 0; i < input_values_.size(); ++i) {
    const ValueId v = input_values_[i];
    if (v < 0 || v >= graph.num_values()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " has a bad value id"));
    }
    DType dtype =
        i < options_.input_dtypes.size() ? options_.input_dtypes[i] : graph.value(v).type.dtype;
    if (dtype == DType::kInvalid) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", graph.value(v).name, "' has no dtype"));
    }
    auto bytes = CheckedByteSize(dtype, input_shapes[i]);
    if (!bytes.ok()) {
      return Annotate(bytes.status(), absl::StrCat("graph input '", graph.value(v).name, "'"));
    }
    // Refused before any kernel sees the shape: oneDNN's primitive creation faults on sizes
    // like these rather than failing.
    if (*bytes > memory_limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "graph input '", graph.value(v).name, "' ", DTypeName(dtype), input_shapes[i].ToString(),
          " is ", *bytes, " bytes, over the run memory budget of ", memory_limit_,
          " bytes (ModelOptions::run_memory_budget_bytes, kiln serve --run_memory_budget_bytes)"));
    }
    ValueSlot& slot = values_[v];
    slot = ValueSlot();
    slot.kind = SlotKind::kGraphInput;
    slot.input_index = static_cast<int>(i);
    slot.dtype = dtype;
    slot.shape = input_shapes[i];
  }
  input_dtypes_.clear();
  for (ValueId v : input_values_) input_dtypes_.push_back(values_[v].dtype);

  // Only what the outputs need is compiled.
  std::vector<bool> needed_node(graph.num_nodes(), false);
  {
    std::vector<ValueId> work(graph.outputs.begin(), graph.outputs.end());
    std::vector<bool> seen(graph.num_values(), false);
    while (!work.empty()) {
      const ValueId v = work.back();
      work.pop_back();
      if (v < 0 || v >= graph.num_values() || seen[v]) continue;
      seen[v] = true;
      if (values_[v].kind == SlotKind::kGraphInput) continue;
      const ir::NodeId p = graph.value(v).producer;
      if (p == ir::kNoNode || graph.node(p).removed || needed_node[p]) continue;
      needed_node[p] = true;
      for (ValueId in : graph.node(p).inputs) work.push_back(in);
      for (ValueId in : ir::CapturedValues(graph, graph.node(p))) work.push_back(in);
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<ir::NodeId> order, graph.TopologicalOrder());
  ThreadChooser chooser(options_.thread_choice, options_.intra_op_threads);

  for (ir::NodeId id : order) {
    const ir::Node& node = graph.node(id);
    if (!needed_node[id]) {
      ++stats_.pruned_nodes;
      continue;
    }
    Step step;
    step.node = &node;
    step.inputs = node.inputs;
    step.captured = ir::CapturedValues(graph, node);
    step.has_subgraphs = ir::HasSubgraph(node);
    bool shapes_known = true;
    bool all_constant = true;
    std::vector<kernels::InputInfo> infos(node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v == kNoValue) continue;
      const ValueSlot& slot = values_[v];
      if (slot.kind == SlotKind::kUnused) {
        return absl::InvalidArgumentError(absl::StrCat(
            node.Describe(), ": input ", i, " '", graph.value(v).name,
            "' is not a graph input, constant or output of a node that runs before it"));
      }
      if (slot.kind == SlotKind::kDynamic) {
        shapes_known = false;
      } else {
        infos[i].dtype = slot.dtype;
        infos[i].shape = slot.shape;
      }
      infos[i].layout = graph.value(v).layout;
      if (slot.kind == SlotKind::kConstant) {
        infos[i].constant = &slot.constant;
      } else {
        all_constant = false;
      }
    }
    for (ValueId v : step.captured) {
      if (values_[v].kind != SlotKind::kConstant) all_constant = false;
    }
    const kernels::KernelFactory* factory =
        kernels::KernelRegistry::Global().Find(node.domain, node.op);
    if (factory == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "no CPU kernel for operator ", node.domain.empty() ? "" : node.domain + "::", node.op,
          " (node ", node.Describe(), ")"));
    }
    const bool foldable = options_.fold_constants && shapes_known && !step.has_subgraphs &&
                          !ir::IsNondeterministic(node) &&
                          (all_constant || (ReadsOnlyShape(node) && node.inputs.size() == 1));
    // Create once per node for the model: the first plan that runs the node creates it, every
    // later plan (another batch size) reuses it and packs nothing. A node evaluated here, once,
    // is created on its own kernel object below.
    if (!foldable) {
      bool made = false;
      KILN_ASSIGN_OR_RETURN(
          step.created,
          options_.created_kernels->GetOrCreate(
              graph_, node,
              [&] { return ModelCreateContext(graph, node, options_.packed_constants.get()); },
              &made));
      if (made) ++stats_.kernels_created;
    }
    kernels::ReshapeContext prepare;
    if (shapes_known) {
      auto kernel = (*factory)(node);
      if (!kernel.ok()) return Annotate(kernel.status(), node.Describe());
      step.kernel = std::move(*kernel);
      if (foldable) {
        kernels::CreateContext create;
        create.node = &node;
        create.inputs = infos;
        absl::Status status = step.kernel->Create(create);
        if (!status.ok()) return Annotate(status, absl::StrCat("creating ", node.Describe()));
        step.created = step.kernel.get();
      }
      prepare.node = &node;
      prepare.created = step.created;
      prepare.inputs = infos;
      prepare.intra_op_threads = options_.intra_op_threads;
      prepare.packed_constants = options_.packed_constants.get();
      prepare.SetNumOutputs(static_cast<int>(node.outputs.size()));
      for (ValueId v : node.outputs) {
        prepare.output_layouts.push_back(v == kNoValue ? ir::MemoryLayout::kPlain
                                                       : graph.value(v).layout);
      }
      absl::Status status = ReshapeOnThreads(*step.kernel, prepare);
      if (!status.ok()) {
        return Annotate(
            status, absl::StrCat(node.Describe(), " with inputs (", DescribeInputs(infos), ")"));
      }
      if (prepare.output_dtypes.size() != node.outputs.size() ||
          prepare.output_shapes.size() != node.outputs.size() ||
          prepare.output_dynamic.size() != node.outputs.size() ||
          prepare.output_in_place_of.size() != node.outputs.size()) {
        return absl::InternalError(absl::StrCat(node.Describe(), ": kernel prepared ",
                                                prepare.output_dtypes.size(),
                                                " outputs, the node has ", node.outputs.size()));
      }
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (prepare.output_dynamic[i]) continue;
        auto bytes = CheckedByteSize(prepare.output_dtypes[i], prepare.output_shapes[i]);
        if (!bytes.ok()) {
          return Annotate(bytes.status(), absl::StrCat(node.Describe(), " output ", i));
        }
        if (*bytes > memory_limit_) {
          MemoryBudget budget(memory_limit_);
          return kernels::OverBudgetError(&node, absl::StrCat("output ", i),
                                          prepare.output_dtypes[i], prepare.output_shapes[i],
                                          *bytes, budget);
        }
      }
      step.outputs_empty = AllOutputsEmpty(prepare);
      stats_.activation_reorders += prepare.activation_reorders;
      stats_.guarded_activations += prepare.guarded_activations;
    } else {
      step.prepare_at_run_time = true;
    }

    if (foldable) {
      // Evaluate now; Shape/Size see a tensor that has the shape but no memory.
      std::vector<Tensor> inputs(node.inputs.size());
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const ValueId v = node.inputs[i];
        if (v == kNoValue) continue;
        const ValueSlot& slot = values_[v];
        inputs[i] = slot.kind == SlotKind::kConstant ? slot.constant
                                                     : Tensor(slot.dtype, slot.shape, nullptr);
      }
      std::vector<Tensor> outputs(node.outputs.size());
      MemoryBudget memory(memory_limit_);
      kernels::ComputeContext ctx;
      ctx.inputs = absl::MakeConstSpan(inputs);
      ctx.outputs = absl::MakeSpan(outputs);
      ctx.node = &node;
      ctx.memory = &memory;
      absl::Status status = RunPrepared(*step.kernel, prepare, ctx);
      if (!status.ok()) {
        return Annotate(status, absl::StrCat("evaluating ", node.Describe(), " at compile time"));
      }
      for (size_t i = 0; i < outputs.size(); ++i) {
        const ValueId v = node.outputs[i];
        if (v == kNoValue) continue;
        if (!outputs[i].valid()) {
          return absl::InternalError(absl::StrCat(node.Describe(), " did not produce output ", i));
        }
        ValueSlot& slot = values_[v];
        slot.kind = SlotKind::kConstant;
        slot.constant = std::move(outputs[i]);
        slot.dtype = slot.constant.dtype();
        slot.shape = slot.constant.shape();
      }
      ++stats_.folded_nodes;
      continue;
    }

    if (shapes_known) {
      // May swap in a kernel reshaped for 1 thread (thread_choice.h).
      const int reorders = prepare.activation_reorders;
      const int guarded = prepare.guarded_activations;
      auto threads = chooser.Choose(node, *factory, prepare, step.kernel);
      if (!threads.ok()) return Annotate(threads.status(), node.Describe());
      step.threads = *threads;
      stats_.activation_reorders += prepare.activation_reorders - reorders;
      stats_.guarded_activations += prepare.guarded_activations - guarded;
    }

    const int step_index = static_cast<int>(steps_.size());
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      ValueId v = node.outputs[i];
      if (v == kNoValue) {
        v = static_cast<ValueId>(values_.size());
        values_.emplace_back();
      }
      ValueSlot& slot = values_[v];
      slot = ValueSlot();
      slot.step = step_index;
      slot.step_output = static_cast<int>(i);
      if (step.prepare_at_run_time || prepare.output_dynamic[i]) {
        slot.kind = SlotKind::kDynamic;
        step.dynamic_outputs.push_back(static_cast<int>(i));
      } else {
        slot.dtype = prepare.output_dtypes[i];
        slot.shape = prepare.output_shapes[i];
        slot.kind = slot.dtype == DType::kString ? SlotKind::kPersistent : SlotKind::kArena;
      }
      step.outputs.push_back(v);
    }
    step.scratch_bytes = shapes_known ? prepare.scratch_bytes : 0;
    if (step.prepare_at_run_time) ++stats_.runtime_prepared_steps;
    // In-place candidates are settled by the planner; remember what the kernel allowed.
    for (size_t i = 0; i < node.outputs.size() && shapes_known; ++i) {
      const int src = prepare.output_in_place_of[i];
      if (src >= 0 && src < static_cast<int>(step.inputs.size())) {
        in_place_requests_.push_back({step_index, static_cast<int>(i), src});
      }
    }
    steps_.push_back(std::move(step));
  }

  for (size_t j = 0; j < graph.outputs.size(); ++j) {
    const ValueId v = graph.outputs[j];
    ValueSlot& slot = values_[v];
    if (slot.kind == SlotKind::kUnused) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", graph.value(v).name, "' is never computed"));
    }
    if (slot.kind == SlotKind::kArena || slot.kind == SlotKind::kPersistent) {
      slot.kind = SlotKind::kGraphOutput;
    }
  }
  stats_.steps = static_cast<int>(steps_.size());
  stats_.thread_choice = chooser.mode();
  stats_.one_thread_steps = chooser.one_thread_steps();
  stats_.thread_timed_steps = chooser.timed_steps();
  stats_.thread_choice_ns = chooser.spent_ns();
  for (const Step& step : steps_) stats_.empty_steps += step.outputs_empty ? 1 : 0;
  return absl::OkStatus();
}

absl::Status CompiledPlan::PlanArena() {
  // Levels: a step runs after every step it reads from. With inter-op parallelism, the
  // steps of one level run at once, so liveness is measured in levels; otherwise in steps.
  const bool parallel = options_.inter_op_threads > 1;
  for (Step& step : steps_) {
    int level = 0;
    auto visit = [&](ValueId v) {
      if (v == kNoValue) return;
      const ValueSlot& slot = values_[v];
      if (slot.step >= 0) level = std::max(level, steps_[slot.step].level + 1);
    };
    for (ValueId v : step.inputs) visit(v);
    for (ValueId v : step.captured) visit(v);
    step.level = level;
  }
  if (parallel) {
    // Reorder by level (stable: keeps the topological order within a level).
    std::vector<int> order(steps_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return steps_[a].level < steps_[b].level; });
    std::vector<Step> sorted;
    sorted.reserve(steps_.size());
    std::vector<int> new_index(steps_.size());
    for (size_t i = 0; i < order.size(); ++i) {
      new_index[order[i]] = static_cast<int>(i);
      sorted.push_back(std::move(steps_[order[i]]));
    }
    steps_ = std::move(sorted);
    for (ValueSlot& slot : values_) {
      if (slot.step >= 0) slot.step = new_index[slot.step];
    }
    for (auto& r : in_place_requests_) r.step = new_index[r.step];
    level_begin_.clear();
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (i == 0 || steps_[i].level != steps_[i - 1].level) {
        level_begin_.push_back(static_cast<int>(i));
      }
    }
    level_begin_.push_back(static_cast<int>(steps_.size()));
    stats_.parallel_levels = static_cast<int>(level_begin_.size()) - 1;
  }
  int in_total = 0;
  int out_total = 0;
  for (size_t s = 0; s < steps_.size(); ++s) {
    Step& step = steps_[s];
    step.time = parallel ? step.level : static_cast<int>(s);
    step.input_begin = in_total;
    step.output_begin = out_total;
    in_total += static_cast<int>(step.inputs.size());
    out_total += static_cast<int>(step.outputs.size());
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      ValueSlot& slot = values_[step.outputs[k]];
      slot.out_position = step.output_begin + static_cast<int>(k);
      slot.first_use = step.time;
      slot.last_use = step.time;
    }
    std::set<ValueId> reads;
    for (size_t j = 0; j < step.inputs.size(); ++j) {
      const ValueId v = step.inputs[j];
      if (v == kNoValue) continue;
      values_[v].consumer_positions.push_back(step.input_begin + static_cast<int>(j));
      reads.insert(v);
    }
    for (ValueId v : step.captured) reads.insert(v);
    for (ValueId v : reads) {
      values_[v].last_use = std::max(values_[v].last_use, step.time);
      ++values_[v].readers;
    }
  }
  total_step_inputs_ = in_total;
  total_step_outputs_ = out_total;

  // In place: the output takes its input's memory when that input is an arena value of the
  // same size that nothing reads after this step (and, in parallel plans, nothing else reads).
  std::vector<bool> taken(values_.size(), false);
  auto root = [&](ValueId v) {
    while (values_[v].alias_root != kNoValue) v = values_[v].alias_root;
    return v;
  };
  for (const InPlaceRequest& r : in_place_requests_) {
    const Step& step = steps_[r.step];
    const ValueId out = step.outputs[r.output];
    const ValueId in = step.inputs[r.input];
    if (in == kNoValue || taken[in]) continue;
    ValueSlot& out_slot = values_[out];
    const ValueSlot& in_slot = values_[in];
    if (out_slot.kind != SlotKind::kArena || in_slot.kind != SlotKind::kArena) continue;
    if (in_slot.bytes() != out_slot.bytes() || in_slot.last_use != step.time) continue;
    if (parallel && in_slot.readers != 1) continue;
    taken[in] = true;
    const ValueId r_in = root(in);
    out_slot.alias_root = r_in;
    values_[r_in].last_use = std::max(values_[r_in].last_use, out_slot.last_use);
    ++stats_.in_place_outputs;
  }
  // Extend roots by the lifetimes of everything aliased to them.
  for (size_t v = 0; v < values_.size(); ++v) {
    if (values_[v].kind == SlotKind::kArena && values_[v].alias_root != kNoValue) {
      const ValueId r = root(static_cast<ValueId>(v));
      values_[r].last_use = std::max(values_[r].last_use, values_[v].last_use);
    }
  }

  std::vector<BufferRequest> requests;
  std::vector<ValueId> request_value;
  std::vector<int> request_step;
  for (size_t v = 0; v < values_.size(); ++v) {
    const ValueSlot& slot = values_[v];
    if (slot.kind != SlotKind::kArena || slot.alias_root != kNoValue) continue;
    requests.push_back({slot.bytes(), slot.first_use, slot.last_use});
    request_value.push_back(static_cast<ValueId>(v));
    request_step.push_back(-1);
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (steps_[s].scratch_bytes == 0) continue;
    requests.push_back({steps_[s].scratch_bytes, steps_[s].time, steps_[s].time});
    request_value.push_back(kNoValue);
    request_step.push_back(static_cast<int>(s));
  }
  const MemoryPlan memory = PlanMemory(requests, kTensorAlignment);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (request_value[i] != kNoValue) {
      values_[request_value[i]].arena_offset = memory.offsets[i];
    } else {
      steps_[request_step[i]].scratch_offset = memory.offsets[i];
    }
  }
  for (size_t v = 0; v < values_.size(); ++v) {
    if (values_[v].kind == SlotKind::kArena && values_[v].alias_root != kNoValue) {
      values_[v].arena_offset = values_[root(static_cast<ValueId>(v))].arena_offset;
    }
  }
  arena_bytes_ = memory.arena_bytes;
  stats_.arena_bytes = memory.arena_bytes;
  stats_.unshared_bytes = memory.unshared_bytes;
  for (size_t v = 0; v < values_.size(); ++v) {
    const ValueSlot& slot = values_[v];
    if (slot.kind != SlotKind::kArena || slot.alias_root == kNoValue) continue;
    stats_.unshared_bytes += AlignUp(slot.bytes());
  }
  for (ValueId v : input_values_) {
    if (values_[v].kind == SlotKind::kGraphInput) per_run_values_.push_back(v);
  }
  for (size_t v = 0; v < values_.size(); ++v) {
    const SlotKind k = values_[v].kind;
    if ((k == SlotKind::kGraphOutput || k == SlotKind::kDynamic) && values_[v].step >= 0) {
      per_run_values_.push_back(static_cast<ValueId>(v));
    }
  }
  return absl::OkStatus();
}

absl::Status CompiledPlan::CheckPlannedMemory() {
  size_t planned = arena_bytes_;
  const ValueSlot* largest = nullptr;
  for (const ValueSlot& slot : values_) {
    if (slot.kind != SlotKind::kArena && slot.kind != SlotKind::kGraphOutput &&
        slot.kind != SlotKind::kPersistent) {
      continue;
    }
    if (slot.kind != SlotKind::kArena) planned += slot.bytes();
    if (largest == nullptr || slot.bytes() > largest->bytes()) largest = &slot;
  }
  planned_bytes_ = planned;
  stats_.planned_bytes = planned;
  if (planned <= memory_limit_) return absl::OkStatus();
  std::string culprit;
  if (largest != nullptr && largest->step >= 0) {
    const ir::Node& node = *steps_[largest->step].node;
    culprit = absl::StrCat("; the largest value is output ", largest->step_output, " of ",
                           node.Describe(), ", ", DTypeName(largest->dtype),
                           largest->shape.ToString(), " (", largest->bytes(), " bytes)");
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the plan for input shapes (",
      absl::StrJoin(input_shapes_, ", ",
                    [](std::string* out, const Shape& s) { out->append(s.ToString()); }),
      ") needs ", planned, " bytes per run, over the run memory budget of ", memory_limit_,
      " bytes", culprit,
      " (ModelOptions::run_memory_budget_bytes, kiln serve --run_memory_budget_bytes)"));
}

std::unique_ptr<RunState> CompiledPlan::AcquireState() const {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (!free_states_.empty()) {
      std::unique_ptr<RunState> state = std::move(free_states_.back());
      free_states_.pop_back();
      return state;
    }
  }
  auto state = std::make_unique<RunState>(memory_limit_);
  state->arena = Buffer::Allocate(std::max<size_t>(arena_bytes_, 1));
  state->step_inputs.resize(total_step_inputs_);
  state->step_outputs.resize(total_step_outputs_);
  state->step_input_bounds.resize(total_step_inputs_);
  state->step_output_bounds.resize(total_step_outputs_);
  state->kernel_states.resize(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    // Steps reshaped at run time get a new kernel per run, hence no state of their own.
    if (steps_[i].kernel != nullptr) state->kernel_states[i] = steps_[i].kernel->NewRunState();
  }
  for (const ValueSlot& slot : values_) {
    Tensor bound;
    if (slot.kind == SlotKind::kArena) {
      bound = Tensor(slot.dtype, slot.shape, state->arena, slot.arena_offset);
    } else if (slot.kind == SlotKind::kPersistent) {
      bound = Tensor(slot.dtype, slot.shape);
    } else if (slot.kind == SlotKind::kConstant) {
      bound = slot.constant;
    } else {
      continue;
    }
    if (slot.out_position >= 0) state->step_outputs[slot.out_position] = bound;
    for (int p : slot.consumer_positions) state->step_inputs[p] = bound;
  }
  return state;
}

void CompiledPlan::ReleaseState(std::unique_ptr<RunState> state) const {
  // Drop this run's references so that the caller's inputs and outputs are not kept alive.
  for (ValueId v : per_run_values_) {
    const ValueSlot& slot = values_[v];
    if (slot.out_position >= 0) state->step_outputs[slot.out_position] = Tensor();
    for (int p : slot.consumer_positions) state->step_inputs[p] = Tensor();
  }
  {
    std::lock_guard<std::mutex> error_lock(state->error_mutex);
    state->error = absl::OkStatus();
  }
  std::lock_guard<std::mutex> lock(state_mutex_);
  free_states_.push_back(std::move(state));
}

const Tensor* CompiledPlan::Lookup(ValueId value, const RunState& state,
                                   absl::Span<const Tensor> inputs) const {
  if (value < 0 || value >= static_cast<ValueId>(values_.size())) return nullptr;
  const ValueSlot& slot = values_[value];
  switch (slot.kind) {
    case SlotKind::kGraphInput:
      return slot.input_index < static_cast<int>(inputs.size()) ? &inputs[slot.input_index]
                                                                : nullptr;
    case SlotKind::kConstant:
      return &slot.constant;
    case SlotKind::kUnused:
      return nullptr;
    default:
      return slot.out_position >= 0 ? &state.step_outputs[slot.out_position] : nullptr;
  }
}

void CompiledPlan::Publish(const Step& step, RunState& state) const {
  for (int i : step.dynamic_outputs) {
    const ValueSlot& slot = values_[step.outputs[i]];
    const Tensor& t = state.step_outputs[slot.out_position];
    for (int p : slot.consumer_positions) state.step_inputs[p] = t;
  }
}

absl::Status CompiledPlan::RunStepPreparedAtRunTime(const Step& step, RunState& state,
                                                    kernels::ComputeContext& ctx) const {
  const ir::Node& node = *step.node;
  const kernels::KernelFactory* factory =
      kernels::KernelRegistry::Global().Find(node.domain, node.op);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<kernels::OpKernel> kernel, (*factory)(node));
  kernels::ReshapeContext prepare;
  prepare.node = &node;
  prepare.created = step.created;
  prepare.packed_constants = options_.packed_constants.get();
  prepare.intra_op_threads = options_.intra_op_threads;
  prepare.inputs.resize(step.inputs.size());
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    const Tensor& t = ctx.inputs[i];
    if (!t.valid()) continue;
    prepare.inputs[i].dtype = t.dtype();
    prepare.inputs[i].shape = t.shape();
    if (values_[step.inputs[i]].kind == SlotKind::kConstant) prepare.inputs[i].constant = &t;
    prepare.inputs[i].layout = graph_->value(step.inputs[i]).layout;
  }
  prepare.SetNumOutputs(static_cast<int>(step.outputs.size()));
  for (ir::ValueId v : node.outputs) {
    prepare.output_layouts.push_back(v == ir::kNoValue ? ir::MemoryLayout::kPlain
                                                       : graph_->value(v).layout);
  }
  KILN_RETURN_IF_ERROR(kernel->Reshape(prepare));
  return RunPrepared(*kernel, prepare, ctx);
}

absl::Status CompiledPlan::RunStep(const Step& step, RunState& state,
                                   absl::Span<const Tensor> inputs,
                                   const PlanSubgraphRunner* parent) const {
  kernels::ComputeContext ctx;
  ctx.inputs =
      absl::Span<const Tensor>(state.step_inputs.data() + step.input_begin, step.inputs.size());
  ctx.outputs =
      absl::Span<Tensor>(state.step_outputs.data() + step.output_begin, step.outputs.size());
  ctx.scratch = step.scratch_bytes > 0
                    ? static_cast<char*>(state.arena->data()) + step.scratch_offset
                    : nullptr;
  ctx.use_openmp = options_.intra_op_openmp;
  ctx.intra_op_threads =
      step.prepare_at_run_time ? options_.intra_op_threads : step.threads.threads;
  // The chosen count is also the OpenMP team size, which oneDNN and OpenBLAS read.
  kernels::ScopedOpenMpThreads omp(ctx.intra_op_threads);
  ctx.node = step.node;
  ctx.memory = &state.memory;
  if (!step.prepare_at_run_time) {
    ctx.run_state = state.kernel_states[&step - steps_.data()].get();
  }
  ctx.input_bounds = absl::Span<const float>(state.step_input_bounds.data() + step.input_begin,
                                             step.inputs.size());
  ctx.output_bounds =
      absl::Span<float>(state.step_output_bounds.data() + step.output_begin, step.outputs.size());
  std::fill(ctx.output_bounds.begin(), ctx.output_bounds.end(), kNoBound);
  PlanSubgraphRunner runner(this, &state, inputs, parent);
  if (step.has_subgraphs) ctx.subgraphs = &runner;
  for (int i : step.dynamic_outputs) ctx.outputs[i] = Tensor();
  if (step.outputs_empty) return absl::OkStatus();
  absl::Status status;
  // Steps may run on inter-op workers, where an exception would end the process: a kernel's
  // failed allocation becomes this run's error, naming the node.
  try {
    status = step.prepare_at_run_time ? RunStepPreparedAtRunTime(step, state, ctx)
                                      : step.kernel->Compute(ctx);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("out of memory");
  }
  if (!status.ok()) return Annotate(status, step.node->Describe());
  for (int i : step.dynamic_outputs) {
    if (!ctx.outputs[i].valid()) {
      return absl::InternalError(
          absl::StrCat(step.node->Describe(), " did not allocate its dynamic output ", i));
    }
  }
  Publish(step, state);
  for (size_t k = 0; k < step.outputs.size(); ++k) {
    if (ctx.output_bounds[k] == kNoBound) continue;
    for (int p : values_[step.outputs[k]].consumer_positions) {
      state.step_input_bounds[p] = ctx.output_bounds[k];
    }
  }
  return absl::OkStatus();
}

absl::Status CompiledPlan::Run(absl::Span<const Tensor> inputs,
                               std::vector<Tensor>* outputs) const {
  return RunWithParent(inputs, outputs, nullptr);
}

absl::Status CompiledPlan::RunWithParent(absl::Span<const Tensor> inputs,
                                         std::vector<Tensor>* outputs,
                                         const PlanSubgraphRunner* parent) const {
  const ir::Graph& graph = *graph_;
  if (inputs.size() != input_values_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", input_values_.size(), " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != input_dtypes_[i] || inputs[i].shape() != input_shapes_[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", graph.value(input_values_[i]).name, "': the plan was compiled for ",
          DTypeName(input_dtypes_[i]), input_shapes_[i].ToString(), ", got ",
          DTypeName(inputs[i].dtype()), inputs[i].shape().ToString()));
    }
  }
  std::unique_ptr<RunState> state = AcquireState();
  state->memory.Reset(planned_bytes_);
  std::fill(state->step_input_bounds.begin(), state->step_input_bounds.end(), kNoBound);
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int p : values_[input_values_[i]].consumer_positions) state->step_inputs[p] = inputs[i];
  }
  const size_t num_outputs = graph.outputs.size();
  if (outputs->size() != num_outputs) outputs->resize(num_outputs);
  for (size_t j = 0; j < num_outputs; ++j) {
    const ValueSlot& slot = values_[graph.outputs[j]];
    if (slot.kind != SlotKind::kGraphOutput) continue;
    Tensor& bound = state->step_outputs[slot.out_position];
    if (bound.valid()) {
      (*outputs)[j] = bound;  // the same value listed twice
      continue;
    }
    Tensor& dest = (*outputs)[j];
    // Reuse the caller's tensor when it fits and nobody else holds its memory.
    const bool reusable = dest.valid() && dest.dtype() == slot.dtype &&
                          dest.shape() == slot.shape && dest.buffer().use_count() == 1 &&
                          dest.byte_offset() == 0;
    if (!reusable) dest = Tensor(slot.dtype, slot.shape);
    bound = dest;
    for (int p : slot.consumer_positions) state->step_inputs[p] = dest;
  }

  absl::Status status;
  if (options_.inter_op_threads <= 1 || level_begin_.empty()) {
    for (const Step& step : steps_) {
      status = RunStep(step, *state, inputs, parent);
      if (!status.ok()) break;
    }
  } else {
    for (size_t l = 0; l + 1 < level_begin_.size() && status.ok(); ++l) {
      const int begin = level_begin_[l];
      const int count = level_begin_[l + 1] - begin;
      if (count == 1) {
        status = RunStep(steps_[begin], *state, inputs, parent);
        continue;
      }
      RunState* s = state.get();
      options_.inter_op_pool->ParallelFor(count, 1, [&, s, begin](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k) {
          absl::Status st = RunStep(steps_[begin + k], *s, inputs, parent);
          if (!st.ok()) {
            std::lock_guard<std::mutex> lock(s->error_mutex);
            if (s->error.ok()) s->error = st;
          }
        }
      });
      std::lock_guard<std::mutex> lock(state->error_mutex);
      status = state->error;
    }
  }
  if (status.ok()) {
    for (size_t j = 0; j < num_outputs; ++j) {
      const Tensor* t = Lookup(graph.outputs[j], *state, inputs);
      (*outputs)[j] = *t;
    }
  }
  ReleaseState(std::move(state));
  return status;
}

absl::StatusOr<std::shared_ptr<CompiledPlan>> CompiledPlan::SubgraphPlan(
    const ir::Graph& subgraph, const std::vector<ValueId>& input_values,
    const std::vector<Tensor>& inputs) const {
  std::lock_guard<std::mutex> lock(subplan_mutex_);
  for (const SubplanEntry& e : subplans_) {
    if (e.graph != &subgraph || e.shapes.size() != inputs.size()) continue;
    bool same = true;
    for (size_t i = 0; i < inputs.size() && same; ++i) {
      same = e.dtypes[i] == inputs[i].dtype() && e.shapes[i] == inputs[i].shape();
    }
    if (same) return e.plan;
  }
  CompileOptions options = options_;
  options.inter_op_threads = 1;  // bodies run inside a step
  // Bodies compile during a request: no timing there, on N threads as the step itself.
  options.thread_choice = ThreadChoiceMode::kOff;
  options.input_values = input_values;
  options.input_dtypes.clear();
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) {
    options.input_dtypes.push_back(t.dtype());
    shapes.push_back(t.shape());
  }
  // The subgraph lives in a node attribute of this plan's graph: share its ownership.
  std::shared_ptr<const ir::Graph> graph(graph_, &subgraph);
  KILN_ASSIGN_OR_RETURN(auto plan, Compile(graph, shapes, options));
  if (subplans_.size() >= options_.subgraph_plan_capacity) subplans_.clear();
  subplans_.push_back({&subgraph, options.input_dtypes, shapes, plan});
  return plan;
}

std::string CompiledPlan::DebugString() const {
  std::string out =
      absl::StrCat("plan: ", steps_.size(), " steps, arena ", arena_bytes_, " bytes (",
                   stats_.unshared_bytes, " without reuse), ", stats_.folded_nodes, " folded, ",
                   stats_.in_place_outputs, " in place\n");
  for (const Step& step : steps_) {
    std::vector<std::string> outs;
    for (ValueId v : step.outputs) {
      const ValueSlot& slot = values_[v];
      const std::string name =
          v < graph_->num_values() ? graph_->value(v).name : std::string("<unused>");
      if (slot.kind == SlotKind::kDynamic) {
        outs.push_back(absl::StrCat(name, ": dynamic"));
      } else if (slot.kind == SlotKind::kArena) {
        outs.push_back(absl::StrCat(name, ": ", DTypeName(slot.dtype), slot.shape.ToString(), " @",
                                    slot.arena_offset,
                                    slot.alias_root != kNoValue ? " (in place)" : ""));
      } else {
        outs.push_back(absl::StrCat(name, ": ", DTypeName(slot.dtype), slot.shape.ToString(),
                                    slot.kind == SlotKind::kGraphOutput ? " (output)" : ""));
      }
    }
    absl::StrAppend(&out, "  [", step.level, "] ", step.node->Describe(), " -> ",
                    absl::StrJoin(outs, ", "), step.prepare_at_run_time ? " (run-time shapes)" : "",
                    options_.intra_op_threads > 1 && !step.prepare_at_run_time
                        ? absl::StrCat(", ", step.threads.Describe())
                        : std::string(),
                    "\n");
  }
  return out;
}

}  // namespace kiln::exec
