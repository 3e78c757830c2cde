// Asynchronous stages: parallel Map, parallel Batch, Prefetch and parallel Interleave.
//
// Each stage owns its worker threads (spawned on the first GetNext, as many as its largest
// allowed parallelism; the autotuner decides how many of them may work at once). Workers take
// inputs under an input lock (so the input iterator is used by one thread at a time, in
// sequence-number order), run the function outside any lock and deposit results in a bounded
// buffer; in deterministic mode results are handed out in sequence order. Owning the threads
// rather than borrowing a shared pool means a function that blocks (file I/O, a sleep, a
// nested pipeline's wait) never starves another stage. Destruction cancels the input subtree
// (waking every blocked wait below), then joins the workers.
//
// Why ~1,200 lines: the AsyncStage base and every stage built on it (map, batch, prefetch, the
// fused map+batch) live here with parallel interleave, which has its own tuning and
// cancellation. Issue 16 asks to split it (stage base, map+batch, interleave on the stage's
// tuning) and to make map+batch fusion a rewrite at MakeIterator; not done yet.
#include <time.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "data/internal.h"
#include "data/nodes.h"
#include "kiln/core/status.h"

namespace kiln::data {
namespace {

int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct InputUnit {
  Element element;
  std::vector<Element> elements;  // a batch's inputs
  int64_t seq = 0;                // position of the input in the stage's input sequence
};

class AsyncStage : public IteratorBase, public Tunable {
 public:
  struct Config {
    std::string name;
    int parallelism = 1;  // or kAutotune
    int64_t buffer = 0;   // or kAutotune; 0: equal to parallelism
    bool deterministic = true;
  };

  AsyncStage(const IteratorContext& ctx, Config config, Dataset input)
      : IteratorBase(ctx, config.name, true),
        config_(std::move(config)),
        input_dataset_(std::move(input)) {
    const int budget = ctx.pipeline->cpu_budget();
    tune_parallelism_ = config_.parallelism == kAutotune && ctx.pipeline->autotune();
    tune_buffer_ = config_.buffer == kAutotune && ctx.pipeline->autotune();
    if (config_.parallelism == kAutotune) {
      // Blocking functions (I/O) benefit from more workers than cores; the autotuner keeps the
      // CPU actually used within the budget.
      max_parallelism_ = std::max(8, 2 * budget);
      // At least 4: while one worker runs the function, others must already be pulling the
      // next inputs, or a slow source and a slow function cannot overlap on a small machine.
      parallelism_ = std::max(4, budget);
    } else {
      max_parallelism_ = parallelism_ = std::max(1, config_.parallelism);
    }
    if (config_.buffer == kAutotune) {
      buffer_limit_ = 2;
    } else if (config_.buffer > 0) {
      buffer_limit_ = config_.buffer;
    } else {
      buffer_limit_ = parallelism_;
    }
    buffer_limit_ = std::max<int64_t>(buffer_limit_, parallelism_);
    counters_->parallelism.store(parallelism_, std::memory_order_relaxed);
    counters_->buffer_capacity.store(buffer_limit_, std::memory_order_relaxed);
    if (!config_.deterministic) {
      ctx.pipeline->MarkNotReplayable(absl::StrCat("deterministic = false (stage ", path_, ")"));
    }
  }

  ~AsyncStage() override { Shutdown(); }

  // Stops and joins the workers. Subclasses call it first in their destructors: workers call
  // their virtual Pull/Process, which must not run while the subclass is being destroyed.
  void Shutdown() {
    if (shut_down_) return;
    shut_down_ = true;
    if (registered_tunable_) ctx_.pipeline->UnregisterTunable(this);
    ctx_.cancellation->Unregister(wake_id_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    worker_cv_.notify_all();
    idle_cv_.notify_all();
    consumer_cv_.notify_all();
    if (input_cancellation_) input_cancellation_->Cancel();
    for (std::thread& t : workers_) t.join();
    ctx_.pipeline->memory().Release(reserved_bytes_);
    ctx_.pipeline->memory().AdjustHeadroom(-headroom_bytes_);
  }

  absl::Status Init() {
    input_cancellation_ = ctx_.cancellation->NewChild();
    KILN_ASSIGN_OR_RETURN(
        input_,
        MakeInputIterator(input_dataset_, InputContext().WithCancellation(input_cancellation_)));
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

  // ---- Tunable ----
  bool tunes_parallelism() const override { return tune_parallelism_; }
  bool tunes_buffer() const override { return tune_buffer_; }
  int max_parallelism() const override { return max_parallelism_; }
  const std::string& stage_name() const override { return path_; }
  Measurement Measure() override {
    Measurement m;
    const int64_t busy = window_busy_ns_.exchange(0, std::memory_order_relaxed);
    const int64_t cpu = window_cpu_ns_.exchange(0, std::memory_order_relaxed);
    const int64_t cpu_wall = window_cpu_wall_ns_.exchange(0, std::memory_order_relaxed);
    m.busy_ns = busy;
    m.cpu_fraction = cpu_wall > 0 ? std::min(1.0, static_cast<double>(cpu) / cpu_wall) : 1.0;
    m.elements = window_elements_.exchange(0, std::memory_order_relaxed);
    m.consumer_wait_ns = window_wait_ns_.exchange(0, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    m.parallelism = parallelism_;
    m.buffer_limit = buffer_limit_;
    m.buffered = ready_count_;
    m.element_bytes = element_bytes_avg_;
    return m;
  }
  void SetParallelism(int parallelism) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      parallelism_ = std::clamp(parallelism, 1, max_parallelism_);
      if (buffer_limit_ < parallelism_) buffer_limit_ = parallelism_;
      counters_->parallelism.store(parallelism_, std::memory_order_relaxed);
      counters_->buffer_capacity.store(buffer_limit_, std::memory_order_relaxed);
    }
    idle_cv_.notify_all();
    worker_cv_.notify_all();
  }
  void SetBufferLimit(int64_t elements) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      buffer_limit_ = std::max<int64_t>({1, elements, parallelism_});
      counters_->buffer_capacity.store(buffer_limit_, std::memory_order_relaxed);
    }
    worker_cv_.notify_all();
  }

