// Binary and variadic elementwise kernels with numpy broadcasting (ONNX semantics), logical,
// comparison and bitwise ops, Where, and Kiln's TF helpers.
//
// Domain "kiln" operators registered here (TensorFlow semantics where ONNX differs):
//   kiln::FloorDiv(x, y)          floor(x / y) for floats; for integers the quotient rounded
//                                 toward negative infinity (TF FloorDiv). An integer divisor
//                                 of 0 is an error, as in TF.
//   kiln::FloorMod(x, y)          x - FloorDiv(x, y) * y: the result takes the sign of y (TF
//                                 FloorMod; for floats fmod(x, y) shifted by y when the signs
//                                 differ). An integer divisor of 0 is an error.
//   kiln::SquaredDifference(x, y) (x - y)^2 (TF SquaredDifference).
// All three broadcast like numpy and support float and integer types.
//
// ONNX integer Div truncates toward zero and Mod follows the divisor's sign unless fmod=1;
// a zero integer divisor gives 0 there (ONNX leaves it undefined; we must not trap).
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "kernels/cpu/math_common.h"

namespace kiln::kernels::math {
namespace {

enum class Kind {
  kAdd, kSub, kMul, kDiv, kPow, kMod, kFmod, kMax, kMin, kSum, kMean, kPRelu,
  kSquaredDifference, kFloorDiv, kFloorMod,
  kEqual, kGreater, kGreaterOrEqual, kLess, kLessOrEqual,
  kAnd, kOr, kXor,
  kBitAnd, kBitOr, kBitXor, kShiftLeft, kShiftRight,
};

bool IsArithmetic(Kind k) { return k <= Kind::kFloorMod; }
bool IsComparison(Kind k) { return k >= Kind::kEqual && k <= Kind::kLessOrEqual; }
bool IsLogical(Kind k) { return k >= Kind::kAnd && k <= Kind::kXor; }
bool IsBitwise(Kind k) { return k >= Kind::kBitAnd; }
bool IsVariadic(Kind k) {
  return k == Kind::kMax || k == Kind::kMin || k == Kind::kSum || k == Kind::kMean;
}

template <typename C>
C IntPow(C base, C exp) {
  if constexpr (std::is_signed_v<C>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  using U = std::make_unsigned_t<C>;
  U result = 1, b = static_cast<U>(base);
  for (U e = static_cast<U>(exp); e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<C>(result);
}

// Arithmetic in the compute type C (float for fp16/bf16).
// Signed integer add/sub/mul wrap like numpy (two's complement) instead of being undefined.
template <typename C, bool kWraps = std::is_integral_v<C> && std::is_signed_v<C> &&
                                     (sizeof(C) >= sizeof(int))>
struct WrapTypeOf {
  using type = C;
};
template <typename C>
struct WrapTypeOf<C, true> {
  using type = std::make_unsigned_t<C>;
};
template <typename C>
using WrapType = typename WrapTypeOf<C>::type;

template <Kind K, typename C>
inline C Arith(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<WrapType<C>, C> &&
                (K == Kind::kAdd || K == Kind::kSum || K == Kind::kMean || K == Kind::kSub ||
                 K == Kind::kMul || K == Kind::kSquaredDifference)) {
    using U = WrapType<C>;
    const U ua = static_cast<U>(a), ub = static_cast<U>(b);
    if constexpr (K == Kind::kSub) return static_cast<C>(ua - ub);
    if constexpr (K == Kind::kMul) return static_cast<C>(ua * ub);
    if constexpr (K == Kind::kSquaredDifference) return static_cast<C>((ua - ub) * (ua - ub));
    return static_cast<C>(ua + ub);
  } else if constexpr (K == Kind::kAdd || K == Kind::kSum || K == Kind::kMean) {
    return static_cast<C>(a + b);
  } else if constexpr (K == Kind::kSub) {
    return static_cast<C>(a - b);
  } else if constexpr (K == Kind::kMul) {
    return static_cast<C>(a * b);
  } else if constexpr (K == Kind::kSquaredDifference) {
    return static_cast<C>((a - b) * (a - b));
  } else if constexpr (K == Kind::kPRelu) {
    return a < C(0) ? static_cast<C>(a * b) : a;
  } else if constexpr (K == Kind::kMax) {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a || b != b) return a != a ? a : b;
    }
    return a > b ? a : b;
  } else if constexpr (K == Kind::kMin) {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a || b != b) return a != a ? a : b;
    }
    return a < b ? a : b;
  } else if constexpr (std::is_floating_point_v<C>) {
    if constexpr (K == Kind::kDiv) return a / b;
    if constexpr (K == Kind::kPow) return std::pow(a, b);
    if constexpr (K == Kind::kFmod) return std::fmod(a, b);
    if constexpr (K == Kind::kFloorDiv) return std::floor(a / b);
    if constexpr (K == Kind::kMod || K == Kind::kFloorMod) {
      const C m = std::fmod(a, b);
      return (m != C(0) && ((b < C(0)) != (m < C(0)))) ? m + b : m;
    }
  } else {  // integers
    if constexpr (K == Kind::kPow) return IntPow(a, b);
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<C>) {
      if (b == -1) {  // avoids the INT_MIN / -1 trap; wraps like two's complement
        if constexpr (K == Kind::kDiv || K == Kind::kFloorDiv) {
          return static_cast<C>(-static_cast<std::make_unsigned_t<C>>(a));
        }
        return 0;
      }
    }
    if constexpr (K == Kind::kDiv) return static_cast<C>(a / b);
    if constexpr (K == Kind::kFmod) return static_cast<C>(a % b);
    if constexpr (K == Kind::kMod || K == Kind::kFloorMod) {
      C m = static_cast<C>(a % b);
      if constexpr (std::is_signed_v<C>) {
        if (m != 0 && ((m < 0) != (b < 0))) m = static_cast<C>(m + b);
      }
      return m;
    }
    if constexpr (K == Kind::kFloorDiv) {
      C q = static_cast<C>(a / b);
      if constexpr (std::is_signed_v<C>) {
        if (a % b != 0 && ((a < 0) != (b < 0))) --q;
      }
      return q;
    }
  }
  return a;
}

