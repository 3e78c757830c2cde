// Fixes to existing kernels that the ONNX backend suite exposed: ReduceSum with axes fed at
// run time, Resize's align_corners on the unrounded output length and tf_crop_and_resize.
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

TEST(ReduceSum, AxesKnownOnlyAtRunTime) {
  const Tensor x = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  auto out = RunKernel("ReduceSum", {x, I64({1}, {1})}, {{"keepdims", int64_t{0}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({2}));
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{6.f, 15.f}));
  auto all = RunKernel("ReduceSum", {x, I64({}, {0})});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)[0].shape(), Shape({1, 1}));
  EXPECT_EQ(Values((*all)[0]), (std::vector<float>{21.f}));
  auto noop = RunKernel("ReduceSum", {x, I64({}, {0})}, {{"noop_with_empty_axes", int64_t{1}}});
  ASSERT_TRUE(noop.ok()) << noop.status();
  EXPECT_EQ(Values((*noop)[0]), Values(x));
  auto bad = RunKernel("ReduceSum", {x, I64({2}, {1})});
  EXPECT_FALSE(bad.ok());
}

TEST(Resize, AlignCornersDownsampleUsesUnroundedLength) {
  // Width 4 at scale 0.6: 2 outputs, but the coordinates divide by 4 * 0.6 - 1 = 1.4 (ONNX's
  // reference), so output 1 reads x = 3 / 1.4 = 2.142857 -> 3.142857.
  auto out = RunKernel("Resize", {F32({1, 2, 3, 4}, {1, 4}), Tensor(), F32({1.f, 0.6f}, {2})},
                       {{"mode", std::string("linear")},
                        {"coordinate_transformation_mode", std::string("align_corners")}},
                       {.constant_inputs = {2}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].shape(), Shape({1, 2}));
  EXPECT_FLOAT_EQ(Values((*out)[0])[0], 1.f);
  EXPECT_NEAR(Values((*out)[0])[1], 1.f + 3.f / 1.4f, 1e-5);
}

TEST(Resize, TfCropAndResizeExtrapolatesOutsideTheInput) {
  // roi (starts 0, 0.5; ends 1, 1.5) on [1, 4] = 0, 10, 20, 30 resized to [1, 3]: columns
  // sample x = 1.5, 3 and 4.5; the last is outside the input -> extrapolation_value 7.
  auto out = RunKernel(
      "Resize",
      {F32({0, 10, 20, 30}, {1, 4}), F32({0, 0.5f, 1, 1.5f}, {4}), Tensor(), I64({1, 3}, {2})},
      {{"mode", std::string("linear")},
       {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
       {"extrapolation_value", 7.f}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].shape(), Shape({1, 3}));
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{15, 30, 7}));
  auto no_roi =
      RunKernel("Resize", {F32({0, 10, 20, 30}, {1, 4}), Tensor(), Tensor(), I64({1, 3}, {2})},
                {{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}});
  ASSERT_FALSE(no_roi.ok());
  EXPECT_NE(no_roi.status().message().find("roi"), std::string::npos) << no_roi.status();
}

}  // namespace
}  // namespace kiln::kernels
