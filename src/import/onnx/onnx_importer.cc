// ONNX ModelProto -> ImportedModel (one "serving_default" signature).
#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "import/onnx/onnx_internal.h"
#include "kiln/core/status.h"
#include "kiln/import/onnx.h"

namespace kiln::import {
namespace {

using ::onnx::AttributeProto;
using ::onnx::FunctionProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TypeProto;
using ir::ValueId;
using ir::kNoValue;
using onnx_internal::DTypeFromOnnx;

constexpr int kMaxFunctionDepth = 32;
constexpr int kMaxGraphDepth = 64;
// Model-local functions are inlined at every call and may call each other, so a few hundred
// bytes (F1 calls F0 twice, F2 calls F1 twice, ...) expand to 2^31 nodes within the depth limit
// above. Real models expand far less: a module-per-function export of a transformer expands
// by at most about min(layers, nodes per layer), 10-20 for BERT and Llama-sized models. An
// import may convert at most this many nodes per NodeProto the file holds (graphs, subgraphs
// and functions counted), and never more than kMaxConvertedNodes. The ratio is also what
// keeps the loader fuzzer's inputs (64 KiB at most) within its 10-second timeout under ASan:
// at 256 a 2-KB mutation of its seed expanded to 16k nodes and timed out on the loaded machine.
constexpr int64_t kMaxNodesPerNodeProto = 64;
constexpr int64_t kMaxConvertedNodes = int64_t{1} << 22;

using OpsetMap = std::map<std::string, int64_t>;

std::string CanonicalDomain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

std::string DomainLabel(const std::string& domain) {
  return domain.empty() ? std::string("ai.onnx") : domain;
}

// Why kNewestOnnxIrVersion and kNewestOnnxOpset (onnx.h) are what they are:
// - IR version 10 (ONNX 1.16, the release that introduced opset 21). Its additions are the
//   int4/uint4 element types, which DTypeFromOnnx refuses by name; function overloads, refused
//   in Run(); and metadata_props on nodes and graphs, which do not change what a model
//   computes.
// - ai.onnx opset 21: op_table.cc lists the operators of opsets 1 to 21, normalize.cc rewrites
//   the attribute-to-input changes up to opset 18, and the kernels follow or refuse the
//   later changes by name (opset 20's DFT axis input, opset 21's per-channel
//   GroupNormalization scale).
// - com.microsoft and com.microsoft.nchwc: ONNX Runtime's contrib operators exist at version
//   1 only, which is what EmitMicrosoft expands.
// Other domains (ai.onnx.ml, ai.onnx.preview.training, ...) have no operators here at all;
// their nodes are reported as unsupported operators, so their versions are not checked.
std::optional<int64_t> NewestOpset(const std::string& canonical_domain) {
  if (canonical_domain.empty()) return kNewestOnnxOpset;
  if (canonical_domain == "com.microsoft" || canonical_domain == "com.microsoft.nchwc") return 1;
  return std::nullopt;
}

// Refuses an opset_import entry newer than the importer knows. `where` prefixes the message
// ("model.onnx" or "model.onnx: function 'F'").
absl::Status CheckOpsetVersion(const std::string& where, const std::string& domain,
                               int64_t version) {
  const std::string canonical = CanonicalDomain(domain);
  const std::optional<int64_t> newest = NewestOpset(canonical);
  if (!newest.has_value() || version <= *newest) return absl::OkStatus();
  const std::string label = DomainLabel(canonical);
  std::string advice;
  if (canonical.empty()) {
    advice = absl::StrCat("; export the model at opset ", *newest, " or lower (torch.onnx.export(",
                          "..., opset_version=", *newest, "), tf2onnx --opset ", *newest,
                          ") or convert it with onnx.version_converter.convert_version(model, ",
                          *newest, ")");
  } else {
    advice = absl::StrCat("; ONNX Runtime's ", label, " operators exist at version ", *newest,
                          " only");
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": opset ", version, " of domain '", label,
                   "' is newer than the newest this importer supports (", *newest, ")", advice));
}

std::string NodeLabel(const NodeProto& node) {
  return absl::StrCat(node.op_type(), " '", node.name().empty() ? "<unnamed>" : node.name(), "'");
}

std::string TypeProtoToString(const TypeProto& type) {
  switch (type.value_case()) {
    case TypeProto::kTensorType:
      return absl::StrCat("tensor(", onnx_internal::OnnxTypeName(type.tensor_type().elem_type()),
                          ")");
    case TypeProto::kSequenceType:
      return absl::StrCat("sequence(", TypeProtoToString(type.sequence_type().elem_type()), ")");
    case TypeProto::kOptionalType:
      return absl::StrCat("optional(", TypeProtoToString(type.optional_type().elem_type()), ")");
    case TypeProto::kMapType:
      return absl::StrCat("map(", onnx_internal::OnnxTypeName(type.map_type().key_type()), ",",
                          TypeProtoToString(type.map_type().value_type()), ")");
    case TypeProto::kSparseTensorType:
      return absl::StrCat("sparse_tensor(",
                          onnx_internal::OnnxTypeName(type.sparse_tensor_type().elem_type()), ")");
    default:
      return "unknown";
  }
}

ir::TensorType TensorTypeFromProto(const TypeProto& type) {
  const ::onnx::TensorShapeProto* shape = nullptr;
  int32_t elem_type = 0;
  if (type.has_tensor_type()) {
    elem_type = type.tensor_type().elem_type();
    if (type.tensor_type().has_shape()) shape = &type.tensor_type().shape();
  } else if (type.has_sparse_tensor_type()) {
    elem_type = type.sparse_tensor_type().elem_type();
    if (type.sparse_tensor_type().has_shape()) shape = &type.sparse_tensor_type().shape();
  } else {
    return ir::TensorType{};  // sequences, maps, optionals: no tensor type
  }
  ir::TensorType out;
  absl::StatusOr<DType> dtype = DTypeFromOnnx(elem_type);
  out.dtype = dtype.ok() ? *dtype : DType::kInvalid;
  if (shape != nullptr) {
    out.rank_known = true;
    for (const auto& dim : shape->dim()) {
      if (dim.has_dim_value() && dim.dim_value() >= 0) {
        out.dims.push_back(ir::Dim::Known(dim.dim_value()));
      } else if (dim.has_dim_param() && !dim.dim_param().empty()) {
        out.dims.push_back(ir::Dim::Symbol(dim.dim_param()));
      } else {
        out.dims.push_back(ir::Dim::Unknown());
      }
    }
  }
  return out;
}

TensorInfo InfoFromType(const std::string& name, const ir::TensorType& type) {
  TensorInfo info;
  info.name = name;
  info.dtype = type.dtype;
  info.rank_known = type.rank_known;
  for (const ir::Dim& d : type.dims) info.shape.push_back(d.is_known() ? d.value : -1);
  return info;
}

// Every name a model uses, in any graph or function, so generated names never clash.
void CollectNames(const GraphProto& graph, std::set<std::string>& names) {
  for (const auto& t : graph.initializer()) names.insert(t.name());
  for (const auto& v : graph.input()) names.insert(v.name());
  for (const auto& v : graph.output()) names.insert(v.name());
  for (const auto& node : graph.node()) {
    names.insert(node.input().begin(), node.input().end());
    names.insert(node.output().begin(), node.output().end());
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) CollectNames(attr.g(), names);
      for (const auto& g : attr.graphs()) CollectNames(g, names);
    }
  }
}

