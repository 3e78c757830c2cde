// KServe v2 ("Open Inference Protocol") infer requests and datatype names (json_tensor.h).
#include <algorithm>
#include <cstring>
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

absl::StatusOr<Tensor> TensorFromRawBytes(const std::string& name, DType dtype,
                                          const std::vector<int64_t>& dims,
                                          absl::string_view bytes) {
  auto count = CheckedNumElements(dims);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "': bad shape: ", count.status().message()));
  }
  if (dtype == DType::kString) {
    KILN_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, Shape(dims)));
    std::string* out = tensor.data<std::string>();
    size_t pos = 0;
    for (int64_t i = 0; i < *count; ++i) {
      if (bytes.size() - pos < 4) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", name, "': raw BYTES content ends inside the length of element ",
                         i, " of ", *count));
      }
      uint32_t length;
      std::memcpy(&length, bytes.data() + pos, 4);  // little-endian, as x86 and ARM store it
      pos += 4;
      if (bytes.size() - pos < length) {
        return absl::InvalidArgumentError(absl::StrCat("input '", name, "': element ", i,
                                                       " declares ", length, " bytes, ",
                                                       bytes.size() - pos, " remain"));
      }
      out[i].assign(bytes.data() + pos, length);
      pos += length;
    }
    if (pos != bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "': ", bytes.size() - pos,
                                                     " bytes follow the last BYTES element"));
    }
    return tensor;
  }
  const size_t element = DTypeSize(dtype);
  // Checked against the data before allocating: the shape is a number the client sends.
  if (static_cast<uint64_t>(*count) != bytes.size() / element || bytes.size() % element != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "': shape ", Shape(dims).ToString(), " of ",
                     V2DatatypeName(dtype), " needs ", static_cast<uint64_t>(*count) * element,
                     " bytes, the raw content has ", bytes.size()));
  }
  KILN_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, Shape(dims)));
  if (!bytes.empty()) std::memcpy(tensor.raw_data(), bytes.data(), bytes.size());
  return tensor;
}

std::string TensorToRawBytes(const Tensor& tensor) {
  if (tensor.dtype() != DType::kString) {
    return std::string(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
  }
  std::string out;
  const std::string* values = tensor.data<std::string>();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    const uint32_t length = static_cast<uint32_t>(values[i].size());
    out.append(reinterpret_cast<const char*>(&length), 4);
    out.append(values[i]);
  }
  return out;
}

bool V2InferRequest::OutputIsBinary(const std::string& name) const {
  return binary_outputs_all ||
         std::find(binary_outputs.begin(), binary_outputs.end(), name) != binary_outputs.end();
}

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
                                                   const SignatureInfo& signature,
                                                   absl::string_view binary) {
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
  bool flag;
  if (doc["parameters"]["binary_data_output"].get_bool().get(flag) == simdjson::SUCCESS) {
    request.binary_outputs_all = flag;
  }
  element outputs;
  if (doc["outputs"].get(outputs) == simdjson::SUCCESS && outputs.type() == element_type::ARRAY) {
    simdjson::dom::array range8 = outputs.get_array().value_unsafe();
    for (element output : range8) {
      std::string_view name;
      if (output["name"].get_string().get(name) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("each entry of 'outputs' needs a \"name\"");
      }
      request.requested_outputs.emplace_back(name);
      if (output["parameters"]["binary_data"].get_bool().get(flag) == simdjson::SUCCESS && flag) {
        request.binary_outputs.emplace_back(name);
      }
    }
  }
  size_t binary_used = 0;
  simdjson::dom::array range9 = inputs.get_array().value_unsafe();
  for (element input : range9) {
    std::string_view name_view, datatype_view;
    element shape_element, data;
    uint64_t binary_size = 0;
    const bool is_binary =
        input["parameters"]["binary_data_size"].get_uint64().get(binary_size) == simdjson::SUCCESS;
    if (input["name"].get_string().get(name_view) != simdjson::SUCCESS ||
        input["datatype"].get_string().get(datatype_view) != simdjson::SUCCESS ||
        input["shape"].get(shape_element) != simdjson::SUCCESS ||
        shape_element.type() != element_type::ARRAY ||
        (!is_binary && input["data"].get(data) != simdjson::SUCCESS)) {
      return absl::InvalidArgumentError(
          "each input needs \"name\", \"shape\" (a list), \"datatype\" and \"data\" (or "
          "\"parameters\": {\"binary_data_size\": n} with the binary tensor extension)");
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
    if (is_binary) {
      if (binary_size > binary.size() - binary_used) {
        return Invalid(name, absl::StrCat("binary_data_size ", binary_size, " but only ",
                                          binary.size() - binary_used,
                                          " bytes of binary data remain after the JSON header"));
      }
      KILN_ASSIGN_OR_RETURN(
          request.inputs[name],
          TensorFromRawBytes(name, dtype, dims, binary.substr(binary_used, binary_size)));
      binary_used += binary_size;
      continue;
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
  if (binary_used != binary.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(binary.size() - binary_used,
                     " bytes of binary data after the JSON header belong to no input "
                     "(binary_data_size)"));
  }
  return request;
}

}  // namespace kiln::serving
