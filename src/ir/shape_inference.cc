// Static shape and dtype inference on the IR. Rules are per operator and deliberately
// conservative: when a rule cannot tell, the value stays unknown. Concrete shapes are settled
// later by the kernels' Reshape when a plan is compiled, so this only serves the optimizer
// and the printer.
#include <functional>
#include <optional>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/conv_geometry.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/onnx_types.h"

namespace kiln::ir {
namespace {

using Rule = std::function<void(const Graph&, const Node&, std::vector<TensorType>&)>;

const TensorType* InputType(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] == kNoValue) return nullptr;
  return &g.value(n.inputs[i]).type;
}

// Numpy-style broadcasting of two types; unknown where it cannot be decided.
TensorType Broadcast(const TensorType& a, const TensorType& b, DType dtype) {
  if (!a.rank_known || !b.rank_known) return TensorType::UnknownRank(dtype);
  const int rank = std::max(a.rank(), b.rank());
  TensorType out{dtype, true, std::vector<Dim>(rank)};
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank());
    const int ib = i - (rank - b.rank());
    const Dim* da = ia >= 0 ? &a.dims[ia] : nullptr;
    const Dim* db = ib >= 0 ? &b.dims[ib] : nullptr;
    if (da == nullptr) {
      out.dims[i] = *db;
    } else if (db == nullptr) {
      out.dims[i] = *da;
    } else if (da->is_known() && da->value == 1) {
      out.dims[i] = *db;
    } else if (db->is_known() && db->value == 1) {
      out.dims[i] = *da;
    } else if (*da == *db) {
      out.dims[i] = *da;
    } else if (da->is_known()) {
      out.dims[i] = *da;  // the other is unknown and must equal it (or be 1)
    } else if (db->is_known()) {
      out.dims[i] = *db;
    } else {
      out.dims[i] = Dim::Unknown();
    }
  }
  return out;
}

void SameAsInput0(const Graph& g, const Node& n, std::vector<TensorType>& out) {
  if (const TensorType* t = InputType(g, n, 0)) out[0] = *t;
}

void BroadcastAll(const Graph& g, const Node& n, std::vector<TensorType>& out, bool to_bool) {
  const TensorType* first = InputType(g, n, 0);
  if (first == nullptr) return;
  TensorType acc = *first;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const TensorType* t = InputType(g, n, i);
    if (t == nullptr) continue;
    acc = Broadcast(acc, *t, acc.dtype != DType::kInvalid ? acc.dtype : t->dtype);
  }
  if (to_bool) acc.dtype = DType::kBool;
  out[0] = acc;
}

std::optional<std::vector<int64_t>> ConstantInts(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || !g.IsConstant(n.inputs[i])) return std::nullopt;
  const Tensor& t = *g.value(n.inputs[i]).constant;
  std::vector<int64_t> v;
  if (t.dtype() == DType::kInt64) {
    for (int64_t x : t.span<int64_t>()) v.push_back(x);
  } else if (t.dtype() == DType::kInt32) {
    for (int32_t x : t.span<int32_t>()) v.push_back(x);
  } else {
    return std::nullopt;
  }
  return v;
}

