// TF Serving's own integration tests, ported test by test, run against the real `kiln serve` on
// TF Serving's testdata (../shared/testdata/tf_serving) with clients generated from TF Serving's
// protos. The source is tensorflow_serving/model_servers/tensorflow_model_server_test.py and
// test_util/tensorflow_model_server_test_base.py (tensorflow/serving at 9d981c5c, 2026-07-30);
// each test keeps its name there without the "test" prefix (testClassify -> Classify).
//
// Not applicable, each for the reason given:
//   testPredictOnTfLite, testPredictWithSignatureDefOnTfLite: TensorFlow Lite models; Kiln has
//     no TFLite runtime (a version with only model.tflite fails to load, saying so).
//   test_tf_saved_model_save, test_tf_saved_model_save_multiple_signatures,
//   test_sequential_keras_saved_model_save, test_distrat_sequential_keras_saved_model_save:
//     they build their model with TensorFlow's Python API in the test (no TensorFlow here and
//     nothing may be downloaded); TF2 SavedModels are served here by ClassifyTf2, RegressTf2,
//     MultiInferenceTf2 and GetModelMetadataGoldenTf2.
//   test_profiler_service_with_valid_trace_request: TensorFlow's profiler gRPC service
//     (tensorflow.ProfilerService, TF's runtime tracer) is not run by `kiln serve`
//     (--enable_profiler is accepted without effect; traces come from `kiln run --trace`).
//   test_tf_text: TF-Text ops (tf_text_regression model), not in Kiln's op set.
//   _TestBadModel / _TestBadModelUpconvertedSavedModel: helpers that no test calls in TF
//     Serving (no "test" prefix), so not part of its suite.
// Added: PredictBatching (testPredictBatching, in TF Serving's file until 2019), and from TF
// Serving's C++ tests:
//   Counter: predict_impl_test.cc's PredictionWithCustomizedSignatures on saved_model_counter
//     (state kept per loaded version across requests).
//   GetModelMetadataGolden*: http_rest_api_handler_test.cc's GetModelMetadata against TF
//     Serving's golden files for the TF1 and TF2 half_plus_two exports.
#include <grpcpp/grpcpp.h>
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "serve_harness.h"
#include "tensorflow_serving/apis/classification.pb.h"
#include "tensorflow_serving/apis/get_model_metadata.pb.h"
#include "tensorflow_serving/apis/get_model_status.pb.h"
#include "tensorflow_serving/apis/inference.pb.h"
#include "tensorflow_serving/apis/regression.pb.h"

namespace kiln::serving::testing {
namespace {

namespace fs = std::filesystem;
using tensorflow::serving::ModelSpec;
using ::testing::HasSubstr;

const std::string kTestdata = std::string(KILN_SHARED_DIR) + "/testdata/tf_serving";

// tensorflow_model_server_test.py's RPC_TIMEOUT, and the base's (VerifyPredictRequest).
constexpr double kRpcTimeout = 20.0;
constexpr double kPredictRpcTimeout = 5.0;
// The base's HTTP_REST_TIMEOUT_MS and WAIT_FOR_SERVER_READY_INT_SECS.
constexpr int kHttpRestTimeoutMs = 5000;
constexpr int kWaitForServerReadySecs = 60;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

std::unique_ptr<grpc::ClientContext> Context(double timeout_s) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  return context;
}

std::shared_ptr<grpc::Channel> InsecureChannel(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// The JSON value as one string in which equal documents (as Python's json.loads and == see
// them: object keys unordered, 3 == 3.0) are equal strings. `sort_lists` also sorts arrays,
// as the base's SortedObject does.
std::string Canonical(simdjson::dom::element value, bool sort_lists) {
  switch (value.type()) {
    case simdjson::dom::element_type::OBJECT: {
      std::vector<std::string> members;
      const simdjson::dom::object object = value.get_object().value_unsafe();
      for (auto [key, member] : object) {
        members.push_back(
            absl::StrCat("\"", std::string(key), "\":", Canonical(member, sort_lists)));
      }
      std::sort(members.begin(), members.end());
      return absl::StrCat("{", absl::StrJoin(members, ","), "}");
    }
    case simdjson::dom::element_type::ARRAY: {
      std::vector<std::string> items;
      const simdjson::dom::array array = value.get_array().value_unsafe();
      for (simdjson::dom::element item : array) {
        items.push_back(Canonical(item, sort_lists));
      }
      if (sort_lists) std::sort(items.begin(), items.end());
      return absl::StrCat("[", absl::StrJoin(items, ","), "]");
    }
    case simdjson::dom::element_type::STRING:
      return absl::StrCat("\"", std::string(value.get_string().value_unsafe()), "\"");
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
    case simdjson::dom::element_type::DOUBLE: {
      char text[32];
      std::snprintf(text, sizeof(text), "%.17g", value.get_double().value_unsafe());
      return text;
    }
    case simdjson::dom::element_type::BOOL:
      return value.get_bool().value_unsafe() ? "true" : "false";
    case simdjson::dom::element_type::NULL_VALUE:
      return "null";
  }
  return "?";
}

// Canonical(json) or, when it does not parse, a message that cannot equal a document.
std::string CanonicalJson(const std::string& json, bool sort_lists = false) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json).get(root) != simdjson::SUCCESS) return "<not JSON: " + json + ">";
  return Canonical(root, sort_lists);
}

