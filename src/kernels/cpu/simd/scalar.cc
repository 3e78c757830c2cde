// Scalar definitions of the fp32/fp64 elementwise ops: the reference the vector loops match,
// the fp64 path, and the lane-wise fallback for ops without a vector formula.
#include <cmath>
#include <limits>

#include "kernels/cpu/simd/ops.h"

namespace kiln::kernels::simd {
namespace {

template <typename T>
T Softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::fabs(x)));
}

template <typename T>
T Unary(UnaryOp op, const UnaryParams& p, T x) {
  const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
  switch (op) {
    case UnaryOp::kIdentity: return x;
    case UnaryOp::kAbs: return std::fabs(x);
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kExp: return std::exp(x);
    case UnaryOp::kLog: return std::log(x);
    case UnaryOp::kSqrt: return std::sqrt(x);
    case UnaryOp::kRsqrt: return T(1) / std::sqrt(x);
    case UnaryOp::kReciprocal: return T(1) / x;
    case UnaryOp::kSquare: return x * x;
    case UnaryOp::kFloor: return std::floor(x);
    case UnaryOp::kCeil: return std::ceil(x);
    case UnaryOp::kRound: return std::nearbyint(x);  // default rounding mode: half to even
    case UnaryOp::kSign: return x > 0 ? T(1) : (x < 0 ? T(-1) : x);
    case UnaryOp::kSin: return std::sin(x);
    case UnaryOp::kCos: return std::cos(x);
    case UnaryOp::kTan: return std::tan(x);
    case UnaryOp::kAsin: return std::asin(x);
    case UnaryOp::kAcos: return std::acos(x);
    case UnaryOp::kAtan: return std::atan(x);
    case UnaryOp::kSinh: return std::sinh(x);
    case UnaryOp::kCosh: return std::cosh(x);
    case UnaryOp::kAsinh: return std::asinh(x);
    case UnaryOp::kAcosh: return std::acosh(x);
    case UnaryOp::kAtanh: return std::atanh(x);
    case UnaryOp::kErf: return std::erf(x);
    case UnaryOp::kRelu: return x < T(0) ? T(0) : x;
    case UnaryOp::kLeakyRelu: return x < T(0) ? alpha * x : x;
    case UnaryOp::kElu: return x < T(0) ? alpha * std::expm1(x) : x;
    case UnaryOp::kSelu:
      return static_cast<T>(p.gamma) * (x > T(0) ? x : alpha * std::expm1(x));
    case UnaryOp::kCelu: return x > T(0) ? x : alpha * std::expm1(x / alpha);
    case UnaryOp::kSigmoid: {
      const T e = std::exp(-std::fabs(x));
      return x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
    }
    case UnaryOp::kHardSigmoid: {
      const T v = alpha * x + beta;
      return v != v ? v : std::min(T(1), std::max(T(0), v));
    }
    case UnaryOp::kHardSwish: {
      const T v = x / T(6) + T(0.5);
      return v != v ? v : x * std::min(T(1), std::max(T(0), v));
    }
    case UnaryOp::kTanh: return std::tanh(x);
    case UnaryOp::kSoftplus: return x != x ? x : Softplus(x);
    case UnaryOp::kSoftsign: return x / (T(1) + std::fabs(x));
    case UnaryOp::kThresholdedRelu: return x > alpha ? x : T(0);
    case UnaryOp::kGelu: return T(0.5) * x * std::erfc(-x * T(0.70710678118654752440));
    case UnaryOp::kGeluTanh: {
      const T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
      return T(0.5) * x * (T(1) + std::tanh(inner));
    }
    case UnaryOp::kMish: return x != x ? x : x * std::tanh(Softplus(x));
    case UnaryOp::kClip: return x != x ? x : std::min(beta, std::max(alpha, x));
    case UnaryOp::kShrink: return x < -alpha ? x + beta : (x > alpha ? x - beta : (x != x ? x : T(0)));
    case UnaryOp::kCount: break;
  }
  return x;
}

template <typename T>
T Binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMax: return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
    case BinaryOp::kMin: return (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b);
    case BinaryOp::kPow: return std::pow(a, b);
    case BinaryOp::kPRelu: return a < T(0) ? a * b : a;
    case BinaryOp::kSquaredDifference: return (a - b) * (a - b);
    case BinaryOp::kFloorDiv: return std::floor(a / b);
    case BinaryOp::kFloorMod: {
      const T m = std::fmod(a, b);
      return (m != T(0) && ((b < T(0)) != (m < T(0)))) ? m + b : m;
    }
    case BinaryOp::kFmod: return std::fmod(a, b);
    case BinaryOp::kCount: break;
  }
  return a;
}

}  // namespace

float ScalarUnary(UnaryOp op, const UnaryParams& params, float x) { return Unary(op, params, x); }
double ScalarUnary(UnaryOp op, const UnaryParams& params, double x) {
  return Unary(op, params, x);
}
float ScalarBinary(BinaryOp op, float a, float b) { return Binary(op, a, b); }
double ScalarBinary(BinaryOp op, double a, double b) { return Binary(op, a, b); }

}  // namespace kiln::kernels::simd
