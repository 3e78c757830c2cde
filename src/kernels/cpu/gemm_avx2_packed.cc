#include "gemm_avx2_packed.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels::nn {
namespace {

constexpr int64_t kNr = PackedGemmB::kPanel;
// K per pass: a panel's slice (kKc x 16 floats, 16 KB) stays in L1 while every row block of
// the A block multiplies it.
constexpr int64_t kKc = 256;
// Rows per A block (kMc x kKc floats, 96 KB): stays in L2 (1 MB on the EPYC this was tuned
// on, 256 KB or more on any AVX2 core) across all the panels of a pass.
constexpr int64_t kMc = 96;
// A block of rows over the whole K that stays in L2 beside the panel (half of 1 MB).
constexpr int64_t kMaxARowsBytes = 512 << 10;
// Panel rows (64 bytes each) between a prefetch and its use: 16 KB, the next K pass's slice
// of the panel (or the next panel), requested while this slice is multiplied. Weights larger
// than the cache come from memory, and 1 KB ahead (16 rows, until 167eb5c) left the first row
// block of each pass waiting on it: kernels_gemm_packed_bench, 32x4096x4096, 208-213 -> 250-263
// GFLOP/s (2048^3: 270-275); 64 and 128 rows gave 237-248, 512 245-257.
constexpr int64_t kPrefetchK = 256;
constexpr int kMr = 6;  // rows per register block: 12 accumulators + 2 panel rows + 1 broadcast

// Lane masks selecting the first `nr` of 16 columns (the last panel's real columns).
struct TailMask {
  __m256i lo, hi;
  explicit TailMask(int nr) {
    alignas(32) static const int32_t kOnes[32] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                  -1, -1, -1, -1, -1, 0,  0,  0,  0,  0,  0,
                                                  0,  0,  0,  0,  0,  0,  0,  0,  0,  0};
    lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kOnes + 16 - nr));
    hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kOnes + 24 - nr));
  }
};

// c[0..nr) = alpha * (acc0, acc1), or c += that when load_c. fmadd(acc, 1, c) rounds once, as
// c + acc does, so alpha = 1 costs no accuracy.
inline void StoreRow(float* c, __m256 acc0, __m256 acc1, __m256 alpha, bool load_c, int nr) {
  if (nr == kNr) {
    if (load_c) {
      _mm256_storeu_ps(c, _mm256_fmadd_ps(acc0, alpha, _mm256_loadu_ps(c)));
      _mm256_storeu_ps(c + 8, _mm256_fmadd_ps(acc1, alpha, _mm256_loadu_ps(c + 8)));
    } else {
      _mm256_storeu_ps(c, _mm256_mul_ps(acc0, alpha));
      _mm256_storeu_ps(c + 8, _mm256_mul_ps(acc1, alpha));
    }
    return;
  }
  const TailMask mask(nr);
  __m256 out0 = _mm256_mul_ps(acc0, alpha), out1 = _mm256_mul_ps(acc1, alpha);
  if (load_c) {
    out0 = _mm256_fmadd_ps(acc0, alpha, _mm256_maskload_ps(c, mask.lo));
    out1 = _mm256_fmadd_ps(acc1, alpha, _mm256_maskload_ps(c + 8, mask.hi));
  }
  _mm256_maskstore_ps(c, mask.lo, out0);
  _mm256_maskstore_ps(c + 8, mask.hi, out1);
}

// C[MR, nr] (+)= alpha * A[MR, kc] x panel[kc, 16]. A[r][p] is a[r * ld + p] (row-major) or
// a[p * ld + r] (kTransA).
template <int MR, bool kTransA>
void Block(int64_t kc, const float* a, int64_t ld, const float* panel, float* c, int64_t ldc,
           int nr, __m256 alpha, bool load_c) {
  __m256 acc0[MR], acc1[MR];
  const float* row[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    acc0[r] = _mm256_setzero_ps();
    acc1[r] = _mm256_setzero_ps();
    row[r] = kTransA ? a + r : a + r * ld;
  }
  const int64_t step = kTransA ? ld : 1;
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    // The panel comes from memory once per call (large weights do not stay in cache between
    // calls): fetch ahead of the hardware prefetcher, which stops at pages.
    _mm_prefetch(reinterpret_cast<const char*>(panel + (p + kPrefetchK) * kNr), _MM_HINT_T0);
    const __m256 b0 = _mm256_load_ps(panel + p * kNr);
    const __m256 b1 = _mm256_load_ps(panel + p * kNr + 8);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(row[r] + p * step);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) StoreRow(c + r * ldc, acc0[r], acc1[r], alpha, load_c, nr);
}