// The base's RunServer arguments.
struct RunServerArgs {
  std::string model_name;
  std::string model_path;
  std::string model_config_file;
  std::string monitoring_config_file;
  std::string batching_parameters_file;
  std::string grpc_channel_arguments;
  bool wait_for_server_ready = true;
  std::optional<int> model_config_file_poll_period;
};

class TensorflowModelServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTestdata)) GTEST_SKIP() << "TF Serving's testdata is not at " << kTestdata;
    temp_dir_ = MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    // TF Serving uses /tmp/tf-serving.sock for every server; one per test here, because ctest
    // runs tests (and other engineers' suites) side by side.
    socket_path_ = temp_dir_ + "/tf-serving.sock";
    BuildModelConfigFile();
  }

  // __BuildModelConfigFile: good_model_config.txt with the two model paths filled in.
  void BuildModelConfigFile() {
    std::string config = ReadFile(kTestdata + "/good_model_config.txt");
    config = absl::StrReplaceAll(config, {{"${TEST_HALF_PLUS_TWO_DIR}", SavedModelBundlePath()},
                                          {"${TEST_HALF_PLUS_THREE_DIR}", HalfPlusThreePath()}});
    WriteFile(GoodModelConfigFile(), config);
  }

  static std::string SavedModelBundlePath() { return kTestdata + "/saved_model_half_plus_two_cpu"; }
  static std::string HalfPlusTwoTf2Path() {
    return kTestdata + "/saved_model_half_plus_two_tf2_cpu";
  }
  static std::string HalfPlusThreePath() { return kTestdata + "/saved_model_half_plus_three"; }
  std::string GoodModelConfigFile() const { return temp_dir_ + "/good_model_config.conf"; }
  static std::string BadModelConfigFile() { return kTestdata + "/bad_model_config.txt"; }
  static std::string ModelMetadataFile() {
    return kTestdata + "/half_plus_two_model_metadata.json";
  }
  static std::string MonitoringConfigFile() { return kTestdata + "/monitoring_config.txt"; }

  // _GetModelVersion: the one version directory under `model_path`.
  static int64_t ModelVersion(const std::string& model_path) {
    for (const auto& entry : fs::directory_iterator(model_path)) {
      return std::stoll(entry.path().filename().string());
    }
    return -1;
  }

  // RunServer: the flags TF Serving's test passes, then waits for readiness as it does.
  ServerProcess& RunServer(const RunServerArgs& a) {
    std::vector<std::string> args = {"serve",
                                     absl::StrCat("--rest_api_timeout_in_ms=", kHttpRestTimeoutMs),
                                     "--grpc_socket_path=" + socket_path_};
    if (!a.model_config_file.empty()) {
      args.push_back("--model_config_file=" + a.model_config_file);
    } else {
      args.push_back("--model_name=" + a.model_name);
      args.push_back("--model_base_path=" + a.model_path);
    }
    if (!a.monitoring_config_file.empty()) {
      args.push_back("--monitoring_config_file=" + a.monitoring_config_file);
    }
    if (a.model_config_file_poll_period.has_value()) {
      args.push_back(
          absl::StrCat("--model_config_file_poll_wait_seconds=", *a.model_config_file_poll_period));
    }
    if (!a.batching_parameters_file.empty()) {
      args.push_back("--enable_batching");
      args.push_back("--batching_parameters_file=" + a.batching_parameters_file);
    }
    std::vector<std::string> channel_args;
    if (!a.grpc_channel_arguments.empty()) channel_args.push_back(a.grpc_channel_arguments);
    channel_args.push_back("grpc.so_reuseaddr=1");
    args.push_back("--grpc_channel_arguments=" + absl::StrJoin(channel_args, ","));
    servers_.push_back(std::make_unique<ServerProcess>(args));
    ServerProcess& server = *servers_.back();
    if (a.wait_for_server_ready) {
      EXPECT_TRUE(WaitForServerReady(server)) << server.Log();
    }
    return server;
  }

  // WaitForServerReady: a Predict for a model that does not exist, until its error says
  // "Servable" (TF Serving's "Servable not found for request: ..."). Bounded like the base's.
  static bool WaitForServerReady(ServerProcess& server) {
    tensorflow::serving::PredictRequest request;
    request.mutable_model_spec()->set_name("intentionally_missing_model");
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(kWaitForServerReadySecs);
    while (std::chrono::steady_clock::now() < deadline) {
      // A new channel each time, as TF Serving's loop does: a channel that found the port
      // closed waits out gRPC's reconnect backoff (1 s, 1.6 s, ...) before it tries again.
      auto stub = tensorflow::serving::PredictionService::NewStub(InsecureChannel(Address(server)));
      tensorflow::serving::PredictResponse response;
      auto context = Context(kPredictRpcTimeout);
      const grpc::Status status = stub->Predict(context.get(), request, &response);
      if (status.error_message().find("Servable") != std::string::npos) return true;
      if (server.WaitForExit(0.1) >= 0) return false;  // it exited: it will not get ready
    }
    return false;
  }

  static std::string Address(const ServerProcess& server) {
    return absl::StrCat("localhost:", server.grpc_port());
  }

  // _VerifyModelSpec.
  static void VerifyModelSpec(const ModelSpec& actual, const std::string& name,
                              const std::string& signature_name, int64_t version) {
    EXPECT_EQ(actual.name(), name);
    EXPECT_EQ(actual.signature_name(), signature_name);
    EXPECT_EQ(actual.version().value(), version);
  }

  struct Predict {
    std::string model_name = "default";
    bool specify_output = true;
    bool batch_input = false;
    std::string signature_name = "serving_default";
    double rpc_timeout = kPredictRpcTimeout;
  };

  // VerifyPredictRequest: x = [2.0] (shape [1], or [1, 1] with batch_input), y must be one float.
  static void VerifyPredictRequest(const std::string& address, float expected_output,
                                   int64_t expected_version, const Predict& p) {
    tensorflow::serving::PredictRequest request;
    request.mutable_model_spec()->set_name(p.model_name);
    request.mutable_model_spec()->set_signature_name(p.signature_name);
    auto& x = (*request.mutable_inputs())["x"];
    x.set_dtype(tensorflow::DT_FLOAT);
    x.add_float_val(2.0f);
    x.mutable_tensor_shape()->add_dim()->set_size(1);
    if (p.batch_input) x.mutable_tensor_shape()->add_dim()->set_size(1);
    if (p.specify_output) request.add_output_filter("y");
    auto stub = tensorflow::serving::PredictionService::NewStub(InsecureChannel(address));
    tensorflow::serving::PredictResponse result;
    auto context = Context(p.rpc_timeout);
    const grpc::Status status = stub->Predict(context.get(), request, &result);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
    ASSERT_TRUE(result.outputs().contains("y"));
    const auto& y = result.outputs().at("y");
    EXPECT_EQ(y.dtype(), tensorflow::DT_FLOAT);
    ASSERT_EQ(y.float_val_size(), 1) << y.DebugString();
    EXPECT_EQ(y.float_val(0), expected_output);
    VerifyModelSpec(result.model_spec(), p.model_name, p.signature_name, expected_version);
  }
  static void VerifyPredictRequest(const std::string& address, float expected_output,
                                   int64_t expected_version) {
    VerifyPredictRequest(address, expected_output, expected_version, Predict{});
  }

  // _TestPredict: with and without an output filter.
  void TestPredict(const std::string& model_path,
                   const std::string& batching_parameters_file = "") {
    ServerProcess& server = RunServer({.model_name = "default",
                                       .model_path = model_path,
                                       .batching_parameters_file = batching_parameters_file});
    const int64_t expected_version = ModelVersion(model_path);
    VerifyPredictRequest(Address(server), 3.0f, expected_version);
    VerifyPredictRequest(Address(server), 3.0f, expected_version, {.specify_output = false});
  }

  void TestClassify(const std::string& model_path);
  void TestRegress(const std::string& model_path);
  void TestMultiInference(const std::string& model_path);

  // CallREST: urllib's request, a POST of the JSON (with urllib's default form content type,
  // which TF Serving ignores) or a GET without a body; the reply must be 200.
  static std::string CallREST(const ServerProcess& server, const std::string& target,
                              const std::optional<std::string>& json) {
    const HttpReply reply = json.has_value()
                                ? HttpCall(server.rest_port(), "POST", target, *json,
                                           {{"Content-Type", "application/x-www-form-urlencoded"}})
                                : HttpCall(server.rest_port(), "GET", target);
    EXPECT_EQ(reply.status, 200) << target << ": " << reply.body;
    return reply.body;
  }

  std::string temp_dir_;
  std::string socket_path_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

