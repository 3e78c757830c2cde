// Known answers for Pad, MirrorPad, Trilu, ReverseSequence, Bucketize.
#include "test_util.h"

namespace kiln::kernels::tensor_test {
namespace {

TEST(MiscOpsTest, PadConstantWithValueAndNegativePads) {
  const Tensor x = F({1, 2, 3, 4}, {2, 2});
  auto out = Op("Pad", {x, I64({0, 1, 1, 0}), Tensor::Scalar<float>(9)}, {},
                {.constant_inputs = {1}});
  EXPECT_TENSOR_EQ(out[0], F({9, 1, 2, 9, 3, 4, 9, 9, 9}, {3, 3}));
  // Crop one column, add one row at the top.
  out = Op("Pad", {x, I64({1, -1, 0, 0})});
  EXPECT_TENSOR_EQ(out[0], F({0, 2, 4}, {3, 1}));
}

TEST(MiscOpsTest, PadModes) {
  const Tensor x = F({1, 2, 3}, {1, 3});
  auto pad = [&](const std::string& mode, std::vector<int64_t> pads) {
    return Op("Pad", {x, I64(pads)}, {{"mode", mode}}, {.constant_inputs = {1}})[0];
  };
  EXPECT_TENSOR_EQ(pad("reflect", {0, 2, 0, 2}), F({3, 2, 1, 2, 3, 2, 1}, {1, 7}));
  EXPECT_TENSOR_EQ(pad("edge", {0, 2, 0, 1}), F({1, 1, 1, 2, 3, 3}, {1, 6}));
  EXPECT_TENSOR_EQ(pad("wrap", {0, 2, 0, 4}), F({2, 3, 1, 2, 3, 1, 2, 3, 1}, {1, 9}));
  EXPECT_TENSOR_EQ(pad("edge", {1, 0, 1, 0}), F({1, 2, 3, 1, 2, 3, 1, 2, 3}, {3, 3}));
}

TEST(MiscOpsTest, PadAxesInputAndStrings) {
  const Tensor s = S({"a", "b"}, {1, 2});
  auto out = Op("Pad", {s, I64({1, 1}), Tensor(), I64({-1})}, {}, {.constant_inputs = {1, 3}});
  EXPECT_TENSOR_EQ(out[0], S({"", "a", "b", ""}, {1, 4}));
  out = Op("Pad", {s, I64({1, 0}), S({"z"}, {}), I64({0})});
  EXPECT_TENSOR_EQ(out[0], S({"z", "z", "a", "b"}, {2, 2}));
}

TEST(MiscOpsTest, MirrorPadReflectAndSymmetric) {
  const Tensor x = F({1, 2, 3}, {3});
  const KernelTestOptions kiln{.domain = "kiln", .constant_inputs = {1}};
  EXPECT_TENSOR_EQ(Op("MirrorPad", {x, I32({2, 1}, {1, 2})}, {{"mode", std::string("REFLECT")}},
                      kiln)[0],
                   F({3, 2, 1, 2, 3, 2}, {6}));
  EXPECT_TENSOR_EQ(Op("MirrorPad", {x, I32({3, 1}, {1, 2})}, {{"mode", std::string("SYMMETRIC")}},
                      kiln)[0],
                   F({3, 2, 1, 1, 2, 3, 3}, {7}));
  EXPECT_FALSE(RunKernel("MirrorPad", {x, I32({3, 0}, {1, 2})}, {{"mode", std::string("REFLECT")}},
                         kiln)
                   .ok());
}

TEST(MiscOpsTest, TriluUpperLowerWithK) {
  const Tensor x = Iota({2, 3, 3});
  auto out = Op("Trilu", {x});
  EXPECT_EQ(Values<float>(out[0]),
            (std::vector<float>{0, 1, 2, 0, 4, 5, 0, 0, 8, 9, 10, 11, 0, 13, 14, 0, 0, 17}));
  out = Op("Trilu", {Iota({3, 3}), Tensor::Scalar<int64_t>(-1)}, {{"upper", int64_t{0}}});
  EXPECT_TENSOR_EQ(out[0], F({0, 0, 0, 3, 0, 0, 6, 7, 0}, {3, 3}));
  out = Op("Trilu", {S({"a", "b", "c", "d"}, {2, 2})}, {{"upper", int64_t{0}}});
  EXPECT_TENSOR_EQ(out[0], S({"a", "", "c", "d"}, {2, 2}));
}

TEST(MiscOpsTest, ReverseSequence) {
  // [time=4, batch=2]
  const Tensor x = F({0, 10, 1, 11, 2, 12, 3, 13}, {4, 2});
  auto out = Op("ReverseSequence", {x, I64({3, 4})});
  EXPECT_TENSOR_EQ(out[0], F({2, 13, 1, 12, 0, 11, 3, 10}, {4, 2}));
  out = Op("ReverseSequence", {Iota({2, 3}), I64({2, 0})},
           {{"batch_axis", int64_t{0}}, {"time_axis", int64_t{1}}});
  EXPECT_TENSOR_EQ(out[0], F({1, 0, 2, 3, 4, 5}, {2, 3}));
  EXPECT_FALSE(RunKernel("ReverseSequence", {x, I64({5, 1})}).ok());
}

TEST(MiscOpsTest, Bucketize) {
  auto out = Op("Bucketize", {I32({-5, 10000, 150, 10, 5, 100}, {2, 3})},
                {{"boundaries", std::vector<float>{0, 10, 100}}}, {.domain = "kiln"});
  EXPECT_TENSOR_EQ(out[0], I32({0, 3, 3, 2, 1, 3}, {2, 3}));
}

}  // namespace
}  // namespace kiln::kernels::tensor_test
