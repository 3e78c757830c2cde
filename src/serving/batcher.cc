#include "kiln/serving/batcher.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"
#include "kiln/serving/deadline.h"

namespace kiln::serving {

struct Batcher::Task {
  TensorMap inputs;
  int64_t rows = 0;
  int64_t enqueue_ns = 0;
  // The request's deadline (deadline.h; 0: none): past it the task is dropped, not run.
  int64_t deadline_ns = 0;
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
  options.enable_large_batch_splitting =
      params.has_enable_large_batch_splitting() && params.enable_large_batch_splitting().value();
  if (options.enable_large_batch_splitting) {
    options.max_execution_batch_size = params.has_max_execution_batch_size()
                                           ? params.max_execution_batch_size().value()
                                           : options.max_batch_size;
  }
  if (options.max_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be positive, got ", options.max_batch_size));
  }
  if (options.enable_large_batch_splitting &&
      (options.max_execution_batch_size <= 0 ||
       options.max_execution_batch_size > options.max_batch_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("When enable_large_batch_splitting is true, max_execution_batch_size (",
                     options.max_execution_batch_size,
                     ") must be positive and at most max_batch_size (the largest request, ",
                     options.max_batch_size, ")"));
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
  if (options.enable_large_batch_splitting) {
    if (!options.allowed_batch_sizes.empty() &&
        options.allowed_batch_sizes.back() != options.max_execution_batch_size) {
      // TF Serving's words (batching_session.cc).
      return absl::InvalidArgumentError(absl::StrCat(
          "Last entry in allowed_batch_sizes must be equal to "
          "max_execution_batch_size; last entry was ",
          options.allowed_batch_sizes.back(), "; expected ", options.max_execution_batch_size));
    }
  } else if (!options.allowed_batch_sizes.empty() &&
             options.allowed_batch_sizes.back() != options.max_batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the last entry of allowed_batch_sizes (", options.allowed_batch_sizes.back(),
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
    : options_(std::move(options)),
      run_(std::move(run)),
      name_(std::move(name)),
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

// Tasks merge only when every input has the same dtype and the same non-batch dimensions;
// with pad_variable_length_inputs, the same dtype and rank (the batch pads the other
// dimensions to the largest in it, as TF Serving does).
std::string ShapeKey(const Batcher::TensorMap& inputs, bool pad_variable_length_inputs) {
  std::string key;
  for (const auto& [name, tensor] : inputs) {
    absl::StrAppend(&key, name, ":", static_cast<int>(tensor.dtype()));
    if (pad_variable_length_inputs) {
      absl::StrAppend(&key, ",r", tensor.rank());
    } else {
      for (int d = 1; d < tensor.rank(); ++d) absl::StrAppend(&key, ",", tensor.dim(d));
    }
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

// Copies every row of `from` into `to` starting at row `to_row`, where `to` is at least as
// large as `from` in every dimension after the first. The cells `from` does not cover are
// filled with `from`'s first element: TF Serving pads variable-length inputs with a value
// taken from the tensor itself, so that padding never introduces a value the client did not
// send (a zero may be a meaningful token id).
void CopyPadded(const Tensor& from, Tensor* to, int64_t to_row) {
  const int rank = from.rank();
  const int64_t rows = from.dim(0);
  const int64_t to_row_elements = to->dim(0) == 0 ? 0 : to->num_elements() / to->dim(0);
  const int64_t first = to_row * to_row_elements;
  const int64_t count = rows * to_row_elements;
  const bool is_string = from.dtype() == DType::kString;
  const size_t element_bytes = is_string ? 0 : DTypeSize(from.dtype());
  char* to_bytes = is_string ? nullptr : static_cast<char*>(to->raw_data());
  const char* from_bytes = is_string ? nullptr : static_cast<const char*>(from.raw_data());
  if (from.num_elements() > 0) {
    if (is_string) {
      std::fill_n(to->data<std::string>() + first, count, from.data<std::string>()[0]);
    } else {
      for (int64_t i = 0; i < count; ++i) {
        std::memcpy(to_bytes + (first + i) * element_bytes, from_bytes, element_bytes);
      }
    }
  } else if (!is_string) {
    std::memset(to_bytes + first * element_bytes, 0, count * element_bytes);
  }
  if (from.num_elements() == 0) return;
  // Row-major strides of both tensors; each run of the last dimension is contiguous in both.
  std::vector<int64_t> from_strides(rank, 1), to_strides(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    from_strides[d] = from_strides[d + 1] * from.dim(d + 1);
    to_strides[d] = to_strides[d + 1] * to->dim(d + 1);
  }
  const int64_t run = from.dim(rank - 1);
  const int64_t runs = from.num_elements() / run;
  std::vector<int64_t> index(rank, 0);  // index of the run's first element in `from`
  for (int64_t r = 0; r < runs; ++r) {
    int64_t from_offset = 0, to_offset = first;
    for (int d = 0; d < rank - 1; ++d) {
      from_offset += index[d] * from_strides[d];
      to_offset += index[d] * to_strides[d];
    }
    if (is_string) {
      const std::string* src = from.data<std::string>() + from_offset;
      std::copy(src, src + run, to->data<std::string>() + to_offset);
    } else {
      std::memcpy(to_bytes + to_offset * element_bytes, from_bytes + from_offset * element_bytes,
                  run * element_bytes);
    }
    for (int d = rank - 2; d >= 0; --d) {
      if (++index[d] < from.dim(d)) break;
      index[d] = 0;
    }
  }
}

}  // namespace

absl::StatusOr<Batcher::TensorMap> Batcher::Run(TensorMap inputs) {
  int64_t rows = -1;
  for (const auto& [name, tensor] : inputs) {
    if (tensor.rank() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Batching session Run() input tensors must have at least one dimension; input '", name,
          "' is a scalar"));
    }
    if (rows >= 0 && tensor.dim(0) != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Batching session Run() input tensors must have equal 0th-dimension size; input '", name,
          "' has ", tensor.dim(0), ", another has ", rows));
    }
    rows = tensor.dim(0);
  }
  if (rows < 0) return absl::InvalidArgumentError("a batched request needs inputs");
  if (rows > options_.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Task size ", rows, " is larger than maximum input batch size ", options_.max_batch_size));
  }
  const int64_t limit = options_.ExecutionBatchLimit();
  const std::string key = ShapeKey(inputs, options_.pad_variable_length_inputs);
  const int64_t enqueue_ns = NowNanos();
  const int64_t deadline_ns = CurrentRequestDeadlineNs();
  std::vector<std::shared_ptr<Task>> parts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the batcher is shutting down");
    Batch* open = queue_.empty() || queue_.back().closed ? nullptr : &queue_.back();
    if (open != nullptr && open->shape_key != key) {
      open->closed = true;
      open = nullptr;
    }
    // The rows each part takes: without splitting, the whole request in the open batch or a
    // new one; with it, the room left in the open batch first, then full batches.
    std::vector<int64_t> sizes;
    if (!options_.enable_large_batch_splitting || rows <= limit - (open ? open->rows : limit)) {
      if (open != nullptr && open->rows + rows > limit) {
        open->closed = true;
        open = nullptr;
      }
      sizes.push_back(rows);
    } else {
      int64_t left = rows;
      if (open != nullptr && open->rows < limit) {
        sizes.push_back(std::min(left, limit - open->rows));
        left -= sizes.back();
      } else if (open != nullptr) {
        open->closed = true;
        open = nullptr;
      }
      for (; left > 0; left -= sizes.back()) sizes.push_back(std::min(left, limit));
    }
    // All parts are queued or none: a request is never half run.
    const int64_t new_batches = static_cast<int64_t>(sizes.size()) - (open != nullptr ? 1 : 0);
    if (static_cast<int64_t>(queue_.size()) + new_batches > options_.max_enqueued_batches) {
      return absl::UnavailableError(
          "The batch scheduling queue to which this task was submitted is full");
    }
    int64_t row = 0;
    for (int64_t size : sizes) {
      auto task = std::make_shared<Task>();
      task->rows = size;
      task->enqueue_ns = enqueue_ns;
      task->deadline_ns = deadline_ns;
      if (sizes.size() == 1) {
        task->inputs = std::move(inputs);
      } else {
        for (const auto& [name, tensor] : inputs) {
          task->inputs.emplace(name, tensor.Slice(row, row + size));
        }
      }
      row += size;
      if (open == nullptr) {
        Batch& batch = queue_.emplace_back();
        batch.shape_key = key;
        batch.deadline_ns = enqueue_ns + options_.batch_timeout_micros * 1000;
        open = &batch;
      }
      open->rows += size;
      open->tasks.push_back(task);
      if (open->rows == limit) open->closed = true;
      parts.push_back(std::move(task));
      // Later parts always start a new batch (the earlier part filled this one).
      open = nullptr;
    }
  }
  cv_.notify_all();
  // The caller stops waiting at its deadline (Process then skips its queued parts).
  auto await = [deadline_ns](Task& part) -> absl::StatusOr<TensorMap> {
    auto future = part.result.get_future();
    if (deadline_ns > 0 && future.wait_for(std::chrono::nanoseconds(std::max<int64_t>(
                               0, deadline_ns - NowNanos()))) == std::future_status::timeout) {
      return absl::DeadlineExceededError(
          "the request's deadline passed while it waited in the batch queue");
    }
    return future.get();
  };
  if (parts.size() == 1) return await(*parts[0]);

