#include "kiln/serving/server.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::serving {
namespace {

using ::testing::HasSubstr;

TEST(ServeFlagsTest, DefaultsAreTensorflowModelServers) {
  auto flags = ParseServeFlags({});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->port, 8500);
  EXPECT_EQ(flags->rest_api_port, 0);  // REST is off unless asked for
  EXPECT_EQ(flags->rest_api_timeout_in_ms, 30000);
  EXPECT_TRUE(flags->enable_model_warmup);
  EXPECT_FALSE(flags->enable_batching);
  EXPECT_EQ(flags->model_name, "default");
  EXPECT_EQ(flags->file_system_poll_wait_seconds, 1);
  EXPECT_EQ(flags->model_config_file_poll_wait_seconds, 0);
  EXPECT_EQ(flags->saved_model_tags, "serve");
}

TEST(ServeFlagsTest, ParsesValuesAndBooleans) {
  auto flags = ParseServeFlags({"--port=9000", "--rest_api_port=9001", "--enable_batching",
                                "--enable_model_warmup=false", "--model_name=m",
                                "-model_base_path=/models/m", "--tensorflow_intra_op_parallelism=2",
                                "--noallow_precompilation"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->port, 9000);
  EXPECT_EQ(flags->rest_api_port, 9001);
  EXPECT_TRUE(flags->enable_batching);
  EXPECT_FALSE(flags->enable_model_warmup);
  EXPECT_EQ(flags->model_base_path, "/models/m");
  EXPECT_EQ(flags->tensorflow_intra_op_parallelism, 2);
  EXPECT_FALSE(flags->allow_precompilation);
}

TEST(ServeFlagsTest, UnknownFlagsAndBadValuesAreNamed) {
  auto unknown = ParseServeFlags({"--portt=1"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("'portt'"));
  auto bad_int = ParseServeFlags({"--port=http"});
  ASSERT_FALSE(bad_int.ok());
  EXPECT_THAT(bad_int.status().message(), HasSubstr("\"http\" for flag --port"));
  auto bad_bool = ParseServeFlags({"--enable_batching=maybe"});
  ASSERT_FALSE(bad_bool.ok());
  EXPECT_THAT(bad_bool.status().message(), HasSubstr("--enable_batching"));
  auto range = ParseServeFlags({"--rest_api_port=70000"});
  ASSERT_FALSE(range.ok());
  EXPECT_THAT(range.status().message(), HasSubstr("--rest_api_port"));
  EXPECT_FALSE(ParseServeFlags({"--model_name"}).ok());
  EXPECT_FALSE(ParseServeFlags({"positional"}).ok());
  EXPECT_FALSE(ParseServeFlags({"--port=8500", "--rest_api_port=8500"}).ok());
}

TEST(ServeFlagsTest, UsageListsEveryFlagWithItsDefault) {
  const std::string usage = ServeUsage();
  EXPECT_THAT(usage, HasSubstr("--port=8500"));
  EXPECT_THAT(usage, HasSubstr("--enable_model_warmup=true"));
  EXPECT_THAT(usage, HasSubstr("--monitoring_config_file=\"\""));
  EXPECT_THAT(usage, HasSubstr("--grpc_max_threads="));
}

}  // namespace
}  // namespace kiln::serving