template <bool kTransA>
void BlockOf(int mr, int64_t kc, const float* a, int64_t ld, const float* panel, float* c,
             int64_t ldc, int nr, __m256 alpha, bool load_c) {
  switch (mr) {
    case 1:
      return Block<1, kTransA>(kc, a, ld, panel, c, ldc, nr, alpha, load_c);
    case 2:
      return Block<2, kTransA>(kc, a, ld, panel, c, ldc, nr, alpha, load_c);
    case 3:
      return Block<3, kTransA>(kc, a, ld, panel, c, ldc, nr, alpha, load_c);
    case 4:
      return Block<4, kTransA>(kc, a, ld, panel, c, ldc, nr, alpha, load_c);
    case 5:
      return Block<5, kTransA>(kc, a, ld, panel, c, ldc, nr, alpha, load_c);
    default:
      return Block<6, kTransA>(kc, a, ld, panel, c, ldc, nr, alpha, load_c);
  }
}

struct Product {
  const float* a;
  int64_t a_row_stride, a_k_stride;
  const PackedGemmB* b;
  __m256 alpha;
  bool accumulate;
  float* c;
  int64_t ldc;
};

// Rows [row0, row1) against panels [panel0, panel1).
template <bool kTransA>
void Tile(const Product& g, int64_t row0, int64_t row1, int64_t panel0, int64_t panel1) {
  const int64_t k = g.b->k(), n = g.b->n();
  const int64_t ld = kTransA ? g.a_k_stride : g.a_row_stride;
  const int64_t mc_blocks = (row1 - row0 + kMc - 1) / kMc;
  const int64_t mc = (row1 - row0 + mc_blocks - 1) / mc_blocks;
  for (int64_t m0 = row0; m0 < row1; m0 += mc) {
    const int64_t rows = std::min(row1, m0 + mc) - m0;
    // Balanced register blocks: `extra` blocks of base + 1 rows, then blocks of base rows.
    const int64_t blocks = (rows + kMr - 1) / kMr;
    const int base = static_cast<int>(rows / blocks);
    const int64_t extra = rows % blocks;
    auto pass = [&](int64_t p, int64_t p0) {
      const int64_t kc = std::min(kKc, k - p0);
      const bool load_c = g.accumulate || p0 > 0;
      const float* panel = g.b->panel(p) + p0 * kNr;
      const int nr = static_cast<int>(std::min(kNr, n - p * kNr));
      int64_t r = m0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int mr = base + (blk < extra ? 1 : 0);
        BlockOf<kTransA>(mr, kc, g.a + r * g.a_row_stride + p0 * g.a_k_stride, ld, panel,
                         g.c + r * g.ldc + p * kNr, g.ldc, nr, g.alpha, load_c);
        r += mr;
      }
    };
    if (rows * k * static_cast<int64_t>(sizeof(float)) <= kMaxARowsBytes) {
      // These rows of A over all of K stay in L2: each panel is then read in one sequential
      // stream (what the prefetchers follow best), all its K passes in a row.
      for (int64_t p = panel0; p < panel1; ++p) {
        for (int64_t p0 = 0; p0 < k; p0 += kKc) pass(p, p0);
      }
    } else {
      // Otherwise each A block (rows x kKc) is kept in L2 across every panel of a pass.
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        for (int64_t p = panel0; p < panel1; ++p) pass(p, p0);
      }
    }
  }
}

// One row of A against panels [panel0, panel1), each panel over the whole K in one stream.
// Four accumulator pairs (k mod 4) hide the FMA latency that a single pair would expose.
void Gemv(const Product& g, int64_t panel0, int64_t panel1) {
  const int64_t k = g.b->k(), n = g.b->n(), step = g.a_k_stride;
  const float* a = g.a;
  for (int64_t p = panel0; p < panel1; ++p) {
    const float* panel = g.b->panel(p);
    __m256 acc[8];
    for (__m256& v : acc) v = _mm256_setzero_ps();
    int64_t q = 0;
    for (; q + 4 <= k; q += 4) {
      const float* bq = panel + q * kNr;
      _mm_prefetch(reinterpret_cast<const char*>(bq + kPrefetchK * kNr), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(bq + (kPrefetchK + 2) * kNr), _MM_HINT_T0);
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m256 av = _mm256_broadcast_ss(a + (q + u) * step);
        acc[2 * u] = _mm256_fmadd_ps(av, _mm256_load_ps(bq + u * kNr), acc[2 * u]);
        acc[2 * u + 1] = _mm256_fmadd_ps(av, _mm256_load_ps(bq + u * kNr + 8), acc[2 * u + 1]);
      }
    }
    for (; q < k; ++q) {
      const __m256 av = _mm256_broadcast_ss(a + q * step);
      acc[0] = _mm256_fmadd_ps(av, _mm256_load_ps(panel + q * kNr), acc[0]);
      acc[1] = _mm256_fmadd_ps(av, _mm256_load_ps(panel + q * kNr + 8), acc[1]);
    }
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[4], acc[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[3]), _mm256_add_ps(acc[5], acc[7]));
    StoreRow(g.c + p * kNr, lo, hi, g.alpha, g.accumulate,
             static_cast<int>(std::min(kNr, n - p * kNr)));
  }
}

}  // namespace