template <Kind K, typename C>
inline bool Compare(const C& a, const C& b) {
  if constexpr (K == Kind::kEqual) return a == b;
  if constexpr (K == Kind::kGreater) return a > b;
  if constexpr (K == Kind::kGreaterOrEqual) return a >= b;
  if constexpr (K == Kind::kLess) return a < b;
  return a <= b;
}

template <Kind K, typename T>
inline T Bitwise(T a, T b) {
  if constexpr (K == Kind::kAnd || K == Kind::kBitAnd) return static_cast<T>(a & b);
  if constexpr (K == Kind::kOr || K == Kind::kBitOr) return static_cast<T>(a | b);
  if constexpr (K == Kind::kXor || K == Kind::kBitXor) return static_cast<T>(a ^ b);
  if constexpr (K == Kind::kShiftLeft || K == Kind::kShiftRight) {
    if (static_cast<uint64_t>(b) >= sizeof(T) * 8) return 0;
    return K == Kind::kShiftLeft ? static_cast<T>(a << b) : static_cast<T>(a >> b);
  }
  return a;
}

// Runs fn over the runs of a two-input broadcast.
template <typename TA, typename TB, typename TO, typename Fn>
void RunBroadcast2(const ComputeContext& ctx, const BroadcastIterator& it, const TA* a,
                   const TB* b, TO* out, Fn fn) {
  const int64_t sa = it.inner_stride(0), sb = it.inner_stride(1);
  ctx.ParallelFor(it.num_elements(), kParallelGrain, [&](int64_t begin, int64_t end) {
    it.ForEachRun(begin, end, [&](int64_t o, const int64_t* off, int64_t n) {
      const TA* pa = a + off[0];
      const TB* pb = b + off[1];
      TO* po = out + o;
      if (sa && sb) {
        for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[i], pb[i]);
      } else if (sa) {
        const TB vb = pb[0];
        for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[i], vb);
      } else if (sb) {
        const TA va = pa[0];
        for (int64_t i = 0; i < n; ++i) po[i] = fn(va, pb[i]);
      } else {
        const TO v = fn(pa[0], pb[0]);
        for (int64_t i = 0; i < n; ++i) po[i] = v;
      }
    });
  });
}

