// `kiln serve` with real models (the example ONNX models): REST and gRPC predictions, metadata,
// status, KServe v2, a new version and a config reload under load with zero failed requests,
// and SIGTERM with requests in flight.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serve_harness.h"

namespace kiln::serving::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kExamples = std::string(KILN_SOURCE_DIR) + "/examples/models";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

std::string ModelEntry(const std::string& name, const std::string& base) {
  return "  config {\n    name: \"" + name + "\"\n    base_path: \"" + base +
         "\"\n    model_platform: \"onnx\"\n  }\n";
}

// A copy of the half_plus_two example with version 1, so versions can be added.
std::string CopyHalfPlusTwo(const std::string& dir) {
  const std::string base = dir + "/half_plus_two";
  fs::create_directories(base + "/1");
  fs::copy_file(kExamples + "/half_plus_two/1/model.onnx", base + "/1/model.onnx");
  return base;
}

TEST(ServeModelsE2ETest, RestAndGrpcAnswerLikeTfServing) {
  const std::string dir = MakeTempDir("models");
  const std::string config = dir + "/models.config";
  WriteFile(config, "model_config_list {\n" +
                        ModelEntry("half_plus_two", kExamples + "/half_plus_two") +
                        ModelEntry("penguin_tabular", kExamples + "/penguin_tabular") +
                        "  config { name: \"half_plus_two_tf\" base_path: \"" + kExamples +
                        "/half_plus_two_savedmodel\" model_platform: \"tensorflow\" }\n}\n");
  WriteFile(dir + "/monitoring.config", "prometheus_config { enable: true }\n");
  ServerProcess server({"serve", "--model_config_file=" + config,
                        "--monitoring_config_file=" + dir + "/monitoring.config"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();

  HttpReply predict = HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two:predict",
                               R"({"instances": [[1.0], [2.0], [5.0]]})");
  EXPECT_EQ(predict.status, 200) << predict.body;
  EXPECT_EQ(predict.body, R"({"predictions": [[2.5], [3.0], [4.5]]})");
  EXPECT_EQ(predict.content_type, "application/json");
  HttpReply penguin = HttpCall(server.rest_port(), "POST", "/v1/models/penguin_tabular:predict",
                               R"({"instances": [[0.1, -0.2, 0.3, 0.4], [1, 1, 1, 1]]})");
  EXPECT_EQ(penguin.status, 200) << penguin.body;
  EXPECT_THAT(penguin.body, HasSubstr("{\"predictions\": [["));
  // The SavedModel example: the README's curl, and its warmup file was replayed at load.
  HttpReply readme = HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two_tf:predict",
                              R"({"instances": [1.0, 2.0, 5.0]})");
  EXPECT_EQ(readme.body, R"({"predictions": [2.5, 3.0, 4.5]})");
  HttpReply metrics = HttpCall(server.rest_port(), "GET", "/monitoring/prometheus/metrics");
  EXPECT_THAT(metrics.body, HasSubstr(":tensorflow:serving:model_warmup_latency_count{model_path="));
  HttpReply status = HttpCall(server.rest_port(), "GET", "/v1/models/penguin_tabular");
  EXPECT_THAT(status.body, HasSubstr("\"state\": \"AVAILABLE\""));
  HttpReply v2 = HttpCall(server.rest_port(), "GET", "/v2/models/half_plus_two");
  EXPECT_THAT(v2.body, HasSubstr("\"platform\": \"onnxruntime_onnx\""));
  EXPECT_EQ(HttpCall(server.rest_port(), "GET", "/v2/health/ready").status, 200);

  auto stub = server.PredictionStub();
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name("half_plus_two");
  auto& x = (*request.mutable_inputs())["x"];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(2);
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  x.add_float_val(1);
  x.add_float_val(3);
  tensorflow::serving::PredictResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status grpc_status = stub->Predict(&context, request, &response);
  ASSERT_TRUE(grpc_status.ok()) << grpc_status.error_message();
  const auto& y = response.outputs().at("y");
  ASSERT_EQ(y.float_val_size(), 2);
  EXPECT_EQ(y.float_val(0), 2.5f);
  EXPECT_EQ(y.float_val(1), 3.5f);
  EXPECT_EQ(response.model_spec().version().value(), 1);
  EXPECT_EQ(response.model_spec().signature_name(), "serving_default");

  tensorflow::serving::GetModelMetadataRequest metadata_request;
  metadata_request.mutable_model_spec()->set_name("half_plus_two");
  metadata_request.add_metadata_field("signature_def");
  tensorflow::serving::GetModelMetadataResponse metadata;
  grpc::ClientContext metadata_context;
  ASSERT_TRUE(stub->GetModelMetadata(&metadata_context, metadata_request, &metadata).ok());
  EXPECT_EQ(metadata.metadata().at("signature_def").type_url(),
            "type.googleapis.com/tensorflow.serving.SignatureDefMap");

  // A wrong dtype over gRPC is INVALID_ARGUMENT and the server keeps serving.
  x.set_dtype(tensorflow::DT_STRING);
  x.clear_float_val();
  x.add_string_val("a");
  x.add_string_val("b");
  grpc::ClientContext bad_context;
  EXPECT_EQ(stub->Predict(&bad_context, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two:predict",
                     R"({"instances": [[1.0]]})").status,
            200);
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

TEST(ServeModelsE2ETest, NewVersionAndConfigReloadUnderLoadFailNothing) {
  const std::string dir = MakeTempDir("transitions");
  const std::string base = CopyHalfPlusTwo(dir);
  const std::string config = dir + "/models.config";
  WriteFile(config, "model_config_list {\n" + ModelEntry("half_plus_two", base) + "}\n");
  ServerProcess server({"serve", "--model_config_file=" + config,
                        "--file_system_poll_wait_seconds=1",
                        "--model_config_file_poll_wait_seconds=1"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::string first_failure;
  std::mutex failure_mu;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        HttpReply reply = HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two:predict",
                                   R"({"instances": [[1.0]]})");
        if (reply.status == 200 && reply.body == R"({"predictions": [[2.5]]})") {
          ok.fetch_add(1);
        } else {
          failed.fetch_add(1);
          std::lock_guard<std::mutex> lock(failure_mu);
          if (first_failure.empty()) first_failure = std::to_string(reply.status) + reply.body;
        }
      }
    });
  }
  // A new version appears.
  fs::create_directories(base + "/2");
  fs::copy_file(base + "/1/model.onnx", base + "/2/model.onnx");
  bool version2 = false;
  for (int i = 0; i < 200 && !version2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    version2 = HttpCall(server.rest_port(), "GET", "/v1/models/half_plus_two/versions/2")
                   .body.find("AVAILABLE") != std::string::npos;
  }
  EXPECT_TRUE(version2) << server.Log();
  // The config file gains a second model.
  WriteFile(config, "model_config_list {\n" + ModelEntry("half_plus_two", base) +
                        ModelEntry("penguin_tabular", kExamples + "/penguin_tabular") + "}\n");
  bool reloaded = false;
  for (int i = 0; i < 200 && !reloaded; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    reloaded = HttpCall(server.rest_port(), "GET", "/v1/models/penguin_tabular").status == 200;
  }
  EXPECT_TRUE(reloaded) << server.Log();
  stop = true;
  for (auto& client : clients) client.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(failed.load(), 0) << first_failure;
  HttpReply old_version = HttpCall(server.rest_port(), "GET", "/v1/models/half_plus_two/versions/1");
  EXPECT_THAT(old_version.body, HasSubstr("\"state\": \"END\""));
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

