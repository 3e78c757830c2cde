// Detection and sampling operators: NonMaxSuppression, RoiAlign, GridSample (opset 16) and
// MaxUnpool. Semantics follow the ONNX spec and, where the spec leaves details open (box
// ordering ties, RoiAlign's sampling grid, GridSample's padding), ONNX Runtime and PyTorch,
// whose outputs are the suite's reference.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/math_common.h"
#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::vision {
namespace {

using math::IsFloat;
using math::MathKernel;
using math::Present;
using math::VisitFloat;
using tensor_ops::AsDouble;
using tensor_ops::FromDouble;
using tensor_ops::IndexAt;
using tensor_ops::ReadAsDouble;

// --- NonMaxSuppression ---------------------------------------------------------------------

struct Box {
  double y1, x1, y2, x2;  // y1 <= y2, x1 <= x2
  double Area() const { return (y2 - y1) * (x2 - x1); }
};

// boxes [batches, boxes, 4], scores [batches, classes, boxes], then optional
// max_output_boxes_per_class (default 0: select nothing), iou_threshold (default 0) and
// score_threshold (default: keep all) -> selected_indices [selected, 3] of
// (batch, class, box), batch by batch and class by class, each in selection order.
class NonMaxSuppressionKernel : public MathKernel {
 public:
  explicit NonMaxSuppressionKernel(const ir::Node& node)
      : MathKernel(node), center_point_box_(node.GetInt("center_point_box", 0) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 2 || ctx.inputs[0].dtype != DType::kFloat32 ||
        ctx.inputs[1].dtype != DType::kFloat32) {
      return Error("'boxes' and 'scores' must be float32");
    }
    const Shape& b = ctx.inputs[0].shape;
    const Shape& s = ctx.inputs[1].shape;
    if (b.rank() != 3 || b[2] != 4 || s.rank() != 3 || s[0] != b[0] || s[2] != b[1]) {
      return Error("'boxes' must be [batches, boxes, 4] and 'scores' [batches, classes, boxes]; ",
                   "got ", b.ToString(), " and ", s.ToString());
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kInt64;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& boxes_t = ctx.inputs[0];
    const Tensor& scores_t = ctx.inputs[1];
    auto scalar = [&](int i, double fallback) {
      return tensor_ops::InputPresent(ctx, i) && ctx.inputs[i].num_elements() > 0
                 ? ReadAsDouble(ctx.inputs[i], 0)
                 : fallback;
    };
    const int64_t max_per_class = static_cast<int64_t>(scalar(2, 0));
    const double iou_threshold = scalar(3, 0);
    const bool has_score_threshold =
        tensor_ops::InputPresent(ctx, 4) && ctx.inputs[4].num_elements() > 0;
    const double score_threshold = scalar(4, 0);
    const int64_t batches = boxes_t.dim(0), num_boxes = boxes_t.dim(1);
    const int64_t classes = scores_t.dim(1);
    const float* bx = boxes_t.data<float>();
    const float* sc = scores_t.data<float>();
    std::vector<int64_t> selected_rows;
    std::vector<Box> boxes(num_boxes);
    std::vector<int64_t> order, picked;
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t i = 0; i < num_boxes; ++i) {
        const float* v = bx + (b * num_boxes + i) * 4;
        if (center_point_box_) {  // [x_center, y_center, width, height]
          boxes[i] = {v[1] - v[3] / 2.0, v[0] - v[2] / 2.0, v[1] + v[3] / 2.0, v[0] + v[2] / 2.0};
        } else {  // [y1, x1, y2, x2], any pair of diagonal corners
          boxes[i] = {std::min<double>(v[0], v[2]), std::min<double>(v[1], v[3]),
                      std::max<double>(v[0], v[2]), std::max<double>(v[1], v[3])};
        }
      }
      for (int64_t c = 0; c < classes && max_per_class > 0; ++c) {
        const float* s = sc + (b * classes + c) * num_boxes;
        order.clear();
        for (int64_t i = 0; i < num_boxes; ++i) {
          if (!has_score_threshold || s[i] > score_threshold) order.push_back(i);
        }
        // Highest score first; ties keep the lower box index first.
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t z) { return s[a] > s[z]; });
        picked.clear();
        for (int64_t i : order) {
          if (static_cast<int64_t>(picked.size()) >= max_per_class) break;
          bool keep = true;
          for (int64_t p : picked) {
            if (Suppresses(boxes[p], boxes[i], iou_threshold)) {
              keep = false;
              break;
            }
          }
          if (!keep) continue;
          picked.push_back(i);
          selected_rows.insert(selected_rows.end(), {b, c, i});
        }
      }
    }
    KILN_ASSIGN_OR_RETURN(
        Tensor* const out_ptr,
        ctx.Allocate(0, DType::kInt64, Shape({static_cast<int64_t>(selected_rows.size() / 3), 3})));
    Tensor& out = *out_ptr;
    std::copy(selected_rows.begin(), selected_rows.end(), out.data<int64_t>());
    return absl::OkStatus();
  }

 private:
  static bool Suppresses(const Box& a, const Box& b, double iou_threshold) {
    const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
    const double iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
    if (ih <= 0 || iw <= 0) return false;
    const double inter = ih * iw;
    const double uni = a.Area() + b.Area() - inter;
    if (a.Area() <= 0 || b.Area() <= 0 || uni <= 0) return false;
    return inter / uni > iou_threshold;
  }

  bool center_point_box_;
};

