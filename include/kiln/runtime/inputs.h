// Input tensors for tools and benchmarks: seeded random fill where a signature's input is
// not given, and tiling given inputs along the first dimension to a batch size.
#pragma once

#include <cstdint>
#include <random>

#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "kiln/runtime/model.h"

namespace kiln::runtime {

// The declared shape with unknown dimensions filled: the first with `batch` (when >= 1),
// the others with `other_dims`. An input of unknown rank becomes [batch] (or [1]).
Shape ConcreteShape(const TensorInfo& info, int64_t batch, int64_t other_dims = 1);

// Floats uniform in [-1, 1); integers small and non-negative ([0, 10), safe as indices);
// bools random; strings empty.
Tensor RandomTensor(DType dtype, const Shape& shape, std::mt19937_64& rng);

// `t` repeated along its first dimension to `rows` rows (rows i takes row i % t.dim(0)).
absl::StatusOr<Tensor> TileRows(const Tensor& t, int64_t rows);

}  // namespace kiln::runtime
