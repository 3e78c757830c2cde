// Byte-level codecs shared by every reader and writer of TensorFlow's on-disk formats
// (TFRecord, tf.Example, TensorBundle checkpoints and the LevelDB tables under them): varints,
// little-endian fixed-width integers and CRC32C. One copy each, so that a bound check or a
// masking constant cannot differ between two readers of the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln::coding {

// Protobuf/LevelDB base-128 varints. A varint longer than 10 bytes, or one cut off by the end
// of the input, is malformed: GetVarint64 returns false and leaves *value unchanged (*in may
// have advanced).
inline constexpr size_t kMaxVarint64Bytes = 10;
bool GetVarint64(absl::string_view* in, uint64_t* value);
void PutVarint64(std::string* out, uint64_t value);

// Little-endian fixed-width integers. The Decode functions read exactly 4 or 8 bytes from p;
// the caller has checked that they are there.
uint32_t DecodeFixed32(const char* p);
uint64_t DecodeFixed64(const char* p);
void PutFixed32(std::string* out, uint32_t value);
void PutFixed64(std::string* out, uint64_t value);

}  // namespace kiln::coding

// CRC32C (Castagnoli), as TFRecord files, TensorBundle checkpoints and LevelDB tables carry
// it. Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time) and a
// slicing-by-8 table otherwise.
namespace kiln::crc32c {

// The CRC of data[0, n) appended to a stream whose CRC so far is `crc` (0 for a new stream).
uint32_t Extend(uint32_t crc, const void* data, size_t n);
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// The portable implementation, exposed so that tests compare both paths.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);

// True when Extend uses the hardware instruction on this machine.
bool HardwareAccelerated();

// The formats store CRCs masked: a CRC of data that itself contains CRCs is weak, so the
// stored value is rotated and offset.
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t Unmask(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace kiln::crc32c
