// The kernel interface: Create -> Reshape -> Compute, after XNNPACK's create/reshape/setup and
// ONNX Runtime's PrePack.
//  - Create runs once per node per loaded model, on the model's own kernel object for the node
//    (shared by every plan of the model): it validates attributes and packs constant weights
//    into the layout its implementation wants, so a new batch size packs nothing.
//  - Reshape runs once per plan (input-shape signature), on the plan's kernel object: it checks
//    inputs, computes output dtypes and shapes, sizes scratch memory and creates primitives
//    (oneDNN). It finds what Create made through ReshapeContext::created.
//  - Compute runs on every execution and only does the math into memory the executor owns,
//    with no heap allocation: per-run objects (oneDNN memory handles) live in the kernel's
//    KernelRunState, made once per pooled run state of the plan.
// One kernel object serves every concurrent run of its plan, so Compute must not mutate the
// kernel (per-run state goes in the scratch memory or the KernelRunState).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/core/memory_budget.h"
#include "kiln/core/tensor.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/packed_constants.h"

namespace kiln::kernels {

struct InputInfo {
  DType dtype = DType::kInvalid;  // kInvalid: an omitted optional input
  Shape shape;
  const Tensor* constant = nullptr;  // the value, when known at compile time
  // The byte layout of the value (set by the optimizer; only LayoutAware kernels get others).
  ir::MemoryLayout layout = ir::MemoryLayout::kPlain;
  bool present() const { return dtype != DType::kInvalid; }
};

class OpKernel;

// What Create sees: the node's inputs as the loaded model knows them. Constant inputs
// (weights) have `constant` set; the shapes of other inputs may be unknown (rank 0, dtype set
// where the graph records it), since every plan of the model shares what Create makes.
struct CreateContext {
  const ir::Node* node = nullptr;
  std::vector<InputInfo> inputs;  // one per node input
  // The model's store of packed constants (null: the kernel keeps its own copy).
  PackedConstantCache* packed_constants = nullptr;
};

struct ReshapeContext {
  const ir::Node* node = nullptr;
  // The model's kernel object for this node, on which Create ran (same class, same node); a
  // kernel reads the weights it packed there. Null where no Create ran (compile-time
  // evaluation of a single node, tests): the kernel then packs in Reshape.
  const OpKernel* created = nullptr;
  std::vector<InputInfo> inputs;  // one per node input
  int intra_op_threads = 1;       // threads Compute may use through ComputeContext::ParallelFor
  // Where constant weights packed for a primitive are kept, shared by every plan of the model
  // (null: the kernel keeps its own copy).
  PackedConstantCache* packed_constants = nullptr;

  // Set by Reshape, one entry per node output:
  std::vector<DType> output_dtypes;
  std::vector<Shape> output_shapes;
  // True where the output shape depends on input values (NonZero, data-dependent Reshape,
  // control flow): Compute then allocates that output with ComputeContext::Allocate.
  std::vector<bool> output_dynamic;
  // -1, or the index of an input whose memory the output may share (elementwise ops that can
  // run in place). The planner decides whether it actually does.
  std::vector<int> output_in_place_of;
  size_t scratch_bytes = 0;     // per-run scratch, 64-byte aligned
  int activation_reorders = 0;  // layout reorders Compute runs per call (for `kiln inspect`)
  // 1 where the kernel runs its activation inside its primitive on runs whose input is
  // bounded (a guarded Relu/Clip, src/kernels/cpu/nn_dnnl.h; for `kiln inspect`).
  int guarded_activations = 0;
  // Set by the plan before Reshape, one per node output: the layout the kernel must write
  // (ir::MemoryLayout; not reset by SetNumOutputs).
  std::vector<ir::MemoryLayout> output_layouts;
  ir::MemoryLayout output_layout(size_t i) const {
    return i < output_layouts.size() ? output_layouts[i] : ir::MemoryLayout::kPlain;
  }

