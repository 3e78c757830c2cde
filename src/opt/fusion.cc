#include "kiln/opt/fusion.h"

#include <cmath>
#include <limits>
#include <optional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/op_traits.h"
#include "kiln/kernels/fused_elementwise.h"
#include "kiln/kernels/fused_post_ops.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::kNoNode;
using ir::kNoValue;
using ir::Node;
using ir::NodeId;
using ir::ValueId;

// Read-only facts about the graph that the rewrites consult; Refresh() after each rewrite.
class GraphView {
 public:
  explicit GraphView(Graph& g) : g_(g) { Refresh(); }
  void Refresh() {
    consumers_ = g_.Consumers();
    outputs_.clear();
    outputs_.insert(g_.outputs.begin(), g_.outputs.end());
  }
  Graph& graph() { return g_; }

  // The live node producing `v`, or null.
  Node* Producer(ValueId v) {
    if (v < 0 || v >= g_.num_values()) return nullptr;
    const NodeId p = g_.value(v).producer;
    if (p == kNoNode || g_.node(p).removed) return nullptr;
    return &g_.node(p);
  }
  NodeId ProducerId(ValueId v) const {
    if (v < 0 || v >= g_.num_values()) return kNoNode;
    return g_.value(v).producer;
  }
  // True when `v` is read by exactly one node, once, as a plain input (not a subgraph capture),
  // and is not a graph output: a rewrite may then absorb it.
  bool IsPrivate(ValueId v) const {
    if (v < 0 || v >= static_cast<ValueId>(consumers_.size()) || outputs_.count(v)) return false;
    if (consumers_[v].size() != 1) return false;
    const Node& reader = g_.node(consumers_[v][0]);
    return std::count(reader.inputs.begin(), reader.inputs.end(), v) == 1;
  }
  // Number of reads of `v` (counting repeated inputs of one node), or -1 if it escapes.
  int Reads(ValueId v) const {
    if (outputs_.count(v)) return -1;
    int reads = 0;
    for (NodeId id : consumers_[v]) {
      const Node& n = g_.node(id);
      const int c = static_cast<int>(std::count(n.inputs.begin(), n.inputs.end(), v));
      if (c == 0) return -1;  // a subgraph capture
      reads += c;
    }
    return reads;
  }
  Node* SoleConsumer(ValueId v) {
    if (!IsPrivate(v)) return nullptr;
    return &g_.node(consumers_[v][0]);
  }
  const Tensor* Constant(ValueId v) const {
    if (v < 0 || v >= g_.num_values() || !g_.value(v).constant) return nullptr;
    return &*g_.value(v).constant;
  }
  std::optional<float> ScalarFloat(ValueId v) const {
    const Tensor* t = Constant(v);
    if (t == nullptr || t->num_elements() != 1) return std::nullopt;
    if (t->dtype() == DType::kFloat32) return t->data<float>()[0];
    if (t->dtype() == DType::kFloat64) return static_cast<float>(t->data<double>()[0]);
    return std::nullopt;
  }
  // True when a one-element constant `c` broadcast against `x` cannot raise the result's rank
  // (a pattern that treats it as a scalar must not change the output's shape).
  bool KeepsRankOf(ValueId c, ValueId x) const {
    const Tensor* t = Constant(c);
    if (t == nullptr || t->rank() == 0) return true;
    const ir::TensorType& xt = g_.value(x).type;
    return xt.rank_known ? t->rank() <= xt.rank() : t->rank() <= 1;
  }
  bool IsFloat(ValueId v) const {
    return v >= 0 && v < g_.num_values() && g_.value(v).type.dtype == DType::kFloat32;
  }

 private:
  Graph& g_;
  std::vector<std::vector<NodeId>> consumers_;
  std::set<ValueId> outputs_;
};

bool Is(const Node* n, absl::string_view op) {
  return n != nullptr && !n->removed && n->domain.empty() && n->op == op;
}

// A pattern's irrational constants (1/sqrt(2)) are matched within a few float ulps, which is
// how differently-computed float32 roundings of the same number differ. A looser match would
// change what the graph computes: x / 1.4143 is not GELU's x / sqrt(2).
bool Near(std::optional<float> v, float target, float tol = 1e-6f) {
  return v.has_value() && std::fabs(*v - target) <= tol * std::max(1.0f, std::fabs(target));
}

// Rational constants (0.5, 1, 2) are matched exactly: a Mul by 0.5001 is not a GELU's halving.
bool Exactly(std::optional<float> v, float target) { return v.has_value() && *v == target; }

// Moves `to`'s output value so that `from` now produces it (used when a rewrite makes an
// earlier node compute what the last node of a pattern produced).
void TakeOverOutput(Graph& g, NodeId producer, int index, ValueId value) {
  g.node(producer).outputs[index] = value;
  g.value(value).producer = producer;
  g.value(value).producer_output = index;
}

NodeId IdOf(Graph& g, const Node* n) { return static_cast<NodeId>(n - &g.node(0)); }

}  // namespace

