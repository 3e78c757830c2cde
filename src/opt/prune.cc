// Exact structured pruning (CompressionOptions::prune_zero_channels): output channels of
// Conv and output neurons of MatMul/Gemm whose weights and bias are all zero, as
// magnitude-pruned training leaves them, are removed together with the matching input
// channels of every node that reads them.
//
// What "exact" rests on. A channel whose weights and bias are zero is 0 wherever the layer's
// inputs are finite. The pass follows that channel through the nodes that act on each channel
// separately (activations, BatchNormalization, Add/Sub/Mul/Div/PRelu with a constant, pools,
// Flatten of [N, C, 1, 1], depthwise Conv) and tracks, per channel, what it provably is there:
//   zero     0 everywhere: Relu(0) = 0, 0 * finite constant = 0, 0 + 0 = 0 ...
//   finite   a value bounded by a known constant, not necessarily 0: Sigmoid(0) = 0.5,
//            0 + bias, BatchNormalization with a nonzero shift ...
//   unknown  anything else (0 / 0, an infinite constant, an overflowing bound).
// The walk must end, on every path, in a node that sums over channels with constant weights
// (Conv with group 1, MatMul and Gemm reading the value as their left operand). There a zero
// channel adds 0 * w = 0 to every sum, and a finite one adds 0 only where that consumer's
// weights for it are all zero (Sigmoid(0) * 0 = 0, but Sigmoid(0) * w = 0.5 w is not). A
// channel is removed when every path allows it; one reader the walk does not understand (a
// residual Add of two activations, Concat, Reshape, a graph output) keeps every channel.
// Removing the channel then changes each sum only by dropping terms that are exactly 0, so the
// outputs are those of the unpruned graph up to the order of float summation.
//
// Non-finite inputs. NaN spreads as before: w * NaN is NaN for w = 0 too, so a dense layer
// makes every output channel NaN at a position whose window holds a NaN, the kept channels
// included. An infinity does not always: the removed channel would have been 0 * Inf = NaN
// where its kept siblings are +-Inf, and Relu(-Inf) = 0 turns such a sibling finite; the
// pruned graph then gives a number where the unpruned one gave NaN. docs/COMPRESSION.md says
// so; the pass runs only when compression is allowed.
//
// Not handled, with the reason: grouped convolutions other than depthwise (removing a channel
// changes the channels per group, which must stay equal across groups), depthwise convolutions
// as producers (their input channels would have to go with their outputs) and a depthwise
// multiplier other than 1.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

// Bounds above this count as unknown: a later Mul or Exp could overflow them to Inf, and
// Inf * 0 is NaN, not 0.
constexpr float kMaxBound = 1e30f;

enum class Kind { kZero, kFinite, kUnknown };

struct Fact {
  Kind kind = Kind::kUnknown;
  float bound = 0;  // max |value| when kFinite; 0 when kZero
};

Fact Zero() { return {Kind::kZero, 0}; }
Fact Unknown() { return {Kind::kUnknown, 0}; }
Fact Finite(double bound) {
  if (!(bound <= kMaxBound)) return Unknown();  // also NaN
  return {Kind::kFinite, static_cast<float>(bound)};
}

// What a fused node's post-op (ir/fused_post_ops.h; never the residual "Add", which the
// callers exclude) makes of a channel: the same rules as the unfused activations.
Fact ApplyPostOp(const ir::PostOp& p, const Fact& x) {
  if (x.kind == Kind::kUnknown) return x;
  const std::string& k = p.kind;
  if (k == "Relu" || k == "Tanh" || k == "HardSwish" || k == "Gelu" || k == "GeluTanh" ||
      k == "Abs") {
    return x;
  }
  if (k == "LeakyRelu" || k == "Elu") {
    const double alpha = std::fabs(p.alpha);
    if (!std::isfinite(alpha)) return Unknown();
    if (x.kind == Kind::kZero) return Zero();
    return Finite(k == "Elu" ? std::max<double>(x.bound, alpha) : x.bound * std::max(1.0, alpha));
  }
  if (k == "Clip") {  // alpha: min, beta: max
    if (std::isnan(p.alpha) || std::isnan(p.beta) || p.alpha > p.beta) return Unknown();
    if (x.kind == Kind::kZero && p.alpha <= 0 && p.beta >= 0) return Zero();
    double bound = x.bound;
    if (std::isfinite(p.alpha)) bound = std::max(bound, std::fabs(static_cast<double>(p.alpha)));
    if (std::isfinite(p.beta)) bound = std::max(bound, std::fabs(static_cast<double>(p.beta)));
    return Finite(bound);
  }
  if (k == "Sigmoid") return Finite(1.0);
  if (k == "Softplus") return Finite(x.bound + 1.0);
  if (k == "Exp") return Finite(std::exp(static_cast<double>(x.bound)));
  if (k == "Square") return Finite(static_cast<double>(x.bound) * x.bound);
  if (k == "Sqrt") return x.kind == Kind::kZero ? Zero() : Unknown();  // sqrt(-1) is NaN
  return Unknown();
}

