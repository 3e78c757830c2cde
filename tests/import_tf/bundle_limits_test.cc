// A corrupt variables.index whose entry claims a huge shape must be refused from the bytes the
// entry holds, before the tensor is allocated (a few-byte index could otherwise claim a TiB).
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "import/tf/table_reader.h"
#include "import/tf/tensor_bundle.h"

namespace kiln::import::tf {
namespace {

using ::testing::HasSubstr;

// Writes a bundle holding `tensor` under "v", then rewrites the index so that the entry's
// shape is `dims` (the data and its checksum stay those of `tensor`).
std::string BundleWithClaimedShape(const std::string& name, const Tensor& tensor,
                                   const std::vector<int64_t>& dims) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("kiln_bundle_limits_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::create_directories(dir);
  const std::string prefix = dir + "/" + name;
  EXPECT_TRUE(WriteBundle(prefix, {{"v", tensor}}).ok());
  absl::StatusOr<std::string> index = ReadFileToString(prefix + ".index");
  EXPECT_TRUE(index.ok()) << index.status();
  absl::StatusOr<std::map<std::string, std::string>> table = ReadLevelDbTable(*index, "index");
  EXPECT_TRUE(table.ok()) << table.status();
  tensorflow::BundleEntryProto entry;
  EXPECT_TRUE(entry.ParseFromString(table->at("v")));
  entry.mutable_shape()->clear_dim();
  for (int64_t d : dims) entry.mutable_shape()->add_dim()->set_size(d);
  (*table)["v"] = entry.SerializeAsString();
  EXPECT_TRUE(WriteStringToFile(prefix + ".index", WriteLevelDbTable(*table)).ok());
  return prefix;
}

TEST(BundleLimits, NumericEntryClaimingMoreThanItsBytesIsRefusedBeforeAllocating) {
  // 16 bytes of data, a shape of 2^38 floats (1 TiB).
  const std::string prefix = BundleWithClaimedShape(
      "numeric", Tensor::FromVector<float>({1, 2, 3, 4}), {int64_t{1} << 38});
  auto reader = BundleReader::Open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<Tensor> t = (*reader)->Lookup("v");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("holds 16 bytes"));
}

TEST(BundleLimits, StringEntryClaimingMoreElementsThanItsBytesIsRefused) {
  // Two strings' bytes, a shape of 2^36 strings (2 TiB of std::string).
  const std::string prefix = BundleWithClaimedShape(
      "strings", Tensor::FromVector<std::string>({"ab", "c"}), {int64_t{1} << 36});
  auto reader = BundleReader::Open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<Tensor> t = (*reader)->Lookup("v");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("too few for the lengths"));
}

TEST(BundleLimits, EntriesOfTheRightSizeStillRead) {
  const std::string prefix =
      BundleWithClaimedShape("fine", Tensor::FromVector<std::string>({"ab", "c"}), {2});
  auto reader = BundleReader::Open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<Tensor> t = (*reader)->Lookup("v");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->data<std::string>()[0], "ab");
  EXPECT_EQ(t->data<std::string>()[1], "c");
}

TEST(BundleLimits, SnappyBlockDeclaringGigabytesIsRefusedWithoutReservingThem) {
  // A varint length of 2^32 then one 7-byte literal: the fuzzer found the 4 GiB reserved
  // before the block was decoded. The error is the same as before; the reservation is now
  // bounded by what the block can expand to (which the fuzz seed of this block checks).
  std::string block = {'\x80', '\x80', '\x80', '\x80', '\x10', static_cast<char>(6 << 2)};
  block += "abcdefg";
  absl::StatusOr<std::string> out = SnappyDecompress(block);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("shorter than declared"));
  // The same literal with its true length decodes.
  std::string exact = {'\x07', static_cast<char>(6 << 2)};
  exact += "abcdefg";
  absl::StatusOr<std::string> fine = SnappyDecompress(exact);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(*fine, "abcdefg");
}

}  // namespace
}  // namespace kiln::import::tf
