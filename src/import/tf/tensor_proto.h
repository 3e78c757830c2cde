// Conversions between TensorFlow's wire types (DataType, TensorShapeProto, TensorProto) and
// Kiln's DType, shapes and Tensor.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/framework/types.pb.h"

namespace kiln::import::tf {

// DT_FLOAT -> kFloat32 etc.; reference types (DT_FLOAT_REF) map like their base type.
// Unsupported types (complex, quantized, resource, variant) give Unimplemented naming them.
absl::StatusOr<DType> FromTfDataType(int tf_dtype);
tensorflow::DataType ToTfDataType(DType dtype);
std::string TfDataTypeName(int tf_dtype);  // "DT_FLOAT", "DT_RESOURCE", "DT_UNKNOWN(77)"

struct PartialShape {
  bool rank_known = false;
  std::vector<int64_t> dims;  // -1 for unknown
};
PartialShape FromTfShape(const tensorflow::TensorShapeProto& shape);
// Fails when the shape has an unknown rank or dimension.
absl::StatusOr<Shape> FullyDefinedShape(const tensorflow::TensorShapeProto& shape);

// TensorFlow's rules: the bytes come from tensor_content when set, else from the typed
// repeated field; a typed field with fewer values than elements repeats its last value
// (and an empty one gives zeros).
absl::StatusOr<Tensor> FromTensorProto(const tensorflow::TensorProto& proto);
tensorflow::TensorProto ToTensorProto(const Tensor& tensor);

}  // namespace kiln::import::tf
