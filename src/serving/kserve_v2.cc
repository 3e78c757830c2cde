// KServe v2 ("Open Inference Protocol") infer requests and datatype names (json_tensor.h).
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/serving/json_tensor.h"
#include "serving/json_document.h"
#include "serving/json_values.h"
#include "simdjson.h"

namespace kiln::serving {
namespace {

using json_internal::InputDType;
using json_internal::Invalid;
using json_internal::ParseDocument;
using json_internal::StoreLeaf;
using simdjson::dom::element;
using simdjson::dom::element_type;

void Flatten(const element& e, std::vector<element>* out) {
  if (e.type() == element_type::ARRAY) {
    simdjson::dom::array range7 = e.get_array().value_unsafe();
    for (element child : range7) Flatten(child, out);
  } else {
    out->push_back(e);
  }
}

}  // namespace

absl::string_view V2DatatypeName(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "BOOL";
    case DType::kUInt8:
      return "UINT8";
    case DType::kUInt16:
      return "UINT16";
    case DType::kUInt32:
      return "UINT32";
    case DType::kUInt64:
      return "UINT64";
    case DType::kInt8:
      return "INT8";
    case DType::kInt16:
      return "INT16";
    case DType::kInt32:
      return "INT32";
    case DType::kInt64:
      return "INT64";
    case DType::kFloat16:
      return "FP16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat32:
      return "FP32";
    case DType::kFloat64:
      return "FP64";
    case DType::kString:
      return "BYTES";
    case DType::kInvalid:
      break;
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

absl::StatusOr<V2InferRequest> ParseV2InferRequest(absl::string_view body,
                                                   const SignatureInfo& signature) {
  json_internal::DocumentStorage storage;
  KILN_ASSIGN_OR_RETURN(element doc, ParseDocument(body, &storage));
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
    KILN_ASSIGN_OR_RETURN(DType dtype, V2DatatypeFromName(absl::string_view(datatype_view.data(),
                                                                            datatype_view.size())));
    if (dtype != expected) {
      return Invalid(name, absl::StrCat("datatype ", V2DatatypeName(dtype),
                                        " but the model expects ", V2DatatypeName(expected)));
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