// NodeProtos in `graph` and its subgraphs (protobuf's recursion limit bounds the nesting).
int64_t CountNodeProtos(const GraphProto& graph) {
  int64_t count = graph.node_size();
  for (const auto& node : graph.node()) {
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) count += CountNodeProtos(attr.g());
      for (const auto& g : attr.graphs()) count += CountNodeProtos(g);
    }
  }
  return count;
}

// Names a node reads, including those its subgraphs read from enclosing scopes.
void CollectReads(const NodeProto& node, std::set<std::string>& reads) {
  reads.insert(node.input().begin(), node.input().end());
  for (const auto& attr : node.attribute()) {
    std::vector<const GraphProto*> graphs;
    if (attr.has_g()) graphs.push_back(&attr.g());
    for (const auto& g : attr.graphs()) graphs.push_back(&g);
    for (const GraphProto* g : graphs) {
      for (const auto& inner : g->node()) CollectReads(inner, reads);
      for (const auto& out : g->output()) reads.insert(out.name());
    }
  }
}

class Importer {
 public:
  Importer(const ModelProto& model, std::string name, std::string external_data_dir)
      : model_(model), name_(std::move(name)), external_data_dir_(std::move(external_data_dir)) {}

  absl::StatusOr<ImportedModel> Run();

 private:
  struct Scope {
    ir::Graph* graph = nullptr;
    Scope* parent = nullptr;
    std::map<std::string, ir::TensorType> declared_types;  // value_info and outputs
    int depth = 0;
  };

