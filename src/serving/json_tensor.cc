#include "kiln/serving/json_tensor.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "simdjson.h"

namespace kiln::serving {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// simdjson follows RFC 8259, which has no NaN or Infinity; TF Serving's reader accepts them.
// Such tokens (outside strings) are rewritten into strings carrying a marker byte that a JSON
// string cannot contain unescaped, and the number readers below turn them back into values.
constexpr char kNanMarker[] = "\x01NaN";
constexpr char kInfMarker[] = "\x01Inf";
constexpr char kNegInfMarker[] = "\x01-Inf";

size_t MatchNonFinite(absl::string_view text, size_t pos, const char** marker) {
  const absl::string_view rest = text.substr(pos);
  const bool negative = absl::StartsWith(rest, "-");
  const absl::string_view word = rest.substr(negative ? 1 : 0);
  size_t length = 0;
  if (absl::StartsWith(word, "NaN")) {
    *marker = "\\u0001NaN";
    length = 3;
  } else if (absl::StartsWith(word, "Infinity")) {
    length = 8;
  } else if (absl::StartsWith(word, "Inf")) {
    length = 3;
  } else {
    return 0;
  }
  if (length == 8 || (length == 3 && word[0] == 'I')) {
    *marker = negative ? "\\u0001-Inf" : "\\u0001Inf";
  }
  return length + (negative ? 1 : 0);
}

// Returns the body with non-finite tokens rewritten, or an empty string when it has none.
std::string RewriteNonFinite(absl::string_view body) {
  std::string out;
  bool in_string = false;
  size_t copied = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != 'N' && c != 'I' && c != '-') continue;
    const char* marker = nullptr;
    const size_t length = MatchNonFinite(body, i, &marker);
    if (length == 0) continue;
    out.append(body.data() + copied, i - copied);
    absl::StrAppend(&out, "\"", marker, "\"");
    i += length - 1;
    copied = i + 1;
  }
  if (copied == 0) return "";
  out.append(body.data() + copied, body.size() - copied);
  return out;
}

bool NonFiniteMarker(std::string_view s, double* value) {
  if (s.empty() || s[0] != '\x01') return false;
  if (s == kNanMarker) {
    *value = std::numeric_limits<double>::quiet_NaN();
  } else if (s == kInfMarker) {
    *value = std::numeric_limits<double>::infinity();
  } else if (s == kNegInfMarker) {
    *value = -std::numeric_limits<double>::infinity();
  } else {
    return false;
  }
  return true;
}

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

// Reads a JSON number (or NaN/Infinity marker) as a double; `integral` tells whether the
// JSON text was an integer.
bool ReadNumber(const element& e, double* value, bool* integral, int64_t* as_int,
                uint64_t* as_uint, bool* is_uint) {
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
    return Invalid(input, absl::StrCat("expected a string or {\"b64\": ...}, got ",
                                       ElementText(e)));
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
      case DType::kFloat32: static_cast<float*>(base)[index] = static_cast<float>(number); break;
      case DType::kFloat64: static_cast<double*>(base)[index] = number; break;
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
    case DType::kInt8: return StoreInteger(e, input, static_cast<int8_t*>(base) + index);
    case DType::kUInt8: return StoreInteger(e, input, static_cast<uint8_t*>(base) + index);
    case DType::kInt16: return StoreInteger(e, input, static_cast<int16_t*>(base) + index);
    case DType::kUInt16: return StoreInteger(e, input, static_cast<uint16_t*>(base) + index);
    case DType::kInt32: return StoreInteger(e, input, static_cast<int32_t*>(base) + index);
    case DType::kUInt32: return StoreInteger(e, input, static_cast<uint32_t*>(base) + index);
    case DType::kInt64: return StoreInteger(e, input, static_cast<int64_t*>(base) + index);
    case DType::kUInt64: return StoreInteger(e, input, static_cast<uint64_t*>(base) + index);
    default: break;
  }
  return Invalid(input, absl::StrCat("dtype ", DTypeName(dtype), " is not supported in JSON"));
}

bool IsLeaf(const element& e) { return e.type() != element_type::ARRAY; }

