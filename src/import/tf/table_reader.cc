#include "import/tf/table_reader.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/coding.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {
namespace {

using coding::DecodeFixed32;
using coding::GetVarint64;
using coding::PutFixed32;
using coding::PutVarint64;

constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ull;
constexpr size_t kFooterSize = 48;
constexpr size_t kBlockTrailerSize = 5;  // compression type byte + masked CRC32C

}  // namespace

absl::StatusOr<std::string> SnappyDecompress(absl::string_view in) {
  uint64_t length;
  if (!GetVarint64(&in, &length) || length > (uint64_t{1} << 32)) {
    return absl::DataLossError("bad uncompressed length");
  }
  std::string out;
  // The declared length is a varint anyone can write; what the input can really expand to is
  // bounded (a 3-byte copy writes at most 64 bytes), so a corrupt length cannot make us
  // allocate 4 GiB for a few bytes of block.
  out.reserve(std::min<uint64_t>(length, uint64_t{in.size()} * 22));
  while (!in.empty()) {
    const uint8_t tag = static_cast<uint8_t>(in[0]);
    in.remove_prefix(1);
    size_t len, offset = 0;
    switch (tag & 3) {
      case 0: {  // literal
        len = (tag >> 2) + 1;
        if ((tag >> 2) >= 60) {
          const int extra = (tag >> 2) - 59;
          if (in.size() < static_cast<size_t>(extra)) return absl::DataLossError("truncated");
          uint32_t v = 0;
          for (int i = 0; i < extra; ++i)
            v |= static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << (8 * i);
          in.remove_prefix(extra);
          len = static_cast<size_t>(v) + 1;
        }
        if (in.size() < len) return absl::DataLossError("truncated literal");
        out.append(in.data(), len);
        in.remove_prefix(len);
        continue;
      }
      case 1:
        if (in.empty()) return absl::DataLossError("truncated copy");
        len = ((tag >> 2) & 7) + 4;
        offset = (static_cast<size_t>(tag >> 5) << 8) | static_cast<uint8_t>(in[0]);
        in.remove_prefix(1);
        break;
      case 2:
        if (in.size() < 2) return absl::DataLossError("truncated copy");
        len = (tag >> 2) + 1;
        offset =
            static_cast<uint8_t>(in[0]) | (static_cast<size_t>(static_cast<uint8_t>(in[1])) << 8);
        in.remove_prefix(2);
        break;
      default:
        if (in.size() < 4) return absl::DataLossError("truncated copy");
        len = (tag >> 2) + 1;
        offset = DecodeFixed32(in.data());
        in.remove_prefix(4);
        break;
    }
    if (offset == 0 || offset > out.size()) return absl::DataLossError("bad copy offset");
    if (out.size() + len > length) return absl::DataLossError("output longer than declared");
    const size_t start = out.size() - offset;
    for (size_t i = 0; i < len; ++i) out.push_back(out[start + i]);  // may overlap
  }
  if (out.size() != length) return absl::DataLossError("output shorter than declared");
  return out;
}

namespace {

struct BlockHandle {
  uint64_t offset = 0;
  uint64_t size = 0;
};

bool DecodeBlockHandle(absl::string_view* in, BlockHandle* handle) {
  return GetVarint64(in, &handle->offset) && GetVarint64(in, &handle->size);
}

class TableParser {
 public:
  TableParser(absl::string_view contents, absl::string_view file_name)
      : contents_(contents), file_name_(file_name) {}

  absl::Status Error(absl::string_view what, uint64_t offset) const {
    return absl::DataLossError(
        absl::StrCat(file_name_, ": corrupt table at offset ", offset, ": ", what));
  }

