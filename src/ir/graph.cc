#include "kiln/ir/graph.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <set>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/core/status.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/layout_transparent.h"

namespace kiln::ir {

// TensorType ------------------------------------------------------------------------------

TensorType TensorType::Of(DType dtype, const std::vector<int64_t>& dims) {
  TensorType t{dtype, true, {}};
  t.dims.reserve(dims.size());
  for (int64_t d : dims) t.dims.push_back(d >= 0 ? Dim::Known(d) : Dim::Unknown());
  return t;
}

bool TensorType::fully_known() const {
  if (!rank_known) return false;
  for (const Dim& d : dims) {
    if (!d.is_known()) return false;
  }
  return true;
}

std::optional<Shape> TensorType::shape() const {
  if (!fully_known()) return std::nullopt;
  Shape s;
  for (const Dim& d : dims) s.push_back(d.value);
  return s;
}

std::string TensorType::ToString() const {
  std::string out(DTypeName(dtype));
  if (!rank_known) return absl::StrCat(out, "[?]");
  std::vector<std::string> parts;
  for (const Dim& d : dims) {
    if (d.is_known()) {
      parts.push_back(absl::StrCat(d.value));
    } else if (!d.symbol.empty()) {
      parts.push_back(d.symbol);
    } else {
      parts.push_back("?");
    }
  }
  return absl::StrCat(out, "[", absl::StrJoin(parts, ", "), "]");
}

// Node ------------------------------------------------------------------------------------

namespace {
template <typename T>
const T* FindAttr(const Node& node, absl::string_view key) {
  auto it = node.attrs.find(std::string(key));
  if (it == node.attrs.end()) return nullptr;
  return std::get_if<T>(&it->second);
}
}  // namespace

int64_t Node::GetInt(absl::string_view key, int64_t default_value) const {
  if (const auto* v = FindAttr<int64_t>(*this, key)) return *v;
  // Importers may store small floats where an int is expected and vice versa; accept both.
  if (const auto* f = FindAttr<float>(*this, key)) return static_cast<int64_t>(*f);
  return default_value;
}

float Node::GetFloat(absl::string_view key, float default_value) const {
  if (const auto* v = FindAttr<float>(*this, key)) return *v;
  if (const auto* i = FindAttr<int64_t>(*this, key)) return static_cast<float>(*i);
  return default_value;
}

std::string Node::GetString(absl::string_view key, const std::string& default_value) const {
  if (const auto* v = FindAttr<std::string>(*this, key)) return *v;
  return default_value;
}

std::vector<int64_t> Node::GetInts(absl::string_view key,
                                   const std::vector<int64_t>& default_value) const {
  if (const auto* v = FindAttr<std::vector<int64_t>>(*this, key)) return *v;
  if (const auto* i = FindAttr<int64_t>(*this, key)) return {*i};
  return default_value;
}

std::vector<float> Node::GetFloats(absl::string_view key) const {
  if (const auto* v = FindAttr<std::vector<float>>(*this, key)) return *v;
  if (const auto* f = FindAttr<float>(*this, key)) return {*f};
  return {};
}

std::vector<std::string> Node::GetStrings(absl::string_view key) const {
  if (const auto* v = FindAttr<std::vector<std::string>>(*this, key)) return *v;
  if (const auto* s = FindAttr<std::string>(*this, key)) return {*s};
  return {};
}

const Tensor* Node::GetTensor(absl::string_view key) const { return FindAttr<Tensor>(*this, key); }

GraphPtr Node::GetGraph(absl::string_view key) const {
  if (const auto* g = FindAttr<GraphPtr>(*this, key)) return *g;
  return nullptr;
}

std::string Node::Describe() const {
  std::string out = op;
  if (!name.empty()) absl::StrAppend(&out, " '", name, "'");
  if (!domain.empty()) absl::StrAppend(&out, " (domain ", domain, ")");
  return out;
}

// Graph -----------------------------------------------------------------------------------

std::string Graph::UniqueName(absl::string_view prefix) {
  std::string base = prefix.empty() ? std::string("v") : std::string(prefix);
  if (value_by_name_.count(base) == 0) return base;
  for (int i = 1;; ++i) {
    std::string candidate = absl::StrCat(base, "_", i);
    if (value_by_name_.count(candidate) == 0) return candidate;
  }
}

ValueId Graph::AddValue(std::string name, TensorType type) {
  const ValueId id = static_cast<ValueId>(values_.size());
  // Names identify values across subgraph boundaries (captures), so they stay unique: a
  // clashing name gets a suffix. Callers keep the returned id.
  name = UniqueName(name);
  value_by_name_[name] = id;
  Value v;
  v.name = std::move(name);
  v.type = std::move(type);
  values_.push_back(std::move(v));
  return id;
}

ValueId Graph::AddConstant(std::string name, Tensor value) {
  TensorType type = TensorType::Of(value.dtype(), value.shape().ToVector());
  const ValueId id = AddValue(std::move(name), std::move(type));
  values_[id].constant = std::move(value);
  return id;
}

std::optional<ValueId> Graph::FindValue(absl::string_view name) const {
  auto it = value_by_name_.find(std::string(name));
  if (it == value_by_name_.end()) return std::nullopt;
  return it->second;
}

NodeId Graph::AddNode(Node node) {
  const NodeId id = static_cast<NodeId>(nodes_.size());
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId v = node.outputs[i];
    if (v == kNoValue || v < 0 || v >= num_values()) continue;
    values_[v].producer = id;
    values_[v].producer_output = static_cast<int>(i);
  }
  nodes_.push_back(std::move(node));
  return id;
}

