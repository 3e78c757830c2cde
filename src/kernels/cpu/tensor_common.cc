#include "kernels/cpu/tensor_common.h"

#include <algorithm>
#include <utility>

#include "kiln/ir/onnx_types.h"

namespace kiln::kernels::tensor_ops {

absl::StatusOr<std::vector<int64_t>> ReadInts(const Tensor& t, absl::string_view what) {
  if (!t.valid()) return absl::InvalidArgumentError(absl::StrCat(what, " is missing"));
  std::vector<int64_t> out(static_cast<size_t>(t.num_elements()));
  bool ok = true;
  VisitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* p = t.data<T>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(p[i]);
    } else {
      ok = false;
    }
  });
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an integer tensor, got ", DTypeName(t.dtype())));
  }
  return out;
}

absl::StatusOr<int64_t> ReadScalarInt(const Tensor& t, absl::string_view what) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, ReadInts(t, what));
  if (v.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must hold one value, got shape ", t.shape().ToString()));
  }
  return v[0];
}

double ReadAsDouble(const Tensor& t, int64_t index) {
  double out = 0;
  VisitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, std::string>) out = AsDouble(t.data<T>()[index]);
  });
  return out;
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view what) {
  if (axis < -rank || axis >= std::max(rank, 1) || (rank == 0 && axis != 0 && axis != -1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Dims RowMajorStrides(absl::Span<const int64_t> shape) {
  Dims strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

void CopyElements(DType dtype, const void* src, void* dst, int64_t n) {
  if (n <= 0 || src == dst) return;
  if (dtype == DType::kString) {
    const auto* s = static_cast<const std::string*>(src);
    auto* d = static_cast<std::string*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    std::memmove(dst, src, static_cast<size_t>(n) * DTypeSize(dtype));
  }
}

void CopyTensorData(const Tensor& src, Tensor& dst, const ComputeContext* ctx) {
  if (src.raw_data() == dst.raw_data()) return;
  const int64_t n = src.num_elements();
  const size_t esize = DTypeSize(src.dtype());
  if (ctx != nullptr && n * esize > (1 << 20)) {
    const char* s = static_cast<const char*>(src.raw_data());
    char* d = static_cast<char*>(dst.raw_data());
    ctx->ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
      CopyElements(src.dtype(), s + b * esize, d + b * esize, e - b);
    });
    return;
  }
  CopyElements(src.dtype(), src.raw_data(), dst.raw_data(), n);
}

void FillElements(DType dtype, const void* value, void* dst, int64_t n) {
  VisitBySize(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = *static_cast<const T*>(value);
    std::fill_n(static_cast<T*>(dst), n, v);
  });
}

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", a.ToString(), " and ",
                                                     b.ToString(), " cannot be broadcast"));
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

void WriteInts(Tensor& out, absl::Span<const int64_t> values) {
  if (out.dtype() == DType::kInt32) {
    for (size_t i = 0; i < values.size(); ++i) out.data<int32_t>()[i] = values[i];
  } else {
    std::copy(values.begin(), values.end(), out.data<int64_t>());
  }
}

absl::StatusOr<DType> DTypeFromOnnx(int64_t v) {
  const DType dtype = ir::DTypeFromOnnxCode(v);
  if (dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported ONNX dtype ", v));
  }
  return dtype;
}

namespace {

constexpr int64_t kParallelElements = 1 << 15;  // below this a copy is not worth splitting
constexpr int64_t kTile = 32;

// Copies rows [row_begin, row_end) of a copy whose last dim is the contiguous run of dst.
template <typename T>
void CopyRows(const T* src, T* dst, const Dims& shape, const Dims& strides, int64_t row_begin,
              int64_t row_end) {
  const int rank = static_cast<int>(shape.size());
  const int64_t inner = shape[rank - 1];
  const int64_t inner_stride = strides[rank - 1];
  Dims coord(rank - 1, 0);
  int64_t rem = row_begin, offset = 0;
  for (int d = rank - 2; d >= 0; --d) {
    coord[d] = rem % shape[d];
    rem /= shape[d];
    offset += coord[d] * strides[d];
  }
  T* out = dst + row_begin * inner;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* in = src + offset;
    if (inner_stride == 1) {
      if constexpr (std::is_trivially_copyable_v<T>) {
        std::memcpy(out, in, inner * sizeof(T));
      } else {
        std::copy(in, in + inner, out);
      }
    } else if (inner_stride == 0) {
      std::fill_n(out, inner, *in);
    } else {
      for (int64_t i = 0; i < inner; ++i) out[i] = in[i * inner_stride];
    }
    out += inner;
    for (int d = rank - 2; d >= 0; --d) {
      offset += strides[d];
      if (++coord[d] < shape[d]) break;
      offset -= coord[d] * strides[d];
      coord[d] = 0;
    }
  }
}