// The shape that list nesting gives, following first elements.
absl::StatusOr<std::vector<int64_t>> InferShape(const element& value, absl::string_view input) {
  std::vector<int64_t> shape;
  element e = value;
  while (e.type() == element_type::ARRAY) {
    simdjson::dom::array array = e.get_array().value_unsafe();
    shape.push_back(static_cast<int64_t>(array.size()));
    if (array.size() == 0) break;
    e = *array.begin();
  }
  if (e.type() == element_type::OBJECT && !IsB64Object(e)) {
    return Invalid(input, absl::StrCat("unexpected JSON object ", ElementText(e),
                                       " (only {\"b64\": ...} objects hold values)"));
  }
  return shape;
}

absl::Status Fill(const element& e, const std::vector<int64_t>& shape, size_t depth,
                  DType dtype, absl::string_view input, void* base, int64_t* index) {
  if (depth == shape.size()) {
    if (!IsLeaf(e)) {
      return Invalid(input, absl::StrCat("expected a value at nesting depth ", depth,
                                         " but found a list (ragged lists are not supported)"));
    }
    KILN_RETURN_IF_ERROR(StoreLeaf(e, dtype, input, base, *index));
    ++*index;
    return absl::OkStatus();
  }
  if (e.type() != element_type::ARRAY) {
    return Invalid(input, absl::StrCat("expected a list of ", shape[depth], " at nesting depth ",
                                       depth, " but found ", ElementText(e),
                                       " (ragged lists are not supported)"));
  }
  simdjson::dom::array array = e.get_array().value_unsafe();
  if (static_cast<int64_t>(array.size()) != shape[depth]) {
    return Invalid(input, absl::StrCat("list at nesting depth ", depth, " has ", array.size(),
                                       " elements, expected ", shape[depth],
                                       " (ragged lists are not supported)"));
  }
  for (element child : array) {
    KILN_RETURN_IF_ERROR(Fill(child, shape, depth + 1, dtype, input, base, index));
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> InputDType(const SignatureInfo& signature, absl::string_view key) {
  auto it = signature.inputs.find(std::string(key));
  if (it == signature.inputs.end()) {
    std::string known;
    for (const auto& k : signature.input_keys) absl::StrAppend(&known, known.empty() ? "" : ", ", k);
    return absl::InvalidArgumentError(absl::StrCat("input '", key,
                                                   "' is not an input of the signature (inputs: ",
                                                   known, ")"));
  }
  return it->second.dtype;
}

// Converts one columnar value (no batch dimension added).
absl::StatusOr<Tensor> ColumnarTensor(const element& value, DType dtype, absl::string_view input) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, InferShape(value, input));
  Tensor tensor(dtype, Shape(shape));
  int64_t index = 0;
  KILN_RETURN_IF_ERROR(Fill(value, shape, 0, dtype, input, tensor.raw_data(), &index));
  return tensor;
}

// Converts the per-instance values of one input into one batched tensor.
absl::StatusOr<Tensor> RowTensor(const std::vector<element>& rows, DType dtype,
                                 absl::string_view input) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> row_shape, InferShape(rows[0], input));
  std::vector<int64_t> shape = row_shape;
  shape.insert(shape.begin(), static_cast<int64_t>(rows.size()));
  Tensor tensor(dtype, Shape(shape));
  int64_t index = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::Status status = Fill(rows[i], row_shape, 0, dtype, input, tensor.raw_data(), &index);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("instance ", i, " of 'instances': ",
                                                     status.message(),
                                                     "; every instance must have the shape ",
                                                     Shape(row_shape).ToString()));
    }
  }
  return tensor;
}

bool IsNamedObject(const element& e) {
  return e.type() == element_type::OBJECT && !IsB64Object(e);
}

// Parses `body` (rewriting NaN/Infinity first) with a parser kept per thread, so that its
// buffers are reused across requests.
absl::StatusOr<element> ParseDocument(absl::string_view body, std::string* rewritten) {
  thread_local simdjson::dom::parser parser;
  *rewritten = RewriteNonFinite(body);
  const absl::string_view text = rewritten->empty() ? body : absl::string_view(*rewritten);
  element doc;
  auto error = parser.parse(text.data(), text.size()).get(doc);
  if (error != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON Parse error: ", simdjson::error_message(error)));
  }
  return doc;
}

}  // namespace

