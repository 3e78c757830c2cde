// Reads TensorFlow's TensorBundle checkpoints (the variables/ folder of a SavedModel):
// <prefix>.index is a LevelDB-format table mapping "" to a BundleHeaderProto and each tensor
// name to a BundleEntryProto; <prefix>.data-NNNNN-of-MMMMM hold the tensor bytes, each
// checked against the entry's CRC32C.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/tensor.h"
#include "tensorflow/core/protobuf/tensor_bundle.pb.h"

namespace kiln::import::tf {

class BundleReader {
 public:
  // `prefix` is e.g. "<saved_model>/variables/variables". Reads and checks the index; data
  // shards are opened when first needed (a missing shard is reported by Lookup).
  static absl::StatusOr<std::unique_ptr<BundleReader>> Open(const std::string& prefix);

  bool Contains(const std::string& key) const { return entries_.count(key) > 0; }
  std::vector<std::string> Keys() const;
  const tensorflow::BundleEntryProto* Entry(const std::string& key) const;
  int num_shards() const { return num_shards_; }

  // Reads the tensor stored under `key`; NotFound names the key and the checkpoint.
  absl::StatusOr<Tensor> Lookup(const std::string& key) const;

 private:
  BundleReader() = default;
  absl::StatusOr<const std::string*> Shard(int shard_id) const;

  std::string prefix_;
  int num_shards_ = 1;
  std::map<std::string, tensorflow::BundleEntryProto> entries_;
  mutable std::map<int, std::string> shard_contents_;
};

// Writes a single-shard bundle (tests and test writers): <prefix>.index and
// <prefix>.data-00000-of-00001.
absl::Status WriteBundle(const std::string& prefix, const std::map<std::string, Tensor>& tensors);

// "<prefix>.data-00001-of-00002".
std::string BundleShardPath(const std::string& prefix, int shard_id, int num_shards);

// Reads a whole file; NotFound / DataLoss naming the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
absl::Status WriteStringToFile(const std::string& path, absl::string_view contents);

}  // namespace kiln::import::tf