simd::BinaryOp SimdOpFor(Kind k, bool* ok) {
  *ok = true;
  switch (k) {
    case Kind::kAdd: case Kind::kSum: case Kind::kMean: return simd::BinaryOp::kAdd;
    case Kind::kSub: return simd::BinaryOp::kSub;
    case Kind::kMul: return simd::BinaryOp::kMul;
    case Kind::kDiv: return simd::BinaryOp::kDiv;
    case Kind::kMax: return simd::BinaryOp::kMax;
    case Kind::kMin: return simd::BinaryOp::kMin;
    case Kind::kPow: return simd::BinaryOp::kPow;
    case Kind::kPRelu: return simd::BinaryOp::kPRelu;
    case Kind::kSquaredDifference: return simd::BinaryOp::kSquaredDifference;
    case Kind::kFloorDiv: return simd::BinaryOp::kFloorDiv;
    case Kind::kMod: case Kind::kFloorMod: return simd::BinaryOp::kFloorMod;
    case Kind::kFmod: return simd::BinaryOp::kFmod;
    default: *ok = false; return simd::BinaryOp::kAdd;
  }
}

template <Kind K, typename T>
void ArithTyped(const ComputeContext& ctx, const BroadcastIterator& it, const T* a, const T* b,
                T* out) {
  if constexpr (std::is_same_v<T, float>) {
    bool ok;
    const simd::BinaryOp op = SimdOpFor(K, &ok);
    const simd::Kernels& k = simd::Best();
    const int64_t sa = it.inner_stride(0), sb = it.inner_stride(1);
    ctx.ParallelFor(it.num_elements(), kParallelGrain, [&](int64_t begin, int64_t end) {
      it.ForEachRun(begin, end, [&](int64_t o, const int64_t* off, int64_t n) {
        k.binary(op, a + off[0], sa, b + off[1], sb, out + o, n);
      });
    });
  } else {
    using C = ComputeType<T>;
    RunBroadcast2(ctx, it, a, b, out, [](T x, T y) {
      return static_cast<T>(Arith<K, C>(static_cast<C>(x), static_cast<C>(y)));
    });
  }
}

template <typename T>
void ArithDispatch(Kind k, const ComputeContext& ctx, const BroadcastIterator& it, const T* a,
                   const T* b, T* out) {
  switch (k) {
#define KILN_ARITH_CASE(K) \
  case Kind::K: return ArithTyped<Kind::K, T>(ctx, it, a, b, out);
    KILN_ARITH_CASE(kAdd) KILN_ARITH_CASE(kSub) KILN_ARITH_CASE(kMul) KILN_ARITH_CASE(kDiv)
    KILN_ARITH_CASE(kPow) KILN_ARITH_CASE(kMod) KILN_ARITH_CASE(kFmod) KILN_ARITH_CASE(kMax)
    KILN_ARITH_CASE(kMin) KILN_ARITH_CASE(kPRelu) KILN_ARITH_CASE(kSquaredDifference)
    KILN_ARITH_CASE(kFloorDiv) KILN_ARITH_CASE(kFloorMod)
    case Kind::kSum: case Kind::kMean: return ArithTyped<Kind::kAdd, T>(ctx, it, a, b, out);
#undef KILN_ARITH_CASE
    default: return;
  }
}

