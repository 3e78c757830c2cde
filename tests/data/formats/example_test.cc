#include "kiln/data/formats/example.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kiln/data/formats/functions.h"
#include "tensorflow/core/example/example.pb.h"

namespace kiln::data::formats {
namespace {

using Kind = FeatureSpec::Kind;

std::string MakeExample(float score, const std::vector<int64_t>& ids, const std::string& name,
                        const std::vector<float>& vec, bool with_score = true) {
  tensorflow::Example example;
  auto& features = *example.mutable_features()->mutable_feature();
  if (with_score) features["score"].mutable_float_list()->add_value(score);
  for (int64_t id : ids) features["ids"].mutable_int64_list()->add_value(id);
  features["name"].mutable_bytes_list()->add_value(name);
  for (float v : vec) features["vec"].mutable_float_list()->add_value(v);
  features["unrelated"].mutable_bytes_list()->add_value("ignored");
  return example.SerializeAsString();
}

Tensor Strings(const std::vector<std::string>& values) { return Tensor::FromVector(values); }

ExampleSpec MixedSpec() {
  ExampleSpec spec;
  spec.features.push_back(
      FeatureSpec::FixedLen("score", DType::kFloat32, {}, Tensor::Scalar(-1.f)));
  spec.features.push_back(FeatureSpec::VarLen("ids", DType::kInt64));
  spec.features.push_back(FeatureSpec::FixedLen("name", DType::kString));
  spec.features.push_back(FeatureSpec::FixedLen("vec", DType::kFloat32, {2}));
  spec.features.push_back(FeatureSpec::Ragged("ids_ragged", DType::kInt64));
  return spec;
}

TEST(ParseExampleTest, OutputNamesInDocumentedOrder) {
  EXPECT_EQ(
      MixedSpec().OutputNames(),
      (std::vector<std::string>{"score", "ids/indices", "ids/values", "ids/dense_shape", "name",
                                "vec", "ids_ragged/values", "ids_ragged/row_splits"}));
}

TEST(ParseExampleTest, SingleExample) {
  ExampleSpec spec = MixedSpec();
  const std::string bytes = MakeExample(0.5f, {7, -3, 1LL << 40}, "cat", {1.5f, 2.5f});
  auto out = ParseExamples(Tensor::Scalar(bytes), spec);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 8u);
  EXPECT_TRUE(TensorsEqual((*out)[0], Tensor::Scalar(0.5f)));
  EXPECT_TRUE(TensorsEqual((*out)[1], Tensor::FromVector<int64_t>({0, 1, 2}, Shape{3, 1})));
  EXPECT_TRUE(TensorsEqual((*out)[2], Tensor::FromVector<int64_t>({7, -3, 1LL << 40})));
  EXPECT_TRUE(TensorsEqual((*out)[3], Tensor::FromVector<int64_t>({3})));
  EXPECT_TRUE(TensorsEqual((*out)[4], Tensor::Scalar(std::string("cat"))));
  EXPECT_TRUE(TensorsEqual((*out)[5], Tensor::FromVector<float>({1.5f, 2.5f})));
  // "ids_ragged" is absent: an empty ragged row.
  EXPECT_EQ((*out)[6].num_elements(), 0);
  EXPECT_TRUE(TensorsEqual((*out)[7], Tensor::FromVector<int64_t>({0, 0})));
}

TEST(ParseExampleTest, BatchWithDefaultsSparseAndRagged) {
  ExampleSpec spec;
  spec.features.push_back(
      FeatureSpec::FixedLen("score", DType::kFloat32, {}, Tensor::Scalar(-1.f)));
  spec.features.push_back(FeatureSpec::VarLen("ids", DType::kInt64));
  spec.features.push_back(FeatureSpec::Ragged("name", DType::kString));
  Tensor batch = Strings({MakeExample(1.f, {1, 2}, "a", {}), MakeExample(0, {}, "b", {}, false),
                          MakeExample(3.f, {5, 6, 7}, "c", {})});
  auto out = ParseExamples(batch, spec);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(TensorsEqual((*out)[0], Tensor::FromVector<float>({1.f, -1.f, 3.f})));
  EXPECT_TRUE(TensorsEqual(
      (*out)[1], Tensor::FromVector<int64_t>({0, 0, 0, 1, 2, 0, 2, 1, 2, 2}, Shape{5, 2})));
  EXPECT_TRUE(TensorsEqual((*out)[2], Tensor::FromVector<int64_t>({1, 2, 5, 6, 7})));
  EXPECT_TRUE(TensorsEqual((*out)[3], Tensor::FromVector<int64_t>({3, 3})));
  EXPECT_TRUE(TensorsEqual((*out)[4], Strings({"a", "b", "c"})));
  EXPECT_TRUE(TensorsEqual((*out)[5], Tensor::FromVector<int64_t>({0, 1, 2, 3})));
}

TEST(ParseExampleTest, FixedLenMatrixAndBroadcastDefault) {
  ExampleSpec spec;
  spec.features.push_back(
      FeatureSpec::FixedLen("m", DType::kInt64, {2, 2}, Tensor::Scalar<int64_t>(9)));
  tensorflow::Example example;
  for (int64_t v : {1, 2, 3, 4}) {
    (*example.mutable_features()->mutable_feature())["m"].mutable_int64_list()->add_value(v);
  }
  Tensor batch = Strings({example.SerializeAsString(), tensorflow::Example().SerializeAsString()});
  auto out = ParseExamples(batch, spec);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(TensorsEqual((*out)[0],
                           Tensor::FromVector<int64_t>({1, 2, 3, 4, 9, 9, 9, 9}, Shape{2, 2, 2})));
}

TEST(ParseExampleTest, AcceptsWhatProtobufAccepts) {
  // Unpacked repeated numbers, a list split over two merged Feature messages, a duplicated map
  // key (the last entry wins) and a oneof member replaced by a later one.
  auto varint = [](uint64_t v) {
    std::string s;
    while (v >= 0x80) {
      s.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    s.push_back(static_cast<char>(v));
    return s;
  };
  auto field = [&](int number, int wire_type, const std::string& payload) {
    std::string s = varint(static_cast<uint64_t>(number << 3 | wire_type));
    if (wire_type == 2) s += varint(payload.size());
    return s + payload;
  };
  auto entry = [&](const std::string& key, const std::string& feature) {
    return field(1, 2, field(1, 2, key) + field(2, 2, feature));
  };
  const std::string unpacked_ints = field(3, 2, field(1, 0, varint(5)) + field(1, 0, varint(6)));
  const std::string more_ints = field(3, 2, field(1, 2, varint(7)));
  const std::string float_bits("\x00\x00\x80\x3f", 4);  // 1.0f
  const std::string unpacked_float = field(2, 2, field(1, 5, float_bits));
  const std::string features =
      entry("x", field(1, 2, field(1, 2, "old"))) /* the later "x" wins */ +
      entry("x", unpacked_ints + more_ints) +
      entry("y", field(1, 2, field(1, 2, "z")) + unpacked_float);
  const std::string bytes = field(1, 2, features);

  tensorflow::Example reference;
  ASSERT_TRUE(reference.ParseFromString(bytes));
  const auto& x = reference.features().feature().at("x").int64_list().value();
  ASSERT_EQ(std::vector<int64_t>(x.begin(), x.end()), (std::vector<int64_t>{5, 6, 7}));
  ASSERT_EQ(reference.features().feature().at("y").kind_case(), tensorflow::Feature::kFloatList);

  ExampleSpec spec;
  spec.features.push_back(FeatureSpec::FixedLen("x", DType::kInt64, {3}));
  spec.features.push_back(FeatureSpec::FixedLen("y", DType::kFloat32));
  auto out = ParseExamples(Tensor::Scalar(bytes), spec);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(TensorsEqual((*out)[0], Tensor::FromVector<int64_t>({5, 6, 7})));
  EXPECT_TRUE(TensorsEqual((*out)[1], Tensor::Scalar(1.f)));
}

TEST(ParseExampleTest, MissingRequiredFeatureNamesFeatureAndExample) {
  ExampleSpec spec;
  spec.features.push_back(FeatureSpec::FixedLen("score", DType::kFloat32));
  Tensor batch = Strings({MakeExample(1.f, {}, "a", {}), MakeExample(0, {}, "b", {}, false)});
  auto out = ParseExamples(batch, spec);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(out.status()));
  EXPECT_TRUE(absl::StrContains(out.status().message(), "\"score\" in example 1")) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "missing")) << out.status();
}

