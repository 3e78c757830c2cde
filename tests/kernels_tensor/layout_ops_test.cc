// Known answers for Transpose, Slice, StridedSlice, Concat, Split, DepthToSpace, SpaceToDepth.
#include "test_util.h"

namespace kiln::kernels::tensor_test {
namespace {

// Reference transpose by coordinates.
Tensor NaiveTranspose(const Tensor& x, const std::vector<int64_t>& perm) {
  Shape out_shape;
  for (int64_t p : perm) out_shape.push_back(x.dim(static_cast<int>(p)));
  Tensor out(DType::kFloat32, out_shape);
  const int rank = x.rank();
  std::vector<int64_t> in_strides(rank, 1);
  for (int i = rank - 2; i >= 0; --i) in_strides[i] = in_strides[i + 1] * x.dim(i + 1);
  std::vector<int64_t> c(rank, 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += c[d] * in_strides[perm[d]];
    out.data<float>()[i] = x.data<float>()[off];
    for (int d = rank - 1; d >= 0; --d) {
      if (++c[d] < out_shape.dim(d)) break;
      c[d] = 0;
    }
  }
  return out;
}

TEST(LayoutOpsTest, Transpose2DDefaultPerm) {
  EXPECT_TENSOR_EQ(Op("Transpose", {F({1, 2, 3, 4, 5, 6}, {2, 3})})[0],
                   F({1, 4, 2, 5, 3, 6}, {3, 2}));
}

TEST(LayoutOpsTest, TransposeMatchesReferenceOnBlockedAndGeneralPaths) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{67, 131}, {1, 0}},               // 2-D, tiles with ragged edges
      {{2, 35, 9, 17}, {0, 2, 3, 1}},    // NCHW -> NHWC
      {{2, 9, 17, 35}, {0, 3, 1, 2}},    // NHWC -> NCHW
      {{3, 4, 5, 6}, {2, 0, 3, 1}},      // arbitrary
      {{4, 1, 5}, {2, 1, 0}},            // unit dim
      {{5, 6, 7}, {0, 1, 2}},            // identity
  };
  for (const auto& [shape, perm] : cases) {
    const Tensor x = Iota(shape);
    for (int threads : {1, 3}) {
      auto out = Op("Transpose", {x}, {{"perm", perm}}, {.intra_op_threads = threads});
      EXPECT_TENSOR_EQ(out[0], NaiveTranspose(x, perm)) << shape.ToString();
    }
  }
}

TEST(LayoutOpsTest, TransposeStringsAndRejectsBadPerm) {
  EXPECT_TENSOR_EQ(Op("Transpose", {S({"a", "b", "c", "d"}, {2, 2})})[0],
                   S({"a", "c", "b", "d"}, {2, 2}));
  EXPECT_FALSE(RunKernel("Transpose", {Iota({2, 2})}, {{"perm", std::vector<int64_t>{0, 0}}}).ok());
}

TEST(LayoutOpsTest, SliceNegativeStepsAndClamping) {
  const Tensor x = Iota({3, 4});
  // Rows 0..1, columns from the end backwards with step -2.
  auto out = Op("Slice", {x, I64({0, -1}), I64({2, -1000}), I64({0, 1}), I64({1, -2})}, {},
                {.constant_inputs = {1, 2, 3, 4}});
  EXPECT_TENSOR_EQ(out[0], F({3, 1, 7, 5}, {2, 2}));
  // Ends past the dim clamp; omitted axes and steps default; dynamic parameters.
  out = Op("Slice", {x, I64({1}), I64({INT64_MAX})});
  EXPECT_TENSOR_EQ(out[0], F({4, 5, 6, 7, 8, 9, 10, 11}, {2, 4}));
  // An empty result.
  out = Op("Slice", {x, I64({2}), I64({1}), I64({-1})}, {}, {.constant_inputs = {1, 2, 3}});
  EXPECT_EQ(out[0].shape(), (Shape{3, 0}));
  EXPECT_FALSE(RunKernel("Slice", {x, I64({0}), I64({1}), I64({0}), I64({0})}).ok());
}

TEST(LayoutOpsTest, SliceStrings) {
  auto out = Op("Slice", {S({"a", "b", "c", "d"}, {4}), I64({3}), I64({0}), I64({0}), I64({-2})});
  EXPECT_TENSOR_EQ(out[0], S({"d", "b"}, {2}));
}

std::map<std::string, ir::Attribute> Masks(int64_t b, int64_t e, int64_t ell, int64_t na,
                                          int64_t sh) {
  return {{"begin_mask", b}, {"end_mask", e}, {"ellipsis_mask", ell}, {"new_axis_mask", na},
          {"shrink_axis_mask", sh}};
}

TEST(LayoutOpsTest, StridedSliceMasks) {
  const Tensor x = Iota({2, 3, 4});
  const KernelTestOptions kiln{.domain = "kiln", .constant_inputs = {1, 2, 3}};
  // x[1, :, ::-2] -> shrink axis 0, full axis 1 via masks, reverse axis 2.
  auto out = Op("StridedSlice", {x, I64({1, 0, -1}), I64({0, 0, 0}), I64({1, 1, -2})},
                Masks(0b110, 0b110, 0, 0, 0b001), kiln);
  EXPECT_TENSOR_EQ(out[0], F({15, 13, 19, 17, 23, 21}, {3, 2}));
  // x[..., 1] with an ellipsis and shrink on the last axis.
  out = Op("StridedSlice", {x, I64({0, 1}), I64({0, 2}), I64({1, 1})},
           Masks(0, 0, 0b01, 0, 0b10), kiln);
  EXPECT_TENSOR_EQ(out[0], F({1, 5, 9, 13, 17, 21}, {2, 3}));
  // x[:, tf.newaxis, 1:3] (implicit ellipsis at the end keeps axis 2).
  out = Op("StridedSlice", {x, I64({0, 0, 1}), I64({0, 0, 3}), I64({1, 1, 1})},
           Masks(0b001, 0b001, 0, 0b010, 0), kiln);
  EXPECT_EQ(out[0].shape(), (Shape{2, 1, 2, 4}));
  EXPECT_EQ(out[0].data<float>()[0], 4);
  EXPECT_EQ(out[0].data<float>()[8], 16);
  // Shrinking past the end is an error, as in TensorFlow.
  EXPECT_FALSE(RunKernel("StridedSlice", {x, I64({5}), I64({6}), I64({1})},
                         Masks(0, 0, 0, 0, 1), kiln)
                   .ok());
}

