// `kiln serve` features a TF Serving deployment relies on beyond predict, each against the real
// binary: TLS (--ssl_config_file, certificates made by the openssl CLI in the test), the
// grpc.health.v1 service (a client generated from grpc's health.proto), deadlines (gRPC's and
// --rest_api_timeout_in_ms) through the batching queue, and KServe v2 over gRPC (a client
// generated from KServe's grpc_predict_v2.proto).
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "kiln/data/dataset.h"
#include "kserve/grpc_predict_v2.grpc.pb.h"
#include "serve_harness.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace kiln::serving::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

const std::string kExamples = std::string(KILN_SOURCE_DIR) + "/examples/models";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string HalfPlusTwoConfig(const std::string& extra_models = "") {
  return "model_config_list {\n  config { name: \"half_plus_two\" base_path: \"" + kExamples +
         "/half_plus_two\" model_platform: \"onnx\" }\n" + extra_models + "}\n";
}

std::shared_ptr<grpc::Channel> Channel(
    int port,
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials()) {
  grpc::ChannelArguments args;
  // The certificates name "localhost"; connect by address, verify against that name.
  args.SetSslTargetNameOverride("localhost");
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), credentials, args);
}

// One Predict of half_plus_two with x = [[1], [2], [5]]; returns the status (and y in `y`).
grpc::Status PredictHalfPlusTwo(const std::shared_ptr<grpc::Channel>& channel,
                                std::vector<float>* y = nullptr, int deadline_ms = 10000) {
  auto stub = tensorflow::serving::PredictionService::NewStub(channel);
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name("half_plus_two");
  auto& x = (*request.mutable_inputs())["x"];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(3);
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  for (float v : {1.f, 2.f, 5.f}) x.add_float_val(v);
  tensorflow::serving::PredictResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  grpc::Status status = stub->Predict(&context, request, &response);
  if (status.ok() && y != nullptr) {
    const auto& out = response.outputs().at("y");
    y->assign(out.float_val().begin(), out.float_val().end());
  }
  return status;
}

// ---------------------------------------------------------------------------------------------
// TLS

struct Certificates {
  std::string dir;
  std::string ca_cert, server_key, server_cert, client_key, client_cert, other_key;
};

// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, both signed by
// the CA, and an unrelated key: made with the openssl CLI (EC P-256: fast to generate).
Certificates MakeCertificates() {
  Certificates c;
  c.dir = MakeTempDir("tls");
  const std::string d = c.dir;
  WriteFile(d + "/server.ext", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script = absl::StrCat(
      "set -e; cd ", d, "; exec >openssl.log 2>&1;", "openssl req -x509", key,
      " -keyout ca.key -out ca.crt -days 2 -subj /CN=kiln-test-ca;", "openssl req", key,
      " -keyout server.key -out server.csr -subj /CN=localhost;",
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2",
      " -extfile server.ext -out server.crt;", "openssl req", key,
      " -keyout client.key -out client.csr -subj /CN=kiln-test-client;",
      "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2",
      " -out client.crt;",
      "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out other.key");
  const int code = std::system(("bash -c '" + script + "'").c_str());
  EXPECT_EQ(code, 0) << ReadFile(d + "/openssl.log");
  c.ca_cert = ReadFile(d + "/ca.crt");
  c.server_key = ReadFile(d + "/server.key");
  c.server_cert = ReadFile(d + "/server.crt");
  c.client_key = ReadFile(d + "/client.key");
  c.client_cert = ReadFile(d + "/client.crt");
  c.other_key = ReadFile(d + "/other.key");
  return c;
}

// An SSLConfig text proto as TF Serving's docs write it: the PEM contents inline.
std::string SslConfigText(const std::string& key, const std::string& cert, const std::string& ca,
                          bool client_verify) {
  std::string out = absl::StrCat("server_key: \"", absl::CEscape(key), "\"\nserver_cert: \"",
                                 absl::CEscape(cert), "\"\n");
  if (!ca.empty()) absl::StrAppend(&out, "custom_ca: \"", absl::CEscape(ca), "\"\n");
  if (client_verify) out.append("client_verify: true\n");
  return out;
}

std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(const Certificates& c,
                                                         bool with_client_cert) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = c.ca_cert;
  if (with_client_cert) {
    options.pem_private_key = c.client_key;
    options.pem_cert_chain = c.client_cert;
  }
  return grpc::SslCredentials(options);
}