template <typename T>
void CompareDispatch(Kind k, const ComputeContext& ctx, const BroadcastIterator& it, const T* a,
                     const T* b, bool* out) {
  using C = ComputeType<T>;
  switch (k) {
#define KILN_CMP_CASE(K)                                                            \
  case Kind::K:                                                                     \
    return RunBroadcast2(ctx, it, a, b, out, [](const T& x, const T& y) -> bool {   \
      return Compare<Kind::K, C>(static_cast<C>(x), static_cast<C>(y));             \
    });
    KILN_CMP_CASE(kEqual) KILN_CMP_CASE(kGreater) KILN_CMP_CASE(kGreaterOrEqual)
    KILN_CMP_CASE(kLess) KILN_CMP_CASE(kLessOrEqual)
#undef KILN_CMP_CASE
    default: return;
  }
}

template <typename T>
void BitwiseDispatch(Kind k, const ComputeContext& ctx, const BroadcastIterator& it, const T* a,
                     const T* b, T* out) {
  switch (k) {
#define KILN_BIT_CASE(K) \
  case Kind::K: return RunBroadcast2(ctx, it, a, b, out, [](T x, T y) { return Bitwise<Kind::K, T>(x, y); });
    KILN_BIT_CASE(kAnd) KILN_BIT_CASE(kOr) KILN_BIT_CASE(kXor) KILN_BIT_CASE(kBitAnd)
    KILN_BIT_CASE(kBitOr) KILN_BIT_CASE(kBitXor) KILN_BIT_CASE(kShiftLeft)
    KILN_BIT_CASE(kShiftRight)
#undef KILN_BIT_CASE
    default: return;
  }
}

template <typename T>
bool AnyZero(const Tensor& t) {
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (static_cast<ComputeType<T>>(p[i]) == 0) return true;
  }
  return false;
}

