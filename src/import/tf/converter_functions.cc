// Function calls: a PartitionedCall inlined into its caller's graph, or a function body built
// as a subgraph (for If/While/Case branches and bodies).
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
  KILN_RETURN_IF_ERROR(ChargeCall(function_name));
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

}  // namespace kiln::import::tf
