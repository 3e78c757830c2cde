// Variables: which checkpoint key each variable is restored from (the saver's RestoreV2 +
// Assign ops, which Kiln replays at import). A variable's value (a constant, or a mutable
// variable when a signature writes it) is in converter_variables.cc.
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

}  // namespace kiln::import::tf