// Transposed copy: dim `a` has source stride 1 and the last dim has a large source stride.
// Works over tiles of (a, last) so both the reads and the writes stay within cache lines.
template <typename T>
void CopyTransposed(const T* src, T* dst, const Dims& shape, const Dims& strides, int a,
                    const ComputeContext* ctx) {
  const int rank = static_cast<int>(shape.size());
  const Dims dst_strides = RowMajorStrides(shape);
  // Outer dims: every dim except `a` and the last.
  Dims outer_dims;
  for (int d = 0; d < rank - 1; ++d) {
    if (d != a) outer_dims.push_back(d);
  }
  int64_t outer = 1;
  for (int d : outer_dims) outer *= shape[d];
  const int64_t na = shape[a], nb = shape[rank - 1];
  const int64_t sb = strides[rank - 1], dsa = dst_strides[a];
  const int64_t a_tiles = (na + kTile - 1) / kTile;
  auto work = [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      int64_t o = unit / a_tiles;
      const int64_t a0 = (unit % a_tiles) * kTile, a1 = std::min(na, a0 + kTile);
      int64_t src_off = 0, dst_off = 0;
      for (int k = static_cast<int>(outer_dims.size()) - 1; k >= 0; --k) {
        const int d = outer_dims[k];
        const int64_t c = o % shape[d];
        o /= shape[d];
        src_off += c * strides[d];
        dst_off += c * dst_strides[d];
      }
      for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
        const int64_t b1 = std::min(nb, b0 + kTile);
        for (int64_t i = a0; i < a1; ++i) {
          const T* in = src + src_off + i;
          T* out = dst + dst_off + i * dsa;
          for (int64_t j = b0; j < b1; ++j) out[j] = in[j * sb];
        }
      }
    }
  };
  const int64_t units = outer * a_tiles;
  if (ctx != nullptr && outer * na * nb >= kParallelElements) {
    ctx->ParallelFor(units, std::max<int64_t>(1, kParallelElements / (kTile * nb)), work);
  } else {
    work(0, units);
  }
}

template <typename T>
void StridedCopyTyped(const T* src, T* dst, Dims shape, Dims strides,
                      const ComputeContext* ctx) {
  // Drop unit dims, then merge neighbours that are contiguous relative to each other.
  Dims s, st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return;
    if (shape[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      st.back() = strides[i];
    } else {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  }
  if (s.empty()) {
    *dst = *src;
    return;
  }
  const int rank = static_cast<int>(s.size());
  int64_t total = 1;
  for (int64_t d : s) total *= d;
  if (st[rank - 1] != 1 && st[rank - 1] != 0 && s[rank - 1] >= 4) {
    for (int a = rank - 2; a >= 0; --a) {
      if (st[a] == 1 && s[a] >= 4) {
        CopyTransposed(src, dst, s, st, a, ctx);
        return;
      }
    }
  }
  const int64_t rows = total / s[rank - 1];
  if (ctx != nullptr && total >= kParallelElements && rows > 1) {
    ctx->ParallelFor(rows, std::max<int64_t>(1, kParallelElements / s[rank - 1]),
                     [&](int64_t b, int64_t e) { CopyRows(src, dst, s, st, b, e); });
  } else {
    CopyRows(src, dst, s, st, 0, rows);
  }
}

}  // namespace

void StridedCopy(DType dtype, const void* src, int64_t src_offset, absl::Span<const int64_t> shape,
                 absl::Span<const int64_t> src_strides, void* dst, const ComputeContext* ctx) {
  VisitBySize(dtype, [&](auto tag) {
    using T = decltype(tag);
    StridedCopyTyped(static_cast<const T*>(src) + src_offset, static_cast<T*>(dst),
                     Dims(shape.begin(), shape.end()), Dims(src_strides.begin(), src_strides.end()),
                     ctx);
  });
}

}  // namespace kiln::kernels::tensor_ops