  absl::Status ConvertGraph(const GraphProto& proto, Scope* parent, ir::Graph& graph,
                            const OpsetMap& opsets, int depth);
  absl::StatusOr<std::vector<const NodeProto*>> SortNodes(const GraphProto& proto);
  absl::StatusOr<ValueId> Lookup(Scope& scope, const std::string& name);
  absl::Status ConvertNode(const NodeProto& node, Scope& scope, const OpsetMap& opsets,
                           int function_depth);
  absl::Status InlineFunction(const NodeProto& node, const FunctionProto& function,
                              Scope& scope, int function_depth);
  absl::StatusOr<ir::Attribute> ConvertAttribute(const AttributeProto& attr, const NodeProto& node,
                                                 Scope& scope, const OpsetMap& opsets);
  absl::StatusOr<Tensor> ConstantNodeValue(const NodeProto& node);
  std::string FreshName(const ir::Graph& graph, absl::string_view prefix);

  const ModelProto& model_;
  std::string name_;
  std::string external_data_dir_;
  std::set<std::string> reserved_names_;
  std::map<std::pair<std::string, std::string>, const FunctionProto*> functions_;
  std::vector<std::string> unsupported_;
  int fresh_counter_ = 0;
  // Nodes ConvertNode may still convert (kMaxNodesPerNodeProto) and sparse tensors' bytes
  // still to densify (onnx_internal::kMaxDensifiedBytes): the bounds on what a small file can
  // make the import do.
  int64_t nodes_left_ = 0;
  int64_t node_budget_ = 0;
  int64_t dense_bytes_left_ = onnx_internal::kMaxDensifiedBytes;
};

std::string Importer::FreshName(const ir::Graph& graph, absl::string_view prefix) {
  std::string name(prefix);
  while (reserved_names_.count(name) > 0 || graph.FindValue(name).has_value()) {
    name = absl::StrCat(prefix, "_", ++fresh_counter_);
  }
  reserved_names_.insert(name);
  return name;
}

absl::StatusOr<ValueId> Importer::Lookup(Scope& scope, const std::string& name) {
  if (std::optional<ValueId> id = scope.graph->FindValue(name)) return *id;
  if (scope.parent == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "'", name, "' is not a graph input, initializer or output of an earlier node"));
  }
  KILN_ASSIGN_OR_RETURN(ValueId outer, Lookup(*scope.parent, name));
  const ir::Value& outer_value = scope.parent->graph->value(outer);
  if (outer_value.constant.has_value()) {
    // Constants are copied into the subgraph (sharing the buffer) so that passes working on
    // the subgraph alone can fold them.
    return scope.graph->AddConstant(name, *outer_value.constant);
  }
  const ValueId id = scope.graph->AddValue(name, outer_value.type);
  scope.graph->captures.emplace_back(id, name);
  return id;
}

absl::StatusOr<std::vector<const NodeProto*>> Importer::SortNodes(const GraphProto& proto) {
  std::vector<const NodeProto*> order;
  std::map<std::string, int> producer;
  for (int i = 0; i < proto.node_size(); ++i) {
    for (const auto& out : proto.node(i).output()) {
      if (!out.empty()) producer.emplace(out, i);
    }
  }
  std::vector<std::vector<int>> deps(proto.node_size());
  bool sorted = true;
  for (int i = 0; i < proto.node_size(); ++i) {
    std::set<std::string> reads;
    CollectReads(proto.node(i), reads);
    for (const std::string& r : reads) {
      auto it = producer.find(r);
      if (it == producer.end() || it->second == i) continue;
      deps[i].push_back(it->second);
      if (it->second > i) sorted = false;
    }
  }
  if (sorted) {
    for (const auto& n : proto.node()) order.push_back(&n);
    return order;
  }
  // Some exporters write nodes out of order; ONNX Runtime accepts that, so do we. The
  // depth-first search keeps its own stack: a chain of nodes written in reverse order is as
  // deep as the graph is long, and recursion overflowed the thread's stack on large graphs.
  std::vector<int> state(proto.node_size(), 0);  // 0 new, 1 on stack, 2 done
  std::vector<std::pair<int, size_t>> stack;     // node, index of its next dependency
  for (int root = 0; root < proto.node_size(); ++root) {
    if (state[root] != 0) continue;
    state[root] = 1;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      const int i = stack.back().first;
      const size_t next = stack.back().second;
      if (next == deps[i].size()) {
        state[i] = 2;
        order.push_back(&proto.node(i));
        stack.pop_back();
        continue;
      }
      ++stack.back().second;
      const int d = deps[i][next];
      if (state[d] == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph '", proto.name(), "' has a cycle through node ", NodeLabel(proto.node(d))));
      }
      if (state[d] == 0) {
        state[d] = 1;
        stack.emplace_back(d, 0);
      }
    }
  }
  return order;
}