 protected:
  // Under the input lock: takes the inputs of one call.
  virtual absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) = 0;
  // Outside any lock, possibly in parallel: computes the output.
  virtual absl::Status Process(InputUnit& unit, Element* out) = 0;
  virtual bool has_function() const { return true; }
  // One output per input unit of one element, an error included (map, prefetch): a restore
  // skips the input instead of running the function.
  virtual bool one_to_one() const { return false; }

  // Checkpoints: the default records the elements handed to the consumer; elements in flight
  // or buffered are recomputed after a restore. Before the workers start, a one-to-one stage
  // skips by skipping its input.
  absl::Status SkipInternal(int64_t n, int64_t* skipped) override {
    if (started_ || !one_to_one()) return IteratorBase::SkipInternal(n, skipped);
    return input_->Skip(n, skipped);
  }

  absl::Status GetNextInternal(Element* out, bool* end) override {
    if (!started_) Start();
    std::unique_lock<std::mutex> lock(mu_);
    counters_->fill_sum_permille.fetch_add(
        ready_count_ * 1000 / std::max<int64_t>(1, buffer_limit_), std::memory_order_relaxed);
    counters_->fill_samples.fetch_add(1, std::memory_order_relaxed);
    if (!Ready() && !Finished() && !stopping_ && !ctx_.cancellation->cancelled()) {
      const int64_t start = NowNanos();
      consumer_cv_.wait(lock, [&] {
        return Ready() || Finished() || stopping_ || ctx_.cancellation->cancelled();
      });
      const int64_t end_ns = NowNanos();
      counters_->wait_ns.fetch_add(end_ns - start, std::memory_order_relaxed);
      window_wait_ns_.fetch_add(end_ns - start, std::memory_order_relaxed);
      if (trace_ != nullptr) trace_->AddEvent(path_, "wait", start, end_ns);
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
    // Wake a worker only once there is room for a whole chunk: waking one per consumed
    // element made it take one input per turn and paid a context switch per element (a third
    // of a cheap parallel map's CPU time). Room grows by one per call, so this fires as soon
    // as a chunk fits (or the whole buffer, when it is smaller than a chunk).
    const int64_t limit = OutstandingLimitLocked();
    const bool room_for_chunk = limit - outstanding_ >= std::min(chunk_, limit);
    lock.unlock();
    if (room_for_chunk) worker_cv_.notify_one();
    window_elements_.fetch_add(1, std::memory_order_relaxed);
    if (!result.status.ok()) return result.status;
    *out = std::move(result.element);
    return absl::OkStatus();
  }

 private:
  struct Result {
    Element element;
    absl::Status status;
    int64_t bytes = 0;
    bool ready = false;
  };

  bool Ready() const {
    return config_.deterministic ? (!slots_.empty() && slots_.front().ready) : !ready_.empty();
  }
  bool Finished() const {
    if (!input_done_) return false;
    return config_.deterministic ? base_seq_ >= end_seq_ : (in_flight_ == 0 && ready_.empty());
  }

  void Start() {
    started_ = true;
    workers_.reserve(max_parallelism_);
    for (int i = 0; i < max_parallelism_; ++i) {
      workers_.emplace_back([this, i] { WorkerLoop(i); });
    }
  }

  // A worker takes `chunk_` consecutive inputs per turn when calls are cheap (measured), so
  // that the locks and the consumer's wake-up are paid once per chunk, not once per element.
  static constexpr int64_t kChunkTargetNs = 50'000;
  static constexpr int64_t kMaxChunk = 128;

  int64_t OutstandingLimitLocked() const {
    // An explicit buffer size (Prefetch(n)) is a hard limit; otherwise each worker may hold
    // a chunk.
    return config_.buffer > 0 ? buffer_limit_
                              : std::max<int64_t>(buffer_limit_, parallelism_ * chunk_);
  }

  void WorkerLoop(int index) {
    const std::string track = absl::StrCat(path_, " #", index);
    uint32_t calls = 0;
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
            if (memory.TryReserve(estimate * want, outstanding_ == 0 || unknown_ok)) {
              reserved_bytes_ += estimate * want;
              break;
            }
            // Blocked by the RAM budget: memory is freed by other stages' consumers, which do
            // not signal this stage, so look again shortly.
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
        while (got < want && !input_exhausted_) {
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
        const bool sample_cpu = (++calls & 7) == 1;
        const int64_t cpu0 = sample_cpu ? ThreadCpuNanos() : 0;
        for (int64_t i = 0; i < got; ++i) {
          if (pull_status[i].ok()) pull_status[i] = Process(units[i], &outputs[i]);
          units[i].elements.clear();  // a batch's inputs are not kept until the next turn
        }
        const int64_t t1 = NowNanos();
        if (sample_cpu) {
          window_cpu_ns_.fetch_add(ThreadCpuNanos() - cpu0, std::memory_order_relaxed);
          window_cpu_wall_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
        }
        counters_->async_busy_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
        window_busy_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
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
          call_ns_avg_ =
              call_ns_avg_ == 0 ? per_element_ns : (7 * call_ns_avg_ + per_element_ns) / 8;
          chunk_ = std::clamp<int64_t>(kChunkTargetNs / std::max<int64_t>(1, call_ns_avg_), 1,
                                       kMaxChunk);
        }
        if (config_.deterministic && got > 0) {
          const size_t pos = static_cast<size_t>(first_seq - base_seq_);
          if (slots_.size() < pos + got) slots_.resize(pos + got);
          wake_consumer |= pos == 0;
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
            wake_consumer = true;
          }
        }
        counters_->buffered_bytes.store(reserved_bytes_, std::memory_order_relaxed);
        ready_count_ += got;
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

  Config config_;
  bool shut_down_ = false;
  Dataset input_dataset_;
  std::unique_ptr<IteratorBase> input_;
  std::shared_ptr<Cancellation> input_cancellation_;
  int wake_id_ = -1;
  bool registered_tunable_ = false;
  bool tune_parallelism_ = false, tune_buffer_ = false;
  int max_parallelism_ = 1;
  bool started_ = false;
  std::vector<std::thread> workers_;

  std::mutex input_mu_;
  bool input_exhausted_ ABSL_GUARDED_BY(input_mu_) = false;
  int64_t next_seq_ ABSL_GUARDED_BY(input_mu_) = 0;

  std::mutex mu_;
  std::condition_variable worker_cv_, idle_cv_, consumer_cv_;
  bool stopping_ = false;
  bool input_done_ = false;
  int64_t end_seq_ = 0;
  int parallelism_ = 1;
  int64_t buffer_limit_ = 1;
  int64_t outstanding_ = 0;  // reserved, in flight or ready, not yet consumed
  int64_t in_flight_ = 0;
  int64_t ready_count_ = 0;
  int64_t reserved_bytes_ = 0;
  int64_t headroom_bytes_ = 0;
  int64_t chunk_ = 1;        // inputs a worker takes per turn
  int64_t call_ns_avg_ = 0;  // pull + process time per element (moving average)
  double element_bytes_avg_ = 0;
  int64_t base_seq_ = 0;
  std::deque<Result> slots_;  // deterministic: slots_[i] holds sequence base_seq_ + i
  std::deque<Result> ready_;  // nondeterministic: completion order

  std::atomic<int64_t> window_busy_ns_{0}, window_cpu_ns_{0}, window_cpu_wall_ns_{0};
  std::atomic<int64_t> window_elements_{0}, window_wait_ns_{0};
};

class ParallelMapStage : public AsyncStage {
 public:
  ParallelMapStage(const IteratorContext& ctx, Config config, Dataset input, const MapFn& fn)
      : AsyncStage(ctx, std::move(config), std::move(input)), fn_(fn) {}
  ~ParallelMapStage() override { Shutdown(); }

