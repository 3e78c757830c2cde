// libFuzzer target for the serving front ends: random and mutated REST requests (TF Serving's
// /v1 predict, classify, regress, status and metadata; KServe v2 infer, ready and metadata;
// the Prometheus endpoint) and gRPC requests (Predict, Classify, Regress, MultiInference,
// GetModelMetadata, GetModelStatus) go to an in-process ServerCore without sockets: the REST
// ones through RestHandler::Handle, the gRPC ones as parsed protobufs straight into the
// service methods. Any request must give a response, never a crash, and never a handler's
// last-resort catch of an exception ("unexpected error", "out of memory": a size or index the
// code should have checked).
//
// Input format (readable, so that seeds are easy to write and mutations stay meaningful):
//   "<METHOD> <TARGET>\n<body>"   a REST request, e.g. "POST
//   /v1/models/half_plus_two:predict\n{...}" "GRPC <Rpc>\n<bytes>"         a gRPC request: <bytes>
//   is the serialized request message
// Seeds are in fuzz/corpus_seeds/serving_request_fuzz/ (fuzz/make_serving_seeds.sh writes them).
//
// The served model is built in memory (no files needed): "half_plus_two" with TF Serving's
// half_plus_two signatures (y = 0.5x + 2 for predict; classify_x_to_y and regress_x_to_y on
// serialized tf.Examples) plus a MatMul signature and one with int64, string and bool inputs.
// Every request goes to two servers: one without batching and one with batching on (padding
// of variable-length inputs included), since batching splits and pads request tensors.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "kiln/import/imported_model.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/model.h"
#include "kiln/serving/grpc_service.h"
#include "kiln/serving/metrics.h"
#include "kiln/serving/rest_handler.h"
#include "kiln/serving/server_core.h"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kiln::import::SignatureGraph;
using kiln::import::TensorInfo;
namespace fs = std::filesystem;
namespace tfs = tensorflow::serving;

constexpr char kModelName[] = "half_plus_two";

TensorInfo Info(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  TensorInfo info;
  info.name = name;
  info.dtype = dtype;
  info.rank_known = true;
  info.shape = std::move(shape);
  return info;
}

kiln::ir::ValueId Op(kiln::ir::Graph& g, const std::string& op,
                     std::vector<kiln::ir::ValueId> inputs,
                     std::map<std::string, kiln::ir::Attribute> attrs = {},
                     const std::string& domain = "") {
  const auto id = g.AddNode(op, std::move(inputs), 1, std::move(attrs),
                            absl::StrCat(op, "_", g.num_nodes()), domain);
  return g.node(id).outputs[0];
}

kiln::ir::ValueId HalfPlusTwo(kiln::ir::Graph& g, kiln::ir::ValueId x) {
  const auto half = g.AddConstant("half", Tensor::Scalar<float>(0.5f));
  const auto two = g.AddConstant("two", Tensor::Scalar<float>(2.0f));
  return Op(g, "Add", {Op(g, "Mul", {x, half}), two});
}

SignatureGraph Predict() {
  SignatureGraph sig;
  sig.key = "serving_default";
  sig.method_name = "tensorflow/serving/predict";
  sig.input_keys = {"x"};
  sig.output_keys = {"y"};
  sig.inputs["x"] = Info("x:0", DType::kFloat32, {-1, 1});
  sig.outputs["y"] = Info("y:0", DType::kFloat32, {-1, 1});
  auto& g = sig.graph;
  const auto x = g.AddValue("x", kiln::ir::TensorType::Of(DType::kFloat32, {-1, 1}));
  g.inputs = {x};
  g.outputs = {HalfPlusTwo(g, x)};
  return sig;
}