absl::Status Importer::ConvertGraph(const GraphProto& proto, Scope* parent, ir::Graph& graph,
                                    const OpsetMap& opsets, int depth) {
  if (depth > kMaxGraphDepth) {
    return absl::InvalidArgumentError("subgraphs are nested more than 64 levels deep");
  }
  Scope scope;
  scope.graph = &graph;
  scope.parent = parent;
  scope.depth = depth;
  graph.name = proto.name();
  const std::string graph_label =
      depth == 0 ? std::string("main graph")
                 : absl::StrCat("subgraph '", proto.name(), "'");

  for (const auto& init : proto.initializer()) {
    if (graph.FindValue(init.name()).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(graph_label, ": initializer '", init.name(), "' is defined twice"));
    }
    absl::StatusOr<Tensor> t = onnx_internal::TensorFromProto(init, external_data_dir_);
    if (!t.ok()) return Annotate(t.status(), absl::StrCat(graph_label, ": initializer"));
    graph.AddConstant(init.name(), *std::move(t));
  }
  for (const auto& sparse : proto.sparse_initializer()) {
    absl::StatusOr<Tensor> t =
        onnx_internal::TensorFromSparseProto(sparse, external_data_dir_, &dense_bytes_left_);
    if (!t.ok()) return Annotate(t.status(), absl::StrCat(graph_label, ": sparse initializer"));
    graph.AddConstant(sparse.values().name(), *std::move(t));
  }
  for (const auto& input : proto.input()) {
    if (input.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(graph_label, ": an input has no name"));
    }
    std::optional<ValueId> existing = graph.FindValue(input.name());
    if (existing.has_value()) {
      // Before IR version 4 initializers were also listed as inputs; they stay constants.
      if (graph.IsConstant(*existing)) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(graph_label, ": input '", input.name(), "' is listed twice"));
    }
    graph.inputs.push_back(graph.AddValue(input.name(), TensorTypeFromProto(input.type())));
  }
  for (const auto& info : proto.value_info()) {
    scope.declared_types[info.name()] = TensorTypeFromProto(info.type());
  }
  for (const auto& info : proto.output()) {
    if (info.has_type()) scope.declared_types[info.name()] = TensorTypeFromProto(info.type());
  }

  KILN_ASSIGN_OR_RETURN(std::vector<const NodeProto*> nodes, SortNodes(proto));
  for (const NodeProto* node : nodes) {
    KILN_RETURN_IF_ERROR(ConvertNode(*node, scope, opsets, 0));
  }

  for (const auto& output : proto.output()) {
    absl::StatusOr<ValueId> id = Lookup(scope, output.name());
    if (!id.ok()) {
      return Annotate(id.status(), absl::StrCat(graph_label, ": output '", output.name(), "'"));
    }
    ir::Value& value = graph.value(*id);
    if (output.has_type() && (value.type.dtype == DType::kInvalid || !value.type.rank_known)) {
      ir::TensorType declared = TensorTypeFromProto(output.type());
      if (declared.dtype != DType::kInvalid || declared.rank_known) {
        if (declared.dtype == DType::kInvalid) declared.dtype = value.type.dtype;
        value.type = declared;
      }
    }
    graph.outputs.push_back(*id);
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Importer::ConstantNodeValue(const NodeProto& node) {
  if (node.attribute_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        NodeLabel(node), ": a Constant node needs exactly one value attribute, it has ",
        node.attribute_size()));
  }
  const AttributeProto& attr = node.attribute(0);
  const std::string& key = attr.name();
  if (key == "value") {
    if (!attr.has_t()) {
      return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": 'value' is not a tensor"));
    }
    return onnx_internal::TensorFromProto(attr.t(), external_data_dir_);
  }
  if (key == "sparse_value") {
    return onnx_internal::TensorFromSparseProto(attr.sparse_tensor(), external_data_dir_,
                                                &dense_bytes_left_);
  }
  if (key == "value_float") return Tensor::Scalar<float>(attr.f());
  if (key == "value_int") return Tensor::Scalar<int64_t>(attr.i());
  if (key == "value_string") return Tensor::Scalar<std::string>(attr.s());
  if (key == "value_floats") {
    return Tensor::FromVector<float>({attr.floats().begin(), attr.floats().end()});
  }
  if (key == "value_ints") {
    return Tensor::FromVector<int64_t>({attr.ints().begin(), attr.ints().end()});
  }
  if (key == "value_strings") {
    return Tensor::FromVector<std::string>({attr.strings().begin(), attr.strings().end()});
  }
  return absl::InvalidArgumentError(
      absl::StrCat(NodeLabel(node), ": unknown Constant attribute '", key, "'"));
}