absl::StatusOr<std::string> FoldBatchNormIntoConv(Graph& g) {
  GraphView view(g);
  int folded = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& bn = g.node(id);
    if (!Is(&bn, "BatchNormalization") || bn.inputs.size() < 5 || bn.GetInt("training_mode", 0) != 0) continue;
    if (bn.outputs.size() > 1 && std::any_of(bn.outputs.begin() + 1, bn.outputs.end(),
                                             [&](ValueId v) { return v != kNoValue && view.Reads(v) != 0; })) {
      continue;
    }
    Node* conv = view.Producer(bn.inputs[0]);
    if (!Is(conv, "Conv") || !view.IsPrivate(bn.inputs[0]) || conv->inputs.size() < 2) continue;
    const Tensor* w = view.Constant(conv->inputs[1]);
    const Tensor* b = conv->inputs.size() > 2 ? view.Constant(conv->inputs[2]) : nullptr;
    if (conv->inputs.size() > 2 && conv->inputs[2] != kNoValue && b == nullptr) continue;
    const Tensor* scale = view.Constant(bn.inputs[1]);
    const Tensor* shift = view.Constant(bn.inputs[2]);
    const Tensor* mean = view.Constant(bn.inputs[3]);
    const Tensor* var = view.Constant(bn.inputs[4]);
    if (!w || !scale || !shift || !mean || !var || w->dtype() != DType::kFloat32) continue;
    const int64_t m = w->dim(0);
    bool ok = scale->num_elements() == m && shift->num_elements() == m && mean->num_elements() == m &&
              var->num_elements() == m && (!b || b->num_elements() == m);
    for (const Tensor* t : {scale, shift, mean, var}) ok = ok && t->dtype() == DType::kFloat32;
    if (!ok) continue;
    const float eps = bn.GetFloat("epsilon", 1e-5f);
    Tensor new_w = w->Clone();
    Tensor new_b(DType::kFloat32, Shape{m});
    const int64_t per_channel = w->num_elements() / std::max<int64_t>(1, m);
    // Folding scales the weights before the convolution instead of its output after. That
    // computes the same only while the factor and the scaled weights are ordinary numbers: an
    // infinite factor (var + eps == 0) turns a zero weight into NaN where the unfused graph has
    // 0 * Inf only for a zero output, and a weight that overflows (or underflows to 0) when
    // scaled makes 0 * w (or Inf * w) NaN where the unfused graph has 0 (or Inf). Such a
    // BatchNorm stays as it is.
    bool exact = true;
    for (int64_t c = 0; c < m && exact; ++c) {
      // The factor exactly as the BatchNormalization kernel computes it.
      const float s = scale->data<float>()[c] / std::sqrt(var->data<float>()[c] + eps);
      exact = std::isfinite(s);
      float* row = new_w.data<float>() + c * per_channel;
      for (int64_t i = 0; i < per_channel && exact; ++i) {
        const float scaled = row[i] * s;
        exact = !(std::isfinite(row[i]) && !std::isfinite(scaled)) &&
                !(row[i] != 0.0f && s != 0.0f && scaled == 0.0f);
        row[i] = scaled;
      }
      const float bias = b ? b->data<float>()[c] : 0.0f;
      new_b.data<float>()[c] = (bias - mean->data<float>()[c]) * s + shift->data<float>()[c];
    }
    if (!exact) continue;
    const NodeId conv_id = IdOf(g, conv);
    const ValueId w_id = g.AddConstant(g.value(conv->inputs[1]).name + "_bnfolded", std::move(new_w));
    const ValueId b_id = g.AddConstant(g.UniqueName(conv->name + "_bias_bnfolded"), std::move(new_b));
    Node& c = g.node(conv_id);  // AddConstant may not move nodes, but keep the reference fresh
    c.inputs.resize(3);
    c.inputs[1] = w_id;
    c.inputs[2] = b_id;
    g.node(id).removed = true;
    TakeOverOutput(g, conv_id, 0, g.node(id).outputs[0]);
    ++folded;
    view.Refresh();
  }
  return folded ? absl::StrCat("folded ", folded, " BatchNormalization into Conv") : "";
}

// Dropping the inner Reshape of Reshape(Reshape(x, inner), outer) must not turn an error into
// an answer (onnx_graph_fuzz: x[2,1,1,5] reshaped to [] and then to [-1] ran when merged). A
// target of known product P (no -1) fails unless x has P elements; with a -1 it fails unless
// x's count is a multiple of P. So the outer fails whenever the inner does when both have no -1
// and equal products, or both have a -1 and the inner's product divides the outer's. Zeros
// (copy a dimension) and other negatives are not reasoned about.
static bool OuterReshapeFailsWheneverInnerDoes(const Tensor& inner, const Tensor& outer) {
  auto product = [](const Tensor& shape, bool* inferred) -> std::optional<int64_t> {
    int64_t p = 1;
    *inferred = false;
    for (int64_t d : shape.span<int64_t>()) {
      if (d == -1 && !*inferred) {
        *inferred = true;
      } else if (d <= 0 || __builtin_mul_overflow(p, d, &p)) {
        return std::nullopt;
      }
    }
    return p;
  };
  bool inner_inferred, outer_inferred;
  const std::optional<int64_t> p_in = product(inner, &inner_inferred);
  const std::optional<int64_t> p_out = product(outer, &outer_inferred);
  if (!p_in || !p_out || inner_inferred != outer_inferred) return false;
  return inner_inferred ? *p_out % *p_in == 0 : *p_in == *p_out;
}