// TF Serving's classify_x_to_y / regress_x_to_y: serialized tf.Examples with a float feature
// "x" of shape [1], parsed by kiln::ParseExample as the TF importer writes it.
SignatureGraph FromExamples(const std::string& key, const std::string& method,
                            const std::string& output) {
  SignatureGraph sig;
  sig.key = key;
  sig.method_name = method;
  sig.input_keys = {"inputs"};
  sig.output_keys = {output};
  sig.inputs["inputs"] = Info("tf_example:0", DType::kString, {-1});
  sig.outputs[output] = Info("y:0", DType::kFloat32, {-1, 1});
  auto& g = sig.graph;
  const auto serialized = g.AddValue("tf_example", kiln::ir::TensorType::Of(DType::kString, {-1}));
  g.inputs = {serialized};
  // An empty default marks the feature as required.
  const auto required = g.AddConstant("x_default", Tensor(DType::kFloat32, Shape{0}));
  const auto x = Op(g, "ParseExample", {serialized, required},
                    {{"sparse_keys", std::vector<std::string>{}},
                     {"sparse_types", std::vector<int64_t>{}},
                     {"dense_keys", std::vector<std::string>{"x"}},
                     {"dense_types", std::vector<int64_t>{1}},  // ONNX FLOAT
                     {"dense_ranks", std::vector<int64_t>{1}},
                     {"dense_dims", std::vector<int64_t>{1}},
                     {"single", int64_t{0}}},
                    "kiln");
  g.outputs = {HalfPlusTwo(g, x)};
  return sig;
}

// probs = Softmax(Relu(x @ W + b)): oneDNN MatMul behind a declared [-1, 4] input.
SignatureGraph Dense() {
  SignatureGraph sig;
  sig.key = "dense";
  sig.method_name = "tensorflow/serving/predict";
  sig.input_keys = {"features"};
  sig.output_keys = {"probs"};
  sig.inputs["features"] = Info("features:0", DType::kFloat32, {-1, 4});
  sig.outputs["probs"] = Info("probs:0", DType::kFloat32, {-1, 3});
  auto& g = sig.graph;
  const auto x = g.AddValue("features", kiln::ir::TensorType::Of(DType::kFloat32, {-1, 4}));
  g.inputs = {x};
  const auto w = g.AddConstant(
      "w", Tensor::FromVector<float>({0.5f, -1, 2, 0.25f, 1, -0.5f, -2, 0, 1, 1, 1, -1}, {4, 3}));
  const auto b = g.AddConstant("b", Tensor::FromVector<float>({0.1f, 0.2f, -0.3f}, {3}));
  g.outputs = {Op(g, "Softmax", {Op(g, "Relu", {Op(g, "Add", {Op(g, "MatMul", {x, w}), b})})},
                  {{"axis", int64_t{-1}}})};
  return sig;
}

// Inputs of the other JSON-encoded dtypes: int64 pairs, strings (also as {"b64": ...}), bools.
SignatureGraph Multi() {
  SignatureGraph sig;
  sig.key = "multi";
  sig.method_name = "tensorflow/serving/predict";
  sig.input_keys = {"ids", "name", "flag"};
  sig.output_keys = {"ids_sum", "name_out", "not_flag"};
  sig.inputs["ids"] = Info("ids:0", DType::kInt64, {-1, 2});
  sig.inputs["name"] = Info("name:0", DType::kString, {-1});
  sig.inputs["flag"] = Info("flag:0", DType::kBool, {-1});
  sig.outputs["ids_sum"] = Info("ids_sum:0", DType::kInt64, {-1});
  sig.outputs["name_out"] = Info("name_out:0", DType::kString, {-1});
  sig.outputs["not_flag"] = Info("not_flag:0", DType::kBool, {-1});
  auto& g = sig.graph;
  const auto ids = g.AddValue("ids", kiln::ir::TensorType::Of(DType::kInt64, {-1, 2}));
  const auto name = g.AddValue("name", kiln::ir::TensorType::Of(DType::kString, {-1}));
  const auto flag = g.AddValue("flag", kiln::ir::TensorType::Of(DType::kBool, {-1}));
  g.inputs = {ids, name, flag};
  const auto axes = g.AddConstant("axes", Tensor::FromVector<int64_t>({1}));
  g.outputs = {Op(g, "ReduceSum", {ids, axes}, {{"keepdims", int64_t{0}}}),
               Op(g, "Identity", {name}), Op(g, "Not", {flag})};
  return sig;
}

