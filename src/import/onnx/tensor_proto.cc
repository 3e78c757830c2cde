// onnx.TensorProto <-> kiln::Tensor.
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "import/onnx/onnx_internal.h"
#include "kiln/core/status.h"
#include "kiln/import/onnx.h"
#include "kiln/ir/onnx_types.h"

namespace kiln::import::onnx_internal {
namespace {

using ::onnx::TensorProto;

// Refuse tensors above 16 GiB: a corrupt dims field must not make us try to allocate it.
constexpr int64_t kMaxTensorBytes = int64_t{16} << 30;

std::string TensorLabel(const TensorProto& proto) {
  return proto.name().empty() ? std::string("unnamed tensor")
                              : absl::StrCat("tensor '", proto.name(), "'");
}

template <typename Dst, typename Field>
absl::Status CopyTyped(const Field& field, int64_t count, Tensor& out, const TensorProto& proto,
                       const char* field_name) {
  if (static_cast<int64_t>(field.size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat(TensorLabel(proto), ": shape has ", count,
                                                   " elements but ", field_name, " holds ",
                                                   field.size()));
  }
  Dst* dst = out.data<Dst>();
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<Dst, bool>) {
      dst[i] = field.Get(i) != 0;
    } else if constexpr (std::is_same_v<Dst, Float16> || std::is_same_v<Dst, BFloat16>) {
      dst[i].bits = static_cast<uint16_t>(field.Get(i));
    } else {
      dst[i] = static_cast<Dst>(field.Get(i));
    }
  }
  return absl::OkStatus();
}

// Where a tensor's external bytes lie, checked against the file before anything is allocated.
struct ExternalData {
  std::string path;
  int64_t offset = 0;
};

absl::StatusOr<ExternalData> LocateExternalData(const TensorProto& proto, const std::string& dir,
                                                int64_t expected_bytes) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& entry : proto.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      if (!absl::SimpleAtoi(entry.value(), &offset) || offset < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            TensorLabel(proto), ": external data offset '", entry.value(), "' is not a number"));
      }
    } else if (entry.key() == "length") {
      if (!absl::SimpleAtoi(entry.value(), &length) || length < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            TensorLabel(proto), ": external data length '", entry.value(), "' is not a number"));
      }
    }
  }
  if (location.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(proto), ": external data without a 'location' entry"));
  }
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(proto), ": data is in external file '", location,
                     "' but the model was given as bytes without a directory to resolve it"));
  }
  if (location[0] == '/' || location.find("..") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(proto), ": external data location '", location,
                     "' must be a path inside the model's directory"));
  }
  if (length >= 0 && length != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(TensorLabel(proto), ": external data length ",
                                                   length, " but the shape needs ", expected_bytes,
                                                   " bytes"));
  }
  const std::string path = absl::StrCat(dir, "/", location);
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat(TensorLabel(proto), ": cannot open external data file ", path));
  }
  file.seekg(0, std::ios::end);
  const int64_t file_size = static_cast<int64_t>(file.tellg());
  if (offset + expected_bytes > file_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        TensorLabel(proto), ": external data file ", path, " has ", file_size,
        " bytes; the tensor needs bytes [", offset, ", ", offset + expected_bytes, ")"));
  }
  return ExternalData{path, offset};
}

absl::Status ReadExternalData(const TensorProto& proto, const ExternalData& where, int64_t bytes,
                              void* dest) {
  std::ifstream file(where.path, std::ios::binary);
  file.seekg(where.offset);
  file.read(static_cast<char*>(dest), bytes);
  if (!file) {
    return absl::DataLossError(absl::StrCat(TensorLabel(proto), ": reading ", bytes,
                                            " bytes at offset ", where.offset, " of ", where.path,
                                            " failed"));
  }
  return absl::OkStatus();
}

