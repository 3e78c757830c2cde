// RequestLogger: a request never waits for the log's disk (a writer stuck on its file makes the
// queue overflow, and the overflow is dropped and counted), sampling follows sampling_rate,
// and bad configs are refused naming the field.
#include "kiln/serving/request_logger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/core/clock.h"
#include "kiln/data/formats/tfrecord.h"

namespace kiln::serving {
namespace {

using tensorflow::serving::LoggingConfig;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/request_logger_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

LoggingConfig Config(const std::string& prefix, double rate) {
  LoggingConfig config;
  config.mutable_log_collector_config()->set_filename_prefix(prefix);
  config.mutable_sampling_config()->set_sampling_rate(rate);
  return config;
}

tensorflow::serving::PredictionLog Record(int i) {
  tensorflow::serving::PredictionLog log;
  log.mutable_predict_log()->mutable_request()->mutable_model_spec()->set_name("m" +
                                                                               std::to_string(i));
  return log;
}

TEST(RequestLoggerTest, AStuckDiskDropsAndCountsWithoutBlockingTheCaller) {
  const std::string dir = TempDir("stuck");
  // The first log file is a FIFO with no reader: the writer thread blocks opening it, as it
  // would on a hung disk or network mount.
  const std::string first = dir + "/log-" + std::to_string(getpid()) + "-0.tfrecord";
  ASSERT_EQ(mkfifo(first.c_str(), 0600), 0);
  ServingMetrics metrics;
  RequestLogOptions options;
  options.max_queued_records = 4;
  auto logger = RequestLogger::Create("m", Config(dir + "/log", 1.0), options, &metrics);
  ASSERT_TRUE(logger.ok()) << logger.status();
  tensorflow::serving::ModelSpec spec;
  spec.set_name("m");
  (*logger)->Log(Record(0), spec);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the writer takes record 0
  const int64_t start = NowNanos();
  for (int i = 1; i <= 20; ++i) (*logger)->Log(Record(i), spec);
  const int64_t took_ms = (NowNanos() - start) / 1000000;
  EXPECT_LT(took_ms, 50) << "Log() waited for the disk";
  // 4 queued, 16 dropped.
  EXPECT_EQ(metrics.request_log_records.Value({"m", "dropped_queue_full"}), 16);

  // The disk comes back: the writer gets its file and writes what was queued.
  const int reader = open(first.c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  std::string bytes;
  std::thread drain([&] {
    char buffer[4096];
    ssize_t n;
    while ((n = read(reader, buffer, sizeof(buffer))) > 0) bytes.append(buffer, n);
  });
  (*logger)->Flush();
  EXPECT_EQ(metrics.request_log_records.Value({"m", "written"}), 5);
  logger->reset();  // closes the file: the reader sees the end
  drain.join();
  close(reader);
  auto records = data::formats::ParseRecords(bytes);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 5u);
  std::vector<std::string> names;
  for (const std::string& record : *records) {
    tensorflow::serving::PredictionLog log;
    ASSERT_TRUE(log.ParseFromString(record));
    EXPECT_EQ(log.log_metadata().model_spec().name(), "m");
    EXPECT_EQ(log.log_metadata().sampling_config().sampling_rate(), 1.0);
    names.push_back(log.predict_log().request().model_spec().name());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("m0", "m1", "m2", "m3", "m4"));
}

TEST(RequestLoggerTest, SamplingFollowsTheRate) {
  const std::string dir = TempDir("sampling");
  for (double rate : {0.0, 0.25, 1.0}) {
    auto logger = RequestLogger::Create("m", Config(dir + "/log", rate), {}, nullptr);
    ASSERT_TRUE(logger.ok());
    int sampled = 0;
    for (int i = 0; i < 20000; ++i) sampled += (*logger)->Sample();
    EXPECT_NEAR(sampled / 20000.0, rate, 0.02) << rate;
  }
}

TEST(RequestLoggerTest, BadConfigsNameTheField) {
  const std::string dir = TempDir("bad");
  auto rate = RequestLogger::Create("m", Config(dir + "/log", 1.5), {}, nullptr);
  EXPECT_THAT(rate.status().message(), HasSubstr("model m: logging_config.sampling_config."
                                                 "sampling_rate 1.5 is not in [0, 1]"));
  auto prefix = RequestLogger::Create("m", Config("", 1), {}, nullptr);
  EXPECT_THAT(prefix.status().message(), HasSubstr("filename_prefix is empty"));
  auto directory = RequestLogger::Create("m", Config(dir + "/missing/log", 1), {}, nullptr);
  EXPECT_THAT(directory.status().message(), HasSubstr("does not exist"));
}

TEST(RequestLoggerTest, ConfigureKeepsUnchangedLoggersAndDropsRemovedOnes) {
  const std::string dir = TempDir("configure");
  RequestLoggers loggers({}, nullptr);
  tensorflow::serving::ModelServerConfig config;
  auto* a = config.mutable_model_config_list()->add_config();
  a->set_name("a");
  *a->mutable_logging_config() = Config(dir + "/a", 1);
  config.mutable_model_config_list()->add_config()->set_name("b");  // does not log
  ASSERT_TRUE(loggers.Configure(config).ok());
  std::shared_ptr<RequestLogger> first = loggers.SampledLogger("a");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(loggers.SampledLogger("b"), nullptr);
  ASSERT_TRUE(loggers.Configure(config).ok());
  EXPECT_EQ(loggers.SampledLogger("a"), first);  // same config: same logger, same file
  // An invalid config changes nothing.
  tensorflow::serving::ModelServerConfig bad = config;
  bad.mutable_model_config_list()
      ->mutable_config(0)
      ->mutable_logging_config()
      ->mutable_sampling_config()
      ->set_sampling_rate(-1);
  EXPECT_FALSE(loggers.Configure(bad).ok());
  EXPECT_EQ(loggers.SampledLogger("a"), first);
  config.mutable_model_config_list()->mutable_config(0)->clear_logging_config();
  ASSERT_TRUE(loggers.Configure(config).ok());
  EXPECT_EQ(loggers.SampledLogger("a"), nullptr);
}

}  // namespace
}  // namespace kiln::serving
