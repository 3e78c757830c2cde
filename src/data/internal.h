// Internal machinery of kiln::data: dataset nodes, iterators, per-stage counters,
// cancellation, the memory accountant and the autotuner's view of tunable stages.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "data/checkpoint.h"
#include "kiln/core/clock.h"
#include "kiln/core/trace.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

// ---------------------------------------------------------------------------------------------
// Cancellation: a tree. Cancelling a node cancels its descendants and runs their wake-up
// callbacks, so that every blocked wait in the subtree returns. Parallel stages give their
// input subtree a child node and cancel it before joining their workers.
class Cancellation : public std::enable_shared_from_this<Cancellation> {
 public:
  std::shared_ptr<Cancellation> NewChild();
  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // `wake` runs (under this object's lock) when cancelled; at once if already cancelled.
  int Register(std::function<void()> wake);
  void Unregister(int id);

 private:
  std::mutex mutex_;
  std::atomic<bool> cancelled_{false};
  int next_id_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<std::pair<int, std::function<void()>>> callbacks_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::weak_ptr<Cancellation>> children_ ABSL_GUARDED_BY(mutex_);
};

// ---------------------------------------------------------------------------------------------
// Counters of one stage (shared by all iterators created for the same stage path, e.g. the
// per-file readers of an interleave). Written with relaxed atomics on the hot path.
struct StageCounters {
  std::string name;
  bool asynchronous = false;
  std::atomic<int64_t> elements{0};
  std::atomic<int64_t> sampled_calls{0};
  std::atomic<int64_t> sampled_self_ns{0};
  std::atomic<int64_t> async_busy_ns{0};  // exact, from worker threads
  std::atomic<int64_t> wait_ns{0};
  std::atomic<int64_t> errors_ignored{0};
  std::atomic<int> parallelism{1};
  std::atomic<int64_t> buffer_capacity{0};
  std::atomic<int64_t> buffered_bytes{0};
  std::atomic<int64_t> fill_sum_permille{0};
  std::atomic<int64_t> fill_samples{0};

  void AddElements(int64_t n) { elements.fetch_add(n, std::memory_order_relaxed); }
};

// Bytes held by the buffers the RAM budget governs (prefetch, parallel map/batch results).
class MemoryAccountant {
 public:
  explicit MemoryAccountant(int64_t budget) : budget_(budget) {}
  // Reserves `bytes` if the total, plus one element's worth of room kept for every holder
  // (stage with a buffer), stays within budget; unconditionally when `holder_is_empty` (a
  // stage must always be able to hold one element to make progress, and the room kept for
  // it is what that element uses). So the total never exceeds the budget as long as the
  // budget can hold one element per stage.
  bool TryReserve(int64_t bytes, bool holder_is_empty);
  // A holder's element size estimate changed by `delta` bytes.
  void AdjustHeadroom(int64_t delta) { headroom_.fetch_add(delta, std::memory_order_relaxed); }
  void Release(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  int64_t budget() const { return budget_; }

 private:
  const int64_t budget_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> headroom_{0};
};

// A stage whose parallelism and/or buffer size the autotuner may change.
class Tunable {
 public:
  struct Measurement {
    int64_t busy_ns = 0;           // worker time inside the stage's function (window)
    double cpu_fraction = 1.0;     // CPU time / wall time of that work (sampled)
    double cpu_wait_fraction = 0;  // time runnable but waiting for a CPU / wall time (sampled)
    int64_t elements = 0;          // produced (window)
    int64_t consumer_wait_ns = 0;  // consumer blocked on this stage (window)
    int parallelism = 1;
    int64_t buffer_limit = 0;
    int64_t buffered = 0;      // elements now in the buffer
    double element_bytes = 0;  // mean size of a buffered element
  };
  virtual ~Tunable() = default;
  virtual bool tunes_parallelism() const = 0;
  virtual bool tunes_buffer() const = 0;
  virtual int max_parallelism() const = 0;
  virtual Measurement Measure() = 0;  // counters since the previous call
  virtual void SetParallelism(int parallelism) = 0;
  virtual void SetBufferLimit(int64_t elements) = 0;
  virtual const std::string& stage_name() const = 0;
};

class Autotuner;

// Everything one top-level iterator's stages share.
class PipelineState {
 public:
  explicit PipelineState(const Options& options);
  ~PipelineState();