absl::StatusOr<std::string> EliminateIdentityTransposeReshape(Graph& g) {
  GraphView view(g);
  int identities = 0, transposes = 0, reshapes = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& n = g.node(id);
    if (n.removed || !n.domain.empty() || n.inputs.empty() || n.outputs.empty()) continue;
    const ValueId out = n.outputs[0];
    // Readers of `out` must be plain inputs (not captures) and it must not be a graph output.
    auto bypass = [&](ValueId replacement) {
      if (view.Reads(out) < 0) return false;
      g.ReplaceAllUses(out, replacement);
      n.removed = true;
      view.Refresh();
      return true;
    };
    if (n.op == "Identity" ||
        (n.op == "Dropout" && (n.outputs.size() < 2 || n.outputs[1] == kNoValue || view.Reads(n.outputs[1]) == 0) &&
         (n.inputs.size() < 3 || n.inputs[2] == kNoValue ||
          (view.Constant(n.inputs[2]) && !view.Constant(n.inputs[2])->data<bool>()[0])))) {
      if (bypass(n.inputs[0])) ++identities;
      continue;
    }
    if (n.op == "Transpose") {
      const int rank = g.value(n.inputs[0]).type.rank_known ? g.value(n.inputs[0]).type.rank() : -1;
      std::vector<int64_t> perm = n.GetInts("perm");
      if (perm.empty()) {
        if (rank < 0) continue;
        for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
      }
      bool identity = true;
      for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
      if (identity) {
        if (bypass(n.inputs[0])) ++transposes;
        continue;
      }
      Node* inner = view.Producer(n.inputs[0]);
      if (Is(inner, "Transpose") && view.IsPrivate(n.inputs[0])) {
        std::vector<int64_t> p1 = inner->GetInts("perm");
        if (p1.empty() || p1.size() != perm.size()) continue;
        std::vector<int64_t> composed(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) composed[i] = p1[perm[i]];
        n.inputs[0] = inner->inputs[0];
        n.attrs["perm"] = composed;
        inner->removed = true;
        ++transposes;
        view.Refresh();
        --id;  // look at this node again: it may now be an identity
      }
      continue;
    }
    if (n.op == "Reshape" && n.inputs.size() >= 2) {
      Node* inner = view.Producer(n.inputs[0]);
      const Tensor* shape = view.Constant(n.inputs[1]);
      if (!Is(inner, "Reshape") || !view.IsPrivate(n.inputs[0]) || shape == nullptr ||
          shape->dtype() != DType::kInt64) {
        continue;
      }
      bool has_zero = false;
      for (int64_t d : shape->span<int64_t>()) has_zero = has_zero || d == 0;
      if (has_zero) continue;  // 0 copies a dimension of the (inner) input: not composable
      const Tensor* inner_shape =
          inner->inputs.size() >= 2 ? view.Constant(inner->inputs[1]) : nullptr;
      if (inner_shape == nullptr || inner_shape->dtype() != DType::kInt64 ||
          !OuterReshapeFailsWheneverInnerDoes(*inner_shape, *shape)) {
        continue;
      }
      n.inputs[0] = inner->inputs[0];
      inner->removed = true;
      ++reshapes;
      view.Refresh();
    }
  }
  std::vector<std::string> parts;
  if (identities) parts.push_back(absl::StrCat("removed ", identities, " Identity/Dropout"));
  if (transposes) parts.push_back(absl::StrCat("removed or merged ", transposes, " Transpose"));
  if (reshapes) parts.push_back(absl::StrCat("merged ", reshapes, " Reshape chains"));
  std::string summary;
  for (const std::string& p : parts) summary += (summary.empty() ? "" : "; ") + p;
  return summary;
}

absl::StatusOr<std::string> FuseGelu(Graph& g) {
  GraphView view(g);
  int fused = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& erf = g.node(id);
    if (!Is(&erf, "Erf")) continue;
    // x / sqrt(2) or x * (1 / sqrt(2))
    Node* scaled = view.Producer(erf.inputs[0]);
    if (scaled == nullptr || !view.IsPrivate(erf.inputs[0])) continue;
    ValueId x = kNoValue;
    if (Is(scaled, "Div") && Near(view.ScalarFloat(scaled->inputs[1]), 1.41421356f)) {
      x = scaled->inputs[0];
    } else if (Is(scaled, "Mul")) {
      for (int i = 0; i < 2; ++i) {
        if (Near(view.ScalarFloat(scaled->inputs[1 - i]), 0.70710678f)) x = scaled->inputs[i];
      }
    }
    if (x == kNoValue || !view.IsFloat(x)) continue;
    std::vector<ValueId> constants = {scaled->inputs[0] == x ? scaled->inputs[1]
                                                             : scaled->inputs[0]};
    Node* add = view.SoleConsumer(erf.outputs[0]);
    if (!Is(add, "Add")) continue;
    const int erf_side = add->inputs[0] == erf.outputs[0] ? 0 : 1;
    if (!Exactly(view.ScalarFloat(add->inputs[1 - erf_side]), 1.0f)) continue;
    constants.push_back(add->inputs[1 - erf_side]);
    Node* mul1 = view.SoleConsumer(add->outputs[0]);
    if (!Is(mul1, "Mul")) continue;
    const ValueId other = mul1->inputs[0] == add->outputs[0] ? mul1->inputs[1] : mul1->inputs[0];
    std::vector<Node*> chain = {scaled, &erf, add, mul1};
    ValueId out = kNoValue;
    if (other == x) {
      // (x * (1 + erf)) * 0.5
      Node* mul2 = view.SoleConsumer(mul1->outputs[0]);
      if (!Is(mul2, "Mul")) continue;
      const int side = mul2->inputs[0] == mul1->outputs[0] ? 0 : 1;
      if (!Exactly(view.ScalarFloat(mul2->inputs[1 - side]), 0.5f)) continue;
      constants.push_back(mul2->inputs[1 - side]);
      chain.push_back(mul2);
      out = mul2->outputs[0];
    } else {
      // (x * 0.5) * (1 + erf)
      Node* half = view.Producer(other);
      if (!Is(half, "Mul") || !view.IsPrivate(other)) continue;
      const int side = half->inputs[0] == x ? 0 : half->inputs[1] == x ? 1 : -1;
      if (side < 0 || !Exactly(view.ScalarFloat(half->inputs[1 - side]), 0.5f)) continue;
      constants.push_back(half->inputs[1 - side]);
      chain.push_back(half);
      out = mul1->outputs[0];
    }
    if (!std::all_of(constants.begin(), constants.end(),
                     [&](ValueId c) { return view.KeepsRankOf(c, x); })) {
      continue;
    }
    for (Node* n : chain) n->removed = true;
    Node gelu;
    gelu.op = "Gelu";
    gelu.name = erf.name.empty() ? "gelu" : erf.name + "_gelu";
    gelu.inputs = {x};
    gelu.outputs = {out};
    gelu.attrs["approximate"] = std::string("none");
    g.AddNode(std::move(gelu));
    ++fused;
    view.Refresh();
  }
  return fused ? absl::StrCat("fused ", fused, " decomposed GELU into Gelu") : "";
}