Fact ApplyPostOps(const Node& n, Fact x) {
  for (const ir::PostOp& p : ir::GetPostOps(n)) x = ApplyPostOp(p, x);
  return x;
}

bool IsFused(const Node& n, const char* op) { return n.domain == ir::kKilnDomain && n.op == op; }

// The ONNX operator a node computes before its post-ops: "Conv" for Conv and kiln FusedConv,
// likewise MatMul and Gemm; empty for any other node.
std::string BaseOp(const Node& n) {
  if (n.domain.empty() && (n.op == "Conv" || n.op == "MatMul" || n.op == "Gemm")) return n.op;
  if (IsFused(n, ir::kFusedConvOp)) return "Conv";
  if (IsFused(n, ir::kFusedMatMulOp)) return "MatMul";
  if (IsFused(n, ir::kFusedGemmOp)) return "Gemm";
  return "";
}

// Per-index statistics of a float tensor's slices along one axis.
struct SliceStats {
  bool all_zero = true;
  bool all_finite = true;
  bool any_zero = false;
  double max_abs = 0;
  double min_abs = std::numeric_limits<double>::infinity();
};

// Stats of t[..., i, ...] for each i along `axis`; `axis` < 0 means the whole tensor as one
// slice (a constant broadcast over the channels).
std::vector<SliceStats> StatsAlong(const Tensor& t, int axis) {
  const int64_t n = axis < 0 ? 1 : t.dim(axis);
  int64_t outer = 1, inner = 1;
  if (axis >= 0) {
    for (int i = 0; i < axis; ++i) outer *= t.dim(i);
    for (int i = axis + 1; i < t.rank(); ++i) inner *= t.dim(i);
  } else {
    inner = t.num_elements();
  }
  std::vector<SliceStats> stats(n);
  const float* data = t.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < n; ++c) {
      SliceStats& s = stats[c];
      const float* p = data + (o * n + c) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const float v = p[i];
        const double a = std::fabs(static_cast<double>(v));
        s.all_zero = s.all_zero && v == 0.0f;
        s.any_zero = s.any_zero || v == 0.0f;
        s.all_finite = s.all_finite && std::isfinite(v);
        s.max_abs = std::max(s.max_abs, a);
        s.min_abs = std::min(s.min_abs, a);
      }
    }
  }
  return stats;
}

// The slices of `t` along `axis` whose index is in `kept`, in order.
Tensor KeepAlong(const Tensor& t, int axis, const std::vector<int64_t>& kept) {
  Shape shape = t.shape();
  const int64_t n = t.dim(axis);
  shape.set_dim(axis, static_cast<int64_t>(kept.size()));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= t.dim(i);
  for (int i = axis + 1; i < t.rank(); ++i) inner *= t.dim(i);
  Tensor out(DType::kFloat32, shape);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k : kept) {
      std::copy_n(src + (o * n + k) * inner, inner, dst);
      dst += inner;
    }
  }
  return out;
}

// A constant input to slice along an axis when channels go.
struct ConstantEdit {
  NodeId node;
  int input;
  int axis;
};

// Everything the walk from one producer decided.
struct PrunePlan {
  std::vector<ConstantEdit> edits;
  std::vector<std::pair<ValueId, int>> resized;  // values whose dim `second` is the channels
  std::vector<NodeId> depthwise;                 // their `group` becomes the kept count
  std::vector<bool> removable;                   // per channel, over every path
};

class Walker {
 public:
  Walker(const Graph& g, const std::vector<std::vector<NodeId>>& consumers, int64_t channels)
      : g_(g), consumers_(consumers), channels_(channels) {
    plan_.removable.assign(channels, true);
  }

