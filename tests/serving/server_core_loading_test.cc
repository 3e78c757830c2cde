// How ServerCore loads and unloads versions under TF Serving's loading flags: load retries,
// parallel loading and unloading, per-model batching parameters, the TFLite-only message and
// the page-cache flush. The loader is the real runtime's Model::Load on the example ONNX model,
// wrapped where a test needs to observe or delay it.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/serving/rest_handler.h"
#include "kiln/serving/server_core.h"

namespace kiln::serving {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kHalfPlusTwo =
    std::string(KILN_SOURCE_DIR) + "/examples/models/half_plus_two/1/model.onnx";

std::string TempDir(const std::string& name) {
  // Under the build tree, not /tmp: the page-cache test needs a disk-backed file system.
  const fs::path dir = fs::path(KILN_BINARY_DIR) / "tmp" /
                       ("core_loading_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void AddVersion(const std::string& base, int version) {
  const fs::path dir = fs::path(base) / std::to_string(version);
  fs::create_directories(dir);
  fs::copy_file(kHalfPlusTwo, dir / "model.onnx", fs::copy_options::overwrite_existing);
  // Written back now, so that its cached pages are clean (the kernel keeps dirty pages
  // whatever it is advised; the page-cache test needs them droppable).
  const int fd = ::open((dir / "model.onnx").c_str(), O_RDONLY);
  ::fsync(fd);
  ::close(fd);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

tensorflow::serving::ModelServerConfig Config(
    const std::vector<std::pair<std::string, std::string>>& models) {
  tensorflow::serving::ModelServerConfig config;
  for (const auto& [name, base] : models) {
    auto* model = config.mutable_model_config_list()->add_config();
    model->set_name(name);
    model->set_base_path(base);
    model->set_model_platform("onnx");
  }
  return config;
}

ServerCoreOptions NoPolling() {
  ServerCoreOptions options;
  options.file_system_poll_wait_seconds = 0;
  options.enable_model_warmup = false;
  return options;
}

absl::StatusOr<std::shared_ptr<runtime::Model>> RealLoad(const std::string& path,
                                                         const runtime::ModelOptions& options) {
  return runtime::Model::Load(path, options);
}

HttpResponse Predict(const RestHandler& handler, const std::string& model,
                     const std::string& body) {
  return handler.Handle(HttpRequest{"POST", "/v1/models/" + model + ":predict", body, {}});
}

TEST(ServerCoreLoadingTest, FailedLoadIsRetriedUntilItSucceeds) {
  const std::string base = TempDir("retry");
  AddVersion(base, 1);
  std::atomic<int> attempts{0};
  ServerCoreOptions options = NoPolling();
  options.max_num_load_retries = 3;
  options.load_retry_interval_micros = 1000;
  // The first two attempts fail as a half-copied export would.
  options.loader = [&](const std::string& path, const runtime::ModelOptions& model_options)
      -> absl::StatusOr<std::shared_ptr<runtime::Model>> {
    if (attempts.fetch_add(1) < 2) return absl::DataLossError("truncated file");
    return RealLoad(path, model_options);
  };
  auto core = ServerCore::Create(options, Config({{"m", base}}));
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_TRUE((*core)->AllModelsAvailable());

  // Retries exhausted: the error of the last attempt, after 1 + max_num_load_retries tries.
  attempts = -100;
  options.max_num_load_retries = 2;
  auto failed = ServerCore::Create(options, Config({{"m", base}}));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("truncated file"));
  EXPECT_EQ(attempts.load(), -97);
  // max_num_load_retries 0: one attempt only.
  attempts = -100;
  options.max_num_load_retries = 0;
  EXPECT_FALSE(ServerCore::Create(options, Config({{"m", base}})).ok());
  EXPECT_EQ(attempts.load(), -99);
}

TEST(ServerCoreLoadingTest, VersionFolderFilledAfterTheFirstAttemptLoadsOnRetry) {
  const std::string base = TempDir("late_files");
  fs::create_directories(fs::path(base) / "1");  // the folder is there, the model not yet
  ServerCoreOptions options = NoPolling();
  options.loader = RealLoad;
  options.max_num_load_retries = 100;
  options.load_retry_interval_micros = 20000;
  std::thread copier([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    fs::copy_file(kHalfPlusTwo, fs::path(base) / "1" / "model.onnx.tmp");
    fs::rename(fs::path(base) / "1" / "model.onnx.tmp", fs::path(base) / "1" / "model.onnx");
  });
  auto core = ServerCore::Create(options, Config({{"m", base}}));
  copier.join();
  ASSERT_TRUE(core.ok()) << core.status();
  ServingMetrics metrics;
  RestHandler handler(core->get(), &metrics, "");
  EXPECT_EQ(Predict(handler, "m", R"({"instances": [[2.0]]})").body, R"({"predictions": [[3.0]]})");
}

// num_load_threads: versions load side by side; 0 loads them one at a time.
TEST(ServerCoreLoadingTest, NumLoadThreadsLoadsInParallel) {
  std::vector<std::pair<std::string, std::string>> models;
  for (int i = 0; i < 3; ++i) {
    const std::string base = TempDir("parallel" + std::to_string(i));
    AddVersion(base, 1);
    models.push_back({"m" + std::to_string(i), base});
  }
  for (int threads : {0, 3}) {
    std::atomic<int> running{0}, most{0};
    ServerCoreOptions options = NoPolling();
    options.num_load_threads = threads;
    options.loader = [&](const std::string& path, const runtime::ModelOptions& model_options)
        -> absl::StatusOr<std::shared_ptr<runtime::Model>> {
      const int now = ++running;
      for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
      }
      // Long enough that three parallel loads overlap even on a loaded machine.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      auto model = RealLoad(path, model_options);
      --running;
      return model;
    };
    auto core = ServerCore::Create(options, Config(models));
    ASSERT_TRUE(core.ok()) << core.status();
    EXPECT_TRUE((*core)->AllModelsAvailable());
    EXPECT_EQ(most.load(), threads == 0 ? 1 : 3) << "num_load_threads=" << threads;

    // The poll loads new versions the same way.
    for (const auto& [name, base] : models) AddVersion(base, 2);
    most = 0;
    (*core)->PollNow();
    EXPECT_EQ(most.load(), threads == 0 ? 1 : 3) << "poll, num_load_threads=" << threads;
    for (const auto& [name, base] : models) {
      auto status = (*core)->GetStatus(name, 2);
      ASSERT_TRUE(status.ok());
      EXPECT_EQ((*status)[0].state, tensorflow::serving::ModelVersionStatus::AVAILABLE);
      fs::remove_all(fs::path(base) / "2");
    }
  }
}

// num_unload_threads: a retired version is released off the poll thread; requests holding it
// finish first either way.
TEST(ServerCoreLoadingTest, NumUnloadThreadsReleasesRetiredVersions) {
  const std::string base = TempDir("unload");
  AddVersion(base, 1);
  ServerCoreOptions options = NoPolling();
  options.loader = RealLoad;
  options.num_unload_threads = 2;
  auto core = ServerCore::Create(options, Config({{"m", base}}));
  ASSERT_TRUE(core.ok()) << core.status();
  std::weak_ptr<const ServableVersion> v1;
  {
    auto held = (*core)->Lookup({"m", 1, ""});
    ASSERT_TRUE(held.ok());
    v1 = *held;
  }
  AddVersion(base, 2);
  (*core)->PollNow();
  auto status = (*core)->GetStatus("m", 1);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)[0].state, tensorflow::serving::ModelVersionStatus::END);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!v1.expired() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(v1.expired()) << "version 1 was never released";
}

