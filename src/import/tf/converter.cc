#include "import/tf/converter.h"

#include <algorithm>
#include <deque>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {

using tensorflow::NodeDef;

namespace {

bool IsCallOp(const std::string& op) {
  return op == "PartitionedCall" || op == "StatefulPartitionedCall";
}

bool IsVariableOp(const std::string& op) {
  return op == "VarHandleOp" || op == "VariableV2" || op == "Variable";
}

bool IsTableOp(const std::string& op) {
  return op == "HashTableV2" || op == "HashTable" || op == "MutableHashTableV2";
}

// "node", "node:3" -> (node, 3). Control inputs ("^node") are not passed here.
std::pair<std::string, int> SplitTopLevelRef(const std::string& ref) {
  const size_t colon = ref.rfind(':');
  if (colon == std::string::npos) return {ref, 0};
  int index = 0;
  if (!absl::SimpleAtoi(absl::string_view(ref).substr(colon + 1), &index)) return {ref, 0};
  return {ref.substr(0, colon), index};
}

// The output index of a tensor reference ("node:3", or the 3 of "node:out:3"). A reference
// that is not a non-negative number is a malformed graph: taking it as output 0 would
// silently wire the wrong tensor (the wrong restore key, the wrong variable).
absl::StatusOr<int> ParseOutputIndex(absl::string_view text, absl::string_view ref) {
  int index = 0;
  if (!absl::SimpleAtoi(text, &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor reference '", ref, "'"));
  }
  return index;
}

std::string CanonicalRef(const std::string& ref) {
  auto [node, index] = SplitTopLevelRef(ref);
  return absl::StrCat(node, ":", index);
}

// The node name a reference (data or control) points to, for graph walks. Function-body
// references "node:arg:i" and top-level "node:i" both give "node".
std::string RefNode(absl::string_view ref) {
  if (absl::StartsWith(ref, "^")) ref.remove_prefix(1);
  const size_t colon = ref.find(':');
  return std::string(colon == absl::string_view::npos ? ref : ref.substr(0, colon));
}

const tensorflow::AttrValue* FindAttr(const NodeDef& node, const std::string& name) {
  auto it = node.attr().find(name);
  return it == node.attr().end() ? nullptr : &it->second;
}

}  // namespace

std::string DescribeNode(const Scope* scope, const NodeDef& node) {
  std::string where = absl::StrCat("node '", node.name(), "' (op ", node.op(), ")");
  if (scope != nullptr && scope->body != nullptr && !scope->body->function_name.empty()) {
    absl::StrAppend(&where, " in function '", scope->body->function_name, "'");
  }
  return where;
}

Converter::Converter(ImportSource source) : source_(std::move(source)) {
  for (const NodeDef& node : source_.graph->node()) top_.nodes[node.name()] = &node;
  for (const auto& f : source_.graph->library().function()) {
    function_defs_[f.signature().name()] = &f;
  }
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

// Analysis --------------------------------------------------------------------------------

absl::StatusOr<Origin> Converter::ResolveOriginIn(const Body& body, std::string ref,
                                                  CallStack stack, int depth) {
  if (depth > 64) return absl::InvalidArgumentError("reference chain too long: " + ref);
  const Body* current = &body;
  for (int steps = 0; steps < 10000; ++steps) {
    if (absl::StartsWith(ref, "^")) ref = ref.substr(1);
    std::vector<std::string> parts = absl::StrSplit(ref, ':');
    if (current->fdef != nullptr && parts.size() == 1) {
      auto arg = current->arg_index.find(parts[0]);
      if (arg != current->arg_index.end()) {
        if (!stack.empty()) {
          const CallSite site = stack.back();
          stack.pop_back();
          std::vector<std::string> data_inputs;
          for (const std::string& in : site.call->input()) {
            if (!absl::StartsWith(in, "^")) data_inputs.push_back(in);
          }
          if (arg->second >= static_cast<int>(data_inputs.size())) {
            return absl::InvalidArgumentError(absl::StrCat(
                "call node '", site.call->name(), "' passes no argument ", arg->second));
          }
          ref = data_inputs[arg->second];
          current = site.caller;
          continue;
        }
        // No known caller: follow the top-level call sites of this function (the first one
        // wins; restore and initializer functions have one).
        for (const NodeDef& node : source_.graph->node()) {
          const auto* f = FindAttr(node, "f");
          const bool calls = (IsCallOp(node.op()) && f != nullptr &&
                              f->func().name() == current->function_name) ||
                             node.op() == current->function_name;
          if (calls && arg->second < node.input_size()) {
            return ResolveOriginIn(top_, node.input(arg->second), {}, depth + 1);
          }
        }
        return absl::NotFoundError("no call site for function " + current->function_name);
      }
    }
    const std::string& node_name = parts[0];
    auto n = current->nodes.find(node_name);
    if (n == current->nodes.end()) return absl::NotFoundError("unknown node " + node_name);
    const NodeDef& node = *n->second;
    int index = 0;
    if (parts.size() == 2 && current->fdef == nullptr) {
      KILN_ASSIGN_OR_RETURN(index, ParseOutputIndex(parts[1], ref));
    }
    if (parts.size() == 3) {
      KILN_ASSIGN_OR_RETURN(int flat, FlatOutputIndex(node, parts[1], 0));
      KILN_ASSIGN_OR_RETURN(int i, ParseOutputIndex(parts[2], ref));
      index = flat + i;
    }
    if (parts.size() > 3) {
      return absl::InvalidArgumentError(absl::StrCat("bad tensor reference '", ref, "'"));
    }
    if ((node.op() == "Identity" || node.op() == "IdentityN") && index < node.input_size() &&
        !absl::StartsWith(node.input(index), "^")) {
      ref = node.input(node.op() == "Identity" ? 0 : index);
      continue;
    }
    const auto* f = FindAttr(node, "f");
    const bool is_call =
        (IsCallOp(node.op()) && f != nullptr) || function_defs_.count(node.op()) > 0;
    if (is_call && stack.size() < 64) {
      const Body* callee = FindFunction(function_defs_.count(node.op()) ? node.op()
                                                                          : f->func().name());
      if (callee != nullptr && index < callee->fdef->signature().output_arg_size()) {
        auto ret = callee->fdef->ret().find(callee->fdef->signature().output_arg(index).name());
        if (ret != callee->fdef->ret().end()) {
          stack.push_back({current, &node});
          current = callee;
          ref = ret->second;
          continue;
        }
      }
    }
    return Origin{current, &node, index, std::move(stack)};
  }
  return absl::InvalidArgumentError("reference chain too long: " + ref);
}

absl::StatusOr<Tensor> Converter::ResolveConstString(const Body& body, const std::string& ref,
                                                     const CallStack& stack) {
  KILN_ASSIGN_OR_RETURN(Origin origin, ResolveOriginIn(body, ref, stack));
  const NodeDef* node = origin.node;
  if (node->op() != "Const") {
    return absl::UnimplementedError(absl::StrCat("expected a constant for '", ref,
                                                 "', found op ", node->op(), " '",
                                                 node->name(), "'"));
  }
  const auto* value = FindAttr(*node, "value");
  if (value == nullptr) return absl::InvalidArgumentError("Const without value: " + node->name());
  return FromTensorProto(value->tensor());
}

absl::Status Converter::AnalyzeRestores(const Body& body) {
  for (const auto& [name, node] : body.nodes) {
    if (node->op() != "AssignVariableOp" && node->op() != "Assign") continue;
    if (node->input_size() < 2) continue;
    // The value must come from a RestoreV2 output in this body.
    std::string value_ref = node->input(1);
    const NodeDef* restore = nullptr;
    int restore_index = 0;
    for (int steps = 0; steps < 100; ++steps) {
      std::vector<std::string> parts = absl::StrSplit(value_ref, ':');
      auto it = body.nodes.find(parts[0]);
      if (it == body.nodes.end()) break;
      const NodeDef* n = it->second;
      if (n->op() == "Identity" && n->input_size() > 0) {
        value_ref = n->input(0);
        continue;
      }
      if (n->op() == "RestoreV2") {
        restore = n;
        if (parts.size() == 2 || parts.size() == 3) {
          KILN_ASSIGN_OR_RETURN(restore_index, ParseOutputIndex(parts.back(), value_ref));
        }
      }
      break;
    }
    if (restore == nullptr || restore->input_size() < 2) continue;
    auto names = ResolveConstString(body, restore->input(1));
    if (!names.ok() || names->dtype() != DType::kString ||
        restore_index >= names->num_elements()) {
      continue;
    }
    const std::string key = names->data<std::string>()[restore_index];
    auto var = ResolveOrigin(body, node->input(0));
    if (!var.ok() || !IsVariableOp(var->first->op())) continue;
    variable_keys_[var->first->name()] = key;
  }
  return absl::OkStatus();
}

namespace {

bool IsTableInitOp(const std::string& op) {
  return op == "InitializeTableFromTextFileV2" || op == "LookupTableImportV2" ||
         op == "InitializeTableV2" || op == "InitializeTableFromTextFile" ||
         op == "InitializeTable";
}

// The function a node calls, or empty.
std::string CalledFunction(const NodeDef& node,
                           const std::map<std::string, const tensorflow::FunctionDef*>& defs) {
  if (defs.count(node.op())) return node.op();
  if (!IsCallOp(node.op())) return "";
  const auto* f = FindAttr(node, "f");
  return f == nullptr ? "" : f->func().name();
}

}  // namespace

std::string Converter::TableKey(const std::string& call_prefix, const NodeDef& node) {
  if (const auto* shared = FindAttr(node, "shared_name"); shared && !shared->s().empty()) {
    return "shared_name:" + shared->s();
  }
  return "node:" + call_prefix + node.name();
}

bool Converter::ContainsTableInit(const std::string& function_name, int depth) {
  auto memo = contains_table_init_.find(function_name);
  if (memo != contains_table_init_.end()) return memo->second;
  auto def = function_defs_.find(function_name);
  if (def == function_defs_.end() || depth > 64) return false;
  contains_table_init_[function_name] = false;  // breaks recursion cycles
  bool found = false;
  for (const NodeDef& node : def->second->node_def()) {
    if (IsTableInitOp(node.op())) found = true;
    const std::string callee = CalledFunction(node, function_defs_);
    if (!found && !callee.empty()) found = ContainsTableInit(callee, depth + 1);
    if (found) break;
  }
  return contains_table_init_[function_name] = found;
}

// Walks from `body` through the calls that lead to table initializers, so that each
// initializer's table handle and file name are resolved through the calls that pass them
// (TF2 exports create a table in one function and initialize it in another).
absl::Status Converter::AnalyzeTables(const Body& body, CallStack& stack, int depth) {
  if (depth > 32) return absl::OkStatus();
  for (const auto& [name, node] : body.nodes) {
    // Bounds the walk on graphs whose calls fan out exponentially (a hostile or corrupt
    // model); tables left unresolved are reported when a signature needs them.
    if (++table_walk_steps_ > 1000000) return absl::OkStatus();
    if (IsTableInitOp(node->op()) && node->input_size() >= 1) {
      auto table = ResolveOriginIn(body, node->input(0), stack);
      if (!table.ok() || !IsTableOp(table->node->op())) continue;
      std::string prefix;
      for (const CallSite& site : table->stack) absl::StrAppend(&prefix, site.call->name(), "/");
      table_inits_.try_emplace(TableKey(prefix, *table->node), TableInit{&body, node, stack});
      continue;
    }
    const std::string callee = CalledFunction(*node, function_defs_);
    if (callee.empty() || !ContainsTableInit(callee)) continue;
    const Body* callee_body = FindFunction(callee);
    if (callee_body == nullptr) continue;
    stack.push_back({&body, node});
    KILN_RETURN_IF_ERROR(AnalyzeTables(*callee_body, stack, depth + 1));
    stack.pop_back();
  }
  return absl::OkStatus();
}

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

absl::StatusOr<TfValue> Converter::ValueOfVariable(const Scope* scope, const NodeDef& node) {
  if (source_.variables == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(DescribeNode(scope, node), " is a variable but the model has no "
                                                "variables/ checkpoint"));
  }
  std::vector<std::string> candidates;
  if (scope->body == &top_) {
    auto it = variable_keys_.find(node.name());
    if (it != variable_keys_.end()) candidates.push_back(it->second);
  }
  if (const auto* shared = FindAttr(node, "shared_name"); shared && !shared->s().empty()) {
    candidates.push_back(shared->s());
  }
  candidates.push_back(node.name());
  for (const std::string& key : candidates) {
    if (!source_.variables->Contains(key)) continue;
    auto cached = variable_cache_.find(key);
    Tensor value;
    if (cached != variable_cache_.end()) {
      value = cached->second;
    } else {
      auto read = source_.variables->Lookup(key);
      if (!read.ok()) {
        return Annotate(read.status(), absl::StrCat("restoring ", DescribeNode(scope, node)));
      }
      value = *read;
      variable_cache_[key] = value;
    }
    TfValue out;
    out.id = scope->frame->graph->AddConstant(UniqueName(key), value);
    return out;
  }
  return absl::NotFoundError(absl::StrCat(
      "no checkpoint value for variable ", DescribeNode(scope, node), " (looked for keys: ",
      absl::StrJoin(candidates, ", "), ")"));
}

namespace {

absl::StatusOr<Tensor> ParseTableField(const std::string& text, DType dtype,
                                       const std::string& where) {
  if (dtype == DType::kString) {
    Tensor t(DType::kString, Shape{});
    *t.data<std::string>() = text;
    return t;
  }
  if (dtype == DType::kInt64 || dtype == DType::kInt32) {
    int64_t v;
    if (!absl::SimpleAtoi(text, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": '", text, "' is not an integer"));
    }
    return dtype == DType::kInt64 ? Tensor::Scalar<int64_t>(v)
                                  : Tensor::Scalar<int32_t>(static_cast<int32_t>(v));
  }
  if (dtype == DType::kFloat32 || dtype == DType::kFloat64) {
    double v;
    if (!absl::SimpleAtod(text, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": '", text, "' is not a number"));
    }
    return dtype == DType::kFloat32 ? Tensor::Scalar<float>(static_cast<float>(v))
                                    : Tensor::Scalar<double>(v);
  }
  return absl::UnimplementedError(absl::StrCat(where, ": table type ", DTypeName(dtype)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<TableContents>> Converter::TableOf(const Scope* scope,
                                                                  const NodeDef& node) {
  const std::string key = TableKey(scope->prefix, node);
  auto cached = table_cache_.find(key);
  if (cached != table_cache_.end()) return cached->second;
  auto init = table_inits_.find(key);
  if (init == table_inits_.end()) {
    return absl::UnimplementedError(absl::StrCat(
        "lookup table ", DescribeNode(scope, node),
        " has no initializer Kiln understands (InitializeTableFromTextFileV2 or "
        "LookupTableImportV2 in the graph or an initializer function)"));
  }
  const Body& body = *init->second.body;
  const NodeDef& init_node = *init->second.node;
  const CallStack& init_stack = init->second.stack;
  const std::string where = DescribeNode(nullptr, init_node);
  auto type_attr = [&](const char* name) -> absl::StatusOr<DType> {
    const auto* a = FindAttr(node, name);
    if (a == nullptr) return absl::InvalidArgumentError(absl::StrCat("table without ", name));
    return FromTfDataType(a->type());
  };
  KILN_ASSIGN_OR_RETURN(DType key_dtype, type_attr("key_dtype"));
  KILN_ASSIGN_OR_RETURN(DType value_dtype, type_attr("value_dtype"));
  auto table = std::make_shared<TableContents>();
  if (init_node.op() == "LookupTableImportV2" || init_node.op() == "InitializeTableV2" ||
      init_node.op() == "InitializeTable") {
    if (init_node.input_size() < 3) return absl::InvalidArgumentError(where + ": bad inputs");
    KILN_ASSIGN_OR_RETURN(table->keys, ResolveConstString(body, init_node.input(1), init_stack));
    KILN_ASSIGN_OR_RETURN(table->values,
                          ResolveConstString(body, init_node.input(2), init_stack));
  } else {
    if (init_node.input_size() < 2) return absl::InvalidArgumentError(where + ": bad inputs");
    KILN_ASSIGN_OR_RETURN(Origin origin, ResolveOriginIn(body, init_node.input(1), init_stack));
    std::string path;
    // SavedModels list their asset files: the tensor holding a path -> the file in assets/.
    if (source_.meta_graph != nullptr && origin.body == &top_) {
      for (const auto& asset : source_.meta_graph->asset_file_def()) {
        if (SplitTopLevelRef(asset.tensor_info().name()).first == origin.node->name()) {
          path = (std::filesystem::path(source_.export_dir) / "assets" / asset.filename())
                     .string();
        }
      }
    }
    if (path.empty()) {
      KILN_ASSIGN_OR_RETURN(Tensor name,
                            ResolveConstString(body, init_node.input(1), init_stack));
      if (name.dtype() != DType::kString || name.num_elements() != 1) {
        return absl::InvalidArgumentError(where + ": file name is not a string scalar");
      }
      path = *name.data<std::string>();
      if (!std::filesystem::exists(path) && !source_.export_dir.empty()) {
        path = (std::filesystem::path(source_.export_dir) / "assets" /
                std::filesystem::path(path).filename())
                   .string();
      }
    }
    KILN_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
    const int64_t key_index = FindAttr(init_node, "key_index") ? FindAttr(init_node, "key_index")->i() : -2;
    const int64_t value_index =
        FindAttr(init_node, "value_index") ? FindAttr(init_node, "value_index")->i() : -1;
    const int64_t vocab_size =
        FindAttr(init_node, "vocab_size") ? FindAttr(init_node, "vocab_size")->i() : -1;
    std::string delimiter = "\t";
    if (const auto* d = FindAttr(init_node, "delimiter"); d && !d->s().empty()) delimiter = d->s();
    std::vector<std::string> lines = absl::StrSplit(contents, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    if (vocab_size >= 0 && static_cast<int64_t>(lines.size()) > vocab_size) lines.resize(vocab_size);
    const int64_t n = static_cast<int64_t>(lines.size());
    std::vector<Tensor> keys, values;
    for (int64_t i = 0; i < n; ++i) {
      std::string line = lines[i];
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::vector<std::string> columns = absl::StrSplit(line, delimiter);
      auto field = [&](int64_t index, DType dtype) -> absl::StatusOr<Tensor> {
        const std::string line_where = absl::StrCat(path, " line ", i + 1);
        if (index == -1) {  // LINE_NUMBER
          return ParseTableField(std::to_string(i), dtype, line_where);
        }
        if (index == -2) return ParseTableField(line, dtype, line_where);
        if (index < 0 || index >= static_cast<int64_t>(columns.size())) {
          return absl::InvalidArgumentError(
              absl::StrCat(line_where, ": no column ", index, " in '", line, "'"));
        }
        return ParseTableField(columns[index], dtype, line_where);
      };
      KILN_ASSIGN_OR_RETURN(Tensor k, field(key_index, key_dtype));
      KILN_ASSIGN_OR_RETURN(Tensor v, field(value_index, value_dtype));
      keys.push_back(std::move(k));
      values.push_back(std::move(v));
    }
    auto stack = [&](const std::vector<Tensor>& items, DType dtype) {
      Tensor t(dtype, Shape{n});
      for (int64_t i = 0; i < n; ++i) {
        if (dtype == DType::kString) {
          t.data<std::string>()[i] = *items[i].data<std::string>();
        } else {
          std::memcpy(static_cast<char*>(t.raw_data()) + i * DTypeSize(dtype),
                      items[i].raw_data(), DTypeSize(dtype));
        }
      }
      return t;
    };
    table->keys = stack(keys, key_dtype);
    table->values = stack(values, value_dtype);
  }
  if (table->keys.dtype() != key_dtype || table->values.dtype() != value_dtype ||
      table->keys.num_elements() != table->values.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": table keys/values do not match the table's types or count"));
  }
  table_cache_[key] = table;
  return table;
}

bool Converter::DependsOnSwitch(const Body& body, const std::string& start,
                                const std::string& pred) {
  // Iterative DFS with memoization over data and control inputs.
  auto memo_key = [&](const std::string& n) { return std::make_pair(n, pred); };
  if (auto it = switch_dependency_.find(memo_key(start)); it != switch_dependency_.end()) {
    return it->second;
  }
  std::vector<std::pair<std::string, int>> stack{{start, 0}};
  std::set<std::string> on_stack{start};
  while (!stack.empty()) {
    auto& [name, next_input] = stack.back();
    auto node_it = body.nodes.find(name);
    bool result_known = false;
    bool result = false;
    if (node_it == body.nodes.end()) {
      result_known = true;
    } else if (node_it->second->op() == "Switch" && node_it->second->input_size() > 1 &&
               CanonicalRef(node_it->second->input(1)) == pred) {
      result_known = true;
      result = true;
    }
    if (!result_known) {
      const NodeDef& node = *node_it->second;
      bool pushed = false;
      while (next_input < node.input_size()) {
        const std::string input = RefNode(node.input(next_input));
        ++next_input;
        auto memo = switch_dependency_.find(memo_key(input));
        if (memo != switch_dependency_.end()) {
          if (memo->second) {
            result_known = true;
            result = true;
            break;
          }
          continue;
        }
        if (on_stack.count(input)) continue;  // a cycle (v1 loops): ignore the back edge
        stack.emplace_back(input, 0);
        on_stack.insert(input);
        pushed = true;
        break;
      }
      if (pushed) continue;
      if (!result_known) {
        result_known = true;
        result = false;
      }
    }
    switch_dependency_[memo_key(name)] = result;
    on_stack.erase(name);
    stack.pop_back();
    if (result) {
      // Everything still on the stack depends on it too.
      for (auto& [n, i] : stack) switch_dependency_[memo_key(n)] = true;
      break;
    }
  }
  return switch_dependency_[memo_key(start)];
}

namespace {

// An Assign/AssignVariableOp whose value comes (through Identity nodes) from a RestoreV2 in
// the same body: the saver's restore, which Kiln replays at import.
bool IsRestoreWrite(const Body& body, const NodeDef& node) {
  if ((node.op() != "Assign" && node.op() != "AssignVariableOp") || node.input_size() < 2) {
    return false;
  }
  std::string ref = node.input(1);
  for (int steps = 0; steps < 100; ++steps) {
    if (absl::StrContains(RefNode(ref), "Restore")) return true;
    auto it = body.nodes.find(RefNode(ref));
    if (it == body.nodes.end()) return false;
    if (it->second->op() == "RestoreV2" || it->second->op() == "Restore") return true;
    if (it->second->op() != "Identity" || it->second->input_size() < 1) return false;
    ref = it->second->input(0);
  }
  return false;
}

}  // namespace

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
      KILN_RETURN_IF_ERROR(CheckControlDependencies(scope, node));
      s->args.resize(data_inputs.size());
      s->arg_refs = data_inputs;
      s->arg_scope = scope;
      callee = s.get();
      scopes_.push_back(std::move(s));
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
  if (v.id == ir::kNoValue && v.table == nullptr) {
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
        ": v1 while loops (Enter/Exit/NextIteration) are not supported; re-export with "
        "TF2 control flow"));
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
  // A write that is not the saver's restore (which Kiln replays at import) changes state
  // at run time, which constants cannot do.
  const bool restore_write = IsRestoreWrite(*scope->body, node);
  if (op == "AssignAdd" || op == "AssignSub" || op == "AssignAddVariableOp" ||
      op == "AssignSubVariableOp" ||
      ((op == "Assign" || op == "AssignVariableOp") && !restore_write)) {
    return absl::UnimplementedError(absl::StrCat(
        DescribeNode(scope, node),
        ": stateful models are not supported (variables are imported as constants)"));
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
  // Control dependencies are dropped, except on variable writes: Kiln's variables are
  // constants, so a value ordered after a write would silently be the old one.
  for (const std::string& in : node.input()) {
    if (!absl::StartsWith(in, "^")) continue;
    auto dep = scope->body->nodes.find(RefNode(in));
    if (dep == scope->body->nodes.end()) continue;
    const std::string& dep_op = dep->second->op();
    if (dep_op == "AssignAddVariableOp" || dep_op == "AssignSubVariableOp" ||
        dep_op == "AssignAdd" || dep_op == "AssignSub" || dep_op == "ScatterAdd" ||
        dep_op == "ResourceScatterAdd" || dep_op == "ResourceScatterUpdate" ||
        ((dep_op == "AssignVariableOp" || dep_op == "Assign") &&
         !IsRestoreWrite(*scope->body, *dep->second))) {
      return absl::UnimplementedError(absl::StrCat(
          DescribeNode(scope, node), " runs after the variable update ",
          DescribeNode(scope, *dep->second),
          ": stateful models are not supported (variables are imported as constants)"));
    }
  }
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
  OpContext ctx(this, scope, node, std::move(inputs));
  absl::Status status = (*convert)(ctx);
  if (!status.ok()) return status;
  return std::move(ctx.outputs());
}

namespace {

// Ops without a converter that are still safe to skip when only a control dependency reaches
// them: they compute nothing a signature returns and change no state inference reads.
bool IsSkippableWithoutConverter(const std::string& op) {
  static const std::set<std::string> kSkippable = {
      "Print", "PrintV2", "StringFormat", "Timestamp", "StaticRegexFullMatch",
      "VarIsInitializedOp", "IsVariableInitialized", "SaveV2", "RestoreV2", "MergeV2Checkpoints",
      "ShardedFilename", "StringJoin", "ScalarSummary", "HistogramSummary", "ImageSummary",
      "AudioSummary", "TensorSummary", "TensorSummaryV2", "MergeSummary", "WriteSummary",
      "WriteScalarSummary", "WriteHistogramSummary", "FlushSummaryWriter", "SummaryWriter",
      "CreateSummaryFileWriter", "InitializeTableFromTextFileV2", "InitializeTableFromTextFile",
      "InitializeTableV2", "InitializeTable", "LookupTableImportV2", "Switch", "Merge",
      "Placeholder", "Enter", "Exit", "NextIteration", "LoopCond", "ControlTrigger"};
  return kSkippable.count(op) > 0;
}

}  // namespace


absl::Status Converter::CheckControlDependencies(const Scope* scope, const NodeDef& node) {
  struct Item {
    const Body* body;
    std::string name;
  };
  std::vector<Item> stack;
  for (const std::string& in : node.input()) {
    if (absl::StartsWith(in, "^")) stack.push_back({scope->body, RefNode(in)});
  }
  // A call also runs its function's control outputs (TF2's automatic control dependencies).
  std::string called_function;
  if (function_defs_.count(node.op())) {
    called_function = node.op();
  } else if (const auto* f = FindAttr(node, "f"); f != nullptr && IsCallOp(node.op())) {
    called_function = f->func().name();
  }
  if (const Body* callee = called_function.empty() ? nullptr : FindFunction(called_function)) {
    for (const auto& [k, ref] : callee->fdef->control_ret()) {
      stack.push_back({callee, RefNode(ref)});
    }
  }
  std::map<std::string, std::string> unsupported;  // op -> where it was first seen
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    if (!control_checked_.insert({item.body, item.name}).second) continue;
    auto it = item.body->nodes.find(item.name);
    if (it == item.body->nodes.end()) continue;  // a function argument
    const NodeDef& n = *it->second;
    const std::string& op = n.op();
    const bool restore_write = IsRestoreWrite(*item.body, n);
    const bool state_write = !restore_write && (absl::StartsWith(op, "Assign") ||
                                                absl::StrContains(op, "Scatter"));
    if (state_write) {
      Scope where;
      where.body = item.body;
      return absl::UnimplementedError(absl::StrCat(
          DescribeNode(scope, node), " runs after the variable update ", DescribeNode(&where, n),
          ": stateful models are not supported (variables are imported as constants)"));
    }
    const bool known = FindOpConverter(op) != nullptr || IsCallOp(op) || IsVariableOp(op) ||
                       IsTableOp(op) || function_defs_.count(op) > 0 ||
                       IsSkippableWithoutConverter(op) || restore_write;
    if (!known && !unsupported.count(op)) {
      Scope where;
      where.body = item.body;
      unsupported[op] = DescribeNode(&where, n);
    }
    for (const std::string& in : n.input()) stack.push_back({item.body, RefNode(in)});
    // What a call or a branch runs: the function's results and its control outputs.
    std::vector<std::string> called;
    if (function_defs_.count(op)) called.push_back(op);
    for (const auto& [attr_name, value] : n.attr()) {
      if (value.has_func()) called.push_back(value.func().name());
      for (const auto& f : value.list().func()) called.push_back(f.name());
    }
    for (const std::string& fname : called) {
      const Body* callee = FindFunction(fname);
      if (callee == nullptr) continue;
      for (const auto& [k, ref] : callee->fdef->ret()) stack.push_back({callee, RefNode(ref)});
      for (const auto& [k, ref] : callee->fdef->control_ret()) {
        stack.push_back({callee, RefNode(ref)});
      }
    }
  }
  if (unsupported.empty()) return absl::OkStatus();
  std::vector<std::string> ops;
  for (const auto& [op, where] : unsupported) ops.push_back(op);
  return absl::UnimplementedError(absl::StrCat(
      "unsupported TensorFlow op", ops.size() > 1 ? "s " : " ", "'",
      absl::StrJoin(ops, "', '"), "': ", unsupported.begin()->second,
      ops.size() > 1 ? " and others" : "", " must run before ", DescribeNode(scope, node),
      " (a control dependency); Kiln has no kernels for them (custom ops such as TF-Text's are "
      "not supported)"));
}

