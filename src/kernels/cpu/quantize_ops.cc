// ONNX's quantization operators, reference-exact: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.
//
// Rounding is round-half-to-even (std::nearbyint in the default rounding mode), saturating
// to the output integer type, as the ONNX spec and its NumPy reference (np.rint / np.round)
// do. Integer products accumulate in int32 like every int8 backend (the spec defines the
// integer ops in int32); requantization scales in float, as the reference does.
//
// These are correctness kernels for imported quantized models (plain loops over the
// output), and the reference the fast paths are tested against: under --allow_compression
// fuse_qdq (src/opt/fuse_qdq.cc) moves QLinearConv and QDQ Conv onto kiln::Int8Conv (oneDNN,
// within one step of these kernels), and fuse_qdq_matmul (src/opt/fuse_qdq_matmul.cc) moves
// QLinearMatMul and MatMulInteger with constant 2-D weights onto kiln::Int8MatMul (bit-identical
// to these kernels) and QDQ MatMul/Gemm (within one step of their float reference).
// ConvInteger, and the forms those passes do not take, still run here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/cpu/math_common.h"
#include "kernels/cpu/tensor_common.h"
#include "kiln/ir/conv_geometry.h"

namespace kiln::kernels::quantize {
namespace {

using math::IsFloat;
using math::MathKernel;
using math::Present;
using tensor_ops::AsDouble;
using tensor_ops::FromDouble;

bool IsQuantizedType(DType d) {
  return d == DType::kInt8 || d == DType::kUInt8 || d == DType::kInt16 || d == DType::kUInt16 ||
         d == DType::kInt32;
}

// Calls fn(T{}) for the integer types quantized tensors use.
template <typename Fn>
void VisitQuantized(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kInt8:
      fn(int8_t{});
      break;
    case DType::kUInt8:
      fn(uint8_t{});
      break;
    case DType::kInt16:
      fn(int16_t{});
      break;
    case DType::kUInt16:
      fn(uint16_t{});
      break;
    case DType::kInt32:
      fn(int32_t{});
      break;
    default:
      break;
  }
}

// Element i of a numeric tensor as double.
double ValueAt(const Tensor& t, int64_t i) { return tensor_ops::ReadAsDouble(t, i); }

// round-half-to-even, then clamp to Q's range.
template <typename Q>
Q Saturate(double v) {
  const double r = std::nearbyint(v);
  const double lo = static_cast<double>(std::numeric_limits<Q>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<Q>::max());
  if (std::isnan(r)) return Q(0);
  return static_cast<Q>(std::clamp(r, lo, hi));
}

// A scale or zero point that is a scalar (per-tensor) or 1-D along `axis` (per-axis).
// Returns the element count along the axis the parameter varies over (1 for per-tensor).
absl::StatusOr<int64_t> CheckQuantParam(const InputInfo& param, const Shape& x, int axis,
                                        absl::string_view name, absl::string_view where) {
  const int64_t n = param.shape.num_elements();
  if (param.shape.rank() == 0 || (param.shape.rank() == 1 && n == 1)) return 1;
  if (param.shape.rank() == 1 && x.rank() > axis && n == x[axis]) return n;
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": '", name, "' has shape ", param.shape.ToString(), "; expected a scalar or [",
      x.rank() > axis ? x[axis] : 0, "] (axis ", axis, " of ", x.ToString(), ")"));
}

// Shared by QuantizeLinear and DequantizeLinear: (x, scale, zero_point?) with `axis`.
class LinearQuantKernel : public MathKernel {
 protected:
  explicit LinearQuantKernel(const ir::Node& node)
      : MathKernel(node), axis_attr_(node.GetInt("axis", 1)) {
    if (node.GetInt("block_size", 0) != 0) SetAttrError(Error("block_size is not supported"));
  }

