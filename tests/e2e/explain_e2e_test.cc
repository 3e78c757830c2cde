// :explain against a running `kiln serve`: Vertex AI's request and response, exact
// attributions for a linear model, efficiency for a nonlinear one, the evaluation budget,
// and the metrics.
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serve_harness.h"

namespace kiln::serving::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kExamples = std::string(KILN_SOURCE_DIR) + "/examples/models";

// The numbers that follow `"key": ` (a scalar or a nested list) anywhere in `body`, in order.
std::vector<double> NumbersAfter(const std::string& body, const std::string& key) {
  std::vector<double> out;
  const std::string needle = "\"" + key + "\": ";
  for (size_t at = body.find(needle); at != std::string::npos; at = body.find(needle, at + 1)) {
    size_t i = at + needle.size();
    int depth = 0;
    do {
      if (body[i] == '[')
        ++depth, ++i;
      else if (body[i] == ']')
        --depth, ++i;
      else if (body[i] == ',' || body[i] == ' ')
        ++i;
      else {
        size_t used = 0;
        out.push_back(std::stod(body.substr(i, 32), &used));
        i += used;
      }
    } while (depth > 0);
  }
  return out;
}

class ExplainE2ETest : public ::testing::Test {
 protected:
  // The server starts with the first test, not in SetUpTestSuite: a failure there makes
  // gtest report every test as skipped, which ctest counts as passing.
  void SetUp() override {
    if (server_ == nullptr) StartServer();
    ASSERT_NE(server_, nullptr) << "the server did not start";
  }
  static void StartServer() {
    const std::string dir = MakeTempDir("explain");
    std::ofstream(dir + "/models.config")
        << "model_config_list {\n"
        << "  config { name: \"half_plus_two\" base_path: \"" << kExamples
        << "/half_plus_two\" model_platform: \"onnx\" }\n"
        << "  config { name: \"penguin_tabular\" base_path: \"" << kExamples
        << "/penguin_tabular\" model_platform: \"onnx\" }\n}\n";
    std::ofstream(dir + "/monitoring.config") << "prometheus_config { enable: true }\n";
    auto server = std::make_unique<ServerProcess>(
        std::vector<std::string>{"serve", "--model_config_file=" + dir + "/models.config",
                                 "--monitoring_config_file=" + dir + "/monitoring.config",
                                 "--explain_max_evaluations=1000"});
    ASSERT_TRUE(server->WaitUntilServing()) << server->Log();
    server_ = server.release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  HttpReply Explain(const std::string& model, const std::string& body) {
    return HttpCall(server_->rest_port(), "POST", "/v1/models/" + model + ":explain", body);
  }
  static ServerProcess* server_;
};
ServerProcess* ExplainE2ETest::server_ = nullptr;

TEST_F(ExplainE2ETest, LinearModelIsExactForEveryPathCountAndBaseline) {
  // y = 0.5 x + 2: the one feature's attribution is 0.5 (x - b).
  for (int paths : {1, 3, 10}) {
    HttpReply reply =
        Explain("half_plus_two",
                R"({"instances": [[1.0], [6.0]], "explanationSpecOverride": {"parameters": )"
                R"({"sampledShapleyAttribution": {"pathCount": )" +
                    std::to_string(paths) +
                    R"(}}, "metadata": {"inputs": {"x": {"inputBaselines": [[2.0]]}}}}})");
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_THAT(reply.body, HasSubstr("\"predictions\": [[2.5], [5.0]]"));
    const std::vector<double> attributions = NumbersAfter(reply.body, "x");
    ASSERT_EQ(attributions.size(), 2u) << reply.body;
    EXPECT_DOUBLE_EQ(attributions[0], 0.5 * (1.0 - 2.0));
    EXPECT_DOUBLE_EQ(attributions[1], 0.5 * (6.0 - 2.0));
    EXPECT_EQ(NumbersAfter(reply.body, "baselineOutputValue"), (std::vector<double>{3.0, 3.0}));
  }
}

TEST_F(ExplainE2ETest, ClassScoresExplainTheTopClassAndSumToTheDifference) {
  HttpReply reply =
      Explain("penguin_tabular", R"({"instances": [[0.1, -0.2, 0.3, 0.4], [1, 1, 1, 1]]})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  ASSERT_EQ(reply.body.rfind("{\"explanations\": [{\"attributions\": [{", 0), 0u) << reply.body;
  EXPECT_THAT(reply.body, HasSubstr("\"predictions\": [["));
  EXPECT_THAT(reply.body, HasSubstr("\"outputName\": "));
  const std::vector<double> attributions = NumbersAfter(reply.body, "features");
  const std::vector<double> base = NumbersAfter(reply.body, "baselineOutputValue");
  const std::vector<double> value = NumbersAfter(reply.body, "instanceOutputValue");
  const std::vector<double> index = NumbersAfter(reply.body, "outputIndex");
  const std::vector<double> error = NumbersAfter(reply.body, "approximationError");
  ASSERT_EQ(attributions.size(), 8u) << reply.body;
  ASSERT_EQ(base.size(), 2u);
  ASSERT_EQ(index.size(), 2u);
  ASSERT_EQ(error.size(), 2u);
  for (int n = 0; n < 2; ++n) {
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += attributions[n * 4 + i];
    // Efficiency holds for every sample; floats are written with float precision.
    EXPECT_NEAR(sum, value[n] - base[n], 1e-5) << reply.body;
    EXPECT_GE(error[n], 0.0);
  }
  // The same request, the same answer: permutations are seeded.
  EXPECT_EQ(
      Explain("penguin_tabular", R"({"instances": [[0.1, -0.2, 0.3, 0.4], [1, 1, 1, 1]]})").body,
      reply.body);
}

TEST_F(ExplainE2ETest, BadRequestsAreInvalidArgument) {
  HttpReply path_count =
      Explain("penguin_tabular",
              R"({"instances": [[1, 1, 1, 1]], "explanationSpecOverride": {"parameters": )"
              R"({"sampledShapleyAttribution": {"pathCount": 0}}}})");
  EXPECT_EQ(path_count.status, 400) << path_count.body;
  EXPECT_THAT(path_count.body, HasSubstr("pathCount"));
  HttpReply method =
      Explain("penguin_tabular",
              R"({"instances": [[1, 1, 1, 1]], "explanationSpecOverride": {"parameters": )"
              R"({"integratedGradientsAttribution": {"stepCount": 10}}}})");
  EXPECT_EQ(method.status, 400) << method.body;
  HttpReply baseline =
      Explain("half_plus_two", R"({"instances": [[1.0]], "explanationSpecOverride": {"metadata": )"
                               R"({"inputs": {"x": {"inputBaselines": [[1.0, 2.0]]}}}}})");
  EXPECT_EQ(baseline.status, 400) << baseline.body;
  EXPECT_THAT(baseline.body, HasSubstr("inputBaselines"));
}

TEST_F(ExplainE2ETest, TheEvaluationBudgetFlagRefusesLargerRequests) {
  // 4 features, pathCount 50: 2 + 50 x 3 = 152 evaluations per instance; 7 instances need
  // 1064, over --explain_max_evaluations=1000; 6 need 912.
  const std::string spec = R"(], "explanationSpecOverride": {"parameters": )"
                           R"({"sampledShapleyAttribution": {"pathCount": 50}}}})";
  std::string seven = R"({"instances": [)", six;
  for (int i = 0; i < 7; ++i) {
    if (i == 6) six = seven + spec;
    seven += std::string(i ? ", " : "") + "[0.1, 0.2, 0.3, 0.4]";
  }
  seven += spec;
  HttpReply over = Explain("penguin_tabular", seven);
  EXPECT_EQ(over.status, 400) << over.body;
  EXPECT_THAT(over.body, HasSubstr("1064 model evaluations"));
  EXPECT_THAT(over.body, HasSubstr("budget of 1000"));
  EXPECT_EQ(Explain("penguin_tabular", six).status, 200);
  // Baselines multiply the cost: 600 baselines of one feature need 1200 evaluations, refused
  // before their rows are built.
  std::string baselines;
  for (int b = 0; b < 600; ++b) baselines += std::string(b ? ", " : "") + "[1.0]";
  HttpReply many =
      Explain("half_plus_two", R"({"instances": [[1.0]], "explanationSpecOverride": {"metadata": )"
                               R"({"inputs": {"x": {"inputBaselines": [)" +
                                   baselines + "]}}}}}");
  EXPECT_EQ(many.status, 400) << many.body;
  EXPECT_THAT(many.body, HasSubstr("600 baselines"));
}

TEST_F(ExplainE2ETest, CountedAndTimedLikePredict) {
  ASSERT_EQ(Explain("half_plus_two", R"({"instances": [[1.0]]})").status, 200);
  HttpReply metrics = HttpCall(server_->rest_port(), "GET", "/monitoring/prometheus/metrics");
  EXPECT_THAT(metrics.body, HasSubstr("API=\"explain\""));
}

}  // namespace
}  // namespace kiln::serving::testing
