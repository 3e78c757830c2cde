// Synchronous transformations: they run on the consumer's thread (or on the worker thread
// of the parallel stage above them).
//
// Why one file of ~1,000 lines: each transformation is a node and its iterator, 30-150 lines,
// independent of the others and sharing only UnaryIterator; one section per transformation
// keeps them findable without a header per pair.
#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "data/internal.h"
#include "data/nodes.h"
#include "data/stage_steps.h"
#include "kiln/core/status.h"

namespace kiln::data {
namespace {

#define KILN_DATA_NODE_BOILERPLATE(Name)                                                \
  std::string name() const override { return Name; }                                   \
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(const IteratorContext& ctx) \
      const override {                                                                  \
    auto it = std::make_unique<It>(ctx, this);                                          \
    KILN_RETURN_IF_ERROR(it->Init());                                                   \
    return std::unique_ptr<IteratorBase>(std::move(it));                                \
  }

// An iterator over one input dataset, built in Init() with this stage as its consumer.
class UnaryIterator : public IteratorBase {
 public:
  UnaryIterator(const IteratorContext& ctx, const std::string& name, const Dataset& input)
      : IteratorBase(ctx, name, false), input_dataset_(input) {}
  virtual absl::Status Init() {
    KILN_ASSIGN_OR_RETURN(input_, MakeInputIterator(input_dataset_, InputContext()));
    return absl::OkStatus();
  }

 protected:
  // Checkpoints: a synchronous stage's position is its input's position plus fields of its
  // own, so a restore moves the input and never replays this stage's work. Stages that hold
  // elements between calls (Shuffle, Unbatch, Interleave) override these with replays.
  absl::Status SaveInternal(StateWriter& writer) override {
    SaveFields(writer);
    return input_->Save(writer);
  }
  absl::Status RestoreInternal(StateReader& reader) override {
    KILN_RETURN_IF_ERROR(RestoreFields(reader));
    return input_->Restore(reader);
  }
  virtual void SaveFields(StateWriter&) {}
  virtual absl::Status RestoreFields(StateReader&) { return absl::OkStatus(); }
  // The defaults of IteratorBase: produced() and a replay.
  absl::Status SaveByReplay(StateWriter& writer) { return IteratorBase::SaveInternal(writer); }
  absl::Status RestoreByReplay(StateReader& reader) {
    return IteratorBase::RestoreInternal(reader);
  }

  Dataset input_dataset_;
  std::unique_ptr<IteratorBase> input_;
};

// ---- Map ----

class MapNode : public DatasetNode {
 public:
  MapNode(Dataset input, MapFn fn) : input_(std::move(input)), fn_(std::move(fn)) {}
  KILN_DATA_NODE_BOILERPLATE("Map")
  int64_t Cardinality() const override { return input_.Cardinality(); }

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const MapNode* node)
        : UnaryIterator(ctx, "Map", node->input_), fn_(node->fn_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
      if (*end) return absl::OkStatus();
      absl::StatusOr<Element> result = fn_(std::move(*out));
      if (!result.ok()) return result.status();
      *out = std::move(*result);
      return absl::OkStatus();
    }
    // One output per input, an error included: skipping needs no call of the function.
    absl::Status SkipInternal(int64_t n, int64_t* skipped) override {
      return input_->Skip(n, skipped);
    }

   private:
    const MapFn& fn_;
  };
  Dataset input_;
  MapFn fn_;
};

// ---- Filter ----

class FilterNode : public DatasetNode {
 public:
  FilterNode(Dataset input, PredicateFn fn) : input_(std::move(input)), fn_(std::move(fn)) {}
  KILN_DATA_NODE_BOILERPLATE("Filter")

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const FilterNode* node)
        : UnaryIterator(ctx, "Filter", node->input_), fn_(node->fn_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (true) {
        KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
        if (*end) return absl::OkStatus();
        KILN_ASSIGN_OR_RETURN(bool keep, fn_(*out));
        if (keep) return absl::OkStatus();
      }
    }

   private:
    const PredicateFn& fn_;
  };
  Dataset input_;
  PredicateFn fn_;
};

// ---- Take / Skip / Shard ----

class TakeNode : public DatasetNode {
 public:
  TakeNode(Dataset input, int64_t count) : input_(std::move(input)), count_(count) {}
  KILN_DATA_NODE_BOILERPLATE("Take")
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (count_ < 0) return n;
    if (n == kInfiniteCardinality) return count_;
    if (n == kUnknownCardinality) return n;
    return std::min(n, count_);
  }

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const TakeNode* node)
        : UnaryIterator(ctx, "Take", node->input_), remaining_(node->count_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      if (remaining_ == 0) {
        *end = true;
        return absl::OkStatus();
      }
      KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
      if (!*end && remaining_ > 0) --remaining_;
      return absl::OkStatus();
    }
    uint64_t StateConfig() const override { return ConfigFingerprint({count_}); }
    void SaveFields(StateWriter& w) override { w.PutInt(remaining_); }
    absl::Status RestoreFields(StateReader& r) override { return r.GetInt(&remaining_); }

   private:
    int64_t remaining_;
    const int64_t count_ = remaining_;
  };
  Dataset input_;
  int64_t count_;
};

class SkipNode : public DatasetNode {
 public:
  SkipNode(Dataset input, int64_t count) : input_(std::move(input)), count_(count) {}
  KILN_DATA_NODE_BOILERPLATE("Skip")
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (n < 0) return count_ < 0 && n == kInfiniteCardinality ? 0 : n;
    if (count_ < 0) return 0;
    return std::max<int64_t>(0, n - count_);
  }

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const SkipNode* node)
        : UnaryIterator(ctx, "Skip", node->input_), to_skip_(node->count_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (to_skip_ != 0) {
        KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
        if (*end) return absl::OkStatus();
        if (to_skip_ > 0) --to_skip_;
      }
      return input_->GetNext(out, end);
    }
    uint64_t StateConfig() const override { return ConfigFingerprint({count_}); }
    void SaveFields(StateWriter& w) override { w.PutInt(to_skip_); }
    absl::Status RestoreFields(StateReader& r) override { return r.GetInt(&to_skip_); }

   private:
    int64_t to_skip_;
    const int64_t count_ = to_skip_;
  };
  Dataset input_;
  int64_t count_;
};