absl::StatusOr<ir::Attribute> Importer::ConvertAttribute(const AttributeProto& attr,
                                                         const NodeProto& node, Scope& scope,
                                                         const OpsetMap& opsets) {
  const std::string label = absl::StrCat(NodeLabel(node), ": attribute '", attr.name(), "'");
  if (!attr.ref_attr_name().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " refers to '", attr.ref_attr_name(), "' outside of a function"));
  }
  AttributeProto::AttributeType type = attr.type();
  if (type == AttributeProto::UNDEFINED) {
    // Some old exporters left the type out; infer it from the field that is set.
    if (attr.has_f()) type = AttributeProto::FLOAT;
    else if (attr.has_i()) type = AttributeProto::INT;
    else if (attr.has_s()) type = AttributeProto::STRING;
    else if (attr.has_t()) type = AttributeProto::TENSOR;
    else if (attr.has_g()) type = AttributeProto::GRAPH;
    else if (attr.floats_size() > 0) type = AttributeProto::FLOATS;
    else if (attr.ints_size() > 0) type = AttributeProto::INTS;
    else if (attr.strings_size() > 0) type = AttributeProto::STRINGS;
    else if (attr.tensors_size() > 0) type = AttributeProto::TENSORS;
    else if (attr.graphs_size() > 0) type = AttributeProto::GRAPHS;
    else return absl::InvalidArgumentError(absl::StrCat(label, " has no type and no value"));
  }
  auto convert_graph = [&](const GraphProto& g) -> absl::StatusOr<ir::GraphPtr> {
    auto sub = std::make_shared<ir::Graph>();
    absl::Status s = ConvertGraph(g, &scope, *sub, opsets, scope.depth + 1);
    if (!s.ok()) return Annotate(s, label);
    return sub;
  };
  auto convert_tensor = [&](const ::onnx::TensorProto& t) -> absl::StatusOr<Tensor> {
    absl::StatusOr<Tensor> out = onnx_internal::TensorFromProto(t, external_data_dir_);
    if (!out.ok()) return Annotate(out.status(), label);
    return out;
  };
  switch (type) {
    case AttributeProto::FLOAT: return ir::Attribute(attr.f());
    case AttributeProto::INT: return ir::Attribute(static_cast<int64_t>(attr.i()));
    case AttributeProto::STRING: return ir::Attribute(attr.s());
    case AttributeProto::TENSOR: {
      KILN_ASSIGN_OR_RETURN(Tensor t, convert_tensor(attr.t()));
      return ir::Attribute(std::move(t));
    }
    case AttributeProto::SPARSE_TENSOR: {
      absl::StatusOr<Tensor> t = onnx_internal::TensorFromSparseProto(
          attr.sparse_tensor(), external_data_dir_, &dense_bytes_left_);
      if (!t.ok()) return Annotate(t.status(), label);
      return ir::Attribute(*std::move(t));
    }
    case AttributeProto::GRAPH: {
      KILN_ASSIGN_OR_RETURN(ir::GraphPtr g, convert_graph(attr.g()));
      return ir::Attribute(std::move(g));
    }
    case AttributeProto::FLOATS:
      return ir::Attribute(std::vector<float>(attr.floats().begin(), attr.floats().end()));
    case AttributeProto::INTS:
      return ir::Attribute(std::vector<int64_t>(attr.ints().begin(), attr.ints().end()));
    case AttributeProto::STRINGS:
      return ir::Attribute(std::vector<std::string>(attr.strings().begin(), attr.strings().end()));
    case AttributeProto::TENSORS: {
      std::vector<Tensor> tensors;
      for (const auto& t : attr.tensors()) {
        KILN_ASSIGN_OR_RETURN(Tensor v, convert_tensor(t));
        tensors.push_back(std::move(v));
      }
      return ir::Attribute(std::move(tensors));
    }
    case AttributeProto::SPARSE_TENSORS: {
      std::vector<Tensor> tensors;
      for (const auto& t : attr.sparse_tensors()) {
        absl::StatusOr<Tensor> v =
            onnx_internal::TensorFromSparseProto(t, external_data_dir_, &dense_bytes_left_);
        if (!v.ok()) return Annotate(v.status(), label);
        tensors.push_back(*std::move(v));
      }
      return ir::Attribute(std::move(tensors));
    }
    case AttributeProto::GRAPHS: {
      std::vector<ir::GraphPtr> graphs;
      for (const auto& g : attr.graphs()) {
        KILN_ASSIGN_OR_RETURN(ir::GraphPtr sub, convert_graph(g));
        graphs.push_back(std::move(sub));
      }
      return ir::Attribute(std::move(graphs));
    }
    case AttributeProto::TYPE_PROTO:
      // Only Optional uses this; its kernel reads the type as text ("tensor(FLOAT)").
      return ir::Attribute(TypeProtoToString(attr.tp()));
    case AttributeProto::TYPE_PROTOS: {
      std::vector<std::string> types;
      for (const auto& tp : attr.type_protos()) types.push_back(TypeProtoToString(tp));
      return ir::Attribute(std::move(types));
    }
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(label, " has unknown type ", type));
}