  // Follows `v` (channels on `axis` of a rank-`rank` value) to its readers. False: some reader
  // needs every channel.
  bool Visit(ValueId v, int axis, int rank, const std::vector<Fact>& facts) {
    for (ValueId out : g_.outputs) {
      if (out == v) return false;
    }
    for (const auto& [captured, name] : g_.captures) {
      if (captured == v) return false;
    }
    plan_.resized.emplace_back(v, axis);
    for (NodeId id : consumers_[v]) {
      if (!VisitReader(id, v, axis, rank, facts)) return false;
    }
    return true;
  }

  PrunePlan& plan() { return plan_; }

 private:
  const Tensor* FloatConstant(ValueId v) const {
    if (!g_.IsConstant(v)) return nullptr;
    const Tensor& t = *g_.value(v).constant;
    return t.dtype() == DType::kFloat32 ? &t : nullptr;
  }

  // Only output 0 may be read (Dropout's mask, MaxPool's indices, BatchNorm's running stats).
  bool OnlyFirstOutputRead(const Node& n) const {
    for (size_t i = 1; i < n.outputs.size(); ++i) {
      if (n.outputs[i] == ir::kNoValue) continue;
      if (!consumers_[n.outputs[i]].empty()) return false;
      for (ValueId out : g_.outputs) {
        if (out == n.outputs[i]) return false;
      }
    }
    return true;
  }

  // Applies `f` to every fact and continues from the node's output 0.
  bool Continue(const Node& n, int axis, int rank, const std::vector<Fact>& facts,
                const std::function<Fact(const Fact&, int64_t)>& f) {
    if (!OnlyFirstOutputRead(n) || n.outputs.empty() || n.outputs[0] == ir::kNoValue) {
      return false;
    }
    std::vector<Fact> next(facts.size());
    for (size_t c = 0; c < facts.size(); ++c) {
      next[c] = facts[c].kind == Kind::kUnknown ? Unknown() : f(facts[c], c);
    }
    return Visit(n.outputs[0], axis, rank, next);
  }

  // At a node that sums over the channels with constant weights `w` (the channel on
  // `w_axis`): a zero channel contributes nothing, a finite one nothing where its weights are
  // all zero.
  bool Terminal(NodeId id, int input, int w_axis, const Tensor& w, const std::vector<Fact>& facts) {
    if (w.dim(w_axis) != channels_) return false;
    const std::vector<SliceStats> stats = StatsAlong(w, w_axis);
    for (int64_t c = 0; c < channels_; ++c) {
      const bool removable =
          facts[c].kind == Kind::kZero || (facts[c].kind == Kind::kFinite && stats[c].all_zero);
      if (!removable) plan_.removable[c] = false;
    }
    plan_.edits.push_back({id, input, w_axis});
    return true;
  }

  // What an activation (one input) makes of 0 and of a bounded value; empty for operators
  // the walk does not follow.
  static std::function<Fact(const Fact&, int64_t)> UnaryRule(const Node& n, int axis) {
    const std::string& op = n.op;
    const auto same = [](const Fact& f, int64_t) { return f; };
    // f(0) = 0 and |f(x)| <= |x|: Tanh, Softsign, Erf, Atan, Sin (also <= 1), Gelu
    // (|x Phi(x)| <= |x|), HardSwish (x * clamp(x / 6 + 0.5, 0, 1)).
    static const std::set<std::string> kContracting = {"Relu", "Neg",      "Abs",      "Identity",
                                                       "Tanh", "Softsign", "Erf",      "Atan",
                                                       "Sin",  "Gelu",     "HardSwish"};
    if (kContracting.count(op)) return same;
    if ((op == "GlobalAveragePool" || op == "GlobalMaxPool") && axis == 1) return same;
    if (op == "LeakyRelu") {
      const double alpha = std::fabs(n.GetFloat("alpha", 0.01f));
      if (!std::isfinite(alpha)) return nullptr;
      return [alpha](const Fact& x, int64_t) {
        return x.kind == Kind::kZero ? Zero() : Finite(x.bound * std::max(1.0, alpha));
      };
    }
    if (op == "Elu" || op == "Selu" || op == "Celu") {
      // 0 at 0 (alpha (e^0 - 1) = 0); bounded by max(|x|, alpha), times Selu's gamma.
      const double alpha = std::fabs(n.GetFloat("alpha", op == "Selu" ? 1.67326f : 1.0f));
      const double gamma = op == "Selu" ? std::fabs(n.GetFloat("gamma", 1.0507f)) : 1.0;
      if (!std::isfinite(alpha) || !std::isfinite(gamma)) return nullptr;
      return [alpha, gamma](const Fact& x, int64_t) {
        return x.kind == Kind::kZero ? Zero() : Finite(gamma * std::max<double>(x.bound, alpha));
      };
    }
    if (op == "Sigmoid" || op == "HardSigmoid") {
      // Sigmoid(0) = 0.5 (HardSigmoid(0) = beta, clamped): not zero, but within [0, 1].
      return [](const Fact&, int64_t) { return Finite(1.0); };
    }
    if (op == "Softplus") {
      return [](const Fact& x, int64_t) { return Finite(x.bound + 1.0); };  // log(1 + e^x)
    }
    if (op == "Exp") {
      return [](const Fact& x, int64_t) { return Finite(std::exp(static_cast<double>(x.bound))); };
    }
    return nullptr;
  }

