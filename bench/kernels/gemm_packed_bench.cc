// Kiln's packed AVX2 GEMM (gemm_avx2_packed.h) against OpenBLAS's cblas_sgemm/sgemv on the same
// shapes, same threads, interleaved (best of the rounds), with the load printed: the shapes of
// the 1024-4096-4096-1024 MLP at batch 1 and 32, and 2048^3 (the machine's GEMM rate).
// OpenBLAS repacks B on every call, as it does inside Kiln; the packed kernel packed it once.
//
//   build/bench/kernels/kernels_gemm_packed_bench [THREADS] [ROUNDS]
// Run capped like Kiln's AVX2 path: OPENBLAS_CORETYPE=Haswell (OpenBLAS's AVX2 kernels).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_backend.h"

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Load() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  using kiln::kernels::nn::GemmShape;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  omp_set_num_threads(threads);
  struct Case {
    int64_t m, n, k;
  };
  const Case cases[] = {{1, 4096, 4096},  {1, 4096, 1024},  {32, 4096, 4096},
                        {32, 1024, 4096}, {32, 4096, 1024}, {2048, 2048, 2048}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("threads %d, rounds %d, load at start %s\n", threads, rounds, Load().c_str());
  std::printf("%-16s %12s %12s %10s %10s %8s\n", "m x n x k", "packed ms", "openblas ms",
              "packed GF", "blas GF", "ratio");
  for (const Case& c : cases) {
    std::vector<float> a(c.m * c.k), b(c.k * c.n), y(c.m * c.n);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    GemmShape s;
    s.rows = c.m;
    s.n = c.n;
    s.k = c.k;
    s.lda = c.k;
    s.ldb = c.n;
    auto packed = kiln::kernels::nn::PackedGemmB::Pack(b.data(), c.k, c.n, false, c.n);
    if (!packed.ok()) {
      std::fprintf(stderr, "%s\n", packed.status().ToString().c_str());
      return 1;
    }
    kiln::kernels::nn::PackedGemm(s, a.data(), **packed, y.data());
    kiln::kernels::nn::OpenBlasGemm(s, a.data(), b.data(), y.data());
    double best_packed = 1e30, best_blas = 1e30;
    const int reps = c.m * c.n * c.k > (int64_t{1} << 30) ? 1 : 5;
    for (int r = 0; r < rounds; ++r) {
      double t0 = Seconds();
      for (int i = 0; i < reps; ++i) kiln::kernels::nn::PackedGemm(s, a.data(), **packed, y.data());
      best_packed = std::min(best_packed, (Seconds() - t0) / reps);
      t0 = Seconds();
      for (int i = 0; i < reps; ++i)
        kiln::kernels::nn::OpenBlasGemm(s, a.data(), b.data(), y.data());
      best_blas = std::min(best_blas, (Seconds() - t0) / reps);
    }
    const double flops = 2.0 * c.m * c.n * c.k;
    char name[64];
    std::snprintf(name, sizeof(name), "%ldx%ldx%ld", static_cast<long>(c.m), static_cast<long>(c.n),
                  static_cast<long>(c.k));
    std::printf("%-16s %12.3f %12.3f %10.1f %10.1f %8.2f\n", name, best_packed * 1e3,
                best_blas * 1e3, flops / best_packed / 1e9, flops / best_blas / 1e9,
                best_blas / best_packed);
  }
  std::printf("load at end %s\n", Load().c_str());
  return 0;
}
