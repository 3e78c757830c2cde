// The one codec between TensorFlow's wire types (DataType, TensorShapeProto, TensorProto) and
// Kiln's DType, shapes and Tensor, shared by the TensorFlow importer (graph constants,
// checkpoints) and serving (TF Serving's gRPC and warmup requests).
//
// Graphs and requests read TensorProtos under different rules, both TensorFlow's own:
//   FromTensorProto   a constant in a graph: a typed field shorter than the shape repeats its
//                     last value and an empty one gives zeros (tensor_util.MakeNdarray).
//   TensorFromProto   a request: exactly one value per element or a single value for all
//                     (TF Serving), sizes checked before anything is allocated and a repeated
//                     value held to the run memory budget, because a client sends the shape.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/tensor.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/framework/types.pb.h"

namespace kiln::data::formats {

// DT_FLOAT -> kFloat32 etc.; nullopt for a type Kiln has no DType for (complex, quantized,
// resource, variant, the reference types).
std::optional<DType> DTypeFromTf(int tf_dtype);
// DT_INVALID for kInvalid.
tensorflow::DataType ToTfDataType(DType dtype);
std::string TfDataTypeName(int tf_dtype);  // "DT_FLOAT", "DT_RESOURCE", "DT_UNKNOWN(77)"
// "DT_FLOAT", as TF Serving's metadata JSON names them.
std::string DataTypeEnumName(DType dtype);

// A graph's dtype: reference types (DT_FLOAT_REF) map like their base type; unsupported types
// give Unimplemented naming them.
absl::StatusOr<DType> FromTfDataType(int tf_dtype);
// A request's dtype: InvalidArgument naming an unsupported type (reference types included).
absl::StatusOr<DType> DTypeFromProto(tensorflow::DataType dtype);

struct PartialShape {
  bool rank_known = false;
  std::vector<int64_t> dims;  // -1 for unknown
};
PartialShape FromTfShape(const tensorflow::TensorShapeProto& shape);
// Fails when the shape has an unknown rank or dimension.
absl::StatusOr<Shape> FullyDefinedShape(const tensorflow::TensorShapeProto& shape);
void ShapeToProto(bool rank_known, const std::vector<int64_t>& dims,
                  tensorflow::TensorShapeProto* proto);

// What a graph constant may expand to under the fill rule. A few bytes of TensorProto can
// describe any shape that way; TensorFlow itself stores large splats as Fill ops, not as Const
// (tf.zeros and tf.fill make a Const only below 1000 elements), so a filled constant of more
// than 1 GiB is a corrupt or hostile graph, refused with RESOURCE_EXHAUSTED.
constexpr size_t kMaxFilledConstantBytes = size_t{1} << 30;

// A graph constant: the bytes come from tensor_content when set, else from the typed repeated
// field under TensorFlow's fill rule (see the top of this file). Sizes are checked against the
// bytes the proto holds before anything is allocated.
absl::StatusOr<Tensor> FromTensorProto(const tensorflow::TensorProto& proto);
// Writes tensor_content (string tensors: string_val), as TensorFlow stores constants.
tensorflow::TensorProto ToTensorProto(const Tensor& tensor);

// A request's tensor: tensor_content or the typed *_val fields (a single value fills the
// whole shape). `name` is used in error messages. What a single value expands to is held to
// `max_fill_bytes`, the run memory budget of the model the request is for (0: the default
// budget, MemoryBudget::DefaultLimit()); RESOURCE_EXHAUSTED above it.
absl::StatusOr<Tensor> TensorFromProto(const tensorflow::TensorProto& proto, absl::string_view name,
                                       size_t max_fill_bytes = 0);
// Writes typed *_val fields (float_val, int64_val, string_val, ...), as TF Serving replies.
void TensorToProto(const Tensor& tensor, tensorflow::TensorProto* proto);

}  // namespace kiln::data::formats
