// Image decoding, encoding and the per-image transforms of input pipelines, with the numerics
// of tf.image / tf.io. Every function takes one image [h, w, c] or, where it makes sense, a
// batch [n, h, w, c]. Bad bytes give an error, never a crash (libjpeg and libpng errors
// unwind through longjmp back to us).
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kiln/core/tensor.h"

namespace kiln::data::formats {

struct JpegDecodeOptions {
  int channels = 0;  // 0: as stored (1 or 3), 1: grayscale, 3: RGB
  // The integer DCT libjpeg calls IFAST: TensorFlow's default (dct_method="" means
  // "INTEGER_FAST"). false: the accurate ISLOW DCT (dct_method="INTEGER_ACCURATE").
  bool fast_dct = true;
};

// uint8 [h, w, channels]. InvalidArgument "... is not a JPEG" for other bytes.
absl::StatusOr<Tensor> DecodeJpeg(absl::string_view bytes, const JpegDecodeOptions& options = {});
// uint8 [h, w, channels] (channels 0 = as stored: 1-4) or uint16 when dtype is kUInt16
// (8-bit samples are widened by 257 so that 255 becomes 65535; 16-bit samples read as uint8
// keep their high byte).
absl::StatusOr<Tensor> DecodePng(absl::string_view bytes, int channels = 0,
                                 DType dtype = DType::kUInt8);
// True when the bytes start like a JPEG or PNG file.
bool LooksLikeJpeg(absl::string_view bytes);
bool LooksLikePng(absl::string_view bytes);

// uint8 [h, w, 1 or 3] -> JPEG bytes (4:2:0 chroma subsampling, as tf.io.encode_jpeg).
absl::StatusOr<std::string> EncodeJpeg(const Tensor& image, int quality = 95);
// uint8 or uint16 [h, w, 1-4] -> PNG bytes.
absl::StatusOr<std::string> EncodePng(const Tensor& image);

// What Normalize takes, for DecodeJpegResized.
struct NormalizeArgs {
  absl::Span<const float> mean;
  absl::Span<const float> stddev;
  float scale = 1.0f;
};
// Gives the tensor a fused decode writes into (e.g. a view of a batch slot): float32 of the
// shape asked for, or an error, which the decode returns.
using JpegOutputFn = std::function<absl::StatusOr<Tensor>(const Shape& shape)>;

// DecodeJpeg, then ResizeBilinear to height x width, then (when `normalize` is given)
// Normalize, in one pass: each row is resized as libjpeg produces it, so the decoded image is
// never held whole (no allocation for it, no pass over it in memory). The result is the three
// functions' bit for bit, and so are the errors (a decode error is DecodeJpeg's, a mean or
// stddev that does not fit the channels is Normalize's). `output`, when given, provides the
// result's storage.
absl::StatusOr<Tensor> DecodeJpegResized(absl::string_view bytes, const JpegDecodeOptions& options,
                                         int64_t height, int64_t width,
                                         const NormalizeArgs* normalize = nullptr,
                                         const JpegOutputFn* output = nullptr);

// tf.image.resize(method="bilinear", antialias=False): half-pixel centers, float32 output.
// Input [h, w, c] or [n, h, w, c] of uint8, uint16, int32, float32 or float64.
absl::StatusOr<Tensor> ResizeBilinear(const Tensor& images, int64_t height, int64_t width);

// (x * scale - mean[c]) / stddev[c] over the last axis, float32 output. `mean` and `stddev`
// hold one value (all channels) or one per channel. A float32 input that no one else holds
// is normalized in place.
absl::StatusOr<Tensor> Normalize(const Tensor& images, absl::Span<const float> mean,
                                 absl::Span<const float> stddev, float scale = 1.0f);

// Element-wise conversion as tf.cast: float -> integer truncates toward zero, to bool is
// "!= 0". Strings are not converted.
absl::StatusOr<Tensor> Cast(const Tensor& input, DType dtype);

// tf.one_hot: integer indices of any shape -> [..., depth] float32 (or `dtype`); indices
// outside [0, depth) give an all-`off` row.
absl::StatusOr<Tensor> OneHot(const Tensor& indices, int64_t depth, float on = 1.0f,
                              float off = 0.0f, DType dtype = DType::kFloat32);

}  // namespace kiln::data::formats
