#include "kiln/data/formats/tensor_proto.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/core/memory_budget.h"
#include "kiln/core/status.h"

namespace kiln::data::formats {

std::optional<DType> DTypeFromTf(int tf_dtype) {
  switch (tf_dtype) {
    case tensorflow::DT_FLOAT:
      return DType::kFloat32;
    case tensorflow::DT_DOUBLE:
      return DType::kFloat64;
    case tensorflow::DT_HALF:
      return DType::kFloat16;
    case tensorflow::DT_BFLOAT16:
      return DType::kBFloat16;
    case tensorflow::DT_INT8:
      return DType::kInt8;
    case tensorflow::DT_UINT8:
      return DType::kUInt8;
    case tensorflow::DT_INT16:
      return DType::kInt16;
    case tensorflow::DT_UINT16:
      return DType::kUInt16;
    case tensorflow::DT_INT32:
      return DType::kInt32;
    case tensorflow::DT_UINT32:
      return DType::kUInt32;
    case tensorflow::DT_INT64:
      return DType::kInt64;
    case tensorflow::DT_UINT64:
      return DType::kUInt64;
    case tensorflow::DT_BOOL:
      return DType::kBool;
    case tensorflow::DT_STRING:
      return DType::kString;
    default:
      return std::nullopt;
  }
}

tensorflow::DataType ToTfDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return tensorflow::DT_FLOAT;
    case DType::kFloat64:
      return tensorflow::DT_DOUBLE;
    case DType::kFloat16:
      return tensorflow::DT_HALF;
    case DType::kBFloat16:
      return tensorflow::DT_BFLOAT16;
    case DType::kInt8:
      return tensorflow::DT_INT8;
    case DType::kUInt8:
      return tensorflow::DT_UINT8;
    case DType::kInt16:
      return tensorflow::DT_INT16;
    case DType::kUInt16:
      return tensorflow::DT_UINT16;
    case DType::kInt32:
      return tensorflow::DT_INT32;
    case DType::kUInt32:
      return tensorflow::DT_UINT32;
    case DType::kInt64:
      return tensorflow::DT_INT64;
    case DType::kUInt64:
      return tensorflow::DT_UINT64;
    case DType::kBool:
      return tensorflow::DT_BOOL;
    case DType::kString:
      return tensorflow::DT_STRING;
    case DType::kInvalid:
      break;
  }
  return tensorflow::DT_INVALID;
}

std::string TfDataTypeName(int tf_dtype) {
  if (tensorflow::DataType_IsValid(tf_dtype)) {
    return tensorflow::DataType_Name(static_cast<tensorflow::DataType>(tf_dtype));
  }
  return absl::StrCat("DT_UNKNOWN(", tf_dtype, ")");
}

std::string DataTypeEnumName(DType dtype) { return tensorflow::DataType_Name(ToTfDataType(dtype)); }

absl::StatusOr<DType> FromTfDataType(int tf_dtype) {
  // Reference types are the base type + 100 (DT_FLOAT_REF = 101).
  const int base = tf_dtype > 100 ? tf_dtype - 100 : tf_dtype;
  if (std::optional<DType> dtype = DTypeFromTf(base)) return *dtype;
  return absl::UnimplementedError(
      absl::StrCat("TensorFlow data type ", TfDataTypeName(tf_dtype), " is not supported"));
}

absl::StatusOr<DType> DTypeFromProto(tensorflow::DataType dtype) {
  if (std::optional<DType> kiln_dtype = DTypeFromTf(dtype)) return *kiln_dtype;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype ", tensorflow::DataType_Name(dtype)));
}

// ---- Graph constants (TensorFlow's fill rule) ----

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
    return absl::InvalidArgumentError(
        absl::StrCat("TensorProto has ", field.size(), " ", name, " values for ", n, " elements"));
  }
  return absl::OkStatus();
}

// What one element filled from the proto's last value holds: its dtype's size, and for strings
// the characters each copy of the repeated value holds too.
size_t FilledElementBytes(const tensorflow::TensorProto& proto, DType dtype) {
  if (dtype != DType::kString) return DTypeSize(dtype);
  const size_t chars =
      proto.string_val_size() == 0 ? 0 : proto.string_val(proto.string_val_size() - 1).size();
  return sizeof(std::string) + chars;
}

}  // namespace

