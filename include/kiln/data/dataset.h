// kiln::data — input pipelines in the style of tf.data.
//
// A Dataset is an immutable description of a sequence of elements (tuples of tensors). Each
// transformation returns a new Dataset; nothing runs until MakeIterator() builds the iterator
// tree and GetNext() pulls elements. Semantics follow tf.data wherever tf.data defines them
// (element order, determinism, end-of-sequence, error propagation).
//
//   auto it = Dataset::ListFiles({"/data/train-*.tfrecord"}, /*shuffle=*/true, /*seed=*/7)
//                 .Interleave([](Element f) { return Dataset::TFRecord(f); },
//                             kAutotune, 1, kAutotune)
//                 .Map(parse, kAutotune)
//                 .Shuffle(10000, 42)
//                 .Batch(64, /*drop_remainder=*/true)
//                 .Prefetch(kAutotune)
//                 .MakeIterator();
//   while (true) {
//     KILN_ASSIGN_OR_RETURN(std::optional<Element> batch, (*it)->GetNext());
//     if (!batch) break;  // end of sequence
//     ...
//   }
//
// Checkpoints: `std::string state = *it->SaveState();` anywhere between GetNext calls; later,
// possibly in another process, `ds.MakeIterator()` then `RestoreState(state)` continues with
// exactly the elements the first iterator would have produced next.
//
// Construction errors (a bad argument to a transformation) make the Dataset invalid; the
// error is reported by status() and by MakeIterator(), so chains stay fluent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "kiln/data/element.h"
#include "kiln/data/stats.h"

namespace kiln {
class TraceRecorder;
}

namespace kiln::data {

// Pass as num_parallel_calls, cycle_length or buffer_size to let the autotuner choose.
inline constexpr int kAutotune = -1;
// num_parallel_calls = kSequential runs the function on the consumer's thread.
inline constexpr int kSequential = 0;
// Cardinality() results that are not a count.
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;

// Options for one iterator (one run of a pipeline).
struct Options {
  // Cores the autotuner may keep busy across all parallel stages; 0: all hardware threads.
  int cpu_budget = 0;
  // Bytes that autotuned and prefetch buffers may hold in total; 0: half of physical RAM.
  int64_t ram_budget_bytes = 0;
  // false: kAutotune values are resolved once (parallelism = cpu_budget, buffers = 2) and
  // never adjusted.
  bool autotune = true;
  // Non-empty: a Chrome trace (open in Perfetto or chrome://tracing) with one track per stage
  // is written here when the iterator is destroyed (or by Iterator::WriteTrace).
  std::string trace_path;
  // tf.data's map_and_batch_fusion: a parallel Map followed by a Batch runs as one stage
  // whose workers write each result straight into its slot of the batch. The elements are the
  // same either way; false keeps the two stages (to compare, or to see them apart in Stats()).
  bool map_and_batch_fusion = true;
};

class DatasetNode;   // internal
class IteratorImpl;  // internal

// Pulls elements from a pipeline. Not thread-safe: one consumer thread at a time. Destroying
// it cancels work in flight and joins every worker thread before returning.
class Iterator {
 public:
  ~Iterator();
  Iterator(const Iterator&) = delete;
  Iterator& operator=(const Iterator&) = delete;

  // The next element, std::nullopt at the end of the sequence, or the error of this element
  // (iteration may continue after an element's error, as in tf.data).
  absl::StatusOr<std::optional<Element>> GetNext();
  // Allocation-free form for hot loops: sets *end_of_sequence instead of returning nullopt.
  absl::Status GetNext(Element* out, bool* end_of_sequence);

  // Per-stage statistics so far and the bottleneck stage.
  PipelineStats Stats() const;
  // Writes the trace recorded so far (requires Options::trace_path or an earlier
  // EnableTrace()); a track per stage.
  absl::Status WriteTrace(const std::string& path) const;
  // Highest number of bytes held at once by the buffers that the RAM budget governs.
  int64_t peak_buffered_bytes() const;
  int64_t ram_budget_bytes() const;

  // ---- checkpoints (docs/DATA.md, "Checkpoints") ----
  // The iterator's position: a few hundred bytes that record positions, seeds and epochs, never
  // buffered elements (elements in flight are recomputed on restore), so its size does not
  // grow with buffer sizes. Call it on the consumer's thread, between GetNext calls.
  // FailedPrecondition, naming the stage, for a pipeline whose order is not reproducible
  // (Shuffle or ListFiles without a seed, deterministic = false); Unimplemented, naming the
  // stage, for a stage that cannot checkpoint yet.
  absl::StatusOr<std::string> SaveState();
  // Moves a new iterator (no GetNext called yet) of the same pipeline, in this or another
  // process, to the position `state` recorded: its next elements are exactly those the saved
  // iterator would have produced next. InvalidArgument, naming the first stage that differs,
  // for a state saved from another pipeline; DataLoss for a truncated or corrupt state. The
  // restored position is reached by replaying the inputs from their sources as cheaply as
  // each stage allows (sources seek; Map, Batch and their parallel forms skip without calling
  // the function; Shuffle refills its buffer from the replayed input).
  absl::Status RestoreState(std::string_view state);

 private:
  friend class Dataset;
  explicit Iterator(std::unique_ptr<IteratorImpl> impl);
  std::unique_ptr<IteratorImpl> impl_;
};

class Dataset;
// Returns the dataset that an input element expands to (FlatMap, Interleave).
using DatasetFn = std::function<absl::StatusOr<Dataset>(Element)>;
using PredicateFn = std::function<absl::StatusOr<bool>(const Element&)>;
// A generator returns the next element, std::nullopt at its end, or an error.
using Generator = std::function<absl::StatusOr<std::optional<Element>>()>;

class Dataset {
 public:
  Dataset();  // an invalid dataset (status() is an error)

