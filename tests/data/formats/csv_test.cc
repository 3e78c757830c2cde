#include "kiln/data/formats/csv.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kiln::data::formats {
namespace {

Tensor Required(DType dtype) { return Tensor(dtype, Shape{0}); }

TEST(CsvTest, TypedColumnsAndDefaults) {
  std::vector<Tensor> defaults = {Tensor::Scalar<int32_t>(-1), Tensor::Scalar<int64_t>(0),
                                  Tensor::Scalar(0.5f), Tensor::Scalar(2.0),
                                  Tensor::Scalar(std::string("none"))};
  auto out = ParseCsvRecord("7,123456789012,1.25,,", defaults, {}, "f.csv:1");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 5u);
  EXPECT_TRUE(TensorsEqual((*out)[0], Tensor::Scalar<int32_t>(7)));
  EXPECT_TRUE(TensorsEqual((*out)[1], Tensor::Scalar<int64_t>(123456789012)));
  EXPECT_TRUE(TensorsEqual((*out)[2], Tensor::Scalar(1.25f)));
  EXPECT_TRUE(TensorsEqual((*out)[3], Tensor::Scalar(2.0)));
  EXPECT_TRUE(TensorsEqual((*out)[4], Tensor::Scalar(std::string("none"))));
}

TEST(CsvTest, QuotingWithEscapedQuotesAndDelimiters) {
  std::vector<Tensor> defaults(3, Required(DType::kString));
  auto out = ParseCsvRecord(R"("a,b","say ""hi""",plain)", defaults, {}, "q.csv:3");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*(*out)[0].data<std::string>(), "a,b");
  EXPECT_EQ(*(*out)[1].data<std::string>(), "say \"hi\"");
  EXPECT_EQ(*(*out)[2].data<std::string>(), "plain");

  CsvOptions no_quotes;
  no_quotes.use_quote_delim = false;
  out = ParseCsvRecord(R"("x",y"z,w)", defaults, no_quotes, "q.csv:4");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*(*out)[0].data<std::string>(), "\"x\"");
  EXPECT_EQ(*(*out)[1].data<std::string>(), "y\"z");
}

TEST(CsvTest, DelimiterNaValueAndSelectCols) {
  CsvOptions options;
  options.field_delim = '\t';
  options.na_value = "NA";
  options.select_cols = {1, 3};
  std::vector<Tensor> defaults = {Tensor::Scalar(9.f), Required(DType::kInt64)};
  auto out = ParseCsvRecord("skip\tNA\tskip\t42\tignored", defaults, options, "t.tsv:2");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(TensorsEqual((*out)[0], Tensor::Scalar(9.f)));
  EXPECT_TRUE(TensorsEqual((*out)[1], Tensor::Scalar<int64_t>(42)));
}

TEST(CsvTest, ErrorsNameLocationAndColumn) {
  std::vector<Tensor> defaults = {Required(DType::kInt32), Tensor::Scalar(1.f)};
  auto missing = ParseCsvRecord(",2", defaults, {}, "data.csv:17");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "data.csv:17")) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "column 0 is required"));

  auto bad_number = ParseCsvRecord("1,abc", defaults, {}, "data.csv:18");
  ASSERT_FALSE(bad_number.ok());
  EXPECT_TRUE(absl::StrContains(bad_number.status().message(), "column 1 is not a valid float"))
      << bad_number.status();

  auto too_many = ParseCsvRecord("1,2,3", defaults, {}, "data.csv:19");
  ASSERT_FALSE(too_many.ok());
  EXPECT_TRUE(absl::StrContains(too_many.status().message(), "expected 2 fields"));
  auto too_few = ParseCsvRecord("1", defaults, {}, "data.csv:20");
  ASSERT_FALSE(too_few.ok());
  EXPECT_TRUE(absl::StrContains(too_few.status().message(), "has 1")) << too_few.status();

  std::vector<Tensor> strings(2, Required(DType::kString));
  EXPECT_FALSE(ParseCsvRecord(R"("open,x)", strings, {}, "q:1").ok());
  EXPECT_FALSE(ParseCsvRecord(R"("a"b,x)", strings, {}, "q:1").ok());
  EXPECT_FALSE(ParseCsvRecord(R"(a"b,x)", strings, {}, "q:1").ok());
  EXPECT_FALSE(
      ParseCsvRecord("2147483648,x", {Required(DType::kInt32), Required(DType::kString)}, {}, "q:1")
          .ok());
}

TEST(CsvTest, ReaderSkipsHeaderAndJoinsQuotedLineBreaks) {
  CsvOptions options;
  options.header = true;
  auto reader =
      CsvReader::FromString("id,text\r\n1,\"two\nlines\"\n2,plain\n3,\"broken\n",
                            {Required(DType::kInt64), Required(DType::kString)}, options, "r.csv");
  std::vector<Tensor> row;
  ASSERT_TRUE(reader->Read(&row).ok());
  EXPECT_EQ(*row[1].data<std::string>(), "two\nlines");
  ASSERT_TRUE(reader->Read(&row).ok());
  EXPECT_TRUE(TensorsEqual(row[0], Tensor::Scalar<int64_t>(2)));
  absl::Status status = reader->Read(&row);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "r.csv:5")) << status;
}

}  // namespace
}  // namespace kiln::data::formats
