// Runs a graph that differs from the fp32 graph in a few nodes by running only what that
// difference reaches: the changed nodes and everything downstream of them (the suffix), fed
// with the values the fp32 graph computes upstream, kept from one fp32 run over the same
// batches.
//
// Why: the accuracy guard (compression.cc) ranks layers by compressing each one alone, i.e.
// runs the fp32 graph with one layer changed, once per layer. Upstream of that layer it
// computes exactly what fp32 computes, so running it whole repeats work: on ResNet-18 the
// ranking took 8.5 of the 17.5 s of an AVX2 load, almost all of it in convolutions.
//
// Nodes are matched by the names of their outputs: a node of the changed graph is unchanged
// when the fp32 graph has a node writing the same output names with the same operator,
// attributes, input names and constant inputs (by value). Anything else is changed, so a
// mismatch can only make a suffix longer, never skip a changed node. A changed graph whose
// suffix reads a value the fp32 graph does not have (by name, dtype and dimensions), or that
// holds a node with a subgraph, runs whole.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/graph.h"

namespace kiln::runtime {

// Runs `graph` on every batch (tensors in graph input order); outputs[b] holds batch b's
// outputs in graph output order. Each graph gets its own plans and packed weights. `stop` is
// asked after each batch with the outputs so far: true ends the run there.
absl::StatusOr<std::vector<std::vector<Tensor>>> RunOnBatches(
    std::shared_ptr<const ir::Graph> graph, const exec::CompileOptions& compile,
    const std::vector<std::vector<Tensor>>& batches,
    absl::FunctionRef<bool(const std::vector<std::vector<Tensor>>&)> stop =
        [](const std::vector<std::vector<Tensor>>&) { return false; });

class SuffixRunner {
 public:
  // Cuts the suffix of each graph in `changed` (all with `fp32`'s inputs and outputs), then runs
  // `fp32` once over `batches`, keeping every value a suffix reads.
  static absl::StatusOr<std::unique_ptr<SuffixRunner>> Make(
      std::shared_ptr<const ir::Graph> fp32,
      const std::vector<std::shared_ptr<const ir::Graph>>& changed,
      const exec::CompileOptions& compile, std::vector<std::vector<Tensor>> batches);

  // What RunOnBatches(changed[i], compile, batches) gives: the outputs the suffix writes come
  // from running it, the others are fp32's.
  absl::StatusOr<std::vector<std::vector<Tensor>>> Run(size_t i) const;

  // Nodes run for changed[i] (its suffix's, or all of them where it runs whole), and all.
  int64_t nodes_run(size_t i) const { return parts_[i].nodes_run; }
  int64_t nodes(size_t i) const { return parts_[i].nodes; }
  // fp32's outputs on the batches, per batch in graph output order (from the run that kept
  // the values).
  const std::vector<std::vector<Tensor>>& fp32_outputs() const { return fp32_outputs_; }

 private:
  struct Part {
    std::shared_ptr<const ir::Graph> whole;  // run when no suffix could be cut
    std::shared_ptr<const ir::Graph> suffix;
    std::vector<std::string> cut;              // names of suffix->inputs, values of fp32
    std::vector<ir::MemoryLayout> cut_layout;  // the layout the suffix reads each of them in
    std::vector<int> output_of;                // per graph output: suffix output index, or -1
    int64_t nodes_run = 0, nodes = 0;
  };
  exec::CompileOptions compile_;
  std::vector<std::vector<Tensor>> batches_;
  std::vector<Part> parts_;
  // fp32's value by name, per batch, in the layout fp32 left it in.
  std::map<std::string, std::vector<Tensor>> kept_;
  std::map<std::string, ir::MemoryLayout> kept_layout_;
  std::vector<std::vector<Tensor>> fp32_outputs_;  // per batch
};

// `t` (a float NCHW-shaped tensor whose bytes are in layout `from`) with its bytes in `to`.
Tensor Relayout(const Tensor& t, ir::MemoryLayout from, ir::MemoryLayout to);

}  // namespace kiln::runtime
