// Redundancy elimination: nodes that compute what another node already computes (common
// subexpressions) or nothing at all (Identity, inference Dropout, Transpose/Reshape chains that
// cancel or compose). One ctx.Note per removed or merged node.
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/op_traits.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

bool SameComputation(const Node& a, const Node& b) {
  if (a.op != b.op || a.domain != b.domain || a.inputs != b.inputs ||
      a.outputs.size() != b.outputs.size() || a.attrs.size() != b.attrs.size()) {
    return false;
  }
  for (const auto& [key, value] : a.attrs) {
    auto it = b.attrs.find(key);
    if (it == b.attrs.end() || !ir::AttributesEqual(value, it->second)) return false;
  }
  return true;
}

// Two nodes with the same operator, attributes and inputs compute the same values unless they
// draw random numbers or run subgraphs (ir/op_traits.h), so the later node's outputs are
// replaced by the earlier node's. Readers of a replaced value read one of the same type.
absl::Status EliminateCommonSubexpressions(Graph& g, PassContext& ctx) {
  KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, g.TopologicalOrder());
  std::map<std::tuple<std::string, std::string, std::vector<ValueId>>, std::vector<NodeId>> seen;
  const std::set<ValueId> graph_outputs(g.outputs.begin(), g.outputs.end());
  for (NodeId id : order) {
    Node& n = g.node(id);
    if (ir::IsNondeterministic(n) || ir::HasSubgraph(n)) continue;
    auto& candidates = seen[{n.domain, n.op, n.inputs}];
    NodeId twin = kNoNode;
    for (NodeId c : candidates) {
      if (SameComputation(g.node(c), n)) twin = c;
    }
    bool escapes = false;
    for (ValueId v : n.outputs) escapes = escapes || graph_outputs.count(v) > 0;
    if (twin == kNoNode || escapes) {
      candidates.push_back(id);
      continue;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] != kNoValue && g.node(twin).outputs[i] != kNoValue) {
        g.ReplaceAllUses(n.outputs[i], g.node(twin).outputs[i]);
      }
    }
    n.removed = true;
    ctx.Note(absl::StrCat("merged ", n.Describe(), " into its twin ", g.node(twin).Describe()));
  }
  return absl::OkStatus();
}

// Dropping the inner Reshape of Reshape(Reshape(x, inner), outer) must not turn an error into
// an answer (onnx_graph_fuzz: x[2,1,1,5] reshaped to [] and then to [-1] ran when merged). A
// target of known product P (no -1) fails unless x has P elements; with a -1 it fails unless
// x's count is a multiple of P. So the outer fails whenever the inner does when both have no -1
// and equal products, or both have a -1 and the inner's product divides the outer's. Zeros
// (copy a dimension) and other negatives are not reasoned about.
bool OuterReshapeFailsWheneverInnerDoes(const Tensor& inner, const Tensor& outer) {
  auto product = [](const Tensor& shape, bool* inferred) -> std::optional<int64_t> {
    int64_t p = 1;
    *inferred = false;
    for (int64_t d : shape.span<int64_t>()) {
      if (d == -1 && !*inferred) {
        *inferred = true;
      } else if (d <= 0 || __builtin_mul_overflow(p, d, &p)) {
        return std::nullopt;
      }
    }
    return p;
  };
  bool inner_inferred, outer_inferred;
  const std::optional<int64_t> p_in = product(inner, &inner_inferred);
  const std::optional<int64_t> p_out = product(outer, &outer_inferred);
  if (!p_in || !p_out || inner_inferred != outer_inferred) return false;
  return inner_inferred ? *p_out % *p_in == 0 : *p_in == *p_out;
}