// testGetModelStatus
TEST_F(TensorflowModelServerTest, GetModelStatus) {
  ServerProcess& server =
      RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  tensorflow::serving::GetModelStatusRequest request;
  request.mutable_model_spec()->set_name("default");
  auto stub = tensorflow::serving::ModelService::NewStub(InsecureChannel(Address(server)));
  tensorflow::serving::GetModelStatusResponse result;
  auto context = Context(kRpcTimeout);
  const grpc::Status status = stub->GetModelStatus(context.get(), request, &result);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(result.model_version_status_size(), 1);
  EXPECT_EQ(result.model_version_status(0).version(), 123);
  EXPECT_EQ(result.model_version_status(0).status().error_code(), 0);
}

// testGetModelMetadata
TEST_F(TensorflowModelServerTest, GetModelMetadata) {
  const std::string model_path = SavedModelBundlePath();
  ServerProcess& server = RunServer({.model_name = "default", .model_path = model_path});
  tensorflow::serving::GetModelMetadataRequest request;
  request.mutable_model_spec()->set_name("default");
  request.add_metadata_field("signature_def");
  auto stub = tensorflow::serving::PredictionService::NewStub(InsecureChannel(Address(server)));
  tensorflow::serving::GetModelMetadataResponse result;
  auto context = Context(kRpcTimeout);
  const grpc::Status status = stub->GetModelMetadata(context.get(), request, &result);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(result.model_spec().name(), "default");
  EXPECT_EQ(result.model_spec().version().value(), ModelVersion(model_path));
  EXPECT_EQ(result.metadata_size(), 1);
  EXPECT_TRUE(result.metadata().contains("signature_def"));
}

