// Writing TF Serving REST replies (json_tensor.h): tensors as nested JSON lists, floats as
// TF Serving writes them.
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/serving/json_tensor.h"

namespace kiln::serving {

void AppendJsonString(absl::string_view text, std::string* out) {
  out->push_back('"');
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
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
    case DType::kFloat32:
      AppendFloating(tensor.data<float>()[index], out);
      break;
    case DType::kFloat64:
      AppendFloating(tensor.data<double>()[index], out);
      break;
    case DType::kFloat16:
      AppendFloating(static_cast<float>(tensor.data<Float16>()[index]), out);
      break;
    case DType::kBFloat16:
      AppendFloating(static_cast<float>(tensor.data<BFloat16>()[index]), out);
      break;
    case DType::kInt8:
      AppendInteger(tensor.data<int8_t>()[index], out);
      break;
    case DType::kUInt8:
      AppendInteger(tensor.data<uint8_t>()[index], out);
      break;
    case DType::kInt16:
      AppendInteger(tensor.data<int16_t>()[index], out);
      break;
    case DType::kUInt16:
      AppendInteger(tensor.data<uint16_t>()[index], out);
      break;
    case DType::kInt32:
      AppendInteger(tensor.data<int32_t>()[index], out);
      break;
    case DType::kUInt32:
      AppendInteger(tensor.data<uint32_t>()[index], out);
      break;
    case DType::kInt64:
      AppendInteger(tensor.data<int64_t>()[index], out);
      break;
    case DType::kUInt64:
      AppendInteger(tensor.data<uint64_t>()[index], out);
      break;
    case DType::kBool:
      out->append(tensor.data<bool>()[index] ? "true" : "false");
      break;
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
    case DType::kInvalid:
      out->append("null");
      break;
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
      return absl::InvalidArgumentError(
          absl::StrCat("Tensor name: ", key,
                       " is a scalar and cannot be split into instances; "
                       "use the columnar \"inputs\" form"));
    }
    if (batch < 0) batch = tensor.dim(0);
    if (tensor.dim(0) != batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tensor name: ", key, " has inconsistent batch size: ", tensor.dim(0),
                       " expecting: ", batch));
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

}  // namespace kiln::serving