  bool VisitReader(NodeId id, ValueId v, int axis, int rank, const std::vector<Fact>& facts) {
    const Node& n = g_.node(id);
    // Of Kiln's own operators, the walk understands the fused Conv/MatMul/Gemm (compression
    // runs on a graph the fp32 optimizer has already fused).
    const std::string base = BaseOp(n);
    const bool fused = n.domain == ir::kKilnDomain && !base.empty();
    if (!n.domain.empty() && !fused) return false;
    int reads = 0;
    for (ValueId in : n.inputs) reads += in == v;
    if (reads != 1 || n.inputs.empty()) return false;
    const bool first = n.inputs[0] == v;
    const std::string& op = fused ? base : n.op;

    // Activations: what they make of 0 and of a bounded value.
    if (first && n.inputs.size() == 1) {
      std::function<Fact(const Fact&, int64_t)> f = UnaryRule(n, axis);
      if (f) return Continue(n, axis, rank, facts, f);
    }

    if (first && op == "Dropout") {
      // Inference Dropout is the identity; with a training_mode input it may not be.
      if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) return false;
      return Continue(n, axis, rank, facts, [](const Fact& f, int64_t) { return f; });
    }

    if (first && (op == "MaxPool" || op == "AveragePool")) {
      // Windows of one channel: 0 stays 0 (padding is skipped by MaxPool and counts as 0 for
      // AveragePool), and no window mean or max exceeds the bound.
      if (axis != 1) return false;
      return Continue(n, axis, rank, facts, [](const Fact& f, int64_t) { return f; });
    }