TEST(ServeTlsE2ETest, GrpcOverTlsRefusesPlaintextAndKeepsServing) {
  const Certificates certs = MakeCertificates();
  const std::string dir = MakeTempDir("tls_server");
  WriteFile(dir + "/models.config", HalfPlusTwoConfig());
  WriteFile(dir + "/ssl.config", SslConfigText(certs.server_key, certs.server_cert, "", false));
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config",
                        "--ssl_config_file=" + dir + "/ssl.config"},
                       /*with_rest=*/false);
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  EXPECT_THAT(server.Log(), HasSubstr("(TLS)"));
  {
    auto tls = Channel(server.grpc_port(), TlsCredentials(certs, false));
    std::vector<float> y;
    ASSERT_TRUE(PredictHalfPlusTwo(tls, &y).ok());
    EXPECT_EQ(y, (std::vector<float>{2.5f, 3.f, 4.5f}));
    // A plaintext client on the TLS port: its handshake fails, the RPC never runs.
    const grpc::Status plain = PredictHalfPlusTwo(Channel(server.grpc_port()), nullptr, 2000);
    EXPECT_FALSE(plain.ok());
    EXPECT_NE(plain.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << plain.error_message();
    // ... and the TLS connection already open keeps working, as does a new one.
    EXPECT_TRUE(PredictHalfPlusTwo(tls).ok());
    EXPECT_TRUE(PredictHalfPlusTwo(Channel(server.grpc_port(), TlsCredentials(certs, false))).ok());
    // A client that does not trust the server's CA is refused too.
    grpc::SslCredentialsOptions untrusting;
    // Trusts only the client certificate: not the CA that signed the server's. (Not the
    // server certificate itself: a trusted leaf is accepted as its own anchor.)
    untrusting.pem_root_certs = certs.client_cert;
    EXPECT_FALSE(PredictHalfPlusTwo(Channel(server.grpc_port(), grpc::SslCredentials(untrusting)),
                                    nullptr, 2000)
                     .ok());
  }
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(ServeTlsE2ETest, ClientVerifyRequiresACertificateTheCustomCaSigned) {
  const Certificates certs = MakeCertificates();
  const std::string dir = MakeTempDir("tls_verify");
  WriteFile(dir + "/models.config", HalfPlusTwoConfig());
  WriteFile(dir + "/ssl.config",
            SslConfigText(certs.server_key, certs.server_cert, certs.ca_cert, true));
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config",
                        "--ssl_config_file=" + dir + "/ssl.config"},
                       /*with_rest=*/false);
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  {
    EXPECT_FALSE(
        PredictHalfPlusTwo(Channel(server.grpc_port(), TlsCredentials(certs, false)), nullptr, 2000)
            .ok());
    std::vector<float> y;
    EXPECT_TRUE(
        PredictHalfPlusTwo(Channel(server.grpc_port(), TlsCredentials(certs, true)), &y).ok());
    EXPECT_EQ(y, (std::vector<float>{2.5f, 3.f, 4.5f}));
  }
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(ServeTlsE2ETest, BadKeysAndCertificatesStopTheServerNamingTheField) {
  const Certificates certs = MakeCertificates();
  const std::string dir = MakeTempDir("tls_bad");
  WriteFile(dir + "/models.config", HalfPlusTwoConfig());
  struct Case {
    std::string name, config, expected;
  };
  const std::vector<Case> cases = {
      {"mismatch", SslConfigText(certs.other_key, certs.server_cert, "", false),
       "server_key does not match server_cert"},
      {"bad_cert",
       SslConfigText(certs.server_key, "-----BEGIN CERTIFICATE-----\nnope\n", "", false),
       "server_cert is not a PEM certificate"},
      {"bad_key", SslConfigText("not a key", certs.server_cert, "", false),
       "server_key is not a PEM private key"},
      {"no_cert", SslConfigText(certs.server_key, "", "", false), "server_cert is empty"},
      {"bad_ca", SslConfigText(certs.server_key, certs.server_cert, "garbage", true),
       "custom_ca holds no PEM certificate"},
      {"not_proto", "server_key: 12 12", "is not a valid SSLConfig text proto"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WriteFile(dir + "/" + c.name, c.config);
    std::string output;
    const int code = RunKiln({"serve", "--model_config_file=" + dir + "/models.config",
                              "--ssl_config_file=" + dir + "/" + c.name, "--port=0"},
                             &output);
    EXPECT_NE(code, 0);
    EXPECT_THAT(output, HasSubstr("--ssl_config_file: "));
    EXPECT_THAT(output, HasSubstr(c.expected));
  }
  std::string output;
  EXPECT_NE(RunKiln({"serve", "--model_config_file=" + dir + "/models.config",
                     "--ssl_config_file=" + dir + "/missing", "--port=0"},
                    &output),
            0);
  EXPECT_THAT(output, HasSubstr("--ssl_config_file: cannot read file " + dir + "/missing"));
}

// curl's exit code and body for `args` (the HTTPS client of the REST tests).
int Curl(const std::string& args, std::string* body) {
  const std::string out = MakeTempDir("curl") + "/out";
  const int code =
      std::system(("curl -sS --max-time 5 -o " + out + " " + args + " 2>" + out + ".err").c_str());
  *body = ReadFile(out) + ReadFile(out + ".err");
  return WIFEXITED(code) ? WEXITSTATUS(code) : -1;
}

TEST(ServeTlsE2ETest, RestOverHttpsWithTheSameCertificate) {
  const Certificates certs = MakeCertificates();
  const std::string dir = MakeTempDir("tls_rest");
  WriteFile(dir + "/models.config", HalfPlusTwoConfig());
  WriteFile(dir + "/ssl.config", SslConfigText(certs.server_key, certs.server_cert, "", false));
  const int rest_port = FreePort();
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config",
                        "--ssl_config_file=" + dir + "/ssl.config", "--rest_api_ssl",
                        "--rest_api_port=" + std::to_string(rest_port)},
                       /*with_rest=*/false);
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();  // the gRPC port; REST follows
  const std::string url = "https://localhost:" + std::to_string(rest_port);
  const std::string trust = "--cacert " + certs.dir + "/ca.crt ";
  std::string body;
  const std::string predict = trust + "-d '{\"instances\": [[1.0], [2.0], [5.0]]}' " + url +
                              "/v1/models/half_plus_two:predict";
  int code = -1;
  // The REST port opens just after the gRPC port that WaitUntilServing saw.
  for (int attempt = 0; attempt < 100 && code != 0; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    code = Curl(predict, &body);
  }
  ASSERT_EQ(code, 0) << body;
  EXPECT_EQ(body, R"({"predictions": [[2.5], [3.0], [4.5]]})");
  for (int attempt = 0; attempt < 100 && server.Log().find("(HTTPS)") == std::string::npos;
       ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // printed once Start returned
  }
  EXPECT_THAT(server.Log(), HasSubstr("(HTTPS)"));
  // Plain HTTP on the HTTPS port gets no answer; the server keeps serving HTTPS.
  HttpReply plain = HttpCall(rest_port, "GET", "/v1/models/half_plus_two");
  EXPECT_NE(plain.status, 200) << plain.body;
  ASSERT_EQ(Curl(trust + url + "/v1/models/half_plus_two", &body), 0) << body;
  EXPECT_THAT(body, HasSubstr("AVAILABLE"));
  // A client that does not trust the CA refuses the server.
  EXPECT_NE(Curl(url + "/v1/models/half_plus_two", &body), 0);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(ServeTlsE2ETest, RestApiSslNeedsAnSslConfigFile) {
  std::string output;
  EXPECT_NE(RunKiln({"serve", "--model_base_path=" + kExamples + "/half_plus_two", "--rest_api_ssl",
                     "--port=0"},
                    &output),
            0);
  EXPECT_THAT(output, HasSubstr("--rest_api_ssl needs --ssl_config_file"));
}

