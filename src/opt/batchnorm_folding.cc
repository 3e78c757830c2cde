// Folding into weights: an inference BatchNormalization after a convolution with constant
// weights becomes new weights and a bias of that convolution (no node runs for it). One
// ctx.Note per folded BatchNormalization.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

// Conv (constant weights) followed by an inference BatchNormalization with constant statistics:
// the BatchNorm is folded into the convolution's weights and bias. The convolution takes over
// the BatchNorm's output value, whose type is the convolution's output type.
absl::Status FoldBatchNormIntoConv(Graph& g, PassContext& ctx) {
  GraphView view(g);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& bn = g.node(id);
    if (!Is(&bn, "BatchNormalization") || bn.inputs.size() < 5 ||
        bn.GetInt("training_mode", 0) != 0) {
      continue;
    }
    if (bn.outputs.size() > 1 &&
        std::any_of(bn.outputs.begin() + 1, bn.outputs.end(),
                    [&](ValueId v) { return v != kNoValue && view.Reads(v) != 0; })) {
      continue;
    }
    Node* conv = view.Producer(bn.inputs[0]);
    if (!Is(conv, "Conv") || !view.IsPrivate(bn.inputs[0]) || conv->inputs.size() < 2) continue;
    const Tensor* w = view.Constant(conv->inputs[1]);
    const Tensor* b = conv->inputs.size() > 2 ? view.Constant(conv->inputs[2]) : nullptr;
    if (conv->inputs.size() > 2 && conv->inputs[2] != kNoValue && b == nullptr) continue;
    const Tensor* scale = view.Constant(bn.inputs[1]);
    const Tensor* shift = view.Constant(bn.inputs[2]);
    const Tensor* mean = view.Constant(bn.inputs[3]);
    const Tensor* var = view.Constant(bn.inputs[4]);
    if (!w || !scale || !shift || !mean || !var || w->dtype() != DType::kFloat32) continue;
    const int64_t m = w->dim(0);
    bool ok = scale->num_elements() == m && shift->num_elements() == m &&
              mean->num_elements() == m && var->num_elements() == m &&
              (!b || b->num_elements() == m);
    for (const Tensor* t : {scale, shift, mean, var}) ok = ok && t->dtype() == DType::kFloat32;
    if (!ok) continue;
    const float eps = bn.GetFloat("epsilon", 1e-5f);
    Tensor new_w = w->Clone();
    Tensor new_b(DType::kFloat32, Shape{m});
    const int64_t per_channel = w->num_elements() / std::max<int64_t>(1, m);
    // Folding scales the weights before the convolution instead of its output after. That
    // computes the same only while the factor and the scaled weights are ordinary numbers: an
    // infinite factor (var + eps == 0) turns a zero weight into NaN where the unfused graph has
    // 0 * Inf only for a zero output, and a weight that overflows (or underflows to 0) when
    // scaled makes 0 * w (or Inf * w) NaN where the unfused graph has 0 (or Inf). Such a
    // BatchNorm stays as it is.
    bool exact = true;
    for (int64_t c = 0; c < m && exact; ++c) {
      // The factor exactly as the BatchNormalization kernel computes it.
      const float s = scale->data<float>()[c] / std::sqrt(var->data<float>()[c] + eps);
      exact = std::isfinite(s);
      float* row = new_w.data<float>() + c * per_channel;
      for (int64_t i = 0; i < per_channel && exact; ++i) {
        const float scaled = row[i] * s;
        exact = !(std::isfinite(row[i]) && !std::isfinite(scaled)) &&
                !(row[i] != 0.0f && s != 0.0f && scaled == 0.0f);
        row[i] = scaled;
      }
      const float bias = b ? b->data<float>()[c] : 0.0f;
      new_b.data<float>()[c] = (bias - mean->data<float>()[c]) * s + shift->data<float>()[c];
    }
    if (!exact) continue;
    const NodeId conv_id = IdOf(g, conv);
    const ValueId w_id =
        g.AddConstant(g.value(conv->inputs[1]).name + "_bnfolded", std::move(new_w));
    const ValueId b_id =
        g.AddConstant(g.UniqueName(conv->name + "_bias_bnfolded"), std::move(new_b));
    Node& c = g.node(conv_id);  // AddConstant may not move nodes, but keep the reference fresh
    c.inputs.resize(3);
    c.inputs[1] = w_id;
    c.inputs[2] = b_id;
    g.node(id).removed = true;
    TakeOverOutput(g, conv_id, 0, g.node(id).outputs[0]);
    ctx.Note(absl::StrCat("folded ", g.node(id).Describe(), " into ", c.Describe()));
    view.Refresh();
  }
  return absl::OkStatus();
}

}  // namespace

KILN_REGISTER_PASS_KEEPING_TYPES("batchnorm_folding", 200, FoldBatchNormIntoConv);

}  // namespace kiln::opt
