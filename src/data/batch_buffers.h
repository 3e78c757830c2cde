// BatchBufferPool: the memory of one stage's output batches, recycled through a short free list
// and mapped in 2 MiB pages.
//
// A batch of 64 images of 224x224x3 floats is 37 MiB. The first write to fresh memory costs a
// page fault per 4 KiB page, and on the paravirtualized VMs Kiln is measured on a fault costs
// about 11 us: 9,400 faults, 110 ms of CPU for one new batch buffer (the image pipeline's
// first three batch buffers were 10 % of its CPU time over 6,144 images). Mapping the block with
// MADV_HUGEPAGE takes 19 faults of 2 MiB instead (10 ms, measured on the same VM) and its later
// writes miss the TLB less. The consumer's batch tensor returns its block to the pool when its
// last view is released (Buffer::Wrap's release hook: no change to Tensor), and the stage's
// next batch takes it back, so a pipeline in its steady state maps nothing.
//
// Memory stays bounded: the free list holds at most `max_free` blocks (a block is returned
// when the consumer drops a batch and taken again as soon as the stage starts its next one, so
// in steady state the list holds zero or one block; more only accumulate when production has
// stopped); any block beyond that is unmapped at once. The pool lives as long as its owner
// (the map node, so that the next iterator of the same dataset reuses the blocks) and the last
// batch taken from it; the free blocks are unmapped with it. The blocks in use are the batches that
// the pipeline's RAM budget already counts (prefetch buffers, the batch being filled).
//
// Only numeric blocks of at least kMinBytes come from the pool (smaller ones gain nothing from
// 2 MiB pages); other tensors are allocated as usual. Under ASan and TSan the free list is
// off, so that a use after release still reaches unmapped memory.
//
// Thread safety: Allocate and the release of buffers may run on any threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

class BatchBufferPool : public std::enable_shared_from_this<BatchBufferPool> {
 public:
  static constexpr size_t kMinBytes = size_t{2} << 20;
  static constexpr size_t kDefaultMaxFree = 2;

  static std::shared_ptr<BatchBufferPool> Create(size_t max_free = kDefaultMaxFree);
  ~BatchBufferPool();
  BatchBufferPool(const BatchBufferPool&) = delete;
  BatchBufferPool& operator=(const BatchBufferPool&) = delete;

  // An uninitialized tensor (strings: empty strings) of `dtype` and `shape`; ResourceExhausted
  // when the memory cannot be had, InvalidArgument when the size overflows.
  absl::StatusOr<Tensor> Allocate(DType dtype, const Shape& shape);

  // For tests and stats.
  int64_t blocks_mapped() const;  // mappings made so far
  int64_t free_blocks() const;    // blocks on the free list now

 private:
  explicit BatchBufferPool(size_t max_free) : max_free_(max_free) {}
  struct Block {
    void* data;
    size_t length;  // mapped bytes, a multiple of 2 MiB
  };
  absl::StatusOr<Block> Take(size_t length);
  void Give(Block block);

  const size_t max_free_;
  mutable std::mutex mu_;
  std::vector<Block> free_ ABSL_GUARDED_BY(mu_);  // most recently released last
  int64_t mapped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::data
