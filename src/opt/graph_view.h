// What the rewrite passes (fusion.cc, simplify.cc, batchnorm_folding.cc, layout.cc,
// winograd_share.cc) ask of a graph while they match patterns: producers, private (singly-read)
// values, constants and scalar constants, 2-D convolutions, and the float-comparison rules their
// patterns use. Internal to src/opt/.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/int8_ops.h"

namespace kiln::opt {

// The IR names every pass file uses, declared once here for src/opt/.
using ir::Graph;
using ir::kNoNode;
using ir::kNoValue;
using ir::Node;
using ir::NodeId;
using ir::ValueId;

// Read-only facts about the graph that the rewrites consult; Refresh() after each rewrite.
class GraphView {
 public:
  explicit GraphView(ir::Graph& g) : g_(g) { Refresh(); }
  void Refresh() {
    consumers_ = g_.Consumers();
    outputs_.clear();
    outputs_.insert(g_.outputs.begin(), g_.outputs.end());
  }
  ir::Graph& graph() { return g_; }

  // The live node producing `v`, or null.
  ir::Node* Producer(ir::ValueId v) {
    if (v < 0 || v >= g_.num_values()) return nullptr;
    const ir::NodeId p = g_.value(v).producer;
    if (p == ir::kNoNode || g_.node(p).removed) return nullptr;
    return &g_.node(p);
  }
  // True when `v` is read by exactly one node, once, as a plain input (not a subgraph capture),
  // and is not a graph output: a rewrite may then absorb it.
  bool IsPrivate(ir::ValueId v) const {
    if (v < 0 || v >= static_cast<ir::ValueId>(consumers_.size()) || outputs_.count(v)) {
      return false;
    }
    if (consumers_[v].size() != 1) return false;
    const ir::Node& reader = g_.node(consumers_[v][0]);
    return std::count(reader.inputs.begin(), reader.inputs.end(), v) == 1;
  }
  // Number of reads of `v` (counting repeated inputs of one node), or -1 if it escapes.
  int Reads(ir::ValueId v) const {
    if (outputs_.count(v)) return -1;
    int reads = 0;
    for (ir::NodeId id : consumers_[v]) {
      const ir::Node& n = g_.node(id);
      const int c = static_cast<int>(std::count(n.inputs.begin(), n.inputs.end(), v));
      if (c == 0) return -1;  // a subgraph capture
      reads += c;
    }
    return reads;
  }
  ir::Node* SoleConsumer(ir::ValueId v) {
    if (!IsPrivate(v)) return nullptr;
    return &g_.node(consumers_[v][0]);
  }
  const Tensor* Constant(ir::ValueId v) const {
    if (v < 0 || v >= g_.num_values() || !g_.value(v).constant) return nullptr;
    return &*g_.value(v).constant;
  }
  std::optional<float> ScalarFloat(ir::ValueId v) const {
    const Tensor* t = Constant(v);
    if (t == nullptr || t->num_elements() != 1) return std::nullopt;
    if (t->dtype() == DType::kFloat32) return t->data<float>()[0];
    if (t->dtype() == DType::kFloat64) return static_cast<float>(t->data<double>()[0]);
    return std::nullopt;
  }
  // True when a one-element constant `c` broadcast against `x` cannot raise the result's rank
  // (a pattern that treats it as a scalar must not change the output's shape).
  bool KeepsRankOf(ir::ValueId c, ir::ValueId x) const {
    const Tensor* t = Constant(c);
    if (t == nullptr || t->rank() == 0) return true;
    const ir::TensorType& xt = g_.value(x).type;
    return xt.rank_known ? t->rank() <= xt.rank() : t->rank() <= 1;
  }
  bool IsFloat(ir::ValueId v) const {
    return v >= 0 && v < g_.num_values() && g_.value(v).type.dtype == DType::kFloat32;
  }

 private:
  ir::Graph& g_;
  std::vector<std::vector<ir::NodeId>> consumers_;
  std::set<ir::ValueId> outputs_;
};

// A 2-D float convolution with constant weights (Conv, FusedConv, FusedConvDepthwise), the
// kind whose layout and algorithm the passes choose.
inline bool IsConv2D(const Graph& g, const Node& n) {
  const bool conv =
      (n.domain.empty() && n.op == "Conv") || ir::IsFusedConv(n) || ir::IsFusedConvDepthwise(n);
  if (!conv || n.inputs.size() < 2 || n.outputs.empty()) return false;
  const ValueId w = n.inputs[1];
  if (w < 0 || w >= g.num_values() || !g.value(w).constant) return false;
  const Tensor& weights = *g.value(w).constant;
  return weights.dtype() == DType::kFloat32 && weights.rank() == 4;
}

// A live ONNX-domain node of operator `op`.
inline bool Is(const ir::Node* n, absl::string_view op) {
  return n != nullptr && !n->removed && n->domain.empty() && n->op == op;
}

// A pattern's irrational constants (1/sqrt(2)) are matched within a few float ulps, which is
// how differently-computed float32 roundings of the same number differ. A looser match would
// change what the graph computes: x / 1.4143 is not GELU's x / sqrt(2).
inline bool Near(std::optional<float> v, float target, float tol = 1e-6f) {
  return v.has_value() && std::fabs(*v - target) <= tol * std::max(1.0f, std::fabs(target));
}

// Rational constants (0.5, 1, 2) are matched exactly: a Mul by 0.5001 is not a GELU's halving.
inline bool Exactly(std::optional<float> v, float target) { return v.has_value() && *v == target; }

// Makes `producer` produce `value` as its output `index` (used when a rewrite makes an earlier
// node compute what the last node of a pattern produced). The value keeps its type, which is
// what shape inference would give it: the rewrite computes the same tensor.
inline void TakeOverOutput(ir::Graph& g, ir::NodeId producer, int index, ir::ValueId value) {
  g.node(producer).outputs[index] = value;
  g.value(value).producer = producer;
  g.value(value).producer_output = index;
}

inline ir::NodeId IdOf(ir::Graph& g, const ir::Node* n) {
  return static_cast<ir::NodeId>(n - &g.node(0));
}

// The kiln::Int8Conv (kiln/ir/int8_ops.h) that replaces the convolution `conv`
// (compress_conv.cc, fuse_qdq.cc): its name and window attributes, the fused post-ops, the
// input's quantization and the weights' scales per output channel. The caller adds the inputs,
// outputs and output quantization.
inline ir::Node Int8ConvReplacing(const ir::Node& conv, const std::vector<ir::PostOp>& post_ops,
                                  float x_scale, int64_t x_zero_point,
                                  const std::vector<float>& w_scales) {
  ir::Node n;
  n.op = ir::kInt8ConvOp;
  n.domain = "kiln";
  n.name = conv.name;
  for (const char* attr : {"strides", "pads", "dilations", "group", "auto_pad", "kernel_shape"}) {
    auto it = conv.attrs.find(attr);
    if (it != conv.attrs.end()) n.attrs[attr] = it->second;
  }
  ir::SetPostOps(n, post_ops);
  n.attrs["x_scale"] = x_scale;
  n.attrs["x_zero_point"] = x_zero_point;
  n.attrs["w_scales"] = w_scales;
  return n;
}

// "Div 'a' + Erf 'b' + Add 'c'": the nodes a rewrite replaced, for its ctx.Note.
inline std::string DescribeNodes(const std::vector<const ir::Node*>& nodes) {
  std::string out;
  for (const ir::Node* n : nodes) absl::StrAppend(&out, out.empty() ? "" : " + ", n->Describe());
  return out;
}

}  // namespace kiln::opt
