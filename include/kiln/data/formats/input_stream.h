// Sequential byte streams over a file or a string, plain or GZIP/ZLIB compressed. The readers
// of TFRecord, text line and CSV files sit on top of these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::data::formats {

enum class Compression { kNone, kGzip, kZlib };

// "" and "NONE" -> kNone, "GZIP" -> kGzip, "ZLIB" -> kZlib (tf.data's compression_type names).
absl::StatusOr<Compression> ParseCompression(absl::string_view name);
absl::string_view CompressionName(Compression compression);

class InputStream {
 public:
  // Opens `path`; NotFound (naming the path) when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<InputStream>> OpenFile(const std::string& path,
                                                               Compression compression,
                                                               size_t buffer_size = 256 << 10);
  // Reads from `data` (kept by the stream); `name` appears in error messages.
  static std::unique_ptr<InputStream> FromString(std::string data, Compression compression,
                                                 std::string name = "<memory>");
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  // Appends up to `n` bytes to `*out`; returns how many were appended (fewer than `n` only at
  // the end of the data). DataLoss for corrupt compressed data, naming the file.
  absl::StatusOr<size_t> ReadAppend(size_t n, std::string* out);
  // Reads the bytes up to the next '\n' (not included) into `*line`. Returns false at the end
  // of the data when nothing was left to read.
  absl::StatusOr<bool> ReadLine(std::string* line);

  // Bytes of (uncompressed) data consumed so far.
  uint64_t position() const { return position_; }
  const std::string& name() const { return name_; }

 private:
  InputStream() = default;
  // Makes decoded bytes available in [cursor_, cursor_ + available_); false at the end.
  absl::StatusOr<bool> Refill();
  absl::StatusOr<size_t> ReadRaw(char* dst, size_t n);

  std::string name_;
  Compression compression_ = Compression::kNone;
  int fd_ = -1;
  std::string memory_;  // the whole input when reading from a string
  bool memory_consumed_ = false;
  size_t buffer_size_ = 0;
  std::unique_ptr<char[]> buffer_;      // decoded bytes
  std::unique_ptr<char[]> raw_buffer_;  // compressed bytes (kGzip/kZlib)
  const char* cursor_ = nullptr;
  size_t available_ = 0;
  uint64_t position_ = 0;
  uint64_t raw_position_ = 0;  // compressed bytes read, for error messages
  bool eof_ = false;
  struct Zlib;
  std::unique_ptr<Zlib> zlib_;
};

class OutputStream {
 public:
  // Creates (truncates) `path`.
  static absl::StatusOr<std::unique_ptr<OutputStream>> OpenFile(const std::string& path,
                                                                Compression compression,
                                                                size_t buffer_size = 256 << 10);
  ~OutputStream();  // closes; errors at that point are lost, so call Close()
  OutputStream(const OutputStream&) = delete;
  OutputStream& operator=(const OutputStream&) = delete;

  absl::Status Write(absl::string_view data);
  // Pushes buffered bytes to the file (a compressed stream stays open).
  absl::Status Flush();
  // Finishes the compressed stream and closes the file.
  absl::Status Close();

 private:
  OutputStream() = default;
  absl::Status WriteRaw(const char* data, size_t n);
  absl::Status Deflate(const char* data, size_t n, int flush);

  std::string path_;
  Compression compression_ = Compression::kNone;
  int fd_ = -1;
  std::string buffer_;
  size_t buffer_size_ = 0;
  struct Zlib;
  std::unique_ptr<Zlib> zlib_;
};

}  // namespace kiln::data::formats