    if (first && op == "Clip") {
      double lo = -std::numeric_limits<double>::infinity();
      double hi = std::numeric_limits<double>::infinity();
      for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) {
        if (n.inputs[i] == ir::kNoValue) continue;
        const Tensor* b = FloatConstant(n.inputs[i]);
        if (b == nullptr || b->num_elements() != 1 || std::isnan(b->data<float>()[0])) {
          return false;
        }
        (i == 1 ? lo : hi) = b->data<float>()[0];
      }
      if (lo > hi) return false;
      return Continue(n, axis, rank, facts, [lo, hi](const Fact& x, int64_t) {
        if (x.kind == Kind::kZero && lo <= 0 && hi >= 0) return Zero();
        double bound = x.bound;
        if (std::isfinite(lo)) bound = std::max(bound, std::fabs(lo));
        if (std::isfinite(hi)) bound = std::max(bound, std::fabs(hi));
        return Finite(bound);
      });
    }

    if (first && op == "Flatten") {
      // [N, C, 1, 1] -> [N, C]: the channel stays a dimension of its own.
      const ir::TensorType& type = g_.value(v).type;
      int64_t flat_axis = n.GetInt("axis", 1);
      if (flat_axis < 0) flat_axis += rank;
      if (axis != 1 || flat_axis != 1 || !type.rank_known || type.rank() != rank) return false;
      for (int i = 2; i < rank; ++i) {
        if (!type.dims[i].is_known() || type.dims[i].value != 1) return false;
      }
      if (!OnlyFirstOutputRead(n)) return false;
      return Visit(n.outputs[0], 1, 2, facts);
    }

    if (first && op == "BatchNormalization") {
      if (axis != 1 || n.inputs.size() < 5 || n.GetInt("training_mode", 0) != 0) return false;
      const Tensor* p[4];
      for (int i = 0; i < 4; ++i) {
        p[i] = FloatConstant(n.inputs[i + 1]);
        if (p[i] == nullptr || p[i]->rank() != 1 || p[i]->dim(0) != channels_) return false;
      }
      const float eps = n.GetFloat("epsilon", 1e-5f);
      for (int i = 1; i <= 4; ++i) plan_.edits.push_back({id, i, 0});
      return Continue(n, axis, rank, facts, [p, eps](const Fact& x, int64_t c) {
        const float mean = p[2]->data<float>()[c], shift = p[1]->data<float>()[c];
        // The factor as the kernel computes it; an infinite one makes 0 * Inf = NaN.
        const float s = p[0]->data<float>()[c] / std::sqrt(p[3]->data<float>()[c] + eps);
        if (!std::isfinite(s) || !std::isfinite(mean) || !std::isfinite(shift)) return Unknown();
        if (x.kind == Kind::kZero && mean == 0 && shift == 0) return Zero();
        return Finite((x.bound + std::fabs(mean)) * std::fabs(s) + std::fabs(shift));
      });
    }

    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || (first && op == "PRelu")) {
      if (n.inputs.size() != 2) return false;
      const Tensor* k = FloatConstant(n.inputs[first ? 1 : 0]);
      if (k == nullptr || k->rank() > rank) return false;
      // The constant's dimension that lines up with the channels (numpy broadcasting aligns
      // the trailing dimensions); -1 when it is broadcast over them.
      int k_axis = axis - (rank - k->rank());
      if (k_axis >= 0 && k->dim(k_axis) == 1 && channels_ != 1) k_axis = -1;
      if (k_axis >= 0 && k->dim(k_axis) != channels_) return false;
      const std::vector<SliceStats> stats = StatsAlong(*k, k_axis);
      const auto stat = [stats, k_axis](int64_t c) { return stats[k_axis < 0 ? 0 : c]; };
      if (k_axis >= 0) plan_.edits.push_back({id, first ? 1 : 0, k_axis});
      std::function<Fact(const Fact&, int64_t)> f;
      if (op == "Add" || op == "Sub") {
        f = [stat](const Fact& x, int64_t c) {
          const SliceStats s = stat(c);
          if (!s.all_finite) return Unknown();
          if (x.kind == Kind::kZero && s.all_zero) return Zero();
          return Finite(x.bound + s.max_abs);
        };
      } else if (op == "Mul") {
        f = [stat](const Fact& x, int64_t c) {
          const SliceStats s = stat(c);
          if (!s.all_finite) return Unknown();
          if (x.kind == Kind::kZero) return Zero();
          return Finite(x.bound * s.max_abs);
        };
      } else if (op == "PRelu") {
        f = [stat](const Fact& x, int64_t c) {
          const SliceStats s = stat(c);
          if (!s.all_finite) return Unknown();
          if (x.kind == Kind::kZero) return Zero();
          return Finite(x.bound * std::max(1.0, s.max_abs));
        };
      } else {                     // Div
        if (!first) return false;  // constant / channel: 1 / 0 = Inf
        f = [stat](const Fact& x, int64_t c) {
          const SliceStats s = stat(c);
          if (!s.all_finite || s.any_zero) return Unknown();
          if (x.kind == Kind::kZero) return Zero();
          return Finite(x.bound / s.min_abs);
        };
      }
      return Continue(n, axis, rank, facts, f);
    }

    if (first && op == "Conv" && n.inputs.size() >= 2) {
      const Tensor* w = FloatConstant(n.inputs[1]);
      if (w == nullptr || w->rank() != rank || axis != 1) return false;
      const int64_t group = n.GetInt("group", 1);
      if (group == 1) return Terminal(id, 1, 1, *w, facts);
      // Depthwise with multiplier 1: channel c of the output reads only channel c (and a
      // residual added to the output would not be a per-channel constant).
      if (group != channels_ || w->dim(0) != channels_ || w->dim(1) != 1) return false;
      if (ir::HasResidual(n)) return false;
      const Tensor* b = nullptr;
      if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) {
        b = FloatConstant(n.inputs[2]);
        if (b == nullptr || b->rank() != 1 || b->dim(0) != channels_) return false;
        plan_.edits.push_back({id, 2, 0});
      }
      const std::vector<SliceStats> w_stats = StatsAlong(*w, 0);
      plan_.edits.push_back({id, 1, 0});
      plan_.depthwise.push_back(id);
      int64_t taps = 1;
      for (int i = 2; i < w->rank(); ++i) taps *= w->dim(i);
      const Node* node = &n;
      return Continue(n, axis, rank, facts, [w_stats, b, taps, node](const Fact& x, int64_t c) {
        const float bias = b ? b->data<float>()[c] : 0.0f;
        if (!w_stats[c].all_finite || !std::isfinite(bias)) return Unknown();
        if (x.kind == Kind::kZero && bias == 0) return ApplyPostOps(*node, Zero());
        return ApplyPostOps(*node, Finite(x.bound * w_stats[c].max_abs * taps + std::fabs(bias)));
      });
    }

    if (first && op == "MatMul" && (n.inputs.size() == 2 || fused)) {
      const Tensor* w = FloatConstant(n.inputs[1]);
      if (w == nullptr || w->rank() != 2 || axis != rank - 1) return false;
      return Terminal(id, 1, 0, *w, facts);
    }

    if (first && op == "Gemm" && n.inputs.size() >= 2) {
      const Tensor* w = FloatConstant(n.inputs[1]);
      if (w == nullptr || w->rank() != 2 || rank != 2 || axis != 1 || n.GetInt("transA", 0) != 0) {
        return false;
      }
      if (!std::isfinite(n.GetFloat("alpha", 1.0f))) return false;
      return Terminal(id, 1, n.GetInt("transB", 0) != 0 ? 1 : 0, *w, facts);
    }
    return false;
  }

  const Graph& g_;
  const std::vector<std::vector<NodeId>>& consumers_;
  const int64_t channels_;
  PrunePlan plan_;
};