NodeId Graph::AddNode(std::string op, std::vector<ValueId> inputs, int num_outputs,
                      std::map<std::string, Attribute> attrs, std::string name,
                      std::string domain) {
  Node node;
  node.op = std::move(op);
  node.domain = std::move(domain);
  node.name = std::move(name);
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  const std::string base = node.name.empty() ? node.op : node.name;
  for (int i = 0; i < num_outputs; ++i) {
    node.outputs.push_back(AddValue(num_outputs == 1 ? base : absl::StrCat(base, ":", i)));
  }
  return AddNode(std::move(node));
}

int Graph::num_live_nodes() const {
  int n = 0;
  for (const Node& node : nodes_) n += node.removed ? 0 : 1;
  return n;
}

namespace {

void ForEachSubgraph(const Node& node, const std::function<void(const Graph&)>& fn) {
  for (const auto& [key, attr] : node.attrs) {
    if (const auto* g = std::get_if<GraphPtr>(&attr)) {
      if (*g) fn(**g);
    } else if (const auto* gs = std::get_if<std::vector<GraphPtr>>(&attr)) {
      for (const auto& sub : *gs) {
        if (sub) fn(*sub);
      }
    }
  }
}

}  // namespace

std::set<std::string> OuterNamesUsedBy(const Graph& graph) {
  std::set<std::string> names;
  for (const auto& [local, outer_name] : graph.captures) names.insert(outer_name);
  // Nested subgraphs may name values of any enclosing scope; those not defined here are
  // outer names of this graph too.
  for (const Node& node : graph.nodes()) {
    if (node.removed) continue;
    ForEachSubgraph(node, [&](const Graph& sub) {
      for (const std::string& n : OuterNamesUsedBy(sub)) {
        if (!graph.FindValue(n).has_value()) names.insert(n);
      }
    });
  }
  return names;
}

std::vector<ValueId> CapturedValues(const Graph& graph, const Node& node) {
  std::vector<ValueId> ids;
  ForEachSubgraph(node, [&](const Graph& sub) {
    for (const std::string& n : OuterNamesUsedBy(sub)) {
      if (auto id = graph.FindValue(n)) ids.push_back(*id);
    }
  });
  return ids;
}

