#include "kiln/data/formats/tfrecord.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/core/coding.h"
#include "kiln/data/formats/text_line.h"

namespace kiln::data::formats {
namespace {

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/formats_", ::getpid(), "_", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::vector<std::string> SampleRecords() {
  std::vector<std::string> records = {"", "a", "hello world", std::string(100000, 'x')};
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    std::string r(rng() % 3000, 0);
    for (char& c : r) c = static_cast<char>(rng());
    records.push_back(r);
  }
  records.push_back(std::string(600 << 10, 'z'));  // larger than the read buffer
  return records;
}

class TFRecordRoundTrip : public ::testing::TestWithParam<Compression> {};

TEST_P(TFRecordRoundTrip, WritesAndReadsBack) {
  const std::string path = TempPath(absl::StrCat("roundtrip_", CompressionName(GetParam())));
  const auto records = SampleRecords();
  {
    auto writer = RecordWriter::Open(path, GetParam());
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const auto& r : records) ASSERT_TRUE((*writer)->Write(r).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  for (size_t buffer : {size_t{4096}, size_t{256 << 10}}) {
    auto reader = RecordReader::Open(path, GetParam(), buffer);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::string record;
    for (const auto& expected : records) {
      ASSERT_TRUE((*reader)->Read(&record).ok());
      ASSERT_EQ(record, expected);
    }
    absl::Status end = (*reader)->Read(&record);
    EXPECT_TRUE(absl::IsOutOfRange(end)) << end;
  }
  // The in-memory reader sees the same records.
  auto parsed = ParseRecords(ReadFile(path), GetParam());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, records);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(AllCompressions, TFRecordRoundTrip,
                         ::testing::Values(Compression::kNone, Compression::kGzip,
                                           Compression::kZlib));

TEST(TFRecordTest, FramingMatchesTheFormat) {
  // Bytes from TensorFlow's format description: length, masked CRC of length, data, masked CRC.
  const std::string framed = SerializeRecord("abc");
  ASSERT_EQ(framed.size(), 8u + 4 + 3 + 4);
  uint64_t length;
  std::memcpy(&length, framed.data(), 8);
  EXPECT_EQ(length, 3u);
  uint32_t data_crc;
  std::memcpy(&data_crc, framed.data() + 15, 4);
  EXPECT_EQ(crc32c::Unmask(data_crc), crc32c::Value("abc", 3));
  auto parsed = ParseRecords(framed + SerializeRecord("de"));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, (std::vector<std::string>{"abc", "de"}));
}

TEST(TFRecordTest, ParseCompressionNames) {
  EXPECT_EQ(*ParseCompression(""), Compression::kNone);
  EXPECT_EQ(*ParseCompression("NONE"), Compression::kNone);
  EXPECT_EQ(*ParseCompression("GZIP"), Compression::kGzip);
  EXPECT_EQ(*ParseCompression("ZLIB"), Compression::kZlib);
  auto bad = ParseCompression("LZ4");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "LZ4"));
}

TEST(TFRecordTest, MissingFileIsNotFoundNamingThePath) {
  auto reader = RecordReader::Open("/nonexistent/dir/file.tfrecord", Compression::kNone);
  ASSERT_FALSE(reader.ok());
  EXPECT_TRUE(absl::IsNotFound(reader.status()));
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "/nonexistent/dir/file.tfrecord"));
}

TEST(TFRecordTest, CorruptDataCrcNamesFileAndOffset) {
  std::string bytes = SerializeRecord("first") + SerializeRecord("second record");
  const size_t second_offset = SerializeRecord("first").size();
  bytes[second_offset + 12 + 3] ^= 0x20;  // flip a bit inside the second record's data
  const std::string path = TempPath("corrupt_data");
  WriteFile(path, bytes);
  auto reader = RecordReader::Open(path, Compression::kNone);
  ASSERT_TRUE(reader.ok());
  std::string record;
  ASSERT_TRUE((*reader)->Read(&record).ok());
  EXPECT_EQ((*reader)->offset(), second_offset);
  absl::Status status = (*reader)->Read(&record);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), path)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("byte offset ", second_offset)))
      << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "data CRC")) << status;
  std::remove(path.c_str());
}

