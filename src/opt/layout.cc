// Channels-last memory for chains of 2-D convolutions.
//
// Kiln's tensors are NCHW, but oneDNN's fastest fp32 convolutions (brgconv, brdgmm) read and
// write NHWC. Left alone, every conv reorders its input to NHWC and its output back: on
// MobileNet-v2 at batch 32 those reorders took more time than the convolutions themselves.
// This pass marks each value that a 2-D conv produces and that only 2-D convs (as input or as
// residual) and global pools read as channels-last: the value keeps its logical NCHW shape, its
// bytes are NHWC, and the producer and readers are told by attributes
//   x_channels_last, residual_channels_last (readers), y_channels_last (producer).
// Decisions are recomputed from scratch on every run of the pass, so a later rewrite never
// leaves a stale mark.
#include <set>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;

constexpr const char* kLayoutAttrs[] = {"x_channels_last", "y_channels_last",
                                        "residual_channels_last"};

bool IsConv2D(const Graph& g, const Node& n) {
  const bool conv = (n.domain.empty() && n.op == "Conv") || (n.domain == "kiln" && n.op == "FusedConv");
  if (!conv || n.inputs.size() < 2 || n.outputs.empty()) return false;
  const ValueId w = n.inputs[1];
  if (w < 0 || w >= g.num_values() || !g.value(w).constant) return false;
  const Tensor& weights = *g.value(w).constant;
  return weights.dtype() == DType::kFloat32 && weights.rank() == 4;
}

bool IsGlobalPool(const Node& n) {
  return n.domain.empty() && (n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") &&
         n.outputs.size() == 1;
}

// Index of the residual input of a FusedConv with an "Add" post-op, or -1.
int ResidualIndex(const Node& n) {
  if (n.domain != "kiln") return -1;
  for (const std::string& op : n.GetStrings("post_ops")) {
    if (op == "Add") return static_cast<int>(n.inputs.size()) - 1;
  }
  return -1;
}

bool HasSubgraphs(const Graph& g) {
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.removed) continue;
    for (const auto& [key, attr] : n.attrs) {
      if (std::holds_alternative<ir::GraphPtr>(attr) ||
          std::holds_alternative<std::vector<ir::GraphPtr>>(attr)) {
        return true;
      }
    }
  }
  return false;
}

bool SetFlag(Node& n, const char* name, bool on) {
  const bool was = n.GetInt(name, 0) != 0;
  if (was == on) return false;
  if (on) {
    n.attrs[name] = int64_t{1};
  } else {
    n.attrs.erase(name);
  }
  return true;
}

absl::Status ChannelsLastConvLayout(Graph& g, PassContext& ctx) {
  // Subgraph bodies read outer values through captures that this pass does not follow.
  if (HasSubgraphs(g)) return absl::OkStatus();
  const std::vector<std::vector<NodeId>> consumers = g.Consumers();
  const std::set<ValueId> graph_outputs(g.outputs.begin(), g.outputs.end());
  std::set<ValueId> channels_last;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.removed || !IsConv2D(g, n)) continue;
    const ValueId y = n.outputs[0];
    if (graph_outputs.count(y) || consumers[y].empty()) continue;
    bool all_convs = true;
    for (NodeId c : consumers[y]) {
      const Node& reader = g.node(c);
      const int residual = IsConv2D(g, reader) ? ResidualIndex(reader) : -1;
      bool ok = false;
      if (IsConv2D(g, reader)) {
        // Read as X or as the residual only (a conv reading it as weights or bias cannot).
        ok = true;
        for (size_t i = 1; i < reader.inputs.size(); ++i) {
          if (reader.inputs[i] == y && static_cast<int>(i) != residual) ok = false;
        }
      } else if (IsGlobalPool(reader)) {
        ok = reader.inputs.size() == 1;
      }
      all_convs = all_convs && ok;
    }
    if (all_convs) channels_last.insert(y);
  }
  int marked_values = static_cast<int>(channels_last.size());
  int changed_nodes = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& n = g.node(id);
    if (n.removed) continue;
    bool changed = false;
    if (IsConv2D(g, n)) {
      const int residual = ResidualIndex(n);
      changed |= SetFlag(n, "x_channels_last", channels_last.count(n.inputs[0]) > 0);
      changed |= SetFlag(n, "y_channels_last", channels_last.count(n.outputs[0]) > 0);
      changed |= SetFlag(n, "residual_channels_last",
                         residual >= 0 && channels_last.count(n.inputs[residual]) > 0);
    } else if (IsGlobalPool(n)) {
      changed |= SetFlag(n, "x_channels_last", channels_last.count(n.inputs[0]) > 0);
    } else {
      for (const char* attr : kLayoutAttrs) changed |= SetFlag(n, attr, false);
    }
    if (changed) ++changed_nodes;
  }
  if (changed_nodes > 0) {
    ctx.Note(absl::StrCat(marked_values, " conv outputs kept channels-last (NHWC bytes) across ",
                          changed_nodes, " nodes"));
  }
  return absl::OkStatus();
}

}  // namespace

// After fusion (post-ops decide which values are conv outputs), before dead-code elimination.
KILN_REGISTER_PASS("channels_last_conv_layout", 400, ChannelsLastConvLayout);

}  // namespace kiln::opt
