// Cast and CastLike between every pair of Kiln dtypes, strings included, as ONNX defines:
//  - float -> integer truncates toward zero; values outside the target's range wrap like the
//    int64 conversion numpy performs on x86 (NaN and huge values give the int64 minimum).
//  - anything -> bool is "x != 0" (NaN is true); bool -> number is 0 or 1.
//  - number -> string: integers in decimal, floats in the shortest form that reads back to
//    the same value ("0.1", "1e+20"), "NaN", "INF", "-INF"; bool -> "True" / "False".
//  - string -> number: decimal or scientific notation; "inf", "+INF", "-inf", "nan"
//    (any case) for floats; an unparsable string is an error naming it.
// fp32 <-> fp16 use the F16C instructions (part of the AVX2 baseline).
#include <immintrin.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "kernels/cpu/math_common.h"
#include "kiln/ir/onnx_types.h"

namespace kiln::kernels::math {
namespace {

template <typename To>
To FromDouble(double v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != 0;  // NaN != 0
  } else if constexpr (std::is_integral_v<To>) {
    if constexpr (std::is_same_v<To, uint64_t>) {
      if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) return static_cast<To>(v);
    }
    int64_t i = std::numeric_limits<int64_t>::min();
    if (v > -9223372036854775808.0 && v < 9223372036854775808.0) i = static_cast<int64_t>(v);
    return static_cast<To>(i);
  } else {
    return static_cast<To>(v);
  }
}

// Numeric (and bool) -> numeric (and bool).
template <typename From, typename To>
void CastNumeric(const ComputeContext& ctx, const From* in, To* out, int64_t n) {
  ctx.ParallelFor(n, kParallelGrain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<From, float> && std::is_same_v<To, Float16>) {
      int64_t i = b;
      for (; i + 8 <= e; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
      }
      for (; i < e; ++i) out[i] = Float16(in[i]);
    } else if constexpr (std::is_same_v<From, Float16> && std::is_same_v<To, float>) {
      int64_t i = b;
      for (; i + 8 <= e; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
      }
      for (; i < e; ++i) out[i] = static_cast<float>(in[i]);
    } else {
      using CF = ComputeType<From>;
      for (int64_t i = b; i < e; ++i) {
        const CF v = static_cast<CF>(in[i]);
        if constexpr (std::is_same_v<To, bool>) {
          out[i] = v != CF(0);
        } else if constexpr (std::is_floating_point_v<CF> && std::is_integral_v<To>) {
          out[i] = FromDouble<To>(static_cast<double>(v));
        } else if constexpr (kIsHalf<To>) {
          out[i] = To(static_cast<float>(v));
        } else {
          out[i] = static_cast<To>(v);
        }
      }
    }
  });
}

std::string FloatToString(double v, bool is_double) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  char buf[64];
  std::to_chars_result r = is_double ? std::to_chars(buf, buf + sizeof(buf), v)
                                     : std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));
  return std::string(buf, r.ptr);
}

template <typename From>
void ToString(const From* in, std::string* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<From, bool>) {
      out[i] = in[i] ? "True" : "False";
    } else if constexpr (std::is_integral_v<From>) {
      out[i] = std::to_string(in[i]);
    } else {
      out[i] = FloatToString(static_cast<double>(static_cast<ComputeType<From>>(in[i])),
                             std::is_same_v<From, double>);
    }
  }
}

absl::StatusOr<double> ParseFloat(const std::string& s) {
  std::string t(absl::StripAsciiWhitespace(s));
  std::string lower = absl::AsciiStrToLower(t);
  bool neg = false;
  std::string body = lower;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    neg = body[0] == '-';
    body = body.substr(1);
  }
  if (body == "inf" || body == "infinity") {
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (body == "nan") return std::numeric_limits<double>::quiet_NaN();
  double v = 0;
  const char* begin = t.data();
  if (!t.empty() && t[0] == '+') ++begin;
  auto r = std::from_chars(begin, t.data() + t.size(), v);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size() || t.empty()) {
    if (r.ec == std::errc::result_out_of_range) return neg ? -HUGE_VAL : HUGE_VAL;
    return absl::InvalidArgumentError(absl::StrCat("cannot parse \"", s, "\" as a number"));
  }
  return v;
}

