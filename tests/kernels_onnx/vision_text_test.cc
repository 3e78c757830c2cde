// NonMaxSuppression, RoiAlign, GridSample, MaxUnpool, Det and TfIdfVectorizer against values
// worked out by hand from the ONNX spec.
#include <cmath>
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

TEST(NonMaxSuppression, SuppressesOverlapsPerClass) {
  // Boxes 0 and 1 overlap with IoU 0.81 / 1.19 > 0.5; box 2 is apart. Class 0 prefers box 1,
  // class 1 prefers box 0; scores below 0.1 never qualify.
  const Tensor boxes = Of<float>({0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 5, 5, 6, 6}, {1, 3, 4});
  const Tensor scores = Of<float>({0.5f, 0.9f, 0.05f, 0.8f, 0.2f, 0.3f}, {1, 2, 3});
  auto out = RunKernel("NonMaxSuppression", {boxes, scores, Of<int64_t>({10}, {1}),
                                             Of<float>({0.5f}, {1}), Of<float>({0.1f}, {1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({3, 3}));
  EXPECT_EQ(Values<int64_t>((*out)[0]), (std::vector<int64_t>{0, 0, 1, 0, 1, 0, 0, 1, 2}));
  // At most one box per class; without max_output_boxes_per_class nothing is selected.
  auto one = RunKernel("NonMaxSuppression", {boxes, scores, Of<int64_t>({1}, {1})});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(Values<int64_t>((*one)[0]), (std::vector<int64_t>{0, 0, 1, 0, 1, 0}));
  auto none = RunKernel("NonMaxSuppression", {boxes, scores});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ((*none)[0].shape(), Shape({0, 3}));
}

TEST(RoiAlign, AveragesBilinearSamples) {
  // A 4x4 ramp x + 4y; one 2x2 roi from (1, 1) to (3, 3) in output_half_pixel mode with one
  // sample per bin: samples at (1.5, 1.5), (2.5, 1.5), ... -> the ramp's value there.
  std::vector<float> ramp(16);
  for (int i = 0; i < 16; ++i) ramp[i] = static_cast<float>(i);
  auto out = RunKernel(
      "RoiAlign",
      {Of<float>(ramp, {1, 1, 4, 4}), Of<float>({1, 1, 3, 3}, {1, 4}), Of<int64_t>({0}, {1})},
      {{"output_height", int64_t{2}},
       {"output_width", int64_t{2}},
       {"sampling_ratio", int64_t{1}},
       {"coordinate_transformation_mode", std::string("output_half_pixel")}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({1, 1, 2, 2}));
  const std::vector<float> v = Values<float>((*out)[0]);
  const std::vector<float> want = {1.5f + 6.f, 2.5f + 6.f, 1.5f + 10.f, 2.5f + 10.f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[i], want[i], 1e-5) << i;
  auto bad = RunKernel("RoiAlign", {Of<float>(ramp, {1, 1, 4, 4}), Of<float>({1, 1, 3, 3}, {1, 4}),
                                    Of<int64_t>({1}, {1})});
  EXPECT_FALSE(bad.ok());
}

TEST(GridSample, CornersAndPadding) {
  // 2x2 input; grid points at the corners (-1, -1) and (1, 1), and far outside (3, 0).
  const Tensor x = Of<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  const Tensor grid = Of<float>({-1, -1, 1, 1, 3, 0}, {1, 1, 3, 2});
  auto aligned = RunKernel("GridSample", {x, grid}, {{"align_corners", int64_t{1}}});
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  // align_corners: -1 and 1 are the corner pixel centres; (3, 0) is outside: zero padding.
  EXPECT_EQ(Values<float>((*aligned)[0]), (std::vector<float>{1, 4, 0}));
  auto border = RunKernel("GridSample", {x, grid},
                          {{"align_corners", int64_t{1}}, {"padding_mode", std::string("border")}});
  ASSERT_TRUE(border.ok()) << border.status();
  // Border clamps x to the right column; y = 0 is halfway between rows: (2 + 4) / 2.
  EXPECT_EQ(Values<float>((*border)[0]), (std::vector<float>{1, 4, 3}));
  // Without align_corners -1 is the outer edge of the first pixel: half of it is padding.
  auto unaligned = RunKernel("GridSample", {x, Of<float>({-1, -1}, {1, 1, 1, 2})});
  ASSERT_TRUE(unaligned.ok()) << unaligned.status();
  EXPECT_FLOAT_EQ(Values<float>((*unaligned)[0])[0], 0.25f);
}

TEST(MaxUnpool, ScattersAtPooledIndices) {
  const Tensor x = Of<float>({7, 9}, {1, 1, 1, 2});
  const Tensor idx = Of<int64_t>({1, 6}, {1, 1, 1, 2});
  auto out = RunKernel(
      "MaxUnpool", {x, idx},
      {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({1, 1, 2, 4}));
  EXPECT_EQ(Values<float>((*out)[0]), (std::vector<float>{0, 7, 0, 0, 0, 0, 9, 0}));
  // A larger output_shape keeps the coordinates: (0, 1) and (1, 2) in a 3x5 plane.
  auto bigger = RunKernel(
      "MaxUnpool", {x, idx, Of<int64_t>({1, 1, 3, 5}, {4})},
      {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  ASSERT_TRUE(bigger.ok()) << bigger.status();
  const std::vector<float> v = Values<float>((*bigger)[0]);
  ASSERT_EQ(v.size(), 15u);
  EXPECT_EQ(v[1], 7);
  EXPECT_EQ(v[7], 9);
  auto bad = RunKernel(
      "MaxUnpool", {x, Of<int64_t>({1, 8}, {1, 1, 1, 2})},
      {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  EXPECT_FALSE(bad.ok());
}

TEST(Det, BatchedWithPivoting) {
  // [[0, 1], [1, 0]] needs a row swap (det -1); [[2, 0, 0], [0, 3, 0], [1, 1, 4]] = 24.
  auto two = RunKernel("Det", {Of<float>({0, 1, 1, 0, 1, 2, 3, 4}, {2, 2, 2})});
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(Values<float>((*two)[0]), (std::vector<float>{-1, -2}));
  auto three = RunKernel("Det", {Of<double>({2, 0, 0, 0, 3, 0, 1, 1, 4}, {3, 3})});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ((*three)[0].shape(), Shape{});
  EXPECT_DOUBLE_EQ((*three)[0].data<double>()[0], 24.0);
  EXPECT_FALSE(RunKernel("Det", {Of<float>({1, 2}, {1, 2})}).ok());
}

TEST(TfIdfVectorizer, CountsUnigramsOnceAndSkipGrams) {
  // Pool: unigrams {1, 2} -> slots 0, 1; bigram (1, 2) -> slot 2.
  std::map<std::string, ir::Attribute> attrs = {
      {"min_gram_length", int64_t{1}},
      {"max_gram_length", int64_t{2}},
      {"max_skip_count", int64_t{1}},
      {"mode", std::string("TF")},
      {"ngram_counts", std::vector<int64_t>{0, 2}},
      {"ngram_indexes", std::vector<int64_t>{0, 1, 2}},
      {"pool_int64s", std::vector<int64_t>{1, 2, 1, 2}},
  };
  // 1 2 3 2: unigram 1 once, 2 twice; bigram (1, 2) adjacent and (1, _, ... ) skip 1 -> (1, 3)
  // no; (2, 2) no. Second row 1 3 2 0: (1, 2) with one skipped.
  auto tf = RunKernel("TfIdfVectorizer", {Of<int64_t>({1, 2, 3, 2, 1, 3, 2, 0}, {2, 4})}, attrs);
  ASSERT_TRUE(tf.ok()) << tf.status();
  EXPECT_EQ((*tf)[0].shape(), Shape({2, 3}));
  EXPECT_EQ(Values<float>((*tf)[0]), (std::vector<float>{1, 2, 1, 1, 1, 1}));
  attrs["mode"] = std::string("TFIDF");
  attrs["weights"] = std::vector<float>{0.5f, 2.f, 3.f};
  auto tfidf = RunKernel("TfIdfVectorizer", {Of<int32_t>({1, 2, 3, 2}, {4})}, attrs);
  ASSERT_TRUE(tfidf.ok()) << tfidf.status();
  EXPECT_EQ(Values<float>((*tfidf)[0]), (std::vector<float>{0.5f, 4, 3}));
  attrs["mode"] = std::string("IDF");
  auto idf = RunKernel("TfIdfVectorizer", {Of<int32_t>({1, 2, 3, 2}, {4})}, attrs);
  ASSERT_TRUE(idf.ok()) << idf.status();
  EXPECT_EQ(Values<float>((*idf)[0]), (std::vector<float>{0.5f, 2, 3}));
}

}  // namespace
}  // namespace kiln::kernels