// A producer: its output value, the channel axis and rank there, its channel count, and for
// each channel whether its weights and bias are all zero; plus its own constant edits.
struct Producer {
  ValueId output = ir::kNoValue;
  int axis = 0;
  int rank = 0;
  int64_t channels = 0;
  std::vector<bool> zero;
  std::vector<ConstantEdit> edits;
};

const Tensor* FloatConstant(const Graph& g, ValueId v) {
  if (v == ir::kNoValue || !g.IsConstant(v)) return nullptr;
  const Tensor& t = *g.value(v).constant;
  return t.dtype() == DType::kFloat32 ? &t : nullptr;
}

std::optional<Producer> AsProducer(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const std::string op = BaseOp(n);
  // A residual added after the op makes the output channel whatever the residual is.
  if (op.empty() || ir::HasResidual(n) || n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue ||
      n.inputs.size() < 2) {
    return std::nullopt;
  }
  Producer p;
  p.output = n.outputs[0];
  const Tensor* w = FloatConstant(g, n.inputs[1]);
  if (w == nullptr) return std::nullopt;
  int w_axis;
  if (op == "Conv") {
    if (n.GetInt("group", 1) != 1 || w->rank() < 3) return std::nullopt;
    p.axis = 1;
    p.rank = w->rank();
    w_axis = 0;
  } else if (op == "MatMul" && (n.inputs.size() == 2 || n.domain == ir::kKilnDomain)) {
    const ir::TensorType& x = g.value(n.inputs[0]).type;
    if (w->rank() != 2 || !x.rank_known || x.rank() < 2) return std::nullopt;
    p.rank = x.rank();
    p.axis = p.rank - 1;
    w_axis = 1;
  } else if (op == "Gemm") {
    if (w->rank() != 2 || !std::isfinite(n.GetFloat("alpha", 1.0f))) return std::nullopt;
    p.rank = 2;
    p.axis = 1;
    w_axis = n.GetInt("transB", 0) != 0 ? 0 : 1;
  } else {
    return std::nullopt;
  }
  p.channels = w->dim(w_axis);
  if (p.channels < 2) return std::nullopt;
  const std::vector<SliceStats> w_stats = StatsAlong(*w, w_axis);
  p.zero.resize(p.channels);
  bool any = false;
  for (int64_t c = 0; c < p.channels; ++c) {
    p.zero[c] = w_stats[c].all_zero;
    any = any || p.zero[c];
  }
  if (!any) return std::nullopt;
  p.edits.push_back({id, 1, w_axis});
  // The bias: Conv's B [M]; Gemm's C, broadcast to [rows, N] and scaled by a finite beta.
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) {
    const Tensor* b = FloatConstant(g, n.inputs[2]);
    if (b == nullptr || b->rank() > 2) return std::nullopt;
    int b_axis = b->rank() - 1;
    if (op == "Conv" && b->rank() != 1) return std::nullopt;
    if (op == "Gemm" && !std::isfinite(n.GetFloat("beta", 1.0f))) return std::nullopt;
    if (b_axis >= 0 && b->dim(b_axis) == 1 && p.channels != 1) b_axis = -1;
    if (b_axis >= 0 && b->dim(b_axis) != p.channels) return std::nullopt;
    const std::vector<SliceStats> b_stats = StatsAlong(*b, b_axis);
    for (int64_t c = 0; c < p.channels; ++c) {
      p.zero[c] = p.zero[c] && b_stats[b_axis < 0 ? 0 : c].all_zero;
    }
    if (b_axis >= 0) p.edits.push_back({id, 2, b_axis});
  }
  return p;
}

