// `kiln serve` with TF Serving's stateful test model, saved_model_counter (TF1 VariableV2 with
// Assign/AssignAdd), over gRPC Predict and REST: the answers of TF Serving's
// PredictImplTest.PredictionWithCustomizedSignatures (get 0, incr 1, reset 0, incr 1,
// incr_by(3) 4), increments from concurrent clients all counted, and one counter per loaded
// version, as TF Serving keeps one Session per version.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serve_harness.h"

namespace kiln::serving::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kCounter =
    std::string(KILN_SHARED_DIR) + "/testdata/tf_serving/saved_model_counter";

struct Answer {
  grpc::Status status;
  tensorflow::serving::PredictResponse response;
  float value() const {
    auto it = response.outputs().find("output");
    return it == response.outputs().end() || it->second.float_val_size() != 1
               ? -1.f
               : it->second.float_val(0);
  }
};

Answer Predict(tensorflow::serving::PredictionService::Stub& stub, const std::string& signature,
               std::optional<float> delta = std::nullopt, int64_t version = 0,
               bool filter = false) {
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name("counter");
  request.mutable_model_spec()->set_signature_name(signature);
  if (version > 0) request.mutable_model_spec()->mutable_version()->set_value(version);
  if (delta.has_value()) {
    // As TF Serving's test: a float_val without a tensor_shape is a scalar.
    auto& t = (*request.mutable_inputs())["delta"];
    t.set_dtype(tensorflow::DT_FLOAT);
    t.add_float_val(*delta);
  }
  if (filter) request.add_output_filter("output");
  Answer answer;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  answer.status = stub.Predict(&context, request, &answer.response);
  return answer;
}

// The response TF Serving's test expects: model_spec echoed with the version, one DT_FLOAT
// scalar "output".
void ExpectScalar(const Answer& answer, const std::string& signature, float value) {
  ASSERT_TRUE(answer.status.ok()) << signature << ": " << answer.status.error_message();
  const auto& r = answer.response;
  EXPECT_EQ(r.model_spec().name(), "counter");
  EXPECT_EQ(r.model_spec().signature_name(), signature);
  EXPECT_EQ(r.model_spec().version().value(), 123);
  ASSERT_EQ(r.outputs().size(), 1u);
  const auto& out = r.outputs().at("output");
  EXPECT_EQ(out.dtype(), tensorflow::DT_FLOAT);  // not DT_FLOAT_REF
  EXPECT_TRUE(out.has_tensor_shape());
  EXPECT_EQ(out.tensor_shape().dim_size(), 0);
  ASSERT_EQ(out.float_val_size(), 1);
  EXPECT_EQ(out.float_val(0), value) << signature;
}