absl::StatusOr<std::vector<TfValue>> Converter::ConvertMerge(Scope* scope, const NodeDef& node) {
  const Body& body = *scope->body;
  std::vector<std::string> data_inputs;
  for (const std::string& in : node.input()) {
    if (!absl::StartsWith(in, "^")) data_inputs.push_back(in);
  }
  if (data_inputs.size() != 2) {
    return absl::UnimplementedError(absl::StrCat(DescribeNode(scope, node), " has ",
                                                 data_inputs.size(),
                                                 " inputs; only two-way conditionals (tf.cond) "
                                                 "are supported"));
  }
  // Which Switch ports does each input descend from?
  auto switch_ports = [&](const std::string& start) {
    std::set<std::pair<std::string, int>> ports;
    std::deque<std::string> queue{start};
    std::set<std::string> seen;
    while (!queue.empty()) {
      std::string ref = queue.front();
      queue.pop_front();
      const bool control = absl::StartsWith(ref, "^");
      const std::string name = RefNode(ref);
      auto it = body.nodes.find(name);
      if (it == body.nodes.end()) continue;
      const NodeDef& n = *it->second;
      if (n.op() == "Switch" && n.input_size() > 1 && !control) {
        ports.emplace(CanonicalRef(n.input(1)), SplitTopLevelRef(ref).second);
      }
      if (!seen.insert(name).second) continue;
      for (const std::string& in : n.input()) queue.push_back(in);
    }
    return ports;
  };
  auto ports_a = switch_ports(data_inputs[0]);
  auto ports_b = switch_ports(data_inputs[1]);
  std::string pred;
  int side_of_a = -1;
  for (const auto& [p, port] : ports_a) {
    const int other = 1 - port;
    if (ports_a.count({p, other}) || !ports_b.count({p, other}) || ports_b.count({p, port})) {
      continue;
    }
    pred = p;
    side_of_a = port;
    break;
  }
  if (pred.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        DescribeNode(scope, node), ": cannot find the Switch predicate of this conditional"));
  }
  KILN_ASSIGN_OR_RETURN(TfValue cond, GetTensor(scope, pred));
  ir::Graph& graph = *scope->frame->graph;
  std::map<std::string, ir::Attribute> attrs;
  for (int side = 1; side >= 0; --side) {
    auto sub = std::make_shared<ir::Graph>();
    sub->name = absl::StrCat(node.name(), side == 1 ? "/then" : "/else");
    auto frame = std::make_unique<GraphFrame>();
    frame->graph = sub.get();
    frame->parent = scope->frame;
    auto branch = std::make_unique<Scope>();
    branch->body = &body;
    branch->frame = frame.get();
    branch->prefix = scope->prefix;
    branch->value_parent = scope;
    branch->branch_pred = pred;
    branch->branch_side = side;
    const std::string& input = side == side_of_a ? data_inputs[0] : data_inputs[1];
    Scope* branch_ptr = branch.get();
    frames_.push_back(std::move(frame));
    scopes_.push_back(std::move(branch));
    KILN_ASSIGN_OR_RETURN(TfValue v, GetTensor(branch_ptr, input));
    if (v.id == ir::kNoValue) {
      return absl::UnimplementedError(
          absl::StrCat(DescribeNode(scope, node), ": a branch returns a non-tensor"));
    }
    // A branch output must be produced inside the branch.
    sub->outputs.push_back(AddIrNode(*sub, "Identity", {v.id}, 1, {}, sub->name + "/out")[0]);
    attrs[side == 1 ? "then_branch" : "else_branch"] = ir::GraphPtr(sub);
  }
  ir::ValueId cond_id = cond.id;
  ir::ValueId value =
      AddIrNode(graph, "If", {cond_id}, 1, std::move(attrs), scope->prefix + node.name())[0];
  // value_index: which input was taken.
  Tensor index_true = Tensor::Scalar<int32_t>(side_of_a == 1 ? 0 : 1);
  Tensor index_false = Tensor::Scalar<int32_t>(side_of_a == 1 ? 1 : 0);
  ir::ValueId t = graph.AddConstant(UniqueName(node.name() + "/index_true"), index_true);
  ir::ValueId f = graph.AddConstant(UniqueName(node.name() + "/index_false"), index_false);
  ir::ValueId index = AddIrNode(graph, "Where", {cond_id, t, f}, 1, {},
                                scope->prefix + node.name() + "/value_index")[0];
  TfValue out_value, out_index;
  out_value.id = value;
  out_index.id = index;
  return std::vector<TfValue>{out_value, out_index};
}

