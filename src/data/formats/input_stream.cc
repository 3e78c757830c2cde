#include "kiln/data/formats/input_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

namespace kiln::data::formats {
namespace {

// Longest single allocation step when a caller asks for many bytes: a corrupt length field
// must not make us allocate more than the data actually holds.
constexpr size_t kMaxReadStep = 16 << 20;

int WindowBits(Compression compression) {
  return compression == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
}

}  // namespace

absl::StatusOr<Compression> ParseCompression(absl::string_view name) {
  if (name.empty() || name == "NONE") return Compression::kNone;
  if (name == "GZIP") return Compression::kGzip;
  if (name == "ZLIB") return Compression::kZlib;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compression type \"", name, "\" (expected \"\", NONE, GZIP or ZLIB)"));
}

absl::string_view CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "NONE";
    case Compression::kGzip:
      return "GZIP";
    case Compression::kZlib:
      return "ZLIB";
  }
  return "NONE";
}

struct InputStream::Zlib {
  z_stream z{};
  bool initialized = false;
  bool in_stream = false;  // inside a member that has not ended yet
  ~Zlib() {
    if (initialized) inflateEnd(&z);
  }
};

absl::StatusOr<std::unique_ptr<InputStream>> InputStream::OpenFile(const std::string& path,
                                                                   Compression compression,
                                                                   size_t buffer_size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<InputStream> stream(new InputStream());
  stream->name_ = path;
  stream->fd_ = fd;
  stream->compression_ = compression;
  stream->buffer_size_ = std::max<size_t>(buffer_size, 4096);
  stream->buffer_.reset(new char[stream->buffer_size_]);
  if (compression != Compression::kNone) {
    stream->raw_buffer_.reset(new char[stream->buffer_size_]);
    stream->zlib_ = std::make_unique<Zlib>();
  }
  return stream;
}

std::unique_ptr<InputStream> InputStream::FromString(std::string data, Compression compression,
                                                     std::string name) {
  std::unique_ptr<InputStream> stream(new InputStream());
  stream->name_ = std::move(name);
  stream->memory_ = std::move(data);
  stream->compression_ = compression;
  stream->buffer_size_ = 256 << 10;
  if (compression != Compression::kNone) {
    stream->buffer_.reset(new char[stream->buffer_size_]);
    stream->zlib_ = std::make_unique<Zlib>();
  }
  return stream;
}

InputStream::~InputStream() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> InputStream::ReadRaw(char* dst, size_t n) {
  size_t total = 0;
  while (total < n) {
    const ssize_t got = ::read(fd_, dst + total, n - total);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat("read error in ", name_, " at byte offset ",
                                              raw_position_ + total, ": ", std::strerror(errno)));
    }
    if (got == 0) break;
    total += static_cast<size_t>(got);
  }
  raw_position_ += total;
  return total;
}

absl::StatusOr<bool> InputStream::Refill() {
  if (eof_) return false;
  if (compression_ == Compression::kNone) {
    if (fd_ < 0) {
      if (memory_consumed_) {
        eof_ = true;
        return false;
      }
      memory_consumed_ = true;
      cursor_ = memory_.data();
      available_ = memory_.size();
      raw_position_ = memory_.size();
      if (available_ == 0) eof_ = true;
      return available_ > 0;
    }
    KILN_ASSIGN_OR_RETURN(size_t got, ReadRaw(buffer_.get(), buffer_size_));
    cursor_ = buffer_.get();
    available_ = got;
    if (got == 0) eof_ = true;
    return got > 0;
  }

  Zlib& zs = *zlib_;
  if (!zs.initialized) {
    if (inflateInit2(&zs.z, WindowBits(compression_)) != Z_OK) {
      return absl::InternalError(absl::StrCat("zlib inflateInit failed for ", name_));
    }
    zs.initialized = true;
  }
  z_stream& z = zs.z;
  while (true) {
    if (z.avail_in == 0) {
      if (fd_ >= 0) {
        KILN_ASSIGN_OR_RETURN(size_t got, ReadRaw(raw_buffer_.get(), buffer_size_));
        z.next_in = reinterpret_cast<Bytef*>(raw_buffer_.get());
        z.avail_in = static_cast<uInt>(got);
      } else if (!memory_consumed_) {
        memory_consumed_ = true;
        z.next_in = reinterpret_cast<Bytef*>(memory_.data());
        // zlib counts in uInt; inputs beyond 4 GiB in memory are not a use we have.
        z.avail_in = static_cast<uInt>(std::min<size_t>(memory_.size(), UINT32_MAX));
        raw_position_ = z.avail_in;
      }
      if (z.avail_in == 0) {
        eof_ = true;
        if (zs.in_stream) {
          return absl::DataLossError(absl::StrCat("truncated ", CompressionName(compression_),
                                                  " stream in ", name_, " (", raw_position_,
                                                  " compressed bytes)"));
        }
        return false;
      }
    }
    z.next_out = reinterpret_cast<Bytef*>(buffer_.get());
    z.avail_out = static_cast<uInt>(buffer_size_);
    const uint64_t raw_before = raw_position_ - z.avail_in;
    zs.in_stream = true;
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      // Concatenated members (gzip files appended to each other) continue the stream.
      zs.in_stream = false;
      inflateReset(&z);
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      eof_ = true;
      return absl::DataLossError(absl::StrCat("corrupt ", CompressionName(compression_),
                                              " data in ", name_, " near compressed byte offset ",
                                              raw_before, ": ", z.msg ? z.msg : "inflate failed"));
    }
    const size_t produced = buffer_size_ - z.avail_out;
    if (produced > 0) {
      cursor_ = buffer_.get();
      available_ = produced;
      return true;
    }
  }
}

