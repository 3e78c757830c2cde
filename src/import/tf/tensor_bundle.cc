#include "import/tf/tensor_bundle.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "import/tf/table_reader.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/coding.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": file not found"));
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return buffer.str();
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat(path, ": cannot create"));
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write error"));
  return absl::OkStatus();
}

std::string BundleShardPath(const std::string& prefix, int shard_id, int num_shards) {
  return absl::StrFormat("%s.data-%05d-of-%05d", prefix, shard_id, num_shards);
}

absl::StatusOr<std::unique_ptr<BundleReader>> BundleReader::Open(const std::string& prefix) {
  const std::string index_path = prefix + ".index";
  KILN_ASSIGN_OR_RETURN(std::string index_bytes, ReadFileToString(index_path));
  KILN_ASSIGN_OR_RETURN(auto table, ReadLevelDbTable(index_bytes, index_path));
  std::unique_ptr<BundleReader> reader(new BundleReader());
  reader->prefix_ = prefix;
  auto header_it = table.find("");
  if (header_it == table.end()) {
    return absl::DataLossError(
        absl::StrCat(index_path, ": no BundleHeaderProto (empty key) in the index"));
  }
  tensorflow::BundleHeaderProto header;
  if (!header.ParseFromString(header_it->second)) {
    return absl::DataLossError(absl::StrCat(index_path, ": malformed BundleHeaderProto"));
  }
  if (header.endianness() != tensorflow::BundleHeaderProto::LITTLE) {
    return absl::UnimplementedError(
        absl::StrCat(index_path, ": big-endian checkpoints are not supported"));
  }
  if (header.num_shards() < 1 || header.num_shards() > 100000) {
    return absl::DataLossError(
        absl::StrCat(index_path, ": bad shard count ", header.num_shards()));
  }
  reader->num_shards_ = header.num_shards();
  table.erase(header_it);
  for (auto& [key, value] : table) {
    tensorflow::BundleEntryProto entry;
    if (!entry.ParseFromString(value)) {
      return absl::DataLossError(
          absl::StrCat(index_path, ": malformed BundleEntryProto for '", key, "'"));
    }
    reader->entries_.emplace(key, std::move(entry));
  }
  return reader;
}

std::vector<std::string> BundleReader::Keys() const {
  std::vector<std::string> keys;
  for (const auto& [k, v] : entries_) keys.push_back(k);
  return keys;
}