absl::StatusOr<PredictJsonRequest> ParsePredictRequest(absl::string_view body,
                                                       const SignatureLookup& lookup) {
  std::string rewritten;
  KILN_ASSIGN_OR_RETURN(element doc, ParseDocument(body, &rewritten));
  if (doc.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("Malformed request: the body must be a JSON object");
  }
  PredictJsonRequest request;
  element instances, inputs;
  bool has_instances = false, has_inputs = false;
  bool has_signature_name = false;
  simdjson::dom::object range1 = doc.get_object().value_unsafe();
  // Of duplicated keys the first counts, as in TF Serving (RapidJSON's FindMember).
  for (auto field : range1) {
    if (field.key == "signature_name") {
      if (std::exchange(has_signature_name, true)) continue;
      std::string_view name;
      if (field.value.get_string().get(name) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("'signature_name' must be a string");
      }
      request.signature_name.assign(name.data(), name.size());
    } else if (field.key == "instances" && !has_instances) {
      instances = field.value;
      has_instances = true;
    } else if (field.key == "inputs" && !has_inputs) {
      inputs = field.value;
      has_inputs = true;
    }
  }
  if (has_instances == has_inputs) {
    return absl::InvalidArgumentError(
        has_inputs ? "Not formatted correctly expecting only one of 'inputs' or 'instances' "
                     "keys exists"
                   : "Missing 'inputs' or 'instances' key");
  }
  KILN_ASSIGN_OR_RETURN(const SignatureInfo* signature,
                        lookup(request.signature_name));

  if (has_inputs) {
    request.format = JsonFormat::kColumnar;
    if (IsNamedObject(inputs)) {
      simdjson::dom::object range2 = inputs.get_object().value_unsafe();
      for (auto field : range2) {
        const absl::string_view key(field.key.data(), field.key.size());
        if (request.inputs.count(std::string(key))) continue;  // a duplicate: the first counts
        KILN_ASSIGN_OR_RETURN(DType dtype, InputDType(*signature, key));
        KILN_ASSIGN_OR_RETURN(Tensor tensor, ColumnarTensor(field.value, dtype, key));
        request.inputs[std::string(key)] = std::move(tensor);
      }
    } else {
      if (signature->input_keys.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'inputs' is a single value but the signature has ", signature->input_keys.size(),
            " inputs; name them: {\"inputs\": {\"<input>\": ...}}"));
      }
      const std::string& key = signature->input_keys[0];
      KILN_ASSIGN_OR_RETURN(DType dtype, InputDType(*signature, key));
      KILN_ASSIGN_OR_RETURN(request.inputs[key], ColumnarTensor(inputs, dtype, key));
    }
    return request;
  }

  request.format = JsonFormat::kRow;
  if (instances.type() != element_type::ARRAY) {
    return absl::InvalidArgumentError("Expecting 'instances' to be an list/array");
  }
  simdjson::dom::array rows = instances.get_array().value_unsafe();
  if (rows.size() == 0) {
    return absl::InvalidArgumentError("'instances' is an empty list; it needs at least one");
  }
  std::vector<element> row_elements(rows.begin(), rows.end());
  if (IsNamedObject(row_elements[0])) {
    std::map<std::string, std::vector<element>> per_input;
    size_t keys_in_first = 0;
    for (size_t i = 0; i < row_elements.size(); ++i) {
      if (!IsNamedObject(row_elements[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "instance ", i, " of 'instances' is not an object like the first one"));
      }
      simdjson::dom::object object = row_elements[i].get_object().value_unsafe();
      size_t keys = 0;
      for (auto field : object) {
        auto& list = per_input[std::string(field.key)];
        if (list.size() == i + 1) continue;  // a duplicated key in this instance: the first counts
        if (list.size() != i) {
          return absl::InvalidArgumentError(absl::StrCat(
              "instance ", i, " has input '", std::string(field.key), "' that instance 0 does not have"));
        }
        list.push_back(field.value);
        ++keys;
      }
      if (i == 0) keys_in_first = keys;
      if (keys != keys_in_first) {
        return absl::InvalidArgumentError(absl::StrCat("instance ", i, " has ", keys,
                                                       " named inputs, the first one has ",
                                                       keys_in_first));
      }
    }
    for (const auto& [key, values] : per_input) {
      KILN_ASSIGN_OR_RETURN(DType dtype, InputDType(*signature, key));
      KILN_ASSIGN_OR_RETURN(request.inputs[key], RowTensor(values, dtype, key));
    }
  } else {
    if (signature->input_keys.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "instances are bare values but the signature has ", signature->input_keys.size(),
          " inputs; write each instance as an object keyed by input name"));
    }
    const std::string& key = signature->input_keys[0];
    KILN_ASSIGN_OR_RETURN(DType dtype, InputDType(*signature, key));
    KILN_ASSIGN_OR_RETURN(request.inputs[key], RowTensor(row_elements, dtype, key));
  }
  return request;
}

