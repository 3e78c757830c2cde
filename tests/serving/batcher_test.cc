#include "kiln/serving/batcher.h"

#include <atomic>
#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::serving {
namespace {

// y = 2x, recording the batch sizes it ran.
struct Doubler {
  std::mutex mu;
  std::vector<int64_t> batch_sizes;
  std::atomic<int> gate_open{1};
  std::atomic<int> entered{0};

  absl::StatusOr<Batcher::TensorMap> operator()(const Batcher::TensorMap& inputs) {
    entered.fetch_add(1);
    while (gate_open.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const Tensor& x = inputs.at("x");
    {
      std::lock_guard<std::mutex> lock(mu);
      batch_sizes.push_back(x.dim(0));
    }
    Tensor y(DType::kFloat32, x.shape());
    for (int64_t i = 0; i < x.num_elements(); ++i) y.data<float>()[i] = 2 * x.data<float>()[i];
    return Batcher::TensorMap{{"y", y}};
  }
};

Batcher::TensorMap Rows(std::vector<float> values) {
  return {{"x", Tensor::FromVector<float>(values, Shape{static_cast<int64_t>(values.size()), 1})}};
}

TEST(BatcherTest, MergesPadsAndSplits) {
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 8;
  options.batch_timeout_micros = 200000;  // long enough that all three requests merge
  options.num_batch_threads = 1;
  options.allowed_batch_sizes = {2, 8};
  ServingMetrics metrics;
  Batcher batcher(options, std::ref(doubler), "m", &metrics);
  std::vector<std::future<absl::StatusOr<Batcher::TensorMap>>> results;
  for (float base : {1.0f, 10.0f, 100.0f}) {
    results.push_back(std::async(std::launch::async, [&batcher, base] {
      return batcher.Run(Rows({base, base + 1}));
    }));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    auto out = results[i].get();
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = out->at("y");
    ASSERT_EQ(y.shape(), (Shape{2, 1}));
    const float base = i == 0 ? 1 : i == 1 ? 10 : 100;
    EXPECT_EQ(y.data<float>()[0], 2 * base);
    EXPECT_EQ(y.data<float>()[1], 2 * (base + 1));
  }
  // 6 rows padded up to the allowed size 8, in one run.
  EXPECT_EQ(doubler.batch_sizes, std::vector<int64_t>{8});
  EXPECT_EQ(metrics.batch_size.Count({"m"}), 1u);
}

TEST(BatcherTest, RejectsTasksLargerThanTheMaximum) {
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 2;
  options.num_batch_threads = 1;
  Batcher batcher(options, std::ref(doubler), "m", nullptr);
  auto out = batcher.Run(Rows({1, 2, 3}));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              ::testing::HasSubstr("Task size 3 is larger than maximum input batch size 2"));
}

TEST(BatcherTest, FullQueueAnswersUnavailableAtOnce) {
  Doubler doubler;
  doubler.gate_open = 0;  // the one batch thread blocks in its first run
  BatchingOptions options;
  options.max_batch_size = 1;
  options.max_enqueued_batches = 2;
  options.num_batch_threads = 1;
  Batcher batcher(options, std::ref(doubler), "m", nullptr);
  std::vector<std::future<absl::StatusOr<Batcher::TensorMap>>> pending;
  pending.push_back(std::async(std::launch::async, [&] { return batcher.Run(Rows({1})); }));
  // Wait until the worker holds the first batch, then fill the queue.
  for (int i = 0; i < 2000 && doubler.entered.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(doubler.entered.load(), 1);
  for (int i = 0; i < 2; ++i) {
    pending.push_back(std::async(std::launch::async, [&] { return batcher.Run(Rows({2})); }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  auto refused = batcher.Run(Rows({3}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  doubler.gate_open = 1;
  for (auto& f : pending) EXPECT_TRUE(f.get().ok());
}

TEST(BatcherTest, DifferentRowShapesDoNotMerge) {
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 8;
  options.batch_timeout_micros = 100000;
  options.num_batch_threads = 2;
  Batcher batcher(options, std::ref(doubler), "m", nullptr);
  auto a = std::async(std::launch::async, [&] { return batcher.Run(Rows({1})); });
  auto b = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<float>({1, 2}, Shape{1, 2})}});
  });
  EXPECT_TRUE(a.get().ok());
  auto wide = b.get();
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->at("y").shape(), (Shape{1, 2}));
  EXPECT_EQ(doubler.batch_sizes.size(), 2u);
}

TEST(BatcherTest, OptionsFromProtoValidate) {
  tensorflow::serving::BatchingParameters params;
  params.mutable_max_batch_size()->set_value(16);
  params.add_allowed_batch_sizes(4);
  params.add_allowed_batch_sizes(8);
  EXPECT_FALSE(BatchingOptionsFromProto(params).ok());  // must end at max_batch_size
  params.add_allowed_batch_sizes(16);
  auto options = BatchingOptionsFromProto(params);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(PaddedBatchSize(*options, 5), 8);
  EXPECT_EQ(PaddedBatchSize(*options, 16), 16);
  EXPECT_EQ(options->max_enqueued_batches, 100);  // TF Serving's default
}

}  // namespace
}  // namespace kiln::serving
