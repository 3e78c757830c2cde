// Pooling (ONNX semantics): MaxPool (with optional Indices output, dilations, ceil_mode,
// storage_order), AveragePool (count_include_pad, ceil_mode), LpPool, GlobalAveragePool,
// GlobalMaxPool, GlobalLpPool. 1-D to 3-D, NCHW.
//
// Pooling is a small share of any network's time, so these are direct loops over the output
// (parallel over N*C planes) rather than oneDNN primitives, which lets one implementation
// honour every attribute.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/conv_geometry.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels::nn {
namespace {

enum class PoolKind { kMax, kAverage, kLp };

// Max that propagates NaN, like ReduceMax, Max and the pooling of ONNX Runtime and PyTorch:
// std::max(acc, v) drops a NaN v (acc < NaN is false), so a NaN image came out of MaxPool as
// -inf. Ordered values pick exactly what std::max(acc, v) picks. Vectorizes to compare+blend.
inline float MaxNan(float acc, float v) { return (v > acc || v != v) ? v : acc; }
template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// Max or mean of a contiguous plane (GlobalMaxPool / GlobalAveragePool), in 8 lanes so the
// compiler vectorizes it.
float GlobalReduce(const float* x, int64_t n, bool max) {
  float lanes[8];
  int64_t i = 0;
  for (int l = 0; l < 8; ++l) lanes[l] = max ? -std::numeric_limits<float>::infinity() : 0.0f;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] = max ? MaxNan(lanes[l], x[i + l]) : lanes[l] + x[i + l];
  }
  float acc = max ? -std::numeric_limits<float>::infinity() : 0.0f;
  for (int l = 0; l < 8; ++l) acc = max ? MaxNan(acc, lanes[l]) : acc + lanes[l];
  for (; i < n; ++i) acc = max ? MaxNan(acc, x[i]) : acc + x[i];
  return max ? acc : acc / static_cast<float>(n);
}

// One plane of 2-D max or average pooling (no dilation, no indices; average divides by the
// window clipped to the input, i.e. count_include_pad=0). Windows are clipped once per output
// row and column instead of testing every tap, as the generic loop nest does (which made
// ResNet-18's one MaxPool cost as much as several of its convolutions).
void Pool2D(const float* in, float* out, int64_t ih, int64_t iw, int64_t oh, int64_t ow, int64_t kh,
            int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool max) {
  for (int64_t y = 0; y < oh; ++y) {
    const int64_t h0 = std::max<int64_t>(0, y * sh - ph);
    const int64_t h1 = std::min<int64_t>(ih, y * sh - ph + kh);
    float* out_row = out + y * ow;
    for (int64_t x = 0; x < ow; ++x) {
      const int64_t w0 = std::max<int64_t>(0, x * sw - pw);
      const int64_t w1 = std::min<int64_t>(iw, x * sw - pw + kw);
      float acc = max ? -std::numeric_limits<float>::infinity() : 0.0f;
      for (int64_t h = h0; h < h1; ++h) {
        const float* row = in + h * iw;
        if (max) {
          for (int64_t w = w0; w < w1; ++w) acc = MaxNan(acc, row[w]);
        } else {
          for (int64_t w = w0; w < w1; ++w) acc += row[w];
        }
      }
      const int64_t count = (h1 - h0) * (w1 - w0);
      out_row[x] = max ? acc : (count > 0 ? acc / static_cast<float>(count) : 0.0f);
    }
  }
}

