#include "kiln/serving/json_tensor.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::serving {
namespace {

using ::testing::HasSubstr;

TensorInfo Info(DType dtype, std::vector<int64_t> shape) {
  TensorInfo info;
  info.dtype = dtype;
  info.rank_known = true;
  info.shape = std::move(shape);
  return info;
}

SignatureInfo OneInput(DType dtype, const std::string& key = "x") {
  SignatureInfo signature;
  signature.key = "serving_default";
  signature.input_keys = {key};
  signature.inputs[key] = Info(dtype, {-1, 1});
  return signature;
}

SignatureLookup Lookup(const SignatureInfo& signature) {
  return [&signature](absl::string_view name) -> absl::StatusOr<const SignatureInfo*> {
    if (!name.empty() && name != signature.key) {
      return absl::FailedPreconditionError("Serving signature key not found.");
    }
    return &signature;
  };
}

TEST(JsonTensorTest, RowFormScalarsGetABatchDimension) {
  const auto signature = OneInput(DType::kFloat32);
  auto request = ParsePredictRequest(R"({"instances": [1.0, 2, 5.0]})", Lookup(signature));
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->format, JsonFormat::kRow);
  const Tensor& x = request->inputs.at("x");
  EXPECT_TRUE(TensorsEqual(x, Tensor::FromVector<float>({1, 2, 5})));
}

TEST(JsonTensorTest, RowFormNestedListsKeepTheirShape) {
  const auto signature = OneInput(DType::kInt32);
  auto request = ParsePredictRequest(R"({"instances": [[1, 2], [3, 4], [5, 6]]})",
                                     Lookup(signature));
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->inputs.at("x").shape(), (Shape{3, 2}));
  EXPECT_EQ(request->inputs.at("x").data<int32_t>()[5], 6);
}

TEST(JsonTensorTest, RaggedListsAreRejected) {
  const auto signature = OneInput(DType::kFloat32);
  auto request = ParsePredictRequest(R"({"instances": [[1, 2], [3]]})", Lookup(signature));
  ASSERT_FALSE(request.ok());
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(request.status().message(), HasSubstr("ragged"));
  auto columnar = ParsePredictRequest(R"({"inputs": [[1, 2], [3, [4]]]})", Lookup(signature));
  ASSERT_FALSE(columnar.ok());
  EXPECT_THAT(columnar.status().message(), HasSubstr("input 'x'"));
}

TEST(JsonTensorTest, NamedMultiInputRows) {
  SignatureInfo signature;
  signature.key = "serving_default";
  signature.input_keys = {"tag", "value"};
  signature.inputs["tag"] = Info(DType::kString, {-1});
  signature.inputs["value"] = Info(DType::kInt64, {-1, 2});
  auto request = ParsePredictRequest(
      R"({"signature_name": "serving_default", "instances": [
           {"tag": "a", "value": [1, 9007199254740993]},
           {"tag": {"b64": "aGVsbG8="}, "value": [-3, 4]}]})",
      Lookup(signature));
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->signature_name, "serving_default");
  const Tensor& tag = request->inputs.at("tag");
  EXPECT_EQ(tag.shape(), (Shape{2}));
  EXPECT_EQ(tag.data<std::string>()[0], "a");
  EXPECT_EQ(tag.data<std::string>()[1], "hello");
  const Tensor& value = request->inputs.at("value");
  EXPECT_EQ(value.shape(), (Shape{2, 2}));
  // 2^53 + 1 is not representable as a double: int64 must not pass through one.
  EXPECT_EQ(value.data<int64_t>()[1], 9007199254740993LL);
}

TEST(JsonTensorTest, RowsMustNameTheSameInputs) {
  SignatureInfo signature;
  signature.key = "serving_default";
  signature.input_keys = {"a", "b"};
  signature.inputs["a"] = Info(DType::kFloat32, {-1});
  signature.inputs["b"] = Info(DType::kFloat32, {-1});
  auto request =
      ParsePredictRequest(R"({"instances": [{"a": 1, "b": 2}, {"a": 1, "c": 2}]})",
                          Lookup(signature));
  ASSERT_FALSE(request.ok());
  EXPECT_THAT(request.status().message(), HasSubstr("'c'"));
}

TEST(JsonTensorTest, ColumnarFormTakesShapesFromNesting) {
  const auto signature = OneInput(DType::kFloat64);
  auto request = ParsePredictRequest(R"({"inputs": {"x": [[1.5], [2.5]]}})", Lookup(signature));
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->format, JsonFormat::kColumnar);
  EXPECT_EQ(request->inputs.at("x").shape(), (Shape{2, 1}));
  auto bare = ParsePredictRequest(R"({"inputs": 7})", Lookup(signature));
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->inputs.at("x").rank(), 0);
}

