// Variables that signatures write (TF Serving's saved_model_counter: get_counter reads
// `counter`, incr_counter AssignAdds 1, reset_counter Assigns 0).
//
// Before any graph is built, AnalyzeVariableWrites walks back from every signature's fetches
// (data and control inputs, into called functions) and collects the variables that a write
// other than the saver's restore reaches. Only those become mutable: one ir::Variable per
// checkpoint key, holding the checkpointed value, shared by every signature graph of this
// import (kiln/ir/variable.h). Every other variable stays a constant, so that the optimizer
// still folds and packs weights; an initializer such as `counter/Assign` does not count,
// because TF Serving never runs the init op (it restores the checkpoint) and neither do we.
//
// Conversion: a variable node gives a handle (TfValue::variable). An op that uses the handle
// as a tensor reads it (kiln::ReadVariable); Assign/AssignAdd/AssignSub and the resource ops
// become kiln::Assign*Variable nodes whose output is the value they left (TF1's ref output).
// Kiln graphs have no control edges, so the writes a node's control dependencies name are
// converted and passed to its reads as ordering inputs; the outputs of a node that waits for
// writes but reads no variable go through kiln::OrderAfter, whose inputs keep the writes.
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "import/tf/converter.h"
#include "import/tf/converter_internal.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {

using tensorflow::NodeDef;

bool IsVariableWriteOp(const std::string& op) {
  return op == "Assign" || op == "AssignAdd" || op == "AssignSub" || op == "AssignVariableOp" ||
         op == "AssignAddVariableOp" || op == "AssignSubVariableOp";
}

std::vector<std::string> Converter::VariableKeyCandidates(const Body& body,
                                                          const NodeDef& node) const {
  std::vector<std::string> candidates;
  if (&body == &top_) {
    auto it = variable_keys_.find(node.name());
    if (it != variable_keys_.end()) candidates.push_back(it->second);
  }
  if (const auto* shared = FindAttr(node, "shared_name"); shared && !shared->s().empty()) {
    candidates.push_back(shared->s());
  }
  candidates.push_back(node.name());
  return candidates;
}

