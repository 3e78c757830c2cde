// The TensorFlow graph -> Kiln IR converter. A signature's output tensors are converted on
// demand, walking backwards, so only what they need is imported. Function calls are inlined
// into the graph being built; If/While bodies and v1 Switch/Merge branches become subgraphs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/variable.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"

namespace kiln::import::tf {

// A lookup table whose contents were read at import time (from an asset file or from the
// constants of a LookupTableImportV2).
struct TableContents {
  Tensor keys;
  Tensor values;
};

// One output of a TF node as the converter sees it: an IR value, a hash-table handle, or a
// handle of a variable some signature writes (converter_variables.cc). A variable nothing
// writes is an IR constant holding its checkpointed value instead (read-only inference).
struct TfValue {
  ir::ValueId id = ir::kNoValue;
  std::shared_ptr<TableContents> table;
  std::shared_ptr<ir::Variable> variable;
};

// A GraphDef or a FunctionDef body, indexed by node name.
struct Body {
  std::string function_name;  // empty for the top-level graph
  const tensorflow::FunctionDef* fdef = nullptr;
  std::map<std::string, const tensorflow::NodeDef*> nodes;
  std::map<std::string, int> arg_index;  // function input arg name -> position
};

// An IR graph being built, with the frame of its enclosing graph (for captures).
struct GraphFrame {
  ir::Graph* graph = nullptr;
  GraphFrame* parent = nullptr;
  std::map<std::pair<GraphFrame*, ir::ValueId>, ir::ValueId> imported;
};

// One instantiation of a Body (the top-level graph, an inlined call, a branch).
struct Scope {
  const Body* body = nullptr;
  GraphFrame* frame = nullptr;
  std::string prefix;  // IR node name prefix (the call nodes this body was inlined through)
  // Function arguments: bound values, or references resolved lazily in `arg_scope`.
  std::vector<std::optional<TfValue>> args;
  std::vector<std::string> arg_refs;
  Scope* arg_scope = nullptr;
  std::map<std::string, std::vector<TfValue>> done;
  std::set<std::string> in_progress;
  std::map<std::string, Scope*> calls;  // call node -> the callee's scope
  std::map<std::string, TfValue> feeds;  // top-level: "node:k" -> graph input
  // v1 Switch/Merge branch scopes: nodes that do not depend on `branch_pred` are converted in
  // `value_parent` (the enclosing frame) and captured.
  Scope* value_parent = nullptr;
  std::string branch_pred;
  int branch_side = -1;
  // A called function's variable writes among its control outputs (converter_variables.cc):
  // the call's results are ordered after them.
  std::vector<ir::ValueId> control_writes;
};

// The TF1 while loops (Enter/Exit frames) found in each body, and the loops built from them
// (converter_while_loop.cc).
struct WhileLoops;

// A function call being resolved through during graph analysis: the call node and the body
// it sits in. Resolving a function argument pops the innermost call and continues at the
// argument's input in the caller.
struct CallSite {
  const Body* caller = nullptr;
  const tensorflow::NodeDef* call = nullptr;
};
using CallStack = std::vector<CallSite>;

// Where a tensor reference really comes from, after Identity nodes, function arguments and
// function results are followed.
struct Origin {
  const Body* body = nullptr;
  const tensorflow::NodeDef* node = nullptr;
  int index = 0;
  CallStack stack;  // the calls `body` was entered through (outermost first)
};

struct ImportSource {
  const tensorflow::GraphDef* graph = nullptr;
  const tensorflow::MetaGraphDef* meta_graph = nullptr;  // null for a frozen GraphDef
  std::string export_dir;                                // for assets; may be empty
  const BundleReader* variables = nullptr;               // null: no checkpoint
};

// Converts TF tensors into one IR graph per signature. Not thread-safe; one per import.
class Converter {
 public:
  explicit Converter(ImportSource source);
  ~Converter();

  // Analyses the restore ops (which checkpoint key feeds which variable) and the table
  // initializers. Call once before BuildGraph.
  absl::Status Prepare();