absl::StatusOr<std::vector<NodeId>> Graph::TopologicalOrder() const {
  const int n = num_nodes();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<NodeId>> dependents(n);
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = nodes_[id];
    if (node.removed) continue;
    std::vector<ValueId> reads = node.inputs;
    for (ValueId c : CapturedValues(*this, node)) reads.push_back(c);
    std::set<NodeId> deps;
    for (ValueId v : reads) {
      if (v == kNoValue || v < 0 || v >= num_values()) continue;
      const NodeId p = values_[v].producer;
      if (p == kNoNode || p >= n || nodes_[p].removed || p == id) {
        if (p == id)
          return absl::InvalidArgumentError(
              absl::StrCat("graph has a cycle: ", node.Describe(), " reads its own output"));
        continue;
      }
      deps.insert(p);
    }
    pending[id] = static_cast<int>(deps.size());
    for (NodeId p : deps) dependents[p].push_back(id);
  }
  std::vector<NodeId> order;
  std::deque<NodeId> ready;
  for (NodeId id = 0; id < n; ++id) {
    if (!nodes_[id].removed && pending[id] == 0) ready.push_back(id);
  }
  while (!ready.empty()) {
    const NodeId id = ready.front();
    ready.pop_front();
    order.push_back(id);
    for (NodeId d : dependents[id]) {
      if (--pending[d] == 0) ready.push_back(d);
    }
  }
  if (static_cast<int>(order.size()) != num_live_nodes()) {
    for (NodeId id = 0; id < n; ++id) {
      if (!nodes_[id].removed && pending[id] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph has a cycle through node ", nodes_[id].Describe()));
      }
    }
  }
  return order;
}

std::vector<std::vector<NodeId>> Graph::Consumers() const {
  std::vector<std::vector<NodeId>> consumers(values_.size());
  for (NodeId id = 0; id < num_nodes(); ++id) {
    const Node& node = nodes_[id];
    if (node.removed) continue;
    std::set<ValueId> reads;
    for (ValueId v : node.inputs) {
      if (v >= 0 && v < num_values()) reads.insert(v);
    }
    for (ValueId v : CapturedValues(*this, node)) reads.insert(v);
    for (ValueId v : reads) consumers[v].push_back(id);
  }
  return consumers;
}

void Graph::ReplaceAllUses(ValueId from, ValueId to) {
  for (Node& node : nodes_) {
    if (node.removed) continue;
    for (ValueId& v : node.inputs) {
      if (v == from) v = to;
    }
  }
  for (ValueId& v : outputs) {
    if (v == from) v = to;
  }
}

void Graph::Compact() {
  const int nv = num_values();
  std::vector<bool> keep(nv, false);
  auto mark = [&](ValueId v) {
    if (v >= 0 && v < nv) keep[v] = true;
  };
  std::set<std::string> captured_names;
  for (const Node& node : nodes_) {
    if (node.removed) continue;
    for (ValueId v : node.inputs) mark(v);
    for (ValueId v : node.outputs) mark(v);
    ForEachSubgraph(node, [&](const Graph& sub) {
      for (const std::string& n : OuterNamesUsedBy(sub)) captured_names.insert(n);
    });
  }
  for (ValueId v : inputs) mark(v);
  for (ValueId v : outputs) mark(v);
  for (const auto& [v, name] : captures) mark(v);
  for (const std::string& n : captured_names) {
    if (auto id = FindValue(n)) mark(*id);
  }

  std::vector<ValueId> remap(nv, kNoValue);
  std::vector<Value> new_values;
  for (ValueId v = 0; v < nv; ++v) {
    if (!keep[v]) continue;
    remap[v] = static_cast<ValueId>(new_values.size());
    new_values.push_back(std::move(values_[v]));
  }
  auto fix = [&](ValueId& v) {
    if (v >= 0 && v < nv) v = remap[v];
  };
  std::vector<Node> new_nodes;
  for (Node& node : nodes_) {
    if (node.removed) continue;
    for (ValueId& v : node.inputs) fix(v);
    for (ValueId& v : node.outputs) fix(v);
    new_nodes.push_back(std::move(node));
  }
  for (ValueId& v : inputs) fix(v);
  for (ValueId& v : outputs) fix(v);
  for (auto& [v, name] : captures) fix(v);
  values_ = std::move(new_values);
  nodes_ = std::move(new_nodes);
  value_by_name_.clear();
  for (ValueId v = 0; v < num_values(); ++v) {
    values_[v].producer = kNoNode;
    values_[v].producer_output = 0;
    value_by_name_[values_[v].name] = v;
  }
  for (NodeId id = 0; id < num_nodes(); ++id) {
    for (size_t i = 0; i < nodes_[id].outputs.size(); ++i) {
      const ValueId v = nodes_[id].outputs[i];
      if (v == kNoValue) continue;
      values_[v].producer = id;
      values_[v].producer_output = static_cast<int>(i);
    }
  }
}

// Verify ----------------------------------------------------------------------------------