  absl::Status PrepareCommon(ReshapeContext& ctx, const char* x_name, const char* scale_name,
                             const char* zero_name) {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() < 2 || !ctx.inputs[0].present() || !ctx.inputs[1].present()) {
      return Error("needs inputs '", x_name, "' and '", scale_name, "'");
    }
    const Shape& x = ctx.inputs[0].shape;
    // The axis only matters (and must be valid) for per-axis parameters.
    axis_ = 0;
    if (ctx.inputs[1].shape.num_elements() != 1) {
      KILN_ASSIGN_OR_RETURN(axis_, math::NormalizeAxis(axis_attr_, x.rank(), where()));
    }
    KILN_ASSIGN_OR_RETURN(channels_, CheckQuantParam(ctx.inputs[1], x, axis_, scale_name, where()));
    if (!IsFloat(ctx.inputs[1].dtype)) {
      return Error("'", scale_name, "' must be float, got ", DTypeName(ctx.inputs[1].dtype));
    }
    if (Present(ctx, 2)) {
      KILN_ASSIGN_OR_RETURN(int64_t zc,
                            CheckQuantParam(ctx.inputs[2], x, axis_, zero_name, where()));
      if (zc != channels_) {
        return Error("'", scale_name, "' and '", zero_name, "' must have the same shape");
      }
    }
    inner_ = 1;
    for (int d = axis_ + 1; d < x.rank(); ++d) inner_ *= x[d];
    return absl::OkStatus();
  }

  // The per-axis parameter index of element i.
  int64_t Channel(int64_t i) const { return channels_ == 1 ? 0 : (i / inner_) % channels_; }

  // Calls fn(i, x[i], scale, zero_point) for every element i of x, with the scale and zero
  // point (0 without one) of i's channel.
  template <typename Fn>
  void ForEachElement(const ComputeContext& ctx, Fn&& fn) const {
    const Tensor& x = ctx.inputs[0];
    const Tensor& scale = ctx.inputs[1];
    const Tensor& zero = math::InputOrEmpty(ctx, 2);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const int64_t c = Channel(i);
      fn(i, ValueAt(x, i), ValueAt(scale, c), zero.valid() ? ValueAt(zero, c) : 0.0);
    }
  }

  int64_t axis_attr_;
  int axis_ = 0;
  int64_t channels_ = 1;
  int64_t inner_ = 1;
};

// y = saturate(round(x / scale) + zero_point); y's type is zero_point's (uint8 without it).
class QuantizeLinearKernel : public LinearQuantKernel {
 public:
  explicit QuantizeLinearKernel(const ir::Node& node) : LinearQuantKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareCommon(ctx, "x", "y_scale", "y_zero_point"));
    const DType xt = ctx.inputs[0].dtype;
    if (!IsFloat(xt) && xt != DType::kInt32) {
      return Error("'x' must be float or int32, got ", DTypeName(xt));
    }
    const DType yt = Present(ctx, 2) ? ctx.inputs[2].dtype : DType::kUInt8;
    if (!IsQuantizedType(yt) || yt == DType::kInt32) {
      return Error("'y_zero_point' must be int8, uint8, int16 or uint16, got ", DTypeName(yt));
    }
    DeclareOutputLikeInput0(ctx, yt, /*in_place_of_input0=*/false);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    Tensor& y = ctx.outputs[0];
    VisitQuantized(y.dtype(), [&](auto tag) {
      using Q = decltype(tag);
      Q* out = y.data<Q>();
      ForEachElement(ctx, [&](int64_t i, double x, double scale, double zp) {
        // Divide in float like the reference (x / y_scale in the input's precision).
        const float q = static_cast<float>(x) / static_cast<float>(scale);
        out[i] = Saturate<Q>(std::nearbyint(static_cast<double>(q)) + zp);
      });
    });
    return absl::OkStatus();
  }
};