// --- RoiAlign ------------------------------------------------------------------------------

// RoiAlign(X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R]) ->
// [R, C, output_height, output_width]: each bin averages (or maxes) bilinear samples on a
// sampling_ratio x sampling_ratio grid (adaptive, ceil(roi size / bins), when 0).
class RoiAlignKernel : public MathKernel {
 public:
  explicit RoiAlignKernel(const ir::Node& node)
      : MathKernel(node),
        out_h_(node.GetInt("output_height", 1)),
        out_w_(node.GetInt("output_width", 1)),
        sampling_ratio_(node.GetInt("sampling_ratio", 0)),
        spatial_scale_(node.GetFloat("spatial_scale", 1.f)) {
    const std::string mode = node.GetString("mode", "avg");
    if (mode != "avg" && mode != "max") SetAttrError(Error("mode '", mode, "' is not avg or max"));
    max_mode_ = mode == "max";
    const std::string coord = node.GetString("coordinate_transformation_mode", "half_pixel");
    if (coord != "half_pixel" && coord != "output_half_pixel") {
      SetAttrError(Error("coordinate_transformation_mode '", coord, "' is not supported"));
    }
    half_pixel_ = coord == "half_pixel";
    if (out_h_ < 1 || out_w_ < 1 || sampling_ratio_ < 0) {
      SetAttrError(Error("output_height/output_width must be positive, sampling_ratio >= 0"));
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() != 3 || !IsFloat(ctx.inputs[0].dtype) ||
        ctx.inputs[1].dtype != ctx.inputs[0].dtype ||
        !tensor_ops::IsIndexType(ctx.inputs[2].dtype)) {
      return Error("expects float X and rois of one dtype and int batch_indices");
    }
    const Shape& x = ctx.inputs[0].shape;
    const Shape& rois = ctx.inputs[1].shape;
    const Shape& idx = ctx.inputs[2].shape;
    if (x.rank() != 4 || rois.rank() != 2 || rois[1] != 4 || idx.rank() != 1 || idx[0] != rois[0]) {
      return Error("expects X [N, C, H, W], rois [R, 4], batch_indices [R]; got ", x.ToString(),
                   ", ", rois.ToString(), ", ", idx.ToString());
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = Shape({rois[0], x[1], out_h_, out_w_});
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const Tensor& rois = ctx.inputs[1];
    const Tensor& batch_indices = ctx.inputs[2];
    const int64_t n = x.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
    const int64_t num_rois = rois.dim(0);
    absl::Status status;
    VisitFloat(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = x.data<T>();
      T* out = ctx.outputs[0].data<T>();
      const double offset = half_pixel_ ? 0.5 : 0.0;
      for (int64_t r = 0; r < num_rois && status.ok(); ++r) {
        const int64_t b = IndexAt(batch_indices, r);
        if (b < 0 || b >= n) {
          status = Error("batch_indices[", r, "] = ", b, " is outside [0, ", n, ")");
          return;
        }
        const double x1 = ReadAsDouble(rois, r * 4) * spatial_scale_ - offset;
        const double y1 = ReadAsDouble(rois, r * 4 + 1) * spatial_scale_ - offset;
        const double x2 = ReadAsDouble(rois, r * 4 + 2) * spatial_scale_ - offset;
        const double y2 = ReadAsDouble(rois, r * 4 + 3) * spatial_scale_ - offset;
        double roi_w = x2 - x1, roi_h = y2 - y1;
        if (!half_pixel_) {  // the legacy mode forces rois to at least one pixel
          roi_w = std::max(roi_w, 1.0);
          roi_h = std::max(roi_h, 1.0);
        }
        const double bin_h = roi_h / out_h_, bin_w = roi_w / out_w_;
        const int64_t grid_h =
            sampling_ratio_ > 0 ? sampling_ratio_ : static_cast<int64_t>(std::ceil(roi_h / out_h_));
        const int64_t grid_w =
            sampling_ratio_ > 0 ? sampling_ratio_ : static_cast<int64_t>(std::ceil(roi_w / out_w_));
        const double count = std::max<int64_t>(grid_h * grid_w, 1);
        for (int64_t c = 0; c < channels; ++c) {
          const T* plane = in + (b * channels + c) * height * width;
          for (int64_t ph = 0; ph < out_h_; ++ph) {
            for (int64_t pw = 0; pw < out_w_; ++pw) {
              double acc = 0;
              bool first = true;
              for (int64_t iy = 0; iy < grid_h; ++iy) {
                const double yy = y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h;
                for (int64_t ix = 0; ix < grid_w; ++ix) {
                  const double xx = x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w;
                  Sample(plane, height, width, yy, xx, &acc, &first);
                }
              }
              out[((r * channels + c) * out_h_ + ph) * out_w_ + pw] =
                  FromDouble<T>(max_mode_ ? acc : acc / count);
            }
          }
        }
      }
    });
    return status;
  }

