// ONNX's signal-processing operators (opset 17): HannWindow, HammingWindow, BlackmanWindow,
// MelWeightMatrix, DFT and STFT.
//
// Complex tensors are real tensors with a trailing dimension of 2 (real, imaginary), as ONNX
// defines them. DFT and STFT evaluate the transform directly in double precision with exact
// twiddle angles (2*pi*(k*n mod N)/N), O(N^2) per signal: they serve audio front ends of
// imported models and the backend suite, not bulk FFT work.
//
// Output shapes of these operators depend on input values (a window size, a frame step);
// when those inputs are constants the shape is fixed at compile time, otherwise the output is
// allocated when the kernel runs.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/cpu/math_common.h"
#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::signal {
namespace {

using math::IsFloat;
using math::MathKernel;
using math::Present;
using tensor_ops::AsDouble;
using tensor_ops::FromDouble;
using tensor_ops::ReadAsDouble;
using tensor_ops::ReadScalarInt;

template <typename T>
void StoreAll(const std::vector<double>& values, Tensor& out) {
  T* y = out.data<T>();
  for (size_t i = 0; i < values.size(); ++i) y[i] = FromDouble<T>(values[i]);
}

// Window and mel outputs may have any numeric output_datatype.
void Store(const std::vector<double>& values, Tensor& out) {
  math::VisitNumeric(out.dtype(), [&](auto tag) { StoreAll<decltype(tag)>(values, out); });
}

// --- window functions ----------------------------------------------------------------------

enum class Window { kHann, kHamming, kBlackman };

// HannWindow / HammingWindow / BlackmanWindow(size) with output_datatype and periodic.
class WindowKernel : public MathKernel {
 public:
  WindowKernel(const ir::Node& node, Window kind)
      : MathKernel(node), kind_(kind), periodic_(node.GetInt("periodic", 1) != 0) {
    auto dtype = tensor_ops::DTypeFromOnnx(node.GetInt("output_datatype", 1));
    if (!dtype.ok() || !math::IsNumeric(*dtype)) {
      SetAttrError(
          Error("output_datatype ", node.GetInt("output_datatype", 1), " is not a numeric type"));
    } else {
      dtype_ = *dtype;
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty() || !tensor_ops::IsIndexType(ctx.inputs[0].dtype) ||
        ctx.inputs[0].shape.num_elements() != 1) {
      return Error("'size' must be an int32 or int64 scalar");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dtype_;
    if (ctx.inputs[0].constant != nullptr) {
      KILN_ASSIGN_OR_RETURN(int64_t size, Size(*ctx.inputs[0].constant));
      ctx.output_shapes[0] = Shape({size});
    } else {
      ctx.output_dynamic[0] = true;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    KILN_ASSIGN_OR_RETURN(int64_t size, Size(ctx.inputs[0]));
    if (!ctx.outputs[0].valid())
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, dtype_, Shape({size})).status());
    // Periodic windows are one sample of a window of size + 1 (the spec's N - 1 denominator
    // for symmetric ones).
    const double denom = periodic_ ? static_cast<double>(size) : static_cast<double>(size - 1);
    std::vector<double> w(size);
    for (int64_t n = 0; n < size; ++n) {
      const double x = denom > 0 ? 2 * std::numbers::pi * n / denom : 0.0;
      switch (kind_) {
        case Window::kHann:
          w[n] = 0.5 - 0.5 * std::cos(x);
          break;
        case Window::kHamming:
          w[n] = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(x);
          break;
        case Window::kBlackman:
          w[n] = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x);
          break;
      }
    }
    Store(w, ctx.outputs[0]);
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<int64_t> Size(const Tensor& t) const {
    KILN_ASSIGN_OR_RETURN(int64_t size, ReadScalarInt(t, "size"));
    if (size < 0) return Error("'size' is negative: ", size);
    return size;
  }

