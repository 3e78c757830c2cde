// tensorflow_model_server's command line against a real `kiln serve`: every one of its 48 flags
// with a non-default value, and the behaviour of the flags users rely on (CORS, load retries,
// parallel loading, method-name check, tensor_content replies, per-model batching and large
// batch splitting).
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/serving/flags.h"
#include "serve_harness.h"

namespace kiln::serving::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

const std::string kHalfPlusTwo =
    std::string(KILN_SOURCE_DIR) + "/examples/models/half_plus_two/1/model.onnx";
const std::string kTf2HalfPlusTwo =
    std::string(KILN_SHARED_DIR) + "/testdata/tf_serving/saved_model_half_plus_two_tf2_cpu";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

// A base path holding half_plus_two (ONNX) as version 1.
std::string HalfPlusTwoBase(const std::string& dir, const std::string& name) {
  const std::string base = dir + "/" + name;
  fs::create_directories(base + "/1");
  fs::copy_file(kHalfPlusTwo, base + "/1/model.onnx");
  return base;
}

std::string ModelList(const std::vector<std::pair<std::string, std::string>>& models) {
  std::string text = "model_config_list {\n";
  for (const auto& [name, base] : models) {
    text += "  config { name: \"" + name + "\" base_path: \"" + base +
            "\" model_platform: \"onnx\" }\n";
  }
  return text + "}\n";
}

