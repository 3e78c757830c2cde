// Known answers for Resize (values from the ONNX backend test cases) and Einsum (against a
// direct loop).
#include <random>

#include "test_util.h"

namespace kiln::kernels::tensor_test {
namespace {

using Attrs = std::map<std::string, ir::Attribute>;

Tensor Scales(std::vector<float> s) { return Tensor::FromVector<float>(s); }

std::vector<Tensor> Resize(const Tensor& x, const Tensor& scales, const Tensor& sizes,
                           Attrs attrs) {
  return Op("Resize", {x, Tensor(), scales, sizes}, std::move(attrs),
            {.constant_inputs = {2, 3}});
}

void ExpectNear(const Tensor& got, const std::vector<float>& want, const Shape& shape) {
  ASSERT_EQ(got.shape(), shape);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got.data<float>()[i], want[i], 1e-5) << "at " << i;
  }
}

TEST(ResizeTest, UpsampleLinearHalfPixelAndAlignCorners) {
  const Tensor x = F({1, 2, 3, 4}, {1, 1, 2, 2});
  auto out = Resize(x, Scales({1, 1, 2, 2}), Tensor(), {{"mode", std::string("linear")}});
  ExpectNear(out[0], {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25,
                      3.75, 4},
             {1, 1, 4, 4});
  out = Resize(x, Scales({1, 1, 2, 2}), Tensor(),
               {{"mode", std::string("linear")},
                {"coordinate_transformation_mode", std::string("align_corners")}});
  ExpectNear(out[0], {1, 4.f / 3, 5.f / 3, 2, 5.f / 3, 2, 7.f / 3, 8.f / 3, 7.f / 3, 8.f / 3, 3,
                      10.f / 3, 3, 10.f / 3, 11.f / 3, 4},
             {1, 1, 4, 4});
}

TEST(ResizeTest, DownsampleLinearAndNearest) {
  const Tensor x = F({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 4});
  auto out = Resize(x, Scales({1, 1, 0.6f, 0.6f}), Tensor(), {{"mode", std::string("linear")}});
  ExpectNear(out[0], {2.6666665f, 4.3333331f}, {1, 1, 1, 2});
  out = Resize(x, Scales({1, 1, 0.6f, 0.6f}), Tensor(), {});
  ExpectNear(out[0], {1, 3}, {1, 1, 1, 2});
}

TEST(ResizeTest, UpsampleNearestAndStrings) {
  const Tensor x = F({1, 2, 3, 4}, {1, 1, 2, 2});
  auto out = Resize(x, Scales({1, 1, 2, 3}), Tensor(), {});
  ExpectNear(out[0], {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4},
             {1, 1, 4, 6});
  out = Resize(S({"a", "b"}, {2}), Scales({2}), Tensor(), {});
  EXPECT_TENSOR_EQ(out[0], S({"a", "a", "b", "b"}, {4}));
}

TEST(ResizeTest, SizesWithTfHalfPixelForNn) {
  const Tensor x = Iota({1, 1, 4, 4});
  auto out = Resize(x, Tensor(), I64({1, 1, 3, 2}),
                    {{"coordinate_transformation_mode", std::string("tf_half_pixel_for_nn")}});
  ExpectNear(out[0], {5, 7, 9, 11, 13, 15}, {1, 1, 3, 2});
}

TEST(ResizeTest, CubicUpAndDown) {
  Tensor x = Iota({1, 1, 4, 4});
  for (int i = 0; i < 16; ++i) x.data<float>()[i] += 1;
  auto out = Resize(x, Scales({1, 1, 2, 2}), Tensor(), {{"mode", std::string("cubic")}});
  ASSERT_EQ(out[0].shape(), (Shape{1, 1, 8, 8}));
  const std::vector<float> row0 = {0.47265625f, 0.76953125f, 1.24609375f, 1.875f,
                                   2.28125f,    2.91015625f, 3.38671875f, 3.68359375f};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(out[0].data<float>()[i], row0[i], 1e-5);
  out = Resize(x, Scales({1, 1, 0.8f, 0.8f}), Tensor(), {{"mode", std::string("cubic")}});
  ExpectNear(out[0], {1.47119141f, 2.78125f, 4.08251953f, 6.71142578f, 8.02148438f, 9.32275391f,
                      11.91650391f, 13.2265625f, 14.52783203f},
             {1, 1, 3, 3});
}

TEST(ResizeTest, DynamicSizesAndUint8Rounding) {
  const Tensor x = T1<uint8_t>({0, 255}, {1, 2});
  auto out = Op("Resize", {x, Tensor(), Tensor(), I64({1, 4})},
                {{"mode", std::string("linear")},
                 {"coordinate_transformation_mode", std::string("align_corners")}});
  EXPECT_TENSOR_EQ(out[0], T1<uint8_t>({0, 85, 170, 255}, {1, 4}));
}

TEST(ResizeTest, UpsampleIsAsymmetricFloor) {
  auto out = Op("Upsample", {F({1, 2, 3}, {1, 3}), Scales({1, 1.5f})}, {},
                {.constant_inputs = {1}});
  EXPECT_TENSOR_EQ(out[0], F({1, 1, 2, 3}, {1, 4}));
  out = Op("Upsample", {F({1, 3}, {1, 2}), Scales({1, 2})}, {{"mode", std::string("linear")}},
           {.constant_inputs = {1}});
  EXPECT_TENSOR_EQ(out[0], F({1, 2, 3, 3}, {1, 4}));
}

