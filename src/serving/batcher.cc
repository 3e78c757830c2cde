#include "kiln/serving/batcher.h"

#include <algorithm>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"

namespace kiln::serving {

struct Batcher::Task {
  TensorMap inputs;
  int64_t rows = 0;
  int64_t enqueue_ns = 0;
  std::promise<absl::StatusOr<TensorMap>> result;
};

absl::StatusOr<BatchingOptions> BatchingOptionsFromProto(
    const tensorflow::serving::BatchingParameters& params) {
  BatchingOptions options;
  if (params.has_max_batch_size()) options.max_batch_size = params.max_batch_size().value();
  if (params.has_batch_timeout_micros()) {
    options.batch_timeout_micros = params.batch_timeout_micros().value();
  }
  if (params.has_max_enqueued_batches()) {
    options.max_enqueued_batches = params.max_enqueued_batches().value();
  }
  if (params.has_num_batch_threads()) {
    options.num_batch_threads = static_cast<int>(params.num_batch_threads().value());
  }
  options.allowed_batch_sizes.assign(params.allowed_batch_sizes().begin(),
                                     params.allowed_batch_sizes().end());
  options.pad_variable_length_inputs = params.pad_variable_length_inputs();
  if (options.max_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be positive, got ", options.max_batch_size));
  }
  if (options.batch_timeout_micros < 0) {
    return absl::InvalidArgumentError("batch_timeout_micros must be non-negative");
  }
  if (options.max_enqueued_batches <= 0) {
    return absl::InvalidArgumentError("max_enqueued_batches must be positive");
  }
  if (options.num_batch_threads < 0) {
    return absl::InvalidArgumentError("num_batch_threads must be non-negative");
  }
  for (size_t i = 0; i < options.allowed_batch_sizes.size(); ++i) {
    if (options.allowed_batch_sizes[i] <= 0 ||
        (i > 0 && options.allowed_batch_sizes[i] <= options.allowed_batch_sizes[i - 1])) {
      return absl::InvalidArgumentError(
          "allowed_batch_sizes entries must be positive and in increasing order");
    }
  }
  if (!options.allowed_batch_sizes.empty() &&
      options.allowed_batch_sizes.back() != options.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the last entry of allowed_batch_sizes (", options.allowed_batch_sizes.back(),
        ") must equal max_batch_size (", options.max_batch_size, ")"));
  }
  return options;
}

int64_t PaddedBatchSize(const BatchingOptions& options, int64_t rows) {
  for (int64_t allowed : options.allowed_batch_sizes) {
    if (allowed >= rows) return allowed;
  }
  return rows;
}

Batcher::Batcher(BatchingOptions options, RunFn run, std::string name, ServingMetrics* metrics)
    : options_(std::move(options)), run_(std::move(run)), name_(std::move(name)),
      metrics_(metrics) {
  int threads = options_.num_batch_threads;
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& thread : threads_) thread.join();
}

namespace {

// Tasks merge only when every input has the same dtype and the same non-batch dimensions.
std::string ShapeKey(const Batcher::TensorMap& inputs) {
  std::string key;
  for (const auto& [name, tensor] : inputs) {
    absl::StrAppend(&key, name, ":", static_cast<int>(tensor.dtype()));
    for (int d = 1; d < tensor.rank(); ++d) absl::StrAppend(&key, ",", tensor.dim(d));
    key.push_back(';');
  }
  return key;
}

void CopyRows(const Tensor& from, int64_t from_row, int64_t rows, Tensor* to, int64_t to_row) {
  if (rows == 0) return;
  const int64_t row_elements = from.dim(0) == 0 ? 0 : from.num_elements() / from.dim(0);
  if (from.dtype() == DType::kString) {
    const std::string* src = from.data<std::string>() + from_row * row_elements;
    std::string* dst = to->data<std::string>() + to_row * row_elements;
    std::copy(src, src + rows * row_elements, dst);
    return;
  }
  const size_t row_bytes = row_elements * DTypeSize(from.dtype());
  std::memcpy(static_cast<char*>(to->raw_data()) + to_row * row_bytes,
              static_cast<const char*>(from.raw_data()) + from_row * row_bytes, rows * row_bytes);
}

}  // namespace

