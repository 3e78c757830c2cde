// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against values worked out by hand
// from the ONNX definition.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/testing.h"

namespace kiln::kernels {
namespace {

using testing::RunKernel;

Tensor F32(std::vector<float> v, Shape s) { return Tensor::FromVector(v, std::move(s)); }
Tensor I64(std::vector<int64_t> v, Shape s) { return Tensor::FromVector(v, std::move(s)); }

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

const Tensor kLogProbs = F32({-1.0f, -2.0f, -3.0f, -0.5f, -1.5f, -2.5f}, {2, 3});
const Tensor kTargets = I64({2, 0}, {2});
const Tensor kClassWeights = F32({1.f, 2.f, 3.f}, {3});

float Nll(std::map<std::string, ir::Attribute> attrs, bool weighted) {
  auto out = RunKernel("NegativeLogLikelihoodLoss",
                       {kLogProbs, kTargets, weighted ? kClassWeights : Tensor()}, attrs);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return NAN;
  EXPECT_EQ((*out)[0].shape(), Shape{});
  return (*out)[0].data<float>()[0];
}

TEST(NegativeLogLikelihoodLoss, ReductionsWithClassWeights) {
  // Per element: -weight[target] * input[n, target] = 3 * 3 and 1 * 0.5.
  auto none = RunKernel("NegativeLogLikelihoodLoss", {kLogProbs, kTargets, kClassWeights},
                        {{"reduction", std::string("none")}});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ((*none)[0].shape(), Shape({2}));
  EXPECT_EQ(Values((*none)[0]), (std::vector<float>{9.f, 0.5f}));
  EXPECT_FLOAT_EQ(Nll({{"reduction", std::string("sum")}}, true), 9.5f);
  // The mean divides by the weights used (3 + 1), not by the element count.
  EXPECT_FLOAT_EQ(Nll({}, true), 9.5f / 4.f);
  EXPECT_FLOAT_EQ(Nll({}, false), 3.5f / 2.f);
}

TEST(NegativeLogLikelihoodLoss, IgnoreIndexDropsElementAndItsWeight) {
  EXPECT_FLOAT_EQ(Nll({{"ignore_index", int64_t{2}}}, true), 0.5f);
  EXPECT_FLOAT_EQ(Nll({{"ignore_index", int64_t{2}}}, false), 0.5f);
  EXPECT_FLOAT_EQ(Nll({{"ignore_index", int64_t{2}}, {"reduction", std::string("sum")}}, true),
                  0.5f);
  // Every target ignored: the mean is 0 / 0, as in ONNX's reference.
  auto all_ignored = RunKernel("NegativeLogLikelihoodLoss", {kLogProbs, I64({1, 1}, {2})},
                               {{"ignore_index", int64_t{1}}});
  ASSERT_TRUE(all_ignored.ok()) << all_ignored.status();
  EXPECT_TRUE(std::isnan((*all_ignored)[0].data<float>()[0]));
}

TEST(NegativeLogLikelihoodLoss, ExtraDimsAndBadTargets) {
  // [N=1, C=2, d1=2]: element d uses input[0, target[d], d].
  auto out = RunKernel("NegativeLogLikelihoodLoss",
                       {F32({-1.f, -2.f, -3.f, -4.f}, {1, 2, 2}), I64({1, 0}, {1, 2})},
                       {{"reduction", std::string("none")}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({1, 2}));
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{3.f, 2.f}));

  auto bad = RunKernel("NegativeLogLikelihoodLoss", {kLogProbs, I64({3, 0}, {2})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("target value 3"), std::string::npos) << bad.status();
  auto bad_shape = RunKernel("NegativeLogLikelihoodLoss", {kLogProbs, I64({0, 0, 0}, {3})});
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_NE(bad_shape.status().message().find("'target'"), std::string::npos);
}

TEST(SoftmaxCrossEntropyLoss, LossAndLogProb) {
  // Scores [N=1, C=2, d1=2]: column 0 is (0, ln 3) -> softmax (1/4, 3/4); column 1 is
  // (0, 0) -> (1/2, 1/2). Labels (1, 0) -> losses -ln(3/4) and ln 2.
  const Tensor scores = F32({0.f, 0.f, std::log(3.f), 0.f}, {1, 2, 2});
  auto out = RunKernel("SoftmaxCrossEntropyLoss", {scores, I64({1, 0}, {1, 2})},
                       {{"reduction", std::string("none")}}, {.num_outputs = 2});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].shape(), Shape({1, 2}));
  EXPECT_NEAR((*out)[0].data<float>()[0], -std::log(0.75), 1e-6);
  EXPECT_NEAR((*out)[0].data<float>()[1], std::log(2.0), 1e-6);
  ASSERT_EQ((*out)[1].shape(), Shape({1, 2, 2}));
  const std::vector<float> log_prob = Values((*out)[1]);
  EXPECT_NEAR(log_prob[0], std::log(0.25), 1e-6);
  EXPECT_NEAR(log_prob[1], std::log(0.5), 1e-6);
  EXPECT_NEAR(log_prob[2], std::log(0.75), 1e-6);
  EXPECT_NEAR(log_prob[3], std::log(0.5), 1e-6);

  auto mean = RunKernel("SoftmaxCrossEntropyLoss", {scores, I64({1, 0}, {1, 2})});
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_NEAR((*mean)[0].data<float>()[0], (std::log(2.0) - std::log(0.75)) / 2, 1e-6);
  // Weighted, with the second element ignored: weight[1] * -ln(3/4) / weight[1].
  auto weighted =
      RunKernel("SoftmaxCrossEntropyLoss", {scores, I64({1, -1}, {1, 2}), F32({2.f, 5.f}, {2})},
                {{"ignore_index", int64_t{-1}}});
  ASSERT_TRUE(weighted.ok()) << weighted.status();
  EXPECT_NEAR((*weighted)[0].data<float>()[0], -std::log(0.75), 1e-6);
}

}  // namespace
}  // namespace kiln::kernels
