// Helpers shared by the files of the TF converter (converter*.cc): tensor-reference parsing
// and the op classes the analyses look for. Internal to src/import/tf.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "import/tf/converter.h"

namespace kiln::import::tf {

inline bool IsCallOp(const std::string& op) {
  return op == "PartitionedCall" || op == "StatefulPartitionedCall";
}

inline bool IsVariableOp(const std::string& op) {
  return op == "VarHandleOp" || op == "VariableV2" || op == "Variable";
}

inline bool IsTableOp(const std::string& op) {
  return op == "HashTableV2" || op == "HashTable" || op == "MutableHashTableV2";
}

// "node", "node:3" -> (node, 3). Control inputs ("^node") are not passed here.
inline std::pair<std::string, int> SplitTopLevelRef(const std::string& ref) {
  const size_t colon = ref.rfind(':');
  if (colon == std::string::npos) return {ref, 0};
  int index = 0;
  if (!absl::SimpleAtoi(absl::string_view(ref).substr(colon + 1), &index)) return {ref, 0};
  return {ref.substr(0, colon), index};
}

// The output index of a tensor reference ("node:3", or the 3 of "node:out:3"). A reference
// that is not a non-negative number is a malformed graph: taking it as output 0 would
// silently wire the wrong tensor (the wrong restore key, the wrong variable).
inline absl::StatusOr<int> ParseOutputIndex(absl::string_view text, absl::string_view ref) {
  int index = 0;
  if (!absl::SimpleAtoi(text, &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor reference '", ref, "'"));
  }
  return index;
}

inline std::string CanonicalRef(const std::string& ref) {
  auto [node, index] = SplitTopLevelRef(ref);
  return absl::StrCat(node, ":", index);
}

// The node name a reference (data or control) points to, for graph walks. Function-body
// references "node:arg:i" and top-level "node:i" both give "node".
inline std::string RefNode(absl::string_view ref) {
  if (absl::StartsWith(ref, "^")) ref.remove_prefix(1);
  const size_t colon = ref.find(':');
  return std::string(colon == absl::string_view::npos ? ref : ref.substr(0, colon));
}

inline const tensorflow::AttrValue* FindAttr(const tensorflow::NodeDef& node,
                                             const std::string& name) {
  auto it = node.attr().find(name);
  return it == node.attr().end() ? nullptr : &it->second;
}

// An Assign/AssignVariableOp whose value comes (through Identity nodes) from a RestoreV2 in
// the same body: the saver's restore, which Kiln replays at import (converter_restore.cc).
bool IsRestoreWrite(const Body& body, const tensorflow::NodeDef& node);

// Assign, AssignAdd, AssignSub and their resource-variable forms (converter_variables.cc).
bool IsVariableWriteOp(const std::string& op);

}  // namespace kiln::import::tf