TEST(TFRecordTest, CorruptLengthCrc) {
  std::string bytes = SerializeRecord("payload");
  bytes[9] ^= 1;
  auto reader = RecordReader::FromString(bytes, Compression::kNone, "mem.tfrecord");
  std::string record;
  absl::Status status = reader->Read(&record);
  EXPECT_TRUE(absl::IsDataLoss(status));
  EXPECT_TRUE(absl::StrContains(status.message(), "length CRC")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "mem.tfrecord at byte offset 0")) << status;
}

TEST(TFRecordTest, TruncatedRecordsAtEveryCut) {
  const std::string first = SerializeRecord("first");
  const std::string whole = first + SerializeRecord("a second, longer record");
  for (size_t cut = first.size() + 1; cut < whole.size(); ++cut) {
    auto reader = RecordReader::FromString(whole.substr(0, cut), Compression::kNone, "t.rec");
    std::string record;
    ASSERT_TRUE(reader->Read(&record).ok());
    absl::Status status = reader->Read(&record);
    EXPECT_TRUE(absl::IsDataLoss(status)) << "cut " << cut << ": " << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "truncated")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("byte offset ", first.size())))
        << status;
  }
}

TEST(TFRecordTest, TruncatedGzipStreamIsDataLoss) {
  const std::string path = TempPath("truncated.gz");
  {
    auto writer = RecordWriter::Open(path, Compression::kGzip);
    ASSERT_TRUE(writer.ok());
    for (int i = 0; i < 100; ++i)
      ASSERT_TRUE((*writer)->Write(std::string(1000, 'a' + i % 26)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  std::string bytes = ReadFile(path);
  auto reader = RecordReader::FromString(bytes.substr(0, bytes.size() / 2), Compression::kGzip);
  std::string record;
  absl::Status status;
  while ((status = reader->Read(&record)).ok()) {
  }
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  // Reading a GZIP file as uncompressed fails on the first record's CRC, not with a crash.
  auto wrong = RecordReader::FromString(bytes, Compression::kNone);
  EXPECT_TRUE(absl::IsDataLoss(wrong->Read(&record)));
  std::remove(path.c_str());
}

TEST(TFRecordTest, HugeLengthWithValidCrcFailsWithoutAllocatingIt) {
  std::string header(8, '\0');
  const uint64_t length = uint64_t{1} << 50;
  std::memcpy(header.data(), &length, 8);
  const uint32_t crc = crc32c::Mask(crc32c::Value(header.data(), 8));
  header.append(reinterpret_cast<const char*>(&crc), 4);
  const std::string path = TempPath("huge_length");
  WriteFile(path, header + "tiny");
  auto reader = RecordReader::Open(path, Compression::kNone);
  ASSERT_TRUE(reader.ok());
  std::string record;
  absl::Status status = (*reader)->Read(&record);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  std::remove(path.c_str());
}

TEST(LineReaderTest, StripsLineEndsInAllCompressions) {
  const std::string text = "first\nsecond\r\n\nlast without newline";
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    const std::string path = TempPath(absl::StrCat("lines_", CompressionName(c)));
    {
      auto out = OutputStream::OpenFile(path, c);
      ASSERT_TRUE(out.ok());
      ASSERT_TRUE((*out)->Write(text).ok());
      ASSERT_TRUE((*out)->Close().ok());
    }
    auto reader = LineReader::Open(path, c, 4096);
    ASSERT_TRUE(reader.ok());
    std::vector<std::string> lines;
    std::string line;
    absl::Status status;
    while ((status = (*reader)->Read(&line)).ok()) lines.push_back(line);
    EXPECT_TRUE(absl::IsOutOfRange(status));
    EXPECT_EQ(lines, (std::vector<std::string>{"first", "second", "", "last without newline"}));
    EXPECT_EQ((*reader)->line_number(), 4);
    std::remove(path.c_str());
  }
}

TEST(LineReaderTest, LongLinesAcrossBuffers) {
  const std::string a(10000, 'a'), b(5000, 'b');
  auto reader = LineReader::FromString(a + "\n" + b + "\n", Compression::kNone);
  std::string line;
  ASSERT_TRUE(reader->Read(&line).ok());
  EXPECT_EQ(line, a);
  ASSERT_TRUE(reader->Read(&line).ok());
  EXPECT_EQ(line, b);
  EXPECT_TRUE(absl::IsOutOfRange(reader->Read(&line)));
}

}  // namespace
}  // namespace kiln::data::formats