// --enable_per_model_batching_parameters: the version folder's batching_params.pbtxt
// replaces the global parameters; a version without one does not batch (TF Serving).
TEST(ServerCoreLoadingTest, PerModelBatchingParametersFromTheVersionFolder) {
  const std::string with_file = TempDir("per_model_with");
  AddVersion(with_file, 1);
  WriteFile(with_file + "/1/batching_params.pbtxt",
            "max_batch_size { value: 4 }\nbatch_timeout_micros { value: 0 }\n");
  const std::string without_file = TempDir("per_model_without");
  AddVersion(without_file, 1);
  const std::string splitting = TempDir("per_model_split");
  AddVersion(splitting, 1);
  WriteFile(splitting + "/1/batching_params.pbtxt",
            "max_batch_size { value: 64 }\nenable_large_batch_splitting { value: true }\n"
            "max_execution_batch_size { value: 2 }\nallowed_batch_sizes: 1\n"
            "allowed_batch_sizes: 2\n");
  ServerCoreOptions options = NoPolling();
  options.loader = RealLoad;
  BatchingOptions global;
  global.max_batch_size = 1;  // would refuse every request below if it applied
  global.num_batch_threads = 2;
  options.batching = global;
  options.enable_per_model_batching_parameters = true;
  auto core = ServerCore::Create(
      options, Config({{"file", with_file}, {"nofile", without_file}, {"split", splitting}}));
  ASSERT_TRUE(core.ok()) << core.status();
  ServingMetrics metrics;
  RestHandler handler(core->get(), &metrics, "");
  const std::string three = R"({"instances": [[1.0], [2.0], [5.0]]})";
  const std::string five = R"({"instances": [[1.0], [2.0], [5.0], [-1.5], [0.25]]})";
  EXPECT_EQ(Predict(handler, "file", three).body, R"({"predictions": [[2.5], [3.0], [4.5]]})");
  HttpResponse too_big = Predict(handler, "file", five);
  EXPECT_EQ(too_big.status, 400);
  EXPECT_THAT(too_big.body, HasSubstr("larger than maximum input batch size 4"));
  const HttpResponse unbatched = Predict(handler, "nofile", five);
  EXPECT_EQ(unbatched.status, 200) << unbatched.body;
  // Large batch splitting: 5 rows run as 2 + 2 + 1 and merge back to the unsplit answer.
  const HttpResponse split = Predict(handler, "split", five);
  EXPECT_EQ(split.status, 200) << split.body;
  EXPECT_EQ(split.body, unbatched.body);
  auto queues = (*core)->Lookup({"split", std::nullopt, ""});
  ASSERT_TRUE(queues.ok());
  EXPECT_EQ((*queues)->BatchQueues().size(), 1u);

  // A malformed file fails the version's load, naming the file.
  const std::string bad = TempDir("per_model_bad");
  AddVersion(bad, 1);
  WriteFile(bad + "/1/batching_params.pbtxt", "max_batch_size: oops\n");
  auto failed = ServerCore::Create(options, Config({{"bad", bad}}));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("batching_params.pbtxt"));

  // Without the flag the global parameters apply to every model.
  options.enable_per_model_batching_parameters = false;
  auto global_only = ServerCore::Create(options, Config({{"file", with_file}}));
  ASSERT_TRUE(global_only.ok()) << global_only.status();
  RestHandler global_handler(global_only->get(), &metrics, "");
  EXPECT_THAT(Predict(global_handler, "file", three).body,
              HasSubstr("larger than maximum input batch size 1"));
}