absl::StatusOr<size_t> InputStream::ReadAppend(size_t n, std::string* out) {
  size_t total = 0;
  while (total < n) {
    if (available_ == 0) {
      const size_t remaining = n - total;
      if (compression_ == Compression::kNone && fd_ >= 0 && remaining >= buffer_size_ && !eof_) {
        // Large reads go straight into the destination, skipping the buffer copy.
        const size_t step = std::min(remaining, kMaxReadStep);
        const size_t old_size = out->size();
        out->resize(old_size + step);
        absl::StatusOr<size_t> got = ReadRaw(out->data() + old_size, step);
        if (!got.ok()) {
          out->resize(old_size);
          return got.status();
        }
        out->resize(old_size + *got);
        total += *got;
        position_ += *got;
        if (*got < step) {
          eof_ = true;
          break;
        }
        continue;
      }
      KILN_ASSIGN_OR_RETURN(bool more, Refill());
      if (!more) break;
    }
    const size_t take = std::min(available_, n - total);
    out->append(cursor_, take);
    cursor_ += take;
    available_ -= take;
    total += take;
    position_ += take;
  }
  return total;
}

absl::StatusOr<bool> InputStream::ReadLine(std::string* line) {
  line->clear();
  bool any = false;
  while (true) {
    if (available_ == 0) {
      KILN_ASSIGN_OR_RETURN(bool more, Refill());
      if (!more) return any;
    }
    any = true;
    const void* newline = std::memchr(cursor_, '\n', available_);
    if (newline != nullptr) {
      const size_t take = static_cast<const char*>(newline) - cursor_;
      line->append(cursor_, take);
      cursor_ += take + 1;
      available_ -= take + 1;
      position_ += take + 1;
      return true;
    }
    line->append(cursor_, available_);
    position_ += available_;
    cursor_ += available_;
    available_ = 0;
  }
}

// ---------------------------------------------------------------------------------------------

struct OutputStream::Zlib {
  z_stream z{};
  bool initialized = false;
  std::unique_ptr<char[]> out;
  size_t out_size = 0;
  ~Zlib() {
    if (initialized) deflateEnd(&z);
  }
};

absl::StatusOr<std::unique_ptr<OutputStream>> OutputStream::OpenFile(const std::string& path,
                                                                     Compression compression,
                                                                     size_t buffer_size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<OutputStream> stream(new OutputStream());
  stream->path_ = path;
  stream->fd_ = fd;
  stream->compression_ = compression;
  stream->buffer_size_ = std::max<size_t>(buffer_size, 4096);
  stream->buffer_.reserve(stream->buffer_size_);
  if (compression != Compression::kNone) {
    auto zs = std::make_unique<Zlib>();
    if (deflateInit2(&zs->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, WindowBits(compression), 8,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("zlib deflateInit failed for ", path));
    }
    zs->initialized = true;
    zs->out_size = stream->buffer_size_;
    zs->out.reset(new char[zs->out_size]);
    stream->zlib_ = std::move(zs);
  }
  return stream;
}

OutputStream::~OutputStream() { Close().IgnoreError(); }

absl::Status OutputStream::WriteRaw(const char* data, size_t n) {
  while (n > 0) {
    const ssize_t wrote = ::write(fd_, data, n);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(
          absl::StrCat("write to ", path_, " failed: ", std::strerror(errno)));
    }
    data += wrote;
    n -= static_cast<size_t>(wrote);
  }
  return absl::OkStatus();
}

absl::Status OutputStream::Deflate(const char* data, size_t n, int flush) {
  z_stream& z = zlib_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = static_cast<uInt>(n);
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(zlib_->out.get());
    z.avail_out = static_cast<uInt>(zlib_->out_size);
    const int rc = deflate(&z, flush);
    if (rc == Z_STREAM_ERROR) {
      return absl::InternalError(absl::StrCat("zlib deflate failed for ", path_));
    }
    KILN_RETURN_IF_ERROR(WriteRaw(zlib_->out.get(), zlib_->out_size - z.avail_out));
    if (flush == Z_FINISH ? rc == Z_STREAM_END : (z.avail_in == 0 && z.avail_out != 0)) break;
  }
  return absl::OkStatus();
}

absl::Status OutputStream::Write(absl::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
  if (buffer_.size() + data.size() > buffer_size_) {
    KILN_RETURN_IF_ERROR(Flush());
    if (data.size() >= buffer_size_) {
      return zlib_ ? Deflate(data.data(), data.size(), Z_NO_FLUSH)
                   : WriteRaw(data.data(), data.size());
    }
  }
  buffer_.append(data.data(), data.size());
  return absl::OkStatus();
}

absl::Status OutputStream::Flush() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status status = zlib_ ? Deflate(buffer_.data(), buffer_.size(), Z_NO_FLUSH)
                              : WriteRaw(buffer_.data(), buffer_.size());
  buffer_.clear();
  return status;
}

absl::Status OutputStream::Close() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status status = Flush();
  if (status.ok() && zlib_) status = Deflate(nullptr, 0, Z_FINISH);
  if (::close(fd_) != 0 && status.ok()) {
    status =
        absl::DataLossError(absl::StrCat("close of ", path_, " failed: ", std::strerror(errno)));
  }
  fd_ = -1;
  return status;
}

}  // namespace kiln::data::formats