TEST(JsonTensorTest, NanAndInfinityAreAcceptedAsTfServingDoes) {
  const auto signature = OneInput(DType::kFloat32);
  auto request = ParsePredictRequest(R"({"instances": [NaN, Infinity, -Infinity, 1]})",
                                     Lookup(signature));
  ASSERT_TRUE(request.ok()) << request.status();
  const float* x = request->inputs.at("x").data<float>();
  EXPECT_TRUE(std::isnan(x[0]));
  EXPECT_EQ(x[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(x[2], -std::numeric_limits<float>::infinity());
  // Inside strings the words are text.
  const auto strings = OneInput(DType::kString);
  auto text = ParsePredictRequest(R"({"instances": ["NaN", "-Infinity"]})", Lookup(strings));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->inputs.at("x").data<std::string>()[1], "-Infinity");
}

TEST(JsonTensorTest, TypeErrorsNameTheInput) {
  const auto signature = OneInput(DType::kInt32);
  auto fraction = ParsePredictRequest(R"({"instances": [1.5]})", Lookup(signature));
  ASSERT_FALSE(fraction.ok());
  EXPECT_THAT(fraction.status().message(), HasSubstr("input 'x': expected an integer"));
  auto overflow = ParsePredictRequest(R"({"instances": [3000000000]})", Lookup(signature));
  ASSERT_FALSE(overflow.ok());
  EXPECT_THAT(overflow.status().message(), HasSubstr("out of range"));
  auto text = ParsePredictRequest(R"({"instances": ["1"]})", Lookup(signature));
  EXPECT_FALSE(text.ok());
}

TEST(JsonTensorTest, MalformedBodies) {
  const auto signature = OneInput(DType::kFloat32);
  for (const char* body : {"", "{", "[1]", R"({"instances": [1], "inputs": [1]})", "{}",
                           R"({"instances": 1})", R"({"instances": []})",
                           R"({"instances": [{"b64": 1}]})", R"({"instances": [{"y": 1}]})"}) {
    auto request = ParsePredictRequest(body, Lookup(signature));
    EXPECT_FALSE(request.ok()) << body;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << body;
  }
  auto missing = ParsePredictRequest("{}", Lookup(signature));
  EXPECT_EQ(missing.status().message(), "Missing 'inputs' or 'instances' key");
  auto unknown_signature =
      ParsePredictRequest(R"({"signature_name": "nope", "instances": [1]})", Lookup(signature));
  EXPECT_EQ(unknown_signature.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JsonTensorTest, PredictionsMirrorTheRequestForm) {
  std::map<std::string, Tensor> outputs = {
      {"y", Tensor::FromVector<float>({2.5f, 3.0f, 4.5f}, Shape{3, 1})}};
  auto row = WritePredictResponse(outputs, {"y"}, JsonFormat::kRow);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(*row, R"({"predictions": [[2.5], [3.0], [4.5]]})");
  auto columnar = WritePredictResponse(outputs, {"y"}, JsonFormat::kColumnar);
  EXPECT_EQ(*columnar, R"({"outputs": [[2.5], [3.0], [4.5]]})");

  outputs["id"] = Tensor::FromVector<int64_t>({1, 2, 3});
  auto multi = WritePredictResponse(outputs, {"y", "id"}, JsonFormat::kRow);
  EXPECT_EQ(*multi,
            R"({"predictions": [{"y": [2.5], "id": 1}, {"y": [3.0], "id": 2}, )"
            R"({"y": [4.5], "id": 3}]})");
  outputs["id"] = Tensor::FromVector<int64_t>({1, 2});
  auto inconsistent = WritePredictResponse(outputs, {"y", "id"}, JsonFormat::kRow);
  ASSERT_FALSE(inconsistent.ok());
  EXPECT_THAT(inconsistent.status().message(), HasSubstr("inconsistent batch size"));
}

TEST(JsonTensorTest, FloatsKeepFloatPrecisionAndNonFiniteTokens) {
  std::string out;
  AppendFloatJson(0.1f, &out);
  EXPECT_EQ(out, "0.1");  // not 0.10000000149011612
  out.clear();
  AppendFloatJson(std::numeric_limits<float>::quiet_NaN(), &out);
  out.push_back(' ');
  AppendFloatJson(-std::numeric_limits<float>::infinity(), &out);
  EXPECT_EQ(out, "NaN -Infinity");
  out.clear();
  AppendDoubleJson(0.1, &out);
  EXPECT_EQ(out, "0.1");
}

TEST(JsonTensorTest, BytesOutputsAreBase64) {
  Tensor strings(DType::kString, Shape{1});
  strings.data<std::string>()[0] = std::string("\x00\xff", 2);
  std::map<std::string, Tensor> outputs = {{"image_bytes", strings}, {"label", strings}};
  auto out = WritePredictResponse(outputs, {"image_bytes", "label"}, JsonFormat::kColumnar);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "{\"outputs\": {\"image_bytes\": [{\"b64\": \"AP8=\"}], \"label\": "
                  "[\"\\u0000\xff\"]}}");
}

TEST(JsonTensorTest, ExamplesWithContext) {
  auto request = ParseExamplesRequest(R"({
    "signature_name": "classify_x_to_y",
    "context": {"country": "fr"},
    "examples": [{"x": 1.5, "ids": [1, 2], "img": {"b64": "AP8="}}, {"x": [2, 3.5]}]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->signature_name, "classify_x_to_y");
  ASSERT_TRUE(request->has_context);
  EXPECT_EQ(request->context.features().feature().at("country").bytes_list().value(0), "fr");
  ASSERT_EQ(request->examples.size(), 2u);
  const auto& first = request->examples[0].features().feature();
  EXPECT_EQ(first.at("x").float_list().value(0), 1.5f);
  EXPECT_EQ(first.at("ids").int64_list().value_size(), 2);
  EXPECT_EQ(first.at("img").bytes_list().value(0), std::string("\x00\xff", 2));
  EXPECT_EQ(request->examples[1].features().feature().at("x").float_list().value(1), 3.5f);
  EXPECT_FALSE(ParseExamplesRequest(R"({"examples": [{"x": ["a", 1]}]})").ok());
  EXPECT_FALSE(ParseExamplesRequest(R"({"context": {}})").ok());
}

TEST(JsonTensorTest, KServeV2InferRequest) {
  const auto signature = OneInput(DType::kFloat32);
  auto request = ParseV2InferRequest(
      R"({"id": "42", "inputs": [{"name": "x", "shape": [2, 1], "datatype": "FP32",
          "data": [1, 2]}], "outputs": [{"name": "y"}]})",
      signature);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->id, "42");
  EXPECT_EQ(request->inputs.at("x").shape(), (Shape{2, 1}));
  EXPECT_EQ(request->requested_outputs, std::vector<std::string>{"y"});
  auto wrong_count = ParseV2InferRequest(
      R"({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]})",
      signature);
  EXPECT_FALSE(wrong_count.ok());
  auto wrong_type = ParseV2InferRequest(
      R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1]}]})",
      signature);
  EXPECT_FALSE(wrong_type.ok());
}

