// Asynchronous stages: AsyncStageBase (threads, cancellation, tuning) and AsyncStage (a
// one-input stage with a bounded buffer). See async_stage.h.
#include "data/async_stage.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

namespace kiln::data {

namespace {

// This thread's /proc/thread-self/schedstat, opened once per thread (the path resolves to
// the thread that opens it) and read with pread: "<on cpu ns> <waiting ns> <timeslices>".
struct SchedstatFile {
  int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  ~SchedstatFile() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ThreadCpuTimes SampleThreadCpu() {
  ThreadCpuTimes times;
  // The CPU time from the clock: schedstat's first field is only brought up to date at the
  // scheduler's ticks while the thread runs. Its waiting time is exact once the thread runs
  // (it is added when a wait ends), as it does when it reads the file.
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  times.on_cpu_ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  thread_local SchedstatFile file;
  if (file.fd >= 0) {
    char text[96];
    const ssize_t n = ::pread(file.fd, text, sizeof(text) - 1, 0);
    if (n > 0) {
      text[n] = '\0';
      char* end = nullptr;
      std::strtoull(text, &end, 10);
      times.waiting_ns = static_cast<int64_t>(std::strtoull(end, nullptr, 10));
    }
  }
  return times;
}

// ---- AsyncStageBase ----

AsyncStageBase::AsyncStageBase(const IteratorContext& ctx, const std::string& name,
                               Parallelism parallelism, bool tune_buffer)
    : IteratorBase(ctx, name, true),
      tune_parallelism_(parallelism.requested == kAutotune && ctx.pipeline->autotune()),
      tune_buffer_(tune_buffer && ctx.pipeline->autotune()) {
  std::lock_guard<std::mutex> lock(mu_);
  if (parallelism.requested == kAutotune) {
    max_parallelism_ = std::max(1, parallelism.autotune_max);
    parallelism_ = std::clamp(parallelism.autotune_start, 1, max_parallelism_);
  } else {
    max_parallelism_ = parallelism_ = std::clamp(parallelism.requested, 1, parallelism.fixed_max);
  }
  counters_->parallelism.store(parallelism_, std::memory_order_relaxed);
}

AsyncStageBase::~AsyncStageBase() { StopWorkers(); }

absl::Status AsyncStageBase::InitInput(const Dataset& input, std::unique_ptr<IteratorBase>* out) {
  input_cancellation_ = ctx_.cancellation->NewChild();
  KILN_ASSIGN_OR_RETURN(
      *out, MakeInputIterator(input, InputContext().WithCancellation(input_cancellation_)));
  wake_id_ = ctx_.cancellation->Register([this] {
    std::lock_guard<std::mutex> lock(mu_);
    consumer_cv_.notify_all();
  });
  if (tune_parallelism_ || tune_buffer_) {
    ctx_.pipeline->RegisterTunable(this);
    registered_tunable_ = true;
  }
  return absl::OkStatus();
}

void AsyncStageBase::StartWorkers(std::function<void(int)> loop) {
  workers_.reserve(max_parallelism_);
  for (int i = 0; i < max_parallelism_; ++i) {
    workers_.emplace_back([loop, i] { loop(i); });
  }
}

void AsyncStageBase::StopWorkers() {
  if (stopped_) return;
  stopped_ = true;
  if (registered_tunable_) ctx_.pipeline->UnregisterTunable(this);
  if (wake_id_ >= 0) ctx_.cancellation->Unregister(wake_id_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  worker_cv_.notify_all();
  idle_cv_.notify_all();
  consumer_cv_.notify_all();
  if (input_cancellation_) input_cancellation_->Cancel();
  for (std::thread& t : workers_) t.join();
}

Tunable::Measurement AsyncStageBase::Measure() {
  Measurement m;
  m.busy_ns = window_busy_ns_.exchange(0, std::memory_order_relaxed);
  const int64_t cpu = window_cpu_ns_.exchange(0, std::memory_order_relaxed);
  const int64_t cpu_wait = window_cpu_wait_ns_.exchange(0, std::memory_order_relaxed);
  const int64_t cpu_wall = window_cpu_wall_ns_.exchange(0, std::memory_order_relaxed);
  m.cpu_fraction = cpu_wall > 0 ? std::min(1.0, static_cast<double>(cpu) / cpu_wall) : 1.0;
  m.cpu_wait_fraction =
      cpu_wall > 0 ? std::clamp(static_cast<double>(cpu_wait) / cpu_wall, 0.0, 1.0) : 0.0;
  m.elements = window_elements_.exchange(0, std::memory_order_relaxed);
  m.consumer_wait_ns = window_wait_ns_.exchange(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  m.parallelism = parallelism_;
  MeasureBufferLocked(&m);
  return m;
}

void AsyncStageBase::SetParallelism(int parallelism) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    parallelism_ = std::clamp(parallelism, 1, max_parallelism_);
    counters_->parallelism.store(parallelism_, std::memory_order_relaxed);
    ParallelismChangedLocked();
  }
  idle_cv_.notify_all();
  worker_cv_.notify_all();
}

void AsyncStageBase::RecordWork(int64_t t0, int64_t t1, const CpuSampler& sampler) {
  if (sampler.sampled()) {
    const ThreadCpuTimes spent = sampler.End();
    window_cpu_ns_.fetch_add(spent.on_cpu_ns, std::memory_order_relaxed);
    window_cpu_wait_ns_.fetch_add(spent.waiting_ns, std::memory_order_relaxed);
    window_cpu_wall_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
  }
  counters_->async_busy_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  window_busy_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
}

void AsyncStageBase::RecordConsumerWait(int64_t start, int64_t end) {
  counters_->wait_ns.fetch_add(end - start, std::memory_order_relaxed);
  window_wait_ns_.fetch_add(end - start, std::memory_order_relaxed);
  if (trace_ != nullptr) trace_->AddEvent(path_, "wait", start, end);
}

// ---- AsyncStage ----

namespace {

AsyncStageBase::Parallelism StageParallelism(const IteratorContext& ctx, int requested) {
  const int budget = ctx.pipeline->cpu_budget();
  AsyncStageBase::Parallelism p;
  p.requested = requested;
  // At least 4: while one worker runs the function, others must already be pulling the next
  // inputs, or a slow source and a slow function cannot overlap on a small machine.
  p.autotune_start = std::max(4, budget);
  // Blocking functions (I/O) benefit from more workers than cores; the autotuner keeps the CPU
  // actually used within the budget.
  p.autotune_max = std::max(8, 2 * budget);
  return p;
}

}  // namespace

AsyncStage::AsyncStage(const IteratorContext& ctx, Config config, Dataset input)
    : AsyncStageBase(ctx, config.name, StageParallelism(ctx, config.parallelism),
                     config.buffer == kAutotune),
      config_(std::move(config)),
      input_dataset_(std::move(input)) {
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.buffer == kAutotune) {
    buffer_limit_ = 2;
  } else if (config_.buffer > 0) {
    buffer_limit_ = config_.buffer;
  } else {
    buffer_limit_ = parallelism_;
  }
  buffer_limit_ = std::max<int64_t>(buffer_limit_, parallelism_);
  counters_->buffer_capacity.store(buffer_limit_, std::memory_order_relaxed);
  if (!config_.deterministic) {
    ctx.pipeline->MarkNotReplayable(absl::StrCat("deterministic = false (stage ", path_, ")"));
  }
}

void AsyncStage::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  StopWorkers();
  std::lock_guard<std::mutex> lock(mu_);
  ctx_.pipeline->memory().Release(reserved_bytes_);
  ctx_.pipeline->memory().AdjustHeadroom(-headroom_bytes_);
}

void AsyncStage::MeasureBufferLocked(Measurement* m) {
  m->buffer_limit = buffer_limit_;
  m->buffered = ready_count_;
  m->element_bytes = element_bytes_avg_;
}

void AsyncStage::ParallelismChangedLocked() {
  if (buffer_limit_ < parallelism_) buffer_limit_ = parallelism_;
  counters_->buffer_capacity.store(buffer_limit_, std::memory_order_relaxed);
  consumer_cv_.notify_all();  // the limit a waiting consumer's wake-up depends on changed
}

void AsyncStage::SetBufferLimit(int64_t elements) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffer_limit_ = std::max<int64_t>({1, elements, parallelism_});
    counters_->buffer_capacity.store(buffer_limit_, std::memory_order_relaxed);
  }
  worker_cv_.notify_all();
  consumer_cv_.notify_all();
}