class ShardNode : public DatasetNode {
 public:
  ShardNode(Dataset input, int64_t n, int64_t index)
      : input_(std::move(input)), num_shards_(n), index_(index) {}
  KILN_DATA_NODE_BOILERPLATE("Shard")
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (n < 0) return n;
    return n / num_shards_ + (index_ < n % num_shards_ ? 1 : 0);
  }

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const ShardNode* node)
        : UnaryIterator(ctx, "Shard", node->input_), n_(node->num_shards_), index_(node->index_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (true) {
        KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
        if (*end) return absl::OkStatus();
        if (position_++ % n_ == index_) return absl::OkStatus();
      }
    }
    uint64_t StateConfig() const override { return ConfigFingerprint({n_, index_}); }
    void SaveFields(StateWriter& w) override { w.PutInt(position_); }
    absl::Status RestoreFields(StateReader& r) override { return r.GetInt(&position_); }

   private:
    int64_t n_, index_;
    int64_t position_ = 0;
  };
  Dataset input_;
  int64_t num_shards_, index_;
};

// ---- Repeat ----

class RepeatNode : public DatasetNode {
 public:
  RepeatNode(Dataset input, int64_t count) : input_(std::move(input)), count_(count) {}
  KILN_DATA_NODE_BOILERPLATE("Repeat")
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (count_ == 0 || n == 0) return 0;
    if (count_ < 0) return n == kUnknownCardinality ? n : kInfiniteCardinality;
    if (n < 0) return n;
    return n * count_;
  }

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const RepeatNode* node)
        : UnaryIterator(ctx, "Repeat", node->input_), count_(node->count_) {}
    absl::Status Init() override {
      if (count_ == 0) return absl::OkStatus();
      return MakeEpochInput();
    }
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (true) {
        if (!input_) {
          *end = true;
          return absl::OkStatus();
        }
        KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
        if (!*end) {
          produced_in_epoch_ = true;
          return absl::OkStatus();
        }
        *end = false;
        ++epoch_;
        // An empty epoch ends the repetition, as in tf.data (repeating nothing forever would
        // never return).
        if ((count_ >= 0 && epoch_ >= count_) || !produced_in_epoch_) {
          input_.reset();
          continue;
        }
        produced_in_epoch_ = false;
        input_.reset();
        KILN_RETURN_IF_ERROR(MakeEpochInput());
      }
    }
    uint64_t StateConfig() const override { return ConfigFingerprint({count_}); }
    // The epoch, and the position within it of the epoch's iterator (whose Shuffles and
    // ListFiles record their own epochs).
    absl::Status SaveInternal(StateWriter& w) override {
      w.PutInt(epoch_);
      w.PutBool(produced_in_epoch_);
      w.PutBool(input_ != nullptr);
      return input_ ? input_->Save(w) : absl::OkStatus();
    }
    absl::Status RestoreInternal(StateReader& r) override {
      bool has_input = false;
      KILN_RETURN_IF_ERROR(r.GetInt(&epoch_));
      KILN_RETURN_IF_ERROR(r.GetBool(&produced_in_epoch_));
      KILN_RETURN_IF_ERROR(r.GetBool(&has_input));
      if (!has_input) {
        input_.reset();
        return absl::OkStatus();
      }
      // The iterator made by Init belongs to epoch 0; the saved epoch needs its own.
      input_.reset();
      KILN_RETURN_IF_ERROR(MakeEpochInput());
      return input_->Restore(r);
    }

   private:
    // Each epoch's iterator carries the epoch in its context: Shuffles below reshuffle by it.
    absl::Status MakeEpochInput() {
      KILN_ASSIGN_OR_RETURN(input_,
                            MakeInputIterator(input_dataset_, InputContext().WithEpochKey(epoch_)));
      return absl::OkStatus();
    }

    int64_t count_;
    int64_t epoch_ = 0;
    bool produced_in_epoch_ = false;
  };
  Dataset input_;
  int64_t count_;
};

// ---- Enumerate ----

class EnumerateNode : public DatasetNode {
 public:
  EnumerateNode(Dataset input, int64_t start) : input_(std::move(input)), start_(start) {}
  KILN_DATA_NODE_BOILERPLATE("Enumerate")
  int64_t Cardinality() const override { return input_.Cardinality(); }

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const EnumerateNode* node)
        : UnaryIterator(ctx, "Enumerate", node->input_), next_(node->start_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      KILN_RETURN_IF_ERROR(input_->GetNext(out, end));
      if (*end) return absl::OkStatus();
      out->tensors.insert(out->tensors.begin(), Tensor::Scalar<int64_t>(next_++));
      if (out->names) {
        if (out->names != last_input_names_) {
          last_input_names_ = out->names;
          auto names = std::make_shared<std::vector<std::string>>(*out->names);
          names->insert(names->begin(), "index");
          last_output_names_ = std::move(names);
        }
        out->names = last_output_names_;
      }
      return absl::OkStatus();
    }
    uint64_t StateConfig() const override { return ConfigFingerprint({start_}); }
    void SaveFields(StateWriter& w) override { w.PutInt(next_); }
    absl::Status RestoreFields(StateReader& r) override { return r.GetInt(&next_); }

   private:
    int64_t next_;
    const int64_t start_ = next_;
    std::shared_ptr<const std::vector<std::string>> last_input_names_, last_output_names_;
  };
  Dataset input_;
  int64_t start_;
};

