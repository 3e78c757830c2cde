// `kiln serve` as a process: flags, routing, errors, status, metrics, config reload and
// shutdown, seen through a real HTTP client and a real gRPC client.
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serve_harness.h"

namespace kiln::serving::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

// A config naming a model whose base path has no version yet.
std::string EmptyModelConfig(const std::string& dir, const std::string& name) {
  const std::string base = dir + "/" + name;
  fs::create_directories(base);
  const std::string config = dir + "/models.config";
  WriteFile(config, "model_config_list {\n  config {\n    name: \"" + name +
                        "\"\n    base_path: \"" + base +
                        "\"\n    model_platform: \"tensorflow\"\n  }\n}\n");
  return config;
}

TEST(ServeE2ETest, UnknownFlagIsReportedAndTheServerGoesOn) {
  std::string output;
  // As tensorflow_model_server: reported, then the server starts (and here stops for want of
  // a model, which shows it went past the flags).
  EXPECT_EQ(RunKiln({"serve", "--rest_api_prot=8501", "--port=0"}, &output), 1);
  EXPECT_THAT(output, HasSubstr("unknown argument: --rest_api_prot=8501"));
  EXPECT_THAT(output, HasSubstr("--model_base_path and --model_config_file are empty"));
  EXPECT_EQ(RunKiln({"serve", "--port=http"}, &output), 2);
  EXPECT_THAT(output, HasSubstr("\"http\" for flag --port"));
}

TEST(ServeE2ETest, NoModelsIsAnError) {
  std::string output;
  EXPECT_EQ(RunKiln({"serve", "--port=0"}, &output), 1);
  EXPECT_THAT(output, HasSubstr("--model_base_path and --model_config_file are empty"));
}

TEST(ServeE2ETest, BadConfigFilesAreReported) {
  std::string output;
  const std::string bad =
      std::string(KILN_SHARED_DIR) + "/testdata/tf_serving/bad_model_config.txt";
  EXPECT_EQ(RunKiln({"serve", "--port=0", "--model_config_file=" + bad}, &output), 1);
  // TF Serving's words (its test looks for them), and the file.
  EXPECT_THAT(output, HasSubstr("Error parsing text-format tensorflow.serving.ModelServerConfig"));
  EXPECT_THAT(output, HasSubstr("bad_model_config.txt"));
  const std::string dir = MakeTempDir("badbatch");
  const std::string config = EmptyModelConfig(dir, "m");
  WriteFile(dir + "/batching.config", "max_batch_size { value: 8 }\nallowed_batch_sizes: 4\n");
  EXPECT_EQ(RunKiln({"serve", "--port=0", "--model_config_file=" + config, "--enable_batching",
                     "--batching_parameters_file=" + dir + "/batching.config"},
                    &output),
            1);
  EXPECT_THAT(output, HasSubstr("--batching_parameters_file"));
}

TEST(ServeE2ETest, ErrorsOfAServerWithoutLoadedVersions) {
  const std::string dir = MakeTempDir("errors");
  const std::string config = EmptyModelConfig(dir, "m");
  const std::string monitoring = dir + "/monitoring.config";
  WriteFile(monitoring,
            "prometheus_config { enable: true, path: \"/monitoring/prometheus/metrics\" }");
  ServerProcess server({"serve", "--model_config_file=" + config,
                        "--monitoring_config_file=" + monitoring,
                        "--rest_api_max_body_bytes=4096"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();

  HttpReply status = HttpCall(server.rest_port(), "GET", "/v1/models/m");
  EXPECT_EQ(status.status, 404);
  EXPECT_THAT(status.body, HasSubstr("Could not find any versions of model m"));
  HttpReply predict =
      HttpCall(server.rest_port(), "POST", "/v1/models/m:predict", R"({"instances": [1.0]})");
  EXPECT_EQ(predict.status, 404);
  EXPECT_EQ(predict.body, R"j({ "error": "Servable not found for request: Latest(m)" })j");
  HttpReply versioned = HttpCall(server.rest_port(), "POST", "/v1/models/m/versions/3:predict",
                                 R"({"instances": [1.0]})");
  EXPECT_THAT(versioned.body, HasSubstr("Specific(m, 3)"));
  HttpReply malformed = HttpCall(server.rest_port(), "POST", "/v1/models/m:explode", "{}");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_THAT(malformed.body, HasSubstr("Malformed request: POST /v1/models/m:explode"));
  EXPECT_EQ(HttpCall(server.rest_port(), "GET", "/v1/models/m/versions/x").status, 400);
  EXPECT_EQ(HttpCall(server.rest_port(), "GET", "/nothing/here").status, 404);
  HttpReply big = HttpCall(server.rest_port(), "POST", "/v1/models/m:predict",
                           "{\"instances\": [" + std::string(8000, ' ') + "1]}");
  EXPECT_EQ(big.status, 413);
  EXPECT_THAT(big.body, HasSubstr("exceeds the limit of 4096 bytes"));
  // Still serving after the errors.
  EXPECT_EQ(HttpCall(server.rest_port(), "GET", "/v2/health/live").status, 200);
  EXPECT_EQ(HttpCall(server.rest_port(), "GET", "/v2/health/ready").status, 503);

  HttpReply metrics = HttpCall(server.rest_port(), "GET", "/monitoring/prometheus/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.body, HasSubstr(":tensorflow:serving:request_count{model_name=\"m\","
                                      "status=\"NOT_FOUND\"}"));

  {  // gRPC clients closed before Terminate (see ServerProcess::Terminate)
    auto prediction = server.PredictionStub();
    tensorflow::serving::PredictRequest request;
    request.mutable_model_spec()->set_name("m");
    tensorflow::serving::PredictResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status grpc_status = prediction->Predict(&context, request, &response);
    EXPECT_EQ(grpc_status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(grpc_status.error_message(), "Servable not found for request: Latest(m)");

    auto model_service = server.ModelStub();
    tensorflow::serving::ReloadConfigRequest reload;
    auto* bad = reload.mutable_config()->mutable_model_config_list()->add_config();
    bad->set_name("x");
    bad->set_base_path(dir);
    bad->set_model_platform("pytorch");
    tensorflow::serving::ReloadConfigResponse reload_response;
    grpc::ClientContext reload_context;
    grpc_status =
        model_service->HandleReloadConfigRequest(&reload_context, reload, &reload_response);
    EXPECT_EQ(grpc_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(grpc_status.error_message(), HasSubstr("pytorch"));
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

TEST(ServeE2ETest, RestIsOffUnlessItsPortIsSet) {
  const std::string dir = MakeTempDir("norest");
  ServerProcess server({"serve", "--model_config_file=" + EmptyModelConfig(dir, "m")},
                       /*with_rest=*/false);
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  EXPECT_THAT(server.Log(), ::testing::Not(HasSubstr("HTTP/REST")));
  {  // gRPC clients closed before Terminate (see ServerProcess::Terminate)
    auto model_service = server.ModelStub();
    tensorflow::serving::GetModelStatusRequest request;
    request.mutable_model_spec()->set_name("m");
    tensorflow::serving::GetModelStatusResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status status = model_service->GetModelStatus(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(status.error_message(), "Could not find any versions of model m");
  }
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace kiln::serving::testing
