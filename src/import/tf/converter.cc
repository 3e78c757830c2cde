// The TF converter's core: the scopes and frames values live in, converting one node on
// demand (GetTensor -> ConvertNode -> ConvertOp), and BuildGraph. The rest is split by concern:
// converter_refs.cc (references to origins), converter_restore.cc (variables and their
// checkpoint keys), converter_tables.cc (lookup tables), converter_switch_merge.cc (TF1 control
// flow), converter_control_deps.cc (control-only inputs), converter_functions.cc (calls and
// subgraphs); the per-op converters are in ops.cc.
#include "import/tf/converter.h"

#include <algorithm>
#include <deque>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "import/tf/converter_internal.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {

using tensorflow::NodeDef;

std::string DescribeNode(const Scope* scope, const NodeDef& node) {
  std::string where = absl::StrCat("node '", node.name(), "' (op ", node.op(), ")");
  if (scope != nullptr && scope->body != nullptr && !scope->body->function_name.empty()) {
    absl::StrAppend(&where, " in function '", scope->body->function_name, "'");
  }
  return where;
}

// Inlined function calls allowed per NodeDef of the graph and its library, and at most. A
// TF2 SavedModel calls each traced function about once per signature (Keras layers), a
// tf.function helper reused in a model perhaps tens of times; a library whose functions call
// each other over and over expands exponentially instead.
constexpr int64_t kMaxCallsPerNodeDef = 16;
constexpr int64_t kMaxCalls = int64_t{1} << 20;

Converter::Converter(ImportSource source) : source_(std::move(source)) {
  int64_t node_defs = source_.graph->node_size();
  for (const NodeDef& node : source_.graph->node()) top_.nodes[node.name()] = &node;
  for (const auto& f : source_.graph->library().function()) {
    function_defs_[f.signature().name()] = &f;
    node_defs += f.node_def_size();
  }
  call_budget_ = std::min(kMaxCalls, kMaxCallsPerNodeDef * node_defs);
}

absl::Status Converter::ChargeCall(const std::string& function_name) {
  if (--call_budget_ >= 0) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "inlining function '", function_name, "': the graph's function calls expand past ",
      kMaxCallsPerNodeDef, " calls per node of the graph and its library (at most ", kMaxCalls,
      "); do its functions call each other many times over?"));
}

Converter::~Converter() = default;

const Body* Converter::FindFunction(const std::string& name) {
  auto it = functions_.find(name);
  if (it != functions_.end()) return it->second.get();
  auto def = function_defs_.find(name);
  if (def == function_defs_.end()) return nullptr;
  auto body = std::make_unique<Body>();
  body->function_name = name;
  body->fdef = def->second;
  for (const NodeDef& node : def->second->node_def()) body->nodes[node.name()] = &node;
  for (int i = 0; i < def->second->signature().input_arg_size(); ++i) {
    body->arg_index[def->second->signature().input_arg(i).name()] = i;
  }
  return (functions_[name] = std::move(body)).get();
}

std::string Converter::UniqueName(absl::string_view hint) {
  std::string base(hint.empty() ? "v" : hint);
  if (used_names_.insert(base).second) return base;
  while (true) {
    std::string candidate = absl::StrCat(base, "__", ++name_counter_);
    if (used_names_.insert(candidate).second) return candidate;
  }
}

std::vector<ir::ValueId> Converter::AddIrNode(ir::Graph& graph, const std::string& op,
                                              std::vector<ir::ValueId> inputs, int num_outputs,
                                              std::map<std::string, ir::Attribute> attrs,
                                              const std::string& node_name,
                                              const std::string& domain) {
  ir::Node node;
  node.op = op;
  node.domain = domain;
  node.name = node_name;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  for (int i = 0; i < num_outputs; ++i) {
    node.outputs.push_back(graph.AddValue(
        UniqueName(num_outputs == 1 ? node_name : absl::StrCat(node_name, ":", i))));
  }
  std::vector<ir::ValueId> outputs = node.outputs;
  graph.AddNode(std::move(node));
  return outputs;
}