// Values held by the typed field that `dtype` uses.
int64_t TypedFieldSize(const TensorProto& proto, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return proto.float_data_size();
    case DType::kFloat64:
      return proto.double_data_size();
    case DType::kInt64:
      return proto.int64_data_size();
    case DType::kUInt32:
    case DType::kUInt64:
      return proto.uint64_data_size();
    case DType::kString:
      return proto.string_data_size();
    default:
      return proto.int32_data_size();
  }
}

}  // namespace

absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type) {
  const DType dtype = ir::DTypeFromOnnxCode(onnx_type);
  if (dtype != DType::kInvalid) return dtype;
  return absl::UnimplementedError(
      absl::StrCat("ONNX element type ", OnnxTypeName(onnx_type), " is not supported"));
}

int32_t OnnxFromDType(DType dtype) { return ir::OnnxCodeFromDType(dtype); }

std::string OnnxTypeName(int32_t onnx_type) {
  if (TensorProto::DataType_IsValid(onnx_type)) {
    return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(onnx_type));
  }
  return absl::StrCat("#", onnx_type);
}

absl::StatusOr<Tensor> TensorFromProto(const TensorProto& proto,
                                       const std::string& external_data_dir) {
  if (proto.has_segment()) {
    return absl::UnimplementedError(
        absl::StrCat(TensorLabel(proto), ": segmented tensors are not supported"));
  }
  absl::StatusOr<DType> dtype = DTypeFromOnnx(proto.data_type());
  if (!dtype.ok()) return Annotate(dtype.status(), TensorLabel(proto));
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(proto), ": negative dimension ", d));
    }
    if (d != 0 && count > kMaxTensorBytes / d) {
      return absl::InvalidArgumentError(absl::StrCat(TensorLabel(proto), ": shape is too large"));
    }
    count *= d;
  }
  const int64_t elem_size = *dtype == DType::kString ? 0 : static_cast<int64_t>(DTypeSize(*dtype));
  if (count * elem_size > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat(TensorLabel(proto), ": ", count * elem_size,
                                                   " bytes is above the 16 GiB limit"));
  }
  // Check that the data is there before allocating: a corrupt file must not make us allocate
  // what its dims claim.
  const int64_t bytes = count * elem_size;
  if (proto.data_location() != TensorProto::EXTERNAL && *dtype != DType::kString) {
    const int64_t held = proto.has_raw_data() ? static_cast<int64_t>(proto.raw_data().size())
                                              : TypedFieldSize(proto, *dtype) * elem_size;
    if (held != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorLabel(proto), ": ", proto.has_raw_data() ? "raw_data" : "the typed data field",
          " has ", held, " bytes but shape ", Shape(dims).ToString(), " of ", DTypeName(*dtype),
          " needs ", bytes));
    }
  }
  if (*dtype == DType::kString && proto.string_data_size() != count) {
    return absl::InvalidArgumentError(absl::StrCat(TensorLabel(proto), ": shape has ", count,
                                                   " elements but string_data holds ",
                                                   proto.string_data_size()));
  }
  // External data is located (and the file's size checked) before allocating, for the same
  // reason: a model without its data file must not make us allocate what its dims claim.
  ExternalData external;
  if (proto.data_location() == TensorProto::EXTERNAL && *dtype != DType::kString) {
    KILN_ASSIGN_OR_RETURN(external, LocateExternalData(proto, external_data_dir, bytes));
  }
  Tensor out(*dtype, Shape(dims));
  if (*dtype == DType::kString) {
    if (proto.data_location() == TensorProto::EXTERNAL) {
      return absl::UnimplementedError(
          absl::StrCat(TensorLabel(proto), ": string tensors with external data"));
    }
    if (proto.string_data_size() != count) {
      return absl::InvalidArgumentError(absl::StrCat(TensorLabel(proto), ": shape has ", count,
                                                     " elements but string_data holds ",
                                                     proto.string_data_size()));
    }
    for (int64_t i = 0; i < count; ++i) out.data<std::string>()[i] = proto.string_data(i);
    return out;
  }
  if (proto.data_location() == TensorProto::EXTERNAL) {
    if (bytes > 0) KILN_RETURN_IF_ERROR(ReadExternalData(proto, external, bytes, out.raw_data()));
    return out;
  }
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorLabel(proto), ": raw_data has ", proto.raw_data().size(), " bytes but shape ",
          out.shape().ToString(), " of ", DTypeName(*dtype), " needs ", bytes));
    }
    if (bytes > 0) std::memcpy(out.raw_data(), proto.raw_data().data(), bytes);
    if (*dtype == DType::kBool) {
      // Any non-zero byte is true; normalize so kernels can rely on 0/1.
      for (int64_t i = 0; i < count; ++i) {
        uint8_t* p = static_cast<uint8_t*>(out.raw_data()) + i;
        *p = *p != 0;
      }
    }
    return out;
  }
  switch (*dtype) {
    case DType::kFloat32:
      KILN_RETURN_IF_ERROR(CopyTyped<float>(proto.float_data(), count, out, proto, "float_data"));
      break;
    case DType::kFloat64:
      KILN_RETURN_IF_ERROR(
          CopyTyped<double>(proto.double_data(), count, out, proto, "double_data"));
      break;
    case DType::kInt64:
      KILN_RETURN_IF_ERROR(CopyTyped<int64_t>(proto.int64_data(), count, out, proto, "int64_data"));
      break;
    case DType::kUInt32:
      KILN_RETURN_IF_ERROR(
          CopyTyped<uint32_t>(proto.uint64_data(), count, out, proto, "uint64_data"));
      break;
    case DType::kUInt64:
      KILN_RETURN_IF_ERROR(
          CopyTyped<uint64_t>(proto.uint64_data(), count, out, proto, "uint64_data"));
      break;
    case DType::kInt32:
      KILN_RETURN_IF_ERROR(CopyTyped<int32_t>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    case DType::kInt16:
      KILN_RETURN_IF_ERROR(CopyTyped<int16_t>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    case DType::kInt8:
      KILN_RETURN_IF_ERROR(CopyTyped<int8_t>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    case DType::kUInt16:
      KILN_RETURN_IF_ERROR(
          CopyTyped<uint16_t>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    case DType::kUInt8:
      KILN_RETURN_IF_ERROR(CopyTyped<uint8_t>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    case DType::kBool:
      KILN_RETURN_IF_ERROR(CopyTyped<bool>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    case DType::kFloat16:
      KILN_RETURN_IF_ERROR(CopyTyped<Float16>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    case DType::kBFloat16:
      KILN_RETURN_IF_ERROR(
          CopyTyped<BFloat16>(proto.int32_data(), count, out, proto, "int32_data"));
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat(TensorLabel(proto), ": unsupported dtype ", DTypeName(*dtype)));
  }
  return out;
}

absl::StatusOr<Tensor> TensorFromSparseProto(const ::onnx::SparseTensorProto& proto,
                                             const std::string& external_data_dir,
                                             int64_t* dense_bytes_left) {
  KILN_ASSIGN_OR_RETURN(Tensor values, TensorFromProto(proto.values(), external_data_dir));
  KILN_ASSIGN_OR_RETURN(Tensor indices, TensorFromProto(proto.indices(), external_data_dir));
  const std::string label = absl::StrCat("sparse tensor '", proto.values().name(), "'");
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  // Densifying allocates what the dims claim, so keep that well below memory sizes.
  constexpr int64_t kMaxDenseElements = int64_t{1} << 28;
  int64_t dense_count = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d != 0 && dense_count > kMaxDenseElements / d)) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": bad dimension ", d));
    }
    dense_count *= d;
  }
  if (values.rank() != 1 || indices.dtype() != DType::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": values must be rank 1 and indices int64"));
  }
  const int64_t nnz = values.dim(0);
  const int rank = static_cast<int>(dims.size());
  const bool linear = indices.rank() == 1;
  if (!(linear && indices.dim(0) == nnz) &&
      !(indices.rank() == 2 && indices.dim(0) == nnz && indices.dim(1) == rank)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": indices shape ",
                                                   indices.shape().ToString(), " does not fit ",
                                                   nnz, " values of rank ", rank));
  }
  // dense_count is below 2^28, so the product cannot overflow.
  const int64_t dense_bytes = dense_count * static_cast<int64_t>(values.dtype() == DType::kString
                                                                     ? sizeof(std::string)
                                                                     : DTypeSize(values.dtype()));
  if (dense_bytes > *dense_bytes_left) {
    return absl::ResourceExhaustedError(absl::StrCat(
        label, ": densifying shape ", Shape(dims).ToString(), " of ", DTypeName(values.dtype()),
        " needs ", dense_bytes, " bytes, and the model's sparse tensors may densify to ",
        kMaxDensifiedBytes, " bytes in all (", *dense_bytes_left, " left)"));
  }
  *dense_bytes_left -= dense_bytes;
  Tensor dense = Tensor::Zeros(values.dtype(), Shape(dims));
  const int64_t* idx = indices.data<int64_t>();
  const size_t elem = DTypeSize(values.dtype());
  for (int64_t i = 0; i < nnz; ++i) {
    int64_t flat = 0;
    if (linear) {
      flat = idx[i];
    } else {
      for (int r = 0; r < rank; ++r) {
        const int64_t c = idx[i * rank + r];
        if (c < 0 || c >= dims[r]) {
          flat = -1;
          break;
        }
        flat = flat * dims[r] + c;
      }
    }
    if (flat < 0 || flat >= dense_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": index of value ", i, " is outside shape ", dense.shape().ToString()));
    }
    if (values.dtype() == DType::kString) {
      dense.data<std::string>()[flat] = values.data<std::string>()[i];
    } else {
      std::memcpy(static_cast<char*>(dense.raw_data()) + flat * elem,
                  static_cast<const char*>(values.raw_data()) + i * elem, elem);
    }
  }
  return dense;
}