void AsyncStage::SnapshotInputLocked() {
  if (!config_.deterministic || !snapshot_status_.ok()) return;  // nothing to restore exactly
  // Snapshots before the consumer's position are not needed once a later one is also at or
  // before it.
  const int64_t consumed = consumed_.load(std::memory_order_relaxed);
  while (snapshots_.size() >= 2 && snapshots_[1].seq <= consumed) snapshots_.pop_front();
  StateWriter writer;
  snapshot_status_ = input_->Save(writer);
  snapshots_.push_back({next_seq_, writer.payload()});
}

absl::Status AsyncStage::SaveInternal(StateWriter& writer) {
  if (!config_.deterministic) return IteratorBase::SaveInternal(writer);
  // Holding the input lock: no worker pulls (or snapshots) while the state is read.
  std::lock_guard<std::mutex> input_lock(input_mu_);
  KILN_RETURN_IF_ERROR(snapshot_status_);
  int64_t position = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    position = base_seq_;
  }
  if (position == next_seq_) {  // nothing pulled ahead: the input's state now
    StateWriter input;
    KILN_RETURN_IF_ERROR(input_->Save(input));
    writer.PutString(input.payload());
    writer.PutInt(0);
    return absl::OkStatus();
  }
  const Snapshot* at = nullptr;
  for (const Snapshot& s : snapshots_) {
    if (s.seq <= position) at = &s;
  }
  if (at == nullptr || (!one_to_one() && at->seq != position)) {
    return absl::InternalError(absl::StrCat(
        "SaveState: stage ", path_, " has no snapshot of its input at position ", position));
  }
  writer.PutString(at->records);
  writer.PutInt(position - at->seq);
  return absl::OkStatus();
}

