// Tensor references: following a "node:i" or "node:out:i" reference through Identity nodes
// and function calls to the node that produces it, for the import-time analyses (restores,
// tables) that need a value's origin rather than its converted IR value.
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

}  // namespace kiln::import::tf