absl::StatusOr<std::vector<TfValue>> Converter::InlineFunction(Scope* caller,
                                                               const std::string& prefix,
                                                               const std::string& function_name,
                                                               const std::vector<TfValue>& args) {
  const Body* body = FindFunction(function_name);
  if (body == nullptr) {
    return absl::NotFoundError(absl::StrCat("function '", function_name, "' is not in the "
                                            "library"));
  }
  const auto& sig = body->fdef->signature();
  if (static_cast<int>(args.size()) != sig.input_arg_size()) {
    return absl::InvalidArgumentError(absl::StrCat("function '", function_name, "' takes ",
                                                   sig.input_arg_size(), " arguments, given ",
                                                   args.size()));
  }
  auto scope = std::make_unique<Scope>();
  scope->body = body;
  scope->frame = caller->frame;
  scope->prefix = prefix;
  for (const TfValue& a : args) scope->args.emplace_back(a);
  Scope* s = scope.get();
  scopes_.push_back(std::move(scope));
  std::vector<TfValue> outputs;
  for (const auto& out : sig.output_arg()) {
    auto ret = body->fdef->ret().find(out.name());
    if (ret == body->fdef->ret().end()) {
      return absl::InvalidArgumentError(absl::StrCat("function '", function_name,
                                                     "' has no value for output '", out.name(),
                                                     "'"));
    }
    KILN_ASSIGN_OR_RETURN(TfValue v, GetTensor(s, ret->second));
    outputs.push_back(v);
  }
  return outputs;
}

