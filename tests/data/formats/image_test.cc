#include "kiln/data/formats/image.h"

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kiln/data/formats/functions.h"

namespace kiln::data::formats {
namespace {

// A smooth color gradient with a few edges: survives JPEG compression nearly unchanged.
Tensor TestImage(int64_t h, int64_t w, int64_t c) {
  Tensor image(DType::kUInt8, Shape{h, w, c});
  uint8_t* p = image.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t k = 0; k < c; ++k) {
        *p++ = static_cast<uint8_t>(x * 180 / w + y * 60 / h + k * 5);
      }
    }
  }
  return image;
}

double MeanAbsDifference(const Tensor& a, const Tensor& b) {
  double sum = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    sum += std::abs(int{a.data<uint8_t>()[i]} - int{b.data<uint8_t>()[i]});
  }
  return sum / a.num_elements();
}

TEST(JpegTest, EncodeDecodeRoundTrip) {
  const Tensor image = TestImage(48, 64, 3);
  auto jpeg = EncodeJpeg(image, 95);
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  EXPECT_TRUE(LooksLikeJpeg(*jpeg));
  auto decoded = DecodeJpeg(*jpeg);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->shape(), (Shape{48, 64, 3}));
  EXPECT_LT(MeanAbsDifference(*decoded, image), 3.0);

  auto gray = DecodeJpeg(*jpeg, {.channels = 1});
  ASSERT_TRUE(gray.ok());
  EXPECT_EQ(gray->shape(), (Shape{48, 64, 1}));
  auto gray_jpeg = EncodeJpeg(TestImage(10, 12, 1));
  ASSERT_TRUE(gray_jpeg.ok());
  EXPECT_EQ(DecodeJpeg(*gray_jpeg)->shape(), (Shape{10, 12, 1}));
  EXPECT_EQ(DecodeJpeg(*gray_jpeg, {.channels = 3})->shape(), (Shape{10, 12, 3}));
}

TEST(JpegTest, NonJpegAndCorruptBytesAreErrorsNotCrashes) {
  auto not_jpeg = DecodeJpeg("this is plain text");
  ASSERT_FALSE(not_jpeg.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(not_jpeg.status()));
  EXPECT_TRUE(absl::StrContains(not_jpeg.status().message(), "not a JPEG")) << not_jpeg.status();

  const std::string jpeg = *EncodeJpeg(TestImage(160, 200, 3), 90);
  auto truncated = DecodeJpeg(jpeg.substr(0, jpeg.size() / 2));
  ASSERT_FALSE(truncated.ok());
  EXPECT_TRUE(absl::StrContains(truncated.status().message(), "truncated")) << truncated.status();
  // Damage everywhere: each decode either fails cleanly or returns an image of the right shape.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string damaged = jpeg;
    for (int k = 0; k < 4; ++k) damaged[rng() % damaged.size()] = static_cast<char>(rng());
    auto result = DecodeJpeg(damaged);
    if (result.ok()) {
      EXPECT_EQ(result->rank(), 3);
    }
  }
  EXPECT_FALSE(DecodeJpeg(jpeg, {.channels = 2}).ok());
}

TEST(PngTest, RoundTripsBitDepthsAndChannels) {
  const Tensor rgb = TestImage(9, 7, 3);
  auto png = EncodePng(rgb);
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_TRUE(TensorsEqual(*DecodePng(*png), rgb));

  auto rgba = DecodePng(*png, 4);
  ASSERT_TRUE(rgba.ok());
  EXPECT_EQ(rgba->shape(), (Shape{9, 7, 4}));
  EXPECT_EQ(rgba->data<uint8_t>()[3], 255);
  EXPECT_EQ(rgba->data<uint8_t>()[0], rgb.data<uint8_t>()[0]);

  auto wide = DecodePng(*png, 0, DType::kUInt16);
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->data<uint16_t>()[5], rgb.data<uint8_t>()[5] * 257);

  Tensor deep(DType::kUInt16, Shape{3, 2, 1});
  for (int i = 0; i < 6; ++i) deep.data<uint16_t>()[i] = static_cast<uint16_t>(i * 10000 + 7);
  auto deep_png = EncodePng(deep);
  ASSERT_TRUE(deep_png.ok());
  EXPECT_TRUE(TensorsEqual(*DecodePng(*deep_png, 0, DType::kUInt16), deep));
  auto deep_as_8bit = DecodePng(*deep_png);
  ASSERT_TRUE(deep_as_8bit.ok());
  EXPECT_EQ(deep_as_8bit->data<uint8_t>()[5], (5 * 10000 + 7) >> 8);

  const Tensor gray = TestImage(4, 5, 1);
  auto as_rgb = DecodePng(*EncodePng(gray), 3);
  ASSERT_TRUE(as_rgb.ok());
  EXPECT_EQ(as_rgb->data<uint8_t>()[3 * 7 + 2], gray.data<uint8_t>()[7]);
}

