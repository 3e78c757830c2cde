// A fixed-size pool of worker threads shared by pipelines, kernels and the server.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace kiln {

// Thread safety: Schedule, ParallelFor and InWorkerThread may be called from any thread at
// once, workers included; the destructor must not race with them (it drains and joins).
class ThreadPool {
 public:
  // `num_threads` <= 0 means one thread per hardware core.
  explicit ThreadPool(int num_threads = 0, std::string name = "kiln");
  // Finishes the tasks already scheduled, then joins the workers.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()); }

  // Runs `task` on a worker thread at some later time.
  void Schedule(std::function<void()> task);

  // Calls fn(begin, end) over [0, n) split into at most num_threads()+1 contiguous chunks,
  // the calling thread taking one; returns when all are done. `min_chunk` keeps chunks from
  // becoming so small that scheduling costs more than the work. Safe to call from a worker
  // (nested calls run inline to avoid deadlock).
  void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

  // True when called from one of this pool's worker threads.
  bool InWorkerThread() const;

  // Number of hardware threads (std::thread::hardware_concurrency, at least 1).
  static int HardwareConcurrency();

 private:
  void WorkerLoop();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> workers_;  // set by the constructor, joined by the destructor
};

// The process-wide pool used when a caller does not pass one (created on first use, sized to
// the hardware). Pass an explicit pool where the caller must control the thread budget.
ThreadPool& DefaultThreadPool();

}  // namespace kiln
