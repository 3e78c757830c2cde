// ServerCore and the REST handler in-process, on the example ONNX models loaded by the real
// runtime: predict forms, status and metadata JSON, version transitions, failed loads, labels,
// batching.
#include "kiln/serving/server_core.h"

#include <filesystem>
#include <fstream>
#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/data/formats/tfrecord.h"
#include "kiln/serving/http_server.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/rest_handler.h"
#include "kiln/serving/tensor_proto.h"
#include "simdjson.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace kiln::serving {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kHalfPlusTwo =
    std::string(KILN_SOURCE_DIR) + "/examples/models/half_plus_two/1/model.onnx";

std::string TempDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_core_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void AddVersion(const std::string& base, int version, const std::string& model_file) {
  const fs::path dir = fs::path(base) / std::to_string(version);
  fs::create_directories(dir);
  fs::copy_file(model_file, dir / "model.onnx", fs::copy_options::overwrite_existing);
}

tensorflow::serving::ModelServerConfig OnnxConfig(const std::string& name,
                                                  const std::string& base) {
  auto config = SingleModelConfig(name, base);
  config.mutable_model_config_list()->mutable_config(0)->set_model_platform("onnx");
  return config;
}

HttpResponse Call(const RestHandler& handler, const std::string& method, const std::string& target,
                  const std::string& body = "") {
  return handler.Handle(HttpRequest{method, target, body});
}

ServerCoreOptions NoPolling(ServingMetrics* metrics) {
  ServerCoreOptions options;
  options.file_system_poll_wait_seconds = 0;  // tests poll by hand
  options.metrics = metrics;
  return options;
}

TEST(ServerCoreTest, PredictInBothFormsAndStatus) {
  const std::string base = TempDir("predict");
  AddVersion(base, 1, kHalfPlusTwo);
  ServingMetrics metrics;
  auto core = ServerCore::Create(NoPolling(&metrics), OnnxConfig("half_plus_two", base));
  ASSERT_TRUE(core.ok()) << core.status();
  RestHandler handler(core->get(), &metrics, "/metrics");

  HttpResponse row = Call(handler, "POST", "/v1/models/half_plus_two:predict",
                          R"({"instances": [[1.0], [2.0], [5.0]]})");
  EXPECT_EQ(row.status, 200) << row.body;
  EXPECT_EQ(row.body, R"({"predictions": [[2.5], [3.0], [4.5]]})");
  HttpResponse columnar = Call(handler, "POST", "/v1/models/half_plus_two/versions/1:predict",
                               R"({"signature_name": "serving_default", "inputs": {"x": [[1]]}})");
  EXPECT_EQ(columnar.body, R"({"outputs": [[2.5]]})");

  HttpResponse status = Call(handler, "GET", "/v1/models/half_plus_two");
  EXPECT_EQ(status.status, 200);
  EXPECT_EQ(status.body,
            "{\n \"model_version_status\": [\n  {\n   \"version\": \"1\",\n   \"state\": "
            "\"AVAILABLE\",\n   \"status\": {\n    \"error_code\": \"OK\",\n    "
            "\"error_message\": \"\"\n   }\n  }\n ]\n}\n");
  HttpResponse metadata = Call(handler, "GET", "/v1/models/half_plus_two/versions/1/metadata");
  EXPECT_EQ(metadata.status, 200);
  EXPECT_THAT(metadata.body, HasSubstr("\"serving_default\": {"));
  EXPECT_THAT(metadata.body, HasSubstr("\"dtype\": \"DT_FLOAT\""));

  HttpResponse bad_signature = Call(handler, "POST", "/v1/models/half_plus_two:predict",
                                    R"({"signature_name": "nope", "instances": [[1.0]]})");
  EXPECT_EQ(bad_signature.status, 400);
  EXPECT_EQ(bad_signature.body, R"({ "error": "Serving signature key \"nope\" not found." })");
  HttpResponse bad_dtype =
      Call(handler, "POST", "/v1/models/half_plus_two:predict", R"({"instances": [["a"]]})");
  EXPECT_EQ(bad_dtype.status, 400);
  HttpResponse extra = Call(handler, "POST", "/v1/models/half_plus_two:predict",
                            R"({"inputs": {"x": [[1.0]], "z": [1]}})");
  EXPECT_EQ(extra.status, 400);
  HttpResponse not_json = Call(handler, "POST", "/v1/models/half_plus_two:predict", "{");
  EXPECT_EQ(not_json.status, 400);
  HttpResponse classify =
      Call(handler, "POST", "/v1/models/half_plus_two:classify", R"({"examples": [{"x": 1.0}]})");
  EXPECT_EQ(classify.status, 400);
  EXPECT_THAT(classify.body, HasSubstr("classification"));

  HttpResponse v2 = Call(handler, "POST", "/v2/models/half_plus_two/infer",
                         R"({"inputs": [{"name": "x", "shape": [2, 1], "datatype": "FP32",
                              "data": [1, 2]}]})");
  EXPECT_EQ(v2.status, 200) << v2.body;
  EXPECT_EQ(v2.body,
            R"({"model_name": "half_plus_two", "model_version": "1", "outputs": )"
            R"([{"name": "y", "datatype": "FP32", "shape": [2, 1], "data": [2.5, 3.0]}]})");
  EXPECT_EQ(Call(handler, "GET", "/v2/models/half_plus_two/ready").status, 200);
  EXPECT_EQ(Call(handler, "GET", "/v2/health/ready").status, 200);

  HttpResponse prometheus = Call(handler, "GET", "/metrics");
  EXPECT_THAT(prometheus.body, HasSubstr(":tensorflow:serving:request_count{model_name=\"half_"
                                         "plus_two\",status=\"OK\"} 3"));
}