class BinaryKernel : public MathKernel {
 public:
  BinaryKernel(const ir::Node& node, Kind kind) : MathKernel(node), kind_(kind) {
    if (kind_ == Kind::kMod && node.GetInt("fmod", 0) != 0) kind_ = Kind::kFmod;
    if (kind_ == Kind::kShiftLeft) {
      const std::string dir = node.GetString("direction", "");
      if (dir == "RIGHT") {
        kind_ = Kind::kShiftRight;
      } else if (dir != "LEFT") {
        SetAttrError(Error("attribute direction='", dir, "' (expected LEFT or RIGHT)"));
      }
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    const size_t n = ctx.inputs.size();
    if (IsVariadic(kind_) ? n < 1 : n != 2) {
      return Error("expects ", IsVariadic(kind_) ? "at least 1" : "2", " inputs, got ", n);
    }
    std::vector<Shape> shapes;
    for (size_t i = 0; i < n; ++i) {
      if (!ctx.inputs[i].present()) return Error("input ", i, " is missing");
      shapes.push_back(ctx.inputs[i].shape);
    }
    const DType dt = ctx.inputs[0].dtype;
    for (size_t i = 1; i < n; ++i) {
      const DType other = ctx.inputs[i].dtype;
      // Pow's exponent may have its own numeric type (ONNX T1).
      if (other != dt && !(kind_ == Kind::kPow && IsNumeric(other))) {
        return Error("input ", i, " has dtype ", DTypeName(other), ", expected ", DTypeName(dt),
                     " like input 0");
      }
    }
    bool dtype_ok = false;
    if (IsArithmetic(kind_)) {
      dtype_ok = (kind_ == Kind::kMean || kind_ == Kind::kSum) ? IsFloat(dt) || IsInt(dt)
                                                               : IsNumeric(dt);
    } else if (IsComparison(kind_)) {
      dtype_ok = IsNumeric(dt) || dt == DType::kBool ||
                 (kind_ == Kind::kEqual && dt == DType::kString);
    } else if (IsLogical(kind_)) {
      dtype_ok = dt == DType::kBool;
    } else if (kind_ == Kind::kShiftLeft || kind_ == Kind::kShiftRight) {
      dtype_ok = IsUnsignedInt(dt);
    } else {
      dtype_ok = IsInt(dt);
    }
    if (!dtype_ok) return Error("input dtype ", DTypeName(dt), " is not supported");
    KILN_ASSIGN_OR_RETURN(Shape out_shape, BroadcastShapes(shapes, where()));
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = IsComparison(kind_) ? DType::kBool : dt;
    ctx.output_shapes[0] = out_shape;
    if (ctx.output_dtypes[0] == dt && dt != DType::kString) {
      for (size_t i = 0; i < n; ++i) {
        if (shapes[i] == out_shape && ctx.inputs[i].dtype == dt && (i == 0 || !IsVariadic(kind_))) {
          ctx.output_in_place_of[0] = static_cast<int>(i);
          break;
        }
      }
    }
    out_shape_ = out_shape;
    iterators_.clear();
    if (n == 1) return absl::OkStatus();
    // Step 0 combines inputs 0 and 1; variadic step k > 0 combines the output and input k+1.
    iterators_.emplace_back(out_shape, std::vector<Shape>{shapes[0], shapes[1]});
    for (size_t i = 2; i < n; ++i) {
      iterators_.emplace_back(out_shape, std::vector<Shape>{out_shape, shapes[i]});
    }
    if (kind_ == Kind::kPow && ctx.inputs[1].constant != nullptr && dt == DType::kFloat32 &&
        ctx.inputs[1].dtype == DType::kFloat32 && ctx.inputs[1].shape.num_elements() == 1) {
      const float e = ctx.inputs[1].constant->data<float>()[0];
      if (e == 2.f) pow_shortcut_ = simd::UnaryOp::kSquare;
      if (e == 1.f) pow_shortcut_ = simd::UnaryOp::kIdentity;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    Tensor& out = ctx.outputs[0];
    const int n = static_cast<int>(ctx.inputs.size());
    if (n == 1) return CopyInto(ctx, ctx.inputs[0], out);
    if (out.num_elements() == 0) return absl::OkStatus();
    const Tensor& a = ctx.inputs[0];
    const Tensor& b = ctx.inputs[1];
    if (pow_shortcut_ != simd::UnaryOp::kCount && a.shape() == out.shape()) {
      ctx.ParallelFor(out.num_elements(), kParallelGrain, [&](int64_t s, int64_t e) {
        simd::Best().unary(pow_shortcut_, {}, a.data<float>() + s, out.data<float>() + s, e - s);
      });
      return absl::OkStatus();
    }
    if ((kind_ == Kind::kFloorDiv || kind_ == Kind::kFloorMod) && IsInt(b.dtype())) {
      bool zero = false;
      VisitNumeric(b.dtype(), [&](auto tag) { zero = AnyZero<decltype(tag)>(b); });
      if (zero) return Error("integer division by zero (input 1 contains 0)");
    }
    if (kind_ == Kind::kPow && a.dtype() != b.dtype()) return PowMixed(ctx, a, b, out);
    for (int step = 0; step + 1 < n; ++step) {
      const Tensor& lhs = step == 0 ? a : out;
      const Tensor& rhs = ctx.inputs[step + 1];
      const BroadcastIterator& it = iterators_[step];
      Apply(ctx, it, lhs, rhs, out);
    }
    if (kind_ == Kind::kMean) {
      VisitNumeric(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using C = ComputeType<T>;
        T* p = out.data<T>();
        const int64_t count = out.num_elements();
        if constexpr (std::is_same_v<T, float>) {
          simd::Best().scale_bias(p, p, count, 1.f / n, 0.f);
        } else {
          for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<C>(p[i]) / C(n));
        }
      });
    }
    return absl::OkStatus();
  }

