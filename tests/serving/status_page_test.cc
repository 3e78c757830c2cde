// The status page rendered in-process from a real ServerCore (the example ONNX model loaded by
// the runtime) and real metrics; tests/deploy/status_page_test.py shows it in a browser.
#include "kiln/serving/status_page.h"

#include <filesystem>
#include <regex>
#include <thread>

#include "../import_tf/tf_graph_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/serving/grpc_service.h"

namespace kiln::serving {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(HistogramQuantileTest, InterpolatesInsideTheBucketAsPrometheus) {
  const std::vector<double> bounds = {1, 2, 4};
  // 10 observations in (1, 2]: the median is halfway through that bucket.
  EXPECT_DOUBLE_EQ(HistogramQuantile(bounds, {0, 10, 0, 0}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(HistogramQuantile(bounds, {0, 10, 0, 0}, 1.0), 2.0);
  // 90 in [0, 1], 10 in (2, 4]: p50 in the first bucket, p99 in the third.
  EXPECT_DOUBLE_EQ(HistogramQuantile(bounds, {90, 0, 10, 0}, 0.5), 0.5 / 0.9);
  EXPECT_DOUBLE_EQ(HistogramQuantile(bounds, {90, 0, 10, 0}, 0.99), 2 + 2 * 0.9);
  // Beyond the last bound: the last bound (Prometheus does the same).
  EXPECT_DOUBLE_EQ(HistogramQuantile(bounds, {0, 0, 0, 5}, 0.5), 4.0);
  EXPECT_DOUBLE_EQ(HistogramQuantile(bounds, {0, 0, 0, 0}, 0.5), -1);
}

TEST(StatusPageTest, ServesOnlyGetAndHeadOfTheRootAndStatus) {
  EXPECT_TRUE(StatusPage::Serves({"GET", "/", ""}));
  EXPECT_TRUE(StatusPage::Serves({"GET", "/status", ""}));
  EXPECT_TRUE(StatusPage::Serves({"GET", "/status?refresh=1", ""}));
  EXPECT_TRUE(StatusPage::Serves({"HEAD", "/status", ""}));
  EXPECT_FALSE(StatusPage::Serves({"POST", "/", ""}));
  EXPECT_FALSE(StatusPage::Serves({"GET", "/statusx", ""}));
  EXPECT_FALSE(StatusPage::Serves({"GET", "/v1/models/status", ""}));
}

TEST(StatusPageTest, RendersModelsRequestsFlagsAndRatesFromTheMetrics) {
  const fs::path base =
      fs::temp_directory_path() / ("kiln_status_page_test_" + std::to_string(::getpid())) / "m<&>";
  fs::remove_all(base.parent_path());
  fs::create_directories(base / "1");
  fs::copy_file(std::string(KILN_SOURCE_DIR) + "/examples/models/half_plus_two/1/model.onnx",
                base / "1" / "model.onnx");
  ServingMetrics metrics;
  ServerCoreOptions options;
  options.file_system_poll_wait_seconds = 0;
  options.metrics = &metrics;
  auto config = SingleModelConfig("half", base.string());
  config.mutable_model_config_list()->mutable_config(0)->set_model_platform("onnx");
  auto core = ServerCore::Create(options, config);
  ASSERT_TRUE(core.ok()) << core.status();

  ServeFlags flags;
  flags.rest_api_port = 8501;
  std::atomic<bool> draining{false};
  StatusPageOptions page_options;
  page_options.version = "kiln <test>";
  page_options.flags = ServeFlagValues(flags);
  StatusPage page(core->get(), &metrics, page_options, &draining);

  std::string html = page.Render();
  EXPECT_THAT(html, HasSubstr("kiln &lt;test&gt;"));
  EXPECT_THAT(html, HasSubstr("m&lt;&amp;&gt;"));  // the path, escaped
  EXPECT_THAT(html, Not(HasSubstr("m<&>")));
  EXPECT_THAT(html, HasSubstr("<td>half</td><td class=\"n\">1</td><td><span class=\"badge ok\">"
                              "AVAILABLE</span></td><td>OK</td>"));
  EXPECT_THAT(html, HasSubstr("no requests yet"));
  EXPECT_THAT(html, HasSubstr("Rates and percentiles since start"));
  EXPECT_THAT(html, HasSubstr("<tr class=\"changed\"><td>--rest_api_port</td><td>8501</td>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>--port</td><td>8500</td>"));
  EXPECT_THAT(html, HasSubstr("optimization log"));
  EXPECT_THAT(html, HasSubstr(">serving</span>"));

  // 10 requests of 1.5 ms: over the next window, their count, rate and percentiles.
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  for (int i = 0; i < 10; ++i) {
    metrics.signature_request_latency.Observe({"half", "1", "serving_default", "predict", "REST"},
                                              1500);
    metrics.request_count.Increment({"half", "OK"});
  }
  html = page.Render();
  EXPECT_THAT(html, HasSubstr("Rates and percentiles over the last 1 s"));
  EXPECT_THAT(html, HasSubstr("<td>half</td><td class=\"n\">1</td><td>serving_default</td>"
                              "<td>predict</td><td>REST</td><td class=\"n\">10</td>"));
  EXPECT_THAT(html, HasSubstr("<td>half</td><td><span class=\"badge ok\">OK</span></td>"
                              "<td class=\"n\">10</td>"));
  // req/s over the window (10 in a little over 1 s), then p50, p90, p99 in ms: each inside
  // the histogram bucket that holds 1.5 ms.
  std::smatch row;
  ASSERT_TRUE(std::regex_search(
      html, row,
      std::regex("<td class=\"n\">10</td><td class=\"n\">([0-9.]+)</td><td class=\"n\">"
                 "([0-9.]+)</td><td class=\"n\">([0-9.]+)</td><td class=\"n\">([0-9.]+)</td>")));
  EXPECT_GT(std::stod(row[1]), 5);
  EXPECT_LE(std::stod(row[1]), 10);
  const std::vector<double>& bounds = metrics.signature_request_latency.buckets();
  const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), 1500) - bounds.begin();
  ASSERT_GT(bucket, 0u);
  for (int i = 2; i <= 4; ++i) {
    EXPECT_GE(std::stod(row[i]), bounds[bucket - 1] / 1000 - 0.01) << row[i];
    EXPECT_LE(std::stod(row[i]), bounds[bucket] / 1000 + 0.01) << row[i];
  }