TEST(ServerCoreTest, NewVersionReplacesOldAndFailedVersionKeepsOldServing) {
  const std::string base = TempDir("versions");
  AddVersion(base, 1, kHalfPlusTwo);
  auto core = ServerCore::Create(NoPolling(nullptr), OnnxConfig("m", base));
  ASSERT_TRUE(core.ok()) << core.status();
  auto first = (*core)->Lookup({"m"});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->version(), 1);

  AddVersion(base, 2, kHalfPlusTwo);
  (*core)->PollNow();
  auto second = (*core)->Lookup({"m"});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->version(), 2);
  auto statuses = (*core)->GetStatus("m", std::nullopt);
  ASSERT_TRUE(statuses.ok());
  ASSERT_EQ(statuses->size(), 2u);
  EXPECT_EQ((*statuses)[0].state, tensorflow::serving::ModelVersionStatus::END);
  EXPECT_EQ((*statuses)[1].state, tensorflow::serving::ModelVersionStatus::AVAILABLE);
  // The request that looked up version 1 still holds it.
  EXPECT_EQ((*first)->version(), 1);

  const fs::path broken = fs::path(base) / "3";
  fs::create_directories(broken);
  std::ofstream(broken / "model.onnx") << "not a model";
  (*core)->PollNow();
  auto still = (*core)->Lookup({"m"});
  ASSERT_TRUE(still.ok());
  EXPECT_EQ((*still)->version(), 2);
  auto failed = (*core)->GetStatus("m", 3);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ((*failed)[0].state, tensorflow::serving::ModelVersionStatus::END);
  EXPECT_FALSE((*failed)[0].status.ok());
  auto specific = (*core)->Lookup({"m", 3, ""});
  EXPECT_EQ(specific.status().message(), "Servable not found for request: Specific(m, 3)");
}