TEST(ParseExampleTest, WrongTypeAndWrongLengthNameTheFeature) {
  ExampleSpec wrong_type;
  wrong_type.features.push_back(FeatureSpec::FixedLen("name", DType::kInt64));
  auto out = ParseExamples(Tensor::Scalar(MakeExample(1, {}, "a", {})), wrong_type);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "\"name\"")) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "bytes_list")) << out.status();

  ExampleSpec wrong_length;
  wrong_length.features.push_back(FeatureSpec::FixedLen("vec", DType::kFloat32, {3}));
  out = ParseExamples(Tensor::Scalar(MakeExample(1, {}, "a", {1, 2})), wrong_length);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "\"vec\" has 2 values")) << out.status();
}

TEST(ParseExampleTest, MalformedBytesAndBadSpecsAreErrors) {
  ExampleSpec spec;
  spec.features.push_back(FeatureSpec::VarLen("ids", DType::kInt64));
  const std::string good = MakeExample(1, {1, 2, 3}, "a", {});
  for (size_t cut = 1; cut < good.size(); ++cut) {
    tensorflow::Example reference;
    const bool protobuf_ok = reference.ParseFromString(good.substr(0, cut));
    auto out = ParseExamples(Tensor::Scalar(good.substr(0, cut)), spec);
    EXPECT_EQ(out.ok(), protobuf_ok) << "cut " << cut;
  }
  auto out = ParseExamples(Tensor::Scalar(std::string("\xff\xff\xff", 3)), spec);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "not a valid serialized tf.Example"));

  ExampleSpec bad;
  bad.features.push_back(FeatureSpec::FixedLen("x", DType::kInt32));
  EXPECT_FALSE(ParseExamples(Tensor::Scalar(good), bad).ok());
  ExampleSpec bad_default;
  bad_default.features.push_back(
      FeatureSpec::FixedLen("x", DType::kFloat32, {3}, Tensor::FromVector<float>({1, 2})));
  EXPECT_FALSE(ParseExamples(Tensor::Scalar(good), bad_default).ok());
  EXPECT_FALSE(ParseExamples(Tensor::Scalar(1.f), spec).ok());
}

}  // namespace
}  // namespace kiln::data::formats

