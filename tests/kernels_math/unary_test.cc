// Known answers for the unary kernels through the kernel registry (dtypes, NaN/Inf, empty
// tensors, scalars, attributes, in-place runs checked by RunKernel).
#include <cmath>
#include <limits>

#include "math_test_util.h"

namespace kiln::kernels::math_test {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> MapRef(const std::vector<float>& in, double (*f)(double)) {
  std::vector<float> out;
  for (float x : in) out.push_back(static_cast<float>(f(x)));
  return out;
}

TEST(Unary, MathFunctionsMatchLibm) {
  const std::vector<float> x = {-3.5f, -1.f, -0.25f, 0.f, 0.3f, 1.f, 2.5f, 7.f, 11.f, -20.f};
  struct Case {
    const char* op;
    double (*f)(double);
  } cases[] = {{"Exp", [](double v) { return std::exp(v); }},
               {"Tanh", [](double v) { return std::tanh(v); }},
               {"Erf", [](double v) { return std::erf(v); }},
               {"Sin", [](double v) { return std::sin(v); }},
               {"Cos", [](double v) { return std::cos(v); }},
               {"Atan", [](double v) { return std::atan(v); }},
               {"Sinh", [](double v) { return std::sinh(v); }},
               {"Asinh", [](double v) { return std::asinh(v); }},
               {"Abs", [](double v) { return std::fabs(v); }},
               {"Neg", [](double v) { return -v; }},
               {"Floor", [](double v) { return std::floor(v); }},
               {"Ceil", [](double v) { return std::ceil(v); }},
               {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
               {"Softsign", [](double v) { return v / (1 + std::fabs(v)); }},
               {"Softplus", [](double v) { return std::log1p(std::exp(v)); }},
               {"Mish", [](double v) { return v * std::tanh(std::log1p(std::exp(v))); }},
               {"Relu", [](double v) { return v > 0 ? v : 0.0; }},
               {"HardSwish", [](double v) { return v * std::min(1.0, std::max(0.0, v / 6 + 0.5)); }},
               {"Gelu", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }}};
  for (const Case& c : cases) {
    Tensor out = Run1(c.op, {F32(x, {2, 5})});
    EXPECT_EQ(out.shape(), Shape({2, 5})) << c.op;
    EXPECT_TRUE(Near(Values<float>(out), MapRef(x, c.f), 3e-6, 1e-6)) << c.op;
  }
}

TEST(Unary, DomainEdgesAndSpecials) {
  Tensor log = Run1("Log", {F32({0.f, -1.f, kInf, kNaN, 1.f})});
  EXPECT_TRUE(Near(Values<float>(log), {-kInf, kNaN, kInf, kNaN, 0.f}));
  Tensor sqrt = Run1("Sqrt", {F32({4.f, -1.f, kInf, 0.f})});
  EXPECT_TRUE(Near(Values<float>(sqrt), {2.f, kNaN, kInf, 0.f}));
  Tensor rec = Run1("Reciprocal", {F32({2.f, 0.f, -4.f})});
  EXPECT_TRUE(Near(Values<float>(rec), {0.5f, kInf, -0.25f}));
  Tensor round = Run1("Round", {F32({0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.6f, -2.4f})});
  EXPECT_EQ(Values<float>(round), std::vector<float>({0.f, 2.f, 2.f, -0.f, -2.f, 3.f, -2.f}));
  Tensor sign = Run1("Sign", {F32({-2.f, 0.f, 3.f, kNaN})});
  EXPECT_TRUE(Near(Values<float>(sign), {-1.f, 0.f, 1.f, kNaN}));
  Tensor relu = Run1("Relu", {F32({kNaN, -kInf, kInf})});
  EXPECT_TRUE(Near(Values<float>(relu), {kNaN, 0.f, kInf}));
  Tensor acos = Run1("Acos", {F32({2.f, 1.f})});
  EXPECT_TRUE(Near(Values<float>(acos), {kNaN, 0.f}));
  Tensor atanh = Run1("Atanh", {F32({1.f, 0.5f})});
  EXPECT_TRUE(Near(Values<float>(atanh), {kInf, 0.54930614f}));
}

TEST(Unary, ActivationsWithAttributes) {
  const std::vector<float> x = {-2.f, -0.5f, 0.f, 0.5f, 2.f};
  EXPECT_TRUE(Near(Values<float>(Run1("LeakyRelu", {F32(x)}, {{"alpha", 0.1f}})),
                   {-0.2f, -0.05f, 0.f, 0.5f, 2.f}));
  EXPECT_TRUE(Near(Values<float>(Run1("LeakyRelu", {F32(x)})),
                   {-0.02f, -0.005f, 0.f, 0.5f, 2.f}));
  EXPECT_TRUE(Near(Values<float>(Run1("Elu", {F32(x)}, {{"alpha", 2.f}})),
                   {2 * std::expm1f(-2.f), 2 * std::expm1f(-0.5f), 0.f, 0.5f, 2.f}));
  const float a = 1.67326319217681884765625f, g = 1.05070102214813232421875f;
  EXPECT_TRUE(Near(Values<float>(Run1("Selu", {F32(x)})),
                   {g * a * std::expm1f(-2.f), g * a * std::expm1f(-0.5f), 0.f, g * 0.5f, g * 2}));
  EXPECT_TRUE(Near(Values<float>(Run1("Celu", {F32(x)}, {{"alpha", 2.f}})),
                   {2 * std::expm1f(-1.f), 2 * std::expm1f(-0.25f), 0.f, 0.5f, 2.f}));
  EXPECT_TRUE(Near(Values<float>(Run1("HardSigmoid", {F32(x)})), {0.1f, 0.4f, 0.5f, 0.6f, 0.9f}));
  EXPECT_TRUE(Near(Values<float>(Run1("HardSigmoid", {F32(x)}, {{"alpha", 0.5f}, {"beta", 0.6f}})),
                   {0.f, 0.35f, 0.6f, 0.85f, 1.f}));
  EXPECT_TRUE(Near(Values<float>(Run1("ThresholdedRelu", {F32(x)}, {{"alpha", 0.5f}})),
                   {0.f, 0.f, 0.f, 0.f, 2.f}));
  EXPECT_TRUE(Near(Values<float>(Run1("Shrink", {F32(x)}, {{"lambd", 0.5f}, {"bias", 0.25f}})),
                   {-1.75f, 0.f, 0.f, 0.f, 1.75f}));
  std::vector<float> tanh_ref;
  for (float v : x) {
    tanh_ref.push_back(0.5f * v * (1 + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v))));
  }
  EXPECT_TRUE(Near(Values<float>(Run1("Gelu", {F32(x)}, {{"approximate", std::string("tanh")}})),
                   tanh_ref, 2e-6, 1e-7));
  EXPECT_FALSE(RunKernel("Gelu", {F32(x)}, {{"approximate", std::string("fast")}}).ok());
}

