// Tensor <-> tensorflow.TensorProto, as TF Serving's gRPC API carries tensors.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/tensor.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/framework/types.pb.h"

namespace kiln::serving {

absl::StatusOr<DType> DTypeFromProto(tensorflow::DataType dtype);
tensorflow::DataType DTypeToProto(DType dtype);
// "DT_FLOAT", as TF Serving's metadata JSON names them.
std::string DataTypeEnumName(DType dtype);

// Reads tensor_content or the typed *_val fields (a single value fills the whole shape).
// `name` is used in error messages.
absl::StatusOr<Tensor> TensorFromProto(const tensorflow::TensorProto& proto,
                                       absl::string_view name);
// Writes typed *_val fields (float_val, int64_val, string_val, ...), as TF Serving replies.
void TensorToProto(const Tensor& tensor, tensorflow::TensorProto* proto);

void ShapeToProto(bool rank_known, const std::vector<int64_t>& dims,
                  tensorflow::TensorShapeProto* proto);

}  // namespace kiln::serving
