// Known answers for Softmax/LogSoftmax/Hardmax, the Reduce* family, ArgMax/ArgMin and CumSum.
#include <cmath>
#include <limits>

#include "math_test_util.h"

namespace kiln::kernels::math_test {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> RefSoftmax(const std::vector<float>& row) {
  double m = -INFINITY, s = 0;
  for (float v : row) m = std::max<double>(m, v);
  for (float v : row) s += std::exp(v - m);
  std::vector<float> out;
  for (float v : row) out.push_back(static_cast<float>(std::exp(v - m) / s));
  return out;
}

TEST(Softmax, RowsAreStableAndSumToOne) {
  // Large logits would overflow a naive exp.
  std::vector<float> x = {1000, 1001, 1002, -5, 0, 5};
  Tensor out = Run1("Softmax", {F32(x, {2, 3})});
  std::vector<float> ref = RefSoftmax({1000, 1001, 1002});
  std::vector<float> ref2 = RefSoftmax({-5, 0, 5});
  ref.insert(ref.end(), ref2.begin(), ref2.end());
  EXPECT_TRUE(Near(Values<float>(out), ref, 1e-6, 1e-7));
  Tensor log = Run1("LogSoftmax", {F32(x, {2, 3})});
  std::vector<float> logref;
  for (float v : ref) logref.push_back(std::log(v));
  EXPECT_TRUE(Near(Values<float>(log), logref, 1e-5, 1e-6));
}

TEST(Softmax, LongRowsAndOtherAxes) {
  std::vector<float> x(3 * 1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(i * 0.1f) * 10;
  Tensor out = Run1("Softmax", {F32(x, {3, 1000})});
  for (int r = 0; r < 3; ++r) {
    std::vector<float> row(x.begin() + r * 1000, x.begin() + (r + 1) * 1000);
    std::vector<float> got(out.data<float>() + r * 1000, out.data<float>() + (r + 1) * 1000);
    EXPECT_TRUE(Near(got, RefSoftmax(row), 1e-5, 1e-9));
  }
  // axis = 0 of [3, 2]: columns.
  Tensor col = Run1("Softmax", {F32({1, 2, 3, 4, 5, 6}, {3, 2})}, {{"axis", int64_t{0}}});
  std::vector<float> c0 = RefSoftmax({1, 3, 5}), c1 = RefSoftmax({2, 4, 6});
  EXPECT_TRUE(Near(Values<float>(col), {c0[0], c1[0], c0[1], c1[1], c0[2], c1[2]}, 1e-6, 1e-7));
  // LogSoftmax over axis 1 of [2, 3, 2].
  Tensor l = Run1("LogSoftmax", {F32({0, 0, 1, 1, 2, 2, 0, 1, 0, 1, 0, 1}, {2, 3, 2})},
                  {{"axis", int64_t{1}}});
  std::vector<float> r = RefSoftmax({0, 1, 2});
  EXPECT_NEAR(l.data<float>()[0], std::log(r[0]), 1e-6);
  EXPECT_NEAR(l.data<float>()[4], std::log(r[2]), 1e-6);
  EXPECT_FALSE(RunKernel("Softmax", {F32({1, 2})}, {{"axis", int64_t{2}}}).ok());
}

TEST(Softmax, HardmaxAndSpecials) {
  Tensor h = Run1("Hardmax", {F32({1, 3, 3, 0, -1, -2}, {2, 3})});
  EXPECT_EQ(Values<float>(h), std::vector<float>({0, 1, 0, 1, 0, 0}));
  Tensor inf = Run1("Softmax", {F32({-kInf, 0, 0})});
  EXPECT_TRUE(Near(Values<float>(inf), {0, 0.5f, 0.5f}));
  Tensor nan = Run1("Softmax", {F32({kNaN, 0})});
  EXPECT_TRUE(std::isnan(nan.data<float>()[1]));
  Tensor d = Run1("Softmax", {Tensor::FromVector(std::vector<double>{0, std::log(3.0)})});
  EXPECT_NEAR(d.data<double>()[1], 0.75, 1e-12);
  Tensor e = Run1("Softmax", {F32({}, {0, 4})});
  EXPECT_EQ(e.shape(), Shape({0, 4}));
}

Tensor Axes(std::vector<int64_t> a) { return I64(std::move(a)); }

TEST(Reduce, SumMeanMaxOverAxes) {
  // [2, 3, 2]
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  KernelTestOptions c;
  c.constant_inputs = {1};
  Tensor s = Run1("ReduceSum", {F32(x, {2, 3, 2}), Axes({1})}, {}, c);
  EXPECT_EQ(s.shape(), Shape({2, 1, 2}));
  EXPECT_EQ(Values<float>(s), std::vector<float>({9, 12, 27, 30}));
  s = Run1("ReduceSum", {F32(x, {2, 3, 2}), Axes({0, 2})}, {{"keepdims", int64_t{0}}}, c);
  EXPECT_EQ(s.shape(), Shape({3}));
  EXPECT_EQ(Values<float>(s), std::vector<float>({1 + 2 + 7 + 8, 3 + 4 + 9 + 10, 5 + 6 + 11 + 12}));
  s = Run1("ReduceMean", {F32(x, {2, 3, 2}), Axes({-1})}, {}, c);
  EXPECT_EQ(Values<float>(s), std::vector<float>({1.5, 3.5, 5.5, 7.5, 9.5, 11.5}));
  // No axes: everything.
  s = Run1("ReduceMax", {F32(x, {2, 3, 2})});
  EXPECT_EQ(s.shape(), Shape({1, 1, 1}));
  EXPECT_EQ(s.data<float>()[0], 12);
  // No axes with noop_with_empty_axes: identity.
  s = Run1("ReduceSum", {F32(x, {2, 3, 2})}, {{"noop_with_empty_axes", int64_t{1}}});
  EXPECT_EQ(Values<float>(s), x);
  s = Run1("ReduceMin", {F32(x, {2, 3, 2}), Axes({0, 1, 2})}, {{"keepdims", int64_t{0}}}, c);
  EXPECT_EQ(s.shape(), Shape({}));
  EXPECT_EQ(s.data<float>()[0], 1);
  EXPECT_FALSE(RunKernel("ReduceSum", {F32(x, {2, 3, 2}), Axes({3})}, {}, c).ok());
  EXPECT_FALSE(RunKernel("ReduceSum", {F32(x, {2, 3, 2}), Axes({1, 1})}, {}, c).ok());
}

TEST(Reduce, WholeFamilyKnownAnswers) {
  std::vector<float> x = {1, -2, 3, -4, 0.5f, 2};
  KernelTestOptions c;
  c.constant_inputs = {1};
  auto run = [&](const char* op) { return Values<float>(Run1(op, {F32(x, {2, 3}), Axes({1})}, {}, c)); };
  EXPECT_TRUE(Near(run("ReduceProd"), {-6, -4}));
  EXPECT_TRUE(Near(run("ReduceL1"), {6, 6.5f}));
  EXPECT_TRUE(Near(run("ReduceL2"), {std::sqrt(14.f), std::sqrt(20.25f)}));
  EXPECT_TRUE(Near(run("ReduceSumSquare"), {14, 20.25f}));
  EXPECT_TRUE(Near(run("ReduceLogSum"), {std::log(2.f), std::log(-1.5f)}));
  EXPECT_TRUE(Near(run("ReduceLogSumExp"),
                   {static_cast<float>(std::log(std::exp(1.0) + std::exp(-2.0) + std::exp(3.0))),
                    static_cast<float>(std::log(std::exp(-4.0) + std::exp(0.5) + std::exp(2.0)))},
                   1e-6, 1e-6));
  // LogSumExp stays finite for large values.
  Tensor big = Run1("ReduceLogSumExp", {F32({1000, 1000}), Axes({0})}, {}, c);
  EXPECT_NEAR(big.data<float>()[0], 1000 + std::log(2.f), 1e-3);
}

TEST(Reduce, LargeRowsAndColumnsWithThreads) {
  const int rows = 513, cols = 1031;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(i * 0.013f);
  KernelTestOptions c;
  c.constant_inputs = {1};
  c.intra_op_threads = 3;
  Tensor r = Run1("ReduceMean", {F32(x, {rows, cols}), Axes({1})}, {}, c);
  Tensor k = Run1("ReduceMax", {F32(x, {rows, cols}), Axes({0})}, {}, c);
  for (int i = 0; i < rows; ++i) {
    double s = 0;
    for (int j = 0; j < cols; ++j) s += x[i * cols + j];
    ASSERT_NEAR(r.data<float>()[i], s / cols, 1e-5) << i;
  }
  for (int j = 0; j < cols; ++j) {
    float m = -kInf;
    for (int i = 0; i < rows; ++i) m = std::max(m, x[i * cols + j]);
    ASSERT_EQ(k.data<float>()[j], m) << j;
  }
}

TEST(Reduce, DtypesEmptyAndNaN) {
  KernelTestOptions c;
  c.constant_inputs = {1};
  Tensor i = Run1("ReduceSum", {I64({1, 2, 3, 4}, {2, 2}), Axes({0})}, {}, c);
  EXPECT_EQ(Values<int64_t>(i), std::vector<int64_t>({4, 6}));
  Tensor im = Run1("ReduceMean", {I32({1, 2, 4, 4})}, {{"keepdims", int64_t{0}}});
  EXPECT_EQ(Values<int32_t>(im), std::vector<int32_t>({2}));  // 11 / 4 truncated
  Tensor e = Run1("ReduceSum", {F32({}, {0, 3}), Axes({0})}, {}, c);
  EXPECT_EQ(e.shape(), Shape({1, 3}));
  EXPECT_EQ(Values<float>(e), std::vector<float>({0, 0, 0}));
  Tensor em = Run1("ReduceMax", {F32({}, {0, 2}), Axes({0})}, {}, c);
  EXPECT_EQ(Values<float>(em), std::vector<float>({-kInf, -kInf}));
  Tensor n = Run1("ReduceMax", {F32({1, kNaN, 3}), Axes({0})}, {}, c);
  EXPECT_TRUE(std::isnan(n.data<float>()[0]));
  Tensor d = Run1("ReduceSum", {Tensor::FromVector(std::vector<double>{0.1, 0.2}), Axes({0})}, {}, c);
  EXPECT_DOUBLE_EQ(d.data<double>()[0], 0.1 + 0.2);
}

TEST(ArgMaxMin, AxesKeepdimsSelectLast) {
  Tensor x = F32({1, 5, 5, 2, 0, 0}, {2, 3});
  Tensor a = Run1("ArgMax", {x}, {{"axis", int64_t{1}}});
  EXPECT_EQ(a.shape(), Shape({2, 1}));
  EXPECT_EQ(Values<int64_t>(a), std::vector<int64_t>({1, 0}));
  a = Run1("ArgMax", {x}, {{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}});
  EXPECT_EQ(Values<int64_t>(a), std::vector<int64_t>({2, 0}));
  a = Run1("ArgMin", {x}, {{"axis", int64_t{1}}, {"keepdims", int64_t{0}}, {"select_last_index", int64_t{1}}});
  EXPECT_EQ(a.shape(), Shape({2}));
  EXPECT_EQ(Values<int64_t>(a), std::vector<int64_t>({0, 2}));
  a = Run1("ArgMin", {x}, {{"axis", int64_t{0}}});
  EXPECT_EQ(Values<int64_t>(a), std::vector<int64_t>({0, 1, 1}));
  a = Run1("ArgMax", {I64({3, 9, 2})}, {{"keepdims", int64_t{0}}});
  EXPECT_EQ(Values<int64_t>(a), std::vector<int64_t>({1}));
  a = Run1("ArgMax", {F32({1, kNaN, 3})});
  EXPECT_EQ(Values<int64_t>(a), std::vector<int64_t>({1}));  // NaN wins, like numpy
}

TEST(CumSum, ExclusiveReverseAxis) {
  Tensor x = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(Values<float>(Run1("CumSum", {x, I64({1}, {})})),
            std::vector<float>({1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(Values<float>(Run1("CumSum", {x, I32({0})})), std::vector<float>({1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(Values<float>(Run1("CumSum", {x, I64({-1}, {})}, {{"exclusive", int64_t{1}}})),
            std::vector<float>({0, 1, 3, 0, 4, 9}));
  EXPECT_EQ(Values<float>(Run1("CumSum", {x, I64({1}, {})}, {{"reverse", int64_t{1}}})),
            std::vector<float>({6, 5, 3, 15, 11, 6}));
  EXPECT_EQ(Values<float>(Run1("CumSum", {x, I64({1}, {})},
                               {{"reverse", int64_t{1}}, {"exclusive", int64_t{1}}})),
            std::vector<float>({5, 3, 0, 11, 6, 0}));
  EXPECT_EQ(Values<int64_t>(Run1("CumSum", {I64({1, 2, 3}), I64({0}, {})})),
            std::vector<int64_t>({1, 3, 6}));
  EXPECT_FALSE(RunKernel("CumSum", {x, I64({2}, {})}).ok());
}

}  // namespace
}  // namespace kiln::kernels::math_test
