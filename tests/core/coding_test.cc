// The one copy of varint, fixed-width and CRC32C coding that every format reader uses.
#include "kiln/core/coding.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(VarintTest, RoundTripsBoundaryValues) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                     uint64_t{1} << 35, UINT64_MAX - 1, UINT64_MAX}) {
    std::string bytes;
    coding::PutVarint64(&bytes, v);
    absl::string_view in = bytes;
    uint64_t decoded = 0;
    ASSERT_TRUE(coding::GetVarint64(&in, &decoded)) << v;
    EXPECT_EQ(decoded, v);
    EXPECT_TRUE(in.empty()) << v;
  }
  std::string max;
  coding::PutVarint64(&max, UINT64_MAX);
  EXPECT_EQ(max.size(), coding::kMaxVarint64Bytes);
}

TEST(VarintTest, KnownEncodingAndRestOfInputKept) {
  std::string bytes;
  coding::PutVarint64(&bytes, 300);
  EXPECT_EQ(bytes, "\xac\x02");
  absl::string_view in("\xac\x02xyz", 5);
  uint64_t v = 0;
  ASSERT_TRUE(coding::GetVarint64(&in, &v));
  EXPECT_EQ(v, 300u);
  EXPECT_EQ(in, "xyz");
}

TEST(VarintTest, TruncatedAndOverlongAreMalformed) {
  uint64_t v = 42;
  absl::string_view empty;
  EXPECT_FALSE(coding::GetVarint64(&empty, &v));
  absl::string_view cut("\x80\x80", 2);
  EXPECT_FALSE(coding::GetVarint64(&cut, &v));
  const std::string eleven(11, '\x80');
  absl::string_view overlong = eleven;
  EXPECT_FALSE(coding::GetVarint64(&overlong, &v));
  EXPECT_EQ(v, 42u);  // untouched on failure
}

TEST(FixedTest, LittleEndianBothWidths) {
  std::string bytes;
  coding::PutFixed32(&bytes, 0x04030201u);
  coding::PutFixed64(&bytes, 0x0c0b0a0908070605ull);
  EXPECT_EQ(bytes, "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c");
  EXPECT_EQ(coding::DecodeFixed32(bytes.data()), 0x04030201u);
  EXPECT_EQ(coding::DecodeFixed64(bytes.data() + 4), 0x0c0b0a0908070605ull);
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(crc32c::Value("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c::Value("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Value(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c::Value(ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, 0);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c::Value(ascending.data(), ascending.size()), 0x46DD794Eu);
}

TEST(Crc32cTest, HardwareAndPortableAgreeAtEveryAlignmentAndLength) {
  std::mt19937 rng(7);
  std::string data(1000, 0);
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 500, 991}) {
      EXPECT_EQ(crc32c::Extend(0, data.data() + start, n),
                crc32c::ExtendPortable(0, data.data() + start, n));
    }
  }
  // Extend continues a stream.
  const uint32_t whole = crc32c::Value(data.data(), data.size());
  EXPECT_EQ(crc32c::Extend(crc32c::Value(data.data(), 333), data.data() + 333, 667), whole);
}

TEST(Crc32cTest, MaskRoundTripsAndChangesValue) {
  const uint32_t crc = crc32c::Value("foo", 3);
  EXPECT_NE(crc32c::Mask(crc), crc);
  EXPECT_NE(crc32c::Mask(crc32c::Mask(crc)), crc);
  EXPECT_EQ(crc32c::Unmask(crc32c::Mask(crc)), crc);
  EXPECT_EQ(crc32c::Unmask(crc32c::Unmask(crc32c::Mask(crc32c::Mask(crc)))), crc);
}

}  // namespace
}  // namespace kiln