void AppendJsonString(absl::string_view text, std::string* out) {
  out->push_back('"');
  for (unsigned char c : text) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out->append(escaped);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

namespace {

template <typename F>
void AppendFloating(F value, std::string* out) {
  if (std::isnan(value)) {
    out->append("NaN");
    return;
  }
  if (std::isinf(value)) {
    out->append(value > 0 ? "Infinity" : "-Infinity");
    return;
  }
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  const std::string_view text(buffer, result.ptr - buffer);
  out->append(text);
  if (text.find_first_of(".eE") == std::string_view::npos) out->append(".0");
}

template <typename T>
void AppendInteger(T value, std::string* out) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr - buffer);
}

void AppendElement(const Tensor& tensor, int64_t index, bool b64, std::string* out) {
  switch (tensor.dtype()) {
    case DType::kFloat32: AppendFloating(tensor.data<float>()[index], out); break;
    case DType::kFloat64: AppendFloating(tensor.data<double>()[index], out); break;
    case DType::kFloat16:
      AppendFloating(static_cast<float>(tensor.data<Float16>()[index]), out);
      break;
    case DType::kBFloat16:
      AppendFloating(static_cast<float>(tensor.data<BFloat16>()[index]), out);
      break;
    case DType::kInt8: AppendInteger(tensor.data<int8_t>()[index], out); break;
    case DType::kUInt8: AppendInteger(tensor.data<uint8_t>()[index], out); break;
    case DType::kInt16: AppendInteger(tensor.data<int16_t>()[index], out); break;
    case DType::kUInt16: AppendInteger(tensor.data<uint16_t>()[index], out); break;
    case DType::kInt32: AppendInteger(tensor.data<int32_t>()[index], out); break;
    case DType::kUInt32: AppendInteger(tensor.data<uint32_t>()[index], out); break;
    case DType::kInt64: AppendInteger(tensor.data<int64_t>()[index], out); break;
    case DType::kUInt64: AppendInteger(tensor.data<uint64_t>()[index], out); break;
    case DType::kBool: out->append(tensor.data<bool>()[index] ? "true" : "false"); break;
    case DType::kString: {
      const std::string& s = tensor.data<std::string>()[index];
      if (b64) {
        out->append("{\"b64\": \"");
        out->append(absl::Base64Escape(s));
        out->append("\"}");
      } else {
        AppendJsonString(s, out);
      }
      break;
    }
    case DType::kInvalid: out->append("null"); break;
  }
}

void AppendNested(const Tensor& tensor, int depth, int64_t* index, bool b64, std::string* out) {
  if (depth == tensor.rank()) {
    AppendElement(tensor, (*index)++, b64, out);
    return;
  }
  out->push_back('[');
  const int64_t n = tensor.dim(depth);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out->append(", ");
    AppendNested(tensor, depth + 1, index, b64, out);
  }
  out->push_back(']');
}

bool IsBytesKey(absl::string_view key) { return absl::EndsWith(key, "_bytes"); }

}  // namespace

