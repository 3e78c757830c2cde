// Request deadlines in the batching queue (deadline.h): the caller is answered at its deadline,
// and a task whose deadline passed is never run, while the live requests of its batch are.
#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/core/clock.h"
#include "kiln/serving/batcher.h"
#include "kiln/serving/deadline.h"

namespace kiln::serving {
namespace {

// y = x + 1, recording the rows of every batch it ran.
struct PlusOne {
  std::mutex mu;
  std::vector<std::vector<float>> batches;
  absl::StatusOr<Batcher::TensorMap> operator()(const Batcher::TensorMap& inputs) {
    const Tensor& x = inputs.at("x");
    Tensor y(DType::kFloat32, x.shape());
    std::vector<float> rows;
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      y.data<float>()[i] = x.data<float>()[i] + 1;
      rows.push_back(x.data<float>()[i]);
    }
    std::lock_guard<std::mutex> lock(mu);
    batches.push_back(rows);
    return Batcher::TensorMap{{"y", y}};
  }
};

Batcher::TensorMap Row(float value) {
  return {{"x", Tensor::FromVector<float>({value}, Shape{1, 1})}};
}

BatchingOptions SlowBatches() {
  BatchingOptions options;
  options.max_batch_size = 16;
  options.batch_timeout_micros = 400000;  // every batch waits 400 ms for more requests
  options.num_batch_threads = 1;
  return options;
}

TEST(BatcherDeadlineTest, ExpiredRequestIsAnsweredAtItsDeadlineAndNeverRuns) {
  PlusOne model;
  Batcher batcher(SlowBatches(), std::ref(model), "m", nullptr);
  const int64_t start = NowNanos();
  absl::StatusOr<Batcher::TensorMap> result;
  {
    RequestDeadlineScope deadline(RequestDeadlineScope::FromTimeoutMs(50));
    result = batcher.Run(Row(1));
  }
  const int64_t waited_ms = (NowNanos() - start) / 1000000;
  EXPECT_TRUE(absl::IsDeadlineExceeded(result.status())) << result.status();
  EXPECT_GE(waited_ms, 45);
  EXPECT_LT(waited_ms, 350);  // well before the batch closes
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  std::lock_guard<std::mutex> lock(model.mu);
  EXPECT_TRUE(model.batches.empty());
}

TEST(BatcherDeadlineTest, LiveRequestsOfABatchRunWithoutTheExpiredOnes) {
  PlusOne model;
  Batcher batcher(SlowBatches(), std::ref(model), "m", nullptr);
  auto expired = std::async(std::launch::async, [&] {
    RequestDeadlineScope deadline(RequestDeadlineScope::FromTimeoutMs(50));
    return batcher.Run(Row(1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto live = std::async(std::launch::async, [&] {
    RequestDeadlineScope deadline(RequestDeadlineScope::FromTimeoutMs(5000));
    return batcher.Run(Row(2));
  });
  auto unbounded = std::async(std::launch::async, [&] { return batcher.Run(Row(3)); });
  EXPECT_TRUE(absl::IsDeadlineExceeded(expired.get().status()));
  auto live_result = live.get();
  ASSERT_TRUE(live_result.ok()) << live_result.status();
  EXPECT_EQ(live_result->at("y").data<float>()[0], 3);
  auto unbounded_result = unbounded.get();
  ASSERT_TRUE(unbounded_result.ok()) << unbounded_result.status();
  EXPECT_EQ(unbounded_result->at("y").data<float>()[0], 4);
  std::lock_guard<std::mutex> lock(model.mu);
  ASSERT_EQ(model.batches.size(), 1u);
  EXPECT_THAT(model.batches[0], ::testing::UnorderedElementsAre(2, 3));
}

TEST(BatcherDeadlineTest, ScopesNestAndPastDeadlinesStayDeadlines) {
  EXPECT_EQ(CurrentRequestDeadlineNs(), 0);
  EXPECT_TRUE(CheckRequestDeadline("now").ok());
  {
    RequestDeadlineScope outer(RequestDeadlineScope::FromTimeoutMs(10000));
    const int64_t outer_deadline = CurrentRequestDeadlineNs();
    EXPECT_GT(outer_deadline, NowNanos());
    {
      // A gRPC deadline already in the past is a deadline, not "none".
      RequestDeadlineScope inner(RequestDeadlineScope::FromSystemDeadline(
          std::chrono::system_clock::now() - std::chrono::seconds(1)));
      EXPECT_NE(CurrentRequestDeadlineNs(), 0);
      EXPECT_TRUE(absl::IsDeadlineExceeded(CheckRequestDeadline("in the test")));
    }
    EXPECT_EQ(CurrentRequestDeadlineNs(), outer_deadline);
    RequestDeadlineScope none(
        RequestDeadlineScope::FromSystemDeadline(std::chrono::system_clock::time_point::max()));
    EXPECT_EQ(CurrentRequestDeadlineNs(), 0);
  }
  EXPECT_EQ(CurrentRequestDeadlineNs(), 0);
}

}  // namespace
}  // namespace kiln::serving