  struct Feed {
    std::string tensor;  // "x:0"
    std::string value_name;
    DType dtype;
    int rank = -1;  // the declared rank, a hint for converters (-1 unknown)
  };
  // Builds a graph whose inputs are `feeds` and whose outputs are the given tensors.
  absl::StatusOr<ir::Graph> BuildGraph(const std::vector<Feed>& feeds,
                                       const std::vector<std::string>& fetches);

  // The declared rank of a fed value (-1 when unknown).
  int RankHint(const ir::Graph* graph, ir::ValueId id) const {
    auto it = rank_hints_.find({graph, id});
    return it == rank_hints_.end() ? -1 : it->second;
  }

  int variables_restored() const { return static_cast<int>(variable_cache_.size()); }

  // Finds the variables that the signatures fetching `fetches` write (TF1 Assign/AssignAdd/
  // AssignSub, resource AssignVariableOp/AssignAddVariableOp/AssignSubVariableOp, the saver's
  // restore excepted): those become mutable ir::Variables, the others stay constants. Call
  // after Prepare and before the first BuildGraph (converter_variables.cc).
  absl::Status AnalyzeVariableWrites(const std::vector<std::string>& fetches);
  int mutable_variables() const { return static_cast<int>(variables_.size()); }

  // --- used by op converters ---
  const Body* FindFunction(const std::string& name);
  absl::StatusOr<ir::GraphPtr> BuildFunctionSubgraph(Scope* caller,
                                                     const std::string& function_name,
                                                     const std::vector<TfValue>& args,
                                                     bool args_as_inputs,
                                                     std::vector<TfValue>* outputs_out);
  absl::StatusOr<std::vector<TfValue>> InlineFunction(Scope* caller, const std::string& prefix,
                                                      const std::string& function_name,
                                                      const std::vector<TfValue>& args);
  std::string UniqueName(absl::string_view hint);
  // Adds a node whose outputs get fresh names (unique across the graph and its subgraphs, so
  // that captures by name are unambiguous).
  std::vector<ir::ValueId> AddIrNode(ir::Graph& graph, const std::string& op,
                                     std::vector<ir::ValueId> inputs, int num_outputs,
                                     std::map<std::string, ir::Attribute> attrs,
                                     const std::string& node_name,
                                     const std::string& domain = "");
  absl::StatusOr<ir::ValueId> ImportValue(GraphFrame* frame, ir::ValueId outer_id,
                                          GraphFrame* outer_frame);
  absl::StatusOr<TfValue> ValueOfVariable(const Scope* scope, const tensorflow::NodeDef& node);
  // Variables (converter_variables.cc): a node that writes one, the read of a handle that an
  // op uses as a tensor, and the writes a node's control dependencies order it after.
  absl::StatusOr<std::vector<TfValue>> ConvertVariableWrite(Scope* scope,
                                                            const tensorflow::NodeDef& node);
  absl::StatusOr<ir::ValueId> ReadVariable(Scope* scope, const TfValue& handle,
                                           const std::vector<ir::ValueId>& after,
                                           const std::string& node_name);
  absl::StatusOr<std::vector<ir::ValueId>> ControlDependencyWrites(Scope* scope,
                                                                   const tensorflow::NodeDef& node);
  absl::Status OrderOutputsAfter(Scope* scope, const tensorflow::NodeDef& node,
                                 const std::vector<ir::ValueId>& writes,
                                 std::vector<TfValue>& outputs);
  ir::ValueId OrderValueAfter(Scope* scope, ir::ValueId value,
                              const std::vector<ir::ValueId>& writes, const std::string& name);
  absl::StatusOr<std::vector<ir::ValueId>> WritesReachedFrom(Scope* scope,
                                                             std::vector<std::string> names);
  // Converts the variable writes among a called function's control outputs into
  // callee->control_writes (the call's results are ordered after them).
  absl::Status ConvertCallControlWrites(Scope* callee);
  absl::StatusOr<std::shared_ptr<TableContents>> TableOf(const Scope* scope,
                                                         const tensorflow::NodeDef& node);

  // Converts one node input reference ("node:1", "node:out:0", "arg") in `scope`.
  absl::StatusOr<TfValue> GetTensor(Scope* scope, const std::string& ref);

