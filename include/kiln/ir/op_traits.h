// What the optimizer and the plan compiler may assume about an operator beyond its shape
// rule. This is the one list: constant folding (opt/basic_passes.cc), common-subexpression
// elimination (opt/simplify.cc) and compile-time evaluation (exec/plan.cc) all ask here, so an
// operator added to it is protected by all three at once.
#pragma once

#include "absl/strings/string_view.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {

struct OpTraits {
  // Two runs with the same inputs give different results (random draws): such a node is
  // never evaluated ahead of time and never merged with another node that looks the same.
  bool nondeterministic = false;
};

// The traits of operator `op` of `domain` ("" for ONNX, "kiln" for Kiln's own operators).
// Operators not in the table get the defaults: deterministic.
OpTraits TraitsOf(absl::string_view domain, absl::string_view op);

inline bool IsNondeterministic(const Node& node) {
  return TraitsOf(node.domain, node.op).nondeterministic;
}

// True when an attribute of the node holds a graph (If's branches, Loop's and Scan's bodies).
// Such a node is neither evaluated by the optimizer (which has no subgraph runner) nor merged
// by CSE (equal-looking bodies are not compared).
bool HasSubgraph(const Node& node);

}  // namespace kiln::ir
