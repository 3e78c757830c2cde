// Source datasets: Range, FromTensors, FromTensorSlices, FromGenerator, ListFiles.
#include <glob.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/internal.h"
#include "kiln/core/status.h"

namespace kiln::data {
namespace {

// name() and MakeIterator() of a source node whose iterator `It` is made from (ctx, `arg`) and
// has nothing to Init().
#define KILN_SOURCE_NODE_BOILERPLATE(Name, arg)                                          \
  std::string name() const override { return Name; }                                     \
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(const IteratorContext& ctx) \
      const override {                                                                   \
    return std::unique_ptr<IteratorBase>(new It(ctx, arg));                              \
  }

// What GetNextInternal returns past the last element.
absl::Status EndOfSequence(bool* end) {
  *end = true;
  return absl::OkStatus();
}

// ---- Range ----

class RangeNode : public DatasetNode {
 public:
  RangeNode(int64_t start, int64_t stop, int64_t step) : start_(start), stop_(stop), step_(step) {}
  int64_t Cardinality() const override {
    if (step_ > 0) return std::max<int64_t>(0, (stop_ - start_ + step_ - 1) / step_);
    return std::max<int64_t>(0, (start_ - stop_ - step_ - 1) / -step_);
  }
  KILN_SOURCE_NODE_BOILERPLATE("Range", this)

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const RangeNode* node)
        : IteratorBase(ctx, "Range", false),
          start_(node->start_),
          next_(node->start_),
          stop_(node->stop_),
          step_(node->step_) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      if (step_ > 0 ? next_ >= stop_ : next_ <= stop_) return EndOfSequence(end);
      out->tensors.resize(1);
      Tensor& t = out->tensors[0];
      // `*out` is being overwritten: when no one else holds its previous scalar's buffer, reuse
      // it (the hot path then allocates nothing).
      if (t.dtype() == DType::kInt64 && t.rank() == 0 && t.buffer() != nullptr &&
          t.buffer().use_count() == 1 && t.byte_offset() == 0) {
        *t.data<int64_t>() = next_;
      } else {
        t = Tensor::Scalar<int64_t>(next_);
      }
      out->names.reset();
      next_ += step_;
      return absl::OkStatus();
    }
    uint64_t StateConfig() const override { return ConfigFingerprint({start_, stop_, step_}); }
    absl::Status SaveInternal(StateWriter& w) override {
      w.PutInt(next_);
      return absl::OkStatus();
    }
    absl::Status RestoreInternal(StateReader& r) override { return r.GetInt(&next_); }
    absl::Status SkipInternal(int64_t n, int64_t* skipped) override {
      const int64_t left =
          step_ > 0 ? (stop_ - next_ + step_ - 1) / step_ : (next_ - stop_ - step_ - 1) / -step_;
      *skipped = std::clamp<int64_t>(left, 0, n);
      next_ += *skipped * step_;
      return absl::OkStatus();
    }

   private:
    const int64_t start_;
    int64_t next_, stop_, step_;
  };
  int64_t start_, stop_, step_;
};

// ---- FromTensors / FromTensorSlices ----

class FromTensorsNode : public DatasetNode {
 public:
  explicit FromTensorsNode(Element element) : element_(std::move(element)) {}
  int64_t Cardinality() const override { return 1; }
  KILN_SOURCE_NODE_BOILERPLATE("FromTensors", element_)

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const Element& e)
        : IteratorBase(ctx, "FromTensors", false), element_(e) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      if (done_) return EndOfSequence(end);
      done_ = true;
      *out = element_;
      return absl::OkStatus();
    }

   private:
    const Element& element_;
    bool done_ = false;
  };
  Element element_;
};