TEST(ServerCoreLoadingTest, TfliteOnlyVersionSaysKilnCannotRunIt) {
  const std::string base = TempDir("tflite");
  fs::create_directories(base + "/1");
  fs::copy_file(std::string(KILN_SHARED_DIR) +
                    "/testdata/tf_serving/saved_model_half_plus_two_tflite/00000123/model.tflite",
                base + "/1/model.tflite");
  ServerCoreOptions options = NoPolling();
  options.loader = RealLoad;
  auto core = ServerCore::Create(options, Config({{"lite", base}}));
  ASSERT_FALSE(core.ok());
  EXPECT_EQ(core.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(core.status().message(), HasSubstr("cannot run TensorFlow Lite models"));
}

// Pages of `path` in the page cache (mincore on a fresh mapping).
size_t ResidentPages(const std::string& path) {
  const size_t size = fs::file_size(path);
  std::FILE* file = std::fopen(path.c_str(), "rb");
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, ::fileno(file), 0);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  size_t count = 0;
  if (map != MAP_FAILED && ::mincore(map, size, resident.data()) == 0) {
    for (unsigned char r : resident) count += r & 1;
  }
  if (map != MAP_FAILED) ::munmap(map, size);
  std::fclose(file);
  return count;
}

// --flush_filesystem_caches: the model files' pages leave the page cache once loaded.
TEST(ServerCoreLoadingTest, FlushFilesystemCachesDropsTheModelFilesPages) {
  for (bool flush : {false, true}) {
    const std::string base = TempDir(flush ? "flush_on" : "flush_off");
    AddVersion(base, 1);
    const std::string file = base + "/1/model.onnx";
    ServerCoreOptions options = NoPolling();
    options.loader = RealLoad;
    options.flush_filesystem_caches = flush;
    auto core = ServerCore::Create(options, Config({{"m", base}}));
    ASSERT_TRUE(core.ok()) << core.status();
    // Just written and read: cached unless flushed (tmpfs cannot drop pages: skip there).
    if (!flush && ResidentPages(file) == 0) GTEST_SKIP() << "no page cache to observe here";
    if (flush) {
      EXPECT_EQ(ResidentPages(file), 0u);
    } else {
      EXPECT_GT(ResidentPages(file), 0u);
    }
  }
}

}  // namespace
}  // namespace kiln::serving