absl::StatusOr<ir::ValueId> Converter::ImportValue(GraphFrame* frame, ir::ValueId outer_id,
                                                   GraphFrame* outer_frame) {
  if (outer_id == ir::kNoValue || frame == outer_frame) return outer_id;
  if (frame == nullptr) return absl::InternalError("value imported into no graph");
  auto key = std::make_pair(outer_frame, outer_id);
  auto it = frame->imported.find(key);
  if (it != frame->imported.end()) return it->second;
  const ir::Value& outer = outer_frame->graph->value(outer_id);
  ir::ValueId local;
  if (outer.constant.has_value()) {
    local = frame->graph->AddConstant(UniqueName(outer.name), *outer.constant);
  } else {
    KILN_ASSIGN_OR_RETURN(ir::ValueId in_parent, ImportValue(frame->parent, outer_id, outer_frame));
    const ir::Value& parent_value = frame->parent->graph->value(in_parent);
    local = frame->graph->AddValue(parent_value.name, parent_value.type);
    frame->graph->captures.emplace_back(local, parent_value.name);
  }
  frame->imported[key] = local;
  return local;
}

// The analyses that must see the whole graph before any node converts: restores
// (converter_restore.cc) and tables (converter_tables.cc).
absl::Status Converter::Prepare() {
  KILN_RETURN_IF_ERROR(AnalyzeRestores(top_));
  CallStack stack;
  KILN_RETURN_IF_ERROR(AnalyzeTables(top_, stack, 0));
  for (const auto& [name, def] : function_defs_) {
    bool relevant = false;
    for (const NodeDef& node : def->node_def()) {
      if (node.op() == "RestoreV2") {
        relevant = true;
        break;
      }
    }
    if (relevant) KILN_RETURN_IF_ERROR(AnalyzeRestores(*FindFunction(name)));
    // Initializers no top-level call reaches (e.g. only named by the object graph): resolve
    // their arguments through the first top-level call site, if any.
    if (ContainsTableInit(name)) {
      CallStack none;
      KILN_RETURN_IF_ERROR(AnalyzeTables(*FindFunction(name), none, 31));
    }
  }
  return absl::OkStatus();
}

// Conversion -------------------------------------------------------------------------------