  // The block's contents (without trailer), after checking its CRC and compression type.
  absl::StatusOr<absl::string_view> ReadBlock(const BlockHandle& handle) const {
    // In this order, so that no sum wraps around: a size near 2^64 plus the trailer would.
    if (handle.offset > contents_.size() || handle.size > contents_.size() - handle.offset ||
        kBlockTrailerSize > contents_.size() - handle.offset - handle.size) {
      return Error(absl::StrCat("block of ", handle.size, " bytes runs past the end of the file"),
                   handle.offset);
    }
    absl::string_view block = contents_.substr(handle.offset, handle.size);
    const char* trailer = contents_.data() + handle.offset + handle.size;
    const uint8_t type = static_cast<uint8_t>(trailer[0]);
    const uint32_t stored = crc32c::Unmask(DecodeFixed32(trailer + 1));
    const uint32_t actual = crc32c::Extend(crc32c::Value(block.data(), block.size()), trailer, 1);
    if (stored != actual) return Error("block checksum mismatch", handle.offset);
    if (type == 1) {
      auto decompressed = SnappyDecompress(block);
      if (!decompressed.ok()) {
        return Error(absl::StrCat("bad snappy block: ", decompressed.status().message()),
                     handle.offset);
      }
      decompressed_.push_back(std::make_unique<std::string>(*std::move(decompressed)));
      return absl::string_view(*decompressed_.back());
    }
    if (type != 0) {
      return absl::UnimplementedError(absl::StrCat(file_name_, ": block at offset ", handle.offset,
                                                   " has compression type ", type,
                                                   "; only none and snappy are supported"));
    }
    return block;
  }

