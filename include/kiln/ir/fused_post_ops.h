// kiln::FusedConv / FusedMatMul / FusedGemm: a Conv, MatMul or Gemm with the bias Add, residual
// Add and activations that followed it, run as one node. This header is the node's contract:
// the optimizer pass that writes it (src/opt/fusion.cc), the kernels that read it
// (src/kernels/cpu/nn_dnnl.cc, nn_conv.cc, nn_matmul.cc) and the layout checks (ir/graph.cc,
// src/opt/layout.cc) all go through the names and accessors below instead of repeating
// attribute strings. It lives in ir/, below both the optimizer and the kernels.
//
// Node (domain "kiln"):
//   inputs   the op's own (Conv: X, W, [B]; MatMul: A, B, [bias]; Gemm: A, B, [C]), the bias
//            slot padded with an absent input when there is a residual, then the residual
//            when post_ops holds "Add" (always the last input).
//   attr "post_ops"       strings, applied in order after the op and its bias: "Add" (the
//                         residual) or an activation: Relu, LeakyRelu, Clip, Sigmoid, Tanh,
//                         Elu, HardSwish, Softplus, Gelu (erf), GeluTanh, Exp, Abs, Sqrt, Square.
//   attr "post_op_alphas", "post_op_betas": floats, one per entry (LeakyRelu/Elu alpha; Clip
//                         min/max); 0 where unused.
//
// Which post-ops oneDNN may run inside its primitive: an optimization must compute what the
// unfused graph computes, NaN, infinities, signed zeros and denormals included. oneDNN's
// eltwise post-ops do not: its Relu and Clip are max/min instructions that turn NaN into 0 (or
// the bound) and -0.0 into +0.0, and its transcendental approximations treat infinities and
// extremes their own way. So a post-op runs inside the primitive only when oneDNN computes it
// bit for bit like Kiln's unfused kernel; every other activation runs right after the
// primitive, on its output, in the same vector loops the unfused node runs (the kernel's
// "epilogue"). A residual "Add" is a oneDNN sum post-op, so it may only follow post-ops that
// run inside the primitive.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

inline constexpr char kKilnDomain[] = "kiln";
inline constexpr char kFusedConvOp[] = "FusedConv";
inline constexpr char kFusedMatMulOp[] = "FusedMatMul";
inline constexpr char kFusedGemmOp[] = "FusedGemm";
inline constexpr char kPostOpsAttr[] = "post_ops";
inline constexpr char kPostOpAlphasAttr[] = "post_op_alphas";
inline constexpr char kPostOpBetasAttr[] = "post_op_betas";
// The post-op kind of the residual Add.
inline constexpr char kResidualPostOp[] = "Add";

struct PostOp {
  std::string kind;  // kResidualPostOp or an activation name
  float alpha = 0;
  float beta = 0;
};

inline bool IsFusedConv(const Node& node) {
  return node.domain == kKilnDomain && node.op == kFusedConvOp;
}

// kiln::FusedConvDepthwise: a 1x1 FusedConv whose only reader is a depthwise 3x3 convolution,
// run as oneDNN's 1x1 convolution with a depthwise post-op, so the 1x1's output (MobileNet's
// expanded activation, six times the block's channels) never goes to memory
// (src/opt/fuse_depthwise.cc writes it, src/kernels/cpu/nn_conv_depthwise.cc runs it).
//   inputs   X [N, C, H, W], W [M, C, 1, 1], [B [M]], W_dw [M, 1, 3, 3], [B_dw [M]]
//   attrs    post_ops etc. (above): the 1x1's, one Clip with finite bounds;
//            "depthwise_stride" (1 or 2; pads are 1 on every side);
//            "depthwise_post_ops" etc.: the depthwise conv's, empty or one Relu or Clip.
//   output   [N, M, ceil(H / s), ceil(W / s)]
inline constexpr char kFusedConvDepthwiseOp[] = "FusedConvDepthwise";
inline constexpr char kDepthwiseStrideAttr[] = "depthwise_stride";
// The prefix of the depthwise convolution's post-op attributes (SetPostOps, GetPostOps).
inline constexpr char kDepthwisePrefix[] = "depthwise_";

inline bool IsFusedConvDepthwise(const Node& node) {
  return node.domain == kKilnDomain && node.op == kFusedConvDepthwiseOp;
}

// The fused op that `op` ("Conv", "MatMul", "Gemm") becomes.
inline const char* FusedOpFor(std::string_view op) {
  return op == "Conv" ? kFusedConvOp : op == "MatMul" ? kFusedMatMulOp : kFusedGemmOp;
}

// Writes the post-op attributes (nothing for an empty list); `prefix` names another stage's
// ("depthwise_" for FusedConvDepthwise's second convolution).
inline void SetPostOps(Node& node, const std::vector<PostOp>& post_ops,
                       const std::string& prefix = "") {
  if (post_ops.empty()) return;
  std::vector<std::string> kinds;
  std::vector<float> alphas, betas;
  for (const PostOp& p : post_ops) {
    kinds.push_back(p.kind);
    alphas.push_back(p.alpha);
    betas.push_back(p.beta);
  }
  node.attrs[prefix + kPostOpsAttr] = std::move(kinds);
  node.attrs[prefix + kPostOpAlphasAttr] = std::move(alphas);
  node.attrs[prefix + kPostOpBetasAttr] = std::move(betas);
}

// The post-ops of a fused node, in order (empty for a plain op). Missing alphas or betas are 0.
inline std::vector<PostOp> GetPostOps(const Node& node, const std::string& prefix = "") {
  const std::vector<std::string> kinds = node.GetStrings(prefix + kPostOpsAttr);
  const std::vector<float> alphas = node.GetFloats(prefix + kPostOpAlphasAttr);
  const std::vector<float> betas = node.GetFloats(prefix + kPostOpBetasAttr);
  std::vector<PostOp> out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    out.push_back(
        {kinds[i], i < alphas.size() ? alphas[i] : 0.0f, i < betas.size() ? betas[i] : 0.0f});
  }
  return out;
}

inline bool HasResidual(const Node& node) {
  if (node.domain != kKilnDomain) return false;
  for (const std::string& kind : node.GetStrings(kPostOpsAttr)) {
    if (kind == kResidualPostOp) return true;
  }
  return false;
}

// Index of the residual input of a fused node with a residual Add, or -1.
inline int ResidualInput(const Node& node) {
  return HasResidual(node) ? static_cast<int>(node.inputs.size()) - 1 : -1;
}

// True when oneDNN computes post-op `kind` (with its alpha) exactly as the unfused op does:
//   Add:       the sum post-op, one IEEE addition.
//   LeakyRelu: with a positive finite slope, oneDNN's x > 0 ? x : alpha * x and Kiln's
//              x < 0 ? alpha * x : x agree on every input (NaN * alpha is NaN, -0.0 * alpha
//              is -0.0). A zero slope takes oneDNN's max(x, 0) path instead.
inline bool PostOpRunsInsidePrimitive(std::string_view kind, float alpha) {
  if (kind == kResidualPostOp) return true;
  if (kind == "LeakyRelu") return alpha > 0.0f && std::isfinite(alpha);
  return false;
}

}  // namespace kiln::ir
