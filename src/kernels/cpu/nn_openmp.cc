// Intra-op parallel loops on the OpenMP team that oneDNN (Debian's build) already runs its
// primitives on. Running Kiln's own kernels on the same threads keeps one set of workers per
// calling thread: with a separate pool, oneDNN's OpenMP workers spin-wait between primitives
// while the pool's workers want the same cores, and on a 2-core machine under load a run could
// take 10-400x longer (docs/performance/runtime.md). Compiled with -fopenmp (CMakeLists.txt).
// The `kiln` command bounds how long idle OpenMP workers spin before they sleep (10,000
// iterations, GOMP_SPINCOUNT; tools/kiln/main.cc says why that and not pure spin or sleep).
#include <omp.h>

#include <algorithm>

#include "kiln/kernels/kernel.h"
#include "kiln/kernels/openmp_threads.h"

namespace kiln::kernels {

void OpenMpParallelFor(int64_t n, int64_t min_chunk, int threads,
                       absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  int64_t chunks = std::min<int64_t>(threads, (n + min_chunk - 1) / min_chunk);
  // Inside another parallel region (a Loop body run by a kernel that is itself parallel),
  // run inline rather than nesting teams.
  if (chunks <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  const int64_t per_chunk = (n + chunks - 1) / chunks;
  chunks = (n + per_chunk - 1) / per_chunk;
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    fn(c * per_chunk, std::min(n, (c + 1) * per_chunk));
  }
}

ScopedOpenMpThreads::ScopedOpenMpThreads(int threads) {
  if (threads < 1) return;
  previous_ = omp_get_max_threads();
  if (previous_ != threads) omp_set_num_threads(threads);
}

ScopedOpenMpThreads::~ScopedOpenMpThreads() {
  if (previous_ > 0 && omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
}

int OpenMpMaxThreads() { return omp_get_max_threads(); }

}  // namespace kiln::kernels