const tensorflow::BundleEntryProto* BundleReader::Entry(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

absl::StatusOr<const std::string*> BundleReader::Shard(int shard_id) const {
  auto it = shard_contents_.find(shard_id);
  if (it != shard_contents_.end()) return &it->second;
  const std::string path = BundleShardPath(prefix_, shard_id, num_shards_);
  auto contents = ReadFileToString(path);
  if (!contents.ok()) {
    return Annotate(contents.status(),
                    absl::StrCat("checkpoint data shard ", shard_id, " of ", num_shards_));
  }
  return &shard_contents_.emplace(shard_id, *std::move(contents)).first->second;
}

namespace {

using coding::GetVarint64;
using coding::PutVarint64;

// Lengths enter the CRC as uint32 when they fit (TensorFlow keeps that for compatibility),
// else as uint64.
uint32_t ExtendLength(uint32_t crc, uint64_t length) {
  if (length <= UINT32_MAX) {
    const uint32_t short_length = static_cast<uint32_t>(length);
    return crc32c::Extend(crc, &short_length, sizeof(short_length));
  }
  return crc32c::Extend(crc, &length, sizeof(length));
}

// TensorFlow's string tensor layout in a bundle: a varint64 length per element, a masked
// CRC32C of those lengths (see ExtendLength), then the bytes.
// Returns the CRC of everything, as stored in the entry.
absl::StatusOr<uint32_t> DecodeStrings(absl::string_view data, int64_t n, std::string* out,
                                       const std::string& key) {
  uint32_t crc = 0;
  std::vector<uint64_t> lengths(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (!GetVarint64(&data, &lengths[i])) {
      return absl::DataLossError(absl::StrCat("string tensor '", key, "': bad length"));
    }
    crc = ExtendLength(crc, lengths[i]);
  }
  if (data.size() < 4) {
    return absl::DataLossError(absl::StrCat("string tensor '", key, "': truncated"));
  }
  if (coding::DecodeFixed32(data.data()) != crc32c::Mask(crc)) {
    return absl::DataLossError(
        absl::StrCat("string tensor '", key, "': checksum mismatch in element lengths"));
  }
  crc = crc32c::Extend(crc, data.data(), 4);
  data.remove_prefix(4);
  for (int64_t i = 0; i < n; ++i) {
    if (lengths[i] > data.size()) {
      return absl::DataLossError(absl::StrCat("string tensor '", key, "': truncated element"));
    }
    out[i].assign(data.data(), lengths[i]);
    crc = crc32c::Extend(crc, data.data(), lengths[i]);
    data.remove_prefix(lengths[i]);
  }
  return crc;
}

}  // namespace

absl::StatusOr<Tensor> BundleReader::Lookup(const std::string& key) const {
  const tensorflow::BundleEntryProto* entry = Entry(key);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", key, "' not found in checkpoint ", prefix_));
  }
  auto fail = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("checkpoint ", prefix_, ", tensor '", key,
                                            "': ", what));
  };
  if (entry->slices_size() > 0) {
    return absl::UnimplementedError(absl::StrCat("checkpoint ", prefix_, ", tensor '", key,
                                                 "': partitioned (sliced) variables are not "
                                                 "supported"));
  }
  auto dtype = FromTfDataType(entry->dtype());
  if (!dtype.ok()) return Annotate(dtype.status(), absl::StrCat("checkpoint tensor '", key, "'"));
  auto shape = FullyDefinedShape(entry->shape());
  if (!shape.ok()) return fail(shape.status().message());
  if (entry->shard_id() < 0 || entry->shard_id() >= num_shards_) {
    return fail(absl::StrCat("shard id ", entry->shard_id(), " out of range [0, ", num_shards_,
                             ")"));
  }
  KILN_ASSIGN_OR_RETURN(const std::string* shard, Shard(entry->shard_id()));
  if (entry->offset() < 0 || entry->size() < 0 ||
      static_cast<uint64_t>(entry->offset()) > shard->size() ||
      static_cast<uint64_t>(entry->size()) > shard->size() - entry->offset()) {
    return fail(absl::StrCat("bytes [", entry->offset(), ", +", entry->size(),
                             ") run past the end of ",
                             BundleShardPath(prefix_, entry->shard_id(), num_shards_), " (",
                             shard->size(), " bytes)"));
  }
  absl::string_view data(shard->data() + entry->offset(), static_cast<size_t>(entry->size()));
  int64_t n = 1;
  for (int64_t d : shape->dims()) {
    if (d != 0 && n > (int64_t{1} << 40) / d) return fail("shape too large");
    n *= d;
  }
  // The entry's shape is checked against the bytes it holds before the tensor is allocated: a
  // corrupt index must not make us allocate what its shape claims.
  if (*dtype == DType::kString) {
    // Every element has a varint length (one byte at least), then a 4-byte checksum follows.
    if (static_cast<uint64_t>(n) > data.size() || data.size() - n < 4) {
      return fail(absl::StrCat("holds ", data.size(), " bytes, too few for the lengths of ", n,
                               " strings of shape ", shape->ToString()));
    }
  } else if (data.size() != static_cast<size_t>(n) * DTypeSize(*dtype)) {
    return fail(absl::StrCat("holds ", data.size(), " bytes; ", DTypeName(*dtype),
                             shape->ToString(), " needs ",
                             static_cast<size_t>(n) * DTypeSize(*dtype)));
  }
  Tensor tensor(*dtype, *shape);
  uint32_t crc;
  if (*dtype == DType::kString) {
    KILN_ASSIGN_OR_RETURN(crc, DecodeStrings(data, n, tensor.data<std::string>(), key));
  } else {
    const size_t expected = static_cast<size_t>(n) * DTypeSize(*dtype);
    if (expected > 0) std::memcpy(tensor.raw_data(), data.data(), expected);
    crc = crc32c::Value(data.data(), data.size());
  }
  if (crc32c::Mask(crc) != entry->crc32c()) {
    return fail(absl::StrFormat("CRC32C mismatch (stored %08x, computed %08x) in %s",
                                entry->crc32c(), crc32c::Mask(crc),
                                BundleShardPath(prefix_, entry->shard_id(), num_shards_)));
  }
  return tensor;
}

absl::Status WriteBundle(const std::string& prefix, const std::map<std::string, Tensor>& tensors) {
  std::map<std::string, std::string> table;
  tensorflow::BundleHeaderProto header;
  header.set_num_shards(1);
  header.mutable_version()->set_producer(1);
  table[""] = header.SerializeAsString();
  std::string data;
  for (const auto& [key, tensor] : tensors) {
    tensorflow::BundleEntryProto entry;
    entry.set_dtype(ToTfDataType(tensor.dtype()));
    for (int64_t d : tensor.shape().dims()) entry.mutable_shape()->add_dim()->set_size(d);
    entry.set_offset(static_cast<int64_t>(data.size()));
    uint32_t crc = 0;
    if (tensor.dtype() == DType::kString) {
      std::string lengths;
      for (const std::string& s : tensor.span<std::string>()) {
        const uint64_t len = s.size();
        PutVarint64(&lengths, len);
        crc = ExtendLength(crc, len);
      }
      const uint32_t length_checksum = crc32c::Mask(crc);
      lengths.append(reinterpret_cast<const char*>(&length_checksum), 4);
      crc = crc32c::Extend(crc, &length_checksum, 4);
      data += lengths;
      for (const std::string& s : tensor.span<std::string>()) {
        data += s;
        crc = crc32c::Extend(crc, s.data(), s.size());
      }
    } else {
      data.append(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
      crc = crc32c::Value(tensor.raw_data(), tensor.byte_size());
    }
    entry.set_size(static_cast<int64_t>(data.size()) - entry.offset());
    entry.set_crc32c(crc32c::Mask(crc));
    table[key] = entry.SerializeAsString();
  }
  KILN_RETURN_IF_ERROR(WriteStringToFile(prefix + ".index", WriteLevelDbTable(table)));
  return WriteStringToFile(BundleShardPath(prefix, 0, 1), data);
}

}  // namespace kiln::import::tf