namespace kiln::data::formats {
namespace {

TEST(ParseExampleFnTest, SplicesOutputsAndNamesThem) {
  tensorflow::Example example;
  (*example.mutable_features()->mutable_feature())["label"].mutable_int64_list()->add_value(4);
  ExampleSpec spec;
  spec.features.push_back(FeatureSpec::FixedLen("label", DType::kInt64));
  spec.features.push_back(FeatureSpec::VarLen("tags", DType::kString));
  const std::string bytes = example.SerializeAsString();
  auto out = ParseExampleFn(spec)(Element({Tensor::Scalar(bytes), Tensor::Scalar(1.f)}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 5u);
  EXPECT_EQ(*out->names, (std::vector<std::string>{"label", "tags/indices", "tags/values",
                                                   "tags/dense_shape", "component_1"}));
  EXPECT_TRUE(TensorsEqual((*out)[out->IndexOf("label")], Tensor::Scalar<int64_t>(4)));
  // A batch of the same example.
  auto batch = ParseExampleFn(spec)(Element({Tensor::FromVector<std::string>({bytes, bytes})}));
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(TensorsEqual((*batch)[0], Tensor::FromVector<int64_t>({4, 4})));
}

}  // namespace
}  // namespace kiln::data::formats

namespace kiln::data::formats {
namespace {

// Random Examples built with protobuf, parsed as a batch, compared value by value with what
// the protobuf accessors return.
TEST(ParseExampleTest, RandomExamplesAgreeWithProtobuf) {
  std::mt19937 rng(5);
  const int kExamples = 40;
  std::vector<tensorflow::Example> examples(kExamples);
  std::vector<std::string> serialized;
  for (auto& example : examples) {
    auto& map = *example.mutable_features()->mutable_feature();
    for (int f = 0; f < 3; ++f) {
      const std::string key = "k" + std::to_string(f);
      const int n = static_cast<int>(rng() % 6);
      if (rng() % 5 == 0) continue;  // absent
      for (int i = 0; i < n; ++i) {
        if (f == 0) map[key].mutable_float_list()->add_value(static_cast<float>(rng() % 1000) / 7);
        if (f == 1)
          map[key].mutable_int64_list()->add_value(static_cast<int64_t>(rng()) - (1LL << 31));
        if (f == 2) map[key].mutable_bytes_list()->add_value(std::string(rng() % 20, 'a' + i));
      }
      if (n == 0 && f == 0) map[key].mutable_float_list();  // present but empty
    }
    serialized.push_back(example.SerializeAsString());
  }
  ExampleSpec spec;
  spec.features = {FeatureSpec::VarLen("k0", DType::kFloat32),
                   FeatureSpec::Ragged("k1", DType::kInt64),
                   FeatureSpec::VarLen("k2", DType::kString)};
  auto out = ParseExamples(Tensor::FromVector(serialized), spec);
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& k0_indices = (*out)[0];
  const Tensor& k0_values = (*out)[1];
  const Tensor& k1_values = (*out)[3];
  const Tensor& k1_splits = (*out)[4];
  const Tensor& k2_values = (*out)[6];
  int64_t i0 = 0, i2 = 0;
  for (int e = 0; e < kExamples; ++e) {
    const auto& map = examples[e].features().feature();
    auto get = [&](const std::string& key) -> const tensorflow::Feature* {
      auto it = map.find(key);
      return it == map.end() ? nullptr : &it->second;
    };
    if (const auto* f = get("k0")) {
      for (int i = 0; i < f->float_list().value_size(); ++i, ++i0) {
        ASSERT_EQ(k0_indices.data<int64_t>()[2 * i0], e);
        ASSERT_EQ(k0_indices.data<int64_t>()[2 * i0 + 1], i);
        ASSERT_EQ(k0_values.data<float>()[i0], f->float_list().value(i));
      }
    }
    const int64_t begin = k1_splits.data<int64_t>()[e], end = k1_splits.data<int64_t>()[e + 1];
    const auto* f1 = get("k1");
    ASSERT_EQ(end - begin, f1 ? f1->int64_list().value_size() : 0) << e;
    for (int64_t i = begin; i < end; ++i) {
      ASSERT_EQ(k1_values.data<int64_t>()[i], f1->int64_list().value(static_cast<int>(i - begin)));
    }
    if (const auto* f = get("k2")) {
      for (int i = 0; i < f->bytes_list().value_size(); ++i, ++i2) {
        ASSERT_EQ(k2_values.data<std::string>()[i2], f->bytes_list().value(i));
      }
    }
  }
  EXPECT_EQ(i0, k0_values.num_elements());
  EXPECT_EQ(i2, k2_values.num_elements());
}

}  // namespace
}  // namespace kiln::data::formats
