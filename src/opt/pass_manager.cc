// The pass registry and manager: runs the registered passes in rounds (include/kiln/opt/pass.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"
#include "kiln/core/status.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {

PassRegistry& PassRegistry::Global() {
  static PassRegistry* registry = new PassRegistry();
  return *registry;
}

void PassRegistry::Register(std::string name, int order, PassFunction run, bool keeps_value_types) {
  passes_.push_back({std::move(name), order, std::move(run), keeps_value_types});
}

std::vector<PassInfo> PassRegistry::Passes() const {
  std::vector<PassInfo> sorted = passes_;
  std::sort(sorted.begin(), sorted.end(), [](const PassInfo& a, const PassInfo& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return sorted;
}

std::string OptimizationLog::ToString(int max_changes_per_pass) const {
  if (disabled) return "optimizer disabled\n";
  std::string out = absl::StrCat(nodes_before, " -> ", nodes_after, " nodes\n");
  if (entries.empty()) absl::StrAppend(&out, "  no pass changed the graph\n");
  for (const OptimizationLogEntry& e : entries) {
    absl::StrAppend(&out, "  ", e.pass, " (round ", e.round, "): ", e.changes.size(), " change",
                    e.changes.size() == 1 ? "" : "s", ", ", e.nodes_before, " -> ", e.nodes_after,
                    " nodes, ", e.duration_ns / 1000, " us\n");
    for (size_t i = 0; i < e.changes.size() && static_cast<int>(i) < max_changes_per_pass; ++i) {
      absl::StrAppend(&out, "    ", e.changes[i], "\n");
    }
    if (static_cast<int>(e.changes.size()) > max_changes_per_pass) {
      absl::StrAppend(&out, "    ... ", e.changes.size() - max_changes_per_pass, " more\n");
    }
  }
  return out;
}

namespace {

bool Disabled(const PassOptions& options, const std::string& name) {
  return std::find(options.disabled_passes.begin(), options.disabled_passes.end(), name) !=
         options.disabled_passes.end();
}

// Runs one pass; fills `entry` (changes, node counts, time). The graph is compacted and
// verified when the pass changed it: a pass that breaks the graph is named in the error.
absl::Status RunOne(const PassInfo& pass, ir::Graph& graph, const PassOptions& options,
                    OptimizationLogEntry& entry) {
  PassContext ctx(options);
  entry.pass = pass.name;
  entry.nodes_before = graph.num_live_nodes();
  const int64_t start = NowNanos();
  absl::Status status = pass.run(graph, ctx);
  if (!status.ok()) return Annotate(status, absl::StrCat("optimizer pass ", pass.name));
  entry.changes = ctx.TakeChanges();
  if (!entry.changes.empty()) {
    graph.Compact();
    absl::Status verified = ir::Verify(graph);
    if (!verified.ok()) {
      return absl::InternalError(absl::StrCat("optimizer pass ", pass.name,
                                              " left an invalid graph: ", verified.message()));
    }
  }
  entry.nodes_after = graph.num_live_nodes();
  entry.duration_ns = NowNanos() - start;
  return absl::OkStatus();
}

absl::Status InferTypes(ir::Graph& graph) {
  return Annotate(ir::InferShapes(graph), "optimizer: inferring value types");
}

}  // namespace

absl::Status Optimize(ir::Graph& graph, const PassOptions& options, OptimizationLog* log) {
  log->nodes_before = graph.num_live_nodes();
  const std::vector<PassInfo> passes = PassRegistry::Global().Passes();
  for (int round = 1; round <= std::max(1, options.max_rounds); ++round) {
    bool changed = false;
    // Once per round, and again after a pass that changed the graph without keeping types
    // (pass.h).
    bool types_fresh = false;
    for (const PassInfo& pass : passes) {
      if (Disabled(options, pass.name)) continue;
      if (!types_fresh && pass.order >= kFirstTypedPassOrder) {
        KILN_RETURN_IF_ERROR(InferTypes(graph));
        types_fresh = true;
      }
      OptimizationLogEntry entry;
      entry.round = round;
      KILN_RETURN_IF_ERROR(RunOne(pass, graph, options, entry));
      if (entry.changes.empty()) continue;
      changed = true;
      if (!pass.keeps_value_types) types_fresh = false;
      log->entries.push_back(std::move(entry));
    }
    if (!changed) break;
  }
  log->nodes_after = graph.num_live_nodes();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RunPass(absl::string_view name, ir::Graph& graph,
                                                 const PassOptions& options) {
  for (const PassInfo& pass : PassRegistry::Global().Passes()) {
    if (pass.name != name) continue;
    if (pass.order >= kFirstTypedPassOrder) KILN_RETURN_IF_ERROR(InferTypes(graph));
    OptimizationLogEntry entry;
    KILN_RETURN_IF_ERROR(RunOne(pass, graph, options, entry));
    return std::move(entry.changes);
  }
  return absl::NotFoundError(absl::StrCat("no optimizer pass named '", name, "'"));
}

}  // namespace kiln::opt
