// Op-level tests: small GraphDefs built here, imported as frozen graphs and run through the
// plan compiler and kernels, checked against values TensorFlow computes (worked by hand).
#include <cctype>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "import/tf/converter.h"
#include "gtest/gtest.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/import/saved_model.h"
#include "tensorflow/core/example/example.pb.h"
#include "test_util.h"
#include "tf_graph_builder.h"

namespace kiln::import::tf {
namespace {

using testing::BoolAttr;
using testing::FloatAttr;
using testing::FloatsAttr;
using testing::FuncAttr;
using testing::GraphBuilder;
using testing::IntAttr;
using testing::IntsAttr;
using testing::StringAttr;
using testing::TypeAttr;

const auto kF = DType::kFloat32;

absl::StatusOr<std::vector<Tensor>> RunOps(GraphBuilder& b,
                                        const std::vector<std::pair<std::string, Tensor>>& feeds,
                                        const std::vector<std::string>& fetches) {
  static int counter = 0;
  const std::string path = testing::TempDir("op" + std::to_string(counter++)) + "/graph.pb";
  KILN_RETURN_IF_ERROR(testing::WriteGraphDef(path, b.graph()));
  FrozenGraphOptions options;
  std::vector<Tensor> inputs;
  for (const auto& [name, t] : feeds) {
    options.inputs.push_back(name);
    inputs.push_back(t);
  }
  options.outputs = fetches;
  KILN_ASSIGN_OR_RETURN(ImportedModel model, ImportFrozenGraph(path, options));
  return testing::RunSignature(model.signatures[0], inputs);
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

std::vector<float> F(const Tensor& t) { return Values<float>(t); }

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

Tensor Vec(std::vector<float> v, Shape s) { return Tensor::FromVector<float>(v, s); }
Tensor I32(std::vector<int32_t> v) { return Tensor::FromVector<int32_t>(v); }

TEST(TfOpsTest, MatMulBiasAddRelu6) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1, 2});
  b.Const("w", Vec({1, 2, 3, 4, 5, 6}, Shape{3, 2}));  // used transposed: [2,3]
  b.Const("bias", Vec({0, -10, 1}, Shape{3}));
  b.Op("MatMul", "mm", {"x", "w"}, {{"transpose_b", BoolAttr(true)}, {"T", TypeAttr(kF)}});
  b.Op("BiasAdd", "ba", {"mm", "bias"}, {{"T", TypeAttr(kF)}});
  b.Op("Relu6", "r6", {"ba"}, {{"T", TypeAttr(kF)}});
  auto out = RunOps(b, {{"x", Vec({1, 1, 0, 1}, Shape{2, 2})}}, {"ba", "r6"});
  ASSERT_TRUE(out.ok()) << out.status();
  // x @ w^T = [[3, 7, 11], [2, 4, 6]]; + bias = [[3, -3, 12], [2, -6, 7]]
  ExpectNear(F((*out)[0]), {3, -3, 12, 2, -6, 7});
  ExpectNear(F((*out)[1]), {3, 0, 6, 2, 0, 6});
}

TEST(TfOpsTest, ActivationsAndSoftmax) {
  GraphBuilder b;
  b.Placeholder("x", kF);
  for (const char* op : {"Sigmoid", "Tanh", "Elu", "Selu", "Softplus", "Softmax", "LogSoftmax",
                         "Neg", "Abs", "Square", "Floor", "Ceil", "Round", "Erf"}) {
    b.Op(op, op, {"x"}, {{"T", TypeAttr(kF)}});
  }
  b.Op("LeakyRelu", "LeakyRelu", {"x"}, {{"alpha", FloatAttr(0.1f)}});
  const std::vector<float> x = {-1.5f, 0.f, 2.5f};
  auto out = RunOps(b, {{"x", Vec(x, Shape{3})}},
                 {"Sigmoid", "Tanh", "Elu", "Selu", "Softplus", "Softmax", "LogSoftmax", "Neg",
                  "Abs", "Square", "Floor", "Ceil", "Round", "Erf", "LeakyRelu"});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<std::vector<float>> want(15);
  const float sum = std::exp(-1.5f) + 1.f + std::exp(2.5f);
  for (float v : x) {
    want[0].push_back(1.f / (1.f + std::exp(-v)));
    want[1].push_back(std::tanh(v));
    want[2].push_back(v > 0 ? v : std::exp(v) - 1.f);
    want[3].push_back(1.0507009873554805f * (v > 0 ? v : 1.6732632423543772f * (std::exp(v) - 1.f)));
    want[4].push_back(std::log1p(std::exp(v)));
    want[5].push_back(std::exp(v) / sum);
    want[6].push_back(v - std::log(sum));
    want[7].push_back(-v);
    want[8].push_back(std::fabs(v));
    want[9].push_back(v * v);
    want[10].push_back(std::floor(v));
    want[11].push_back(std::ceil(v));
    want[12].push_back(std::nearbyint(v));  // half to even: -1.5 -> -2, 2.5 -> 2
    want[13].push_back(std::erf(v));
    want[14].push_back(v > 0 ? v : 0.1f * v);
  }
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectNear(F((*out)[i]), want[i], 1e-5f);
  }
}

