// Quantization and signal kernels against values worked out by hand from the ONNX spec.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/testing.h"

namespace kiln::kernels {
namespace {

using testing::RunKernel;

template <typename T>
Tensor Of(std::vector<T> v, Shape s) {
  return Tensor::FromVector(v, std::move(s));
}
template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

TEST(QuantizeLinear, RoundsHalfToEvenAndSaturates) {
  // x / 2: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0; + 10, clamped to uint8.
  auto out = RunKernel("QuantizeLinear", {Of<float>({1, 3, 5, -1, 1000, -1000}, {6}),
                                          Of<float>({2}, {}), Of<uint8_t>({10}, {})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kUInt8);
  EXPECT_EQ(Values<uint8_t>((*out)[0]), (std::vector<uint8_t>{10, 12, 12, 10, 255, 0}));
  // No zero point: uint8 with zero point 0.
  auto plain = RunKernel("QuantizeLinear", {Of<float>({-3, 3}, {2}), Of<float>({1}, {})});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Values<uint8_t>((*plain)[0]), (std::vector<uint8_t>{0, 3}));
}

TEST(QuantizeLinear, PerAxisParametersAndRoundTrip) {
  // [2, 2] with per-row (axis 0) scales 1 and 10, int8 zero points 0 and -5.
  const Tensor x = Of<float>({1, -2, 30, 40}, {2, 2});
  const Tensor scale = Of<float>({1, 10}, {2});
  const Tensor zero = Of<int8_t>({0, -5}, {2});
  auto q = RunKernel("QuantizeLinear", {x, scale, zero}, {{"axis", int64_t{0}}});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(Values<int8_t>((*q)[0]), (std::vector<int8_t>{1, -2, -2, -1}));
  auto dq = RunKernel("DequantizeLinear", {(*q)[0], scale, zero}, {{"axis", int64_t{0}}});
  ASSERT_TRUE(dq.ok()) << dq.status();
  EXPECT_EQ(Values<float>((*dq)[0]), (std::vector<float>{1, -2, 30, 40}));
  auto bad = RunKernel("DequantizeLinear", {(*q)[0], Of<float>({1, 2, 3}, {3})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x_scale"), std::string::npos) << bad.status();
}

TEST(DynamicQuantizeLinear, RangeIncludesZero) {
  // Range [min(x, 0), max(x, 0)] = [0, 2.55]: scale 0.01, zero point 0.
  auto out = RunKernel("DynamicQuantizeLinear", {Of<float>({0.5f, 2.55f, 1.f}, {3})}, {},
                       {.num_outputs = 3});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<uint8_t>((*out)[0]), (std::vector<uint8_t>{50, 255, 100}));
  EXPECT_FLOAT_EQ((*out)[1].data<float>()[0], 0.01f);
  EXPECT_EQ((*out)[2].data<uint8_t>()[0], 0);
  // All zeros: scale 0, everything quantizes to 0 instead of dividing by zero.
  auto zeros = RunKernel("DynamicQuantizeLinear", {Of<float>({0, 0}, {2})}, {}, {.num_outputs = 3});
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_EQ(Values<uint8_t>((*zeros)[0]), (std::vector<uint8_t>{0, 0}));
}

TEST(MatMulInteger, PerRowAndPerColumnZeroPoints) {
  // (A - [1, 2] per row) x (B - [0, 1] per column).
  const Tensor a = Of<uint8_t>({2, 3, 4, 5}, {2, 2});
  const Tensor b = Of<uint8_t>({1, 2, 3, 4}, {2, 2});
  auto out = RunKernel("MatMulInteger", {a, b, Of<uint8_t>({1, 2}, {2}), Of<uint8_t>({0, 1}, {2})});
  ASSERT_TRUE(out.ok()) << out.status();
  // A' = [[1, 2], [2, 3]], B' = [[1, 1], [3, 3]].
  EXPECT_EQ(Values<int32_t>((*out)[0]), (std::vector<int32_t>{7, 7, 11, 11}));
}

TEST(QLinearMatMul, RequantizesWithCombinedScale) {
  // a (scale 0.5, zero 1) = [1, 2] real; b (scale 2, zero 0) = [2, 4]^T real; y = 1*2 + 2*4 = 10
  // at y_scale 0.5 and zero 3 -> 23.
  auto out = RunKernel("QLinearMatMul",
                       {Of<uint8_t>({3, 5}, {1, 2}), Of<float>({0.5f}, {}), Of<uint8_t>({1}, {}),
                        Of<uint8_t>({1, 2}, {2, 1}), Of<float>({2.f}, {}), Of<uint8_t>({0}, {}),
                        Of<float>({0.5f}, {}), Of<uint8_t>({3}, {})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<uint8_t>((*out)[0]), (std::vector<uint8_t>{23}));
}

TEST(ConvInteger, PaddingCountsAsZeroPoint) {
  // 2x2 input minus zero point 1 -> [[0, 1], [2, 3]]; 1x1 kernel 2 with pads 1: a zero border.
  auto out = RunKernel("ConvInteger",
                       {Of<uint8_t>({1, 2, 3, 4}, {1, 1, 2, 2}), Of<uint8_t>({2}, {1, 1, 1, 1}),
                        Of<uint8_t>({1}, {})},
                       {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({1, 1, 4, 4}));
  EXPECT_EQ(Values<int32_t>((*out)[0]),
            (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 2, 0, 0, 4, 6, 0, 0, 0, 0, 0}));
}

TEST(ConvInteger, ZeroStrideIsAnError) {
  auto out = RunKernel("ConvInteger",
                       {Of<uint8_t>({1, 2, 3, 4}, {1, 1, 2, 2}), Of<uint8_t>({2}, {1, 1, 1, 1})},
                       {{"strides", std::vector<int64_t>{1, 0}}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("strides"), std::string::npos) << out.status();
}

TEST(QLinearConv, BiasAndPerChannelWeightScale) {
  // Two output channels of a 1x1 conv on one pixel x = 4 (scale 1, zero 0): channel 0 weight
  // 1 (scale 1) + bias 2 -> 6; channel 1 weight 3 (scale 0.5) + bias 0 -> 6; y scale 2 -> 3.
  auto out = RunKernel(
      "QLinearConv",
      {Of<uint8_t>({4}, {1, 1, 1, 1}), Of<float>({1}, {}), Of<uint8_t>({0}, {}),
       Of<uint8_t>({1, 3}, {2, 1, 1, 1}), Of<float>({1.f, 0.5f}, {2}), Of<uint8_t>({0, 0}, {2}),
       Of<float>({2}, {}), Of<uint8_t>({0}, {}), Of<int32_t>({2, 0}, {2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<uint8_t>((*out)[0]), (std::vector<uint8_t>{3, 3}));
}

TEST(Windows, PeriodicAndSymmetric) {
  auto hann = RunKernel("HannWindow", {Of<int64_t>({4}, {})}, {}, {.constant_inputs = {0}});
  ASSERT_TRUE(hann.ok()) << hann.status();
  // Periodic: 0.5 - 0.5 cos(2 pi n / 4) = 0, 0.5, 1, 0.5.
  const std::vector<float> h = Values<float>((*hann)[0]);
  ASSERT_EQ(h.size(), 4u);
  EXPECT_NEAR(h[0], 0, 1e-7);
  EXPECT_NEAR(h[1], 0.5, 1e-7);
  EXPECT_NEAR(h[2], 1, 1e-7);
  EXPECT_NEAR(h[3], 0.5, 1e-7);
  // Symmetric Hamming of 3: 0.08696, 1, 0.08696 (a0 = 25/46). Size fed at run time.
  auto hamming = RunKernel("HammingWindow", {Of<int32_t>({3}, {})}, {{"periodic", int64_t{0}}});
  ASSERT_TRUE(hamming.ok()) << hamming.status();
  const std::vector<float> m = Values<float>((*hamming)[0]);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_NEAR(m[0], 4.0 / 46.0, 1e-6);
  EXPECT_NEAR(m[1], 1.0, 1e-6);
  auto blackman =
      RunKernel("BlackmanWindow", {Of<int64_t>({2}, {})}, {{"output_datatype", int64_t{11}}});
  ASSERT_TRUE(blackman.ok()) << blackman.status();
  EXPECT_EQ((*blackman)[0].dtype(), DType::kFloat64);
  EXPECT_NEAR((*blackman)[0].data<double>()[1], 0.42 + 0.5 + 0.08, 1e-12);
}

TEST(Dft, ImpulseAndInverse) {
  // The DFT of an impulse is all ones; onesided keeps n / 2 + 1 bins.
  const Tensor impulse = Of<float>({1, 0, 0, 0}, {1, 4, 1});
  auto full = RunKernel("DFT", {impulse});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ((*full)[0].shape(), Shape({1, 4, 2}));
  EXPECT_EQ(Values<float>((*full)[0]), (std::vector<float>{1, 0, 1, 0, 1, 0, 1, 0}));
  auto half = RunKernel("DFT", {impulse}, {{"onesided", int64_t{1}}});
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ((*half)[0].shape(), Shape({1, 3, 2}));
  // [0, 1, 0, 0] -> exp(-2 pi i k / 4) = 1, -i, -1, i; the inverse of that gives it back.
  auto shifted = RunKernel("DFT", {Of<float>({0, 1, 0, 0}, {1, 4, 1})});
  ASSERT_TRUE(shifted.ok()) << shifted.status();
  const std::vector<float> s = Values<float>((*shifted)[0]);
  const std::vector<float> want = {1, 0, 0, -1, -1, 0, 0, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(s[i], want[i], 1e-6) << i;
  auto back = RunKernel("DFT", {(*shifted)[0]}, {{"inverse", int64_t{1}}});
  ASSERT_TRUE(back.ok()) << back.status();
  const std::vector<float> b = Values<float>((*back)[0]);
  const std::vector<float> orig = {0, 0, 1, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < orig.size(); ++i) EXPECT_NEAR(b[i], orig[i], 1e-6) << i;
}

TEST(Stft, FramesAreWindowedDfts) {
  // Length 6, frames of 4 every 2: frames [0..3] and [2..5] of a constant 1 signal; with a
  // rectangular window each frame's DC bin is 4 and the others 0.
  auto out = RunKernel("STFT", {Of<float>({1, 1, 1, 1, 1, 1}, {1, 6, 1}), Of<int64_t>({2}, {}),
                                Tensor(), Of<int64_t>({4}, {})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({1, 2, 3, 2}));
  const std::vector<float> v = Values<float>((*out)[0]);
  EXPECT_NEAR(v[0], 4, 1e-6);
  EXPECT_NEAR(v[2], 0, 1e-6);
  EXPECT_NEAR(v[6], 4, 1e-6);
  auto bad = RunKernel(
      "STFT", {Of<float>({1, 1}, {1, 2, 1}), Of<int64_t>({1}, {}), Tensor(), Of<int64_t>({4}, {})});
  EXPECT_FALSE(bad.ok());
}

TEST(MelWeightMatrix, TrianglesPeakAtOne) {
  auto out = RunKernel("MelWeightMatrix",
                       {Of<int32_t>({4}, {}), Of<int32_t>({32}, {}), Of<int32_t>({16000}, {}),
                        Of<float>({0.f}, {}), Of<float>({8000.f}, {})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({17, 4}));
  const std::vector<float> w = Values<float>((*out)[0]);
  for (int col = 0; col < 4; ++col) {
    float peak = 0;
    for (int row = 0; row < 17; ++row) peak = std::max(peak, w[row * 4 + col]);
    EXPECT_FLOAT_EQ(peak, 1.f) << "filter " << col;
  }
}

}  // namespace
}  // namespace kiln::kernels