absl::Status PruneZeroChannels(Graph& graph, PassContext& ctx) {
  const CompressionOptions* compression = ctx.options().compression;
  if (compression == nullptr || !compression->prune_zero_channels) return absl::OkStatus();
  KILN_RETURN_IF_ERROR(ir::InferShapes(graph));
  KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, graph.TopologicalOrder());
  bool changed = false;
  for (NodeId id : order) {
    std::optional<Producer> producer = AsProducer(graph, id);
    if (!producer) continue;
    // Consumers only change by rewrites of constants, which no walk follows; but the lists
    // are indexed by value, and each rewrite adds constants, so take them fresh.
    const std::vector<std::vector<NodeId>> consumers = graph.Consumers();
    std::vector<Fact> facts(producer->channels);
    for (int64_t c = 0; c < producer->channels; ++c) {
      // A zero channel as the node's post-ops leave it (Sigmoid(0) = 0.5 is not zero).
      facts[c] = producer->zero[c] ? ApplyPostOps(graph.node(id), Zero()) : Unknown();
    }
    Walker walker(graph, consumers, producer->channels);
    if (!walker.Visit(producer->output, producer->axis, producer->rank, facts)) continue;
    PrunePlan& plan = walker.plan();
    std::vector<int64_t> kept;
    for (int64_t c = 0; c < producer->channels; ++c) {
      if (!(producer->zero[c] && plan.removable[c])) kept.push_back(c);
    }
    // A layer keeps at least one channel: an empty tensor would change the consumers'
    // shapes, not just their sums.
    if (kept.empty()) kept.push_back(0);
    const int64_t removed = producer->channels - static_cast<int64_t>(kept.size());
    if (removed == 0) continue;
    plan.edits.insert(plan.edits.begin(), producer->edits.begin(), producer->edits.end());
    for (const ConstantEdit& e : plan.edits) {
      const ValueId old = graph.node(e.node).inputs[e.input];
      Tensor sliced = KeepAlong(*graph.value(old).constant, e.axis, kept);
      const std::string name = graph.UniqueName(graph.value(old).name + "_pruned");
      // A new constant, not an edit in place: the old one may be shared with another node.
      const ValueId fresh = graph.AddConstant(name, std::move(sliced));
      graph.node(e.node).inputs[e.input] = fresh;
    }
    for (NodeId dw : plan.depthwise) {
      graph.node(dw).attrs["group"] = static_cast<int64_t>(kept.size());
    }
    for (const auto& [v, axis] : plan.resized) {
      // The layout pass chooses again (blocked layouts need a multiple of 8 or 16 channels).
      graph.value(v).layout = ir::MemoryLayout::kPlain;
      ir::TensorType& type = graph.value(v).type;
      if (type.rank_known && axis < type.rank()) {
        type.dims[axis] = ir::Dim::Known(static_cast<int64_t>(kept.size()));
      }
    }
    const Node& n = graph.node(id);
    ctx.Note(absl::StrCat("pruned ", removed, " of ", producer->channels, " all-zero ",
                          BaseOp(n) == "Conv" ? "output channels" : "output neurons", " of ",
                          n.Describe(), " and their ", plan.edits.size() - producer->edits.size(),
                          " consumer constants"));
    changed = true;
  }
  if (changed) KILN_RETURN_IF_ERROR(ir::InferShapes(graph));
  return absl::OkStatus();
}

}  // namespace

// After batchnorm_folding (a BatchNorm folded into its Conv is one producer less to follow),
// before the post-op fusions (which hide the activations this pass reasons about).
KILN_REGISTER_PASS("prune_zero_channels", 220, PruneZeroChannels);

}  // namespace kiln::opt