// ---------------------------------------------------------------------------------------
Tensor Random(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// C[b, i, k] = sum_j A[b, i, j] * B[b, j, k]
Tensor BatchMatMul(const Tensor& a, const Tensor& b) {
  const int64_t nb = a.dim(0), m = a.dim(1), k = a.dim(2), n = b.dim(2);
  Tensor c = Tensor::Zeros(DType::kFloat32, Shape{nb, m, n});
  for (int64_t x = 0; x < nb; ++x)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j)
          c.data<float>()[(x * m + i) * n + j] +=
              a.data<float>()[(x * m + i) * k + p] * b.data<float>()[(x * k + p) * n + j];
  return c;
}

TEST(EinsumTest, BatchedMatMulFormsMatchReference) {
  const Tensor a = Random({3, 5, 7}, 1), b = Random({3, 7, 4}, 2);
  const Tensor want = BatchMatMul(a, b);
  auto eq = [](const char* e) { return Attrs{{"equation", std::string(e)}}; };
  EXPECT_TRUE(TensorsAllClose(Op("Einsum", {a, b}, eq("bij,bjk->bik"))[0], want, 1e-5, 1e-5));
  EXPECT_TRUE(TensorsAllClose(Op("Einsum", {a, b}, eq("...ij,...jk"))[0], want, 1e-5, 1e-5));
  // Transposed second operand: B given as [b, k, j].
  Tensor bt(DType::kFloat32, Shape{3, 4, 7});
  for (int x = 0; x < 3; ++x)
    for (int j = 0; j < 7; ++j)
      for (int k = 0; k < 4; ++k) bt.data<float>()[(x * 4 + k) * 7 + j] = b.data<float>()[(x * 7 + j) * 4 + k];
  EXPECT_TRUE(TensorsAllClose(Op("Einsum", {a, bt}, eq("bij,bkj->bik"))[0], want, 1e-5, 1e-5));
  // Output in another order: [k, b, i].
  auto out = Op("Einsum", {a, b}, eq("bij,bjk->kbi"));
  ASSERT_EQ(out[0].shape(), (Shape{4, 3, 5}));
  EXPECT_NEAR(out[0].data<float>()[(2 * 3 + 1) * 5 + 3], want.data<float>()[(1 * 5 + 3) * 4 + 2],
              1e-5);
  // Attention-style with a head axis and a permuted operand ("bhqd,bkhd->bhqk").
  const Tensor q = Random({2, 3, 4, 8}, 3), kt = Random({2, 5, 3, 8}, 4);
  out = Op("Einsum", {q, kt}, eq("bhqd,bkhd->bhqk"));
  ASSERT_EQ(out[0].shape(), (Shape{2, 3, 4, 5}));
  float expect = 0;
  for (int d = 0; d < 8; ++d) {
    expect += q.data<float>()[((1 * 3 + 2) * 4 + 3) * 8 + d] * kt.data<float>()[((1 * 5 + 4) * 3 + 2) * 8 + d];
  }
  EXPECT_NEAR(out[0].data<float>()[((1 * 3 + 2) * 4 + 3) * 5 + 4], expect, 1e-5);
}

TEST(EinsumTest, IntegerGemmAndBroadcastEllipsis) {
  const Tensor a = I32({1, 2, 3, 4}, {1, 2, 2}), b = I32({1, 0, 0, 1, 2, 0, 0, 2}, {2, 2, 2});
  auto out = Op("Einsum", {a, b}, {{"equation", std::string("...ij,...jk->...ik")}});
  EXPECT_TENSOR_EQ(out[0], I32({1, 2, 3, 4, 2, 4, 6, 8}, {2, 2, 2}));
}

TEST(EinsumTest, GeneralPathForms) {
  const Tensor m = F({1, 2, 3, 4}, {2, 2});
  auto eq = [](const char* e) { return Attrs{{"equation", std::string(e)}}; };
  EXPECT_TENSOR_EQ(Op("Einsum", {m}, eq("ij->ji"))[0], F({1, 3, 2, 4}, {2, 2}));
  EXPECT_TENSOR_EQ(Op("Einsum", {m}, eq("ii->i"))[0], F({1, 4}, {2}));
  EXPECT_TENSOR_EQ(Op("Einsum", {m}, eq("ii"))[0], Tensor::Scalar<float>(5));
  EXPECT_TENSOR_EQ(Op("Einsum", {m}, eq("ij->i"))[0], F({3, 7}, {2}));
  EXPECT_TENSOR_EQ(Op("Einsum", {m}, eq("ij->"))[0], Tensor::Scalar<float>(10));
  EXPECT_TENSOR_EQ(Op("Einsum", {F({1, 2}, {2}), F({3, 4, 5}, {3})}, eq("i,j->ij"))[0],
                   F({3, 4, 5, 6, 8, 10}, {2, 3}));
  EXPECT_TENSOR_EQ(Op("Einsum", {F({1, 2}, {2}), F({3, 4}, {2}), F({2, 2}, {2})}, eq("i,i,i->"))[0],
                   Tensor::Scalar<float>(22));
  // Summing a label within one operand before contracting.
  EXPECT_TENSOR_EQ(Op("Einsum", {m, F({1, 1}, {2})}, eq("ij,k->i"))[0], F({6, 14}, {2}));
  EXPECT_FALSE(RunKernel("Einsum", {m}, eq("ijk->i")).ok());
  EXPECT_FALSE(RunKernel("Einsum", {m, m}, eq("ij,jk->iz")).ok());
}

}  // namespace
}  // namespace kiln::kernels::tensor_test
