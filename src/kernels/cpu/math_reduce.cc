// Reductions (ONNX opset 18 form: axes as an optional int64 input, keepdims,
// noop_with_empty_axes), ArgMax/ArgMin (keepdims, select_last_index) and CumSum (exclusive,
// reverse).
//
// Every reduction is reduced to one of two memory patterns after merging adjacent axes:
// rows (the reduced axes are innermost: vector horizontal loops) or columns (a kept block of
// `inner` contiguous elements follows the reduced axes: vertical accumulation, which the
// compiler vectorizes). Any other axis set is handled by repeated single-pattern passes.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cpu/math_common.h"

namespace kiln::kernels::math {
namespace {

enum class ReduceKind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Accumulator type: float sums stay float (vector lanes keep them accurate, as TF's do);
// 16-bit floats accumulate in float.
template <typename T>
using Acc = ComputeType<T>;

template <ReduceKind K, typename A>
inline A Init() {
  if constexpr (K == ReduceKind::kMax) {
    if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
    return std::numeric_limits<A>::lowest();
  } else if constexpr (K == ReduceKind::kMin) {
    if constexpr (std::is_floating_point_v<A>) return std::numeric_limits<A>::infinity();
    return std::numeric_limits<A>::max();
  } else if constexpr (K == ReduceKind::kProd) {
    return A(1);
  } else if constexpr (K == ReduceKind::kLogSumExp) {
    return A(0);
  } else {
    return A(0);
  }
}

// Pre-map of each element (for the sum family).
template <ReduceKind K, typename A>
inline A Map(A x) {
  if constexpr (K == ReduceKind::kL1) {
    if constexpr (std::is_signed_v<A> || std::is_floating_point_v<A>) return x < 0 ? A(-x) : x;
    return x;
  } else if constexpr (K == ReduceKind::kL2 || K == ReduceKind::kSumSquare) {
    return static_cast<A>(x * x);
  }
  return x;
}

template <ReduceKind K, typename A>
inline A Combine(A acc, A x) {
  if constexpr (K == ReduceKind::kMax) {
    if constexpr (std::is_floating_point_v<A>) {
      if (x != x || acc != acc) return x != x ? x : acc;
    }
    return x > acc ? x : acc;
  } else if constexpr (K == ReduceKind::kMin) {
    if constexpr (std::is_floating_point_v<A>) {
      if (x != x || acc != acc) return x != x ? x : acc;
    }
    return x < acc ? x : acc;
  } else if constexpr (K == ReduceKind::kProd) {
    return static_cast<A>(acc * x);
  } else {
    return static_cast<A>(acc + Map<K, A>(x));
  }
}

template <ReduceKind K, typename A>
inline A Finish(A acc, int64_t count) {
  if constexpr (K == ReduceKind::kMean) {
    return count == 0 ? (std::is_floating_point_v<A> ? std::numeric_limits<A>::quiet_NaN() : A(0))
                      : static_cast<A>(acc / static_cast<A>(count));
  } else if constexpr (K == ReduceKind::kL2) {
    return static_cast<A>(std::sqrt(static_cast<double>(acc)));
  } else if constexpr (K == ReduceKind::kLogSum) {
    return static_cast<A>(std::log(static_cast<double>(acc)));
  }
  return acc;
}

// A reduction over a sequence of merged dims, each either kept or reduced.
struct ReducePlan {
  int64_t outer = 1;   // product of kept dims before the reduced block
  int64_t reduce = 1;  // product of the reduced block
  int64_t inner = 1;   // product of kept dims after it
};

// Row reduction of n contiguous elements for one (K, T).
template <ReduceKind K, typename T>
Acc<T> ReduceRow(const T* in, int64_t n) {
  using A = Acc<T>;
  if constexpr (std::is_same_v<T, float>) {
    const simd::Kernels& k = simd::Best();
    if constexpr (K == ReduceKind::kSum || K == ReduceKind::kMean || K == ReduceKind::kLogSum) {
      return k.reduce_sum(in, n);
    } else if constexpr (K == ReduceKind::kSumSquare || K == ReduceKind::kL2) {
      return k.reduce_sum_square(in, n);
    } else if constexpr (K == ReduceKind::kL1) {
      return k.reduce_sum_abs(in, n);
    } else if constexpr (K == ReduceKind::kMax) {
      return k.reduce_max(in, n);
    } else if constexpr (K == ReduceKind::kMin) {
      return k.reduce_min(in, n);
    }
  }
  A acc = Init<K, A>();
  for (int64_t i = 0; i < n; ++i) acc = Combine<K, A>(acc, static_cast<A>(in[i]));
  return acc;
}

// out[o, j] = reduce_r in[o, r, j] for the plan; `out` holds Acc values before Finish.
template <ReduceKind K, typename T>
void ReducePass(const ComputeContext& ctx, const ReducePlan& p, const T* in, Acc<T>* acc_out) {
  using A = Acc<T>;
  if (p.inner == 1) {
    ctx.ParallelFor(p.outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(p.reduce, 1)),
                    [&](int64_t b, int64_t e) {
                      for (int64_t o = b; o < e; ++o) acc_out[o] = ReduceRow<K, T>(in + o * p.reduce, p.reduce);
                    });
    return;
  }
  // Columns: parallel over (outer, inner blocks of 256).
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (p.inner + kBlock - 1) / kBlock;
  ctx.ParallelFor(p.outer * blocks,
                  std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(p.reduce * kBlock, 1)),
                  [&](int64_t b, int64_t e) {
                    for (int64_t t = b; t < e; ++t) {
                      const int64_t o = t / blocks, j0 = (t % blocks) * kBlock;
                      const int64_t m = std::min(kBlock, p.inner - j0);
                      A* dst = acc_out + o * p.inner + j0;
                      for (int64_t j = 0; j < m; ++j) dst[j] = Init<K, A>();
                      const T* src = in + o * p.reduce * p.inner + j0;
                      for (int64_t r = 0; r < p.reduce; ++r) {
                        const T* row = src + r * p.inner;
                        for (int64_t j = 0; j < m; ++j) dst[j] = Combine<K, A>(dst[j], static_cast<A>(row[j]));
                      }
                    }
                  });
}

class ReduceKernel : public MathKernel {
 public:
  ReduceKernel(const ir::Node& node, ReduceKind kind)
      : MathKernel(node),
        kind_(kind),
        keepdims_(node.GetInt("keepdims", 1) != 0),
        noop_with_empty_axes_(node.GetInt("noop_with_empty_axes", 0) != 0),
        // Older opsets (and importers that keep them) may still carry axes as an attribute.
        attr_axes_(node.GetInts("axes", {})),
        has_attr_axes_(node.HasAttr("axes")) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    dynamic_axes_ = false;
    if (ctx.inputs.empty() || !ctx.inputs[0].present()) return Error("input 'data' is missing");
    const DType dt = ctx.inputs[0].dtype;
    const bool float_only = kind_ == ReduceKind::kLogSum || kind_ == ReduceKind::kLogSumExp ||
                            kind_ == ReduceKind::kL2;
    if (!(IsFloat(dt) || (!float_only && IsInt(dt)) ||
          (dt == DType::kBool && (kind_ == ReduceKind::kMax || kind_ == ReduceKind::kMin)))) {
      return Error("input dtype ", DTypeName(dt), " is not supported");
    }
    const Shape& s = ctx.inputs[0].shape;
    std::vector<int64_t> axes = attr_axes_;
    bool axes_given = has_attr_axes_;
    if (Present(ctx, 1)) {
      if (ctx.inputs[1].constant == nullptr) {
        // Axes fed at run time: the output shape depends on their values, so Compute
        // prepares a copy of this kernel for them (rare; allocates per run).
        dynamic_axes_ = true;
        ctx.SetNumOutputs(1);
        ctx.output_dtypes[0] = dt;
        ctx.output_dynamic[0] = true;
        return absl::OkStatus();
      }
      KILN_ASSIGN_OR_RETURN(axes, ReadIntValues(*ctx.inputs[1].constant, where(), "axes"));
      axes_given = true;
    }
    reduced_.assign(s.rank(), false);
    noop_ = false;
    if (!axes_given || axes.empty()) {
      if (noop_with_empty_axes_) {
        noop_ = true;
      } else {
        reduced_.assign(s.rank(), true);
      }
    } else {
      for (int64_t a : axes) {
        KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a, s.rank(), where()));
        if (reduced_[axis]) return Error("axis ", a, " appears twice in axes");
        reduced_[axis] = true;
      }
    }
    std::vector<int64_t> out_dims;
    count_ = 1;
    for (int d = 0; d < s.rank(); ++d) {
      if (!reduced_[d]) {
        out_dims.push_back(s[d]);
      } else {
        count_ *= s[d];
        if (keepdims_) out_dims.push_back(1);
      }
    }
    if (noop_) out_dims = s.ToVector();
    // Merged groups, outermost first: (size, reduced?).
    groups_.clear();
    for (int d = 0; d < s.rank(); ++d) {
      if (s[d] == 1) continue;
      if (!groups_.empty() && groups_.back().second == reduced_[d]) {
        groups_.back().first *= s[d];
      } else {
        groups_.emplace_back(s[d], reduced_[d]);
      }
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dt;
    ctx.output_shapes[0] = Shape(out_dims);
    // Scratch: two accumulator buffers sized for the first pass's output (later passes are
    // smaller); LogSumExp adds exp(x - max) for every input element and the maxima.
    const int64_t in_elems = std::max<int64_t>(s.num_elements(), 1);
    inter_ = in_elems;
    for (int g = static_cast<int>(groups_.size()) - 1; g >= 0; --g) {
      if (groups_[g].second) {
        inter_ = groups_[g].first > 0 ? in_elems / groups_[g].first : in_elems;
        break;
      }
    }
    inter_ = std::max<int64_t>(inter_, 1);
    int64_t words = 2 * inter_;
    if (kind_ == ReduceKind::kLogSumExp) words += in_elems + Shape(out_dims).num_elements();
    ctx.scratch_bytes = sizeof(double) * static_cast<size_t>(words) + 64;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    if (dynamic_axes_) return ComputeWithRuntimeAxes(ctx);
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    if (noop_) {
      if (in.raw_data() != out.raw_data()) std::memcpy(out.raw_data(), in.raw_data(), in.byte_size());
      return absl::OkStatus();
    }
    if (in.dtype() == DType::kBool) {
      // Max = any, Min = all.
      const bool* x = in.data<bool>();
      const int64_t n_out = out.num_elements();
      std::vector<uint8_t> tmp(in.num_elements());
      for (int64_t i = 0; i < in.num_elements(); ++i) tmp[i] = x[i];
      Tensor u8(DType::kUInt8, in.shape());
      std::memcpy(u8.raw_data(), tmp.data(), tmp.size());
      Tensor o8(DType::kUInt8, out.shape());
      RunTyped<uint8_t>(ctx, u8, o8);
      for (int64_t i = 0; i < n_out; ++i) out.data<bool>()[i] = o8.data<uint8_t>()[i] != 0;
      return absl::OkStatus();
    }
    VisitNumeric(in.dtype(), [&](auto tag) { RunTyped<decltype(tag)>(ctx, in, out); });
    return absl::OkStatus();
  }

 private:
  absl::Status ComputeWithRuntimeAxes(ComputeContext& ctx) const {
    ReduceKernel prepared(*this);
    prepared.dynamic_axes_ = false;
    ReshapeContext prepare;
    prepare.intra_op_threads = ctx.intra_op_threads;
    for (const Tensor& t : ctx.inputs) {
      InputInfo info;
      if (t.valid()) {
        info.dtype = t.dtype();
        info.shape = t.shape();
        info.constant = &t;
      }
      prepare.inputs.push_back(info);
    }
    prepare.inputs[0].constant = nullptr;
    KILN_RETURN_IF_ERROR(prepared.Reshape(prepare));
    KILN_RETURN_IF_ERROR(
        ctx.Allocate(0, prepare.output_dtypes[0], prepare.output_shapes[0]).status());
    std::shared_ptr<Buffer> scratch = Buffer::Allocate(prepare.scratch_bytes);
    ComputeContext sub = ctx;
    sub.scratch = scratch->data();
    return prepared.Compute(sub);
  }

  template <typename T>
  void RunTyped(const ComputeContext& ctx, const Tensor& in, Tensor& out) const {
    switch (kind_) {
#define KILN_REDUCE_CASE(K) \
  case ReduceKind::K: return RunKind<ReduceKind::K, T>(ctx, in, out);
      KILN_REDUCE_CASE(kSum) KILN_REDUCE_CASE(kMean) KILN_REDUCE_CASE(kMax)
      KILN_REDUCE_CASE(kMin) KILN_REDUCE_CASE(kProd) KILN_REDUCE_CASE(kL1)
      KILN_REDUCE_CASE(kSumSquare)
#undef KILN_REDUCE_CASE
      case ReduceKind::kL2:
      case ReduceKind::kLogSum:
      case ReduceKind::kLogSumExp:
        if constexpr (std::is_floating_point_v<Acc<T>>) {
          if (kind_ == ReduceKind::kL2) return RunKind<ReduceKind::kL2, T>(ctx, in, out);
          if (kind_ == ReduceKind::kLogSum) return RunKind<ReduceKind::kLogSum, T>(ctx, in, out);
          return RunLogSumExp<T>(ctx, in, out);
        }
        return;
    }
  }

  // Reduces `in` over the reduced groups into accumulators (before Finish). The first pass
  // reads T; later passes (axis sets with gaps) read accumulators and combine with the
  // combine step of K's family (sum for the sum family).
  template <ReduceKind K, typename T>
  const Acc<T>* Accumulate(const ComputeContext& ctx, const T* in, Acc<T>* buf_a,
                           Acc<T>* buf_b) const {
    using A = Acc<T>;
    std::vector<std::pair<int64_t, bool>> groups = groups_;
    if (groups.empty()) {  // scalar or all-ones shape: one element
      buf_a[0] = Combine<K, A>(Init<K, A>(), static_cast<A>(in[0]));
      return buf_a;
    }
    bool first = true;
    const A* src_acc = nullptr;
    A* dst = buf_a;
    while (true) {
      // Find the innermost reduced group.
      int last = -1;
      for (int g = static_cast<int>(groups.size()) - 1; g >= 0; --g) {
        if (groups[g].second) {
          last = g;
          break;
        }
      }
      if (last < 0) break;
      ReducePlan p;
      for (int g = 0; g < last; ++g) p.outer *= groups[g].first;
      p.reduce = groups[last].first;
      for (size_t g = last + 1; g < groups.size(); ++g) p.inner *= groups[g].first;
      if (first) {
        ReducePass<K, T>(ctx, p, in, dst);
      } else {
        // Later passes combine partial results: sum-family partials are already mapped.
        constexpr ReduceKind kNext = (K == ReduceKind::kMax || K == ReduceKind::kMin ||
                                      K == ReduceKind::kProd)
                                         ? K
                                         : ReduceKind::kSum;
        ReducePass<kNext, A>(ctx, p, src_acc, dst);
      }
      first = false;
      src_acc = dst;
      dst = dst == buf_a ? buf_b : buf_a;
      groups.erase(groups.begin() + last);
      // Re-merge neighbours that are now adjacent kept groups.
      if (last > 0 && last < static_cast<int>(groups.size()) && !groups[last - 1].second &&
          !groups[last].second) {
        groups[last - 1].first *= groups[last].first;
        groups.erase(groups.begin() + last);
      }
    }
    if (first) {  // nothing reduced (every reduced axis has size 1): copy
      const int64_t n = static_cast<int64_t>(1) * CountElements(groups);
      for (int64_t i = 0; i < n; ++i) buf_a[i] = Combine<K, A>(Init<K, A>(), static_cast<A>(in[i]));
      return buf_a;
    }
    return src_acc;
  }

  static int64_t CountElements(const std::vector<std::pair<int64_t, bool>>& groups) {
    int64_t n = 1;
    for (const auto& g : groups) n *= g.first;
    return n;
  }

  template <ReduceKind K, typename T>
  void RunKind(const ComputeContext& ctx, const Tensor& in, Tensor& out) const {
    using A = Acc<T>;
    const int64_t n_out = out.num_elements();
    if (n_out == 0) return;
    T* y = out.data<T>();
    if (in.num_elements() == 0) {  // reducing an empty axis: the identity element
      const A v = Finish<K, A>(Init<K, A>(), 0);
      for (int64_t i = 0; i < n_out; ++i) y[i] = static_cast<T>(v);
      return;
    }
    A* buf_a = static_cast<A*>(ctx.scratch);
    A* buf_b = buf_a + inter_;
    const A* acc = Accumulate<K, T>(ctx, in.data<T>(), buf_a, buf_b);
    for (int64_t i = 0; i < n_out; ++i) y[i] = static_cast<T>(Finish<K, A>(acc[i], count_));
  }

  // log(sum(exp(x - max))) + max, with the max reduced first for stability.
  template <typename T>
  void RunLogSumExp(const ComputeContext& ctx, const Tensor& in, Tensor& out) const {
    using A = Acc<T>;
    const int64_t n_out = out.num_elements();
    if (n_out == 0) return;
    T* y = out.data<T>();
    if (in.num_elements() == 0) {
      for (int64_t i = 0; i < n_out; ++i) y[i] = static_cast<T>(-std::numeric_limits<A>::infinity());
      return;
    }
    const int64_t n_in = in.num_elements();
    A* buf_a = static_cast<A*>(ctx.scratch);
    A* buf_b = buf_a + inter_;
    A* shifted = buf_b + inter_;
    A* maxima = shifted + n_in;
    const A* max = Accumulate<ReduceKind::kMax, T>(ctx, in.data<T>(), buf_a, buf_b);
    std::copy(max, max + n_out, maxima);
    // exp(x - max[out index of x]) into `shifted`, via the broadcast iterator from out to in.
    std::vector<int64_t> bdims;
    for (int d = 0; d < in.rank(); ++d) bdims.push_back(reduced_[d] ? 1 : in.dim(d));
    BroadcastIterator it(in.shape(), {Shape(bdims)});
    const T* x = in.data<T>();
    it.ForEachRun(0, n_in, [&](int64_t o, const int64_t* off, int64_t n) {
      const int64_t s = it.inner_stride(0);
      for (int64_t i = 0; i < n; ++i) {
        const A m = maxima[off[0] + i * s];
        const A v = static_cast<A>(x[o + i]);
        shifted[o + i] = std::isinf(m) ? (v == m ? A(1) : A(0)) : std::exp(v - m);
      }
    });
    const A* sums = Accumulate<ReduceKind::kSum, A>(ctx, shifted, buf_a, buf_b);
    for (int64_t i = 0; i < n_out; ++i) {
      y[i] = static_cast<T>(std::isinf(maxima[i]) || std::isnan(maxima[i])
                                ? maxima[i]
                                : maxima[i] + std::log(sums[i]));
    }
  }

  ReduceKind kind_;
  bool keepdims_;
  bool noop_with_empty_axes_;
  std::vector<int64_t> attr_axes_;
  bool has_attr_axes_;
  std::vector<bool> reduced_;
  std::vector<std::pair<int64_t, bool>> groups_;
  int64_t count_ = 1;
  int64_t inter_ = 1;
  bool noop_ = false;
  bool dynamic_axes_ = false;
};