TEST(CounterModelE2ETest, GrpcAndRestAnswerAsTfServing) {
  ServerProcess server({"serve", "--model_name=counter", "--model_base_path=" + kCounter});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  {
    auto stub = server.PredictionStub();
    ExpectScalar(Predict(*stub, "get_counter"), "get_counter", 0);
    ExpectScalar(Predict(*stub, "incr_counter"), "incr_counter", 1);
    ExpectScalar(Predict(*stub, "reset_counter"), "reset_counter", 0);
    ExpectScalar(Predict(*stub, "incr_counter", std::nullopt, 0, /*filter=*/true), "incr_counter",
                 1);
    ExpectScalar(Predict(*stub, "incr_counter_by", 3.f), "incr_counter_by", 4);
    ExpectScalar(Predict(*stub, "get_counter", std::nullopt, 123), "get_counter", 4);
    // A delta whose shape is not the counter's is the request's error (TensorFlow's
    // AssignAdd), and the counter keeps its value.
    tensorflow::serving::PredictRequest request;
    request.mutable_model_spec()->set_name("counter");
    request.mutable_model_spec()->set_signature_name("incr_counter_by");
    auto& delta = (*request.mutable_inputs())["delta"];
    delta.set_dtype(tensorflow::DT_FLOAT);
    delta.mutable_tensor_shape()->add_dim()->set_size(2);
    delta.add_float_val(1);
    delta.add_float_val(2);
    tensorflow::serving::PredictResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(stub->Predict(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    ExpectScalar(Predict(*stub, "get_counter"), "get_counter", 4);
  }
  // REST: the columnar form carries the scalar delta; the state is the one gRPC changed.
  HttpReply by = HttpCall(server.rest_port(), "POST", "/v1/models/counter:predict",
                          R"({"signature_name": "incr_counter_by", "inputs": {"delta": 1.5}})");
  EXPECT_EQ(by.status, 200) << by.body;
  EXPECT_EQ(by.body, R"({"outputs": 5.5})");
  HttpReply get = HttpCall(server.rest_port(), "POST", "/v1/models/counter/versions/123:predict",
                           R"({"signature_name": "get_counter", "inputs": {}})");
  EXPECT_EQ(get.status, 200) << get.body;
  EXPECT_EQ(get.body, R"({"outputs": 5.5})");
  HttpReply reset = HttpCall(server.rest_port(), "POST", "/v1/models/counter:predict",
                             R"({"signature_name": "reset_counter", "inputs": {}})");
  EXPECT_EQ(reset.body, R"({"outputs": 0.0})") << reset.body;
  HttpReply metadata = HttpCall(server.rest_port(), "GET", "/v1/models/counter/metadata");
  EXPECT_THAT(metadata.body, HasSubstr("\"incr_counter_by\""));
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

// Concurrent clients over gRPC: every increment is counted, and each reply is the value its own
// increment left (all of 1..N, each once).
TEST(CounterModelE2ETest, ConcurrentIncrementsAreAllCounted) {
  ServerProcess server({"serve", "--model_name=counter", "--model_base_path=" + kCounter});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  constexpr int kThreads = 4, kEach = 40;
  {
    std::vector<std::vector<float>> seen(kThreads);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        auto stub = server.PredictionStub();
        for (int i = 0; i < kEach; ++i) {
          Answer a = Predict(*stub, "incr_counter");
          if (!a.status.ok()) {
            ++failures;
          } else {
            seen[t].push_back(a.value());
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
    std::vector<float> all;
    for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    ASSERT_EQ(static_cast<int>(all.size()), kThreads * kEach);
    for (int i = 0; i < kThreads * kEach; ++i) EXPECT_EQ(all[i], static_cast<float>(i + 1));
    auto stub = server.PredictionStub();
    ExpectScalar(Predict(*stub, "get_counter"), "get_counter", kThreads * kEach);
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

// Two versions served at once have two counters, each starting from the checkpoint.
TEST(CounterModelE2ETest, EachVersionHasItsOwnCounter) {
  const std::string dir = MakeTempDir("counter_versions");
  const std::string base = dir + "/counter";
  for (const char* version : {"1", "2"}) {
    fs::create_directories(base + "/" + version);
    fs::copy(kCounter + "/00000123", base + "/" + version, fs::copy_options::recursive);
  }
  const std::string config = dir + "/models.config";
  std::ofstream(config)
      << "model_config_list { config { name: \"counter\" base_path: \"" << base
      << "\" model_platform: \"tensorflow\" model_version_policy { all {} } } }\n";
  ServerProcess server({"serve", "--model_config_file=" + config});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  {
    auto stub = server.PredictionStub();
    // Both versions must be loaded before the checks (loading is asynchronous).
    for (int attempt = 0;
         attempt < 100 && !Predict(*stub, "get_counter", std::nullopt, 1).status.ok(); ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    Answer one = Predict(*stub, "incr_counter_by", 7.f, 1);
    ASSERT_TRUE(one.status.ok()) << one.status.error_message();
    EXPECT_EQ(one.value(), 7.f);
    EXPECT_EQ(one.response.model_spec().version().value(), 1);
    Answer two = Predict(*stub, "get_counter", std::nullopt, 2);
    ASSERT_TRUE(two.status.ok()) << two.status.error_message();
    EXPECT_EQ(two.value(), 0.f);
    EXPECT_EQ(Predict(*stub, "incr_counter", std::nullopt, 2).value(), 1.f);
    EXPECT_EQ(Predict(*stub, "get_counter", std::nullopt, 1).value(), 7.f);
    // No version: the latest (2).
    EXPECT_EQ(Predict(*stub, "get_counter").value(), 1.f);
  }
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

}  // namespace
}  // namespace kiln::serving::testing
