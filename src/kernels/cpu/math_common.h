// Shared pieces of the math kernels (elementwise, activations, softmax, reductions): the
// kernel base with node-naming errors (kernel_base.h), numpy broadcasting as a run iterator,
// dtype helpers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kiln/core/dtype.h"
#include "kiln/core/status.h"
#include "kiln/core/tensor.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"
#include "kernels/cpu/kernel_base.h"
#include "kernels/cpu/simd/ops.h"

namespace kiln::kernels::math {

using Dims = absl::InlinedVector<int64_t, 8>;

// Elements per parallel task: small enough to use all intra-op threads on a 1 MB tensor,
// large enough that scheduling stays below a few percent of the work.
inline constexpr int64_t kParallelGrain = 16384;
inline constexpr int64_t kParallelGrainHeavy = 4096;  // transcendental ops

using MathKernel = NodeKernel;

// dtype classes ---------------------------------------------------------------------------
inline bool IsFloat(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 ||
         d == DType::kBFloat16;
}
inline bool IsSignedInt(DType d) {
  return d == DType::kInt8 || d == DType::kInt16 || d == DType::kInt32 || d == DType::kInt64;
}
inline bool IsUnsignedInt(DType d) {
  return d == DType::kUInt8 || d == DType::kUInt16 || d == DType::kUInt32 ||
         d == DType::kUInt64;
}
inline bool IsInt(DType d) { return IsSignedInt(d) || IsUnsignedInt(d); }
inline bool IsNumeric(DType d) { return IsFloat(d) || IsInt(d); }

// The type arithmetic on T runs in: float for the 16-bit floats, T otherwise.
template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<Float16> {
  using type = float;
};
template <>
struct ComputeTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// Calls fn(T{}) for numeric dtypes (floats incl. 16-bit, all integers); returns false for
// bool, string and invalid without calling it.
template <typename Fn>
bool VisitNumeric(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(float{}); return true;
    case DType::kFloat64: fn(double{}); return true;
    case DType::kFloat16: fn(Float16{}); return true;
    case DType::kBFloat16: fn(BFloat16{}); return true;
    case DType::kInt8: fn(int8_t{}); return true;
    case DType::kUInt8: fn(uint8_t{}); return true;
    case DType::kInt16: fn(int16_t{}); return true;
    case DType::kUInt16: fn(uint16_t{}); return true;
    case DType::kInt32: fn(int32_t{}); return true;
    case DType::kUInt32: fn(uint32_t{}); return true;
    case DType::kInt64: fn(int64_t{}); return true;
    case DType::kUInt64: fn(uint64_t{}); return true;
    default: return false;
  }
}

// Calls fn(T{}) for the floating-point dtypes (float32, float64, float16, bfloat16); returns
// false for every other dtype without calling it.
template <typename Fn>
bool VisitFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      fn(float{});
      return true;
    case DType::kFloat64:
      fn(double{});
      return true;
    case DType::kFloat16:
      fn(Float16{});
      return true;
    case DType::kBFloat16:
      fn(BFloat16{});
      return true;
    default:
      return false;
  }
}

// Numpy broadcasting -----------------------------------------------------------------------

// The broadcast of `shapes` (numpy rules), or an error naming the two shapes that clash.
absl::StatusOr<Shape> BroadcastShapes(absl::Span<const Shape> shapes, absl::string_view where);

// Iterates an output of `out_shape` as runs of contiguous output elements; in each run every
// input either advances one element per output element (stride 1) or repeats one element
// (stride 0). Adjacent dimensions that broadcast alike are merged first, so a same-shape
// operation is one run and [N, C] + [C] is N runs of C.
class BroadcastIterator {
 public:
  BroadcastIterator() = default;
  BroadcastIterator(const Shape& out_shape, absl::Span<const Shape> in_shapes);

  int num_inputs() const { return num_inputs_; }
  int64_t num_elements() const { return num_elements_; }
  int64_t inner() const { return inner_; }
  // Stride (0 or 1) of input i along the innermost run.
  int64_t inner_stride(int i) const { return inner_strides_[i]; }

  // Calls fn(out_offset, in_offsets (one per input), count) for the runs covering output
  // elements [begin, end).
  template <typename Fn>
  void ForEachRun(int64_t begin, int64_t end, Fn&& fn) const;

 private:
  int num_inputs_ = 0;
  int64_t num_elements_ = 0;
  int64_t inner_ = 1;
  Dims outer_dims_;                           // merged dims, excluding the innermost
  std::vector<Dims> outer_strides_;           // per input, per outer dim (elements)
  absl::InlinedVector<int64_t, 4> inner_strides_;
};

template <typename Fn>
void BroadcastIterator::ForEachRun(int64_t begin, int64_t end, Fn&& fn) const {
  if (begin >= end) return;
  const int nd = static_cast<int>(outer_dims_.size());
  absl::InlinedVector<int64_t, 8> index(nd, 0);
  absl::InlinedVector<int64_t, 4> offsets(num_inputs_, 0);
  int64_t row = begin / inner_;
  int64_t col = begin % inner_;
  {  // Unravel the starting row.
    int64_t r = row;
    for (int d = nd - 1; d >= 0; --d) {
      index[d] = r % outer_dims_[d];
      r /= outer_dims_[d];
    }
    for (int i = 0; i < num_inputs_; ++i) {
      int64_t off = 0;
      for (int d = 0; d < nd; ++d) off += index[d] * outer_strides_[i][d];
      offsets[i] = off;
    }
  }
  int64_t pos = begin;
  absl::InlinedVector<int64_t, 4> run_offsets(num_inputs_, 0);
  while (pos < end) {
    const int64_t count = std::min(inner_ - col, end - pos);
    for (int i = 0; i < num_inputs_; ++i) run_offsets[i] = offsets[i] + col * inner_strides_[i];
    fn(pos, run_offsets.data(), count);
    pos += count;
    col = 0;
    // Next row: increment the multi-index, updating offsets incrementally.
    for (int d = nd - 1; d >= 0; --d) {
      if (++index[d] < outer_dims_[d]) {
        for (int i = 0; i < num_inputs_; ++i) offsets[i] += outer_strides_[i][d];
        break;
      }
      index[d] = 0;
      for (int i = 0; i < num_inputs_; ++i) {
        offsets[i] -= (outer_dims_[d] - 1) * outer_strides_[i][d];
      }
    }
  }
}

// Input `i` of the node, or an invalid tensor when absent.
inline const Tensor& InputOrEmpty(const ComputeContext& ctx, int i) {
  static const Tensor kEmpty;
  return i < static_cast<int>(ctx.inputs.size()) ? ctx.inputs[i] : kEmpty;
}
inline bool Present(const ReshapeContext& ctx, int i) {
  return i < static_cast<int>(ctx.inputs.size()) && ctx.inputs[i].present();
}

// Maps axis in [-rank, rank) to [0, rank), or fails naming the node.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view where);

// Integer values of an int32/int64 tensor (axes, CumSum's axis).
absl::StatusOr<std::vector<int64_t>> ReadIntValues(const Tensor& t, absl::string_view where,
                                                   absl::string_view what);

// fp16/bf16 <-> float over arrays.
template <typename H>
inline void HalfToFloatArray(const H* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}
template <typename H>
inline void FloatToHalfArray(const float* in, H* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = H(in[i]);
}

}  // namespace kiln::kernels::math
