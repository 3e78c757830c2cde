#include "kiln/data/formats/image.h"

// jpeglib.h needs <cstdio> before it.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/core/status.h"

namespace kiln::data::formats {
namespace {

// Images beyond this many pixels are refused before allocating (a corrupt header must not
// make us allocate gigabytes).
constexpr int64_t kMaxPixels = int64_t{1} << 29;

std::string FirstBytes(absl::string_view bytes) {
  std::string hex;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 4); ++i) {
    absl::StrAppendFormat(&hex, "%s%02x", i ? " " : "", static_cast<uint8_t>(bytes[i]));
  }
  return bytes.empty() ? "empty input" : absl::StrCat("starts with ", hex);
}

// ----------------------------------------------------------------------------------- JPEG

struct JpegError {
  jpeg_error_mgr manager;  // first member: libjpeg hands us a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* error = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, error->message);
  std::longjmp(error->jump, 1);
}

void JpegEmitMessage(j_common_ptr cinfo, int level) {
  auto* error = reinterpret_cast<JpegError*>(cinfo->err);
  // Warnings are not printed; a premature end of data makes the decode fail as TensorFlow's
  // does (libjpeg would pad the image with gray).
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) error->truncated = true;
}

// Receives a JPEG's rows as libjpeg produces them, top to bottom: DecodeJpeg writes them into
// its output tensor, DecodeJpegResized into a ring of rows that its resize consumes at once.
// A sink lives in the caller's frame and its methods return before libjpeg runs again, so a
// longjmp out of libjpeg never skips one of their destructors.
class JpegRowSink {
 public:
  virtual ~JpegRowSink() = default;
  // The output's size, once, before any row; false stops the decode (kAborted).
  virtual bool Start(int64_t height, int64_t width, int channels) = 0;
  // Where row y goes. The rows asked for in one step are distinct and are written before
  // RowsDone.
  virtual uint8_t* Row(int64_t y) = 0;
  // Rows [0, upto) are decoded.
  virtual void RowsDone(int64_t upto) = 0;
};

enum class JpegDecodeResult { kOk, kError, kAborted };

// At most this many rows are asked of libjpeg per step (JpegRowSink::Row).
constexpr int kJpegRowsPerStep = 16;