// ---- IgnoreErrors ----

class IgnoreErrorsNode : public DatasetNode {
 public:
  explicit IgnoreErrorsNode(Dataset input) : input_(std::move(input)) {}
  KILN_DATA_NODE_BOILERPLATE("IgnoreErrors")

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const IgnoreErrorsNode* node)
        : UnaryIterator(ctx, "IgnoreErrors", node->input_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (true) {
        absl::Status s = input_->GetNext(out, end);
        if (s.ok() || absl::IsCancelled(s) || ctx_.cancellation->cancelled()) return s;
        counters_->errors_ignored.fetch_add(1, std::memory_order_relaxed);
      }
    }
  };
  Dataset input_;
};

// ---- Zip / Concatenate ----

class ZipNode : public DatasetNode {
 public:
  explicit ZipNode(std::vector<Dataset> inputs) : inputs_(std::move(inputs)) {}
  KILN_DATA_NODE_BOILERPLATE("Zip")
  int64_t Cardinality() const override {
    int64_t result = kInfiniteCardinality;
    for (const Dataset& d : inputs_) {
      const int64_t n = d.Cardinality();
      if (n == kUnknownCardinality) return n;
      if (n >= 0) result = result < 0 ? n : std::min(result, n);
    }
    return result;
  }

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const ZipNode* node)
        : IteratorBase(ctx, "Zip", false), node_(node) {}
    absl::Status Init() {
      for (size_t i = 0; i < node_->inputs_.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(auto it, MakeInputIterator(node_->inputs_[i], InputContext(i)));
        inputs_.push_back(std::move(it));
      }
      return absl::OkStatus();
    }
    absl::Status GetNextInternal(Element* out, bool* end) override {
      out->tensors.clear();
      bool all_named = true;
      std::vector<std::string> names;
      for (auto& input : inputs_) {
        Element part;
        KILN_RETURN_IF_ERROR(input->GetNext(&part, end));
        if (*end) return absl::OkStatus();
        if (part.names) {
          names.insert(names.end(), part.names->begin(), part.names->end());
        } else {
          all_named = false;
        }
        for (Tensor& t : part.tensors) out->tensors.push_back(std::move(t));
      }
      out->names.reset();
      if (all_named && !names.empty()) {
        if (!names_ || *names_ != names) {
          names_ = std::make_shared<const std::vector<std::string>>(std::move(names));
        }
        out->names = names_;
      }
      return absl::OkStatus();
    }

    absl::Status SaveInternal(StateWriter& w) override {
      for (auto& input : inputs_) KILN_RETURN_IF_ERROR(input->Save(w));
      return absl::OkStatus();
    }
    absl::Status RestoreInternal(StateReader& r) override {
      for (auto& input : inputs_) KILN_RETURN_IF_ERROR(input->Restore(r));
      return absl::OkStatus();
    }

   private:
    const ZipNode* node_;
    std::vector<std::unique_ptr<IteratorBase>> inputs_;
    std::shared_ptr<const std::vector<std::string>> names_;
  };
  std::vector<Dataset> inputs_;
};

class ConcatenateNode : public DatasetNode {
 public:
  ConcatenateNode(Dataset a, Dataset b) : a_(std::move(a)), b_(std::move(b)) {}
  KILN_DATA_NODE_BOILERPLATE("Concatenate")
  int64_t Cardinality() const override {
    const int64_t x = a_.Cardinality(), y = b_.Cardinality();
    if (x == kInfiniteCardinality || y == kInfiniteCardinality) return kInfiniteCardinality;
    if (x < 0 || y < 0) return kUnknownCardinality;
    return x + y;
  }

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const ConcatenateNode* node)
        : IteratorBase(ctx, "Concatenate", false), node_(node) {}
    absl::Status Init() {
      KILN_ASSIGN_OR_RETURN(current_, MakeInputIterator(node_->a_, InputContext(0)));
      return absl::OkStatus();
    }
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (current_) {
        KILN_RETURN_IF_ERROR(current_->GetNext(out, end));
        if (!*end) return CheckSignature(*out);
        current_.reset();
        if (index_ == 0) {
          index_ = 1;
          *end = false;
          KILN_ASSIGN_OR_RETURN(current_, MakeInputIterator(node_->b_, InputContext(1)));
        }
      }
      *end = true;
      return absl::OkStatus();
    }
    absl::Status SaveInternal(StateWriter& w) override {
      w.PutUint(index_);
      w.PutBool(current_ != nullptr);
      return current_ ? current_->Save(w) : absl::OkStatus();
    }
    absl::Status RestoreInternal(StateReader& r) override {
      uint64_t index = 0;
      bool has_current = false;
      KILN_RETURN_IF_ERROR(r.GetUint(&index));
      KILN_RETURN_IF_ERROR(r.GetBool(&has_current));
      if (index > 1) return absl::DataLossError("RestoreState: corrupt Concatenate record");
      index_ = static_cast<int>(index);
      current_.reset();
      if (!has_current) return absl::OkStatus();
      KILN_ASSIGN_OR_RETURN(
          current_, MakeInputIterator(index_ == 0 ? node_->a_ : node_->b_, InputContext(index_)));
      return current_->Restore(r);
    }

   private:
    // tf.data rejects inputs whose element types differ; we see the types only at run time.
    absl::Status CheckSignature(const Element& e) {
      if (index_ == 0) {
        if (signature_.empty()) {
          for (const Tensor& t : e.tensors) signature_.push_back(t.dtype());
        }
        return absl::OkStatus();
      }
      if (signature_.empty()) return absl::OkStatus();
      bool same = e.size() == signature_.size();
      for (size_t i = 0; same && i < e.size(); ++i) same = e[i].dtype() == signature_[i];
      if (!same) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Concatenate: the second dataset's elements (", e.size(),
            " components) do not have the types of the first dataset's (", signature_.size(),
            " components)"));
      }
      return absl::OkStatus();
    }
    const ConcatenateNode* node_;
    std::unique_ptr<IteratorBase> current_;
    int index_ = 0;
    std::vector<DType> signature_;
  };
  Dataset a_, b_;
};

