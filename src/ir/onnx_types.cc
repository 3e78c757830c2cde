#include "kiln/ir/onnx_types.h"

#include <utility>

namespace kiln::ir {
namespace {

// Every DType but kInvalid, with its TensorProto.DataType code.
constexpr std::pair<DType, int32_t> kOnnxCodes[] = {
    {DType::kFloat32, 1}, {DType::kUInt8, 2},     {DType::kInt8, 3},     {DType::kUInt16, 4},
    {DType::kInt16, 5},   {DType::kInt32, 6},     {DType::kInt64, 7},    {DType::kString, 8},
    {DType::kBool, 9},    {DType::kFloat16, 10},  {DType::kFloat64, 11}, {DType::kUInt32, 12},
    {DType::kUInt64, 13}, {DType::kBFloat16, 16},
};

}  // namespace

DType DTypeFromOnnxCode(int64_t code) {
  for (const auto& [dtype, onnx] : kOnnxCodes) {
    if (onnx == code) return dtype;
  }
  return DType::kInvalid;
}

int32_t OnnxCodeFromDType(DType dtype) {
  for (const auto& [d, onnx] : kOnnxCodes) {
    if (d == dtype) return onnx;
  }
  return 0;
}

}  // namespace kiln::ir
