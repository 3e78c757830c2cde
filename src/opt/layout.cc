// Channels-last memory for chains of 2-D convolutions.
//
// Kiln's tensors are NCHW, but oneDNN's fastest fp32 convolutions (brgconv, brdgmm) read and
// write NHWC. Left alone, every conv reorders its input to NHWC and its output back: on
// MobileNet-v2 at batch 32 those reorders took more time than the convolutions themselves.
// This pass marks each value that a 2-D conv (or a max/average pool of such a value) produces
// and that only 2-D convs (as input or as residual) and pools read as channels-last: the value keeps its logical NCHW shape, its
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

// MaxPool / AveragePool that the pooling kernel runs on NHWC bytes (output NHWC as well):
// 2-D windows without Indices or dilations; average pooling without count_include_pad.
bool IsWindowPool(const Graph& g, const Node& n) {
  if (!n.domain.empty() || (n.op != "MaxPool" && n.op != "AveragePool")) return false;
  if (n.inputs.size() != 1 || n.outputs.empty()) return false;
  if (n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue) return false;
  if (n.GetInts("kernel_shape").size() != 2) return false;
  for (int64_t d : n.GetInts("dilations")) {
    if (d != 1) return false;
  }
  if (n.op == "AveragePool" && n.GetInt("count_include_pad", 0) != 0) return false;
  (void)g;
  return true;
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
  // Candidates: outputs of 2-D convs and window pools whose every reader can take NHWC bytes.
  // A window pool writes NHWC only when it reads NHWC, so candidates are then pruned until
  // every pool's input and output agree.
  std::set<ValueId> channels_last;
  auto reader_accepts = [&](const Node& reader, ValueId v) {
    if (IsConv2D(g, reader)) {
      // As X or as the residual only (a conv reading it as weights or bias cannot).
      const int residual = ResidualIndex(reader);
      for (size_t i = 1; i < reader.inputs.size(); ++i) {
        if (reader.inputs[i] == v && static_cast<int>(i) != residual) return false;
      }
      return true;
    }
    return IsGlobalPool(reader) || IsWindowPool(g, reader);
  };
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.removed || !(IsConv2D(g, n) || IsWindowPool(g, n))) continue;
    const ValueId y = n.outputs[0];
    if (graph_outputs.count(y) || consumers[y].empty()) continue;
    bool accepted = true;
    for (NodeId c : consumers[y]) accepted = accepted && reader_accepts(g.node(c), y);
    if (accepted) channels_last.insert(y);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (n.removed || !IsWindowPool(g, n)) continue;
      const bool in = channels_last.count(n.inputs[0]) > 0;
      const bool out = channels_last.count(n.outputs[0]) > 0;
      if (in != out) {
        channels_last.erase(n.inputs[0]);
        channels_last.erase(n.outputs[0]);
        changed = true;
      }
    }
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
    } else if (IsGlobalPool(n) || IsWindowPool(g, n)) {
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
