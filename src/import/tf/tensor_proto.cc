#include "import/tf/tensor_proto.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {

using tensorflow::DataType;

absl::StatusOr<DType> FromTfDataType(int tf_dtype) {
  int base = tf_dtype > 100 ? tf_dtype - 100 : tf_dtype;
  switch (base) {
    case tensorflow::DT_FLOAT: return DType::kFloat32;
    case tensorflow::DT_DOUBLE: return DType::kFloat64;
    case tensorflow::DT_INT32: return DType::kInt32;
    case tensorflow::DT_UINT8: return DType::kUInt8;
    case tensorflow::DT_INT16: return DType::kInt16;
    case tensorflow::DT_INT8: return DType::kInt8;
    case tensorflow::DT_STRING: return DType::kString;
    case tensorflow::DT_INT64: return DType::kInt64;
    case tensorflow::DT_BOOL: return DType::kBool;
    case tensorflow::DT_BFLOAT16: return DType::kBFloat16;
    case tensorflow::DT_UINT16: return DType::kUInt16;
    case tensorflow::DT_HALF: return DType::kFloat16;
    case tensorflow::DT_UINT32: return DType::kUInt32;
    case tensorflow::DT_UINT64: return DType::kUInt64;
    default:
      return absl::UnimplementedError(
          absl::StrCat("TensorFlow data type ", TfDataTypeName(tf_dtype), " is not supported"));
  }
}

tensorflow::DataType ToTfDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return tensorflow::DT_FLOAT;
    case DType::kFloat16: return tensorflow::DT_HALF;
    case DType::kBFloat16: return tensorflow::DT_BFLOAT16;
    case DType::kFloat64: return tensorflow::DT_DOUBLE;
    case DType::kInt8: return tensorflow::DT_INT8;
    case DType::kUInt8: return tensorflow::DT_UINT8;
    case DType::kInt16: return tensorflow::DT_INT16;
    case DType::kUInt16: return tensorflow::DT_UINT16;
    case DType::kInt32: return tensorflow::DT_INT32;
    case DType::kUInt32: return tensorflow::DT_UINT32;
    case DType::kInt64: return tensorflow::DT_INT64;
    case DType::kUInt64: return tensorflow::DT_UINT64;
    case DType::kBool: return tensorflow::DT_BOOL;
    case DType::kString: return tensorflow::DT_STRING;
    default: return tensorflow::DT_INVALID;
  }
}

std::string TfDataTypeName(int tf_dtype) {
  if (tensorflow::DataType_IsValid(tf_dtype)) {
    return tensorflow::DataType_Name(static_cast<DataType>(tf_dtype));
  }
  return absl::StrCat("DT_UNKNOWN(", tf_dtype, ")");
}

PartialShape FromTfShape(const tensorflow::TensorShapeProto& shape) {
  PartialShape out;
  if (shape.unknown_rank()) return out;
  out.rank_known = true;
  for (const auto& d : shape.dim()) out.dims.push_back(d.size() < 0 ? -1 : d.size());
  return out;
}

absl::StatusOr<Shape> FullyDefinedShape(const tensorflow::TensorShapeProto& shape) {
  if (shape.unknown_rank()) return absl::InvalidArgumentError("shape has unknown rank");
  Shape out;
  for (const auto& d : shape.dim()) {
    if (d.size() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape has an unknown dimension: ", shape.ShortDebugString()));
    }
    out.push_back(d.size());
  }
  return out;
}

