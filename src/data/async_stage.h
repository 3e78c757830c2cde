// Asynchronous stages: the machinery that parallel Map, parallel Batch, Prefetch, the fused
// map+batch and parallel Interleave share.
//
// AsyncStageBase owns a stage's worker threads, its cancellation and its view to the
// autotuner. Each stage owns its threads (spawned on the first GetNext, as many as its largest
// allowed parallelism; the autotuner decides how many of them may work at once) rather than
// borrowing a shared pool, so a function that blocks (file I/O, a sleep, a nested pipeline's
// wait) never starves another stage. Destruction cancels the input subtree (waking every
// blocked wait below), then joins the workers.
//
// AsyncStage adds the bounded buffer of a one-input stage: workers take inputs under an input
// lock (so the input iterator is used by one thread at a time, in sequence-number order), run
// the function outside any lock and deposit results in the buffer; in deterministic mode
// results are handed out in sequence order. Parallel interleave has its own buffers (one per
// open input) on the same base.
//
// Thread safety: GetNext, Save/Restore/Skip and construction run on the consumer's thread;
// Measure/SetParallelism/SetBufferLimit on the autotuner's; workers touch only members
// guarded by mu_ (or input_mu_) and the atomics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "data/internal.h"

namespace kiln::data {

// Where the calling thread's time went since it started (sampled around a stage's calls to
// tell CPU-bound work from blocking work): on a CPU (CLOCK_THREAD_CPUTIME_ID), and runnable
// but waiting for one (/proc/thread-self/schedstat; 0 where the kernel does not report it).
struct ThreadCpuTimes {
  int64_t on_cpu_ns = 0;
  int64_t waiting_ns = 0;
};
ThreadCpuTimes SampleThreadCpu();

// Samples a worker's calls at most once per kCpuSampleIntervalNs: reading schedstat costs
// about a microsecond, much more than a cheap map function.
class CpuSampler {
 public:
  static constexpr int64_t kCpuSampleIntervalNs = 1'000'000;
  // Before a call that starts at `now`: whether this call is sampled.
  bool Begin(int64_t now) {
    sampled_ = now - last_ >= kCpuSampleIntervalNs;
    if (sampled_) {
      last_ = now;
      before_ = SampleThreadCpu();
    }
    return sampled_;
  }
  // After it: the times it spent (zero when not sampled).
  ThreadCpuTimes End() const {
    if (!sampled_) return {};
    const ThreadCpuTimes after = SampleThreadCpu();
    return {after.on_cpu_ns - before_.on_cpu_ns, after.waiting_ns - before_.waiting_ns};
  }
  bool sampled() const { return sampled_; }

 private:
  int64_t last_ = -kCpuSampleIntervalNs;
  bool sampled_ = false;
  ThreadCpuTimes before_;
};

class AsyncStageBase : public IteratorBase, public Tunable {
 public:
  // `requested` parallelism: a count or kAutotune. Autotuned stages start at `autotune_start`
  // workers and may grow to `autotune_max`.
  struct Parallelism {
    int requested = 1;
    int autotune_start = 1;
    int autotune_max = 1;
    int fixed_max = 1 << 30;  // clamp for explicit counts
  };
  AsyncStageBase(const IteratorContext& ctx, const std::string& name, Parallelism parallelism,
                 bool tune_buffer);
  ~AsyncStageBase() override;

  // ---- Tunable ----
  bool tunes_parallelism() const override { return tune_parallelism_; }
  bool tunes_buffer() const override { return tune_buffer_; }
  int max_parallelism() const override { return max_parallelism_; }
  const std::string& stage_name() const override { return path_; }
  Measurement Measure() override;
  void SetParallelism(int parallelism) override;
  void SetBufferLimit(int64_t) override {}

 protected:
  // Builds the input iterator under a child cancellation (so that stopping this stage wakes
  // every wait below it), registers the consumer's wake-up and, when tuned, the autotuner.
  absl::Status InitInput(const Dataset& input, std::unique_ptr<IteratorBase>* out);
  // Spawns max_parallelism() workers running loop(worker index).
  void StartWorkers(std::function<void(int)> loop);
  // Stops and joins the workers. Subclasses call it first in their destructors: workers call
  // their virtual functions, which must not run while the subclass is being destroyed.
  void StopWorkers();
  bool workers_started() const { return !workers_.empty(); }

  // Hooks under mu_: the stage's buffer in a measurement; a parallelism change.
  virtual void MeasureBufferLocked(Measurement*) {}
  virtual void ParallelismChangedLocked() {}

  // Accounting shared by the stages (window counters the autotuner reads).
  void RecordWork(int64_t t0, int64_t t1, const CpuSampler& sampler);
  void RecordConsumerWait(int64_t start, int64_t end);
  void RecordDelivered() { window_elements_.fetch_add(1, std::memory_order_relaxed); }
  // Waits on consumer_cv_ (lock held) until `ready`, recording the wait.
  template <typename Pred>
  void ConsumerWait(std::unique_lock<std::mutex>& lock, Pred ready) {
    const int64_t start = NowNanos();
    consumer_cv_.wait(lock, ready);
    RecordConsumerWait(start, NowNanos());
  }

  std::shared_ptr<Cancellation> input_cancellation_;
  std::mutex mu_;
  std::condition_variable worker_cv_, idle_cv_, consumer_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int parallelism_ ABSL_GUARDED_BY(mu_) = 1;