absl::StatusOr<TfValue> Converter::GetTensor(Scope* scope, const std::string& ref) {
  const Body& body = *scope->body;
  std::vector<std::string> parts = absl::StrSplit(ref, ':');
  if (body.fdef != nullptr && parts.size() == 1) {
    auto arg = body.arg_index.find(parts[0]);
    if (arg != body.arg_index.end()) {
      auto& slot = scope->args[arg->second];
      if (!slot.has_value()) {
        KILN_ASSIGN_OR_RETURN(TfValue v, GetTensor(scope->arg_scope, scope->arg_refs[arg->second]));
        KILN_ASSIGN_OR_RETURN(v.id, ImportValue(scope->frame, v.id, scope->arg_scope->frame));
        slot = v;
      }
      return *slot;
    }
  }
  const std::string& node_name = parts[0];
  int index = 0;
  if (parts.size() == 2 && !absl::SimpleAtoi(parts[1], &index)) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor reference '", ref, "'"));
  }
  if (!scope->feeds.empty()) {
    auto feed = scope->feeds.find(absl::StrCat(node_name, ":", index));
    if (feed != scope->feeds.end() && parts.size() <= 2) return feed->second;
  }
  auto node_it = body.nodes.find(node_name);
  if (node_it == body.nodes.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference to unknown node '", node_name, "'",
        body.function_name.empty() ? "" : absl::StrCat(" in function '", body.function_name, "'")));
  }
  // In a v1 branch, what does not depend on the branch's predicate lives outside it.
  if (scope->value_parent != nullptr && !DependsOnSwitch(body, node_name, scope->branch_pred)) {
    KILN_ASSIGN_OR_RETURN(TfValue v, GetTensor(scope->value_parent, ref));
    KILN_ASSIGN_OR_RETURN(v.id, ImportValue(scope->frame, v.id, scope->value_parent->frame));
    return v;
  }
  const NodeDef& node = *node_it->second;
  if (parts.size() == 3) {
    int i = 0;
    if (!absl::SimpleAtoi(parts[2], &i)) {
      return absl::InvalidArgumentError(absl::StrCat("bad tensor reference '", ref, "'"));
    }
    KILN_ASSIGN_OR_RETURN(int flat, FlatOutputIndex(node, parts[1], i));
    index = flat + i;
  } else if (parts.size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor reference '", ref, "'"));
  }
  // Calls are inlined lazily: only the results that are used are converted.
  const tensorflow::AttrValue* f = FindAttr(node, "f");
  const bool is_call = (IsCallOp(node.op()) && f != nullptr) ||
                       function_defs_.count(node.op()) > 0;
  if (is_call) {
    const std::string fname = function_defs_.count(node.op()) ? node.op() : f->func().name();
    Scope*& callee = scope->calls[node.name()];
    if (callee == nullptr) {
      const Body* fbody = FindFunction(fname);
      if (fbody == nullptr) {
        return absl::NotFoundError(absl::StrCat(DescribeNode(scope, node), " calls function '",
                                                fname, "', which the library does not have"));
      }
      KILN_RETURN_IF_ERROR(ChargeCall(fname));
      auto s = std::make_unique<Scope>();
      s->body = fbody;
      s->frame = scope->frame;
      s->prefix = absl::StrCat(scope->prefix, node.name(), "/");
      std::vector<std::string> data_inputs;
      for (const std::string& in : node.input()) {
        if (!absl::StartsWith(in, "^")) data_inputs.push_back(in);
      }
      if (static_cast<int>(data_inputs.size()) != fbody->fdef->signature().input_arg_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            DescribeNode(scope, node), " passes ", data_inputs.size(), " inputs to function '",
            fname, "', which takes ", fbody->fdef->signature().input_arg_size()));
      }
      s->args.resize(data_inputs.size());
      s->arg_refs = data_inputs;
      s->arg_scope = scope;
      callee = s.get();
      scopes_.push_back(std::move(s));
      // Variable writes among the function's control outputs run with the call (before the
      // check, which refuses writes nothing converted).
      KILN_RETURN_IF_ERROR(ConvertCallControlWrites(callee));
      KILN_RETURN_IF_ERROR(CheckControlDependencies(scope, node));
    }
    const auto& sig = callee->body->fdef->signature();
    if (index < 0 || index >= sig.output_arg_size()) {
      return absl::InvalidArgumentError(absl::StrCat("output ", index, " of ",
                                                     DescribeNode(scope, node),
                                                     " does not exist"));
    }
    auto ret = callee->body->fdef->ret().find(sig.output_arg(index).name());
    if (ret == callee->body->fdef->ret().end()) {
      return absl::InvalidArgumentError(absl::StrCat("function '", fname, "' has no value for "
                                                     "output '", sig.output_arg(index).name(),
                                                     "'"));
    }
    if (++depth_ > 2000) {
      --depth_;
      return absl::InvalidArgumentError("graph too deep (more than 2000 nested nodes)");
    }
    auto result = GetTensor(callee, ret->second);
    --depth_;
    if (result.ok() && result->id != ir::kNoValue && !callee->control_writes.empty()) {
      result->id = OrderValueAfter(callee, result->id, callee->control_writes, node.name());
    }
    return result;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<TfValue>* outputs, ConvertNode(scope, node_name));
  if (index < 0 || index >= static_cast<int>(outputs->size())) {
    return absl::InvalidArgumentError(absl::StrCat("output ", index, " of ",
                                                   DescribeNode(scope, node),
                                                   " does not exist (it has ", outputs->size(),
                                                   ")"));
  }
  const TfValue& v = (*outputs)[index];
  if (v.id == ir::kNoValue && v.table == nullptr && v.variable == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("output ", index, " of ",
                                                   DescribeNode(scope, node),
                                                   " is not available here (a dead branch of a "
                                                   "Switch, or an unsupported output)"));
  }
  return v;
}