// _TestClassify
void TensorflowModelServerTest::TestClassify(const std::string& model_path) {
  ServerProcess& server = RunServer({.model_name = "default", .model_path = model_path});
  tensorflow::serving::ClassificationRequest request;
  request.mutable_model_spec()->set_name("default");
  request.mutable_model_spec()->set_signature_name("classify_x_to_y");
  auto* example = request.mutable_input()->mutable_example_list()->add_examples();
  (*example->mutable_features()->mutable_feature())["x"].mutable_float_list()->add_value(2.0f);
  auto stub = tensorflow::serving::PredictionService::NewStub(InsecureChannel(Address(server)));
  tensorflow::serving::ClassificationResponse result;
  auto context = Context(kRpcTimeout);
  const grpc::Status status = stub->Classify(context.get(), request, &result);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_EQ(result.result().classifications_size(), 1);
  ASSERT_EQ(result.result().classifications(0).classes_size(), 1);
  EXPECT_EQ(result.result().classifications(0).classes(0).score(), 3.0f);
  VerifyModelSpec(result.model_spec(), "default", "classify_x_to_y", ModelVersion(model_path));
}

// testClassify
TEST_F(TensorflowModelServerTest, Classify) { TestClassify(SavedModelBundlePath()); }

// testClassifyTf2
TEST_F(TensorflowModelServerTest, ClassifyTf2) { TestClassify(HalfPlusTwoTf2Path()); }