const char* MemoryLayoutName(MemoryLayout layout) {
  switch (layout) {
    case MemoryLayout::kPlain:
      return "plain";
    case MemoryLayout::kNhwc:
      return "nhwc";
    case MemoryLayout::kNchw8c:
      return "nChw8c";
    case MemoryLayout::kNchw16c:
      return "nChw16c";
  }
  return "?";
}

int64_t ChannelBlock(MemoryLayout layout) {
  return layout == MemoryLayout::kNchw8c ? 8 : layout == MemoryLayout::kNchw16c ? 16 : 0;
}

bool LayoutAware(const Node& node) {
  if (node.domain == kKilnDomain)
    return node.op == kFusedConvOp || node.op == kFusedConvDepthwiseOp;
  if (!node.domain.empty()) return false;
  return node.op == "Conv" || node.op == "MaxPool" || node.op == "AveragePool" ||
         node.op == "GlobalAveragePool" || node.op == "GlobalMaxPool";
}

namespace {

// A value in a non-plain layout must be a rank-4 float whose channel count fits the layout,
// produced by a layout-aware or layout-transparent node (layout_transparent.h) that writes it
// and read only by such nodes: any other kernel would read its bytes as NCHW. A transparent
// node's carrying inputs and outputs share one layout (its kernel does not convert).
absl::Status VerifyLayouts(const Graph& graph, const std::string& where) {
  std::vector<bool> checked(graph.num_values(), false);
  auto bad = [&](ValueId v, const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "value '", graph.value(v).name, "' in layout ",
                     MemoryLayoutName(graph.value(v).layout), ": ", why));
  };
  for (ValueId v = 0; v < graph.num_values(); ++v) {
    const Value& value = graph.value(v);
    if (value.layout == MemoryLayout::kPlain) continue;
    const TensorType& type = value.type;
    if (type.dtype != DType::kFloat32 || !type.rank_known || type.rank() != 4) {
      return bad(v, absl::StrCat("must be a rank-4 float tensor, is ", type.ToString()));
    }
    const int64_t block = ChannelBlock(value.layout);
    if (block > 0 && (!type.dims[1].is_known() || type.dims[1].value % block != 0)) {
      return bad(v, absl::StrCat("channels must be a known multiple of ", block, ", type is ",
                                 type.ToString()));
    }
    if (value.constant.has_value() || value.producer == kNoNode) {
      return bad(v, "only a node's output can have a layout");
    }
    const Node& producer = graph.node(value.producer);
    std::vector<size_t> carrying;
    const bool transparent = LayoutTransparentInputs(graph, producer, &carrying);
    if (!transparent && (!LayoutAware(producer) || producer.op == "GlobalAveragePool" ||
                         producer.op == "GlobalMaxPool")) {
      return bad(v, absl::StrCat("its producer ", producer.Describe(), " writes NCHW"));
    }
    for (ValueId out : graph.outputs) {
      if (out == v) return bad(v, "a graph output is returned as NCHW");
    }
    checked[v] = true;
  }
  std::vector<size_t> carrying;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (node.removed) continue;
    // A layout-transparent node (layout_transparent.h) reads and writes one layout: its
    // carrying inputs and its outputs must all have it, plain included.
    if (LayoutTransparentInputs(graph, node, &carrying)) {
      const MemoryLayout layout = graph.value(node.outputs[0]).layout;
      auto as = [&](size_t i) {
        return absl::StrCat(node.Describe(), " reads it (input ", i, ") as ",
                            layout == MemoryLayout::kPlain ? "NCHW" : MemoryLayoutName(layout));
      };
      for (ValueId y : node.outputs) {
        if (y != kNoValue && graph.value(y).layout != layout) {
          return bad(y, absl::StrCat("written by ", node.Describe(), " beside an output in ",
                                     MemoryLayoutName(layout)));
        }
      }
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const ValueId v = node.inputs[i];
        if (v == kNoValue) continue;
        const bool carries = std::find(carrying.begin(), carrying.end(), i) != carrying.end();
        const MemoryLayout expected = carries ? layout : MemoryLayout::kPlain;
        if (graph.value(v).layout != expected) return bad(v, as(i));
      }
      continue;
    }
    // A convolution takes a layout on X and on the residual of a fused Add (its last input),
    // a pool on X; everything else reads NCHW.
    const bool residual = IsFusedConv(node) && HasResidual(node);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v == kNoValue || v >= graph.num_values() || !checked[v]) continue;
      const bool accepted =
          LayoutAware(node) && (i == 0 || (residual && i + 1 == node.inputs.size()));
      if (!accepted) {
        return bad(v, absl::StrCat(node.Describe(), " reads it (input ", i, ") as NCHW"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status VerifyGraph(const Graph& graph, const std::string& where) {
  const int nv = graph.num_values();
  std::vector<bool> defined(nv, false);
  std::vector<NodeId> producer(nv, kNoNode);
  for (ValueId v : graph.inputs) {
    if (v < 0 || v >= nv) {
      return absl::InvalidArgumentError(absl::StrCat(where, "graph input id ", v, " out of range"));
    }
    defined[v] = true;
  }
  for (const auto& [v, name] : graph.captures) {
    if (v < 0 || v >= nv) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "capture '", name, "' has value id ", v, " out of range"));
    }
    defined[v] = true;
  }
  for (ValueId v = 0; v < nv; ++v) {
    if (graph.value(v).constant.has_value()) defined[v] = true;
  }
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (node.removed) continue;
    if (node.op.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "node ", id, " has no op"));
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueId v = node.outputs[i];
      if (v == kNoValue) continue;
      if (v < 0 || v >= nv) {
        return absl::InvalidArgumentError(absl::StrCat(where, node.Describe(), ": output ", i,
                                                       " has value id ", v, " out of range"));
      }
      if (producer[v] != kNoNode) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "value '", graph.value(v).name, "' is produced by both ",
                         graph.node(producer[v]).Describe(), " and ", node.Describe()));
      }
      if (defined[v]) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, node.Describe(), " writes '", graph.value(v).name,
                         "', which is a graph input, capture or constant"));
      }
      producer[v] = id;
      if (graph.value(v).producer != id) {
        return absl::InvalidArgumentError(absl::StrCat(where, "value '", graph.value(v).name,
                                                       "' does not record ", node.Describe(),
                                                       " as its producer"));
      }
    }
  }
  for (ValueId v = 0; v < nv; ++v) {
    if (producer[v] != kNoNode) defined[v] = true;
  }
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (node.removed) continue;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v == kNoValue) continue;
      if (v < 0 || v >= nv) {
        return absl::InvalidArgumentError(absl::StrCat(where, node.Describe(), ": input ", i,
                                                       " has value id ", v, " out of range"));
      }
      if (!defined[v]) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, node.Describe(), ": input ", i, " '", graph.value(v).name,
                         "' is not a graph input, constant, capture or output of a live node"));
      }
    }
    absl::Status sub_status;
    ForEachSubgraph(node, [&](const Graph& sub) {
      if (!sub_status.ok()) return;
      sub_status = VerifyGraph(sub, absl::StrCat(where, "in subgraph of ", node.Describe(), ": "));
    });
    KILN_RETURN_IF_ERROR(sub_status);
  }
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const ValueId v = graph.outputs[i];
    if (v < 0 || v >= nv) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "graph output ", i, " has value id ", v, " out of range"));
    }
    if (!defined[v]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "graph output '", graph.value(v).name, "' is never computed"));
    }
  }
  auto order = graph.TopologicalOrder();
  if (!order.ok()) return Annotate(order.status(), where);
  return VerifyLayouts(graph, where);
}

}  // namespace