// y = (x - zero_point) * scale, in scale's float type.
class DequantizeLinearKernel : public LinearQuantKernel {
 public:
  explicit DequantizeLinearKernel(const ir::Node& node) : LinearQuantKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(PrepareCommon(ctx, "x", "x_scale", "x_zero_point"));
    const DType xt = ctx.inputs[0].dtype;
    if (!IsQuantizedType(xt)) {
      return Error("'x' must be int8, uint8, int16, uint16 or int32, got ", DTypeName(xt));
    }
    if (Present(ctx, 2) && ctx.inputs[2].dtype != xt) {
      return Error("'x_zero_point' must have x's type ", DTypeName(xt), ", got ",
                   DTypeName(ctx.inputs[2].dtype));
    }
    DeclareOutputLikeInput0(ctx, ctx.inputs[1].dtype, /*in_place_of_input0=*/false);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    Tensor& y = ctx.outputs[0];
    math::VisitNumeric(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T> || math::kIsHalf<T>) {
        T* out = y.data<T>();
        ForEachElement(ctx, [&](int64_t i, double x, double scale, double zp) {
          // (x - zp) is exact in float for every 16-bit type; the product rounds once.
          out[i] = FromDouble<T>(static_cast<float>(x - zp) * static_cast<float>(scale));
        });
      }
    });
    return absl::OkStatus();
  }
};

// DynamicQuantizeLinear(x) -> (y uint8, y_scale, y_zero_point): the uint8 affine
// quantization whose range covers [min(x, 0), max(x, 0)].
class DynamicQuantizeLinearKernel : public MathKernel {
 public:
  explicit DynamicQuantizeLinearKernel(const ir::Node& node) : MathKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty() || ctx.inputs[0].dtype != DType::kFloat32) {
      return Error("'x' must be float32");
    }
    ctx.SetNumOutputs(3);
    ctx.output_dtypes = {DType::kUInt8, DType::kFloat32, DType::kUInt8};
    ctx.output_shapes = {ctx.inputs[0].shape, Shape{}, Shape{}};
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const float* in = x.data<float>();
    float lo = 0.f, hi = 0.f;
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      lo = std::min(lo, in[i]);
      hi = std::max(hi, in[i]);
    }
    const float scale = (hi - lo) / 255.f;
    uint8_t zero_point = 0;
    if (scale > 0) zero_point = Saturate<uint8_t>(std::nearbyint(0.f - lo / scale));
    uint8_t* y = ctx.outputs[0].data<uint8_t>();
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      y[i] = scale > 0 ? Saturate<uint8_t>(std::nearbyint(in[i] / scale) + zero_point) : 0;
    }
    ctx.outputs[1].data<float>()[0] = scale;
    ctx.outputs[2].data<uint8_t>()[0] = zero_point;
    return absl::OkStatus();
  }
};

// --- integer matrix multiplication ---------------------------------------------------------

// numpy matmul geometry: batch dims broadcast, 1-D operands promoted and their axis dropped.
struct MatMulGeometry {
  int64_t m = 1, k = 1, n = 1;
  Shape out;
  std::vector<int64_t> a_batch_offset, b_batch_offset;  // per output batch, in elements
};

absl::StatusOr<MatMulGeometry> MatMulShapes(const Shape& a, const Shape& b,
                                            absl::string_view where) {
  if (a.rank() == 0 || b.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": MatMul operands must not be scalars"));
  }
  std::vector<int64_t> ad = a.ToVector(), bd = b.ToVector();
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  MatMulGeometry g;
  g.m = ad[ad.size() - 2];
  g.k = ad.back();
  g.n = bd.back();
  if (bd[bd.size() - 2] != g.k) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": inner dimensions differ: A ", a.ToString(), ", B ", b.ToString()));
  }
  const size_t rank = std::max(ad.size(), bd.size());
  std::vector<int64_t> batch(rank - 2), sa(rank - 2, 0), sb(rank - 2, 0);
  int64_t stride_a = g.m * g.k, stride_b = g.k * g.n;
  for (int i = static_cast<int>(rank) - 3; i >= 0; --i) {
    const int ia = i - static_cast<int>(rank - ad.size());
    const int ib = i - static_cast<int>(rank - bd.size());
    const int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": batch dimensions do not broadcast: A ", a.ToString(), ", B ", b.ToString()));
    }
    batch[i] = da == 1 ? db : da;  // 1 broadcasts, 0 stays 0
    sa[i] = da == 1 ? 0 : stride_a;
    sb[i] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  for (int64_t t = 0; t < batches; ++t) {
    int64_t rem = t, oa = 0, ob = 0;
    for (int i = static_cast<int>(batch.size()) - 1; i >= 0; --i) {
      const int64_t idx = rem % batch[i];
      rem /= batch[i];
      oa += idx * sa[i];
      ob += idx * sb[i];
    }
    g.a_batch_offset.push_back(oa);
    g.b_batch_offset.push_back(ob);
  }
  std::vector<int64_t> out = batch;
  if (!a_vec) out.push_back(g.m);
  if (!b_vec) out.push_back(g.n);
  g.out = Shape(out);
  return g;
}

