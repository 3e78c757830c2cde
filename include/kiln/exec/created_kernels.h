// The kernels of one loaded model on which Create ran (kernel.h: Create -> Reshape -> Compute):
// one per node, made by the registry's factory and Created the first time a plan of the model
// compiles that node, then shared read-only by every plan compiled after (each plan's own
// kernel object finds it through ReshapeContext::created).
//
// Why at the first plan compile and not when the model loads: the plan compiler is the one
// place that knows which nodes run (nodes folded into constants or pruned for the requested
// outputs never get a kernel), and loading already compiles the plans of warmup requests and
// allowed batch sizes, so a Create error still surfaces at load for a served model. Nodes of
// subgraphs (If/Loop/Scan bodies) are created the same way when their plans compile.
//
// What Create sees is what every plan of the model shares: an input is `constant` only when
// the graph holds its value (not when one plan folded it for its shapes), and its shape is the
// graph's type, a dimension the graph does not fix given as -1 (rank 0 when even the rank is
// unknown).
//
// Thread safety: every method may be called from any thread at once. Entries live as long as
// the store; each keeps the graph of its node alive, so a node's address is never reused for
// another node while the store could return its kernel.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::exec {

class CreatedKernels {
 public:
  // The created kernel of `node`: on the first request made by the node's factory and Created
  // with the context `make_context` returns (called then only); later requests return that
  // object. A failed Create is returned (InvalidArgument etc. from the kernel, annotated with
  // "creating <node>") and not kept, so a later compile reports it again. `graph` owns `node`.
  // `made`, when set, tells whether this call ran Create.
  absl::StatusOr<const kernels::OpKernel*> GetOrCreate(
      const std::shared_ptr<const ir::Graph>& graph, const ir::Node& node,
      absl::FunctionRef<kernels::CreateContext()> make_context, bool* made = nullptr);

  int64_t creates() const;  // Create calls that succeeded (one per node)
  size_t size() const;

 private:
  struct Entry {
    std::unique_ptr<kernels::OpKernel> kernel;
    std::shared_ptr<const ir::Graph> graph;  // keeps the node (the key) alive
  };
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<const ir::Node*, Entry> kernels_ ABSL_GUARDED_BY(mutex_);
  int64_t creates_ ABSL_GUARDED_BY(mutex_) = 0;
};

// The CreateContext of `node` as the model knows it (see the top of this file), for the model
// store `packed`: what the plan compiler hands Create.
kernels::CreateContext ModelCreateContext(const ir::Graph& graph, const ir::Node& node,
                                          kernels::PackedConstantCache* packed);

}  // namespace kiln::exec
