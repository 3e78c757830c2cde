// `kiln serve` with real models (the example ONNX models): REST and gRPC predictions, metadata,
// status, KServe v2, a new version and a config reload under load with zero failed requests,
// and SIGTERM with requests in flight.
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/serving/http_server.h"
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
  EXPECT_THAT(metrics.body,
              HasSubstr(":tensorflow:serving:model_warmup_latency_count{model_path="));
  EXPECT_THAT(metrics.body, HasSubstr(":tensorflow:serving:runtime_latency_count{model_name="
                                      "\"half_plus_two\",API=\"Predict\",runtime=\"kiln\"} 1"));
  HttpReply status = HttpCall(server.rest_port(), "GET", "/v1/models/penguin_tabular");
  EXPECT_THAT(status.body, HasSubstr("\"state\": \"AVAILABLE\""));
  HttpReply v2 = HttpCall(server.rest_port(), "GET", "/v2/models/half_plus_two");
  EXPECT_THAT(v2.body, HasSubstr("\"platform\": \"onnxruntime_onnx\""));
  EXPECT_EQ(HttpCall(server.rest_port(), "GET", "/v2/health/ready").status, 200);

  {  // gRPC clients closed before Terminate (see ServerProcess::Terminate)
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
                       R"({"instances": [[1.0]]})")
                  .status,
              200);
  }
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
  HttpReply old_version =
      HttpCall(server.rest_port(), "GET", "/v1/models/half_plus_two/versions/1");
  EXPECT_THAT(old_version.body, HasSubstr("\"state\": \"END\""));
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

TEST(ServeModelsE2ETest, SigtermStopsAcceptingAndFinishesRequestsInFlight) {
  const std::string dir = MakeTempDir("sigterm");
  const std::string config = dir + "/models.config";
  WriteFile(config, "model_config_list {\n" +
                        ModelEntry("half_plus_two", kExamples + "/half_plus_two") + "}\n");
  WriteFile(dir + "/batching.config",
            "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 1500000 }\n"
            "num_batch_threads { value: 1 }\n");
  // A long batch timeout keeps requests in flight when the signal arrives; two REST threads,
  // both busy with those requests, check that stopping to accept does not wait for them.
  ServerProcess server({"serve", "--model_config_file=" + config, "--enable_batching",
                        "--batching_parameters_file=" + dir + "/batching.config",
                        "--rest_api_num_threads=2"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 2; ++c) {
    clients.emplace_back([&] {
      HttpReply reply = HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two:predict",
                                 R"({"instances": [[2.0]]})");
      if (reply.status == 200 && reply.body == R"({"predictions": [[3.0]]})") ok.fetch_add(1);
    });
    clients.emplace_back([&] {
      auto stub = server.PredictionStub();
      tensorflow::serving::PredictRequest request;
      request.mutable_model_spec()->set_name("half_plus_two");
      auto& x = (*request.mutable_inputs())["x"];
      x.set_dtype(tensorflow::DT_FLOAT);
      x.mutable_tensor_shape()->add_dim()->set_size(1);
      x.mutable_tensor_shape()->add_dim()->set_size(1);
      x.add_float_val(4);
      tensorflow::serving::PredictResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      if (stub->Predict(&context, request, &response).ok() &&
          response.outputs().at("y").float_val(0) == 4.0f) {
        ok.fetch_add(1);
      }
    });
  }
  // A client with a connected, idle channel (TF Serving clients keep theirs open).
  auto idle_stub = server.ModelStub();
  {
    tensorflow::serving::GetModelStatusRequest status_request;
    status_request.mutable_model_spec()->set_name("half_plus_two");
    tensorflow::serving::GetModelStatusResponse status_response;
    grpc::ClientContext status_context;
    ASSERT_TRUE(idle_stub->GetModelStatus(&status_context, status_request, &status_response).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto signalled = std::chrono::steady_clock::now();
  server.Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // New connections are refused at once, while the batch in flight still waits for its
  // timeout.
  HttpReply late = HttpCall(server.rest_port(), "GET", "/v2/health/live");
  EXPECT_NE(late.status, 200) << late.body;
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::milliseconds(1000))
      << "a new REST connection waited for the requests in flight: " << late.body;
  auto late_stub = server.PredictionStub();
  tensorflow::serving::GetModelMetadataRequest metadata_request;
  metadata_request.mutable_model_spec()->set_name("half_plus_two");
  metadata_request.add_metadata_field("signature_def");
  tensorflow::serving::GetModelMetadataResponse metadata;
  grpc::ClientContext late_context;
  late_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_FALSE(late_stub->GetModelMetadata(&late_context, metadata_request, &metadata).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::milliseconds(1000))
      << "a new gRPC request waited for the requests in flight";
  EXPECT_EQ(server.WaitForExit(), 0) << server.Log();
  // The batch ends 1.5 s after it started; the idle connection must not hold the exit until
  // its client happens to poll (5 s).
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::milliseconds(4000));
  for (auto& client : clients) client.join();
  EXPECT_EQ(ok.load(), 4) << server.Log();
}

