// Fusion: groups of ONNX nodes that exporters write out op by op become one node that runs in
// one pass: decomposed GELU and LayerNorm become the ONNX ops (whose kernels are vectorized),
// Conv / MatMul / Gemm absorb their bias, residual Add and activations as oneDNN post-ops
// (kiln FusedConv / FusedMatMul / FusedGemm, include/kiln/ir/fused_post_ops.h), and chains of
// float elementwise ops become one kiln FusedElementwise (include/kiln/ir/fused_elementwise.h).
// Each fused node takes over the output value (and type) of the pattern's last node. One
// ctx.Note per fused group, naming the nodes it replaced.
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/fused_elementwise.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

// PyTorch's decomposed GELU (x * 0.5 * (1 + erf(x / sqrt(2)))) -> Gelu.
absl::Status FuseGelu(Graph& g, PassContext& ctx) {
  GraphView view(g);
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
    const std::string note = absl::StrCat("fused ", DescribeNodes({chain.begin(), chain.end()}),
                                          " into ", gelu.Describe());
    g.AddNode(std::move(gelu));  // may move the nodes `chain` points to
    ctx.Note(note);
    view.Refresh();
  }
  return absl::OkStatus();
}

// The single reduced axis of a ReduceMean (from its axes input or attribute), or nullopt.
std::optional<int64_t> SingleAxis(GraphView& view, const Node& n) {
  std::vector<int64_t> axes = n.GetInts("axes");
  if (axes.empty() && n.inputs.size() > 1) {
    const Tensor* t = view.Constant(n.inputs[1]);
    if (t && t->dtype() == DType::kInt64)
      axes.assign(t->data<int64_t>(), t->data<int64_t>() + t->num_elements());
  }
  if (axes.size() != 1 || n.GetInt("keepdims", 1) != 1) return std::nullopt;
  return axes[0];
}

// Decomposed layer normalization over the last axis (ReduceMean, Sub, Pow, ReduceMean, Add,
// Sqrt, Div, [Mul, Add]) -> LayerNormalization.
absl::Status FuseLayerNorm(Graph& g, PassContext& ctx) {
  GraphView view(g);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& div = g.node(id);
    if (!Is(&div, "Div")) continue;
    Node* sub = view.Producer(div.inputs[0]);
    Node* sqrt = view.Producer(div.inputs[1]);
    if (!Is(sub, "Sub") || !Is(sqrt, "Sqrt") || !view.IsPrivate(div.inputs[1])) continue;
    const ValueId x = sub->inputs[0];
    Node* mean = view.Producer(sub->inputs[1]);
    if (!Is(mean, "ReduceMean") || mean->inputs[0] != x || !view.IsPrivate(sub->inputs[1]))
      continue;
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
    const std::string note = absl::StrCat("fused ", DescribeNodes({chain.begin(), chain.end()}),
                                          " into ", ln.Describe());
    g.AddNode(std::move(ln));  // may move the nodes `chain` points to
    ctx.Note(note);
    view.Refresh();
  }
  return absl::OkStatus();
}

// The fused post-op an activation node maps to, if any (include/kiln/ir/fused_post_ops.h).
std::optional<ir::PostOp> AsPostOp(GraphView& view, const Node& n) {
  if (!n.domain.empty()) return std::nullopt;
  if (n.op == "Relu" || n.op == "Sigmoid" || n.op == "Tanh" || n.op == "HardSwish" ||
      n.op == "Softplus") {
    return ir::PostOp{n.op};
  }
  if (n.op == "LeakyRelu") return ir::PostOp{n.op, n.GetFloat("alpha", 0.01f)};
  if (n.op == "Elu") return ir::PostOp{n.op, n.GetFloat("alpha", 1.0f)};
  if (n.op == "Gelu") {
    return ir::PostOp{n.GetString("approximate", "none") == "tanh" ? "GeluTanh" : "Gelu"};
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
    return ir::PostOp{"Clip", lo, hi};
  }
  return std::nullopt;
}

bool SameType(const ir::TensorType& a, const ir::TensorType& b) {
  if (!a.rank_known || !b.rank_known || a.rank() != b.rank() || a.dtype != b.dtype) return false;
  for (int i = 0; i < a.rank(); ++i) {
    const ir::Dim& x = a.dims[i];
    const ir::Dim& y = b.dims[i];
    if (x.is_known() ? !(y.is_known() && x.value == y.value)
                     : (x.symbol.empty() || x.symbol != y.symbol)) {
      return false;
    }
  }
  return true;
}

