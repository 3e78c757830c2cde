// Lookup tables (HashTableV2 and its initializers): which initializer fills each table,
// followed through the calls that pass the handle (TF2 exports create a table in one
// function and fill it in another), and the table's contents read at import.
#include <algorithm>
#include <deque>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "import/tf/converter.h"
#include "import/tf/converter_internal.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {

using tensorflow::NodeDef;

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

}  // namespace kiln::import::tf
