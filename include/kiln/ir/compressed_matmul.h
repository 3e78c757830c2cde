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
//
// kiln::Int8MatMul (already-quantized models: QLinearMatMul, MatMulInteger, QDQ MatMul/Gemm,
// written by src/opt/fuse_qdq_matmul.cc; the reference is src/kernels/cpu/quantize_ops.cc):
//   inputs:  A (uint8 | int8 [..., K]), Wq (int8 [K, N]: the model's weights minus a constant
//            `offset` chosen by the pass so that they fit int8, and 7 bits where they can),
//            w_zero (int32 [N]: the model's weight zero point minus that offset, per column),
//            w_colsum (int32 [N]: sum over K of Wq), [a_zero (A's type, one element: a
//            constant, or DynamicQuantizeLinear's output at run time)], [bias (int32 [N], in
//            accumulator units: added to the sum before the output scale)]
//   attrs:   out_type ("int32" | "uint8" | "int8"); for uint8/int8: out_scales (float, one
//            per column or one: a_scale * w_scale / y_scale, computed by the pass in float as
//            the reference does) and y_zero_point; relu (int 0/1: the sum is clamped at 0
//            before the output scale, which is Relu since the scales are positive).
//   acc[m, n] = sum_k (A[m, k] - a_zero) * (Wq[k, n] - w_zero[n]) (+ bias[n]), exact in int32
//   with wrap-around (the reference's int32 sum); int32 Y is acc (MatMulInteger, bit-exact);
//   an 8-bit Y is saturate(round_half_even(float(acc) * out_scales[n]) + y_zero_point), the
//   reference's requantization, so QLinearMatMul is bit-exact too. Without VNNI (u8 x s8
//   pairs summed into int16) weights that do not fit 7 bits (|Wq| <= 64) are split into two
//   halves that do, and summed: exact, at twice the multiply-adds.
#pragma once

namespace kiln::ir {

inline constexpr char kDynamicQuantMatMulOp[] = "DynamicQuantMatMul";
inline constexpr char kBf16MatMulOp[] = "Bf16MatMul";
inline constexpr char kInt8MatMulOp[] = "Int8MatMul";
// The attribute naming the layer a compressed node came from (its node name, or its output's
// name when the node has none): the accuracy guard's keep_fp32 set holds these names.
inline constexpr char kCompressedLayerAttr[] = "compressed_layer";

}  // namespace kiln::ir
