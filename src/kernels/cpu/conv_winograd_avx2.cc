#include "conv_winograd_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels::nn {
namespace {

constexpr int64_t kLanes = 8;  // channels per vector (nChw8c's block)
constexpr int kAlpha = 6;      // input tile side: 4 outputs + 3 - 1
constexpr int kOut = 4;        // output tile side
constexpr int kPoints = WinogradF43Weights::kPoints;
// A block's V and M together stay in L2 (1 MB on the EPYC this was measured on; 512 KB or
// more on AVX2 server cores).
constexpr size_t kBlockBytes = size_t{768} << 10;
// At least this many tiles per block: fewer rows leave the packed product's 6-row register
// blocks short and read each transformed weight for too little work.
constexpr int64_t kMinBlockTiles = 24;
constexpr int64_t kMaxBlockTiles = 144;

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

// r = B^T z for one column (or row) of six vectors.
inline void InputTransform6(const __m256 z[6], __m256 r[6]) {
  const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
  r[0] = _mm256_fmadd_ps(four, z[0], _mm256_fnmadd_ps(five, z[2], z[4]));
  r[1] = _mm256_fnmadd_ps(four, _mm256_add_ps(z[1], z[2]), _mm256_add_ps(z[3], z[4]));
  r[2] = _mm256_fmadd_ps(four, _mm256_sub_ps(z[1], z[2]), _mm256_sub_ps(z[4], z[3]));
  r[3] = _mm256_fmadd_ps(two, _mm256_sub_ps(z[3], z[1]), _mm256_sub_ps(z[4], z[2]));
  r[4] = _mm256_fnmadd_ps(two, _mm256_sub_ps(z[3], z[1]), _mm256_sub_ps(z[4], z[2]));
  r[5] = _mm256_fmadd_ps(four, z[1], _mm256_fnmadd_ps(five, z[3], z[5]));
}

// r = A^T m for one column (or row) of six vectors.
inline void OutputTransform6(const __m256 m[6], __m256 r[4]) {
  const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f),
               eight = _mm256_set1_ps(8.0f);
  const __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
  const __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
  r[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
  r[1] = _mm256_fmadd_ps(two, d34, d12);
  r[2] = _mm256_fmadd_ps(four, s34, s12);
  r[3] = _mm256_add_ps(_mm256_fmadd_ps(eight, d34, d12), m[5]);
}

// V (kPoints vectors, `stride` floats apart) of the 6x6 input tile at (iy0, ix0) of one
// channel block `plane` (h x w x 8 floats); zero outside the image.
template <bool kInterior>
void InputTile(const float* plane, int64_t h, int64_t w, int64_t iy0, int64_t ix0, float* v,
               int64_t stride) {
  __m256 t[kAlpha][kAlpha];  // t[j][i]: column j of B^T d
  for (int j = 0; j < kAlpha; ++j) {
    __m256 col[kAlpha];
    const int64_t ix = ix0 + j;
    for (int i = 0; i < kAlpha; ++i) {
      const int64_t iy = iy0 + i;
      if (kInterior || (iy >= 0 && iy < h && ix >= 0 && ix < w)) {
        col[i] = _mm256_loadu_ps(plane + (iy * w + ix) * kLanes);
      } else {
        col[i] = _mm256_setzero_ps();
      }
    }
    InputTransform6(col, t[j]);
  }
  for (int i = 0; i < kAlpha; ++i) {
    __m256 row[kAlpha], r[kAlpha];
    for (int j = 0; j < kAlpha; ++j) row[j] = t[j][i];
    InputTransform6(row, r);
    for (int j = 0; j < kAlpha; ++j) _mm256_storeu_ps(v + (i * kAlpha + j) * stride, r[j]);
  }
}

// Y's 4x4 tile at (oy0, ox0) of one channel block `plane` (out_h x out_w x 8 floats) from M
// (kPoints vectors, `stride` floats apart), plus `bias`; only the rows and columns inside the
// output are stored. Returns a mask whose lanes are set where a stored value is not finite.
__m256 OutputTile(const float* m, int64_t stride, __m256 bias, float* plane, int64_t out_h,
                  int64_t out_w, int64_t oy0, int64_t ox0) {
  __m256 t[kAlpha][kOut];  // t[j][i]: column j of A^T M
  for (int j = 0; j < kAlpha; ++j) {
    __m256 col[kAlpha];
    for (int i = 0; i < kAlpha; ++i) col[i] = _mm256_loadu_ps(m + (i * kAlpha + j) * stride);
    OutputTransform6(col, t[j]);
  }
  const int rows = static_cast<int>(std::min<int64_t>(kOut, out_h - oy0));
  const int cols = static_cast<int>(std::min<int64_t>(kOut, out_w - ox0));
  __m256 bad = _mm256_setzero_ps();
  for (int i = 0; i < rows; ++i) {
    __m256 row[kAlpha], r[kOut];
    for (int j = 0; j < kAlpha; ++j) row[j] = t[j][i];
    OutputTransform6(row, r);
    float* out = plane + ((oy0 + i) * out_w + ox0) * kLanes;
    for (int j = 0; j < cols; ++j) {
      const __m256 y = _mm256_add_ps(r[j], bias);
      // y - y is 0 for finite y and NaN for NaN or infinity.
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(y, y), y, _CMP_UNORD_Q));
      _mm256_storeu_ps(out + j * kLanes, y);
    }
  }
  return bad;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const WinogradF43Weights>> WinogradF43Weights::Make(const float* w,
                                                                                   int64_t k,
                                                                                   int64_t c) {
  static constexpr double kG[kAlpha][3] = {{1.0 / 4, 0, 0},
                                           {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                           {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                           {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                           {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                           {0, 0, 1}};
  auto made = std::shared_ptr<WinogradF43Weights>(new WinogradF43Weights());
  made->k_ = k;
  made->c_ = c;
  // U[point] as [C, K] rows, then packed.
  std::vector<float> u;
  try {
    u.resize(static_cast<size_t>(kPoints) * c * k);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Winograd weights for ", k, "x", c, "x3x3: out of memory"));
  }
  for (int64_t o = 0; o < k; ++o) {
    for (int64_t i = 0; i < c; ++i) {
      const float* g = w + (o * c + i) * 9;
      double gg[kAlpha][3];  // G g
      for (int a = 0; a < kAlpha; ++a) {
        for (int col = 0; col < 3; ++col) {
          gg[a][col] = kG[a][0] * g[col] + kG[a][1] * g[3 + col] + kG[a][2] * g[6 + col];
        }
      }
      for (int a = 0; a < kAlpha; ++a) {
        for (int b = 0; b < kAlpha; ++b) {
          const double v = gg[a][0] * kG[b][0] + gg[a][1] * kG[b][1] + gg[a][2] * kG[b][2];
          u[(static_cast<size_t>(a * kAlpha + b) * c + i) * k + o] = static_cast<float>(v);
        }
      }
    }
  }
  made->u_.reserve(kPoints);
  for (int p = 0; p < kPoints; ++p) {
    auto packed = PackedGemmB::Pack(u.data() + static_cast<size_t>(p) * c * k, c, k,
                                    /*trans_b=*/false, k);
    if (!packed.ok()) return packed.status();
    made->u_.push_back(*std::move(packed));
  }
  return std::shared_ptr<const WinogradF43Weights>(std::move(made));
}

size_t WinogradF43Weights::bytes() const {
  size_t total = 0;
  for (const auto& u : u_) total += u->bytes();
  return total;
}

bool WinogradF43::Supports(const WinogradF43Shape& s) {
  // Any padding: reads outside the image are zeros.
  return s.n > 0 && s.c > 0 && s.k > 0 && s.c % kLanes == 0 && s.k % kLanes == 0 && s.h > 0 &&
         s.w > 0 && s.out_h > 0 && s.out_w > 0 && s.pad_top >= 0 && s.pad_left >= 0;
}

WinogradF43::WinogradF43(const WinogradF43Shape& shape, int threads)
    : s_(shape), threads_(std::max(1, threads)) {
  tiles_h_ = (s_.out_h + kOut - 1) / kOut;
  tiles_w_ = (s_.out_w + kOut - 1) / kOut;
  tiles_ = s_.n * tiles_h_ * tiles_w_;
  const int64_t per_tile_bytes = kPoints * (s_.c + s_.k) * static_cast<int64_t>(sizeof(float));
  int64_t block = std::clamp<int64_t>(static_cast<int64_t>(kBlockBytes) / per_tile_bytes,
                                      kMinBlockTiles, kMaxBlockTiles);
  // Every thread gets a block.
  block = std::max<int64_t>(1, std::min(block, (tiles_ + threads_ - 1) / threads_));
  block_tiles_ = block;
  blocks_ = (tiles_ + block - 1) / block;
  chunks_ = std::min<int64_t>(threads_, blocks_);
  chunk_bytes_ = Align64(static_cast<size_t>(kPoints * block * s_.c) * sizeof(float)) +
                 Align64(static_cast<size_t>(kPoints * block * s_.k) * sizeof(float));
}

bool WinogradF43::Run(const WinogradF43Weights& weights, const float* x, const float* bias,
                      float* y, char* scratch) const {
  const int64_t c_blocks = s_.c / kLanes, k_blocks = s_.k / kLanes;
  const int64_t tiles_per_image = tiles_h_ * tiles_w_;
  const int64_t bt = block_tiles_;
  bool finite = true;
  // Chunk `chunk` runs blocks chunk, chunk + chunks_, ... on its own V and M.
  OpenMpParallelFor(chunks_, 1, threads_, [&](int64_t chunk0, int64_t chunk1) {
    for (int64_t chunk = chunk0; chunk < chunk1; ++chunk) {
      float* v = reinterpret_cast<float*>(scratch + chunk * chunk_bytes_);
      float* m =
          v + Align64(static_cast<size_t>(kPoints * bt * s_.c) * sizeof(float)) / sizeof(float);
      __m256 bad = _mm256_setzero_ps();
      for (int64_t block = chunk; block < blocks_; block += chunks_) {
        const int64_t t0 = block * bt, count = std::min(bt, tiles_ - t0);
        // V[point][tile][c]: the block's input tiles, transformed.
        for (int64_t t = 0; t < count; ++t) {
          const int64_t tile = t0 + t, image = tile / tiles_per_image;
          const int64_t th = (tile % tiles_per_image) / tiles_w_, tw = tile % tiles_w_;
          const int64_t iy0 = th * kOut - s_.pad_top, ix0 = tw * kOut - s_.pad_left;
          const bool interior =
              iy0 >= 0 && iy0 + kAlpha <= s_.h && ix0 >= 0 && ix0 + kAlpha <= s_.w;
          for (int64_t cb = 0; cb < c_blocks; ++cb) {
            const float* plane = x + ((image * c_blocks + cb) * s_.h) * s_.w * kLanes;
            float* dst = v + t * s_.c + cb * kLanes;
            if (interior) {
              InputTile<true>(plane, s_.h, s_.w, iy0, ix0, dst, bt * s_.c);
            } else {
              InputTile<false>(plane, s_.h, s_.w, iy0, ix0, dst, bt * s_.c);
            }
          }
        }
        // M[point] = V[point] x U[point]: [count, C] x [C, K].
        for (int p = 0; p < kPoints; ++p) {
          PackedGemmAvx2(count, v + p * bt * s_.c, s_.c, 1, weights.u(p), 1.0f, false,
                         m + p * bt * s_.k, s_.k, 1);
        }
        // Y's tiles.
        for (int64_t t = 0; t < count; ++t) {
          const int64_t tile = t0 + t, image = tile / tiles_per_image;
          const int64_t th = (tile % tiles_per_image) / tiles_w_, tw = tile % tiles_w_;
          for (int64_t kb = 0; kb < k_blocks; ++kb) {
            const __m256 b =
                bias != nullptr ? _mm256_loadu_ps(bias + kb * kLanes) : _mm256_setzero_ps();
            float* plane = y + ((image * k_blocks + kb) * s_.out_h) * s_.out_w * kLanes;
            bad = _mm256_or_ps(bad, OutputTile(m + t * s_.k + kb * kLanes, bt * s_.k, b, plane,
                                               s_.out_h, s_.out_w, th * kOut, tw * kOut));
          }
        }
      }
      if (_mm256_movemask_ps(bad) != 0) __atomic_store_n(&finite, false, __ATOMIC_RELAXED);
    }
  });
  return finite;
}

}  // namespace kiln::kernels::nn