// acc[t, i, j] = sum_k (a[t, i, k] - a_zero[i]) * (b[t, k, j] - b_zero[j]) in int32. A zero
// point is a scalar (per tensor), per row of A, or per column of B.
void IntegerMatMul(const MatMulGeometry& g, const Tensor& a, const Tensor& b, const Tensor& a_zero,
                   const Tensor& b_zero, int32_t* acc) {
  auto zero = [](const Tensor& z, int64_t i) -> int32_t {
    if (!z.valid()) return 0;
    return static_cast<int32_t>(ValueAt(z, z.num_elements() == 1 ? 0 : i));
  };
  std::vector<int32_t> bz(g.n), az(g.m);
  for (int64_t j = 0; j < g.n; ++j) bz[j] = zero(b_zero, j);
  for (int64_t i = 0; i < g.m; ++i) az[i] = zero(a_zero, i);
  std::vector<int32_t> arow(g.k);
  for (size_t t = 0; t < g.a_batch_offset.size(); ++t) {
    int32_t* out = acc + static_cast<int64_t>(t) * g.m * g.n;
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t k = 0; k < g.k; ++k) {
        arow[k] = static_cast<int32_t>(ValueAt(a, g.a_batch_offset[t] + i * g.k + k)) - az[i];
      }
      for (int64_t j = 0; j < g.n; ++j) {
        int32_t sum = 0;
        for (int64_t k = 0; k < g.k; ++k) {
          const int32_t bv =
              static_cast<int32_t>(ValueAt(b, g.b_batch_offset[t] + k * g.n + j)) - bz[j];
          sum += arow[k] * bv;
        }
        out[i * g.n + j] = sum;
      }
    }
  }
}

bool Is8Bit(DType d) { return d == DType::kInt8 || d == DType::kUInt8; }

absl::Status CheckZeroPoint(const ReshapeContext& ctx, int i, DType data, int64_t allowed_len,
                            absl::string_view name, absl::string_view where) {
  if (!Present(ctx, i)) return absl::OkStatus();
  const InputInfo& z = ctx.inputs[i];
  if (z.dtype != data) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", name, "' must be ",
                                                   DTypeName(data), ", got ", DTypeName(z.dtype)));
  }
  const int64_t n = z.shape.num_elements();
  if (z.shape.rank() > 1 || (n != 1 && n != allowed_len)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", name, "' has shape ",
                                                   z.shape.ToString(), "; expected a scalar or [",
                                                   allowed_len, "]"));
  }
  return absl::OkStatus();
}

// Output 0 of the integer matmuls and convolutions: `dtype`, shape `out`. The requantizing
// ones (QLinear*) accumulate in scratch: one int32 per output element.
void DeclareIntegerOpOutput(ReshapeContext& ctx, DType dtype, const Shape& out,
                            bool accumulators_in_scratch) {
  ctx.SetNumOutputs(1);
  ctx.output_dtypes[0] = dtype;
  ctx.output_shapes[0] = out;
  if (accumulators_in_scratch) {
    ctx.scratch_bytes = sizeof(int32_t) * std::max<int64_t>(out.num_elements(), 1);
  }
}