namespace {

// The single reduced axis of a ReduceMean (from its axes input or attribute), or nullopt.
std::optional<int64_t> SingleAxis(GraphView& view, const Node& n) {
  std::vector<int64_t> axes = n.GetInts("axes");
  if (axes.empty() && n.inputs.size() > 1) {
    const Tensor* t = view.Constant(n.inputs[1]);
    if (t && t->dtype() == DType::kInt64) axes.assign(t->data<int64_t>(), t->data<int64_t>() + t->num_elements());
  }
  if (axes.size() != 1 || n.GetInt("keepdims", 1) != 1) return std::nullopt;
  return axes[0];
}

}  // namespace

absl::StatusOr<std::string> FuseLayerNorm(Graph& g) {
  GraphView view(g);
  int fused = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& div = g.node(id);
    if (!Is(&div, "Div")) continue;
    Node* sub = view.Producer(div.inputs[0]);
    Node* sqrt = view.Producer(div.inputs[1]);
    if (!Is(sub, "Sub") || !Is(sqrt, "Sqrt") || !view.IsPrivate(div.inputs[1])) continue;
    const ValueId x = sub->inputs[0];
    Node* mean = view.Producer(sub->inputs[1]);
    if (!Is(mean, "ReduceMean") || mean->inputs[0] != x || !view.IsPrivate(sub->inputs[1])) continue;
    Node* add_eps = view.Producer(sqrt->inputs[0]);
    if (!Is(add_eps, "Add") || !view.IsPrivate(sqrt->inputs[0])) continue;
    const int var_side = view.ScalarFloat(add_eps->inputs[1]) ? 0 : 1;
    const std::optional<float> eps = view.ScalarFloat(add_eps->inputs[1 - var_side]);
    Node* var = view.Producer(add_eps->inputs[var_side]);
    if (!eps || !Is(var, "ReduceMean") || !view.IsPrivate(add_eps->inputs[var_side]) ||
        !view.KeepsRankOf(add_eps->inputs[1 - var_side], x)) {
      continue;
    }
    Node* sq = view.Producer(var->inputs[0]);
    if (sq == nullptr || !view.IsPrivate(var->inputs[0])) continue;
    const bool is_square =
        (Is(sq, "Pow") && sq->inputs[0] == sub->outputs[0] &&
         Exactly(view.ScalarFloat(sq->inputs[1]), 2.0f) && view.KeepsRankOf(sq->inputs[1], x)) ||
        (Is(sq, "Mul") && sq->inputs[0] == sub->outputs[0] && sq->inputs[1] == sub->outputs[0]);
    if (!is_square || view.Reads(sub->outputs[0]) != (Is(sq, "Mul") ? 3 : 2)) continue;
    const std::optional<int64_t> a1 = SingleAxis(view, *mean), a2 = SingleAxis(view, *var);
    const ir::TensorType& xt = g.value(x).type;
    // x's type may be unknown where shape inference has no rule for its producer (an
    // embedding Gather in BERT): axes [-1] still name the last axis, and the width then comes
    // from the gamma constant. The kernel checks the dtype and width when the plan is built.
    if (!a1 || !a2 || (xt.dtype != DType::kFloat32 && xt.dtype != DType::kInvalid)) continue;
    int64_t width = -1;
    if (xt.rank_known) {
      const int64_t rank = xt.rank();
      const int64_t axis = *a1 < 0 ? *a1 + rank : *a1;
      if (axis != rank - 1 || (*a2 < 0 ? *a2 + rank : *a2) != axis) continue;
      if (xt.dims[axis].is_known()) width = xt.dims[axis].value;
    } else if (*a1 != -1 || *a2 != -1) {
      continue;
    }
    std::vector<Node*> chain = {mean, sub, sq, var, add_eps, sqrt, &div};
    ValueId out = div.outputs[0];
    Node* affine_mul = nullptr;
    const Tensor* gamma_value = nullptr;
    if (Node* mul = view.SoleConsumer(out); Is(mul, "Mul")) {
      const ValueId c = mul->inputs[0] == out ? mul->inputs[1] : mul->inputs[0];
      const Tensor* t = view.Constant(c);
      if (t && t->dtype() == DType::kFloat32 && t->shape().rank() == 1 &&
          (width < 0 || t->num_elements() == width)) {
        affine_mul = mul;
        gamma_value = t;
        width = t->num_elements();
      }
    }
    if (width < 1) continue;
    Tensor gamma = Tensor::Zeros(DType::kFloat32, Shape{width});
    for (float& v : gamma.span<float>()) v = 1.0f;
    // No "+ beta" tail means no bias input, not a zero bias: -0.0 + 0.0 is +0.0.
    std::optional<Tensor> beta;
    // Optional affine tail: * gamma, + beta (constants over the last axis).
    if (affine_mul != nullptr) {
      gamma = *gamma_value->Reshape(Shape{width});
      chain.push_back(affine_mul);
      out = affine_mul->outputs[0];
      if (Node* add = view.SoleConsumer(out); Is(add, "Add")) {
        const ValueId cb = add->inputs[0] == out ? add->inputs[1] : add->inputs[0];
        const Tensor* tb = view.Constant(cb);
        if (tb && tb->dtype() == DType::kFloat32 && tb->num_elements() == width &&
            (xt.rank_known || tb->shape().rank() == 1)) {
          beta = *tb->Reshape(Shape{width});
          chain.push_back(add);
          out = add->outputs[0];
        }
      }
    }
    const std::string name = div.name.empty() ? "layernorm" : div.name + "_layernorm";
    for (Node* n : chain) n->removed = true;
    const ValueId gamma_id = g.AddConstant(name + "_gamma", gamma);
    Node ln;
    ln.op = "LayerNormalization";
    ln.name = name;
    ln.inputs = {x, gamma_id};
    if (beta) ln.inputs.push_back(g.AddConstant(name + "_beta", *beta));
    ln.outputs = {out};
    ln.attrs["axis"] = int64_t{-1};
    ln.attrs["epsilon"] = *eps;
    g.AddNode(std::move(ln));
    ++fused;
    view.Refresh();
  }
  return fused ? absl::StrCat("fused ", fused, " decomposed LayerNorm into LayerNormalization") : "";
}