absl::Status Importer::InlineFunction(const NodeProto& node, const FunctionProto& function,
                                      Scope& scope, int function_depth) {
  if (function_depth >= kMaxFunctionDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        NodeLabel(node), ": model-local functions nest more than 32 deep (recursion?)"));
  }
  std::map<std::string, std::string> rename;
  for (int i = 0; i < function.input_size(); ++i) {
    rename[function.input(i)] = i < node.input_size() ? node.input(i) : std::string();
  }
  for (int i = 0; i < function.output_size(); ++i) {
    rename[function.output(i)] = i < node.output_size() ? node.output(i) : std::string();
  }
  std::map<std::string, const AttributeProto*> caller_attrs;
  for (const auto& a : node.attribute()) caller_attrs[a.name()] = &a;
  std::map<std::string, const AttributeProto*> default_attrs;
  for (const auto& a : function.attribute_proto()) default_attrs[a.name()] = &a;
  const std::string prefix =
      absl::StrCat(node.name().empty() ? function.name() : node.name(), "/");
  auto renamed = [&](const std::string& name) -> std::string {
    if (name.empty()) return name;
    auto it = rename.find(name);
    if (it != rename.end()) return it->second;
    std::string fresh = FreshName(*scope.graph, absl::StrCat(prefix, name));
    rename[name] = fresh;
    return fresh;
  };
  OpsetMap opsets;
  for (const auto& o : model_.opset_import()) opsets[CanonicalDomain(o.domain())] = o.version();
  for (const auto& o : function.opset_import()) opsets[CanonicalDomain(o.domain())] = o.version();
  for (const NodeProto& body : function.node()) {
    NodeProto copy = body;
    if (copy.name().empty()) copy.set_name(absl::StrCat(prefix, body.op_type()));
    else copy.set_name(absl::StrCat(prefix, body.name()));
    for (auto& in : *copy.mutable_input()) in = renamed(in);
    for (auto& out : *copy.mutable_output()) out = renamed(out);
    copy.clear_attribute();
    for (const AttributeProto& a : body.attribute()) {
      if (a.ref_attr_name().empty()) {
        *copy.add_attribute() = a;
        continue;
      }
      const AttributeProto* source = nullptr;
      if (auto it = caller_attrs.find(a.ref_attr_name()); it != caller_attrs.end()) {
        source = it->second;
      } else if (auto d = default_attrs.find(a.ref_attr_name()); d != default_attrs.end()) {
        source = d->second;
      }
      if (source == nullptr) continue;  // unset optional attribute: the op's default applies
      AttributeProto* out = copy.add_attribute();
      *out = *source;
      out->set_name(a.name());
    }
    KILN_RETURN_IF_ERROR(ConvertNode(copy, scope, opsets, function_depth + 1));
  }
  return absl::OkStatus();
}