// ArgMax / ArgMin along one axis; int64 output.
class ArgKernel : public MathKernel {
 public:
  ArgKernel(const ir::Node& node, bool is_max)
      : MathKernel(node),
        is_max_(is_max),
        axis_attr_(node.GetInt("axis", 0)),
        keepdims_(node.GetInt("keepdims", 1) != 0),
        select_last_(node.GetInt("select_last_index", 0) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1 || !ctx.inputs[0].present()) return Error("expects one input");
    const DType dt = ctx.inputs[0].dtype;
    if (!IsNumeric(dt)) return Error("input dtype ", DTypeName(dt), " is not numeric");
    const Shape& s = ctx.inputs[0].shape;
    KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_attr_, s.rank(), where()));
    if (s.rank() > 0 && s[axis] == 0) return Error("cannot take ", is_max_ ? "ArgMax" : "ArgMin", " over an empty axis ", axis);
    outer_ = inner_ = 1;
    n_ = s.rank() == 0 ? 1 : s[axis];
    std::vector<int64_t> dims;
    for (int d = 0; d < s.rank(); ++d) {
      if (d < axis) outer_ *= s[d];
      if (d > axis) inner_ *= s[d];
      if (d != axis) {
        dims.push_back(s[d]);
      } else if (keepdims_) {
        dims.push_back(1);
      }
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kInt64;
    ctx.output_shapes[0] = Shape(dims);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    int64_t* y = ctx.outputs[0].data<int64_t>();
    VisitNumeric(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using C = ComputeType<T>;
      const T* x = in.data<T>();
      const int64_t n = n_, inner = inner_;
      ctx.ParallelFor(outer_ * inner, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const int64_t o = c / inner, j = c % inner;
          const T* p = x + o * n * inner + j;
          C best = static_cast<C>(p[0]);
          int64_t arg = 0;
          bool best_nan = best != best;
          for (int64_t i = 1; i < n && !(best_nan && !select_last_); ++i) {
            const C v = static_cast<C>(p[i * inner]);
            // NaN wins (numpy); ties go to the first index unless select_last_index.
            bool take;
            if (v != v) {
              take = !best_nan || select_last_;
            } else if (best_nan) {
              take = false;
            } else {
              take = is_max_ ? (select_last_ ? v >= best : v > best)
                             : (select_last_ ? v <= best : v < best);
            }
            if (take) {
              best = v;
              arg = i;
              best_nan = v != v;
            }
          }
          y[c] = arg;
        }
      });
    });
    return absl::OkStatus();
  }

 private:
  bool is_max_;
  int64_t axis_attr_;
  bool keepdims_;
  bool select_last_;
  int64_t outer_ = 1, inner_ = 1, n_ = 1;
};