 protected:
  absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) override {
    return input->GetNext(&unit->element, end);
  }
  absl::Status Process(InputUnit& unit, Element* out) override {
    absl::StatusOr<Element> result = fn_(std::move(unit.element));
    if (!result.ok()) return result.status();
    *out = std::move(*result);
    return absl::OkStatus();
  }
  bool one_to_one() const override { return true; }

 private:
  const MapFn& fn_;
};

class PrefetchStage : public AsyncStage {
 public:
  using AsyncStage::AsyncStage;
  ~PrefetchStage() override { Shutdown(); }

 protected:
  absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) override {
    return input->GetNext(&unit->element, end);
  }
  absl::Status Process(InputUnit& unit, Element* out) override {
    *out = std::move(unit.element);
    return absl::OkStatus();
  }
  bool has_function() const override { return false; }
  bool one_to_one() const override { return true; }
};

class ParallelBatchStage : public AsyncStage {
 public:
  ParallelBatchStage(const IteratorContext& ctx, Config config, Dataset input, int64_t batch_size,
                     bool drop_remainder)
      : AsyncStage(ctx, std::move(config), std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}
  ~ParallelBatchStage() override { Shutdown(); }

 protected:
  absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) override {
    unit->elements.reserve(batch_size_);
    return CollectBatch(input, batch_size_, drop_remainder_, &unit->elements, end);
  }
  absl::Status Process(InputUnit& unit, Element* out) override {
    KILN_ASSIGN_OR_RETURN(*out, StackElements(unit.elements));
    return absl::OkStatus();
  }

 private:
  int64_t batch_size_;
  bool drop_remainder_;
};