absl::StatusOr<TensorProto> TensorToProto(const Tensor& tensor, const std::string& name) {
  TensorProto proto;
  proto.set_name(name);
  const int32_t type = OnnxFromDType(tensor.dtype());
  if (type == TensorProto::UNDEFINED) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has no ONNX dtype"));
  }
  proto.set_data_type(type);
  for (int64_t d : tensor.shape().dims()) proto.add_dims(d);
  if (tensor.dtype() == DType::kString) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      proto.add_string_data(tensor.data<std::string>()[i]);
    }
  } else {
    proto.set_raw_data(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
  }
  return proto;
}

}  // namespace kiln::import::onnx_internal

namespace kiln::import {

absl::StatusOr<Tensor> ParseOnnxTensor(absl::string_view bytes, const std::string& name,
                                       const std::string& external_data_dir) {
  ::onnx::TensorProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a valid onnx.TensorProto (", bytes.size(), " bytes)"));
  }
  absl::StatusOr<Tensor> t = onnx_internal::TensorFromProto(proto, external_data_dir);
  if (!t.ok()) return Annotate(t.status(), name);
  return t;
}

absl::StatusOr<Tensor> ReadOnnxTensorFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::string dir = ".";
  if (size_t slash = path.rfind('/'); slash != std::string::npos) dir = path.substr(0, slash);
  return ParseOnnxTensor(bytes, path, dir);
}

absl::StatusOr<std::string> SerializeOnnxTensor(const Tensor& tensor, const std::string& name) {
  KILN_ASSIGN_OR_RETURN(::onnx::TensorProto proto, onnx_internal::TensorToProto(tensor, name));
  return proto.SerializeAsString();
}

}  // namespace kiln::import