// A declared shape is a number; the data is what the client sent. Disagreement is the
// client's error, found before anything is allocated for the declared shape.
TEST(JsonTensorTest, KServeV2DeclaredShapeMustMatchTheData) {
  const auto signature = OneInput(DType::kFloat32);
  for (const char* shape : {"[1073741824, 16]", "[4294967296, 4294967296]",
                            "[4611686018427387904, 4]", "[9223372036854775807, 2]"}) {
    auto request = ParseV2InferRequest(absl::StrCat(R"({"inputs": [{"name": "x", "shape": )", shape,
                                                    R"(, "datatype": "FP32", "data": []}]})"),
                                       signature);
    ASSERT_FALSE(request.ok()) << shape;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << shape;
    EXPECT_THAT(request.status().message(), HasSubstr("declared shape and data size disagree"));
  }
  auto empty = ParseV2InferRequest(
      R"({"inputs": [{"name": "x", "shape": [0, 1], "datatype": "FP32", "data": []}]})", signature);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->inputs.at("x").shape(), (Shape{0, 1}));
}

// TF Serving (RapidJSON's FindMember) takes the first of duplicated keys; the last would let a
// proxy that checks the first key and Kiln disagree on what a request asks for.
TEST(JsonTensorTest, DuplicatedKeysTakeTheFirst) {
  const SignatureInfo signature = OneInput(DType::kFloat32);
  auto columnar = ParsePredictRequest(
      R"({"inputs": {"x": [[1.0]], "x": [[2.0], [3.0]]}, "inputs": {"x": [[9.0]]}})",
      Lookup(signature));
  ASSERT_TRUE(columnar.ok()) << columnar.status();
  EXPECT_EQ(columnar->inputs.at("x").shape(), (Shape{1, 1}));
  EXPECT_EQ(columnar->inputs.at("x").data<float>()[0], 1.0f);

  auto rows = ParsePredictRequest(
      R"({"signature_name": "serving_default", "signature_name": "other",
          "instances": [{"x": [1.0], "x": [7.0]}, {"x": [2.0]}]})",
      Lookup(signature));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->signature_name, "serving_default");
  EXPECT_EQ(rows->inputs.at("x").data<float>()[0], 1.0f);
  EXPECT_EQ(rows->inputs.at("x").data<float>()[1], 2.0f);

  auto examples = ParseExamplesRequest(
      R"({"examples": [{"f": [1.0], "f": [2.0, 3.0]}], "examples": [],
          "signature_name": "a", "signature_name": "b"})");
  ASSERT_TRUE(examples.ok()) << examples.status();
  EXPECT_EQ(examples->signature_name, "a");
  ASSERT_EQ(examples->examples.size(), 1u);
  const auto& feature = examples->examples[0].features().feature().at("f");
  ASSERT_EQ(feature.float_list().value_size(), 1);
  EXPECT_EQ(feature.float_list().value(0), 1.0f);
}

}  // namespace
}  // namespace kiln::serving
