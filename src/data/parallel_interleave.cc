// Parallel Interleave on AsyncStageBase (async_stage.h), which gives it the workers,
// cancellation and autotuning every asynchronous stage shares.
#include <algorithm>
#include <deque>

#include "absl/strings/str_cat.h"
#include "data/async_stage.h"
#include "data/nodes.h"
#include "data/stage_steps.h"
#include "kiln/core/status.h"

namespace kiln::data {
namespace {

// ---- Parallel interleave ----
//
// The consumer walks the cycle exactly as the sequential interleave does (so deterministic
// output order is the same); workers keep each open input's buffer filled ahead of it. A slot
// whose input is exhausted is refilled from the input dataset as soon as the consumer reaches
// its end (the order in which input elements are opened is the sequential one).
int ResolveCycleLength(const IteratorContext& ctx, int cycle_length) {
  return cycle_length == kAutotune ? ctx.pipeline->cpu_budget() : std::max(1, cycle_length);
}

// Workers: one per open input at most (a worker fills one input's buffer at a time).
AsyncStageBase::Parallelism InterleaveParallelism(int requested, int cycle_length) {
  AsyncStageBase::Parallelism p;
  p.requested = requested;
  p.autotune_start = p.autotune_max = p.fixed_max = cycle_length;
  return p;
}

class ParallelInterleaveStage : public AsyncStageBase {
 public:
  ParallelInterleaveStage(const IteratorContext& ctx, Dataset input, DatasetFn fn, int cycle_length,
                          int block_length, int parallelism, bool deterministic)
      : AsyncStageBase(ctx, "ParallelInterleave",
                       InterleaveParallelism(parallelism, ResolveCycleLength(ctx, cycle_length)),
                       /*tune_buffer=*/false),
        input_dataset_(std::move(input)),
        fn_(std::move(fn)),
        cycle_length_(ResolveCycleLength(ctx, cycle_length)),
        block_length_(std::max(1, block_length)),
        deterministic_(deterministic),
        slots_(cycle_length_) {
    per_slot_limit_ = std::max(2, block_length_);
    counters_->buffer_capacity.store(per_slot_limit_ * cycle_length_, std::memory_order_relaxed);
    if (!deterministic) {
      ctx.pipeline->MarkNotReplayable(absl::StrCat("deterministic = false (stage ", path_, ")"));
    }
  }

  ~ParallelInterleaveStage() override { StopWorkers(); }

  absl::Status Init() { return InitInput(input_dataset_, &input_); }

 protected:
  absl::Status GetNextInternal(Element* out, bool* end) override {
    if (!started_) {
      started_ = true;
      // Open the first cycle_length inputs at once so that they start in parallel.
      for (int i = 0; i < cycle_length_ && !end_of_input_; ++i) {
        KILN_RETURN_IF_ERROR(Refill(i));
      }
    }
    if (!workers_started()) StartWorkers([this](int i) { WorkerLoop(i); });
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
        RecordConsumerWait(start, NowNanos());
        continue;
      }
      Slot& source = slots_[take_from];
      Result result = std::move(source.buffer.front());
      source.buffer.pop_front();
      ++source.taken;
      if (take_from == cycle_index_ && ++block_index_ == block_length_) AdvanceToNextInCycle();
      // Wake a worker only once the slot is half empty, so that it refills several elements
      // per wake-up: waking one per element cost the image pipeline a futex call and two
      // context switches per record.
      const bool refill = static_cast<int>(source.buffer.size()) <= per_slot_limit_ / 2;
      lock.unlock();
      if (refill) worker_cv_.notify_one();
      RecordDelivered();
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
    int64_t ordinal = 0;  // the input element it was made from
    int64_t taken = 0;    // results the consumer has taken from it (errors included)
  };

  void AdvanceToNextInCycle() {
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % cycle_length_;
  }

  // Consumer thread only (it alone touches input_); installs the next input's iterator.
  absl::Status Refill(int index) {
    Element arg;
    bool input_end = false;
    absl::Status s = input_->GetNext(&arg, &input_end);
    if (!s.ok() || !input_end) ++args_pulled_;
    KILN_RETURN_IF_ERROR(s);
    std::lock_guard<std::mutex> lock(mu_);
    if (input_end) {
      end_of_input_ = true;
      return absl::OkStatus();
    }
    return OpenLocked(index, std::move(arg), args_pulled_ - 1);
  }

  absl::Status OpenLocked(int index, Element arg, int64_t ordinal) {
    KILN_ASSIGN_OR_RETURN(Dataset ds, fn_(std::move(arg)));
    IteratorContext ctx = ctx_.WithCancellation(input_cancellation_);
    ctx.prefix = absl::StrCat(path_, "/fn");
    KILN_ASSIGN_OR_RETURN(slots_[index].it, MakeInputIterator(ds, ctx));
    slots_[index].exhausted = false;
    slots_[index].ordinal = ordinal;
    slots_[index].taken = 0;
    ++num_open_;
    return absl::OkStatus();
  }

