// Constant data that kernels derive from a node's constant inputs (weights reordered into the
// layout a oneDNN primitive reads), made once per loaded model and shared by all its plans.
//
// A plan is compiled per input-shape signature (every batch size, up to the plan cache's
// capacity); without sharing, each plan would pack, and keep, its own copy of every weight.
// Kernels ask the cache for (node, key) in Reshape, where the key describes the packing (the
// packed memory descriptor: a primitive may choose another weight layout at another batch
// size, and then gets its own entry). The cache is thread-safe: plans for different shapes
// compile concurrently. Entries live as long as the cache, i.e. as long as the model.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kiln/ir/graph.h"

namespace kiln::kernels {

class PackedConstantCache {
 public:
  // The entry for (node, key); `make` builds it on the first request and reports its size.
  // Concurrent first requests for one entry build it once.
  template <typename T>
  absl::StatusOr<std::shared_ptr<const T>> GetOrCreate(
      const ir::Node* node, const std::string& key,
      absl::FunctionRef<absl::StatusOr<std::pair<std::shared_ptr<const T>, size_t>>()> make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find({node, key});
    if (it != entries_.end()) {
      ++hits_;
      return std::static_pointer_cast<const T>(it->second);
    }
    absl::StatusOr<std::pair<std::shared_ptr<const T>, size_t>> made = make();
    if (!made.ok()) return made.status();
    bytes_ += made->second;
    entries_.emplace(std::make_pair(node, key), made->first);
    return std::move(made->first);
  }

  // The entry for (node, key) if one was made, else null; makes nothing.
  template <typename T>
  std::shared_ptr<const T> Find(const ir::Node* node, const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find({node, key});
    return it == entries_.end() ? nullptr : std::static_pointer_cast<const T>(it->second);
  }

  size_t bytes() const {  // packed bytes held, each entry counted once
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }
  size_t entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }
  size_t hits() const {  // requests answered without packing
    std::lock_guard<std::mutex> lock(mutex_);
    return hits_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<const ir::Node*, std::string>, std::shared_ptr<const void>> entries_
      ABSL_GUARDED_BY(mutex_);
  size_t bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  size_t hits_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace kiln::kernels
