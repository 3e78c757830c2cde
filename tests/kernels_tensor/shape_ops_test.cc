// Known answers for Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout,
// ConstantOfShape, Fill, Range, EyeLike, Expand, BroadcastTo, Tile.
#include "test_util.h"

namespace kiln::kernels::tensor_test {
namespace {

TEST(ShapeOpsTest, ShapeWithStartEnd) {
  Tensor x(DType::kString, Shape{2, 3, 4});
  EXPECT_TENSOR_EQ(Op("Shape", {x})[0], I64({2, 3, 4}));
  EXPECT_TENSOR_EQ(Op("Shape", {x}, {{"start", int64_t{-2}}})[0], I64({3, 4}));
  EXPECT_TENSOR_EQ(Op("Shape", {x}, {{"start", int64_t{1}}, {"end", int64_t{-1}}})[0], I64({3}));
  EXPECT_TENSOR_EQ(Op("Shape", {x}, {{"start", int64_t{5}}})[0], I64({}));
}

TEST(ShapeOpsTest, SizeCountsElementsOfEmptyTensors) {
  EXPECT_TENSOR_EQ(Op("Size", {Iota({2, 0, 3})})[0], Tensor::Scalar<int64_t>(0));
  EXPECT_TENSOR_EQ(Op("Size", {Iota({2, 5})})[0], Tensor::Scalar<int64_t>(10));
}

TEST(ShapeOpsTest, ReshapeInfersAndCopiesDims) {
  const Tensor x = Iota({2, 3, 4});
  for (bool constant : {true, false}) {
    KernelTestOptions opts;
    if (constant) opts.constant_inputs = {1};
    auto out = Op("Reshape", {x, I64({0, -1})}, {}, opts);
    EXPECT_TENSOR_EQ(out[0], Iota({2, 12}));
    out = Op("Reshape", {x, I64({-1, 2, 2})}, {}, opts);
    EXPECT_TENSOR_EQ(out[0], Iota({6, 2, 2}));
  }
}

TEST(ShapeOpsTest, ReshapeAllowZeroMeansEmptyDim) {
  auto out = Op("Reshape", {Iota({0, 3}), I64({3, 0})}, {{"allowzero", int64_t{1}}},
                 {.constant_inputs = {1}});
  EXPECT_EQ(out[0].shape(), (Shape{3, 0}));
}

TEST(ShapeOpsTest, ReshapeRejectsBadShapes) {
  auto bad = RunKernel("Reshape", {Iota({2, 3}), I64({4, -1})}, {}, {.constant_inputs = {1}});
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("cannot reshape [2, 3]"));
  EXPECT_FALSE(RunKernel("Reshape", {Iota({6}), I64({-1, -1})}, {}, {.constant_inputs = {1}}).ok());
  // The dynamic path reports the same problem at run time.
  EXPECT_FALSE(RunKernel("Reshape", {Iota({2, 3}), I64({4, -1})}).ok());
}

TEST(ShapeOpsTest, ReshapeStrings) {
  const Tensor s = S({"a", "bb", "ccc", "d"}, {4});
  EXPECT_TENSOR_EQ(Op("Reshape", {s, I64({2, 2})}, {}, {.constant_inputs = {1}})[0],
                   S({"a", "bb", "ccc", "d"}, {2, 2}));
}

TEST(ShapeOpsTest, FlattenNegativeAxis) {
  EXPECT_TENSOR_EQ(Op("Flatten", {Iota({2, 3, 4})}, {{"axis", int64_t{-1}}})[0], Iota({6, 4}));
  EXPECT_TENSOR_EQ(Op("Flatten", {Iota({2, 3, 4})}, {{"axis", int64_t{0}}})[0], Iota({1, 24}));
}

TEST(ShapeOpsTest, SqueezeAndUnsqueeze) {
  const Tensor x = Iota({1, 3, 1, 2});
  EXPECT_TENSOR_EQ(Op("Squeeze", {x})[0], Iota({3, 2}));
  EXPECT_TENSOR_EQ(Op("Squeeze", {x, I64({-2})}, {}, {.constant_inputs = {1}})[0],
                   Iota({1, 3, 2}));
  EXPECT_TENSOR_EQ(Op("Squeeze", {x, I64({0})})[0], Iota({3, 1, 2}));  // dynamic axes
  EXPECT_FALSE(RunKernel("Squeeze", {x, I64({1})}, {}, {.constant_inputs = {1}}).ok());
  EXPECT_TENSOR_EQ(Op("Unsqueeze", {Iota({3, 2}), I64({0, -1})}, {}, {.constant_inputs = {1}})[0],
                   Iota({1, 3, 2, 1}));
  EXPECT_TENSOR_EQ(Op("Unsqueeze", {Tensor::Scalar<float>(0), I64({0})}, {},
                       {.constant_inputs = {1}})[0],
                   Iota({1}));
}

TEST(ShapeOpsTest, IdentityAndDropout) {
  const Tensor s = S({"x", "y"}, {2});
  EXPECT_TENSOR_EQ(Op("Identity", {s})[0], s);
  auto out = Op("Dropout", {Iota({2, 2})}, {}, {.num_outputs = 2});
  EXPECT_TENSOR_EQ(out[0], Iota({2, 2}));
  EXPECT_TENSOR_EQ(out[1], T1<bool>({true, true, true, true}, {2, 2}));
}

TEST(ShapeOpsTest, ConstantOfShapeAndFill) {
  EXPECT_TENSOR_EQ(Op("ConstantOfShape", {I64({2, 2})}, {}, {.constant_inputs = {0}})[0],
                   F({0, 0, 0, 0}, {2, 2}));
  EXPECT_TENSOR_EQ(Op("ConstantOfShape", {I64({3})},
                       {{"value", Tensor::FromVector<int32_t>({7})}})[0],
                   I32({7, 7, 7}, {3}));
  EXPECT_TENSOR_EQ(Op("ConstantOfShape", {I64({0})})[0], F({}, {0}));
  EXPECT_TENSOR_EQ(Op("Fill", {I32({2, 1}, {2}), Tensor::Scalar<std::string>("hi")}, {},
                       {.domain = "kiln"})[0],
                   S({"hi", "hi"}, {2, 1}));
}

TEST(ShapeOpsTest, RangeIntAndFloat) {
  auto r = Op("Range", {Tensor::Scalar<int32_t>(10), Tensor::Scalar<int32_t>(1),
                         Tensor::Scalar<int32_t>(-3)});
  EXPECT_TENSOR_EQ(r[0], I32({10, 7, 4}, {3}));
  r = Op("Range", {Tensor::Scalar<float>(0), Tensor::Scalar<float>(1),
                    Tensor::Scalar<float>(0.25f)},
          {}, {.constant_inputs = {0, 1, 2}});
  EXPECT_TENSOR_EQ(r[0], F({0, 0.25f, 0.5f, 0.75f}, {4}));
  r = Op("Range", {Tensor::Scalar<int64_t>(5), Tensor::Scalar<int64_t>(1),
                    Tensor::Scalar<int64_t>(2)});
  EXPECT_EQ(r[0].shape(), (Shape{0}));
  EXPECT_FALSE(RunKernel("Range", {Tensor::Scalar<int64_t>(0), Tensor::Scalar<int64_t>(1),
                                   Tensor::Scalar<int64_t>(0)})
                   .ok());
}

TEST(ShapeOpsTest, EyeLikeWithOffsetAndDtype) {
  auto out = Op("EyeLike", {Iota({2, 3})}, {{"k", int64_t{1}}, {"dtype", int64_t{7}}});
  EXPECT_TENSOR_EQ(out[0], I64({0, 1, 0, 0, 0, 1}, {2, 3}));
}

TEST(ShapeOpsTest, ExpandBroadcastsBothWays) {
  const Tensor x = F({1, 2, 3}, {3, 1});
  EXPECT_TENSOR_EQ(Op("Expand", {x, I64({2, 1, 2})}, {}, {.constant_inputs = {1}})[0],
                   F({1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}, {2, 3, 2}));
  // Target smaller than the input: ONNX keeps the input's dims.
  EXPECT_TENSOR_EQ(Op("Expand", {x, I64({1})})[0], x);
  EXPECT_FALSE(RunKernel("Expand", {x, I64({2, 2})}, {}, {.constant_inputs = {1}}).ok());
}

TEST(ShapeOpsTest, BroadcastToIsUnidirectional) {
  const Tensor x = S({"a", "b"}, {1, 2});
  EXPECT_TENSOR_EQ(Op("BroadcastTo", {x, I64({2, 2})}, {}, {.domain = "kiln"})[0],
                   S({"a", "b", "a", "b"}, {2, 2}));
  EXPECT_FALSE(
      RunKernel("BroadcastTo", {F({1, 2, 3}, {3}), I64({1})}, {}, {.domain = "kiln"}).ok());
}

TEST(ShapeOpsTest, TileRepeatsEveryAxis) {
  const Tensor x = F({1, 2, 3, 4}, {2, 2});
  EXPECT_TENSOR_EQ(Op("Tile", {x, I64({1, 2})}, {}, {.constant_inputs = {1}})[0],
                   F({1, 2, 1, 2, 3, 4, 3, 4}, {2, 4}));
  EXPECT_TENSOR_EQ(Op("Tile", {x, I64({2, 1})})[0], F({1, 2, 3, 4, 1, 2, 3, 4}, {4, 2}));
  EXPECT_EQ(Op("Tile", {x, I64({0, 1})})[0].shape(), (Shape{0, 2}));
}

TEST(ShapeOpsTest, LargeTileRunsInParallel) {
  const Tensor x = Iota({64, 33});
  auto out = Op("Tile", {x, I64({3, 5})}, {}, {.constant_inputs = {1}, .intra_op_threads = 3});
  ASSERT_EQ(out[0].shape(), (Shape{192, 165}));
  const float* o = out[0].data<float>();
  for (int64_t i = 0; i < 192; ++i) {
    for (int64_t j = 0; j < 165; ++j) ASSERT_EQ(o[i * 165 + j], (i % 64) * 33 + j % 33);
  }
}

}  // namespace
}  // namespace kiln::kernels::tensor_test