namespace {

// The oneDNN post-op an activation node maps to, if any.
std::optional<std::tuple<std::string, float, float>> AsPostOp(GraphView& view, const Node& n) {
  if (!n.domain.empty()) return std::nullopt;
  if (n.op == "Relu" || n.op == "Sigmoid" || n.op == "Tanh" || n.op == "HardSwish" || n.op == "Softplus") {
    return std::make_tuple(n.op, 0.0f, 0.0f);
  }
  if (n.op == "LeakyRelu") return std::make_tuple(n.op, n.GetFloat("alpha", 0.01f), 0.0f);
  if (n.op == "Elu") return std::make_tuple(n.op, n.GetFloat("alpha", 1.0f), 0.0f);
  if (n.op == "Gelu") {
    return std::make_tuple(std::string(n.GetString("approximate", "none") == "tanh" ? "GeluTanh" : "Gelu"), 0.0f,
                           0.0f);
  }
  if (n.op == "Clip") {
    float lo = n.GetFloat("min", -std::numeric_limits<float>::infinity());
    float hi = n.GetFloat("max", std::numeric_limits<float>::infinity());
    if (n.inputs.size() > 1 && n.inputs[1] != kNoValue) {
      auto v = view.ScalarFloat(n.inputs[1]);
      if (!v) return std::nullopt;
      lo = *v;
    }
    if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
      auto v = view.ScalarFloat(n.inputs[2]);
      if (!v) return std::nullopt;
      hi = *v;
    }
    return std::make_tuple(std::string("Clip"), lo, hi);
  }
  return std::nullopt;
}