absl::StatusOr<Batcher::TensorMap> Batcher::Run(TensorMap inputs) {
  auto task = std::make_shared<Task>();
  task->rows = -1;
  for (const auto& [name, tensor] : inputs) {
    if (tensor.rank() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Batching session Run() input tensors must have at least one dimension; input '",
          name, "' is a scalar"));
    }
    if (task->rows >= 0 && tensor.dim(0) != task->rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Batching session Run() input tensors must have equal 0th-dimension size; input '",
          name, "' has ", tensor.dim(0), ", another has ", task->rows));
    }
    task->rows = tensor.dim(0);
  }
  if (task->rows < 0) return absl::InvalidArgumentError("a batched request needs inputs");
  if (task->rows > options_.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat("Task size ", task->rows,
                                                   " is larger than maximum input batch size ",
                                                   options_.max_batch_size));
  }
  const std::string key = ShapeKey(inputs);
  task->inputs = std::move(inputs);
  task->enqueue_ns = NowNanos();
  auto future = task->result.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the batcher is shutting down");
    Batch* open = queue_.empty() || queue_.back().closed ? nullptr : &queue_.back();
    if (open != nullptr && (open->shape_key != key ||
                            open->rows + task->rows > options_.max_batch_size)) {
      open->closed = true;
      open = nullptr;
    }
    if (open == nullptr) {
      if (static_cast<int64_t>(queue_.size()) >= options_.max_enqueued_batches) {
        return absl::UnavailableError(
            "The batch scheduling queue to which this task was submitted is full");
      }
      Batch& batch = queue_.emplace_back();
      batch.shape_key = key;
      batch.deadline_ns = task->enqueue_ns + options_.batch_timeout_micros * 1000;
      open = &batch;
    }
    open->rows += task->rows;
    open->tasks.push_back(task);
    if (open->rows == options_.max_batch_size) open->closed = true;
  }
  cv_.notify_one();
  return future.get();
}

void Batcher::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (queue_.empty()) {
      if (stopping_) return;
      cv_.wait(lock);
      continue;
    }
    Batch& front = queue_.front();
    if (!front.closed && !stopping_ && NowNanos() < front.deadline_ns) {
      cv_.wait_for(lock, std::chrono::nanoseconds(front.deadline_ns - NowNanos()));
      continue;
    }
    Batch batch = std::move(front);
    queue_.pop_front();
    lock.unlock();
    Process(std::move(batch));
    lock.lock();
  }
}

void Batcher::Process(Batch batch) {
  const int64_t start_ns = NowNanos();
  const int64_t padded = PaddedBatchSize(options_, batch.rows);
  if (metrics_ != nullptr) {
    metrics_->batch_size.Observe({name_}, static_cast<double>(batch.rows));
    metrics_->padding_size.Observe({name_}, static_cast<double>(padded - batch.rows));
    for (const auto& task : batch.tasks) {
      metrics_->queuing_latency.Observe({name_}, (start_ns - task->enqueue_ns) / 1000.0);
    }
  }
  absl::StatusOr<TensorMap> outputs;
  if (batch.tasks.size() == 1 && padded == batch.rows) {
    outputs = run_(batch.tasks[0]->inputs);
  } else {
    TensorMap merged;
    for (const auto& [name, first] : batch.tasks[0]->inputs) {
      Shape shape = first.shape();
      shape.set_dim(0, padded);
      Tensor tensor(first.dtype(), shape);
      int64_t row = 0;
      for (const auto& task : batch.tasks) {
        const Tensor& part = task->inputs.at(name);
        CopyRows(part, 0, part.dim(0), &tensor, row);
        row += part.dim(0);
      }
      // Padding repeats the first row, so that padded rows hold valid values.
      for (; row < padded; ++row) CopyRows(first, 0, 1, &tensor, row);
      merged.emplace(name, std::move(tensor));
    }
    outputs = run_(merged);
  }
  if (!outputs.ok()) {
    for (const auto& task : batch.tasks) task->result.set_value(outputs.status());
    return;
  }
  for (const auto& [name, tensor] : *outputs) {
    if (tensor.rank() == 0 || tensor.dim(0) != padded) {
      const absl::Status error = absl::InternalError(absl::StrCat(
          "batched output '", name, "' has shape ", tensor.shape().ToString(),
          "; batching needs every output to have the batch size ", padded,
          " in dimension 0"));
      for (const auto& task : batch.tasks) task->result.set_value(error);
      return;
    }
  }
  int64_t row = 0;
  for (const auto& task : batch.tasks) {
    TensorMap split;
    for (const auto& [name, tensor] : *outputs) {
      split.emplace(name, tensor.Slice(row, row + task->rows));
    }
    row += task->rows;
    task->result.set_value(std::move(split));
  }
}

}  // namespace kiln::serving
