// CSV parsing of arbitrary records and files with typed columns, quoting on and off.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/data/formats/csv.h"

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kiln::data::formats::CsvOptions;
using kiln::data::formats::CsvReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<Tensor> defaults = {Tensor::Scalar<int32_t>(0), Tensor(DType::kInt64, Shape{0}),
                                        Tensor::Scalar(1.f), Tensor::Scalar(2.0),
                                        Tensor::Scalar(std::string("x"))};
  CsvOptions options;
  options.use_quote_delim = (data[0] & 1) != 0;
  options.header = (data[0] & 2) != 0;
  options.field_delim = (data[0] & 4) != 0 ? ';' : ',';
  if ((data[0] & 8) != 0) options.select_cols = {0, 2, 3, 5, 6};
  options.na_value = (data[0] & 16) != 0 ? "NA" : "";
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)kiln::data::formats::ParseCsvRecord(text, defaults, options, "fuzz:1");
  auto reader = CsvReader::FromString(text, defaults, options, "fuzz.csv");
  std::vector<Tensor> row;
  for (int i = 0; i < 10000; ++i) {
    absl::Status status = reader->Read(&row);
    if (absl::IsOutOfRange(status)) break;
  }
  return 0;
}