namespace {

// Fills `n` elements of type T from a repeated field of type F, repeating the last value.
template <typename T, typename Field>
void FillRepeated(T* out, int64_t n, const Field& field) {
  if (field.empty()) {
    for (int64_t i = 0; i < n; ++i) out[i] = T{};
    return;
  }
  const int64_t given = std::min<int64_t>(n, field.size());
  for (int64_t i = 0; i < given; ++i) out[i] = static_cast<T>(field.Get(i));
  for (int64_t i = given; i < n; ++i) out[i] = static_cast<T>(field.Get(field.size() - 1));
}

template <typename T, typename Field>
absl::Status CheckCount(const Field& field, int64_t n, absl::string_view name) {
  if (field.size() > n) {
    return absl::InvalidArgumentError(absl::StrCat("TensorProto has ", field.size(), " ", name,
                                                   " values for ", n, " elements"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> FromTensorProto(const tensorflow::TensorProto& proto) {
  KILN_ASSIGN_OR_RETURN(DType dtype, FromTfDataType(proto.dtype()));
  KILN_ASSIGN_OR_RETURN(Shape shape, FullyDefinedShape(proto.tensor_shape()));
  int64_t n = 1;
  for (int64_t d : shape.dims()) {
    if (d != 0 && n > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorProto shape ", shape.ToString(), " is too large"));
    }
    n *= d;
  }
  if (dtype == DType::kString) {
    if (proto.string_val_size() != n && !(proto.string_val_size() == 1 || n == 0)) {
      if (proto.string_val_size() > n || proto.string_val_size() == 0) {
        return absl::InvalidArgumentError(absl::StrCat("string TensorProto has ",
                                                       proto.string_val_size(),
                                                       " values for shape ", shape.ToString()));
      }
    }
    Tensor t(dtype, shape);
    auto* out = t.data<std::string>();
    for (int64_t i = 0; i < n; ++i) {
      out[i] = proto.string_val_size() == 0
                   ? std::string()
                   : proto.string_val(std::min<int64_t>(i, proto.string_val_size() - 1));
    }
    return t;
  }
  Tensor t(dtype, shape);
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  if (!proto.tensor_content().empty()) {
    if (proto.tensor_content().size() != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorProto tensor_content has ", proto.tensor_content().size(),
                       " bytes; ", DTypeName(dtype), shape.ToString(), " needs ", bytes));
    }
    if (bytes > 0) std::memcpy(t.raw_data(), proto.tensor_content().data(), bytes);
    return t;
  }
  switch (dtype) {
    case DType::kFloat32:
      KILN_RETURN_IF_ERROR(CheckCount<float>(proto.float_val(), n, "float"));
      FillRepeated(t.data<float>(), n, proto.float_val());
      break;
    case DType::kFloat64:
      KILN_RETURN_IF_ERROR(CheckCount<double>(proto.double_val(), n, "double"));
      FillRepeated(t.data<double>(), n, proto.double_val());
      break;
    case DType::kInt32:
      KILN_RETURN_IF_ERROR(CheckCount<int32_t>(proto.int_val(), n, "int"));
      FillRepeated(t.data<int32_t>(), n, proto.int_val());
      break;
    case DType::kInt16:
      KILN_RETURN_IF_ERROR(CheckCount<int16_t>(proto.int_val(), n, "int"));
      FillRepeated(t.data<int16_t>(), n, proto.int_val());
      break;
    case DType::kInt8:
      KILN_RETURN_IF_ERROR(CheckCount<int8_t>(proto.int_val(), n, "int"));
      FillRepeated(t.data<int8_t>(), n, proto.int_val());
      break;
    case DType::kUInt8:
      KILN_RETURN_IF_ERROR(CheckCount<uint8_t>(proto.int_val(), n, "int"));
      FillRepeated(t.data<uint8_t>(), n, proto.int_val());
      break;
    case DType::kUInt16:
      KILN_RETURN_IF_ERROR(CheckCount<uint16_t>(proto.int_val(), n, "int"));
      FillRepeated(t.data<uint16_t>(), n, proto.int_val());
      break;
    case DType::kInt64:
      KILN_RETURN_IF_ERROR(CheckCount<int64_t>(proto.int64_val(), n, "int64"));
      FillRepeated(t.data<int64_t>(), n, proto.int64_val());
      break;
    case DType::kUInt32:
      KILN_RETURN_IF_ERROR(CheckCount<uint32_t>(proto.uint32_val(), n, "uint32"));
      FillRepeated(t.data<uint32_t>(), n, proto.uint32_val());
      break;
    case DType::kUInt64:
      KILN_RETURN_IF_ERROR(CheckCount<uint64_t>(proto.uint64_val(), n, "uint64"));
      FillRepeated(t.data<uint64_t>(), n, proto.uint64_val());
      break;
    case DType::kBool:
      KILN_RETURN_IF_ERROR(CheckCount<bool>(proto.bool_val(), n, "bool"));
      FillRepeated(t.data<bool>(), n, proto.bool_val());
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      KILN_RETURN_IF_ERROR(CheckCount<uint16_t>(proto.half_val(), n, "half"));
      FillRepeated(t.data<uint16_t>(), n, proto.half_val());
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat("TensorProto of type ", DTypeName(dtype), " is not supported"));
  }
  return t;
}

tensorflow::TensorProto ToTensorProto(const Tensor& tensor) {
  tensorflow::TensorProto proto;
  proto.set_dtype(ToTfDataType(tensor.dtype()));
  for (int64_t d : tensor.shape().dims()) proto.mutable_tensor_shape()->add_dim()->set_size(d);
  if (tensor.dtype() == DType::kString) {
    for (const std::string& s : tensor.span<std::string>()) proto.add_string_val(s);
  } else {
    proto.set_tensor_content(std::string(static_cast<const char*>(tensor.raw_data()),
                                         tensor.byte_size()));
  }
  return proto;
}

}  // namespace kiln::import::tf
