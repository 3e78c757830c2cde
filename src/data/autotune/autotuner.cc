#include "data/autotune/autotuner.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/clock.h"

namespace kiln::data {
namespace {
constexpr int64_t kTickNanos = 20'000'000;  // 20 ms windows
constexpr double kStarvedFraction = 0.02;   // consumer waited > 2% of the window
constexpr double kSaturated = 0.7;          // active workers busy > 70% of the window
constexpr double kIdle = 0.3;
constexpr double kQueued = 0.2;  // workers waited for a CPU > 20% of their busy time

// The share of a stage's busy time in which it wanted a CPU: on one, or runnable and waiting
// for one. Workers beyond the cores wait for a CPU, not for I/O: counting only their time on
// a CPU made an image map with 4 workers on 2 cores look half idle, and the tuner grew it to
// all 8 of its threads, which then took turns on the cores.
double CpuDemand(const Tunable::Measurement& m) {
  return std::min(1.0, m.cpu_fraction + m.cpu_wait_fraction);
}
}  // namespace

Autotuner::Autotuner(PipelineState* pipeline) : pipeline_(pipeline) {}

Autotuner::~Autotuner() { Stop(); }

void Autotuner::Register(Tunable* tunable) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return;
  tunables_.push_back(tunable);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void Autotuner::Unregister(Tunable* tunable) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase(tunables_, tunable);
}

void Autotuner::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    tunables_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Autotuner::Loop() {
  int64_t last = NowNanos();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::nanoseconds(kTickNanos));
    if (stopping_) break;
    const int64_t now = NowNanos();
    Tick(now - last);  // holds mutex_: a stage cannot unregister (be destroyed) meanwhile
    last = now;
  }
}

void Autotuner::Tick(int64_t window_ns) {
  if (tunables_.empty() || window_ns <= 0) return;
  std::vector<StageView> views(tunables_.size());
  for (size_t i = 0; i < tunables_.size(); ++i) {
    views[i].m = tunables_[i]->Measure();
    views[i].tunes_parallelism = tunables_[i]->tunes_parallelism();
    views[i].tunes_buffer = tunables_[i]->tunes_buffer();
    views[i].max_parallelism = tunables_[i]->max_parallelism();
  }
  MemoryAccountant& memory = pipeline_->memory();
  Decide(views, window_ns, pipeline_->cpu_budget(), memory.budget(), memory.used());
  for (size_t i = 0; i < tunables_.size(); ++i) {
    if (views[i].tunes_parallelism && views[i].new_parallelism != views[i].m.parallelism) {
      tunables_[i]->SetParallelism(views[i].new_parallelism);
    }
    if (views[i].tunes_buffer && views[i].new_buffer != views[i].m.buffer_limit) {
      tunables_[i]->SetBufferLimit(views[i].new_buffer);
    }
  }
}

void Autotuner::Decide(std::vector<StageView>& stages, int64_t window_ns, int cpu_budget,
                       int64_t ram_budget, int64_t ram_used) {
  const double window = static_cast<double>(window_ns);
  // Cores wanted now: the measured busy time weighted by how much of it was on a CPU or
  // waiting for one (a worker blocked in I/O or a sleep is busy but costs no CPU). Above the
  // budget when workers take turns on too few cores.
  double cpu_in_use = 0;
  for (StageView& s : stages) {
    s.new_parallelism = s.m.parallelism;
    s.new_buffer = s.m.buffer_limit;
    cpu_in_use += s.m.busy_ns * CpuDemand(s.m) / window;
  }
  // The most starved stages are served first.
  std::vector<StageView*> order;
  for (StageView& s : stages) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const StageView* a, const StageView* b) {
    return a->m.consumer_wait_ns > b->m.consumer_wait_ns;
  });
  int64_t ram_free = ram_budget - ram_used;
  for (StageView* s : order) {
    const Tunable::Measurement& m = s->m;
    if (m.busy_ns == 0 && m.consumer_wait_ns == 0) continue;  // idle window: no evidence
    const int p = std::max(1, m.parallelism);
    const double utilization = m.busy_ns / (window * p);
    const double starved = m.consumer_wait_ns / window;
    if (s->tunes_parallelism) {
      if (starved > kStarvedFraction && utilization > kSaturated && p < s->max_parallelism) {
        // Grow in proportion to how starved the consumer is, within the CPU budget: each new
        // worker is expected to use as much CPU as the current ones do on average.
        int step = std::max(1, static_cast<int>(std::lround(p * starved)));
        const double cpu_per_worker = utilization * CpuDemand(m);
        if (cpu_per_worker > 0.05) {
          const int affordable =
              static_cast<int>(std::floor((cpu_budget - cpu_in_use) / cpu_per_worker));
          step = std::min(step, std::max(0, affordable));
        }
        step = std::min(step, s->max_parallelism - p);
        s->new_parallelism = p + step;
        cpu_in_use += step * cpu_per_worker;
      } else if (cpu_in_use > cpu_budget && m.cpu_wait_fraction > kQueued && p > 1) {
        // More workers want a CPU than the budget has cores: they only take turns, and each
        // switch evicts the cache state of the work it interrupts. Keep the workers that fill
        // this stage's share of the budget.
        const double cpu_per_worker = utilization * CpuDemand(m);
        const double share = (p * cpu_per_worker) * cpu_budget / cpu_in_use;
        const int keep = std::clamp(static_cast<int>(std::lround(share / cpu_per_worker)), 1, p);
        cpu_in_use -= (p - keep) * cpu_per_worker;
        s->new_parallelism = keep;
      } else if (starved < kStarvedFraction / 4 && utilization < kIdle && p > 1) {
        // Workers mostly idle while the consumer never waits: give cores back, keeping
        // enough workers for the measured load with headroom.
        s->new_parallelism = std::max(1, static_cast<int>(std::ceil(p * utilization / 0.6)));
      }
    }
    if (s->tunes_buffer) {
      const double bytes = std::max(1.0, m.element_bytes);
      if (ram_used > ram_budget * 9 / 10) {
        s->new_buffer = std::max<int64_t>(1, m.buffer_limit / 2);
      } else if (starved > kStarvedFraction && m.buffered == 0 && utilization < 0.9) {
        // The producer had idle time yet the buffer ran dry: bursts are longer than the
        // buffer. Double it if the RAM budget has room for the extra elements.
        const int64_t grow = m.buffer_limit;
        if (grow * bytes <= ram_free) {
          s->new_buffer = m.buffer_limit + grow;
          ram_free -= static_cast<int64_t>(grow * bytes);
        }
      }
    }
  }
}

}  // namespace kiln::data
