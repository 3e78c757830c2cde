#include "kiln/serving/batcher.h"

#include <algorithm>
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

// Returns its input "x" as "y" and keeps every batch it ran, to check merging and padding.
struct Echo {
  std::mutex mu;
  std::vector<Tensor> batches;

  absl::StatusOr<Batcher::TensorMap> operator()(const Batcher::TensorMap& inputs) {
    std::lock_guard<std::mutex> lock(mu);
    batches.push_back(inputs.at("x"));
    return Batcher::TensorMap{{"y", inputs.at("x")}};
  }
};

// `max_batch_size`: the rows a test sends, so that its batch closes as soon as every request
// arrived; the long timeout only matters when a test means to wait for it.
BatchingOptions PaddingOptions(int64_t max_batch_size) {
  BatchingOptions options;
  options.max_batch_size = max_batch_size;
  options.batch_timeout_micros = 5000000;
  options.num_batch_threads = 1;
  options.pad_variable_length_inputs = true;
  return options;
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

TEST(BatcherTest, PadVariableLengthInputsPadsToTheLongestWithTheFirstElement) {
  Echo echo;
  Batcher batcher(PaddingOptions(3), std::ref(echo), "m", nullptr);
  auto shorter = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<int64_t>({7, 8}, Shape{1, 2})}});
  });
  auto longer = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<int64_t>({3, 4, 5, 6, 1, 2}, Shape{2, 3})}});
  });
  auto a = shorter.get();
  auto b = longer.get();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(echo.batches.size(), 1u);  // one run for both
  const Tensor& batch = echo.batches[0];
  ASSERT_EQ(batch.shape(), (Shape{3, 3}));
  // Which request came first is up to the scheduler; find the padded row.
  const std::vector<int64_t> values = Values<int64_t>(batch);
  const std::vector<int64_t> short_first = {7, 8, 7, 3, 4, 5, 6, 1, 2};
  const std::vector<int64_t> long_first = {3, 4, 5, 6, 1, 2, 7, 8, 7};
  EXPECT_TRUE(values == short_first || values == long_first) << batch.shape().ToString();
  // Outputs come back per request with the batch's padded shape, as in TF Serving.
  ASSERT_EQ(a->at("y").shape(), (Shape{1, 3}));
  EXPECT_EQ(Values<int64_t>(a->at("y")), (std::vector<int64_t>{7, 8, 7}));
  ASSERT_EQ(b->at("y").shape(), (Shape{2, 3}));
  EXPECT_EQ(Values<int64_t>(b->at("y")), (std::vector<int64_t>{3, 4, 5, 6, 1, 2}));
}

TEST(BatcherTest, PadVariableLengthInputsPadsEveryInnerDimensionAndStrings) {
  Echo echo;
  BatchingOptions options = PaddingOptions(8);
  options.allowed_batch_sizes = {4, 8};
  options.batch_timeout_micros = 1000000;  // 2 rows never fill 8: the timeout closes it
  Batcher batcher(options, std::ref(echo), "m", nullptr);
  // [1, 2, 2] and [1, 3, 1]: the batch is [2 -> 4 allowed, 3, 2].
  auto a = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<float>({1, 2, 3, 4}, Shape{1, 2, 2})}});
  });
  auto b = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<float>({5, 6, 7}, Shape{1, 3, 1})}});
  });
  auto out_a = a.get();
  auto out_b = b.get();
  ASSERT_TRUE(out_a.ok()) << out_a.status();
  ASSERT_TRUE(out_b.ok()) << out_b.status();
  ASSERT_EQ(echo.batches.size(), 1u);
  EXPECT_EQ(echo.batches[0].shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(Values<float>(out_a->at("y")), (std::vector<float>{1, 2, 3, 4, 1, 1}));
  EXPECT_EQ(Values<float>(out_b->at("y")), (std::vector<float>{5, 5, 6, 5, 7, 5}));
  // The two rows padding the batch to the allowed size 4 repeat its first row.
  const std::vector<float> all = Values<float>(echo.batches[0]);
  for (int row = 2; row < 4; ++row) {
    EXPECT_TRUE(std::equal(all.begin() + row * 6, all.begin() + row * 6 + 6, all.begin()));
  }

  Echo strings;
  Batcher string_batcher(PaddingOptions(2), std::ref(strings), "m", nullptr);
  auto c = std::async(std::launch::async, [&] {
    return string_batcher.Run(
        {{"x", Tensor::FromVector<std::string>({"the", "cat", "sat"}, Shape{1, 3})}});
  });
  auto d = std::async(std::launch::async, [&] {
    return string_batcher.Run({{"x", Tensor::FromVector<std::string>({"hi"}, Shape{1, 1})}});
  });
  auto out_c = c.get();
  auto out_d = d.get();
  ASSERT_TRUE(out_c.ok()) << out_c.status();
  ASSERT_TRUE(out_d.ok()) << out_d.status();
  ASSERT_EQ(strings.batches.size(), 1u);
  EXPECT_EQ(Values<std::string>(out_c->at("y")), (std::vector<std::string>{"the", "cat", "sat"}));
  EXPECT_EQ(Values<std::string>(out_d->at("y")), (std::vector<std::string>{"hi", "hi", "hi"}));
}

