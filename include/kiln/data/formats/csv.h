// CSV records as tf.data.experimental.CsvDataset reads them: typed columns, defaults for
// empty fields, RFC 4180 quoting ("" inside a quoted field is one quote; a quoted field may
// span lines), an optional header line and a subset of columns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/tensor.h"
#include "kiln/data/formats/text_line.h"

namespace kiln::data::formats {

struct CsvOptions {
  bool header = false;  // skip the first line of each file
  char field_delim = ',';
  bool use_quote_delim = true;   // false: quotes are ordinary characters
  std::string na_value;          // a field equal to this counts as empty (takes the default)
  std::vector<int> select_cols;  // increasing column indices to keep; empty = all
};

// Parses one record. `record_defaults` has one tensor per (selected) column: its dtype
// (int32, int64, float, double or string) is the column's type; a scalar is the value of an
// empty field, a tensor with 0 elements marks the column required. Returns one scalar per
// column. Errors name `location` ("file.csv:12") and the column.
absl::StatusOr<std::vector<Tensor>> ParseCsvRecord(absl::string_view record,
                                                   const std::vector<Tensor>& record_defaults,
                                                   const CsvOptions& options,
                                                   const std::string& location_for_errors);

// Reads the records of one CSV file (plain, GZIP or ZLIB), handling the header and quoted
// fields that contain line breaks.
class CsvReader {
 public:
  static absl::StatusOr<std::unique_ptr<CsvReader>> Open(const std::string& path,
                                                         Compression compression,
                                                         std::vector<Tensor> record_defaults,
                                                         CsvOptions options,
                                                         size_t buffer_size = 256 << 10);
  static std::unique_ptr<CsvReader> FromString(std::string data, std::vector<Tensor> defaults,
                                               CsvOptions options, std::string name = "<memory>");
  // The next record's columns; OutOfRange at the end of the file.
  absl::Status Read(std::vector<Tensor>* columns);

 private:
  CsvReader(std::unique_ptr<LineReader> lines, std::vector<Tensor> defaults, CsvOptions options)
      : lines_(std::move(lines)), defaults_(std::move(defaults)), options_(std::move(options)) {}
  std::unique_ptr<LineReader> lines_;
  std::vector<Tensor> defaults_;
  CsvOptions options_;
  bool header_skipped_ = false;
  std::string line_, record_;
};

}  // namespace kiln::data::formats