// ---- Batch / PaddedBatch / Unbatch ----

class BatchNode : public DatasetNode {
 public:
  BatchNode(Dataset input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}
  std::string name() const override { return "Batch"; }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    KILN_ASSIGN_OR_RETURN(
        std::unique_ptr<IteratorBase> fused,
        MakeFusedMapAndBatch(ctx, input_, {batch_size_, drop_remainder_, kSequential, true}));
    if (fused) return fused;
    auto it = std::make_unique<It>(ctx, this);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const BatchNode* node)
        : UnaryIterator(ctx, "Batch", node->input_), node_(node) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      const int64_t batch_size = node_->batch_size_;
      // The pending elements are reused from batch to batch: the input overwrites them, and a
      // source may reuse their (already copied) buffers.
      if (static_cast<int64_t>(pending_.size()) < batch_size && batch_size <= (1 << 16)) {
        pending_.resize(batch_size);
      }
      int64_t n = 0;
      for (; n < batch_size; ++n) {
        if (n >= static_cast<int64_t>(pending_.size())) pending_.emplace_back();
        bool input_end = false;
        KILN_RETURN_IF_ERROR(input_->GetNext(&pending_[n], &input_end));
        if (input_end) break;
      }
      if (n == 0 || (node_->drop_remainder_ && n < batch_size)) {
        *end = true;
        return absl::OkStatus();
      }
      KILN_ASSIGN_OR_RETURN(*out, StackElements(pending_, n));
      return absl::OkStatus();
    }
    uint64_t StateConfig() const override {
      return ConfigFingerprint({node_->batch_size_, node_->drop_remainder_});
    }

   private:
    const BatchNode* node_;
    std::vector<Element> pending_;
  };
  Dataset input_;
  int64_t batch_size_;
  bool drop_remainder_;
};

class PaddedBatchNode : public DatasetNode {
 public:
  PaddedBatchNode(Dataset input, int64_t batch_size, std::vector<Shape> shapes,
                  std::vector<Tensor> values, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), shapes_(std::move(shapes)),
        values_(std::move(values)), drop_remainder_(drop_remainder) {}
  KILN_DATA_NODE_BOILERPLATE("PaddedBatch")

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const PaddedBatchNode* node)
        : UnaryIterator(ctx, "PaddedBatch", node->input_), node_(node) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      std::vector<Element> elements;
      KILN_RETURN_IF_ERROR(CollectBatch(input_.get(), node_->batch_size_, node_->drop_remainder_,
                                        &elements, end));
      if (*end) return absl::OkStatus();
      KILN_ASSIGN_OR_RETURN(*out, Pad(elements));
      return absl::OkStatus();
    }
    uint64_t StateConfig() const override {
      return ConfigFingerprint({node_->batch_size_, node_->drop_remainder_});
    }

   private:
    absl::StatusOr<Element> Pad(std::vector<Element>& elements) {
      const size_t components = elements[0].size();
      if (!node_->shapes_.empty() && node_->shapes_.size() != components) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PaddedBatch: ", node_->shapes_.size(), " padded shapes for elements with ",
            components, " components"));
      }
      Element out;
      out.names = elements[0].names;
      const int64_t n = static_cast<int64_t>(elements.size());
      for (size_t c = 0; c < components; ++c) {
        const Tensor& t0 = elements[0][c];
        Shape target = t0.shape();
        for (int64_t i = 0; i < n; ++i) {
          if (elements[i].size() != components) {
            return absl::InvalidArgumentError(absl::StrCat(
                "PaddedBatch: element ", i, " has ", elements[i].size(),
                " components, the first has ", components));
          }
          const Tensor& t = elements[i][c];
          if (t.dtype() != t0.dtype() || t.rank() != t0.rank()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "PaddedBatch: component ", c, " of element ", i, " is ", DTypeName(t.dtype()),
                t.shape().ToString(), " but the first element's is ", DTypeName(t0.dtype()),
                t0.shape().ToString()));
          }
          for (int d = 0; d < t.rank(); ++d) {
            target.set_dim(d, std::max(target.dim(d), t.dim(d)));
          }
        }
        if (!node_->shapes_.empty()) {
          const Shape& want = node_->shapes_[c];
          if (want.rank() != t0.rank()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "PaddedBatch: padded shape ", want.ToString(), " of component ", c,
                " does not have the rank of the element's shape ", t0.shape().ToString()));
          }
          for (int d = 0; d < want.rank(); ++d) {
            if (want.dim(d) < 0) continue;
            if (want.dim(d) < target.dim(d)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "PaddedBatch: attempted to pad to a smaller size than the input element: "
                  "component ",
                  c, " has dimension ", d, " of size ", target.dim(d), " but the padded shape is ",
                  want.ToString()));
            }
            target.set_dim(d, want.dim(d));
          }
        }
        Shape batch_shape = target;
        batch_shape.insert(0, n);
        Tensor batch(t0.dtype(), batch_shape);
        Tensor pad;
        if (c < node_->values_.size() && node_->values_[c].valid()) {
          pad = node_->values_[c];
          if (pad.dtype() != t0.dtype() || pad.num_elements() != 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "PaddedBatch: padding value of component ", c, " must be a ",
                DTypeName(t0.dtype()), " scalar"));
          }
        }
        KILN_RETURN_IF_ERROR(FillPadded(elements, c, target, pad, &batch));
        out.tensors.push_back(std::move(batch));
      }
      return out;
    }

    static absl::Status FillPadded(const std::vector<Element>& elements, size_t c,
                                   const Shape& target, const Tensor& pad, Tensor* batch) {
      return VisitDType(batch->dtype(), [&](auto tag) -> absl::Status {
        using T = decltype(tag);
        T* dst = batch->data<T>();
        const int64_t per = target.num_elements();
        const T fill = pad.valid() ? *pad.data<T>() : T{};
        for (int64_t k = 0; k < per * static_cast<int64_t>(elements.size()); ++k) dst[k] = fill;
        const int rank = target.rank();
        for (size_t i = 0; i < elements.size(); ++i) {
          const Tensor& src = elements[i][c];
          const T* s = src.data<T>();
          const int64_t count = src.num_elements();
          T* base = dst + i * per;
          if (rank == 0) {
            base[0] = s[0];
            continue;
          }
          // Copy row by row (innermost dimension contiguous) into the padded layout.
          const int64_t inner = src.dim(rank - 1);
          std::vector<int64_t> index(rank, 0);
          for (int64_t start = 0; start < count; start += inner) {
            int64_t offset = 0;
            for (int d = 0; d < rank; ++d) offset = offset * target.dim(d) + index[d];
            for (int64_t k = 0; k < inner; ++k) base[offset + k] = s[start + k];
            for (int d = rank - 2; d >= 0; --d) {
              if (++index[d] < src.dim(d)) break;
              index[d] = 0;
            }
          }
        }
        return absl::OkStatus();
      });
    }
    const PaddedBatchNode* node_;
  };
  Dataset input_;
  int64_t batch_size_;
  std::vector<Shape> shapes_;
  std::vector<Tensor> values_;
  bool drop_remainder_;
};