// MatMulInteger(A, B, a_zero_point?, b_zero_point?) -> int32.
class MatMulIntegerKernel : public MathKernel {
 public:
  explicit MatMulIntegerKernel(const ir::Node& node) : MathKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 2 || !Is8Bit(ctx.inputs[0].dtype) || !Is8Bit(ctx.inputs[1].dtype)) {
      return Error("'A' and 'B' must be int8 or uint8");
    }
    KILN_ASSIGN_OR_RETURN(geometry_,
                          MatMulShapes(ctx.inputs[0].shape, ctx.inputs[1].shape, where()));
    KILN_RETURN_IF_ERROR(
        CheckZeroPoint(ctx, 2, ctx.inputs[0].dtype, geometry_.m, "a_zero_point", where()));
    KILN_RETURN_IF_ERROR(
        CheckZeroPoint(ctx, 3, ctx.inputs[1].dtype, geometry_.n, "b_zero_point", where()));
    DeclareIntegerOpOutput(ctx, DType::kInt32, geometry_.out, /*accumulators_in_scratch=*/false);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    IntegerMatMul(geometry_, ctx.inputs[0], ctx.inputs[1], math::InputOrEmpty(ctx, 2),
                  math::InputOrEmpty(ctx, 3), ctx.outputs[0].data<int32_t>());
    return absl::OkStatus();
  }

 private:
  MatMulGeometry geometry_;
};

// Requantizes int32 accumulators: y = saturate(round(acc * real_scale) + y_zero_point), the
// real scale being (input scale * weight scale) / output scale, per output column/channel.
template <typename Q>
void Requantize(const int32_t* acc, int64_t count, int64_t channels, int64_t inner,
                const std::vector<float>& real_scale, int32_t y_zero, Q* y) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = channels == 1 ? 0 : (i / inner) % channels;
    const float v = static_cast<float>(acc[i]) * real_scale[c];
    y[i] = Saturate<Q>(std::nearbyint(static_cast<double>(v)) + y_zero);
  }
}

absl::Status CheckScale(const ReshapeContext& ctx, int i, int64_t allowed_len,
                        absl::string_view name, absl::string_view where) {
  const InputInfo& s = ctx.inputs[i];
  const int64_t n = s.shape.num_elements();
  if (!s.present() || s.dtype != DType::kFloat32 || s.shape.rank() > 1 ||
      (n != 1 && n != allowed_len)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": '", name, "' must be a float32 scalar or [", allowed_len, "], got ",
        s.present() ? DTypeName(s.dtype) : "nothing", s.present() ? s.shape.ToString() : ""));
  }
  return absl::OkStatus();
}

// The output scale per channel: a_scale * b_scale[c] / y_scale (a and y per tensor).
std::vector<float> RealScales(const Tensor& a_scale, const Tensor& b_scale, const Tensor& y_scale) {
  std::vector<float> scales(b_scale.num_elements());
  const float a = static_cast<float>(ValueAt(a_scale, 0));
  const float y = static_cast<float>(ValueAt(y_scale, 0));
  for (int64_t c = 0; c < b_scale.num_elements(); ++c) {
    scales[c] = a * static_cast<float>(ValueAt(b_scale, c)) / y;
  }
  return scales;
}

// The operands of QLinearMatMul and QLinearConv: (in, in_scale, in_zero_point, weight,
// weight_scale, weight_zero_point, y_scale, y_zero_point, ...), `in` and `weight` naming the
// first and the fourth ('a' and 'b', or 'x' and 'w'). Their types:
absl::Status CheckQLinearTypes(const ReshapeContext& ctx, absl::string_view in,
                               absl::string_view weight, absl::string_view where) {
  if (!Is8Bit(ctx.inputs[0].dtype) || !Is8Bit(ctx.inputs[3].dtype) ||
      !Is8Bit(ctx.inputs[7].dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", in, "', '", weight,
                                                   "' and 'y_zero_point' must be int8 or uint8"));
  }
  return absl::OkStatus();
}

// ... and their scales and zero points: per tensor, but the weight's per tensor or per one of
// its `channels` output channels.
absl::Status CheckQLinearParams(const ReshapeContext& ctx, absl::string_view in,
                                absl::string_view weight, int64_t channels,
                                absl::string_view where) {
  const std::string in_s = absl::StrCat(in, "_scale"), in_z = absl::StrCat(in, "_zero_point");
  const std::string w_s = absl::StrCat(weight, "_scale"), w_z = absl::StrCat(weight, "_zero_point");
  KILN_RETURN_IF_ERROR(CheckScale(ctx, 1, 1, in_s, where));
  KILN_RETURN_IF_ERROR(CheckScale(ctx, 4, channels, w_s, where));
  KILN_RETURN_IF_ERROR(CheckScale(ctx, 6, 1, "y_scale", where));
  KILN_RETURN_IF_ERROR(CheckZeroPoint(ctx, 2, ctx.inputs[0].dtype, 1, in_z, where));
  KILN_RETURN_IF_ERROR(CheckZeroPoint(ctx, 5, ctx.inputs[3].dtype, channels, w_z, where));
  return CheckZeroPoint(ctx, 7, ctx.inputs[7].dtype, 1, "y_zero_point", where);
}