kiln::import::ImportedModel BuildModel() {
  kiln::import::ImportedModel m;
  m.platform = "onnx";
  m.path = "serving_request_fuzz (in memory)";
  m.signatures.push_back(Predict());
  m.signatures.push_back(FromExamples("classify_x_to_y", "tensorflow/serving/classify", "scores"));
  m.signatures.push_back(FromExamples("regress_x_to_y", "tensorflow/serving/regress", "outputs"));
  m.signatures.push_back(Dense());
  m.signatures.push_back(Multi());
  return m;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "serving_request_fuzz FINDING: %s\n", what.c_str());
  std::abort();
}

struct Server {
  kiln::serving::ServingMetrics metrics;
  std::unique_ptr<kiln::serving::ServerCore> core;
  std::unique_ptr<kiln::serving::RestHandler> rest;
  std::unique_ptr<kiln::serving::PredictionServiceImpl> prediction;
  std::unique_ptr<kiln::serving::ModelServiceImpl> model_service;
};

std::unique_ptr<Server> StartServer(bool batching) {
  // ServerCore finds versions by listing the base path; the loader ignores the files.
  const fs::path base = fs::temp_directory_path() /
                        absl::StrCat("kiln_serving_fuzz_", ::getpid(), batching ? "_b" : "");
  std::error_code error;
  fs::create_directories(base / "1", error);
  std::ofstream(base / "1" / "model.onnx").put('\n');

  auto server = std::make_unique<Server>();
  kiln::serving::ServerCoreOptions options;
  options.file_system_poll_wait_seconds = 0;  // read the base path once
  options.enable_model_warmup = false;
  options.metrics = &server->metrics;
  options.model_options.intra_op_threads = 1;
  options.model_options.inter_op_threads = 1;
  // Far below libFuzzer's 2 GiB RSS limit, as a server's --run_memory_budget_bytes sits below
  // its machine's memory: a request that asks for more (one value filling a huge shape) is
  // RESOURCE_EXHAUSTED, what is under test, not an allocation the fuzzer reports.
  options.model_options.run_memory_budget_bytes = size_t{256} << 20;
  options.loader = [](const std::string&, const kiln::runtime::ModelOptions& model_options) {
    return kiln::runtime::Model::FromImported(BuildModel(), model_options);
  };
  if (batching) {
    kiln::serving::BatchingOptions b;
    b.max_batch_size = 8;
    b.batch_timeout_micros = 0;  // never wait for company: one request per batch, fast
    b.num_batch_threads = 1;
    b.allowed_batch_sizes = {2, 4, 8};
    b.pad_variable_length_inputs = true;
    options.batching = b;
  }
  auto config = kiln::serving::SingleModelConfig(kModelName, base.string());
  config.mutable_model_config_list()->mutable_config(0)->set_model_platform("onnx");
  auto core = kiln::serving::ServerCore::Create(options, config);
  fs::remove_all(base, error);  // loaded; nothing polls the directory again
  if (!core.ok()) Die(absl::StrCat("cannot start the server core: ", core.status().ToString()));
  server->core = std::move(*core);
  server->rest = std::make_unique<kiln::serving::RestHandler>(server->core.get(), &server->metrics,
                                                              "/monitoring/prometheus/metrics");
  server->prediction =
      std::make_unique<kiln::serving::PredictionServiceImpl>(server->core.get(), &server->metrics);
  server->model_service = std::make_unique<kiln::serving::ModelServiceImpl>(server->core.get());
  return server;
}

std::vector<std::unique_ptr<Server>>& Servers() {
  static auto* servers = [] {
    // Mutated protobufs carry invalid UTF-8 in string fields; protobuf logs each one.
    google::protobuf::SetLogHandler(nullptr);
    auto* s = new std::vector<std::unique_ptr<Server>>;
    s->push_back(StartServer(/*batching=*/false));
    s->push_back(StartServer(/*batching=*/true));
    return s;
  }();
  return *servers;
}

// The handlers' last resort turns escaped exceptions into INTERNAL "unexpected error: ..." and
// RESOURCE_EXHAUSTED "out of memory while handling this request"; the code behind them must have
// returned an error itself (errors are values, never exceptions). Matched exactly (code and
// message start), since error messages echo request text that the fuzzer learns to fill with
// these very words.
constexpr char kUnexpected[] = "unexpected error: ";
constexpr char kOutOfMemory[] = "out of memory while handling this request";