absl::Status Importer::ConvertNode(const NodeProto& node, Scope& scope, const OpsetMap& opsets,
                                   int function_depth) {
  if (--nodes_left_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        NodeLabel(node), ": inlining the model's local functions expands it past ", node_budget_,
        " nodes (", kMaxNodesPerNodeProto, " per node in the file, at most ", kMaxConvertedNodes,
        "); do its functions call each other many times over?"));
  }
  const std::string domain = CanonicalDomain(node.domain());
  if (node.op_type().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.name(), "' has no op_type"));
  }
  if (auto fn = functions_.find({domain, node.op_type()}); fn != functions_.end()) {
    return InlineFunction(node, *fn->second, scope, function_depth);
  }
  auto opset_it = opsets.find(domain);
  if (opset_it == opsets.end()) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": domain '",
                                                   DomainLabel(domain),
                                                   "' is not in the model's opset_import"));
  }
  const int64_t opset = opset_it->second;

  std::vector<ValueId> inputs;
  for (const std::string& name : node.input()) {
    if (name.empty()) {
      inputs.push_back(kNoValue);
      continue;
    }
    absl::StatusOr<ValueId> id = Lookup(scope, name);
    if (!id.ok()) return Annotate(id.status(), absl::StrCat(NodeLabel(node), ": input"));
    inputs.push_back(*id);
  }

  std::map<std::string, ir::Attribute> attrs;
  const bool is_constant = domain.empty() && node.op_type() == "Constant";
  if (!is_constant) {
    for (const AttributeProto& attr : node.attribute()) {
      KILN_ASSIGN_OR_RETURN(ir::Attribute value, ConvertAttribute(attr, node, scope, opsets));
      attrs[attr.name()] = std::move(value);
    }
  }

  std::vector<ValueId> outputs;
  for (const std::string& name : node.output()) {
    if (name.empty()) {
      outputs.push_back(kNoValue);
      continue;
    }
    if (scope.graph->FindValue(name).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          NodeLabel(node), ": output '", name, "' is already defined in this graph"));
    }
    if (is_constant) continue;
    ir::TensorType type;
    if (auto it = scope.declared_types.find(name); it != scope.declared_types.end()) {
      type = it->second;
    }
    outputs.push_back(scope.graph->AddValue(name, std::move(type)));
  }

  if (is_constant) {
    if (node.output_size() != 1 || node.output(0).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(NodeLabel(node), ": a Constant node needs one output"));
    }
    absl::StatusOr<Tensor> value = ConstantNodeValue(node);
    if (!value.ok()) return Annotate(value.status(), NodeLabel(node));
    scope.graph->AddConstant(node.output(0), *std::move(value));
    return absl::OkStatus();
  }

  onnx_internal::NodeEmitter emitter(
      *scope.graph, node, opset, std::move(inputs), std::move(outputs), std::move(attrs),
      [this, &scope](absl::string_view prefix) { return FreshName(*scope.graph, prefix); });
  const std::string where = absl::StrCat(node.op_type(), " (node '", node.name(), "', domain ",
                                         DomainLabel(domain), ", opset ", opset, ")");
  if (domain.empty()) {
    if (onnx_internal::KnownOnnxOpSet().count(node.op_type()) == 0) {
      unsupported_.push_back(where);
      return absl::OkStatus();
    }
    absl::Status s = emitter.EmitOnnx();
    if (absl::IsUnimplemented(s)) {
      unsupported_.push_back(absl::StrCat(where, ": ", s.message()));
      return absl::OkStatus();
    }
    return s;
  }
  if (domain == "com.microsoft" || domain == "com.microsoft.nchwc") {
    absl::Status s = emitter.EmitMicrosoft();
    if (absl::IsNotFound(s) || absl::IsUnimplemented(s)) {
      unsupported_.push_back(absl::IsNotFound(s) ? where : absl::StrCat(where, ": ", s.message()));
      return absl::OkStatus();
    }
    return s;
  }
  unsupported_.push_back(where);
  return absl::OkStatus();
}

