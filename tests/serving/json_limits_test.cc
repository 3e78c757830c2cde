// A JSON :predict body gets its tensor's shape from how its lists nest, following first
// elements; the json_request fuzzer found that 1.2 KB of nested lists ([[[0,0,...],0,...],0,...])
// gave a shape of 10^12 floats that was allocated before the other lists were found too short.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/serving/json_tensor.h"

namespace kiln::serving {
namespace {

using ::testing::HasSubstr;

SignatureInfo OneFloatInput() {
  SignatureInfo signature;
  signature.key = "serving_default";
  signature.input_keys = {"x"};
  TensorInfo info;
  info.dtype = DType::kFloat32;
  info.rank_known = true;
  info.shape = {-1, 1};
  signature.inputs["x"] = info;
  return signature;
}

// Lists nested `depth` deep whose first element is the next list and whose `width - 1` others
// are zeros: the first-element path says width^depth values, the body holds far fewer.
std::string FirstElementNest(int depth, int width) {
  if (depth == 0) return "0";
  std::string s = "[" + FirstElementNest(depth - 1, width);
  for (int i = 1; i < width; ++i) s += ",0";
  return s + "]";
}

absl::StatusOr<PredictJsonRequest> Parse(const std::string& body) {
  static const SignatureInfo signature = OneFloatInput();
  return ParsePredictRequest(
      body, [](absl::string_view) -> absl::StatusOr<const SignatureInfo*> { return &signature; });
}

TEST(JsonLimits, ColumnarNestingClaimingMoreValuesThanTheBodyIsRefused) {
  const std::string body = "{\"inputs\": " + FirstElementNest(6, 100) + "}";
  absl::StatusOr<PredictJsonRequest> r = Parse(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("more values than the"));
}

TEST(JsonLimits, RowNestingClaimingMoreValuesThanTheBodyIsRefused) {
  const std::string body = "{\"instances\": " + FirstElementNest(6, 100) + "}";
  absl::StatusOr<PredictJsonRequest> r = Parse(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("more values than the"));
}

TEST(JsonLimits, RaggedListsThatFitTheBodyStillGetTheRaggedError) {
  absl::StatusOr<PredictJsonRequest> r = Parse("{\"inputs\": [[1, 2], 3]}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("ragged"));
  absl::StatusOr<PredictJsonRequest> ok = Parse("{\"inputs\": [[1], [2], [3]]}");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->inputs.at("x").num_elements(), 3);
}

}  // namespace
}  // namespace kiln::serving