TEST(TfOpsTest, BinaryOpsWithTfSemantics) {
  GraphBuilder b;
  b.Placeholder("a", kF);
  b.Placeholder("b", kF);
  for (const char* op : {"AddV2", "Sub", "Mul", "RealDiv", "FloorDiv", "FloorMod", "Maximum",
                         "Minimum", "Pow", "SquaredDifference"}) {
    b.Op(op, op, {"a", "b"}, {{"T", TypeAttr(kF)}});
  }
  auto out = RunOps(b, {{"a", Vec({-7, 7, 2}, Shape{3})}, {"b", Vec({2, -2, 3}, Shape{3})}},
                 {"AddV2", "Sub", "Mul", "RealDiv", "FloorDiv", "FloorMod", "Maximum", "Minimum",
                  "Pow", "SquaredDifference"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {-5, 5, 5});
  ExpectNear(F((*out)[1]), {-9, 9, -1});
  ExpectNear(F((*out)[2]), {-14, -14, 6});
  ExpectNear(F((*out)[3]), {-3.5f, -3.5f, 2.f / 3});
  ExpectNear(F((*out)[4]), {-4, -4, 0});
  ExpectNear(F((*out)[5]), {1, -1, 2});  // sign of the divisor
  ExpectNear(F((*out)[6]), {2, 7, 3});
  ExpectNear(F((*out)[7]), {-7, -2, 2});
  ExpectNear(F((*out)[8]), {49, 1.f / 49, 8});
  ExpectNear(F((*out)[9]), {81, 81, 1});
}

TEST(TfOpsTest, ComparisonsLogicalSelect) {
  GraphBuilder b;
  b.Placeholder("a", kF);
  b.Placeholder("b", kF);
  b.Op("Greater", "gt", {"a", "b"});
  b.Op("LessEqual", "le", {"a", "b"});
  b.Op("NotEqual", "ne", {"a", "b"});
  b.Op("LogicalAnd", "and", {"gt", "ne"});
  b.Op("LogicalNot", "not", {"gt"});
  b.Op("SelectV2", "sel", {"gt", "a", "b"});
  b.Op("Cast", "cast", {"gt"}, {{"DstT", TypeAttr(kF)}, {"SrcT", TypeAttr(DType::kBool)}});
  auto out = RunOps(b, {{"a", Vec({1, 5, 3}, Shape{3})}, {"b", Vec({2, 4, 3}, Shape{3})}},
                 {"gt", "le", "ne", "and", "not", "sel", "cast"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<bool>((*out)[0]), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(Values<bool>((*out)[1]), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(Values<bool>((*out)[2]), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(Values<bool>((*out)[3]), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(Values<bool>((*out)[4]), (std::vector<bool>{true, false, true}));
  ExpectNear(F((*out)[5]), {2, 5, 3});
  ExpectNear(F((*out)[6]), {0, 1, 0});
}

TEST(TfOpsTest, V1SelectPicksRows) {
  GraphBuilder b;
  b.Placeholder("c", DType::kBool, {-1});
  b.Placeholder("t", kF, {-1, 2});
  b.Placeholder("e", kF, {-1, 2});
  b.Op("Select", "sel", {"c", "t", "e"});
  Tensor c(DType::kBool, Shape{2});
  c.data<bool>()[0] = true;
  c.data<bool>()[1] = false;
  auto out = RunOps(b, {{"c", c}, {"t", Vec({1, 2, 3, 4}, Shape{2, 2})},
                     {"e", Vec({5, 6, 7, 8}, Shape{2, 2})}},
                 {"sel"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {1, 2, 7, 8});
}

TEST(TfOpsTest, ReductionsAndArgMax) {
  GraphBuilder b;
  b.Placeholder("x", kF, {2, 3});
  b.Const("axis1", I32({1}));
  b.Const("axis0", Tensor::Scalar<int32_t>(0));
  b.Op("Mean", "mean", {"x", "axis1"}, {{"keep_dims", BoolAttr(true)}});
  b.Op("Sum", "sum", {"x", "axis0"});
  b.Op("Max", "max", {"x", "axis1"});
  b.Op("Min", "min", {"x", "axis1"});
  b.Op("Prod", "prod", {"x", "axis1"});
  b.Op("ArgMax", "argmax", {"x", "axis1"}, {{"output_type", TypeAttr(DType::kInt64)}});
  b.Op("ArgMin", "argmin", {"x", "axis0"}, {{"output_type", TypeAttr(DType::kInt32)}});
  auto out = RunOps(b, {{"x", Vec({1, 5, 3, -4, 2, 6}, Shape{2, 3})}},
                 {"mean", "sum", "max", "min", "prod", "argmax", "argmin"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 1}));
  ExpectNear(F((*out)[0]), {3, 4.f / 3});
  ExpectNear(F((*out)[1]), {-3, 7, 9});
  ExpectNear(F((*out)[2]), {5, 6});
  ExpectNear(F((*out)[3]), {1, -4});
  ExpectNear(F((*out)[4]), {15, -48});
  EXPECT_EQ(Values<int64_t>((*out)[5]), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Values<int32_t>((*out)[6]), (std::vector<int32_t>{1, 1, 0}));
}

TEST(TfOpsTest, ShapeManipulation) {
  GraphBuilder b;
  b.Placeholder("x", kF, {2, 3});
  b.Const("shape", I32({3, -1}));
  b.Op("Reshape", "reshape", {"x", "shape"});
  b.Const("perm", I32({1, 0}));
  b.Op("Transpose", "transpose", {"x", "perm"});
  b.Const("axis0", Tensor::Scalar<int32_t>(0));
  b.Op("ConcatV2", "concat", {"x", "x", "axis0"}, {{"N", IntAttr(2)}});
  b.Op("Pack", "pack", {"x", "x"}, {{"axis", IntAttr(1)}, {"N", IntAttr(2)}});
  b.Op("Unpack", "unpack", {"x"}, {{"num", IntAttr(3)}, {"axis", IntAttr(1)}});
  b.Const("axis1", Tensor::Scalar<int32_t>(1));
  b.Op("Split", "split", {"axis1", "x"}, {{"num_split", IntAttr(3)}});
  b.Const("begin", I32({0, 1}));
  b.Const("size", I32({-1, 2}));
  b.Op("Slice", "slice", {"x", "begin", "size"});
  b.Op("ExpandDims", "expand", {"x", "axis0"});
  b.Op("Squeeze", "squeeze", {"expand"}, {{"squeeze_dims", IntsAttr({0})}});
  b.Op("Shape", "shape_of", {"x"}, {{"out_type", TypeAttr(DType::kInt32)}});
  b.Op("Size", "size_of", {"x"}, {{"out_type", TypeAttr(DType::kInt32)}});
  b.Op("Rank", "rank_of", {"x"});
  b.Const("mult", I32({1, 2}));
  b.Op("Tile", "tile", {"x", "mult"});
  b.Const("paddings", Tensor::FromVector<int32_t>({1, 0, 0, 1}, Shape{2, 2}));
  b.Op("Pad", "pad", {"x", "paddings"});
  auto out = RunOps(b, {{"x", Vec({1, 2, 3, 4, 5, 6}, Shape{2, 3})}},
                 {"reshape", "transpose", "concat", "pack", "unpack:2", "split:1", "slice",
                  "squeeze", "shape_of", "size_of", "rank_of", "tile", "pad"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{3, 2}));
  ExpectNear(F((*out)[1]), {1, 4, 2, 5, 3, 6});
  EXPECT_EQ((*out)[2].shape(), (Shape{4, 3}));
  EXPECT_EQ((*out)[3].shape(), (Shape{2, 2, 3}));
  ExpectNear(F((*out)[3]), {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
  ExpectNear(F((*out)[4]), {3, 6});
  ExpectNear(F((*out)[5]), {2, 5});
  ExpectNear(F((*out)[6]), {2, 3, 5, 6});
  EXPECT_EQ((*out)[7].shape(), (Shape{2, 3}));
  EXPECT_EQ(Values<int32_t>((*out)[8]), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(Values<int32_t>((*out)[9]), (std::vector<int32_t>{6}));
  EXPECT_EQ(Values<int32_t>((*out)[10]), (std::vector<int32_t>{2}));
  ExpectNear(F((*out)[11]), {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
  ExpectNear(F((*out)[12]), {0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0});
}

TEST(TfOpsTest, StridedSliceShrinksAndReverses) {
  GraphBuilder b;
  b.Placeholder("x", kF, {2, 3});
  b.Const("b0", I32({1, 0}));
  b.Const("e0", I32({2, 3}));
  b.Const("s0", I32({1, 1}));
  b.Op("StridedSlice", "row1", {"x", "b0", "e0", "s0"},
       {{"shrink_axis_mask", IntAttr(1)}, {"Index", TypeAttr(DType::kInt32)}});
  b.Const("b1", I32({0, -1}));
  b.Const("e1", I32({0, 0}));
  b.Const("s1", I32({1, -1}));
  b.Op("StridedSlice", "rev", {"x", "b1", "e1", "s1"},
       {{"begin_mask", IntAttr(1)}, {"end_mask", IntAttr(3)}});
  auto out = RunOps(b, {{"x", Vec({1, 2, 3, 4, 5, 6}, Shape{2, 3})}}, {"row1", "rev"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {4, 5, 6});
  ExpectNear(F((*out)[1]), {3, 2, 1, 6, 5, 4});
}

TEST(TfOpsTest, GatherOneHotCumsumTopK) {
  GraphBuilder b;
  b.Placeholder("x", kF, {3, 2});
  b.Const("idx", I32({2, 0}));
  b.Const("axis0", Tensor::Scalar<int32_t>(0));
  b.Op("GatherV2", "gather", {"x", "idx", "axis0"});
  b.Const("nd", Tensor::FromVector<int32_t>({0, 1, 2, 0}, Shape{2, 2}));
  b.Op("GatherNd", "gathernd", {"x", "nd"});
  b.Const("labels", I32({1, 0, 2}));
  b.Const("depth", Tensor::Scalar<int32_t>(3));
  b.Const("on", Tensor::Scalar<float>(5.f));
  b.Const("off", Tensor::Scalar<float>(-1.f));
  b.Op("OneHot", "onehot", {"labels", "depth", "on", "off"}, {{"axis", IntAttr(-1)}});
  b.Op("Cumsum", "cumsum", {"x", "axis0"}, {{"exclusive", BoolAttr(true)}});
  b.Const("k", Tensor::Scalar<int32_t>(1));
  b.Op("TopKV2", "topk", {"x", "k"});
  b.Const("lo", Tensor::Scalar<float>(2.f));
  b.Const("hi", Tensor::Scalar<float>(4.f));
  b.Op("ClipByValue", "clip", {"x", "lo", "hi"});
  auto out = RunOps(b, {{"x", Vec({1, 2, 3, 4, 5, 6}, Shape{3, 2})}},
                 {"gather", "gathernd", "onehot", "cumsum", "topk", "topk:1", "clip"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {5, 6, 1, 2});
  ExpectNear(F((*out)[1]), {2, 5});
  ExpectNear(F((*out)[2]), {-1, 5, -1, 5, -1, -1, -1, -1, 5});
  ExpectNear(F((*out)[3]), {0, 0, 1, 2, 4, 6});
  ExpectNear(F((*out)[4]), {2, 4, 6});
  EXPECT_EQ(Values<int32_t>((*out)[5]), (std::vector<int32_t>{1, 1, 1}));
  ExpectNear(F((*out)[6]), {2, 2, 3, 4, 4, 4});
}

TEST(TfOpsTest, UnaryBinaryAndPassThroughOps) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Const("x_default", Vec({4, 9}, Shape{2}));
  b.Op("PlaceholderWithDefault", "unfed", {"x_default"}, {{"dtype", TypeAttr(kF)}});
  b.Op("IdentityN", "pair", {"x", "unfed"});
  b.Op("StopGradient", "stopped", {"pair:1"});
  b.Op("Sqrt", "sqrt", {"stopped"});
  b.Op("Rsqrt", "rsqrt", {"stopped"});
  b.Op("Exp", "exp", {"x"});
  b.Op("Log", "log", {"stopped"});
  b.Op("Relu", "relu", {"pair"});
  b.Op("Add", "add", {"x", "unfed"});
  b.Op("Equal", "eq", {"x", "unfed"});
  b.Op("GreaterEqual", "ge", {"x", "unfed"});
  b.Op("LogicalOr", "or", {"eq", "ge"});
  b.Op("Bucketize", "buckets", {"x"}, {{"boundaries", FloatsAttr({0, 4})}});
  auto out = RunOps(b, {{"x", Vec({-1, 9}, Shape{2})}},
                    {"sqrt", "rsqrt", "exp", "log", "relu", "add", "eq", "ge", "or", "buckets"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {2, 3});
  ExpectNear(F((*out)[1]), {0.5f, 1.f / 3});
  ExpectNear(F((*out)[2]), {std::exp(-1.f), std::exp(9.f)}, 1e-1f);
  ExpectNear(F((*out)[3]), {std::log(4.f), std::log(9.f)});
  ExpectNear(F((*out)[4]), {0, 9});
  ExpectNear(F((*out)[5]), {3, 18});
  EXPECT_EQ(Values<bool>((*out)[6]), (std::vector<bool>{false, true}));
  EXPECT_EQ(Values<bool>((*out)[7]), (std::vector<bool>{false, true}));
  EXPECT_EQ(Values<bool>((*out)[8]), (std::vector<bool>{false, true}));
  EXPECT_EQ(Values<int32_t>((*out)[9]), (std::vector<int32_t>{0, 2}));
}

TEST(TfOpsTest, SplitVPadsAndBroadcast) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1, 3});
  b.Const("sizes", I32({-1, 1}));  // one -1 takes the rest
  b.Const("axis", Tensor::Scalar<int32_t>(1));
  b.Op("SplitV", "split", {"x", "sizes", "axis"}, {{"num_split", IntAttr(2)}});
  b.Const("pads", Tensor::FromVector<int32_t>({0, 0, 1, 2}, Shape{2, 2}));
  b.Const("nine", Tensor::Scalar<float>(9.f));
  b.Op("PadV2", "padded", {"x", "pads", "nine"});
  b.Op("MirrorPad", "reflect", {"x", "pads"}, {{"mode", StringAttr("REFLECT")}});
  b.Op("MirrorPad", "symmetric", {"x", "pads"}, {{"mode", StringAttr("SYMMETRIC")}});
  b.Const("row", Vec({1, 2, 3}, Shape{3}));
  b.Const("shape", I32({2, 3}));
  b.Op("BroadcastTo", "broadcast", {"row", "shape"});
  auto out = RunOps(b, {{"x", Vec({1, 2, 3, 4, 5, 6}, Shape{2, 3})}},
                    {"split:0", "split:1", "padded", "reflect", "symmetric", "broadcast"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 2}));
  ExpectNear(F((*out)[0]), {1, 2, 4, 5});
  ExpectNear(F((*out)[1]), {3, 6});
  ExpectNear(F((*out)[2]), {9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9});
  ExpectNear(F((*out)[3]), {2, 1, 2, 3, 2, 1, 5, 4, 5, 6, 5, 4});
  ExpectNear(F((*out)[4]), {1, 1, 2, 3, 3, 2, 4, 4, 5, 6, 6, 5});
  ExpectNear(F((*out)[5]), {1, 2, 3, 1, 2, 3});
}

// The gradient of a VALID 2x2 convolution of ones: each input counts the windows covering it.
TEST(TfOpsTest, Conv2DBackpropInputCountsWindows) {
  GraphBuilder b;
  b.Placeholder("dy", kF, {1, 2, 2, 1});
  b.Const("sizes", I32({1, 3, 3, 1}));
  b.Const("filter", Vec({1, 1, 1, 1}, Shape{2, 2, 1, 1}));
  b.Op("Conv2DBackpropInput", "dx", {"sizes", "filter", "dy"},
       {{"strides", IntsAttr({1, 1, 1, 1})}, {"padding", StringAttr("VALID")}});
  auto out = RunOps(b, {{"dy", Vec({1, 1, 1, 1}, Shape{1, 2, 2, 1})}}, {"dx"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{1, 3, 3, 1}));
  ExpectNear(F((*out)[0]), {1, 2, 1, 2, 4, 2, 1, 2, 1});
}

// Keras RNN loops keep their per-step tensors in TensorLists.
TEST(TfOpsTest, TensorListsRoundTrip) {
  GraphBuilder b;
  b.Placeholder("x", kF, {3, 2});
  b.Const("element_shape", I32({2}));
  b.Op("TensorListFromTensor", "list", {"x", "element_shape"},
       {{"element_dtype", TypeAttr(kF)}, {"shape_type", TypeAttr(DType::kInt32)}});
  b.Const("one", Tensor::Scalar<int32_t>(1));
  b.Op("TensorListGetItem", "item", {"list", "one", "element_shape"},
       {{"element_dtype", TypeAttr(kF)}});
  b.Op("TensorListLength", "length", {"list"});
  b.Const("three", Tensor::Scalar<int32_t>(3));
  b.Op("TensorListReserve", "reserved", {"element_shape", "three"},
       {{"element_dtype", TypeAttr(kF)}, {"shape_type", TypeAttr(DType::kInt32)}});
  b.Const("zero", Tensor::Scalar<int32_t>(0));
  b.Const("two", Tensor::Scalar<int32_t>(2));
  b.Op("TensorListSetItem", "set0", {"reserved", "zero", "item"},
       {{"element_dtype", TypeAttr(kF)}});
  b.Op("TensorListGetItem", "last", {"list", "two", "element_shape"},
       {{"element_dtype", TypeAttr(kF)}});
  b.Op("TensorListSetItem", "set2", {"set0", "two", "last"}, {{"element_dtype", TypeAttr(kF)}});
  b.Op("TensorListSetItem", "set1", {"set2", "one", "item"}, {{"element_dtype", TypeAttr(kF)}});
  b.Op("TensorListStack", "stacked", {"set1", "element_shape"},
       {{"element_dtype", TypeAttr(kF)}, {"num_elements", IntAttr(3)}});
  auto out = RunOps(b, {{"x", Vec({1, 2, 3, 4, 5, 6}, Shape{3, 2})}},
                    {"item", "length", "stacked"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {3, 4});
  EXPECT_EQ(Values<int32_t>((*out)[1]), (std::vector<int32_t>{3}));
  EXPECT_EQ((*out)[2].shape(), (Shape{3, 2}));
  ExpectNear(F((*out)[2]), {3, 4, 3, 4, 5, 6});
}

TEST(TfOpsTest, ParseSingleExampleScalarInput) {
  GraphBuilder b;
  b.Placeholder("serialized", DType::kString, {});
  b.Const("default_x", Vec({-1, -1}, Shape{2}));
  tensorflow::AttrValue shapes, dtypes, stypes, dense_keys, sparse_keys;
  auto* shape = shapes.mutable_list()->add_shape();
  shape->add_dim()->set_size(2);
  dtypes.mutable_list()->add_type(tensorflow::DT_FLOAT);
  stypes.mutable_list()->add_type(tensorflow::DT_INT64);
  dense_keys.mutable_list()->add_s("x");
  sparse_keys.mutable_list()->add_s("ids");
  b.Op("ParseSingleExample", "parse", {"serialized", "default_x"},
       {{"num_sparse", IntAttr(1)}, {"sparse_keys", sparse_keys}, {"dense_keys", dense_keys},
        {"sparse_types", stypes}, {"Tdense", dtypes}, {"dense_shapes", shapes}});
  tensorflow::Example e;
  auto& features = *e.mutable_features()->mutable_feature();
  features["x"].mutable_float_list()->add_value(0.5f);
  features["x"].mutable_float_list()->add_value(1.5f);
  features["ids"].mutable_int64_list()->add_value(7);
  features["ids"].mutable_int64_list()->add_value(11);
  features["ids"].mutable_int64_list()->add_value(13);
  auto out = RunOps(b, {{"serialized", Tensor::Scalar<std::string>(e.SerializeAsString())}},
                    {"parse:0", "parse:1", "parse:2", "parse:3"});
  ASSERT_TRUE(out.ok()) << out.status();
  // A single example's sparse indices are 1-D positions: [3, 1].
  EXPECT_EQ(Values<int64_t>((*out)[0]), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(Values<int64_t>((*out)[1]), (std::vector<int64_t>{7, 11, 13}));
  EXPECT_EQ(Values<int64_t>((*out)[2]), (std::vector<int64_t>{3}));
  EXPECT_EQ((*out)[3].shape(), (Shape{2}));
  ExpectNear(F((*out)[3]), {0.5f, 1.5f});
  auto empty = RunOps(b, {{"serialized", Tensor::Scalar<std::string>("")}}, {"parse:3"});
  ASSERT_TRUE(empty.ok()) << empty.status();
  ExpectNear(F((*empty)[0]), {-1, -1});
}

TEST(TfOpsTest, FillRangeZerosLikeWhere) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Const("dims", I32({2, 2}));
  b.Const("seven", Tensor::Scalar<float>(7.f));
  b.Op("Fill", "fill", {"dims", "seven"});
  b.Const("start", Tensor::Scalar<int32_t>(1));
  b.Const("limit", Tensor::Scalar<int32_t>(8));
  b.Const("delta", Tensor::Scalar<int32_t>(3));
  b.Op("Range", "range", {"start", "limit", "delta"});
  b.Op("ZerosLike", "zeros", {"x"}, {{"T", TypeAttr(kF)}});
  b.Op("OnesLike", "ones", {"x"}, {{"T", TypeAttr(kF)}});
  b.Const("zero", Tensor::Scalar<float>(0.f));
  b.Op("Greater", "pos", {"x", "zero"});
  b.Op("Where", "where", {"pos"});
  auto out = RunOps(b, {{"x", Vec({-1, 3, 0, 2}, Shape{4})}},
                 {"fill", "range", "zeros", "ones", "where"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {7, 7, 7, 7});
  EXPECT_EQ(Values<int32_t>((*out)[1]), (std::vector<int32_t>{1, 4, 7}));
  ExpectNear(F((*out)[2]), {0, 0, 0, 0});
  ExpectNear(F((*out)[3]), {1, 1, 1, 1});
  EXPECT_EQ((*out)[4].shape(), (Shape{2, 1}));
  EXPECT_EQ(Values<int64_t>((*out)[4]), (std::vector<int64_t>{1, 3}));
}

TEST(TfOpsTest, Conv2DAndPoolsNhwc) {
  GraphBuilder b;
  b.Placeholder("x", kF, {1, 3, 3, 1});
  b.Const("w", Vec(std::vector<float>(9, 1.f), Shape{3, 3, 1, 1}));
  b.Op("Conv2D", "conv", {"x", "w"},
       {{"strides", IntsAttr({1, 1, 1, 1})}, {"padding", StringAttr("SAME")},
        {"data_format", StringAttr("NHWC")}});
  b.Op("MaxPool", "maxpool", {"x"},
       {{"ksize", IntsAttr({1, 2, 2, 1})}, {"strides", IntsAttr({1, 2, 2, 1})},
        {"padding", StringAttr("SAME")}});
  b.Op("AvgPool", "avgpool", {"x"},
       {{"ksize", IntsAttr({1, 2, 2, 1})}, {"strides", IntsAttr({1, 2, 2, 1})},
        {"padding", StringAttr("SAME")}});
  b.Const("dw", Vec({1, 2}, Shape{1, 1, 1, 2}));
  b.Op("DepthwiseConv2dNative", "depthwise", {"x", "dw"},
       {{"strides", IntsAttr({1, 1, 1, 1})}, {"padding", StringAttr("VALID")}});
  auto out = RunOps(b, {{"x", Vec({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1})}},
                 {"conv", "maxpool", "avgpool", "depthwise"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {12, 21, 16, 27, 45, 33, 24, 39, 28});
  ExpectNear(F((*out)[1]), {5, 6, 8, 9});
  // SAME average pooling excludes the padding from the count (TensorFlow's rule).
  ExpectNear(F((*out)[2]), {3, 4.5f, 7.5f, 9});
  EXPECT_EQ((*out)[3].shape(), (Shape{1, 3, 3, 2}));
  ExpectNear(F((*out)[3]), {1, 2, 2, 4, 3, 6, 4, 8, 5, 10, 6, 12, 7, 14, 8, 16, 9, 18});
}

TEST(TfOpsTest, FusedBatchNormV3Inference) {
  GraphBuilder b;
  b.Placeholder("x", kF, {1, 1, 2, 2});
  b.Const("scale", Vec({2, 1}, Shape{2}));
  b.Const("offset", Vec({1, 0}, Shape{2}));
  b.Const("mean", Vec({1, 2}, Shape{2}));
  b.Const("var", Vec({4, 1}, Shape{2}));
  b.Op("FusedBatchNormV3", "bn", {"x", "scale", "offset", "mean", "var"},
       {{"epsilon", FloatAttr(0.f)}, {"is_training", BoolAttr(false)},
        {"data_format", StringAttr("NHWC")}});
  auto out = RunOps(b, {{"x", Vec({3, 2, 5, 4}, Shape{1, 1, 2, 2})}}, {"bn"});
  ASSERT_TRUE(out.ok()) << out.status();
  // channel 0: 2*(x-1)/2+1 ; channel 1: (x-2)/1
  ExpectNear(F((*out)[0]), {3, 0, 5, 2}, 1e-4f);
}

TEST(TfOpsTest, BatchMatMulAndEinsum) {
  GraphBuilder b;
  b.Placeholder("a", kF, {1, 2, 2});
  b.Placeholder("c", kF, {1, 2, 2});
  b.Op("BatchMatMulV2", "bmm", {"a", "c"}, {{"adj_y", BoolAttr(true)}});
  b.Op("Einsum", "einsum", {"a", "c"}, {{"equation", StringAttr("bij,bjk->bik")}, {"N", IntAttr(2)}});
  auto out = RunOps(b, {{"a", Vec({1, 2, 3, 4}, Shape{1, 2, 2})}, {"c", Vec({1, 0, 1, 1}, Shape{1, 2, 2})}},
                 {"bmm", "einsum"});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {1, 3, 3, 7});
  ExpectNear(F((*out)[1]), {3, 2, 7, 4});
}

TEST(TfOpsTest, StringToHashBucketFastMatchesTensorFlow) {
  GraphBuilder b;
  b.Placeholder("s", DType::kString, {-1});
  b.Op("StringToHashBucketFast", "h", {"s"}, {{"num_buckets", IntAttr(3)}});
  Tensor s(DType::kString, Shape{3});
  s.data<std::string>()[0] = "Hello";
  s.data<std::string>()[1] = "TensorFlow";
  s.data<std::string>()[2] = "2.x";
  auto out = RunOps(b, {{"s", s}}, {"h"});
  ASSERT_TRUE(out.ok()) << out.status();
  // tf.strings.to_hash_bucket_fast(["Hello", "TensorFlow", "2.x"], 3) (TF's documentation).
  EXPECT_EQ(Values<int64_t>((*out)[0]), (std::vector<int64_t>{0, 2, 2}));
}

TEST(TfOpsTest, HashTableFromImportedConstants) {
  GraphBuilder b;
  b.Placeholder("k", DType::kString, {-1});
  b.Op("HashTableV2", "table", {}, {{"key_dtype", TypeAttr(DType::kString)},
                                     {"value_dtype", TypeAttr(DType::kInt64)}});
  Tensor keys(DType::kString, Shape{2});
  keys.data<std::string>()[0] = "a";
  keys.data<std::string>()[1] = "b";
  b.Const("keys", keys);
  b.Const("values", Tensor::FromVector<int64_t>({10, 20}));
  b.Op("LookupTableImportV2", "init", {"table", "keys", "values"});
  b.Const("default", Tensor::Scalar<int64_t>(-1));
  b.Op("LookupTableFindV2", "find", {"table", "k", "default"});
  b.Op("LookupTableSizeV2", "size", {"table"});
  Tensor k(DType::kString, Shape{3});
  k.data<std::string>()[0] = "b";
  k.data<std::string>()[1] = "zz";
  k.data<std::string>()[2] = "a";
  auto out = RunOps(b, {{"k", k}}, {"find", "size"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int64_t>((*out)[0]), (std::vector<int64_t>{20, -1, 10}));
  EXPECT_EQ(Values<int64_t>((*out)[1]), (std::vector<int64_t>{2}));
}

// Adds a function node to `f` and returns it.
tensorflow::NodeDef* FunctionNode(tensorflow::FunctionDef* f, const std::string& name,
                                  const std::string& op, const std::vector<std::string>& inputs) {
  auto* n = f->add_node_def();
  n->set_name(name);
  n->set_op(op);
  for (const std::string& in : inputs) n->add_input(in);
  return n;
}

// TF2 exports (and tf.Transform graphs loaded into TF1 Estimators) create a table in one
// function, initialize it in another and look it up in a third; the table handle reaches each
// as a function argument.
TEST(TfOpsTest, TableCreatedAndInitializedInFunctions) {
  GraphBuilder b;
  tensorflow::FunctionDef* creator = b.AddFunction();
  creator->mutable_signature()->set_name("__inference__creator_1");
  creator->mutable_signature()->add_output_arg()->set_name("identity");
  auto* table = FunctionNode(creator, "hash_table", "HashTableV2", {});
  (*table->mutable_attr())["key_dtype"] = TypeAttr(DType::kString);
  (*table->mutable_attr())["value_dtype"] = TypeAttr(DType::kInt64);
  FunctionNode(creator, "Identity", "Identity", {"hash_table:table_handle:0"});
  (*creator->mutable_ret())["identity"] = "Identity:output:0";

  tensorflow::FunctionDef* init = b.AddFunction();
  init->mutable_signature()->set_name("__inference__initializer_2");
  init->mutable_signature()->add_input_arg()->set_name("handle");
  init->mutable_signature()->add_input_arg()->set_name("keys");
  init->mutable_signature()->add_output_arg()->set_name("identity");
  auto* values = FunctionNode(init, "values", "Const", {});
  tensorflow::AttrValue v;
  v.mutable_tensor()->set_dtype(tensorflow::DT_INT64);
  v.mutable_tensor()->mutable_tensor_shape()->add_dim()->set_size(2);
  v.mutable_tensor()->add_int64_val(10);
  v.mutable_tensor()->add_int64_val(20);
  (*values->mutable_attr())["value"] = v;
  FunctionNode(init, "import", "LookupTableImportV2", {"handle", "keys", "values:output:0"});
  FunctionNode(init, "done", "Identity", {"keys", "^import"});
  (*init->mutable_ret())["identity"] = "done:output:0";

  tensorflow::FunctionDef* lookup = b.AddFunction();
  lookup->mutable_signature()->set_name("__inference_lookup_3");
  lookup->mutable_signature()->add_input_arg()->set_name("table");
  lookup->mutable_signature()->add_input_arg()->set_name("k");
  lookup->mutable_signature()->add_output_arg()->set_name("ids");
  auto* dflt = FunctionNode(lookup, "default", "Const", {});
  tensorflow::AttrValue d;
  d.mutable_tensor()->set_dtype(tensorflow::DT_INT64);
  d.mutable_tensor()->add_int64_val(-1);
  (*dflt->mutable_attr())["value"] = d;
  FunctionNode(lookup, "find", "LookupTableFindV2", {"table", "k", "default:output:0"});
  (*lookup->mutable_ret())["ids"] = "find:values:0";

  Tensor keys(DType::kString, Shape{2});
  keys.data<std::string>()[0] = "a";
  keys.data<std::string>()[1] = "b";
  b.Const("vocab", keys);
  b.Placeholder("k", DType::kString, {-1});
  b.Op("StatefulPartitionedCall", "make_table", {}, {{"f", FuncAttr("__inference__creator_1")}});
  b.Op("StatefulPartitionedCall", "init_table", {"make_table", "vocab"},
       {{"f", FuncAttr("__inference__initializer_2")}});
  b.Op("StatefulPartitionedCall", "ids", {"make_table", "k"},
       {{"f", FuncAttr("__inference_lookup_3")}});
  Tensor k(DType::kString, Shape{3});
  k.data<std::string>()[0] = "b";
  k.data<std::string>()[1] = "zz";
  k.data<std::string>()[2] = "a";
  auto out = RunOps(b, {{"k", k}}, {"ids"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int64_t>((*out)[0]), (std::vector<int64_t>{20, -1, 10}));
}

// tf.Transform's apply_buckets feeds BucketizeWithInputBoundaries from Const -> ExpandDims.
TEST(TfOpsTest, BucketizeBoundariesThroughExpandDims) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Const("quantiles", Vec({1, 2.5f, 4}, Shape{3}));
  b.Const("axis", Tensor::Scalar<int32_t>(0));
  b.Op("ExpandDims", "boundaries", {"quantiles", "axis"});
  b.Op("BucketizeWithInputBoundaries", "buckets", {"x", "boundaries"},
       {{"T", TypeAttr(kF)}});
  auto out = RunOps(b, {{"x", Vec({0, 1, 2, 2.5f, 9}, Shape{5})}}, {"buckets"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int32_t>((*out)[0]), (std::vector<int32_t>{0, 1, 1, 2, 3}));
}

TEST(TfOpsTest, SwitchMergeConditional) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Placeholder("p", DType::kBool, {});
  b.Op("Switch", "sw", {"x", "p"});
  b.Const("two", Tensor::Scalar<float>(2.f));
  b.Op("Mul", "doubled", {"sw:1", "two"});
  b.Op("Neg", "negated", {"sw:0"});
  b.Op("Merge", "merge", {"negated", "doubled"}, {{"N", IntAttr(2)}});
  for (bool p : {true, false}) {
    auto out = RunOps(b, {{"x", Vec({1, -3}, Shape{2})}, {"p", Tensor::Scalar<bool>(p)}},
                   {"merge", "merge:1"});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectNear(F((*out)[0]), p ? std::vector<float>{2, -6} : std::vector<float>{-1, 3});
    EXPECT_EQ(Values<int32_t>((*out)[1]), (std::vector<int32_t>{p ? 1 : 0}));
  }
}

// A function f(x) = x * 3 in the library.
void AddTimesThree(GraphBuilder& b, const std::string& name, float factor) {
  tensorflow::FunctionDef* f = b.AddFunction();
  f->mutable_signature()->set_name(name);
  auto* in = f->mutable_signature()->add_input_arg();
  in->set_name("x");
  in->set_type(tensorflow::DT_FLOAT);
  auto* out = f->mutable_signature()->add_output_arg();
  out->set_name("y");
  out->set_type(tensorflow::DT_FLOAT);
  auto* c = f->add_node_def();
  c->set_name("k");
  c->set_op("Const");
  tensorflow::AttrValue v;
  v.mutable_tensor()->set_dtype(tensorflow::DT_FLOAT);
  v.mutable_tensor()->add_float_val(factor);
  (*c->mutable_attr())["value"] = v;
  (*c->mutable_attr())["dtype"] = TypeAttr(kF);
  auto* m = f->add_node_def();
  m->set_name("mul");
  m->set_op("Mul");
  m->add_input("x");
  m->add_input("k:output:0");
  (*f->mutable_ret())["y"] = "mul:z:0";
}

TEST(TfOpsTest, FunctionCallsAndIf) {
  GraphBuilder b;
  AddTimesThree(b, "times3", 3.f);
  AddTimesThree(b, "times5", 5.f);
  b.Placeholder("x", kF, {-1});
  b.Placeholder("p", DType::kBool, {});
  b.Op("StatefulPartitionedCall", "call", {"x"}, {{"f", FuncAttr("times3")}});
  b.Op("StatelessIf", "if", {"p", "call"},
       {{"then_branch", FuncAttr("times5")}, {"else_branch", FuncAttr("times3")},
        {"Tcond", TypeAttr(DType::kBool)}});
  b.Op("If", "stateful_if", {"p", "x"},
       {{"then_branch", FuncAttr("times3")}, {"else_branch", FuncAttr("times5")},
        {"Tcond", TypeAttr(DType::kBool)}});
  for (bool p : {true, false}) {
    auto out = RunOps(b, {{"x", Vec({1, 2}, Shape{2})}, {"p", Tensor::Scalar<bool>(p)}},
                      {"if", "stateful_if"});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectNear(F((*out)[0]), p ? std::vector<float>{15, 30} : std::vector<float>{9, 18});
    ExpectNear(F((*out)[1]), p ? std::vector<float>{3, 6} : std::vector<float>{5, 10});
  }
}

TEST(TfOpsTest, WhileLoopCountsDown) {
  // while i < 5: i += 1; acc *= 2
  GraphBuilder b;
  auto* cond = b.AddFunction();
  cond->mutable_signature()->set_name("cond");
  for (const char* n : {"i", "acc"}) {
    auto* a = cond->mutable_signature()->add_input_arg();
    a->set_name(n);
    a->set_type(n[0] == 'i' ? tensorflow::DT_INT32 : tensorflow::DT_FLOAT);
  }
  cond->mutable_signature()->add_output_arg()->set_name("ok");
  auto* five = cond->add_node_def();
  five->set_name("five");
  five->set_op("Const");
  tensorflow::AttrValue v5;
  v5.mutable_tensor()->set_dtype(tensorflow::DT_INT32);
  v5.mutable_tensor()->add_int_val(5);
  (*five->mutable_attr())["value"] = v5;
  auto* less = cond->add_node_def();
  less->set_name("less");
  less->set_op("Less");
  less->add_input("i");
  less->add_input("five:output:0");
  (*cond->mutable_ret())["ok"] = "less:z:0";

  auto* body = b.AddFunction();
  body->mutable_signature()->set_name("body");
  for (const char* n : {"i", "acc"}) {
    auto* a = body->mutable_signature()->add_input_arg();
    a->set_name(n);
    auto* o = body->mutable_signature()->add_output_arg();
    o->set_name(std::string(n) + "_out");
  }
  auto add_const = [&](const char* name, tensorflow::DataType t, float value) {
    auto* c = body->add_node_def();
    c->set_name(name);
    c->set_op("Const");
    tensorflow::AttrValue v;
    v.mutable_tensor()->set_dtype(t);
    if (t == tensorflow::DT_INT32) v.mutable_tensor()->add_int_val(static_cast<int>(value));
    else v.mutable_tensor()->add_float_val(value);
    (*c->mutable_attr())["value"] = v;
  };
  add_const("one", tensorflow::DT_INT32, 1);
  add_const("two", tensorflow::DT_FLOAT, 2);
  auto* inc = body->add_node_def();
  inc->set_name("inc");
  inc->set_op("AddV2");
  inc->add_input("i");
  inc->add_input("one:output:0");
  auto* dbl = body->add_node_def();
  dbl->set_name("dbl");
  dbl->set_op("Mul");
  dbl->add_input("acc");
  dbl->add_input("two:output:0");
  (*body->mutable_ret())["i_out"] = "inc:z:0";
  (*body->mutable_ret())["acc_out"] = "dbl:z:0";

  b.Placeholder("acc", kF, {-1});
  b.Const("i0", Tensor::Scalar<int32_t>(2));
  b.Op("StatelessWhile", "loop", {"i0", "acc"}, {{"cond", FuncAttr("cond")}, {"body", FuncAttr("body")}});
  b.Op("While", "stateful_loop", {"i0", "acc"},
       {{"cond", FuncAttr("cond")}, {"body", FuncAttr("body")}});
  auto out = RunOps(b, {{"acc", Vec({1, -0.5f}, Shape{2})}},
                    {"loop:0", "loop:1", "stateful_loop:1"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int32_t>((*out)[0]), (std::vector<int32_t>{5}));
  ExpectNear(F((*out)[1]), {8, -4});
  ExpectNear(F((*out)[2]), {8, -4});
}

TEST(TfOpsTest, ParseExampleDenseAndSparse) {
  GraphBuilder b;
  b.Placeholder("serialized", DType::kString, {-1});
  b.Const("names", Tensor(DType::kString, Shape{0}));
  b.Const("key_s", Tensor::Scalar<std::string>("tags"));
  b.Const("key_d", Tensor::Scalar<std::string>("x"));
  b.Const("default_d", Vec({-1.f}, Shape{1}));
  tensorflow::AttrValue shapes;
  shapes.mutable_list()->add_shape()->add_dim()->set_size(1);
  tensorflow::AttrValue stypes, dtypes;
  stypes.mutable_list()->add_type(tensorflow::DT_STRING);
  dtypes.mutable_list()->add_type(tensorflow::DT_FLOAT);
  b.Op("ParseExample", "parse", {"serialized", "names", "key_s", "key_d", "default_d"},
       {{"Nsparse", IntAttr(1)}, {"Ndense", IntAttr(1)}, {"sparse_types", stypes},
        {"Tdense", dtypes}, {"dense_shapes", shapes}});
  tensorflow::Example e1, e2;
  (*e1.mutable_features()->mutable_feature())["x"].mutable_float_list()->add_value(4.f);
  (*e1.mutable_features()->mutable_feature())["tags"].mutable_bytes_list()->add_value("a");
  (*e1.mutable_features()->mutable_feature())["tags"].mutable_bytes_list()->add_value("b");
  Tensor s(DType::kString, Shape{2});
  s.data<std::string>()[0] = e1.SerializeAsString();
  s.data<std::string>()[1] = e2.SerializeAsString();
  auto out = RunOps(b, {{"serialized", s}}, {"parse:0", "parse:1", "parse:2", "parse:3"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int64_t>((*out)[0]), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ((*out)[1].data<std::string>()[1], "b");
  EXPECT_EQ(Values<int64_t>((*out)[2]), (std::vector<int64_t>{2, 2}));
  ExpectNear(F((*out)[3]), {4, -1});
}

TEST(TfOpsTest, UnsupportedOpIsNamedWithNodeAndFunction) {
  GraphBuilder b;
  tensorflow::FunctionDef* f = b.AddFunction();
  f->mutable_signature()->set_name("__inference_tokenize");
  f->mutable_signature()->add_input_arg()->set_name("x");
  f->mutable_signature()->add_output_arg()->set_name("y");
  auto* n = f->add_node_def();
  n->set_name("tok");
  n->set_op("WhitespaceTokenizeWithOffsets");
  n->add_input("x");
  (*f->mutable_ret())["y"] = "tok:output:0";
  b.Placeholder("x", DType::kString);
  b.Op("PartitionedCall", "call", {"x"}, {{"f", FuncAttr("__inference_tokenize")}});
  auto out = RunOps(b, {{"x", Tensor::Scalar<std::string>("a b")}}, {"call"});
  ASSERT_FALSE(out.ok());
  const std::string msg(out.status().message());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(msg, "WhitespaceTokenizeWithOffsets")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "'tok'")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "__inference_tokenize")) << msg;
}

// Kiln drops control dependencies; that is only right when what they force to run is
// something Kiln knows has no effect on the results. An unknown (custom) op behind a control
// dependency, even inside a called function, is refused by name; Assert, Print and NoOp are not.
TEST(TfOpsTest, UnsupportedOpBehindControlDependencyIsNamed) {
  for (const std::string guarded_op : {"Assert", "CustomCheck"}) {
    SCOPED_TRACE(guarded_op);
    GraphBuilder b;
    tensorflow::FunctionDef* f = b.AddFunction();
    f->mutable_signature()->set_name("__inference_call_7");
    f->mutable_signature()->add_input_arg()->set_name("x");
    f->mutable_signature()->add_output_arg()->set_name("y");
    auto* check = f->add_node_def();
    check->set_name("check");
    check->set_op(guarded_op);
    check->add_input("x");
    auto* print = f->add_node_def();
    print->set_name("print");
    print->set_op("PrintV2");
    print->add_input("x");
    auto* y = f->add_node_def();
    y->set_name("out");
    y->set_op("Identity");
    y->add_input("x");
    y->add_input("^check");
    y->add_input("^print");
    (*f->mutable_ret())["y"] = "out:output:0";
    b.Placeholder("x", kF);
    b.Op("StatefulPartitionedCall", "call", {"x"}, {{"f", FuncAttr("__inference_call_7")}});
    auto out = RunOps(b, {{"x", Vec({1, 2}, Shape{2})}}, {"call"});
    if (guarded_op == "Assert") {
      ASSERT_TRUE(out.ok()) << out.status();
      ExpectNear(F((*out)[0]), {1, 2});
      continue;
    }
    ASSERT_FALSE(out.ok());
    const std::string msg(out.status().message());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_TRUE(absl::StrContains(msg, "unsupported TensorFlow op 'CustomCheck'")) << msg;
    EXPECT_TRUE(absl::StrContains(msg, "'check'")) << msg;
    EXPECT_TRUE(absl::StrContains(msg, "__inference_call_7")) << msg;
    EXPECT_FALSE(absl::StrContains(msg, "PrintV2")) << msg;
  }
}

TEST(TfOpsTest, VariablesRestoredThroughSaverOps) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  const std::string w = b.Variable("dense/kernel", "layer/kernel/.ATTRIBUTES/VARIABLE_VALUE", kF);
  b.Op("Mul", "y", {"x", w});
  const std::string dir = testing::TempDir("vars");
  testing::SignatureSpec sig;
  sig.inputs["x"] = {"x:0", kF, {-1}};
  sig.outputs["y"] = {"y:0", kF, {-1}};
  ASSERT_TRUE(testing::WriteSavedModel(dir, b, {sig},
                                       {{"layer/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                                         Tensor::Scalar<float>(4.f)}})
                  .ok());
  auto model = ImportSavedModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = testing::RunSignature(model->signatures[0], {Vec({1, 2}, Shape{2})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(F((*out)[0]), {4, 8});
}

// A restore path that reads "save/RestoreV2:zero" is a malformed graph; it used to be read as
// output 0, which silently gave the variable the first checkpoint key's value.
TEST(TfOpsTest, MalformedRestoreReferenceIsAnError) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  const std::string w = b.Variable("w", "w/.ATTRIBUTES/VARIABLE_VALUE", kF);
  b.Op("Mul", "y", {"x", w});
  const std::string dir = testing::TempDir("bad_restore_ref");
  testing::SignatureSpec sig;
  sig.inputs["x"] = {"x:0", kF, {-1}};
  sig.outputs["y"] = {"y:0", kF, {-1}};
  ASSERT_TRUE(testing::WriteSavedModel(
                  dir, b, {sig}, {{"w/.ATTRIBUTES/VARIABLE_VALUE", Tensor::Scalar<float>(4.f)}})
                  .ok());
  ASSERT_TRUE(ImportSavedModel(dir).ok());
  auto bytes = ReadFileToString(dir + "/saved_model.pb");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  tensorflow::SavedModel saved;
  ASSERT_TRUE(saved.ParseFromString(*bytes));
  int rewritten = 0;
  for (tensorflow::NodeDef& node :
       *saved.mutable_meta_graphs(0)->mutable_graph_def()->mutable_node()) {
    for (std::string& input : *node.mutable_input()) {
      if (input == "save/RestoreV2:0") {
        input = "save/RestoreV2:zero";
        ++rewritten;
      }
    }
  }
  ASSERT_EQ(rewritten, 1);
  ASSERT_TRUE(WriteStringToFile(dir + "/saved_model.pb", saved.SerializeAsString()).ok());
  auto model = ImportSavedModel(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(model.status().message(), "save/RestoreV2:zero")) << model.status();
}

// docs/SAVEDMODEL.md is where users look up what Kiln runs: every op with a converter is
// listed there, word for word.
TEST(TfOpsTest, SupportedOpListIsDocumented) {
  auto doc = ReadFileToString(std::string(KILN_SOURCE_DIR) + "/docs/SAVEDMODEL.md");
  ASSERT_TRUE(doc.ok()) << doc.status();
  const size_t start = doc->find("## Supported ops");
  ASSERT_NE(start, std::string::npos);
  const std::string section = doc->substr(start, doc->find("\n## ", start + 1) - start);
  std::set<std::string> words;
  std::string word;
  for (char ch : section + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') {
      word += ch;
    } else if (!word.empty()) {
      words.insert(word);
      word.clear();
    }
  }
  std::vector<std::string> missing;
  for (const std::string& op : SupportedTfOps()) {
    if (!words.count(op)) missing.push_back(op);
  }
  EXPECT_TRUE(missing.empty()) << "not in docs/SAVEDMODEL.md: " << absl::StrJoin(missing, ", ");
}

// Embedding lookups read rows of a resource variable (restored from the checkpoint).
TEST(TfOpsTest, ResourceGatherReadsVariableRows) {
  GraphBuilder b;
  b.Placeholder("ids", DType::kInt64, {-1});
  b.Variable("embedding", "embedding/.ATTRIBUTES/VARIABLE_VALUE", kF);
  b.Op("ResourceGather", "rows", {"embedding", "ids"},
       {{"dtype", TypeAttr(kF)}, {"Tindices", TypeAttr(DType::kInt64)}});
  const std::string dir = testing::TempDir("resource_gather");
  testing::SignatureSpec sig;
  sig.inputs["ids"] = {"ids:0", DType::kInt64, {-1}};
  sig.outputs["rows"] = {"rows:0", kF, {-1, 2}};
  ASSERT_TRUE(testing::WriteSavedModel(dir, b, {sig},
                                       {{"embedding/.ATTRIBUTES/VARIABLE_VALUE",
                                         Vec({0, 1, 10, 11, 20, 21}, Shape{3, 2})}})
                  .ok());
  auto model = ImportSavedModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = testing::RunSignature(model->signatures[0],
                                   {Tensor::FromVector<int64_t>({2, 0, 2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{3, 2}));
  ExpectNear(F((*out)[0]), {20, 21, 0, 1, 20, 21});
}

}  // namespace
}  // namespace kiln::import::tf