  // Appends every entry of `block` (read at `offset`) to `entries`.
  absl::Status ParseBlock(absl::string_view block, uint64_t offset,
                          std::vector<std::pair<std::string, std::string>>* entries) const {
    if (block.size() < 4) return Error("block shorter than its restart count", offset);
    const uint32_t num_restarts = DecodeFixed32(block.data() + block.size() - 4);
    if (num_restarts > (block.size() - 4) / 4) {
      return Error(absl::StrCat("restart count ", num_restarts, " too large"), offset);
    }
    const size_t data_end = block.size() - 4 - 4 * static_cast<size_t>(num_restarts);
    absl::string_view in = block.substr(0, data_end);
    std::string key;
    while (!in.empty()) {
      const uint64_t entry_offset = offset + (data_end - in.size());
      uint64_t shared, non_shared, value_length;
      if (!GetVarint64(&in, &shared) || !GetVarint64(&in, &non_shared) ||
          !GetVarint64(&in, &value_length)) {
        return Error("bad entry header", entry_offset);
      }
      if (shared > key.size())
        return Error("shared key prefix longer than previous key", entry_offset);
      if (non_shared > in.size() || value_length > in.size() - non_shared) {
        return Error("entry runs past the end of its block", entry_offset);
      }
      key.resize(shared);
      key.append(in.data(), non_shared);
      in.remove_prefix(non_shared);
      entries->emplace_back(key, std::string(in.substr(0, value_length)));
      in.remove_prefix(value_length);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, std::string>> Parse() const {
    if (contents_.size() < kFooterSize) {
      return Error(absl::StrCat("file of ", contents_.size(),
                                " bytes is shorter than the 48-byte table footer"),
                   0);
    }
    const size_t footer_offset = contents_.size() - kFooterSize;
    absl::string_view footer = contents_.substr(footer_offset);
    if (coding::DecodeFixed64(footer.data() + 40) != kTableMagic) {
      return Error("bad magic number (not a LevelDB table)", footer_offset + 40);
    }
    BlockHandle metaindex, index;
    absl::string_view handles = footer.substr(0, 40);
    if (!DecodeBlockHandle(&handles, &metaindex) || !DecodeBlockHandle(&handles, &index)) {
      return Error("bad block handles in footer", footer_offset);
    }
    KILN_ASSIGN_OR_RETURN(absl::string_view index_block, ReadBlock(index));
    std::vector<std::pair<std::string, std::string>> index_entries;
    KILN_RETURN_IF_ERROR(ParseBlock(index_block, index.offset, &index_entries));
    std::map<std::string, std::string> result;
    for (const auto& [last_key, handle_bytes] : index_entries) {
      absl::string_view hb = handle_bytes;
      BlockHandle data;
      if (!DecodeBlockHandle(&hb, &data)) return Error("bad block handle in index", index.offset);
      KILN_ASSIGN_OR_RETURN(absl::string_view block, ReadBlock(data));
      std::vector<std::pair<std::string, std::string>> entries;
      KILN_RETURN_IF_ERROR(ParseBlock(block, data.offset, &entries));
      for (auto& [k, v] : entries) result[std::move(k)] = std::move(v);
    }
    return result;
  }

 private:
  absl::string_view contents_;
  absl::string_view file_name_;
  mutable std::vector<std::unique_ptr<std::string>> decompressed_;
};

class BlockBuilder {
 public:
  explicit BlockBuilder(int restart_interval) : restart_interval_(restart_interval) {}
  void Add(const std::string& key, const std::string& value) {
    size_t shared = 0;
    if (counter_ < restart_interval_) {
      while (shared < last_key_.size() && shared < key.size() && last_key_[shared] == key[shared])
        ++shared;
    } else {
      restarts_.push_back(static_cast<uint32_t>(buffer_.size()));
      counter_ = 0;
    }
    PutVarint64(&buffer_, shared);
    PutVarint64(&buffer_, key.size() - shared);
    PutVarint64(&buffer_, value.size());
    buffer_.append(key, shared, std::string::npos);
    buffer_.append(value);
    last_key_ = key;
    ++counter_;
  }
  std::string Finish() {
    std::string out = buffer_;
    for (uint32_t r : restarts_) PutFixed32(&out, r);
    PutFixed32(&out, static_cast<uint32_t>(restarts_.size()));
    return out;
  }
  size_t size() const { return buffer_.size(); }
  bool empty() const { return buffer_.empty(); }
  const std::string& last_key() const { return last_key_; }

 private:
  int restart_interval_;
  std::string buffer_;
  std::vector<uint32_t> restarts_{0};
  int counter_ = 0;
  std::string last_key_;
};

void AppendBlock(std::string* file, const std::string& block, BlockHandle* handle) {
  handle->offset = file->size();
  handle->size = block.size();
  file->append(block);
  const char type = 0;
  file->push_back(type);
  PutFixed32(file,
             crc32c::Mask(crc32c::Extend(crc32c::Value(block.data(), block.size()), &type, 1)));
}

void PutBlockHandle(std::string* out, const BlockHandle& h) {
  PutVarint64(out, h.offset);
  PutVarint64(out, h.size);
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ReadLevelDbTable(absl::string_view contents,
                                                                    absl::string_view file_name) {
  return TableParser(contents, file_name).Parse();
}

std::string WriteLevelDbTable(const std::map<std::string, std::string>& entries,
                              int restart_interval, size_t block_size) {
  std::string file;
  BlockBuilder index(1);
  BlockBuilder data(restart_interval);
  auto flush = [&] {
    if (data.empty()) return;
    BlockHandle h;
    AppendBlock(&file, data.Finish(), &h);
    std::string handle;
    PutBlockHandle(&handle, h);
    index.Add(data.last_key(), handle);
    data = BlockBuilder(restart_interval);
  };
  for (const auto& [k, v] : entries) {
    data.Add(k, v);
    if (data.size() >= block_size) flush();
  }
  flush();
  BlockHandle metaindex_handle, index_handle;
  AppendBlock(&file, BlockBuilder(restart_interval).Finish(), &metaindex_handle);
  AppendBlock(&file, index.Finish(), &index_handle);
  std::string footer;
  PutBlockHandle(&footer, metaindex_handle);
  PutBlockHandle(&footer, index_handle);
  footer.resize(40, '\0');
  coding::PutFixed64(&footer, kTableMagic);
  file += footer;
  return file;
}

}  // namespace kiln::import::tf
