// Real exports by others (../shared/testdata/models): each loads, runs its signatures on
// well-formed inputs and returns outputs of the declared dtypes and shapes.
#include <cmath>
#include <filesystem>
#include <functional>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/import/saved_model.h"
#include "tensorflow/core/example/example.pb.h"
#include "test_util.h"

namespace kiln::import::tf {
namespace {

using testing::FindSignature;
using testing::ModelsDir;
using testing::RunSignature;

void ExpectRowsSumToOne(const Tensor& t) {
  ASSERT_EQ(t.dtype(), DType::kFloat32);
  ASSERT_EQ(t.rank(), 2);
  for (int64_t r = 0; r < t.dim(0); ++r) {
    float sum = 0;
    for (int64_t c = 0; c < t.dim(1); ++c) {
      const float p = t.data<float>()[r * t.dim(1) + c];
      EXPECT_GE(p, 0.f);
      sum += p;
    }
    EXPECT_NEAR(sum, 1.f, 1e-5f) << "row " << r;
  }
}

TEST(RealModelsTest, PenguinKerasParsesExamplesAndEndsInSoftmax) {
  auto model = ImportSavedModel(ModelsDir("tfx_penguin_keras"));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph* sig = FindSignature(*model, "serving_default");
  ASSERT_NE(sig, nullptr);
  Tensor examples(DType::kString, Shape{2});
  const std::vector<std::pair<const char*, float>> penguin = {
      {"culmen_length_mm", 0.5f}, {"culmen_depth_mm", 0.3f}, {"flipper_length_mm", 0.6f},
      {"body_mass_g", 0.4f}};
  for (int i = 0; i < 2; ++i) {
    tensorflow::Example e;
    for (const auto& [k, v] : penguin) {
      (*e.mutable_features()->mutable_feature())[k].mutable_float_list()->add_value(v * (i + 1));
    }
    examples.data<std::string>()[i] = e.SerializeAsString();
  }
  auto out = RunSignature(*sig, {examples});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 3}));
  ExpectRowsSumToOne((*out)[0]);
}

TEST(RealModelsTest, RustKerasMultiInputSharedSubmodel) {
  auto model = ImportSavedModel(ModelsDir("rust_keras_multi_input"));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph* sig = FindSignature(*model, "serving_default");
  ASSERT_NE(sig, nullptr);
  EXPECT_EQ(sig->input_keys, (std::vector<std::string>{"test_in1", "test_in2"}));  // sorted
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[i] = 0.1f * i;
  auto out = RunSignature(*sig, {Tensor::FromVector<float>(v, Shape{2, 5}),
                                 Tensor::FromVector<float>(v, Shape{2, 5})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 1}));
  for (float p : (*out)[0].span<float>()) {
    EXPECT_GT(p, 0.f);  // a sigmoid
    EXPECT_LT(p, 1.f);
  }
}