class UnbatchNode : public DatasetNode {
 public:
  explicit UnbatchNode(Dataset input) : input_(std::move(input)) {}
  KILN_DATA_NODE_BOILERPLATE("Unbatch")

 private:
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const UnbatchNode* node)
        : UnaryIterator(ctx, "Unbatch", node->input_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (index_ >= rows_) {
        KILN_RETURN_IF_ERROR(input_->GetNext(&current_, end));
        if (*end) return absl::OkStatus();
        index_ = 0;
        rows_ = -1;
        for (size_t c = 0; c < current_.size(); ++c) {
          const Tensor& t = current_[c];
          if (t.rank() == 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                "Unbatch: component ", c, " is a scalar; every component needs rank >= 1"));
          }
          if (rows_ >= 0 && t.dim(0) != rows_) {
            return absl::InvalidArgumentError(absl::StrCat(
                "Unbatch: components disagree in their first dimension: component 0 has ",
                rows_, ", component ", c, " has shape ", t.shape().ToString()));
          }
          rows_ = t.dim(0);
        }
        if (rows_ < 0) rows_ = 0;
      }
      out->tensors.resize(current_.size());
      for (size_t c = 0; c < current_.size(); ++c) out->tensors[c] = current_[c].SubTensor(index_);
      out->names = current_.names;
      ++index_;
      return absl::OkStatus();
    }
    // It holds a batch between calls, which a state does not record: replayed.
    absl::Status SaveInternal(StateWriter& w) override { return SaveByReplay(w); }
    absl::Status RestoreInternal(StateReader& r) override { return RestoreByReplay(r); }

   private:
    Element current_;
    int64_t index_ = 0, rows_ = 0;
  };
  Dataset input_;
};

// ---- Shuffle ----

// The shuffle buffer. Elements that all have the same numeric dtypes and shapes (the common
// case: records, features) are packed as raw bytes in 1 MB chunks, so a buffer of a million
// int64 scalars takes 8 MB, not the ~300 bytes per element that separate tensor objects cost.
// Anything else (strings, varying shapes) is kept as Elements.
class ShuffleBuffer {
 public:
  size_t size() const { return packed_ ? packed_size_ : elements_.size(); }
  bool empty() const { return size() == 0; }

  void PushBack(Element e) {
    if (!decided_) {
      decided_ = true;
      TryStartPacked(e);
    }
    if (packed_ && !Matches(e)) Unpack();
    if (!packed_) {
      elements_.push_back(std::move(e));
      return;
    }
    if (packed_size_ == chunks_.size() * slots_per_chunk_) {
      chunks_.emplace_back(new char[slots_per_chunk_ * slot_bytes_]);
    }
    Store(packed_size_++, e);
  }
  // Removes element i, filling its place with `replacement` or with the last element.
  Element Take(size_t i) {
    if (!packed_) {
      Element out = std::move(elements_[i]);
      return out;
    }
    return Load(i);
  }
  void Replace(size_t i, Element e) {
    if (packed_ && !Matches(e)) Unpack();
    if (!packed_) {
      elements_[i] = std::move(e);
    } else {
      Store(i, e);
    }
  }
  void RemoveByMovingLast(size_t i) {
    if (!packed_) {
      elements_[i] = std::move(elements_.back());
      elements_.pop_back();
      return;
    }
    const size_t last = packed_size_ - 1;
    if (i != last) std::memcpy(Slot(i), Slot(last), slot_bytes_);
    --packed_size_;
    if (packed_size_ + slots_per_chunk_ <= chunks_.size() * slots_per_chunk_) chunks_.pop_back();
  }

 private:
  struct Component {
    DType dtype;
    Shape shape;
    size_t offset;
    size_t bytes;
  };