// _TestRegress
void TensorflowModelServerTest::TestRegress(const std::string& model_path) {
  ServerProcess& server = RunServer({.model_name = "default", .model_path = model_path});
  tensorflow::serving::RegressionRequest request;
  request.mutable_model_spec()->set_name("default");
  request.mutable_model_spec()->set_signature_name("regress_x_to_y");
  auto* example = request.mutable_input()->mutable_example_list()->add_examples();
  (*example->mutable_features()->mutable_feature())["x"].mutable_float_list()->add_value(2.0f);
  auto stub = tensorflow::serving::PredictionService::NewStub(InsecureChannel(Address(server)));
  tensorflow::serving::RegressionResponse result;
  auto context = Context(kRpcTimeout);
  const grpc::Status status = stub->Regress(context.get(), request, &result);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_EQ(result.result().regressions_size(), 1);
  EXPECT_EQ(result.result().regressions(0).value(), 3.0f);
  VerifyModelSpec(result.model_spec(), "default", "regress_x_to_y", ModelVersion(model_path));
}

// testRegress
TEST_F(TensorflowModelServerTest, Regress) { TestRegress(SavedModelBundlePath()); }

// testRegressTf2
TEST_F(TensorflowModelServerTest, RegressTf2) { TestRegress(HalfPlusTwoTf2Path()); }

// _TestMultiInference
void TensorflowModelServerTest::TestMultiInference(const std::string& model_path) {
  ServerProcess& server = RunServer({.model_name = "default", .model_path = model_path});
  tensorflow::serving::MultiInferenceRequest request;
  auto* regress = request.add_tasks();
  regress->mutable_model_spec()->set_name("default");
  regress->mutable_model_spec()->set_signature_name("regress_x_to_y");
  regress->set_method_name("tensorflow/serving/regress");
  auto* classify = request.add_tasks();
  classify->mutable_model_spec()->set_name("default");
  classify->mutable_model_spec()->set_signature_name("classify_x_to_y");
  classify->set_method_name("tensorflow/serving/classify");
  auto* example = request.mutable_input()->mutable_example_list()->add_examples();
  (*example->mutable_features()->mutable_feature())["x"].mutable_float_list()->add_value(2.0f);
  auto stub = tensorflow::serving::PredictionService::NewStub(InsecureChannel(Address(server)));
  tensorflow::serving::MultiInferenceResponse result;
  auto context = Context(kRpcTimeout);
  const grpc::Status status = stub->MultiInference(context.get(), request, &result);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_EQ(result.results_size(), 2);
  ASSERT_EQ(result.results(0).regression_result().regressions_size(), 1);
  EXPECT_EQ(result.results(0).regression_result().regressions(0).value(), 3.0f);
  ASSERT_EQ(result.results(1).classification_result().classifications_size(), 1);
  ASSERT_EQ(result.results(1).classification_result().classifications(0).classes_size(), 1);
  EXPECT_EQ(result.results(1).classification_result().classifications(0).classes(0).score(), 3.0f);
  for (int i = 0; i < 2; ++i) {
    VerifyModelSpec(result.results(i).model_spec(), request.tasks(i).model_spec().name(),
                    request.tasks(i).model_spec().signature_name(), ModelVersion(model_path));
  }
}

// testMultiInference
TEST_F(TensorflowModelServerTest, MultiInference) { TestMultiInference(SavedModelBundlePath()); }

// testMultiInferenceTf2
TEST_F(TensorflowModelServerTest, MultiInferenceTf2) { TestMultiInference(HalfPlusTwoTf2Path()); }

// testPredictSavedModel
TEST_F(TensorflowModelServerTest, PredictSavedModel) { TestPredict(SavedModelBundlePath()); }

