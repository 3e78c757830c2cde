// The OpenMP thread count of the calling thread: the team size that Kiln's parallel loops
// (ComputeContext::ParallelFor) and oneDNN's primitives (Debian's build runs on OpenMP) use.
//
// oneDNN reads it twice: when it creates a primitive (many convolution implementations keep
// the thread count of that moment, and the primitive cache keys on it) and when it runs one.
// So the plan compiler sets it around Reshape as well as around Compute: a primitive created
// while OpenMP says 16 threads runs a team of 16 even where the step should use 1 or 2.
#pragma once

namespace kiln::kernels {

// Sets omp_set_num_threads(threads) for the calling thread for the lifetime of the object and
// restores the previous count; threads < 1 leaves the count as it is.
class ScopedOpenMpThreads {
 public:
  explicit ScopedOpenMpThreads(int threads);
  ~ScopedOpenMpThreads();
  ScopedOpenMpThreads(const ScopedOpenMpThreads&) = delete;
  ScopedOpenMpThreads& operator=(const ScopedOpenMpThreads&) = delete;

 private:
  int previous_ = 0;  // 0: nothing to restore
};

// omp_get_max_threads() of the calling thread: the team a parallel region would start now.
int OpenMpMaxThreads();

}  // namespace kiln::kernels