std::string Header(const HttpReply& reply, const std::string& name) {
  for (const auto& [key, value] : reply.headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return "";
}

tensorflow::serving::PredictResponse GrpcPredict(const ServerProcess& server,
                                                 const std::string& model,
                                                 const std::vector<float>& xs) {
  auto stub = server.PredictionStub();
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name(model);
  auto& x = (*request.mutable_inputs())["x"];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(xs.size()));
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  for (float v : xs) x.add_float_val(v);
  tensorflow::serving::PredictResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  const grpc::Status status = stub->Predict(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

// The flags of TF Serving's main.cc that the first test below does not pass, and where each
// is exercised instead.
const std::map<std::string, std::string> kCheckedElsewhere = {
    {"port", "set by the harness (ServerProcess)"},
    {"rest_api_port", "set by the harness (ServerProcess)"},
    {"version", "VersionAndAltsAtStart (it exits)"},
    {"use_alts_credentials", "VersionAndAltsAtStart (Kiln refuses it)"},
    {"ssl_config_file", "serve_grpc_features_e2e_test (ServeTlsE2ETest, needs certificates)"},
    // With the intra/inter-op flags below it would be TF Serving's "cannot configure all".
    {"tensorflow_session_parallelism", "MethodNameCheckOnlyWhenAsked"},
    {"enable_signature_method_name_check", "MethodNameCheckOnlyWhenAsked"},
};

TEST(ServeFlagsE2ETest, EveryTfServingFlagWithANonDefaultValueStartsAndServes) {
  const std::string dir = MakeTempDir("all_flags");
  const std::string models = dir + "/models.config";
  WriteFile(models, ModelList({{"a", HalfPlusTwoBase(dir, "a")},
                               {"b", HalfPlusTwoBase(dir, "b")},
                               {"c", HalfPlusTwoBase(dir, "c")}}));
  WriteFile(dir + "/batching.config", "max_batch_size { value: 8 }\n");
  WriteFile(dir + "/monitoring.config", "prometheus_config { enable: true }\n");
  for (const char* file : {"session.config", "platform.config", "thread_pool.config"}) {
    WriteFile(dir + "/" + file, "");
  }
  const std::map<std::string, std::string> values = {
      {"grpc_socket_path", dir + "/grpc.sock"},
      {"rest_api_num_threads", "2"},
      {"rest_api_timeout_in_ms", "20000"},
      {"rest_api_enable_cors_support", "true"},
      {"enable_batching", "true"},
      {"allow_version_labels_for_unavailable_models", "true"},
      {"batching_parameters_file", dir + "/batching.config"},
      {"enable_per_model_batching_parameters", "true"},
      {"model_config_file", models},
      {"model_config_file_poll_wait_seconds", "1"},
      {"model_name", "ignored_with_a_config_file"},
      {"model_base_path", dir + "/ignored_with_a_config_file"},
      {"num_load_threads", "3"},
      {"num_unload_threads", "2"},
      {"max_num_load_retries", "1"},
      {"load_retry_interval_micros", "1000"},
      {"file_system_poll_wait_seconds", "2"},
      {"flush_filesystem_caches", "false"},
      {"tensorflow_session_config_file", dir + "/session.config"},
      {"tensorflow_intra_op_parallelism", "1"},
      {"tensorflow_inter_op_parallelism", "1"},
      {"platform_config_file", dir + "/platform.config"},
      {"per_process_gpu_memory_fraction", "0.5"},
      {"saved_model_tags", "serve"},
      {"grpc_channel_arguments", "grpc.max_connection_age_ms=600000"},
      {"grpc_max_threads", "16"},
      {"enable_model_warmup", "false"},
      {"num_request_iterations_for_warmup", "2"},
      {"monitoring_config_file", dir + "/monitoring.config"},
      {"remove_unused_fields_from_bundle_metagraph", "false"},
      {"prefer_tflite_model", "true"},
      {"num_tflite_pools", "2"},
      {"num_tflite_interpreters_per_pool", "2"},
      {"xla_cpu_compilation_enabled", "true"},
      {"xla_gpu_compilation_enabled", "true"},
      {"enable_profiler", "false"},
      {"thread_pool_factory_config_file", dir + "/thread_pool.config"},
      {"mixed_precision", "bfloat16"},
      {"skip_initialize_tpu", "true"},
      {"enable_grpc_healthcheck_service", "true"},
      {"enable_serialization_as_tensor_content", "true"},
  };
  // Every flag of main.cc is either passed here or checked elsewhere.
  std::set<std::string> covered;
  for (const auto& [name, value] : values) covered.insert(name);
  for (const auto& [name, where] : kCheckedElsewhere) covered.insert(name);
  const std::vector<std::string>& all = TensorflowModelServerFlagNames();
  EXPECT_EQ(covered, std::set<std::string>(all.begin(), all.end()));
  EXPECT_EQ(all.size(), 48u);

  std::vector<std::string> args = {"serve", "--use_tfrt"};
  for (const auto& [name, value] : values) args.push_back("--" + name + "=" + value);
  ServerProcess server(args);
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  for (const char* model : {"a", "b", "c"}) {
    HttpReply reply =
        HttpCall(server.rest_port(), "POST", std::string("/v1/models/") + model + ":predict",
                 R"({"instances": [[1.0], [3.0]]})");
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.body, R"({"predictions": [[2.5], [3.5]]})");
    EXPECT_EQ(Header(reply, "Access-Control-Allow-Origin"), "*");
  }
  {
    const auto response = GrpcPredict(server, "a", {1, 3});
    const auto& y = response.outputs().at("y");
    EXPECT_EQ(y.float_val_size(), 0);
    ASSERT_EQ(y.tensor_content().size(), 2 * sizeof(float));
    float out[2];
    std::memcpy(out, y.tensor_content().data(), sizeof(out));
    EXPECT_EQ(out[0], 2.5f);
    EXPECT_EQ(out[1], 3.5f);
  }
  const std::string log = server.Log();
  EXPECT_THAT(log, Not(HasSubstr("unknown argument")));
  EXPECT_THAT(log, HasSubstr("--use_tfrt: accepted"));
  EXPECT_THAT(log, HasSubstr("--xla_cpu_compilation_enabled: Kiln's ahead-of-time compilation"));
  EXPECT_THAT(log, HasSubstr("--mixed_precision=bfloat16"));
  EXPECT_THAT(log, HasSubstr("--platform_config_file=" + dir + "/platform.config: read"));
  // Each version's load prints what the optimizer made of it.
  EXPECT_THAT(log, HasSubstr("kiln serve: model a version 1 loaded from"));
  EXPECT_THAT(log, HasSubstr("optimization log:"));
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

TEST(ServeFlagsE2ETest, VersionAndAltsAtStart) {
  std::string output;
  EXPECT_EQ(RunKiln({"serve", "--version"}, &output), 0);
  EXPECT_THAT(output, HasSubstr("TensorFlow ModelServer: kiln"));
  // ALTS would secure the port; serving it in plaintext instead is refused.
  EXPECT_EQ(
      RunKiln({"serve", "--port=0", "--use_alts_credentials", "--model_base_path=/x"}, &output), 1);
  EXPECT_THAT(output, HasSubstr("--use_alts_credentials: Kiln has no ALTS"));
  EXPECT_EQ(RunKiln({"serve", "--port=0", "--tensorflow_session_parallelism=2",
                     "--tensorflow_intra_op_parallelism=2", "--tensorflow_inter_op_parallelism=2",
                     "--model_base_path=/x"},
                    &output),
            1);
  EXPECT_THAT(output, HasSubstr("You cannot configure all."));
  EXPECT_EQ(RunKiln({"serve", "--port=0", "--platform_config_file=/nonexistent/platform",
                     "--model_base_path=/x"},
                    &output),
            1);
  EXPECT_THAT(output, HasSubstr("--platform_config_file: cannot read file /nonexistent/platform"));
}

// TF Serving's http_server.cc: OPTIONS is answered on the API paths whether or not CORS is on
// (200 with an http(s) Origin, else 400); the CORS headers come only with the flag, on every
// API reply, errors included.
TEST(ServeFlagsE2ETest, CorsHeadersAndPreflightAsTfServing) {
  const std::string dir = MakeTempDir("cors");
  const std::string base = HalfPlusTwoBase(dir, "m");
  for (bool cors : {true, false}) {
    ServerProcess server(
        {"serve", "--model_name=m", "--model_base_path=" + base,
         std::string("--rest_api_enable_cors_support=") + (cors ? "true" : "false")});
    ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
    HttpReply preflight =
        HttpCall(server.rest_port(), "OPTIONS", "/v1/models/m:predict", "",
                 {{"Origin", "http://localhost:3000"}, {"Access-Control-Request-Method", "POST"}});
    EXPECT_EQ(preflight.status, 200) << preflight.body;
    EXPECT_EQ(preflight.body, "");
    HttpReply no_origin = HttpCall(server.rest_port(), "OPTIONS", "/v1/models/m:predict");
    EXPECT_EQ(no_origin.status, 400);
    EXPECT_THAT(no_origin.body, HasSubstr("Origin header is missing in CORS preflight"));
    HttpReply predict = HttpCall(server.rest_port(), "POST", "/v1/models/m:predict",
                                 R"({"instances": [[2.0]]})", {{"Origin", "https://app.example"}});
    EXPECT_EQ(predict.body, R"({"predictions": [[3.0]]})");
    HttpReply error = HttpCall(server.rest_port(), "GET", "/v1/models/nope");
    EXPECT_EQ(error.status, 404);
    for (const HttpReply* reply : {&preflight, &no_origin, &predict, &error}) {
      EXPECT_EQ(Header(*reply, "Access-Control-Allow-Origin"), cors ? "*" : "");
      EXPECT_EQ(Header(*reply, "Access-Control-Allow-Methods"), cors ? "POST, GET" : "");
      EXPECT_EQ(Header(*reply, "Access-Control-Allow-Headers"), cors ? "Content-Type" : "");
    }
    EXPECT_EQ(server.Terminate(), 0) << server.Log();
  }
}

// A version folder whose model arrives after the first load attempt (a copy in progress):
// loaded on a retry, and the server starts serving it.
TEST(ServeFlagsE2ETest, LoadRetriesPickUpAModelThatArrivesLate) {
  const std::string dir = MakeTempDir("retries");
  const std::string base = dir + "/m";
  fs::create_directories(base + "/1");
  std::string output;
  // Without retries the empty version folder fails the start.
  EXPECT_EQ(RunKiln({"serve", "--port=0", "--model_name=m", "--model_base_path=" + base,
                     "--max_num_load_retries=0"},
                    &output),
            1);
  ServerProcess server({"serve", "--model_name=m", "--model_base_path=" + base,
                        "--max_num_load_retries=100", "--load_retry_interval_micros=100000"});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.Log().find("retrying") == std::string::npos &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_THAT(server.Log(), HasSubstr("failed to load (attempt 1 of 101), retrying"));
  {
    // SIGTERM while a load waits for its retry ends the process at once, as it ends TF
    // Serving's, instead of after the retries.
    ServerProcess stopped({"serve", "--model_name=m", "--model_base_path=" + base,
                           "--load_retry_interval_micros=60000000"});
    const auto until_first = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (stopped.Log().find("retrying") == std::string::npos &&
           std::chrono::steady_clock::now() < until_first) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(stopped.Terminate(/*timeout_s=*/10), 128 + SIGTERM) << stopped.Log();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_THAT(stopped.Log(), HasSubstr("while loading models; exiting"));
  }
  fs::copy_file(kHalfPlusTwo, base + "/1/model.onnx.partial");
  fs::rename(base + "/1/model.onnx.partial", base + "/1/model.onnx");
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  EXPECT_EQ(
      HttpCall(server.rest_port(), "POST", "/v1/models/m:predict", R"({"instances": [[4.0]]})")
          .body,
      R"({"predictions": [[4.0]]})");
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

// TF Serving checks a SignatureDef's method_name only under
// --enable_signature_method_name_check: TF2 exports mark every signature as predict, and
// their regress/classify signatures must work without it (TF Serving's RegressTf2 test).
TEST(ServeFlagsE2ETest, MethodNameCheckOnlyWhenAsked) {
  const std::string body =
      R"({"signature_name": "regress_x_to_y", "examples": [{"x": 9.0}, {"x": 1.0}]})";
  for (bool check : {false, true}) {
    ServerProcess server(
        {"serve", "--model_name=tf2", "--model_base_path=" + kTf2HalfPlusTwo,
         "--tensorflow_session_parallelism=2",
         std::string("--enable_signature_method_name_check=") + (check ? "true" : "false")});
    ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
    HttpReply regress = HttpCall(server.rest_port(), "POST", "/v1/models/tf2:regress", body);
    if (check) {
      EXPECT_EQ(regress.status, 400) << regress.body;
      EXPECT_THAT(regress.body, HasSubstr("method_name to be tensorflow/serving/regress"));
    } else {
      EXPECT_EQ(regress.status, 200) << regress.body;
      EXPECT_EQ(regress.body, R"({"results": [6.5, 2.5]})");
    }
    EXPECT_EQ(server.Terminate(), 0) << server.Log();
  }
}

// Without --enable_serialization_as_tensor_content the typed fields, as TF Serving.
TEST(ServeFlagsE2ETest, TensorContentOnlyWhenAsked) {
  const std::string dir = MakeTempDir("tensor_content");
  const std::string base = HalfPlusTwoBase(dir, "m");
  for (bool content : {false, true}) {
    ServerProcess server(
        {"serve", "--model_name=m", "--model_base_path=" + base,
         std::string("--enable_serialization_as_tensor_content=") + (content ? "true" : "false")},
        /*with_rest=*/false);
    ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
    {
      const auto response = GrpcPredict(server, "m", {1, 3, -2});
      const auto& y = response.outputs().at("y");
      EXPECT_EQ(y.dtype(), tensorflow::DT_FLOAT);
      ASSERT_EQ(y.tensor_shape().dim_size(), 2);
      EXPECT_EQ(y.tensor_shape().dim(0).size(), 3);
      std::vector<float> values(3);
      if (content) {
        EXPECT_EQ(y.float_val_size(), 0);
        ASSERT_EQ(y.tensor_content().size(), 3 * sizeof(float));
        std::memcpy(values.data(), y.tensor_content().data(), 3 * sizeof(float));
      } else {
        EXPECT_TRUE(y.tensor_content().empty());
        ASSERT_EQ(y.float_val_size(), 3);
        for (int i = 0; i < 3; ++i) values[i] = y.float_val(i);
      }
      EXPECT_EQ(values, (std::vector<float>{2.5f, 3.5f, 1.0f}));
    }
    EXPECT_EQ(server.Terminate(), 0) << server.Log();
  }
}

// --enable_per_model_batching_parameters: each version folder's batching_params.pbtxt; a model
// without one does not batch. One model splits large batches: its answers equal the unbatched
// model's, and its batch-size histogram shows the three parts.
TEST(ServeFlagsE2ETest, PerModelBatchingAndLargeBatchSplitting) {
  const std::string dir = MakeTempDir("per_model_batching");
  const std::string split = HalfPlusTwoBase(dir, "split");
  WriteFile(split + "/1/batching_params.pbtxt",
            "max_batch_size { value: 64 }\n"
            "batch_timeout_micros { value: 0 }\n"
            "enable_large_batch_splitting { value: true }\n"
            "max_execution_batch_size { value: 2 }\n"
            "allowed_batch_sizes: 1\nallowed_batch_sizes: 2\n");
  const std::string small = HalfPlusTwoBase(dir, "small");
  WriteFile(small + "/1/batching_params.pbtxt", "max_batch_size { value: 3 }\n");
  const std::string plain = HalfPlusTwoBase(dir, "plain");
  WriteFile(dir + "/models.config",
            ModelList({{"split", split}, {"small", small}, {"plain", plain}}));
  // The global parameters would refuse every request below: they must not apply.
  WriteFile(dir + "/batching.config", "max_batch_size { value: 1 }\n");
  WriteFile(dir + "/monitoring.config", "prometheus_config { enable: true }\n");
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config",
                        "--enable_batching",
                        "--batching_parameters_file=" + dir + "/batching.config",
                        "--enable_per_model_batching_parameters",
                        "--monitoring_config_file=" + dir + "/monitoring.config"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  const std::string five = R"({"instances": [[1.0], [2.0], [5.0], [-1.5], [0.25]]})";
  HttpReply unbatched = HttpCall(server.rest_port(), "POST", "/v1/models/plain:predict", five);
  EXPECT_EQ(unbatched.status, 200) << unbatched.body;
  EXPECT_EQ(unbatched.body, R"({"predictions": [[2.5], [3.0], [4.5], [1.25], [2.125]]})");
  HttpReply merged = HttpCall(server.rest_port(), "POST", "/v1/models/split:predict", five);
  EXPECT_EQ(merged.status, 200) << merged.body;
  EXPECT_EQ(merged.body, unbatched.body);
  HttpReply refused = HttpCall(server.rest_port(), "POST", "/v1/models/small:predict", five);
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("larger than maximum input batch size 3"));
  const std::string metrics =
      HttpCall(server.rest_port(), "GET", "/monitoring/prometheus/metrics").body;
  EXPECT_THAT(metrics, HasSubstr(":tensorflow:serving:batching_session:input_batch_size_count{"
                                 "model_name=\"split\"} 3"));
  EXPECT_THAT(metrics, Not(HasSubstr("input_batch_size_count{model_name=\"plain\"}")));
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

}  // namespace
}  // namespace kiln::serving::testing
