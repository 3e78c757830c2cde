// Constructors shared between the files of src/data (sequential and parallel variants).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/batch_buffers.h"
#include "data/internal.h"

namespace kiln::data {

// Pulls up to batch_size elements; *end when none came (or fewer than batch_size with
// drop_remainder).
absl::Status CollectBatch(IteratorBase* input, int64_t batch_size, bool drop_remainder,
                          std::vector<Element>* elements, bool* end);

// What a parallel Map node tells the rewrites applied when MakeIterator builds the pipeline.
struct ParallelMapSpec {
  Dataset input;
  MapFn fn;
  int parallelism;  // a count or kAutotune
  bool deterministic;
  // The batch buffers of the fused map-and-batch stages built on this map (batch_buffers.h):
  // kept with the dataset, so that an iterator made per epoch fills its batches in the blocks
  // the previous one released instead of new memory (the first touch of a new 37 MiB buffer
  // costs ~40-110 ms of CPU on the VMs measured). At most 2 free blocks stay with it.
  std::shared_ptr<BatchBufferPool> batch_buffers = BatchBufferPool::Create();
};

// A Batch's options, sequential (parallelism kSequential) or parallel.
struct BatchSpec {
  int64_t batch_size;
  bool drop_remainder;
  int parallelism;
  bool deterministic;
};

// map_and_batch_fusion (on by default, as in tf.data; Options::map_and_batch_fusion): a Batch
// whose input is a parallel Map is built as one MapAndBatch stage whose workers write each
// result into its slot of the batch (map_and_batch.cc). Batch nodes call it from their
// MakeIterator; null when the rewrite does not apply.
absl::StatusOr<std::unique_ptr<IteratorBase>> MakeFusedMapAndBatch(const IteratorContext& ctx,
                                                                   const Dataset& input,
                                                                   const BatchSpec& batch);

Dataset MakeSequentialMap(const Dataset& input, MapFn fn);
Dataset MakeSequentialBatch(const Dataset& input, int64_t batch_size, bool drop_remainder);
Dataset MakeSequentialInterleave(const Dataset& input, DatasetFn fn, int cycle_length,
                                 int block_length, const std::string& name);

}  // namespace kiln::data