TEST(PngTest, BadBytesAreErrors) {
  auto not_png = DecodePng(std::string("\xff\xd8\xff\xe0", 4));
  ASSERT_FALSE(not_png.ok());
  EXPECT_TRUE(absl::StrContains(not_png.status().message(), "not a PNG"));
  const std::string png = *EncodePng(TestImage(20, 20, 3));
  auto truncated = DecodePng(png.substr(0, png.size() - 20));
  EXPECT_FALSE(truncated.ok());
}

TEST(ResizeTest, UpscaleMatchesTensorFlow) {
  // tf.image.resize([[0, 10], [20, 30]] as [2, 2, 1], [4, 4]) (bilinear, half-pixel centers).
  Tensor in = Tensor::FromVector<float>({0, 10, 20, 30}, Shape{2, 2, 1});
  auto out = ResizeBilinear(in, 4, 4);
  ASSERT_TRUE(out.ok());
  Tensor expected = Tensor::FromVector<float>(
      {0, 2.5, 7.5, 10, 5, 7.5, 12.5, 15, 15, 17.5, 22.5, 25, 20, 22.5, 27.5, 30}, Shape{4, 4, 1});
  EXPECT_TRUE(TensorsAllClose(*out, expected)) << out->DebugString(20);
}

TEST(ResizeTest, DownscaleAndBatchAndUint8) {
  std::vector<uint8_t> values(16 * 2);
  for (int i = 0; i < 16; ++i) values[i] = static_cast<uint8_t>(i), values[16 + i] = 100;
  Tensor batch = Tensor::FromVector<uint8_t>(values, Shape{2, 4, 4, 1});
  auto out = ResizeBilinear(batch, 2, 2);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(TensorsAllClose(
      *out,
      Tensor::FromVector<float>({2.5, 4.5, 10.5, 12.5, 100, 100, 100, 100}, Shape{2, 2, 2, 1})));
  // 3 -> 2 along x: positions 0.25 and 1.75 of [0, 10, 40].
  auto row = ResizeBilinear(Tensor::FromVector<float>({0, 10, 40}, Shape{1, 3, 1}), 1, 2);
  ASSERT_TRUE(row.ok());
  EXPECT_TRUE(TensorsAllClose(*row, Tensor::FromVector<float>({2.5, 32.5}, Shape{1, 2, 1})));
  EXPECT_FALSE(ResizeBilinear(Tensor::FromVector<float>({1, 2}), 2, 2).ok());
}

// TensorFlow's resize_bilinear written out directly (no separable passes, no row reuse).
Tensor ReferenceResize(const Tensor& in, int64_t out_h, int64_t out_w) {
  const int64_t h = in.dim(0), w = in.dim(1), c = in.dim(2);
  Tensor out(DType::kFloat32, Shape{out_h, out_w, c});
  auto weights = [](int64_t i, int64_t in_size, int64_t out_size, int64_t* lo, int64_t* hi,
                    float* lerp) {
    const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
    const float v = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    *lo = std::max<int64_t>(static_cast<int64_t>(std::floor(v)), 0);
    *hi = std::min<int64_t>(static_cast<int64_t>(std::ceil(v)), in_size - 1);
    *lerp = v - std::floor(v);
  };
  const float* src = in.data<float>();
  for (int64_t y = 0; y < out_h; ++y) {
    int64_t y0, y1;
    float yl;
    weights(y, h, out_h, &y0, &y1, &yl);
    for (int64_t x = 0; x < out_w; ++x) {
      int64_t x0, x1;
      float xl;
      weights(x, w, out_w, &x0, &x1, &xl);
      for (int64_t k = 0; k < c; ++k) {
        const float tl = src[(y0 * w + x0) * c + k], tr = src[(y0 * w + x1) * c + k];
        const float bl = src[(y1 * w + x0) * c + k], br = src[(y1 * w + x1) * c + k];
        const float top = tl + (tr - tl) * xl, bottom = bl + (br - bl) * xl;
        out.data<float>()[(y * out_w + x) * c + k] = top + (bottom - top) * yl;
      }
    }
  }
  return out;
}

TEST(ResizeTest, MatchesDirectFormulaForManySizes) {
  std::mt19937 rng(11);
  for (auto [h, w, c, oh, ow] : std::vector<std::array<int64_t, 5>>{{7, 5, 3, 224, 224},
                                                                    {400, 500, 3, 224, 224},
                                                                    {13, 17, 1, 5, 29},
                                                                    {9, 9, 4, 9, 9},
                                                                    {3, 11, 5, 8, 4},
                                                                    {1, 1, 2, 3, 3}}) {
    Tensor in(DType::kFloat32, Shape{h, w, c});
    for (float& v : in.span<float>()) v = static_cast<float>(rng() % 256);
    auto out = ResizeBilinear(in, oh, ow);
    ASSERT_TRUE(out.ok());
    EXPECT_TRUE(TensorsAllClose(*out, ReferenceResize(in, oh, ow), 1e-6, 1e-4))
        << h << "x" << w << "x" << c << " -> " << oh << "x" << ow;
  }
}