TEST(LayoutOpsTest, ConcatNegativeAxisEmptyAndStrings) {
  auto out = Op("Concat", {F({1, 2}, {2, 1}), F({}, {2, 0}), F({3, 4, 5, 6}, {2, 2})},
                {{"axis", int64_t{-1}}});
  EXPECT_TENSOR_EQ(out[0], F({1, 3, 4, 2, 5, 6}, {2, 3}));
  out = Op("Concat", {S({"a"}, {1}), S({"b", "c"}, {2})}, {{"axis", int64_t{0}}});
  EXPECT_TENSOR_EQ(out[0], S({"a", "b", "c"}, {3}));
  EXPECT_FALSE(
      RunKernel("Concat", {F({1, 2}, {2, 1}), F({1, 2}, {1, 2})}, {{"axis", int64_t{1}}}).ok());
}

TEST(LayoutOpsTest, ConcatLargeParallel) {
  const Tensor a = Iota({64, 300}), b = Iota({64, 200});
  auto out = Op("Concat", {a, b}, {{"axis", int64_t{1}}}, {.intra_op_threads = 4});
  ASSERT_EQ(out[0].shape(), (Shape{64, 500}));
  EXPECT_EQ(out[0].data<float>()[63 * 500 + 299], 63 * 300 + 299);
  EXPECT_EQ(out[0].data<float>()[63 * 500 + 300], 63 * 200);
}

TEST(LayoutOpsTest, SplitWithLengthsAndEvenly) {
  const Tensor x = Iota({2, 5});
  auto out = Op("Split", {x, I64({2, 3})}, {{"axis", int64_t{-1}}},
                {.num_outputs = 2, .constant_inputs = {1}});
  EXPECT_TENSOR_EQ(out[0], F({0, 1, 5, 6}, {2, 2}));
  EXPECT_TENSOR_EQ(out[1], F({2, 3, 4, 7, 8, 9}, {2, 3}));
  // Uneven split without lengths: the last part is smaller.
  out = Op("Split", {x}, {{"axis", int64_t{1}}, {"num_outputs", int64_t{2}}}, {.num_outputs = 2});
  EXPECT_TENSOR_EQ(out[0], F({0, 1, 2, 5, 6, 7}, {2, 3}));
  EXPECT_TENSOR_EQ(out[1], F({3, 4, 8, 9}, {2, 2}));
  // Dynamic lengths.
  out = Op("Split", {x, I64({1, 1})}, {{"axis", int64_t{0}}}, {.num_outputs = 2});
  EXPECT_TENSOR_EQ(out[1], F({5, 6, 7, 8, 9}, {1, 5}));
  // TensorFlow's SplitV: one -1 takes the rest.
  out = Op("Split", {x, I64({-1, 1})}, {{"axis", int64_t{1}}},
           {.num_outputs = 2, .constant_inputs = {1}});
  EXPECT_TENSOR_EQ(out[0], F({0, 1, 2, 3, 5, 6, 7, 8}, {2, 4}));
  EXPECT_FALSE(RunKernel("Split", {x, I64({1, 1})}, {{"axis", int64_t{1}}},
                         {.num_outputs = 2, .constant_inputs = {1}})
                   .ok());
}

TEST(LayoutOpsTest, DepthToSpaceModesAndInverse) {
  const Tensor x = Iota({1, 8, 2, 3});
  auto dcr = Op("DepthToSpace", {x}, {{"blocksize", int64_t{2}}});
  ASSERT_EQ(dcr[0].shape(), (Shape{1, 2, 4, 6}));
  // DCR: out[0, c, h*2+i, w*2+j] = x[0, (i*2+j)*2 + c, h, w].
  EXPECT_EQ(dcr[0].data<float>()[1 * 24 + 1 * 6 + 1], ((1 * 2 + 1) * 2 + 1) * 6 + 0);
  EXPECT_EQ(dcr[0].data<float>()[0 * 24 + 3 * 6 + 5], ((1 * 2 + 1) * 2 + 0) * 6 + 1 * 3 + 2);
  auto crd = Op("DepthToSpace", {x}, {{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}});
  // CRD: out[0, c, h*2+i, w*2+j] = x[0, c*4 + i*2 + j, h, w].
  EXPECT_EQ(crd[0].data<float>()[1 * 24 + 3 * 6 + 4], (1 * 4 + 1 * 2 + 0) * 6 + 1 * 3 + 2);
  // SpaceToDepth inverts DCR DepthToSpace.
  auto back = Op("SpaceToDepth", {dcr[0]}, {{"blocksize", int64_t{2}}});
  EXPECT_TENSOR_EQ(back[0], x);
  EXPECT_FALSE(RunKernel("SpaceToDepth", {Iota({1, 1, 3, 3})}, {{"blocksize", int64_t{2}}}).ok());
}

}  // namespace
}  // namespace kiln::kernels::tensor_test
