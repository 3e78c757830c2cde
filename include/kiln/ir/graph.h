// Kiln's graph IR: one typed dataflow graph that every front end (ONNX, TensorFlow) imports
// into and every later stage (optimizer, plan compiler) works on.
//
// Operators follow ONNX semantics and names (the newest opset form: e.g. Reshape, Slice,
// Squeeze and ReduceSum take their shape/axes as inputs). Importers normalize older opsets
// and other front ends to that form. Operators ONNX lacks (fused kernels, tf.Example parsing,
// hash tables, ...) live in domain "kiln" and are documented where their kernels are.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/tensor.h"

namespace kiln::ir {

// One dimension of a value's type: a known size, or a symbol ("batch", "seq_len") shared by
// the dimensions that are equal, or unknown (value -1, empty symbol).
struct Dim {
  int64_t value = -1;
  std::string symbol;

  static Dim Known(int64_t v) { return Dim{v, ""}; }
  static Dim Symbol(std::string s) { return Dim{-1, std::move(s)}; }
  static Dim Unknown() { return Dim{}; }
  bool is_known() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
};

struct TensorType {
  DType dtype = DType::kInvalid;
  bool rank_known = false;
  std::vector<Dim> dims;

  // A type with known rank; -1 entries become unknown dims.
  static TensorType Of(DType dtype, const std::vector<int64_t>& dims);
  static TensorType UnknownRank(DType dtype) { return TensorType{dtype, false, {}}; }
  int rank() const { return static_cast<int>(dims.size()); }
  bool fully_known() const;            // rank and every dim known
  std::optional<Shape> shape() const;  // when fully_known()
  std::string ToString() const;        // "float[batch, 3, 224, 224]", "float[?]" (any rank)
};

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr ValueId kNoValue = -1;
inline constexpr NodeId kNoNode = -1;

class Graph;
using GraphPtr = std::shared_ptr<Graph>;

// Attribute values, as ONNX defines them.
using Attribute = std::variant<int64_t, float, std::string, Tensor, GraphPtr, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, std::vector<Tensor>,
                               std::vector<GraphPtr>>;

// How a value's bytes are laid out. Tensors are logically NCHW (the shape never changes), but
// between convolutions and pools the optimizer keeps a rank-4 float value in the layout this
// CPU's convolutions read and write (opt/layout.cc), so that no reorder runs between them:
// NHWC for oneDNN's AVX-512 brgconv, nChw8c / nChw16c (channels in blocks of 8 or 16, the
// channel count a multiple of the block) for its AVX2 / AVX-512 jit convolutions. Only
// layout-aware kernels (LayoutAware below) produce or read such a value; Verify checks that.
enum class MemoryLayout : uint8_t { kPlain, kNhwc, kNchw8c, kNchw16c };
const char* MemoryLayoutName(MemoryLayout layout);  // "plain", "nhwc", "nChw8c", "nChw16c"
// The channel block of nChw8c / nChw16c; 0 for the others.
int64_t ChannelBlock(MemoryLayout layout);

struct Value {
  std::string name;
  TensorType type;
  MemoryLayout layout = MemoryLayout::kPlain;
  NodeId producer = kNoNode;  // kNoNode: graph input, constant, or a capture from the outer graph
  int producer_output = 0;
  std::optional<Tensor> constant;  // set for constants (initializers and folded values)
};

struct Node {
  std::string op;                // "Conv", "MatMul", ...
  std::string domain;            // "" for ONNX's default domain, "kiln" for Kiln's own operators
  std::string name;              // from the source model, for error messages
  std::vector<ValueId> inputs;   // kNoValue marks an omitted optional input
  std::vector<ValueId> outputs;  // kNoValue marks an unused optional output
  std::map<std::string, Attribute> attrs;
  bool removed = false;  // set by passes; Graph::Compact() drops removed nodes

