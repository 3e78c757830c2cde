// DecodeJpegResized and the Chain that uses it: the same bits and the same errors as
// DecodeJpeg -> ResizeBilinear -> Normalize run one after the other.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kiln/data/formats/functions.h"
#include "kiln/data/formats/image.h"
#include "kiln/data/map_into.h"

namespace kiln::data::formats {
namespace {

// Noise over gradients, so that every pixel and every interpolation weight matters.
std::string NoisyJpeg(int64_t h, int64_t w, int64_t c, uint32_t seed, int quality = 90) {
  std::mt19937 rng(seed);
  Tensor image(DType::kUInt8, Shape{h, w, c});
  uint8_t* p = image.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t k = 0; k < c; ++k) {
        *p++ = static_cast<uint8_t>((x * 200 / w + y * 50 / h + k * 20 + rng() % 40) % 256);
      }
    }
  }
  return *EncodeJpeg(image, quality);
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

absl::StatusOr<Tensor> Unfused(const std::string& jpeg, const JpegDecodeOptions& options,
                               int64_t height, int64_t width, const NormalizeArgs* normalize) {
  absl::StatusOr<Tensor> image = DecodeJpeg(jpeg, options);
  if (!image.ok()) return image.status();
  absl::StatusOr<Tensor> resized = ResizeBilinear(*image, height, width);
  if (!resized.ok() || normalize == nullptr) return resized;
  return Normalize(*resized, normalize->mean, normalize->stddev, normalize->scale);
}

TEST(DecodeJpegResizedTest, SameBitsAsTheThreeStepsForManySizes) {
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f}, stddev = {0.229f, 0.224f, 0.225f};
  const std::vector<float> one_mean = {127.5f}, one_stddev = {64.f};
  const NormalizeArgs per_channel{mean, stddev, 1.0f / 255};
  const NormalizeArgs one_value{one_mean, one_stddev, 1.0f};
  uint32_t seed = 1;
  // Down and up, by small and large factors, odd sizes, one row or column, and heights that
  // make libjpeg hand out rows one and two at a time (4:2:0 and 4:4:4 and grayscale).
  for (auto [h, w, c, oh, ow] : std::vector<std::array<int64_t, 5>>{{400, 500, 3, 224, 224},
                                                                    {200, 230, 3, 224, 224},
                                                                    {37, 53, 3, 224, 224},
                                                                    {333, 17, 3, 5, 29},
                                                                    {1, 40, 3, 3, 7},
                                                                    {50, 1, 1, 9, 2},
                                                                    {97, 61, 1, 64, 64},
                                                                    {64, 64, 3, 64, 64},
                                                                    {300, 250, 3, 1, 1}}) {
    const std::string jpeg = NoisyJpeg(h, w, c, seed++);
    for (int channels : {0, 1, 3}) {
      for (bool fast_dct : {true, false}) {
        const JpegDecodeOptions options{.channels = channels, .fast_dct = fast_dct};
        const int64_t out_c = channels != 0 ? channels : c;
        for (const NormalizeArgs* normalize :
             {static_cast<const NormalizeArgs*>(nullptr), &one_value, &per_channel}) {
          if (normalize == &per_channel && out_c != 3) continue;
          absl::StatusOr<Tensor> fused = DecodeJpegResized(jpeg, options, oh, ow, normalize);
          absl::StatusOr<Tensor> unfused = Unfused(jpeg, options, oh, ow, normalize);
          ASSERT_TRUE(fused.ok()) << fused.status();
          ASSERT_TRUE(unfused.ok()) << unfused.status();
          EXPECT_TRUE(SameBits(*fused, *unfused))
              << h << "x" << w << "x" << c << " -> " << oh << "x" << ow << " channels " << channels
              << " fast_dct " << fast_dct << " normalize " << (normalize != nullptr);
        }
      }
    }
  }
}

TEST(DecodeJpegResizedTest, SameErrorsAsDecodeJpeg) {
  const std::string jpeg = NoisyJpeg(160, 200, 3, 5);
  auto same = [&](const std::string& bytes, const JpegDecodeOptions& options) {
    absl::StatusOr<Tensor> fused = DecodeJpegResized(bytes, options, 64, 64);
    absl::StatusOr<Tensor> decoded = DecodeJpeg(bytes, options);
    ASSERT_EQ(fused.ok(), decoded.ok()) << decoded.status();
    if (!fused.ok()) {
      EXPECT_EQ(fused.status(), decoded.status());
    } else {
      EXPECT_TRUE(SameBits(*fused, *ResizeBilinear(*decoded, 64, 64)));
    }
  };
  same("this is plain text", {});
  same(jpeg.substr(0, jpeg.size() / 2), {});
  same(jpeg, {.channels = 2});
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string damaged = jpeg;
    for (int k = 0; k < 4; ++k) damaged[rng() % damaged.size()] = static_cast<char>(rng());
    same(damaged, {});
  }
  EXPECT_FALSE(DecodeJpegResized(jpeg, {}, 0, 5).ok());
  // A mean that does not fit the decoded channels is Normalize's error.
  const std::vector<float> two = {1.f, 2.f};
  const NormalizeArgs bad{two, two, 1.f};
  absl::StatusOr<Tensor> fused = DecodeJpegResized(jpeg, {}, 8, 8, &bad);
  ASSERT_FALSE(fused.ok());
  EXPECT_EQ(fused.status(), Unfused(jpeg, {}, 8, 8, &bad).status());
}

