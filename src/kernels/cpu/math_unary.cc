// Unary elementwise kernels: math functions and activations (ONNX semantics, newest opset),
// plus Kiln's TF helpers.
//
// Domain "kiln" operators registered here (TensorFlow ops with no single ONNX twin):
//   kiln::Rsqrt(x)  = 1 / sqrt(x)   (TF Rsqrt; exact division, not the rsqrt estimate)
//   kiln::Square(x) = x * x         (TF Square; float and integer types)
//
// fp32 runs the vector loops of simd/ (AVX2 or AVX-512, picked at run time); fp16/bf16 go
// through those loops in float; fp64 and integers use scalar code the compiler vectorizes.
// Every kernel may run in place of its input.
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "kernels/cpu/math_common.h"

namespace kiln::kernels::math {
namespace {

using simd::UnaryOp;
using simd::UnaryParams;

// Ops that are also defined on integers (the rest are float only).
bool IntegerOk(UnaryOp op) {
  switch (op) {
    case UnaryOp::kIdentity:
    case UnaryOp::kAbs:
    case UnaryOp::kNeg:
    case UnaryOp::kSign:
    case UnaryOp::kRelu:
    case UnaryOp::kSquare:
    case UnaryOp::kClip:
      return true;
    default:
      return false;
  }
}

template <typename T>
T IntegerUnary(UnaryOp op, const UnaryParams& p, T x, T lo, T hi) {
  switch (op) {
    case UnaryOp::kAbs:
      if constexpr (std::is_signed_v<T>) return x < 0 ? static_cast<T>(-x) : x;
      return x;
    case UnaryOp::kNeg:
      return static_cast<T>(-x);
    case UnaryOp::kSign:
      return x > 0 ? T(1) : (x < 0 ? static_cast<T>(-1) : T(0));
    case UnaryOp::kRelu:
      return x < 0 ? T(0) : x;
    case UnaryOp::kSquare:
      return static_cast<T>(x * x);
    case UnaryOp::kClip:
      return x < lo ? lo : (x > hi ? hi : x);
    default:
      return x;
  }
}

// Runs `op` over n contiguous elements of dtype T.
template <typename T>
void RunUnary(const ComputeContext& ctx, UnaryOp op, const UnaryParams& p, const T* in, T* out,
              int64_t n, T lo = T(), T hi = T()) {
  const int64_t grain = simd::IsHeavyUnary(op) ? kParallelGrainHeavy : kParallelGrain;
  ctx.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      simd::Best().unary(op, p, in + b, out + b, e - b);
    } else if constexpr (std::is_same_v<T, double>) {
      for (int64_t i = b; i < e; ++i) out[i] = simd::ScalarUnary(op, p, in[i]);
    } else if constexpr (kIsHalf<T>) {
      constexpr int64_t kChunk = 1024;
      alignas(64) float buf[kChunk];
      for (int64_t i = b; i < e; i += kChunk) {
        const int64_t m = std::min(kChunk, e - i);
        HalfToFloatArray(in + i, buf, m);
        simd::Best().unary(op, p, buf, buf, m);
        FloatToHalfArray(buf, out + i, m);
      }
    } else {
      for (int64_t i = b; i < e; ++i) out[i] = IntegerUnary<T>(op, p, in[i], lo, hi);
    }
  });
}

class UnaryKernel : public MathKernel {
 public:
  UnaryKernel(const ir::Node& node, UnaryOp op, UnaryParams params)
      : MathKernel(node), op_(op), params_(params) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() != 1 || !ctx.inputs[0].present()) {
      return Error("expects exactly one input, got ", ctx.inputs.size());
    }
    const DType dt = ctx.inputs[0].dtype;
    if (!(IsFloat(dt) || (IsInt(dt) && IntegerOk(op_)))) {
      return Error("input dtype ", DTypeName(dt), " is not supported (expected ",
                   IntegerOk(op_) ? "a float or integer type" : "float, double, half or bfloat16",
                   ")");
    }
    if (IsUnsignedInt(dt) && op_ == UnaryOp::kNeg) {
      return Error("Neg is not defined for unsigned dtype ", DTypeName(dt));
    }
    DeclareOutputLikeInput0(ctx, dt, /*in_place_of_input0=*/true);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    const int64_t n = in.num_elements();
    VisitNumeric(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      RunUnary<T>(ctx, op_, params_, in.data<T>(), out.data<T>(), n);
    });
    return absl::OkStatus();
  }

 private:
  UnaryOp op_;
  UnaryParams params_;
};