TEST(Unary, GeluNegativeTailIsAccurate) {
  // 0.5 * x * (1 + erf(x / sqrt(2))) loses everything to cancellation here; erfc does not.
  const std::vector<float> x = {-5.f, -6.f, -8.f};
  std::vector<float> ref;
  for (float v : x) ref.push_back(static_cast<float>(0.5 * v * std::erfc(-v / std::sqrt(2.0))));
  EXPECT_TRUE(Near(Values<float>(Run1("Gelu", {F32(x)})), ref, 5e-6, 0));
}

TEST(Unary, LargeTensorsMatchScalarReferenceWithThreads) {
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(i * 0.001f) * 8;
  KernelTestOptions opts;
  opts.intra_op_threads = 3;
  Tensor out = Run1("Sigmoid", {F32(x)}, {}, opts);
  std::vector<float> ref;
  for (float v : x) ref.push_back(static_cast<float>(1 / (1 + std::exp(-double(v)))));
  EXPECT_TRUE(Near(Values<float>(out), ref, 1e-6, 0));
}

TEST(Unary, OtherDtypes) {
  Tensor d = Run1("Exp", {Tensor::FromVector(std::vector<double>{0.0, 1.0, -1.0})});
  EXPECT_EQ(d.dtype(), DType::kFloat64);
  EXPECT_DOUBLE_EQ(d.data<double>()[1], std::exp(1.0));
  Tensor h(DType::kFloat16, Shape{3});
  for (int i = 0; i < 3; ++i) h.data<Float16>()[i] = Float16(static_cast<float>(i));
  Tensor hs = Run1("Sqrt", {h});
  ASSERT_EQ(hs.dtype(), DType::kFloat16);
  EXPECT_NEAR(static_cast<float>(hs.data<Float16>()[2]), std::sqrt(2.f), 1e-3);
  Tensor ia = Run1("Abs", {I64({-3, 0, 5})});
  EXPECT_EQ(Values<int64_t>(ia), std::vector<int64_t>({3, 0, 5}));
  Tensor in = Run1("Neg", {I32({-3, 0, 5})});
  EXPECT_EQ(Values<int32_t>(in), std::vector<int32_t>({3, 0, -5}));
  Tensor is = Run1("Sign", {I64({-3, 0, 5})});
  EXPECT_EQ(Values<int64_t>(is), std::vector<int64_t>({-1, 0, 1}));
  Tensor ir = Run1("Relu", {I32({-3, 0, 5})});
  EXPECT_EQ(Values<int32_t>(ir), std::vector<int32_t>({0, 0, 5}));
  auto bad = RunKernel("Exp", {I64({1})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int64"), std::string::npos) << bad.status();
}

TEST(Unary, EmptyAndScalar) {
  Tensor e = Run1("Exp", {F32({}, {0, 3})});
  EXPECT_EQ(e.shape(), Shape({0, 3}));
  Tensor s = Run1("Tanh", {Tensor::Scalar(0.5f)});
  EXPECT_EQ(s.shape(), Shape({}));
  EXPECT_NEAR(s.data<float>()[0], std::tanh(0.5f), 1e-7);
}

TEST(Unary, ClipWithOptionalBounds) {
  const Tensor x = F32({-2.f, 0.f, 3.f, kNaN});
  EXPECT_TRUE(Near(Values<float>(Run1("Clip", {x, Tensor::Scalar(-1.f), Tensor::Scalar(1.f)})),
                   {-1.f, 0.f, 1.f, kNaN}));
  EXPECT_TRUE(Near(Values<float>(Run1("Clip", {x, Tensor(), Tensor::Scalar(1.f)})),
                   {-2.f, 0.f, 1.f, kNaN}));
  EXPECT_TRUE(Near(Values<float>(Run1("Clip", {x})), {-2.f, 0.f, 3.f, kNaN}));
  Tensor ci = Run1("Clip", {I64({-5, 2, 9}), Tensor::Scalar<int64_t>(0), Tensor::Scalar<int64_t>(4)});
  EXPECT_EQ(Values<int64_t>(ci), std::vector<int64_t>({0, 2, 4}));
  EXPECT_FALSE(RunKernel("Clip", {x, Tensor::Scalar<int64_t>(0)}).ok());
}

TEST(Unary, PredicatesAndLogic) {
  EXPECT_EQ(BoolValues(Run1("IsNaN", {F32({1.f, kNaN, kInf})})),
            std::vector<bool>({false, true, false}));
  EXPECT_EQ(BoolValues(Run1("IsInf", {F32({1.f, kNaN, kInf, -kInf})})),
            std::vector<bool>({false, false, true, true}));
  EXPECT_EQ(BoolValues(Run1("IsInf", {F32({kInf, -kInf})}, {{"detect_positive", int64_t{0}}})),
            std::vector<bool>({false, true}));
  EXPECT_EQ(BoolValues(Run1("Not", {Bools({1, 0}, {2})})), std::vector<bool>({false, true}));
  EXPECT_EQ(Values<int32_t>(Run1("BitwiseNot", {I32({0, 5, -1})})),
            std::vector<int32_t>({-1, -6, 0}));
}

TEST(Unary, KilnTfHelpers) {
  KernelTestOptions kiln;
  kiln.domain = "kiln";
  EXPECT_TRUE(Near(Values<float>(Run1("Rsqrt", {F32({4.f, 0.f, 0.25f})}, {}, kiln)),
                   {0.5f, kInf, 2.f}));
  EXPECT_EQ(Values<int64_t>(Run1("Square", {I64({-3, 4})}, {}, kiln)),
            std::vector<int64_t>({9, 16}));
}

}  // namespace
}  // namespace kiln::kernels::math_test