// ---- Map followed by Batch, fused ----
//
// As tf.data's map_and_batch_fusion: each map result is copied into its slot of the batch by
// the worker that computed it, while it is still in that core's cache, instead of by a later
// batch stage that reads every result back from memory (in the image pipeline that copy of
// 64 x 588 KiB per batch was a sixth of the CPU time). The parallel map runs unchanged, one
// call per element; its outputs are views of the slots (so the RAM budget counts each
// element's bytes once) and the batch iterator on top hands out the filled batch tensors.
// A deterministic map fills slots by input position; a nondeterministic one in the order its
// calls finish (as the unfused pipeline would batch them).
struct BatchSlots {
  struct Batch {
    std::vector<Tensor> tensors;  // [batch_size, ...] per component
    decltype(Element::names) names;
    int64_t written = 0;  // slots filled
  };
  std::mutex mu;
  std::unordered_map<int64_t, Batch> batches;  // by batch index
  int64_t next_slot = 0;                       // nondeterministic: slots handed out so far
};

// The error StackElements gives for the same mismatch, naming the batch and the element.
absl::Status CheckFits(const Element& element, const std::vector<Tensor>& batch, int64_t index,
                       int64_t slot) {
  if (element.size() != batch.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Cannot batch elements with different numbers of components: batch ", index,
        " started with ", batch.size(), " and its element ", slot, " had ", element.size()));
  }
  for (size_t c = 0; c < batch.size(); ++c) {
    const Tensor& t = element[c];
    Shape expected = batch[c].shape();
    expected.erase(0);
    if (t.dtype() != batch[c].dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Cannot batch tensors with different dtypes in component ", c, ". Batch ",
                       index, " started with dtype ", DTypeName(batch[c].dtype()),
                       " and its element ", slot, " had dtype ", DTypeName(t.dtype())));
    }
    if (t.shape() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("Cannot batch tensors with different shapes in component ", c, ". Batch ",
                       index, " started with element shape ", expected.ToString(),
                       " and its element ", slot, " had shape ", t.shape().ToString(), "."));
    }
  }
  return absl::OkStatus();
}

class MapIntoSlotsStage : public AsyncStage {
 public:
  MapIntoSlotsStage(const IteratorContext& ctx, Config config, Dataset input, const MapFn& fn,
                    int64_t batch_size, std::shared_ptr<BatchSlots> slots)
      : AsyncStage(ctx, config, std::move(input)),
        fn_(fn),
        batch_size_(batch_size),
        deterministic_(config.deterministic),
        slots_(std::move(slots)) {}
  ~MapIntoSlotsStage() override { Shutdown(); }

 protected:
  absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) override {
    return input->GetNext(&unit->element, end);
  }
  absl::Status Process(InputUnit& unit, Element* out) override {
    absl::StatusOr<Element> result = fn_(std::move(unit.element));
    if (!result.ok()) return result.status();
    std::vector<Tensor> batch;
    int64_t index = 0, slot = 0;
    {
      std::lock_guard<std::mutex> lock(slots_->mu);
      const int64_t position = deterministic_ ? unit.seq : slots_->next_slot;
      index = position / batch_size_;
      slot = position % batch_size_;
      BatchSlots::Batch& b = slots_->batches[index];
      if (b.tensors.empty()) {
        for (const Tensor& t : result->tensors) {
          Shape shape = t.shape();
          shape.insert(0, batch_size_);
          b.tensors.emplace_back(t.dtype(), shape);
        }
        b.names = result->names;
      }
      // Checked before a slot is taken, so that a nondeterministic batch never waits for a
      // slot that will not be written.
      KILN_RETURN_IF_ERROR(CheckFits(*result, b.tensors, index, slot));
      if (!deterministic_) ++slots_->next_slot;
      batch = b.tensors;  // shares the buffers
    }
    out->tensors.clear();
    for (size_t c = 0; c < batch.size(); ++c) {
      const Tensor& t = (*result)[c];
      Tensor view = batch[c].Slice(slot, slot + 1);
      if (t.dtype() == DType::kString) {
        const bool unique = t.buffer().use_count() == 1;
        std::string* from = t.data<std::string>();
        std::string* to = view.data<std::string>();
        for (int64_t k = 0; k < t.num_elements(); ++k)
          to[k] = unique ? std::move(from[k]) : from[k];
      } else {
        std::memcpy(view.raw_data(), t.raw_data(), t.byte_size());
      }
      out->tensors.push_back(std::move(view));
    }
    std::lock_guard<std::mutex> lock(slots_->mu);
    ++slots_->batches[index].written;
    return absl::OkStatus();
  }
  bool one_to_one() const override { return true; }

 private:
  const MapFn& fn_;
  const int64_t batch_size_;
  const bool deterministic_;
  std::shared_ptr<BatchSlots> slots_;
};