// Values in the typed *_val field `dtype` uses (defined with the request decoder below).
static int ValueCount(const tensorflow::TensorProto& proto, DType dtype);

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
  // Everything is checked against the bytes the proto holds before the tensor is allocated.
  const bool from_content = dtype != DType::kString && !proto.tensor_content().empty();
  if (from_content) {
    const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
    if (proto.tensor_content().size() != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorProto tensor_content has ", proto.tensor_content().size(), " bytes; ",
                       DTypeName(dtype), shape.ToString(), " needs ", bytes));
    }
  } else {
    // Under the fill rule a few bytes describe any shape (TensorFlow itself writes large splats
    // as Fill, not Const), so what filling expands to is held to kMaxFilledConstantBytes.
    const int64_t given = ValueCount(proto, dtype);
    if (given < n) {
      const size_t per_element = FilledElementBytes(proto, dtype);
      if (static_cast<size_t>(n) > kMaxFilledConstantBytes / per_element) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "TensorProto of ", DTypeName(dtype), shape.ToString(), " holds ", given,
            " values; filling the rest with the last would take ", n, " x ", per_element,
            " bytes, above the ", kMaxFilledConstantBytes, "-byte limit for filled constants"));
      }
    }
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
  if (from_content) {
    if (n > 0) std::memcpy(t.raw_data(), proto.tensor_content().data(), t.byte_size());
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
  ShapeToProto(true, tensor.shape().ToVector(), proto.mutable_tensor_shape());
  if (tensor.dtype() == DType::kString) {
    for (const std::string& s : tensor.span<std::string>()) proto.add_string_val(s);
  } else {
    proto.set_tensor_content(
        std::string(static_cast<const char*>(tensor.raw_data()), tensor.byte_size()));
  }
  return proto;
}

// ---- Requests and replies (TF Serving's rules) ----

namespace {

template <typename T, typename Field>
absl::Status CopyTyped(const Field& values, Tensor* tensor, absl::string_view name) {
  const int64_t n = tensor->num_elements();
  T* out = tensor->data<T>();
  if (values.size() == n) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(values.Get(i));
  } else if (values.size() == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(values.Get(0));
  } else if (!(values.size() == 0 && n == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' of shape ",
                                                   tensor->shape().ToString(), " needs ", n,
                                                   " values, the proto has ", values.size()));
  }
  return absl::OkStatus();
}

template <typename T, typename Field>
absl::Status CopyHalf(const Field& values, Tensor* tensor, absl::string_view name) {
  const int64_t n = tensor->num_elements();
  T* out = tensor->data<T>();
  if (values.size() != n && values.size() != 1 && !(values.size() == 0 && n == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' of shape ",
                                                   tensor->shape().ToString(), " needs ", n,
                                                   " values, the proto has ", values.size()));
  }
  for (int64_t i = 0; i < n; ++i) {
    out[i].bits = static_cast<uint16_t>(values.Get(values.size() == 1 ? 0 : i));
  }
  return absl::OkStatus();
}

}  // namespace

// How many values of `dtype` the proto's typed field holds.
static int ValueCount(const tensorflow::TensorProto& proto, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return proto.float_val_size();
    case DType::kFloat64:
      return proto.double_val_size();
    case DType::kFloat16:
    case DType::kBFloat16:
      return proto.half_val_size();
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kInt32:
      return proto.int_val_size();
    case DType::kUInt32:
      return proto.uint32_val_size();
    case DType::kInt64:
      return proto.int64_val_size();
    case DType::kUInt64:
      return proto.uint64_val_size();
    case DType::kBool:
      return proto.bool_val_size();
    case DType::kString:
      return proto.string_val_size();
    case DType::kInvalid:
      break;
  }
  return 0;
}