void PackedGemmB::Free::operator()(float* p) const { std::free(p); }

absl::StatusOr<std::shared_ptr<const PackedGemmB>> PackedGemmB::Pack(const float* b, int64_t k,
                                                                     int64_t n, bool trans_b,
                                                                     int64_t ldb) {
  if (k < 0 || n < 0 || ldb < (trans_b ? k : n)) {
    return absl::InvalidArgumentError(absl::StrCat("packing GEMM weights: bad shape k=", k,
                                                   " n=", n, " ldb=", ldb,
                                                   trans_b ? " (transposed)" : ""));
  }
  const int64_t panels = (n + kNr - 1) / kNr;
  int64_t floats = 0;
  if (__builtin_mul_overflow(panels * kNr, k, &floats) ||
      floats > (std::numeric_limits<int64_t>::max() - 64) / int64_t{sizeof(float)}) {
    return absl::ResourceExhaustedError(
        absl::StrCat("packing GEMM weights: ", k, "x", n, " is too large"));
  }
  // aligned_alloc wants a multiple of the alignment; an empty product still gets a block.
  const size_t bytes =
      std::max<size_t>(64, (static_cast<size_t>(floats) * sizeof(float) + 63) / 64 * 64);
  auto* data = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("packing GEMM weights: cannot allocate ", bytes, " bytes for ", k, "x", n));
  }
  std::shared_ptr<const PackedGemmB> packed(new PackedGemmB(k, n, bytes, data));
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = data + p * k * kNr;
    const int64_t cols = std::min(kNr, n - p * kNr);
    if (trans_b) {
      // B is [n, k]: read each column of op(B) as a contiguous row of B.
      for (int64_t j = 0; j < kNr; ++j) {
        if (j < cols) {
          const float* src = b + (p * kNr + j) * ldb;
          for (int64_t q = 0; q < k; ++q) dst[q * kNr + j] = src[q];
        } else {
          for (int64_t q = 0; q < k; ++q) dst[q * kNr + j] = 0.0f;
        }
      }
    } else {
      for (int64_t q = 0; q < k; ++q) {
        const float* src = b + q * ldb + p * kNr;
        for (int64_t j = 0; j < kNr; ++j) dst[q * kNr + j] = j < cols ? src[j] : 0.0f;
      }
    }
  }
  return packed;
}

void PackedGemmAvx2(int64_t rows, const float* a, int64_t a_row_stride, int64_t a_k_stride,
                    const PackedGemmB& b, float alpha, bool accumulate, float* c, int64_t ldc,
                    int threads) {
  const int64_t n = b.n(), panels = b.panels();
  if (rows <= 0 || n <= 0) return;
  if (b.k() == 0) {
    // The product is all zeros (as nn_matmul.cc's empty product): C stays or becomes 0.
    if (!accumulate) {
      for (int64_t r = 0; r < rows; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.0f);
    }
    return;
  }
  const Product g{a, a_row_stride, a_k_stride, &b, _mm256_set1_ps(alpha), accumulate, c, ldc};
  threads = std::max(1, threads);
  if (rows == 1) {
    OpenMpParallelFor(panels, 1, threads, [&](int64_t p0, int64_t p1) { Gemv(g, p0, p1); });
    return;
  }
  // A transposed A is read column by column: rows are contiguous (stride 1).
  const bool trans_a = a_row_stride == 1 && a_k_stride != 1;
  auto tile = [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    if (trans_a) {
      Tile<true>(g, r0, r1, p0, p1);
    } else {
      Tile<false>(g, r0, r1, p0, p1);
    }
  };
  // Split over panels (each thread streams its own share of the weights once), unless there
  // are too few panels for a balanced split and enough rows to split instead.
  if (threads > 1 && panels < 8 * threads && rows >= 2 * kMr * threads) {
    OpenMpParallelFor(rows, kMr, threads, [&](int64_t r0, int64_t r1) { tile(r0, r1, 0, panels); });
  } else {
    OpenMpParallelFor(panels, 1, threads, [&](int64_t p0, int64_t p1) { tile(0, rows, p0, p1); });
  }
}

}  // namespace kiln::kernels::nn
