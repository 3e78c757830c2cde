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

Dataset MakeSequentialMap(const Dataset& input, MapFn fn);
Dataset MakeSequentialBatch(const Dataset& input, int64_t batch_size, bool drop_remainder);
Dataset MakeSequentialInterleave(const Dataset& input, DatasetFn fn, int cycle_length,
                                 int block_length, const std::string& name);

}  // namespace kiln::data
