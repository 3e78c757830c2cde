#include "kiln/data/formats/tfrecord.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/core/coding.h"
#include "kiln/core/status.h"

namespace kiln::data::formats {
namespace {

constexpr size_t kHeaderSize = sizeof(uint64_t) + sizeof(uint32_t);
constexpr size_t kFooterSize = sizeof(uint32_t);
constexpr uint64_t kMaxReserve = 1 << 20;

void EncodeHeader(absl::string_view record, std::string* header) {
  header->clear();
  coding::PutFixed64(header, record.size());
  coding::PutFixed32(header, crc32c::Mask(crc32c::Value(header->data(), 8)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path,
                                                                 Compression compression,
                                                                 size_t buffer_size) {
  KILN_ASSIGN_OR_RETURN(auto stream, InputStream::OpenFile(path, compression, buffer_size));
  return std::unique_ptr<RecordReader>(new RecordReader(std::move(stream)));
}

std::unique_ptr<RecordReader> RecordReader::FromString(std::string data, Compression compression,
                                                       std::string name) {
  return std::unique_ptr<RecordReader>(
      new RecordReader(InputStream::FromString(std::move(data), compression, std::move(name))));
}

absl::Status RecordReader::Corrupt(absl::string_view what) const {
  return absl::DataLossError(
      absl::StrCat(what, " in TFRecord file ", stream_->name(), " at byte offset ", offset_));
}

absl::Status RecordReader::Read(std::string* record) {
  header_.clear();
  KILN_ASSIGN_OR_RETURN(size_t got, stream_->ReadAppend(kHeaderSize, &header_));
  if (got == 0) return absl::OutOfRangeError(absl::StrCat("end of ", stream_->name()));
  if (got < kHeaderSize) {
    return Corrupt(absl::StrCat("truncated record header (", got, " of ", kHeaderSize, " bytes)"));
  }
  const uint64_t length = coding::DecodeFixed64(header_.data());
  if (crc32c::Unmask(coding::DecodeFixed32(header_.data() + 8)) !=
      crc32c::Value(header_.data(), 8)) {
    return Corrupt("corrupted record: length CRC mismatch");
  }
  record->clear();
  // One allocation of the right size instead of the string's doubling steps. The length has
  // passed its CRC, but a crafted one can still be huge: beyond 1 MiB the string grows as the
  // bytes actually arrive (ReadAppend reads large records in bounded steps).
  record->reserve(std::min<uint64_t>(length, kMaxReserve));
  KILN_ASSIGN_OR_RETURN(got, stream_->ReadAppend(length, record));
  if (got < length) {
    return Corrupt(absl::StrCat("truncated record (", got, " of ", length, " data bytes)"));
  }
  header_.clear();
  KILN_ASSIGN_OR_RETURN(got, stream_->ReadAppend(kFooterSize, &header_));
  if (got < kFooterSize) return Corrupt("truncated record (data CRC missing)");
  if (crc32c::Unmask(coding::DecodeFixed32(header_.data())) !=
      crc32c::Value(record->data(), record->size())) {
    return Corrupt("corrupted record: data CRC mismatch");
  }
  offset_ = stream_->position();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Open(const std::string& path,
                                                                 Compression compression) {
  KILN_ASSIGN_OR_RETURN(auto stream, OutputStream::OpenFile(path, compression));
  return std::unique_ptr<RecordWriter>(new RecordWriter(std::move(stream)));
}

absl::Status RecordWriter::Write(absl::string_view record) {
  std::string frame;  // 12 bytes at most: held in the string itself, no allocation
  EncodeHeader(record, &frame);
  KILN_RETURN_IF_ERROR(stream_->Write(frame));
  KILN_RETURN_IF_ERROR(stream_->Write(record));
  frame.clear();
  coding::PutFixed32(&frame, crc32c::Mask(crc32c::Value(record.data(), record.size())));
  return stream_->Write(frame);
}

absl::Status RecordWriter::Flush() { return stream_->Flush(); }
absl::Status RecordWriter::Close() { return stream_->Close(); }

absl::StatusOr<std::vector<std::string>> ParseRecords(absl::string_view data,
                                                      Compression compression,
                                                      absl::string_view name) {
  auto reader = RecordReader::FromString(std::string(data), compression, std::string(name));
  std::vector<std::string> records;
  std::string record;
  while (true) {
    absl::Status status = reader->Read(&record);
    if (absl::IsOutOfRange(status)) break;
    KILN_RETURN_IF_ERROR(status);
    records.push_back(record);
  }
  return records;
}

std::string SerializeRecord(absl::string_view record) {
  std::string out;
  EncodeHeader(record, &out);
  out.append(record.data(), record.size());
  coding::PutFixed32(&out, crc32c::Mask(crc32c::Value(record.data(), record.size())));
  return out;
}

}  // namespace kiln::data::formats