absl::Status Verify(const Graph& graph) { return VerifyGraph(graph, ""); }

// Printer ---------------------------------------------------------------------------------

namespace {

std::string TensorSummary(const Tensor& t) {
  if (t.num_elements() <= 8) return t.DebugString(8);
  return absl::StrCat(DTypeName(t.dtype()), t.shape().ToString());
}

void PrintGraph(const Graph& graph, int indent, std::string* out);

std::string AttrToString(const Attribute& attr, int indent, std::string* nested) {
  struct Visitor {
    int indent;
    std::string* nested;
    std::string operator()(int64_t v) { return absl::StrCat(v); }
    std::string operator()(float v) { return absl::StrCat(v); }
    std::string operator()(const std::string& v) { return absl::StrCat("\"", v, "\""); }
    std::string operator()(const Tensor& v) { return TensorSummary(v); }
    std::string operator()(const GraphPtr& g) {
      if (!g) return "<null graph>";
      PrintGraph(*g, indent + 4, nested);
      return absl::StrCat("<graph ", g->name, ">");
    }
    std::string operator()(const std::vector<int64_t>& v) {
      return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
    }
    std::string operator()(const std::vector<float>& v) {
      return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
    }
    std::string operator()(const std::vector<std::string>& v) {
      return absl::StrCat("[\"", absl::StrJoin(v, "\", \""), "\"]");
    }
    std::string operator()(const std::vector<Tensor>& v) {
      std::vector<std::string> parts;
      for (const Tensor& t : v) parts.push_back(TensorSummary(t));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    std::string operator()(const std::vector<GraphPtr>& v) {
      std::vector<std::string> parts;
      for (const GraphPtr& g : v) parts.push_back((*this)(g));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
  };
  return std::visit(Visitor{indent, nested}, attr);
}

void PrintGraph(const Graph& graph, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  auto value_ref = [&](ValueId v) -> std::string {
    if (v == kNoValue) return "<none>";
    if (v < 0 || v >= graph.num_values()) return absl::StrCat("<bad id ", v, ">");
    return absl::StrCat("%", graph.value(v).name);
  };
  absl::StrAppend(out, pad, "graph ", graph.name.empty() ? "<unnamed>" : graph.name, " {\n");
  for (ValueId v : graph.inputs) {
    absl::StrAppend(out, pad, "  input ", value_ref(v), ": ", graph.value(v).type.ToString(), "\n");
  }
  for (const auto& [v, name] : graph.captures) {
    absl::StrAppend(out, pad, "  capture ", value_ref(v), " = outer %", name, "\n");
  }
  for (ValueId v = 0; v < graph.num_values(); ++v) {
    const Value& value = graph.value(v);
    if (!value.constant.has_value()) continue;
    absl::StrAppend(out, pad, "  const ", value_ref(v), " = ", TensorSummary(*value.constant),
                    "\n");
  }
  auto order = graph.TopologicalOrder();
  std::vector<NodeId> ids;
  if (order.ok()) {
    ids = *order;
  } else {
    for (NodeId id = 0; id < graph.num_nodes(); ++id) {
      if (!graph.node(id).removed) ids.push_back(id);
    }
  }
  for (NodeId id : ids) {
    const Node& node = graph.node(id);
    std::vector<std::string> outs;
    for (ValueId v : node.outputs) {
      if (v == kNoValue || v < 0 || v >= graph.num_values()) {
        outs.push_back(value_ref(v));
      } else {
        outs.push_back(absl::StrCat(value_ref(v), ": ", graph.value(v).type.ToString()));
      }
    }
    std::vector<std::string> ins;
    for (ValueId v : node.inputs) ins.push_back(value_ref(v));
    std::string nested;
    std::vector<std::string> attrs;
    for (const auto& [key, attr] : node.attrs) {
      attrs.push_back(absl::StrCat(key, "=", AttrToString(attr, indent, &nested)));
    }
    absl::StrAppend(out, pad, "  ", absl::StrJoin(outs, ", "), " = ",
                    node.domain.empty() ? "" : absl::StrCat(node.domain, "::"), node.op, "(",
                    absl::StrJoin(ins, ", "), ")");
    if (!attrs.empty()) absl::StrAppend(out, " {", absl::StrJoin(attrs, ", "), "}");
    if (!node.name.empty()) absl::StrAppend(out, "  # ", node.name);
    absl::StrAppend(out, "\n", nested);
  }
  std::vector<std::string> outs;
  for (ValueId v : graph.outputs) outs.push_back(value_ref(v));
  absl::StrAppend(out, pad, "  return ", absl::StrJoin(outs, ", "), "\n", pad, "}\n");
}

}  // namespace

std::string Graph::ToString() const {
  std::string out;
  PrintGraph(*this, 0, &out);
  return out;
}

bool AttributesEqual(const Attribute& a, const Attribute& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Tensor>) {
          return TensorsIdentical(x, y);
        } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
          return std::equal(x.begin(), x.end(), y.begin(), y.end(), TensorsIdentical);
        } else {
          return x == y;  // graphs by pointer; a NaN float compares unequal
        }
      },
      a);
}

}  // namespace kiln::ir
