#include "kiln/core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <latch>

namespace kiln {
namespace {
// The pool whose worker is running on this thread, so nested ParallelFor runs inline.
thread_local const ThreadPool* current_pool = nullptr;
}  // namespace

int ThreadPool::HardwareConcurrency() {
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int num_threads, std::string name) : name_(std::move(name)) {
  if (num_threads <= 0) num_threads = HardwareConcurrency();
  workers_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

bool ThreadPool::InWorkerThread() const { return current_pool == this; }

void ThreadPool::WorkerLoop() {
  current_pool = this;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  int64_t chunks = std::min<int64_t>(num_threads() + 1, (n + min_chunk - 1) / min_chunk);
  if (chunks <= 1 || InWorkerThread()) {
    fn(0, n);
    return;
  }
  const int64_t per_chunk = (n + chunks - 1) / chunks;
  chunks = (n + per_chunk - 1) / per_chunk;
  std::latch done(chunks - 1);
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t begin = c * per_chunk;
    const int64_t end = std::min(n, begin + per_chunk);
    Schedule([&fn, &done, begin, end] {
      fn(begin, end);
      done.count_down();
    });
  }
  fn(0, std::min(n, per_chunk));
  done.wait();
}

ThreadPool& DefaultThreadPool() {
  static ThreadPool* pool = new ThreadPool(0, "kiln-default");  // never destroyed: outlives users
  return *pool;
}

}  // namespace kiln
