// Known answers for broadcasting binary/variadic kernels, comparisons, logic and Where.
#include <cmath>
#include <limits>

#include "math_test_util.h"

namespace kiln::kernels::math_test {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Binary, BroadcastShapes) {
  // [2, 3] + [3]
  Tensor a = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = Run1("Add", {a, F32({10, 20, 30})});
  EXPECT_EQ(out.shape(), Shape({2, 3}));
  EXPECT_EQ(Values<float>(out), std::vector<float>({11, 22, 33, 14, 25, 36}));
  // [2, 1] * [1, 3] -> [2, 3]
  out = Run1("Mul", {F32({2, 3}, {2, 1}), F32({1, 10, 100}, {1, 3})});
  EXPECT_EQ(out.shape(), Shape({2, 3}));
  EXPECT_EQ(Values<float>(out), std::vector<float>({2, 20, 200, 3, 30, 300}));
  // scalar - [2, 2]
  out = Run1("Sub", {Tensor::Scalar(1.f), F32({1, 2, 3, 4}, {2, 2})});
  EXPECT_EQ(Values<float>(out), std::vector<float>({0, -1, -2, -3}));
  // [2, 1, 3] / [4, 1] -> [2, 4, 3]
  std::vector<float> av(6), bv(4);
  for (int i = 0; i < 6; ++i) av[i] = i + 1;
  for (int i = 0; i < 4; ++i) bv[i] = i + 1;
  out = Run1("Div", {F32(av, {2, 1, 3}), F32(bv, {4, 1})});
  ASSERT_EQ(out.shape(), Shape({2, 4, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        EXPECT_FLOAT_EQ(out.data<float>()[(i * 4 + j) * 3 + k], av[i * 3 + k] / bv[j]);
  // Incompatible shapes name both.
  auto bad = RunKernel("Add", {F32({1, 2, 3}), F32({1, 2})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[3]"), std::string::npos) << bad.status();
  // Empty.
  out = Run1("Add", {F32({}, {0, 3}), F32({1, 2, 3})});
  EXPECT_EQ(out.shape(), Shape({0, 3}));
}

TEST(Binary, LargeBroadcastWithThreadsMatchesScalar) {
  const int rows = 301, cols = 257;
  std::vector<float> a(rows * cols), b(cols);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::cos(i * 0.01f);
  for (int i = 0; i < cols; ++i) b[i] = i * 0.5f - 3;
  KernelTestOptions opts;
  opts.intra_op_threads = 4;
  Tensor out = Run1("Max", {F32(a, {rows, cols}), F32(b, {cols})}, {}, opts);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      ASSERT_EQ(out.data<float>()[r * cols + c], std::max(a[r * cols + c], b[c]));
  out = Run1("Sub", {F32(b, {1, cols}), F32(a, {rows, cols})}, {}, opts);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      ASSERT_EQ(out.data<float>()[r * cols + c], b[c] - a[r * cols + c]);
}

TEST(Binary, FloatSpecials) {
  EXPECT_TRUE(Near(Values<float>(Run1("Div", {F32({1, -1, 0}), F32({0, 0, 0})})),
                   {kInf, -kInf, kNaN}));
  EXPECT_TRUE(Near(Values<float>(Run1("Max", {F32({kNaN, 1, 2}), F32({1, kNaN, 3})})),
                   {kNaN, kNaN, 3}));
  EXPECT_TRUE(Near(Values<float>(Run1("Min", {F32({kNaN, 1, 2}), F32({1, kNaN, 3})})),
                   {kNaN, kNaN, 2}));
  EXPECT_TRUE(Near(Values<float>(Run1("Pow", {F32({2, -2, 4, 0}), F32({3, 2, 0.5f, -1})})),
                   {8, 4, 2, kInf}));
  // Constant exponent 2 takes the Square shortcut; same answers.
  KernelTestOptions c1;
  c1.constant_inputs = {1};
  EXPECT_TRUE(Near(Values<float>(Run1("Pow", {F32({3, -2, kNaN}), Tensor::Scalar(2.f)}, {}, c1)),
                   {9, 4, kNaN}));
  // Integer exponent with float base (ONNX T1).
  EXPECT_TRUE(Near(Values<float>(Run1("Pow", {F32({2, 3}), I64({3, 2})})), {8, 9}));
  EXPECT_TRUE(Near(Values<float>(Run1("PRelu", {F32({-2, 3, -4}, {3}), F32({0.5f})})),
                   {-1, 3, -2}));
}

TEST(Binary, IntegerDivisionAndMod) {
  EXPECT_EQ(Values<int64_t>(Run1("Div", {I64({7, -7, 7, -7, 5}), I64({2, 2, -2, -2, 0})})),
            std::vector<int64_t>({3, -3, -3, 3, 0}));
  EXPECT_EQ(Values<int32_t>(Run1("Div", {I32({std::numeric_limits<int32_t>::min()}), I32({-1})})),
            std::vector<int32_t>({std::numeric_limits<int32_t>::min()}));
  // Mod (fmod=0): sign of the divisor; fmod=1: sign of the dividend.
  EXPECT_EQ(Values<int64_t>(Run1("Mod", {I64({7, -7, 7, -7}), I64({3, 3, -3, -3})})),
            std::vector<int64_t>({1, 2, -2, -1}));
  EXPECT_EQ(Values<int64_t>(Run1("Mod", {I64({7, -7, 7, -7}), I64({3, 3, -3, -3})},
                                 {{"fmod", int64_t{1}}})),
            std::vector<int64_t>({1, -1, 1, -1}));
  EXPECT_TRUE(Near(Values<float>(Run1("Mod", {F32({7.5f, -7.5f}), F32({2, 2})},
                                      {{"fmod", int64_t{1}}})),
                   {1.5f, -1.5f}));
  EXPECT_EQ(Values<int32_t>(Run1("Pow", {I32({2, 3, -2, 2}), I32({10, 0, 3, -1})})),
            std::vector<int32_t>({1024, 1, -8, 0}));
}

TEST(Binary, KilnFloorDivAndFloorModFollowTensorFlow) {
  KernelTestOptions kiln;
  kiln.domain = "kiln";
  EXPECT_EQ(Values<int64_t>(Run1("FloorDiv", {I64({7, -7, 7, -7, 6}), I64({2, 2, -2, -2, -3})},
                                 {}, kiln)),
            std::vector<int64_t>({3, -4, -4, 3, -2}));
  EXPECT_EQ(Values<int64_t>(Run1("FloorMod", {I64({7, -7, 7, -7}), I64({3, 3, -3, -3})}, {},
                                 kiln)),
            std::vector<int64_t>({1, 2, -2, -1}));
  EXPECT_TRUE(Near(Values<float>(Run1("FloorDiv", {F32({7, -7, 7.5f}), F32({2, 2, -2})}, {}, kiln)),
                   {3, -4, -4}));
  EXPECT_TRUE(Near(Values<float>(Run1("FloorMod", {F32({7, -7, 7.5f}), F32({2, 2, -2})}, {}, kiln)),
                   {1, 1, -0.5f}));
  auto zero = RunKernel("FloorDiv", {I64({1}), I64({0})}, {}, kiln);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("division by zero"), std::string::npos);
  EXPECT_TRUE(Near(Values<float>(Run1("SquaredDifference", {F32({1, 5}), F32({4})}, {}, kiln)),
                   {9, 1}));
}

TEST(Binary, VariadicOps) {
  Tensor a = F32({1, 5, 3}), b = F32({4, 2, 6}), c = F32({0}, {1});
  EXPECT_EQ(Values<float>(Run1("Max", {a, b, c})), std::vector<float>({4, 5, 6}));
  EXPECT_EQ(Values<float>(Run1("Min", {a, b, c})), std::vector<float>({0, 0, 0}));
  EXPECT_EQ(Values<float>(Run1("Sum", {a, b, c})), std::vector<float>({5, 7, 9}));
  EXPECT_TRUE(Near(Values<float>(Run1("Mean", {a, b, c})), {5.f / 3, 7.f / 3, 3}));
  EXPECT_EQ(Values<float>(Run1("Sum", {a})), std::vector<float>({1, 5, 3}));
  // Broadcast across the variadic inputs: [1] + [2, 1] + [3] -> [2, 3]
  Tensor out = Run1("Sum", {c, F32({1, 2}, {2, 1}), F32({10, 20, 30})});
  EXPECT_EQ(out.shape(), Shape({2, 3}));
  EXPECT_EQ(Values<float>(out), std::vector<float>({11, 21, 31, 12, 22, 32}));
  EXPECT_EQ(Values<int64_t>(Run1("Max", {I64({1, 9}), I64({5, 2})})),
            std::vector<int64_t>({5, 9}));
}

TEST(Binary, ComparisonsAndLogic) {
  Tensor a = F32({1, 2, 3, kNaN}), b = F32({2, 2, 2, kNaN});
  EXPECT_EQ(BoolValues(Run1("Equal", {a, b})), std::vector<bool>({0, 1, 0, 0}));
  EXPECT_EQ(BoolValues(Run1("Greater", {a, b})), std::vector<bool>({0, 0, 1, 0}));
  EXPECT_EQ(BoolValues(Run1("GreaterOrEqual", {a, b})), std::vector<bool>({0, 1, 1, 0}));
  EXPECT_EQ(BoolValues(Run1("Less", {a, b})), std::vector<bool>({1, 0, 0, 0}));
  EXPECT_EQ(BoolValues(Run1("LessOrEqual", {a, b})), std::vector<bool>({1, 1, 0, 0}));
  EXPECT_EQ(BoolValues(Run1("Equal", {I64({1, 2}), I64({2})})), std::vector<bool>({0, 1}));
  EXPECT_EQ(BoolValues(Run1("Equal", {Tensor::FromVector(std::vector<std::string>{"a", "b"}),
                                      Tensor::FromVector(std::vector<std::string>{"a"})})),
            std::vector<bool>({1, 0}));
  Tensor p = Bools({1, 1, 0, 0}, {4}), q = Bools({1, 0, 1, 0}, {4});
  EXPECT_EQ(BoolValues(Run1("And", {p, q})), std::vector<bool>({1, 0, 0, 0}));
  EXPECT_EQ(BoolValues(Run1("Or", {p, q})), std::vector<bool>({1, 1, 1, 0}));
  EXPECT_EQ(BoolValues(Run1("Xor", {p, q})), std::vector<bool>({0, 1, 1, 0}));
  EXPECT_FALSE(RunKernel("And", {a, b}).ok());
}

TEST(Binary, BitwiseAndShift) {
  EXPECT_EQ(Values<int32_t>(Run1("BitwiseAnd", {I32({12, -1}), I32({10, 7})})),
            std::vector<int32_t>({8, 7}));
  EXPECT_EQ(Values<int32_t>(Run1("BitwiseOr", {I32({12, 1}), I32({10, 2})})),
            std::vector<int32_t>({14, 3}));
  EXPECT_EQ(Values<int32_t>(Run1("BitwiseXor", {I32({12, 1}), I32({10, 3})})),
            std::vector<int32_t>({6, 2}));
  Tensor x = Tensor::FromVector(std::vector<uint8_t>{16, 4, 1});
  Tensor s = Tensor::FromVector(std::vector<uint8_t>{1, 2, 9});
  EXPECT_EQ(Values<uint8_t>(Run1("BitShift", {x, s}, {{"direction", std::string("LEFT")}})),
            std::vector<uint8_t>({32, 16, 0}));
  EXPECT_EQ(Values<uint8_t>(Run1("BitShift", {x, s}, {{"direction", std::string("RIGHT")}})),
            std::vector<uint8_t>({8, 1, 0}));
  EXPECT_FALSE(RunKernel("BitShift", {x, s}, {{"direction", std::string("UP")}}).ok());
}

TEST(Binary, WhereBroadcastsThreeWays) {
  Tensor cond = Bools({1, 0, 1}, {3});
  Tensor out = Run1("Where", {cond, F32({1, 2}, {2, 1}), Tensor::Scalar(-1.f)});
  ASSERT_EQ(out.shape(), Shape({2, 3}));
  EXPECT_EQ(Values<float>(out), std::vector<float>({1, -1, 1, 2, -1, 2}));
  Tensor strs = Run1("Where", {Bools({1, 0}, {2}),
                               Tensor::FromVector(std::vector<std::string>{"a", "b"}),
                               Tensor::FromVector(std::vector<std::string>{"x", "y"})});
  EXPECT_EQ(strs.data<std::string>()[1], "y");
  EXPECT_FALSE(RunKernel("Where", {F32({1}), F32({1}), F32({1})}).ok());
}

TEST(Binary, OtherDtypes) {
  Tensor h1(DType::kFloat16, Shape{2}), h2(DType::kFloat16, Shape{2});
  h1.data<Float16>()[0] = Float16(1.5f);
  h1.data<Float16>()[1] = Float16(-2.f);
  h2.data<Float16>()[0] = Float16(0.25f);
  h2.data<Float16>()[1] = Float16(4.f);
  Tensor hs = Run1("Add", {h1, h2});
  EXPECT_EQ(static_cast<float>(hs.data<Float16>()[0]), 1.75f);
  EXPECT_EQ(static_cast<float>(hs.data<Float16>()[1]), 2.f);
  Tensor d = Run1("Mul", {Tensor::FromVector(std::vector<double>{1.5, 2}),
                          Tensor::FromVector(std::vector<double>{2, 0.25})});
  EXPECT_EQ(Values<double>(d), std::vector<double>({3, 0.5}));
  Tensor u8 = Run1("Add", {Tensor::FromVector(std::vector<uint8_t>{250, 3}),
                           Tensor::FromVector(std::vector<uint8_t>{10, 4})});
  EXPECT_EQ(Values<uint8_t>(u8), std::vector<uint8_t>({4, 7}));  // wraps like numpy
  const int32_t max32 = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(Values<int32_t>(Run1("Add", {I32({max32}), I32({1})})),
            std::vector<int32_t>({std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(Values<int32_t>(Run1("Mul", {I32({65536}), I32({65536})})), std::vector<int32_t>({0}));
  EXPECT_FALSE(RunKernel("Add", {F32({1}), I64({1})}).ok());
}

}  // namespace
}  // namespace kiln::kernels::math_test
