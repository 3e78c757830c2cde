// Value-dependent selection: NonZero, TopK, Unique.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::tensor_ops {
namespace {

// Comparison key of a numeric element: halves compare as float.
template <typename T>
auto Key(const T& v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}
template <typename K>
bool IsNan(const K& k) {
  if constexpr (std::is_floating_point_v<K>) {
    return std::isnan(k);
  } else {
    return false;
  }
}

// NonZero(X) -> int64[rank, count]: the coordinates of non-zero elements in row-major order.
class NonZeroKernel : public TensorKernel {
 public:
  explicit NonZeroKernel(const ir::Node& node) : TensorKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1) return Error("expects one input");
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kInt64;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const int64_t n = x.num_elements();
    std::vector<int64_t> hits;
    VisitDType(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* p = x.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        bool nz;
        if constexpr (std::is_same_v<T, std::string>) {
          nz = !p[i].empty();
        } else {
          nz = AsDouble(p[i]) != 0;
        }
        if (nz) hits.push_back(i);
      }
    });
    // A scalar reports like a one-element vector (numpy's behaviour for 0-d input).
    const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
    const int rank = shape.rank();
    const int64_t count = static_cast<int64_t>(hits.size());
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr,
                          ctx.Allocate(0, DType::kInt64, Shape{rank, count}));
    Tensor& out = *out_ptr;
    int64_t* o = out.data<int64_t>();
    for (int64_t h = 0; h < count; ++h) {
      int64_t rem = hits[h];
      for (int d = rank - 1; d >= 0; --d) {
        o[d * count + h] = rem % shape.dim(d);
        rem /= shape.dim(d);
      }
    }
    return absl::OkStatus();
  }
};

// TopK(X, K), axis (-1), largest (1), sorted (1) -> values, int64 indices. Ties keep the
// lower index first, as ONNX specifies; NaN ranks above every number.
class TopKKernel : public TensorKernel {
 public:
  explicit TopKKernel(const ir::Node& node)
      : TensorKernel(node),
        axis_attr_(node.GetInt("axis", -1)),
        largest_(node.GetInt("largest", 1) != 0),
        k_attr_(node.GetInt("k", -1)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty()) return Error("expects (X, K)");
    const Shape& x = ctx.inputs[0].shape;
    if (ctx.inputs[0].dtype == DType::kString) return Error("string input is not supported");
    auto a = NormalizeAxis(axis_attr_, x.rank(), "axis");
    if (!a.ok() || x.rank() == 0) return Error("axis ", axis_attr_, " invalid for ", x.ToString());
    axis_ = *a;
    ctx.SetNumOutputs(2);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_dtypes[1] = DType::kInt64;
    const Tensor* k = InputPresent(ctx, 1) ? ConstantInput(ctx, 1) : nullptr;
    dynamic_ = InputPresent(ctx, 1) && k == nullptr;
    if (dynamic_) {
      ctx.output_dynamic[0] = ctx.output_dynamic[1] = true;
      return absl::OkStatus();
    }
    auto s = OutShape(x, k);
    if (!s.ok()) return s.status();
    ctx.output_shapes[0] = ctx.output_shapes[1] = *s;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    if (dynamic_) {
      KILN_ASSIGN_OR_RETURN(Shape s, OutShape(x.shape(), &ctx.inputs[1]));
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, x.dtype(), s).status());
      KILN_RETURN_IF_ERROR(ctx.Allocate(1, DType::kInt64, s).status());
    }
    Tensor& values = ctx.outputs[0];
    Tensor& indices = ctx.outputs[1];
    const int64_t k = values.dim(axis_);
    const int64_t n = x.dim(axis_);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis_; ++d) outer *= x.dim(d);
    for (int d = axis_ + 1; d < x.rank(); ++d) inner *= x.dim(d);
    if (k == 0 || outer * inner == 0) return absl::OkStatus();
    VisitDType(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, std::string>) {
        using K = decltype(Key(T{}));
        const T* src = x.data<T>();
        T* vout = values.data<T>();
        int64_t* iout = indices.data<int64_t>();
        const bool largest = largest_;
        auto before = [largest](const std::pair<K, int64_t>& a, const std::pair<K, int64_t>& b) {
          const bool na = IsNan(a.first), nb = IsNan(b.first);
          if (na != nb) return largest ? na : nb;
          if (!na && a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
          return a.second < b.second;
        };
        auto work = [&](int64_t begin, int64_t end) {
          std::vector<std::pair<K, int64_t>> items(n);
          for (int64_t col = begin; col < end; ++col) {
            const int64_t o = col / inner, i = col % inner;
            const T* base = src + o * n * inner + i;
            for (int64_t j = 0; j < n; ++j) items[j] = {Key(base[j * inner]), j};
            if (k < n) {
              std::partial_sort(items.begin(), items.begin() + k, items.end(), before);
            } else {
              std::sort(items.begin(), items.end(), before);
            }
            for (int64_t j = 0; j < k; ++j) {
              const int64_t at = o * k * inner + j * inner + i;
              vout[at] = base[items[j].second * inner];
              iout[at] = items[j].second;
            }
          }
        };
        ctx.ParallelFor(outer * inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
                        work);
      }
    });
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Shape> OutShape(const Shape& x, const Tensor* k_tensor) const {
    int64_t k = k_attr_;
    if (k_tensor != nullptr) {
      auto v = ReadScalarInt(*k_tensor, "K");
      if (!v.ok()) return Annotate(v.status(), where());
      k = *v;
    }
    if (k < 0 || k > x.dim(axis_)) {
      return Error("K ", k, " out of range for axis ", axis_, " of size ", x.dim(axis_));
    }
    Shape s = x;
    s.set_dim(axis_, k);
    return s;
  }

  int64_t axis_attr_;
  bool largest_;
  int64_t k_attr_;
  int axis_ = 0;
  bool dynamic_ = false;
};