class MapAndBatchNode : public DatasetNode {
 public:
  MapAndBatchNode(Dataset input, MapFn fn, int parallelism, bool deterministic, int64_t batch_size,
                  bool drop_remainder)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        parallelism_(parallelism),
        deterministic_(deterministic),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}
  std::string name() const override { return "MapAndBatch"; }
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto it = std::make_unique<It>(ctx, this);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const MapAndBatchNode* node)
        : IteratorBase(ctx, "MapAndBatch", false),
          node_(node),
          slots_(std::make_shared<BatchSlots>()) {}
    absl::Status Init() {
      AsyncStage::Config config{"ParallelMap", node_->parallelism_, 0, node_->deterministic_};
      auto map = std::make_unique<MapIntoSlotsStage>(InputContext(), config, node_->input_,
                                                     node_->fn_, node_->batch_size_, slots_);
      KILN_RETURN_IF_ERROR(map->Init());
      map_ = std::move(map);
      return absl::OkStatus();
    }

   protected:
    absl::Status GetNextInternal(Element* out, bool* end) override {
      return node_->deterministic_ ? NextInOrder(out, end) : NextAsFinished(out, end);
    }
    uint64_t StateConfig() const override {
      return ConfigFingerprint({node_->batch_size_, node_->drop_remainder_});
    }
    // In order, every batch but the last takes exactly batch_size inputs (a failed element
    // fails its batch but keeps its place), so n batches are n * batch_size map inputs, skipped
    // without calling the function. Slot positions count from the first element after the
    // skip, so next_index_ stays relative to it.
    absl::Status SkipInternal(int64_t n, int64_t* skipped) override {
      const int64_t batch_size = node_->batch_size_;
      if (!node_->deterministic_ || next_index_ != 0) {
        return IteratorBase::SkipInternal(n, skipped);
      }
      int64_t inputs = 0;
      KILN_RETURN_IF_ERROR(map_->Skip(n * batch_size, &inputs));
      *skipped =
          node_->drop_remainder_ ? inputs / batch_size : (inputs + batch_size - 1) / batch_size;
      return absl::OkStatus();
    }

   private:
    // Results come in input order: the next batch_size of them are exactly this batch's slots.
    // An error fails the batch (as in tf.data's fused map-and-batch); its other slots are
    // drained so the next batch starts at the next batch boundary.
    absl::Status NextInOrder(Element* out, bool* end) {
      const int64_t batch_size = node_->batch_size_;
      const int64_t index = next_index_++;
      int64_t n = 0;
      absl::Status error;
      for (; n < batch_size; ++n) {
        Element slot_view;
        bool input_end = false;
        absl::Status s = map_->GetNext(&slot_view, &input_end);
        if (absl::IsCancelled(s)) return s;
        if (!s.ok() && error.ok()) error = s;
        if (input_end) break;
      }
      BatchSlots::Batch batch = TakeBatch(index);
      if (!error.ok()) return error;
      return Deliver(std::move(batch), n, out, end);
    }

    // Slots are handed out as calls finish, so a result of the next batch may arrive before
    // the last one of this batch: wait until this batch's slots are all written. An error
    // (which has no slot) is returned at once; the batch goes on filling.
    absl::Status NextAsFinished(Element* out, bool* end) {
      const int64_t batch_size = node_->batch_size_;
      while (true) {
        {
          std::lock_guard<std::mutex> lock(slots_->mu);
          auto found = slots_->batches.find(next_index_);
          if (found != slots_->batches.end() && found->second.written == batch_size) {
            BatchSlots::Batch batch = std::move(found->second);
            slots_->batches.erase(found);
            ++next_index_;
            return Deliver(std::move(batch), batch_size, out, end);
          }
        }
        Element slot_view;
        bool input_end = false;
        KILN_RETURN_IF_ERROR(map_->GetNext(&slot_view, &input_end));
        if (input_end) {
          // Every call has finished: the last batch holds what was written.
          BatchSlots::Batch batch = TakeBatch(next_index_);
          const int64_t n = batch.written;
          if (n > 0) ++next_index_;
          return Deliver(std::move(batch), n, out, end);
        }
      }
    }

    BatchSlots::Batch TakeBatch(int64_t index) {
      BatchSlots::Batch batch;
      std::lock_guard<std::mutex> lock(slots_->mu);
      auto found = slots_->batches.find(index);
      if (found != slots_->batches.end()) {
        batch = std::move(found->second);
        slots_->batches.erase(found);
      }
      return batch;
    }

    absl::Status Deliver(BatchSlots::Batch batch, int64_t n, Element* out, bool* end) {
      const int64_t batch_size = node_->batch_size_;
      if (n == 0 || (node_->drop_remainder_ && n < batch_size)) {
        *end = true;
        return absl::OkStatus();
      }
      out->names = std::move(batch.names);
      out->tensors.clear();
      for (Tensor& t : batch.tensors) {
        out->tensors.push_back(n < batch_size ? t.Slice(0, n) : std::move(t));
      }
      return absl::OkStatus();
    }

    const MapAndBatchNode* node_;
    std::shared_ptr<BatchSlots> slots_;
    std::unique_ptr<IteratorBase> map_;
    int64_t next_index_ = 0;
  };

  Dataset input_;
  MapFn fn_;
  int parallelism_;
  bool deterministic_;
  int64_t batch_size_;
  bool drop_remainder_;
};

class ParallelMapNode : public DatasetNode {
 public:
  ParallelMapNode(Dataset input, MapFn fn, int parallelism, bool deterministic)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        parallelism_(parallelism),
        deterministic_(deterministic) {}
  std::string name() const override { return "ParallelMap"; }
  int64_t Cardinality() const override { return input_.Cardinality(); }
  // For map_and_batch fusion.
  const Dataset& input() const { return input_; }
  const MapFn& fn() const { return fn_; }
  int parallelism() const { return parallelism_; }
  bool deterministic() const { return deterministic_; }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    AsyncStage::Config config{"ParallelMap", parallelism_, 0, deterministic_};
    auto it = std::make_unique<ParallelMapStage>(ctx, config, input_, fn_);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  Dataset input_;
  MapFn fn_;
  int parallelism_;
  bool deterministic_;
};

