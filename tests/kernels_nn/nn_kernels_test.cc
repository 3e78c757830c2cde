// Conv, ConvTranspose, MatMul/Gemm, pooling and normalization kernels against direct
// reference loops written from the ONNX operator definitions.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "kiln/kernels/testing.h"

namespace kiln::kernels {
namespace {

using testing::KernelTestOptions;
using testing::RunKernel;

Tensor Random(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

void ExpectClose(const Tensor& actual, const Tensor& expected, float tol = 1e-4f) {
  ASSERT_EQ(actual.shape(), expected.shape());
  for (int64_t i = 0; i < actual.num_elements(); ++i) {
    const float a = actual.data<float>()[i], e = expected.data<float>()[i];
    ASSERT_NEAR(a, e, tol * (1 + std::fabs(e))) << "element " << i;
  }
}

// Direct 2-D convolution: x [N, C, H, W], w [M, C/g, kh, kw].
Tensor ReferenceConv2d(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group,
                       std::vector<int64_t> strides, std::vector<int64_t> pads,
                       std::vector<int64_t> dil) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const int64_t m = w.dim(0), cg = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  const int64_t oh = (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) / strides[0] + 1;
  const int64_t ow = (wd + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) / strides[1] + 1;
  Tensor y = Tensor::Zeros(DType::kFloat32, Shape{n, m, oh, ow});
  const int64_t mg = m / group;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t om = 0; om < m; ++om) {
      const int64_t g = om / mg;
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = b ? b->data<float>()[om] : 0.0;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * strides[0] - pads[0] + ky * dil[0];
                const int64_t ix = ox * strides[1] - pads[1] + kx * dil[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += x.data<float>()[((in * c + g * cg + ic) * h + iy) * wd + ix] *
                       w.data<float>()[((om * cg + ic) * kh + ky) * kw + kx];
              }
          y.data<float>()[((in * m + om) * oh + oy) * ow + ox] = static_cast<float>(acc);
        }
    }
  return y;
}

