// CRC32C (Castagnoli), the checksum TFRecord files carry. Uses the SSE4.2 crc32 instruction
// when the CPU has it (checked once at run time) and a slicing-by-8 table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::data::formats::crc32c {

// The CRC of data[0, n) appended to a stream whose CRC so far is `crc` (0 for a new stream).
uint32_t Extend(uint32_t crc, const char* data, size_t n);

inline uint32_t Value(const char* data, size_t n) { return Extend(0, data, n); }

// The portable implementation, exposed so that tests compare both paths.
uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n);

// True when Extend uses the hardware instruction on this machine.
bool HardwareAccelerated();

// TFRecord stores CRCs masked: a CRC of data that itself contains CRCs is weak, so the stored
// value is rotated and offset.
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t Unmask(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace kiln::data::formats::crc32c
