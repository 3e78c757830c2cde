#include "kernels/cpu/math_common.h"

#include <algorithm>

namespace kiln::kernels::math {

absl::StatusOr<Shape> BroadcastShapes(absl::Span<const Shape> shapes, absl::string_view where) {
  int rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.rank());
  std::vector<int64_t> out(rank, 1);
  for (int d = 0; d < rank; ++d) {
    int from = -1;  // the input that set out[d] to a size other than 1
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Shape& s = shapes[i];
      const int sd = d - (rank - s.rank());
      if (sd < 0) continue;
      const int64_t v = s[sd];
      if (v == 1) continue;
      if (out[d] == 1 && from < 0) {
        out[d] = v;
        from = static_cast<int>(i);
      } else if (out[d] != v) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": shapes ", shapes[from].ToString(), " (input ", from, ") and ",
            s.ToString(), " (input ", i, ") cannot be broadcast together"));
      }
    }
  }
  return Shape(out);
}

BroadcastIterator::BroadcastIterator(const Shape& out_shape, absl::Span<const Shape> in_shapes) {
  num_inputs_ = static_cast<int>(in_shapes.size());
  num_elements_ = out_shape.num_elements();
  const int rank = out_shape.rank();
  // Per-input strides aligned to the output's dims (0 where broadcast).
  std::vector<Dims> strides(num_inputs_, Dims(rank, 0));
  for (int i = 0; i < num_inputs_; ++i) {
    const Shape& s = in_shapes[i];
    int64_t stride = 1;
    for (int d = s.rank() - 1; d >= 0; --d) {
      const int od = d + rank - s.rank();
      strides[i][od] = s[d] == 1 ? 0 : stride;
      stride *= s[d];
    }
  }
  // Merge dims (dropping size-1 dims) from the innermost outwards.
  Dims dims;
  std::vector<Dims> merged(num_inputs_);
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t size = out_shape[d];
    if (size == 1) continue;
    bool can_merge = !dims.empty();
    if (can_merge) {
      for (int i = 0; i < num_inputs_; ++i) {
        if (strides[i][d] != merged[i].back() * dims.back()) {
          can_merge = false;
          break;
        }
      }
    }
    if (can_merge) {
      dims.back() *= size;
    } else {
      dims.push_back(size);
      for (int i = 0; i < num_inputs_; ++i) merged[i].push_back(strides[i][d]);
    }
  }
  // dims/merged are innermost-first here.
  inner_strides_.assign(num_inputs_, 0);
  if (dims.empty()) {
    inner_ = 1;
    return;
  }
  inner_ = dims[0];
  for (int i = 0; i < num_inputs_; ++i) inner_strides_[i] = merged[i][0];
  outer_dims_.assign(dims.rbegin(), dims.rend() - 1);
  outer_strides_.resize(num_inputs_);
  for (int i = 0; i < num_inputs_; ++i) {
    outer_strides_[i].assign(merged[i].rbegin(), merged[i].rend() - 1);
  }
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view where) {
  if (axis < -rank || axis >= std::max(rank, 1)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": axis ", axis,
                                                   " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

absl::StatusOr<std::vector<int64_t>> ReadIntValues(const Tensor& t, absl::string_view where,
                                                   absl::string_view what) {
  std::vector<int64_t> out;
  if (t.dtype() == DType::kInt64) {
    out.assign(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
  } else if (t.dtype() == DType::kInt32) {
    out.assign(t.data<int32_t>(), t.data<int32_t>() + t.num_elements());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " must be int32 or int64, got ",
                                                   DTypeName(t.dtype())));
  }
  return out;
}

}  // namespace kiln::kernels::math