absl::StatusOr<ImportedModel> Importer::Run() {
  if (!model_.has_graph()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": the ModelProto has no graph (field 7); is this an ONNX model?"));
  }
  if (model_.ir_version() > kNewestOnnxIrVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": ONNX IR version ", model_.ir_version(),
        " is newer than the newest this importer supports (", kNewestOnnxIrVersion,
        "); save the model with onnx 1.17 or older (onnx 1.16 and 1.17 write IR version ",
        kNewestOnnxIrVersion, ")"));
  }
  OpsetMap opsets;
  for (const auto& o : model_.opset_import()) {
    KILN_RETURN_IF_ERROR(CheckOpsetVersion(name_, o.domain(), o.version()));
  }
  for (const FunctionProto& f : model_.functions()) {
    for (const auto& o : f.opset_import()) {
      KILN_RETURN_IF_ERROR(CheckOpsetVersion(
          absl::StrCat(name_, ": function '", DomainLabel(CanonicalDomain(f.domain())), ".",
                       f.name(), "'"),
          o.domain(), o.version()));
    }
  }
  for (const auto& o : model_.opset_import()) {
    const std::string domain = CanonicalDomain(o.domain());
    if (o.version() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": opset_import for domain ",
                                                     DomainLabel(domain), " has version ",
                                                     o.version()));
    }
    opsets[domain] = o.version();
  }
  if (model_.opset_import_size() == 0) {
    // IR version 2 and older predate opset_import; their operators are opset 1.
    opsets[""] = 1;
  }
  for (const FunctionProto& f : model_.functions()) {
    // IR version 10 lets a model define one function name several times, told apart by an
    // `overload` field calls name; this importer keys functions by domain and name only, so
    // a second definition would silently replace the first.
    if (!functions_.emplace(std::make_pair(CanonicalDomain(f.domain()), f.name()), &f).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": model-local function '", DomainLabel(CanonicalDomain(f.domain())), ".",
          f.name(), "' is defined more than once (function overloads, IR version 10, are not "
          "supported)"));
    }
    for (const auto& n : f.node()) {
      reserved_names_.insert(n.output().begin(), n.output().end());
    }
  }
  CollectNames(model_.graph(), reserved_names_);
  int64_t node_protos = CountNodeProtos(model_.graph());
  for (const FunctionProto& f : model_.functions()) {
    for (const auto& n : f.node()) {
      node_protos += 1;
      for (const auto& attr : n.attribute()) {
        if (attr.has_g()) node_protos += CountNodeProtos(attr.g());
        for (const auto& g : attr.graphs()) node_protos += CountNodeProtos(g);
      }
    }
  }
  node_budget_ = std::min(kMaxConvertedNodes, kMaxNodesPerNodeProto * node_protos);
  nodes_left_ = node_budget_;

  ImportedModel imported;
  imported.platform = "onnx";
  imported.path = name_;
  SignatureGraph sig;
  sig.key = "serving_default";
  sig.method_name = "tensorflow/serving/predict";
  absl::Status s = ConvertGraph(model_.graph(), nullptr, sig.graph, opsets, 0);
  if (!s.ok()) return Annotate(s, name_);
  if (!unsupported_.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        name_, ": unsupported operators: ", absl::StrJoin(unsupported_, "; ")));
  }
  if (sig.graph.outputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": the graph has no outputs"));
  }
  for (ValueId id : sig.graph.inputs) {
    const ir::Value& v = sig.graph.value(id);
    sig.input_keys.push_back(v.name);
    sig.inputs[v.name] = InfoFromType(v.name, v.type);
  }
  for (int i = 0; i < model_.graph().output_size(); ++i) {
    const std::string& name = model_.graph().output(i).name();
    const ir::Value& v = sig.graph.value(sig.graph.outputs[i]);
    sig.output_keys.push_back(name);
    sig.outputs[name] = InfoFromType(name, v.type);
  }
  imported.signatures.push_back(std::move(sig));

  auto& props = imported.properties;
  props.emplace_back("format", absl::StrCat("ONNX, IR version ", model_.ir_version()));
  if (!model_.producer_name().empty()) {
    props.emplace_back("producer",
                       absl::StrCat(model_.producer_name(), " ", model_.producer_version()));
  }
  std::vector<std::string> opset_list;
  for (const auto& [domain, version] : opsets) {
    opset_list.push_back(absl::StrCat(DomainLabel(domain), " ", version));
  }
  props.emplace_back("opsets", absl::StrJoin(opset_list, ", "));
  if (!model_.graph().name().empty()) props.emplace_back("graph", model_.graph().name());
  props.emplace_back("onnx nodes", absl::StrCat(model_.graph().node_size()));
  props.emplace_back("initializers", absl::StrCat(model_.graph().initializer_size()));
  if (model_.functions_size() > 0) {
    props.emplace_back("local functions", absl::StrCat(model_.functions_size()));
  }
  for (const auto& kv : model_.metadata_props()) {
    props.emplace_back(absl::StrCat("metadata ", kv.key()), kv.value());
  }
  return imported;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::StatusOr<ImportedModel> ImportOnnxBytes(absl::string_view bytes, const std::string& name,
                                              const OnnxImportOptions& options) {
  ModelProto model;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", bytes.size(), " bytes is above protobuf's 2 GiB limit; store "
                                               "the weights as ONNX external data"));
  }
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    std::string where = onnx_internal::DescribeMalformedModel(bytes);
    if (where.empty()) where = "a field holds a value of the wrong type";
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a valid ONNX model (", bytes.size(),
                                                   " bytes): ", where));
  }
  Importer importer(model, name, options.external_data_dir);
  return importer.Run();
}

absl::StatusOr<ImportedModel> ImportOnnxFile(const std::string& path,
                                             const OnnxImportOptions& options) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ONNX model ", path));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  OnnxImportOptions resolved = options;
  if (resolved.external_data_dir.empty()) resolved.external_data_dir = DirName(path);
  return ImportOnnxBytes(contents.str(), path, resolved);
}

}  // namespace kiln::import
