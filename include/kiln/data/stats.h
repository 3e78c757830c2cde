// Per-stage statistics of a running pipeline (Iterator::Stats()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::data {

struct StageStats {
  std::string name;      // path from the consumer, e.g. "Prefetch/ParallelMap/Range"
  bool asynchronous = false;  // runs on its own worker threads
  int64_t elements = 0;  // elements produced
  // Processing time spent in this stage itself (not in its inputs), summed over threads.
  // Synchronous stages are timed on a sample of calls and scaled to all calls.
  int64_t busy_ns = 0;
  // Time the stage's consumer spent blocked waiting for this stage's output.
  int64_t wait_ns = 0;
  int parallelism = 1;         // current (autotuned) parallelism
  int64_t buffer_capacity = 0;  // current limit of buffered elements (0: none)
  double average_buffer_fill = 0;  // mean fraction of buffer_capacity in use at GetNext
  int64_t buffered_bytes = 0;
  int64_t errors_ignored = 0;  // IgnoreErrors only
  // busy_ns / parallelism: the time this stage needs with its parallelism; the largest is
  // the bottleneck.
  double load_ns() const { return static_cast<double>(busy_ns) / (parallelism > 0 ? parallelism : 1); }
};

struct PipelineStats {
  std::vector<StageStats> stages;
  int64_t wall_ns = 0;           // since the iterator was made
  int64_t consumer_wait_ns = 0;  // time GetNext() blocked the consumer in total
  // The stage with the largest load_ns(), or "consumer" when the consumer waited less than 5%
  // of the wall time (the pipeline keeps up: the consumer is the bottleneck).
  std::string bottleneck;
  std::string ToString() const;  // a table
};

}  // namespace kiln::data
