// Text files read line by line (tf.data.TextLineDataset): "\n" and "\r\n" line ends are
// stripped; a last line without a line end is still a line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/data/formats/input_stream.h"

namespace kiln::data::formats {

class LineReader {
 public:
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(const std::string& path,
                                                          Compression compression,
                                                          size_t buffer_size = 256 << 10);
  static std::unique_ptr<LineReader> FromString(std::string data, Compression compression,
                                                std::string name = "<memory>");

  // The next line; OutOfRange at the end of the file.
  absl::Status Read(std::string* line);
  // 1-based number of the line last returned by Read (0 before the first).
  int64_t line_number() const { return line_number_; }
  const std::string& name() const { return stream_->name(); }

 private:
  explicit LineReader(std::unique_ptr<InputStream> stream) : stream_(std::move(stream)) {}
  std::unique_ptr<InputStream> stream_;
  int64_t line_number_ = 0;
};

}  // namespace kiln::data::formats
