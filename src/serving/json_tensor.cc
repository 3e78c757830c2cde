// Decoding of TF Serving :predict bodies (row and columnar forms). The other parts of
// json_tensor.h: json_writer.cc (replies), json_example.cc (tf.Example JSON), kserve_v2.cc;
// below them json_document.cc (NaN/Infinity, parsing) and json_values.cc (JSON values).
#include "kiln/serving/json_tensor.h"

#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "serving/json_document.h"
#include "serving/json_values.h"
#include "simdjson.h"

namespace kiln::serving {
namespace {

using json_internal::ElementText;
using json_internal::InputDType;
using json_internal::Invalid;
using json_internal::IsB64Object;
using json_internal::ParseDocument;
using json_internal::ReadSignatureName;
using json_internal::StoreLeaf;
using simdjson::dom::element;
using simdjson::dom::element_type;

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

absl::Status Fill(const element& e, const std::vector<int64_t>& shape, size_t depth, DType dtype,
                  absl::string_view input, void* base, int64_t* index) {
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
    return Invalid(
        input, absl::StrCat("expected a list of ", shape[depth], " at nesting depth ", depth,
                            " but found ", ElementText(e), " (ragged lists are not supported)"));
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

// InferShape follows first elements only, so a body of a few hundred bytes ([[[0,0,...],0,...]])
// gives any shape; Fill finds the other lists too short, but only after the tensor is
// allocated. Every value takes at least one byte of the body: a shape of more elements than
// the body has bytes cannot be filled and is refused before allocating.
absl::Status CheckFillable(const std::vector<int64_t>& shape, int64_t body_bytes,
                           absl::string_view input) {
  for (int64_t d : shape) {
    if (d == 0) return absl::OkStatus();  // no values at all
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (n > body_bytes / d) {
      return Invalid(input, absl::StrCat("its lists nest to shape ", Shape(shape).ToString(),
                                         ", more values than the ", body_bytes,
                                         "-byte body holds (ragged lists are not supported)"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

// Converts one columnar value (no batch dimension added).
absl::StatusOr<Tensor> ColumnarTensor(const element& value, DType dtype, absl::string_view input,
                                      int64_t body_bytes) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, InferShape(value, input));
  KILN_RETURN_IF_ERROR(CheckFillable(shape, body_bytes, input));
  Tensor tensor(dtype, Shape(shape));
  int64_t index = 0;
  KILN_RETURN_IF_ERROR(Fill(value, shape, 0, dtype, input, tensor.raw_data(), &index));
  return tensor;
}

// Converts the per-instance values of one input into one batched tensor.
absl::StatusOr<Tensor> RowTensor(const std::vector<element>& rows, DType dtype,
                                 absl::string_view input, int64_t body_bytes) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> row_shape, InferShape(rows[0], input));
  std::vector<int64_t> shape = row_shape;
  shape.insert(shape.begin(), static_cast<int64_t>(rows.size()));
  KILN_RETURN_IF_ERROR(CheckFillable(shape, body_bytes, input));
  Tensor tensor(dtype, Shape(shape));
  int64_t index = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::Status status = Fill(rows[i], row_shape, 0, dtype, input, tensor.raw_data(), &index);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance ", i, " of 'instances': ", status.message(),
                       "; every instance must have the shape ", Shape(row_shape).ToString()));
    }
  }
  return tensor;
}

bool IsNamedObject(const element& e) { return e.type() == element_type::OBJECT && !IsB64Object(e); }

}  // namespace

absl::StatusOr<PredictJsonRequest> ParsePredictRequest(absl::string_view body,
                                                       const SignatureLookup& lookup) {
  json_internal::DocumentStorage storage;
  KILN_ASSIGN_OR_RETURN(element doc, ParseDocument(body, &storage));
  if (doc.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("Malformed request: the body must be a JSON object");
  }
  const int64_t body_bytes = static_cast<int64_t>(body.size());
  PredictJsonRequest request;
  element instances, inputs;
  bool has_instances = false, has_inputs = false;
  bool has_signature_name = false;
  simdjson::dom::object range1 = doc.get_object().value_unsafe();
  // Of duplicated keys the first counts, as in TF Serving (RapidJSON's FindMember).
  for (auto field : range1) {
    if (field.key == "signature_name") {
      if (std::exchange(has_signature_name, true)) continue;
      KILN_RETURN_IF_ERROR(ReadSignatureName(field.value, &request.signature_name));
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
  KILN_ASSIGN_OR_RETURN(const SignatureInfo* signature, lookup(request.signature_name));

  if (has_inputs) {
    request.format = JsonFormat::kColumnar;
    if (IsNamedObject(inputs)) {
      simdjson::dom::object range2 = inputs.get_object().value_unsafe();
      for (auto field : range2) {
        const absl::string_view key(field.key.data(), field.key.size());
        if (request.inputs.count(std::string(key))) continue;  // a duplicate: the first counts
        KILN_ASSIGN_OR_RETURN(DType dtype, InputDType(*signature, key));
        KILN_ASSIGN_OR_RETURN(Tensor tensor, ColumnarTensor(field.value, dtype, key, body_bytes));
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
      KILN_ASSIGN_OR_RETURN(request.inputs[key], ColumnarTensor(inputs, dtype, key, body_bytes));
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
        return absl::InvalidArgumentError(
            absl::StrCat("instance ", i, " of 'instances' is not an object like the first one"));
      }
      simdjson::dom::object object = row_elements[i].get_object().value_unsafe();
      size_t keys = 0;
      for (auto field : object) {
        auto& list = per_input[std::string(field.key)];
        if (list.size() == i + 1) continue;  // a duplicated key in this instance: the first counts
        if (list.size() != i) {
          return absl::InvalidArgumentError(absl::StrCat("instance ", i, " has input '",
                                                         std::string(field.key),
                                                         "' that instance 0 does not have"));
        }
        list.push_back(field.value);
        ++keys;
      }
      if (i == 0) keys_in_first = keys;
      if (keys != keys_in_first) {
        return absl::InvalidArgumentError(absl::StrCat(
            "instance ", i, " has ", keys, " named inputs, the first one has ", keys_in_first));
      }
    }
    for (const auto& [key, values] : per_input) {
      KILN_ASSIGN_OR_RETURN(DType dtype, InputDType(*signature, key));
      KILN_ASSIGN_OR_RETURN(request.inputs[key], RowTensor(values, dtype, key, body_bytes));
    }
  } else {
    if (signature->input_keys.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "instances are bare values but the signature has ", signature->input_keys.size(),
          " inputs; write each instance as an object keyed by input name"));
    }
    const std::string& key = signature->input_keys[0];
    KILN_ASSIGN_OR_RETURN(DType dtype, InputDType(*signature, key));
    KILN_ASSIGN_OR_RETURN(request.inputs[key], RowTensor(row_elements, dtype, key, body_bytes));
  }
  return request;
}

}  // namespace kiln::serving
