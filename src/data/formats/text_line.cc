#include "kiln/data/formats/text_line.h"

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

namespace kiln::data::formats {

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path,
                                                             Compression compression,
                                                             size_t buffer_size) {
  KILN_ASSIGN_OR_RETURN(auto stream, InputStream::OpenFile(path, compression, buffer_size));
  return std::unique_ptr<LineReader>(new LineReader(std::move(stream)));
}

std::unique_ptr<LineReader> LineReader::FromString(std::string data, Compression compression,
                                                   std::string name) {
  return std::unique_ptr<LineReader>(
      new LineReader(InputStream::FromString(std::move(data), compression, std::move(name))));
}

absl::Status LineReader::Read(std::string* line) {
  KILN_ASSIGN_OR_RETURN(bool got, stream_->ReadLine(line));
  if (!got) return absl::OutOfRangeError(absl::StrCat("end of ", stream_->name()));
  if (!line->empty() && line->back() == '\r') line->pop_back();
  ++line_number_;
  return absl::OkStatus();
}

}  // namespace kiln::data::formats
