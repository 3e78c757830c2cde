// :explain of tf.Example models against a running `kiln serve`: the TFX penguin (Keras) and
// Chicago taxi (Estimator) SavedModels of ../shared/testdata explain their features by name;
// the warmup data's median is the default baseline; several baselines are averaged.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/data/formats/tfrecord.h"
#include "serve_harness.h"
#include "tensorflow/core/example/example.pb.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace kiln::serving::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kTestdata = std::string(KILN_SHARED_DIR) + "/testdata";
const std::string kExamples = std::string(KILN_SOURCE_DIR) + "/examples/models";

// `"name": number` pairs of the first featureAttributions object after `from`.
std::map<std::string, double> Attributions(const std::string& body, size_t from = 0) {
  std::map<std::string, double> out;
  const size_t begin = body.find("\"featureAttributions\": {", from);
  if (begin == std::string::npos) return out;
  const size_t end = body.find('}', begin);
  const std::string object = body.substr(begin, end - begin);
  static const std::regex pair("\"([a-z_]+)\": (-?[0-9.eE+-]+)");
  for (std::sregex_iterator it(object.begin(), object.end(), pair), last; it != last; ++it) {
    out[(*it)[1]] = std::stod((*it)[2]);
  }
  return out;
}

double NumberAfter(const std::string& body, const std::string& key, size_t from = 0) {
  const size_t at = body.find("\"" + key + "\": ", from);
  EXPECT_NE(at, std::string::npos) << key << " in " << body;
  return at == std::string::npos ? 0 : std::stod(body.substr(at + key.size() + 4, 32));
}

tensorflow::Example Penguin(float culmen_length, float culmen_depth, float flipper, float mass) {
  tensorflow::Example e;
  auto& f = *e.mutable_features()->mutable_feature();
  f["culmen_length_mm"].mutable_float_list()->add_value(culmen_length);
  f["culmen_depth_mm"].mutable_float_list()->add_value(culmen_depth);
  f["flipper_length_mm"].mutable_float_list()->add_value(flipper);
  f["body_mass_g"].mutable_float_list()->add_value(mass);
  return e;
}