void AppendFloatJson(float value, std::string* out) { AppendFloating(value, out); }
void AppendDoubleJson(double value, std::string* out) { AppendFloating(value, out); }

void AppendTensorJson(const Tensor& tensor, bool b64, std::string* out) {
  int64_t index = 0;
  AppendNested(tensor, 0, &index, b64, out);
}

absl::StatusOr<std::string> WritePredictResponse(const std::map<std::string, Tensor>& outputs,
                                                 const std::vector<std::string>& output_order,
                                                 JsonFormat format) {
  std::string out;
  size_t bytes = 64;
  for (const auto& [key, tensor] : outputs) bytes += tensor.num_elements() * 12 + key.size();
  out.reserve(bytes);
  if (format == JsonFormat::kColumnar) {
    out.append("{\"outputs\": ");
    if (output_order.size() == 1) {
      const std::string& key = output_order[0];
      AppendTensorJson(outputs.at(key), IsBytesKey(key), &out);
    } else {
      out.push_back('{');
      for (size_t i = 0; i < output_order.size(); ++i) {
        if (i > 0) out.append(", ");
        AppendJsonString(output_order[i], &out);
        out.append(": ");
        AppendTensorJson(outputs.at(output_order[i]), IsBytesKey(output_order[i]), &out);
      }
      out.push_back('}');
    }
    out.push_back('}');
    return out;
  }
  // Row form: every output is split along its first dimension, which must agree.
  int64_t batch = -1;
  for (const std::string& key : output_order) {
    const Tensor& tensor = outputs.at(key);
    if (tensor.rank() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Tensor name: ", key, " is a scalar and cannot be split into instances; "
          "use the columnar \"inputs\" form"));
    }
    if (batch < 0) batch = tensor.dim(0);
    if (tensor.dim(0) != batch) {
      return absl::InvalidArgumentError(absl::StrCat("Tensor name: ", key,
                                                     " has inconsistent batch size: ",
                                                     tensor.dim(0), " expecting: ", batch));
    }
  }
  out.append("{\"predictions\": [");
  for (int64_t row = 0; row < batch; ++row) {
    if (row > 0) out.append(", ");
    if (output_order.size() == 1) {
      AppendTensorJson(outputs.at(output_order[0]).SubTensor(row), IsBytesKey(output_order[0]),
                       &out);
      continue;
    }
    out.push_back('{');
    for (size_t i = 0; i < output_order.size(); ++i) {
      if (i > 0) out.append(", ");
      AppendJsonString(output_order[i], &out);
      out.append(": ");
      AppendTensorJson(outputs.at(output_order[i]).SubTensor(row), IsBytesKey(output_order[i]),
                       &out);
    }
    out.push_back('}');
  }
  out.append("]}");
  return out;
}

namespace {

// One feature value list: all ints -> int64_list, any float -> float_list, strings or b64 ->
// bytes_list.
absl::Status AddFeature(absl::string_view name, const element& value, tensorflow::Feature* feature) {
  std::vector<element> values;
  if (value.type() == element_type::ARRAY) {
    simdjson::dom::array range3 = value.get_array().value_unsafe();
    for (element e : range3) values.push_back(e);
  } else {
    values.push_back(value);
  }
  bool any_string = false, any_float = false, any_int = false;
  for (const element& e : values) {
    double unused;
    switch (e.type()) {
      case element_type::INT64:
      case element_type::UINT64: any_int = true; break;
      case element_type::DOUBLE: any_float = true; break;
      case element_type::STRING:
        if (NonFiniteMarker(e.get_string().value_unsafe(), &unused)) {
          any_float = true;
        } else {
          any_string = true;
        }
        break;
      case element_type::OBJECT:
        if (IsB64Object(e)) {
          any_string = true;
          break;
        }
        [[fallthrough]];
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "feature '", name, "': unsupported value ", ElementText(e),
            " (features are numbers, strings, {\"b64\": ...} or flat lists of them)"));
    }
  }
  if (any_string && (any_float || any_int)) {
    return absl::InvalidArgumentError(
        absl::StrCat("feature '", name, "' mixes strings and numbers in one list"));
  }
  if (any_string) {
    auto* list = feature->mutable_bytes_list();
    for (const element& e : values) {
      if (e.type() == element_type::STRING) {
        std::string_view s = e.get_string().value_unsafe();
        list->add_value(std::string(s));
      } else {
        KILN_ASSIGN_OR_RETURN(std::string decoded, DecodeB64(e, name));
        list->add_value(std::move(decoded));
      }
    }
  } else if (any_float) {
    auto* list = feature->mutable_float_list();
    for (const element& e : values) {
      double number;
      bool integral, is_uint;
      int64_t as_int;
      uint64_t as_uint;
      ReadNumber(e, &number, &integral, &as_int, &as_uint, &is_uint);
      list->add_value(static_cast<float>(number));
    }
  } else if (any_int) {
    auto* list = feature->mutable_int64_list();
    for (const element& e : values) {
      if (e.type() == element_type::UINT64) {
        return absl::InvalidArgumentError(
            absl::StrCat("feature '", name, "': value ", ElementText(e), " exceeds int64"));
      }
      list->add_value(e.get_int64().value_unsafe());
    }
  }
  return absl::OkStatus();
}

