// Reads a LevelDB-format table (the format of TensorFlow's variables.index): data blocks of
// prefix-compressed keys with restart points, an index block, and a 48-byte footer ending in
// LevelDB's magic number. Blocks are stored raw or snappy-compressed (TensorFlow's
// writer compresses); other compression types are reported as unsupported.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::import::tf {

// Parses the whole table in `contents` (the file's bytes) into a sorted key -> value map.
// `file_name` only names the file in error messages. Block checksums are verified.
absl::StatusOr<std::map<std::string, std::string>> ReadLevelDbTable(absl::string_view contents,
                                                                     absl::string_view file_name);

// Snappy's block format (TensorFlow's table writer compresses index blocks with it).
absl::StatusOr<std::string> SnappyDecompress(absl::string_view compressed);

// Builds an uncompressed table from sorted entries (used by tests and test writers).
std::string WriteLevelDbTable(const std::map<std::string, std::string>& entries,
                              int restart_interval = 16, size_t block_size = 4096);

}  // namespace kiln::import::tf