absl::Status AsyncStage::RestoreInternal(StateReader& reader) {
  if (!config_.deterministic) return IteratorBase::RestoreInternal(reader);
  std::string records;
  int64_t skip = 0;
  KILN_RETURN_IF_ERROR(reader.GetString(&records));
  KILN_RETURN_IF_ERROR(reader.GetInt(&skip));
  if (skip < 0 || (skip > 0 && !one_to_one())) {
    return absl::DataLossError(absl::StrCat("RestoreState: corrupt record of stage ", path_));
  }
  StateReader input_reader = StateReader::OverPayload(records);
  KILN_RETURN_IF_ERROR(input_->Restore(input_reader));
  KILN_RETURN_IF_ERROR(input_reader.CheckDone());
  return SkipInputExactly(input_.get(), skip);
}

absl::Status AsyncStage::SkipInternal(int64_t n, int64_t* skipped) {
  if (workers_started() || !one_to_one()) return IteratorBase::SkipInternal(n, skipped);
  return input_->Skip(n, skipped);
}

absl::Status AsyncStage::GetNextInternal(Element* out, bool* end) {
  if (!workers_started()) StartWorkers([this](int i) { WorkerLoop(i); });
  std::unique_lock<std::mutex> lock(mu_);
  counters_->fill_sum_permille.fetch_add(ready_count_ * 1000 / std::max<int64_t>(1, buffer_limit_),
                                         std::memory_order_relaxed);
  counters_->fill_samples.fetch_add(1, std::memory_order_relaxed);
  if (!Ready() && !Finished() && !stopping_ && !ctx_.cancellation->cancelled()) {
    ConsumerWait(lock, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return Ready() || Finished() || stopping_ || ctx_.cancellation->cancelled();
    });
  }
  if (ctx_.cancellation->cancelled() || stopping_) {
    return absl::CancelledError(absl::StrCat(path_, ": iterator cancelled"));
  }
  if (!Ready()) {
    *end = true;
    return absl::OkStatus();
  }
  Result result;
  if (config_.deterministic) {
    result = std::move(slots_.front());
    slots_.pop_front();
    ++base_seq_;
    consumed_.store(base_seq_, std::memory_order_relaxed);
  } else {
    result = std::move(ready_.front());
    ready_.pop_front();
  }
  --ready_count_;
  --outstanding_;
  ctx_.pipeline->memory().Release(result.bytes);
  reserved_bytes_ -= result.bytes;
  counters_->buffered_bytes.store(reserved_bytes_, std::memory_order_relaxed);
  if (trace_ != nullptr) trace_->AddCounter(path_, "buffered", NowNanos(), ready_count_);
  // Wake a worker only once there is room for a whole chunk: waking one per consumed element
  // made it take one input per turn and paid a context switch per element (a third of a cheap
  // parallel map's CPU time). Room grows by one per call, so this fires as soon as a chunk
  // fits (or the whole buffer, when it is smaller than a chunk).
  const int64_t limit = OutstandingLimitLocked();
  const bool room_for_chunk = limit - outstanding_ >= std::min(chunk_, limit);
  lock.unlock();
  if (room_for_chunk) worker_cv_.notify_one();
  RecordDelivered();
  if (!result.status.ok()) return result.status;
  *out = std::move(result.element);
  return absl::OkStatus();
}

