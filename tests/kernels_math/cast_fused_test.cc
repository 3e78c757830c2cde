// Cast/CastLike across dtypes (strings included) and the FusedElementwise interpreter.
#include <cmath>
#include <limits>

#include "kiln/ir/fused_elementwise.h"
#include "math_test_util.h"

namespace kiln::kernels::math_test {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::map<std::string, ir::Attribute> To(int64_t onnx_type) { return {{"to", onnx_type}}; }

TEST(Cast, NumericPairs) {
  Tensor f = F32({1.7f, -1.7f, 0.f, 300.f});
  EXPECT_EQ(Values<int32_t>(Run1("Cast", {f}, To(6))), std::vector<int32_t>({1, -1, 0, 300}));
  EXPECT_EQ(Values<int64_t>(Run1("Cast", {f}, To(7))), std::vector<int64_t>({1, -1, 0, 300}));
  EXPECT_EQ(Values<uint8_t>(Run1("Cast", {f}, To(2))), std::vector<uint8_t>({1, 255, 0, 44}));
  EXPECT_EQ(BoolValues(Run1("Cast", {F32({0.f, 2.f, kNaN})}, To(9))),
            std::vector<bool>({false, true, true}));
  EXPECT_EQ(Values<float>(Run1("Cast", {Bools({1, 0}, {2})}, To(1))), std::vector<float>({1, 0}));
  EXPECT_EQ(Values<double>(Run1("Cast", {I64({-3, 1LL << 40})}, To(11))),
            std::vector<double>({-3, 1099511627776.0}));
  // fp32 -> fp16 -> fp32 (F16C path for 8+ elements, scalar tail).
  std::vector<float> v;
  for (int i = 0; i < 19; ++i) v.push_back(i * 0.1f - 1);
  v.push_back(kInf);
  v.push_back(70000.f);  // overflows half
  Tensor h = Run1("Cast", {F32(v)}, To(10));
  ASSERT_EQ(h.dtype(), DType::kFloat16);
  Tensor back = Run1("Cast", {h}, To(1));
  for (size_t i = 0; i + 2 < v.size(); ++i) EXPECT_NEAR(back.data<float>()[i], v[i], 1e-3);
  EXPECT_EQ(back.data<float>()[v.size() - 2], kInf);
  EXPECT_EQ(back.data<float>()[v.size() - 1], kInf);
  Tensor bf = Run1("Cast", {F32({1.5f, 3.0f})}, To(16));
  EXPECT_EQ(bf.dtype(), DType::kBFloat16);
  EXPECT_FALSE(RunKernel("Cast", {f}, To(99)).ok());
}

TEST(Cast, Strings) {
  Tensor s = Run1("Cast", {F32({0.1f, -2.f, 1e20f, kNaN, kInf, -kInf})}, To(8));
  ASSERT_EQ(s.dtype(), DType::kString);
  std::vector<std::string> got(s.data<std::string>(), s.data<std::string>() + 6);
  EXPECT_EQ(got, std::vector<std::string>({"0.1", "-2", "1e+20", "NaN", "INF", "-INF"}));
  Tensor i = Run1("Cast", {I64({-12, 7})}, To(8));
  EXPECT_EQ(i.data<std::string>()[0], "-12");
  Tensor strs = Tensor::FromVector(std::vector<std::string>{"1.5", "-INF", "nan", " 2e3", "+7"});
  Tensor back = Run1("Cast", {strs}, To(1));
  EXPECT_TRUE(Near(Values<float>(back), {1.5f, -kInf, kNaN, 2000.f, 7.f}));
  Tensor ints = Run1("Cast", {Tensor::FromVector(std::vector<std::string>{"42", "-3", "1e2"})}, To(7));
  EXPECT_EQ(Values<int64_t>(ints), std::vector<int64_t>({42, -3, 100}));
  auto bad = RunKernel("Cast", {Tensor::FromVector(std::vector<std::string>{"abc"})}, To(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("abc"), std::string::npos) << bad.status();
}

TEST(Cast, CastLikeTakesTheSecondInputsType) {
  Tensor out = Run1("CastLike", {F32({2.9f, -0.5f}), I32({0})});
  EXPECT_EQ(out.dtype(), DType::kInt32);
  EXPECT_EQ(Values<int32_t>(out), std::vector<int32_t>({2, 0}));
}

KernelTestOptions Kiln() {
  KernelTestOptions o;
  o.domain = "kiln";
  return o;
}

TEST(FusedElementwise, ChainMatchesSeparateOps) {
  // y = gelu_tanh(x0 * x1 + 1), z = x0 * x1 with x1 broadcast over rows.
  ir::FusedElementwiseBuilder b;
  const std::string prod =
      b.Binary("Mul", ir::FusedElementwiseBuilder::Input(0), ir::FusedElementwiseBuilder::Input(1));
  const std::string sum = b.Binary("Add", prod, ir::FusedElementwiseBuilder::Constant(1.f));
  const std::string act = b.Unary("Gelu", sum, {"approximate=tanh"});
  b.AddOutput(act);
  b.AddOutput(prod);
  const int rows = 37, cols = 29;
  std::vector<float> x0(rows * cols), x1(cols);
  for (size_t i = 0; i < x0.size(); ++i) x0[i] = std::sin(i * 0.3f) * 3;
  for (int i = 0; i < cols; ++i) x1[i] = i * 0.1f - 1;
  KernelTestOptions o = Kiln();
  o.num_outputs = 2;
  o.intra_op_threads = 2;
  auto out = RunKernel("FusedElementwise", {F32(x0, {rows, cols}), F32(x1, {cols})}, b.Attributes(), o);
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor mul = Run1("Mul", {F32(x0, {rows, cols}), F32(x1, {cols})});
  Tensor add = Run1("Add", {mul, Tensor::Scalar(1.f)});
  Tensor gelu = Run1("Gelu", {add}, {{"approximate", std::string("tanh")}});
  EXPECT_EQ(Values<float>((*out)[1]), Values<float>(mul));
  EXPECT_EQ(Values<float>((*out)[0]), Values<float>(gelu));
}

TEST(FusedElementwise, ParametersConstantsAndErrors) {
  std::map<std::string, ir::Attribute> attrs = {
      {"program", std::vector<std::string>{"LeakyRelu t0 x0 alpha=0.5", "Clip t1 t0 min=-1 max=c",
                                           "Max t2 t1 c:-inf"}}};
  EXPECT_FALSE(RunKernel("FusedElementwise", {F32({1})}, attrs, Kiln()).ok());
  attrs["program"] = std::vector<std::string>{"LeakyRelu t0 x0 alpha=0.5", "Clip t1 t0 min=-1 max=2",
                                              "Sub t2 c:10 t1"};
  Tensor y = Run1("FusedElementwise", {F32({-4, -1, 1, 5, kNaN})}, attrs, Kiln());
  EXPECT_TRUE(Near(Values<float>(y), {11, 10.5f, 9, 8, kNaN}));
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"Exp t0 x1"}, std::vector<std::string>{"Exp t0 t5"},
        std::vector<std::string>{"Frobnicate t0 x0"}, std::vector<std::string>{"Add t0 x0"},
        std::vector<std::string>{}}) {
    auto r = RunKernel("FusedElementwise", {F32({1})}, {{"program", bad}}, Kiln());
    EXPECT_FALSE(r.ok()) << (bad.empty() ? "" : bad[0]);
  }
  EXPECT_FALSE(RunKernel("FusedElementwise", {I64({1})},
                         {{"program", std::vector<std::string>{"Exp t0 x0"}}}, Kiln())
                   .ok());
}

}  // namespace
}  // namespace kiln::kernels::math_test
