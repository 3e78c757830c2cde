#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/serving/flags.h"

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

TEST(ServeFlagsTest, UnknownArgumentsAreCollectedNotFatal) {
  // tensorflow_model_server prints "unknown argument" and starts.
  auto unknown = ParseServeFlags({"--portt=1", "--port=9000", "positional", "--nomodel_name"});
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(unknown->port, 9000);
  EXPECT_EQ(unknown->unknown_arguments,
            (std::vector<std::string>{"--portt=1", "positional", "--nomodel_name"}));
  EXPECT_TRUE(ParseServeFlags({"--port=1"})->unknown_arguments.empty());
}

TEST(ServeFlagsTest, BadValuesAreNamed) {
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
  auto fraction = ParseServeFlags({"--per_process_gpu_memory_fraction=1.5"});
  ASSERT_FALSE(fraction.ok());
  EXPECT_THAT(fraction.status().message(), HasSubstr("--per_process_gpu_memory_fraction"));
  EXPECT_FALSE(ParseServeFlags({"--per_process_gpu_memory_fraction=half"}).ok());
  EXPECT_FALSE(ParseServeFlags({"--port=8500", "--rest_api_port=8500"}).ok());
}

TEST(ServeFlagsTest, UsageListsEveryFlagWithItsDefault) {
  const std::string usage = ServeUsage();
  EXPECT_THAT(usage, HasSubstr("--port=8500"));
  EXPECT_THAT(usage, HasSubstr("--enable_model_warmup=true"));
  EXPECT_THAT(usage, HasSubstr("--monitoring_config_file=\"\""));
  EXPECT_THAT(usage, HasSubstr("--grpc_max_threads="));
}

// main.cc of tensorflow_model_server declares these 48 flags, in this order, with these
// defaults. Written out here (not taken from TensorflowModelServerFlagNames) so that the list
// in the code cannot drift from TF Serving's unnoticed.
TEST(ServeFlagsTest, EveryTensorflowModelServerFlagIsAcceptedWithItsDefault) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"port", "8500"},
      {"grpc_socket_path", "\"\""},
      {"rest_api_port", "0"},
      {"rest_api_num_threads", "0"},  // TF: 4 x CPUs; Kiln's 0 means the same
      {"rest_api_timeout_in_ms", "30000"},
      {"rest_api_enable_cors_support", "false"},
      {"enable_batching", "false"},
      {"allow_version_labels_for_unavailable_models", "false"},
      {"batching_parameters_file", "\"\""},
      {"enable_per_model_batching_parameters", "false"},
      {"model_config_file", "\"\""},
      {"model_config_file_poll_wait_seconds", "0"},
      {"model_name", "\"default\""},
      {"model_base_path", "\"\""},
      {"num_load_threads", "0"},
      {"num_unload_threads", "0"},
      {"max_num_load_retries", "5"},
      {"load_retry_interval_micros", "60000000"},
      {"file_system_poll_wait_seconds", "1"},
      {"flush_filesystem_caches", "true"},
      {"tensorflow_session_parallelism", "0"},
      {"tensorflow_session_config_file", "\"\""},
      {"tensorflow_intra_op_parallelism", "0"},
      {"tensorflow_inter_op_parallelism", "0"},
      {"use_alts_credentials", "false"},
      {"ssl_config_file", "\"\""},
      {"platform_config_file", "\"\""},
      {"per_process_gpu_memory_fraction", "0"},
      {"saved_model_tags", "\"serve\""},  // TF: empty, which it reads as "serve"
      {"grpc_channel_arguments", "\"\""},
      {"grpc_max_threads", "0"},  // TF: 4 x CPUs; Kiln: gRPC's own default
      {"enable_model_warmup", "true"},
      {"num_request_iterations_for_warmup", "0"},
      {"version", "false"},
      {"monitoring_config_file", "\"\""},
      {"remove_unused_fields_from_bundle_metagraph", "true"},
      {"prefer_tflite_model", "false"},
      {"num_tflite_pools", absl::StrCat(std::thread::hardware_concurrency())},
      {"num_tflite_interpreters_per_pool", "1"},
      {"enable_signature_method_name_check", "false"},
      {"xla_cpu_compilation_enabled", "false"},
      {"xla_gpu_compilation_enabled", "false"},
      {"enable_profiler", "true"},
      {"thread_pool_factory_config_file", "\"\""},
      {"mixed_precision", "\"\""},
      {"skip_initialize_tpu", "false"},
      {"enable_grpc_healthcheck_service", "false"},
      {"enable_serialization_as_tensor_content", "false"},
  };
  ASSERT_EQ(expected.size(), 48u);
  std::vector<std::string> names;
  for (const auto& [name, value] : expected) names.push_back(name);
  EXPECT_EQ(TensorflowModelServerFlagNames(), names);

  auto defaults = ParseServeFlags({});
  ASSERT_TRUE(defaults.ok());
  std::map<std::string, std::string> values;
  for (const ServeFlagValue& v : ServeFlagValues(*defaults)) values[v.name] = v.value;
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(values.count(name)) << "--" << name << " is not a flag";
    EXPECT_EQ(values[name], value) << "default of --" << name;
    // Every one is recognised (not an unknown argument) and set from the command line.
    auto parsed = ParseServeFlags({absl::StrCat("--", name, "=", value == "\"\"" ? "x" : value)});
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_TRUE(parsed->unknown_arguments.empty()) << name;
  }
  EXPECT_TRUE(ParseServeFlags({"--use_tfrt"})->use_tfrt);
}