absl::Status Converter::AnalyzeVariableWrites(const std::vector<std::string>& fetches) {
  struct Item {
    const Body* body;
    std::string name;
    CallStack stack;
  };
  std::vector<Item> work;
  for (const std::string& fetch : fetches) work.push_back({&top_, RefNode(fetch), {}});
  std::set<std::pair<const Body*, std::string>> seen;
  while (!work.empty()) {
    Item item = std::move(work.back());
    work.pop_back();
    if (!seen.insert({item.body, item.name}).second) continue;
    auto it = item.body->nodes.find(item.name);
    if (it == item.body->nodes.end()) continue;  // a function argument: its caller is walked
    const NodeDef& node = *it->second;
    if (IsVariableWriteOp(node.op()) && !IsRestoreWrite(*item.body, node) &&
        node.input_size() > 0) {
      auto origin = ResolveOriginIn(*item.body, node.input(0), item.stack);
      if (origin.ok() && IsVariableOp(origin->node->op())) {
        std::string key;
        for (const std::string& candidate : VariableKeyCandidates(*origin->body, *origin->node)) {
          if (source_.variables != nullptr && source_.variables->Contains(candidate)) {
            key = candidate;
            break;
          }
        }
        // Without a checkpoint value the variable cannot be loaded either way; ValueOfVariable
        // reports it.
        if (!key.empty()) written_variables_.insert(key);
      }
    }
    for (const std::string& in : node.input()) work.push_back({item.body, RefNode(in), item.stack});
    // What a call or a branch runs: its function's results and control outputs.
    std::vector<std::string> called;
    if (function_defs_.count(node.op())) called.push_back(node.op());
    for (const auto& [attr_name, value] : node.attr()) {
      if (value.has_func()) called.push_back(value.func().name());
      for (const auto& f : value.list().func()) called.push_back(f.name());
    }
    for (const std::string& fname : called) {
      const Body* callee = FindFunction(fname);
      if (callee == nullptr || item.stack.size() > 64) continue;
      CallStack stack = item.stack;
      stack.push_back({item.body, &node});
      for (const auto& [k, ref] : callee->fdef->ret())
        work.push_back({callee, RefNode(ref), stack});
      for (const auto& [k, ref] : callee->fdef->control_ret()) {
        work.push_back({callee, RefNode(ref), stack});
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TfValue> Converter::ValueOfVariable(const Scope* scope, const NodeDef& node) {
  if (source_.variables == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(DescribeNode(scope, node),
                                                      " is a variable but the model has no "
                                                      "variables/ checkpoint"));
  }
  const std::vector<std::string> candidates = VariableKeyCandidates(*scope->body, node);
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
    if (written_variables_.count(key)) {
      std::shared_ptr<ir::Variable>& variable = variables_[key];
      if (variable == nullptr) {
        variable = std::make_shared<ir::Variable>(key, value.dtype(), value);
      }
      out.variable = variable;
    } else {
      out.id = scope->frame->graph->AddConstant(UniqueName(key), value);
    }
    return out;
  }
  return absl::NotFoundError(
      absl::StrCat("no checkpoint value for variable ", DescribeNode(scope, node),
                   " (looked for keys: ", absl::StrJoin(candidates, ", "), ")"));
}

absl::StatusOr<ir::ValueId> Converter::ReadVariable(Scope* scope, const TfValue& handle,
                                                    const std::vector<ir::ValueId>& after,
                                                    const std::string& node_name) {
  const ir::Variable& variable = *handle.variable;
  ir::ValueId out = AddIrNode(*scope->frame->graph, "ReadVariable", after, 1,
                              {{ir::kVariableAttr, ir::VariableHandle(handle.variable)}},
                              absl::StrCat(scope->prefix, node_name), "kiln")[0];
  scope->frame->graph->value(out).type = ir::TensorType::UnknownRank(variable.dtype());
  return out;
}

absl::StatusOr<std::vector<ir::ValueId>> Converter::WritesReachedFrom(
    Scope* scope, std::vector<std::string> names) {
  // Writes named directly, or through NoOp groups (tf.group), in the same body.
  std::vector<ir::ValueId> writes;
  std::set<std::string> seen;
  while (!names.empty()) {
    const std::string name = std::move(names.back());
    names.pop_back();
    if (!seen.insert(name).second) continue;
    auto it = scope->body->nodes.find(name);
    if (it == scope->body->nodes.end()) continue;
    const NodeDef& dep = *it->second;
    if (dep.op() == "NoOp") {
      for (const std::string& in : dep.input()) {
        if (absl::StartsWith(in, "^")) names.push_back(RefNode(in));
      }
      continue;
    }
    if (!IsVariableWriteOp(dep.op()) || IsRestoreWrite(*scope->body, dep)) continue;
    KILN_ASSIGN_OR_RETURN(TfValue written, GetTensor(scope, dep.name()));
    if (written.id == ir::kNoValue) {
      return absl::InternalError(absl::StrCat(DescribeNode(scope, dep), " gave no value"));
    }
    writes.push_back(written.id);
    // Converted here: CheckControlDependencies need not refuse it.
    control_checked_.insert({scope->body, dep.name()});
  }
  return writes;
}

absl::StatusOr<std::vector<ir::ValueId>> Converter::ControlDependencyWrites(Scope* scope,
                                                                            const NodeDef& node) {
  std::vector<std::string> names;
  for (const std::string& in : node.input()) {
    if (absl::StartsWith(in, "^")) names.push_back(RefNode(in));
  }
  return WritesReachedFrom(scope, std::move(names));
}

absl::Status Converter::ConvertCallControlWrites(Scope* callee) {
  // TF2's automatic control dependencies make every write of a tf.function a control output
  // of the call: the call's results come after them.
  std::vector<std::string> names;
  for (const auto& [k, ref] : callee->body->fdef->control_ret()) names.push_back(RefNode(ref));
  KILN_ASSIGN_OR_RETURN(callee->control_writes, WritesReachedFrom(callee, std::move(names)));
  return absl::OkStatus();
}

ir::ValueId Converter::OrderValueAfter(Scope* scope, ir::ValueId value,
                                       const std::vector<ir::ValueId>& writes,
                                       const std::string& name) {
  std::vector<ir::ValueId> inputs = {value};
  inputs.insert(inputs.end(), writes.begin(), writes.end());
  const DType dtype = scope->frame->graph->value(value).type.dtype;
  const ir::ValueId out = AddIrNode(*scope->frame->graph, "OrderAfter", std::move(inputs), 1, {},
                                    absl::StrCat(scope->prefix, name, "/after_writes"), "kiln")[0];
  if (dtype != DType::kInvalid) {
    scope->frame->graph->value(out).type = ir::TensorType::UnknownRank(dtype);
  }
  return out;
}

absl::Status Converter::OrderOutputsAfter(Scope* scope, const NodeDef& node,
                                          const std::vector<ir::ValueId>& writes,
                                          std::vector<TfValue>& outputs) {
  int wrapped = 0;
  for (TfValue& v : outputs) {
    if (v.id == ir::kNoValue) continue;  // a table or variable handle: nothing runs
    v.id = OrderValueAfter(scope, v.id, writes, node.name());
    ++wrapped;
  }
  if (wrapped == 0) {
    return absl::UnimplementedError(
        absl::StrCat(DescribeNode(scope, node),
                     " waits for a variable write but has no tensor output to "
                     "order after it (Kiln graphs have no control edges)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TfValue>> Converter::ConvertVariableWrite(Scope* scope,
                                                                     const NodeDef& node) {
  const std::string& op = node.op();
  std::vector<std::string> data_inputs;
  for (const std::string& in : node.input()) {
    if (!absl::StartsWith(in, "^")) data_inputs.push_back(in);
  }
  if (data_inputs.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeNode(scope, node), " has ",
                                                   data_inputs.size(),
                                                   " data inputs; a variable write takes 2"));
  }
  KILN_ASSIGN_OR_RETURN(TfValue target, GetTensor(scope, data_inputs[0]));
  if (target.variable == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(DescribeNode(scope, node), " writes '", data_inputs[0],
                     "', which Kiln could not trace to a variable of the checkpoint"));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<ir::ValueId> after, ControlDependencyWrites(scope, node));
  KILN_RETURN_IF_ERROR(CheckControlDependencies(scope, node));
  KILN_ASSIGN_OR_RETURN(TfValue value, GetTensor(scope, data_inputs[1]));
  if (value.variable != nullptr) {
    KILN_ASSIGN_OR_RETURN(value.id, ReadVariable(scope, value, after, node.name() + "/value"));
  }
  if (value.id == ir::kNoValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeNode(scope, node), ": the value written is not a tensor"));
  }
  std::string kiln_op;
  std::map<std::string, ir::Attribute> attrs;
  attrs[ir::kVariableAttr] = ir::VariableHandle(target.variable);
  if (op == "Assign" || op == "AssignVariableOp") {
    kiln_op = "AssignVariable";
    // TF1's Assign checks shapes unless told not to; AssignVariableOp lets a write change the
    // shape unless its (newer) validate_shape attribute says otherwise.
    const auto* validate = FindAttr(node, "validate_shape");
    const bool validate_shape = validate != nullptr ? validate->b() : op == "Assign";
    attrs["validate_shape"] = int64_t{validate_shape ? 1 : 0};
  } else if (op == "AssignAdd" || op == "AssignAddVariableOp") {
    kiln_op = "AssignAddVariable";
  } else {
    kiln_op = "AssignSubVariable";
  }
  std::vector<ir::ValueId> inputs = {value.id};
  inputs.insert(inputs.end(), after.begin(), after.end());
  TfValue out;
  out.id = AddIrNode(*scope->frame->graph, kiln_op, std::move(inputs), 1, std::move(attrs),
                     absl::StrCat(scope->prefix, node.name()), "kiln")[0];
  scope->frame->graph->value(out.id).type = ir::TensorType::UnknownRank(target.variable->dtype());
  return std::vector<TfValue>{out};
}

}  // namespace kiln::import::tf