// CumSum(x, axis): running sums along one axis (exclusive, reverse attributes).
class CumSumKernel : public MathKernel {
 public:
  explicit CumSumKernel(const ir::Node& node)
      : MathKernel(node),
        exclusive_(node.GetInt("exclusive", 0) != 0),
        reverse_(node.GetInt("reverse", 0) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2 || !Present(ctx, 0) || !Present(ctx, 1)) {
      return Error("expects 2 inputs (x, axis)");
    }
    const DType dt = ctx.inputs[0].dtype;
    if (!IsNumeric(dt)) return Error("input dtype ", DTypeName(dt), " is not numeric");
    if (ctx.inputs[1].shape.num_elements() != 1) {
      return Error("axis must be a scalar, got shape ", ctx.inputs[1].shape.ToString());
    }
    if (ctx.inputs[1].dtype != DType::kInt32 && ctx.inputs[1].dtype != DType::kInt64) {
      return Error("axis must be int32 or int64, got ", DTypeName(ctx.inputs[1].dtype));
    }
    DeclareOutputLikeInput0(ctx, dt, /*in_place_of_input0=*/true);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    Tensor& out = ctx.outputs[0];
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axis_v, ReadIntValues(ctx.inputs[1], where(), "axis"));
    const Shape& s = in.shape();
    KILN_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_v[0], s.rank(), where()));
    if (in.num_elements() == 0) return absl::OkStatus();
    int64_t outer = 1, inner = 1;
    const int64_t n = s.rank() == 0 ? 1 : s[axis];
    for (int d = 0; d < axis; ++d) outer *= s[d];
    for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
    VisitNumeric(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using C = ComputeType<T>;
      const T* x = in.data<T>();
      T* y = out.data<T>();
      ctx.ParallelFor(outer * inner, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const int64_t o = c / inner, j = c % inner;
          const T* p = x + o * n * inner + j;
          T* q = y + o * n * inner + j;
          C acc = 0;
          for (int64_t k = 0; k < n; ++k) {
            const int64_t i = reverse_ ? n - 1 - k : k;
            const C v = static_cast<C>(p[i * inner]);
            if (exclusive_) {
              q[i * inner] = static_cast<T>(acc);
              acc = static_cast<C>(acc + v);
            } else {
              acc = static_cast<C>(acc + v);
              q[i * inner] = static_cast<T>(acc);
            }
          }
        }
      });
    });
    return absl::OkStatus();
  }

 private:
  bool exclusive_;
  bool reverse_;
};