class PrefetchNode : public DatasetNode {
 public:
  PrefetchNode(Dataset input, int64_t buffer) : input_(std::move(input)), buffer_(buffer) {}
  std::string name() const override { return "Prefetch"; }
  int64_t Cardinality() const override { return input_.Cardinality(); }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    AsyncStage::Config config{"Prefetch", 1, buffer_, true};
    auto it = std::make_unique<PrefetchStage>(ctx, config, input_);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  Dataset input_;
  int64_t buffer_;
};

class ParallelBatchNode : public DatasetNode {
 public:
  ParallelBatchNode(Dataset input, int64_t batch_size, bool drop_remainder, int parallelism,
                    bool deterministic)
      : input_(std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder),
        parallelism_(parallelism),
        deterministic_(deterministic) {}
  std::string name() const override { return "ParallelBatch"; }
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    AsyncStage::Config config{"ParallelBatch", parallelism_, 0, deterministic_};
    auto it =
        std::make_unique<ParallelBatchStage>(ctx, config, input_, batch_size_, drop_remainder_);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  Dataset input_;
  int64_t batch_size_;
  bool drop_remainder_;
  int parallelism_;
  bool deterministic_;
};

// ---- Parallel interleave ----
//
// The consumer walks the cycle exactly as the sequential interleave does (so deterministic
// output order is the same); workers keep each open input's buffer filled ahead of it. A slot
// whose input is exhausted is refilled from the input dataset as soon as the consumer reaches
// its end (the order in which input elements are opened is the sequential one).
class ParallelInterleaveStage : public IteratorBase, public Tunable {
 public:
  ParallelInterleaveStage(const IteratorContext& ctx, Dataset input, DatasetFn fn, int cycle_length,
                          int block_length, int parallelism, bool deterministic)
      : IteratorBase(ctx, "ParallelInterleave", true),
        input_dataset_(std::move(input)),
        fn_(std::move(fn)),
        cycle_length_(cycle_length == kAutotune ? ctx.pipeline->cpu_budget()
                                                : std::max(1, cycle_length)),
        block_length_(std::max(1, block_length)),
        deterministic_(deterministic),
        slots_(cycle_length_) {
    tune_parallelism_ = parallelism == kAutotune && ctx.pipeline->autotune();
    max_parallelism_ = cycle_length_;
    parallelism_ =
        parallelism == kAutotune ? cycle_length_ : std::clamp(parallelism, 1, cycle_length_);
    per_slot_limit_ = std::max(2, block_length_);
    counters_->parallelism.store(parallelism_, std::memory_order_relaxed);
    counters_->buffer_capacity.store(per_slot_limit_ * cycle_length_, std::memory_order_relaxed);
  }