// Removes Identity and inference Dropout nodes, and Transpose/Reshape chains that cancel or
// compose (Transpose(Transpose(x)) -> one or none; Reshape(Reshape(x)) -> one). A bypassed
// node's readers read its input, which has the same type; a merged Transpose or Reshape keeps
// its output value and type.
absl::Status EliminateIdentityTransposeReshape(Graph& g, PassContext& ctx) {
  GraphView view(g);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& n = g.node(id);
    if (n.removed || !n.domain.empty() || n.inputs.empty() || n.outputs.empty()) continue;
    const ValueId out = n.outputs[0];
    // Readers of `out` must be plain inputs (not captures) and it must not be a graph output.
    auto bypass = [&](ValueId replacement) {
      if (view.Reads(out) < 0) return false;
      g.ReplaceAllUses(out, replacement);
      n.removed = true;
      view.Refresh();
      return true;
    };
    if (n.op == "Identity" ||
        (n.op == "Dropout" &&
         (n.outputs.size() < 2 || n.outputs[1] == kNoValue || view.Reads(n.outputs[1]) == 0) &&
         (n.inputs.size() < 3 || n.inputs[2] == kNoValue ||
          (view.Constant(n.inputs[2]) && !view.Constant(n.inputs[2])->data<bool>()[0])))) {
      if (bypass(n.inputs[0])) ctx.Note(absl::StrCat("removed ", n.Describe()));
      continue;
    }
    if (n.op == "Transpose") {
      const ir::TensorType& in_type = g.value(n.inputs[0]).type;
      const int rank = in_type.rank_known ? in_type.rank() : -1;
      std::vector<int64_t> perm = n.GetInts("perm");
      if (perm.empty()) {
        if (rank < 0) continue;
        for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
      }
      bool identity = true;
      for (size_t i = 0; i < perm.size(); ++i) {
        identity = identity && perm[i] == static_cast<int64_t>(i);
      }
      if (identity) {
        if (bypass(n.inputs[0])) ctx.Note(absl::StrCat("removed identity ", n.Describe()));
        continue;
      }
      Node* inner = view.Producer(n.inputs[0]);
      if (Is(inner, "Transpose") && view.IsPrivate(n.inputs[0])) {
        std::vector<int64_t> p1 = inner->GetInts("perm");
        if (p1.empty() || p1.size() != perm.size()) continue;
        std::vector<int64_t> composed(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) composed[i] = p1[perm[i]];
        n.inputs[0] = inner->inputs[0];
        n.attrs["perm"] = composed;
        inner->removed = true;
        ctx.Note(absl::StrCat("merged ", inner->Describe(), " into ", n.Describe()));
        view.Refresh();
        --id;  // look at this node again: it may now be an identity
      }
      continue;
    }
    if (n.op == "Reshape" && n.inputs.size() >= 2) {
      Node* inner = view.Producer(n.inputs[0]);
      const Tensor* shape = view.Constant(n.inputs[1]);
      if (!Is(inner, "Reshape") || !view.IsPrivate(n.inputs[0]) || shape == nullptr ||
          shape->dtype() != DType::kInt64) {
        continue;
      }
      bool has_zero = false;
      for (int64_t d : shape->span<int64_t>()) has_zero = has_zero || d == 0;
      if (has_zero) continue;  // 0 copies a dimension of the (inner) input: not composable
      const Tensor* inner_shape =
          inner->inputs.size() >= 2 ? view.Constant(inner->inputs[1]) : nullptr;
      if (inner_shape == nullptr || inner_shape->dtype() != DType::kInt64 ||
          !OuterReshapeFailsWheneverInnerDoes(*inner_shape, *shape)) {
        continue;
      }
      n.inputs[0] = inner->inputs[0];
      inner->removed = true;
      ctx.Note(absl::StrCat("merged ", inner->Describe(), " into ", n.Describe()));
      view.Refresh();
    }
  }
  return absl::OkStatus();
}

}  // namespace

KILN_REGISTER_PASS_KEEPING_TYPES("common_subexpression_elimination", 120,
                                 EliminateCommonSubexpressions);
KILN_REGISTER_PASS_KEEPING_TYPES("identity_transpose_reshape_elimination", 150,
                                 EliminateIdentityTransposeReshape);

}  // namespace kiln::opt
