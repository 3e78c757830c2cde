// TF1 control flow (Switch/Merge): which nodes depend on a Switch's predicate, and a Merge of
// two branches converted to an If with one subgraph per branch.
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
    } else if (node_it->second->op() == "NextIteration") {
      // The previous iteration's value (a while loop's back edge): a conditional inside a loop
      // body does not depend on its own predicate through it.
      result_known = true;
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
  auto switch_ports = [&](const std::string& start, bool data_only) {
    std::set<std::pair<std::string, int>> ports;
    std::deque<std::string> queue{start};
    std::set<std::string> seen;
    while (!queue.empty()) {
      std::string ref = queue.front();
      queue.pop_front();
      const bool control = absl::StartsWith(ref, "^");
      if (control && data_only) continue;
      const std::string name = RefNode(ref);
      auto it = body.nodes.find(name);
      if (it == body.nodes.end()) continue;
      const NodeDef& n = *it->second;
      if (n.op() == "Switch" && n.input_size() > 1 && !control) {
        ports.emplace(CanonicalRef(n.input(1)), SplitTopLevelRef(ref).second);
      }
      if (!seen.insert(name).second) continue;
      // A while loop's back edge brings the previous iteration's values, which come from
      // both branches of a conditional inside the loop body.
      if (n.op() == "NextIteration") continue;
      for (const std::string& in : n.input()) queue.push_back(in);
    }
    return ports;
  };
  // TF1's tf.cond switches its data on `pred_id` and ties its constants, by control edges, to
  // pivots behind a second Switch(pred, pred). Both separate the branches, but only pred_id's
  // Switches are the ones the branches read; look for it through data edges first, and
  // through control edges only for branches that read no Switch (constant branches).
  std::string pred;
  int side_of_a = -1;
  for (bool data_only : {true, false}) {
    auto ports_a = switch_ports(data_inputs[0], data_only);
    auto ports_b = switch_ports(data_inputs[1], data_only);
    for (const auto& [p, port] : ports_a) {
      const int other = 1 - port;
      if (ports_a.count({p, other}) || !ports_b.count({p, other}) || ports_b.count({p, port})) {
        continue;
      }
      pred = p;
      side_of_a = port;
      break;
    }
    if (!pred.empty()) break;
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

}  // namespace kiln::import::tf