// Kept free of C++ objects with destructors between setjmp and the end, so that longjmp
// skips nothing that must be destroyed.
JpegDecodeResult DecodeJpegRows(absl::string_view bytes, const JpegDecodeOptions& options,
                                JpegRowSink* sink, std::string* error_message) {
  jpeg_decompress_struct cinfo;
  JpegError error;
  error.truncated = false;
  error.message[0] = '\0';
  cinfo.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = JpegErrorExit;
  error.manager.emit_message = JpegEmitMessage;
  if (setjmp(error.jump)) {
    jpeg_destroy_decompress(&cinfo);
    *error_message = error.message;
    return JpegDecodeResult::kError;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  int channels = options.channels;
  if (channels == 0) channels = cinfo.num_components == 1 ? 1 : 3;
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  cinfo.dct_method = options.fast_dct ? JDCT_IFAST : JDCT_ISLOW;
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > kMaxPixels) {
    std::snprintf(error.message, sizeof(error.message), "image of %ux%u pixels is too large",
                  cinfo.image_width, cinfo.image_height);
    std::longjmp(error.jump, 1);
  }
  jpeg_start_decompress(&cinfo);
  if (!sink->Start(cinfo.output_height, cinfo.output_width, channels)) {
    jpeg_destroy_decompress(&cinfo);
    return JpegDecodeResult::kAborted;
  }
  JSAMPROW rows[kJpegRowsPerStep];
  while (cinfo.output_scanline < cinfo.output_height) {
    const int count = std::min<int>(kJpegRowsPerStep, cinfo.output_height - cinfo.output_scanline);
    for (int i = 0; i < count; ++i) rows[i] = sink->Row(cinfo.output_scanline + i);
    if (jpeg_read_scanlines(&cinfo, rows, count) == 0) break;
    if (error.truncated) break;
    sink->RowsDone(cinfo.output_scanline);
  }
  if (error.truncated) {
    std::snprintf(error.message, sizeof(error.message), "JPEG data ends early (truncated file)");
    std::longjmp(error.jump, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return JpegDecodeResult::kOk;
}

// The whole image into a new uint8 tensor.
class TensorRowSink : public JpegRowSink {
 public:
  explicit TensorRowSink(Tensor* out) : out_(out) {}
  bool Start(int64_t height, int64_t width, int channels) override {
    *out_ = Tensor(DType::kUInt8, Shape{height, width, channels});
    base_ = out_->data<uint8_t>();
    stride_ = static_cast<size_t>(width) * channels;
    return true;
  }
  uint8_t* Row(int64_t y) override { return base_ + y * stride_; }
  void RowsDone(int64_t) override {}

 private:
  Tensor* out_;
  uint8_t* base_ = nullptr;
  size_t stride_ = 0;
};

struct JpegDestination {
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
};

bool EncodeJpegInto(const Tensor& image, int quality, JpegDestination* destination,
                    std::string* error_message) {
  jpeg_compress_struct cinfo;
  JpegError error;
  error.truncated = false;
  cinfo.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = JpegErrorExit;
  error.manager.emit_message = JpegEmitMessage;
  if (setjmp(error.jump)) {
    jpeg_destroy_compress(&cinfo);
    *error_message = error.message;
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &destination->buffer, &destination->size);
  cinfo.image_height = static_cast<JDIMENSION>(image.dim(0));
  cinfo.image_width = static_cast<JDIMENSION>(image.dim(1));
  cinfo.input_components = static_cast<int>(image.dim(2));
  cinfo.in_color_space = image.dim(2) == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(image.dim(1) * image.dim(2));
  auto* base = image.data<uint8_t>();
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = base + cinfo.next_scanline * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

// ------------------------------------------------------------------------------------ PNG

struct PngIo {
  const unsigned char* data = nullptr;
  size_t size = 0;
  size_t position = 0;
  std::string* output = nullptr;
  char message[256] = {0};
};

[[noreturn]] void PngError(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof(io->message), "%s", message);
  png_longjmp(png, 1);
}
void PngWarning(png_structp, png_const_charp) {}

void PngReadData(png_structp png, png_bytep out, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (io->size - io->position < n) png_error(png, "PNG data ends early (truncated file)");
  std::memcpy(out, io->data + io->position, n);
  io->position += n;
}

void PngWriteData(png_structp png, png_bytep data, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  io->output->append(reinterpret_cast<const char*>(data), n);
}
void PngFlush(png_structp) {}

bool DecodePngInto(absl::string_view bytes, int channels, DType dtype, Tensor* out,
                   std::vector<png_bytep>* rows, PngIo* io) {
  io->data = reinterpret_cast<const unsigned char*>(bytes.data());
  io->size = bytes.size();
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, io, PngError, PngWarning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, io, PngReadData);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  if (static_cast<int64_t>(width) * height > kMaxPixels) png_error(png, "image is too large");
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  const bool has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;

  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (has_trns) png_set_tRNS_to_alpha(png);
  const bool is_color = (color_type & PNG_COLOR_MASK_COLOR) != 0;
  const bool has_alpha = (color_type & PNG_COLOR_MASK_ALPHA) != 0 || has_trns;
  const int stored_channels = (is_color ? 3 : 1) + (has_alpha ? 1 : 0);
  const int out_channels = channels == 0 ? stored_channels : channels;
  const bool want_color = out_channels >= 3;
  const bool want_alpha = out_channels == 2 || out_channels == 4;
  if (is_color && !want_color) png_set_rgb_to_gray_fixed(png, 1, -1, -1);
  if (!is_color && want_color) png_set_gray_to_rgb(png);
  if (has_alpha && !want_alpha) png_set_strip_alpha(png);
  if (!has_alpha && want_alpha) png_set_add_alpha(png, 0xffff, PNG_FILLER_AFTER);
  const int bytes_per_sample = dtype == DType::kUInt16 ? 2 : 1;
  if (bytes_per_sample == 1 && bit_depth == 16) png_set_strip_16(png);
  if (bytes_per_sample == 2) {
    if (bit_depth < 16) png_set_expand_16(png);
    png_set_swap(png);  // PNG stores 16-bit samples big-endian
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != out_channels ||
      png_get_rowbytes(png, info) != static_cast<size_t>(width) * out_channels * bytes_per_sample) {
    png_error(png, "unexpected PNG layout after conversion");
  }
  *out = Tensor(dtype, Shape{height, width, out_channels});
  rows->resize(height);
  auto* base = static_cast<png_bytep>(out->raw_data());
  for (png_uint_32 y = 0; y < height; ++y) {
    (*rows)[y] = base + static_cast<size_t>(y) * width * out_channels * bytes_per_sample;
  }
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

bool EncodePngInto(const Tensor& image, std::vector<png_bytep>* rows, PngIo* io) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, io, PngError, PngWarning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, io, PngWriteData, PngFlush);
  const int channels = static_cast<int>(image.dim(2));
  static constexpr int kColorTypes[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                        PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  const int bit_depth = image.dtype() == DType::kUInt16 ? 16 : 8;
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.dim(1)),
               static_cast<png_uint_32>(image.dim(0)), bit_depth, kColorTypes[channels - 1],
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  if (bit_depth == 16) png_set_swap(png);
  auto* base = static_cast<png_bytep>(image.raw_data());
  const size_t stride = static_cast<size_t>(image.dim(1)) * channels * (bit_depth / 8);
  rows->resize(image.dim(0));
  for (int64_t y = 0; y < image.dim(0); ++y) (*rows)[y] = base + y * stride;
  png_write_image(png, rows->data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

// ------------------------------------------------------------------------------- resize

struct Interpolation {
  int64_t lower;
  int64_t upper;
  float lerp;
};

// TensorFlow's compute_interpolation_weights with HalfPixelScaler.
std::vector<Interpolation> InterpolationWeights(int64_t out_size, int64_t in_size, int64_t stride) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  std::vector<Interpolation> weights(out_size);
  for (int64_t i = 0; i < out_size; ++i) {
    const float in = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const float in_floor = std::floor(in);
    weights[i].lower = std::max<int64_t>(static_cast<int64_t>(in_floor), 0) * stride;
    weights[i].upper = std::min<int64_t>(static_cast<int64_t>(std::ceil(in)), in_size - 1) * stride;
    weights[i].lerp = in - in_floor;
  }
  return weights;
}

// Horizontal pass of one input row: out[x * c + k] = left + (right - left) * x_lerp, the
// first half of TensorFlow's compute_lerp (the "top" or "bottom" value).
template <int kChannels>
void InterpolateRow(const float* row, int64_t channels, const std::vector<Interpolation>& xs,
                    float* out) {
  const int64_t c = kChannels > 0 ? kChannels : channels;
  for (const Interpolation& x : xs) {
    const float* left = row + x.lower;
    const float* right = row + x.upper;
    const float lerp = x.lerp;
    for (int64_t k = 0; k < c; ++k) out[k] = left[k] + (right[k] - left[k]) * lerp;
    out += c;
  }
}

#if defined(__SSE2__)
// Three channels, one 4-lane operation per pixel: loads one float past the left and right
// pixels and stores one float past the output pixel, which the next pixel overwrites (the
// buffers carry one float of padding). The lanes compute exactly what the scalar loop does.
void InterpolateRowRgb(const float* row, const std::vector<Interpolation>& xs, float* out) {
  for (const Interpolation& x : xs) {
    const __m128 left = _mm_loadu_ps(row + x.lower);
    const __m128 right = _mm_loadu_ps(row + x.upper);
    const __m128 lerp = _mm_set1_ps(x.lerp);
#if defined(__FMA__)
    _mm_storeu_ps(out, _mm_fmadd_ps(_mm_sub_ps(right, left), lerp, left));
#else
    _mm_storeu_ps(out, _mm_add_ps(left, _mm_mul_ps(_mm_sub_ps(right, left), lerp)));
#endif
    out += 3;
  }
}
#endif

// TensorFlow's arithmetic, one helper each so that every path (the resize alone, Normalize
// alone, and the fused decode-resize-normalize) computes each value with the same
// operations and hence the same bits.
inline float Lerp(float from, float to, float t) { return from + (to - from) * t; }
inline float NormalizeValue(float x, float scale, float mean, float stddev) {
  return (x * scale - mean) / stddev;
}

// Per-channel normalize constants laid out along one output row ([width * channels]), so that
// the fused vertical pass indexes them like the row itself.
struct RowNormalize {
  const float* mean;
  const float* stddev;
  float scale;
};

// Separable form of TensorFlow's resize_bilinear: each output row needs the horizontally
// interpolated input rows `lower` and `upper`, which are computed once and reused by the next
// output row when it shares them; the vertical pass is then a contiguous, vectorized loop.
// The arithmetic per output value is TensorFlow's: top + (bottom - top) * y_lerp with
// top = top_left + (top_right - top_left) * x_lerp.
//
// Rows are pulled in order: Advance(available, row) emits every output row whose input rows
// are below `available`, reading input row r as row(r). The input rows it reads never go back
// by more than one below `available` of the previous call (lower >= upper - 1 and the rows an
// output row needs never decrease), which lets a JPEG decode feed it through a small ring of
// rows instead of a whole decoded image.
template <typename T>
class RowResizer {
 public:
  // `stream`: `out` is written once and read much later (a batch slot, see Advance).
  RowResizer(int64_t in_w, int64_t c, const std::vector<Interpolation>& ys,
             const std::vector<Interpolation>& xs, std::vector<float>* scratch, float* out,
             const RowNormalize* normalize, bool stream = false)
      : c_(c),
        in_row_(in_w * c),
        out_row_(static_cast<int64_t>(xs.size()) * c),
        ys_(ys),
        xs_(xs),
        out_(out),
        normalize_(normalize),
        stream_(stream) {
    // One float of padding after each buffer (see InterpolateRowRgb).
    scratch->assign(in_row_ + 3 * out_row_ + 3, 0.0f);
    converted_ = scratch->data();
    rows_[0] = converted_ + in_row_ + 1;
    rows_[1] = converted_ + in_row_ + out_row_ + 2;
    staged_ = converted_ + in_row_ + 2 * out_row_ + 3;
  }

  template <typename RowFn>
  void Advance(int64_t available, RowFn row) {
    for (; next_ < static_cast<int64_t>(ys_.size()); ++next_) {
      const Interpolation& y = ys_[next_];
      if (y.upper >= available) return;
      if (cached_[0] != y.lower) {
        if (cached_[1] == y.lower) {  // moved down one input row: the old bottom is the new top
          std::swap(rows_[0], rows_[1]);
          std::swap(cached_[0], cached_[1]);
        } else {
          Horizontal(row(y.lower), rows_[0]);
          cached_[0] = y.lower;
        }
      }
      if (cached_[1] != y.upper) {
        if (y.upper == y.lower) {
          std::memcpy(rows_[1], rows_[0], out_row_ * sizeof(float));
        } else {
          Horizontal(row(y.upper), rows_[1]);
        }
        cached_[1] = y.upper;
      }
      const float* top = rows_[0];
      const float* bottom = rows_[1];
      const float y_lerp = y.lerp;
      // Streamed rows are computed in a row that stays in L1, then stored past the caches.
      float* out = stream_ ? staged_ : out_ + next_ * out_row_;
      if (normalize_ == nullptr) {
        for (int64_t j = 0; j < out_row_; ++j) out[j] = Lerp(top[j], bottom[j], y_lerp);
      } else {
        const float* mean = normalize_->mean;
        const float* stddev = normalize_->stddev;
        const float scale = normalize_->scale;
        for (int64_t j = 0; j < out_row_; ++j) {
          out[j] = NormalizeValue(Lerp(top[j], bottom[j], y_lerp), scale, mean[j], stddev[j]);
        }
      }
      if (stream_) StreamRow(staged_, out_row_, out_ + next_ * out_row_);
    }
#if defined(__SSE2__)
    // Streaming stores are weakly ordered: make them visible before the caller hands the
    // output to another thread.
    if (stream_) _mm_sfence();
#endif
  }

 private:
  void Horizontal(const T* src, float* dst) {
    for (int64_t i = 0; i < in_row_; ++i) converted_[i] = static_cast<float>(src[i]);
    switch (c_) {
      case 1:
        InterpolateRow<1>(converted_, c_, xs_, dst);
        break;
      case 3:
#if defined(__SSE2__)
        InterpolateRowRgb(converted_, xs_, dst);
#else
        InterpolateRow<3>(converted_, c_, xs_, dst);
#endif
        break;
      case 4:
        InterpolateRow<4>(converted_, c_, xs_, dst);
        break;
      default:
        InterpolateRow<0>(converted_, c_, xs_, dst);
        break;
    }
  }

  // Copies `n` floats to `dst` with non-temporal stores where it is 16-byte aligned. A batch
  // slot is written once and read by the consumer after the rest of the batch went through
  // the caches (64 images of 224x224x3 floats are 37 MiB, more than the L3): ordinary stores
  // would first read every line of it from memory (read for ownership) for nothing. The image
  // benchmark spent 6% more CPU per image writing its slots that way (`kiln data bench
  // --experiment=images`, 0.392-0.401 ms against 0.369-0.377 ms streamed).
  static void StreamRow(const float* src, int64_t n, float* dst) {
    int64_t j = 0;
#if defined(__SSE2__)
    for (; j < n && (reinterpret_cast<uintptr_t>(dst + j) & 15) != 0; ++j) dst[j] = src[j];
    for (; j + 4 <= n; j += 4) _mm_stream_ps(dst + j, _mm_loadu_ps(src + j));
#endif
    for (; j < n; ++j) dst[j] = src[j];
  }

  const int64_t c_, in_row_, out_row_;
  const std::vector<Interpolation>& ys_;
  const std::vector<Interpolation>& xs_;
  float* const out_;
  const RowNormalize* const normalize_;
  const bool stream_;
  float* staged_;  // the row being computed when streaming
  float* converted_;
  float* rows_[2];
  int64_t cached_[2] = {-1, -1};  // input row held by rows_[i]
  int64_t next_ = 0;              // next output row
};

template <typename T>
void ResizeImage(const T* in, int64_t in_h, int64_t in_w, int64_t c, float* out,
                 const std::vector<Interpolation>& ys, const std::vector<Interpolation>& xs,
                 std::vector<float>* scratch) {
  RowResizer<T> resizer(in_w, c, ys, xs, scratch, out, nullptr);
  const int64_t in_row = in_w * c;
  resizer.Advance(in_h, [&](int64_t r) { return in + r * in_row; });
}

template <typename T>
void ResizeBatch(const Tensor& images, int64_t n, int64_t h, int64_t w, int64_t c, Tensor* out,
                 int64_t out_h, int64_t out_w) {
  const auto ys = InterpolationWeights(out_h, h, 1);
  const auto xs = InterpolationWeights(out_w, w, c);
  const T* in = images.data<T>();
  float* dst = out->data<float>();
  std::vector<float> scratch;
  for (int64_t i = 0; i < n; ++i) {
    ResizeImage<T>(in + i * h * w * c, h, w, c, dst + i * out_h * out_w * c, ys, xs, &scratch);
  }
}

template <typename To, typename From>
To ConvertValue(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, Float16> || std::is_same_v<From, BFloat16>) {
      return static_cast<float>(v) != 0.0f;
    } else {
      return v != From{};
    }
  } else if constexpr (std::is_same_v<From, Float16> || std::is_same_v<From, BFloat16>) {
    return ConvertValue<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Float16> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

absl::Status InvalidJpeg(absl::string_view bytes, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("decode_jpeg: invalid JPEG data (", bytes.size(), " bytes): ", message));
}

