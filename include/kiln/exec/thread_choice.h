// Threads per step, chosen at plan compile (issue 9 item 3).
//
// A plan runs its kernels on an OpenMP team of CompileOptions::intra_op_threads (N). For a
// small step (a batch-1 depthwise convolution, a pool, an elementwise op) waking the team and
// meeting at its barrier can cost more than the second thread saves; MatMul already falls back
// to one thread below a size rule, nothing else did. So the plan compiler times each step on
// scratch data, once per plan:
//   - the step's kernel as reshaped for N threads runs once; a step that takes at least
//     kLargeStepNs keeps N (the barrier is then under 1% of it) and is not timed further;
//   - otherwise a second kernel of the node is reshaped with OpenMP set to 1 thread (oneDNN
//     keeps the thread count of primitive creation, see kernels/openmp_threads.h), and the two
//     run interleaved, a few times each; the medians decide;
//   - 1 thread wins only when at least kMargin faster: a tie keeps N, which is what the step
//     would get under lighter load elsewhere on the machine;
//   - 1 thread is kept only if it computes the same bits as N on the timing's inputs: a
//     kernel whose reduction order follows the thread count (an inner product split across
//     threads) keeps N, since a timed choice must not change what the plan computes;
//   - the timing of one plan stops after kPlanBudgetNs (the remaining steps keep N), so
//     compiling a plan costs at most that much more.
// The winner is the kernel the plan keeps, reshaped for its thread count; Compute gets that
// count in ComputeContext::intra_op_threads and as the calling thread's OpenMP team size.
//
// KILN_THREAD_CHOICE (read at each plan compile unless CompileOptions says otherwise):
//   auto (default)  time and choose as above (off under op determinism, kiln/core/determinism.h)
//   off             every step on N threads (what plans did before), for measurement
//   one             every step on 1 thread without timing: deterministic (tests, measurement)
// Timing happens on the machine as it is during compile: under heavy load on the other cores,
// N threads lose more often. Warmup requests (or `kiln run`'s warmup) compile plans before
// traffic, when the machine is usually quiet.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/kernels/kernel.h"

namespace kiln::exec {

enum class ThreadChoiceMode {
  kEnvironment,  // KILN_THREAD_CHOICE, or kAuto when unset (CompileOptions default)
  kAuto,
  kOff,
  kOne,
};

// "auto", "off" or "one"; InvalidArgument otherwise (naming KILN_THREAD_CHOICE).
absl::StatusOr<ThreadChoiceMode> ParseThreadChoiceMode(absl::string_view text);
// kEnvironment resolved: the KILN_THREAD_CHOICE variable, kAuto when unset or empty; kAuto
// becomes kOff under op determinism (kiln/core/determinism.h).
absl::StatusOr<ThreadChoiceMode> ResolveThreadChoiceMode(ThreadChoiceMode mode);
const char* ThreadChoiceModeName(ThreadChoiceMode mode);

// kernel.Reshape(ctx) with the calling thread's OpenMP team set to ctx.intra_op_threads, so
// that oneDNN primitives made there run on that many threads (kernels/openmp_threads.h).
absl::Status ReshapeOnThreads(kernels::OpKernel& kernel, kernels::ReshapeContext& ctx);

// What was decided for one step.
struct StepThreads {
  int threads = 1;               // the step runs on this many threads
  bool timed = false;            // both variants were timed (n_ns and one_ns are medians)
  int64_t n_ns = 0;              // Compute on N threads (a single run when the step was not timed)
  int64_t one_ns = 0;            // Compute on 1 thread (timed steps only)
  bool one_differs = false;      // 1 thread was faster but computed other bits: N kept
  std::string Describe() const;  // "threads 1 (N 41 us, 1 28 us)" for DebugString
};

// One per plan compile: decides each step's threads and keeps the plan's timing budget.
class ThreadChooser {
 public:
  static constexpr int64_t kLargeStepNs = 1'000'000;     // 1 ms: keep N without timing
  static constexpr int64_t kPlanBudgetNs = 500'000'000;  // 0.5 s of timing per plan
  static constexpr double kMargin = 0.10;                // 1 thread must be 10% faster than N

  // `mode` must be resolved (not kEnvironment); `threads` is the plan's N.
  ThreadChooser(ThreadChoiceMode mode, int threads);

  // Decides the threads of the step of `node`, whose `kernel` was just reshaped by `reshaped`
  // for N threads. When the step is to run on 1 thread, `kernel` and `reshaped` are replaced
  // by a new kernel from `factory`, reshaped for 1 thread (its output dtypes and shapes must
  // equal the N kernel's, or the step keeps N). Steps that cannot be timed safely on scratch
  // data (nondeterministic or stateful ops, subgraphs, strings, data-dependent output shapes)
  // keep N in kAuto. A failure while timing keeps N; only a failure to reshape the kernel the
  // plan keeps is returned.
  absl::StatusOr<StepThreads> Choose(const ir::Node& node, const kernels::KernelFactory& factory,
                                     kernels::ReshapeContext& reshaped,
                                     std::unique_ptr<kernels::OpKernel>& kernel);

  int threads() const { return threads_; }
  ThreadChoiceMode mode() const { return mode_; }
  int64_t spent_ns() const { return spent_ns_; }  // running kernels on scratch data
  int timed_steps() const { return timed_steps_; }
  int one_thread_steps() const { return one_thread_steps_; }

 private:
  ThreadChoiceMode mode_;
  int threads_;
  int64_t spent_ns_ = 0;
  int timed_steps_ = 0;
  int one_thread_steps_ = 0;
};

}  // namespace kiln::exec
