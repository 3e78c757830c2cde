#include "serving/json_values.h"

#include <limits>
#include <string_view>
#include <type_traits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/core/tensor.h"
#include "serving/json_document.h"

namespace kiln::serving::json_internal {

using simdjson::dom::element;
using simdjson::dom::element_type;

std::string ElementText(const element& e) {
  std::string text = simdjson::minify(e);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

absl::Status Invalid(absl::string_view input, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("input '", input, "': ", message));
}

bool IsB64Object(const element& e) {
  if (e.type() != element_type::OBJECT) return false;
  simdjson::dom::object object = e.get_object().value_unsafe();
  if (object.size() != 1) return false;
  return (*object.begin()).key == "b64";
}

absl::StatusOr<std::string> DecodeB64(const element& e, absl::string_view input) {
  simdjson::dom::object object = e.get_object().value_unsafe();
  std::string_view encoded;
  if ((*object.begin()).value.get_string().get(encoded) != simdjson::SUCCESS) {
    return Invalid(input, absl::StrCat("JSON Value: ", ElementText(e),
                                       " not formatted correctly for base64 data"));
  }
  std::string decoded;
  const absl::string_view text(encoded.data(), encoded.size());
  if (!absl::Base64Unescape(text, &decoded) && !absl::WebSafeBase64Unescape(text, &decoded)) {
    return Invalid(input, absl::StrCat("Unable to base64 decode ", ElementText(e)));
  }
  return decoded;
}

bool ReadNumber(const element& e, double* value, bool* integral, int64_t* as_int, uint64_t* as_uint,
                bool* is_uint) {
  *integral = false;
  *is_uint = false;
  switch (e.type()) {
    case element_type::INT64:
      *as_int = e.get_int64().value_unsafe();
      *value = static_cast<double>(*as_int);
      *integral = true;
      return true;
    case element_type::UINT64:
      *as_uint = e.get_uint64().value_unsafe();
      *value = static_cast<double>(*as_uint);
      *integral = true;
      *is_uint = true;
      return true;
    case element_type::DOUBLE:
      *value = e.get_double().value_unsafe();
      return true;
    case element_type::STRING:
      return NonFiniteMarker(e.get_string().value_unsafe(), value);
    default:
      return false;
  }
}

namespace {

template <typename T>
absl::Status StoreInteger(const element& e, absl::string_view input, T* out) {
  double number;
  bool integral, is_uint;
  int64_t as_int = 0;
  uint64_t as_uint = 0;
  if (!ReadNumber(e, &number, &integral, &as_int, &as_uint, &is_uint) || !integral) {
    return Invalid(input, absl::StrCat("expected an integer, got ", ElementText(e)));
  }
  if (is_uint) {
    if (as_uint > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return Invalid(input, absl::StrCat("value ", as_uint, " is out of range for its dtype"));
    }
    *out = static_cast<T>(as_uint);
    return absl::OkStatus();
  }
  if constexpr (std::is_unsigned_v<T>) {
    if (as_int < 0 || static_cast<uint64_t>(as_int) > std::numeric_limits<T>::max()) {
      return Invalid(input, absl::StrCat("value ", as_int, " is out of range for its dtype"));
    }
  } else {
    if (as_int < std::numeric_limits<T>::min() || as_int > std::numeric_limits<T>::max()) {
      return Invalid(input, absl::StrCat("value ", as_int, " is out of range for its dtype"));
    }
  }
  *out = static_cast<T>(as_int);
  return absl::OkStatus();
}

}  // namespace

absl::Status StoreLeaf(const element& e, DType dtype, absl::string_view input, void* base,
                       int64_t index) {
  if (dtype == DType::kString) {
    std::string* out = static_cast<std::string*>(base) + index;
    if (e.type() == element_type::STRING) {
      std::string_view s = e.get_string().value_unsafe();
      out->assign(s.data(), s.size());
      return absl::OkStatus();
    }
    if (IsB64Object(e)) {
      KILN_ASSIGN_OR_RETURN(*out, DecodeB64(e, input));
      return absl::OkStatus();
    }
    return Invalid(input,
                   absl::StrCat("expected a string or {\"b64\": ...}, got ", ElementText(e)));
  }
  if (dtype == DType::kBool) {
    bool value;
    if (e.get_bool().get(value) != simdjson::SUCCESS) {
      return Invalid(input, absl::StrCat("expected true or false, got ", ElementText(e)));
    }
    static_cast<bool*>(base)[index] = value;
    return absl::OkStatus();
  }
  if (IsFloatingPoint(dtype)) {
    double number;
    bool integral, is_uint;
    int64_t as_int = 0;
    uint64_t as_uint = 0;
    if (!ReadNumber(e, &number, &integral, &as_int, &as_uint, &is_uint)) {
      return Invalid(input, absl::StrCat("expected a number, got ", ElementText(e)));
    }
    switch (dtype) {
      case DType::kFloat32:
        static_cast<float*>(base)[index] = static_cast<float>(number);
        break;
      case DType::kFloat64:
        static_cast<double*>(base)[index] = number;
        break;
      case DType::kFloat16:
        static_cast<Float16*>(base)[index] = Float16(static_cast<float>(number));
        break;
      default:
        static_cast<BFloat16*>(base)[index] = BFloat16(static_cast<float>(number));
        break;
    }
    return absl::OkStatus();
  }
  switch (dtype) {
    case DType::kInt8:
      return StoreInteger(e, input, static_cast<int8_t*>(base) + index);
    case DType::kUInt8:
      return StoreInteger(e, input, static_cast<uint8_t*>(base) + index);
    case DType::kInt16:
      return StoreInteger(e, input, static_cast<int16_t*>(base) + index);
    case DType::kUInt16:
      return StoreInteger(e, input, static_cast<uint16_t*>(base) + index);
    case DType::kInt32:
      return StoreInteger(e, input, static_cast<int32_t*>(base) + index);
    case DType::kUInt32:
      return StoreInteger(e, input, static_cast<uint32_t*>(base) + index);
    case DType::kInt64:
      return StoreInteger(e, input, static_cast<int64_t*>(base) + index);
    case DType::kUInt64:
      return StoreInteger(e, input, static_cast<uint64_t*>(base) + index);
    default:
      break;
  }
  return Invalid(input, absl::StrCat("dtype ", DTypeName(dtype), " is not supported in JSON"));
}

absl::Status ReadSignatureName(const element& value, std::string* name) {
  std::string_view text;
  if (value.get_string().get(text) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("'signature_name' must be a string");
  }
  name->assign(text.data(), text.size());
  return absl::OkStatus();
}

absl::StatusOr<DType> InputDType(const SignatureInfo& signature, absl::string_view key) {
  auto it = signature.inputs.find(std::string(key));
  if (it == signature.inputs.end()) {
    std::string known;
    for (const auto& k : signature.input_keys)
      absl::StrAppend(&known, known.empty() ? "" : ", ", k);
    return absl::InvalidArgumentError(
        absl::StrCat("input '", key, "' is not an input of the signature (inputs: ", known, ")"));
  }
  return it->second.dtype;
}

}  // namespace kiln::serving::json_internal
