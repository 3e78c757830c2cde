// Keeps chains of 2-D convolutions and pools in the memory layout this CPU's convolutions
// read and write (PassOptions::conv_activation_layout), so that no reorder runs between them.
//
// Kiln's tensors are NCHW, but oneDNN's fastest fp32 convolutions want another layout, and
// which one depends on the ISA: NHWC for AVX-512 brgconv, nChw8c for the AVX2 jit kernels.
// Left alone, every conv reorders its input into that layout and its output back: on
// MobileNet-v2 those reorders took as long as the convolutions themselves. This pass gives
// the layout (ir::Value::layout: the value keeps its logical NCHW shape, its bytes are in that
// layout) to each value that a 2-D conv, a max/average pool or a layout-transparent node
// (ir/layout_transparent.h: elementwise ops such as an unfused Relu, Clip or residual Add on
// one shape, channel Concat) produces and that only such nodes and global pools read. A pool
// or transparent node reads and writes one layout, so its inputs and outputs are kept or left
// plain together: a graph input or output, or a reader that needs NCHW (Flatten, a
// per-channel broadcast), makes the whole connected stretch plain, and its convs reorder at
// that border. Kernels see the layout through InputInfo::layout and
// ReshapeContext::output_layouts; ir::Verify checks every reader can. Decisions are
// recomputed from scratch on every run of the pass, so a later rewrite never leaves a stale
// layout.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/layout_transparent.h"
#include "kiln/ir/op_traits.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"
#include "opt/winograd_share.h"

namespace kiln::opt {
namespace {

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

// A window pool whose output is one pixel ([N, C, 1, 1], as ResNet-50's last 7x7
// AveragePool): those bytes are the same in every layout, so, like a global pool, it reads the
// layout and writes plain, ending the chain without a reorder.
bool IsPixelPool(const Graph& g, const Node& n) {
  if (!IsWindowPool(g, n)) return false;
  const ir::TensorType& type = g.value(n.outputs[0]).type;
  return type.rank_known && type.rank() == 4 && type.dims[2].value == 1 && type.dims[3].value == 1;
}

bool HasSubgraphs(const Graph& g) {
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (!n.removed && ir::HasSubgraph(n)) return true;
  }
  return false;
}

absl::Status ConvActivationLayout(Graph& g, PassContext& ctx) {
  ir::MemoryLayout target = ctx.options().conv_activation_layout;
  const ir::MemoryLayout winograd_layout = ctx.options().winograd_conv_layout;
  std::string winograd_share;
  if (target != ir::MemoryLayout::kPlain && winograd_layout != ir::MemoryLayout::kPlain &&
      winograd_layout != target && WinogradCarriesMostWork(g, 16, &winograd_share)) {
    // Winograd reads and writes its own blocked layout; kept across the chains, the direct
    // convolutions between run in it too (nn_conv.cc) and nothing reorders.
    target = winograd_layout;
  }
  std::set<ValueId> kept;
  // Subgraph bodies read outer values through captures that this pass does not follow.
  if (target != ir::MemoryLayout::kPlain && !HasSubgraphs(g)) {
    const std::vector<std::vector<NodeId>> consumers = g.Consumers();
    const std::set<ValueId> graph_outputs(g.outputs.begin(), g.outputs.end());
    const int64_t block = ir::ChannelBlock(target);
    auto fits = [&](ValueId v) {
      const ir::TensorType& type = g.value(v).type;
      if (type.dtype != DType::kFloat32 || !type.rank_known || type.rank() != 4) return false;
      return block == 0 || (type.dims[1].is_known() && type.dims[1].value % block == 0);
    };
    // Layout-transparent nodes (ir/layout_transparent.h: elementwise ops on one shape, channel
    // Concat) and the inputs that carry their layout.
    std::vector<std::vector<size_t>> carrying(g.num_nodes());
    std::vector<bool> transparent(g.num_nodes(), false);
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (!n.removed) transparent[id] = ir::LayoutTransparentInputs(g, n, &carrying[id]);
    }
    auto carries = [&](NodeId id, ValueId v) {
      for (size_t i : carrying[id]) {
        if (g.node(id).inputs[i] == v) return true;
      }
      return false;
    };
    auto reader_accepts = [&](NodeId reader_id, ValueId v) {
      const Node& reader = g.node(reader_id);
      if (IsConv2D(g, reader)) {
        // As X or as the residual only (a conv reading it as weights or bias cannot).
        const int residual = ir::ResidualInput(reader);
        for (size_t i = 1; i < reader.inputs.size(); ++i) {
          if (reader.inputs[i] == v && static_cast<int>(i) != residual) return false;
        }
        return true;
      }
      if (transparent[reader_id]) {
        // Only where v carries the layout (not, say, as a Clip bound).
        for (size_t i = 0; i < reader.inputs.size(); ++i) {
          if (reader.inputs[i] == v && !carries(reader_id, v)) return false;
        }
        return true;
      }
      return IsGlobalPool(reader) || IsWindowPool(g, reader);
    };
    // Candidates: outputs of 2-D convs, window pools and transparent nodes whose every reader
    // takes the layout.
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (n.removed || IsPixelPool(g, n) ||
          !(IsConv2D(g, n) || IsWindowPool(g, n) || transparent[id])) {
        continue;
      }
      const size_t outputs = transparent[id] ? n.outputs.size() : 1;
      for (size_t o = 0; o < outputs; ++o) {
        const ValueId y = n.outputs[o];
        if (y == ir::kNoValue || graph_outputs.count(y) || consumers[y].empty() || !fits(y)) {
          continue;
        }
        bool accepted = true;
        for (NodeId c : consumers[y]) accepted = accepted && reader_accepts(c, y);
        if (accepted) kept.insert(y);
      }
    }
    // A window pool or a transparent node writes the layout it reads: prune until each one's
    // layout-carrying inputs and outputs are all kept or all plain (a plain graph input
    // added to a conv's output makes the add, and so that output, plain).
    std::vector<std::vector<ValueId>> tied(g.num_nodes());
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (n.removed) continue;
      if (IsPixelPool(g, n)) continue;
      if (IsWindowPool(g, n)) {
        tied[id] = {n.inputs[0], n.outputs[0]};
      } else if (transparent[id]) {
        for (size_t i : carrying[id]) tied[id].push_back(n.inputs[i]);
        for (ValueId y : n.outputs) {
          if (y != ir::kNoValue) tied[id].push_back(y);
        }
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (const std::vector<ValueId>& values : tied) {
        size_t in = 0;
        for (ValueId v : values) in += kept.count(v);
        if (in == 0 || in == values.size()) continue;
        for (ValueId v : values) kept.erase(v);
        changed = true;
      }
    }
  }
  bool changed = false;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    ir::Value& value = g.value(v);
    const ir::MemoryLayout layout = kept.count(v) ? target : ir::MemoryLayout::kPlain;
    if (value.layout == layout) continue;
    if (!changed && !winograd_share.empty()) {
      ctx.Note(absl::StrCat("chains kept in ", ir::MemoryLayoutName(target),
                            ", Winograd's layout: its 3x3 convolutions carry ", winograd_share,
                            " of the convolutions' multiply-adds"));
    }
    changed = true;
    value.layout = layout;
    ctx.Note(absl::StrCat("'", value.name, "' kept in ", ir::MemoryLayoutName(layout)));
  }
  return absl::OkStatus();
}

}  // namespace

// After fusion (post-ops decide which values are conv outputs), before dead-code elimination.
KILN_REGISTER_PASS_KEEPING_TYPES("conv_activation_layout", 400, ConvActivationLayout);

}  // namespace kiln::opt