// Decoded rows go through a ring of kRingRows rows straight into a RowResizer: the decoded
// image is never held whole (no allocation or page faults for it, and the rows are still in
// L1 when the horizontal pass reads them). The resizer reads rows at most one below what was
// decoded before (see RowResizer), so one row more than libjpeg writes per step suffices.
class ResizeRowSink : public JpegRowSink {
 public:
  static constexpr int kRingRows = kJpegRowsPerStep + 1;

  ResizeRowSink(int64_t height, int64_t width, const NormalizeArgs* normalize,
                const JpegOutputFn* output)
      : height_(height), width_(width), normalize_(normalize), output_(output) {}

  bool Start(int64_t in_h, int64_t in_w, int channels) override {
    if (normalize_ != nullptr) {
      auto fits = [&](absl::Span<const float> values) {
        return values.size() == 1 || static_cast<int64_t>(values.size()) == channels;
      };
      if (!fits(normalize_->mean) || !fits(normalize_->stddev)) {
        // Normalize's error, after DecodeJpeg's errors: the caller runs the three apart.
        unfused_ = true;
        return false;
      }
      const int64_t row = width_ * channels;
      mean_row_.resize(row);
      stddev_row_.resize(row);
      for (int64_t j = 0; j < row; ++j) {
        const int64_t k = j % channels;
        mean_row_[j] = normalize_->mean.size() == 1 ? normalize_->mean[0] : normalize_->mean[k];
        stddev_row_[j] =
            normalize_->stddev.size() == 1 ? normalize_->stddev[0] : normalize_->stddev[k];
      }
      row_normalize_ = RowNormalize{mean_row_.data(), stddev_row_.data(), normalize_->scale};
    }
    const Shape shape{height_, width_, channels};
    if (output_ != nullptr) {
      absl::StatusOr<Tensor> out = (*output_)(shape);
      if (!out.ok()) {
        status_ = out.status();
        return false;
      }
      if (out->dtype() != DType::kFloat32 || out->shape() != shape) {
        status_ = absl::InternalError(
            absl::StrCat("decode_jpeg: the output given for ", shape.ToString(), " is ",
                         DTypeName(out->dtype()), out->shape().ToString()));
        return false;
      }
      out_ = *std::move(out);
    } else {
      out_ = Tensor(DType::kFloat32, shape);
    }
    stride_ = in_w * channels;
    ring_.resize(static_cast<size_t>(kRingRows) * stride_);
    ys_ = InterpolationWeights(height_, in_h, 1);
    xs_ = InterpolationWeights(width_, in_w, channels);
    // A tensor given by output_ is a slot of a batch being assembled: streamed.
    resizer_.emplace(in_w, channels, ys_, xs_, &scratch_, out_.data<float>(),
                     normalize_ != nullptr ? &row_normalize_ : nullptr,
                     /*stream=*/output_ != nullptr);
    return true;
  }
  uint8_t* Row(int64_t y) override { return ring_.data() + (y % kRingRows) * stride_; }
  void RowsDone(int64_t upto) override {
    resizer_->Advance(upto, [this](int64_t y) { return Row(y); });
  }