// testPredictBatching, removed from TF Serving's file in 1bdd3499 (2019) with the SessionBundle
// model it served; batching_config.txt is still in the testdata and the base still names it
// (_GetBatchingParametersFile), so it runs here on the SavedModel.
TEST_F(TensorflowModelServerTest, PredictBatching) {
  TestPredict(SavedModelBundlePath(), kTestdata + "/batching_config.txt");
}

// testGoodModelConfig
TEST_F(TensorflowModelServerTest, GoodModelConfig) {
  ServerProcess& server = RunServer({.model_config_file = GoodModelConfigFile()});
  const std::string address = Address(server);
  const int64_t two = ModelVersion(SavedModelBundlePath());
  const int64_t three = ModelVersion(HalfPlusThreePath());
  VerifyPredictRequest(address, 3.0f, two, {.model_name = "half_plus_two"});
  VerifyPredictRequest(address, 3.0f, two,
                       {.model_name = "half_plus_two", .specify_output = false});
  VerifyPredictRequest(address, 4.0f, three, {.model_name = "half_plus_three"});
  VerifyPredictRequest(address, 4.0f, three,
                       {.model_name = "half_plus_three", .specify_output = false});
}

// testBadModelConfig: the process must say why it stopped, in TF Serving's words.
TEST_F(TensorflowModelServerTest, BadModelConfig) {
  ServerProcess& server =
      RunServer({.model_config_file = BadModelConfigFile(), .wait_for_server_ready = false});
  // TF Serving's test reads stderr to its end, i.e. until the process exits.
  EXPECT_GE(server.WaitForExit(kRpcTimeout), 0) << "still running with a bad config";
  EXPECT_THAT(server.Log(),
              HasSubstr("Error parsing text-format tensorflow.serving.ModelServerConfig"));
}

// The config file of testModelConfigReload and testModelConfigReloadWithZeroPollPeriod.
std::string BaseConfigProto(const std::string& name, const std::string& model_path) {
  return absl::StrCat("model_config_list: {\n  config: {\n    name: \"", name,
                      "\",\n    base_path: \"", model_path,
                      "\",\n    model_platform: \"tensorflow\"\n  }\n}\n");
}

// testModelConfigReload
TEST_F(TensorflowModelServerTest, ModelConfigReload) {
  const std::string config_path = temp_dir_ + "/model_config.txt";
  WriteFile(config_path, BaseConfigProto("half_plus_two", SavedModelBundlePath()));
  ServerProcess& server =
      RunServer({.model_config_file = config_path, .model_config_file_poll_period = 1});
  const std::string address = Address(server);
  VerifyPredictRequest(address, 3.0f, ModelVersion(SavedModelBundlePath()),
                       {.model_name = "half_plus_two", .specify_output = false});

  WriteFile(config_path, BaseConfigProto("half_plus_three", HalfPlusThreePath()));
  // TF Serving sleeps 10 s and then checks; this checks as soon as the new model answers, with
  // the same 10 s bound.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto stub = tensorflow::serving::ModelService::NewStub(InsecureChannel(address));
  while (std::chrono::steady_clock::now() < deadline) {
    tensorflow::serving::GetModelStatusRequest request;
    request.mutable_model_spec()->set_name("half_plus_three");
    tensorflow::serving::GetModelStatusResponse status;
    auto context = Context(kRpcTimeout);
    if (stub->GetModelStatus(context.get(), request, &status).ok() &&
        status.model_version_status_size() == 1 &&
        status.model_version_status(0).state() ==
            tensorflow::serving::ModelVersionStatus::AVAILABLE) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  VerifyPredictRequest(address, 4.0f, ModelVersion(HalfPlusThreePath()),
                       {.model_name = "half_plus_three", .specify_output = false});
}

// testModelConfigReloadWithZeroPollPeriod: 0 means the file is never read again.
TEST_F(TensorflowModelServerTest, ModelConfigReloadWithZeroPollPeriod) {
  const std::string config_path = temp_dir_ + "/model_config.txt";
  WriteFile(config_path, BaseConfigProto("half_plus_two", SavedModelBundlePath()));
  const int poll_period = 0;
  ServerProcess& server =
      RunServer({.model_config_file = config_path, .model_config_file_poll_period = poll_period});
  const std::string address = Address(server);
  VerifyPredictRequest(address, 3.0f, ModelVersion(SavedModelBundlePath()),
                       {.model_name = "half_plus_two", .specify_output = false});

  WriteFile(config_path, BaseConfigProto("half_plus_three", HalfPlusThreePath()));
  std::this_thread::sleep_for(std::chrono::seconds(poll_period + 1));
  // TF Serving's test expects the version of half_plus_three's path here: both are 123.
  VerifyPredictRequest(address, 3.0f, ModelVersion(HalfPlusThreePath()),
                       {.model_name = "half_plus_two", .specify_output = false});
}

// testGoodGrpcChannelArgs
TEST_F(TensorflowModelServerTest, GoodGrpcChannelArgs) {
  ServerProcess& server = RunServer(
      {.model_name = "default",
       .model_path = SavedModelBundlePath(),
       .grpc_channel_arguments = "grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb"});
  VerifyPredictRequest(Address(server), 3.0f, ModelVersion(HalfPlusThreePath()),
                       {.specify_output = false});
}

// testClassifyREST
TEST_F(TensorflowModelServerTest, ClassifyREST) {
  ServerProcess& server =
      RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  const std::string reply =
      CallREST(server, "/v1/models/default:classify",
               R"({"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]})");
  EXPECT_EQ(CanonicalJson(reply), CanonicalJson(R"({"results": [[["", 3.0]]]})")) << reply;
}

