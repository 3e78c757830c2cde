// TensorProto decoding: a few bytes of proto can describe any shape (TensorFlow's fill rule), so
// every size is checked against the bytes the proto holds, or held to a limit, before the
// tensor is allocated. The cases here are ones the saved_model and serving_request fuzzers
// found allocating gigabytes (or throwing std::bad_alloc) from a few hundred bytes.
#include "kiln/data/formats/tensor_proto.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::data::formats {
namespace {

using ::testing::HasSubstr;

tensorflow::TensorProto WithShape(tensorflow::DataType dtype, const std::vector<int64_t>& dims) {
  tensorflow::TensorProto proto;
  proto.set_dtype(dtype);
  for (int64_t d : dims) proto.mutable_tensor_shape()->add_dim()->set_size(d);
  return proto;
}

TEST(GraphConstantProto, FillRuleRepeatsTheLastValue) {
  tensorflow::TensorProto proto = WithShape(tensorflow::DT_FLOAT, {2, 3});
  proto.add_float_val(1.0f);
  proto.add_float_val(2.0f);
  absl::StatusOr<Tensor> t = FromTensorProto(proto);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(std::vector<float>(t->data<float>(), t->data<float>() + 6),
              ::testing::ElementsAre(1, 2, 2, 2, 2, 2));
}

TEST(GraphConstantProto, FilledConstantAboveTheLimitIsRefusedBeforeAllocating) {
  // 2^30 floats from one value: 4 GiB.
  tensorflow::TensorProto proto = WithShape(tensorflow::DT_FLOAT, {int64_t{1} << 30});
  proto.add_float_val(1.0f);
  absl::StatusOr<Tensor> t = FromTensorProto(proto);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("limit for filled constants"));
  // No values at all (zeros) is the same expansion.
  EXPECT_EQ(FromTensorProto(WithShape(tensorflow::DT_INT64, {int64_t{1} << 30})).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(GraphConstantProto, FilledStringsCountTheCharactersOfEveryCopy) {
  // 2^20 copies of a 2000-character string: 2 GiB of characters, though 2^20 std::strings
  // alone would be 32 MiB.
  tensorflow::TensorProto proto = WithShape(tensorflow::DT_STRING, {int64_t{1} << 20});
  proto.add_string_val(std::string(2000, 'x'));
  absl::StatusOr<Tensor> t = FromTensorProto(proto);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
}

TEST(GraphConstantProto, TensorContentOfTheWrongSizeIsRefusedBeforeAllocating) {
  // The shape claims 1 TiB; before the fix the tensor was allocated first (std::bad_alloc).
  tensorflow::TensorProto proto = WithShape(tensorflow::DT_FLOAT, {int64_t{1} << 38});
  proto.set_tensor_content(std::string(16, '\0'));
  absl::StatusOr<Tensor> t = FromTensorProto(proto);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("tensor_content has 16 bytes"));
}

TEST(RequestTensorProto, OneValueIsHeldToTheGivenRunBudget) {
  tensorflow::TensorProto proto = WithShape(tensorflow::DT_FLOAT, {300});
  proto.add_float_val(0.5f);
  absl::StatusOr<Tensor> over = TensorFromProto(proto, "x", /*max_fill_bytes=*/1024);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_THAT(over.status().message(), HasSubstr("run memory budget of 1024 bytes"));
  proto.mutable_tensor_shape()->mutable_dim(0)->set_size(256);
  absl::StatusOr<Tensor> fits = TensorFromProto(proto, "x", 1024);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->data<float>()[255], 0.5f);
}

TEST(RequestTensorProto, OneStringValueCountsItsCharactersPerCopy) {
  tensorflow::TensorProto proto = WithShape(tensorflow::DT_STRING, {16});
  proto.add_string_val(std::string(100, 'x'));
  // 16 x (sizeof(std::string) + 100) is above 1024 bytes though 16 std::strings are not.
  absl::StatusOr<Tensor> t = TensorFromProto(proto, "s", 1024);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
}

}  // namespace
}  // namespace kiln::data::formats