// Keras' LSTM(32) -> Dense(1, sigmoid) computed directly from the checkpoint's weights
// (gate order i, f, c, o; zero initial state), to check the imported StatelessWhile loop.
std::vector<float> ReferenceKerasLstm(const BundleReader& ckpt, const std::vector<float>& x,
                                      int batch, int steps, int features) {
  auto get = [&](const std::string& key) {
    auto t = ckpt.Lookup(key);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::vector<float>(t->span<float>().begin(), t->span<float>().end())
                  : std::vector<float>();
  };
  const std::vector<float> kernel = get("variables/0/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> recurrent = get("variables/1/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> bias = get("variables/2/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> dense_w = get("layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> dense_b = get("layer_with_weights-1/bias/.ATTRIBUTES/VARIABLE_VALUE");
  const int units = static_cast<int>(dense_w.size());
  EXPECT_EQ(kernel.size(), static_cast<size_t>(features * 4 * units));
  EXPECT_EQ(recurrent.size(), static_cast<size_t>(units * 4 * units));
  EXPECT_EQ(bias.size(), static_cast<size_t>(4 * units));
  if (kernel.size() != static_cast<size_t>(features * 4 * units) ||
      recurrent.size() != static_cast<size_t>(units * 4 * units) ||
      bias.size() != static_cast<size_t>(4 * units) || dense_b.size() != 1) {
    return {};
  }
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<float> out(batch);
  for (int b = 0; b < batch; ++b) {
    std::vector<double> h(units, 0.0), c(units, 0.0), z(4 * units);
    for (int t = 0; t < steps; ++t) {
      for (int j = 0; j < 4 * units; ++j) {
        double acc = bias[j];
        for (int k = 0; k < features; ++k) {
          acc += x[(b * steps + t) * features + k] * kernel[k * 4 * units + j];
        }
        for (int k = 0; k < units; ++k) acc += h[k] * recurrent[k * 4 * units + j];
        z[j] = acc;
      }
      for (int u = 0; u < units; ++u) {
        const double i = sigmoid(z[u]), f = sigmoid(z[units + u]);
        const double g = std::tanh(z[2 * units + u]), o = sigmoid(z[3 * units + u]);
        c[u] = f * c[u] + i * g;
        h[u] = o * std::tanh(c[u]);
      }
    }
    double y = dense_b[0];
    for (int u = 0; u < units; ++u) y += h[u] * dense_w[u];
    out[b] = static_cast<float>(sigmoid(y));
  }
  return out;
}

// The generic branch is a StatelessWhile over TensorList ops. (Importing it once crashed: the
// Fill converter held a pointer into the graph's value table across adding a constant.)
TEST(RealModelsTest, KerasLstmRunsItsGenericBranch) {
  auto model = ImportSavedModel(ModelsDir("tfnet_keras_lstm"));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph* sig = FindSignature(*model, "serving_default");
  ASSERT_NE(sig, nullptr);
  EXPECT_EQ(sig->input_keys, (std::vector<std::string>{"input_1"}));
  EXPECT_EQ(sig->output_keys, (std::vector<std::string>{"dense"}));
  EXPECT_EQ(sig->outputs.at("dense").dtype, DType::kFloat32);
  EXPECT_EQ(sig->outputs.at("dense").shape, (std::vector<int64_t>{-1, 1}));
  // The CudnnRNN branch is registered in the library but never reached from the signature.
  std::function<bool(const ir::Graph&)> has_cudnn = [&](const ir::Graph& g) {
    for (const auto& n : g.nodes()) {
      if (absl::StrContains(n.op, "Cudnn")) return true;
      for (const auto& [k, a] : n.attrs) {
        if (auto* sub = std::get_if<ir::GraphPtr>(&a); sub && *sub && has_cudnn(**sub)) return true;
      }
    }
    return false;
  };
  EXPECT_FALSE(has_cudnn(sig->graph));
  auto ckpt = BundleReader::Open(ModelsDir("tfnet_keras_lstm/variables/variables"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (int batch : {2, 1, 3}) {
    std::vector<float> x(batch * 5 * 3);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * i + batch);
    auto out = RunSignature(*sig, {Tensor::FromVector<float>(x, Shape{batch, 5, 3})});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    const Tensor& y = (*out)[0];
    EXPECT_EQ(y.dtype(), DType::kFloat32);
    ASSERT_EQ(y.shape(), (Shape{batch, 1}));
    const std::vector<float> want = ReferenceKerasLstm(**ckpt, x, batch, 5, 3);
    ASSERT_EQ(want.size(), static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) EXPECT_NEAR(y.data<float>()[b], want[b], 1e-5f) << b;
  }
}

TEST(RealModelsTest, FrozenLstmGraphDef) {
  FrozenGraphOptions options;
  options.outputs = {"output"};
  auto model = ImportFrozenGraph(ModelsDir("tf2onnx_lstm_frozen/frozen.pb"), options);
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph& sig = model->signatures[0];
  EXPECT_EQ(sig.input_keys, (std::vector<std::string>{"X", "keep_prob"}));
  std::vector<float> x(2 * 784);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 17) / 17.f;
  auto out = RunSignature(sig, {Tensor::FromVector<float>(x, Shape{2, 784}),
                                Tensor::Scalar<float>(1.f)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape().dim(0), 2);
  // keep_prob = 1 makes dropout the identity: two runs agree.
  auto again = RunSignature(sig, {Tensor::FromVector<float>(x, Shape{2, 784}),
                                  Tensor::Scalar<float>(1.f)});
  ASSERT_TRUE(again.ok());
  for (int64_t i = 0; i < (*out)[0].num_elements(); ++i) {
    EXPECT_EQ((*out)[0].data<float>()[i], (*again)[0].data<float>()[i]);
  }
  // Without naming outputs, the graph's sinks include "output".
  auto sinks = ImportFrozenGraph(ModelsDir("tf2onnx_lstm_frozen/frozen.pb"));
  ASSERT_TRUE(sinks.ok()) << sinks.status();
  const auto& keys = sinks->signatures[0].output_keys;
  EXPECT_NE(std::find(keys.begin(), keys.end(), "output"), keys.end());
}

// serving_default computes y = x + c where c waits (through control dependencies) on asserts
// over the results of nearly every TF-Text custom op, so TensorFlow runs them all and fails
// to load the model unless TF-Text is registered. Kiln cannot run them either: it must refuse
// the model and name them, not silently drop the checks.
TEST(RealModelsTest, TfTextCustomOpsFailWithUnsupportedOpError) {
  auto model = ImportSavedModel(ModelsDir("tfserving_tf_text_customops"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
  const std::string msg(model.status().message());
  for (const char* op : {"CaseFoldUTF8", "WhitespaceTokenizeWithOffsets",
                         "WordpieceTokenizeWithOffsets", "SentencepieceOp", "ConstrainedSequence",
                         "RougeL"}) {
    EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("'", op, "'"))) << op << ": " << msg;
  }
  EXPECT_TRUE(absl::StrContains(msg, "unsupported TensorFlow op")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "signature 'serving_default'")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "in function '__inference___call___")) << msg;
}

// The Chicago taxi features as each export parses them (VarLenFeatures: 's'tring, 'i'nt64,
// 'f'loat), in the order of the ParseExample sparse keys.
struct TaxiFeature {
  const char* name;
  double value;  // numbers; the census tracts are also written as strings where parsed so
};
constexpr TaxiFeature kTaxiFeatures[] = {
    {"company", 0},           {"dropoff_census_tract", 17031081500},
    {"dropoff_community_area", 8}, {"dropoff_latitude", 41.8993},
    {"dropoff_longitude", -87.6336}, {"fare", 9.25},
    {"payment_type", 0},      {"pickup_census_tract", 17031839100},
    {"pickup_community_area", 32}, {"pickup_latitude", 41.8850},
    {"pickup_longitude", -87.6428}, {"trip_miles", 1.8},
    {"trip_seconds", 600},    {"trip_start_day", 3},
    {"trip_start_hour", 14},  {"trip_start_month", 6},
    {"trip_start_timestamp", 1420000000}};

// Row r of a batch of taxi tf.Examples: values vary with r; row 2 leaves out the company and
// the dropoff place (optional features, as in the real data), row 1 has an unknown company.
std::string TaxiExample(const char* types, int r, const char* payment = nullptr) {
  tensorflow::Example e;
  auto& features = *e.mutable_features()->mutable_feature();
  const char* companies[] = {"Taxi Affiliation Services", "No Such Cab Co", "Flash Cab"};
  const char* payments[] = {"Cash", "Credit Card", "No Charge"};
  for (int f = 0; f < 17; ++f) {
    const TaxiFeature& feature = kTaxiFeatures[f];
    const std::string name = feature.name;
    if (r == 2 && (name == "company" || absl::StartsWith(name, "dropoff"))) continue;
    tensorflow::Feature& out = features[name];
    const double v = feature.value * (1.0 + 0.01 * r) + (name == "trip_start_hour" ? r : 0);
    switch (types[f]) {
      case 's':
        if (name == "company") {
          out.mutable_bytes_list()->add_value(companies[r % 3]);
        } else if (name == "payment_type") {
          out.mutable_bytes_list()->add_value(payment != nullptr ? payment : payments[r % 3]);
        } else {
          out.mutable_bytes_list()->add_value(std::to_string(static_cast<int64_t>(v)));
        }
        break;
      case 'i': out.mutable_int64_list()->add_value(static_cast<int64_t>(v)); break;
      default: out.mutable_float_list()->add_value(static_cast<float>(v)); break;
    }
  }
  return e.SerializeAsString();
}

void ExpectDeclared(const SignatureGraph& sig, const std::string& key, const Tensor& t,
                    int64_t batch) {
  const TensorInfo& info = sig.outputs.at(key);
  EXPECT_EQ(t.dtype(), info.dtype) << sig.key << " " << key;
  ASSERT_TRUE(info.rank_known) << key;
  ASSERT_EQ(t.rank(), static_cast<int>(info.shape.size())) << sig.key << " " << key;
  for (int d = 0; d < t.rank(); ++d) {
    EXPECT_EQ(t.dim(d), info.shape[d] < 0 ? batch : info.shape[d]) << sig.key << " " << key;
  }
}

// Both wide-and-deep exports: the TF2.9 one creates its vocabulary tables inside functions
// and initializes them in others; the TF1.13 one feeds BucketizeWithInputBoundaries from
// Const -> ExpandDims. Every signature runs on tf.Examples; the head's outputs agree.
TEST(RealModelsTest, TaxiEstimatorsRunEverySignature) {
  const std::pair<const char*, std::string> exports[] = {
      {"tfx_taxi_estimator_serving", "siifffsiifffiiiii"},
      {"tfx_taxi_estimator_tf1_2019", "sfffffssiffffiiii"}};
  for (const auto& [name, types] : exports) {
    SCOPED_TRACE(name);
    ASSERT_EQ(types.size(), 17u);
    auto model = ImportSavedModel(ModelsDir(name));
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<std::string> keys;
    for (const auto& s : model->signatures) keys.push_back(s.key);
    EXPECT_EQ(keys, (std::vector<std::string>{"classification", "predict", "regression",
                                              "serving_default"}));
    const int64_t batch = 3;
    Tensor examples(DType::kString, Shape{batch});
    for (int r = 0; r < batch; ++r) examples.data<std::string>()[r] = TaxiExample(types.c_str(), r);
    std::map<std::string, std::map<std::string, Tensor>> results;
    for (const SignatureGraph& sig : model->signatures) {
      SCOPED_TRACE(sig.key);
      ASSERT_EQ(sig.input_keys.size(), 1u);
      auto out = RunSignature(sig, {examples});
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->size(), sig.output_keys.size());
      for (size_t i = 0; i < out->size(); ++i) {
        ExpectDeclared(sig, sig.output_keys[i], (*out)[i], batch);
        results[sig.key][sig.output_keys[i]] = (*out)[i];
      }
    }
    // Classification: two classes whose scores are a softmax-like distribution.
    for (const char* key : {"classification", "serving_default"}) {
      ExpectRowsSumToOne(results[key]["scores"]);
      const Tensor& classes = results[key]["classes"];
      for (int64_t r = 0; r < batch; ++r) {
        EXPECT_EQ(classes.data<std::string>()[r * 2], "0");
        EXPECT_EQ(classes.data<std::string>()[r * 2 + 1], "1");
      }
    }
    const auto& predict = results["predict"];
    const Tensor& probabilities = predict.at("probabilities");
    ExpectRowsSumToOne(probabilities);
    EXPECT_TRUE(TensorsAllClose(results["classification"]["scores"], probabilities, 1e-6, 1e-6));
    const Tensor& logistic = predict.at("logistic");
    const Tensor& logits = predict.at("logits");
    const Tensor& regression = results["regression"]["outputs"];
    const Tensor& class_ids = predict.at("class_ids");
    bool rows_differ = false;
    for (int64_t r = 0; r < batch; ++r) {
      const float p1 = probabilities.data<float>()[r * 2 + 1];
      EXPECT_NEAR(logistic.data<float>()[r], p1, 1e-6f);
      EXPECT_NEAR(regression.data<float>()[r], p1, 1e-6f);
      EXPECT_NEAR(1.f / (1.f + std::exp(-logits.data<float>()[r])), p1, 1e-5f);
      EXPECT_EQ(class_ids.data<int64_t>()[r], p1 > 0.5f ? 1 : 0);
      EXPECT_EQ(predict.at("classes").data<std::string>()[r], p1 > 0.5f ? "1" : "0");
      if (r > 0 && logits.data<float>()[r] != logits.data<float>()[0]) rows_differ = true;
    }
    EXPECT_TRUE(rows_differ) << "the features do not reach the logits";
    // The payment type goes through a vocabulary table from assets/ (created in one function
    // and filled in another in the TF2.9 export): the two known types must score differently,
    // which they could not if the lookup missed and both fell into the OOV bucket.
    Tensor by_payment(DType::kString, Shape{2});
    by_payment.data<std::string>()[0] = TaxiExample(types.c_str(), 0, "Cash");
    by_payment.data<std::string>()[1] = TaxiExample(types.c_str(), 0, "Credit Card");
    const SignatureGraph* regress = FindSignature(*model, "regression");
    auto paid = RunSignature(*regress, {by_payment});
    ASSERT_TRUE(paid.ok()) << paid.status();
    EXPECT_GT(std::abs((*paid)[0].data<float>()[0] - (*paid)[0].data<float>()[1]), 1e-4f)
        << (*paid)[0].DebugString();
    if (predict.count("all_class_ids")) {
      const Tensor& ids = predict.at("all_class_ids");
      for (int64_t r = 0; r < batch; ++r) {
        EXPECT_EQ(ids.data<int32_t>()[r * 2], 0);
        EXPECT_EQ(ids.data<int32_t>()[r * 2 + 1], 1);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::import::tf