TEST(BatcherTest, PadVariableLengthInputsStillSeparatesRanksAndDtypes) {
  Echo echo;
  BatchingOptions options = PaddingOptions(8);
  options.batch_timeout_micros = 300000;
  Batcher batcher(options, std::ref(echo), "m", nullptr);
  auto a = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<float>({1, 2}, Shape{1, 2})}});
  });
  auto b = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<float>({1, 2}, Shape{1, 2, 1})}});
  });
  auto c = std::async(std::launch::async, [&] {
    return batcher.Run({{"x", Tensor::FromVector<int32_t>({1, 2}, Shape{1, 2})}});
  });
  EXPECT_TRUE(a.get().ok());
  EXPECT_TRUE(b.get().ok());
  EXPECT_TRUE(c.get().ok());
  EXPECT_EQ(echo.batches.size(), 3u);
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
  EXPECT_FALSE(options->pad_variable_length_inputs);
  params.set_pad_variable_length_inputs(true);
  EXPECT_TRUE(BatchingOptionsFromProto(params)->pad_variable_length_inputs);
}

// enable_large_batch_splitting: a request larger than max_execution_batch_size runs in
// several batches (the first part filling the room left in the open batch) and its outputs
// come back merged, equal to running it unsplit.
TEST(BatcherTest, LargeBatchSplittingRunsPartsAndMergesThemInOrder) {
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 16;  // the largest request
  options.enable_large_batch_splitting = true;
  options.max_execution_batch_size = 4;  // the largest batch that runs
  options.allowed_batch_sizes = {2, 4};
  options.batch_timeout_micros = 300000;  // the second request finds the first's batch open
  options.num_batch_threads = 1;
  Batcher batcher(options, std::ref(doubler), "m", nullptr);
  auto first = std::async(std::launch::async, [&] { return batcher.Run(Rows({0.5f})); });
  while (batcher.Depth().requests == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<float> values;
  for (int i = 0; i < 11; ++i) values.push_back(1.0f + i);
  auto big = batcher.Run(Rows(values));
  ASSERT_TRUE(big.ok()) << big.status();
  const Tensor& y = big->at("y");
  ASSERT_EQ(y.shape(), (Shape{11, 1}));
  Doubler unsplit;
  auto expected = unsplit(Rows(values));
  for (int i = 0; i < 11; ++i) EXPECT_EQ(y.data<float>()[i], expected->at("y").data<float>()[i]);
  auto small = first.get();
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->at("y").data<float>()[0], 1.0f);
  // The open batch takes 1 + 3 rows, then two full batches take the other 8 rows.
  std::vector<int64_t> sizes = doubler.batch_sizes;
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 4})) << "the 11 rows: 3 + 4 + 4";
}

TEST(BatcherTest, LargeBatchSplittingPadsTheLastPart) {
  Doubler doubler;
  BatchingOptions options;
  options.max_batch_size = 10;
  options.enable_large_batch_splitting = true;
  options.max_execution_batch_size = 4;
  options.allowed_batch_sizes = {2, 4};
  options.num_batch_threads = 2;
  Batcher batcher(options, std::ref(doubler), "m", nullptr);
  auto out = batcher.Run(Rows({1, 2, 3, 4, 5, 6, 7, 8, 9}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->at("y").shape(), (Shape{9, 1}));
  for (int i = 0; i < 9; ++i) EXPECT_EQ(out->at("y").data<float>()[i], 2.0f * (i + 1));
  std::vector<int64_t> sizes = doubler.batch_sizes;
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 4, 4}));  // 4 + 4 + 1 padded to 2
  // Without splitting the same request is refused: it is larger than a batch.
  BatchingOptions whole = options;
  whole.enable_large_batch_splitting = false;
  whole.max_batch_size = 4;
  Batcher refusing(whole, std::ref(doubler), "m", nullptr);
  EXPECT_FALSE(refusing.Run(Rows({1, 2, 3, 4, 5})).ok());
  // Beyond max_batch_size a request is refused even with splitting.
  EXPECT_FALSE(batcher.Run(Rows({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})).ok());
}

TEST(BatcherTest, LargeBatchSplittingOptionsFromProtoAsTfServing) {
  tensorflow::serving::BatchingParameters params;
  params.mutable_max_batch_size()->set_value(64);
  params.mutable_enable_large_batch_splitting()->set_value(true);
  params.mutable_max_execution_batch_size()->set_value(16);
  params.add_allowed_batch_sizes(8);
  params.add_allowed_batch_sizes(16);
  auto options = BatchingOptionsFromProto(params);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->enable_large_batch_splitting);
  EXPECT_EQ(options->ExecutionBatchLimit(), 16);
  // The last allowed size must be max_execution_batch_size, not max_batch_size.
  params.add_allowed_batch_sizes(64);
  auto bad_last = BatchingOptionsFromProto(params);
  ASSERT_FALSE(bad_last.ok());
  EXPECT_THAT(bad_last.status().message(),
              ::testing::HasSubstr("must be equal to max_execution_batch_size"));
  params.clear_allowed_batch_sizes();
  params.mutable_max_execution_batch_size()->set_value(128);  // above max_batch_size
  EXPECT_FALSE(BatchingOptionsFromProto(params).ok());
  params.clear_max_execution_batch_size();  // defaults to max_batch_size
  EXPECT_EQ(BatchingOptionsFromProto(params)->ExecutionBatchLimit(), 64);
  params.mutable_enable_large_batch_splitting()->set_value(false);
  EXPECT_EQ(BatchingOptionsFromProto(params)->ExecutionBatchLimit(), 64);
}

}  // namespace
}  // namespace kiln::serving