absl::StatusOr<ir::GraphPtr> Converter::BuildFunctionSubgraph(Scope* caller,
                                                              const std::string& function_name,
                                                              const std::vector<TfValue>& args,
                                                              bool args_as_inputs,
                                                              std::vector<TfValue>* outputs_out) {
  auto sub = std::make_shared<ir::Graph>();
  sub->name = function_name;
  auto frame = std::make_unique<GraphFrame>();
  frame->graph = sub.get();
  frame->parent = caller->frame;
  GraphFrame* f = frame.get();
  frames_.push_back(std::move(frame));
  std::vector<TfValue> local_args;
  for (const TfValue& a : args) {
    TfValue local = a;
    if (a.id != ir::kNoValue) {
      if (args_as_inputs) {
        const ir::Value& outer = caller->frame->graph->value(a.id);
        local.id = sub->AddValue(UniqueName(outer.name + "/in"), ir::TensorType{outer.type.dtype});
        sub->inputs.push_back(local.id);
      } else {
        KILN_ASSIGN_OR_RETURN(local.id, ImportValue(f, a.id, caller->frame));
      }
    }
    local_args.push_back(local);
  }
  Scope shim;  // InlineFunction inlines into the caller's frame: give it the subgraph's
  shim.frame = f;
  shim.body = caller->body;
  KILN_ASSIGN_OR_RETURN(std::vector<TfValue> outs,
                        InlineFunction(&shim, caller->prefix + function_name + "/", function_name,
                                       local_args));
  for (const TfValue& v : outs) {
    if (v.id == ir::kNoValue) {
      return absl::UnimplementedError(
          absl::StrCat("function '", function_name, "' returns a non-tensor value"));
    }
    sub->outputs.push_back(AddIrNode(*sub, "Identity", {v.id}, 1, {}, function_name + "/ret")[0]);
  }
  if (outputs_out != nullptr) *outputs_out = outs;
  return sub;
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
