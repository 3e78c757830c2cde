// ONNX's element-type codes (TensorProto.DataType) and Kiln's DTypes: the one table that the
// ONNX importer, the TensorFlow importer (which writes Cast's "to" as an ONNX code), shape
// inference and the kernels (Cast, EyeLike, ...) all read, so that they cannot disagree.
// The codes are ONNX's wire values; the ONNX importer's test checks them against onnx.proto.
#pragma once

#include <cstdint>

#include "kiln/core/dtype.h"

namespace kiln::ir {

// The DType of ONNX element type `code`; DType::kInvalid for UNDEFINED and for the types Kiln
// has no DType for (COMPLEX64, FLOAT8*, INT4, ...). Callers name the code in their errors.
DType DTypeFromOnnxCode(int64_t code);

// The ONNX element-type code of `dtype`; 0 (UNDEFINED) for DType::kInvalid.
int32_t OnnxCodeFromDType(DType dtype);

}  // namespace kiln::ir
