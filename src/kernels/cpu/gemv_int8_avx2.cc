#include "gemv_int8_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kiln::kernels::nn {

void PackedInt8GemvB::Free::operator()(int8_t* p) const { std::free(p); }

absl::StatusOr<std::shared_ptr<const PackedInt8GemvB>> PackedInt8GemvB::Pack(const int8_t* w,
                                                                             int64_t k, int64_t n) {
  for (int64_t i = 0; i < k * n; ++i) {
    if (w[i] < -kMaxMagnitude || w[i] > kMaxMagnitude) {
      return absl::FailedPreconditionError(
          absl::StrCat("int8 GEMV packing: weight ", int{w[i]}, " is outside [-64, 64]"));
    }
  }
  const int64_t groups = (k + 3) / 4, panels = (n + kPanel - 1) / kPanel;
  const int64_t panel_bytes = groups * kPanel * 4;
  if (panels > 0 && panel_bytes > std::numeric_limits<int64_t>::max() / panels) {
    return absl::ResourceExhaustedError(absl::StrCat("int8 GEMV packing: ", k, "x", n));
  }
  // aligned_alloc wants a multiple of the alignment; an empty product still gets a block.
  const size_t bytes =
      static_cast<size_t>(std::max<int64_t>(64, (panels * panel_bytes + 63) & ~63));
  auto* data = static_cast<int8_t*>(std::aligned_alloc(64, bytes));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("int8 GEMV packing: cannot allocate ", bytes, " bytes for ", k, "x", n));
  }
  std::memset(data, 0, bytes);
  for (int64_t p = 0; p < panels; ++p) {
    int8_t* panel = data + p * panel_bytes;
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < kPanel && p * kPanel + j < n; ++j) {
        panel[(i / 4) * kPanel * 4 + j * 4 + i % 4] = w[i * n + p * kPanel + j];
      }
    }
  }
  return std::shared_ptr<const PackedInt8GemvB>(new PackedInt8GemvB(k, n, bytes, data));
}

namespace {

// Rows [0, R) of A against one panel: 2 x 8 int32 accumulators per row.
template <int R>
void PanelProduct(const uint8_t* a, int64_t lda, int64_t k, const int8_t* panel, int64_t groups,
                  __m256i (&acc)[PackedInt8GemvB::kMaxRows][2]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const int64_t full = k / 4;
  for (int64_t g = 0; g < groups; ++g) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(panel + g * 64));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(panel + g * 64 + 32));
    for (int r = 0; r < R; ++r) {
      int32_t four = 0;  // a[r][4g..4g+3], zeros past k
      if (g < full) {
        std::memcpy(&four, a + r * lda + 4 * g, 4);
      } else {
        std::memcpy(&four, a + r * lda + 4 * g, static_cast<size_t>(k - 4 * g));
      }
      const __m256i x = _mm256_set1_epi32(four);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w0), ones));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w1), ones));
    }
  }
}

}  // namespace

void PackedInt8GemvB::Multiply(int64_t rows, const uint8_t* a, int64_t lda, int64_t p0, int64_t p1,
                               int32_t* acc) const {
  const int64_t g = groups();
  const int64_t panel_bytes = g * kPanel * 4;
  __m256i sums[kMaxRows][2];
  for (int64_t p = p0; p < p1; ++p) {
    const int8_t* panel = data_.get() + p * panel_bytes;
    switch (rows) {
      case 1:
        PanelProduct<1>(a, lda, k_, panel, g, sums);
        break;
      case 2:
        PanelProduct<2>(a, lda, k_, panel, g, sums);
        break;
      case 3:
        PanelProduct<3>(a, lda, k_, panel, g, sums);
        break;
      default:
        PanelProduct<4>(a, lda, k_, panel, g, sums);
        break;
    }
    // Column j of the panel is lane j of the 16 sums (the 4 bytes of a group are one lane).
    const int64_t cols = std::min(kPanel, n_ - p * kPanel);
    for (int64_t r = 0; r < rows; ++r) {
      alignas(32) int32_t lanes[kPanel];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sums[r][0]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8), sums[r][1]);
      std::memcpy(acc + r * n_ + p * kPanel, lanes, sizeof(int32_t) * cols);
    }
  }
}

}  // namespace kiln::kernels::nn
