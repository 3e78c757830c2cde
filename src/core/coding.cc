#include "kiln/core/coding.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace kiln::coding {

bool GetVarint64(absl::string_view* in, uint64_t* value) {
  uint64_t result = 0;
  for (size_t i = 0; i < kMaxVarint64Bytes && !in->empty(); ++i) {
    const uint8_t byte = static_cast<uint8_t>((*in)[0]);
    in->remove_prefix(1);
    result |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      *value = result;
      return true;
    }
  }
  return false;
}

void PutVarint64(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// memcpy of the native representation: kiln builds for little-endian targets only (x86-64,
// aarch64 Linux), where that is the on-disk byte order.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the codecs assume little-endian");

uint32_t DecodeFixed32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t DecodeFixed64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void PutFixed32(std::string* out, uint32_t value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void PutFixed64(std::string* out, uint64_t value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace kiln::coding

namespace kiln::crc32c {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78u;  // reflected Castagnoli polynomial

// tables[k][b]: CRC of byte b followed by k zero bytes (slicing-by-8).
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    tables[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t prev = tables[k - 1][b];
      tables[k][b] = (prev >> 8) ^ tables[0][prev & 0xff];
    }
  }
  return tables;
}

constexpr auto kTables = MakeTables();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const void* data,
                                                          size_t n) {
  uint64_t state = ~crc;
  const char* p = static_cast<const char*>(data);
  const char* end = p + n;
  while (p < end && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    state = _mm_crc32_u8(static_cast<uint32_t>(state), static_cast<uint8_t>(*p++));
  }
  // Three independent streams would hide the instruction's 3-cycle latency, but one stream
  // already checks several GB/s, far above what reading and parsing records costs.
  while (end - p >= 8) {
    state = _mm_crc32_u64(state, coding::DecodeFixed64(p));
    p += 8;
  }
  while (p < end) {
    state = _mm_crc32_u8(static_cast<uint32_t>(state), static_cast<uint8_t>(*p++));
  }
  return ~static_cast<uint32_t>(state);
}

bool DetectHardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  uint32_t state = ~crc;
  const auto* p = static_cast<const uint8_t*>(data);
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= state;
    state = kTables[7][word & 0xff] ^ kTables[6][(word >> 8) & 0xff] ^
            kTables[5][(word >> 16) & 0xff] ^ kTables[4][(word >> 24) & 0xff] ^
            kTables[3][(word >> 32) & 0xff] ^ kTables[2][(word >> 40) & 0xff] ^
            kTables[1][(word >> 48) & 0xff] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xff];
  return ~state;
}

bool HardwareAccelerated() {
#if defined(__x86_64__)
  static const bool has_hardware = DetectHardware();
  return has_hardware;
#else
  return false;
#endif
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HardwareAccelerated()) return ExtendHardware(crc, data, n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace kiln::crc32c
