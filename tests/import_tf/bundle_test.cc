// TensorBundle checkpoints and the LevelDB table format under them.
#include <filesystem>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "import/tf/table_reader.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/core/coding.h"
#include "test_util.h"
#include "tf_graph_builder.h"

namespace kiln::import::tf {
namespace {

using testing::TempDir;
using testing::TfServingDir;

TEST(LevelDbTableTest, RoundTripsManyKeysAcrossBlocks) {
  std::map<std::string, std::string> entries;
  for (int i = 0; i < 1000; ++i) {
    entries["layer_" + std::to_string(i) + "/kernel"] = std::string(i % 37, 'v') + std::to_string(i);
  }
  entries[""] = "header";
  const std::string table = WriteLevelDbTable(entries, 16, 512);
  auto read = ReadLevelDbTable(table, "mem");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, entries);
}

TEST(LevelDbTableTest, RejectsCorruptionClearly) {
  const std::string table = WriteLevelDbTable({{"a", "1"}, {"b", "2"}});
  std::string bad_magic = table;
  bad_magic[bad_magic.size() - 1] ^= 1;
  auto r1 = ReadLevelDbTable(bad_magic, "x.index");
  EXPECT_TRUE(absl::StrContains(r1.status().message(), "magic")) << r1.status();
  std::string flipped = table;
  flipped[2] ^= 0x40;
  auto r2 = ReadLevelDbTable(flipped, "x.index");
  EXPECT_TRUE(absl::StrContains(r2.status().message(), "checksum")) << r2.status();
  auto r3 = ReadLevelDbTable(table.substr(0, 20), "x.index");
  EXPECT_FALSE(r3.ok());
  EXPECT_TRUE(absl::StrContains(r3.status().message(), "x.index"));
  for (size_t cut = 0; cut < table.size(); ++cut) {
    (void)ReadLevelDbTable(table.substr(0, cut), "t");  // never crashes
  }
}

TEST(LevelDbTableTest, RejectsUnknownCompression) {
  std::string table = WriteLevelDbTable({{"a", "1"}});
  // Data block 0: entry (3 header bytes, "a", "1") + restart (4) + count (4) = 13 bytes; its
  // trailer's type byte follows. Mark it zstd (2) and fix the CRC.
  const size_t size = 13;
  table[size] = 2;
  const uint32_t crc =
      crc32c::Mask(crc32c::Extend(crc32c::Value(table.data(), size), &table[size], 1));
  std::memcpy(&table[size + 1], &crc, 4);
  auto r = ReadLevelDbTable(table, "c.index");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "compression type 2"));
  table[size] = 1;  // snappy over bytes that are not snappy: a clean error
  const uint32_t crc1 =
      crc32c::Mask(crc32c::Extend(crc32c::Value(table.data(), size), &table[size], 1));
  std::memcpy(&table[size + 1], &crc1, 4);
  EXPECT_FALSE(ReadLevelDbTable(table, "c.index").ok());
}

TEST(SnappyTest, DecodesLiteralsAndOverlappingCopies) {
  // "abcabcabcabc": length 12, literal "abc" (tag (3-1)<<2), copy len 9 offset 3 (2-byte form).
  const std::string compressed = std::string("\x0c\x08" "abc", 5) + std::string("\x22\x03\x00", 3);
  auto out = SnappyDecompress(compressed);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "abcabcabcabc");
  EXPECT_FALSE(SnappyDecompress(std::string("\x0c\x08" "abc\x22\x09\x00", 8)).ok());
}

TEST(BundleTest, ReadsTfServingCheckpoint) {
  auto reader = BundleReader::Open(TfServingDir("saved_model_half_plus_two_cpu/00000123/variables/variables"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto a = (*reader)->Lookup("a");
  auto b = (*reader)->Lookup("b");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a->data<float>(), 0.5f);
  EXPECT_EQ(*b->data<float>(), 2.0f);
  auto missing = (*reader)->Lookup("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(BundleTest, ReadsStringTensorsOfTf2Checkpoints) {
  auto reader = BundleReader::Open(testing::ModelsDir("tfx_penguin_keras/variables/variables"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto graph = (*reader)->Lookup("_CHECKPOINTABLE_OBJECT_GRAPH");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->dtype(), DType::kString);
  EXPECT_GT(graph->data<std::string>()->size(), 100u);
}

TEST(BundleTest, ReadsTwoShardCheckpoint) {
  auto reader = BundleReader::Open(testing::ModelsDir("tfx_taxi_estimator_tf1_2019/variables/variables"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->num_shards(), 2);
  int read = 0;
  for (const std::string& key : (*reader)->Keys()) {
    auto t = (*reader)->Lookup(key);
    ASSERT_TRUE(t.ok()) << key << ": " << t.status();
    ++read;
  }
  EXPECT_GT(read, 10);
}

TEST(BundleTest, RoundTripAndCrcMismatch) {
  const std::string dir = TempDir("bundle");
  const std::string prefix = dir + "/variables";
  Tensor s(DType::kString, Shape{3});
  s.data<std::string>()[0] = "x";
  s.data<std::string>()[2] = std::string(300, 'y');
  std::map<std::string, Tensor> tensors = {
      {"w", Tensor::FromVector<float>({1, 2, 3, 4}, Shape{2, 2})},
      {"i", Tensor::FromVector<int64_t>({7, -8})},
      {"s", s}};
  ASSERT_TRUE(WriteBundle(prefix, tensors).ok());
  auto reader = BundleReader::Open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto w = (*reader)->Lookup("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->shape(), (Shape{2, 2}));
  EXPECT_EQ(w->data<float>()[3], 4.f);
  auto str = (*reader)->Lookup("s");
  ASSERT_TRUE(str.ok()) << str.status();
  EXPECT_EQ(str->data<std::string>()[2], std::string(300, 'y'));

  // Flip one byte of w's data: the CRC check must name the tensor.
  const std::string shard = BundleShardPath(prefix, 0, 1);
  auto bytes = ReadFileToString(shard);
  ASSERT_TRUE(bytes.ok());
  std::string corrupt = *bytes;
  const int64_t offset = (*reader)->Entry("w")->offset();
  corrupt[offset + 1] ^= 0x10;
  ASSERT_TRUE(WriteStringToFile(shard, corrupt).ok());
  auto reread = BundleReader::Open(prefix);
  ASSERT_TRUE(reread.ok());
  auto bad = (*reread)->Lookup("w");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "CRC32C mismatch")) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "'w'"));

  std::filesystem::remove(shard);
  auto fresh = BundleReader::Open(prefix);
  ASSERT_TRUE(fresh.ok());
  auto missing_shard = (*fresh)->Lookup("i");
  EXPECT_EQ(missing_shard.status().code(), absl::StatusCode::kNotFound) << missing_shard.status();
  EXPECT_TRUE(absl::StrContains(missing_shard.status().message(), "data-00000-of-00001"));
}

}  // namespace
}  // namespace kiln::import::tf
