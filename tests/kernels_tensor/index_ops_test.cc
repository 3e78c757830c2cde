// Known answers for Gather, GatherV2, GatherElements, GatherND, ScatterND, ScatterElements,
// Compress, OneHot, NonZero, TopK, Unique.
#include "test_util.h"

namespace kiln::kernels::tensor_test {
namespace {

TEST(IndexOpsTest, GatherNegativeIndicesAndAxis) {
  const Tensor x = F({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_TENSOR_EQ(Op("Gather", {x, I64({-1, 0}, {2})})[0], F({5, 6, 1, 2}, {2, 2}));
  EXPECT_TENSOR_EQ(Op("Gather", {x, I32({1}, {1, 1})}, {{"axis", int64_t{-1}}})[0],
                   F({2, 4, 6}, {3, 1, 1}));
  // Scalar index drops the axis.
  EXPECT_TENSOR_EQ(Op("Gather", {x, Tensor::Scalar<int64_t>(1)})[0], F({3, 4}, {2}));
  EXPECT_FALSE(RunKernel("Gather", {x, I64({3}, {1})}).ok());
  EXPECT_EQ(Op("Gather", {x, I64({}, {0})})[0].shape(), (Shape{0, 2}));
}

TEST(IndexOpsTest, GatherStringsLargeParallel) {
  EXPECT_TENSOR_EQ(Op("Gather", {S({"a", "b", "c"}, {3}), I64({2, 2, 0}, {3})})[0],
                   S({"c", "c", "a"}, {3}));
  const Tensor table = Iota({1000, 64});
  std::vector<int64_t> idx;
  for (int i = 0; i < 2000; ++i) idx.push_back((i * 37) % 1000);
  auto out = Op("Gather", {table, I64(idx, {2000})}, {}, {.intra_op_threads = 4});
  for (int i = 0; i < 2000; i += 97) {
    EXPECT_EQ(out[0].data<float>()[i * 64 + 5], idx[i] * 64 + 5);
  }
}

TEST(IndexOpsTest, GatherV2BatchDims) {
  // params [2, 3], indices [2, 2], batch_dims 1, axis 1 -> [2, 2].
  const Tensor params = F({1, 2, 3, 4, 5, 6}, {2, 3});
  auto out = Op("GatherV2", {params, I32({2, 0, 1, 1}, {2, 2}), Tensor::Scalar<int32_t>(1)},
                {{"batch_dims", int64_t{1}}}, {.domain = "kiln", .constant_inputs = {2}});
  EXPECT_TENSOR_EQ(out[0], F({3, 1, 5, 5}, {2, 2}));
  // TensorFlow rejects negative indices.
  EXPECT_FALSE(RunKernel("GatherV2", {params, I32({-1}, {1}), Tensor::Scalar<int32_t>(0)}, {},
                         {.domain = "kiln", .constant_inputs = {2}})
                   .ok());
}

TEST(IndexOpsTest, GatherElements) {
  const Tensor x = F({1, 2, 3, 4}, {2, 2});
  EXPECT_TENSOR_EQ(Op("GatherElements", {x, I64({0, 0, 1, 0}, {2, 2})}, {{"axis", int64_t{1}}})[0],
                   F({1, 1, 4, 3}, {2, 2}));
  EXPECT_TENSOR_EQ(Op("GatherElements", {x, I64({-1, 0}, {1, 2})})[0], F({3, 2}, {1, 2}));
}

TEST(IndexOpsTest, GatherNDWithBatchDims) {
  const Tensor x = F({0, 1, 2, 3}, {2, 2});
  EXPECT_TENSOR_EQ(Op("GatherND", {x, I64({0, 0, 1, 1}, {2, 2})})[0], F({0, 3}, {2}));
  EXPECT_TENSOR_EQ(Op("GatherND", {x, I64({1, 0}, {2, 1})})[0], F({2, 3, 0, 1}, {2, 2}));
  const Tensor y = Iota({2, 2, 2});
  EXPECT_TENSOR_EQ(Op("GatherND", {y, I64({1, 0}, {2, 1})}, {{"batch_dims", int64_t{1}}})[0],
                   F({2, 3, 4, 5}, {2, 2}));
}

TEST(IndexOpsTest, ScatterNDReductions) {
  const Tensor data = F({1, 2, 3, 4}, {4});
  const Tensor idx = I64({1, 3, 1}, {3, 1});
  const Tensor upd = F({10, 20, 30}, {3});
  EXPECT_TENSOR_EQ(Op("ScatterND", {data, I64({1, 3}, {2, 1}), F({10, 20}, {2})})[0],
                   F({1, 10, 3, 20}, {4}));
  EXPECT_TENSOR_EQ(Op("ScatterND", {data, idx, upd}, {{"reduction", std::string("add")}})[0],
                   F({1, 42, 3, 24}, {4}));
  EXPECT_TENSOR_EQ(Op("ScatterND", {data, idx, upd}, {{"reduction", std::string("mul")}})[0],
                   F({1, 600, 3, 80}, {4}));
  EXPECT_TENSOR_EQ(Op("ScatterND", {data, idx, upd}, {{"reduction", std::string("min")}})[0],
                   F({1, 2, 3, 4}, {4}));
  // Slices: rows of a matrix.
  EXPECT_TENSOR_EQ(Op("ScatterND", {Iota({2, 2}), I64({1}, {1, 1}), F({7, 8}, {1, 2})})[0],
                   F({0, 1, 7, 8}, {2, 2}));
  EXPECT_TENSOR_EQ(Op("ScatterND", {S({"a", "b"}, {2}), I64({0}, {1, 1}), S({"z"}, {1})})[0],
                   S({"z", "b"}, {2}));
  EXPECT_FALSE(RunKernel("ScatterND", {data, I64({4}, {1, 1}), F({1}, {1})}).ok());
}

TEST(IndexOpsTest, ScatterElements) {
  const Tensor data = Tensor::Zeros(DType::kFloat32, Shape{3, 3});
  auto out = Op("ScatterElements", {data, I64({1, 0, 2, 0, 2, 1}, {2, 3}),
                                    F({1, 1.1f, 1.2f, 2, 2.1f, 2.2f}, {2, 3})});
  EXPECT_TENSOR_EQ(out[0], F({2, 1.1f, 0, 1, 0, 2.2f, 0, 2.1f, 1.2f}, {3, 3}));
  out = Op("ScatterElements", {F({1, 2, 3, 4, 5}, {1, 5}), I64({1, -2}, {1, 2}), F({1.5f, 2}, {1, 2})},
           {{"axis", int64_t{1}}, {"reduction", std::string("add")}});
  EXPECT_TENSOR_EQ(out[0], F({1, 3.5f, 3, 6, 5}, {1, 5}));
}

TEST(IndexOpsTest, CompressWithAndWithoutAxis) {
  const Tensor x = F({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_TENSOR_EQ(Op("Compress", {x, T1<bool>({false, true}, {2})}, {{"axis", int64_t{0}}})[0],
                   F({3, 4}, {1, 2}));
  EXPECT_TENSOR_EQ(Op("Compress", {Iota({2, 3}), T1<bool>({true, false, true}, {3})},
                      {{"axis", int64_t{-1}}})[0],
                   F({0, 2, 3, 5}, {2, 2}));
  EXPECT_TENSOR_EQ(Op("Compress", {x, T1<bool>({false, true, false, false, true}, {5})})[0],
                   F({2, 5}, {2}));
  EXPECT_FALSE(RunKernel("Compress", {x, T1<bool>({true, false, true}, {3})},
                         {{"axis", int64_t{1}}})
                   .ok());
}

TEST(IndexOpsTest, OneHotAxisAndNegativeIndices) {
  const Tensor values = F({0, 5}, {2});
  auto out = Op("OneHot", {I64({1, -1, 7}, {3}), Tensor::Scalar<int64_t>(3), values}, {},
                {.constant_inputs = {1}});
  EXPECT_TENSOR_EQ(out[0], F({0, 5, 0, 0, 0, 5, 0, 0, 0}, {3, 3}));
  out = Op("OneHot", {I64({0, 2}, {2}), Tensor::Scalar<float>(3), values}, {{"axis", int64_t{0}}});
  EXPECT_TENSOR_EQ(out[0], F({5, 0, 0, 0, 0, 5}, {3, 2}));
}

TEST(IndexOpsTest, NonZero) {
  auto out = Op("NonZero", {F({1, 0, 0, 2, 0, 3}, {2, 3})});
  EXPECT_TENSOR_EQ(out[0], I64({0, 1, 1, 0, 0, 2}, {2, 3}));
  EXPECT_EQ(Op("NonZero", {F({0, 0}, {2})})[0].shape(), (Shape{1, 0}));
}

TEST(IndexOpsTest, TopKStableTiesLargestAndSmallest) {
  const Tensor x = F({3, 1, 3, 2, 5, 1}, {2, 3});
  auto out = Op("TopK", {x, I64({2})}, {}, {.num_outputs = 2, .constant_inputs = {1}});
  EXPECT_TENSOR_EQ(out[0], F({3, 3, 5, 2}, {2, 2}));
  EXPECT_TENSOR_EQ(out[1], I64({0, 2, 1, 0}, {2, 2}));
  out = Op("TopK", {x, I64({1})}, {{"axis", int64_t{0}}, {"largest", int64_t{0}}},
           {.num_outputs = 2});
  EXPECT_TENSOR_EQ(out[0], F({2, 1, 1}, {1, 3}));
  EXPECT_TENSOR_EQ(out[1], I64({1, 0, 1}, {1, 3}));
  EXPECT_FALSE(
      RunKernel("TopK", {x, I64({4})}, {}, {.num_outputs = 2, .constant_inputs = {1}}).ok());
}

TEST(IndexOpsTest, UniqueSortedAndUnsorted) {
  const Tensor x = F({2, 1, 1, 3, 4, 3}, {6});
  auto out = Op("Unique", {x}, {}, {.num_outputs = 4});
  EXPECT_TENSOR_EQ(out[0], F({1, 2, 3, 4}, {4}));
  EXPECT_TENSOR_EQ(out[1], I64({1, 0, 3, 4}, {4}));
  EXPECT_TENSOR_EQ(out[2], I64({1, 0, 0, 2, 3, 2}, {6}));
  EXPECT_TENSOR_EQ(out[3], I64({2, 1, 2, 1}, {4}));
  out = Op("Unique", {x}, {{"sorted", int64_t{0}}}, {.num_outputs = 4});
  EXPECT_TENSOR_EQ(out[0], F({2, 1, 3, 4}, {4}));
  EXPECT_TENSOR_EQ(out[2], I64({0, 1, 1, 2, 3, 2}, {6}));
  // Rows along axis 0.
  out = Op("Unique", {F({1, 0, 1, 0, 0, 1}, {3, 2})}, {{"axis", int64_t{0}}}, {.num_outputs = 4});
  EXPECT_TENSOR_EQ(out[0], F({0, 1, 1, 0}, {2, 2}));
  EXPECT_TENSOR_EQ(out[3], I64({1, 2}, {2}));
  out = Op("Unique", {S({"b", "a", "b"}, {3})});
  EXPECT_TENSOR_EQ(out[0], S({"a", "b"}, {2}));
}

}  // namespace
}  // namespace kiln::kernels::tensor_test