TEST(ServerCoreTest, LabelsPoliciesAndReload) {
  const std::string base = TempDir("labels");
  AddVersion(base, 1, kHalfPlusTwo);
  AddVersion(base, 2, kHalfPlusTwo);
  auto config = OnnxConfig("m", base);
  auto* model = config.mutable_model_config_list()->mutable_config(0);
  model->mutable_model_version_policy()->mutable_all();
  (*model->mutable_version_labels())["stable"] = 1;
  (*model->mutable_version_labels())["canary"] = 2;
  auto core = ServerCore::Create(NoPolling(nullptr), config);
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ((*(*core)->Lookup({"m", std::nullopt, "stable"}))->version(), 1);
  EXPECT_EQ((*(*core)->Lookup({"m", std::nullopt, "canary"}))->version(), 2);
  EXPECT_EQ((*core)->Lookup({"m", std::nullopt, "beta"}).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A label on a version that is not loaded is refused.
  (*model->mutable_version_labels())["stable"] = 7;
  EXPECT_EQ((*core)->ReloadConfig(config).code(), absl::StatusCode::kFailedPrecondition);
  // Removing the model from the config unloads it; adding a second name serves it too.
  auto other = OnnxConfig("n", base);
  EXPECT_TRUE((*core)->ReloadConfig(other).ok());
  EXPECT_FALSE((*core)->Lookup({"m"}).ok());
  EXPECT_EQ((*(*core)->Lookup({"n"}))->version(), 2);
}

TEST(ServerCoreTest, BatchedPredictionsAreSplitBack) {
  const std::string base = TempDir("batching");
  AddVersion(base, 1, kHalfPlusTwo);
  ServingMetrics metrics;
  ServerCoreOptions options = NoPolling(&metrics);
  BatchingOptions batching;
  batching.max_batch_size = 8;
  batching.batch_timeout_micros = 20000;
  batching.allowed_batch_sizes = {4, 8};
  batching.num_batch_threads = 1;
  options.batching = batching;
  auto core = ServerCore::Create(options, OnnxConfig("m", base));
  ASSERT_TRUE(core.ok()) << core.status();
  RestHandler handler(core->get(), &metrics, "");
  std::vector<std::future<HttpResponse>> replies;
  for (int i = 0; i < 6; ++i) {
    replies.push_back(std::async(std::launch::async, [&handler, i] {
      return Call(handler, "POST", "/v1/models/m:predict",
                  "{\"instances\": [[" + std::to_string(2 * i) + "]]}");
    }));
  }
  for (int i = 0; i < 6; ++i) {
    HttpResponse reply = replies[i].get();
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.body, "{\"predictions\": [[" + std::to_string(i + 2) + ".0]]}");
  }
  EXPECT_GE(metrics.batch_size.Count({"m"}), 1u);
  // The runtime ran once per batch, not once per request.
  EXPECT_EQ(metrics.runtime_latency.Count({"m", "Predict", "kiln"}),
            metrics.batch_size.Count({"m"}));
  HttpResponse too_big = Call(handler, "POST", "/v1/models/m:predict",
                              R"({"instances": [[1],[2],[3],[4],[5],[6],[7],[8],[9]]})");
  EXPECT_EQ(too_big.status, 400);
  EXPECT_THAT(too_big.body, HasSubstr("larger than maximum input batch size 8"));
}

// half_plus_two's Mul/Add broadcast, so it runs rows of any width: requests of widths 1 and 3
// merge into one [2, 3] batch when pad_variable_length_inputs is on.
TEST(ServerCoreTest, PadVariableLengthInputsMergesRequestsOfDifferentWidths) {
  const std::string base = TempDir("padding");
  AddVersion(base, 1, kHalfPlusTwo);
  ServingMetrics metrics;
  ServerCoreOptions options = NoPolling(&metrics);
  BatchingOptions batching;
  batching.max_batch_size = 2;  // the batch closes when both requests are in
  batching.batch_timeout_micros = 5000000;
  batching.num_batch_threads = 1;
  batching.pad_variable_length_inputs = true;
  options.batching = batching;
  auto core = ServerCore::Create(options, OnnxConfig("m", base));
  ASSERT_TRUE(core.ok()) << core.status();
  RestHandler handler(core->get(), &metrics, "");
  auto narrow = std::async(std::launch::async, [&handler] {
    return Call(handler, "POST", "/v1/models/m:predict", R"({"instances": [[4.0]]})");
  });
  auto wide = std::async(std::launch::async, [&handler] {
    return Call(handler, "POST", "/v1/models/m:predict", R"({"instances": [[0.0, 2.0, 6.0]]})");
  });
  HttpResponse narrow_reply = narrow.get();
  HttpResponse wide_reply = wide.get();
  EXPECT_EQ(wide_reply.body, R"({"predictions": [[2.0, 3.0, 5.0]]})");
  // The narrow request was padded with its own first value (4.0), and comes back padded.
  EXPECT_EQ(narrow_reply.body, R"({"predictions": [[4.0, 4.0, 4.0]]})");
  EXPECT_EQ(metrics.batch_size.Count({"m"}), 1u);  // one batch ran both
}

void WriteWarmup(const std::string& version_dir, const std::string& input_key) {
  tensorflow::serving::PredictionLog log;
  auto* request = log.mutable_predict_log()->mutable_request();
  request->mutable_model_spec()->set_name("m");
  TensorToProto(Tensor::FromVector<float>({1, 2}, Shape{2, 1}),
                &(*request->mutable_inputs())[input_key]);
  fs::create_directories(fs::path(version_dir) / "assets.extra");
  std::ofstream file(fs::path(version_dir) / "assets.extra" / kWarmupFileName, std::ios::binary);
  const std::string record = data::formats::SerializeRecord(log.SerializeAsString());
  file << record << record;
}

