// Control dependencies: a node reached only through "^node" inputs is checked rather than
// converted; what it would do (an assertion, a state change) must be safe to leave out.
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
      // Writes a node names itself (or through NoOp groups), and a called function's control
      // outputs, were converted by converter_variables.cc and are not seen here; one reached
      // otherwise (behind an assertion or an Identity in a control chain) would have nothing
      // to order it in a graph without control edges.
      Scope where;
      where.body = item.body;
      return absl::UnimplementedError(absl::StrCat(
          DescribeNode(scope, node), " runs after the variable update ", DescribeNode(&where, n),
          ": Kiln runs a variable write only where a node's own control dependencies (or "
          "NoOp groups), or a called function's control outputs, name it"));
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

}  // namespace kiln::import::tf