 private:
  void Apply(const ComputeContext& ctx, const BroadcastIterator& it, const Tensor& a,
             const Tensor& b, Tensor& out) const {
    const DType dt = a.dtype();
    if (IsComparison(kind_)) {
      bool* o = out.data<bool>();
      if (dt == DType::kString) {
        RunBroadcast2(ctx, it, a.data<std::string>(), b.data<std::string>(), o,
                      [](const std::string& x, const std::string& y) { return x == y; });
      } else if (dt == DType::kBool) {
        CompareDispatch<bool>(kind_, ctx, it, a.data<bool>(), b.data<bool>(), o);
      } else {
        VisitNumeric(dt, [&](auto tag) {
          using T = decltype(tag);
          CompareDispatch<T>(kind_, ctx, it, a.data<T>(), b.data<T>(), o);
        });
      }
      return;
    }
    if (IsLogical(kind_)) {
      // bool is one byte holding 0 or 1, so the bitwise ops are the logical ones.
      BitwiseDispatch<uint8_t>(kind_, ctx, it, a.data<uint8_t>(), b.data<uint8_t>(),
                               out.data<uint8_t>());
      return;
    }
    VisitNumeric(dt, [&](auto tag) {
      using T = decltype(tag);
      if (IsBitwise(kind_)) {
        if constexpr (std::is_integral_v<T>) {
          BitwiseDispatch<T>(kind_, ctx, it, a.data<T>(), b.data<T>(), out.data<T>());
        }
      } else {
        ArithDispatch<T>(kind_, ctx, it, a.data<T>(), b.data<T>(), out.data<T>());
      }
    });
  }

  // Pow with an exponent of another numeric type: computed in double.
  absl::Status PowMixed(const ComputeContext& ctx, const Tensor& a, const Tensor& b,
                        Tensor& out) const {
    auto to_double = [](const Tensor& t) {
      std::vector<double> v(t.num_elements());
      VisitNumeric(t.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* p = t.data<T>();
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
      });
      return v;
    };
    const std::vector<double> da = to_double(a), db = to_double(b);
    VisitNumeric(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using C = ComputeType<T>;
      RunBroadcast2(ctx, iterators_[0], da.data(), db.data(), out.data<T>(),
                    [](double x, double y) {
                      const double r = std::pow(x, y);
                      if constexpr (std::is_integral_v<C>) {
                        if (!(std::fabs(r) < 9.2e18)) return T(0);
                        return static_cast<T>(static_cast<int64_t>(r));
                      } else {
                        return static_cast<T>(static_cast<C>(r));
                      }
                    });
    });
    return absl::OkStatus();
  }

  absl::Status CopyInto(const ComputeContext& ctx, const Tensor& in, Tensor& out) const {
    if (in.raw_data() != out.raw_data()) std::memcpy(out.raw_data(), in.raw_data(), in.byte_size());
    return absl::OkStatus();
  }

  Kind kind_;
  Shape out_shape_;
  std::vector<BroadcastIterator> iterators_;
  simd::UnaryOp pow_shortcut_ = simd::UnaryOp::kCount;
};

