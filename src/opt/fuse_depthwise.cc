// 1x1 FusedConv + ReLU6 whose only reader is a depthwise 3x3 convolution -> FusedConvDepthwise
// (ir/fused_post_ops.h): MobileNet's inverted residual block expands its channels six times
// with the 1x1 and filters them with the depthwise; run apart, the expanded activation is
// written to memory and read back (154 MB at batch 32 in MobileNet-v2's second block). oneDNN's
// depthwise post-op computes the depthwise rows while the 1x1's are in cache: measured on the
// 2-core EPYC at batch 32, that block 11.6 -> 4.8 ms with AVX-512 and 12.0 -> 6.6 ms capped to
// AVX2.
//
// Both activations then run inside oneDNN, whose Relu and Clip differ from Kiln's on NaN
// (ir/fused_post_ops.h): the kernel runs the fused primitive only when the input cannot make a
// sum NaN (the GuardedActivation of src/kernels/cpu/nn_dnnl.h) and the two convolutions apart,
// each with its activation in the epilogue, otherwise. That guard needs the 1x1's output
// bounded, hence a Clip with finite bounds there. The pass leaves the graph alone where the
// compression passes run or will (PassOptions::fuse_conv_depthwise): their calibration observes
// the 1x1's output.
#include "absl/strings/str_cat.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

using ir::Node;
using ir::ValueId;

bool AllEqual(const std::vector<int64_t>& values, int64_t want, size_t count) {
  if (values.empty()) return true;  // the ONNX default (1 for strides/dilations, 0 for pads)
  if (values.size() != count) return false;
  for (int64_t v : values) {
    if (v != want) return false;
  }
  return true;
}

// A 2-D float convolution (Conv or FusedConv without a residual) with constant float weights of
// `kernel` x `kernel` and a constant bias or none, no auto_pad, unit dilations.
bool IsPlainConv(GraphView& view, const Node& n, int64_t kernel) {
  const bool conv = (n.domain.empty() && n.op == "Conv") || ir::IsFusedConv(n);
  if (!conv || ir::HasResidual(n) || n.inputs.size() < 2 || n.inputs.size() > 3 ||
      n.outputs.size() != 1) {
    return false;
  }
  const Tensor* w = view.Constant(n.inputs[1]);
  if (w == nullptr || w->dtype() != DType::kFloat32 || w->rank() != 4 || w->dim(2) != kernel ||
      w->dim(3) != kernel || w->num_elements() == 0) {
    return false;
  }
  if (n.inputs.size() == 3 && n.inputs[2] != ir::kNoValue) {
    const Tensor* b = view.Constant(n.inputs[2]);
    if (b == nullptr || b->dtype() != DType::kFloat32 || b->num_elements() != w->dim(0)) {
      return false;
    }
  }
  return n.GetString("auto_pad", "NOTSET") == "NOTSET" && AllEqual(n.GetInts("dilations"), 1, 2);
}

bool IsFiniteClip(const ir::PostOp& op) {
  return op.kind == "Clip" && std::isfinite(op.alpha) && std::isfinite(op.beta) &&
         op.alpha <= op.beta;
}

absl::Status FuseConvDepthwise(ir::Graph& g, PassContext& ctx) {
  if (!ctx.options().fuse_conv_depthwise || ctx.options().compression != nullptr) {
    return absl::OkStatus();
  }
  GraphView view(g);
  for (ir::NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& expand = g.node(id);
    if (expand.removed || !ir::IsFusedConv(expand) || !IsPlainConv(view, expand, 1) ||
        expand.GetInt("group", 1) != 1 || !AllEqual(expand.GetInts("strides"), 1, 2) ||
        !AllEqual(expand.GetInts("pads"), 0, 4)) {
      continue;
    }
    const std::vector<ir::PostOp> expand_ops = ir::GetPostOps(expand);
    if (expand_ops.size() != 1 || !IsFiniteClip(expand_ops[0])) continue;
    Node* depthwise = view.SoleConsumer(expand.outputs[0]);
    if (depthwise == nullptr || depthwise->inputs[0] != expand.outputs[0] ||
        !IsPlainConv(view, *depthwise, 3)) {
      continue;
    }
    const int64_t channels = view.Constant(expand.inputs[1])->dim(0);
    const Tensor& w_dw = *view.Constant(depthwise->inputs[1]);
    const std::vector<int64_t> strides = depthwise->GetInts("strides");
    const int64_t stride = strides.empty() ? 1 : strides[0];
    if (depthwise->GetInt("group", 1) != channels || w_dw.dim(0) != channels || w_dw.dim(1) != 1 ||
        !(stride == 1 || stride == 2) || !AllEqual(strides, stride, 2) ||
        !AllEqual(depthwise->GetInts("pads"), 1, 4) || depthwise->GetInts("pads").empty()) {
      continue;
    }
    const std::vector<ir::PostOp> depthwise_ops = ir::GetPostOps(*depthwise);
    if (depthwise_ops.size() > 1 || (depthwise_ops.size() == 1 && depthwise_ops[0].kind != "Relu" &&
                                     !IsFiniteClip(depthwise_ops[0]))) {
      continue;
    }
    Node fused;
    fused.domain = ir::kKilnDomain;
    fused.op = ir::kFusedConvDepthwiseOp;
    fused.name = expand.name;
    const ValueId none = ir::kNoValue;
    fused.inputs = {expand.inputs[0], expand.inputs[1],
                    expand.inputs.size() > 2 ? expand.inputs[2] : none, depthwise->inputs[1],
                    depthwise->inputs.size() > 2 ? depthwise->inputs[2] : none};
    fused.outputs = {depthwise->outputs[0]};
    ir::SetPostOps(fused, expand_ops);
    ir::SetPostOps(fused, depthwise_ops, ir::kDepthwisePrefix);
    fused.attrs[ir::kDepthwiseStrideAttr] = stride;
    const std::string note = absl::StrCat("fused 1x1 ", expand.Describe(), " + depthwise ",
                                          depthwise->Describe(), " into ", fused.op);
    g.node(id).removed = true;
    depthwise->removed = true;
    g.AddNode(std::move(fused));  // may move the nodes `depthwise` points to
    ctx.Note(note);
    view.Refresh();
  }
  return absl::OkStatus();
}

}  // namespace

// After the post-op fusions (300, 350) made the FusedConvs it reads and the compression
// passes (390) left the convolutions they keep fp32, before conv_activation_layout (400).
KILN_REGISTER_PASS_KEEPING_TYPES("conv_depthwise_fusion", 395, FuseConvDepthwise);

}  // namespace kiln::opt