// testRegressREST
TEST_F(TensorflowModelServerTest, RegressREST) {
  ServerProcess& server =
      RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  const std::string reply =
      CallREST(server, "/v1/models/default:regress",
               R"({"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]})");
  EXPECT_EQ(CanonicalJson(reply), CanonicalJson(R"({"results": [3.0]})")) << reply;
}

// testPredictREST
TEST_F(TensorflowModelServerTest, PredictREST) {
  ServerProcess& server =
      RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  const std::string reply =
      CallREST(server, "/v1/models/default:predict", R"({"instances": [2.0, 3.0, 4.0]})");
  EXPECT_EQ(CanonicalJson(reply), CanonicalJson(R"({"predictions": [3.0, 3.5, 4.0]})")) << reply;
}

// testPredictColumnarREST
TEST_F(TensorflowModelServerTest, PredictColumnarREST) {
  ServerProcess& server =
      RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  const std::string reply =
      CallREST(server, "/v1/models/default:predict", R"({"inputs": [2.0, 3.0, 4.0]})");
  EXPECT_EQ(CanonicalJson(reply), CanonicalJson(R"({"outputs": [3.0, 3.5, 4.0]})")) << reply;
}

// testGetStatusREST
TEST_F(TensorflowModelServerTest, GetStatusREST) {
  ServerProcess& server =
      RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  const std::string reply = CallREST(server, "/v1/models/default", std::nullopt);
  EXPECT_EQ(CanonicalJson(reply), CanonicalJson(R"({"model_version_status": [{
      "version": "123", "state": "AVAILABLE",
      "status": {"error_code": "OK", "error_message": ""}}]})"))
      << reply;
}

// testGetModelMetadataREST: against TF Serving's golden file, lists sorted as the test does.
TEST_F(TensorflowModelServerTest, GetModelMetadataREST) {
  ServerProcess& server =
      RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  const std::string reply = CallREST(server, "/v1/models/default/metadata", std::nullopt);
  EXPECT_EQ(CanonicalJson(reply, /*sort_lists=*/true),
            CanonicalJson(ReadFile(ModelMetadataFile()), /*sort_lists=*/true))
      << reply;
}

// http_rest_api_handler_test.cc's GetModelMetadata: TF Serving's golden metadata of the TF1
// half_plus_two export with six signatures, compared as that test does (CompareJson: objects
// unordered, arrays in order). The golden is of version 123, which is not the latest here.
TEST_F(TensorflowModelServerTest, GetModelMetadataGoldenTf1) {
  const std::string config = temp_dir_ + "/versions.config";
  WriteFile(config, absl::StrCat("model_config_list { config { name: "
                                 "\"saved_model_half_plus_two_2_versions\" base_path: \"",
                                 kTestdata, "/saved_model_half_plus_two_2_versions\" ",
                                 "model_platform: \"tensorflow\" model_version_policy { specific "
                                 "{ versions: 123 } } } }\n"));
  ServerProcess& server = RunServer({.model_config_file = config});
  const std::string reply =
      CallREST(server, "/v1/models/saved_model_half_plus_two_2_versions/metadata", std::nullopt);
  EXPECT_EQ(
      CanonicalJson(reply),
      CanonicalJson(ReadFile(kTestdata + "/saved_model_half_plus_two_2_versions_metadata.json")))
      << reply;
}