  const Options& options() const { return options_; }
  int cpu_budget() const { return cpu_budget_; }
  bool autotune() const { return options_.autotune; }
  MemoryAccountant& memory() { return memory_; }
  TraceRecorder* trace() { return trace_.get(); }
  const std::shared_ptr<Cancellation>& root_cancellation() const { return root_; }
  int64_t start_ns() const { return start_ns_; }
  std::atomic<int64_t>& consumer_wait_ns() { return consumer_wait_ns_; }

  StageCounters* GetStage(const std::string& path, bool asynchronous);
  void RegisterTunable(Tunable* tunable);
  void UnregisterTunable(Tunable* tunable);
  PipelineStats Stats() const;
  // Stops the autotuner thread (before the iterator tree is destroyed).
  void StopAutotuner();

  // Checkpoints. A stage whose order cannot be reproduced (unseeded shuffle, deterministic =
  // false) says so when it is made; SaveState and RestoreState then fail with the first reason.
  void MarkNotReplayable(const std::string& reason);
  std::string not_replayable_reason() const;
  // Which iteration over a seeded Shuffle or ListFiles node (reshuffle_each_iteration) this
  // pipeline is: taken from the node's counter of pipelines on first use, so that iterating a
  // dataset twice gives two orders, then fixed for the pipeline. Epochs within the pipeline
  // come from IteratorContext::epoch_key. Checkpoints record the iteration of every stage path
  // that asked, and a restore sets them before any stage is seeded.
  uint64_t Iteration(const void* node, const std::string& path, std::atomic<uint64_t>* counter);
  void SaveIterations(StateWriter& writer) const;
  absl::Status RestoreIterations(StateReader& reader);

 private:
  friend class Autotuner;
  Options options_;
  int cpu_budget_;
  int64_t start_ns_;
  MemoryAccountant memory_;
  std::unique_ptr<TraceRecorder> trace_;
  std::shared_ptr<Cancellation> root_;
  std::atomic<int64_t> consumer_wait_ns_{0};
  mutable std::mutex stages_mutex_;
  std::vector<std::unique_ptr<StageCounters>> stages_ ABSL_GUARDED_BY(stages_mutex_);
  std::unique_ptr<Autotuner> autotuner_;
  mutable std::mutex checkpoint_mutex_;
  std::string not_replayable_ ABSL_GUARDED_BY(checkpoint_mutex_);
  std::vector<std::pair<const void*, uint64_t>> node_iterations_ ABSL_GUARDED_BY(checkpoint_mutex_);
  std::vector<std::pair<std::string, uint64_t>> path_iterations_ ABSL_GUARDED_BY(checkpoint_mutex_);
  std::vector<std::pair<std::string, uint64_t>> restored_iterations_
      ABSL_GUARDED_BY(checkpoint_mutex_);
};

struct IteratorContext {
  PipelineState* pipeline = nullptr;  // outlives every iterator of the pipeline
  std::shared_ptr<Cancellation> cancellation;
  std::string prefix;  // stage path of the consumer ("" at the top)
  // Which epoch of the enclosing Repeats (and which input of a Zip or Concatenate) this
  // iterator belongs to: a seeded Shuffle with reshuffle_each_iteration reshuffles per key.
  // Derived from the tree, never from a counter, so that a restore recreates it exactly.
  uint64_t epoch_key = 0;
  IteratorContext WithEpochKey(uint64_t part) const {
    IteratorContext ctx = *this;
    ctx.epoch_key = epoch_key == 0 ? part : (epoch_key + 1) * 0x100000001B3ull ^ part;
    return ctx;
  }
  IteratorContext WithCancellation(std::shared_ptr<Cancellation> c) const {
    IteratorContext ctx = *this;
    ctx.cancellation = std::move(c);
    return ctx;
  }
};

// ---------------------------------------------------------------------------------------------
class IteratorBase {
 public:
  IteratorBase(const IteratorContext& ctx, const std::string& stage_name, bool asynchronous);
  virtual ~IteratorBase() = default;
  IteratorBase(const IteratorBase&) = delete;
  IteratorBase& operator=(const IteratorBase&) = delete;