const absl::flat_hash_map<std::string, Rule>& Rules() {
  static const auto* rules = [] {
    auto* r = new absl::flat_hash_map<std::string, Rule>();
    for (const char* op :
         {"Identity", "Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "Erf",
          "Gelu", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Round",
          "Sin", "Cos", "Softplus", "Softsign", "Softmax", "LogSoftmax", "Clip", "Sign",
          "Dropout", "BatchNormalization", "LayerNormalization", "InstanceNormalization",
          "LRN", "HardSwish", "Mish", "Celu", "ThresholdedRelu", "PRelu", "Not", "CumSum"}) {
      (*r)[op] = SameAsInput0;
    }
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Sum",
                           "Mean", "BitShift"}) {
      (*r)[op] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
        BroadcastAll(g, n, out, false);
      };
    }
    for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And",
                           "Or", "Xor"}) {
      (*r)[op] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
        BroadcastAll(g, n, out, true);
      };
    }
    (*r)["Where"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* c = InputType(g, n, 0);
      const TensorType* x = InputType(g, n, 1);
      const TensorType* y = InputType(g, n, 2);
      if (!c || !x || !y) return;
      out[0] = Broadcast(Broadcast(*c, *x, x->dtype), *y, x->dtype);
    };
    (*r)["Shape"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* t = InputType(g, n, 0);
      out[0] = TensorType::Of(DType::kInt64, {-1});
      if (t != nullptr && t->rank_known && !n.HasAttr("start") && !n.HasAttr("end")) {
        out[0] = TensorType::Of(DType::kInt64, {t->rank()});
      }
    };
    (*r)["Size"] = [](const Graph&, const Node&, std::vector<TensorType>& out) {
      out[0] = TensorType::Of(DType::kInt64, {});
    };
    (*r)["MatMul"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* a = InputType(g, n, 0);
      const TensorType* b = InputType(g, n, 1);
      if (!a || !b) return;
      if (!a->rank_known || !b->rank_known || a->rank() < 2 || b->rank() < 2) {
        out[0] = TensorType::UnknownRank(a->dtype);
        return;
      }
      TensorType batch_a{a->dtype, true, {a->dims.begin(), a->dims.end() - 2}};
      TensorType batch_b{b->dtype, true, {b->dims.begin(), b->dims.end() - 2}};
      TensorType t = Broadcast(batch_a, batch_b, a->dtype);
      t.dims.push_back(a->dims[a->rank() - 2]);
      t.dims.push_back(b->dims[b->rank() - 1]);
      out[0] = t;
    };
    // Conv (and the optimizer's FusedConv): [N, M, spatial...] with ONNX's size formula.
    Rule conv = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* x = InputType(g, n, 0);
      const TensorType* w = InputType(g, n, 1);
      if (!x || !w || !x->rank_known || !w->rank_known || x->rank() < 3 || w->rank() != x->rank()) return;
      const int spatial = x->rank() - 2;
      TensorType t{x->dtype, true, {x->dims[0], w->dims[0]}};
      std::vector<int64_t> kernel = n.GetInts("kernel_shape");
      const std::vector<int64_t> strides = n.GetInts("strides", std::vector<int64_t>(spatial, 1));
      const std::vector<int64_t> dil = n.GetInts("dilations", std::vector<int64_t>(spatial, 1));
      const std::vector<int64_t> pads = n.GetInts("pads", std::vector<int64_t>(2 * spatial, 0));
      const std::optional<AutoPad> auto_pad = ParseAutoPad(n.GetString("auto_pad", "NOTSET"));
      for (int i = 0; i < spatial; ++i) {
        const Dim& in = x->dims[2 + i];
        int64_t k = i < static_cast<int>(kernel.size()) ? kernel[i]
                    : w->dims[2 + i].is_known() ? w->dims[2 + i].value : -1;
        if (!in.is_known() || k < 0 || !auto_pad.has_value() ||
            strides.size() != static_cast<size_t>(spatial) ||
            dil.size() != static_cast<size_t>(spatial) ||
            pads.size() != static_cast<size_t>(2 * spatial) || strides[i] < 1) {
          t.dims.push_back(Dim::Unknown());
          continue;
        }
        const WindowAxis axis = WindowOutputAxis(in.value, k, strides[i], dil[i], pads[i],
                                                 pads[spatial + i], *auto_pad);
        t.dims.push_back(axis.out > 0 ? Dim::Known(axis.out) : Dim::Unknown());
      }
      out[0] = t;
    };
    (*r)["Conv"] = conv;
    (*r)["Gemm"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* a = InputType(g, n, 0);
      const TensorType* b = InputType(g, n, 1);
      if (!a || !b || !a->rank_known || !b->rank_known || a->rank() != 2 || b->rank() != 2) {
        return;
      }
      const Dim m = n.GetInt("transA", 0) ? a->dims[1] : a->dims[0];
      const Dim k = n.GetInt("transB", 0) ? b->dims[0] : b->dims[1];
      out[0] = TensorType{a->dtype, true, {m, k}};
    };
    (*r)["Transpose"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* t = InputType(g, n, 0);
      if (!t) return;
      if (!t->rank_known) {
        out[0] = TensorType::UnknownRank(t->dtype);
        return;
      }
      std::vector<int64_t> perm = n.GetInts("perm");
      if (perm.empty()) {
        for (int i = t->rank() - 1; i >= 0; --i) perm.push_back(i);
      }
      if (static_cast<int>(perm.size()) != t->rank()) return;
      TensorType o{t->dtype, true, {}};
      for (int64_t p : perm) {
        if (p < 0 || p >= t->rank()) return;
        o.dims.push_back(t->dims[p]);
      }
      out[0] = o;
    };
    (*r)["Concat"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* first = InputType(g, n, 0);
      if (!first) return;
      if (!first->rank_known) {
        out[0] = TensorType::UnknownRank(first->dtype);
        return;
      }
      int64_t axis = n.GetInt("axis", 0);
      if (axis < 0) axis += first->rank();
      if (axis < 0 || axis >= first->rank()) return;
      TensorType o = *first;
      int64_t total = 0;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const TensorType* t = InputType(g, n, i);
        if (!t || !t->rank_known || t->rank() != first->rank() || !t->dims[axis].is_known()) {
          total = -1;
          break;
        }
        total += t->dims[axis].value;
      }
      o.dims[axis] = total >= 0 ? Dim::Known(total) : Dim::Unknown();
      out[0] = o;
    };
    (*r)["Reshape"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* t = InputType(g, n, 0);
      if (!t) return;
      auto shape = ConstantInts(g, n, 1);
      if (!shape) {
        out[0] = TensorType::UnknownRank(t->dtype);
        return;
      }
      TensorType o{t->dtype, true, {}};
      for (size_t i = 0; i < shape->size(); ++i) {
        const int64_t d = (*shape)[i];
        if (d > 0 || (d == 0 && n.GetInt("allowzero", 0))) {
          o.dims.push_back(Dim::Known(d));
        } else if (d == 0 && t->rank_known && static_cast<int>(i) < t->rank()) {
          o.dims.push_back(t->dims[i]);
        } else {
          o.dims.push_back(Dim::Unknown());
        }
      }
      out[0] = o;
    };
    // Pooling: [N, C, spatial...] with ONNX's size formula (ceil_mode included); without
    // these, nothing after a CNN's first MaxPool had a shape, and residual Adds never fused.
    Rule pool = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* x = InputType(g, n, 0);
      if (!x || !x->rank_known || x->rank() < 3) return;
      const int spatial = x->rank() - 2;
      const std::vector<int64_t> kernel = n.GetInts("kernel_shape");
      const std::vector<int64_t> strides = n.GetInts("strides", std::vector<int64_t>(spatial, 1));
      const std::vector<int64_t> dil = n.GetInts("dilations", std::vector<int64_t>(spatial, 1));
      const std::vector<int64_t> pads = n.GetInts("pads", std::vector<int64_t>(2 * spatial, 0));
      const std::optional<AutoPad> auto_pad = ParseAutoPad(n.GetString("auto_pad", "NOTSET"));
      const bool ceil_mode = n.GetInt("ceil_mode", 0) != 0;
      if (!auto_pad.has_value() || kernel.size() != static_cast<size_t>(spatial) ||
          strides.size() != static_cast<size_t>(spatial) ||
          dil.size() != static_cast<size_t>(spatial) ||
          pads.size() != static_cast<size_t>(2 * spatial)) {
        return;
      }
      TensorType t{x->dtype, true, {x->dims[0], x->dims[1]}};
      for (int i = 0; i < spatial; ++i) {
        const Dim& in = x->dims[2 + i];
        if (!in.is_known() || strides[i] < 1) {
          t.dims.push_back(Dim::Unknown());
          continue;
        }
        const WindowAxis axis = WindowOutputAxis(in.value, kernel[i], strides[i], dil[i], pads[i],
                                                 pads[spatial + i], *auto_pad, ceil_mode);
        t.dims.push_back(axis.out > 0 ? Dim::Known(axis.out) : Dim::Unknown());
      }
      out[0] = t;
      if (out.size() > 1) {
        out[1] = t;
        out[1].dtype = DType::kInt64;
      }
    };
    for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) (*r)[op] = pool;
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) {
      (*r)[op] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
        const TensorType* x = InputType(g, n, 0);
        if (!x || !x->rank_known || x->rank() < 3) return;
        TensorType t{x->dtype, true, {x->dims[0], x->dims[1]}};
        for (int i = 2; i < x->rank(); ++i) t.dims.push_back(Dim::Known(1));
        out[0] = t;
      };
    }
    (*r)["Gather"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* data = InputType(g, n, 0);
      const TensorType* indices = InputType(g, n, 1);
      if (!data) return;
      if (!indices || !data->rank_known || !indices->rank_known || data->rank() < 1) {
        out[0] = TensorType::UnknownRank(data->dtype);
        return;
      }
      int64_t axis = n.GetInt("axis", 0);
      if (axis < 0) axis += data->rank();
      if (axis < 0 || axis >= data->rank()) return;
      TensorType t{data->dtype, true, {data->dims.begin(), data->dims.begin() + axis}};
      t.dims.insert(t.dims.end(), indices->dims.begin(), indices->dims.end());
      t.dims.insert(t.dims.end(), data->dims.begin() + axis + 1, data->dims.end());
      out[0] = t;
    };
    (*r)["Flatten"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* x = InputType(g, n, 0);
      if (!x) return;
      out[0] = TensorType{x->dtype, true, {Dim::Unknown(), Dim::Unknown()}};
      if (!x->rank_known) return;
      int64_t axis = n.GetInt("axis", 1);
      if (axis < 0) axis += x->rank();
      if (axis < 0 || axis > x->rank()) return;
      for (int part = 0; part < 2; ++part) {
        int64_t product = 1;
        const int begin = part == 0 ? 0 : static_cast<int>(axis);
        const int end = part == 0 ? static_cast<int>(axis) : x->rank();
        for (int i = begin; i < end && product >= 0; ++i) {
          product = x->dims[i].is_known() ? product * x->dims[i].value : -1;
        }
        // A single symbolic dimension passes through unchanged (the batch of [N, C, 1, 1]).
        if (product < 0 && end - begin >= 1) {
          int symbolic = -1, unknown = 0;
          int64_t rest = 1;
          for (int i = begin; i < end; ++i) {
            if (x->dims[i].is_known()) {
              rest *= x->dims[i].value;
            } else {
              ++unknown;
              symbolic = i;
            }
          }
          if (unknown == 1 && rest == 1) out[0].dims[part] = x->dims[symbolic];
          continue;
        }
        out[0].dims[part] = Dim::Known(product);
      }
    };
    (*r)["Cast"] = [](const Graph& g, const Node& n, std::vector<TensorType>& out) {
      const TensorType* t = InputType(g, n, 0);
      if (!t || !n.HasAttr("to")) return;
      out[0] = *t;
      out[0].dtype = DType::kInvalid;
      // "to" is ONNX's TensorProto code, or a DType name ("float") from other front ends.
      if (const auto* name = std::get_if<std::string>(&n.attrs.at("to"))) {
        auto dtype = DTypeFromName(*name);
        if (dtype.ok()) out[0].dtype = *dtype;
      } else {
        out[0].dtype = DTypeFromOnnxCode(n.GetInt("to", 0));
      }
    };
    return r;
  }();
  return *rules;
}

