#include "kiln/serving/tensor_proto.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::serving {
namespace {

TEST(TensorProtoTest, RoundTripsTypedValues) {
  for (const Tensor& tensor :
       {Tensor::FromVector<float>({1, 2, 3, 4}, Shape{2, 2}),
        Tensor::FromVector<int64_t>({-1, 1LL << 60}), Tensor::FromVector<int8_t>({-5, 7}),
        Tensor::FromVector<double>({0.25}), Tensor::Scalar<int32_t>(9)}) {
    tensorflow::TensorProto proto;
    TensorToProto(tensor, &proto);
    auto back = TensorFromProto(proto, "t");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(TensorsEqual(*back, tensor)) << tensor.DebugString();
  }
  Tensor strings(DType::kString, Shape{2});
  strings.data<std::string>()[0] = "a";
  strings.data<std::string>()[1] = std::string("\0b", 2);
  tensorflow::TensorProto proto;
  TensorToProto(strings, &proto);
  EXPECT_EQ(proto.string_val_size(), 2);
  auto back = TensorFromProto(proto, "s");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<std::string>()[1], std::string("\0b", 2));
}

TEST(TensorProtoTest, ReadsTensorContentAndBroadcastsOneValue) {
  tensorflow::TensorProto proto;
  proto.set_dtype(tensorflow::DT_FLOAT);
  proto.mutable_tensor_shape()->add_dim()->set_size(2);
  const float values[2] = {1.5f, -2.0f};
  proto.set_tensor_content(std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  auto tensor = TensorFromProto(proto, "x");
  ASSERT_TRUE(tensor.ok());
  EXPECT_TRUE(TensorsEqual(*tensor, Tensor::FromVector<float>({1.5f, -2.0f})));

  tensorflow::TensorProto fill;
  fill.set_dtype(tensorflow::DT_INT32);
  fill.mutable_tensor_shape()->add_dim()->set_size(3);
  fill.add_int_val(7);
  auto filled = TensorFromProto(fill, "y");
  ASSERT_TRUE(filled.ok());
  EXPECT_TRUE(TensorsEqual(*filled, Tensor::FromVector<int32_t>({7, 7, 7})));
}

TEST(TensorProtoTest, ErrorsNameTheTensor) {
  tensorflow::TensorProto proto;
  proto.set_dtype(tensorflow::DT_FLOAT);
  proto.mutable_tensor_shape()->add_dim()->set_size(3);
  proto.add_float_val(1);
  proto.add_float_val(2);
  auto tensor = TensorFromProto(proto, "x");
  ASSERT_FALSE(tensor.ok());
  EXPECT_THAT(tensor.status().message(), ::testing::HasSubstr("'x'"));
  proto.set_tensor_content("abc");
  EXPECT_FALSE(TensorFromProto(proto, "x").ok());
  proto.set_dtype(tensorflow::DT_RESOURCE);
  EXPECT_FALSE(TensorFromProto(proto, "x").ok());
}

TEST(TensorProtoTest, DeclaredShapeMustMatchTheValuesBeforeAllocating) {
  auto with_shape = [](std::vector<int64_t> dims) {
    tensorflow::TensorProto proto;
    proto.set_dtype(tensorflow::DT_FLOAT);
    for (int64_t d : dims) proto.mutable_tensor_shape()->add_dim()->set_size(d);
    return proto;
  };
  for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{
           {1073741824, 16}, {4294967296, 4294967296}, {4611686018427387904, 4}}) {
    auto tensor = TensorFromProto(with_shape(dims), "x");
    ASSERT_FALSE(tensor.ok());
    EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument) << tensor.status();
    EXPECT_THAT(tensor.status().message(),
                ::testing::HasSubstr("declared shape and data size disagree"));
  }
  // One value repeated to a shape no machine holds is refused, not attempted.
  tensorflow::TensorProto one = with_shape({int64_t{1} << 40, 16});
  one.add_float_val(1.0f);
  auto repeated = TensorFromProto(one, "x");
  EXPECT_EQ(repeated.status().code(), absl::StatusCode::kResourceExhausted) << repeated.status();
  tensorflow::TensorProto content = with_shape({4611686018427387904, 4});
  content.set_tensor_content(std::string(16, '\0'));
  EXPECT_EQ(TensorFromProto(content, "x").status().code(), absl::StatusCode::kInvalidArgument);
  auto empty = TensorFromProto(with_shape({0, 3}), "x");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace kiln::serving