class ExplainExamplesE2ETest : public ::testing::Test {
 protected:
  // The server starts with the first test, not in SetUpTestSuite: a failure there makes
  // gtest report every test as skipped, which ctest counts as passing.
  void SetUp() override {
    if (server_ == nullptr) StartServer();
    ASSERT_NE(server_, nullptr) << "the server did not start";
  }
  static void StartServer() {
    const std::string dir = MakeTempDir("explain_examples");
    for (const char* model : {"penguin", "penguin_warm", "taxi"}) {
      fs::create_directories(dir + "/" + model);
    }
    fs::copy(kTestdata + "/models/tfx_penguin_keras", dir + "/penguin/1",
             fs::copy_options::recursive);
    fs::copy(kTestdata + "/models/tfx_penguin_keras", dir + "/penguin_warm/1",
             fs::copy_options::recursive);
    fs::copy(kTestdata + "/models/tfx_taxi_estimator_serving", dir + "/taxi/1",
             fs::copy_options::recursive);
    // Warmup data for penguin_warm: three predict requests whose per-feature medians are
    // the example kMedian below.
    fs::create_directories(dir + "/penguin_warm/1/assets.extra");
    auto writer = data::formats::RecordWriter::Open(
        dir + "/penguin_warm/1/assets.extra/tf_serving_warmup_requests",
        data::formats::Compression::kNone);
    ASSERT_TRUE(writer.ok()) << writer.status();
    const tensorflow::Example warm[] = {Penguin(0.2f, 0.3f, 0.4f, 0.5f),
                                        Penguin(0.4f, 0.5f, 0.6f, 0.7f),
                                        Penguin(0.6f, 0.7f, 0.8f, 0.9f)};
    for (const tensorflow::Example& e : warm) {
      // The penguin export's only signature is a predict one; its warmup is a predict log.
      tensorflow::serving::PredictionLog predict;
      auto* p = predict.mutable_predict_log()->mutable_request();
      p->mutable_model_spec()->set_name("penguin_warm");
      auto& input = (*p->mutable_inputs())["examples"];
      input.set_dtype(tensorflow::DT_STRING);
      input.mutable_tensor_shape()->add_dim()->set_size(1);
      input.add_string_val(e.SerializeAsString());
      ASSERT_TRUE((*writer)->Write(predict.SerializeAsString()).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
    std::ofstream(dir + "/models.config")
        << "model_config_list {\n"
        << "  config { name: \"penguin\" base_path: \"" << dir << "/penguin\" }\n"
        << "  config { name: \"penguin_warm\" base_path: \"" << dir << "/penguin_warm\" }\n"
        << "  config { name: \"taxi\" base_path: \"" << dir << "/taxi\" }\n"
        << "  config { name: \"half_plus_two\" base_path: \"" << kExamples
        << "/half_plus_two\" model_platform: \"onnx\" }\n}\n";
    auto server = std::make_unique<ServerProcess>(
        std::vector<std::string>{"serve", "--model_config_file=" + dir + "/models.config"});
    ASSERT_TRUE(server->WaitUntilServing()) << server->Log();
    server_ = server.release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  HttpReply Explain(const std::string& model, const std::string& body) {
    return HttpCall(server_->rest_port(), "POST", "/v1/models/" + model + ":explain", body);
  }
  static ServerProcess* server_;
};
ServerProcess* ExplainExamplesE2ETest::server_ = nullptr;

const char kPenguins[] =
    R"({"examples": [{"culmen_length_mm": 0.3, "culmen_depth_mm": 0.3, )"
    R"("flipper_length_mm": 0.3, "body_mass_g": 0.3}, {"culmen_length_mm": 0.9, )"
    R"("culmen_depth_mm": 0.2, "flipper_length_mm": 0.8, "body_mass_g": 0.7}]})";

TEST_F(ExplainExamplesE2ETest, PenguinExplainsItsFeaturesByName) {
  HttpReply reply = Explain("penguin", kPenguins);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_THAT(reply.body, HasSubstr("\"predictions\": [["));
  EXPECT_THAT(reply.body, HasSubstr("\"outputName\": \"output_0\""));
  size_t at = 0;
  for (int n = 0; n < 2; ++n) {
    at = reply.body.find("\"attributions\"", at + 1);
    const std::map<std::string, double> a = Attributions(reply.body, at);
    ASSERT_EQ(a.size(), 4u) << reply.body;
    EXPECT_TRUE(a.contains("culmen_length_mm") && a.contains("body_mass_g")) << reply.body;
    double sum = 0;
    for (const auto& [name, v] : a) sum += v;
    const double base = NumberAfter(reply.body, "baselineOutputValue", at);
    const double value = NumberAfter(reply.body, "instanceOutputValue", at);
    // Efficiency: exact per sample; the JSON has float precision. The instances are chosen
    // where the model is not saturated, so the sum is not trivially 0.
    EXPECT_GT(std::abs(value - base), 0.05) << reply.body;
    EXPECT_NEAR(sum, value - base, 1e-5) << reply.body;
  }
  EXPECT_EQ(Explain("penguin", kPenguins).body, reply.body) << "seeded: reproducible";
  // The same instances as serialized tf.Examples ({"b64": ...}) get the same answer.
  const std::string b64 = absl::Base64Escape(Penguin(0.3f, 0.3f, 0.3f, 0.3f).SerializeAsString());
  HttpReply serialized = Explain("penguin", R"({"instances": [{"b64": ")" + b64 + R"("}]})");
  ASSERT_EQ(serialized.status, 200) << serialized.body;
  EXPECT_EQ(Attributions(serialized.body), Attributions(reply.body));
}

TEST_F(ExplainExamplesE2ETest, WarmupMedianIsTheDefaultBaseline) {
  // The median example explains as nothing: every feature equals its baseline.
  HttpReply median =
      Explain("penguin_warm", R"({"examples": [{"culmen_length_mm": 0.4, "culmen_depth_mm": 0.5, )"
                              R"("flipper_length_mm": 0.6, "body_mass_g": 0.7}]})");
  ASSERT_EQ(median.status, 200) << median.body;
  EXPECT_EQ(NumberAfter(median.body, "baselineOutputValue"),
            NumberAfter(median.body, "instanceOutputValue"));
  for (const auto& [name, v] : Attributions(median.body)) EXPECT_EQ(v, 0.0) << name;
  // Without warmup data the baseline is zeros, which the same example is far from.
  HttpReply zeros =
      Explain("penguin", R"({"examples": [{"culmen_length_mm": 0.4, "culmen_depth_mm": 0.5, )"
                         R"("flipper_length_mm": 0.6, "body_mass_g": 0.7}]})");
  ASSERT_EQ(zeros.status, 200) << zeros.body;
  EXPECT_NE(NumberAfter(zeros.body, "baselineOutputValue"),
            NumberAfter(median.body, "baselineOutputValue"));
  // A baseline in the request replaces the warmup's, by feature name.
  HttpReply given =
      Explain("penguin_warm",
              R"({"examples": [{"culmen_length_mm": 0.4, "culmen_depth_mm": 0.5, )"
              R"("flipper_length_mm": 0.6, "body_mass_g": 0.7}], "explanationSpecOverride": )"
              R"({"metadata": {"inputs": )"
              R"({"body_mass_g": {"inputBaselines": [0.1]}}}}})");
  ASSERT_EQ(given.status, 200) << given.body;
  const std::map<std::string, double> a = Attributions(given.body);
  EXPECT_EQ(a.at("culmen_length_mm"), 0.0);
  EXPECT_NE(a.at("body_mass_g"), 0.0);
}

TEST_F(ExplainExamplesE2ETest, SeveralBaselinesAreAveraged) {
  // y = 0.5 x + 2 against baselines 2 and 4: 0.5 (x - 3), exactly.
  HttpReply reply =
      Explain("half_plus_two", R"({"instances": [[7.0]], "explanationSpecOverride": {"metadata": )"
                               R"({"inputs": {"x": {"inputBaselines": [[2.0], [4.0]]}}}}})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_THAT(reply.body, HasSubstr("\"x\": [2.0]"));
  EXPECT_EQ(NumberAfter(reply.body, "baselineOutputValue"), 3.5);
}

TEST_F(ExplainExamplesE2ETest, TaxiClassificationExplainsByFeatureName) {
  const std::string body =
      R"({"signature_name": "classification", "examples": [{"company": "Flash Cab", )"
      R"("payment_type": "Credit Card", "trip_miles": 5.2, "fare": 17.5, "trip_seconds": 1200, )"
      R"("trip_start_hour": 18, "trip_start_day": 5, "trip_start_month": 7, )"
      R"("pickup_latitude": 41.88, "pickup_longitude": -87.63, "dropoff_latitude": 41.97, )"
      R"("dropoff_longitude": -87.66, "pickup_community_area": 32, )"
      R"("dropoff_community_area": 6, "pickup_census_tract": 17031839100, )"
      R"("dropoff_census_tract": 17031063200, "trip_start_timestamp": 1420000000}]})";
  HttpReply reply = Explain("taxi", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_THAT(reply.body, HasSubstr("\"outputName\": \"scores\""));
  const std::map<std::string, double> a = Attributions(reply.body);
  EXPECT_EQ(a.size(), 17u) << reply.body;
  double sum = 0;
  for (const auto& [name, v] : a) sum += v;
  EXPECT_NEAR(sum,
              NumberAfter(reply.body, "instanceOutputValue") -
                  NumberAfter(reply.body, "baselineOutputValue"),
              1e-5)
      << reply.body;
  // A baseline an int64 feature cannot hold is the request's error, not a conversion.
  std::string huge = body;
  huge.replace(huge.rfind('}'), 1,
               R"(, "explanationSpecOverride": {"metadata": {"inputs": )"
               R"({"trip_seconds": {"inputBaselines": [1e30]}}}}})");
  HttpReply bad = Explain("taxi", huge);
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_THAT(bad.body, HasSubstr("not an integer"));
}

}  // namespace
}  // namespace kiln::serving::testing

namespace kiln::serving::testing {
namespace {

// :explain's model calls fit the batch size of the version they run on: its own
// batching_params.pbtxt (here 3), not the global parameters (here 100), which the batcher
// would refuse with "larger than maximum input batch size".
TEST(ExplainBatchingE2ETest, CallsFitThePerModelMaxBatchSize) {
  const std::string dir = MakeTempDir("explain_batching");
  fs::create_directories(dir + "/small");
  fs::copy(kExamples + "/half_plus_two/1", dir + "/small/1", fs::copy_options::recursive);
  std::ofstream(dir + "/small/1/batching_params.pbtxt") << "max_batch_size { value: 3 }\n";
  std::ofstream(dir + "/batching.config") << "max_batch_size { value: 100 }\n";
  std::ofstream(dir + "/models.config")
      << "model_config_list {\n  config { name: \"small\" base_path: \"" << dir
      << "/small\" model_platform: \"onnx\" }\n}\n";
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config",
                        "--enable_batching",
                        "--batching_parameters_file=" + dir + "/batching.config",
                        "--enable_per_model_batching_parameters"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  // 3 instances of one feature: 6 evaluations, run as 3 + 3 (the predictions themselves are
  // one call of 3: more instances would be refused as a :predict of them is).
  HttpReply reply = HttpCall(server.rest_port(), "POST", "/v1/models/small:explain",
                             R"({"instances": [[1.0], [2.0], [5.0]]})");
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_THAT(reply.body, HasSubstr("\"x\": [2.5]"));  // 0.5 * (5 - 0)
}

}  // namespace
}  // namespace kiln::serving::testing