  Tensor& out() { return out_; }
  const absl::Status& status() const { return status_; }
  bool unfused() const { return unfused_; }

 private:
  const int64_t height_, width_;
  const NormalizeArgs* normalize_;
  const JpegOutputFn* output_;
  absl::Status status_;
  bool unfused_ = false;
  Tensor out_;
  int64_t stride_ = 0;
  std::vector<uint8_t> ring_;
  std::vector<float> scratch_, mean_row_, stddev_row_;
  RowNormalize row_normalize_{};
  std::vector<Interpolation> ys_, xs_;
  std::optional<RowResizer<uint8_t>> resizer_;
};

}  // namespace

bool LooksLikeJpeg(absl::string_view bytes) {
  return bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xff &&
         static_cast<uint8_t>(bytes[1]) == 0xd8 && static_cast<uint8_t>(bytes[2]) == 0xff;
}

bool LooksLikePng(absl::string_view bytes) {
  return bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0;
}

absl::StatusOr<Tensor> DecodeJpeg(absl::string_view bytes, const JpegDecodeOptions& options) {
  if (options.channels != 0 && options.channels != 1 && options.channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_jpeg: channels must be 0, 1 or 3, not ", options.channels));
  }
  if (!LooksLikeJpeg(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decode_jpeg: input is not a JPEG (", bytes.size(), " bytes, ", FirstBytes(bytes), ")"));
  }
  Tensor out;
  std::string message;
  TensorRowSink sink(&out);
  if (DecodeJpegRows(bytes, options, &sink, &message) != JpegDecodeResult::kOk) {
    return InvalidJpeg(bytes, message);
  }
  return out;
}

absl::StatusOr<Tensor> DecodeJpegResized(absl::string_view bytes, const JpegDecodeOptions& options,
                                         int64_t height, int64_t width,
                                         const NormalizeArgs* normalize,
                                         const JpegOutputFn* output) {
  if (options.channels != 0 && options.channels != 1 && options.channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_jpeg: channels must be 0, 1 or 3, not ", options.channels));
  }
  if (!LooksLikeJpeg(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decode_jpeg: input is not a JPEG (", bytes.size(), " bytes, ", FirstBytes(bytes), ")"));
  }
  if (height <= 0 || width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: size must be positive, got ", height, "x", width));
  }
  ResizeRowSink sink(height, width, normalize, output);
  std::string message;
  switch (DecodeJpegRows(bytes, options, &sink, &message)) {
    case JpegDecodeResult::kOk:
      return std::move(sink.out());
    case JpegDecodeResult::kAborted: {
      if (!sink.unfused()) return sink.status();
      KILN_ASSIGN_OR_RETURN(Tensor image, DecodeJpeg(bytes, options));
      KILN_ASSIGN_OR_RETURN(Tensor resized, ResizeBilinear(image, height, width));
      return Normalize(resized, normalize->mean, normalize->stddev, normalize->scale);
    }
    case JpegDecodeResult::kError:
      break;
  }
  return InvalidJpeg(bytes, message);
}

absl::StatusOr<Tensor> DecodePng(absl::string_view bytes, int channels, DType dtype) {
  if (channels < 0 || channels > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_png: channels must be 0 to 4, not ", channels));
  }
  if (dtype != DType::kUInt8 && dtype != DType::kUInt16) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_png: dtype must be uint8 or uint16, not ", DTypeName(dtype)));
  }
  if (!LooksLikePng(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("decode_png: input is not a PNG (", bytes.size(),
                                                   " bytes, ", FirstBytes(bytes), ")"));
  }
  Tensor out;
  std::vector<png_bytep> rows;
  PngIo io;
  if (!DecodePngInto(bytes, channels, dtype, &out, &rows, &io)) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_png: invalid PNG data (", bytes.size(), " bytes): ", io.message));
  }
  return out;
}