KernelFactory ReduceFactory(ReduceKind kind) {
  return [kind](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new ReduceKernel(node, kind));
  };
}

KILN_REGISTER_KERNEL("", "ReduceSum", ReduceFactory(ReduceKind::kSum));
KILN_REGISTER_KERNEL("", "ReduceMean", ReduceFactory(ReduceKind::kMean));
KILN_REGISTER_KERNEL("", "ReduceMax", ReduceFactory(ReduceKind::kMax));
KILN_REGISTER_KERNEL("", "ReduceMin", ReduceFactory(ReduceKind::kMin));
KILN_REGISTER_KERNEL("", "ReduceProd", ReduceFactory(ReduceKind::kProd));
KILN_REGISTER_KERNEL("", "ReduceL1", ReduceFactory(ReduceKind::kL1));
KILN_REGISTER_KERNEL("", "ReduceL2", ReduceFactory(ReduceKind::kL2));
KILN_REGISTER_KERNEL("", "ReduceLogSum", ReduceFactory(ReduceKind::kLogSum));
KILN_REGISTER_KERNEL("", "ReduceLogSumExp", ReduceFactory(ReduceKind::kLogSumExp));
KILN_REGISTER_KERNEL("", "ReduceSumSquare", ReduceFactory(ReduceKind::kSumSquare));
KILN_REGISTER_KERNEL("", "ArgMax", [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
  return std::unique_ptr<OpKernel>(new ArgKernel(n, true));
});
KILN_REGISTER_KERNEL("", "ArgMin", [](const ir::Node& n) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
  return std::unique_ptr<OpKernel>(new ArgKernel(n, false));
});
KILN_REGISTER_KERNEL_CLASS("", "CumSum", CumSumKernel);

}  // namespace

KILN_KERNEL_FILE(math_reduce);

}  // namespace kiln::kernels::math