  void TryStartPacked(const Element& e) {
    size_t offset = 0;
    for (const Tensor& t : e.tensors) {
      if (!t.valid() || t.dtype() == DType::kString) return;
      signature_.push_back({t.dtype(), t.shape(), offset, t.byte_size()});
      offset += (t.byte_size() + 7) / 8 * 8;
    }
    if (offset == 0) {
      signature_.clear();
      return;
    }
    slot_bytes_ = offset;
    slots_per_chunk_ = std::max<size_t>(1, (size_t{1} << 20) / slot_bytes_);
    names_ = e.names;
    packed_ = true;
  }
  bool Matches(const Element& e) const {
    if (e.size() != signature_.size() || e.names != names_) return false;
    for (size_t c = 0; c < signature_.size(); ++c) {
      if (e[c].dtype() != signature_[c].dtype || e[c].shape() != signature_[c].shape) return false;
    }
    return true;
  }
  char* Slot(size_t i) const {
    return chunks_[i / slots_per_chunk_].get() + (i % slots_per_chunk_) * slot_bytes_;
  }
  void Store(size_t i, const Element& e) {
    char* slot = Slot(i);
    for (size_t c = 0; c < signature_.size(); ++c) {
      std::memcpy(slot + signature_[c].offset, e[c].raw_data(), signature_[c].bytes);
    }
  }
  Element Load(size_t i) const {
    const char* slot = Slot(i);
    Element out;
    out.tensors.reserve(signature_.size());
    for (const Component& c : signature_) {
      Tensor t(c.dtype, c.shape);
      std::memcpy(t.raw_data(), slot + c.offset, c.bytes);
      out.tensors.push_back(std::move(t));
    }
    out.names = names_;
    return out;
  }
  void Unpack() {
    elements_.reserve(packed_size_ + 1);
    for (size_t i = 0; i < packed_size_; ++i) elements_.push_back(Load(i));
    chunks_.clear();
    packed_size_ = 0;
    packed_ = false;
  }

  bool decided_ = false;
  bool packed_ = false;
  std::vector<Component> signature_;
  std::shared_ptr<const std::vector<std::string>> names_;
  size_t slot_bytes_ = 0, slots_per_chunk_ = 0, packed_size_ = 0;
  std::vector<std::unique_ptr<char[]>> chunks_;
  std::vector<Element> elements_;
};

class ShuffleNode : public DatasetNode {
 public:
  ShuffleNode(Dataset input, int64_t buffer_size, std::optional<uint64_t> seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size),
        seed_(seed ? *seed : std::random_device{}() * 0x100000001B3ull + std::random_device{}()),
        reshuffle_(reshuffle), seeded_(seed.has_value()) {}
  KILN_DATA_NODE_BOILERPLATE("Shuffle")
  int64_t Cardinality() const override { return input_.Cardinality(); }

 private:
  // tf.data's algorithm: fill the buffer, then hand out a uniformly chosen buffered element
  // and put the next input element in its place.
  //
  // Checkpoints record the epoch (which gives the seed) and the number of steps taken; a
  // restore replays those steps on a fresh input without materializing their outputs, which
  // refills the buffer with exactly the elements it held (a step costs one input element and
  // a random number: ~0.1 s per million steps over an in-memory source).
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const ShuffleNode* node)
        : UnaryIterator(ctx, "Shuffle", node->input_), node_(node) {
      if (!node->seeded_) {
        ctx.pipeline->MarkNotReplayable(absl::StrCat("Shuffle without a seed (stage ", path_, ")"));
      } else if (node->reshuffle_) {
        // Taken now so that a state saved before the first element records it.
        ctx.pipeline->Iteration(node, path_, &node->iterations_);
      }
    }
    absl::Status GetNextInternal(Element* out, bool* end) override { return Step(out, end); }

   protected:
    uint64_t StateConfig() const override {
      return ConfigFingerprint(
          {node_->buffer_size_, static_cast<int64_t>(node_->seed_), node_->reshuffle_});
    }
    absl::Status SaveInternal(StateWriter& w) override { return SaveByReplay(w); }
    absl::Status RestoreInternal(StateReader& r) override { return RestoreByReplay(r); }
    absl::Status SkipInternal(int64_t n, int64_t* skipped) override {
      while (*skipped < n) {
        bool end = false;
        absl::Status s = Step(nullptr, &end);
        if (absl::IsCancelled(s)) return s;
        if (s.ok() && end) break;
        ++*skipped;
      }
      return absl::OkStatus();
    }

   private:
    // On the first step, not at construction: a restore sets the pipeline's iterations first.
    void Seed() {
      seeded_ = true;
      uint64_t seed = node_->seed_;
      if (node_->reshuffle_) {
        if (node_->seeded_) {
          const uint64_t iteration = ctx_.pipeline->Iteration(node_, path_, &node_->iterations_);
          seed += 0x9E3779B97F4A7C15ull * ((iteration << 32) + ctx_.epoch_key);
        } else {
          seed = std::random_device{}();
        }
      }
      rng_.seed(seed);
    }

    // One step of the algorithm; `out` null: the chosen element is dropped, not copied out.
    absl::Status Step(Element* out, bool* end) {
      if (!seeded_) Seed();
      while (!input_done_ && buffer_.size() < static_cast<size_t>(node_->buffer_size_)) {
        Element e;
        bool input_end = false;
        KILN_RETURN_IF_ERROR(input_->GetNext(&e, &input_end));
        if (input_end) {
          input_done_ = true;
          input_.reset();
          break;
        }
        buffer_.PushBack(std::move(e));
      }
      if (buffer_.empty()) {
        *end = true;
        return absl::OkStatus();
      }
      const size_t index = rng_() % buffer_.size();
      if (out != nullptr) *out = buffer_.Take(index);
      if (!input_done_) {
        bool input_end = false;
        Element next;
        absl::Status s = input_->GetNext(&next, &input_end);
        if (!s.ok()) {
          buffer_.RemoveByMovingLast(index);
          return s;
        }
        if (!input_end) {
          buffer_.Replace(index, std::move(next));
          return absl::OkStatus();
        }
        input_done_ = true;
        input_.reset();
      }
      buffer_.RemoveByMovingLast(index);
      return absl::OkStatus();
    }

    const ShuffleNode* node_;
    bool seeded_ = false;
    std::mt19937_64 rng_;
    ShuffleBuffer buffer_;
    bool input_done_ = false;
  };
  Dataset input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
  bool seeded_;
  // Pipelines that have iterated this dataset (PipelineState::NextEpoch).
  mutable std::atomic<uint64_t> iterations_{0};
};

