// Server-side batching with TF Serving's semantics: requests for one model version and
// signature are merged into a batch (up to max_batch_size rows), the batch is padded up to the
// next allowed_batch_sizes entry, run once, and the outputs are split back per request. A
// batch closes when it is full or batch_timeout_micros after its first request; at most
// max_enqueued_batches wait, and a request that would need more is refused at once with
// UNAVAILABLE instead of queueing without bound.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "kiln/serving/metrics.h"
#include "tensorflow_serving/servables/tensorflow/session_bundle_config.pb.h"

namespace kiln::serving {

struct BatchingOptions {
  int64_t max_batch_size = 1000;
  int64_t batch_timeout_micros = 0;
  int64_t max_enqueued_batches = 100;
  int num_batch_threads = 0;                 // 0: the number of cores
  std::vector<int64_t> allowed_batch_sizes;  // empty: any size up to max_batch_size
  // Requests whose inputs differ in dimensions after the first merge into one batch, each
  // input padded to the largest size of each dimension with the request tensor's first
  // element (TF Serving's semantics); outputs are split back with the padded shape. Off:
  // requests with different shapes go to different batches.
  bool pad_variable_length_inputs = false;
  // enable_large_batch_splitting: max_batch_size bounds a request, and a request that does not
  // fit the room left in the open batch is split: its first rows fill that batch, the rest go
  // to new batches of up to max_execution_batch_size rows; its outputs are merged back in row
  // order. Off: a batch holds whole requests only, up to max_batch_size rows.
  bool enable_large_batch_splitting = false;
  int64_t max_execution_batch_size = 0;  // 0: max_batch_size (TF Serving's default)

  // The largest batch that runs: max_execution_batch_size when splitting, else max_batch_size.
  int64_t ExecutionBatchLimit() const {
    return enable_large_batch_splitting && max_execution_batch_size > 0 ? max_execution_batch_size
                                                                        : max_batch_size;
  }
};

// Reads BatchingParameters (unset fields keep TF Serving's defaults) and checks them as TF
// Serving does: allowed_batch_sizes ascending and ending at max_batch_size, or, with
// enable_large_batch_splitting, ending at max_execution_batch_size <= max_batch_size.
absl::StatusOr<BatchingOptions> BatchingOptionsFromProto(
    const tensorflow::serving::BatchingParameters& params);

// The batch size a batch of `rows` rows is padded to.
int64_t PaddedBatchSize(const BatchingOptions& options, int64_t rows);

// Thread safety: Run may be called from any thread at once; each call waits on the batch it
// joined while the batch threads run it. Destruction stops the threads after the queue drains.
class Batcher {
 public:
  using TensorMap = std::map<std::string, Tensor>;
  using RunFn = std::function<absl::StatusOr<TensorMap>(const TensorMap& inputs)>;

  // `name` labels the batching metrics (the model name).
  Batcher(BatchingOptions options, RunFn run, std::string name, ServingMetrics* metrics);
  // Finishes every queued batch, then joins the threads.
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Runs `inputs` (every tensor has the request's rows in dimension 0) as part of a batch;
  // blocks until its outputs are ready.
  absl::StatusOr<TensorMap> Run(TensorMap inputs);

  const BatchingOptions& options() const { return options_; }

  // What waits in the queue now (batches not yet taken by a batch thread); the status page
  // shows it.
  struct QueueDepth {
    int64_t batches = 0;
    int64_t requests = 0;
    int64_t rows = 0;
  };
  QueueDepth Depth();

 private:
  struct Task;
  struct Batch {
    std::vector<std::shared_ptr<Task>> tasks;
    int64_t rows = 0;
    int64_t deadline_ns = 0;
    std::string shape_key;
    bool closed = false;
  };

  void WorkerLoop();
  void Process(Batch batch);

  const BatchingOptions options_;
  const RunFn run_;
  const std::string name_;
  ServingMetrics* const metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::serving