TEST(ConvTest, MatchesReferenceWithPadsStridesDilationsGroups) {
  struct Case {
    Shape x, w;
    int64_t group;
    std::vector<int64_t> strides, pads, dil;
  };
  const Case cases[] = {
      {{1, 3, 9, 9}, {4, 3, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      {{2, 8, 11, 7}, {16, 8, 3, 3}, 1, {2, 2}, {1, 0, 1, 2}, {1, 1}},
      {{1, 8, 10, 10}, {8, 1, 3, 3}, 8, {1, 1}, {1, 1, 1, 1}, {1, 1}},  // depthwise
      {{1, 4, 12, 12}, {6, 2, 3, 3}, 2, {1, 1}, {2, 2, 2, 2}, {2, 2}},  // grouped, dilated
      {{3, 16, 5, 5}, {32, 16, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    Tensor x = Random(c.x, seed++), w = Random(c.w, seed++), b = Random(Shape{c.w.dim(0)}, seed++);
    auto out = RunKernel("Conv", {x, w, b},
                         {{"group", c.group}, {"strides", c.strides}, {"pads", c.pads},
                          {"dilations", c.dil}},
                         {.constant_inputs = {1, 2}});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectClose((*out)[0], ReferenceConv2d(x, w, &b, c.group, c.strides, c.pads, c.dil));
    // Non-constant weights take the per-run reorder path.
    auto dynamic = RunKernel("Conv", {x, w, b},
                             {{"group", c.group}, {"strides", c.strides}, {"pads", c.pads},
                              {"dilations", c.dil}});
    ASSERT_TRUE(dynamic.ok()) << dynamic.status();
    ExpectClose((*dynamic)[0], (*out)[0]);
  }
}

TEST(ConvTest, AutoPadSameUpperKeepsSpatialSize) {
  Tensor x = Random(Shape{1, 2, 7, 5}, 7), w = Random(Shape{3, 2, 3, 3}, 8);
  auto out = RunKernel("Conv", {x, w}, {{"auto_pad", std::string("SAME_UPPER")}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{1, 3, 7, 5}));
  ExpectClose((*out)[0], ReferenceConv2d(x, w, nullptr, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}));
}

// A model's bad window attributes are errors naming the node: stride 0 once divided by zero,
// an unknown auto_pad ran as NOTSET.
TEST(ConvTest, ZeroStrideAndUnknownAutoPadAreErrors) {
  Tensor x = Random(Shape{1, 2, 7, 5}, 7), w = Random(Shape{3, 2, 3, 3}, 8);
  auto zero_stride = RunKernel("Conv", {x, w}, {{"strides", std::vector<int64_t>{0, 1}}});
  ASSERT_FALSE(zero_stride.ok());
  EXPECT_NE(zero_stride.status().message().find("strides"), std::string::npos)
      << zero_stride.status();
  auto bad_pad = RunKernel("Conv", {x, w}, {{"auto_pad", std::string("SAME")}});
  ASSERT_FALSE(bad_pad.ok());
  EXPECT_NE(bad_pad.status().message().find("auto_pad 'SAME'"), std::string::npos)
      << bad_pad.status();
}

TEST(ConvTest, FusedConvAppliesResidualThenRelu) {
  Tensor x = Random(Shape{2, 8, 6, 6}, 11), w = Random(Shape{8, 8, 3, 3}, 12);
  Tensor b = Random(Shape{8}, 13), residual = Random(Shape{2, 8, 6, 6}, 14);
  auto out = RunKernel("FusedConv", {x, w, b, residual},
                       {{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                        {"post_ops", std::vector<std::string>{"Add", "Relu"}}},
                       {.domain = "kiln", .constant_inputs = {1, 2}});
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor expected = ReferenceConv2d(x, w, &b, 1, {1, 1}, {1, 1, 1, 1}, {1, 1});
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    float& v = expected.data<float>()[i];
    v = std::max(0.0f, v + residual.data<float>()[i]);
  }
  ExpectClose((*out)[0], expected);
}

TEST(ConvTest, WrongChannelCountNamesShapes) {
  Tensor x = Random(Shape{1, 3, 5, 5}, 1), w = Random(Shape{4, 2, 3, 3}, 2);
  auto out = RunKernel("Conv", {x, w});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("3 channels"), std::string::npos) << out.status();
}

TEST(ConvTransposeTest, Stride2MatchesScatterReference) {
  Tensor x = Random(Shape{1, 3, 4, 4}, 21), w = Random(Shape{3, 2, 3, 3}, 22);
  auto out = RunKernel("ConvTranspose", {x, w}, {{"strides", std::vector<int64_t>{2, 2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  // y[o, 2i+k] += x[c, i] * w[c, o, k]
  Tensor expected = Tensor::Zeros(DType::kFloat32, Shape{1, 2, 9, 9});
  for (int c = 0; c < 3; ++c)
    for (int o = 0; o < 2; ++o)
      for (int iy = 0; iy < 4; ++iy)
        for (int ix = 0; ix < 4; ++ix)
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx)
              expected.data<float>()[(o * 9 + iy * 2 + ky) * 9 + ix * 2 + kx] +=
                  x.data<float>()[(c * 4 + iy) * 4 + ix] * w.data<float>()[((c * 2 + o) * 3 + ky) * 3 + kx];
  ExpectClose((*out)[0], expected);
}

// ONNX's test_convtranspose_output_shape: output_shape [10, 8] is one row and one column larger
// than the full result, so the padding is negative at the end (a zero row and column there);
// oneDNN has no deconvolution for it and the kernel falls back to its direct loop.
TEST(ConvTransposeTest, OutputShapeLargerThanFullResultAppendsZeros) {
  Tensor x(DType::kFloat32, Shape{1, 1, 3, 3});
  for (int i = 0; i < 9; ++i) x.data<float>()[i] = static_cast<float>(i);
  Tensor w(DType::kFloat32, Shape{1, 2, 3, 3});
  for (float& v : w.span<float>()) v = 1.0f;
  auto out = RunKernel(
      "ConvTranspose", {x, w},
      {{"strides", std::vector<int64_t>{3, 2}}, {"output_shape", std::vector<int64_t>{10, 8}}});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<float> rows[4] = {{0, 0, 1, 1, 3, 2, 2, 0},
                                      {3, 3, 7, 4, 9, 5, 5, 0},
                                      {6, 6, 13, 7, 15, 8, 8, 0},
                                      {0, 0, 0, 0, 0, 0, 0, 0}};
  std::vector<float> expected;
  for (int channel = 0; channel < 2; ++channel)
    for (int r = 0; r < 10; ++r)
      expected.insert(expected.end(), rows[std::min(r / 3, 3)].begin(),
                      rows[std::min(r / 3, 3)].end());
  ExpectClose((*out)[0], Tensor::FromVector<float>(expected, Shape{1, 2, 10, 8}));
}

// The fallback with groups, dilations, bias and padding negative at both ends (output_shape two
// larger than the full result) against a scatter written from the ONNX definition.
TEST(ConvTransposeTest, NegativePadsWithGroupsAndDilationsMatchScatter) {
  const int64_t c = 4, m = 6, group = 2, h = 3, wd = 4, k = 2, s = 2, dil = 2;
  Tensor x = Random(Shape{2, c, h, wd}, 31), w = Random(Shape{c, m / group, k, k}, 32);
  Tensor b = Random(Shape{m}, 33);
  const int64_t full_h = s * (h - 1) + (k - 1) * dil + 1, full_w = s * (wd - 1) + (k - 1) * dil + 1;
  const int64_t oh = full_h + 2, ow = full_w + 2;  // total padding -2: one each side
  auto out = RunKernel("ConvTranspose", {x, w, b},
                       {{"strides", std::vector<int64_t>{s, s}},
                        {"dilations", std::vector<int64_t>{dil, dil}},
                        {"group", group},
                        {"output_shape", std::vector<int64_t>{oh, ow}}});
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor expected = Tensor::Zeros(DType::kFloat32, Shape{2, m, oh, ow});
  const int64_t cg = c / group, mg = m / group;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t om = 0; om < m; ++om) {
      for (int64_t i = 0; i < oh * ow; ++i) {
        expected.data<float>()[(n * m + om) * oh * ow + i] = b.data<float>()[om];
      }
      const int64_t g = om / mg;
      for (int64_t ic = g * cg; ic < (g + 1) * cg; ++ic)
        for (int64_t iy = 0; iy < h; ++iy)
          for (int64_t ix = 0; ix < wd; ++ix)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t oy = iy * s + ky * dil + 1, ox = ix * s + kx * dil + 1;
                expected.data<float>()[((n * m + om) * oh + oy) * ow + ox] +=
                    x.data<float>()[((n * c + ic) * h + iy) * wd + ix] *
                    w.data<float>()[((ic * mg + om % mg) * k + ky) * k + kx];
              }
    }
  ExpectClose((*out)[0], expected);
}

Tensor ReferenceMatMul(const Tensor& a, const Tensor& b, int64_t batch, int64_t m, int64_t k, int64_t n,
                       bool b_shared) {
  Tensor y = Tensor::Zeros(DType::kFloat32, Shape{batch * m * n});
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += a.data<float>()[(t * m + i) * k + p] * b.data<float>()[((b_shared ? 0 : t) * k + p) * n + j];
        y.data<float>()[(t * m + i) * n + j] = static_cast<float>(acc);
      }
  return y;
}

TEST(MatMulTest, BatchedAndSharedWeights) {
  Tensor a = Random(Shape{2, 3, 5, 7}, 31), b = Random(Shape{2, 3, 7, 4}, 32), w = Random(Shape{7, 4}, 33);
  auto batched = RunKernel("MatMul", {a, b});
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_EQ((*batched)[0].shape(), (Shape{2, 3, 5, 4}));
  ExpectClose(*(*batched)[0].Reshape(Shape{120}), ReferenceMatMul(a, b, 6, 5, 7, 4, false));
  auto shared = RunKernel("MatMul", {a, w}, {}, {.constant_inputs = {1}});
  ASSERT_TRUE(shared.ok()) << shared.status();
  ExpectClose(*(*shared)[0].Reshape(Shape{120}), ReferenceMatMul(a, w, 6, 5, 7, 4, true));
}

TEST(MatMulTest, BroadcastBatchAndVectors) {
  Tensor a = Random(Shape{1, 5, 7}, 41), b = Random(Shape{3, 7, 2}, 42);
  auto out = RunKernel("MatMul", {a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{3, 5, 2}));
  for (int t = 0; t < 3; ++t) {
    Tensor bt = b.SubTensor(t);
    Tensor expected = ReferenceMatMul(a, bt, 1, 5, 7, 2, true);
    ExpectClose(*(*out)[0].SubTensor(t).Reshape(Shape{10}), expected);
  }
  Tensor v = Random(Shape{7}, 43);
  auto mv = RunKernel("MatMul", {a.SubTensor(0), v});
  ASSERT_TRUE(mv.ok()) << mv.status();
  EXPECT_EQ((*mv)[0].shape(), (Shape{5}));
}

TEST(GemmTest, TransposesAlphaBetaAndBroadcastC) {
  Tensor a = Random(Shape{4, 3}, 51), b = Random(Shape{5, 4}, 52), c = Random(Shape{3, 1}, 53);
  auto out = RunKernel("Gemm", {a, b, c},
                       {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}});
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor expected(DType::kFloat32, Shape{3, 5});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      double acc = 0;
      for (int p = 0; p < 4; ++p) acc += a.data<float>()[p * 3 + i] * b.data<float>()[j * 4 + p];
      expected.data<float>()[i * 5 + j] = static_cast<float>(0.5 * acc + 2.0 * c.data<float>()[i]);
    }
  ExpectClose((*out)[0], expected);
  // Bias form (C is [N], alpha = beta = 1) goes through the fused bias path.
  Tensor bias = Random(Shape{5}, 54);
  auto biased = RunKernel("Gemm", {a, b, bias}, {{"transA", int64_t{1}}, {"transB", int64_t{1}}},
                          {.constant_inputs = {1, 2}});
  ASSERT_TRUE(biased.ok()) << biased.status();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      double acc = bias.data<float>()[j];
      for (int p = 0; p < 4; ++p) acc += a.data<float>()[p * 3 + i] * b.data<float>()[j * 4 + p];
      EXPECT_NEAR((*biased)[0].data<float>()[i * 5 + j], acc, 1e-4);
    }
}