 private:
  friend struct ConvertState;
  absl::StatusOr<std::vector<TfValue>*> ConvertNode(Scope* scope, const std::string& name);
  absl::StatusOr<std::vector<TfValue>> ConvertOp(Scope* scope, const tensorflow::NodeDef& node);
  absl::StatusOr<std::vector<TfValue>> ConvertMerge(Scope* scope,
                                                    const tensorflow::NodeDef& node);
  absl::Status AnalyzeRestores(const Body& body);
  absl::Status AnalyzeTables(const Body& body, CallStack& stack, int depth);
  bool ContainsTableInit(const std::string& function_name, int depth = 0);
  // Follows Identity nodes, function arguments (to the caller on `stack`, else to the first
  // top-level call site) and function results (into the callee) to the node producing `ref`.
  absl::StatusOr<Origin> ResolveOriginIn(const Body& body, std::string ref, CallStack stack,
                                         int depth = 0);
  absl::StatusOr<std::pair<const tensorflow::NodeDef*, int>> ResolveOrigin(const Body& body,
                                                                           std::string ref) {
    auto origin = ResolveOriginIn(body, std::move(ref), {});
    if (!origin.ok()) return origin.status();
    return std::make_pair(origin->node, origin->index);
  }
  absl::StatusOr<Tensor> ResolveConstString(const Body& body, const std::string& ref,
                                            const CallStack& stack = {});
  // Identifies a table resource: its shared_name, else the chain of call nodes it was
  // created through plus its node name (what Scope::prefix + name gives while converting).
  static std::string TableKey(const std::string& call_prefix, const tensorflow::NodeDef& node);
  bool DependsOnSwitch(const Body& body, const std::string& node, const std::string& pred);
  // Kiln drops control dependencies, which is only right when what they force to run has no
  // effect Kiln cannot reproduce. Fails naming every op without a converter (custom ops such
  // as TF-Text's, which TensorFlow itself would need registered to run the signature) that
  // `node`'s control dependencies reach, through function calls and branches.
  absl::Status CheckControlDependencies(const Scope* scope, const tensorflow::NodeDef& node);
  // TF1 while loops: an Exit raises its frame to an IR Loop; Enter, Merge, Switch, LoopCond
  // and NextIteration of a frame convert inside the Loop's body. nullopt: `node` is not part
  // of a while loop (or its body has none) and converts as usual.
  std::optional<absl::StatusOr<std::vector<TfValue>>> ConvertWhileLoopOp(
      Scope* scope, const tensorflow::NodeDef& node);

  ImportSource source_;
  Body top_;
  std::map<std::string, std::unique_ptr<Body>> functions_;
  std::map<std::string, const tensorflow::FunctionDef*> function_defs_;
  std::map<std::string, std::string> variable_keys_;  // top-level variable node -> ckpt key
  std::map<std::string, Tensor> variable_cache_;
  std::set<std::string> written_variables_;  // checkpoint keys of variables a signature writes
  std::map<std::string, std::shared_ptr<ir::Variable>> variables_;  // by checkpoint key
  std::vector<std::string> VariableKeyCandidates(const Body& body,
                                                 const tensorflow::NodeDef& node) const;
  // TableKey -> the initializer node, the body it sits in and the calls that reach it.
  struct TableInit {
    const Body* body = nullptr;
    const tensorflow::NodeDef* node = nullptr;
    CallStack stack;
  };
  std::map<std::string, TableInit> table_inits_;
  std::map<std::string, bool> contains_table_init_;
  int64_t table_walk_steps_ = 0;
  std::map<std::string, std::shared_ptr<TableContents>> table_cache_;
  std::map<std::pair<std::string, std::string>, bool> switch_dependency_;
  std::set<std::pair<const Body*, std::string>> control_checked_;
  std::shared_ptr<WhileLoops> while_loops_;  // shared_ptr: WhileLoops is incomplete here
  std::set<std::string> used_names_;
  std::map<std::pair<const ir::Graph*, ir::ValueId>, int> rank_hints_;
  int name_counter_ = 0;
  int depth_ = 0;
  // Function calls are inlined at every call site, and functions call functions: 1.7 KB of
  // library (F16 calls F15 twice, ...) made the import run for minutes. ChargeCall refuses the
  // call that exceeds call_budget_ (set from the size of the graph and its library).
  absl::Status ChargeCall(const std::string& function_name);
  int64_t call_budget_ = 0;
  std::vector<std::unique_ptr<Scope>> scopes_;
  std::vector<std::unique_ptr<GraphFrame>> frames_;
};

// Op converters ------------------------------------------------------------------------

class OpContext {
 public:
  OpContext(Converter* converter, Scope* scope, const tensorflow::NodeDef& node,
            std::vector<TfValue> inputs);