 private:
  // Bilinear sample at (y, x) added to *acc (avg) or maxed into it (max mode: the largest
  // weighted corner, as ONNX Runtime computes it). Samples beyond one pixel outside count 0.
  template <typename T>
  void Sample(const T* plane, int64_t height, int64_t width, double y, double x, double* acc,
              bool* first) const {
    if (y < -1.0 || y > height || x < -1.0 || x > width) {
      if (max_mode_ && *first) {
        *acc = 0;
        *first = false;
      }
      return;
    }
    y = std::max(y, 0.0);
    x = std::max(x, 0.0);
    int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
    if (y_low >= height - 1) {
      y_high = y_low = height - 1;
      y = static_cast<double>(y_low);
    } else {
      y_high = y_low + 1;
    }
    if (x_low >= width - 1) {
      x_high = x_low = width - 1;
      x = static_cast<double>(x_low);
    } else {
      x_high = x_low + 1;
    }
    const double ly = y - y_low, lx = x - x_low, hy = 1 - ly, hx = 1 - lx;
    const double v[4] = {hy * hx * AsDouble(plane[y_low * width + x_low]),
                         hy * lx * AsDouble(plane[y_low * width + x_high]),
                         ly * hx * AsDouble(plane[y_high * width + x_low]),
                         ly * lx * AsDouble(plane[y_high * width + x_high])};
    if (!max_mode_) {
      *acc += v[0] + v[1] + v[2] + v[3];
      return;
    }
    const double m = std::max(std::max(v[0], v[1]), std::max(v[2], v[3]));
    *acc = *first ? m : std::max(*acc, m);
    *first = false;
  }