  ~ParallelInterleaveStage() override {
    if (registered_tunable_) ctx_.pipeline->UnregisterTunable(this);
    ctx_.cancellation->Unregister(wake_id_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    worker_cv_.notify_all();
    consumer_cv_.notify_all();
    if (input_cancellation_) input_cancellation_->Cancel();
    for (std::thread& t : workers_) t.join();
  }

  absl::Status Init() {
    input_cancellation_ = ctx_.cancellation->NewChild();
    KILN_ASSIGN_OR_RETURN(
        input_,
        MakeInputIterator(input_dataset_, InputContext().WithCancellation(input_cancellation_)));
    wake_id_ = ctx_.cancellation->Register([this] {
      std::lock_guard<std::mutex> lock(mu_);
      consumer_cv_.notify_all();
    });
    if (tune_parallelism_) {
      ctx_.pipeline->RegisterTunable(this);
      registered_tunable_ = true;
    }
    return absl::OkStatus();
  }

  bool tunes_parallelism() const override { return tune_parallelism_; }
  bool tunes_buffer() const override { return false; }
  int max_parallelism() const override { return max_parallelism_; }
  const std::string& stage_name() const override { return path_; }
  Measurement Measure() override {
    Measurement m;
    m.busy_ns = window_busy_ns_.exchange(0, std::memory_order_relaxed);
    const int64_t cpu = window_cpu_ns_.exchange(0, std::memory_order_relaxed);
    const int64_t cpu_wall = window_cpu_wall_ns_.exchange(0, std::memory_order_relaxed);
    m.cpu_fraction = cpu_wall > 0 ? std::min(1.0, static_cast<double>(cpu) / cpu_wall) : 1.0;
    m.elements = window_elements_.exchange(0, std::memory_order_relaxed);
    m.consumer_wait_ns = window_wait_ns_.exchange(0, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    m.parallelism = parallelism_;
    return m;
  }
  void SetParallelism(int parallelism) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      parallelism_ = std::clamp(parallelism, 1, max_parallelism_);
      counters_->parallelism.store(parallelism_, std::memory_order_relaxed);
    }
    worker_cv_.notify_all();
  }
  void SetBufferLimit(int64_t) override {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end) override {
    if (!started_) {
      started_ = true;
      // Open the first cycle_length inputs at once so that they start in parallel.
      for (int i = 0; i < cycle_length_ && !end_of_input_; ++i) {
        KILN_RETURN_IF_ERROR(Refill(i));
      }
      for (int i = 0; i < max_parallelism_; ++i)
        workers_.emplace_back([this, i] { WorkerLoop(i); });
    }
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (stopping_ || ctx_.cancellation->cancelled()) {
        return absl::CancelledError(absl::StrCat(path_, ": iterator cancelled"));
      }
      if (end_of_input_ && num_open_ == 0) {
        *end = true;
        return absl::OkStatus();
      }
      Slot& slot = slots_[cycle_index_];
      if (!slot.it) {
        if (!end_of_input_) {
          lock.unlock();
          KILN_RETURN_IF_ERROR(Refill(cycle_index_));
          lock.lock();
          worker_cv_.notify_all();
        } else {
          AdvanceToNextInCycle();
        }
        continue;
      }
      int take_from = -1;
      if (!slot.buffer.empty()) {
        take_from = cycle_index_;
      } else if (slot.exhausted) {
        std::unique_ptr<IteratorBase> finished = std::move(slot.it);
        slot.exhausted = false;
        --num_open_;
        const int index = cycle_index_;
        AdvanceToNextInCycle();
        lock.unlock();
        finished.reset();
        if (!end_of_input_) KILN_RETURN_IF_ERROR(Refill(index));
        lock.lock();
        worker_cv_.notify_all();
        continue;
      } else if (!deterministic_) {
        for (int k = 1; k < cycle_length_; ++k) {
          const int j = (cycle_index_ + k) % cycle_length_;
          if (slots_[j].it && !slots_[j].buffer.empty()) {
            take_from = j;
            break;
          }
        }
      }
      if (take_from < 0) {
        const int64_t start = NowNanos();
        consumer_cv_.wait(lock);
        const int64_t end_ns = NowNanos();
        counters_->wait_ns.fetch_add(end_ns - start, std::memory_order_relaxed);
        window_wait_ns_.fetch_add(end_ns - start, std::memory_order_relaxed);
        if (trace_ != nullptr) trace_->AddEvent(path_, "wait", start, end_ns);
        continue;
      }
      Slot& source = slots_[take_from];
      Result result = std::move(source.buffer.front());
      source.buffer.pop_front();
      if (take_from == cycle_index_ && ++block_index_ == block_length_) AdvanceToNextInCycle();
      lock.unlock();
      worker_cv_.notify_one();
      window_elements_.fetch_add(1, std::memory_order_relaxed);
      if (!result.status.ok()) return result.status;
      *out = std::move(result.element);
      return absl::OkStatus();
    }
  }

 private:
  struct Result {
    Element element;
    absl::Status status;
  };
  struct Slot {
    std::unique_ptr<IteratorBase> it;
    std::deque<Result> buffer;
    bool exhausted = false;
    bool busy = false;
  };

  void AdvanceToNextInCycle() {
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % cycle_length_;
  }

  // Consumer thread only (it alone touches input_); installs the next input's iterator.
  absl::Status Refill(int index) {
    Element arg;
    bool input_end = false;
    KILN_RETURN_IF_ERROR(input_->GetNext(&arg, &input_end));
    std::lock_guard<std::mutex> lock(mu_);
    if (input_end) {
      end_of_input_ = true;
      return absl::OkStatus();
    }
    KILN_ASSIGN_OR_RETURN(Dataset ds, fn_(std::move(arg)));
    IteratorContext ctx = ctx_.WithCancellation(input_cancellation_);
    ctx.prefix = absl::StrCat(path_, "/fn");
    KILN_ASSIGN_OR_RETURN(slots_[index].it, MakeInputIterator(ds, ctx));
    slots_[index].exhausted = false;
    ++num_open_;
    return absl::OkStatus();
  }

  // The slot a worker should fill next: the first in consumer order that has room.
  int PickSlotLocked() const {
    for (int k = 0; k < cycle_length_; ++k) {
      const int j = (cycle_index_ + k) % cycle_length_;
      const Slot& s = slots_[j];
      if (s.it && !s.busy && !s.exhausted && static_cast<int>(s.buffer.size()) < per_slot_limit_) {
        return j;
      }
    }
    return -1;
  }

  void WorkerLoop(int index) {
    const std::string track = absl::StrCat(path_, " #", index);
    uint32_t calls = 0;
    while (true) {
      int j;
      IteratorBase* it;
      {
        std::unique_lock<std::mutex> lock(mu_);
        while (true) {
          if (stopping_) return;
          if (index < parallelism_ && active_workers_ < parallelism_) {
            j = PickSlotLocked();
            if (j >= 0) break;
          }
          worker_cv_.wait(lock);
        }
        slots_[j].busy = true;
        ++active_workers_;
        it = slots_[j].it.get();
      }
      Result result;
      bool end = false;
      const bool sample_cpu = (++calls & 7) == 1;
      const int64_t cpu0 = sample_cpu ? ThreadCpuNanos() : 0;
      const int64_t t0 = NowNanos();
      result.status = it->GetNext(&result.element, &end);
      const int64_t t1 = NowNanos();
      if (sample_cpu) {
        window_cpu_ns_.fetch_add(ThreadCpuNanos() - cpu0, std::memory_order_relaxed);
        window_cpu_wall_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
      }
      counters_->async_busy_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
      window_busy_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
      if (trace_ != nullptr) trace_->AddEvent(track, "GetNext", t0, t1);
      {
        std::lock_guard<std::mutex> lock(mu_);
        Slot& slot = slots_[j];
        slot.busy = false;
        --active_workers_;
        if (end && result.status.ok()) {
          slot.exhausted = true;
        } else {
          slot.buffer.push_back(std::move(result));
        }
      }
      consumer_cv_.notify_one();
      worker_cv_.notify_one();
    }
  }

  Dataset input_dataset_;
  DatasetFn fn_;
  const int cycle_length_;
  const int block_length_;
  const bool deterministic_;
  std::unique_ptr<IteratorBase> input_;
  std::shared_ptr<Cancellation> input_cancellation_;
  int wake_id_ = -1;
  bool registered_tunable_ = false;
  bool tune_parallelism_ = false;
  int max_parallelism_ = 1;
  int per_slot_limit_ = 2;
  bool started_ = false;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable worker_cv_, consumer_cv_;
  bool stopping_ = false;
  std::vector<Slot> slots_;
  int parallelism_ = 1;
  int active_workers_ = 0;
  int cycle_index_ = 0;
  int block_index_ = 0;
  int num_open_ = 0;
  bool end_of_input_ = false;

  std::atomic<int64_t> window_busy_ns_{0}, window_cpu_ns_{0}, window_cpu_wall_ns_{0};
  std::atomic<int64_t> window_elements_{0}, window_wait_ns_{0};
};

