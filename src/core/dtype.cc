#include "kiln/core/dtype.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    if (mantissa == 0) return BitsToFloat(sign);
    // Subnormal half: normalize.
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400) == 0);
    mantissa &= 0x3ff;
    return BitsToFloat(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mantissa << 13);
  }
  if (exponent == 0x1f) return BitsToFloat(sign | 0x7f800000u | mantissa << 13);
  return BitsToFloat(sign | (exponent + 127 - 15) << 23 | mantissa << 13);
}

uint16_t FloatToHalf(float value) {
  const uint32_t f = FloatBits(value);
  const uint32_t sign = (f >> 16) & 0x8000;
  const uint32_t abs = f & 0x7fffffff;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> Inf
  if (abs < 0x38800000u) {  // subnormal or zero in half precision
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    // value = mantissa * 2^(E - 150); in units of the smallest half subnormal (2^-24) that
    // is mantissa >> (126 - E).
    const uint32_t shift = 126 - (abs >> 23);
    uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float BFloat16ToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBFloat16(float value) {
  uint32_t f = FloatBits(value);
  if ((f & 0x7fffffff) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40);  // NaN
  f += 0x7fff + ((f >> 16) & 1);
  return static_cast<uint16_t>(f >> 16);
}

Float16::Float16(float value) : bits(FloatToHalf(value)) {}
Float16::operator float() const { return HalfToFloat(bits); }
BFloat16::BFloat16(float value) : bits(FloatToBFloat16(value)) {}
BFloat16::operator float() const { return BFloat16ToFloat(bits); }

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt16: return 2;
    case DType::kUInt16: return 2;
    case DType::kInt32: return 4;
    case DType::kUInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt64: return 8;
    case DType::kBool: return 1;
    case DType::kString: return sizeof(std::string);
    case DType::kInvalid: return 0;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float";
    case DType::kFloat16: return "half";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "double";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kInt64: return "int64";
    case DType::kUInt64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kString: return "string";
    case DType::kInvalid: return "invalid";
  }
  return "invalid";
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  static constexpr DType kAll[] = {
      DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64, DType::kInt8,
      DType::kUInt8,   DType::kInt16,   DType::kUInt16,   DType::kInt32,   DType::kUInt32,
      DType::kInt64,   DType::kUInt64,  DType::kBool,     DType::kString};
  for (DType d : kAll) {
    if (DTypeName(d) == name) return d;
  }
  if (name == "float32") return DType::kFloat32;
  if (name == "float16") return DType::kFloat16;
  if (name == "float64") return DType::kFloat64;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", name, "\""));
}

bool IsFloatingPoint(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16 ||
         d == DType::kFloat64;
}

bool IsInteger(DType d) {
  switch (d) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kInt32:
    case DType::kUInt32:
    case DType::kInt64:
    case DType::kUInt64: return true;
    default: return false;
  }
}

}  // namespace kiln
