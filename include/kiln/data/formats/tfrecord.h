// TFRecord files: a sequence of records, each stored as
//   uint64 length (little-endian) | uint32 masked CRC32C of the length bytes |
//   length bytes of data | uint32 masked CRC32C of the data
// optionally inside one GZIP or ZLIB stream. Both CRCs are verified on read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/data/formats/input_stream.h"

namespace kiln::data::formats {

class RecordReader {
 public:
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(const std::string& path,
                                                            Compression compression,
                                                            size_t buffer_size = 256 << 10);
  // Reads records from bytes in memory (for instance a file already loaded).
  static std::unique_ptr<RecordReader> FromString(std::string data, Compression compression,
                                                  std::string name = "<memory>");

  // The next record into `*record` (its capacity is reused). OutOfRange at a clean end of the
  // file; DataLoss naming the file and the record's byte offset for a CRC mismatch or a
  // truncated record.
  absl::Status Read(std::string* record);

  // Byte offset (in the uncompressed stream) of the next record.
  uint64_t offset() const { return offset_; }
  const std::string& name() const { return stream_->name(); }

 private:
  explicit RecordReader(std::unique_ptr<InputStream> stream) : stream_(std::move(stream)) {}
  absl::Status Corrupt(absl::string_view what) const;

  std::unique_ptr<InputStream> stream_;
  uint64_t offset_ = 0;
  std::string header_;
};

class RecordWriter {
 public:
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Open(const std::string& path,
                                                            Compression compression);
  absl::Status Write(absl::string_view record);
  absl::Status Flush();
  absl::Status Close();

 private:
  explicit RecordWriter(std::unique_ptr<OutputStream> stream) : stream_(std::move(stream)) {}
  std::unique_ptr<OutputStream> stream_;
};

// Every record of a TFRecord image held in memory (uncompressed or compressed).
absl::StatusOr<std::vector<std::string>> ParseRecords(absl::string_view data,
                                                      Compression compression = Compression::kNone,
                                                      absl::string_view name = "<memory>");
// One record framed as in an uncompressed TFRecord file (concatenate several for a file).
std::string SerializeRecord(absl::string_view record);

}  // namespace kiln::data::formats