  const tensorflow::NodeDef& node() const { return node_; }
  Scope* scope() const { return scope_; }
  Converter* converter() const { return converter_; }
  ir::Graph& graph();
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TfValue& input_value(int i) const { return inputs_[i]; }
  ir::ValueId input(int i) const { return inputs_[i].id; }

  // Attributes, with errors naming the node when absent or of the wrong kind.
  bool HasAttr(const std::string& name) const;
  absl::StatusOr<int64_t> AttrInt(const std::string& name) const;
  int64_t AttrInt(const std::string& name, int64_t default_value) const;
  float AttrFloat(const std::string& name, float default_value) const;
  bool AttrBool(const std::string& name, bool default_value) const;
  std::string AttrString(const std::string& name, const std::string& default_value) const;
  std::vector<int64_t> AttrInts(const std::string& name) const;
  std::vector<float> AttrFloats(const std::string& name) const;
  std::vector<std::string> AttrStrings(const std::string& name) const;
  absl::StatusOr<DType> AttrType(const std::string& name) const;
  std::vector<int> AttrTypeList(const std::string& name) const;  // raw TF DataType values
  std::string AttrFunction(const std::string& name) const;

  // The input's value when it is an import-time constant.
  const Tensor* ConstInput(int i) const;
  absl::StatusOr<std::vector<int64_t>> ConstInts(int i) const;  // any integer dtype
  // Known rank of an input (from its IR type or the producing node's _output_shapes).
  int InputRank(int i) const;

  ir::ValueId Const(Tensor t, absl::string_view hint = "const");
  ir::ValueId ConstI64(const std::vector<int64_t>& v) {
    return Const(Tensor::FromVector<int64_t>(v), "ints");
  }
  ir::ValueId ScalarI64(int64_t v) { return Const(Tensor::Scalar<int64_t>(v), "int"); }
  // Emits a node; returns its outputs.
  std::vector<ir::ValueId> EmitN(const std::string& op, std::vector<ir::ValueId> inputs,
                                 int num_outputs, std::map<std::string, ir::Attribute> attrs = {},
                                 const std::string& domain = "");
  ir::ValueId Emit(const std::string& op, std::vector<ir::ValueId> inputs,
                   std::map<std::string, ir::Attribute> attrs = {},
                   const std::string& domain = "") {
    return EmitN(op, std::move(inputs), 1, std::move(attrs), domain)[0];
  }
  // `v` as int64 (folded when constant).
  ir::ValueId ToInt64(ir::ValueId v);
  ir::ValueId CastTo(ir::ValueId v, DType dtype);

  void SetOutputs(std::vector<ir::ValueId> ids);
  void SetOutput(ir::ValueId id) { SetOutputs({id}); }
  std::vector<TfValue>& outputs() { return outputs_; }

  absl::Status Error(absl::string_view message) const;
  absl::Status Unsupported(absl::string_view what) const;

 private:
  Converter* converter_;
  Scope* scope_;
  const tensorflow::NodeDef& node_;
  std::vector<TfValue> inputs_;
  std::vector<std::optional<Tensor>> const_inputs_;
  std::vector<TfValue> outputs_;
};

using OpConverter = std::function<absl::Status(OpContext&)>;
// Null when the op has no converter.
const OpConverter* FindOpConverter(const std::string& op);
std::vector<std::string> SupportedTfOps();

// Position of "node:out_arg:index" among the node's flat outputs (function-body naming).
absl::StatusOr<int> FlatOutputIndex(const tensorflow::NodeDef& node, const std::string& arg,
                                    int index);

// ONNX's TensorProto.DataType number for a DType (Cast's "to" attribute).
int64_t OnnxDataType(DType dtype);

// Describes where a node is: "node 'a/b' in function 'f'" or "node 'a/b'".
std::string DescribeNode(const Scope* scope, const tensorflow::NodeDef& node);

}  // namespace kiln::import::tf
