// The always-on cleanup passes: constant folding and dead-code elimination.
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/op_traits.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

// Folded results above this size stay computed at run time: folding Expand/Tile/
// ConstantOfShape of a large shape would bloat the model for no speed gain.
constexpr size_t kMaxFoldedBytes = 64 << 20;

absl::Status ConstantFolding(ir::Graph& graph, PassContext& ctx) {
  const ir::NodeEvaluator* evaluator = ctx.options().evaluator;
  if (evaluator == nullptr) return absl::OkStatus();
  KILN_ASSIGN_OR_RETURN(std::vector<ir::NodeId> order, graph.TopologicalOrder());
  for (ir::NodeId id : order) {
    ir::Node& node = graph.node(id);
    if (node.removed || ir::HasSubgraph(node) || ir::IsNondeterministic(node)) continue;
    bool all_constant = true;
    std::vector<Tensor> inputs;
    for (ir::ValueId v : node.inputs) {
      if (v == ir::kNoValue) {
        inputs.emplace_back();
      } else if (graph.IsConstant(v)) {
        inputs.push_back(*graph.value(v).constant);
      } else {
        all_constant = false;
        break;
      }
    }
    if (!all_constant) continue;
    auto outputs = evaluator->Evaluate(node, inputs, kMaxFoldedBytes);
    // A node the kernels cannot evaluate (no kernel yet, bad constants, or a result too large
    // to keep as a constant) is left for the plan compiler, which reports the error with the
    // input shapes and the run's memory budget when it matters.
    if (!outputs.ok()) continue;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ir::ValueId v = node.outputs[i];
      if (v == ir::kNoValue) continue;
      ir::Value& value = graph.value(v);
      value.constant = (*outputs)[i];
      value.type = ir::TensorType::Of((*outputs)[i].dtype(), (*outputs)[i].shape().ToVector());
      value.producer = ir::kNoNode;
    }
    node.removed = true;
    ctx.Note(absl::StrCat("folded ", node.Describe()));
  }
  return absl::OkStatus();
}

absl::Status DeadCodeElimination(ir::Graph& graph, PassContext& ctx) {
  // Live: what the outputs need, following inputs and subgraph captures backwards.
  std::vector<bool> live_node(graph.num_nodes(), false);
  std::vector<bool> seen(graph.num_values(), false);
  std::vector<ir::ValueId> work(graph.outputs.begin(), graph.outputs.end());
  while (!work.empty()) {
    const ir::ValueId v = work.back();
    work.pop_back();
    if (v < 0 || v >= graph.num_values() || seen[v]) continue;
    seen[v] = true;
    const ir::NodeId p = graph.value(v).producer;
    if (p == ir::kNoNode || graph.node(p).removed || live_node[p]) continue;
    live_node[p] = true;
    for (ir::ValueId in : graph.node(p).inputs) work.push_back(in);
    for (ir::ValueId in : ir::CapturedValues(graph, graph.node(p))) work.push_back(in);
  }
  int removed = 0;
  for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
    ir::Node& node = graph.node(id);
    if (node.removed || live_node[id]) continue;
    node.removed = true;
    ++removed;
    if (removed <= 20) ctx.Note(absl::StrCat("removed ", node.Describe()));
  }
  if (removed > 20) ctx.Note(absl::StrCat("... and ", removed - 20, " more unused nodes"));
  return absl::OkStatus();
}

}  // namespace

KILN_REGISTER_PASS("constant_folding", 100, ConstantFolding);
KILN_REGISTER_PASS_KEEPING_TYPES("dead_code_elimination", 900, DeadCodeElimination);

}  // namespace kiln::opt