TEST(TransformTest, NormalizeCastOneHot) {
  Tensor pixels = Tensor::FromVector<uint8_t>({0, 255, 51, 102, 0, 255}, Shape{2, 3});
  auto normalized = Normalize(pixels, {0.f, 0.5f, 1.f}, {1.f, 0.5f, 2.f}, 1 / 255.f);
  ASSERT_TRUE(normalized.ok());
  EXPECT_TRUE(TensorsAllClose(
      *normalized, Tensor::FromVector<float>({0, 1, -0.4f, 0.4f, -1, 0}, Shape{2, 3}), 1e-5, 1e-6))
      << normalized->DebugString();
  EXPECT_FALSE(Normalize(pixels, {0, 0}, {1}).ok());
  // Long enough for the blocked loop and its tail; float input normalized in place.
  Tensor many(DType::kFloat32, Shape{101, 3});
  for (int64_t i = 0; i < many.num_elements(); ++i) many.data<float>()[i] = static_cast<float>(i);
  const Tensor expected_input = many.Clone();
  const void* storage = many.raw_data();
  auto in_place = Normalize(std::move(many), {1.f, 2.f, 3.f}, {2.f, 4.f, 8.f});
  ASSERT_TRUE(in_place.ok());
  EXPECT_EQ(in_place->raw_data(), storage);
  for (int64_t i = 0; i < 303; ++i) {
    const float mean = 1.f + i % 3, stddev = 2.f * (1 << (i % 3));
    ASSERT_FLOAT_EQ(in_place->data<float>()[i], (expected_input.data<float>()[i] - mean) / stddev)
        << i;
  }

  auto cast = Cast(Tensor::FromVector<float>({-1.7f, 0.f, 2.9f}), DType::kInt32);
  ASSERT_TRUE(cast.ok());
  EXPECT_TRUE(TensorsEqual(*cast, Tensor::FromVector<int32_t>({-1, 0, 2})));
  auto to_bool = Cast(Tensor::FromVector<int64_t>({0, 3}), DType::kBool);
  ASSERT_TRUE(to_bool.ok());
  EXPECT_EQ(to_bool->data<bool>()[1], true);
  EXPECT_FALSE(Cast(Tensor::Scalar(std::string("x")), DType::kFloat32).ok());

  auto one_hot = OneHot(Tensor::FromVector<int64_t>({2, 0, 5}), 3);
  ASSERT_TRUE(one_hot.ok());
  EXPECT_TRUE(
      TensorsEqual(*one_hot, Tensor::FromVector<float>({0, 0, 1, 1, 0, 0, 0, 0, 0}, Shape{3, 3})));
}

TEST(FunctionsTest, ImageChainOnOneElementAndOnABatch) {
  const std::string a = *EncodeJpeg(TestImage(30, 40, 3), 90);
  const std::string b = *EncodeJpeg(TestImage(30, 40, 3), 70);
  auto names =
      std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"image", "label"});
  std::vector<MapFn> chain = {DecodeJpegFn("image", {.channels = 3}), ResizeFn("image", 8, 8),
                              NormalizeFn("image", {127.5f}, {127.5f}), OneHotFn("label", 4)};
  Element single({Tensor::Scalar(a), Tensor::Scalar<int64_t>(1)}, names);
  Element batch({Tensor::FromVector<std::string>({a, b}), Tensor::FromVector<int64_t>({1, 3})},
                names);
  for (const MapFn& fn : chain) {
    auto next_single = fn(single);
    ASSERT_TRUE(next_single.ok()) << next_single.status();
    single = *next_single;
    auto next_batch = fn(batch);
    ASSERT_TRUE(next_batch.ok()) << next_batch.status();
    batch = *next_batch;
  }
  EXPECT_EQ(single[0].shape(), (Shape{8, 8, 3}));
  EXPECT_EQ(batch[0].shape(), (Shape{2, 8, 8, 3}));
  EXPECT_EQ(batch[1].shape(), (Shape{2, 4}));
  // The batch's first row is the single element's result.
  EXPECT_TRUE(TensorsAllClose(batch[0].SubTensor(0), single[0]));
  EXPECT_TRUE(TensorsEqual(batch[1].SubTensor(0), single[1]));
}

TEST(FunctionsTest, ErrorsNameComponentAndBatchElement) {
  const std::string good = *EncodeJpeg(TestImage(8, 8, 3));
  Element batch({Tensor::FromVector<std::string>({good, "garbage"})});
  auto result = DecodeJpegFn(0)(batch);
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(absl::StrContains(result.status().message(), "batch element 1")) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "not a JPEG")) << result.status();

  Element sizes({Tensor::FromVector<std::string>({good, *EncodeJpeg(TestImage(9, 8, 3))})});
  result = DecodeJpegFn(0)(sizes);
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(absl::StrContains(result.status().message(), "[9, 8, 3]")) << result.status();

  result = ResizeFn("image", 2, 2)(Element({Tensor::Scalar(1.f)}));
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(absl::StrContains(result.status().message(), "\"image\"")) << result.status();
  EXPECT_FALSE(CastFn(3, DType::kFloat32)(Element({Tensor::Scalar(1.f)})).ok());
}

}  // namespace
}  // namespace kiln::data::formats