  // A split request: every part's outputs, concatenated in row order.
  std::vector<TensorMap> outputs;
  absl::Status failed;
  for (auto& part : parts) {
    auto result = await(*part);
    if (absl::IsDeadlineExceeded(result.status())) return result.status();
    if (!result.ok() && failed.ok()) failed = result.status();
    if (result.ok()) outputs.push_back(*std::move(result));
  }
  if (!failed.ok()) return failed;
  TensorMap merged;
  for (const auto& [name, first] : outputs[0]) {
    Shape shape = first.shape();
    shape.set_dim(0, rows);
    for (const TensorMap& part : outputs) {
      const Tensor& piece = part.at(name);
      bool same = piece.dtype() == first.dtype() && piece.rank() == first.rank();
      for (int d = 1; same && d < first.rank(); ++d) same = piece.dim(d) == first.dim(d);
      if (!same) {
        // Only pad_variable_length_inputs can give the parts' batches different shapes.
        return absl::InternalError(absl::StrCat("the parts of a split request gave output '", name,
                                                "' different shapes (", first.shape().ToString(),
                                                " and ", piece.shape().ToString(),
                                                "); they cannot be merged"));
      }
    }
    Tensor tensor(first.dtype(), shape);
    int64_t row = 0;
    for (const TensorMap& part : outputs) {
      const Tensor& piece = part.at(name);
      CopyRows(piece, 0, piece.dim(0), &tensor, row);
      row += piece.dim(0);
    }
    merged.emplace(name, std::move(tensor));
  }
  return merged;
}

Batcher::QueueDepth Batcher::Depth() {
  std::lock_guard<std::mutex> lock(mu_);
  QueueDepth depth;
  for (const Batch& batch : queue_) {
    ++depth.batches;
    depth.requests += static_cast<int64_t>(batch.tasks.size());
    depth.rows += batch.rows;
  }
  return depth;
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
  // Tasks whose deadline passed in the queue are not run: their callers answered
  // DEADLINE_EXCEEDED already, and running them would only delay the batches behind.
  std::erase_if(batch.tasks, [&](const std::shared_ptr<Task>& task) {
    if (task->deadline_ns == 0 || task->deadline_ns > start_ns) return false;
    batch.rows -= task->rows;
    task->result.set_value(absl::DeadlineExceededError(
        "the request's deadline passed while it waited in the batch queue"));
    return true;
  });
  if (batch.tasks.empty()) return;
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
      // The batch's shape: the padded batch size, then the largest of each other dimension
      // (all tasks have the same dimensions unless pad_variable_length_inputs merged them).
      Shape shape = first.shape();
      shape.set_dim(0, padded);
      for (const auto& task : batch.tasks) {
        const Tensor& part = task->inputs.at(name);
        for (int d = 1; d < shape.rank(); ++d) {
          shape.set_dim(d, std::max(shape.dim(d), part.dim(d)));
        }
      }
      Tensor tensor(first.dtype(), shape);
      int64_t row = 0;
      for (const auto& task : batch.tasks) {
        const Tensor& part = task->inputs.at(name);
        bool same_row_shape = true;
        for (int d = 1; d < shape.rank(); ++d) same_row_shape &= part.dim(d) == shape.dim(d);
        if (same_row_shape) {
          CopyRows(part, 0, part.dim(0), &tensor, row);
        } else {
          CopyPadded(part, &tensor, row);
        }
        row += part.dim(0);
      }
      // Padding rows repeat the batch's first row, so that padded rows hold valid values.
      const int64_t filled = row;
      for (; row < padded && filled > 0; ++row) CopyRows(tensor, 0, 1, &tensor, row);
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
          "; batching needs every output to have the batch size ", padded, " in dimension 0"));
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
