// Element types of tensors. The set and the names follow TensorFlow's DataType and ONNX's
// TensorProto.DataType so that importers and the serving layer map them one to one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace kiln {

enum class DType : uint8_t {
  kInvalid = 0,
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt8,
  kUInt8,
  kInt16,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kBool,
  kString,
};

// IEEE half precision, stored as its bit pattern. Conversions round to nearest even.
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float value);
  explicit operator float() const;
};

// bfloat16: the upper 16 bits of an IEEE float. Conversion rounds to nearest even, as
// TensorFlow's and oneDNN's do.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value);
  explicit operator float() const;
};

float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

// Bytes per element; for kString this is sizeof(std::string) (string tensors hold
// std::string objects).
size_t DTypeSize(DType dtype);

// Lower-case names as TensorFlow prints them without the DT_ prefix: "float", "half",
// "bfloat16", "double", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
// "uint64", "bool", "string".
absl::string_view DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(absl::string_view name);

bool IsFloatingPoint(DType dtype);  // f16, bf16, f32, f64
bool IsInteger(DType dtype);        // signed and unsigned integers (not bool)

// Maps a C++ element type to its DType.
template <typename T>
struct DTypeOf;
#define KILN_DTYPE_OF(T, D) \
  template <>               \
  struct DTypeOf<T> {       \
    static constexpr DType value = D; \
  }
KILN_DTYPE_OF(float, DType::kFloat32);
KILN_DTYPE_OF(Float16, DType::kFloat16);
KILN_DTYPE_OF(BFloat16, DType::kBFloat16);
KILN_DTYPE_OF(double, DType::kFloat64);
KILN_DTYPE_OF(int8_t, DType::kInt8);
KILN_DTYPE_OF(uint8_t, DType::kUInt8);
KILN_DTYPE_OF(int16_t, DType::kInt16);
KILN_DTYPE_OF(uint16_t, DType::kUInt16);
KILN_DTYPE_OF(int32_t, DType::kInt32);
KILN_DTYPE_OF(uint32_t, DType::kUInt32);
KILN_DTYPE_OF(int64_t, DType::kInt64);
KILN_DTYPE_OF(uint64_t, DType::kUInt64);
KILN_DTYPE_OF(bool, DType::kBool);
KILN_DTYPE_OF(std::string, DType::kString);
#undef KILN_DTYPE_OF

// Calls fn(T{}) with the C++ type of `dtype` (all types, including std::string).
// Example: VisitDType(t.dtype(), [&](auto tag) { using T = decltype(tag); ... });
template <typename Fn>
decltype(auto) VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat16: return fn(Float16{});
    case DType::kBFloat16: return fn(BFloat16{});
    case DType::kFloat64: return fn(double{});
    case DType::kInt8: return fn(int8_t{});
    case DType::kUInt8: return fn(uint8_t{});
    case DType::kInt16: return fn(int16_t{});
    case DType::kUInt16: return fn(uint16_t{});
    case DType::kInt32: return fn(int32_t{});
    case DType::kUInt32: return fn(uint32_t{});
    case DType::kInt64: return fn(int64_t{});
    case DType::kUInt64: return fn(uint64_t{});
    case DType::kBool: return fn(bool{});
    case DType::kString: return fn(std::string{});
    case DType::kInvalid: break;
  }
  return fn(float{});  // unreachable for valid tensors; callers check dtype first
}

}  // namespace kiln