// Clip(x, min?, max?): bounds are optional scalar inputs (opset 11+), any numeric dtype.
class ClipKernel : public MathKernel {
 public:
  explicit ClipKernel(const ir::Node& node) : MathKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty() || !ctx.inputs[0].present()) return Error("input 'input' is missing");
    const DType dt = ctx.inputs[0].dtype;
    if (!IsNumeric(dt)) return Error("input dtype ", DTypeName(dt), " is not numeric");
    for (int i = 1; i < 3; ++i) {
      if (!Present(ctx, i)) continue;
      if (ctx.inputs[i].dtype != dt) {
        return Error(i == 1 ? "min" : "max", " has dtype ", DTypeName(ctx.inputs[i].dtype),
                     ", expected ", DTypeName(dt), " like the input");
      }
      if (ctx.inputs[i].shape.num_elements() != 1) {
        return Error(i == 1 ? "min" : "max", " must be a scalar, got shape ",
                     ctx.inputs[i].shape.ToString());
      }
    }
    DeclareOutputLikeInput0(ctx, dt, /*in_place_of_input0=*/true);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    const Tensor& lo_t = InputOrEmpty(ctx, 1);
    const Tensor& hi_t = InputOrEmpty(ctx, 2);
    Tensor& out = ctx.outputs[0];
    VisitNumeric(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using C = ComputeType<T>;
      C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
      if constexpr (std::is_floating_point_v<C>) {
        lo = -std::numeric_limits<C>::infinity();
        hi = std::numeric_limits<C>::infinity();
      }
      if (lo_t.valid()) lo = static_cast<C>(lo_t.data<T>()[0]);
      if (hi_t.valid()) hi = static_cast<C>(hi_t.data<T>()[0]);
      UnaryParams p;
      if constexpr (std::is_floating_point_v<C>) {
        p.alpha = static_cast<float>(lo);
        p.beta = static_cast<float>(hi);
      }
      if constexpr (std::is_same_v<T, double>) {
        const double* x = in.data<double>();
        double* y = out.data<double>();
        ctx.ParallelFor(in.num_elements(), kParallelGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            y[i] = x[i] != x[i] ? x[i] : std::min(hi, std::max(lo, x[i]));
        });
      } else if constexpr (std::is_floating_point_v<C>) {
        RunUnary<T>(ctx, UnaryOp::kClip, p, in.data<T>(), out.data<T>(), in.num_elements());
      } else {
        RunUnary<T>(ctx, UnaryOp::kClip, p, in.data<T>(), out.data<T>(), in.num_elements(), lo, hi);
      }
    });
    return absl::OkStatus();
  }
};

// Predicates and bitwise/logical not: IsNaN, IsInf (detect_negative/positive), Not,
// BitwiseNot.
enum class PredicateOp { kIsNaN, kIsInf, kNot, kBitwiseNot };

class PredicateKernel : public MathKernel {
 public:
  PredicateKernel(const ir::Node& node, PredicateOp op) : MathKernel(node), op_(op) {
    detect_negative_ = node.GetInt("detect_negative", 1) != 0;
    detect_positive_ = node.GetInt("detect_positive", 1) != 0;
  }
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1 || !ctx.inputs[0].present()) {
      return Error("expects exactly one input");
    }
    const DType dt = ctx.inputs[0].dtype;
    DType out = dt;
    switch (op_) {
      case PredicateOp::kIsNaN:
      case PredicateOp::kIsInf:
        if (!IsFloat(dt)) return Error("input dtype ", DTypeName(dt), " is not a float type");
        out = DType::kBool;
        break;
      case PredicateOp::kNot:
        if (dt != DType::kBool) return Error("input dtype ", DTypeName(dt), " is not bool");
        break;
      case PredicateOp::kBitwiseNot:
        if (!IsInt(dt)) return Error("input dtype ", DTypeName(dt), " is not an integer type");
        break;
    }
    DeclareOutputLikeInput0(ctx, out, /*in_place_of_input0=*/out == dt);
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    const int64_t n = in.num_elements();
    if (op_ == PredicateOp::kNot) {
      const bool* x = in.data<bool>();
      bool* y = out.data<bool>();
      ctx.ParallelFor(n, kParallelGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = !x[i];
      });
      return absl::OkStatus();
    }
    VisitNumeric(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = in.data<T>();
      if constexpr (std::is_integral_v<T>) {
        T* y = out.data<T>();
        ctx.ParallelFor(n, kParallelGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) y[i] = static_cast<T>(~x[i]);
        });
      } else {
        bool* y = out.data<bool>();
        const bool nan = op_ == PredicateOp::kIsNaN;
        const bool neg = detect_negative_, pos = detect_positive_;
        ctx.ParallelFor(n, kParallelGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const auto v = static_cast<ComputeType<T>>(x[i]);
            y[i] = nan ? std::isnan(v) : (std::isinf(v) && (v > 0 ? pos : neg));
          }
        });
      }
    });
    return absl::OkStatus();
  }

 private:
  PredicateOp op_;
  bool detect_negative_ = true;
  bool detect_positive_ = true;
};

