// Attention fusion: the scaled dot-product attention that exporters write out op by op
//   MatMul(Q, Kt) -> [Div or Mul by a scalar constant] -> [Add(mask)] -> Softmax(last axis)
//   -> MatMul(., V)
// with the Transposes that split the heads (on Q, K and V) and merge them (on the result) becomes
// one kiln::Attention (include/kiln/ir/attention.h), whose kernel reads the operands through the
// Transposes' strides and keeps each head's scores in cache. In BERT-4 this removes, per layer,
// four Transpose copies, the [B, H, 128, 128] score tensor and the passes over it.
//
// Only exact matches are rewritten: every absorbed value is read by the pattern alone; the
// products' operands are activations (a MatMul with constant weights stays a MatMul, for
// compress_matmul and the MatMul kernels); the softmax is over the last axis of rank-4 float
// scores; the mask's rank is known and at most 4 (so Add cannot raise the rank); a Transpose is
// absorbed only when the kernel can read its result with a unit stride. Runs before the post-op
// and elementwise-chain fusions, which would otherwise take the Div and Add.
#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/ir/attention.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

const std::vector<int64_t> kIdentity4 = {0, 1, 2, 3};

// A rank-4 MatMul operand `v` as stored plus the perm that reads it, absorbing the private
// Transposes that produced it; nullopt when its rank is not known to be 4.
struct Operand {
  ValueId stored = kNoValue;
  std::vector<int64_t> perm;
  std::vector<Node*> transposes;
};

std::optional<Operand> ResolveOperand(GraphView& view, ValueId v) {
  // The private Transposes above `v`, nearest first, and the perm that reads v from the input
  // of each: y = Transpose(x, p) is x's dim p[i] as its dim i, so absorbing one more Transpose
  // composes perm[i] = p[perm[i]].
  std::vector<Node*> chain;
  std::vector<std::vector<int64_t>> perms = {kIdentity4};
  ValueId cur = v;
  while (true) {
    Node* t = view.Producer(cur);
    if (!Is(t, "Transpose") || !view.IsPrivate(cur)) break;
    const std::vector<int64_t> p = t->GetInts("perm");
    if (!ir::IsPerm4(p)) break;  // an absent perm reverses the dims: left alone
    std::vector<int64_t> composed(4);
    for (int i = 0; i < 4; ++i) composed[i] = p[perms.back()[i]];
    perms.push_back(std::move(composed));
    chain.push_back(t);
    cur = t->inputs[0];
  }
  // The longest prefix of the chain the kernel can read with a unit stride.
  size_t j = chain.size();
  while (j > 0 && !ir::AttentionOperandPermOk(perms[j])) --j;
  Operand op;
  op.stored = j == 0 ? v : chain[j - 1]->inputs[0];
  op.perm = perms[j];
  op.transposes.assign(chain.begin(), chain.begin() + j);
  if (j == 0) {
    // Without a Transpose only the value's type says it has rank 4.
    const ir::TensorType& type = view.graph().value(v).type;
    if (!type.rank_known || type.rank() != 4) return std::nullopt;
  }
  // A product with constant weights stays a MatMul (compress_matmul, the MatMul kernels).
  if (view.Constant(op.stored) != nullptr) return std::nullopt;
  return op;
}

// The rank of `v`: its inferred type's, or, where inference left it unknown, derived through
// the few ops that build an attention mask from the graph's mask input (Cast, Sub/Mul/Add/Div
// with a constant, Unsqueeze with constant axes): BERT's exported
// (1 - mask)[:, None, None, :] * -10000 has no inferred rank. -1 when unknown.
int64_t KnownRank(GraphView& view, ValueId v, int depth = 0) {
  const Graph& g = view.graph();
  if (v < 0 || v >= g.num_values()) return -1;
  const ir::TensorType& type = g.value(v).type;
  if (type.rank_known) return type.rank();
  if (const Tensor* c = view.Constant(v)) return c->rank();
  Node* p = view.Producer(v);
  if (p == nullptr || depth > 8 || p->inputs.empty()) return -1;
  if (Is(p, "Cast") || Is(p, "Neg")) return KnownRank(view, p->inputs[0], depth + 1);
  if ((Is(p, "Add") || Is(p, "Sub") || Is(p, "Mul") || Is(p, "Div")) && p->inputs.size() == 2) {
    const int64_t a = KnownRank(view, p->inputs[0], depth + 1);
    const int64_t b = KnownRank(view, p->inputs[1], depth + 1);
    return a < 0 || b < 0 ? -1 : std::max(a, b);
  }
  if (Is(p, "Unsqueeze")) {
    std::vector<int64_t> axes = p->GetInts("axes");
    if (p->inputs.size() > 1) {
      const Tensor* t = view.Constant(p->inputs[1]);
      if (t == nullptr || t->dtype() != DType::kInt64) return -1;
      axes.assign(t->data<int64_t>(), t->data<int64_t>() + t->num_elements());
    }
    const int64_t in = KnownRank(view, p->inputs[0], depth + 1);
    return in < 0 || axes.empty() ? -1 : in + static_cast<int64_t>(axes.size());
  }
  return -1;
}

struct Scores {
  Node* matmul = nullptr;
  Node* scale = nullptr;  // the Div or Mul, or null
  std::string scale_op;
  float scale_value = 1.0f;
};