absl::StatusOr<std::string> EncodeJpeg(const Tensor& image, int quality) {
  if (image.dtype() != DType::kUInt8 || image.rank() != 3 ||
      (image.dim(2) != 1 && image.dim(2) != 3) || image.dim(0) == 0 || image.dim(1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("encode_jpeg: expected a uint8 image [h, w, 1 or 3], got ",
                     DTypeName(image.dtype()), image.shape().ToString()));
  }
  JpegDestination destination;
  std::string message;
  const bool ok = EncodeJpegInto(image, std::clamp(quality, 1, 100), &destination, &message);
  std::string bytes;
  if (ok) bytes.assign(reinterpret_cast<char*>(destination.buffer), destination.size);
  std::free(destination.buffer);
  if (!ok) return absl::InternalError(absl::StrCat("encode_jpeg: ", message));
  return bytes;
}

absl::StatusOr<std::string> EncodePng(const Tensor& image) {
  if ((image.dtype() != DType::kUInt8 && image.dtype() != DType::kUInt16) || image.rank() != 3 ||
      image.dim(2) < 1 || image.dim(2) > 4 || image.dim(0) == 0 || image.dim(1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("encode_png: expected a uint8 or uint16 image [h, w, 1-4], got ",
                     DTypeName(image.dtype()), image.shape().ToString()));
  }
  std::string bytes;
  std::vector<png_bytep> rows;
  PngIo io;
  io.output = &bytes;
  if (!EncodePngInto(image, &rows, &io)) {
    return absl::InternalError(absl::StrCat("encode_png: ", io.message));
  }
  return bytes;
}