absl::StatusOr<std::vector<TfValue>*> Converter::ConvertNode(Scope* scope,
                                                             const std::string& name) {
  auto done = scope->done.find(name);
  if (done != scope->done.end()) return &done->second;
  const Body& body = *scope->body;
  auto node_it = body.nodes.find(name);
  if (node_it == body.nodes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("reference to unknown node '", name, "'"));
  }
  const NodeDef& node = *node_it->second;
  if (scope->in_progress.count(name)) {
    return absl::UnimplementedError(absl::StrCat(
        "cycle through ", DescribeNode(scope, node),
        ": a loop that is not a TF1 while loop frame (Enter -> Merge -> LoopCond -> Switch -> "
        "NextIteration -> Merge, left through Exit)"));
  }
  if (depth_ > 2000) {
    return absl::InvalidArgumentError("graph too deep (more than 2000 nested nodes)");
  }
  ++depth_;
  scope->in_progress.insert(name);
  absl::StatusOr<std::vector<TfValue>> result;
  if (scope->value_parent != nullptr && !DependsOnSwitch(body, name, scope->branch_pred)) {
    auto outer = ConvertNode(scope->value_parent, name);
    if (!outer.ok()) {
      result = outer.status();
    } else {
      std::vector<TfValue> imported;
      for (const TfValue& v : **outer) {
        TfValue local = v;
        auto id = ImportValue(scope->frame, v.id, scope->value_parent->frame);
        if (!id.ok()) {
          result = id.status();
          break;
        }
        local.id = *id;
        imported.push_back(local);
      }
      if (result.ok()) result = std::move(imported);
    }
  } else if (node.op() == "Switch" && scope->value_parent != nullptr && node.input_size() > 1 &&
             CanonicalRef(node.input(1)) == scope->branch_pred) {
    auto data = GetTensor(scope->value_parent, node.input(0));
    if (!data.ok()) {
      result = data.status();
    } else {
      TfValue local = *data;
      auto id = ImportValue(scope->frame, data->id, scope->value_parent->frame);
      if (!id.ok()) {
        result = id.status();
      } else {
        local.id = *id;
        std::vector<TfValue> outs(2);
        outs[scope->branch_side] = local;
        result = std::move(outs);
      }
    }
  } else {
    result = ConvertOp(scope, node);
  }
  scope->in_progress.erase(name);
  --depth_;
  if (!result.ok()) return result.status();
  return &(scope->done[name] = *std::move(result));
}