KernelFactory UnaryFactory(UnaryOp op) {
  return [op](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    UnaryParams p;
    switch (op) {
      case UnaryOp::kLeakyRelu:
        p.alpha = node.GetFloat("alpha", 0.01f);
        break;
      case UnaryOp::kElu:
        p.alpha = node.GetFloat("alpha", 1.0f);
        break;
      case UnaryOp::kCelu:
        p.alpha = node.GetFloat("alpha", 1.0f);
        break;
      case UnaryOp::kSelu:
        p.alpha = node.GetFloat("alpha", 1.67326319217681884765625f);
        p.gamma = node.GetFloat("gamma", 1.05070102214813232421875f);
        break;
      case UnaryOp::kHardSigmoid:
        p.alpha = node.GetFloat("alpha", 0.2f);
        p.beta = node.GetFloat("beta", 0.5f);
        break;
      case UnaryOp::kThresholdedRelu:
        p.alpha = node.GetFloat("alpha", 1.0f);
        break;
      case UnaryOp::kShrink:
        p.alpha = node.GetFloat("lambd", 0.5f);
        p.beta = node.GetFloat("bias", 0.0f);
        break;
      default:
        break;
    }
    UnaryOp actual = op;
    if (op == UnaryOp::kGelu) {
      const std::string approx = node.GetString("approximate", "none");
      if (approx == "tanh") {
        actual = UnaryOp::kGeluTanh;
      } else if (approx != "none") {
        return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": attribute approximate='",
                                                       approx, "' (expected none or tanh)"));
      }
    }
    return std::unique_ptr<OpKernel>(new UnaryKernel(node, actual, p));
  };
}

#define KILN_UNARY(name, op) KILN_REGISTER_KERNEL("", name, UnaryFactory(UnaryOp::op))
KILN_UNARY("Abs", kAbs);
KILN_UNARY("Neg", kNeg);
KILN_UNARY("Exp", kExp);
KILN_UNARY("Log", kLog);
KILN_UNARY("Sqrt", kSqrt);
KILN_UNARY("Reciprocal", kReciprocal);
KILN_UNARY("Floor", kFloor);
KILN_UNARY("Ceil", kCeil);
KILN_UNARY("Round", kRound);
KILN_UNARY("Sign", kSign);
KILN_UNARY("Sin", kSin);
KILN_UNARY("Cos", kCos);
KILN_UNARY("Tan", kTan);
KILN_UNARY("Asin", kAsin);
KILN_UNARY("Acos", kAcos);
KILN_UNARY("Atan", kAtan);
KILN_UNARY("Sinh", kSinh);
KILN_UNARY("Cosh", kCosh);
KILN_UNARY("Asinh", kAsinh);
KILN_UNARY("Acosh", kAcosh);
KILN_UNARY("Atanh", kAtanh);
KILN_UNARY("Erf", kErf);
KILN_UNARY("Relu", kRelu);
KILN_UNARY("LeakyRelu", kLeakyRelu);
KILN_UNARY("Elu", kElu);
KILN_UNARY("Selu", kSelu);
KILN_UNARY("Celu", kCelu);
KILN_UNARY("Sigmoid", kSigmoid);
KILN_UNARY("HardSigmoid", kHardSigmoid);
KILN_UNARY("HardSwish", kHardSwish);
KILN_UNARY("Tanh", kTanh);
KILN_UNARY("Softplus", kSoftplus);
KILN_UNARY("Softsign", kSoftsign);
KILN_UNARY("ThresholdedRelu", kThresholdedRelu);
KILN_UNARY("Gelu", kGelu);
KILN_UNARY("Mish", kMish);
KILN_UNARY("Shrink", kShrink);
#undef KILN_UNARY
KILN_REGISTER_KERNEL("kiln", "Rsqrt", UnaryFactory(UnaryOp::kRsqrt));
KILN_REGISTER_KERNEL("kiln", "Square", UnaryFactory(UnaryOp::kSquare));
KILN_REGISTER_KERNEL_CLASS("", "Clip", ClipKernel);
// Identity is registered with the tensor kernels (tensor_shape.cc).
KILN_REGISTER_KERNEL("", "IsNaN",
                     [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(
                           new PredicateKernel(n, PredicateOp::kIsNaN));
                     });
KILN_REGISTER_KERNEL("", "IsInf",
                     [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(
                           new PredicateKernel(n, PredicateOp::kIsInf));
                     });
KILN_REGISTER_KERNEL("", "Not", [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
  return std::unique_ptr<OpKernel>(new PredicateKernel(n, PredicateOp::kNot));
});
KILN_REGISTER_KERNEL("", "BitwiseNot",
                     [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(
                           new PredicateKernel(n, PredicateOp::kBitwiseNot));
                     });

}  // namespace

KILN_KERNEL_FILE(math_unary);

}  // namespace kiln::kernels::math
