// Kiln's int8 kernels (include/kiln/ir/int8_ops.h) against a double-precision reference of
// the contract: real(Y) = post_ops(conv(real(X), real(W)) + B), requantized with round half to
// even and saturation. oneDNN rounds a float intermediate (and multiplies by reciprocal
// scales), so an int8 result may sit one step from the reference where the exact value is
// within float error of a tie; float results agree to float accumulation error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../testing/quant_test_util.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/kernels/compressed_matmul.h"  // CpuHasInt8Vnni
#include "kiln/kernels/testing.h"

namespace kiln::kernels {
namespace {

using testing::KernelTestOptions;
using testing::RunKernel;

using test_util::RandomFloats;
using test_util::RandomInts;

double Element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kUInt8:
      return t.data<uint8_t>()[i];
    case DType::kInt8:
      return t.data<int8_t>()[i];
    default:
      return t.data<float>()[i];
  }
}

double Quantize(double real, double scale, int zero_point, DType dtype) {
  const double lo = dtype == DType::kUInt8 ? 0 : -128, hi = dtype == DType::kUInt8 ? 255 : 127;
  return std::clamp(std::nearbyint(real / scale) + zero_point, lo, hi);
}

struct ConvCase {
  int64_t n = 2, c = 8, h = 7, w = 7, m = 16, k = 3, group = 1, stride = 1, pad = 1;
  DType x_type = DType::kUInt8;
  int x_zp = 0;
  float x_scale = 0.02f;
  DType out_type = DType::kUInt8;
  float y_scale = 0.05f;
  int y_zp = 0;
  float r_scale = 0.04f;
  bool residual = false;
  DType r_type = DType::kInvalid;    // the output's type when kInvalid
  std::vector<ir::PostOp> post_ops;  // after the residual
};

