// Parallel Map, parallel Batch and Prefetch: one-input stages on AsyncStage (async_stage.h).
// The fused map+batch is in map_and_batch.cc, parallel Interleave in parallel_interleave.cc.
#include "absl/strings/str_cat.h"
#include "data/async_stage.h"
#include "data/nodes.h"
#include "data/stage_steps.h"
#include "kiln/core/status.h"

namespace kiln::data {
namespace {

class ParallelMapStage : public OneElementStage {
 public:
  ParallelMapStage(const IteratorContext& ctx, Config config, Dataset input, const MapFn& fn)
      : OneElementStage(ctx, std::move(config), std::move(input)), fn_(fn) {}
  ~ParallelMapStage() override { Shutdown(); }

 protected:
  absl::Status Process(InputUnit& unit, Element* out) override {
    absl::StatusOr<Element> result = fn_(std::move(unit.element));
    if (!result.ok()) return result.status();
    *out = std::move(*result);
    return absl::OkStatus();
  }
  bool one_to_one() const override { return true; }

 private:
  const MapFn& fn_;
};

class PrefetchStage : public OneElementStage {
 public:
  using OneElementStage::OneElementStage;
  ~PrefetchStage() override { Shutdown(); }

 protected:
  absl::Status Process(InputUnit& unit, Element* out) override {
    *out = std::move(unit.element);
    return absl::OkStatus();
  }
  bool has_function() const override { return false; }
  bool one_to_one() const override { return true; }
};

class ParallelBatchStage : public AsyncStage {
 public:
  ParallelBatchStage(const IteratorContext& ctx, Config config, Dataset input, int64_t batch_size,
                     bool drop_remainder)
      : AsyncStage(ctx, std::move(config), std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}
  ~ParallelBatchStage() override { Shutdown(); }

 protected:
  absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) override {
    unit->elements.reserve(batch_size_);
    return CollectBatch(input, batch_size_, drop_remainder_, &unit->elements, end);
  }
  absl::Status Process(InputUnit& unit, Element* out) override {
    KILN_ASSIGN_OR_RETURN(*out, StackElements(unit.elements));
    return absl::OkStatus();
  }

 private:
  int64_t batch_size_;
  bool drop_remainder_;
};

class ParallelMapNode : public DatasetNode {
 public:
  ParallelMapNode(Dataset input, MapFn fn, int parallelism, bool deterministic)
      : spec_{std::move(input), std::move(fn), parallelism, deterministic} {}
  std::string name() const override { return "ParallelMap"; }
  int64_t Cardinality() const override { return spec_.input.Cardinality(); }
  const ParallelMapSpec* AsParallelMap() const override { return &spec_; }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    AsyncStage::Config config{"ParallelMap", spec_.parallelism, 0, spec_.deterministic};
    auto it = std::make_unique<ParallelMapStage>(ctx, config, spec_.input, spec_.fn);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  ParallelMapSpec spec_;
};

class PrefetchNode : public DatasetNode {
 public:
  PrefetchNode(Dataset input, int64_t buffer) : input_(std::move(input)), buffer_(buffer) {}
  std::string name() const override { return "Prefetch"; }
  int64_t Cardinality() const override { return input_.Cardinality(); }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    AsyncStage::Config config{"Prefetch", 1, buffer_, true};
    auto it = std::make_unique<PrefetchStage>(ctx, config, input_);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  Dataset input_;
  int64_t buffer_;
};

class ParallelBatchNode : public DatasetNode {
 public:
  ParallelBatchNode(Dataset input, int64_t batch_size, bool drop_remainder, int parallelism,
                    bool deterministic)
      : input_(std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder),
        parallelism_(parallelism),
        deterministic_(deterministic) {}
  std::string name() const override { return "ParallelBatch"; }
  int64_t Cardinality() const override {
    const int64_t n = input_.Cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }
  absl::StatusOr<std::unique_ptr<IteratorBase>> MakeIterator(
      const IteratorContext& ctx) const override {
    KILN_ASSIGN_OR_RETURN(
        std::unique_ptr<IteratorBase> fused,
        MakeFusedMapAndBatch(ctx, input_,
                             {batch_size_, drop_remainder_, parallelism_, deterministic_}));
    if (fused) return fused;
    AsyncStage::Config config{"ParallelBatch", parallelism_, 0, deterministic_};
    auto it =
        std::make_unique<ParallelBatchStage>(ctx, config, input_, batch_size_, drop_remainder_);
    KILN_RETURN_IF_ERROR(it->Init());
    return std::unique_ptr<IteratorBase>(std::move(it));
  }

 private:
  Dataset input_;
  int64_t batch_size_;
  bool drop_remainder_;
  int parallelism_;
  bool deterministic_;
};

}  // namespace

Dataset Dataset::Map(MapFn fn, int num_parallel_calls, bool deterministic) const {
  if (!ok()) return *this;
  if (!fn) return Dataset(absl::InvalidArgumentError("Map: empty function"));
  if (num_parallel_calls < kAutotune) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Map: num_parallel_calls must be kSequential, kAutotune or > 0, got ",
                     num_parallel_calls)));
  }
  if (num_parallel_calls == kSequential) return MakeSequentialMap(*this, std::move(fn));
  return Dataset(
      std::make_shared<ParallelMapNode>(*this, std::move(fn), num_parallel_calls, deterministic));
}

Dataset Dataset::Batch(int64_t batch_size, bool drop_remainder, int num_parallel_calls,
                       bool deterministic) const {
  if (!ok()) return *this;
  if (batch_size <= 0) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Batch: batch_size must be > 0, got ", batch_size)));
  }
  // A parallel map followed by this batch is fused when the iterator is built
  // (MakeFusedMapAndBatch), with this batch's options.
  if (num_parallel_calls == kSequential) {
    return MakeSequentialBatch(*this, batch_size, drop_remainder);
  }
  return Dataset(std::make_shared<ParallelBatchNode>(*this, batch_size, drop_remainder,
                                                     num_parallel_calls, deterministic));
}

Dataset Dataset::Prefetch(int64_t buffer_size) const {
  if (!ok()) return *this;
  if (buffer_size == 0) return *this;  // tf.data: prefetch(0) is a no-op
  if (buffer_size < kAutotune) {
    return Dataset(absl::InvalidArgumentError(
        absl::StrCat("Prefetch: buffer_size must be >= 0 or kAutotune, got ", buffer_size)));
  }
  return Dataset(std::make_shared<PrefetchNode>(*this, buffer_size));
}

}  // namespace kiln::data
