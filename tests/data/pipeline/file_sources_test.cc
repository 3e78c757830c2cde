// TFRecord, TextLine and CSV datasets over real files written by the formats writers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "kiln/data/formats/tfrecord.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using ::kiln::data::testing::CollectAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Strings(const Dataset& ds) {
  std::vector<std::string> out;
  auto all = CollectAll(ds);
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok()) return out;
  for (const Element& e : *all) out.push_back(*e[0].data<std::string>());
  return out;
}

std::string WriteRecords(const std::string& name, const std::vector<std::string>& records,
                         formats::Compression c = formats::Compression::kNone) {
  const std::string path = testing::TempPath(name);
  auto writer = formats::RecordWriter::Open(path, c);
  EXPECT_TRUE(writer.ok());
  for (const auto& r : records) EXPECT_TRUE((*writer)->Write(r).ok());
  EXPECT_TRUE((*writer)->Close().ok());
  return path;
}

TEST(TFRecordDatasetTest, ReadsFilesInOrderAndInParallel) {
  const std::string a = WriteRecords("a.tfrecord", {"a0", "a1", "a2"});
  const std::string b = WriteRecords("b.tfrecord.gz", {"b0", "b1"}, formats::Compression::kGzip);
  const std::string c = WriteRecords("c.tfrecord", {"c0", "c1"});
  Element files({Tensor::FromVector<std::string>({a, c})});
  EXPECT_THAT(Strings(Dataset::TFRecord(files)), ElementsAre("a0", "a1", "a2", "c0", "c1"));
  // Parallel reads interleave one record from each file in turn (deterministic).
  EXPECT_THAT(Strings(Dataset::TFRecord(files, "", 1 << 16, 2)),
              ElementsAre("a0", "c0", "a1", "c1", "a2"));
  EXPECT_THAT(Strings(Dataset::TFRecord(Element({Tensor::Scalar<std::string>(b)}), "GZIP")),
              ElementsAre("b0", "b1"));
  for (const auto& p : {a, b, c}) std::remove(p.c_str());
}

TEST(TFRecordDatasetTest, ErrorsNameTheFile) {
  const std::string missing = testing::TempPath("missing.tfrecord");
  auto status = CollectAll(Dataset::TFRecord(Element({Tensor::Scalar<std::string>(missing)})))
                    .status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(missing));
  // A truncated record: DataLoss naming the file and the offset; IgnoreErrors skips it.
  const std::string path = WriteRecords("trunc.tfrecord", {"hello", "world"});
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes.substr(0, bytes.size() - 3);
  }
  Dataset ds = Dataset::TFRecord(Element({Tensor::Scalar<std::string>(path)}));
  auto it = *ds.MakeIterator();
  EXPECT_EQ(*(**it->GetNext())[0].data<std::string>(), "hello");
  auto bad = it->GetNext();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(path));
  EXPECT_THAT(Strings(ds.IgnoreErrors()), ElementsAre("hello"));
  EXPECT_FALSE(Dataset::TFRecord(Element({Tensor::Scalar<std::string>(path)}), "LZMA").ok());
  std::remove(path.c_str());
}

TEST(TextLineDatasetTest, Lines) {
  const std::string path = testing::TempPath("lines.txt");
  std::ofstream(path) << "first\nsecond\r\nthird";
  EXPECT_THAT(Strings(Dataset::TextLine(Element({Tensor::Scalar<std::string>(path)}))),
              ElementsAre("first", "second", "third"));
  std::remove(path.c_str());
}

TEST(CsvDatasetTest, TypedColumnsHeaderDefaultsAndQuotes) {
  const std::string path = testing::TempPath("table.csv");
  std::ofstream(path) << "id,name,score\n1,\"a, b\",0.5\n2,,\n";
  Dataset::CsvOptions options;
  options.header = true;
  options.record_defaults = {Tensor(DType::kInt64, Shape{0}), Tensor::Scalar<std::string>("?"),
                             Tensor::Scalar<float>(-1.0f)};
  auto rows = *CollectAll(Dataset::Csv(Element({Tensor::Scalar<std::string>(path)}), options));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(*rows[0][0].data<int64_t>(), 1);
  EXPECT_EQ(*rows[0][1].data<std::string>(), "a, b");
  EXPECT_EQ(*rows[0][2].data<float>(), 0.5f);
  EXPECT_EQ(*rows[1][1].data<std::string>(), "?");
  EXPECT_EQ(*rows[1][2].data<float>(), -1.0f);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::data