absl::StatusOr<Tensor> TensorFromProto(const tensorflow::TensorProto& proto, absl::string_view name,
                                       size_t max_fill_bytes) {
  auto dtype_or = DTypeFromProto(proto.dtype());
  if (!dtype_or.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", dtype_or.status().message()));
  }
  const DType dtype = *dtype_or;
  if (proto.tensor_shape().unknown_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has an unknown rank"));
  }
  std::vector<int64_t> dims;
  for (const auto& dim : proto.tensor_shape().dim()) {
    if (dim.size() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has a negative dimension ", dim.size()));
    }
    dims.push_back(dim.size());
  }
  // The declared shape is checked against the values sent before anything is allocated: a
  // shape is a number a client sends, the values are what it actually sent.
  const Shape shape(dims);
  auto count = CheckedNumElements(dims);
  if (!count.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "': declared shape and data size disagree: ", count.status().message()));
  }
  const int64_t n = *count;
  if (dtype != DType::kString && !proto.tensor_content().empty()) {
    const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
    if (proto.tensor_content().size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': declared shape and data size disagree: tensor_content has ",
          proto.tensor_content().size(), " bytes, shape ", shape.ToString(), " of ",
          DTypeName(dtype), " needs ", bytes));
    }
    KILN_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, shape));
    std::memcpy(tensor.raw_data(), proto.tensor_content().data(), bytes);
    return tensor;
  }
  const int values = ValueCount(proto, dtype);
  if (values != n && values != 1 && !(values == 0 && n == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': declared shape and data size disagree: shape ",
                     shape.ToString(), " needs ", n, " values, the proto has ", values));
  }
  // One value fills the whole shape (TensorFlow's rule), so a few bytes can ask for any size:
  // what one value expands to is held to the run memory budget (a run could not hold more).
  if (values == 1 && n > 1) {
    const size_t budget = max_fill_bytes != 0 ? max_fill_bytes : MemoryBudget::DefaultLimit();
    const size_t per_element = FilledElementBytes(proto, dtype);
    if (static_cast<size_t>(n) > budget / per_element) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensor '", name, "': one value repeated to shape ", shape.ToString(), " needs ", n,
          " x ", per_element, " bytes, over the run memory budget of ", budget, " bytes"));
    }
  }
  KILN_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, shape));
  absl::Status status;
  switch (dtype) {
    case DType::kFloat32:
      status = CopyTyped<float>(proto.float_val(), &tensor, name);
      break;
    case DType::kFloat64:
      status = CopyTyped<double>(proto.double_val(), &tensor, name);
      break;
    case DType::kFloat16:
      status = CopyHalf<Float16>(proto.half_val(), &tensor, name);
      break;
    case DType::kBFloat16:
      status = CopyHalf<BFloat16>(proto.half_val(), &tensor, name);
      break;
    case DType::kInt8:
      status = CopyTyped<int8_t>(proto.int_val(), &tensor, name);
      break;
    case DType::kUInt8:
      status = CopyTyped<uint8_t>(proto.int_val(), &tensor, name);
      break;
    case DType::kInt16:
      status = CopyTyped<int16_t>(proto.int_val(), &tensor, name);
      break;
    case DType::kUInt16:
      status = CopyTyped<uint16_t>(proto.int_val(), &tensor, name);
      break;
    case DType::kInt32:
      status = CopyTyped<int32_t>(proto.int_val(), &tensor, name);
      break;
    case DType::kUInt32:
      status = CopyTyped<uint32_t>(proto.uint32_val(), &tensor, name);
      break;
    case DType::kInt64:
      status = CopyTyped<int64_t>(proto.int64_val(), &tensor, name);
      break;
    case DType::kUInt64:
      status = CopyTyped<uint64_t>(proto.uint64_val(), &tensor, name);
      break;
    case DType::kBool:
      status = CopyTyped<bool>(proto.bool_val(), &tensor, name);
      break;
    case DType::kString: {
      const int64_t n = tensor.num_elements();
      const auto& values = proto.string_val();
      if (values.size() != n && values.size() != 1 && !(values.size() == 0 && n == 0)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' of shape ",
                                                       tensor.shape().ToString(), " needs ", n,
                                                       " values, the proto has ", values.size()));
      }
      std::string* out = tensor.data<std::string>();
      for (int64_t i = 0; i < n; ++i) out[i] = values.Get(values.size() == 1 ? 0 : i);
      break;
    }
    case DType::kInvalid:
      break;
  }
  if (!status.ok()) return status;
  return tensor;
}

void ShapeToProto(bool rank_known, const std::vector<int64_t>& dims,
                  tensorflow::TensorShapeProto* proto) {
  proto->Clear();
  if (!rank_known) {
    proto->set_unknown_rank(true);
    return;
  }
  for (int64_t d : dims) proto->add_dim()->set_size(d);
}

void TensorToProto(const Tensor& tensor, tensorflow::TensorProto* proto) {
  proto->Clear();
  proto->set_dtype(ToTfDataType(tensor.dtype()));
  ShapeToProto(true, tensor.shape().ToVector(), proto->mutable_tensor_shape());
  const int64_t n = tensor.num_elements();
  auto add_all = [&](auto* field, auto tag) {
    using T = decltype(tag);
    field->Reserve(n);
    const T* data = tensor.data<T>();
    for (int64_t i = 0; i < n; ++i) field->Add(data[i]);
  };
  switch (tensor.dtype()) {
    case DType::kFloat32:
      add_all(proto->mutable_float_val(), float{});
      break;
    case DType::kFloat64:
      add_all(proto->mutable_double_val(), double{});
      break;
    case DType::kInt8:
      add_all(proto->mutable_int_val(), int8_t{});
      break;
    case DType::kUInt8:
      add_all(proto->mutable_int_val(), uint8_t{});
      break;
    case DType::kInt16:
      add_all(proto->mutable_int_val(), int16_t{});
      break;
    case DType::kUInt16:
      add_all(proto->mutable_int_val(), uint16_t{});
      break;
    case DType::kInt32:
      add_all(proto->mutable_int_val(), int32_t{});
      break;
    case DType::kUInt32:
      add_all(proto->mutable_uint32_val(), uint32_t{});
      break;
    case DType::kInt64:
      add_all(proto->mutable_int64_val(), int64_t{});
      break;
    case DType::kUInt64:
      add_all(proto->mutable_uint64_val(), uint64_t{});
      break;
    case DType::kBool:
      add_all(proto->mutable_bool_val(), bool{});
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) proto->add_half_val(tensor.data<Float16>()[i].bits);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) proto->add_half_val(tensor.data<BFloat16>()[i].bits);
      break;
    case DType::kString:
      for (int64_t i = 0; i < n; ++i) proto->add_string_val(tensor.data<std::string>()[i]);
      break;
    case DType::kInvalid:
      break;
  }
}

}  // namespace kiln::data::formats