TEST(DecodeJpegResizedTest, WritesIntoTheTensorItIsGiven) {
  const std::string jpeg = NoisyJpeg(90, 120, 3, 9);
  Tensor slot(DType::kFloat32, Shape{32, 32, 3});
  JpegOutputFn output = [&](const Shape& shape) -> absl::StatusOr<Tensor> {
    EXPECT_EQ(shape, (Shape{32, 32, 3}));
    return slot;
  };
  absl::StatusOr<Tensor> out = DecodeJpegResized(jpeg, {.channels = 3}, 32, 32, nullptr, &output);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->raw_data(), slot.raw_data());
  EXPECT_TRUE(SameBits(slot, *ResizeBilinear(*DecodeJpeg(jpeg, {.channels = 3}), 32, 32)));
  JpegOutputFn refuse = [](const Shape&) -> absl::StatusOr<Tensor> {
    return absl::InvalidArgumentError("no room");
  };
  out = DecodeJpegResized(jpeg, {.channels = 3}, 32, 32, nullptr, &refuse);
  EXPECT_EQ(out.status(), absl::InvalidArgumentError("no room"));
}

// A given output (a batch slot, written with streaming stores where aligned: RowResizer's
// StreamRow) holds the same bits as the steps apart for rows that are not a whole number of
// vectors and slots that do not start on a vector boundary, and nothing is written outside
// the slot.
TEST(DecodeJpegResizedTest, GivenSlotsHoldTheSameBitsAtAnyAlignment) {
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f}, stddev = {0.229f, 0.224f, 0.225f};
  const NormalizeArgs normalize{mean, stddev, 1.0f / 255.0f};
  const std::string jpeg = NoisyJpeg(75, 61, 3, 21);
  for (const NormalizeArgs* n : {static_cast<const NormalizeArgs*>(nullptr), &normalize}) {
    for (int64_t offset_floats : {0, 1, 3, 5, 8}) {
      const Shape shape{29, 37, 3};
      const int64_t count = shape.num_elements();
      Tensor backing(DType::kFloat32, Shape{count + 16});
      for (float& x : backing.span<float>()) x = -7.0f;
      Tensor slot(DType::kFloat32, shape, backing.buffer(),
                  static_cast<size_t>(offset_floats) * sizeof(float));
      JpegOutputFn output = [&](const Shape&) -> absl::StatusOr<Tensor> { return slot; };
      absl::StatusOr<Tensor> out = DecodeJpegResized(jpeg, {.channels = 3}, 29, 37, n, &output);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_TRUE(SameBits(slot, *Unfused(jpeg, {.channels = 3}, 29, 37, n))) << offset_floats;
      const float* all = backing.data<float>();
      for (int64_t i = 0; i < count + 16; ++i) {
        if (i < offset_floats || i >= offset_floats + count) {
          ASSERT_EQ(all[i], -7.0f) << "written outside the slot at " << i;
        }
      }
    }
  }
}

// Chain recognizes decode_jpeg -> resize -> normalize on one component: same elements and
// errors as the functions applied one at a time, and a MapIntoFn when it ends the chain.
TEST(ChainTest, FusedImageStepsEqualTheStepsApart) {
  auto names =
      std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"image", "label"});
  std::vector<MapFn> steps = {
      DecodeJpegFn("image", {.channels = 3}), ResizeFn("image", 24, 20),
      NormalizeFn("image", {0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}, 1.0f / 255),
      OneHotFn("label", 4)};
  const MapFn chain = Chain(steps);
  const MapFn image_last = Chain({steps[3], steps[0], steps[1], steps[2]});
  EXPECT_EQ(chain.target<MapIntoFn>(), nullptr);  // one_hot is last
  ASSERT_NE(image_last.target<MapIntoFn>(), nullptr);
  const std::string jpeg = NoisyJpeg(70, 90, 3, 4);
  std::string corrupt = jpeg;
  for (size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 40; ++i) corrupt[i] = '\x17';
  for (const std::string& bytes : {jpeg, corrupt, std::string("not an image")}) {
    Element apart({Tensor::Scalar(bytes), Tensor::Scalar<int64_t>(2)}, names);
    absl::Status apart_status;
    for (const MapFn& fn : steps) {
      absl::StatusOr<Element> next = fn(apart);
      if (!next.ok()) {
        apart_status = next.status();
        break;
      }
      apart = *next;
    }
    for (const MapFn* fn : {&chain, &image_last}) {
      absl::StatusOr<Element> together =
          (*fn)(Element({Tensor::Scalar(bytes), Tensor::Scalar<int64_t>(2)}, names));
      ASSERT_EQ(together.ok(), apart_status.ok()) << apart_status;
      if (!together.ok()) {
        EXPECT_EQ(together.status(), apart_status);
        continue;
      }
      EXPECT_EQ(*together->names, *apart.names);
      EXPECT_TRUE(SameBits((*together)[0], apart[0]));
      EXPECT_TRUE(SameBits((*together)[1], apart[1]));
    }
  }
  // A batch of encoded images (batch, then map) is not fused and gives the same batch.
  Element batch(
      {Tensor::FromVector<std::string>({jpeg, jpeg}), Tensor::FromVector<int64_t>({1, 2})}, names);
  absl::StatusOr<Element> batched = image_last(batch);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_EQ((*batched)[0].shape(), (Shape{2, 24, 20, 3}));
}

}  // namespace
}  // namespace kiln::data::formats