absl::StatusOr<Tensor> ResizeBilinear(const Tensor& images, int64_t height, int64_t width) {
  if (images.rank() != 3 && images.rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: expected an image [h, w, c] or a batch [n, h, w, c], got shape ",
                     images.shape().ToString()));
  }
  if (height <= 0 || width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: size must be positive, got ", height, "x", width));
  }
  const bool batch = images.rank() == 4;
  const int64_t n = batch ? images.dim(0) : 1;
  const int64_t h = images.dim(batch ? 1 : 0);
  const int64_t w = images.dim(batch ? 2 : 1);
  const int64_t c = images.dim(batch ? 3 : 2);
  if ((h == 0 || w == 0) && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: input image is empty: ", images.shape().ToString()));
  }
  Tensor out(DType::kFloat32, batch ? Shape{n, height, width, c} : Shape{height, width, c});
  switch (images.dtype()) {
    case DType::kUInt8:
      ResizeBatch<uint8_t>(images, n, h, w, c, &out, height, width);
      break;
    case DType::kUInt16:
      ResizeBatch<uint16_t>(images, n, h, w, c, &out, height, width);
      break;
    case DType::kInt32:
      ResizeBatch<int32_t>(images, n, h, w, c, &out, height, width);
      break;
    case DType::kFloat32:
      ResizeBatch<float>(images, n, h, w, c, &out, height, width);
      break;
    case DType::kFloat64:
      ResizeBatch<double>(images, n, h, w, c, &out, height, width);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("resize: unsupported dtype ",
                                                     DTypeName(images.dtype()),
                                                     " (uint8, uint16, int32, float or double)"));
  }
  return out;
}