bool SameType(const ir::TensorType& a, const ir::TensorType& b) {
  if (!a.rank_known || !b.rank_known || a.rank() != b.rank() || a.dtype != b.dtype) return false;
  for (int i = 0; i < a.rank(); ++i) {
    const ir::Dim& x = a.dims[i];
    const ir::Dim& y = b.dims[i];
    if (x.is_known() ? !(y.is_known() && x.value == y.value) : (x.symbol.empty() || x.symbol != y.symbol)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> FuseConvMatMulPostOps(Graph& g) {
  GraphView view(g);
  int fused_nodes = 0, bias = 0, residual = 0, activations = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    {
      Node& n = g.node(id);
      if (n.removed || !n.domain.empty()) continue;
      const bool conv = n.op == "Conv";
      const bool matmul = n.op == "MatMul";
      const bool gemm = n.op == "Gemm";
      if (!conv && !matmul && !gemm) continue;
      if (n.outputs.empty() || n.inputs.size() < 2) continue;
      // Float when typed so, or when its weights are float constants (shape inference may not
      // cover every op, and constant weights fix the dtype).
      const Tensor* weights = view.Constant(n.inputs[1]);
      const bool float_weights =
          weights != nullptr ? weights->dtype() == DType::kFloat32 : view.IsFloat(n.inputs[1]);
      if (!(view.IsFloat(n.outputs[0]) || float_weights)) continue;
      if (matmul) {
        // Only the Linear form (B a matrix) has a single bias row for every output row.
        const ir::TensorType& bt = g.value(n.inputs[1]).type;
        const int b_rank = weights != nullptr ? weights->rank() : bt.rank_known ? bt.rank() : -1;
        if (b_rank != 2) continue;
      }
    }
    std::vector<std::string> post_ops;
    std::vector<float> alphas, betas;
    int absorbed = 0;
    for (;;) {
      Node& n = g.node(id);
      const ValueId out = n.outputs[0];
      Node* next = view.SoleConsumer(out);
      if (next == nullptr || next->removed) break;
      const NodeId next_id = IdOf(g, next);
      bool took = false;
      if (Is(next, "Add")) {
        const ValueId other = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
        const Tensor* c = view.Constant(other);
        const bool is_conv = n.op == "Conv";
        const bool has_bias_slot = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
        // Bias: a constant over the channel (Conv) or column (MatMul/Gemm) dimension, before
        // any post-op.
        if (c != nullptr && post_ops.empty() && !has_bias_slot && c->dtype() == DType::kFloat32) {
          const ir::TensorType& ot = g.value(out).type;
          int64_t channels = -1;
          if (is_conv) {
            const Tensor* w = view.Constant(n.inputs[1]);
            if (w) channels = w->dim(0);
          } else if (const Tensor* w = view.Constant(n.inputs[1]); w != nullptr && w->rank() == 2) {
            channels = n.GetInt("transB", 0) ? w->dim(0) : w->dim(1);
          } else if (ot.rank_known && ot.rank() >= 1 && ot.dims.back().is_known()) {
            channels = ot.dims.back().value;
          }
          // Without a known output rank, accept only a bias that is a plain vector [channels]
          // (for Conv that would broadcast over the wrong axis, so Conv needs the rank).
          const bool vector_bias = !is_conv && c->rank() == 1;
          bool fits = channels > 0 && c->num_elements() == channels &&
                      (vector_bias || (ot.rank_known && c->rank() <= ot.rank()));
          if (fits && !vector_bias) {
            // Every dimension of c is 1 except the channel (Conv: axis 1; others: last).
            const int channel_axis = is_conv ? 1 : ot.rank() - 1;
            const int offset = ot.rank() - c->rank();
            for (int i = 0; i < c->rank(); ++i) {
              if (i + offset != channel_axis && c->dim(i) != 1) fits = false;
            }
          }
          if (fits) {
            const ValueId b = g.AddConstant(g.value(other).name + "_bias", *c->Reshape(Shape{channels}));
            Node& self = g.node(id);
            self.inputs.resize(3, kNoValue);
            self.inputs[2] = b;
            if (self.op == "Gemm") self.attrs["beta"] = 1.0f;
            ++bias;
            took = true;
          }
        }
        // The residual is oneDNN's sum post-op, so it may only follow post-ops that run inside
        // the primitive (kernels/fused_post_ops.h): after a Relu it would have to run before the
        // kernel's epilogue applies that Relu.
        bool inside_primitive = true;
        for (size_t i = 0; i < post_ops.size(); ++i) {
          inside_primitive =
              inside_primitive && kernels::PostOpRunsInsidePrimitive(post_ops[i], alphas[i]);
        }
        // The kernel may write its output over the residual's memory, so the residual must not
        // also be an operand the product still reads (x @ W + x, a conv's input added back).
        const Node& self = g.node(id);
        const bool residual_is_operand =
            std::find(self.inputs.begin(), self.inputs.end(), other) != self.inputs.end();
        if (!took && c == nullptr && inside_primitive && !residual_is_operand &&
            SameType(g.value(other).type, g.value(out).type) &&
            std::find(post_ops.begin(), post_ops.end(), "Add") == post_ops.end() &&
            !(g.node(id).op == "Gemm" && g.node(id).GetFloat("alpha", 1.0f) != 1.0f)) {
          Node& self = g.node(id);
          self.inputs.resize(std::max<size_t>(self.inputs.size(), 3), kNoValue);
          self.inputs.push_back(other);
          post_ops.push_back("Add");
          alphas.push_back(0);
          betas.push_back(0);
          ++residual;
          took = true;
        }
      } else if (auto act = AsPostOp(view, *next)) {
        post_ops.push_back(std::get<0>(*act));
        alphas.push_back(std::get<1>(*act));
        betas.push_back(std::get<2>(*act));
        ++activations;
        took = true;
      }
      if (!took) break;
      // `next` is absorbed: this node now produces next's output.
      g.node(next_id).removed = true;
      TakeOverOutput(g, id, 0, g.node(next_id).outputs[0]);
      ++absorbed;
      view.Refresh();
    }
    if (absorbed == 0) continue;
    Node& n = g.node(id);
    if (!post_ops.empty() || n.op == "MatMul") {
      n.domain = "kiln";
      n.op = n.op == "Conv" ? "FusedConv" : n.op == "MatMul" ? "FusedMatMul" : "FusedGemm";
      if (!post_ops.empty()) {
        n.attrs["post_ops"] = post_ops;
        n.attrs["post_op_alphas"] = alphas;
        n.attrs["post_op_betas"] = betas;
      }
    }
    ++fused_nodes;
  }
  if (fused_nodes == 0) return "";
  return absl::StrCat("fused ", fused_nodes, " Conv/MatMul/Gemm with ", bias, " bias, ", residual,
                      " residual Add and ", activations, " activation nodes");
}

namespace {

const std::set<std::string>& UnaryElementwise() {
  static const std::set<std::string> ops = {
      "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Sign", "Sin", "Cos", "Erf",
      "Relu", "Sigmoid", "Tanh", "Softplus", "Softsign", "HardSwish", "LeakyRelu", "Elu", "Selu",
      "HardSigmoid", "Gelu", "Clip"};
  return ops;
}
const std::set<std::string>& BinaryElementwise() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
  return ops;
}

// FusedElementwise attributes ("key=value") of a unary node, or nullopt when the node has a
// form the fused kernel does not take (e.g. a Clip bound that is not a constant).
std::optional<std::vector<std::string>> UnaryAttrs(GraphView& view, const Node& n) {
  auto f = [](const char* k, float v) {
    std::ostringstream s;
    s.precision(9);
    s << k << "=" << v;
    return s.str();
  };
  if (n.op == "LeakyRelu") return std::vector<std::string>{f("alpha", n.GetFloat("alpha", 0.01f))};
  if (n.op == "Elu") return std::vector<std::string>{f("alpha", n.GetFloat("alpha", 1.0f))};
  if (n.op == "Selu") {
    return std::vector<std::string>{f("alpha", n.GetFloat("alpha", 1.67326319f)),
                                    f("gamma", n.GetFloat("gamma", 1.05070102f))};
  }
  if (n.op == "HardSigmoid") {
    return std::vector<std::string>{f("alpha", n.GetFloat("alpha", 0.2f)), f("beta", n.GetFloat("beta", 0.5f))};
  }
  if (n.op == "Gelu") return std::vector<std::string>{"approximate=" + n.GetString("approximate", "none")};
  if (n.op == "Clip") {
    auto post = AsPostOp(view, n);
    if (!post) return std::nullopt;
    const float lo = std::get<1>(*post), hi = std::get<2>(*post);
    if (std::isnan(lo) || std::isnan(hi)) return std::nullopt;  // left to the Clip kernel
    // Only the defaults may be left out: a bound of +inf below (or -inf above) is a real
    // bound that makes every value inf (onnx_graph_fuzz: Clip(x, min=inf) came out as x).
    std::vector<std::string> attrs;
    if (lo != -std::numeric_limits<float>::infinity()) attrs.push_back(f("min", lo));
    if (hi != std::numeric_limits<float>::infinity()) attrs.push_back(f("max", hi));
    return attrs;
  }
  return std::vector<std::string>{};
}

}  // namespace

absl::StatusOr<std::string> FuseElementwiseChains(Graph& g) {
  GraphView view(g);
  KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, g.TopologicalOrder());
  auto fusable = [&](const Node& n) {
    if (n.removed || !n.domain.empty() || n.outputs.size() != 1 || !view.IsFloat(n.outputs[0])) return false;
    if (UnaryElementwise().count(n.op)) {
      return view.IsFloat(n.inputs[0]) && UnaryAttrs(view, n).has_value();
    }
    if (BinaryElementwise().count(n.op)) {
      return n.inputs.size() == 2 && view.IsFloat(n.inputs[0]) && view.IsFloat(n.inputs[1]);
    }
    return false;
  };
  // Grow chains: a node joins the chain whose (private) output it reads.
  std::map<ValueId, int> chain_of_output;  // current output value -> chain index
  std::vector<std::vector<NodeId>> chains;
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (!fusable(n)) continue;
    int joined = -1;
    for (ValueId in : n.inputs) {
      auto it = chain_of_output.find(in);
      if (it != chain_of_output.end() && view.IsPrivate(in)) {
        joined = it->second;
        chain_of_output.erase(it);
        break;
      }
    }
    if (joined < 0) {
      joined = static_cast<int>(chains.size());
      chains.emplace_back();
    }
    chains[joined].push_back(id);
    chain_of_output[n.outputs[0]] = joined;
  }
  int fused = 0, absorbed = 0;
  for (const std::vector<NodeId>& chain : chains) {
    if (chain.size() < 2) continue;
    kernels::FusedElementwiseBuilder builder;
    std::map<ValueId, std::string> reg;
    std::vector<ValueId> inputs;
    // A one-element constant becomes an immediate only where it cannot raise the result's rank
    // (x[5] + c[1,1] is [1,5]; the fused node's shape comes from its tensor inputs alone).
    auto operand = [&](ValueId v, ValueId other) -> std::string {
      auto it = reg.find(v);
      if (it != reg.end()) return it->second;
      const Tensor* c = view.Constant(v);
      const ir::TensorType* ot = other == kNoValue ? nullptr : &g.value(other).type;
      const bool keeps_rank =
          c != nullptr &&
          (c->rank() == 0 || (ot != nullptr && ot->rank_known && c->rank() <= ot->rank()));
      if (auto s = view.ScalarFloat(v); s && keeps_rank) {
        return kernels::FusedElementwiseBuilder::Constant(*s);
      }
      const std::string r = kernels::FusedElementwiseBuilder::Input(static_cast<int>(inputs.size()));
      inputs.push_back(v);
      reg[v] = r;
      return r;
    };
    for (NodeId id : chain) {
      const Node& n = g.node(id);
      std::string dst;
      if (BinaryElementwise().count(n.op)) {
        const std::string a = operand(n.inputs[0], n.inputs[1]);
        const std::string b = operand(n.inputs[1], n.inputs[0]);
        dst = builder.Binary(n.op, a, b);
      } else {
        dst = builder.Unary(n.op, operand(n.inputs[0], kNoValue), *UnaryAttrs(view, n));
      }
      reg[n.outputs[0]] = dst;
    }
    const Node& last = g.node(chain.back());
    Node fusedn;
    fusedn.domain = kernels::kFusedElementwiseDomain;
    fusedn.op = kernels::kFusedElementwiseOp;
    fusedn.name = last.name.empty() ? "fused_elementwise" : last.name + "_fused";
    fusedn.inputs = inputs;
    fusedn.outputs = {last.outputs[0]};
    fusedn.attrs = builder.Attributes();
    // A chain whose inputs are all scalar immediates has no tensor input to give it a shape.
    if (inputs.empty()) continue;
    for (NodeId id : chain) g.node(id).removed = true;
    g.AddNode(std::move(fusedn));
    ++fused;
    absorbed += static_cast<int>(chain.size());
  }
  return fused ? absl::StrCat("fused ", absorbed, " elementwise nodes into ", fused, " FusedElementwise") : "";
}


