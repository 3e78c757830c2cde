// Parsing serialized tf.Example protos into tensors, as tf.io.parse_example and
// tf.io.parse_single_example do. The wire format of Example/Features/Feature is decoded
// directly (no protobuf message objects), which is several times faster than
// ParseFromString + reading the maps. It accepts what protobuf accepts for these messages
// (packed and unpacked numbers, repeated and merged fields, the last of duplicate map keys,
// the last oneof member); features that the spec does not name are skipped unvalidated.
//
// Free of Dataset dependencies: the TF importer's ParseExample kernels and the server use it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"

namespace kiln::data::formats {

// One feature to extract, as tf.io.FixedLenFeature / VarLenFeature / RaggedFeature.
struct FeatureSpec {
  enum class Kind { kFixedLen, kVarLen, kRagged };

  std::string key;
  Kind kind = Kind::kFixedLen;
  DType dtype = DType::kFloat32;  // kFloat32, kInt64 or kString (the three tf.Example lists)
  Shape shape;                    // kFixedLen: shape per example ([] = one value)
  // kFixedLen: used when the feature is absent; its element count equals shape's, or it is a
  // single value repeated. Without a default an absent feature is an error.
  std::optional<Tensor> default_value;

  static FeatureSpec FixedLen(std::string key, DType dtype, Shape shape = {},
                              std::optional<Tensor> default_value = std::nullopt);
  static FeatureSpec VarLen(std::string key, DType dtype);
  static FeatureSpec Ragged(std::string key, DType dtype);
};

struct ExampleSpec {
  std::vector<FeatureSpec> features;

  // Names of ParseExamples' outputs, in order: per feature in spec order,
  //   kFixedLen: "<key>"
  //   kVarLen:   "<key>/indices", "<key>/values", "<key>/dense_shape"  (a SparseTensor)
  //   kRagged:   "<key>/values", "<key>/row_splits"                    (a RaggedTensor)
  std::vector<std::string> OutputNames() const;
  // Checks keys (unique, non-empty), dtypes and defaults.
  absl::Status Validate() const;
};

// `serialized` is a string tensor: a scalar (one example, like parse_single_example) or a
// vector [B] (a batch, like parse_example). Outputs, in OutputNames() order:
//   kFixedLen: dtype, shape (scalar input) or [B, shape...]
//   kVarLen:   indices int64 [N, 1] or [N, 2] (example, position), values [N],
//              dense_shape int64 [1] = {max length} or [2] = {B, max length}
//   kRagged:   values [N], row_splits int64 [2] = {0, N} or [B + 1]
// Errors (InvalidArgument) name the feature, and the example index for a batch: a required
// feature that is absent, a list of the wrong type, a wrong number of values, malformed bytes.
absl::StatusOr<std::vector<Tensor>> ParseExamples(const Tensor& serialized,
                                                  const ExampleSpec& spec);

}  // namespace kiln::data::formats