TEST(ServerCoreTest, WarmupRunsBeforeTheVersionIsAvailable) {
  const std::string base = TempDir("warmup");
  AddVersion(base, 1, kHalfPlusTwo);
  WriteWarmup(base + "/1", "x");
  ServingMetrics metrics;
  auto core = ServerCore::Create(NoPolling(&metrics), OnnxConfig("m", base));
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ(metrics.model_warmup_latency.Count({base + "/1/model.onnx"}), 1u);

  // A warmup record the model cannot run fails the load of that version only.
  AddVersion(base, 2, kHalfPlusTwo);
  WriteWarmup(base + "/2", "not_an_input");
  (*core)->PollNow();
  auto status = (*core)->GetStatus("m", 2);
  ASSERT_TRUE(status.ok());
  EXPECT_THAT(status->at(0).status.message(), HasSubstr("warmup"));
  EXPECT_EQ((*(*core)->Lookup({"m"}))->version(), 1);
}

TEST(ServerCoreTest, CorruptedWarmupRecordFailsTheLoadNamingFileAndOffset) {
  const std::string base = TempDir("warmup_crc");
  AddVersion(base, 1, kHalfPlusTwo);
  WriteWarmup(base + "/1", "x");
  const std::string path = base + "/1/assets.extra/" + kWarmupFileName;
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Flip one data byte of the second record: its framing is intact, only the data CRC is wrong.
  const size_t record_size = bytes.size() / 2;
  bytes[record_size + 12 + 5] ^= 0x40;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  ServingMetrics metrics;
  auto core = ServerCore::Create(NoPolling(&metrics), OnnxConfig("m", base));
  ASSERT_FALSE(core.ok());
  EXPECT_EQ(core.status().code(), absl::StatusCode::kDataLoss) << core.status();
  EXPECT_THAT(core.status().message(), HasSubstr("data CRC mismatch"));
  EXPECT_THAT(core.status().message(), HasSubstr(path));
  EXPECT_THAT(core.status().message(), HasSubstr("at byte offset " + std::to_string(record_size)));
}

const std::string kTfServingTestdata = "/work/shared/testdata/tf_serving";

// JSON with every object's keys sorted: TF Serving's golden files list map entries in
// protobuf's order, Kiln in sorted order; the content must be the same.
std::string CanonicalJson(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  if (e.type() == element_type::OBJECT) {
    std::map<std::string, std::string> fields;
    simdjson::dom::object object = e.get_object().value_unsafe();
    for (auto field : object) {
      fields[std::string(field.key)] = CanonicalJson(field.value);
    }
    std::string out = "{";
    for (const auto& [key, value] : fields) out += "\"" + key + "\":" + value + ",";
    return out + "}";
  }
  if (e.type() == element_type::ARRAY) {
    std::string out = "[";
    simdjson::dom::array array = e.get_array().value_unsafe();
    for (auto item : array) out += CanonicalJson(item) + ",";
    return out + "]";
  }
  return simdjson::minify(e);
}

std::string CanonicalJson(const std::string& text) {
  static simdjson::dom::parser* parser = new simdjson::dom::parser();
  simdjson::dom::element doc;
  if (parser->parse(text).get(doc) != simdjson::SUCCESS) return "invalid JSON: " + text;
  return CanonicalJson(doc);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

tensorflow::serving::ModelServerConfig Tf2Config(const std::string& name) {
  return SingleModelConfig(name, kTfServingTestdata + "/saved_model_half_plus_two_tf2_cpu");
}

TEST(ServerCoreTest, Tf2MetadataMatchesTfServingsGoldenJson) {
  if (!fs::exists(kTfServingTestdata)) GTEST_SKIP() << "no " << kTfServingTestdata;
  auto core = ServerCore::Create(NoPolling(nullptr),
                                 Tf2Config("saved_model_half_plus_two_2_versions"));
  ASSERT_TRUE(core.ok()) << core.status();
  RestHandler handler(core->get(), nullptr, "");
  HttpResponse metadata =
      Call(handler, "GET", "/v1/models/saved_model_half_plus_two_2_versions/metadata");
  ASSERT_EQ(metadata.status, 200) << metadata.body;
  EXPECT_EQ(CanonicalJson(metadata.body),
            CanonicalJson(ReadAll(kTfServingTestdata +
                                  "/saved_model_half_plus_two_tf2_2_versions_metadata.json")));
}

// TF2 exports write tensorflow/serving/predict into every signature; TF Serving checks the
// method name only under --enable_signature_method_name_check.
TEST(ServerCoreTest, ClassifyAndRegressCheckMethodNameOnlyWhenAsked) {
  if (!fs::exists(kTfServingTestdata)) GTEST_SKIP() << "no " << kTfServingTestdata;
  const std::string body =
      R"({"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]})";
  for (bool check : {false, true}) {
    ServerCoreOptions options = NoPolling(nullptr);
    options.enable_signature_method_name_check = check;
    auto core = ServerCore::Create(options, Tf2Config("hp"));
    ASSERT_TRUE(core.ok()) << core.status();
    RestHandler handler(core->get(), nullptr, "");
    HttpResponse classify = Call(handler, "POST", "/v1/models/hp:classify", body);
    HttpResponse regress =
        Call(handler, "POST", "/v1/models/hp:regress",
             R"({"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]})");
    if (check) {
      EXPECT_EQ(classify.status, 400) << classify.body;
      EXPECT_THAT(classify.body, HasSubstr("method_name to be tensorflow/serving/classify"));
      EXPECT_EQ(regress.status, 400) << regress.body;
    } else {
      EXPECT_EQ(classify.status, 200) << classify.body;
      EXPECT_THAT(classify.body, HasSubstr(R"({"results": [[["", 3)"));
      EXPECT_EQ(regress.status, 200) << regress.body;
      EXPECT_THAT(regress.body, HasSubstr(R"({"results": [3)"));
    }
  }
}