class ParallelInterleaveNode : public DatasetNode {
 public:
  ParallelInterleaveNode(Dataset input, DatasetFn fn, int cycle_length, int block_length,
                         int parallelism, bool deterministic)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        cycle_length_(cycle_length),
        block_length_(block_length),
        parallelism_(parallelism),
        deterministic_(deterministic) {}
  std::string name() const override { return "ParallelInterleave"; }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto it = std::make_unique<ParallelInterleaveStage>(
        ctx, input_, fn_, cycle_length_, block_length_, parallelism_, deterministic_);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  Dataset input_;
  DatasetFn fn_;
  int cycle_length_, block_length_, parallelism_;
  bool deterministic_;
};

}  // namespace

Dataset Dataset::Map(MapFn fn, int num_parallel_calls, bool deterministic) const {
  if (!ok()) return *this;
  if (!fn) return Dataset(absl::InvalidArgumentError("Map: empty function"));
  if (num_parallel_calls < kAutotune) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Map: num_parallel_calls must be kSequential, kAutotune or > 0, got ",
                     num_parallel_calls)));
  }
  if (num_parallel_calls == kSequential) return MakeSequentialMap(*this, std::move(fn));
  return Dataset(
      std::make_shared<ParallelMapNode>(*this, std::move(fn), num_parallel_calls, deterministic));
}

Dataset Dataset::Batch(int64_t batch_size, bool drop_remainder, int num_parallel_calls,
                       bool deterministic) const {
  if (!ok()) return *this;
  if (batch_size <= 0) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Batch: batch_size must be > 0, got ", batch_size)));
  }
  // map_and_batch_fusion (on by default in tf.data): a parallel map directly followed by a
  // batch writes its results into the batch's slots.
  if (auto* map = dynamic_cast<const ParallelMapNode*>(node().get());
      map != nullptr && batch_size > 1) {
    return Dataset(std::make_shared<MapAndBatchNode>(map->input(), map->fn(), map->parallelism(),
                                                     map->deterministic(), batch_size,
                                                     drop_remainder));
  }
  if (num_parallel_calls == kSequential) {
    return MakeSequentialBatch(*this, batch_size, drop_remainder);
  }
  return Dataset(std::make_shared<ParallelBatchNode>(*this, batch_size, drop_remainder,
                                                     num_parallel_calls, deterministic));
}

Dataset Dataset::Interleave(DatasetFn fn, int cycle_length, int block_length,
                            int num_parallel_calls, bool deterministic) const {
  if (!ok()) return *this;
  if (!fn) return Dataset(absl::InvalidArgumentError("Interleave: empty function"));
  if (cycle_length == 0 || cycle_length < kAutotune) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Interleave: cycle_length must be > 0 or kAutotune, got ", cycle_length)));
  }
  if (block_length <= 0) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Interleave: block_length must be > 0, got ", block_length)));
  }
  if (num_parallel_calls == kSequential) {
    return MakeSequentialInterleave(*this, std::move(fn), cycle_length, block_length, "Interleave");
  }
  return Dataset(std::make_shared<ParallelInterleaveNode>(
      *this, std::move(fn), cycle_length, block_length, num_parallel_calls, deterministic));
}

Dataset Dataset::Prefetch(int64_t buffer_size) const {
  if (!ok()) return *this;
  if (buffer_size == 0) return *this;  // tf.data: prefetch(0) is a no-op
  if (buffer_size < kAutotune) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Prefetch: buffer_size must be >= 0 or kAutotune, got ", buffer_size)));
  }
  return Dataset(std::make_shared<PrefetchNode>(*this, buffer_size));
}

}  // namespace kiln::data