// ---- Interleave (sequential) and FlatMap ----

class InterleaveNode : public DatasetNode {
 public:
  InterleaveNode(Dataset input, DatasetFn fn, int cycle_length, int block_length,
                 std::string name)
      : input_(std::move(input)), fn_(std::move(fn)), cycle_length_(cycle_length),
        block_length_(block_length), name_(std::move(name)) {}
  KILN_DATA_NODE_BOILERPLATE(name_)

 private:
  // tf.data's InterleaveDataset algorithm, step for step, so that orders match.
  class It : public UnaryIterator {
   public:
    It(const IteratorContext& ctx, const InterleaveNode* node)
        : UnaryIterator(ctx, node->name_, node->input_), node_(node),
          cycle_length_(node->cycle_length_ == kAutotune ? ctx.pipeline->cpu_budget()
                                                         : node->cycle_length_),
          current_(cycle_length_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      while (!end_of_input_ || num_open_ > 0) {
        if (current_[cycle_index_]) {
          bool element_end = false;
          KILN_RETURN_IF_ERROR(current_[cycle_index_]->GetNext(out, &element_end));
          if (!element_end) {
            if (++block_index_ == node_->block_length_) AdvanceToNextInCycle();
            return absl::OkStatus();
          }
          current_[cycle_index_].reset();
          --num_open_;
          AdvanceToNextInCycle();
        } else if (!end_of_input_) {
          Element arg;
          absl::Status s = input_->GetNext(&arg, &end_of_input_);
          if (!s.ok() || !end_of_input_) ++args_pulled_;
          KILN_RETURN_IF_ERROR(s);
          if (!end_of_input_) {
            arg_ordinal_[cycle_index_] = args_pulled_ - 1;
            KILN_RETURN_IF_ERROR(Open(cycle_index_, std::move(arg)));
          }
        } else {
          AdvanceToNextInCycle();
        }
      }
      *end = true;
      return absl::OkStatus();
    }

   protected:
    uint64_t StateConfig() const override {
      return ConfigFingerprint({cycle_length_, node_->block_length_});
    }
    // The cycle's position, which input element each open input was made from, and the open
    // inputs' own states. A restore pulls the input's elements again (file names, typically)
    // to remake the open inputs from theirs, then restores each to its position; the inputs
    // finished before are not read again.
    absl::Status SaveInternal(StateWriter& w) override {
      w.PutInt(args_pulled_);
      w.PutInt(cycle_index_);
      w.PutInt(block_index_);
      w.PutBool(end_of_input_);
      for (int i = 0; i < cycle_length_; ++i) {
        w.PutBool(current_[i] != nullptr);
        if (current_[i]) w.PutInt(arg_ordinal_[i]);
      }
      for (auto& open : current_) {
        if (open) KILN_RETURN_IF_ERROR(open->Save(w));
      }
      return absl::OkStatus();
    }
    absl::Status RestoreInternal(StateReader& r) override {
      int64_t pulled = 0, cycle_index = 0, block_index = 0;
      KILN_RETURN_IF_ERROR(r.GetInt(&pulled));
      KILN_RETURN_IF_ERROR(r.GetInt(&cycle_index));
      KILN_RETURN_IF_ERROR(r.GetInt(&block_index));
      KILN_RETURN_IF_ERROR(r.GetBool(&end_of_input_));
      if (pulled < 0 || cycle_index < 0 || cycle_index >= cycle_length_ || block_index < 0) {
        return absl::DataLossError(absl::StrCat("RestoreState: corrupt record of stage ", path_));
      }
      std::vector<bool> open(cycle_length_);
      for (int i = 0; i < cycle_length_; ++i) {
        bool is_open = false;
        KILN_RETURN_IF_ERROR(r.GetBool(&is_open));
        open[i] = is_open;
        if (is_open) {
          KILN_RETURN_IF_ERROR(r.GetInt(&arg_ordinal_[i]));
          if (arg_ordinal_[i] < 0 || arg_ordinal_[i] >= pulled) {
            return absl::DataLossError(
                absl::StrCat("RestoreState: corrupt record of stage ", path_));
          }
        }
      }
      std::vector<Element> args(cycle_length_);
      KILN_RETURN_IF_ERROR(
          ReplayInterleaveInputs(*input_, path_, pulled, open, arg_ordinal_, &args));
      args_pulled_ = pulled;
      if (end_of_input_) {
        bool end = false;
        Element scratch;
        KILN_RETURN_IF_ERROR(input_->GetNext(&scratch, &end));
        if (!end) {
          return absl::FailedPreconditionError(
              absl::StrCat("RestoreState: the input of stage ", path_, " has more than the ",
                           pulled, " elements it had when the state was saved"));
        }
      }
      cycle_index_ = static_cast<int>(cycle_index);
      block_index_ = static_cast<int>(block_index);
      for (int i = 0; i < cycle_length_; ++i) {
        if (!open[i]) continue;
        KILN_RETURN_IF_ERROR(Open(i, std::move(args[i])));
        KILN_RETURN_IF_ERROR(current_[i]->Restore(r));
      }
      return absl::OkStatus();
    }

   private:
    absl::Status Open(int slot, Element arg) {
      KILN_ASSIGN_OR_RETURN(Dataset ds, node_->fn_(std::move(arg)));
      IteratorContext ctx = InputContext();
      ctx.prefix = absl::StrCat(path_, "/fn");
      KILN_ASSIGN_OR_RETURN(current_[slot], MakeInputIterator(ds, ctx));
      ++num_open_;
      return absl::OkStatus();
    }

