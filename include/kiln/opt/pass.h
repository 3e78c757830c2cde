// Graph optimization passes and the pass manager. Every pass reports what it changed to the
// OptimizationLog (shown by `kiln inspect`); ModelOptions::disable_optimizer skips them all.
//
// Adding a pass is one function and one registration line:
//
//   absl::Status FoldBatchNorm(ir::Graph& graph, opt::PassContext& ctx) {
//     ... rewrite graph; for each rewrite:
//     ctx.Note(absl::StrCat("folded ", bn.Describe(), " into ", conv.Describe()));
//     return absl::OkStatus();
//   }
//   KILN_REGISTER_PASS("batchnorm_folding", 200, FoldBatchNorm);
//
// Passes run in ascending `order` (ties by name); the manager runs the whole list until
// nothing changes (at most a few rounds), verifies the graph after each pass (a pass that
// breaks the graph is a bug: the error names the pass) and compacts the graph after each pass
// that changed it.
// Suggested orders: 100 cleanup/folding, 120-150 redundancy elimination, 200 algebraic
// rewrites and compression, 300 fusion, 400 layout, 900 DCE.
//
// Every pass notes each rewrite with ctx.Note, naming the nodes it rewrote
// (ir::Node::Describe(): "Conv 'conv1'"), e.g. "fused Conv 'conv1' + Relu 'relu1' into
// FusedConv": `kiln inspect` then says what happened to which node, and the log counts
// rewrites, not passes.
//
// Value types (ir::Value::type) are inferred before the first pass of a round whose order is at
// least kFirstTypedPassOrder (after constant folding, whose results make more types knowable), and
// again only after a pass that changed the graph without keeping types, not before every pass: for
// passes that keep types that would only repeat work (bench/runtime/optimizer_bench.cc measures the
// difference). A pass registered with KILN_REGISTER_PASS_KEEPING_TYPES promises that the values it
// adds or rewires have the types inference would give them (a fused node takes over the value of
// the pattern's last node, type included; Graph::AddConstant types a new constant), so the passes
// after it read correct types without inference (opt_pass_convention_test checks the promise of
// every such pass on real models). A pass registered with KILN_REGISTER_PASS may change shapes
// freely (pruning channels, say); types are inferred again after it when it changed something.
// Passes ordered below kFirstTypedPassOrder must not read inferred types.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/ir/evaluator.h"
#include "kiln/ir/graph.h"
#include "kiln/opt/compression.h"

namespace kiln::opt {

// The first order at which passes read inferred value types (see the rules above).
inline constexpr int kFirstTypedPassOrder = 110;

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
  // The layout this CPU's Winograd convolutions read and write
  // (kernels::WinogradConvActivationLayout); kPlain: none. A graph whose Winograd-shaped
  // convolutions (3x3, stride 1, dense) carry at least three quarters of its convolutions'
  // multiply-adds is kept in it instead, so they run without reordering in and out of it.
  ir::MemoryLayout winograd_conv_layout = ir::MemoryLayout::kPlain;
  // Evaluates nodes for constant folding: the runtime hands in its kernels
  // (exec::KernelEvaluator), so the optimizer folds exactly what a run would compute without
  // linking them. Null: nothing is folded.
  const ir::NodeEvaluator* evaluator = nullptr;
  // conv_depthwise_fusion may join a 1x1 convolution and the depthwise one reading it
  // (src/opt/fuse_depthwise.cc). Off where int8 compression follows: its calibration observes
  // the 1x1's output, which the fused node no longer has.
  bool fuse_conv_depthwise = true;
  // Passes to skip by name (e.g. for debugging a fusion).
  std::vector<std::string> disabled_passes;
  int max_rounds = 4;
};

// One per pass run, owned by the thread running the pass: not shared.
class PassContext {
 public:
  explicit PassContext(const PassOptions& options) : options_(options) {}
  const PassOptions& options() const { return options_; }
  // Records one rewrite, naming its nodes; the manager counts a pass as changing the graph
  // when it noted any.
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
  // The pass leaves every value it touches typed as inference would (see above).
  bool keeps_value_types = false;
};

// Thread safety: passes register from static initializers, before main; afterwards the
// registry is only read, so models loading on several threads may call Passes() at once.
// Register() after main is not safe against concurrent readers.
class PassRegistry {
 public:
  static PassRegistry& Global();
  void Register(std::string name, int order, PassFunction run, bool keeps_value_types = false);
  std::vector<PassInfo> Passes() const;  // sorted by order, then name

 private:
  std::vector<PassInfo> passes_;
};

struct PassRegistration {
  PassRegistration(const char* name, int order, PassFunction run, bool keeps_value_types = false) {
    PassRegistry::Global().Register(name, order, std::move(run), keeps_value_types);
  }
};

// Runs the registered passes over `graph` (and, recursively, over nothing else: passes that
// care about subgraphs walk them). Appends to `log`.
absl::Status Optimize(ir::Graph& graph, const PassOptions& options, OptimizationLog* log);

// Runs the one registered pass `name` as Optimize runs it in a round (value types inferred
// first when its order is at least kFirstTypedPassOrder; the graph compacted and verified when
// it changed) and returns its notes: for tests and for debugging one rewrite.
absl::StatusOr<std::vector<std::string>> RunPass(absl::string_view name, ir::Graph& graph,
                                                 const PassOptions& options);

}  // namespace kiln::opt

#define KILN_PASS_CONCAT_INNER(a, b) a##b
#define KILN_PASS_CONCAT(a, b) KILN_PASS_CONCAT_INNER(a, b)
#define KILN_REGISTER_PASS(name, order, fn)                                                       \
  static ::kiln::opt::PassRegistration KILN_PASS_CONCAT(kiln_pass_reg_, __COUNTER__)(name, order, \
                                                                                     fn)
#define KILN_REGISTER_PASS_KEEPING_TYPES(name, order, fn)                             \
  static ::kiln::opt::PassRegistration KILN_PASS_CONCAT(kiln_pass_reg_, __COUNTER__)( \
      name, order, fn, /*keeps_value_types=*/true)