TEST(ServeFlagsTest, NewFlagsParseTheirValues) {
  auto flags = ParseServeFlags(
      {"--per_process_gpu_memory_fraction=0.25", "--mixed_precision=bfloat16",
       "--enable_serialization_as_tensor_content", "--ssl_config_file=/etc/ssl.pbtxt",
       "--enable_grpc_healthcheck_service=true", "--num_unload_threads=3",
       "--remove_unused_fields_from_bundle_metagraph=false"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_FLOAT_EQ(flags->per_process_gpu_memory_fraction, 0.25f);
  EXPECT_EQ(flags->mixed_precision, "bfloat16");
  EXPECT_TRUE(flags->enable_serialization_as_tensor_content);
  EXPECT_EQ(flags->ssl_config_file, "/etc/ssl.pbtxt");
  EXPECT_TRUE(flags->enable_grpc_healthcheck_service);
  EXPECT_EQ(flags->num_unload_threads, 3);
  EXPECT_FALSE(flags->remove_unused_fields_from_bundle_metagraph);
}

TEST(ServeFlagsTest, CheckRefusesWhatCannotBeHonouredAndNotesTheRest) {
  ServeFlags alts;
  alts.use_alts_credentials = true;
  auto refused = CheckServeFlags(alts);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--use_alts_credentials"));

  ServeFlags all_three;
  all_three.tensorflow_session_parallelism = 2;
  all_three.tensorflow_intra_op_parallelism = 2;
  all_three.tensorflow_inter_op_parallelism = 2;
  EXPECT_FALSE(CheckServeFlags(all_three).ok());

  ServeFlags missing_file;
  missing_file.platform_config_file = "/nonexistent/platform.pbtxt";
  auto missing = CheckServeFlags(missing_file);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("--platform_config_file"));

  ServeFlags noted;
  noted.use_tfrt = true;
  noted.xla_cpu_compilation_enabled = true;
  noted.mixed_precision = "bfloat16";
  auto notes = CheckServeFlags(noted);
  ASSERT_TRUE(notes.ok());
  std::string all;
  for (const std::string& n : notes->notes) all += n + "\n";
  EXPECT_THAT(all, HasSubstr("--use_tfrt"));
  EXPECT_THAT(all, HasSubstr("--xla_cpu_compilation_enabled"));
  EXPECT_THAT(all, HasSubstr("bf16"));
  EXPECT_TRUE(CheckServeFlags(ServeFlags())->notes.empty());
}

}  // namespace
}  // namespace kiln::serving