namespace {

bool AttributesEqual(const ir::Attribute& a, const ir::Attribute& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Tensor>) {
          return TensorsEqual(x, y);
        } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
          if (x.size() != y.size()) return false;
          for (size_t i = 0; i < x.size(); ++i) {
            if (!TensorsEqual(x[i], y[i])) return false;
          }
          return true;
        } else if constexpr (std::is_same_v<T, ir::GraphPtr> || std::is_same_v<T, std::vector<ir::GraphPtr>>) {
          return false;  // subgraphs are never merged
        } else {
          return x == y;
        }
      },
      a);
}

bool SameComputation(const Node& a, const Node& b) {
  if (a.op != b.op || a.domain != b.domain || a.inputs != b.inputs || a.outputs.size() != b.outputs.size() ||
      a.attrs.size() != b.attrs.size()) {
    return false;
  }
  for (const auto& [key, value] : a.attrs) {
    auto it = b.attrs.find(key);
    if (it == b.attrs.end() || !AttributesEqual(value, it->second)) return false;
  }
  return true;
}

}  // namespace

// Common-subexpression elimination: two nodes with the same operator, attributes and inputs
// compute the same values unless they draw random numbers or run subgraphs (ir/op_traits.h),
// so the later node's outputs are replaced by the earlier node's.
absl::StatusOr<std::string> EliminateCommonSubexpressions(Graph& g) {
  KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, g.TopologicalOrder());
  std::map<std::tuple<std::string, std::string, std::vector<ValueId>>, std::vector<NodeId>> seen;
  std::set<ValueId> graph_outputs(g.outputs.begin(), g.outputs.end());
  int merged = 0;
  for (NodeId id : order) {
    Node& n = g.node(id);
    if (ir::IsNondeterministic(n) || ir::HasSubgraph(n)) continue;
    auto& candidates = seen[{n.domain, n.op, n.inputs}];
    NodeId twin = kNoNode;
    for (NodeId c : candidates) {
      if (SameComputation(g.node(c), n)) twin = c;
    }
    bool escapes = false;
    for (ValueId v : n.outputs) escapes = escapes || graph_outputs.count(v) > 0;
    if (twin == kNoNode || escapes) {
      candidates.push_back(id);
      continue;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] != kNoValue && g.node(twin).outputs[i] != kNoValue) {
        g.ReplaceAllUses(n.outputs[i], g.node(twin).outputs[i]);
      }
    }
    n.removed = true;
    ++merged;
  }
  return merged ? absl::StrCat("merged ", merged, " duplicate nodes") : "";
}