    void AdvanceToNextInCycle() {
      block_index_ = 0;
      cycle_index_ = (cycle_index_ + 1) % cycle_length_;
    }
    const InterleaveNode* node_;
    const int cycle_length_;
    std::vector<std::unique_ptr<IteratorBase>> current_;
    std::vector<int64_t> arg_ordinal_ = std::vector<int64_t>(cycle_length_);  // per open input
    int64_t args_pulled_ = 0;  // input elements (and input errors) taken so far
    int cycle_index_ = 0;
    int block_index_ = 0;
    int num_open_ = 0;
    bool end_of_input_ = false;
  };
  Dataset input_;
  DatasetFn fn_;
  int cycle_length_;
  int block_length_;
  std::string name_;
};

}  // namespace

absl::Status CollectBatch(IteratorBase* input, int64_t batch_size, bool drop_remainder,
                          std::vector<Element>* elements, bool* end) {
  for (int64_t i = 0; i < batch_size; ++i) {
    Element e;
    bool input_end = false;
    KILN_RETURN_IF_ERROR(input->GetNext(&e, &input_end));
    if (input_end) break;
    elements->push_back(std::move(e));
  }
  *end = elements->empty() ||
         (drop_remainder && static_cast<int64_t>(elements->size()) < batch_size);
  return absl::OkStatus();
}

Dataset MakeSequentialMap(const Dataset& input, MapFn fn) {
  return Dataset(std::make_shared<MapNode>(input, std::move(fn)));
}

Dataset MakeSequentialBatch(const Dataset& input, int64_t batch_size, bool drop_remainder) {
  return Dataset(std::make_shared<BatchNode>(input, batch_size, drop_remainder));
}

Dataset MakeSequentialInterleave(const Dataset& input, DatasetFn fn, int cycle_length,
                                 int block_length, const std::string& name) {
  return Dataset(
      std::make_shared<InterleaveNode>(input, std::move(fn), cycle_length, block_length, name));
}

#define KILN_PROPAGATE_ERROR() \
  if (!ok()) return *this

Dataset Dataset::Filter(PredicateFn predicate) const {
  KILN_PROPAGATE_ERROR();
  if (!predicate) return Dataset(absl::InvalidArgumentError("Filter: empty predicate"));
  return Dataset(std::make_shared<FilterNode>(*this, std::move(predicate)));
}

Dataset Dataset::FlatMap(DatasetFn fn) const {
  KILN_PROPAGATE_ERROR();
  if (!fn) return Dataset(absl::InvalidArgumentError("FlatMap: empty function"));
  return MakeSequentialInterleave(*this, std::move(fn), 1, 1, "FlatMap");
}

Dataset Dataset::PaddedBatch(int64_t batch_size, std::vector<Shape> padded_shapes,
                             std::vector<Tensor> padding_values, bool drop_remainder) const {
  KILN_PROPAGATE_ERROR();
  if (batch_size <= 0) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("PaddedBatch: batch_size must be > 0, got ", batch_size)));
  }
  return Dataset(std::make_shared<PaddedBatchNode>(*this, batch_size, std::move(padded_shapes),
                                                   std::move(padding_values), drop_remainder));
}

Dataset Dataset::Unbatch() const {
  KILN_PROPAGATE_ERROR();
  return Dataset(std::make_shared<UnbatchNode>(*this));
}

Dataset Dataset::Shuffle(int64_t buffer_size, std::optional<uint64_t> seed,
                         bool reshuffle_each_iteration) const {
  KILN_PROPAGATE_ERROR();
  if (buffer_size <= 0) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Shuffle: buffer_size must be > 0, got ", buffer_size)));
  }
  return Dataset(
      std::make_shared<ShuffleNode>(*this, buffer_size, seed, reshuffle_each_iteration));
}

Dataset Dataset::Repeat(int64_t count) const {
  KILN_PROPAGATE_ERROR();
  return Dataset(std::make_shared<RepeatNode>(*this, count));
}

Dataset Dataset::Take(int64_t count) const {
  KILN_PROPAGATE_ERROR();
  return Dataset(std::make_shared<TakeNode>(*this, count));
}

Dataset Dataset::Skip(int64_t count) const {
  KILN_PROPAGATE_ERROR();
  return Dataset(std::make_shared<SkipNode>(*this, count));
}

Dataset Dataset::Shard(int64_t num_shards, int64_t index) const {
  KILN_PROPAGATE_ERROR();
  if (num_shards < 1) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Shard: num_shards must be >= 1, got ", num_shards)));
  }
  if (index < 0 || index >= num_shards) {
    return Dataset(absl::InvalidArgumentError(absl::StrCat(
        "Shard: index must be in [0, num_shards = ", num_shards, "), got ", index)));
  }
  return Dataset(std::make_shared<ShardNode>(*this, num_shards, index));
}

Dataset Dataset::Zip(const std::vector<Dataset>& datasets) {
  if (datasets.empty()) return Dataset(absl::InvalidArgumentError("Zip: no datasets"));
  for (const Dataset& d : datasets) {
    if (!d.ok()) return d;
  }
  return Dataset(std::make_shared<ZipNode>(datasets));
}

Dataset Dataset::Zip(const Dataset& other) const { return Zip({*this, other}); }

Dataset Dataset::Concatenate(const Dataset& other) const {
  KILN_PROPAGATE_ERROR();
  if (!other.ok()) return other;
  return Dataset(std::make_shared<ConcatenateNode>(*this, other));
}

Dataset Dataset::Enumerate(int64_t start) const {
  KILN_PROPAGATE_ERROR();
  return Dataset(std::make_shared<EnumerateNode>(*this, start));
}

Dataset Dataset::IgnoreErrors() const {
  KILN_PROPAGATE_ERROR();
  return Dataset(std::make_shared<IgnoreErrorsNode>(*this));
}

}  // namespace kiln::data