  // Sizes the output vectors for `n` outputs with defaults.
  void SetNumOutputs(int n) {
    output_dtypes.assign(n, DType::kInvalid);
    output_shapes.assign(n, Shape{});
    output_dynamic.assign(n, false);
    output_in_place_of.assign(n, -1);
  }
};

// Runs a subgraph attribute of the node (If/Loop/Scan bodies), provided by the executor.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // Runs `graph` (an attribute of the current node) with `inputs` bound to graph.inputs and
  // its captures resolved from the enclosing run; returns graph.outputs.
  virtual absl::StatusOr<std::vector<Tensor>> Run(const ir::Graph& graph,
                                                  const std::vector<Tensor>& inputs) = 0;
};

// Runs fn over [0, n) in at most `threads` chunks of at least `min_chunk` on the OpenMP team of
// the calling thread (the threads oneDNN primitives run on); the caller takes one chunk.
void OpenMpParallelFor(int64_t n, int64_t min_chunk, int threads,
                       absl::FunctionRef<void(int64_t, int64_t)> fn);

// Per-run objects of one kernel (oneDNN memory handles re-pointed with set_data_handle,
// argument maps): made once per pooled run state of the plan by OpKernel::NewRunState, so
// Compute allocates nothing.
class KernelRunState {
 public:
  virtual ~KernelRunState() = default;
};

struct ComputeContext {
  absl::Span<const Tensor> inputs;  // invalid Tensor for an omitted optional input
  absl::Span<Tensor> outputs;       // preallocated, except the dynamic ones
  void* scratch = nullptr;
  int intra_op_threads = 1;
  // Parallel loops run on the OpenMP team that oneDNN uses, so that one set of threads serves
  // every kernel (see src/kernels/cpu/nn_openmp.cc); false runs them on the calling thread.
  // There is no second (thread-pool) path: production never used one, so tests of it tested
  // nothing that runs.
  bool use_openmp = false;
  SubgraphRunner* subgraphs = nullptr;
  // The kernel's per-run objects from NewRunState (null when it has none).
  KernelRunState* run_state = nullptr;
  // What the plan knows of this run's values: per input, a bound on |x| that every element
  // keeps (NaN never does; +inf: nothing known); per output, +inf on entry, lowered by a kernel
  // whose output is bounded on this run (a Clip run inside oneDNN's primitive), and handed to
  // the consumers' input_bounds. Empty outside a plan.
  absl::Span<const float> input_bounds;
  absl::Span<float> output_bounds;

  // Parallel loop over [0, n) on the OpenMP team (or inline). The body goes by
  // absl::FunctionRef: a std::function per call could allocate on every run (issue 9).
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t min_chunk, Fn&& fn) const {
    if (use_openmp && intra_op_threads > 1 && n > min_chunk) {
      OpenMpParallelFor(n, min_chunk, intra_op_threads,
                        absl::FunctionRef<void(int64_t, int64_t)>(fn));
    } else if (n > 0) {
      fn(int64_t{0}, n);
    }
  }
  // The node being computed (names it in errors) and the run's memory budget; either may be
  // null (tests, compile-time evaluation without a budget).
  const ir::Node* node = nullptr;
  MemoryBudget* memory = nullptr;

  // Allocates output `index` (for dynamic outputs, whose shapes come from input values):
  // InvalidArgument when the shape overflows, ResourceExhausted naming the node, op and shape
  // when it would exceed the run's memory budget or the allocation fails.
  absl::StatusOr<Tensor*> Allocate(int index, DType dtype, Shape shape);
};

// The RESOURCE_EXHAUSTED error for `bytes` of `dtype[shape]` that `node` asked for beyond
// `budget` (shared by the executor and ComputeContext::Allocate so both say the same).
absl::Status OverBudgetError(const ir::Node* node, const std::string& what, DType dtype,
                             const Shape& shape, size_t bytes, const MemoryBudget& budget);

// Thread safety: a kernel is created and reshaped by the one thread loading its model or
// compiling its plan; Compute() is const because concurrent Runs of that plan call it on many
// threads at once, so a kernel keeps per-run state in the ComputeContext (outputs, scratch,
// run_state), never in members.
class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // Once per node per loaded model (see the top of this file). Kernels with nothing to
  // validate or pack ahead of shapes keep the default.
  virtual absl::Status Create(CreateContext& /*ctx*/) { return absl::OkStatus(); }
  virtual absl::Status Reshape(ReshapeContext& ctx) = 0;
  virtual absl::Status Compute(ComputeContext& ctx) const = 0;
  // After Reshape, once per pooled run state of the plan: the objects Compute re-points
  // instead of allocating (null: none).
  virtual std::unique_ptr<KernelRunState> NewRunState() const { return nullptr; }
};