bool AsyncStage::Ready() const {
  return config_.deterministic ? (!slots_.empty() && slots_.front().ready) : !ready_.empty();
}

bool AsyncStage::ConsumerShouldWakeLocked() const {
  if (!Ready()) return false;
  // A full buffer (workers wait for the consumer) or an input that ended: the results the
  // consumer wants may never all come, so wake it for what is there.
  return ready_count_ >= consumer_wants_.load(std::memory_order_relaxed) ||
         outstanding_ >= OutstandingLimitLocked() || input_done_;
}

bool AsyncStage::Finished() const {
  if (!input_done_) return false;
  return config_.deterministic ? base_seq_ >= end_seq_ : (in_flight_ == 0 && ready_.empty());
}

int64_t AsyncStage::OutstandingLimitLocked() const {
  // An explicit buffer size (Prefetch(n)) is a hard limit; otherwise each worker may hold a
  // chunk.
  return config_.buffer > 0 ? buffer_limit_
                            : std::max<int64_t>(buffer_limit_, parallelism_ * chunk_);
}

void AsyncStage::WorkerLoop(int index) {
  const std::string track = absl::StrCat(path_, " #", index);
  CpuSampler sampler;
  MemoryAccountant& memory = ctx_.pipeline->memory();
  std::vector<InputUnit> units;
  std::vector<absl::Status> pull_status;
  std::vector<Element> outputs;
  while (true) {
    int64_t want = 1;
    int64_t estimate = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (true) {
        if (stopping_ || input_done_) return;
        if (index >= parallelism_) {
          idle_cv_.wait(lock);
          continue;
        }
        const int64_t limit = OutstandingLimitLocked();
        if (outstanding_ < limit) {
          want = std::clamp<int64_t>(limit - outstanding_, 1, chunk_);
          estimate = static_cast<int64_t>(element_bytes_avg_);
          // Before the first element is measured its size is unknown: admit the first wave
          // of calls only while the pipeline uses under half of the budget.
          const bool unknown_ok = element_bytes_avg_ == 0 && memory.used() < memory.budget() / 2;
          bool reserved = memory.TryReserve(estimate * want, unknown_ok);
          if (!reserved && outstanding_ == 0) {
            // A stage holding nothing may always take one element, to make progress: the
            // budget keeps room for one element per holder, not for a chunk (an empty stage
            // that took a whole chunk this way ended at 1.07x the budget).
            want = 1;
            reserved = memory.TryReserve(estimate, /*holder_is_empty=*/true);
          }
          if (reserved) {
            reserved_bytes_ += estimate * want;
            break;
          }
          // Blocked by the RAM budget: memory is freed by other stages' consumers, which do
          // not signal this stage, so look again shortly. A consumer waiting for more results
          // than will come until it takes some (ExpectResults) must take what is there.
          if (Ready()) consumer_cv_.notify_one();
          worker_cv_.wait_for(lock, std::chrono::milliseconds(1));
          continue;
        }
        worker_cv_.wait(lock);
      }
      outstanding_ += want;
      in_flight_ += want;
    }
    if (static_cast<int64_t>(units.size()) < want) {
      units.resize(want);
      pull_status.resize(want);
      outputs.resize(want);
    }
    int64_t got = 0;
    int64_t first_seq = 0;
    int64_t end_seq = -1;
    const int64_t pull_start = NowNanos();
    {
      std::lock_guard<std::mutex> input_lock(input_mu_);
      first_seq = next_seq_;
      if (one_to_one() && !input_exhausted_) SnapshotInputLocked();
      while (got < want && !input_exhausted_) {
        if (!one_to_one()) SnapshotInputLocked();
        bool end = false;
        units[got].elements.clear();
        units[got].seq = next_seq_;
        pull_status[got] = Pull(input_.get(), &units[got], &end);
        if (end) {
          input_exhausted_ = true;
          break;
        }
        ++next_seq_;
        ++got;
      }
      if (input_exhausted_) end_seq = next_seq_;
    }
    const int64_t t0 = NowNanos();
    if (got > 0) {
      sampler.Begin(t0);
      for (int64_t i = 0; i < got; ++i) {
        if (pull_status[i].ok()) pull_status[i] = Process(units[i], &outputs[i]);
        units[i].elements.clear();  // a batch's inputs are not kept until the next turn
      }
      const int64_t t1 = NowNanos();
      RecordWork(t0, t1, sampler);
      if (trace_ != nullptr && has_function()) trace_->AddEvent(track, "call", t0, t1);
    }
    const int64_t per_element_ns = got > 0 ? (NowNanos() - pull_start) / got : 0;
    bool wake_consumer = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Unused reservations (the input ended) are returned.
      outstanding_ -= want - got;
      in_flight_ -= want;
      memory.Release(estimate * (want - got));
      reserved_bytes_ -= estimate * (want - got);
      if (end_seq >= 0 && !input_done_) {
        input_done_ = true;
        end_seq_ = end_seq;
        wake_consumer = true;
      }
      if (got > 0) {
        call_ns_avg_ = call_ns_avg_ == 0 ? per_element_ns : (7 * call_ns_avg_ + per_element_ns) / 8;
        chunk_ =
            std::clamp<int64_t>(kChunkTargetNs / std::max<int64_t>(1, call_ns_avg_), 1, kMaxChunk);
      }
      if (config_.deterministic && got > 0) {
        const size_t pos = static_cast<size_t>(first_seq - base_seq_);
        if (slots_.size() < pos + got) slots_.resize(pos + got);
      }
      for (int64_t i = 0; i < got; ++i) {
        const int64_t bytes = pull_status[i].ok() ? ElementBytes(outputs[i]) : 0;
        if (bytes > estimate) {
          memory.TryReserve(bytes - estimate, /*holder_is_empty=*/true);
        } else {
          memory.Release(estimate - bytes);
        }
        reserved_bytes_ += bytes - estimate;
        element_bytes_avg_ = element_bytes_avg_ == 0 ? static_cast<double>(bytes)
                                                     : 0.9 * element_bytes_avg_ + 0.1 * bytes;
        // Keep room for one element (the largest seen) of this stage in the budget.
        if (bytes > headroom_bytes_) {
          memory.AdjustHeadroom(bytes - headroom_bytes_);
          headroom_bytes_ = bytes;
        }
        Result r{std::move(outputs[i]), std::move(pull_status[i]), bytes, true};
        outputs[i] = Element();
        pull_status[i] = absl::OkStatus();
        if (config_.deterministic) {
          slots_[static_cast<size_t>(first_seq - base_seq_ + i)] = std::move(r);
        } else {
          ready_.push_back(std::move(r));
        }
      }
      counters_->buffered_bytes.store(reserved_bytes_, std::memory_order_relaxed);
      ready_count_ += got;
      wake_consumer |= got > 0 && ConsumerShouldWakeLocked();
      if (trace_ != nullptr) trace_->AddCounter(path_, "buffered", NowNanos(), ready_count_);
    }
    if (end_seq >= 0) {
      consumer_cv_.notify_all();
      worker_cv_.notify_all();
      idle_cv_.notify_all();
      return;
    }
    if (wake_consumer) consumer_cv_.notify_one();
  }
}

}  // namespace kiln::data