absl::Status InferGraph(Graph& graph) {
  KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, graph.TopologicalOrder());
  for (NodeId id : order) {
    Node& node = graph.node(id);
    // Subgraphs get their own inference; their outer values are typed by now.
    for (auto& [key, attr] : node.attrs) {
      if (auto* g = std::get_if<GraphPtr>(&attr); g && *g) {
        KILN_RETURN_IF_ERROR(InferGraph(**g));
      }
    }
    // Kiln-domain nodes have no rules: the optimizer writes them (FusedConv, FusedElementwise,
    // ...) over values whose types inference already gave, and they keep those types.
    if (!node.domain.empty()) continue;
    auto it = Rules().find(node.op);
    if (it == Rules().end()) continue;
    std::vector<TensorType> out(node.outputs.size());
    if (out.empty()) continue;
    it->second(graph, node, out);
    for (size_t i = 0; i < out.size(); ++i) {
      const ValueId v = node.outputs[i];
      if (v == kNoValue) continue;
      TensorType& current = graph.value(v).type;
      // Keep what an importer declared when the rule learned nothing.
      if (out[i].dtype == DType::kInvalid && !out[i].rank_known) continue;
      if (out[i].dtype == DType::kInvalid) out[i].dtype = current.dtype;
      if (!out[i].rank_known && current.rank_known) {
        current.dtype = out[i].dtype;
        continue;
      }
      current = out[i];
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InferShapes(Graph& graph) { return InferGraph(graph); }

}  // namespace kiln::ir