using KernelFactory = std::function<absl::StatusOr<std::unique_ptr<OpKernel>>(const ir::Node&)>;

// Maps (domain, op) to the factory of its CPU kernel. Global() is built on first use from an
// explicit table of kernel files (src/kernels/cpu/kernel_files.inc), so linking the kernels
// library is enough: no static initializers, no whole-archive linking.
// Thread safety: Global() is built once (a function-local static) and only read afterwards, so
// Find() may be called from any thread at once; Register() is for building a registry.
class KernelRegistry {
 public:
  static KernelRegistry& Global();
  // ALREADY_EXISTS when (domain, op) has a kernel: which of two would run must not depend on
  // the order files are listed or linked. The first error is also kept for status().
  absl::Status Register(const std::string& domain, const std::string& op, KernelFactory factory);
  // Null when no kernel is registered.
  const KernelFactory* Find(const std::string& domain, const std::string& op) const;
  std::vector<std::string> RegisteredOps() const;  // "domain::op" or "op", sorted
  // The first failed registration (a duplicate): the plan compiler refuses to run on a
  // registry that has one.
  const absl::Status& status() const { return status_; }
  // Names the kernel file whose registrations follow, for duplicate errors.
  void set_source(std::string source) { source_ = std::move(source); }

 private:
  struct Entry {
    KernelFactory factory;
    std::string source;
  };
  std::map<std::string, Entry> factories_;
  std::string source_;
  absl::Status status_;
};

namespace internal {
template <int N>
struct KernelSlot {};
// Calls fn(KernelSlot<i>{}) for i in [0, N).
template <int N, typename Fn>
void ForEachKernelSlot(Fn&& fn) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (fn(KernelSlot<I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}
}  // namespace internal

}  // namespace kiln::kernels

// Kernel files declare their kernels with KILN_REGISTER_KERNEL lines and end with one
// KILN_KERNEL_FILE(name) in the namespace of those lines; name is listed in
// src/kernels/cpu/kernel_files.inc, the table KernelRegistry::Global() is built from.
//
// KILN_REGISTER_KERNEL("", "Relu", [](const ir::Node& n) -> absl::StatusOr<...> {...});
// Each line defines an overload of KilnKernelEntry keyed by a KernelSlot<__COUNTER__>;
// KILN_KERNEL_FILE defines the file's registration function (C linkage, so that the table
// can name it from any namespace), which calls every overload the file defined.
#define KILN_REGISTER_KERNEL(domain, op, factory) \
  KILN_REGISTER_KERNEL_AT_SLOT(__COUNTER__, domain, op, factory)
#define KILN_REGISTER_KERNEL_AT_SLOT(slot, domain, op, factory)                             \
  [[maybe_unused]] static void KilnKernelEntry(::kiln::kernels::internal::KernelSlot<slot>, \
                                               ::kiln::kernels::KernelRegistry& registry) { \
    /* A failure (a duplicate) is kept in registry.status(). */                             \
    registry.Register(domain, op, factory).IgnoreError();                                   \
  }                                                                                         \
  static_assert(true)
// For a kernel class constructible from `const ir::Node&`.
#define KILN_REGISTER_KERNEL_CLASS(domain, op, Class)                                        \
  KILN_REGISTER_KERNEL(domain, op,                                                           \
                       [](const ::kiln::ir::Node& node)                                      \
                           -> absl::StatusOr<std::unique_ptr<::kiln::kernels::OpKernel>> {   \
                         return std::unique_ptr<::kiln::kernels::OpKernel>(new Class(node)); \
                       })
#define KILN_KERNEL_FILE(name)                                                            \
  extern "C" void KilnRegisterKernels_##name(::kiln::kernels::KernelRegistry* registry) { \
    ::kiln::kernels::internal::ForEachKernelSlot<__COUNTER__>([registry](auto slot) {     \
      if constexpr (requires { KilnKernelEntry(slot, *registry); }) {                     \
        KilnKernelEntry(slot, *registry);                                                 \
      }                                                                                   \
    });                                                                                   \
  }                                                                                       \
  static_assert(true)