TEST(ServeModelsE2ETest, SigtermFinishesRequestsInFlight) {
  const std::string dir = MakeTempDir("sigterm");
  const std::string config = dir + "/models.config";
  WriteFile(config, "model_config_list {\n" +
                        ModelEntry("half_plus_two", kExamples + "/half_plus_two") + "}\n");
  WriteFile(dir + "/batching.config",
            "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 300000 }\n"
            "num_batch_threads { value: 1 }\n");
  // A long batch timeout keeps requests in flight when the signal arrives.
  ServerProcess server({"serve", "--model_config_file=" + config, "--enable_batching",
                        "--batching_parameters_file=" + dir + "/batching.config"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&] {
      HttpReply reply = HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two:predict",
                                 R"({"instances": [[2.0]]})");
      if (reply.status == 200 && reply.body == R"({"predictions": [[3.0]]})") ok.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
  for (auto& client : clients) client.join();
  EXPECT_EQ(ok.load(), 3);
}

// A real TFX export whose serving signature parses serialized tf.Examples, called as TFX users
// call it: {"b64": ...} instances.
TEST(ServeModelsE2ETest, TfxExportTakesBase64Examples) {
  const std::string dir = MakeTempDir("tfx");
  fs::create_directories(dir + "/penguin");
  fs::create_directory_symlink(std::string(KILN_SHARED_DIR) + "/testdata/models/tfx_penguin_keras",
                               dir + "/penguin/1");
  ServerProcess server({"serve", "--model_name=penguin", "--model_base_path=" + dir + "/penguin"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  // tf.Example {culmen_length_mm: 0.3, culmen_depth_mm: 0.5, flipper_length_mm: 0.2,
  // body_mass_g: 0.4} (float features), serialized and base64-encoded.
  const std::string example =
      "CnMKGwoPY3VsbWVuX2RlcHRoX21tEggSBgoEAAAAPwocChBjdWxtZW5fbGVuZ3RoX21tEggSBgoEmpmZPgoXCgtib2"
      "R5X21hc3NfZxIIEgYKBM3MzD4KHQoRZmxpcHBlcl9sZW5ndGhfbW0SCBIGCgTNzEw+";
  HttpReply reply = HttpCall(server.rest_port(), "POST", "/v1/models/penguin:predict",
                             "{\"instances\": [{\"b64\": \"" + example + "\"}, {\"b64\": \"" +
                                 example + "\"}]}");
  ASSERT_EQ(reply.status, 200) << reply.body;
  // Two rows of three class probabilities, equal for equal examples, each summing to one.
  ASSERT_EQ(reply.body.rfind("{\"predictions\": [[", 0), 0u) << reply.body;
  std::vector<double> values;
  for (size_t i = 0; i < reply.body.size();) {
    const size_t start = reply.body.find_first_of("0123456789", i);
    if (start == std::string::npos) break;
    size_t end = start;
    values.push_back(std::stod(reply.body.substr(start), &end));
    i = start + end;
  }
  ASSERT_EQ(values.size(), 6u) << reply.body;
  EXPECT_NEAR(values[0] + values[1] + values[2], 1.0, 1e-5);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(values[i], values[i + 3]);
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace kiln::serving::testing
