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

void PassRegistry::Register(std::string name, int order, PassFunction run) {
  passes_.push_back({std::move(name), order, std::move(run)});
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
    absl::StrAppend(&out, "  ", e.pass, " (round ", e.round, "): ", e.changes.size(),
                    " change", e.changes.size() == 1 ? "" : "s", ", ", e.nodes_before, " -> ",
                    e.nodes_after, " nodes, ", e.duration_ns / 1000, " us\n");
    for (size_t i = 0; i < e.changes.size() && static_cast<int>(i) < max_changes_per_pass; ++i) {
      absl::StrAppend(&out, "    ", e.changes[i], "\n");
    }
    if (static_cast<int>(e.changes.size()) > max_changes_per_pass) {
      absl::StrAppend(&out, "    ... ", e.changes.size() - max_changes_per_pass, " more\n");
    }
  }
  return out;
}

absl::Status Optimize(ir::Graph& graph, const PassOptions& options, OptimizationLog* log) {
  log->nodes_before = graph.num_live_nodes();
  const std::vector<PassInfo> passes = PassRegistry::Global().Passes();
  for (int round = 1; round <= std::max(1, options.max_rounds); ++round) {
    bool changed = false;
    for (const PassInfo& pass : passes) {
      if (std::find(options.disabled_passes.begin(), options.disabled_passes.end(), pass.name) !=
          options.disabled_passes.end()) {
        continue;
      }
      PassContext ctx(options);
      OptimizationLogEntry entry;
      entry.pass = pass.name;
      entry.round = round;
      entry.nodes_before = graph.num_live_nodes();
      const int64_t start = NowNanos();
      absl::Status status = pass.run(graph, ctx);
      if (!status.ok()) return Annotate(status, absl::StrCat("optimizer pass ", pass.name));
      entry.changes = ctx.TakeChanges();
      if (entry.changes.empty()) continue;
      changed = true;
      graph.Compact();
      absl::Status verified = ir::Verify(graph);
      if (!verified.ok()) {
        return absl::InternalError(absl::StrCat("optimizer pass ", pass.name,
                                                " left an invalid graph: ", verified.message()));
      }
      entry.nodes_after = graph.num_live_nodes();
      entry.duration_ns = NowNanos() - start;
      log->entries.push_back(std::move(entry));
    }
    if (!changed) break;
  }
  log->nodes_after = graph.num_live_nodes();
  return absl::OkStatus();
}

}  // namespace kiln::opt
