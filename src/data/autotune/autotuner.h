// The autotuner: a thread per pipeline that measures the tunable stages and sets their
// parallelism and buffer sizes under the CPU and RAM budgets. The algorithm is described in
// docs/AUTOTUNE.md.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "data/internal.h"

namespace kiln::data {

class Autotuner {
 public:
  explicit Autotuner(PipelineState* pipeline);
  ~Autotuner();
  void Register(Tunable* tunable);
  void Unregister(Tunable* tunable);
  void Stop();

  // One decision step over measurements of a window (exposed for tests and docs).
  struct StageView {
    Tunable::Measurement m;
    bool tunes_parallelism = false;
    bool tunes_buffer = false;
    int max_parallelism = 1;
    int new_parallelism = 1;
    int64_t new_buffer = 0;
  };
  static void Decide(std::vector<StageView>& stages, int64_t window_ns, int cpu_budget,
                     int64_t ram_budget, int64_t ram_used);

 private:
  void Loop();
  void Tick(int64_t window_ns);

  PipelineState* pipeline_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<Tunable*> tunables_ ABSL_GUARDED_BY(mutex_);
  std::thread thread_;
};

}  // namespace kiln::data