template <typename To>
absl::Status FromString(const std::string* in, To* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const std::string& s = in[i];
    if constexpr (std::is_same_v<To, bool>) {
      const std::string l = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s));
      if (l == "true") {
        out[i] = true;
        continue;
      }
      if (l == "false" || l.empty()) {
        out[i] = false;
        continue;
      }
      auto v = ParseFloat(s);
      if (!v.ok()) return v.status();
      out[i] = *v != 0;
    } else if constexpr (std::is_integral_v<To>) {
      std::string t(absl::StripAsciiWhitespace(s));
      const char* begin = t.data();
      if (!t.empty() && t[0] == '+') ++begin;
      To v{};
      auto r = std::from_chars(begin, t.data() + t.size(), v);
      if (r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty()) {
        out[i] = v;
        continue;
      }
      auto d = ParseFloat(s);  // "1e3", "2.0"
      if (!d.ok()) return d.status();
      out[i] = FromDouble<To>(*d);
    } else {
      auto v = ParseFloat(s);
      if (!v.ok()) return v.status();
      if constexpr (kIsHalf<To>) {
        out[i] = To(static_cast<float>(*v));
      } else {
        out[i] = static_cast<To>(*v);
      }
    }
  }
  return absl::OkStatus();
}

// Calls fn(T{}) for numeric types and bool.
template <typename Fn>
bool VisitNumericOrBool(DType d, Fn&& fn) {
  if (d == DType::kBool) {
    fn(bool{});
    return true;
  }
  return VisitNumeric(d, fn);
}

class CastKernel : public MathKernel {
 public:
  CastKernel(const ir::Node& node, bool like) : MathKernel(node), like_(like) {
    if (!like_) {
      const int64_t to = node.GetInt("to", -1);
      to_ = ir::DTypeFromOnnxCode(to);
      if (to_ == DType::kInvalid) SetAttrError(Error("attribute 'to' = ", to, " is not a supported ONNX dtype"));
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty() || !ctx.inputs[0].present()) return Error("input is missing");
    DType to = to_;
    if (like_) {
      if (!Present(ctx, 1)) return Error("input 'target_type' is missing");
      to = ctx.inputs[1].dtype;
    }
    const DType from = ctx.inputs[0].dtype;
    // Bytes of the same width are converted in place.
    DeclareOutputLikeInput0(
        ctx, to,
        from != DType::kString && to != DType::kString && DTypeSize(from) == DTypeSize(to));
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    const int64_t n = in.num_elements();
    const DType from = in.dtype(), to = out.dtype();
    if (from == to) {
      if (in.raw_data() == out.raw_data()) return absl::OkStatus();
      if (from == DType::kString) {
        for (int64_t i = 0; i < n; ++i) out.data<std::string>()[i] = in.data<std::string>()[i];
      } else {
        std::memcpy(out.raw_data(), in.raw_data(), in.byte_size());
      }
      return absl::OkStatus();
    }
    if (from == DType::kString) {
      absl::Status status;
      VisitNumericOrBool(to, [&](auto tag) {
        using To = decltype(tag);
        status = FromString<To>(in.data<std::string>(), out.data<To>(), n);
      });
      if (!status.ok()) return Error(status.message());
      return absl::OkStatus();
    }
    if (to == DType::kString) {
      VisitNumericOrBool(from, [&](auto tag) {
        using From = decltype(tag);
        ToString<From>(in.data<From>(), out.data<std::string>(), n);
      });
      return absl::OkStatus();
    }
    VisitNumericOrBool(from, [&](auto from_tag) {
      using From = decltype(from_tag);
      VisitNumericOrBool(to, [&](auto to_tag) {
        using To = decltype(to_tag);
        CastNumeric<From, To>(ctx, in.data<From>(), out.data<To>(), n);
      });
    });
    return absl::OkStatus();
  }

 private:
  bool like_;
  DType to_ = DType::kInvalid;
};

KILN_REGISTER_KERNEL("", "Cast", [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
  return std::unique_ptr<OpKernel>(new CastKernel(n, false));
});
KILN_REGISTER_KERNEL("", "CastLike",
                     [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new CastKernel(n, true));
                     });

}  // namespace

KILN_KERNEL_FILE(math_cast);

}  // namespace kiln::kernels::math
