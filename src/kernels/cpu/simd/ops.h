// Vectorized fp32 loops shared by the math kernels (elementwise, softmax, reductions and the
// fused elementwise interpreter) and the int8 MatMul's row quantization. Each loop exists once per
// instruction set (AVX2 and AVX-512, compiled from the same source in isa_*.cc); Best() picks the
// widest one the CPU supports at run time, so the binary still runs on any x86-64 with AVX2.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::kernels::simd {

// Unary fp32 operations. Parameters (UnaryParams) per op:
//   LeakyRelu alpha; Elu alpha; Selu alpha, gamma; Celu alpha; HardSigmoid alpha, beta;
//   ThresholdedRelu alpha; Clip alpha = min, beta = max; Shrink alpha = lambd, beta = bias.
enum class UnaryOp : uint8_t {
  kIdentity,
  kAbs,
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kReciprocal,
  kSquare,
  kFloor,
  kCeil,
  kRound,  // half to even
  kSign,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kAsinh,
  kAcosh,
  kAtanh,
  kErf,
  kRelu,
  kLeakyRelu,
  kElu,
  kSelu,
  kCelu,
  kSigmoid,
  kHardSigmoid,
  kHardSwish,
  kTanh,
  kSoftplus,
  kSoftsign,
  kThresholdedRelu,
  kGelu,      // exact: x * Phi(x)
  kGeluTanh,  // approximate="tanh"
  kMish,
  kClip,
  kShrink,
  kCount,
};

// Whether `op` costs far more per element than reading and writing it (erf, tanh, sigmoid,
// trigonometry, ...): parallel loops give each thread fewer elements of these than of a Relu.
constexpr bool IsHeavyUnary(UnaryOp op) {
  return !(op <= UnaryOp::kSquare || op == UnaryOp::kRelu || op == UnaryOp::kClip);
}

struct UnaryParams {
  float alpha = 0.f;
  float beta = 0.f;
  float gamma = 0.f;
};

// Binary fp32 operations (result is fp32).
enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,  // NaN-propagating, like numpy.maximum
  kMin,
  kPow,
  kPRelu,              // a < 0 ? a * b : a
  kSquaredDifference,  // (a - b)^2
  kFloorDiv,           // floor(a / b), TensorFlow's FloorDiv for floats
  kFloorMod,           // TensorFlow's FloorMod: result has the sign of b
  kFmod,               // C fmod: result has the sign of a (ONNX Mod fmod=1)
  kCount,
};

// One instruction of a fused elementwise program. Registers 0..num_inputs-1 hold the inputs,
// the rest are temporaries; `is_binary` selects which op field is used.
struct FusedInstr {
  bool is_binary = false;
  UnaryOp unary = UnaryOp::kIdentity;
  BinaryOp binary = BinaryOp::kAdd;
  UnaryParams params;
  int dst = 0;
  int src0 = 0;
  int src1 = 0;
};

struct FusedProgram {
  int num_registers = 0;
  int num_inputs = 0;
  std::vector<float> constants;  // registers [num_inputs, num_inputs + constants.size())
  std::vector<FusedInstr> code;
  std::vector<int> output_registers;
};

// Limit that keeps the interpreter's register file on the stack.
inline constexpr int kMaxFusedRegisters = 64;

struct Kernels {
  const char* isa;  // "avx2" or "avx512"
  void (*unary)(UnaryOp op, const UnaryParams& params, const float* in, float* out, int64_t n);
  // a_stride / b_stride are 0 (broadcast one value) or 1 (contiguous).
  void (*binary)(BinaryOp op, const float* a, int64_t a_stride, const float* b, int64_t b_stride,
                 float* out, int64_t n);
  float (*reduce_sum)(const float* in, int64_t n);
  float (*reduce_sum_square)(const float* in, int64_t n);
  float (*reduce_sum_abs)(const float* in, int64_t n);
  float (*reduce_max)(const float* in, int64_t n);  // NaN if any element is NaN; -inf if n == 0
  float (*reduce_min)(const float* in, int64_t n);
  // out[i] = exp(in[i] - shift); returns the sum of out (in and out may alias).
  float (*exp_shift_sum)(const float* in, float* out, int64_t n, float shift);
  // out[i] = in[i] * scale + bias.
  void (*scale_bias)(const float* in, float* out, int64_t n, float scale, float bias);
  // Runs `program` over n elements; ins[i] advances by in_strides[i] (0 or 1) per element.
  void (*fused)(const FusedProgram& program, const float* const* ins, const int64_t* in_strides,
                float* const* outs, int64_t n);
  // Dynamic int8 quantization of one row of k floats (kiln::DynamicQuantMatMul): its own scale
  // and zero point over [min(0, row), max(0, row)], codes round(a / scale) + zero in [0, 255].
  // False, with scale, zero and the codes 0, when the row holds a NaN or an infinity.
  bool (*quantize_row_u8)(const float* a, int64_t k, uint8_t* q, float* scale, int32_t* zero);
  // out[j] = float(acc[j] - zero * colsum[j]) * (scale * w_scale[j]): a row of int32 products
  // back to floats.
  void (*dequantize_row)(const int32_t* acc, const int32_t* colsum, const float* w_scale,
                         int32_t zero, float scale, float* out, int64_t n);
};

// The parts of quantize_row_u8 around each ISA build's vector loops, one function each for
// both builds, so that they give the same codes.
struct RowQuantization {
  float inverse = 1;         // 1 / scale
  float zero_plus_half = 0;  // zero + 0.5: a * inverse + zero_plus_half truncates to the code
};
// After the scan of a row of k floats: lo <= 0 <= hi its bounds, poison the sum of every
// x * 0 (not 0 when a NaN or an infinity is in the row). Writes the row's scale and zero
// point; false, with them and the k codes 0, for a row holding a NaN or an infinity.
bool StartRowQuantization(float lo, float hi, float poison, int64_t k, uint8_t* q, float* scale,
                          int32_t* zero, RowQuantization* rq);
// Codes of a[begin, k) without FMA: the tail past the vector loops' last step of 16.
void QuantizeRowTail(const RowQuantization& rq, const float* a, int64_t begin, int64_t k,
                     uint8_t* q);

const Kernels& Avx2Kernels();
const Kernels* Avx512Kernels();  // null when the CPU lacks AVX-512 (F, DQ, BW, VL)
// The widest set allowed by EffectiveCpuIsa() (kiln/core/cpu_isa.h: KILN_MAX_ISA=avx2 caps it).
const Kernels& Best();

// Scalar reference versions (what the vector code must match), also used for fp64 via T.
float ScalarUnary(UnaryOp op, const UnaryParams& params, float x);
double ScalarUnary(UnaryOp op, const UnaryParams& params, double x);
float ScalarBinary(BinaryOp op, float a, float b);
double ScalarBinary(BinaryOp op, double a, double b);

}  // namespace kiln::kernels::simd