  bool HasAttr(absl::string_view key) const { return attrs.count(std::string(key)) > 0; }
  // Typed attribute access; the defaults apply when the attribute is absent.
  int64_t GetInt(absl::string_view key, int64_t default_value) const;
  float GetFloat(absl::string_view key, float default_value) const;
  std::string GetString(absl::string_view key, const std::string& default_value) const;
  std::vector<int64_t> GetInts(absl::string_view key,
                               const std::vector<int64_t>& default_value = {}) const;
  std::vector<float> GetFloats(absl::string_view key) const;
  std::vector<std::string> GetStrings(absl::string_view key) const;
  const Tensor* GetTensor(absl::string_view key) const;  // null when absent
  GraphPtr GetGraph(absl::string_view key) const;        // null when absent
  // "Conv 'resnet/conv1' (domain kiln)" for error messages.
  std::string Describe() const;
};

// Thread safety: none inside. A graph is built, optimized and typed by one thread; after that
// the runtime shares it as shared_ptr<const Graph> and any number of threads may read it
// (plan compiles of several shapes at once). Copy it before changing a shared graph.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = default;  // deep copy of values and nodes; subgraphs shared
  Graph& operator=(const Graph&) = default;

  // Values ------------------------------------------------------------------------------
  ValueId AddValue(std::string name, TensorType type = {});
  ValueId AddConstant(std::string name, Tensor value);
  // A fresh value name with this prefix that is unique in the graph.
  std::string UniqueName(absl::string_view prefix);
  Value& value(ValueId id) { return values_[id]; }
  const Value& value(ValueId id) const { return values_[id]; }
  int num_values() const { return static_cast<int>(values_.size()); }
  std::optional<ValueId> FindValue(absl::string_view name) const;
  bool IsConstant(ValueId id) const { return id != kNoValue && values_[id].constant.has_value(); }

  // Nodes -------------------------------------------------------------------------------
  // Adds a node; sets the producer of each output value.
  NodeId AddNode(Node node);
  // Adds a node and creates `num_outputs` new output values named after `name`.
  NodeId AddNode(std::string op, std::vector<ValueId> inputs, int num_outputs,
                 std::map<std::string, Attribute> attrs = {}, std::string name = "",
                 std::string domain = "");
  Node& node(NodeId id) { return nodes_[id]; }
  const Node& node(NodeId id) const { return nodes_[id]; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_live_nodes() const;  // not removed
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Graph interface ----------------------------------------------------------------------
  std::vector<ValueId> inputs;   // values fed by the caller, in order
  std::vector<ValueId> outputs;  // values returned, in order
  // For subgraphs (If/Loop/Scan bodies): values of enclosing graphs used here, by the name
  // they have in the enclosing graph. The executor binds them when running the subgraph.
  std::vector<std::pair<ValueId, std::string>> captures;
  std::string name;

  // Structure ---------------------------------------------------------------------------
  // Live nodes in an order where each node follows the producers of its inputs. Fails on a
  // cycle, naming a node on it.
  absl::StatusOr<std::vector<NodeId>> TopologicalOrder() const;
  // For each value, the live nodes that read it (including through subgraph captures).
  std::vector<std::vector<NodeId>> Consumers() const;
  // Makes every reader of `from` (node inputs and graph outputs) read `to` instead.
  void ReplaceAllUses(ValueId from, ValueId to);
  // Drops removed nodes and values nothing refers to; renumbers ids.
  void Compact();

  // Readable listing: inputs, constants (shapes only), nodes with attributes, outputs.
  std::string ToString() const;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::map<std::string, ValueId> value_by_name_;
};

// Names of enclosing-scope values that `graph` (a subgraph) reads: its own captures plus
// those of nested subgraphs that `graph` does not define itself.
std::set<std::string> OuterNamesUsedBy(const Graph& graph);
// Values of `graph` that the subgraphs of `node` (a node of `graph`) read by name.
std::vector<ValueId> CapturedValues(const Graph& graph, const Node& node);

// Checks the structural invariants: ids in range, each value produced at most once, no
// cycles, outputs defined, subgraphs verified recursively. Errors name the node.
absl::Status Verify(const Graph& graph);

// Operators whose kernels read (and, but for the global pools, write) every MemoryLayout:
// Conv, kiln::FusedConv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.
bool LayoutAware(const Node& node);

// Whether two attributes hold the same value: tensors identical (TensorsIdentical: -0.0 and
// 0.0 differ), subgraphs only when they are the same object.
bool AttributesEqual(const Attribute& a, const Attribute& b);

// Fills in dtypes and (symbolic) shapes of values wherever the operators' rules allow; leaves
// the rest unknown. Never fails on an unknown operator (its outputs stay unknown).
absl::Status InferShapes(Graph& graph);

}  // namespace kiln::ir
