// The compressed MatMul operators: the contract between the pass that writes them
// (src/opt/compress_matmul.cc) and the kernels that run them (src/kernels/cpu/nn_int8_matmul.cc).
// It lives in ir/ so that the optimizer reads it without depending on the kernels.
//
// Both replace a MatMul, Gemm, FusedMatMul or FusedGemm whose weight B is a constant matrix
// (a Linear layer); A may have any rank >= 1 (its leading dimensions are rows), A is never
// transposed. The weight is stored [K, N] (Gemm's transB applied by the pass; Gemm's alpha
// folded into the scales, beta into the bias).
//
// kiln::DynamicQuantMatMul (int8, dynamic quantization):
//   inputs:  A (float [..., K]), Wq (int8 [K, N], symmetric per output channel),
//            w_scale (float [N]), w_colsum (int32 [N]: sum over K of Wq, for A's zero points),
//            [bias (float [N])], [residual (float, the output's shape) when post_ops has "Add"]
//   attrs:   weight_bits (int: 8, or 7 where the CPU lacks VNNI: u8 x s8 pairs then cannot
//            saturate the int16 sums of vpmaddubsw), post_ops / post_op_alphas /
//            post_op_betas (nn_dnnl.h), compressed_layer (string: the layer's name).
//   Each row of A is quantized at run time to u8 with its own scale and zero point (its min
//   and max, 0 included); products accumulate in int32; then
//   y[m, n] = a_scale[m] * w_scale[n] * (acc[m, n] - a_zero[m] * w_colsum[n]) + bias[n],
//   followed by the post-ops in order. A row of A holding NaN or Inf is computed in float on
//   the dequantized weights, so NaN and Inf reach the output as in fp32.
//
// kiln::Bf16MatMul (bf16 weights):
//   inputs:  A (float [..., K]), Wb (bfloat16 [K, N]), [bias (float [N])], [residual]
//   attrs:   post_ops / post_op_alphas / post_op_betas, compressed_layer.
//   Where oneDNN has bf16 matmul (avx512_bf16, AMX) A is rounded to bf16 and the product
//   accumulates in fp32; elsewhere the kernel widens the bf16 weights to fp32 as it reads them
//   (batch-1-like products, which are bound by the bytes of the weights) or once per plan
//   (larger products, which are bound by arithmetic).
#pragma once

namespace kiln::ir {

inline constexpr char kDynamicQuantMatMulOp[] = "DynamicQuantMatMul";
inline constexpr char kBf16MatMulOp[] = "Bf16MatMul";
// The attribute naming the layer a compressed node came from (its node name, or its output's
// name when the node has none): the accuracy guard's keep_fp32 set holds these names.
inline constexpr char kCompressedLayerAttr[] = "compressed_layer";

}  // namespace kiln::ir