namespace {

// Adapts a rewrite to the pass manager: value types first (the rewrites consult dtypes and
// shapes), then the rewrite, whose summary goes to the OptimizationLog.
PassFunction WithTypes(absl::StatusOr<std::string> (*rewrite)(Graph&)) {
  return [rewrite](Graph& g, PassContext& ctx) -> absl::Status {
    KILN_RETURN_IF_ERROR(ir::InferShapes(g));
    KILN_ASSIGN_OR_RETURN(std::string summary, rewrite(g));
    if (!summary.empty()) ctx.Note(std::move(summary));
    return absl::OkStatus();
  };
}

}  // namespace

KILN_REGISTER_PASS("common_subexpression_elimination", 120, WithTypes(EliminateCommonSubexpressions));
KILN_REGISTER_PASS("identity_transpose_reshape_elimination", 150, WithTypes(EliminateIdentityTransposeReshape));
KILN_REGISTER_PASS("batchnorm_folding", 200, WithTypes(FoldBatchNormIntoConv));
KILN_REGISTER_PASS("gelu_fusion", 250, WithTypes(FuseGelu));
KILN_REGISTER_PASS("layernorm_fusion", 260, WithTypes(FuseLayerNorm));
KILN_REGISTER_PASS("conv_matmul_post_op_fusion", 300, WithTypes(FuseConvMatMulPostOps));
KILN_REGISTER_PASS("elementwise_chain_fusion", 350, WithTypes(FuseElementwiseChains));

}  // namespace kiln::opt