  // Counts and (on a sample of calls) times the stage, then calls GetNextInternal.
  absl::Status GetNext(Element* out, bool* end_of_sequence);

  const std::string& path() const { return path_; }
  StageCounters* counters() const { return counters_; }

  // ---- checkpoints (data/checkpoint.h) ----
  // Writes this stage's record, then (through SaveInternal) its inputs' records.
  absl::Status Save(StateWriter& writer);
  // On a new iterator: reads what Save wrote and moves to that position.
  absl::Status Restore(StateReader& reader);
  // Advances as `n` GetNext calls would, discarding the elements; *skipped: how many positions
  // there were (fewer at the end of the sequence). Errors of skipped elements count as
  // positions and are not returned; Cancelled is.
  absl::Status Skip(int64_t n, int64_t* skipped);
  // Positions produced so far: elements and element errors (not end of sequence).
  int64_t produced() const { return produced_; }
  // Iterators refer to their dataset node's members (functions, tensors); the node is kept
  // alive by its iterator, so a Dataset may be destroyed while its iterators run (as in
  // tf.data), including the datasets that Interleave's function returns per element.
  void KeepAlive(std::shared_ptr<const DatasetNode> node) { node_ref_ = std::move(node); }

 protected:
  virtual absl::Status GetNextInternal(Element* out, bool* end_of_sequence) = 0;
  // Context for this stage's inputs (their paths hang below this stage's).
  IteratorContext InputContext(int input_index = -1) const;

  // Checkpoint hooks. The defaults record produced() and restore by skipping that many
  // positions, which is exact for any deterministic stage; overrides make it cheaper.
  // StateConfig: fingerprint of the parameters that change the sequence (ConfigFingerprint).
  virtual uint64_t StateConfig() const { return 0; }
  virtual absl::Status SaveInternal(StateWriter& writer);
  virtual absl::Status RestoreInternal(StateReader& reader);
  // Default: pulls and discards elements through GetNextInternal.
  virtual absl::Status SkipInternal(int64_t n, int64_t* skipped);
  // The input of a stage that is restored by skipping: Skip(n), and an error naming this stage
  // when the input ends early (it changed since the state was saved).
  absl::Status SkipInputExactly(IteratorBase* input, int64_t n);

  IteratorContext ctx_;
  std::string path_;
  StageCounters* counters_;
  TraceRecorder* trace_;

 private:
  absl::Status TimedGetNext(Element* out, bool* end_of_sequence);
  uint32_t call_count_ = 0;
  int64_t produced_ = 0;
  const std::string stage_name_;
  const bool asynchronous_;
  std::shared_ptr<const DatasetNode> node_ref_;  // destroyed after the subclass's members
};

struct ParallelMapSpec;  // nodes.h

class DatasetNode : public std::enable_shared_from_this<DatasetNode> {
 public:
  virtual ~DatasetNode() = default;
  virtual std::string name() const = 0;
  virtual absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const = 0;
  virtual int64_t Cardinality() const { return kUnknownCardinality; }
  // Non-null for a parallel Map: what map_and_batch_fusion needs to rewrite it with the Batch
  // above it (MakeFusedMapAndBatch).
  virtual const ParallelMapSpec* AsParallelMap() const { return nullptr; }
};

// Builds the iterator of `dataset` (which may be invalid: its error is returned).
absl::StatusOr<std::unique_ptr<IteratorBase>> MakeInputIterator(const Dataset& dataset,
                                                                const IteratorContext& ctx);

// ---------------------------------------------------------------------------------------------
// Element helpers.
int64_t ElementBytes(const Element& element);  // payload bytes (strings: their lengths)
// Stacks elements along a new first dimension (all must agree in dtype and shape).
absl::StatusOr<Element> StackElements(std::vector<Element>& elements);
// The first `count` elements only (callers reuse a vector of Elements across batches so that
// sources can reuse the tensors' buffers).
absl::StatusOr<Element> StackElements(std::vector<Element>& elements, size_t count);
// Resolves kAutotune parallelism to the pipeline's CPU budget.
int ResolveParallelism(int requested, const IteratorContext& ctx);

}  // namespace kiln::data