class FromTensorSlicesNode : public DatasetNode {
 public:
  FromTensorSlicesNode(Element element, int64_t rows) : element_(std::move(element)), rows_(rows) {}
  int64_t Cardinality() const override { return rows_; }
  KILN_SOURCE_NODE_BOILERPLATE("FromTensorSlices", this)

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const FromTensorSlicesNode* node)
        : IteratorBase(ctx, "FromTensorSlices", false), node_(node) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      if (index_ >= node_->rows_) return EndOfSequence(end);
      out->tensors.clear();
      for (const Tensor& t : node_->element_.tensors) out->tensors.push_back(t.SubTensor(index_));
      out->names = node_->element_.names;
      ++index_;
      return absl::OkStatus();
    }
    uint64_t StateConfig() const override { return ConfigFingerprint({node_->rows_}); }
    absl::Status SaveInternal(StateWriter& w) override {
      w.PutInt(index_);
      return absl::OkStatus();
    }
    absl::Status RestoreInternal(StateReader& r) override { return r.GetInt(&index_); }
    absl::Status SkipInternal(int64_t n, int64_t* skipped) override {
      *skipped = std::clamp<int64_t>(node_->rows_ - index_, 0, n);
      index_ += *skipped;
      return absl::OkStatus();
    }

   private:
    const FromTensorSlicesNode* node_;
    int64_t index_ = 0;
  };
  Element element_;
  int64_t rows_;
};

// ---- FromGenerator ----

class GeneratorNode : public DatasetNode {
 public:
  explicit GeneratorNode(std::function<Generator()> make) : make_(std::move(make)) {}
  KILN_SOURCE_NODE_BOILERPLATE("Generator", make_)

 private:
  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const std::function<Generator()>& make)
        : IteratorBase(ctx, "Generator", false), make_(make) {}
    absl::Status GetNextInternal(Element* out, bool* end) override {
      if (done_) return EndOfSequence(end);
      // Created on the first GetNext, as a Python generator starts running on its first next().
      if (!generator_) generator_ = make_();
      absl::StatusOr<std::optional<Element>> next = generator_();
      if (!next.ok()) return next.status();
      if (!next->has_value()) {
        done_ = true;
        *end = true;
        generator_ = nullptr;
        return absl::OkStatus();
      }
      *out = std::move(**next);
      return absl::OkStatus();
    }

   private:
    const std::function<Generator()>& make_;
    Generator generator_;
    bool done_ = false;
  };
  std::function<Generator()> make_;
};

// ---- ListFiles ----

class ListFilesNode : public DatasetNode {
 public:
  ListFilesNode(std::vector<std::string> files, bool shuffle, std::optional<uint64_t> seed)
      : files_(std::move(files)), shuffle_(shuffle), seed_(seed) {}
  int64_t Cardinality() const override { return static_cast<int64_t>(files_.size()); }
  KILN_SOURCE_NODE_BOILERPLATE("ListFiles", this)

 private:
  // The order of one epoch. With a seed every iterator of one dataset would be shuffled alike
  // unless the epoch moves the seed on, as tf.data's reshuffle_each_iteration does.
  std::vector<std::string> Order(uint64_t epoch) const {
    std::vector<std::string> order = files_;
    if (shuffle_) {
      const uint64_t seed = seed_ ? *seed_ + 0x9E3779B97F4A7C15ull * epoch : std::random_device{}();
      std::mt19937_64 rng(seed);
      std::shuffle(order.begin(), order.end(), rng);
    }
    return order;
  }

  class It : public IteratorBase {
   public:
    It(const IteratorContext& ctx, const ListFilesNode* node)
        : IteratorBase(ctx, "ListFiles", false), node_(node) {
      if (node->shuffle_ && !node->seed_) {
        ctx.pipeline->MarkNotReplayable(
            absl::StrCat("ListFiles shuffled without a seed (stage ", path_, ")"));
      } else if (node->shuffle_) {
        // Taken now so that a state saved before the first element records it.
        ctx.pipeline->Iteration(node, path_, &node->iterations_);
      }
    }
    absl::Status GetNextInternal(Element* out, bool* end) override {
      if (!ordered_) Order();
      if (index_ >= files_.size()) return EndOfSequence(end);
      out->tensors.assign(1, Tensor::Scalar<std::string>(files_[index_++]));
      out->names.reset();
      return absl::OkStatus();
    }
    uint64_t StateConfig() const override {
      return ConfigFingerprint({static_cast<int64_t>(node_->files_.size()), node_->shuffle_,
                                static_cast<int64_t>(node_->seed_.value_or(0))});
    }
    absl::Status SaveInternal(StateWriter& w) override {
      w.PutUint(index_);
      return absl::OkStatus();
    }
    absl::Status RestoreInternal(StateReader& r) override {
      uint64_t index = 0;
      KILN_RETURN_IF_ERROR(r.GetUint(&index));
      if (!ordered_) Order();
      index_ = static_cast<size_t>(std::min<uint64_t>(index, files_.size()));
      return absl::OkStatus();
    }

