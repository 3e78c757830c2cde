// Internal to kiln_serving_base: reading JSON values (numbers, non-finite markers, strings,
// {"b64": ...} objects) into tensor elements, shared by the TF Serving and KServe v2 request
// decoders and the tf.Example JSON reader. Errors are INVALID_ARGUMENT naming the input.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/dtype.h"
#include "kiln/core/signature.h"
#include "simdjson.h"

namespace kiln::serving::json_internal {

// The element as (minified) JSON text, cut to 80 characters, for error messages.
std::string ElementText(const simdjson::dom::element& e);
// InvalidArgument "input '<input>': <message>".
absl::Status Invalid(absl::string_view input, absl::string_view message);

bool IsB64Object(const simdjson::dom::element& e);
// The bytes of a {"b64": ...} object (standard or web-safe base64).
absl::StatusOr<std::string> DecodeB64(const simdjson::dom::element& e, absl::string_view input);

// Reads a JSON number (or NaN/Infinity marker) as a double; `integral` tells whether the
// JSON text was an integer, then held exactly in *as_int or (*is_uint) *as_uint.
bool ReadNumber(const simdjson::dom::element& e, double* value, bool* integral, int64_t* as_int,
                uint64_t* as_uint, bool* is_uint);

// Stores `e` as element `index` of a tensor of `dtype` whose data starts at `base`, checking
// that it is of the right kind and in range.
absl::Status StoreLeaf(const simdjson::dom::element& e, DType dtype, absl::string_view input,
                       void* base, int64_t index);

// The "signature_name" of a request body into *name; InvalidArgument when it is not a string.
absl::Status ReadSignatureName(const simdjson::dom::element& value, std::string* name);

// The dtype of input `key` of `signature`; InvalidArgument listing the inputs when unknown.
absl::StatusOr<DType> InputDType(const SignatureInfo& signature, absl::string_view key);

}  // namespace kiln::serving::json_internal