  draining = true;
  EXPECT_THAT(page.Render(), HasSubstr("draining (SIGTERM received"));
  fs::remove_all(base.parent_path());
}

// Two signatures of one SavedModel, served through the REST handler and the gRPC service: each
// signature gets its own row with its own count, read from the Kiln family that Prometheus
// exports beside TF Serving's (whose labels stay model_name, API, entrypoint).
TEST(StatusPageTest, RequestsOfEachSignatureGetTheirOwnRow) {
  namespace tft = import::tf::testing;
  const std::string base = tft::TempDir("status_page_signatures");
  {
    tft::GraphBuilder b;
    b.Placeholder("x", DType::kFloat32, {-1});
    b.Op("Relu", "relu", {"x"}, {{"T", tft::TypeAttr(DType::kFloat32)}});
    b.Op("Neg", "neg", {"x"}, {{"T", tft::TypeAttr(DType::kFloat32)}});
    tft::SignatureSpec relu;  // serving_default
    relu.inputs["x"] = {"x:0", DType::kFloat32, {-1}};
    relu.outputs["y"] = {"relu:0", DType::kFloat32, {-1}};
    tft::SignatureSpec negate = relu;
    negate.key = "negate";
    negate.outputs["y"] = {"neg:0", DType::kFloat32, {-1}};
    fs::create_directories(base + "/1");
    ASSERT_TRUE(tft::WriteSavedModel(base + "/1", b, {relu, negate}).ok());
  }
  ServingMetrics metrics;
  ServerCoreOptions options;
  options.file_system_poll_wait_seconds = 0;
  options.metrics = &metrics;
  auto config = SingleModelConfig("two", base);
  config.mutable_model_config_list()->mutable_config(0)->set_model_platform("tensorflow");
  auto core = ServerCore::Create(options, config);
  ASSERT_TRUE(core.ok()) << core.status();

  RestHandler rest(core->get(), &metrics, "");
  auto post = [&](const std::string& body) {
    return rest.Handle(HttpRequest{"POST", "/v1/models/two:predict", body}).status;
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post(R"({"instances": [1.0, -2.0]})"), 200);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(post(R"({"signature_name": "negate", "instances": [1.0]})"), 200);
  }
  // A signature the model does not have: an error, counted by TF Serving's families only (a
  // client must not be able to add series by naming signatures).
  EXPECT_NE(post(R"({"signature_name": "nope", "instances": [1.0]})"), 200);
  PredictionServiceImpl grpc(core->get(), &metrics);
  tensorflow::serving::PredictRequest request;
  request.mutable_model_spec()->set_name("two");
  request.mutable_model_spec()->set_signature_name("negate");
  auto& x = (*request.mutable_inputs())["x"];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  x.add_float_val(3);
  tensorflow::serving::PredictResponse response;
  ASSERT_TRUE(grpc.Predict(nullptr, &request, &response).ok());

  StatusPage page(core->get(), &metrics, StatusPageOptions{}, nullptr);
  const std::string html = page.Render();
  const std::string row = "<td>two</td><td class=\"n\">1</td>";
  EXPECT_THAT(html, HasSubstr(row + "<td>serving_default</td><td>predict</td><td>REST</td>"
                                    "<td class=\"n\">3</td>"));
  EXPECT_THAT(html, HasSubstr(row + "<td>negate</td><td>predict</td><td>REST</td>"
                                    "<td class=\"n\">2</td>"));
  EXPECT_THAT(html, HasSubstr(row + "<td>negate</td><td>predict</td><td>GRPC</td>"
                                    "<td class=\"n\">1</td>"));
  EXPECT_THAT(html, Not(HasSubstr("<td>nope</td>")));
  EXPECT_THAT(html, HasSubstr("<td>two</td><td><span class=\"badge ok\">OK</span></td>"
                              "<td class=\"n\">6</td>"));

  // The same counters, as Prometheus scrapes them; TF Serving's family keeps its labels.
  const std::string text = metrics.ToPrometheusText();
  EXPECT_THAT(text, HasSubstr(":kiln:serving:signature_request_latency_count{model_name=\"two\","
                              "version=\"1\",signature=\"negate\",API=\"predict\","
                              "entrypoint=\"REST\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(":tensorflow:serving:request_latency_count{model_name=\"two\","
                              "API=\"predict\",entrypoint=\"REST\"} 6\n"));
  EXPECT_THAT(text, Not(HasSubstr("signature=\"nope\"")));
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace kiln::serving