   private:
    // On the first call, not at construction: a restore sets the pipeline's iterations first.
    void Order() {
      ordered_ = true;
      uint64_t epoch = 0;
      if (node_->shuffle_ && node_->seed_) {
        epoch =
            (ctx_.pipeline->Iteration(node_, path_, &node_->iterations_) << 32) + ctx_.epoch_key;
      }
      files_ = node_->Order(epoch);
    }

    const ListFilesNode* node_;
    bool ordered_ = false;
    std::vector<std::string> files_;
    size_t index_ = 0;
  };
  std::vector<std::string> files_;
  bool shuffle_;
  std::optional<uint64_t> seed_;
  // Pipelines that have iterated this dataset (PipelineState::NextEpoch).
  mutable std::atomic<uint64_t> iterations_{0};
};

}  // namespace

Dataset Dataset::Range(int64_t stop) { return Range(0, stop, 1); }

Dataset Dataset::Range(int64_t start, int64_t stop, int64_t step) {
  if (step == 0) return Dataset(absl::InvalidArgumentError("Range: step must not be 0"));
  return Dataset(std::make_shared<RangeNode>(start, stop, step));
}

Dataset Dataset::FromTensors(Element element) {
  for (size_t i = 0; i < element.size(); ++i) {
    if (!element[i].valid()) {
      return Dataset(absl::InvalidArgumentError(
          absl::StrCat("FromTensors: component ", i, " is an invalid (empty) tensor")));
    }
  }
  return Dataset(std::make_shared<FromTensorsNode>(std::move(element)));
}

Dataset Dataset::FromTensorSlices(Element element) {
  if (element.size() == 0) {
    return Dataset(absl::InvalidArgumentError("FromTensorSlices: the element has no components"));
  }
  int64_t rows = -1;
  for (size_t i = 0; i < element.size(); ++i) {
    const Tensor& t = element[i];
    if (!t.valid() || t.rank() == 0) {
      return Dataset(absl::InvalidArgumentError(absl::StrCat(
          "FromTensorSlices: component ", i, " must have rank >= 1, got shape ",
          t.valid() ? t.shape().ToString() : "(invalid tensor)")));
    }
    if (rows >= 0 && t.dim(0) != rows) {
      return Dataset(absl::InvalidArgumentError(absl::StrCat(
          "FromTensorSlices: all components must have the same size in dimension 0; component "
          "0 has ",
          rows, " and component ", i, " has shape ", t.shape().ToString())));
    }
    rows = t.dim(0);
  }
  return Dataset(std::make_shared<FromTensorSlicesNode>(std::move(element), rows));
}

Dataset Dataset::FromGenerator(std::function<Generator()> make_generator) {
  if (!make_generator) return Dataset(absl::InvalidArgumentError("FromGenerator: empty function"));
  return Dataset(std::make_shared<GeneratorNode>(std::move(make_generator)));
}

Dataset Dataset::ListFiles(const std::vector<std::string>& patterns, bool shuffle,
                           std::optional<uint64_t> seed) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    const int rc = glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) {
      return Dataset(absl::InternalError(absl::StrCat("ListFiles: glob failed on ", pattern)));
    }
  }
  if (files.empty()) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("ListFiles: expected the file pattern to match at least one file, but no "
                     "files matched: ",
                     absl::StrJoin(patterns, ", "))));
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return Dataset(std::make_shared<ListFilesNode>(std::move(files), shuffle, seed));
}

}  // namespace kiln::data