absl::StatusOr<Tensor> Normalize(const Tensor& images, absl::Span<const float> mean,
                                 absl::Span<const float> stddev, float scale) {
  if (images.rank() < 1 || !(IsFloatingPoint(images.dtype()) || IsInteger(images.dtype()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("normalize: expected a numeric tensor with a channel axis, got ",
                     DTypeName(images.dtype()), images.shape().ToString()));
  }
  const int64_t c = images.dim(images.rank() - 1);
  auto check = [&](absl::Span<const float> values, const char* what) -> absl::Status {
    if (values.size() == 1 || static_cast<int64_t>(values.size()) == c) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("normalize: ", what, " has ", values.size(),
                                                   " values but the images have ", c, " channels"));
  };
  KILN_RETURN_IF_ERROR(check(mean, "mean"));
  KILN_RETURN_IF_ERROR(check(stddev, "stddev"));
  // Per-channel constants repeated over a block of whole pixels, so that the inner loop runs
  // over contiguous memory and vectorizes for any channel count.
  const int64_t block = c == 0 ? 1 : c * std::max<int64_t>(1, 64 / c);
  std::vector<float> m(block), s(block);
  for (int64_t j = 0; j < block && c > 0; ++j) {
    m[j] = mean.size() == 1 ? mean[0] : mean[j % c];
    s[j] = stddev.size() == 1 ? stddev[0] : stddev[j % c];
  }
  const bool in_place =
      images.dtype() == DType::kFloat32 && images.buffer() && images.buffer().use_count() == 1;
  Tensor out = in_place ? images : Tensor(DType::kFloat32, images.shape());
  const int64_t n = c == 0 ? 0 : images.num_elements();
  float* dst = out.data<float>();
  const float* mp = m.data();
  const float* sp = s.data();
  VisitDType(images.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, std::string>) {
      const T* src = images.data<T>();
      int64_t i = 0;
      for (; i + block <= n; i += block) {
        for (int64_t j = 0; j < block; ++j) {
          dst[i + j] = NormalizeValue(ConvertValue<float>(src[i + j]), scale, mp[j], sp[j]);
        }
      }
      for (int64_t j = 0; i + j < n; ++j) {
        dst[i + j] = NormalizeValue(ConvertValue<float>(src[i + j]), scale, mp[j], sp[j]);
      }
    }
  });
  return out;
}