void CheckRest(absl::string_view method, absl::string_view target,
               const kiln::serving::HttpResponse& response) {
  if (response.status < 200 || response.status > 599) {
    Die(absl::StrCat("HTTP status ", response.status, "\nrequest: ", method, " ", target));
  }
  static const auto* oom = new kiln::serving::HttpResponse(
      kiln::serving::ErrorResponse(absl::ResourceExhaustedError(kOutOfMemory)));
  static const auto* unexpected = new kiln::serving::HttpResponse(
      kiln::serving::ErrorResponse(absl::InternalError(kUnexpected)));
  static const std::string unexpected_prefix =
      unexpected->body.substr(0, unexpected->body.find(kUnexpected) + std::strlen(kUnexpected));
  if ((response.status == oom->status && response.body == oom->body) ||
      (response.status == unexpected->status &&
       absl::StartsWith(response.body, unexpected_prefix))) {
    Die(absl::StrCat("REST: an exception reached the handler's last resort: ", response.body,
                     "\nrequest: ", method, " ", target));
  }
}

void CheckGrpc(const std::string& rpc, const grpc::Status& status) {
  if ((status.error_code() == grpc::StatusCode::INTERNAL &&
       absl::StartsWith(status.error_message(), kUnexpected)) ||
      (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
       status.error_message() == kOutOfMemory)) {
    Die(absl::StrCat("gRPC ", rpc,
                     ": an exception reached the handler's last resort: ", status.error_message()));
  }
}

template <typename Request>
bool Parse(absl::string_view bytes, Request* request) {
  return request->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

void RunGrpc(Server& server, absl::string_view rpc, absl::string_view bytes) {
  if (rpc == "Predict") {
    tfs::PredictRequest request;
    tfs::PredictResponse response;
    if (Parse(bytes, &request))
      CheckGrpc("Predict", server.prediction->Predict(nullptr, &request, &response));
  } else if (rpc == "Classify") {
    tfs::ClassificationRequest request;
    tfs::ClassificationResponse response;
    if (Parse(bytes, &request)) {
      CheckGrpc("Classify", server.prediction->Classify(nullptr, &request, &response));
    }
  } else if (rpc == "Regress") {
    tfs::RegressionRequest request;
    tfs::RegressionResponse response;
    if (Parse(bytes, &request))
      CheckGrpc("Regress", server.prediction->Regress(nullptr, &request, &response));
  } else if (rpc == "MultiInference") {
    tfs::MultiInferenceRequest request;
    tfs::MultiInferenceResponse response;
    if (Parse(bytes, &request)) {
      CheckGrpc("MultiInference", server.prediction->MultiInference(nullptr, &request, &response));
    }
  } else if (rpc == "GetModelMetadata") {
    tfs::GetModelMetadataRequest request;
    tfs::GetModelMetadataResponse response;
    if (Parse(bytes, &request)) {
      CheckGrpc("GetModelMetadata",
                server.prediction->GetModelMetadata(nullptr, &request, &response));
    }
  } else if (rpc == "GetModelStatus") {
    tfs::GetModelStatusRequest request;
    tfs::GetModelStatusResponse response;
    if (Parse(bytes, &request)) {
      CheckGrpc("GetModelStatus",
                server.model_service->GetModelStatus(nullptr, &request, &response));
    }
  }
  // HandleReloadConfigRequest is left out on purpose: it would load whatever base paths the
  // input names from this machine's disk.
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t eol = input.find('\n');
  const absl::string_view line = input.substr(0, eol);
  const absl::string_view body = eol == absl::string_view::npos ? "" : input.substr(eol + 1);
  const size_t space = line.find(' ');
  if (space == absl::string_view::npos) return 0;
  const absl::string_view method = line.substr(0, space);
  const absl::string_view target = line.substr(space + 1);
  for (auto& server : Servers()) {
    if (method == "GRPC") {
      RunGrpc(*server, target, body);
      continue;
    }
    const kiln::serving::HttpResponse response = server->rest->Handle(
        kiln::serving::HttpRequest{std::string(method), std::string(target), std::string(body)});
    CheckRest(method, target, response);
  }
  return 0;
}