TEST(ServerCoreTest, ReadModelServerConfigUsesTfServingsParseMessage) {
  if (!fs::exists(kTfServingTestdata)) GTEST_SKIP() << "no " << kTfServingTestdata;
  auto config = ReadModelServerConfig(kTfServingTestdata + "/bad_model_config.txt");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("Error parsing text-format tensorflow.serving.ModelServerConfig"));
  EXPECT_THAT(config.status().message(), HasSubstr("bad_model_config.txt"));
}

// HandleReloadConfigRequest applies all of a request or none of it, with TF Serving's codes.
TEST(ServerCoreTest, ReloadAppliesAllOrNothing) {
  const std::string base = TempDir("reload_all_or_nothing");
  AddVersion(base, 1, kHalfPlusTwo);
  AddVersion(base, 2, kHalfPlusTwo);
  auto config = OnnxConfig("m", base);
  auto core = ServerCore::Create(NoPolling(nullptr), config);
  ASSERT_TRUE(core.ok()) << core.status();
  auto serving_version = [&](const std::string& name) -> int64_t {
    auto servable = (*core)->Lookup({name});
    return servable.ok() ? (*servable)->version() : -1;
  };
  ASSERT_EQ(serving_version("m"), 2);

  // An empty config would unload everything: refused, nothing changes.
  absl::Status empty = (*core)->ReloadConfig(tensorflow::serving::ModelServerConfig());
  EXPECT_EQ(empty.code(), absl::StatusCode::kFailedPrecondition) << empty;
  EXPECT_EQ(serving_version("m"), 2);

  // One model's bad label fails the request: the new model "n" is not added, "m" keeps its
  // policy.
  auto bad_label = OnnxConfig("m", base);
  auto* m = bad_label.mutable_model_config_list()->mutable_config(0);
  m->mutable_model_version_policy()->mutable_specific()->add_versions(1);
  (*m->mutable_version_labels())["stable"] = 7;
  *bad_label.mutable_model_config_list()->add_config() =
      OnnxConfig("n", base).model_config_list().config(0);
  absl::Status label = (*core)->ReloadConfig(bad_label);
  EXPECT_EQ(label.code(), absl::StatusCode::kFailedPrecondition) << label;
  EXPECT_THAT(label.message(), HasSubstr("version 7 of model m"));
  EXPECT_EQ(serving_version("n"), -1);
  EXPECT_EQ(serving_version("m"), 2);

  // A version that fails to load fails the request: nothing changes either.
  const std::string broken = TempDir("reload_broken");
  fs::create_directories(fs::path(broken) / "1");
  std::ofstream(fs::path(broken) / "1" / "model.onnx") << "not a model";
  auto bad_load = OnnxConfig("m", base);
  *bad_load.mutable_model_config_list()->add_config() =
      OnnxConfig("b", broken).model_config_list().config(0);
  (*bad_load.mutable_model_config_list()->mutable_config(0)->mutable_version_labels())["x"] = 2;
  EXPECT_FALSE((*core)->ReloadConfig(bad_load).ok());
  EXPECT_FALSE((*core)->Lookup({"b"}).ok());
  EXPECT_EQ((*core)->ResolveLabel("m", "x").status().code(), absl::StatusCode::kInvalidArgument);

  // Changing the platform and relative base paths are refused, as TF Serving does.
  auto tensorflow_platform = OnnxConfig("m", base);
  tensorflow_platform.mutable_model_config_list()->mutable_config(0)->set_model_platform(
      "tensorflow");
  absl::Status platform = (*core)->ReloadConfig(tensorflow_platform);
  EXPECT_EQ(platform.code(), absl::StatusCode::kInvalidArgument) << platform;
  EXPECT_THAT(platform.message(), HasSubstr("Illegal to change a model's platform"));
  auto relative = OnnxConfig("m", "models/m");
  relative.mutable_model_config_list()->mutable_config(0)->set_base_path("models/m");
  absl::Status relative_status = (*core)->ReloadConfig(relative);
  EXPECT_EQ(relative_status.code(), absl::StatusCode::kInvalidArgument) << relative_status;
  EXPECT_THAT(relative_status.message(), HasSubstr("to have an absolute path"));
  EXPECT_EQ(serving_version("m"), 2);

  // A base path that does not exist keeps the version serving; once versions appear there,
  // the poll loads them and they replace it.
  const std::string moved = (fs::path(TempDir("reload_moved")) / "later").string();
  ASSERT_TRUE((*core)->ReloadConfig(OnnxConfig("m", moved)).ok());
  EXPECT_EQ(serving_version("m"), 2);
  (*core)->PollNow();
  EXPECT_EQ(serving_version("m"), 2);
  AddVersion(moved, 1, kHalfPlusTwo);
  (*core)->PollNow();
  EXPECT_EQ(serving_version("m"), 1);
  EXPECT_FALSE((*core)->Lookup({"m", 2, ""}).ok());

  // A good request applies all of its changes.
  auto good = OnnxConfig("m", moved);
  (*good.mutable_model_config_list()->mutable_config(0)->mutable_version_labels())["s"] = 1;
  *good.mutable_model_config_list()->add_config() =
      OnnxConfig("n", base).model_config_list().config(0);
  ASSERT_TRUE((*core)->ReloadConfig(good).ok());
  EXPECT_EQ(serving_version("n"), 2);
  EXPECT_EQ(*(*core)->ResolveLabel("m", "s"), 1);
}

