#include "kiln/core/npy.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "kiln/core/status.h"

namespace kiln {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct NpyType {
  const char* descr;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {"<f4", DType::kFloat32}, {"<f2", DType::kFloat16}, {"<f8", DType::kFloat64},
    {"|i1", DType::kInt8},    {"|u1", DType::kUInt8},   {"<i2", DType::kInt16},
    {"<u2", DType::kUInt16},  {"<i4", DType::kInt32},   {"<u4", DType::kUInt32},
    {"<i8", DType::kInt64},   {"<u8", DType::kUInt64},  {"|b1", DType::kBool},
};

// Value of `key` in the header dict, e.g. 'descr': '<f4' -> "'<f4'".
absl::StatusOr<absl::string_view> DictValue(absl::string_view header, absl::string_view key,
                                           const std::string& name) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t pos = header.find(quoted);
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": .npy header has no ", quoted));
  }
  pos = header.find(':', pos + quoted.size());
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": malformed .npy header"));
  }
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(header.substr(pos + 1));
  size_t end;
  if (!rest.empty() && rest[0] == '(') {
    end = rest.find(')');
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": malformed shape in .npy header"));
    }
    return rest.substr(0, end + 1);
  }
  end = rest.find_first_of(",}");
  return absl::StripTrailingAsciiWhitespace(rest.substr(0, end));
}

}  // namespace

absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes, const std::string& name) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != absl::string_view(kMagic, 6)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a .npy file (bad magic)"));
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::InvalidArgumentError(absl::StrCat(name, ": truncated .npy header"));
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(name, ": unsupported .npy version ", major));
  }
  if (bytes.size() < header_start + header_len) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": truncated .npy header"));
  }
  absl::string_view header = bytes.substr(header_start, header_len);
  KILN_ASSIGN_OR_RETURN(absl::string_view descr, DictValue(header, "descr", name));
  KILN_ASSIGN_OR_RETURN(absl::string_view fortran, DictValue(header, "fortran_order", name));
  KILN_ASSIGN_OR_RETURN(absl::string_view shape_text, DictValue(header, "shape", name));
  descr = absl::StripPrefix(absl::StripSuffix(descr, "'"), "'");
  std::string normalized(descr);
  if (normalized == "<i1" || normalized == "i1") normalized = "|i1";
  if (normalized == "<u1" || normalized == "u1") normalized = "|u1";
  if (normalized == "<b1" || normalized == "b1") normalized = "|b1";
  DType dtype = DType::kInvalid;
  for (const NpyType& t : kTypes) {
    if (normalized == t.descr) dtype = t.dtype;
  }
  // Fixed-width bytes ('|S16'): string tensors such as serialized tf.Examples.
  int64_t bytes_width = 0;
  if (absl::ConsumePrefix(&descr, "|S") || absl::ConsumePrefix(&descr, "S")) {
    if (!absl::SimpleAtoi(descr, &bytes_width) || bytes_width < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": bad .npy bytes dtype 'S", descr, "'"));
    }
    dtype = DType::kString;
  }
  if (dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": unsupported .npy dtype '", descr,
        "' (supported: little-endian f2 f4 f8 i1 u1 i2 u2 i4 u4 i8 u8 b1)"));
  }
  if (fortran != "False") {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": Fortran-order .npy arrays are not supported; save with C order"));
  }
  Shape shape;
  shape_text = absl::StripSuffix(absl::StripPrefix(shape_text, "("), ")");
  for (absl::string_view part : absl::StrSplit(shape_text, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": bad shape in .npy header: (",
                                                      shape_text, ")"));
    }
    shape.push_back(d);
  }
  // The header's shape is checked against the bytes that follow it before anything is
  // allocated: a header can claim any shape.
  auto count = CheckedNumElements(shape.dims());
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": .npy header: ", count.status().message()));
  }
  const int64_t item_bytes =
      dtype == DType::kString ? bytes_width : static_cast<int64_t>(DTypeSize(dtype));
  int64_t need_signed;
  if (__builtin_mul_overflow(*count, item_bytes, &need_signed)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": .npy header: shape ", shape.ToString(),
                                                   " needs more bytes than fit in 63 bits"));
  }
  const size_t need = static_cast<size_t>(need_signed);
  const size_t data_start = header_start + header_len;
  if (bytes.size() - data_start < need) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": truncated .npy data: shape ", shape.ToString(), " needs ", need,
                     " bytes at offset ", data_start, ", file has ", bytes.size() - data_start));
  }
  KILN_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, shape));
  if (dtype == DType::kString) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      absl::string_view item = bytes.substr(data_start + i * bytes_width, bytes_width);
      // NumPy pads with NULs and drops trailing NULs when reading.
      while (!item.empty() && item.back() == '\0') item.remove_suffix(1);
      tensor.data<std::string>()[i] = std::string(item);
    }
    return tensor;
  }
  if (tensor.byte_size() > 0) std::memcpy(tensor.raw_data(), bytes.data() + data_start, tensor.byte_size());
  return tensor;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream content;
  content << file.rdbuf();
  return ParseNpy(content.str(), path);
}

absl::StatusOr<std::string> SerializeNpy(const Tensor& tensor) {
  std::string string_descr;
  size_t string_width = 1;
  const char* descr = nullptr;
  for (const NpyType& t : kTypes) {
    if (t.dtype == tensor.dtype()) descr = t.descr;
  }
  if (tensor.dtype() == DType::kString) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      string_width = std::max(string_width, tensor.data<std::string>()[i].size());
    }
    string_descr = absl::StrCat("|S", string_width);
    descr = string_descr.c_str();
  }
  if (tensor.dtype() == DType::kBFloat16) {
    return absl::InvalidArgumentError("bfloat16 has no .npy dtype; cast to float32 first");
  }
  if (descr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write a ", DTypeName(tensor.dtype()), " tensor as .npy"));
  }
  std::string shape = "(";
  for (int i = 0; i < tensor.rank(); ++i) absl::StrAppend(&shape, tensor.dim(i), ",");
  if (tensor.rank() > 1) shape.pop_back();
  shape += ")";
  std::string header =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces so that the data starts on a 64-byte boundary, ending in '\n'.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  if (tensor.dtype() == DType::kString) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      const std::string& item = tensor.data<std::string>()[i];
      out += item;
      out.append(string_width - item.size(), '\0');
    }
    return out;
  }
  out.append(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
  return out;
}

absl::Status WriteNpy(const std::string& path, const Tensor& tensor) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, SerializeNpy(tensor));
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot create ", path));
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace kiln