absl::StatusOr<Tensor> Cast(const Tensor& input, DType dtype) {
  if (input.dtype() == DType::kString || dtype == DType::kString || dtype == DType::kInvalid ||
      !input.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cast: cannot cast ", DTypeName(input.dtype()), " to ", DTypeName(dtype)));
  }
  if (input.dtype() == dtype) return input;
  Tensor out(dtype, input.shape());
  const int64_t n = input.num_elements();
  VisitDType(input.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    VisitDType(dtype, [&](auto to_tag) {
      using To = decltype(to_tag);
      if constexpr (!std::is_same_v<From, std::string> && !std::is_same_v<To, std::string>) {
        const From* src = input.data<From>();
        To* dst = out.data<To>();
        for (int64_t i = 0; i < n; ++i) dst[i] = ConvertValue<To>(src[i]);
      }
    });
  });
  return out;
}

absl::StatusOr<Tensor> OneHot(const Tensor& indices, int64_t depth, float on, float off,
                              DType dtype) {
  if (!IsInteger(indices.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("one_hot: indices must be integers, got ", DTypeName(indices.dtype())));
  }
  if (depth < 0) {
    return absl::InvalidArgumentError(absl::StrCat("one_hot: depth must be >= 0, got ", depth));
  }
  if (dtype == DType::kString || dtype == DType::kInvalid) {
    return absl::InvalidArgumentError(
        absl::StrCat("one_hot: unsupported output dtype ", DTypeName(dtype)));
  }
  KILN_ASSIGN_OR_RETURN(Tensor index64, Cast(indices, DType::kInt64));
  Shape shape = indices.shape();
  shape.push_back(depth);
  Tensor out(dtype, shape);
  const int64_t n = indices.num_elements();
  const int64_t* idx = index64.data<int64_t>();
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, std::string>) {
      const T on_value = ConvertValue<T>(on), off_value = ConvertValue<T>(off);
      T* dst = out.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t d = 0; d < depth; ++d) dst[i * depth + d] = off_value;
        if (idx[i] >= 0 && idx[i] < depth) dst[i * depth + idx[i]] = on_value;
      }
    }
  });
  return out;
}

}  // namespace kiln::data::formats