  Window kind_;
  bool periodic_;
  DType dtype_ = DType::kFloat32;
};

// --- MelWeightMatrix -------------------------------------------------------------------------

// MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz)
// -> [dft_length / 2 + 1, num_mel_bins]: triangular filters whose edges are equally spaced
// on the mel scale (2595 * log10(1 + f / 700)) and snapped down to DFT bins, computed as
// ONNX's reference does (including its mel step of range / (num_mel_bins + 2)).
class MelWeightMatrixKernel : public MathKernel {
 public:
  explicit MelWeightMatrixKernel(const ir::Node& node) : MathKernel(node) {
    auto dtype = tensor_ops::DTypeFromOnnx(node.GetInt("output_datatype", 1));
    if (!dtype.ok() || !math::IsNumeric(*dtype)) {
      SetAttrError(Error("output_datatype is not a numeric type"));
    } else {
      dtype_ = *dtype;
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() != 5) return Error("expects 5 inputs, got ", ctx.inputs.size());
    for (int i = 0; i < 5; ++i) {
      if (!ctx.inputs[i].present() || ctx.inputs[i].shape.num_elements() != 1) {
        return Error("input ", i, " must be a scalar");
      }
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dtype_;
    if (ctx.inputs[0].constant != nullptr && ctx.inputs[1].constant != nullptr) {
      KILN_ASSIGN_OR_RETURN(Shape shape,
                            OutShape(*ctx.inputs[0].constant, *ctx.inputs[1].constant));
      ctx.output_shapes[0] = shape;
    } else {
      ctx.output_dynamic[0] = true;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    KILN_ASSIGN_OR_RETURN(Shape shape, OutShape(ctx.inputs[0], ctx.inputs[1]));
    if (!ctx.outputs[0].valid()) KILN_RETURN_IF_ERROR(ctx.Allocate(0, dtype_, shape).status());
    const int64_t mel_bins = shape[1], spectrum_bins = shape[0];
    KILN_ASSIGN_OR_RETURN(int64_t dft_length, ReadScalarInt(ctx.inputs[1], "dft_length"));
    KILN_ASSIGN_OR_RETURN(int64_t sample_rate, ReadScalarInt(ctx.inputs[2], "sample_rate"));
    if (sample_rate <= 0) return Error("sample_rate must be positive, got ", sample_rate);
    const double lower = ReadAsDouble(ctx.inputs[3], 0), upper = ReadAsDouble(ctx.inputs[4], 0);
    auto to_mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
    const double low_mel = to_mel(lower), high_mel = to_mel(upper);
    const double step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
    std::vector<int64_t> edge(mel_bins + 2);
    for (int64_t i = 0; i < mel_bins + 2; ++i) {
      const double hz = 700.0 * (std::pow(10.0, (i * step + low_mel) / 2595.0) - 1.0);
      edge[i] = static_cast<int64_t>(std::floor((dft_length + 1) * hz / sample_rate));
    }
    std::vector<double> w(spectrum_bins * mel_bins, 0.0);
    auto set = [&](int64_t row, int64_t col, double v) -> absl::Status {
      if (row < 0 || row >= spectrum_bins) {
        return Error("mel filter edge ", row, " falls outside the ", spectrum_bins,
                     " DFT bins (check the edge frequencies against the sample rate)");
      }
      w[row * mel_bins + col] = v;
      return absl::OkStatus();
    };
    for (int64_t i = 0; i < mel_bins; ++i) {
      const int64_t left = edge[i], center = edge[i + 1], right = edge[i + 2];
      if (center == left) {
        KILN_RETURN_IF_ERROR(set(center, i, 1.0));
      } else {
        for (int64_t j = left; j <= center; ++j) {
          KILN_RETURN_IF_ERROR(set(j, i, static_cast<double>(j - left) / (center - left)));
        }
      }
      for (int64_t j = center; j < right; ++j) {
        KILN_RETURN_IF_ERROR(set(j, i, static_cast<double>(right - j) / (right - center)));
      }
    }
    Store(w, ctx.outputs[0]);
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Shape> OutShape(const Tensor& mel_bins_t, const Tensor& dft_length_t) const {
    KILN_ASSIGN_OR_RETURN(int64_t mel_bins, ReadScalarInt(mel_bins_t, "num_mel_bins"));
    KILN_ASSIGN_OR_RETURN(int64_t dft_length, ReadScalarInt(dft_length_t, "dft_length"));
    if (mel_bins < 0 || dft_length <= 0) {
      return Error("num_mel_bins (", mel_bins, ") and dft_length (", dft_length,
                   ") must be positive");
    }
    return Shape({dft_length / 2 + 1, mel_bins});
  }

  DType dtype_ = DType::kFloat32;
};

// --- DFT / STFT ------------------------------------------------------------------------------

// out[k] = sum_t in[t] * exp(-+2*pi*i*k*t/n) for k < out_bins (divided by n when inverse);
// `in` has `count` complex samples, zero beyond (count > n truncates).
void Transform(const double* re, const double* im, int64_t count, int64_t n, int64_t out_bins,
               bool inverse, double* out_re, double* out_im) {
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t k = 0; k < out_bins; ++k) {
    double sr = 0, si = 0;
    for (int64_t t = 0; t < std::min(count, n); ++t) {
      const double angle = sign * 2 * std::numbers::pi * static_cast<double>((k * t) % n) / n;
      const double c = std::cos(angle), s = std::sin(angle);
      const double xr = re[t], xi = im[t];
      sr += xr * c - xi * s;
      si += xr * s + xi * c;
    }
    if (inverse) {
      sr /= n;
      si /= n;
    }
    out_re[k] = sr;
    out_im[k] = si;
  }
}

// DFT(input [batch, ..., n, ..., 1|2], dft_length?, axis attribute (or input in opset 20))
// with onesided and inverse.
class DftKernel : public MathKernel {
 public:
  explicit DftKernel(const ir::Node& node)
      : MathKernel(node),
        axis_attr_(node.GetInt("axis", 1)),
        inverse_(node.GetInt("inverse", 0) != 0),
        onesided_(node.GetInt("onesided", 0) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty() || !IsFloat(ctx.inputs[0].dtype)) {
      return Error("'input' must be a float tensor");
    }
    const Shape& s = ctx.inputs[0].shape;
    if (s.rank() < 2 || (s[s.rank() - 1] != 1 && s[s.rank() - 1] != 2)) {
      return Error("'input' must be [batch, ..., 1 or 2], got ", s.ToString());
    }
    if (Present(ctx, 2)) return Error("the axis input (opset 20) is not supported");
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    if (!Present(ctx, 1) || ctx.inputs[1].constant != nullptr) {
      KILN_ASSIGN_OR_RETURN(Shape out,
                            OutShape(s, Present(ctx, 1) ? ctx.inputs[1].constant : nullptr));
      ctx.output_shapes[0] = out;
    } else {
      ctx.output_dynamic[0] = true;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const Tensor* length_t = tensor_ops::InputPresent(ctx, 1) ? &ctx.inputs[1] : nullptr;
    KILN_ASSIGN_OR_RETURN(Shape out_shape, OutShape(x.shape(), length_t));
    if (!ctx.outputs[0].valid())
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, x.dtype(), out_shape).status());
    const int rank = x.rank();
    KILN_ASSIGN_OR_RETURN(int axis, Axis(rank));
    const int64_t in_n = x.dim(axis);
    const int64_t n = length_t ? ReadScalarInt(*length_t, "dft_length").value() : in_n;
    const int64_t bins = out_shape[axis];
    const bool complex_in = x.dim(rank - 1) == 2;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int d = axis + 1; d < rank - 1; ++d) inner *= x.dim(d);
    std::vector<double> re(in_n), im(in_n), ore(bins), oim(bins);
    math::VisitNumeric(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T> || math::kIsHalf<T>) {
        const T* in = x.data<T>();
        T* y = ctx.outputs[0].data<T>();
        const int64_t in_c = complex_in ? 2 : 1;
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t j = 0; j < inner; ++j) {
            for (int64_t t = 0; t < in_n; ++t) {
              const int64_t idx = ((o * in_n + t) * inner + j) * in_c;
              re[t] = AsDouble(in[idx]);
              im[t] = complex_in ? AsDouble(in[idx + 1]) : 0.0;
            }
            Transform(re.data(), im.data(), in_n, n, bins, inverse_, ore.data(), oim.data());
            for (int64_t k = 0; k < bins; ++k) {
              const int64_t idx = ((o * bins + k) * inner + j) * 2;
              y[idx] = FromDouble<T>(ore[k]);
              y[idx + 1] = FromDouble<T>(oim[k]);
            }
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<int> Axis(int rank) const {
    // Negative axes count from the back of the whole shape, so -2 is the last signal dim.
    KILN_ASSIGN_OR_RETURN(int axis, math::NormalizeAxis(axis_attr_, rank, where()));
    if (axis == rank - 1) return Error("axis ", axis_attr_, " is the complex dimension");
    return axis;
  }

  absl::StatusOr<Shape> OutShape(const Shape& in, const Tensor* length_t) const {
    KILN_ASSIGN_OR_RETURN(int axis, Axis(in.rank()));
    int64_t n = in[axis];
    if (length_t != nullptr) {
      KILN_ASSIGN_OR_RETURN(n, ReadScalarInt(*length_t, "dft_length"));
      if (n <= 0) return Error("dft_length must be positive, got ", n);
    }
    Shape out = in;
    out.set_dim(axis, onesided_ ? n / 2 + 1 : n);
    out.set_dim(in.rank() - 1, 2);
    return out;
  }

  int64_t axis_attr_;
  bool inverse_;
  bool onesided_;
};

// STFT(signal [batch, length, 1|2], frame_step, window? [frame_length], frame_length?)
// -> [batch, frames, bins, 2]; frames = (length - frame_length) / frame_step + 1, bins =
// frame_length / 2 + 1 when onesided (real signals only), frame_length otherwise.
class StftKernel : public MathKernel {
 public:
  explicit StftKernel(const ir::Node& node)
      : MathKernel(node), onesided_(node.GetInt("onesided", 1) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 2 || !IsFloat(ctx.inputs[0].dtype) || !ctx.inputs[1].present()) {
      return Error("needs a float 'signal' and 'frame_step'");
    }
    const Shape& s = ctx.inputs[0].shape;
    if (s.rank() != 3 || (s[2] != 1 && s[2] != 2)) {
      return Error("'signal' must be [batch, length, 1 or 2], got ", s.ToString());
    }
    if (!Present(ctx, 2) && !Present(ctx, 3)) return Error("needs 'window' or 'frame_length'");
    if (Present(ctx, 2) && (ctx.inputs[2].shape.rank() != 1 || !IsFloat(ctx.inputs[2].dtype))) {
      return Error("'window' must be a 1-D float tensor");
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    const bool known = ctx.inputs[1].constant != nullptr &&
                       (!Present(ctx, 3) || ctx.inputs[3].constant != nullptr);
    if (known) {
      KILN_ASSIGN_OR_RETURN(
          Geometry g,
          Resolve(s, *ctx.inputs[1].constant, Present(ctx, 2) ? ctx.inputs[2].shape[0] : -1,
                  Present(ctx, 3) ? ctx.inputs[3].constant : nullptr));
      ctx.output_shapes[0] = g.out;
    } else {
      ctx.output_dynamic[0] = true;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const Tensor& window = math::InputOrEmpty(ctx, 2);
    const Tensor& length_t = math::InputOrEmpty(ctx, 3);
    KILN_ASSIGN_OR_RETURN(Geometry g,
                          Resolve(x.shape(), ctx.inputs[1], window.valid() ? window.dim(0) : -1,
                                  length_t.valid() ? &length_t : nullptr));
    if (!ctx.outputs[0].valid()) KILN_RETURN_IF_ERROR(ctx.Allocate(0, x.dtype(), g.out).status());
    const int64_t batch = x.dim(0), length = x.dim(1), channels = x.dim(2);
    const int64_t frames = g.out[1], bins = g.out[2];
    std::vector<double> re(g.frame_length), im(g.frame_length), ore(bins), oim(bins);
    math::VisitNumeric(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T> || math::kIsHalf<T>) {
        const T* in = x.data<T>();
        T* y = ctx.outputs[0].data<T>();
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t f = 0; f < frames; ++f) {
            for (int64_t t = 0; t < g.frame_length; ++t) {
              const double w = window.valid() ? ReadAsDouble(window, t) : 1.0;
              const int64_t idx = (b * length + f * g.step + t) * channels;
              re[t] = AsDouble(in[idx]) * w;
              im[t] = channels == 2 ? AsDouble(in[idx + 1]) * w : 0.0;
            }
            Transform(re.data(), im.data(), g.frame_length, g.frame_length, bins, false, ore.data(),
                      oim.data());
            for (int64_t k = 0; k < bins; ++k) {
              const int64_t idx = ((b * frames + f) * bins + k) * 2;
              y[idx] = FromDouble<T>(ore[k]);
              y[idx + 1] = FromDouble<T>(oim[k]);
            }
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  struct Geometry {
    int64_t step = 1, frame_length = 0;
    Shape out;
  };

  absl::StatusOr<Geometry> Resolve(const Shape& s, const Tensor& step_t, int64_t window_length,
                                   const Tensor* length_t) const {
    Geometry g;
    KILN_ASSIGN_OR_RETURN(g.step, ReadScalarInt(step_t, "frame_step"));
    if (g.step <= 0) return Error("frame_step must be positive, got ", g.step);
    g.frame_length = window_length;
    if (length_t != nullptr) {
      KILN_ASSIGN_OR_RETURN(g.frame_length, ReadScalarInt(*length_t, "frame_length"));
      if (window_length >= 0 && window_length != g.frame_length) {
        return Error("window has ", window_length, " values but frame_length is ", g.frame_length);
      }
    }
    if (g.frame_length <= 0 || g.frame_length > s[1]) {
      return Error("frame_length ", g.frame_length, " must be in [1, signal length ", s[1], "]");
    }
    if (onesided_ && s[2] == 2) return Error("onesided needs a real signal");
    const int64_t frames = (s[1] - g.frame_length) / g.step + 1;
    const int64_t bins = onesided_ ? g.frame_length / 2 + 1 : g.frame_length;
    g.out = Shape({s[0], frames, bins, 2});
    return g;
  }

  bool onesided_;
};

KILN_REGISTER_KERNEL("", "HannWindow",
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new WindowKernel(node, Window::kHann));
                     });
KILN_REGISTER_KERNEL("", "HammingWindow",
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new WindowKernel(node, Window::kHamming));
                     });
KILN_REGISTER_KERNEL("", "BlackmanWindow",
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new WindowKernel(node, Window::kBlackman));
                     });
KILN_REGISTER_KERNEL_CLASS("", "MelWeightMatrix", MelWeightMatrixKernel);
KILN_REGISTER_KERNEL_CLASS("", "DFT", DftKernel);
KILN_REGISTER_KERNEL_CLASS("", "STFT", StftKernel);

}  // namespace

KILN_KERNEL_FILE(signal_ops);

}  // namespace kiln::kernels::signal