class PoolKernel : public OpKernel {
  // Defined before Compute, which calls them from a generic lambda: clang 14 (the fuzz build)
  // emitted the call to MaxPoolExact<T> without instantiating it when the definition came
  // after that use (undefined references at link time).
  // Max pooling in the input's own type (output dtype = input dtype, no rounding through
  // float, which would lose 32/64-bit integers): one loop nest over the 3-D padded geometry,
  // with Indices and storage_order as in the float path.
  // Calls tap(flat) with the flat input offset of every in-bounds tap of the window of output
  // position (o0, o1, o2); the spatial dims are padded to 3 (input id, kernel k, strides s,
  // dilations d, begin pads pb).
  template <typename Tap>
  static void ForEachWindowTap(const int64_t* id, const int64_t* k, const int64_t* s,
                               const int64_t* d, const int64_t* pb, int64_t o0, int64_t o1,
                               int64_t o2, Tap&& tap) {
    for (int64_t k0 = 0; k0 < k[0]; ++k0) {
      const int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0];
      if (i0 < 0 || i0 >= id[0]) continue;
      for (int64_t k1 = 0; k1 < k[1]; ++k1) {
        const int64_t i1 = o1 * s[1] - pb[1] + k1 * d[1];
        if (i1 < 0 || i1 >= id[1]) continue;
        for (int64_t k2 = 0; k2 < k[2]; ++k2) {
          const int64_t i2 = o2 * s[2] - pb[2] + k2 * d[2];
          if (i2 < 0 || i2 >= id[2]) continue;
          tap((i0 * id[1] + i1) * id[2] + i2);
        }
      }
    }
  }

  template <typename T>
  absl::Status MaxPoolExact(ComputeContext& ctx, const int64_t* id, const int64_t* od,
                            const int64_t* k, const int64_t* s, const int64_t* d, const int64_t* pb,
                            int64_t* indices) const {
    const T* xv = ctx.inputs[0].data<T>();
    T* yv = ctx.outputs[0].data<T>();
    const int64_t in_plane = id[0] * id[1] * id[2], out_plane = od[0] * od[1] * od[2];
    const int64_t planes = in_shape_.dim(0) * in_shape_.dim(1);
    ctx.ParallelFor(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const T* in = xv + p * in_plane;
        for (int64_t o0 = 0; o0 < od[0]; ++o0)
          for (int64_t o1 = 0; o1 < od[1]; ++o1)
            for (int64_t o2 = 0; o2 < od[2]; ++o2) {
              T acc = std::numeric_limits<T>::lowest();
              int64_t arg = -1;
              ForEachWindowTap(id, k, s, d, pb, o0, o1, o2, [&](int64_t flat) {
                if (in[flat] > acc || arg < 0 || (IsNan(in[flat]) && !IsNan(acc))) {
                  acc = in[flat];
                  arg = flat;
                }
              });
              const int64_t o = (o0 * od[1] + o1) * od[2] + o2;
              yv[p * out_plane + o] = acc;
              if (indices != nullptr) {
                int64_t idx = arg;
                if (storage_order_ == 1 && spatial_ == 2) idx = (arg % id[2]) * id[1] + arg / id[2];
                indices[p * out_plane + o] = p * in_plane + idx;
              }
            }
      }
    });
    return absl::OkStatus();
  }

 public:
  PoolKernel(const ir::Node& node, PoolKind kind, bool global)
      : node_(node), kind_(kind), global_(global) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    const InputInfo& x = ctx.inputs[0];
    if (x.dtype != DType::kFloat32 && !(kind_ == PoolKind::kMax && IsExactMaxDType(x.dtype))) {
      return absl::UnimplementedError(absl::StrCat(
          node_.Describe(), ": only float input is supported",
          kind_ == PoolKind::kMax ? " (and double, int8/16/32/64, uint8/16/32/64)" : "", ", got ",
          DTypeName(x.dtype)));
    }
    dtype_ = x.dtype;
    if (x.shape.rank() < 3 || x.shape.rank() > 5) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": expects an N, C, spatial... input of rank 3 to 5; got ",
                       x.shape.ToString()));
    }
    spatial_ = x.shape.rank() - 2;
    out_spatial_.clear();
    in_shape_ = x.shape;
    if (global_) {
      kernel_.clear();
      for (int i = 0; i < spatial_; ++i) kernel_.push_back(x.shape.dim(2 + i));
      strides_.assign(spatial_, 1);
      dilations_.assign(spatial_, 1);
      pads_begin_.assign(spatial_, 0);
      pads_end_.assign(spatial_, 0);
    } else {
      kernel_ = node_.GetInts("kernel_shape");
      if (static_cast<int>(kernel_.size()) != spatial_) {
        return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": kernel_shape has ",
                                                       kernel_.size(), " entries for ", spatial_,
                                                       " spatial dimensions"));
      }
      strides_ = node_.GetInts("strides", std::vector<int64_t>(spatial_, 1));
      dilations_ = node_.GetInts("dilations", std::vector<int64_t>(spatial_, 1));
      std::vector<int64_t> pads = node_.GetInts("pads", std::vector<int64_t>(2 * spatial_, 0));
      if (static_cast<int>(strides_.size()) != spatial_ ||
          static_cast<int>(dilations_.size()) != spatial_ ||
          static_cast<int>(pads.size()) != 2 * spatial_) {
        return absl::InvalidArgumentError(absl::StrCat(node_.Describe(),
                                                       ": strides/dilations/pads do not match ",
                                                       spatial_, " spatial dimensions"));
      }
      for (int i = 0; i < spatial_; ++i) {
        if (strides_[i] < 1 || dilations_[i] < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(node_.Describe(), ": strides and dilations must be positive"));
        }
      }
      const std::string auto_pad_name = node_.GetString("auto_pad", "NOTSET");
      const std::optional<ir::AutoPad> auto_pad = ir::ParseAutoPad(auto_pad_name);
      if (!auto_pad.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": unknown auto_pad '", auto_pad_name, "'"));
      }
      const bool ceil_mode = node_.GetInt("ceil_mode", 0) != 0;
      pads_begin_.assign(spatial_, 0);
      pads_end_.assign(spatial_, 0);
      for (int i = 0; i < spatial_; ++i) {
        const int64_t in = x.shape.dim(2 + i);
        // ceil_mode: a window must start inside the input or its left padding (ONNX/PyTorch).
        const ir::WindowAxis axis =
            ir::WindowOutputAxis(in, kernel_[i], strides_[i], dilations_[i], pads[i],
                                 pads[spatial_ + i], *auto_pad, ceil_mode);
        const int64_t out = axis.out;
        if (out <= 0) {
          return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": input ",
                                                         x.shape.ToString(),
                                                         " is smaller than the pooling window"));
        }
        pads_begin_[i] = axis.pad_begin;
        pads_end_[i] = axis.pad_end;
        out_spatial_.push_back(out);
      }
    }
    if (global_) out_spatial_.assign(spatial_, 1);
    if (out_spatial_.size() != static_cast<size_t>(spatial_)) out_spatial_.resize(spatial_);
    count_include_pad_ = node_.GetInt("count_include_pad", 0) != 0;
    p_ = node_.GetInt("p", 2);
    storage_order_ = node_.GetInt("storage_order", 0);
    Shape out{x.shape.dim(0), x.shape.dim(1)};
    for (int64_t d : out_spatial_) out.push_back(d);
    const int outputs =
        kind_ == PoolKind::kMax && node_.outputs.size() > 1 && node_.outputs[1] != ir::kNoValue ? 2
                                                                                                : 1;
    ctx.SetNumOutputs(static_cast<int>(node_.outputs.size()));
    ctx.output_dtypes[0] = dtype_;
    ctx.output_shapes[0] = out;
    if (node_.outputs.size() > 1) {
      ctx.output_dtypes[1] = DType::kInt64;
      ctx.output_shapes[1] = out;
    }
    with_indices_ = outputs == 2;
    layout_ = ctx.inputs[0].layout;
    const bool plain_window =
        global_ || (spatial_ == 2 && dilations_[0] == 1 && dilations_[1] == 1 &&
                    (kind_ == PoolKind::kMax || !count_include_pad_));
    if (layout_ != ir::MemoryLayout::kPlain &&
        (dtype_ != DType::kFloat32 || kind_ == PoolKind::kLp || with_indices_ || spatial_ != 2 ||
         !plain_window)) {
      return absl::InvalidArgumentError(absl::StrCat(
          node_.Describe(), ": input layout ", ir::MemoryLayoutName(layout_),
          " is supported for 4-D max and average pooling without Indices, dilations or "
          "count_include_pad"));
    }
    // A window pool writes the layout it reads; an [N, C, 1, 1] result (a global pool's, or a
    // window pool's covering the whole image, as ResNet-50's last AveragePool) has the same
    // bytes in every layout, and is plain (the layout pass ends the chain there).
    const bool one_pixel =
        global_ || (spatial_ == 2 && out_spatial_[0] == 1 && out_spatial_[1] == 1);
    const ir::MemoryLayout out_layout = global_ ? ir::MemoryLayout::kPlain : layout_;
    if (ctx.output_layout(0) != out_layout &&
        !(one_pixel && ctx.output_layout(0) == ir::MemoryLayout::kPlain)) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": reads ", ir::MemoryLayoutName(layout_),
                       " and cannot write ", ir::MemoryLayoutName(ctx.output_layout(0))));
    }
    // Channels-last bytes as [images, H, W, channels]: NHWC is [N, H, W, C]; nChw8c is
    // [N * C/8, H, W, 8] (each block of 8 channels is an NHWC image of its own).
    const int64_t block = ir::ChannelBlock(layout_);
    rows_images_ = block > 0 ? x.shape.dim(0) * (x.shape.dim(1) / block) : x.shape.dim(0);
    rows_channels_ = block > 0 ? block : x.shape.dim(1);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    Tensor& y = ctx.outputs[0];
    int64_t* indices = with_indices_ ? ctx.outputs[1].data<int64_t>() : nullptr;
    const int64_t planes = in_shape_.dim(0) * in_shape_.dim(1);
    int64_t in_plane = 1, out_plane = 1;
    for (int i = 0; i < spatial_; ++i) {
      in_plane *= in_shape_.dim(2 + i);
      out_plane *= out_spatial_[i];
    }
    // Pad to 3 spatial dims so one loop nest serves 1-D, 2-D and 3-D.
    int64_t id[3] = {1, 1, 1}, od[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
            d[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
    const int off = 3 - spatial_;
    for (int i = 0; i < spatial_; ++i) {
      id[off + i] = in_shape_.dim(2 + i);
      od[off + i] = out_spatial_[i];
      k[off + i] = kernel_[i];
      s[off + i] = strides_[i];
      d[off + i] = dilations_[i];
      pb[off + i] = pads_begin_[i];
    }
    if (dtype_ != DType::kFloat32) {
      // Reshape admitted only IsExactMaxDType: float64 and the integers, compared exactly.
      return VisitDType(dtype_, [&](auto tag) -> absl::Status {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, double> ||
                      (std::is_integral_v<T> && !std::is_same_v<T, bool>)) {
          return MaxPoolExact<T>(ctx, id, od, k, s, d, pb, indices);
        } else {
          return absl::InternalError(
              absl::StrCat(node_.Describe(), ": unexpected dtype ", DTypeName(dtype_)));
        }
      });
    }
    const float* xv = x.data<float>();
    float* yv = y.data<float>();
    if (layout_ != ir::MemoryLayout::kPlain && !global_) {
      // Channels-last bytes in and out: each tap is a contiguous row of `channels`.
      const int64_t channels = rows_channels_;
      const int64_t ih = id[1], iw = id[2], oh = od[1], ow = od[2];
      const bool max = kind_ == PoolKind::kMax;
      ctx.ParallelFor(rows_images_ * oh, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t b = row / oh, y = row % oh;
          const float* in = xv + b * ih * iw * channels;
          const int64_t h0 = std::max<int64_t>(0, y * s[1] - pb[1]);
          const int64_t h1 = std::min<int64_t>(ih, y * s[1] - pb[1] + k[1]);
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t w0 = std::max<int64_t>(0, x * s[2] - pb[2]);
            const int64_t w1 = std::min<int64_t>(iw, x * s[2] - pb[2] + k[2]);
            float* out = yv + ((b * oh + y) * ow + x) * channels;
            for (int64_t c = 0; c < channels; ++c) {
              out[c] = max ? -std::numeric_limits<float>::infinity() : 0.0f;
            }
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t w = w0; w < w1; ++w) {
                const float* tap = in + (h * iw + w) * channels;
                if (max) {
                  for (int64_t c = 0; c < channels; ++c) out[c] = MaxNan(out[c], tap[c]);
                } else {
                  for (int64_t c = 0; c < channels; ++c) out[c] += tap[c];
                }
              }
            }
            if (!max) {
              const int64_t count = (h1 - h0) * (w1 - w0);
              // Divided, not multiplied by 1/count: the NCHW loop divides, and the layout a
              // pass picks must not change the result's rounding.
              const float divisor = static_cast<float>(count);
              for (int64_t c = 0; c < channels; ++c) out[c] = count > 0 ? out[c] / divisor : 0.0f;
            }
          }
        }
      });
      return absl::OkStatus();
    }
    if (layout_ != ir::MemoryLayout::kPlain) {
      // [N, C, H, W] whose bytes are channels-last (after a conv chain): reduce the H*W rows
      // of each image's channels; the [N, C, 1, 1] result has the same bytes in every layout.
      const int64_t channels = rows_channels_;
      const bool max = kind_ == PoolKind::kMax;
      ctx.ParallelFor(rows_images_, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const float* in = xv + b * in_plane * channels;
          float* out = yv + b * channels;
          for (int64_t c = 0; c < channels; ++c) {
            out[c] = max ? -std::numeric_limits<float>::infinity() : 0.0f;
          }
          for (int64_t i = 0; i < in_plane; ++i) {
            const float* row = in + i * channels;
            if (max) {
              for (int64_t c = 0; c < channels; ++c) out[c] = MaxNan(out[c], row[c]);
            } else {
              for (int64_t c = 0; c < channels; ++c) out[c] += row[c];
            }
          }
          if (!max) {
            const float divisor = static_cast<float>(in_plane);  // as GlobalReduce divides
            for (int64_t c = 0; c < channels; ++c) out[c] /= divisor;
          }
        }
      });
      return absl::OkStatus();
    }
    if (indices == nullptr && kind_ != PoolKind::kLp && global_) {
      ctx.ParallelFor(planes, 16, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          yv[p] = GlobalReduce(xv + p * in_plane, in_plane, kind_ == PoolKind::kMax);
        }
      });
      return absl::OkStatus();
    }
    const bool plain_2d =
        indices == nullptr && spatial_ == 2 && d[1] == 1 && d[2] == 1 &&
        (kind_ == PoolKind::kMax || (kind_ == PoolKind::kAverage && !count_include_pad_));
    if (plain_2d) {
      ctx.ParallelFor(planes, 1, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          Pool2D(xv + p * in_plane, yv + p * out_plane, id[1], id[2], od[1], od[2], k[1], k[2],
                 s[1], s[2], pb[1], pb[2], kind_ == PoolKind::kMax);
        }
      });
      return absl::OkStatus();
    }
    ctx.ParallelFor(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const float* in = xv + p * in_plane;
        float* out = yv + p * out_plane;
        for (int64_t o0 = 0; o0 < od[0]; ++o0)
          for (int64_t o1 = 0; o1 < od[1]; ++o1)
            for (int64_t o2 = 0; o2 < od[2]; ++o2) {
              float acc = kind_ == PoolKind::kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
              int64_t arg = -1, count = 0;
              ForEachWindowTap(id, k, s, d, pb, o0, o1, o2, [&](int64_t flat) {
                const float v = in[flat];
                ++count;
                if (kind_ == PoolKind::kMax) {
                  if (v > acc || arg < 0 || (v != v && acc == acc)) {
                    acc = v;
                    arg = flat;
                  }
                } else if (kind_ == PoolKind::kAverage) {
                  acc += v;
                } else {
                  acc += std::pow(std::fabs(v), static_cast<float>(p_));
                }
              });
              const int64_t o = (o0 * od[1] + o1) * od[2] + o2;
              if (kind_ == PoolKind::kAverage) {
                int64_t divisor = count;
                if (count_include_pad_) {
                  // Count the window clipped to the padded extent (ONNX: pads count, but not
                  // the ceil_mode overhang past the padding).
                  divisor = 1;
                  const int64_t* dims_in = id;
                  for (int a = 0; a < 3; ++a) {
                    const int64_t start = (a == 0 ? o0 : a == 1 ? o1 : o2) * s[a] - pb[a];
                    const int64_t pe_limit = dims_in[a] + (a >= off ? PadEnd(a - off) : 0);
                    const int64_t stop = std::min(start + (k[a] - 1) * d[a] + 1, pe_limit);
                    divisor *= (stop - start + d[a] - 1) / d[a];
                  }
                }
                acc = divisor > 0 ? acc / static_cast<float>(divisor) : 0.0f;
              } else if (kind_ == PoolKind::kLp) {
                acc = std::pow(acc, 1.0f / static_cast<float>(p_));
              }
              out[o] = acc;
              if (indices != nullptr) {
                // Indices are flat over the whole input tensor (row-major, or column-major
                // within the plane for storage_order=1).
                int64_t idx = arg;
                if (storage_order_ == 1 && spatial_ == 2) {
                  const int64_t h = arg / id[2], w = arg % id[2];
                  idx = w * id[1] + h;
                }
                indices[p * out_plane + o] = p * in_plane + idx;
              }
            }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t PadEnd(int i) const { return pads_end_[i]; }

  static bool IsExactMaxDType(DType t) { return t == DType::kFloat64 || IsInteger(t); }

  ir::Node node_;
  PoolKind kind_;
  bool global_;
  DType dtype_ = DType::kFloat32;
  int spatial_ = 0;
  Shape in_shape_;
  std::vector<int64_t> kernel_, strides_, dilations_, pads_begin_, pads_end_, out_spatial_;
  bool count_include_pad_ = false, with_indices_ = false;
  ir::MemoryLayout layout_ = ir::MemoryLayout::kPlain;
  int64_t rows_images_ = 0, rows_channels_ = 0;  // channels-last view (see Reshape)
  int64_t p_ = 2, storage_order_ = 0;
};

template <PoolKind K, bool G>
absl::StatusOr<std::unique_ptr<OpKernel>> MakePool(const ir::Node& node) {
  return std::unique_ptr<OpKernel>(new PoolKernel(node, K, G));
}

KILN_REGISTER_KERNEL("", "MaxPool", (MakePool<PoolKind::kMax, false>));
KILN_REGISTER_KERNEL("", "AveragePool", (MakePool<PoolKind::kAverage, false>));
KILN_REGISTER_KERNEL("", "LpPool", (MakePool<PoolKind::kLp, false>));
KILN_REGISTER_KERNEL("", "GlobalMaxPool", (MakePool<PoolKind::kMax, true>));
KILN_REGISTER_KERNEL("", "GlobalAveragePool", (MakePool<PoolKind::kAverage, true>));
KILN_REGISTER_KERNEL("", "GlobalLpPool", (MakePool<PoolKind::kLp, true>));

}  // namespace

KILN_KERNEL_FILE(nn_pool);

}  // namespace kiln::kernels::nn