 private:
  const bool tune_parallelism_;
  const bool tune_buffer_;
  int max_parallelism_ = 1;
  int wake_id_ = -1;
  bool registered_tunable_ = false;
  bool stopped_ = false;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> window_busy_ns_{0}, window_cpu_ns_{0}, window_cpu_wait_ns_{0},
      window_cpu_wall_ns_{0};
  std::atomic<int64_t> window_elements_{0}, window_wait_ns_{0};
};

struct InputUnit {
  Element element;
  std::vector<Element> elements;  // a batch's inputs
  int64_t seq = 0;                // position of the input in the stage's input sequence
};

// A one-input stage with a bounded buffer of results (see the top of this file).
class AsyncStage : public AsyncStageBase {
 public:
  struct Config {
    std::string name;
    int parallelism = 1;  // or kAutotune
    int64_t buffer = 0;   // or kAutotune; 0: equal to parallelism
    bool deterministic = true;
  };

  AsyncStage(const IteratorContext& ctx, Config config, Dataset input);
  ~AsyncStage() override { Shutdown(); }

  absl::Status Init() { return InitInput(input_dataset_, &input_); }
  // StopWorkers, then returns the stage's reserved memory.
  void Shutdown();

  void SetBufferLimit(int64_t elements) override;

  // The consumer is about to take `n` results in a row (the slots of one batch): wake it once
  // that many are ready, or the stage cannot make more (its buffer is full, its input ended),
  // instead of once per result. Each wake-up is a futex call and a context switch on both
  // sides; per result that was about 6 % of the image pipeline's CPU. 1 (the default) wakes it
  // for every result. Set from the consumer's thread before GetNext.
  void ExpectResults(int64_t n) { consumer_wants_.store(std::max<int64_t>(1, n)); }

 protected:
  // Under the input lock: takes the inputs of one call.
  virtual absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) = 0;
  // Outside any lock, possibly in parallel: computes the output.
  virtual absl::Status Process(InputUnit& unit, Element* out) = 0;
  virtual bool has_function() const { return true; }
  // One output per input unit of one element, an error included (map, prefetch): a restore
  // skips the input instead of running the function.
  virtual bool one_to_one() const { return false; }

  absl::Status GetNextInternal(Element* out, bool* end) override;
  // Checkpoints. Workers pull ahead of the consumer, so the input's state at the consumer's
  // position is one the input had earlier: before each turn's pull a worker snapshots the
  // input's state (one turn of a one-to-one stage, or one input unit of any other), and a save
  // records the latest snapshot at or before the consumer's position plus the units pulled
  // since (one-to-one only). A restore restores the input to the snapshot and skips those;
  // elements that were in flight or buffered are computed again. Snapshots the consumer has
  // passed are dropped, so a handful are kept.
  absl::Status SaveInternal(StateWriter& writer) override;
  absl::Status RestoreInternal(StateReader& reader) override;
  // Before the workers start, a one-to-one stage skips by skipping its input.
  absl::Status SkipInternal(int64_t n, int64_t* skipped) override;

  void MeasureBufferLocked(Measurement* m) override;
  void ParallelismChangedLocked() override;

  const Config config_;

 private:
  struct Result {
    Element element;
    absl::Status status;
    int64_t bytes = 0;
    bool ready = false;
  };

  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a waiting consumer should be woken now (see ExpectResults).
  bool ConsumerShouldWakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t OutstandingLimitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop(int index);

  // A worker takes `chunk_` consecutive inputs per turn when calls are cheap (measured), so
  // that the locks and the consumer's wake-up are paid once per chunk, not once per element.
  static constexpr int64_t kChunkTargetNs = 50'000;
  static constexpr int64_t kMaxChunk = 128;

  bool shut_down_ = false;
  Dataset input_dataset_;
  std::unique_ptr<IteratorBase> input_;

  // The input's state before a pull (see SaveInternal).
  void SnapshotInputLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(input_mu_);
  struct Snapshot {
    int64_t seq;          // units pulled before it
    std::string records;  // the input's records (StateWriter::payload)
  };

  std::mutex input_mu_;
  bool input_exhausted_ ABSL_GUARDED_BY(input_mu_) = false;
  int64_t next_seq_ ABSL_GUARDED_BY(input_mu_) = 0;
  std::deque<Snapshot> snapshots_ ABSL_GUARDED_BY(input_mu_);
  absl::Status snapshot_status_ ABSL_GUARDED_BY(input_mu_);
  // Units the consumer has taken (base_seq_, readable without mu_ to drop old snapshots).
  std::atomic<int64_t> consumed_{0};
  std::atomic<int64_t> consumer_wants_{1};  // see ExpectResults

  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  int64_t end_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t buffer_limit_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // reserved, in flight or ready, not consumed
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ready_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t headroom_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t chunk_ ABSL_GUARDED_BY(mu_) = 1;        // inputs a worker takes per turn
  int64_t call_ns_avg_ ABSL_GUARDED_BY(mu_) = 0;  // pull + process time per element (average)
  double element_bytes_avg_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t base_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Result> slots_ ABSL_GUARDED_BY(mu_);  // deterministic: slots_[i] is base_seq_ + i
  std::deque<Result> ready_ ABSL_GUARDED_BY(mu_);  // nondeterministic: completion order
};

}  // namespace kiln::data