 protected:
  // Checkpoints (in order only): the consumer's walk of the cycle, which input element each
  // open input came from and how many results the consumer took from it; results buffered
  // ahead are recomputed. A restore pulls the input's elements again (file names, typically),
  // remakes the open inputs and skips each past what was taken from it.
  uint64_t StateConfig() const override {
    return ConfigFingerprint({cycle_length_, block_length_});
  }
  absl::Status SaveInternal(StateWriter& w) override {
    if (!deterministic_) return IteratorBase::SaveInternal(w);
    std::lock_guard<std::mutex> lock(mu_);
    w.PutBool(started_);
    w.PutInt(args_pulled_);
    w.PutInt(cycle_index_);
    w.PutInt(block_index_);
    w.PutBool(end_of_input_);
    for (const Slot& slot : slots_) {
      w.PutBool(slot.it != nullptr);
      if (!slot.it) continue;
      w.PutInt(slot.ordinal);
      w.PutInt(slot.taken);
    }
    return absl::OkStatus();
  }
  absl::Status RestoreInternal(StateReader& r) override {
    if (!deterministic_) return IteratorBase::RestoreInternal(r);
    bool started = false, end_of_input = false;
    int64_t pulled = 0, cycle_index = 0, block_index = 0;
    KILN_RETURN_IF_ERROR(r.GetBool(&started));
    KILN_RETURN_IF_ERROR(r.GetInt(&pulled));
    KILN_RETURN_IF_ERROR(r.GetInt(&cycle_index));
    KILN_RETURN_IF_ERROR(r.GetInt(&block_index));
    KILN_RETURN_IF_ERROR(r.GetBool(&end_of_input));
    std::vector<bool> open(cycle_length_);
    std::vector<int64_t> ordinal(cycle_length_), taken(cycle_length_);
    for (int i = 0; i < cycle_length_; ++i) {
      bool is_open = false;
      KILN_RETURN_IF_ERROR(r.GetBool(&is_open));
      open[i] = is_open;
      if (!is_open) continue;
      KILN_RETURN_IF_ERROR(r.GetInt(&ordinal[i]));
      KILN_RETURN_IF_ERROR(r.GetInt(&taken[i]));
      if (ordinal[i] < 0 || ordinal[i] >= pulled || taken[i] < 0) {
        return absl::DataLossError(absl::StrCat("RestoreState: corrupt record of stage ", path_));
      }
    }
    if (pulled < 0 || cycle_index < 0 || cycle_index >= cycle_length_ || block_index < 0) {
      return absl::DataLossError(absl::StrCat("RestoreState: corrupt record of stage ", path_));
    }
    if (!started) return absl::OkStatus();
    std::vector<Element> args(cycle_length_);
    KILN_RETURN_IF_ERROR(ReplayInterleaveInputs(*input_, path_, pulled, open, ordinal, &args));
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    args_pulled_ = pulled;
    end_of_input_ = end_of_input;
    cycle_index_ = static_cast<int>(cycle_index);
    block_index_ = static_cast<int>(block_index);
    for (int i = 0; i < cycle_length_; ++i) {
      if (!open[i]) continue;
      KILN_RETURN_IF_ERROR(OpenLocked(i, std::move(args[i]), ordinal[i]));
      KILN_RETURN_IF_ERROR(SkipInputExactly(slots_[i].it.get(), taken[i]));
      slots_[i].taken = taken[i];
    }
    return absl::OkStatus();
  }

 private:
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
    CpuSampler sampler;
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
      const int64_t t0 = NowNanos();
      sampler.Begin(t0);
      result.status = it->GetNext(&result.element, &end);
      const int64_t t1 = NowNanos();
      RecordWork(t0, t1, sampler);
      if (trace_ != nullptr) trace_->AddEvent(track, "GetNext", t0, t1);
      {
        std::lock_guard<std::mutex> lock(mu_);
        Slot& slot = slots_[j];
        slot.busy = false;
        --active_workers_;
        if (end && result.status.ok()) {
          slot.exhausted = true;
        } else {
          const double bytes = static_cast<double>(ElementBytes(result.element));
          element_bytes_avg_ =
              element_bytes_avg_ == 0 ? bytes : 0.9 * element_bytes_avg_ + 0.1 * bytes;
          slot.buffer.push_back(std::move(result));
          UpdateSlotLimitLocked();
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
  // Elements buffered per open input: enough for a worker to refill several per wake-up
  // (kSlotBytes of them), at least two and a block, at most kMaxSlotElements.
  void UpdateSlotLimitLocked() {
    const int least = std::max(2, block_length_);
    const int by_bytes =
        element_bytes_avg_ > 0 ? static_cast<int>(kSlotBytes / element_bytes_avg_) : least;
    per_slot_limit_ = std::max(least, std::min(by_bytes, kMaxSlotElements));
    counters_->buffer_capacity.store(per_slot_limit_ * cycle_length_, std::memory_order_relaxed);
  }
  static constexpr double kSlotBytes = 1 << 20;
  static constexpr int kMaxSlotElements = 16;
  int per_slot_limit_ = 2;
  double element_bytes_avg_ = 0;
  bool started_ = false;     // the first cycle_length inputs have been opened
  int64_t args_pulled_ = 0;  // input elements (and input errors) taken so far

  // Guarded by mu_ (the base's), except what the consumer thread alone touches: input_ and
  // the iterators it installs in empty slots.
  std::vector<Slot> slots_;
  int active_workers_ = 0;
  int cycle_index_ = 0;
  int block_index_ = 0;
  int num_open_ = 0;
  bool end_of_input_ = false;
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

}  // namespace kiln::data
