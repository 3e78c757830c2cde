// Graph optimization passes and the pass manager. Every pass reports what it changed to the
// OptimizationLog (shown by `kiln inspect`); ModelOptions::disable_optimizer skips them all.
//
// Adding a pass is one function and one registration line:
//
//   absl::Status FoldBatchNorm(ir::Graph& graph, opt::PassContext& ctx) {
//     ... rewrite graph; for each rewrite: ctx.Note("folded BatchNormalization 'bn1' into
//     Conv 'conv1'");
//     return absl::OkStatus();
//   }
//   KILN_REGISTER_PASS("batchnorm_folding", 200, FoldBatchNorm);
//
// Passes run in ascending `order` (ties by name); the manager runs the whole list until
// nothing changes (at most a few rounds), verifies the graph after each pass (a pass that
// breaks the graph is a bug: the error names the pass), and compacts the graph at the end.
// Suggested orders: 100 cleanup/folding, 200 algebraic rewrites, 300 fusion, 900 DCE.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kiln/ir/evaluator.h"
#include "kiln/opt/compression.h"
#include "kiln/ir/graph.h"

namespace kiln::opt {

struct OptimizationLogEntry {
  std::string pass;
  int round = 0;
  std::vector<std::string> changes;  // one line per rewrite
  int nodes_before = 0;
  int nodes_after = 0;
  int64_t duration_ns = 0;
};

struct OptimizationLog {
  std::vector<OptimizationLogEntry> entries;  // passes that changed something
  int nodes_before = 0;
  int nodes_after = 0;
  bool disabled = false;
  // "constant_folding (round 1): 12 changes, 140 -> 128 nodes" plus up to
  // `max_changes_per_pass` change lines per pass.
  std::string ToString(int max_changes_per_pass = 5) const;
};

struct PassOptions {
  // What the compression passes may do (kiln/opt/compression.h); null: they change nothing.
  const CompressionOptions* compression = nullptr;
  // The layout this CPU's convolutions read and write fastest (the kernels library measures it
  // from oneDNN's own choice: kernels::PreferredConvActivationLayout); conv_activation_layout
  // keeps chains of convolutions and pools in it. kPlain: every value stays NCHW.
  ir::MemoryLayout conv_activation_layout = ir::MemoryLayout::kPlain;
  // Evaluates nodes for constant folding: the runtime hands in its kernels
  // (exec::KernelEvaluator), so the optimizer folds exactly what a run would compute without
  // linking them. Null: nothing is folded.
  const ir::NodeEvaluator* evaluator = nullptr;
  // Passes to skip by name (e.g. for debugging a fusion).
  std::vector<std::string> disabled_passes;
  int max_rounds = 4;
};

class PassContext {
 public:
  explicit PassContext(const PassOptions& options) : options_(options) {}
  const PassOptions& options() const { return options_; }
  // Records one rewrite; the manager counts a pass as changing the graph when it noted any.
  void Note(std::string change) { changes_.push_back(std::move(change)); }
  std::vector<std::string> TakeChanges() { return std::move(changes_); }

 private:
  const PassOptions& options_;
  std::vector<std::string> changes_;
};

using PassFunction = std::function<absl::Status(ir::Graph&, PassContext&)>;

struct PassInfo {
  std::string name;
  int order = 0;
  PassFunction run;
};

class PassRegistry {
 public:
  static PassRegistry& Global();
  void Register(std::string name, int order, PassFunction run);
  std::vector<PassInfo> Passes() const;  // sorted by order, then name

 private:
  std::vector<PassInfo> passes_;
};

struct PassRegistration {
  PassRegistration(const char* name, int order, PassFunction run) {
    PassRegistry::Global().Register(name, order, std::move(run));
  }
};

// Runs the registered passes over `graph` (and, recursively, over nothing else: passes that
// care about subgraphs walk them). Appends to `log`.
absl::Status Optimize(ir::Graph& graph, const PassOptions& options, OptimizationLog* log);

}  // namespace kiln::opt

#define KILN_PASS_CONCAT_INNER(a, b) a##b
#define KILN_PASS_CONCAT(a, b) KILN_PASS_CONCAT_INNER(a, b)
#define KILN_REGISTER_PASS(name, order, fn) \
  static ::kiln::opt::PassRegistration KILN_PASS_CONCAT(kiln_pass_reg_, __COUNTER__)(name, order, fn)
