// Resize(X, roi?, scales?, sizes?): ONNX opset 19 semantics without antialias. Modes nearest
// (any dtype, strings too), linear and cubic (numeric), every coordinate_transformation_mode
// (tf_crop_and_resize with its roi and extrapolation_value, numeric only), the four
// nearest_modes, cubic_coeff_a, exclude_outside, axes and keep_aspect_ratio_policy.
// As in ONNX's reference, coordinates use the unrounded output length in * scale (which
// differs from the integer output length when scales, not sizes, are given).
//
// The interpolation is separable: each resized axis is one pass over the data with a
// precomputed table of (source index, weight) taps per output position, so the inner loop
// runs over the contiguous trailing dims. Out-of-range taps clamp to the edge, as ONNX's
// reference (edge padding) and PyTorch/TensorFlow do.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::tensor_ops {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize
};
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

struct AxisTaps {
  int64_t in = 0, out = 0;
  int taps = 1;                 // per output position
  std::vector<int64_t> index;   // out * taps
  std::vector<float> weight;    // out * taps
  // tf_crop_and_resize: per output position, the value added to the weighted taps
  // (extrapolation_value where the position falls outside the input, whose taps then
  // weigh 0). Empty otherwise.
  std::vector<float> bias;
  bool identity = false;
};

struct ResizePlan {
  Shape out_shape;
  std::vector<AxisTaps> axes;  // one per input dim
};