  // ---- sources ----
  // int64 scalars start, start+step, ... < stop (> stop for a negative step).
  static Dataset Range(int64_t stop);
  static Dataset Range(int64_t start, int64_t stop, int64_t step = 1);
  // One element: `element`.
  static Dataset FromTensors(Element element);
  // One element per row of the first dimension of every component (all must agree).
  static Dataset FromTensorSlices(Element element);
  // `make_generator` is called once per iterator (each epoch) and returns the generator
  // that produces that iterator's elements, like calling a Python generator function.
  static Dataset FromGenerator(std::function<Generator()> make_generator);
  // File names (string scalars) matching any of `patterns` (glob(7)). tf.data's default:
  // shuffled; with a seed the order is reproducible, without one it differs per iterator.
  // Sorted when shuffle is false. No match is an error naming the patterns.
  static Dataset ListFiles(const std::vector<std::string>& patterns, bool shuffle = true,
                           std::optional<uint64_t> seed = std::nullopt);
  // Records of TFRecord files. `filenames`: a string scalar or vector of file names.
  // compression: "", "NONE", "GZIP" or "ZLIB". num_parallel_reads > 1 (or kAutotune) reads
  // files in parallel (interleaved, deterministic order).
  static Dataset TFRecord(Element filenames, const std::string& compression = "",
                          int64_t buffer_size = 256 << 10, int num_parallel_reads = kSequential);
  // Lines of text files (without the line ending).
  static Dataset TextLine(Element filenames, const std::string& compression = "");
  // Typed columns of CSV files; see CsvDatasetOptions.
  struct CsvOptions {
    // One tensor per selected column: its dtype is the column's type; a scalar value is the
    // default for an empty field; an empty (0-element) tensor makes the column required.
    std::vector<Tensor> record_defaults;
    std::string compression;
    bool header = false;
    char field_delim = ',';
    bool use_quote_delim = true;
    std::string na_value;
    std::vector<int> select_cols;
  };
  static Dataset Csv(Element filenames, CsvOptions options);
  // Zips datasets: element i is the concatenation of the components of each input's
  // element i; ends with the shortest input.
  static Dataset Zip(const std::vector<Dataset>& datasets);

  // ---- transformations ----
  // num_parallel_calls: kSequential, a count, or kAutotune. deterministic = false lets
  // elements come out in completion order.
  Dataset Map(MapFn fn, int num_parallel_calls = kSequential, bool deterministic = true) const;
  Dataset FlatMap(DatasetFn fn) const;
  // cycle_length input elements are open at once; block_length consecutive elements are
  // taken from each in turn. kAutotune cycle_length: the CPU budget.
  Dataset Interleave(DatasetFn fn, int cycle_length = kAutotune, int block_length = 1,
                     int num_parallel_calls = kSequential, bool deterministic = true) const;
  Dataset Filter(PredicateFn predicate) const;
  // Stacks batch_size consecutive elements along a new first dimension. Elements must agree
  // in shape (PaddedBatch pads them).
  Dataset Batch(int64_t batch_size, bool drop_remainder = false,
                int num_parallel_calls = kSequential, bool deterministic = true) const;
  // padded_shapes: one per component (dimension -1: the largest in the batch); empty: pad
  // every dimension to the largest. padding_values: scalars per component (default 0/"").
  Dataset PaddedBatch(int64_t batch_size, std::vector<Shape> padded_shapes = {},
                      std::vector<Tensor> padding_values = {}, bool drop_remainder = false) const;
  Dataset Unbatch() const;
  // seed: reproducible order (with reshuffle_each_iteration, each epoch of one seed is a
  // reproducible but different order); no seed: nondeterministic.
  Dataset Shuffle(int64_t buffer_size, std::optional<uint64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;
  Dataset Repeat(int64_t count = -1) const;  // -1: forever
  Dataset Take(int64_t count) const;         // -1: all
  Dataset Skip(int64_t count) const;         // -1: all
  Dataset Shard(int64_t num_shards, int64_t index) const;
  // filename empty: cache in memory (shared by the iterators of this Dataset object). Else
  // written to `filename` during the first complete iteration and read back by later
  // iterators and later runs of the program.
  Dataset Cache(const std::string& filename = "") const;
  Dataset Prefetch(int64_t buffer_size = kAutotune) const;
  Dataset Zip(const Dataset& other) const;
  Dataset Concatenate(const Dataset& other) const;
  // Puts an int64 scalar counter (from `start`) in front of each element's components.
  Dataset Enumerate(int64_t start = 0) const;
  // Drops elements whose production failed; the count appears in Stats().
  Dataset IgnoreErrors() const;

  // ---- running ----
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const Options& options = {}) const;
  // Number of elements, kInfiniteCardinality or kUnknownCardinality (tf.data's rules).
  int64_t Cardinality() const;
  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }
  const std::shared_ptr<const DatasetNode>& node() const { return node_; }

  // Internal: wraps a node (or an error).
  explicit Dataset(std::shared_ptr<const DatasetNode> node);
  explicit Dataset(absl::Status error);

 private:
  std::shared_ptr<const DatasetNode> node_;
  absl::Status status_;
};

}  // namespace kiln::data