// Unique(X), sorted (1), axis (absent: flattened) -> Y, indices (first occurrence),
// inverse_indices, counts.
class UniqueKernel : public TensorKernel {
 public:
  explicit UniqueKernel(const ir::Node& node)
      : TensorKernel(node),
        sorted_(node.GetInt("sorted", 1) != 0),
        has_axis_(node.HasAttr("axis")),
        axis_attr_(node.GetInt("axis", 0)),
        num_outputs_(static_cast<int>(node.outputs.size())) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1) return Error("expects one input");
    const Shape& x = ctx.inputs[0].shape;
    if (has_axis_) {
      auto a = NormalizeAxis(axis_attr_, x.rank(), "axis");
      if (!a.ok() || x.rank() == 0) return Error("axis ", axis_attr_, " invalid for ", x.ToString());
      axis_ = *a;
    }
    ctx.SetNumOutputs(num_outputs_);
    for (int i = 0; i < num_outputs_; ++i) {
      ctx.output_dtypes[i] = i == 0 ? ctx.inputs[0].dtype : DType::kInt64;
      ctx.output_dynamic[i] = true;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    int64_t outer = 1, n = x.num_elements(), inner = 1;
    if (has_axis_) {
      n = x.dim(axis_);
      for (int d = 0; d < axis_; ++d) outer *= x.dim(d);
      for (int d = axis_ + 1; d < x.rank(); ++d) inner *= x.dim(d);
    }
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::vector<int64_t> group_of(n);
    std::vector<int64_t> firsts, counts;
    VisitDType(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* p = x.data<T>();
      // Lexicographic comparison of slices a and b: -1, 0 or 1.
      auto compare = [&](int64_t a, int64_t b) -> int {
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i = 0; i < inner; ++i) {
            const auto ka = Key(p[(o * n + a) * inner + i]);
            const auto kb = Key(p[(o * n + b) * inner + i]);
            if (ka < kb) return -1;
            if (kb < ka) return 1;
          }
        }
        return 0;
      };
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
      for (int64_t j = 0; j < n; ++j) {
        if (j == 0 || compare(order[j - 1], order[j]) != 0) {
          firsts.push_back(order[j]);
          counts.push_back(0);
        }
        group_of[order[j]] = static_cast<int64_t>(firsts.size()) - 1;
        ++counts.back();
      }
    });
    const int64_t groups = static_cast<int64_t>(firsts.size());
    // position[g]: where group g lands in the output.
    std::vector<int64_t> position(groups);
    std::iota(position.begin(), position.end(), 0);
    if (!sorted_) {
      std::vector<int64_t> by_first(groups);
      std::iota(by_first.begin(), by_first.end(), 0);
      std::sort(by_first.begin(), by_first.end(),
                [&](int64_t a, int64_t b) { return firsts[a] < firsts[b]; });
      for (int64_t i = 0; i < groups; ++i) position[by_first[i]] = i;
    }
    Shape y_shape{groups};
    if (has_axis_) {
      y_shape = x.shape();
      y_shape.set_dim(axis_, groups);
    }
    KILN_ASSIGN_OR_RETURN(Tensor* const y_ptr, ctx.Allocate(0, x.dtype(), y_shape));
    Tensor& y = *y_ptr;
    const size_t es = DTypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y.raw_data());
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t o = 0; o < outer; ++o) {
        CopyElements(x.dtype(), src + ((o * n + firsts[g]) * inner) * es,
                     dst + ((o * groups + position[g]) * inner) * es, inner);
      }
    }
    if (num_outputs_ > 1) {
      KILN_ASSIGN_OR_RETURN(Tensor* const idx_tensor,
                            ctx.Allocate(1, DType::kInt64, Shape{groups}));
      int64_t* idx = idx_tensor->data<int64_t>();
      for (int64_t g = 0; g < groups; ++g) idx[position[g]] = firsts[g];
    }
    if (num_outputs_ > 2) {
      KILN_ASSIGN_OR_RETURN(Tensor* const inv_tensor, ctx.Allocate(2, DType::kInt64, Shape{n}));
      int64_t* inv = inv_tensor->data<int64_t>();
      for (int64_t j = 0; j < n; ++j) inv[j] = position[group_of[j]];
    }
    if (num_outputs_ > 3) {
      KILN_ASSIGN_OR_RETURN(Tensor* const cnt_tensor,
                            ctx.Allocate(3, DType::kInt64, Shape{groups}));
      int64_t* cnt = cnt_tensor->data<int64_t>();
      for (int64_t g = 0; g < groups; ++g) cnt[position[g]] = counts[g];
    }
    return absl::OkStatus();
  }

 private:
  bool sorted_;
  bool has_axis_;
  int64_t axis_attr_;
  int num_outputs_;
  int axis_ = 0;
};

KILN_REGISTER_KERNEL_CLASS("", "NonZero", NonZeroKernel);
KILN_REGISTER_KERNEL_CLASS("", "TopK", TopKKernel);
KILN_REGISTER_KERNEL_CLASS("", "Unique", UniqueKernel);

}  // namespace

KILN_KERNEL_FILE(tensor_select);

}  // namespace kiln::kernels::tensor_ops