  int64_t out_h_, out_w_, sampling_ratio_;
  float spatial_scale_;
  bool max_mode_ = false;
  bool half_pixel_ = true;
};

// --- GridSample ----------------------------------------------------------------------------

enum class Padding { kZeros, kBorder, kReflection };

// GridSample(X [N, C, H, W], grid [N, H_out, W_out, 2] of (x, y) in [-1, 1]) with modes
// bilinear, nearest and bicubic, padding zeros, border and reflection, and align_corners,
// computed as PyTorch's grid_sampler_2d (the source of the suite's expected outputs).
class GridSampleKernel : public MathKernel {
 public:
  explicit GridSampleKernel(const ir::Node& node)
      : MathKernel(node), align_corners_(node.GetInt("align_corners", 0) != 0) {
    const std::string mode = node.GetString("mode", "bilinear");
    if (mode == "bilinear" || mode == "linear") {
      mode_ = 0;
    } else if (mode == "nearest") {
      mode_ = 1;
    } else if (mode == "bicubic" || mode == "cubic") {
      mode_ = 2;
    } else {
      SetAttrError(Error("mode '", mode, "' is not bilinear, nearest or bicubic"));
    }
    const std::string padding = node.GetString("padding_mode", "zeros");
    if (padding == "zeros") {
      padding_ = Padding::kZeros;
    } else if (padding == "border") {
      padding_ = Padding::kBorder;
    } else if (padding == "reflection") {
      padding_ = Padding::kReflection;
    } else {
      SetAttrError(Error("padding_mode '", padding, "' is not zeros, border or reflection"));
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.size() != 2 || !IsFloat(ctx.inputs[0].dtype) ||
        ctx.inputs[1].dtype != ctx.inputs[0].dtype) {
      return Error("expects float X and grid of one dtype");
    }
    const Shape& x = ctx.inputs[0].shape;
    const Shape& g = ctx.inputs[1].shape;
    if (x.rank() != 4 || g.rank() != 4 || g[0] != x[0] || g[3] != 2) {
      return Error("expects X [N, C, H, W] and grid [N, H_out, W_out, 2]; got ", x.ToString(),
                   " and ", g.ToString());
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = Shape({x[0], x[1], g[1], g[2]});
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const Tensor& grid = ctx.inputs[1];
    const int64_t n = x.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
    const int64_t out_h = grid.dim(1), out_w = grid.dim(2);
    VisitFloat(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = x.data<T>();
      const T* g = grid.data<T>();
      T* out = ctx.outputs[0].data<T>();
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t i = 0; i < out_h * out_w; ++i) {
          const double gx = AsDouble(g[(b * out_h * out_w + i) * 2]);
          const double gy = AsDouble(g[(b * out_h * out_w + i) * 2 + 1]);
          const double ix = Unnormalize(gx, width), iy = Unnormalize(gy, height);
          for (int64_t c = 0; c < channels; ++c) {
            const T* plane = in + (b * channels + c) * height * width;
            out[(b * channels + c) * out_h * out_w + i] =
                FromDouble<T>(SampleAt(plane, height, width, ix, iy));
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  double Unnormalize(double coord, int64_t size) const {
    return align_corners_ ? (coord + 1) / 2 * (size - 1) : ((coord + 1) * size - 1) / 2;
  }

  static double Reflect(double v, double twice_low, double twice_high) {
    if (twice_low == twice_high) return 0;
    const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
    v = std::abs(v - low);
    const double extra = std::fmod(v, span);
    const int64_t flips = static_cast<int64_t>(std::floor(v / span));
    return flips % 2 == 0 ? extra + low : span - extra + low;
  }

  // The padding mode applied to an unnormalized coordinate (identity for zeros).
  double Pad(double v, int64_t size) const {
    if (padding_ == Padding::kZeros) return v;
    if (padding_ == Padding::kReflection) {
      v = align_corners_ ? Reflect(v, 0, 2.0 * (size - 1)) : Reflect(v, -1, 2.0 * size - 1);
    }
    return std::clamp(v, 0.0, static_cast<double>(size - 1));
  }

  template <typename T>
  static double At(const T* plane, int64_t height, int64_t width, int64_t y, int64_t x) {
    if (y < 0 || y >= height || x < 0 || x >= width) return 0;
    return AsDouble(plane[y * width + x]);
  }

  template <typename T>
  double SampleAt(const T* plane, int64_t height, int64_t width, double ix, double iy) const {
    // A NaN or infinite grid point samples nothing (and must not reach an integer cast).
    if (!std::isfinite(ix) || !std::isfinite(iy)) return 0;
    if (mode_ == 2) return Bicubic(plane, height, width, ix, iy);
    ix = Pad(ix, width);
    iy = Pad(iy, height);
    if (mode_ == 1) {
      return At(plane, height, width, static_cast<int64_t>(std::nearbyint(iy)),
                static_cast<int64_t>(std::nearbyint(ix)));
    }
    const double x0 = std::floor(ix), y0 = std::floor(iy);
    const double lx = ix - x0, ly = iy - y0;
    const int64_t xi = static_cast<int64_t>(x0), yi = static_cast<int64_t>(y0);
    return At(plane, height, width, yi, xi) * (1 - lx) * (1 - ly) +
           At(plane, height, width, yi, xi + 1) * lx * (1 - ly) +
           At(plane, height, width, yi + 1, xi) * (1 - lx) * ly +
           At(plane, height, width, yi + 1, xi + 1) * lx * ly;
  }

  // PyTorch's bicubic: 4x4 taps around the unpadded coordinate, each tap's position padded
  // on its own, Keys' cubic with A = -0.75.
  template <typename T>
  double Bicubic(const T* plane, int64_t height, int64_t width, double ix, double iy) const {
    const double x0 = std::floor(ix), y0 = std::floor(iy);
    const double tx = ix - x0, ty = iy - y0;
    auto tap = [&](double y, double x) {
      const double px = Pad(x, width), py = Pad(y, height);
      return At(plane, height, width, static_cast<int64_t>(py), static_cast<int64_t>(px));
    };
    double rows[4];
    for (int i = 0; i < 4; ++i) {
      double v[4];
      for (int j = 0; j < 4; ++j) v[j] = tap(y0 - 1 + i, x0 - 1 + j);
      rows[i] = Cubic(v, tx);
    }
    return Cubic(rows, ty);
  }

  static double Cubic(const double v[4], double t) {
    constexpr double A = -0.75;
    auto near = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
    auto far = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
    return v[0] * far(t + 1) + v[1] * near(t) + v[2] * near(1 - t) + v[3] * far(2 - t);
  }

  bool align_corners_;
  int mode_ = 0;
  Padding padding_ = Padding::kZeros;
};

// --- MaxUnpool -----------------------------------------------------------------------------

// MaxUnpool(X, I, output_shape?): scatters X into zeros at the flat indices I that MaxPool
// produced. Without output_shape the output is the pooled-from size,
// (in - 1) * stride + kernel - pads; a larger output_shape keeps each element at the same
// coordinates (indices are read against the pooled-from size, as the reference does).
class MaxUnpoolKernel : public MathKernel {
 public:
  explicit MaxUnpoolKernel(const ir::Node& node)
      : MathKernel(node),
        kernel_(node.GetInts("kernel_shape", {})),
        strides_(node.GetInts("strides", {})),
        pads_(node.GetInts("pads", {})) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() < 2 || !IsFloat(ctx.inputs[0].dtype) ||
        ctx.inputs[1].dtype != DType::kInt64 || ctx.inputs[1].shape != ctx.inputs[0].shape) {
      return Error("expects float X and int64 I of the same shape");
    }
    const Shape& x = ctx.inputs[0].shape;
    const int sd = x.rank() - 2;
    if (sd < 1 || static_cast<int>(kernel_.size()) != sd) {
      return Error("kernel_shape must have one value per spatial dim of ", x.ToString());
    }
    std::vector<int64_t> strides = strides_.empty() ? std::vector<int64_t>(sd, 1) : strides_;
    std::vector<int64_t> pads = pads_.empty() ? std::vector<int64_t>(2 * sd, 0) : pads_;
    if (static_cast<int>(strides.size()) != sd || static_cast<int>(pads.size()) != 2 * sd) {
      return Error("strides and pads must have ", sd, " and ", 2 * sd, " values");
    }
    std::vector<int64_t> dims = {x[0], x[1]};
    for (int d = 0; d < sd; ++d) {
      dims.push_back((x[d + 2] - 1) * strides[d] + kernel_[d] - pads[d] - pads[d + sd]);
    }
    pooled_from_ = Shape(dims);
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    if (Present(ctx, 2) && ctx.inputs[2].constant == nullptr) {
      ctx.output_dynamic[0] = true;
    } else {
      const Tensor* shape = Present(ctx, 2) ? ctx.inputs[2].constant : nullptr;
      KILN_ASSIGN_OR_RETURN(ctx.output_shapes[0], OutShape(shape));
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    if (!ctx.outputs[0].valid()) {
      KILN_ASSIGN_OR_RETURN(Shape shape, OutShape(&ctx.inputs[2]));
      KILN_RETURN_IF_ERROR(ctx.Allocate(0, x.dtype(), shape).status());
    }
    Tensor& y = ctx.outputs[0];
    const int rank = y.rank();
    const int64_t limit = pooled_from_.num_elements();
    absl::Status status;
    VisitFloat(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = y.data<T>();
      std::fill(out, out + y.num_elements(), FromDouble<T>(0));
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        int64_t flat = indices.data<int64_t>()[i];
        if (flat < 0 || flat >= limit) {
          status = Error("index ", flat, " at element ", i, " is outside the pooled-from shape ",
                         pooled_from_.ToString());
          return;
        }
        // Coordinates in the pooled-from shape, re-linearized in the output's.
        int64_t offset = 0, stride = 1;
        for (int d = rank - 1; d >= 0; --d) {
          offset += (flat % pooled_from_[d]) * stride;
          flat /= pooled_from_[d];
          stride *= y.dim(d);
        }
        out[offset] = x.data<T>()[i];
      }
    });
    return status;
  }

 private:
  absl::StatusOr<Shape> OutShape(const Tensor* shape_t) const {
    if (shape_t == nullptr) return pooled_from_;
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                          tensor_ops::ReadInts(*shape_t, "output_shape"));
    if (static_cast<int>(dims.size()) != pooled_from_.rank()) {
      return Error("output_shape has ", dims.size(), " values for rank ", pooled_from_.rank());
    }
    for (int d = 0; d < pooled_from_.rank(); ++d) {
      if (dims[d] < pooled_from_[d]) {
        return Error("output_shape ", Shape(dims).ToString(), " is smaller than the pooled-from ",
                     "shape ", pooled_from_.ToString());
      }
    }
    return Shape(dims);
  }

  std::vector<int64_t> kernel_, strides_, pads_;
  Shape pooled_from_;
};

KILN_REGISTER_KERNEL_CLASS("", "NonMaxSuppression", NonMaxSuppressionKernel);
KILN_REGISTER_KERNEL_CLASS("", "RoiAlign", RoiAlignKernel);
KILN_REGISTER_KERNEL_CLASS("", "GridSample", GridSampleKernel);
KILN_REGISTER_KERNEL_CLASS("", "MaxUnpool", MaxUnpoolKernel);

}  // namespace

KILN_KERNEL_FILE(vision_ops);

}  // namespace kiln::kernels::vision