// The same golden for the TF2 export (saved_model_half_plus_two_tf2_2_versions_metadata.json:
// every signature marked predict, and __saved_model_init_op listed).
TEST_F(TensorflowModelServerTest, GetModelMetadataGoldenTf2) {
  ServerProcess& server = RunServer(
      {.model_name = "saved_model_half_plus_two_2_versions", .model_path = HalfPlusTwoTf2Path()});
  const std::string reply =
      CallREST(server, "/v1/models/saved_model_half_plus_two_2_versions/metadata", std::nullopt);
  EXPECT_EQ(CanonicalJson(reply),
            CanonicalJson(
                ReadFile(kTestdata + "/saved_model_half_plus_two_tf2_2_versions_metadata.json")))
      << reply;
}

// testPrometheusEndpoint
TEST_F(TensorflowModelServerTest, PrometheusEndpoint) {
  ServerProcess& server = RunServer({.model_name = "default",
                                     .model_path = SavedModelBundlePath(),
                                     .monitoring_config_file = MonitoringConfigFile()});
  const std::string reply = CallREST(server, "/monitoring/prometheus/metrics", std::nullopt);
  EXPECT_THAT(reply, HasSubstr("# TYPE"));
}

// testPredictUDS: the same server answers on its --grpc_socket_path.
TEST_F(TensorflowModelServerTest, PredictUDS) {
  RunServer({.model_name = "default", .model_path = SavedModelBundlePath()});
  VerifyPredictRequest("unix:" + socket_path_, 3.0f, ModelVersion(HalfPlusThreePath()),
                       {.specify_output = false});
}

// predict_impl_test.cc's PredictionWithCustomizedSignatures, over gRPC: the counter model's
// variable keeps its value across requests: get_counter, incr_counter, reset_counter,
// incr_counter (with an output filter), incr_counter_by(3), each answer a float scalar.
TEST_F(TensorflowModelServerTest, Counter) {
  const std::string model_path = kTestdata + "/saved_model_counter";
  ServerProcess& server = RunServer({.model_name = "test_model", .model_path = model_path});
  auto stub = tensorflow::serving::PredictionService::NewStub(InsecureChannel(Address(server)));
  tensorflow::serving::PredictRequest request;
  ModelSpec* model_spec = request.mutable_model_spec();
  model_spec->set_name("test_model");
  model_spec->mutable_version()->set_value(123);
  auto expect = [&](const std::string& signature, float value) {
    model_spec->set_signature_name(signature);
    tensorflow::serving::PredictResponse response;
    auto context = Context(kRpcTimeout);
    const grpc::Status status = stub->Predict(context.get(), request, &response);
    ASSERT_TRUE(status.ok()) << signature << ": " << status.error_message();
    tensorflow::serving::PredictResponse expected;
    *expected.mutable_model_spec() = *model_spec;
    tensorflow::TensorProto& output = (*expected.mutable_outputs())["output"];
    output.add_float_val(value);
    output.set_dtype(tensorflow::DT_FLOAT);
    output.mutable_tensor_shape();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(response, expected))
        << signature << ": " << response.DebugString() << " expected " << expected.DebugString();
  };
  expect("get_counter", 0);
  expect("incr_counter", 1);
  expect("reset_counter", 0);
  request.add_output_filter("output");
  expect("incr_counter", 1);
  request.clear_output_filter();
  tensorflow::TensorProto& delta = (*request.mutable_inputs())["delta"];
  delta.add_float_val(3);
  delta.set_dtype(tensorflow::DT_FLOAT);
  expect("incr_counter_by", 4);
}

}  // namespace
}  // namespace kiln::serving::testing