// Runs Int8Conv on random data and checks every output against the reference.
void CheckConv(const ConvCase& cc, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int64_t cg = cc.c / cc.group;
  const Tensor x = cc.x_type == DType::kUInt8
                       ? RandomInts<uint8_t>({cc.n, cc.h, cc.w, cc.c}, seed, 0, 255)
                       : RandomInts<int8_t>({cc.n, cc.h, cc.w, cc.c}, seed, -128, 127);
  // Without VNNI the kernels' contract is 7-bit weights (pairs of products sum in 16 bits).
  const int wmax = CpuHasInt8Vnni() ? 127 : 63;
  const Tensor wq = RandomInts<int8_t>({cc.m, cg, cc.k, cc.k}, seed + 1, -wmax, wmax);
  const Tensor b = RandomFloats({cc.m}, seed + 2, -1, 1);
  std::vector<float> w_scales(cc.m);
  for (int64_t i = 0; i < cc.m; ++i) w_scales[i] = 0.001f * (1 + i % 5);
  const int64_t oh = (cc.h + 2 * cc.pad - cc.k) / cc.stride + 1;
  const int64_t ow = (cc.w + 2 * cc.pad - cc.k) / cc.stride + 1;
  const bool int8_out = cc.out_type != DType::kFloat32;
  const Shape y_shape = int8_out ? Shape{cc.n, oh, ow, cc.m} : Shape{cc.n, cc.m, oh, ow};
  Tensor r;
  if (cc.residual) {
    const DType r_type = cc.r_type == DType::kInvalid ? cc.out_type : cc.r_type;
    r = r_type == DType::kUInt8  ? RandomInts<uint8_t>(y_shape, seed + 3, 0, 255)
        : r_type == DType::kInt8 ? RandomInts<int8_t>(y_shape, seed + 3, -128, 127)
                                 : RandomFloats(y_shape, seed + 3, -2, 2);
  }
  std::vector<std::string> kinds;
  std::vector<float> alphas, betas;
  if (cc.residual) {
    kinds.push_back("Add");
    alphas.push_back(0);
    betas.push_back(0);
  }
  for (const ir::PostOp& p : cc.post_ops) {
    kinds.push_back(p.kind);
    alphas.push_back(p.alpha);
    betas.push_back(p.beta);
  }
  std::map<std::string, ir::Attribute> attrs = {
      {"strides", std::vector<int64_t>{cc.stride, cc.stride}},
      {"pads", std::vector<int64_t>{cc.pad, cc.pad, cc.pad, cc.pad}},
      {"group", cc.group},
      {"x_scale", cc.x_scale},
      {"x_zero_point", int64_t{cc.x_zp}},
      {"w_scales", w_scales},
      {"out_type", std::string(ir::Int8TypeName(cc.out_type))},
      {"y_scale", cc.y_scale},
      {"y_zero_point", int64_t{cc.y_zp}},
      {"r_scale", cc.r_scale}};
  if (!kinds.empty()) {
    attrs["post_ops"] = kinds;
    attrs["post_op_alphas"] = alphas;
    attrs["post_op_betas"] = betas;
  }
  std::vector<Tensor> inputs = {x, wq, b};
  if (cc.residual) inputs.push_back(r);
  KernelTestOptions options;
  options.domain = "kiln";
  options.constant_inputs = {1, 2};
  auto out = RunKernel("Int8Conv", inputs, attrs, options);
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& y = (*out)[0];
  ASSERT_EQ(y.dtype(), cc.out_type);
  ASSERT_EQ(y.shape(), y_shape);

  int mismatches = 0;
  for (int64_t in = 0; in < cc.n; ++in) {
    for (int64_t oc = 0; oc < cc.m; ++oc) {
      const int64_t g = oc / (cc.m / cc.group);
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = 0;
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t ky = 0; ky < cc.k; ++ky) {
              for (int64_t kx = 0; kx < cc.k; ++kx) {
                const int64_t iy = oy * cc.stride - cc.pad + ky, ix = ox * cc.stride - cc.pad + kx;
                if (iy < 0 || iy >= cc.h || ix < 0 || ix >= cc.w) continue;
                const int64_t c = g * cg + ic;
                const double xv = Element(x, ((in * cc.h + iy) * cc.w + ix) * cc.c + c) - cc.x_zp;
                const double wv = Element(wq, ((oc * cg + ic) * cc.k + ky) * cc.k + kx);
                acc += xv * wv;
              }
            }
          }
          double real = acc * cc.x_scale * w_scales[oc] + b.data<float>()[oc];
          const int64_t yi = int8_out ? ((in * oh + oy) * ow + ox) * cc.m + oc
                                      : ((in * cc.m + oc) * oh + oy) * ow + ox;
          if (cc.residual) {
            real += int8_out ? cc.r_scale * Element(r, yi) : Element(r, yi);
          }
          for (const ir::PostOp& p : cc.post_ops) {
            if (p.kind == "Relu") real = std::max(real, 0.0);
            if (p.kind == "Clip") real = std::clamp(real, double{p.alpha}, double{p.beta});
          }
          const double got = Element(y, yi);
          if (int8_out) {
            const double want = Quantize(real, cc.y_scale, cc.y_zp, cc.out_type);
            if (std::fabs(got - want) > 1) {
              if (++mismatches < 5)
                ADD_FAILURE() << "y[" << yi << "] = " << got << ", want " << want;
            }
          } else if (std::fabs(got - real) > 1e-4 * (1 + std::fabs(real))) {
            if (++mismatches < 5) ADD_FAILURE() << "y[" << yi << "] = " << got << ", want " << real;
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Int8ConvTest, U8InputU8OutputWithRelu) {
  ConvCase cc;
  cc.post_ops = {{"Relu", 0, 0}};
  CheckConv(cc, 1);
}

TEST(Int8ConvTest, ZeroPointsOnInputAndOutput) {
  ConvCase cc;
  cc.x_zp = 7;
  cc.y_zp = 100;
  cc.stride = 2;
  CheckConv(cc, 2);
}

TEST(Int8ConvTest, SignedInputSignedOutputWithSignedResidual) {
  ConvCase cc;
  cc.x_type = DType::kInt8;
  cc.out_type = DType::kInt8;
  cc.residual = true;
  CheckConv(cc, 3);
}

TEST(Int8ConvTest, ResidualThenReluAsInResNet) {
  ConvCase cc;
  cc.residual = true;
  cc.post_ops = {{"Relu", 0, 0}};
  cc.k = 1;
  cc.pad = 0;
  CheckConv(cc, 4);
}

// ResNet's downsampling blocks: the shortcut (a conv without Relu) is int8, the block's
// output (after the Relu) uint8.
TEST(Int8ConvTest, SignedResidualIntoUnsignedOutput) {
  ConvCase cc;
  cc.residual = true;
  cc.r_type = DType::kInt8;
  cc.post_ops = {{"Relu", 0, 0}};
  CheckConv(cc, 9);
}

TEST(Int8ConvTest, DepthwiseWithRelu6AsInMobileNet) {
  ConvCase cc;
  cc.c = 16;
  cc.m = 16;
  cc.group = 16;
  cc.post_ops = {{"Clip", 0.0f, 6.0f}};
  cc.y_scale = 6.0f / 255;
  cc.x_scale = 0.2f;
  CheckConv(cc, 5);
}

TEST(Int8ConvTest, GroupedConv) {
  ConvCase cc;
  cc.group = 2;
  cc.x_type = DType::kInt8;
  CheckConv(cc, 6);
}

TEST(Int8ConvTest, FloatOutputWithFloatResidualAndClip) {
  ConvCase cc;
  cc.out_type = DType::kFloat32;
  cc.residual = true;
  cc.post_ops = {{"Clip", -0.5f, 0.5f}};
  CheckConv(cc, 7);
}

TEST(Int8ConvTest, FirstLayerWithThreeChannels) {
  ConvCase cc;
  cc.c = 3;
  cc.m = 8;
  cc.k = 7;
  cc.pad = 3;
  cc.stride = 2;
  cc.h = cc.w = 16;
  cc.x_type = DType::kInt8;
  cc.post_ops = {{"Relu", 0, 0}};
  CheckConv(cc, 8);
}

TEST(Int8ConvTest, BadAttributesAreErrors) {
  KernelTestOptions options;
  options.domain = "kiln";
  options.constant_inputs = {1};
  const Tensor x = RandomInts<uint8_t>({1, 4, 4, 4}, 1, 0, 255);
  const Tensor w = RandomInts<int8_t>({4, 4, 1, 1}, 2, -127, 127);
  std::map<std::string, ir::Attribute> attrs = {{"x_scale", 0.0f},
                                                {"w_scales", std::vector<float>{1.0f}},
                                                {"out_type", std::string("float")}};
  EXPECT_EQ(RunKernel("Int8Conv", {x, w}, attrs, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  attrs["x_scale"] = 1.0f;
  attrs["w_scales"] = std::vector<float>{1.0f, 2.0f};  // 4 channels
  EXPECT_EQ(RunKernel("Int8Conv", {x, w}, attrs, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  attrs["w_scales"] = std::vector<float>{1.0f};
  const Tensor wrong_channels = RandomInts<int8_t>({4, 3, 1, 1}, 2, -127, 127);
  EXPECT_EQ(RunKernel("Int8Conv", {x, wrong_channels}, attrs, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RunKernel("Int8Conv", {x, w}, attrs, options).ok());
}

TEST(Int8QuantizeTest, RoundTripWithinOneStep) {
  const Tensor x = RandomFloats({2, 5, 3, 4}, 9, -3, 3);
  for (DType to : {DType::kUInt8, DType::kInt8}) {
    const int zp = to == DType::kUInt8 ? 128 : 3;
    const float scale = 0.03f;
    KernelTestOptions options;
    options.domain = "kiln";
    auto q = RunKernel(
        "Int8Quantize", {x},
        {{"scale", scale}, {"zero_point", int64_t{zp}}, {"to", std::string(ir::Int8TypeName(to))}},
        options);
    ASSERT_TRUE(q.ok()) << q.status();
    const Tensor& qt = (*q)[0];
    ASSERT_EQ(qt.shape(), (Shape{2, 3, 4, 5}));
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 5; ++c)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t w = 0; w < 4; ++w) {
            const double want =
                Quantize(x.data<float>()[((n * 5 + c) * 3 + h) * 4 + w], scale, zp, to);
            EXPECT_LE(std::fabs(Element(qt, ((n * 3 + h) * 4 + w) * 5 + c) - want), 1);
          }
    auto d =
        RunKernel("Int8Dequantize", {qt}, {{"scale", scale}, {"zero_point", int64_t{zp}}}, options);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ((*d)[0].shape(), x.shape());
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const float v = x.data<float>()[i];
      // Inside the representable range the round trip is within half a step (+ a tie).
      if (to == DType::kInt8 && (v > (127 - zp) * scale || v < (-128 - zp) * scale)) continue;
      EXPECT_LE(std::fabs((*d)[0].data<float>()[i] - v), scale * 1.01) << i;
    }
  }
}

TEST(Int8PoolTest, MaxIsExactAverageWithinOneStep) {
  const Tensor x = RandomInts<uint8_t>({2, 6, 6, 8}, 11, 0, 255);
  KernelTestOptions options;
  options.domain = "kiln";
  for (const std::string mode : {"max", "avg"}) {
    auto y = RunKernel("Int8Pool", {x},
                       {{"mode", mode},
                        {"kernel_shape", std::vector<int64_t>{3, 3}},
                        {"strides", std::vector<int64_t>{2, 2}},
                        {"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                       options);
    ASSERT_TRUE(y.ok()) << y.status();
    const Tensor& yt = (*y)[0];
    ASSERT_EQ(yt.shape(), (Shape{2, 3, 3, 8}));
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t oy = 0; oy < 3; ++oy)
        for (int64_t ox = 0; ox < 3; ++ox)
          for (int64_t c = 0; c < 8; ++c) {
            double mx = -1, sum = 0;
            int count = 0;
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
                if (iy < 0 || iy >= 6 || ix < 0 || ix >= 6) continue;
                const double v = x.data<uint8_t>()[((n * 6 + iy) * 6 + ix) * 8 + c];
                mx = std::max(mx, v);
                sum += v;
                ++count;
              }
            const double got = yt.data<uint8_t>()[((n * 3 + oy) * 3 + ox) * 8 + c];
            if (mode == "max") {
              EXPECT_EQ(got, mx);
            } else {
              EXPECT_LE(std::fabs(got - sum / count), 1.0);
            }
          }
  }
}

}  // namespace
}  // namespace kiln::kernels
