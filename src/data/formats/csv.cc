#include "kiln/data/formats/csv.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

namespace kiln::data::formats {
namespace {

absl::Status CsvError(const std::string& location, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(location, ": ", message));
}

// Converts one field to a scalar of the column's type (the field is known to be non-empty).
absl::StatusOr<Tensor> ConvertField(absl::string_view field, DType dtype, int column,
                                    const std::string& location) {
  auto bad = [&]() {
    return CsvError(location, absl::StrCat("column ", column, " is not a valid ", DTypeName(dtype),
                                           ": \"", field, "\""));
  };
  switch (dtype) {
    case DType::kInt32: {
      int32_t v;
      if (!absl::SimpleAtoi(field, &v)) return bad();
      return Tensor::Scalar(v);
    }
    case DType::kInt64: {
      int64_t v;
      if (!absl::SimpleAtoi(field, &v)) return bad();
      return Tensor::Scalar(v);
    }
    case DType::kFloat32: {
      float v;
      if (!absl::SimpleAtof(field, &v)) return bad();
      return Tensor::Scalar(v);
    }
    case DType::kFloat64: {
      double v;
      if (!absl::SimpleAtod(field, &v)) return bad();
      return Tensor::Scalar(v);
    }
    case DType::kString:
      return Tensor::Scalar(std::string(field));
    default:
      return CsvError(location,
                      absl::StrCat("column ", column, " has unsupported type ", DTypeName(dtype),
                                   " (int32, int64, float, double or string)"));
  }
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ParseCsvRecord(absl::string_view record,
                                                   const std::vector<Tensor>& record_defaults,
                                                   const CsvOptions& options,
                                                   const std::string& location) {
  const size_t num_outputs = record_defaults.size();
  if (!options.select_cols.empty()) {
    if (options.select_cols.size() != num_outputs) {
      return CsvError(location, absl::StrCat("select_cols has ", options.select_cols.size(),
                                             " columns but record_defaults has ", num_outputs));
    }
    for (size_t i = 0; i < options.select_cols.size(); ++i) {
      if (options.select_cols[i] < 0 ||
          (i > 0 && options.select_cols[i] <= options.select_cols[i - 1])) {
        return CsvError(location, "select_cols must be non-negative and strictly increasing");
      }
    }
  }
  std::vector<Tensor> out;
  out.reserve(num_outputs);
  std::string unquoted;
  size_t pos = 0;
  int column = 0;
  size_t next_output = 0;
  // An empty line is one empty field, as in TensorFlow.
  bool record_done = num_outputs == 0;
  while (!record_done) {
    // Extract the field starting at `pos`.
    absl::string_view field;
    bool quoted = false;
    if (options.use_quote_delim && pos < record.size() && record[pos] == '"') {
      quoted = true;
      unquoted.clear();
      size_t i = pos + 1;
      while (true) {
        if (i >= record.size()) {
          return CsvError(location,
                          absl::StrCat("column ", column, ": quoted field is not closed"));
        }
        if (record[i] == '"') {
          if (i + 1 < record.size() && record[i + 1] == '"') {
            unquoted.push_back('"');
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        unquoted.push_back(record[i++]);
      }
      if (i < record.size() && record[i] != options.field_delim) {
        return CsvError(location, absl::StrCat("column ", column,
                                               ": a quote inside a quoted field must be doubled"));
      }
      field = unquoted;
      pos = i;
    } else {
      size_t end = record.find(options.field_delim, pos);
      if (end == absl::string_view::npos) end = record.size();
      field = record.substr(pos, end - pos);
      if (options.use_quote_delim && field.find('"') != absl::string_view::npos) {
        return CsvError(
            location,
            absl::StrCat("column ", column, ": unquoted field contains a quote: \"", field, "\""));
      }
      pos = end;
    }
    if (pos >= record.size()) {
      record_done = true;
    } else {
      ++pos;  // the delimiter
    }

    const bool selected =
        options.select_cols.empty()
            ? true
            : (next_output < num_outputs && options.select_cols[next_output] == column);
    if (selected) {
      if (next_output >= num_outputs) {
        return CsvError(location,
                        absl::StrCat("expected ", num_outputs, " fields but the record has more"));
      }
      const Tensor& fallback = record_defaults[next_output];
      const bool empty =
          field.empty() || (!quoted && !options.na_value.empty() && field == options.na_value);
      if (empty) {
        if (fallback.num_elements() == 0) {
          return CsvError(location,
                          absl::StrCat("column ", column, " is required but the field is empty"));
        }
        if (fallback.num_elements() != 1) {
          return CsvError(location,
                          absl::StrCat("record_defaults[", next_output,
                                       "] must hold 0 or 1 values, not ", fallback.num_elements()));
        }
        KILN_ASSIGN_OR_RETURN(Tensor value, fallback.Reshape(Shape{}));
        out.push_back(std::move(value));
      } else {
        KILN_ASSIGN_OR_RETURN(Tensor value,
                              ConvertField(field, fallback.dtype(), column, location));
        out.push_back(std::move(value));
      }
      ++next_output;
    }
    ++column;
    if (!options.select_cols.empty() && next_output == num_outputs) break;  // rest unused
  }
  if (next_output < num_outputs) {
    return CsvError(
        location,
        absl::StrCat("expected ",
                     options.select_cols.empty() ? num_outputs : options.select_cols.back() + 1,
                     " fields but the record has ", column));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CsvReader>> CsvReader::Open(const std::string& path,
                                                           Compression compression,
                                                           std::vector<Tensor> record_defaults,
                                                           CsvOptions options, size_t buffer_size) {
  KILN_ASSIGN_OR_RETURN(auto lines, LineReader::Open(path, compression, buffer_size));
  return std::unique_ptr<CsvReader>(
      new CsvReader(std::move(lines), std::move(record_defaults), std::move(options)));
}

std::unique_ptr<CsvReader> CsvReader::FromString(std::string data, std::vector<Tensor> defaults,
                                                 CsvOptions options, std::string name) {
  return std::unique_ptr<CsvReader>(
      new CsvReader(LineReader::FromString(std::move(data), Compression::kNone, std::move(name)),
                    std::move(defaults), std::move(options)));
}

absl::Status CsvReader::Read(std::vector<Tensor>* columns) {
  if (options_.header && !header_skipped_) {
    header_skipped_ = true;
    absl::Status status = lines_->Read(&line_);
    if (!status.ok()) return status;  // OutOfRange for an empty file
  }
  KILN_RETURN_IF_ERROR(lines_->Read(&record_));
  const int64_t first_line = lines_->line_number();
  if (options_.use_quote_delim) {
    // An odd number of quotes means a quoted field continues on the next line.
    while (std::count(record_.begin(), record_.end(), '"') % 2 == 1) {
      absl::Status status = lines_->Read(&line_);
      if (absl::IsOutOfRange(status)) {
        return CsvError(absl::StrCat(lines_->name(), ":", first_line),
                        "quoted field is not closed before the end of the file");
      }
      KILN_RETURN_IF_ERROR(status);
      record_.push_back('\n');
      record_.append(line_);
    }
  }
  KILN_ASSIGN_OR_RETURN(*columns, ParseCsvRecord(record_, defaults_, options_,
                                                 absl::StrCat(lines_->name(), ":", first_line)));
  return absl::OkStatus();
}

}  // namespace kiln::data::formats