TEST(PoolTest, MaxPoolCeilModeAndIndices) {
  Tensor x(DType::kFloat32, Shape{1, 1, 4, 4});
  for (int i = 0; i < 16; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto out = RunKernel("MaxPool", {x},
                       {{"kernel_shape", std::vector<int64_t>{3, 3}},
                        {"strides", std::vector<int64_t>{2, 2}},
                        {"ceil_mode", int64_t{1}}},
                       {.num_outputs = 2});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{1, 1, 2, 2}));
  EXPECT_TRUE(TensorsEqual((*out)[0], Tensor::FromVector<float>({10, 11, 14, 15}, Shape{1, 1, 2, 2})));
  EXPECT_TRUE(TensorsEqual((*out)[1], Tensor::FromVector<int64_t>({10, 11, 14, 15}, Shape{1, 1, 2, 2})));
}

// Integer MaxPool keeps the input dtype and is exact (ONNX test_maxpool_2d_uint8 is this op
// on uint8; int64 values beyond float's 24-bit mantissa show no rounding through float).
TEST(PoolTest, MaxPoolIntegerTypesKeepDtypeAndExactValues) {
  Tensor u8 = Tensor::FromVector<uint8_t>({1, 200, 3, 4, 255, 6, 7, 8, 9}, Shape{1, 1, 3, 3});
  auto out = RunKernel(
      "MaxPool", {u8},
      {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{0, 0, 1, 1}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(TensorsEqual((*out)[0], Tensor::FromVector<uint8_t>(
                                          {255, 255, 6, 255, 255, 9, 8, 9, 9}, Shape{1, 1, 3, 3})));

  Tensor i8 = Tensor::FromVector<int8_t>({-128, -5, -7, -100}, Shape{1, 1, 4});
  auto with_indices =
      RunKernel("MaxPool", {i8},
                {{"kernel_shape", std::vector<int64_t>{2}}, {"strides", std::vector<int64_t>{2}}},
                {.num_outputs = 2});
  ASSERT_TRUE(with_indices.ok()) << with_indices.status();
  EXPECT_TRUE(
      TensorsEqual((*with_indices)[0], Tensor::FromVector<int8_t>({-5, -7}, Shape{1, 1, 2})));
  EXPECT_TRUE(
      TensorsEqual((*with_indices)[1], Tensor::FromVector<int64_t>({1, 2}, Shape{1, 1, 2})));

  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor i64 = Tensor::FromVector<int64_t>({big - 2, big, -big, big - 1}, Shape{1, 2, 2});
  auto global = RunKernel("GlobalMaxPool", {i64});
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_TRUE(
      TensorsEqual((*global)[0], Tensor::FromVector<int64_t>({big, big - 1}, Shape{1, 2, 1})));

  auto average = RunKernel("AveragePool", {u8}, {{"kernel_shape", std::vector<int64_t>{2, 2}}});
  ASSERT_FALSE(average.ok());
  EXPECT_NE(average.status().message().find("uint8"), std::string::npos) << average.status();
}

// Bad windows are errors naming the node: stride 0 once divided by zero, and a VALID window
// one larger than the input once made one output (truncating division).
TEST(PoolTest, ZeroStrideAndWindowLargerThanInputAreErrors) {
  Tensor x = Random(Shape{1, 1, 4, 4}, 21);
  const std::vector<int64_t> k3 = {3, 3};
  auto zero_stride =
      RunKernel("MaxPool", {x}, {{"kernel_shape", k3}, {"strides", std::vector<int64_t>{0, 1}}});
  ASSERT_FALSE(zero_stride.ok());
  EXPECT_NE(zero_stride.status().message().find("strides"), std::string::npos)
      << zero_stride.status();
  auto too_large = RunKernel("MaxPool", {Random(Shape{1, 1, 2, 2}, 22)},
                             {{"kernel_shape", k3},
                              {"strides", std::vector<int64_t>{2, 2}},
                              {"auto_pad", std::string("VALID")}});
  ASSERT_FALSE(too_large.ok());
  EXPECT_NE(too_large.status().message().find("smaller than the pooling window"), std::string::npos)
      << too_large.status();
  auto bad_pad =
      RunKernel("AveragePool", {x}, {{"kernel_shape", k3}, {"auto_pad", std::string("same")}});
  EXPECT_FALSE(bad_pad.ok());
}

TEST(PoolTest, AveragePoolCountIncludePad) {
  Tensor x(DType::kFloat32, Shape{1, 1, 2, 2});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = 4.0f;
  auto excl = RunKernel("AveragePool", {x},
                        {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  auto incl = RunKernel("AveragePool", {x},
                        {{"kernel_shape", std::vector<int64_t>{2, 2}},
                         {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                         {"count_include_pad", int64_t{1}}});
  ASSERT_TRUE(excl.ok() && incl.ok());
  EXPECT_FLOAT_EQ((*excl)[0].data<float>()[0], 4.0f);  // corner window sees one value
  EXPECT_FLOAT_EQ((*incl)[0].data<float>()[0], 1.0f);  // ... divided by the full window
  auto global = RunKernel("GlobalAveragePool", {Random(Shape{2, 3, 5, 5}, 3)});
  ASSERT_TRUE(global.ok());
  EXPECT_EQ((*global)[0].shape(), (Shape{2, 3, 1, 1}));
}

TEST(NormTest, BatchNormLayerNormInstanceNorm) {
  Tensor x = Random(Shape{2, 3, 4}, 61);
  Tensor scale = Tensor::FromVector<float>({1.0f, 2.0f, 0.5f});
  Tensor bias = Tensor::FromVector<float>({0.0f, 1.0f, -1.0f});
  Tensor mean = Tensor::FromVector<float>({0.1f, -0.2f, 0.3f});
  Tensor var = Tensor::FromVector<float>({1.0f, 0.5f, 2.0f});
  auto bn = RunKernel("BatchNormalization", {x, scale, bias, mean, var}, {{"epsilon", 1e-3f}});
  ASSERT_TRUE(bn.ok()) << bn.status();
  for (int i = 0; i < 24; ++i) {
    const int c = (i / 4) % 3;
    const float e = (x.data<float>()[i] - mean.data<float>()[c]) / std::sqrt(var.data<float>()[c] + 1e-3f) *
                        scale.data<float>()[c] + bias.data<float>()[c];
    EXPECT_NEAR((*bn)[0].data<float>()[i], e, 1e-5);
  }
  Tensor gamma = Random(Shape{4}, 62), beta = Random(Shape{4}, 63);
  auto ln = RunKernel("LayerNormalization", {x, gamma, beta}, {{"axis", int64_t{-1}}});
  ASSERT_TRUE(ln.ok()) << ln.status();
  for (int row = 0; row < 6; ++row) {
    double m = 0, v = 0;
    for (int j = 0; j < 4; ++j) m += x.data<float>()[row * 4 + j];
    m /= 4;
    for (int j = 0; j < 4; ++j) v += std::pow(x.data<float>()[row * 4 + j] - m, 2);
    v /= 4;
    for (int j = 0; j < 4; ++j) {
      const double e = (x.data<float>()[row * 4 + j] - m) / std::sqrt(v + 1e-5) * gamma.data<float>()[j] +
                       beta.data<float>()[j];
      EXPECT_NEAR((*ln)[0].data<float>()[row * 4 + j], e, 1e-5);
    }
  }
  auto in = RunKernel("InstanceNormalization", {x, scale, bias});
  ASSERT_TRUE(in.ok()) << in.status();
  // Each (n, c) row is normalized: mean of (y - bias) / scale is 0.
  for (int row = 0; row < 6; ++row) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += ((*in)[0].data<float>()[row * 4 + j] - bias.data<float>()[row % 3]);
    EXPECT_NEAR(s, 0.0, 1e-4);
  }
}

TEST(RnnTest, SingleStepLstmMatchesGateEquations) {
  // One step, one unit, no recurrence history: h = o * tanh(i * g), c = i * g.
  const int hidden = 1;
  Tensor x = Tensor::FromVector<float>({0.5f}, Shape{1, 1, 1});
  Tensor w = Tensor::FromVector<float>({0.1f, 0.2f, 0.3f, 0.4f}, Shape{1, 4 * hidden, 1});
  Tensor r = Tensor::Zeros(DType::kFloat32, Shape{1, 4 * hidden, hidden});
  auto out = RunKernel("LSTM", {x, w, r}, {{"hidden_size", int64_t{hidden}}}, {.num_outputs = 3});
  ASSERT_TRUE(out.ok()) << out.status();
  auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  const float i = sig(0.05f), o = sig(0.1f), g = std::tanh(0.2f);
  EXPECT_NEAR((*out)[2].data<float>()[0], i * g, 1e-6);
  EXPECT_NEAR((*out)[1].data<float>()[0], o * std::tanh(i * g), 1e-6);
  EXPECT_NEAR((*out)[0].data<float>()[0], o * std::tanh(i * g), 1e-6);
}

}  // namespace
}  // namespace kiln::kernels