// Writes output 0 of QLinearMatMul / QLinearConv from the int32 accumulators `acc`: scales
// in_scale * weight_scale[c] / y_scale, output channel c every `inner` elements.
void RequantizeOutput(ComputeContext& ctx, const int32_t* acc, int64_t inner) {
  const std::vector<float> scales = RealScales(ctx.inputs[1], ctx.inputs[4], ctx.inputs[6]);
  const int32_t y_zero = static_cast<int32_t>(ValueAt(ctx.inputs[7], 0));
  Tensor& y = ctx.outputs[0];
  VisitQuantized(y.dtype(), [&](auto tag) {
    using Q = decltype(tag);
    Requantize<Q>(acc, y.num_elements(), static_cast<int64_t>(scales.size()), inner, scales, y_zero,
                  y.data<Q>());
  });
}

// QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point).
class QLinearMatMulKernel : public MathKernel {
 public:
  explicit QLinearMatMulKernel(const ir::Node& node) : MathKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 8) return Error("expects 8 inputs, got ", ctx.inputs.size());
    KILN_RETURN_IF_ERROR(CheckQLinearTypes(ctx, "a", "b", where()));
    KILN_ASSIGN_OR_RETURN(geometry_,
                          MatMulShapes(ctx.inputs[0].shape, ctx.inputs[3].shape, where()));
    KILN_RETURN_IF_ERROR(CheckQLinearParams(ctx, "a", "b", geometry_.n, where()));
    DeclareIntegerOpOutput(ctx, ctx.inputs[7].dtype, geometry_.out,
                           /*accumulators_in_scratch=*/true);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    int32_t* acc = static_cast<int32_t*>(ctx.scratch);
    IntegerMatMul(geometry_, ctx.inputs[0], ctx.inputs[3], ctx.inputs[2], ctx.inputs[5], acc);
    RequantizeOutput(ctx, acc, 1);
    return absl::OkStatus();
  }

 private:
  MatMulGeometry geometry_;
};

// --- integer convolution -------------------------------------------------------------------

// Conv attributes resolved against concrete shapes: x [N, C, spatial...], w [M, C/group, k...].
struct ConvGeometry {
  int64_t n = 0, c = 0, m = 0, group = 1;
  std::vector<int64_t> in, kernel, out, stride, dilation, pad_begin;
  Shape out_shape;
};