TEST(ServerCoreTest, RestPathsAreUrlDecoded) {
  const std::string base = TempDir("url_decoded");
  AddVersion(base, 1, kHalfPlusTwo);
  auto config = OnnxConfig("hp two", base);
  (*config.mutable_model_config_list()->mutable_config(0)->mutable_version_labels())["a b"] = 1;
  auto core = ServerCore::Create(NoPolling(nullptr), config);
  ASSERT_TRUE(core.ok()) << core.status();
  RestHandler handler(core->get(), nullptr, "");
  EXPECT_EQ(Call(handler, "GET", "/v1/models/hp%20two").status, 200);
  HttpResponse predict = Call(handler, "POST", "/v1/models/hp%20two/labels/a%20b:predict",
                              R"({"instances": [[1.0]]})");
  EXPECT_EQ(predict.status, 200) << predict.body;
  EXPECT_EQ(predict.body, R"({"predictions": [[2.5]]})");
  EXPECT_EQ(Call(handler, "GET", "/v1/models/hp%2").status, 400);
  EXPECT_EQ(Call(handler, "GET", "/v1/models/hp%zztwo").status, 400);
}

TEST(HttpGzipTest, InflateBoundsTheDecompressedSize) {
  const std::string json(100000, ' ');
  const std::string gzip = GzipCompress(json);
  EXPECT_LT(gzip.size(), 1000u);
  auto inflated = InflateBody(gzip, json.size());
  ASSERT_TRUE(inflated.ok()) << inflated.status();
  EXPECT_EQ(*inflated, json);
  // A "zip bomb": small on the wire, over the limit once decompressed.
  auto bomb = InflateBody(gzip, json.size() - 1);
  EXPECT_EQ(bomb.status().code(), absl::StatusCode::kResourceExhausted) << bomb.status();
  EXPECT_EQ(InflateBody("not gzip at all", 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InflateBody(gzip.substr(0, gzip.size() / 2), 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("deflate, GZIP;q=0.5"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("br, identity"));
}

}  // namespace
}  // namespace kiln::serving