// The MatMul (and scaling) that produced the private value `v`.
std::optional<Scores> MatchScores(GraphView& view, ValueId v) {
  if (!view.IsPrivate(v)) return std::nullopt;
  Node* p = view.Producer(v);
  Scores s;
  ValueId product = v;
  if (Is(p, "Div") || Is(p, "Mul")) {
    int side = -1;  // the side holding the product
    for (int i = 0; i < 2; ++i) {
      if (p->op == "Div" && i == 1) break;  // Div(c, x) is not a scaling of x
      const ValueId c = p->inputs[1 - i];
      if (view.ScalarFloat(c) && view.Constant(c)->dtype() == DType::kFloat32 &&
          view.KeepsRankOf(c, p->inputs[i])) {
        side = i;
        break;
      }
    }
    if (side < 0) return std::nullopt;
    s.scale = p;
    s.scale_op = p->op;
    s.scale_value = *view.ScalarFloat(p->inputs[1 - side]);
    product = p->inputs[side];
    if (!view.IsPrivate(product)) return std::nullopt;
    p = view.Producer(product);
  }
  if (!Is(p, "MatMul") || p->inputs.size() != 2) return std::nullopt;
  s.matmul = p;
  return s;
}

absl::Status FuseAttention(Graph& g, PassContext& ctx) {
  GraphView view(g);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& softmax = g.node(id);
    if (!Is(&softmax, "Softmax")) continue;
    const int64_t axis = softmax.GetInt("axis", -1);
    if (axis != -1 && axis != 3) continue;
    const ValueId logits = softmax.inputs[0];
    if (!view.IsPrivate(logits)) continue;
    // Scores, possibly with the mask added on either side.
    std::optional<Scores> scores;
    Node* add = nullptr;
    ValueId mask = kNoValue;
    Node* p = view.Producer(logits);
    if (Is(p, "Add")) {
      for (int i = 0; i < 2 && !scores; ++i) {
        const ValueId m = p->inputs[1 - i];
        const int64_t mask_rank = KnownRank(view, m);
        if (mask_rank < 0 || mask_rank > 4) continue;
        scores = MatchScores(view, p->inputs[i]);
        if (scores) {
          add = p;
          mask = m;
        }
      }
    } else {
      scores = MatchScores(view, logits);
    }
    if (!scores) continue;
    // float32 scores: typed so, or (where inference had no rule upstream, as after BERT's
    // embedding Gather) the Div/Mul's float32 constant or the Add's float32 mask says so, as
    // ONNX requires both operands of those ops to have one type.
    const bool float_scores = view.IsFloat(logits) || scores->scale != nullptr ||
                              (mask != kNoValue && view.IsFloat(mask));
    if (!float_scores) continue;
    Node* qk = scores->matmul;
    Node* pv = view.SoleConsumer(softmax.outputs[0]);
    if (!Is(pv, "MatMul") || pv->inputs.size() != 2 || pv->inputs[0] != softmax.outputs[0]) {
      continue;
    }
    const std::optional<Operand> q = ResolveOperand(view, qk->inputs[0]);
    const std::optional<Operand> k = ResolveOperand(view, qk->inputs[1]);
    const std::optional<Operand> v = ResolveOperand(view, pv->inputs[1]);
    if (!q || !k || !v) continue;
    // Q's rank fixes the scores' rank at 4 (the mask's is at most 4), so axis 3 is the last.
    // The merge of the heads: a private Transpose whose rows the kernel writes with unit stride.
    ValueId out = pv->outputs[0];
    std::vector<int64_t> out_perm = kIdentity4;
    Node* merge = view.SoleConsumer(out);
    if (Is(merge, "Transpose") && ir::AttentionOutputPermOk(merge->GetInts("perm"))) {
      out_perm = merge->GetInts("perm");
      out = merge->outputs[0];
    } else {
      merge = nullptr;
    }
    std::vector<Node*> fused;
    for (const Operand* o : {&*q, &*k, &*v}) {
      for (Node* t : o->transposes) fused.push_back(t);
    }
    fused.push_back(qk);
    if (scores->scale != nullptr) fused.push_back(scores->scale);
    if (add != nullptr) fused.push_back(add);
    fused.push_back(&softmax);
    fused.push_back(pv);
    if (merge != nullptr) fused.push_back(merge);

    Node attention;
    attention.op = ir::kAttentionOp;
    attention.domain = "kiln";
    attention.name = softmax.name.empty() ? "attention" : softmax.name + "_attention";
    attention.inputs = {q->stored, k->stored, v->stored};
    if (mask != kNoValue) attention.inputs.push_back(mask);
    attention.outputs = {out};
    attention.attrs[ir::kAttentionQPermAttr] = q->perm;
    attention.attrs[ir::kAttentionKPermAttr] = k->perm;
    attention.attrs[ir::kAttentionVPermAttr] = v->perm;
    attention.attrs[ir::kAttentionOutPermAttr] = out_perm;
    attention.attrs[ir::kAttentionScaleOpAttr] = scores->scale_op;
    attention.attrs[ir::kAttentionScaleAttr] = scores->scale_value;
    const std::string note = absl::StrCat("fused ", DescribeNodes({fused.begin(), fused.end()}),
                                          " into ", attention.Describe());
    for (Node* n : fused) n->removed = true;
    g.AddNode(std::move(attention));  // may move the nodes the pointers above point to
    ctx.Note(note);
    view.Refresh();
  }
  return absl::OkStatus();
}

}  // namespace

KILN_REGISTER_PASS_KEEPING_TYPES("attention_fusion", 280, FuseAttention);

}  // namespace kiln::opt