// ---------------------------------------------------------------------------------------------
// grpc.health.v1

TEST(ServeHealthE2ETest, CheckAndWatchFollowTheModels) {
  const std::string dir = MakeTempDir("health");
  WriteFile(dir + "/models.config", HalfPlusTwoConfig());
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config",
                        "--enable_grpc_healthcheck_service", "--file_system_poll_wait_seconds=1"},
                       /*with_rest=*/false);
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  auto channel = Channel(server.grpc_port());
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto check = [&](const std::string& service, HealthCheckResponse::ServingStatus* out) {
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status status = health->Check(&context, request, &response);
    *out = response.status();
    return status;
  };
  HealthCheckResponse::ServingStatus status;
  ASSERT_TRUE(check("", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("tensorflow.serving.PredictionService", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("half_plus_two", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  EXPECT_EQ(check("no_such_service", &status).error_code(), grpc::StatusCode::NOT_FOUND);

  // Watch: SERVING now; NOT_SERVING once a model without versions is configured; SERVING again
  // when its first version appears; NOT_SERVING at SIGTERM, then the stream ends.
  grpc::ClientContext watch_context;
  HealthCheckRequest watch_request;
  auto stream = health->Watch(&watch_context, watch_request);
  HealthCheckResponse update;
  ASSERT_TRUE(stream->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  const std::string later = dir + "/later";  // does not exist yet
  tensorflow::serving::ReloadConfigRequest reload;
  for (const auto& [name, base] : std::vector<std::pair<std::string, std::string>>{
           {"half_plus_two", kExamples + "/half_plus_two"}, {"later", later}}) {
    auto* model = reload.mutable_config()->mutable_model_config_list()->add_config();
    model->set_name(name);
    model->set_base_path(base);
    model->set_model_platform("onnx");
  }
  {
    auto models = tensorflow::serving::ModelService::NewStub(channel);
    tensorflow::serving::ReloadConfigResponse reloaded;
    grpc::ClientContext context;
    ASSERT_TRUE(models->HandleReloadConfigRequest(&context, reload, &reloaded).ok());
  }
  ASSERT_TRUE(stream->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(check("later", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(check("half_plus_two", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);

  fs::create_directories(later + "/1");
  fs::copy_file(kExamples + "/half_plus_two/1/model.onnx", later + "/1/model.onnx");
  ASSERT_TRUE(stream->Read(&update));  // the poll (1 s) loads it
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("later", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);

  server.Signal(SIGTERM);
  ASSERT_TRUE(stream->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(stream->Read(&update));
  stream->Finish();
  EXPECT_EQ(server.WaitForExit(), 0) << server.Log();
}

// ---------------------------------------------------------------------------------------------
// Deadlines

double CounterValue(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find(series + " ");
  if (at == std::string::npos) return 0;
  return std::atof(metrics.c_str() + at + series.size() + 1);
}

TEST(ServeDeadlineE2ETest, ExpiredRequestsAreAnsweredAndNeverRun) {
  const std::string dir = MakeTempDir("deadline");
  WriteFile(dir + "/models.config", HalfPlusTwoConfig());
  // Every batch waits 3 s for more requests: far longer than the deadlines below.
  WriteFile(dir + "/batching.config",
            "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 3000000 }\n"
            "num_batch_threads { value: 1 }\n");
  WriteFile(dir + "/monitoring.config", "prometheus_config { enable: true }\n");
  ServerProcess server(
      {"serve", "--model_config_file=" + dir + "/models.config", "--enable_batching",
       "--batching_parameters_file=" + dir + "/batching.config",
       "--monitoring_config_file=" + dir + "/monitoring.config", "--rest_api_timeout_in_ms=300"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  const std::string runs =
      ":tensorflow:serving:runtime_latency_count{model_name=\"half_plus_two\",API=\"Predict\","
      "runtime=\"kiln\"}";
  {
    // gRPC: a 250 ms deadline ends in the queue.
    auto start = std::chrono::steady_clock::now();
    const grpc::Status status = PredictHalfPlusTwo(Channel(server.grpc_port()), nullptr, 250);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
  }
  // REST: --rest_api_timeout_in_ms=300 is enforced by the server itself (no client deadline).
  auto start = std::chrono::steady_clock::now();
  HttpReply rest = HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two:predict",
                            R"({"instances": [[1.0]]})");
  EXPECT_EQ(rest.status, 504) << rest.body;
  EXPECT_THAT(rest.body, HasSubstr("deadline"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
  // Once both batches closed (3 s), neither ran: their requests had expired.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  std::string metrics = HttpCall(server.rest_port(), "GET", "/monitoring/prometheus/metrics").body;
  EXPECT_EQ(CounterValue(metrics, runs), 0) << metrics;
  // REST's expired request, and gRPC's unless the client gave up before it reached the
  // server (possible on a loaded machine).
  const double expired = CounterValue(metrics,
                                      ":tensorflow:serving:request_count{model_name=\"half_plus_"
                                      "two\",status=\"DEADLINE_EXCEEDED\"}");
  EXPECT_GE(expired, 1) << metrics;
  EXPECT_LE(expired, 2) << metrics;
  {
    // A deadline long enough runs, after the batch timeout.
    std::vector<float> y;
    const grpc::Status status = PredictHalfPlusTwo(Channel(server.grpc_port()), &y, 10000);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(y, (std::vector<float>{2.5f, 3.f, 4.5f}));
  }
  metrics = HttpCall(server.rest_port(), "GET", "/monitoring/prometheus/metrics").body;
  EXPECT_EQ(CounterValue(metrics, runs), 1) << metrics;
  EXPECT_EQ(server.Terminate(), 0);
}

// ---------------------------------------------------------------------------------------------
// Request logging (logging_config)

std::string LoggingModel(const std::string& name, const std::string& prefix) {
  return "  config { name: \"" + name + "\" base_path: \"" + kExamples +
         "/half_plus_two\" model_platform: \"onnx\"\n    logging_config {\n"
         "      log_collector_config { type: \"file\" filename_prefix: \"" +
         prefix + "\" }\n      sampling_config { sampling_rate: 1.0 }\n    }\n  }\n";
}

tensorflow::serving::PredictRequest OneRow(const std::string& model, float value) {
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name(model);
  auto& x = (*request.mutable_inputs())["x"];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  x.add_float_val(value);
  return request;
}

TEST(ServeRequestLogE2ETest, PredictionLogsAreReadBackAsADatasetAndAFullDiskDropsThem) {
  const std::string dir = MakeTempDir("request_log");
  fs::create_directories(dir + "/logs");
  fs::create_directories(dir + "/full");
  WriteFile(dir + "/models.config", "model_config_list {\n" +
                                        LoggingModel("half_plus_two", dir + "/logs/hpt") +
                                        LoggingModel("on_full_disk", dir + "/full/log") + "}\n");
  WriteFile(dir + "/monitoring.config", "prometheus_config { enable: true }\n");
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config",
                        "--monitoring_config_file=" + dir + "/monitoring.config",
                        "--request_log_max_file_bytes=400"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  // The first file of the second model is /dev/full: every write to it fails with ENOSPC.
  fs::create_symlink("/dev/full",
                     dir + "/full/log-" + std::to_string(server.pid()) + "-0.tfrecord");

  auto stub = tensorflow::serving::PredictionService::NewStub(Channel(server.grpc_port()));
  constexpr int kRequests = 6;
  for (int i = 0; i < kRequests; ++i) {
    tensorflow::serving::PredictResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub->Predict(&context, OneRow("half_plus_two", static_cast<float>(i)), &response).ok());
  }
  // REST's :predict is logged as the PredictRequest TF Serving's REST API converts it to.
  HttpReply rest = HttpCall(server.rest_port(), "POST", "/v1/models/half_plus_two:predict",
                            R"({"instances": [[6.0]]})");
  ASSERT_EQ(rest.status, 200) << rest.body;
  {
    tensorflow::serving::PredictResponse response;
    grpc::ClientContext context;
    // Answered although its log record cannot be written.
    ASSERT_TRUE(stub->Predict(&context, OneRow("on_full_disk", 1), &response).ok());
    EXPECT_EQ(response.outputs().at("y").float_val(0), 2.5f);
  }
  const std::string written =
      ":kiln:serving:request_log_records{model_name=\"half_plus_two\",outcome=\"written\"}";
  const std::string dropped =
      ":kiln:serving:request_log_records{model_name=\"on_full_disk\","
      "outcome=\"dropped_write_error\"}";
  std::string metrics;
  for (int attempt = 0; attempt < 100; ++attempt) {
    metrics = HttpCall(server.rest_port(), "GET", "/monitoring/prometheus/metrics").body;
    if (CounterValue(metrics, written) == kRequests + 1 && CounterValue(metrics, dropped) == 1) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(CounterValue(metrics, written), kRequests + 1) << metrics;
  EXPECT_EQ(CounterValue(metrics, dropped), 1) << metrics;

  // Rotated by size: several files, none over 400 bytes (a file ends before the record that
  // would take it past the limit).
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir + "/logs")) {
    files.push_back(entry.path().string());
    EXPECT_LE(fs::file_size(entry.path()), 400u) << entry.path();
  }
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // -2 before -10
  });
  EXPECT_GE(files.size(), 2u);
  auto iterator = data::Dataset::TFRecord(data::Element({Tensor::FromVector<std::string>(files)}))
                      .MakeIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();
  std::vector<float> logged_x;
  while (true) {
    auto element = (*iterator)->GetNext();
    ASSERT_TRUE(element.ok()) << element.status();
    if (!element->has_value()) break;
    tensorflow::serving::PredictionLog log;
    ASSERT_TRUE(log.ParseFromString((**element).tensors[0].data<std::string>()[0]));
    EXPECT_EQ(log.log_metadata().model_spec().name(), "half_plus_two");
    EXPECT_EQ(log.log_metadata().model_spec().version().value(), 1);
    EXPECT_EQ(log.log_metadata().model_spec().signature_name(), "serving_default");
    EXPECT_EQ(log.log_metadata().sampling_config().sampling_rate(), 1.0);
    EXPECT_THAT(log.log_metadata().saved_model_tags(), ::testing::ElementsAre("serve"));
    ASSERT_TRUE(log.has_predict_log());
    const float x = log.predict_log().request().inputs().at("x").float_val(0);
    logged_x.push_back(x);
    EXPECT_EQ(log.predict_log().response().outputs().at("y").float_val(0), 0.5f * x + 2);
  }
  EXPECT_EQ(logged_x, (std::vector<float>{0, 1, 2, 3, 4, 5, 6}));
  stub.reset();
  EXPECT_EQ(server.Terminate(), 0);
}

// REST's :classify and :regress are logged as the ClassifyRequest / RegressRequest (and
// their responses) TF Serving's REST API converts them to, on TF Serving's own TF1
// half_plus_two, whose classify_x_to_y and regress_x_to_y signatures answer 0.5 x + 2.
TEST(ServeRequestLogE2ETest, RestClassifyAndRegressAreLogged) {
  const std::string dir = MakeTempDir("request_log_classify");
  fs::create_directories(dir + "/logs");
  WriteFile(dir + "/models.config",
            "model_config_list {\n  config { name: \"hpt\" base_path: \"" +
                std::string(KILN_SHARED_DIR) +
                "/testdata/tf_serving/saved_model_half_plus_two_cpu\"\n    logging_config {\n"
                "      log_collector_config { type: \"file\" filename_prefix: \"" +
                dir +
                "/logs/hpt\" }\n      sampling_config { sampling_rate: 1.0 }\n    }\n"
                "  }\n}\n");
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  HttpReply classify =
      HttpCall(server.rest_port(), "POST", "/v1/models/hpt:classify",
               R"({"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]})");
  ASSERT_EQ(classify.status, 200) << classify.body;
  HttpReply regress = HttpCall(server.rest_port(), "POST", "/v1/models/hpt:regress",
                               R"({"signature_name": "regress_x_to_y", "examples": [{"x": 4.0}]})");
  ASSERT_EQ(regress.status, 200) << regress.body;
  EXPECT_EQ(server.Terminate(), 0);  // flushes the log files

  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir + "/logs")) {
    files.push_back(entry.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  auto iterator = data::Dataset::TFRecord(data::Element({Tensor::FromVector<std::string>(files)}))
                      .MakeIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();
  std::vector<tensorflow::serving::PredictionLog> logs;
  while (true) {
    auto element = (*iterator)->GetNext();
    ASSERT_TRUE(element.ok()) << element.status();
    if (!element->has_value()) break;
    ASSERT_TRUE(logs.emplace_back().ParseFromString((**element).tensors[0].data<std::string>()[0]));
  }
  ASSERT_EQ(logs.size(), 2u);
  ASSERT_TRUE(logs[0].has_classify_log());
  const auto& c = logs[0].classify_log();
  EXPECT_EQ(c.request().model_spec().signature_name(), "classify_x_to_y");
  EXPECT_EQ(c.request()
                .input()
                .example_list()
                .examples(0)
                .features()
                .feature()
                .at("x")
                .float_list()
                .value(0),
            2.0f);
  EXPECT_EQ(c.response().result().classifications(0).classes(0).score(), 3.0f);
  EXPECT_EQ(logs[0].log_metadata().model_spec().signature_name(), "classify_x_to_y");
  ASSERT_TRUE(logs[1].has_regress_log());
  const auto& r = logs[1].regress_log();
  EXPECT_EQ(r.request().model_spec().signature_name(), "regress_x_to_y");
  EXPECT_EQ(r.response().result().regressions(0).value(), 4.0f);
  EXPECT_EQ(logs[1].log_metadata().model_spec().version().value(), 123);
}

TEST(ServeRequestLogE2ETest, BadLoggingConfigStopsTheServer) {
  const std::string dir = MakeTempDir("request_log_bad");
  WriteFile(dir + "/models.config",
            "model_config_list {\n" + LoggingModel("half_plus_two", dir + "/missing/log") + "}\n");
  std::string output;
  EXPECT_NE(
      RunKiln({"serve", "--model_config_file=" + dir + "/models.config", "--port=0"}, &output), 0);
  EXPECT_THAT(output, HasSubstr("model half_plus_two: logging_config.log_collector_config."
                                "filename_prefix " +
                                dir + "/missing/log: directory"));
}

// ---------------------------------------------------------------------------------------------
// KServe v2 over gRPC

TEST(ServeKServeGrpcE2ETest, InferWithRawAndTypedContents) {
  const std::string dir = MakeTempDir("kserve");
  WriteFile(dir + "/models.config", HalfPlusTwoConfig());
  ServerProcess server({"serve", "--model_config_file=" + dir + "/models.config"},
                       /*with_rest=*/false);
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  auto stub = inference::GRPCInferenceService::NewStub(Channel(server.grpc_port()));
  {
    grpc::ClientContext context;
    inference::ServerLiveResponse live;
    ASSERT_TRUE(stub->ServerLive(&context, {}, &live).ok());
    EXPECT_TRUE(live.live());
  }
  {
    grpc::ClientContext context;
    inference::ServerReadyResponse ready;
    ASSERT_TRUE(stub->ServerReady(&context, {}, &ready).ok());
    EXPECT_TRUE(ready.ready());
  }
  {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name("half_plus_two");
    inference::ModelReadyResponse ready;
    ASSERT_TRUE(stub->ModelReady(&context, request, &ready).ok());
    EXPECT_TRUE(ready.ready());
    grpc::ClientContext missing_context;
    request.set_name("nope");
    EXPECT_EQ(stub->ModelReady(&missing_context, request, &ready).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse metadata;
    ASSERT_TRUE(stub->ServerMetadata(&context, {}, &metadata).ok());
    EXPECT_EQ(metadata.name(), "kiln");
  }
  {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name("half_plus_two");
    inference::ModelMetadataResponse metadata;
    ASSERT_TRUE(stub->ModelMetadata(&context, request, &metadata).ok());
    EXPECT_EQ(metadata.name(), "half_plus_two");
    ASSERT_EQ(metadata.versions_size(), 1);
    EXPECT_EQ(metadata.versions(0), "1");
    EXPECT_EQ(metadata.platform(), "onnxruntime_onnx");
    ASSERT_EQ(metadata.inputs_size(), 1);
    EXPECT_EQ(metadata.inputs(0).name(), "x");
    EXPECT_EQ(metadata.inputs(0).datatype(), "FP32");
    EXPECT_THAT(metadata.inputs(0).shape(), ::testing::ElementsAre(-1, 1));
    ASSERT_EQ(metadata.outputs_size(), 1);
    EXPECT_EQ(metadata.outputs(0).name(), "y");
  }
  inference::ModelInferRequest request;
  request.set_model_name("half_plus_two");
  request.set_id("req-7");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(3);
  input->add_shape(1);
  const float x[3] = {1.f, 2.f, 5.f};
  request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(x), sizeof(x)));
  {
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    const grpc::Status status = stub->ModelInfer(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.model_name(), "half_plus_two");
    EXPECT_EQ(response.model_version(), "1");
    EXPECT_EQ(response.id(), "req-7");
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).name(), "y");
    EXPECT_EQ(response.outputs(0).datatype(), "FP32");
    EXPECT_THAT(response.outputs(0).shape(), ::testing::ElementsAre(3, 1));
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    ASSERT_EQ(response.raw_output_contents(0).size(), 3 * sizeof(float));
    float y[3];
    std::memcpy(y, response.raw_output_contents(0).data(), sizeof(y));
    EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{2.5f, 3.f, 4.5f}));
  }
  {
    // Typed contents in, typed contents out.
    inference::ModelInferRequest typed = request;
    typed.clear_raw_input_contents();
    for (float v : x) typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    ASSERT_TRUE(stub->ModelInfer(&context, typed, &response).ok());
    EXPECT_EQ(response.raw_output_contents_size(), 0);
    EXPECT_THAT(response.outputs(0).contents().fp32_contents(),
                ::testing::ElementsAre(2.5f, 3.f, 4.5f));
  }
  {
    // Raw content of the wrong size is refused naming the input.
    inference::ModelInferRequest bad = request;
    bad.set_raw_input_contents(0, std::string(8, '\0'));
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    const grpc::Status status = stub->ModelInfer(&context, bad, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("input 'x'"));
  }
  stub.reset();
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(ServeKServeGrpcE2ETest, RestBinaryTensorExtension) {
  ServerProcess server(
      {"serve", "--model_name=half_plus_two", "--model_base_path=" + kExamples + "/half_plus_two"});
  ASSERT_TRUE(server.WaitUntilServing()) << server.Log();
  const float x[3] = {1.f, 2.f, 5.f};
  const std::string header =
      R"({"id": "b", "inputs": [{"name": "x", "shape": [3, 1], "datatype": "FP32", )"
      R"("parameters": {"binary_data_size": 12}}], )"
      R"("outputs": [{"name": "y", "parameters": {"binary_data": true}}]})";
  const std::string body = header + std::string(reinterpret_cast<const char*>(x), sizeof(x));
  HttpReply reply = HttpCall(server.rest_port(), "POST", "/v2/models/half_plus_two/infer", body,
                             {{"Inference-Header-Content-Length", std::to_string(header.size())}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.content_type, "application/octet-stream");
  ASSERT_GT(reply.body.size(), 12u);
  const std::string json = reply.body.substr(0, reply.body.size() - 12);
  EXPECT_THAT(json, HasSubstr(R"("parameters": {"binary_data_size": 12})"));
  EXPECT_THAT(json, HasSubstr(R"("shape": [3, 1])"));
  float y[3];
  std::memcpy(y, reply.body.data() + json.size(), sizeof(y));
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{2.5f, 3.f, 4.5f}));
  // Binary input, JSON output (no binary_data asked).
  const std::string json_out_header =
      R"({"inputs": [{"name": "x", "shape": [3, 1], "datatype": "FP32", )"
      R"("parameters": {"binary_data_size": 12}}]})";
  reply = HttpCall(server.rest_port(), "POST", "/v2/models/half_plus_two/infer",
                   json_out_header + std::string(reinterpret_cast<const char*>(x), sizeof(x)),
                   {{"Inference-Header-Content-Length", std::to_string(json_out_header.size())}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_THAT(reply.body, HasSubstr(R"("data": [2.5, 3.0, 4.5])"));
  // Bytes that belong to no input, or a size past the end: 400 naming the problem.
  reply = HttpCall(server.rest_port(), "POST", "/v2/models/half_plus_two/infer",
                   json_out_header + std::string(16, '\0'),
                   {{"Inference-Header-Content-Length", std::to_string(json_out_header.size())}});
  EXPECT_EQ(reply.status, 400);
  EXPECT_THAT(reply.body, HasSubstr("belong to no input"));
  reply = HttpCall(server.rest_port(), "POST", "/v2/models/half_plus_two/infer",
                   json_out_header + std::string(8, '\0'),
                   {{"Inference-Header-Content-Length", std::to_string(json_out_header.size())}});
  EXPECT_EQ(reply.status, 400);
  EXPECT_THAT(reply.body, HasSubstr("binary_data_size 12 but only 8 bytes"));
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace kiln::serving::testing
