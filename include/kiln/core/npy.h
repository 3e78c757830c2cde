// NumPy .npy files (format versions 1.0 to 3.0, little-endian, C order).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"

namespace kiln {

// Supported dtypes: f2 f4 f8 i1 u1 i2 u2 i4 u4 i8 u8 b1, and fixed-width bytes S<n> as string
// tensors (NumPy drops trailing NULs; so does Kiln). Errors name the file and what was
// wrong (bad magic, unsupported dtype, Fortran order, truncated data).
absl::StatusOr<Tensor> ReadNpy(const std::string& path);
absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes, const std::string& name_for_errors);
absl::Status WriteNpy(const std::string& path, const Tensor& tensor);
absl::StatusOr<std::string> SerializeNpy(const Tensor& tensor);

}  // namespace kiln
