// CRC32C (Castagnoli), as TensorFlow's checkpoints and LevelDB tables use it, with the
// "masked" form they store (so that a CRC of data containing CRCs stays well distributed).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::import::tf {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);
inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }

inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace kiln::import::tf
