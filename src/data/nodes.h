// Constructors shared between the files of src/data (sequential and parallel variants).
#pragma once

#include <string>
#include <vector>

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