absl::Status ParseExample(const element& e, absl::string_view what, tensorflow::Example* example) {
  if (e.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a JSON object of features"));
  }
  auto* features = example->mutable_features()->mutable_feature();
  simdjson::dom::object range4 = e.get_object().value_unsafe();
  for (auto field : range4) {
    const absl::string_view name(field.key.data(), field.key.size());
    if (features->count(std::string(name))) continue;  // a duplicate: the first counts
    KILN_RETURN_IF_ERROR(AddFeature(name, field.value, &(*features)[std::string(name)]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExamplesJsonRequest> ParseExamplesRequest(absl::string_view body) {
  std::string rewritten;
  KILN_ASSIGN_OR_RETURN(element doc, ParseDocument(body, &rewritten));
  if (doc.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("Malformed request: the body must be a JSON object");
  }
  ExamplesJsonRequest request;
  bool has_examples = false, has_signature_name = false;
  simdjson::dom::object range5 = doc.get_object().value_unsafe();
  // Of duplicated keys the first counts, as in TF Serving.
  for (auto field : range5) {
    if (field.key == "signature_name") {
      if (std::exchange(has_signature_name, true)) continue;
      std::string_view name;
      if (field.value.get_string().get(name) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("'signature_name' must be a string");
      }
      request.signature_name.assign(name.data(), name.size());
    } else if (field.key == "context" && !request.has_context) {
      request.has_context = true;
      KILN_RETURN_IF_ERROR(ParseExample(field.value, "'context'", &request.context));
    } else if (field.key == "examples" && !has_examples) {
      has_examples = true;
      if (field.value.type() != element_type::ARRAY) {
        return absl::InvalidArgumentError("'examples' must be a list of JSON objects");
      }
      simdjson::dom::array range6 = field.value.get_array().value_unsafe();
      for (element e : range6) {
        KILN_RETURN_IF_ERROR(ParseExample(
            e, absl::StrCat("example ", request.examples.size()), &request.examples.emplace_back()));
      }
    }
  }
  if (!has_examples) return absl::InvalidArgumentError("Missing 'examples' key");
  return request;
}

absl::string_view V2DatatypeName(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "BOOL";
    case DType::kUInt8: return "UINT8";
    case DType::kUInt16: return "UINT16";
    case DType::kUInt32: return "UINT32";
    case DType::kUInt64: return "UINT64";
    case DType::kInt8: return "INT8";
    case DType::kInt16: return "INT16";
    case DType::kInt32: return "INT32";
    case DType::kInt64: return "INT64";
    case DType::kFloat16: return "FP16";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat32: return "FP32";
    case DType::kFloat64: return "FP64";
    case DType::kString: return "BYTES";
    case DType::kInvalid: break;
  }
  return "INVALID";
}

absl::StatusOr<DType> V2DatatypeFromName(absl::string_view name) {
  for (DType dtype : {DType::kBool, DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64,
                      DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat16,
                      DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kString}) {
    if (V2DatatypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown datatype \"", name, "\""));
}

namespace {

void Flatten(const element& e, std::vector<element>* out) {
  if (e.type() == element_type::ARRAY) {
    simdjson::dom::array range7 = e.get_array().value_unsafe();
    for (element child : range7) Flatten(child, out);
  } else {
    out->push_back(e);
  }
}

}  // namespace

absl::StatusOr<V2InferRequest> ParseV2InferRequest(absl::string_view body,
                                                   const SignatureInfo& signature) {
  std::string rewritten;
  KILN_ASSIGN_OR_RETURN(element doc, ParseDocument(body, &rewritten));
  if (doc.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("the body must be a JSON object");
  }
  V2InferRequest request;
  element inputs;
  if (doc["inputs"].get(inputs) != simdjson::SUCCESS || inputs.type() != element_type::ARRAY) {
    return absl::InvalidArgumentError("'inputs' must be a list of tensors");
  }
  std::string_view id;
  if (doc["id"].get_string().get(id) == simdjson::SUCCESS) request.id.assign(id);
  element outputs;
  if (doc["outputs"].get(outputs) == simdjson::SUCCESS && outputs.type() == element_type::ARRAY) {
    simdjson::dom::array range8 = outputs.get_array().value_unsafe();
    for (element output : range8) {
      std::string_view name;
      if (output["name"].get_string().get(name) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("each entry of 'outputs' needs a \"name\"");
      }
      request.requested_outputs.emplace_back(name);
    }
  }
  simdjson::dom::array range9 = inputs.get_array().value_unsafe();
  for (element input : range9) {
    std::string_view name_view, datatype_view;
    element shape_element, data;
    if (input["name"].get_string().get(name_view) != simdjson::SUCCESS ||
        input["datatype"].get_string().get(datatype_view) != simdjson::SUCCESS ||
        input["shape"].get(shape_element) != simdjson::SUCCESS ||
        shape_element.type() != element_type::ARRAY ||
        input["data"].get(data) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(
          "each input needs \"name\", \"shape\" (a list), \"datatype\" and \"data\"");
    }
    const std::string name(name_view);
    KILN_ASSIGN_OR_RETURN(DType expected, InputDType(signature, name));
    KILN_ASSIGN_OR_RETURN(DType dtype,
                          V2DatatypeFromName(absl::string_view(datatype_view.data(),
                                                               datatype_view.size())));
    if (dtype != expected) {
      return Invalid(name, absl::StrCat("datatype ", V2DatatypeName(dtype), " but the model expects ",
                                        V2DatatypeName(expected)));
    }
    std::vector<int64_t> dims;
    simdjson::dom::array range10 = shape_element.get_array().value_unsafe();
    for (element d : range10) {
      int64_t dim;
      if (d.get_int64().get(dim) != simdjson::SUCCESS || dim < 0) {
        return Invalid(name, "shape entries must be non-negative integers");
      }
      dims.push_back(dim);
    }
    std::vector<element> flat;
    Flatten(data, &flat);
    // Check the declared shape against the data before allocating: a shape is a number a
    // client sends, the data is what it actually sent.
    auto count = CheckedNumElements(dims);
    if (!count.ok()) {
      return Invalid(
          name, absl::StrCat("declared shape and data size disagree: ", count.status().message(),
                             ", \"data\" has ", flat.size(), " values"));
    }
    if (static_cast<int64_t>(flat.size()) != *count) {
      return Invalid(name, absl::StrCat("declared shape and data size disagree: shape ",
                                        Shape(dims).ToString(), " needs ", *count,
                                        " values, \"data\" has ", flat.size()));
    }
    KILN_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, Shape(dims)));
    for (size_t i = 0; i < flat.size(); ++i) {
      KILN_RETURN_IF_ERROR(StoreLeaf(flat[i], dtype, name, tensor.raw_data(), i));
    }
    request.inputs[name] = std::move(tensor);
  }
  return request;
}

}  // namespace kiln::serving