// Where(condition, X, Y): three-way broadcast, any dtype for X and Y.
class WhereKernel : public MathKernel {
 public:
  explicit WhereKernel(const ir::Node& node) : MathKernel(node) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 3 || !Present(ctx, 0) || !Present(ctx, 1) || !Present(ctx, 2)) {
      return Error("expects 3 inputs (condition, X, Y)");
    }
    if (ctx.inputs[0].dtype != DType::kBool) {
      return Error("condition has dtype ", DTypeName(ctx.inputs[0].dtype), ", expected bool");
    }
    if (ctx.inputs[1].dtype != ctx.inputs[2].dtype) {
      return Error("X has dtype ", DTypeName(ctx.inputs[1].dtype), " but Y has ",
                   DTypeName(ctx.inputs[2].dtype));
    }
    std::vector<Shape> shapes = {ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.inputs[2].shape};
    KILN_ASSIGN_OR_RETURN(Shape out_shape, BroadcastShapes(shapes, where()));
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[1].dtype;
    ctx.output_shapes[0] = out_shape;
    if (ctx.inputs[1].dtype != DType::kString) {
      if (shapes[1] == out_shape) {
        ctx.output_in_place_of[0] = 1;
      } else if (shapes[2] == out_shape) {
        ctx.output_in_place_of[0] = 2;
      }
    }
    iterator_ = BroadcastIterator(out_shape, shapes);
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    Tensor& out = ctx.outputs[0];
    const bool* c = ctx.inputs[0].data<bool>();
    VisitDType(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = ctx.inputs[1].data<T>();
      const T* y = ctx.inputs[2].data<T>();
      T* o = out.data<T>();
      const BroadcastIterator& it = iterator_;
      const int64_t sc = it.inner_stride(0), sx = it.inner_stride(1), sy = it.inner_stride(2);
      ctx.ParallelFor(it.num_elements(), kParallelGrain, [&](int64_t begin, int64_t end) {
        it.ForEachRun(begin, end, [&](int64_t oo, const int64_t* off, int64_t n) {
          const bool* pc = c + off[0];
          const T* px = x + off[1];
          const T* py = y + off[2];
          T* po = o + oo;
          if (sc && sx && sy) {
            for (int64_t i = 0; i < n; ++i) po[i] = pc[i] ? px[i] : py[i];
          } else {
            for (int64_t i = 0; i < n; ++i) po[i] = pc[i * sc] ? px[i * sx] : py[i * sy];
          }
        });
      });
    });
    return absl::OkStatus();
  }

 private:
  BroadcastIterator iterator_;
};

KernelFactory BinaryFactory(Kind kind) {
  return [kind](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new BinaryKernel(node, kind));
  };
}

#define KILN_BINARY(domain, name, kind) KILN_REGISTER_KERNEL(domain, name, BinaryFactory(Kind::kind))
KILN_BINARY("", "Add", kAdd);
KILN_BINARY("", "Sub", kSub);
KILN_BINARY("", "Mul", kMul);
KILN_BINARY("", "Div", kDiv);
KILN_BINARY("", "Pow", kPow);
KILN_BINARY("", "Mod", kMod);
KILN_BINARY("", "Max", kMax);
KILN_BINARY("", "Min", kMin);
KILN_BINARY("", "Sum", kSum);
KILN_BINARY("", "Mean", kMean);
KILN_BINARY("", "PRelu", kPRelu);
KILN_BINARY("", "Equal", kEqual);
KILN_BINARY("", "Greater", kGreater);
KILN_BINARY("", "GreaterOrEqual", kGreaterOrEqual);
KILN_BINARY("", "Less", kLess);
KILN_BINARY("", "LessOrEqual", kLessOrEqual);
KILN_BINARY("", "And", kAnd);
KILN_BINARY("", "Or", kOr);
KILN_BINARY("", "Xor", kXor);
KILN_BINARY("", "BitwiseAnd", kBitAnd);
KILN_BINARY("", "BitwiseOr", kBitOr);
KILN_BINARY("", "BitwiseXor", kBitXor);
KILN_BINARY("", "BitShift", kShiftLeft);  // direction attribute picks left or right
KILN_BINARY("kiln", "FloorDiv", kFloorDiv);
KILN_BINARY("kiln", "FloorMod", kFloorMod);
KILN_BINARY("kiln", "SquaredDifference", kSquaredDifference);
#undef KILN_BINARY
KILN_REGISTER_KERNEL_CLASS("", "Where", WhereKernel);

}  // namespace

KILN_KERNEL_FILE(math_binary);

}  // namespace kiln::kernels::math