// Conv / MatMul / Gemm followed by a bias Add, a residual Add and activations -> kiln
// FusedConv / FusedMatMul / FusedGemm running them as oneDNN post-ops (or, for the bias alone,
// the op's own bias input).
absl::Status FuseConvMatMulPostOps(Graph& g, PassContext& ctx) {
  GraphView view(g);
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
    std::vector<ir::PostOp> post_ops;
    // What the note says was absorbed: "Add 'b' (bias)", "Relu 'r'".
    std::vector<std::string> absorbed;
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
            const ValueId b =
                g.AddConstant(g.value(other).name + "_bias", *c->Reshape(Shape{channels}));
            Node& self = g.node(id);
            self.inputs.resize(3, kNoValue);
            self.inputs[2] = b;
            if (self.op == "Gemm") self.attrs["beta"] = 1.0f;
            absorbed.push_back(absl::StrCat(next->Describe(), " (bias)"));
            took = true;
          }
        }
        // The residual is oneDNN's sum post-op, so it may only follow post-ops that run inside
        // the primitive (ir/fused_post_ops.h): after a Relu it would have to run before the
        // kernel's epilogue applies that Relu.
        bool inside_primitive = true;
        bool has_residual = false;
        for (const ir::PostOp& p : post_ops) {
          inside_primitive = inside_primitive && ir::PostOpRunsInsidePrimitive(p.kind, p.alpha);
          has_residual = has_residual || p.kind == ir::kResidualPostOp;
        }
        // The kernel may write its output over the residual's memory, so the residual must not
        // also be an operand the product still reads (x @ W + x, a conv's input added back).
        const Node& self = g.node(id);
        const bool residual_is_operand =
            std::find(self.inputs.begin(), self.inputs.end(), other) != self.inputs.end();
        if (!took && c == nullptr && inside_primitive && !residual_is_operand &&
            SameType(g.value(other).type, g.value(out).type) && !has_residual &&
            !(g.node(id).op == "Gemm" && g.node(id).GetFloat("alpha", 1.0f) != 1.0f)) {
          Node& self = g.node(id);
          self.inputs.resize(std::max<size_t>(self.inputs.size(), 3), kNoValue);
          self.inputs.push_back(other);
          post_ops.push_back({ir::kResidualPostOp});
          absorbed.push_back(absl::StrCat(next->Describe(), " (residual)"));
          took = true;
        }
      } else if (auto act = AsPostOp(view, *next)) {
        post_ops.push_back(*act);
        absorbed.push_back(next->Describe());
        took = true;
      }
      if (!took) break;
      // `next` is absorbed: this node now produces next's output.
      g.node(next_id).removed = true;
      TakeOverOutput(g, id, 0, g.node(next_id).outputs[0]);
      view.Refresh();
    }
    if (absorbed.empty()) continue;
    Node& n = g.node(id);
    std::string note = absl::StrCat("fused ", n.Describe());
    for (const std::string& a : absorbed) absl::StrAppend(&note, " + ", a);
    if (!post_ops.empty() || n.op == "MatMul") {
      n.domain = ir::kKilnDomain;
      n.op = ir::FusedOpFor(n.op);
      ir::SetPostOps(n, post_ops);
      absl::StrAppend(&note, " into ", n.op);
    } else {
      absl::StrAppend(&note, " as its bias input");
    }
    ctx.Note(std::move(note));
  }
  return absl::OkStatus();
}