class ResizeKernel : public TensorKernel {
 public:
  explicit ResizeKernel(const ir::Node& node)
      : TensorKernel(node),
        cubic_a_(node.GetFloat("cubic_coeff_a", -0.75f)),
        exclude_outside_(node.GetInt("exclude_outside", 0) != 0),
        extrapolation_value_(node.GetFloat("extrapolation_value", 0.f)),
        axes_attr_(node.GetInts("axes")) {
    const std::string mode = node.GetString("mode", "nearest");
    if (mode == "nearest") {
      mode_ = Mode::kNearest;
    } else if (mode == "linear" || mode == "bilinear" || mode == "trilinear") {
      mode_ = Mode::kLinear;
    } else if (mode == "cubic" || mode == "bicubic") {
      mode_ = Mode::kCubic;
    } else {
      SetAttrError(Error("unknown mode '", mode, "'"));
    }
    const std::string coord = node.GetString("coordinate_transformation_mode", "half_pixel");
    if (coord == "half_pixel") {
      coord_ = Coord::kHalfPixel;
    } else if (coord == "half_pixel_symmetric") {
      coord_ = Coord::kHalfPixelSymmetric;
    } else if (coord == "pytorch_half_pixel") {
      coord_ = Coord::kPytorchHalfPixel;
    } else if (coord == "align_corners") {
      coord_ = Coord::kAlignCorners;
    } else if (coord == "asymmetric") {
      coord_ = Coord::kAsymmetric;
    } else if (coord == "tf_half_pixel_for_nn") {
      coord_ = Coord::kTfHalfPixelForNn;
    } else if (coord == "tf_crop_and_resize") {
      coord_ = Coord::kTfCropAndResize;
    } else {
      SetAttrError(Error("coordinate_transformation_mode '", coord, "' is not supported"));
    }
    const std::string nearest = node.GetString("nearest_mode", "round_prefer_floor");
    if (nearest == "round_prefer_floor") {
      nearest_ = Nearest::kRoundPreferFloor;
    } else if (nearest == "round_prefer_ceil") {
      nearest_ = Nearest::kRoundPreferCeil;
    } else if (nearest == "floor") {
      nearest_ = Nearest::kFloor;
    } else if (nearest == "ceil") {
      nearest_ = Nearest::kCeil;
    } else {
      SetAttrError(Error("unknown nearest_mode '", nearest, "'"));
    }
    const std::string policy = node.GetString("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      policy_ = 0;
    } else if (policy == "not_larger") {
      policy_ = 1;
    } else if (policy == "not_smaller") {
      policy_ = 2;
    } else {
      SetAttrError(Error("unknown keep_aspect_ratio_policy '", policy, "'"));
    }
    if (node.GetInt("antialias", 0) != 0) SetAttrError(Error("antialias is not supported"));
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty()) return Error("input X is missing");
    const DType dtype = ctx.inputs[0].dtype;
    if ((mode_ != Mode::kNearest || coord_ == Coord::kTfCropAndResize) &&
        (dtype == DType::kString || dtype == DType::kBool)) {
      return Error("linear/cubic resize and tf_crop_and_resize need a numeric input, got ",
                   DTypeName(dtype));
    }
    // Resize-10 and Upsample take (X, scales).
    if (ctx.inputs.size() == 2) scales_input_ = 1;
    if (!InputPresent(ctx, scales_input_) && !InputPresent(ctx, 3)) {
      return Error("needs scales or sizes");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dtype;
    const Tensor* scales =
        InputPresent(ctx, scales_input_) ? ConstantInput(ctx, scales_input_) : nullptr;
    const Tensor* sizes = InputPresent(ctx, 3) ? ConstantInput(ctx, 3) : nullptr;
    const bool uses_roi = coord_ == Coord::kTfCropAndResize;
    if (uses_roi && (scales_input_ != 2 || !InputPresent(ctx, 1))) {
      return Error("tf_crop_and_resize needs the roi input");
    }
    const Tensor* roi = uses_roi ? ConstantInput(ctx, 1) : nullptr;
    dynamic_ = (InputPresent(ctx, scales_input_) && scales == nullptr) ||
               (InputPresent(ctx, 3) && sizes == nullptr) || (uses_roi && roi == nullptr);
    if (dynamic_) {
      ctx.output_dynamic[0] = true;
      return absl::OkStatus();
    }
    auto plan = MakePlan(ctx.inputs[0].shape, scales, sizes, roi);
    if (!plan.ok()) return plan.status();
    plan_ = *std::move(plan);
    ctx.output_shapes[0] = plan_.out_shape;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const ResizePlan* plan = &plan_;
    ResizePlan dynamic_plan;
    if (dynamic_) {
      const Tensor* scales =
          InputPresent(ctx, scales_input_) ? &ctx.inputs[scales_input_] : nullptr;
      const Tensor* sizes = InputPresent(ctx, 3) ? &ctx.inputs[3] : nullptr;
      const Tensor* roi = coord_ == Coord::kTfCropAndResize ? &ctx.inputs[1] : nullptr;
      KILN_ASSIGN_OR_RETURN(dynamic_plan, MakePlan(x.shape(), scales, sizes, roi));
      plan = &dynamic_plan;
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, x.dtype(), plan->out_shape).status());
    }
    Tensor& y = ctx.outputs[0];
    if (y.num_elements() == 0) return absl::OkStatus();
    if (mode_ == Mode::kNearest && coord_ != Coord::kTfCropAndResize) {
      RunNearest(x, *plan, y, ctx);
    } else {
      RunInterpolated(x, *plan, y, ctx);
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<ResizePlan> MakePlan(const Shape& in, const Tensor* scales_t,
                                      const Tensor* sizes_t, const Tensor* roi_t) const {
    const int rank = in.rank();
    std::vector<int64_t> axes = axes_attr_;
    if (axes.empty()) {
      for (int i = 0; i < rank; ++i) axes.push_back(i);
    }
    for (int64_t& a : axes) {
      KILN_ASSIGN_OR_RETURN(int n, NormalizeAxis(a, rank, "axis"));
      a = n;
    }
    std::vector<double> scale(rank, 1.0);
    std::vector<int64_t> out(in.dims().begin(), in.dims().end());
    const bool use_sizes = sizes_t != nullptr && sizes_t->num_elements() > 0;
    if (use_sizes) {
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ReadInts(*sizes_t, "sizes"));
      if (sizes.size() != axes.size()) {
        return Error("sizes has ", sizes.size(), " values for ", axes.size(), " axes");
      }
      if (policy_ == 0) {
        for (size_t i = 0; i < axes.size(); ++i) {
          if (sizes[i] < 0) return Error("negative size ", sizes[i]);
          out[axes[i]] = sizes[i];
          scale[axes[i]] = in.dim(static_cast<int>(axes[i])) == 0
                               ? 1.0
                               : static_cast<double>(sizes[i]) / in.dim(static_cast<int>(axes[i]));
        }
      } else {
        double s = policy_ == 1 ? std::numeric_limits<double>::max() : 0.0;
        for (size_t i = 0; i < axes.size(); ++i) {
          const double r = static_cast<double>(sizes[i]) / in.dim(static_cast<int>(axes[i]));
          s = policy_ == 1 ? std::min(s, r) : std::max(s, r);
        }
        for (int64_t a : axes) {
          scale[a] = s;
          const double size = std::round(s * in.dim(static_cast<int>(a)));
          if (!(size <= 4611686018427387904.0)) {
            return Error("sizes make dimension ", a, " ", size, " long");
          }
          out[a] = static_cast<int64_t>(size);
        }
      }
    } else {
      if (scales_t == nullptr) return Error("needs scales or sizes");
      if (scales_t->dtype() != DType::kFloat32 && scales_t->dtype() != DType::kFloat64) {
        return Error("scales must be float, got ", DTypeName(scales_t->dtype()));
      }
      if (static_cast<size_t>(scales_t->num_elements()) != axes.size()) {
        return Error("scales has ", scales_t->num_elements(), " values for ", axes.size(),
                     " axes");
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        const double s = ReadAsDouble(*scales_t, static_cast<int64_t>(i));
        if (!(s > 0)) return Error("scale ", s, " must be positive");
        const double size = std::floor(in.dim(static_cast<int>(axes[i])) * s);
        // A scale from a request can ask for any size; beyond int64 it is an error, not UB.
        if (!(size <= 4611686018427387904.0)) {
          return Error("scale ", s, " makes dimension ", axes[i], " ", size, " long");
        }
        scale[axes[i]] = s;
        out[axes[i]] = static_cast<int64_t>(size);
      }
    }
    // roi: starts then ends, for the resized axes (or all axes); [0, 1] elsewhere.
    std::vector<double> roi_start(rank, 0.0), roi_end(rank, 1.0);
    if (roi_t != nullptr) {
      if (roi_t->dtype() != DType::kFloat32 && roi_t->dtype() != DType::kFloat64 &&
          roi_t->dtype() != DType::kFloat16) {
        return Error("roi must be float, got ", DTypeName(roi_t->dtype()));
      }
      if (static_cast<size_t>(roi_t->num_elements()) != 2 * axes.size()) {
        return Error("roi has ", roi_t->num_elements(), " values; expected ", 2 * axes.size(),
                     " (start and end for ", axes.size(), " axes)");
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        roi_start[axes[i]] = ReadAsDouble(*roi_t, static_cast<int64_t>(i));
        roi_end[axes[i]] = ReadAsDouble(*roi_t, static_cast<int64_t>(i + axes.size()));
      }
    }
    ResizePlan plan;
    plan.out_shape = Shape(out);
    for (int d = 0; d < rank; ++d) {
      plan.axes.push_back(MakeTaps(in.dim(d), out[d], scale[d], roi_start[d], roi_end[d]));
    }
    return plan;
  }

  // The input coordinate of output position x; `out` is the integer output length, while
  // the reference's formulas use the unrounded length in * scale.
  double SourceCoord(int64_t x, int64_t in, int64_t out, double scale, double roi_start,
                     double roi_end) const {
    const double out_length = scale * in;
    switch (coord_) {
      case Coord::kHalfPixel:
        return (x + 0.5) / scale - 0.5;
      case Coord::kHalfPixelSymmetric: {
        const double adjustment = out / (scale * in);
        const double center = in / 2.0;
        const double offset = center * (1 - adjustment);
        return offset + (x + 0.5) / scale - 0.5;
      }
      case Coord::kPytorchHalfPixel:
        return out_length > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
      case Coord::kAlignCorners:
        return out_length == 1 ? 0.0 : x * static_cast<double>(in - 1) / (out_length - 1);
      case Coord::kTfCropAndResize: {
        const double extent = (roi_end - roi_start) * (in - 1);
        const double offset = roi_start * (in - 1);
        return out_length == 1 ? offset + extent / 2 : offset + x * extent / (out_length - 1);
      }
      case Coord::kAsymmetric:
        return x / scale;
      case Coord::kTfHalfPixelForNn:
        return (x + 0.5) / scale;
    }
    return 0;
  }

  int64_t NearestIndex(double v) const {
    switch (nearest_) {
      case Nearest::kRoundPreferFloor:
        return v == std::floor(v) + 0.5 ? static_cast<int64_t>(std::floor(v))
                                        : static_cast<int64_t>(std::round(v));
      case Nearest::kRoundPreferCeil:
        return v == std::floor(v) + 0.5 ? static_cast<int64_t>(std::ceil(v))
                                        : static_cast<int64_t>(std::round(v));
      case Nearest::kFloor:
        return static_cast<int64_t>(std::floor(v));
      case Nearest::kCeil:
        return static_cast<int64_t>(std::ceil(v));
    }
    return 0;
  }

  AxisTaps MakeTaps(int64_t in, int64_t out, double scale, double roi_start,
                    double roi_end) const {
    AxisTaps t;
    t.in = in;
    t.out = out;
    if (in == out && scale == 1.0 &&
        (coord_ != Coord::kTfHalfPixelForNn || mode_ != Mode::kNearest) &&
        (coord_ != Coord::kTfCropAndResize || (roi_start == 0.0 && roi_end == 1.0))) {
      t.identity = true;
    }
    const bool crop = coord_ == Coord::kTfCropAndResize && !t.identity;
    if (crop) t.bias.assign(out, 0.f);
    t.taps = mode_ == Mode::kNearest ? 1 : mode_ == Mode::kLinear ? 2 : 4;
    t.index.resize(out * t.taps);
    t.weight.resize(out * t.taps);
    if (in == 0) return t;
    auto clamp = [in](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    for (int64_t o = 0; o < out; ++o) {
      const double x = SourceCoord(o, in, out, scale, roi_start, roi_end);
      int64_t* idx = &t.index[o * t.taps];
      float* w = &t.weight[o * t.taps];
      if (crop && (x < 0 || x > in - 1)) {  // TF's CropAndResize: a constant outside
        for (int k = 0; k < t.taps; ++k) {
          idx[k] = 0;
          w[k] = 0;
        }
        t.bias[o] = extrapolation_value_;
        continue;
      }
      if (mode_ == Mode::kNearest) {
        idx[0] = clamp(NearestIndex(x));
        w[0] = 1;
      } else if (mode_ == Mode::kLinear) {
        const double x0 = std::floor(x), f = x - x0;
        idx[0] = clamp(static_cast<int64_t>(x0));
        idx[1] = clamp(static_cast<int64_t>(x0) + 1);
        w[0] = static_cast<float>(1 - f);
        w[1] = static_cast<float>(f);
      } else {
        const double x0 = std::floor(x), t1 = x - x0, a = cubic_a_;
        const double c[4] = {
            ((a * (t1 + 1) - 5 * a) * (t1 + 1) + 8 * a) * (t1 + 1) - 4 * a,
            ((a + 2) * t1 - (a + 3)) * t1 * t1 + 1,
            ((a + 2) * (1 - t1) - (a + 3)) * (1 - t1) * (1 - t1) + 1,
            ((a * (2 - t1) - 5 * a) * (2 - t1) + 8 * a) * (2 - t1) - 4 * a,
        };
        double sum = 0;
        double cw[4];
        for (int k = 0; k < 4; ++k) {
          const int64_t raw = static_cast<int64_t>(x0) - 1 + k;
          cw[k] = exclude_outside_ && (raw < 0 || raw >= in) ? 0.0 : c[k];
          sum += cw[k];
          idx[k] = clamp(raw);
        }
        for (int k = 0; k < 4; ++k) {
          w[k] = static_cast<float>(exclude_outside_ && sum != 0 ? cw[k] / sum : cw[k]);
        }
      }
    }
    return t;
  }

  // Nearest: a pure gather of elements, so it moves bytes (any dtype).
  void RunNearest(const Tensor& x, const ResizePlan& plan, Tensor& y,
                  const ComputeContext& ctx) const {
    const int rank = x.rank();
    const Dims in_strides = RowMajorStrides(x.shape().dims());
    const int64_t width = y.dim(rank - 1);
    const int64_t rows = y.num_elements() / width;
    const AxisTaps& last = plan.axes[rank - 1];
    VisitBySize(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      ctx.ParallelFor(rows, std::max<int64_t>(1, 8192 / width), [&](int64_t begin, int64_t end) {
        Dims coord(rank, 0);
        int64_t rem = begin;
        for (int d = rank - 2; d >= 0; --d) {
          coord[d] = rem % y.dim(d);
          rem /= y.dim(d);
        }
        for (int64_t row = begin; row < end; ++row) {
          int64_t off = 0;
          for (int d = 0; d < rank - 1; ++d) {
            const AxisTaps& a = plan.axes[d];
            off += (a.identity ? coord[d] : a.index[coord[d]]) * in_strides[d];
          }
          const T* s = src + off;
          T* o = dst + row * width;
          if (last.identity) {
            std::copy(s, s + width, o);
          } else {
            for (int64_t i = 0; i < width; ++i) o[i] = s[last.index[i]];
          }
          for (int d = rank - 2; d >= 0; --d) {
            if (++coord[d] < y.dim(d)) break;
            coord[d] = 0;
          }
        }
      });
    });
  }

  // Linear/cubic: one weighted pass per resized axis, accumulating in float (double for
  // float64); integer outputs round to nearest and saturate.
  void RunInterpolated(const Tensor& x, const ResizePlan& plan, Tensor& y,
                       const ComputeContext& ctx) const {
    VisitDType(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, bool>) {
        using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
        RunPasses<T, Acc>(x, plan, y, ctx);
      }
    });
  }

  template <typename T, typename Acc>
  static T Store(Acc v) {
    if constexpr (std::is_integral_v<T>) {
      const Acc r = std::nearbyint(v);
      const Acc lo = static_cast<Acc>(std::numeric_limits<T>::min());
      const Acc hi = static_cast<Acc>(std::numeric_limits<T>::max());
      return static_cast<T>(std::clamp(r, lo, hi));
    } else {
      return FromDouble<T>(v);
    }
  }

  template <typename T, typename Acc>
  void RunPasses(const Tensor& x, const ResizePlan& plan, Tensor& y,
                 const ComputeContext& ctx) const {
    const int rank = x.rank();
    std::vector<int> passes;
    for (int d = 0; d < rank; ++d) {
      if (!plan.axes[d].identity) passes.push_back(d);
    }
    std::vector<Acc> bufs[2];
    std::vector<int64_t> shape(x.shape().dims().begin(), x.shape().dims().end());
    if (passes.empty()) {
      for (int64_t i = 0; i < x.num_elements(); ++i) y.data<T>()[i] = x.data<T>()[i];
      return;
    }
    // Pass k reads `cur` (the input for k == 0) and writes a buffer or the output.
    const Acc* cur = nullptr;
    for (size_t k = 0; k < passes.size(); ++k) {
      const int d = passes[k];
      const AxisTaps& a = plan.axes[d];
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < d; ++i) outer *= shape[i];
      for (int i = d + 1; i < rank; ++i) inner *= shape[i];
      const bool first = k == 0, last = k + 1 == passes.size();
      std::vector<Acc>& next = bufs[k % 2];
      if (!last) next.assign(outer * a.out * inner, Acc(0));
      const T* xin = x.data<T>();
      T* yout = y.data<T>();
      Acc* nout = last ? nullptr : next.data();
      const Acc* cin = cur;
      const int taps = a.taps;
      // The last axis (inner == 1) gathers single elements: keep the sum in a register.
      auto work_inner1 = [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const int64_t o = u / a.out, j = u % a.out;
          const int64_t row = o * a.in;
          const int64_t* idx = &a.index[j * taps];
          const float* wt = &a.weight[j * taps];
          Acc sum = a.bias.empty() ? Acc(0) : static_cast<Acc>(a.bias[j]);
          for (int t = 0; t < taps; ++t) {
            const Acc v = first ? static_cast<Acc>(AsDouble(xin[row + idx[t]])) : cin[row + idx[t]];
            sum += static_cast<Acc>(wt[t]) * v;
          }
          if (last) {
            yout[u] = Store<T, Acc>(sum);
          } else {
            nout[u] = sum;
          }
        }
      };
      if (inner == 1) {
        ctx.ParallelFor(outer * a.out, 8192, work_inner1);
        shape[d] = a.out;
        cur = last ? nullptr : next.data();
        continue;
      }
      auto work = [&](int64_t begin, int64_t end) {
        std::vector<Acc> acc(inner);
        for (int64_t u = begin; u < end; ++u) {
          const int64_t o = u / a.out, j = u % a.out;
          std::fill(acc.begin(), acc.end(), a.bias.empty() ? Acc(0) : static_cast<Acc>(a.bias[j]));
          for (int t = 0; t < taps; ++t) {
            const Acc w = static_cast<Acc>(a.weight[j * taps + t]);
            if (w == 0) continue;
            const int64_t base = (o * a.in + a.index[j * taps + t]) * inner;
            if (first) {
              for (int64_t i = 0; i < inner; ++i) acc[i] += w * static_cast<Acc>(AsDouble(xin[base + i]));
            } else {
              for (int64_t i = 0; i < inner; ++i) acc[i] += w * cin[base + i];
            }
          }
          const int64_t out_base = (o * a.out + j) * inner;
          if (last) {
            for (int64_t i = 0; i < inner; ++i) yout[out_base + i] = Store<T, Acc>(acc[i]);
          } else {
            std::copy(acc.begin(), acc.end(), nout + out_base);
          }
        }
      };
      ctx.ParallelFor(outer * a.out, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
                      work);
      shape[d] = a.out;
      cur = last ? nullptr : next.data();
    }
  }

  Mode mode_ = Mode::kNearest;
  Coord coord_ = Coord::kHalfPixel;
  Nearest nearest_ = Nearest::kRoundPreferFloor;
  int policy_ = 0;
  float cubic_a_;
  bool exclude_outside_;
  float extrapolation_value_;
  std::vector<int64_t> axes_attr_;
  int scales_input_ = 2;
  bool dynamic_ = false;
  ResizePlan plan_;
};

KILN_REGISTER_KERNEL_CLASS("", "Resize", ResizeKernel);
// Upsample (deprecated since opset 10): Resize with (X, scales) and asymmetric coordinates.
KILN_REGISTER_KERNEL(
    "", "Upsample",
    [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
      ir::Node copy = node;
      copy.attrs["coordinate_transformation_mode"] = std::string("asymmetric");
      copy.attrs["nearest_mode"] = std::string("floor");
      return std::unique_ptr<OpKernel>(new ResizeKernel(copy));
    });

}  // namespace

KILN_KERNEL_FILE(tensor_resize);

}  // namespace kiln::kernels::tensor_ops