// Bad requests of every kind against a serving model: each gets TF Serving's code and message,
// and the model keeps answering in between.
TEST(ServeModelsE2ETest, BadRequestsGetTfServingErrorsWhileServingContinues) {
  const std::string dir = MakeTempDir("faults");
  const std::string config = dir + "/models.config";
  WriteFile(config,
            "model_config_list {\n  config {\n    name: \"half_plus_two\"\n"
            "    base_path: \"" +
                kExamples +
                "/half_plus_two\"\n"
                "    model_platform: \"onnx\"\n"
                "    version_labels { key: \"stable\" value: 1 }\n  }\n" +
                ModelEntry("penguin_tabular", kExamples + "/penguin_tabular") + "}\n");
  ServerProcess server(
      {"serve", "--model_config_file=" + config, "--rest_api_max_body_bytes=4096"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  const int port = server.rest_port();
  auto expect_still_serving = [&](const std::string& after) {
    HttpReply good = HttpCall(port, "POST", "/v1/models/half_plus_two/labels/stable:predict",
                              R"({"instances": [[1.0], [5.0]]})");
    EXPECT_EQ(good.status, 200) << "after " << after << ": " << good.body;
    EXPECT_EQ(good.body, R"({"predictions": [[2.5], [4.5]]})") << "after " << after;
  };
  struct Case {
    std::string name, target, body;
    int status;
    std::string message;
  };
  const std::string predict = "/v1/models/half_plus_two:predict";
  const std::vector<Case> cases = {
      {"malformed JSON", predict, R"({"instances": [[1.0],)", 400, "JSON Parse error"},
      {"not an object", predict, R"([1.0])", 400, "Malformed request"},
      {"no instances or inputs", predict, R"({"x": [1.0]})", 400, "instances"},
      {"ragged list", predict, R"({"instances": [[1.0], [1.0, 2.0]]})", 400, ""},
      {"wrong dtype", predict, R"({"instances": [["one"]]})", 400, ""},
      // penguin_tabular's Gemm needs 4 features per row.
      {"wrong shape", "/v1/models/penguin_tabular:predict", R"({"instances": [[1.0, 2.0, 3.0]]})",
       400, "input 'features' has shape [1, 3], expected"},
      {"wrong input name", predict, R"({"inputs": {"z": [[1.0]]}})", 400, "'z'"},
      {"unknown signature", predict, R"({"signature_name": "nope", "instances": [[1.0]]})", 400,
       R"(Serving signature key \"nope\" not found.)"},
      {"unknown model", "/v1/models/nope:predict", R"({"instances": [[1.0]]})", 404,
       "Servable not found for request: Latest(nope)"},
      {"unknown version", "/v1/models/half_plus_two/versions/7:predict",
       R"({"instances": [[1.0]]})", 404,
       "Servable not found for request: Specific(half_plus_two, 7)"},
      {"unknown label", "/v1/models/half_plus_two/labels/canary:predict",
       R"({"instances": [[1.0]]})", 400, "Unrecognized servable version label: canary"},
      {"body over the limit", predict, "{\"instances\": [" + std::string(5000, ' ') + "[1.0]]}",
       413, "exceeds the limit of 4096 bytes"},
  };
  for (const Case& c : cases) {
    HttpReply reply = HttpCall(port, "POST", c.target, c.body);
    EXPECT_EQ(reply.status, c.status) << c.name << ": " << reply.body;
    EXPECT_EQ(reply.body.rfind("{ \"error\": \"", 0), 0u) << c.name << ": " << reply.body;
    EXPECT_THAT(reply.body, HasSubstr(c.message)) << c.name;
    expect_still_serving(c.name);
  }

  {  // gRPC clients closed before Terminate (see ServerProcess::Terminate)
    // The same over gRPC.
    auto stub = server.PredictionStub();
    auto predict_status = [&](const std::string& model, const std::string& input,
                              const std::string& signature, std::vector<int64_t> dims,
                              tensorflow::serving::PredictResponse* response) {
      tensorflow::serving::PredictRequest request;
      request.mutable_model_spec()->set_name(model);
      request.mutable_model_spec()->set_signature_name(signature);
      auto& x = (*request.mutable_inputs())[input];
      x.set_dtype(tensorflow::DT_FLOAT);
      int64_t n = 1;
      for (int64_t d : dims) {
        x.mutable_tensor_shape()->add_dim()->set_size(d);
        n *= d;
      }
      for (int64_t i = 0; i < n; ++i) x.add_float_val(1.0f);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      return stub->Predict(&context, request, response);
    };
    tensorflow::serving::PredictResponse response;
    grpc::Status status = predict_status("penguin_tabular", "features", "", {1, 3}, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("input 'features' has shape [1, 3]"));
    status = predict_status("half_plus_two", "x", "nope", {1, 1}, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(status.error_message(), "Serving signature key \"nope\" not found.");
    status = predict_status("half_plus_two", "x", "", {2, 1}, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.outputs().at("y").float_val(1), 2.5f);
    status = predict_status("penguin_tabular", "features", "", {1, 4}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
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
  HttpReply reply =
      HttpCall(server.rest_port(), "POST", "/v1/models/penguin:predict",
               "{\"instances\": [{\"b64\": \"" + example + "\"}, {\"b64\": \"" + example + "\"}]}");
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

// Issue 12's HTTP details and reload semantics against the real process.
TEST(ServeModelsE2ETest, GzipUrlDecodedNamesAndAllOrNothingReload) {
  const std::string dir = MakeTempDir("issue12");
  const std::string base = CopyHalfPlusTwo(dir);
  const std::string config = dir + "/models.config";
  WriteFile(config, "model_config_list {\n" + ModelEntry("hp two", base) + "}\n");
  ServerProcess server({"serve", "--model_config_file=" + config, "--rest_api_max_body_bytes=4096"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();

  const std::string body = R"({"instances": [[1.0], [2.0], [5.0]]})";
  HttpReply gzip = HttpCall(server.rest_port(), "POST", "/v1/models/hp%20two:predict",
                            GzipCompress(body),
                            {{"Content-Encoding", "gzip"}, {"Accept-Encoding", "gzip"}});
  EXPECT_EQ(gzip.status, 200) << gzip.body;
  EXPECT_EQ(gzip.content_encoding, "gzip");
  auto inflated = InflateBody(gzip.body, 1 << 20);
  ASSERT_TRUE(inflated.ok()) << inflated.status();
  EXPECT_EQ(*inflated, R"({"predictions": [[2.5], [3.0], [4.5]]})");
  // A body far over the limit once decompressed is refused, not decompressed into memory.
  HttpReply bomb = HttpCall(server.rest_port(), "POST", "/v1/models/hp%20two:predict",
                            GzipCompress(std::string(1 << 20, ' ')),
                            {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(bomb.status, 413) << bomb.body;

  {
    auto stub = server.ModelStub();
    tensorflow::serving::ReloadConfigRequest empty;
    tensorflow::serving::ReloadConfigResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->HandleReloadConfigRequest(&context, empty, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
  }
  EXPECT_EQ(HttpCall(server.rest_port(), "GET", "/v1/models/hp%20two").status, 200);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(ServeModelsE2ETest, BadModelConfigPrintsTfServingsMessage) {
  const std::string bad = "/work/shared/testdata/tf_serving/bad_model_config.txt";
  if (!fs::exists(bad)) GTEST_SKIP() << "no " << bad;
  std::string output;
  EXPECT_NE(RunKiln({"serve", "--model_config_file=" + bad, "--port=" + std::to_string(FreePort())},
                    &output),
            0);
  EXPECT_THAT(output, HasSubstr("Error parsing text-format tensorflow.serving.ModelServerConfig"));
}

}  // namespace
}  // namespace kiln::serving::testing