absl::StatusOr<ConvGeometry> ResolveConv(const ir::Node& node, const Shape& x, const Shape& w,
                                         absl::string_view where) {
  auto fail = [&](auto... args) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", args...));
  };
  if (x.rank() < 3 || w.rank() != x.rank()) {
    return fail("x ", x.ToString(), " and w ", w.ToString(),
                " must be [N, C, spatial...] and [M, C/group, kernel...]");
  }
  ConvGeometry g;
  const int sd = x.rank() - 2;
  g.n = x[0];
  g.c = x[1];
  g.m = w[0];
  g.group = node.GetInt("group", 1);
  if (g.group < 1 || g.c % g.group != 0 || g.m % g.group != 0 || w[1] * g.group != g.c) {
    return fail("channels do not match: x ", x.ToString(), ", w ", w.ToString(), ", group ",
                g.group);
  }
  std::vector<int64_t> kernel_attr = node.GetInts("kernel_shape", {});
  g.stride = node.GetInts("strides", {});
  g.dilation = node.GetInts("dilations", {});
  std::vector<int64_t> pads = node.GetInts("pads", {});
  if (g.stride.empty()) g.stride.assign(sd, 1);
  if (g.dilation.empty()) g.dilation.assign(sd, 1);
  if (pads.empty()) pads.assign(2 * sd, 0);
  if (static_cast<int>(g.stride.size()) != sd || static_cast<int>(g.dilation.size()) != sd ||
      static_cast<int>(pads.size()) != 2 * sd) {
    return fail("strides, dilations and pads must have ", sd, ", ", sd, " and ", 2 * sd, " values");
  }
  for (int d = 0; d < sd; ++d) {
    if (g.stride[d] < 1 || g.dilation[d] < 1) return fail("strides and dilations must be positive");
  }
  const std::string auto_pad_name = node.GetString("auto_pad", "NOTSET");
  const std::optional<ir::AutoPad> auto_pad = ir::ParseAutoPad(auto_pad_name);
  if (!auto_pad.has_value()) return fail("unknown auto_pad '", auto_pad_name, "'");
  Shape out;
  out.push_back(g.n);
  out.push_back(g.m);
  for (int d = 0; d < sd; ++d) {
    const int64_t in = x[d + 2], k = w[d + 2];
    if (!kernel_attr.empty() && kernel_attr[d] != k) {
      return fail("kernel_shape ", kernel_attr[d], " differs from w's ", k);
    }
    const ir::WindowAxis axis =
        ir::WindowOutputAxis(in, k, g.stride[d], g.dilation[d], pads[d], pads[d + sd], *auto_pad);
    const int64_t o = axis.out, begin = axis.pad_begin;
    if (o < 0) return fail("kernel larger than the padded input");
    g.in.push_back(in);
    g.kernel.push_back(k);
    g.out.push_back(o);
    g.pad_begin.push_back(begin);
    out.push_back(o);
  }
  g.out_shape = out;
  return g;
}

// acc[n, m, out...] = sum over (c in m's group, kernel taps) of (x - x_zero) * (w - w_zero[m]),
// with padding contributing zero (padding holds the zero point, as the spec says).
void IntegerConv(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& x_zero,
                 const Tensor& w_zero, int32_t* acc) {
  const int sd = static_cast<int>(g.in.size());
  const int32_t xz = x_zero.valid() ? static_cast<int32_t>(ValueAt(x_zero, 0)) : 0;
  int64_t in_size = 1, out_size = 1, k_size = 1;
  for (int d = 0; d < sd; ++d) {
    in_size *= g.in[d];
    out_size *= g.out[d];
    k_size *= g.kernel[d];
  }
  const int64_t cg = g.c / g.group, mg = g.m / g.group;
  std::vector<int64_t> opos(sd), kpos(sd);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t m = 0; m < g.m; ++m) {
      const int32_t wz =
          w_zero.valid() ? static_cast<int32_t>(ValueAt(w_zero, w_zero.num_elements() == 1 ? 0 : m))
                         : 0;
      const int64_t grp = m / mg;
      for (int64_t o = 0; o < out_size; ++o) {
        int64_t rem = o;
        for (int d = sd - 1; d >= 0; --d) {
          opos[d] = rem % g.out[d];
          rem /= g.out[d];
        }
        int32_t sum = 0;
        for (int64_t ci = 0; ci < cg; ++ci) {
          const int64_t c = grp * cg + ci;
          const int64_t x_base = (n * g.c + c) * in_size;
          const int64_t w_base = (m * cg + ci) * k_size;
          for (int64_t k = 0; k < k_size; ++k) {
            int64_t krem = k, off = 0;
            bool inside = true;
            for (int d = sd - 1; d >= 0; --d) {
              kpos[d] = krem % g.kernel[d];
              krem /= g.kernel[d];
            }
            for (int d = 0; d < sd && inside; ++d) {
              const int64_t p = opos[d] * g.stride[d] - g.pad_begin[d] + kpos[d] * g.dilation[d];
              inside = p >= 0 && p < g.in[d];
              off = off * g.in[d] + p;
            }
            if (!inside) continue;
            sum += (static_cast<int32_t>(ValueAt(x, x_base + off)) - xz) *
                   (static_cast<int32_t>(ValueAt(w, w_base + k)) - wz);
          }
        }
        acc[(n * g.m + m) * out_size + o] = sum;
      }
    }
  }
}

