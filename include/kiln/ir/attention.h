// kiln::Attention: scaled dot-product attention written out op by op by exporters (PyTorch's
// BERT: MatMul(Q, K^T) -> Div/Mul by a constant -> Add(mask) -> Softmax(last axis) ->
// MatMul(., V), with Transposes that split and merge the heads), run as one node. This header is
// the node's contract, shared by the pass that writes it (src/opt/fuse_attention.cc) and the
// kernel that reads it (src/kernels/cpu/nn_attention.cc).
//
// Node (domain "kiln", op "Attention"):
//   inputs  q, k, v, [mask]. q, k and v are rank-4 tensors as stored; the attention reads them
//           through the Transposes the pattern had, as strides (no copies):
//             Q  = Transpose(q, q_perm)   [B0, B1, M, D]
//             Kt = Transpose(k, k_perm)   [B0, B1, D, N]   (K already transposed, as MatMul saw it)
//             V  = Transpose(v, v_perm)   [B0, B1, N, Dv]
//           mask (optional) is added to the scaled scores with ONNX broadcasting; rank <= 4.
//   attr "q_perm", "k_perm", "v_perm", "out_perm": 4 ints each (the identity where the pattern
//           had no Transpose).
//   attr "scale_op": "Div", "Mul" or "" (no scaling); attr "scale": the constant.
//   output  Transpose(Softmax(Q x Kt (scale_op) scale [+ mask]) x V, out_perm).
// The kernel computes each step as the unfused nodes do: the scale and mask are applied in
// fp32 in the graph's order (x / scale, then + mask), the softmax is Kiln's Softmax (row max
// subtracted, NaN and -inf rows as ONNX computes them), only the two products may sum in
// another order. Batch dimensions broadcast as ONNX MatMul and Add broadcast them.
// For the products to read operands in place, the pass only writes perms where each operand's
// matrix has a unit-stride dimension: perm[3] == 3 or perm[2] == 3 for q, k and v, and
// out_perm[3] == 3 for the output.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

inline constexpr char kAttentionOp[] = "Attention";
inline constexpr char kAttentionQPermAttr[] = "q_perm";
inline constexpr char kAttentionKPermAttr[] = "k_perm";
inline constexpr char kAttentionVPermAttr[] = "v_perm";
inline constexpr char kAttentionOutPermAttr[] = "out_perm";
inline constexpr char kAttentionScaleOpAttr[] = "scale_op";
inline constexpr char kAttentionScaleAttr[] = "scale";

inline bool IsAttention(const Node& node) {
  return node.domain == "kiln" && node.op == kAttentionOp;
}

// True for a permutation of 0..3.
inline bool IsPerm4(const std::vector<int64_t>& perm) {
  if (perm.size() != 4) return false;
  bool seen[4] = {false, false, false, false};
  for (int64_t p : perm) {
    if (p < 0 || p > 3 || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}

// A matrix operand (the last two logical dims) has a unit-stride dimension in a contiguous
// tensor read through `perm`.
inline bool AttentionOperandPermOk(const std::vector<int64_t>& perm) {
  return IsPerm4(perm) && (perm[3] == 3 || perm[2] == 3);
}
// The output's rows are written with unit stride.
inline bool AttentionOutputPermOk(const std::vector<int64_t>& perm) {
  return IsPerm4(perm) && perm[3] == 3;
}

}  // namespace kiln::ir
