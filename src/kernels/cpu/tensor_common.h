// Shared pieces of the tensor-manipulation kernels (shape, layout, indexing ops): reading
// integer inputs, axis normalization, error messages that name the node, and one strided-copy
// engine that Transpose, Slice, Expand, Tile, DepthToSpace and friends reduce to.
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
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "kiln/core/status.h"
#include "kiln/core/tensor.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"
#include "kernels/cpu/kernel_base.h"

namespace kiln::kernels::tensor_ops {

using Dims = absl::InlinedVector<int64_t, 8>;

using TensorKernel = NodeKernel;  // kernel_base.h

// Integer values of an int32/int64 (or other integer) tensor, as int64.
absl::StatusOr<std::vector<int64_t>> ReadInts(const Tensor& t, absl::string_view what);
// One integer from a scalar or one-element tensor.
absl::StatusOr<int64_t> ReadScalarInt(const Tensor& t, absl::string_view what);
// One value of a numeric tensor as double (for scalars like Pad's constant value).
double ReadAsDouble(const Tensor& t, int64_t index);
// Index `i` of an int32 or int64 index tensor (callers check the dtype).
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}
inline bool IsIndexType(DType d) { return d == DType::kInt32 || d == DType::kInt64; }

// The DType of an ONNX TensorProto.DataType number (attributes such as EyeLike's dtype or
// the window functions' output_datatype).
absl::StatusOr<DType> DTypeFromOnnx(int64_t v);

// Maps axis in [-rank, rank) to [0, rank), or fails naming `what`.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view what);

Dims RowMajorStrides(absl::Span<const int64_t> shape);

// The constant value of input `i` at Reshape time, or null.
inline const Tensor* ConstantInput(const ReshapeContext& ctx, int i) {
  return i < static_cast<int>(ctx.inputs.size()) ? ctx.inputs[i].constant : nullptr;
}
inline bool InputPresent(const ReshapeContext& ctx, int i) {
  return i < static_cast<int>(ctx.inputs.size()) && ctx.inputs[i].present();
}
// For a kernel whose output shape depends on the values of inputs `param_inputs`: `params`
// (one entry per input) gets each present one that is constant at Reshape. False, with output
// 0 marked dynamic, when a present one is not: the kernel is then Prepared at run time.
inline bool ConstantParams(ReshapeContext& ctx, const std::vector<int>& param_inputs,
                           std::vector<const Tensor*>* params) {
  params->assign(ctx.inputs.size(), nullptr);
  bool all_constant = true;
  for (int i : param_inputs) {
    if (!InputPresent(ctx, i)) continue;
    (*params)[i] = ConstantInput(ctx, i);
    if ((*params)[i] == nullptr) all_constant = false;
  }
  if (!all_constant) ctx.output_dynamic[0] = true;
  return all_constant;
}
inline bool InputPresent(const ComputeContext& ctx, int i) {
  return i < static_cast<int>(ctx.inputs.size()) && ctx.inputs[i].valid();
}

// Copies `n` elements (strings by value, everything else by bytes).
void CopyElements(DType dtype, const void* src, void* dst, int64_t n);
// Copies all of `src` into `dst` (same element count) unless they already share memory.
void CopyTensorData(const Tensor& src, Tensor& dst, const ComputeContext* ctx = nullptr);
// Fills `n` elements of dst with copies of the single element at `value`.
void FillElements(DType dtype, const void* value, void* dst, int64_t n);

// dst[i0, ..., ik] (row-major over `shape`, contiguous) =
//   src[src_offset + sum_j i_j * src_strides[j]]   (offsets and strides in elements).
// Strides may be zero (broadcast) or negative (reversed slices). Merges dims, takes a
// cache-blocked path when the source is transposed relative to the destination, and runs
// in parallel on ctx's pool when the copy is large.
void StridedCopy(DType dtype, const void* src, int64_t src_offset, absl::Span<const int64_t> shape,
                 absl::Span<const int64_t> src_strides, void* dst,
                 const ComputeContext* ctx = nullptr);

// Calls fn(T{}) with an unsigned integer type of the dtype's size, or std::string: for
// kernels that move elements without looking at them.
template <typename Fn>
decltype(auto) VisitBySize(DType dtype, Fn&& fn) {
  if (dtype == DType::kString) return fn(std::string{});
  switch (DTypeSize(dtype)) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    default: return fn(uint64_t{});
  }
}

// A numeric value as float/double for comparisons and arithmetic (Float16/BFloat16 convert).
template <typename T>
inline double AsDouble(const T& v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}
template <typename T>
inline T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}

// Broadcasts two shapes numpy-style; fails naming both.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// Sets output `i` to a copy of a small int64 vector (shape ops writing their results).
void WriteInts(Tensor& out, absl::Span<const int64_t> values);

}  // namespace kiln::kernels::tensor_ops
