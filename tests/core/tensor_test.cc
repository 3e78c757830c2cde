#include "kiln/core/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln {
namespace {

TEST(TensorTest, AllocationIs64ByteAligned) {
  for (DType d : {DType::kFloat32, DType::kInt8, DType::kFloat64, DType::kBool}) {
    Tensor t(d, Shape{3, 5});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << DTypeName(d);
  }
}

TEST(TensorTest, SliceSharesBufferAlongFirstDimension) {
  Tensor t = Tensor::FromVector<float>({0, 1, 2, 3, 4, 5}, Shape{3, 2});
  Tensor rows = t.Slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.buffer(), t.buffer());
  EXPECT_EQ(rows.data<float>()[0], 2);
  rows.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[2], 42);
  Tensor row = t.SubTensor(2);
  EXPECT_EQ(row.shape(), (Shape{2}));
  EXPECT_EQ(row.data<float>()[1], 5);
}

TEST(TensorTest, BufferOutlivesOriginalTensor) {
  Tensor slice;
  {
    Tensor t = Tensor::FromVector<int64_t>({7, 8, 9});
    slice = t.Slice(2, 3);
  }
  EXPECT_EQ(slice.data<int64_t>()[0], 9);
}

TEST(TensorTest, StringTensorsOwnTheirStrings) {
  Tensor t(DType::kString, Shape{2});
  t.data<std::string>()[0] = std::string(1000, 'x');
  t.data<std::string>()[1] = "short";
  Tensor copy = t.Clone();
  EXPECT_NE(copy.buffer(), t.buffer());
  EXPECT_EQ(copy.data<std::string>()[0].size(), 1000u);
  EXPECT_TRUE(TensorsEqual(copy, t));
}

// TensorsIdentical is what a computation cannot tell apart: the sign of a zero and a NaN's
// payload count, unlike TensorsEqual's values.
TEST(TensorTest, IdenticalTensorsHaveTheSameBytes) {
  const Tensor a = Tensor::FromVector<float>({0.0f, 1.0f, std::nanf("1")});
  EXPECT_TRUE(TensorsIdentical(a, a));
  EXPECT_TRUE(TensorsIdentical(a, a.Clone()));
  Tensor signed_zero = a.Clone();
  signed_zero.data<float>()[0] = -0.0f;
  EXPECT_TRUE(TensorsEqual(a, signed_zero));
  EXPECT_FALSE(TensorsIdentical(a, signed_zero));
  Tensor other_nan = a.Clone();
  other_nan.data<float>()[2] = std::nanf("2");
  EXPECT_TRUE(TensorsEqual(a, other_nan));
  EXPECT_FALSE(TensorsIdentical(a, other_nan));
  EXPECT_FALSE(TensorsIdentical(a, Tensor::FromVector<float>({0.0f, 1.0f})));
  Tensor s(DType::kString, Shape{2});
  s.data<std::string>()[0] = std::string(100, 'x');
  EXPECT_TRUE(TensorsIdentical(s, s.Clone()));
  Tensor t = s.Clone();
  t.data<std::string>()[1] = "y";
  EXPECT_FALSE(TensorsIdentical(s, t));
}

TEST(TensorTest, LargeBuffersAreReusedAndZeroedWhenAsked) {
  // A batch of 64 images of 224x224x3 floats: freed and allocated again every step.
  const Shape batch{64, 224, 224, 3};
  [[maybe_unused]] void* first = nullptr;
  {
    Tensor t(DType::kFloat32, batch);
    first = t.raw_data();
    std::fill(t.data<float>(), t.data<float>() + t.num_elements(), 7.0f);
  }
  Tensor again(DType::kFloat32, batch);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_EQ(again.raw_data(), first) << "a freed large block of the same size is reused";
#endif
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again.raw_data()) % 64, 0u);
  // Zeros() must not see the previous contents of a reused block.
  again = Tensor();
  Tensor zeros = Tensor::Zeros(DType::kFloat32, batch);
  for (int64_t i = 0; i < zeros.num_elements(); i += 4099) {
    ASSERT_EQ(zeros.data<float>()[i], 0.0f) << i;
  }
  // The cache is bounded: many live blocks, all freed, do not stay cached beyond its limit,
  // and every allocation still succeeds.
  std::vector<Tensor> many;
  for (int i = 0; i < 600; ++i)
    many.emplace_back(DType::kUInt8, Shape{(int64_t{1} << 20) + i * 64});
  many.clear();
  Tensor after(DType::kUInt8, Shape{int64_t{3} << 20});
  EXPECT_NE(after.raw_data(), nullptr);
}

TEST(TensorTest, ReshapeChecksElementCount) {
  Tensor t = Tensor::Zeros(DType::kInt32, Shape{2, 3});
  EXPECT_TRUE(t.Reshape(Shape{6}).ok());
  auto bad = t.Reshape(Shape{4});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[2, 3]"), std::string::npos);
}

TEST(TensorTest, HalfAndBFloat16RoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between two bfloat16 values: rounds to even (1.0).
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.00390625f)), 1.0f);
}

TEST(TensorTest, AllCloseUsesRelativeAndAbsoluteTolerance) {
  Tensor a = Tensor::FromVector<float>({1.0f, 100.0f});
  Tensor b = Tensor::FromVector<float>({1.00001f, 100.001f});
  EXPECT_TRUE(TensorsAllClose(a, b, 1e-4, 0));
  EXPECT_FALSE(TensorsAllClose(a, b, 1e-7, 0));
}

TEST(TensorTest, CheckedCountsRefuseNegativeAndOverflowingShapes) {
  EXPECT_EQ(*CheckedNumElements(Shape{2, 3}.dims()), 6);
  EXPECT_EQ(*CheckedNumElements(Shape{}.dims()), 1);
  EXPECT_EQ(*CheckedNumElements(Shape{0, int64_t{1} << 62, 4}.dims()), 0);
  EXPECT_FALSE(CheckedNumElements(Shape{2, -1}.dims()).ok());
  EXPECT_FALSE(CheckedNumElements(Shape{int64_t{1} << 32, int64_t{1} << 32}.dims()).ok());
  EXPECT_FALSE(CheckedNumElements(Shape{int64_t{1} << 62, 4}.dims()).ok());
  EXPECT_FALSE(CheckedByteSize(DType::kFloat32, Shape{int64_t{1} << 62}).ok());
  EXPECT_EQ(*CheckedByteSize(DType::kFloat32, Shape{3, 5}), 60u);
}

TEST(TensorTest, AllocateIsAnErrorNotAnException) {
  auto wraps = Tensor::Allocate(DType::kFloat32, Shape{int64_t{1} << 62, 4});
  EXPECT_EQ(wraps.status().code(), absl::StatusCode::kInvalidArgument);
  // 2^61 bytes fits in 63 bits but in no machine.
  auto huge = Tensor::Allocate(DType::kUInt8, Shape{int64_t{1} << 61});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THROW(Tensor(DType::kFloat32, Shape{int64_t{1} << 62, 4}), std::bad_alloc);
  auto fine = Tensor::Allocate(DType::kFloat32, Shape{0, 7});
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(fine->num_elements(), 0);
}

}  // namespace
}  // namespace kiln
