// Kiln's int8 operators (domain "kiln"): the contract between the passes that write them
// (src/opt/compress_conv.cc for static int8 from calibration, src/opt/fuse_qdq.cc for models
// that arrive quantized) and the kernels that run them on oneDNN's int8 primitives
// (src/kernels/cpu/nn_int8_conv.cc).
//
// An int8 value (uint8 or int8, `real = scale * (q - zero_point)`) between these operators is
// stored channels-last: a logical [N, H, W, C] tensor. That is the layout oneDNN's int8
// convolutions and pools read and write on every ISA, so a chain Conv -> ReLU -> Pool -> Conv
// runs without a reorder; and since the shape itself says NHWC, every value keeps
// ir::MemoryLayout::kPlain and no other kernel can misread it. Float values at the borders
// stay NCHW.
//
// Without VNNI (kernels::CpuHasInt8Vnni) the weights must fit in 7 bits (|q| <= 63): oneDNN then
// sums u8 x s8 products in pairs into 16 bits, which saturates for 8-bit weights.
//
//   Int8Quantize(X: float [N,C,H,W]) -> Y: uint8|int8 [N,H,W,C]
//       attrs: scale, zero_point, to ("uint8" | "int8"). Round half to even, saturate.
//   Int8Dequantize(X: uint8|int8 [N,H,W,C]) -> Y: float [N,C,H,W]
//       attrs: scale, zero_point.
//   Int8Conv(X: uint8|int8 [N,H,W,C], W: int8 [M, C/group, kH, kW], [B: float [M] | int32 [M]],
//            [R: residual, the size and layout of Y]) -> Y
//       real(Y) = post_ops(conv(real(X), real(W)) + B), the residual Add adding real(R). A
//       float B is in real units; an int32 B is in accumulator units (x_scale * w_scale, as
//       QLinearConv's), added to the int32 sum before the output scale. An int8 Y may add a
//       residual of the other int8 type (its own r_scale, r_zero_point).
//       attrs: the Conv attributes (strides, pads, dilations, group, auto_pad, kernel_shape);
//       x_scale, x_zero_point; w_scales (one per output channel, or one); out_type ("uint8",
//       "int8": Y is [N,OH,OW,M] with y_scale, y_zero_point; "float": Y is float
//       [N,M,OH,OW]); r_scale, r_zero_point for an int8 residual; post_ops / post_op_alphas /
//       post_op_betas as FusedConv's (ir/fused_post_ops.h): "Add" (first), then Relu or Clip.
//   Int8Pool(X: uint8|int8 [N,H,W,C]) -> Y of X's type and quantization, [N,OH,OW,C]
//       attrs: mode ("max" | "avg"), the MaxPool/AveragePool attributes (kernel_shape,
//       strides, pads, auto_pad, ceil_mode, count_include_pad). Average pooling needs a
//       zero point of 0.
#pragma once

#include <string_view>

#include "kiln/core/tensor.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {

inline constexpr char kInt8QuantizeOp[] = "Int8Quantize";
inline constexpr char kInt8DequantizeOp[] = "Int8Dequantize";
inline constexpr char kInt8ConvOp[] = "Int8Conv";
inline constexpr char kInt8PoolOp[] = "Int8Pool";

// Names of the int8 types in the "to" / "out_type" attributes; kInvalid for anything else.
inline DType Int8TypeFromName(std::string_view name) {
  if (name == "uint8") return DType::kUInt8;
  if (name == "int8") return DType::kInt8;
  if (name == "float") return DType::kFloat32;
  return DType::kInvalid;
}
inline const char* Int8TypeName(DType dtype) {
  return dtype == DType::kUInt8 ? "uint8" : dtype == DType::kInt8 ? "int8" : "float";
}

inline bool IsInt8Op(const Node& node, std::string_view op) {
  return node.domain == "kiln" && node.op == op;
}

}  // namespace kiln::ir