// ConvInteger(x, w, x_zero_point?, w_zero_point?) -> int32.
class ConvIntegerKernel : public MathKernel {
 public:
  explicit ConvIntegerKernel(const ir::Node& node) : MathKernel(node), node_(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 2 || !Is8Bit(ctx.inputs[0].dtype) || !Is8Bit(ctx.inputs[1].dtype)) {
      return Error("'x' and 'w' must be int8 or uint8");
    }
    KILN_ASSIGN_OR_RETURN(geometry_,
                          ResolveConv(node_, ctx.inputs[0].shape, ctx.inputs[1].shape, where()));
    KILN_RETURN_IF_ERROR(CheckZeroPoint(ctx, 2, ctx.inputs[0].dtype, 1, "x_zero_point", where()));
    KILN_RETURN_IF_ERROR(
        CheckZeroPoint(ctx, 3, ctx.inputs[1].dtype, geometry_.m, "w_zero_point", where()));
    DeclareIntegerOpOutput(ctx, DType::kInt32, geometry_.out_shape,
                           /*accumulators_in_scratch=*/false);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    IntegerConv(geometry_, ctx.inputs[0], ctx.inputs[1], math::InputOrEmpty(ctx, 2),
                math::InputOrEmpty(ctx, 3), ctx.outputs[0].data<int32_t>());
    return absl::OkStatus();
  }

 private:
  ir::Node node_;
  ConvGeometry geometry_;
};

// QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
// B?): the int32 bias B is added to the accumulators before requantization.
class QLinearConvKernel : public MathKernel {
 public:
  explicit QLinearConvKernel(const ir::Node& node) : MathKernel(node), node_(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 8) return Error("expects 8 or 9 inputs, got ", ctx.inputs.size());
    KILN_RETURN_IF_ERROR(CheckQLinearTypes(ctx, "x", "w", where()));
    KILN_ASSIGN_OR_RETURN(geometry_,
                          ResolveConv(node_, ctx.inputs[0].shape, ctx.inputs[3].shape, where()));
    KILN_RETURN_IF_ERROR(CheckQLinearParams(ctx, "x", "w", geometry_.m, where()));
    if (Present(ctx, 8) &&
        (ctx.inputs[8].dtype != DType::kInt32 || ctx.inputs[8].shape != Shape({geometry_.m}))) {
      return Error("'B' must be int32[", geometry_.m, "]");
    }
    DeclareIntegerOpOutput(ctx, ctx.inputs[7].dtype, geometry_.out_shape,
                           /*accumulators_in_scratch=*/true);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    int32_t* acc = static_cast<int32_t*>(ctx.scratch);
    IntegerConv(geometry_, ctx.inputs[0], ctx.inputs[3], ctx.inputs[2], ctx.inputs[5], acc);
    Tensor& y = ctx.outputs[0];
    int64_t spatial = 1;
    for (int64_t o : geometry_.out) spatial *= o;
    const Tensor& bias = math::InputOrEmpty(ctx, 8);
    if (bias.valid()) {
      for (int64_t i = 0; i < y.num_elements(); ++i) {
        acc[i] += bias.data<int32_t>()[(i / spatial) % geometry_.m];
      }
    }
    RequantizeOutput(ctx, acc, spatial);
    return absl::OkStatus();
  }

 private:
  ir::Node node_;
  ConvGeometry geometry_;
};

KILN_REGISTER_KERNEL_CLASS("", "QuantizeLinear", QuantizeLinearKernel);
KILN_REGISTER_KERNEL_CLASS("", "DequantizeLinear", DequantizeLinearKernel);
KILN_REGISTER_KERNEL_CLASS("", "DynamicQuantizeLinear", DynamicQuantizeLinearKernel);
KILN_REGISTER_KERNEL_CLASS("", "MatMulInteger", MatMulIntegerKernel);
KILN_REGISTER_KERNEL_CLASS("", "QLinearMatMul", QLinearMatMulKernel);
KILN_REGISTER_KERNEL_CLASS("", "ConvInteger", ConvIntegerKernel);
KILN_REGISTER_KERNEL_CLASS("", "QLinearConv", QLinearConvKernel);

}  // namespace

KILN_KERNEL_FILE(quantize_ops);

}  // namespace kiln::kernels::quantize