absl::StatusOr<std::vector<TfValue>> Converter::ConvertOp(Scope* scope, const NodeDef& node) {
  const std::string& op = node.op();
  if (auto loop = ConvertWhileLoopOp(scope, node)) return *std::move(loop);
  if (op == "Merge") return ConvertMerge(scope, node);
  if (op == "Placeholder") {
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeNode(scope, node), " is needed but is not an input of the signature"));
  }
  if (IsVariableOp(op)) {
    KILN_ASSIGN_OR_RETURN(TfValue v, ValueOfVariable(scope, node));
    return std::vector<TfValue>{v};
  }
  if (IsTableOp(op)) {
    TfValue v;
    KILN_ASSIGN_OR_RETURN(v.table, TableOf(scope, node));
    return std::vector<TfValue>{v};
  }
  // A write that is not the saver's restore (which Kiln replays at import) changes a mutable
  // variable at run time (converter_variables.cc).
  if (IsVariableWriteOp(op) && !IsRestoreWrite(*scope->body, node)) {
    return ConvertVariableWrite(scope, node);
  }
  if (op == "Switch") {
    return absl::UnimplementedError(absl::StrCat(
        DescribeNode(scope, node), " is used outside a Switch/Merge conditional Kiln can "
                                   "rebuild"));
  }
  const OpConverter* convert = FindOpConverter(op);
  if (convert == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported TensorFlow op '", op, "': ", DescribeNode(scope, node)));
  }
  // Control dependencies are dropped, except on variable writes: those are converted and
  // order this node's variable reads after them (converter_variables.cc).
  KILN_ASSIGN_OR_RETURN(std::vector<ir::ValueId> after_writes,
                        ControlDependencyWrites(scope, node));
  KILN_RETURN_IF_ERROR(CheckControlDependencies(scope, node));
  std::vector<TfValue> inputs;
  for (const std::string& in : node.input()) {
    if (absl::StartsWith(in, "^")) continue;
    if (op == "PlaceholderWithDefault") break;  // not fed: its default is converted below
    auto v = GetTensor(scope, in);
    if (!v.ok()) return v.status();
    inputs.push_back(*v);
  }
  if (op == "PlaceholderWithDefault" && node.input_size() > 0) {
    KILN_ASSIGN_OR_RETURN(TfValue v, GetTensor(scope, node.input(0)));
    inputs.push_back(v);
  }
  // A mutable variable used as a tensor is read here (TF1's Identity of a ref, ReadVariableOp,
  // any op taking the ref); an Identity of a resource handle passes the handle on.
  const auto* type_attr = FindAttr(node, "T");
  const bool passes_resource = (op == "Identity" || op == "IdentityN") && type_attr != nullptr &&
                               type_attr->type() == tensorflow::DT_RESOURCE;
  bool read_after_writes = after_writes.empty();
  for (TfValue& v : inputs) {
    if (v.variable == nullptr || passes_resource) continue;
    KILN_ASSIGN_OR_RETURN(v.id, ReadVariable(scope, v, after_writes, node.name()));
    v.variable = nullptr;
    read_after_writes = true;
  }
  OpContext ctx(this, scope, node, std::move(inputs));
  absl::Status status = (*convert)(ctx);
  if (!status.ok()) return status;
  if (!read_after_writes) {
    // Kiln graphs have no control edges: the writes run because the outputs depend on them.
    KILN_RETURN_IF_ERROR(OrderOutputsAfter(scope, node, after_writes, ctx.outputs()));
  }
  return std::move(ctx.outputs());
}

absl::StatusOr<ir::Graph> Converter::BuildGraph(const std::vector<Feed>& feeds,
                                                const std::vector<std::string>& fetches) {
  ir::Graph graph;
  auto frame = std::make_unique<GraphFrame>();
  frame->graph = &graph;
  auto scope = std::make_unique<Scope>();
  scope->body = &top_;
  scope->frame = frame.get();
  for (const Feed& feed : feeds) {
    // TensorFlow does not check fed shapes against the placeholder's declared shape, so the
    // graph input carries only the dtype; the signature's TensorInfo keeps the declared shape.
    TfValue v;
    v.id = graph.AddValue(UniqueName(feed.value_name), ir::TensorType::UnknownRank(feed.dtype));
    graph.inputs.push_back(v.id);
    if (feed.rank >= 0) rank_hints_[{&graph, v.id}] = feed.rank;
    scope->feeds[CanonicalRef(feed.tensor)] = v;
  }
  std::set<ir::ValueId> used_outputs;
  for (const std::string& fetch : fetches) {
    auto [node, index] = SplitTopLevelRef(fetch);
    KILN_ASSIGN_OR_RETURN(TfValue v, GetTensor(scope.get(), absl::StrCat(node, ":", index)));
    if (v.variable != nullptr) {  // a fetched variable (TF1 `counter:0`): its value now
      KILN_ASSIGN_OR_RETURN(v.id, ReadVariable(scope.get(), v, {}, node));
    }
    if (v.id == ir::kNoValue) {
      return absl::UnimplementedError(absl::StrCat("output '", fetch, "' is not a tensor"));
    }
    ir::ValueId out = v.id;
    const ir::Value& value = graph.value(out);
    const bool is_input =
        std::find(graph.inputs.begin(), graph.inputs.end(), out) != graph.inputs.end();
    if (value.producer == ir::kNoNode || is_input || used_outputs.count(out)) {
      out = AddIrNode(graph, "Identity", {out}, 1, {}, fetch)[0];
    }
    used_outputs.insert(out);
    graph.outputs.push_back(out);
  }
  scopes_.push_back(std::move(scope));
  frames_.push_back(std::move(frame));
  for (auto& f : frames_) {
    if (f->graph == &graph) f->graph = nullptr;
  }
  return graph;
}

}  // namespace kiln::import::tf