const std::set<std::string>& UnaryElementwise() {
  static const std::set<std::string> ops = {
      "Abs",      "Neg",       "Exp",       "Log", "Sqrt", "Reciprocal",  "Floor", "Ceil",
      "Sign",     "Sin",       "Cos",       "Erf", "Relu", "Sigmoid",     "Tanh",  "Softplus",
      "Softsign", "HardSwish", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Gelu",  "Clip"};
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
    return std::vector<std::string>{f("alpha", n.GetFloat("alpha", 0.2f)),
                                    f("beta", n.GetFloat("beta", 0.5f))};
  }
  if (n.op == "Gelu")
    return std::vector<std::string>{"approximate=" + n.GetString("approximate", "none")};
  if (n.op == "Clip") {
    auto post = AsPostOp(view, n);
    if (!post) return std::nullopt;
    const float lo = post->alpha, hi = post->beta;
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

// Connected chains of float elementwise ops whose intermediates have no other reader -> one
// kiln FusedElementwise node (one pass over memory).
absl::Status FuseElementwiseChains(Graph& g, PassContext& ctx) {
  GraphView view(g);
  KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, g.TopologicalOrder());
  auto fusable = [&](const Node& n) {
    if (n.removed || !n.domain.empty() || n.outputs.size() != 1 || !view.IsFloat(n.outputs[0]))
      return false;
    if (UnaryElementwise().count(n.op)) {
      return view.IsFloat(n.inputs[0]) && UnaryAttrs(view, n).has_value();
    }
    if (BinaryElementwise().count(n.op)) {
      return n.inputs.size() == 2 && view.IsFloat(n.inputs[0]) && view.IsFloat(n.inputs[1]);
    }
    return false;
  };
  // Grow chains: a node joins the chain whose (private) output it reads, unless the chain's
  // program would then need more registers than the kernel has: a chain of 1900 Relus must
  // become several fused nodes, not one that no plan can run. Each node costs at most one
  // temporary plus one register per operand from outside the chain (an input or a constant).
  std::map<ValueId, int> chain_of_output;  // current output value -> chain index
  std::vector<std::vector<NodeId>> chains;
  std::vector<int> chain_registers;  // upper bound of each chain's registers
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (!fusable(n)) continue;
    int joined = -1;
    ValueId joined_via = kNoValue;
    for (ValueId in : n.inputs) {
      auto it = chain_of_output.find(in);
      if (it != chain_of_output.end() && view.IsPrivate(in)) {
        joined = it->second;
        joined_via = in;
        break;
      }
    }
    int cost = 1;
    for (ValueId in : n.inputs) cost += in != joined_via ? 1 : 0;
    if (joined >= 0 && chain_registers[joined] + cost > ir::kFusedElementwiseMaxRegisters) {
      joined = -1;
    }
    if (joined >= 0) {
      chain_of_output.erase(joined_via);
    } else {
      joined = static_cast<int>(chains.size());
      chains.emplace_back();
      chain_registers.push_back(0);
      cost = 1 + static_cast<int>(n.inputs.size());
    }
    chains[joined].push_back(id);
    chain_registers[joined] += cost;
    chain_of_output[n.outputs[0]] = joined;
  }
  for (const std::vector<NodeId>& chain : chains) {
    if (chain.size() < 2) continue;
    ir::FusedElementwiseBuilder builder;
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
        return ir::FusedElementwiseBuilder::Constant(*s);
      }
      const std::string r = ir::FusedElementwiseBuilder::Input(static_cast<int>(inputs.size()));
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
    fusedn.domain = ir::kFusedElementwiseDomain;
    fusedn.op = ir::kFusedElementwiseOp;
    fusedn.name = last.name.empty() ? "fused_elementwise" : last.name + "_fused";
    fusedn.inputs = inputs;
    fusedn.outputs = {last.outputs[0]};
    fusedn.attrs = builder.Attributes();
    // A chain whose inputs are all scalar immediates has no tensor input to give it a shape.
    if (inputs.empty()) continue;
    std::vector<const Node*> replaced;
    for (NodeId id : chain) {
      g.node(id).removed = true;
      replaced.push_back(&g.node(id));
    }
    const std::string note =
        absl::StrCat("fused ", DescribeNodes(replaced), " into ", fusedn.Describe());
    g.AddNode(std::move(fusedn));  // may move the nodes `replaced` points to
    ctx.Note(note);
  }
  return absl::OkStatus();
}

}  // namespace

KILN_REGISTER_PASS_KEEPING_TYPES("gelu_fusion", 250, FuseGelu);
KILN_REGISTER_PASS_KEEPING_TYPES("layernorm_fusion", 260, FuseLayerNorm);
KILN_REGISTER_PASS_KEEPING_TYPES("conv_matmul_post_op_fusion", 300, FuseConvMatMulPostOps);
KILN_REGISTER_PASS_KEEPING_TYPES("elementwise_chain_fusion", 350, FuseElementwiseChains);

}  // namespace kiln::opt
