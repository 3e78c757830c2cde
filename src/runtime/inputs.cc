#include "kiln/runtime/inputs.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {

Shape ConcreteShape(const TensorInfo& info, int64_t batch, int64_t other_dims) {
  Shape shape;
  if (!info.rank_known) {
    shape.push_back(batch >= 1 ? batch : 1);
    return shape;
  }
  for (size_t i = 0; i < info.shape.size(); ++i) {
    const int64_t d = info.shape[i];
    if (d >= 0) {
      shape.push_back(d);
    } else if (i == 0 && batch >= 1) {
      shape.push_back(batch);
    } else {
      shape.push_back(other_dims);
    }
  }
  return shape;
}

Tensor RandomTensor(DType dtype, const Shape& shape, std::mt19937_64& rng) {
  Tensor t(dtype, shape);
  const int64_t n = t.num_elements();
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* data = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, std::string>) {
        data[i].clear();
      } else if constexpr (std::is_same_v<T, bool>) {
        data[i] = small(rng) % 2 == 1;
      } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        data[i] = static_cast<T>(real(rng));
      } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        data[i] = T(static_cast<float>(real(rng)));
      } else {
        data[i] = static_cast<T>(small(rng));
      }
    }
  });
  return t;
}

absl::StatusOr<Tensor> TileRows(const Tensor& t, int64_t rows) {
  if (t.rank() == 0) {
    return absl::InvalidArgumentError("a scalar input cannot be tiled to a batch size");
  }
  const int64_t have = t.dim(0);
  if (have == rows) return t;
  if (have == 0) {
    return absl::InvalidArgumentError("an input with no rows cannot be tiled to a batch size");
  }
  Shape shape = t.shape();
  shape.set_dim(0, rows);
  Tensor out(t.dtype(), shape);
  const int64_t row_elements = have == 0 ? 0 : t.num_elements() / have;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = r % have;
    if (t.dtype() == DType::kString) {
      for (int64_t i = 0; i < row_elements; ++i) {
        out.data<std::string>()[r * row_elements + i] =
            t.data<std::string>()[src * row_elements + i];
      }
    } else {
      const size_t bytes = row_elements * DTypeSize(t.dtype());
      std::memcpy(static_cast<char*>(out.raw_data()) + r * bytes,
                  static_cast<const char*>(t.raw_data()) + src * bytes, bytes);
    }
  }
  return out;
}

}  // namespace kiln::runtime
