// map_and_batch_fusion: a Batch whose input is a parallel Map is built, when MakeIterator builds
// the pipeline, as one MapAndBatch stage (see nodes.h, MakeFusedMapAndBatch).
//
// As tf.data's map_and_batch_fusion: each map result is copied into its slot of the batch by
// the worker that computed it, while it is still in that core's cache, instead of by a later
// batch stage that reads every result back from memory (in the image pipeline that copy of
// 64 x 588 KiB per batch was a sixth of the CPU time). The parallel map runs unchanged, one
// call per element; its outputs are views of the slots (so the RAM budget counts each
// element's bytes once) and the batch iterator on top hands out the filled batch tensors.
// A deterministic map fills slots by input position; a nondeterministic one in the order its
// calls finish (as the unfused pipeline would batch them).
//
// A MapIntoFn (map_into.h: an image Chain ending in decode -> resize -> normalize) goes one
// step further and computes its image in the slot itself, so that nothing is copied: it asks
// for the slot before it knows whether it will succeed, which takes the position early (a
// nondeterministic call that then fails hands it to the next call, see BatchSlots::holes).
//
// The rewrite keeps both stages' options: the fused stage runs with the larger of the two
// parallelism requests (kAutotune when either asks for it: it does both stages' work) and is
// deterministic unless the Map or a parallel Batch allows otherwise.
#include <cstring>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "data/async_stage.h"
#include "data/batch_buffers.h"
#include "data/nodes.h"
#include "data/stage_steps.h"
#include "kiln/core/status.h"
#include "kiln/data/map_into.h"

namespace kiln::data {
namespace {

struct FusedSpec {
  int64_t batch_size;
  bool drop_remainder;
  int parallelism;
  bool deterministic;
};

struct BatchSlots {
  struct Batch {
    // [batch_size, ...] per component; an entry stays invalid until the first element that
    // has the component (a MapIntoFn allocates the slot of one component before the others
    // are known).
    std::vector<Tensor> tensors;
    decltype(Element::names) names;
    int64_t written = 0;  // slots filled
    bool shaped = false;  // a whole result has set the number of components
  };
  std::mutex mu;
  std::unordered_map<int64_t, Batch> batches;  // by batch index
  int64_t next_slot = 0;                       // nondeterministic: slots handed out so far
  // Nondeterministic: positions taken by a MapIntoFn call that then failed, handed out again
  // (lowest first) before next_slot, so that every batch but the last is still full.
  std::set<int64_t> holes;
  // The batch tensors' memory: recycled, in 2 MiB pages (batch_buffers.h); the map node's,
  // shared by its iterators (ParallelMapSpec::batch_buffers).
  std::shared_ptr<BatchBufferPool> pool;
};

// `from` (one element's component) into `slot` (a view of its batch slot, [1, ...]).
void CopyIntoSlot(const Tensor& from, Tensor& slot) {
  if (from.dtype() == DType::kString) {
    const bool unique = from.buffer().use_count() == 1;
    std::string* src = from.data<std::string>();
    std::string* dst = slot.data<std::string>();
    for (int64_t k = 0; k < from.num_elements(); ++k) dst[k] = unique ? std::move(src[k]) : src[k];
  } else if (from.raw_data() != slot.raw_data()) {  // not already written there (map_into.h)
    std::memcpy(slot.raw_data(), from.raw_data(), from.byte_size());
  }
}

// The error StackElements gives for the same mismatch, naming the batch and the element.
absl::Status CheckFits(const Element& element, const std::vector<Tensor>& batch, int64_t index,
                       int64_t slot) {
  if (element.size() != batch.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Cannot batch elements with different numbers of components: batch ", index,
        " started with ", batch.size(), " and its element ", slot, " had ", element.size()));
  }
  for (size_t c = 0; c < batch.size(); ++c) {
    const Tensor& t = element[c];
    Shape expected = batch[c].shape();
    expected.erase(0);
    if (t.dtype() != batch[c].dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Cannot batch tensors with different dtypes in component ", c, ". Batch ",
                       index, " started with dtype ", DTypeName(batch[c].dtype()),
                       " and its element ", slot, " had dtype ", DTypeName(t.dtype())));
    }
    if (t.shape() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("Cannot batch tensors with different shapes in component ", c, ". Batch ",
                       index, " started with element shape ", expected.ToString(),
                       " and its element ", slot, " had shape ", t.shape().ToString(), "."));
    }
  }
  return absl::OkStatus();
}

class MapIntoSlotsStage : public OneElementStage {
 public:
  MapIntoSlotsStage(const IteratorContext& ctx, Config config, Dataset input, const MapFn& fn,
                    int64_t batch_size, std::shared_ptr<BatchSlots> slots)
      : OneElementStage(ctx, config, std::move(input)),
        fn_(fn),
        batch_size_(batch_size),
        deterministic_(config.deterministic),
        slots_(std::move(slots)) {}
  ~MapIntoSlotsStage() override { Shutdown(); }

 protected:
  absl::Status Process(InputUnit& unit, Element* out) override {
    // Where this element goes: taken by the first slot allocation of a MapIntoFn, else once
    // the result is known (so that a failed call never holds a slot).
    int64_t position = -1;
    absl::StatusOr<Element> result;
    const MapIntoFn* into = fn_.target<MapIntoFn>();
    if (into != nullptr && into->into) {
      auto allocate = [&](int component, DType dtype,
                          const Shape& shape) -> absl::StatusOr<Tensor> {
        std::lock_guard<std::mutex> lock(slots_->mu);
        if (position < 0) position = TakePositionLocked(unit.seq);
        return SlotLocked(position, component, dtype, shape);
      };
      result = into->into(std::move(unit.element), allocate);
    } else {
      result = fn_(std::move(unit.element));
    }
    if (!result.ok()) {
      ReleasePosition(position);
      return result.status();
    }
    std::vector<Tensor> batch;
    int64_t index = 0, slot = 0;
    {
      std::lock_guard<std::mutex> lock(slots_->mu);
      const int64_t at = position >= 0 ? position : NextPositionLocked(unit.seq);
      index = at / batch_size_;
      slot = at % batch_size_;
      BatchSlots::Batch& b = slots_->batches[index];
      if (!b.shaped) {  // the first result to arrive gives the batch its components
        b.shaped = true;
        if (b.tensors.size() < result->size()) b.tensors.resize(result->size());
        for (size_t c = 0; c < result->size(); ++c) {
          if (b.tensors[c].valid()) continue;
          const Tensor& t = (*result)[c];
          Shape shape = t.shape();
          shape.insert(0, batch_size_);
          absl::StatusOr<Tensor> batch_tensor = slots_->pool->Allocate(t.dtype(), shape);
          if (!batch_tensor.ok()) {
            b.shaped = false;
            if (position >= 0 && !deterministic_) slots_->holes.insert(position);
            return batch_tensor.status();
          }
          b.tensors[c] = *std::move(batch_tensor);
        }
      }
      if (!b.names) b.names = result->names;
      // Checked before a slot is taken, so that a nondeterministic batch never waits for a
      // slot that will not be written (a slot a MapIntoFn took goes back to the holes).
      if (absl::Status fits = CheckFits(*result, b.tensors, index, slot); !fits.ok()) {
        if (position >= 0 && !deterministic_) slots_->holes.insert(position);
        return fits;
      }
      if (position < 0 && !deterministic_) TakePositionLocked(unit.seq);
      batch = b.tensors;  // shares the buffers
    }
    out->tensors.clear();
    for (size_t c = 0; c < batch.size(); ++c) {
      Tensor view = batch[c].Slice(slot, slot + 1);
      CopyIntoSlot((*result)[c], view);
      out->tensors.push_back(std::move(view));
    }
    std::lock_guard<std::mutex> lock(slots_->mu);
    ++slots_->batches[index].written;
    return absl::OkStatus();
  }
  bool one_to_one() const override { return true; }

 private:
  // The position the next call would take: its input position in order, else the lowest
  // hole or the next new slot.
  int64_t NextPositionLocked(int64_t seq) const {
    if (deterministic_) return seq;
    return slots_->holes.empty() ? slots_->next_slot : *slots_->holes.begin();
  }
  int64_t TakePositionLocked(int64_t seq) {
    const int64_t position = NextPositionLocked(seq);
    if (!deterministic_) {
      if (!slots_->holes.empty() && *slots_->holes.begin() == position) {
        slots_->holes.erase(slots_->holes.begin());
      } else {
        ++slots_->next_slot;
      }
    }
    return position;
  }
  // In order a failed element fails its batch and keeps its place; as finished, its slot is
  // handed to the next call.
  void ReleasePosition(int64_t position) {
    if (position < 0 || deterministic_) return;
    std::lock_guard<std::mutex> lock(slots_->mu);
    slots_->holes.insert(position);
  }

  // A view [shape] of `position`'s slot in component `component`, creating the batch's
  // tensor for it, or the error CheckFits gives when the batch's tensor differs.
  absl::StatusOr<Tensor> SlotLocked(int64_t position, int component, DType dtype,
                                    const Shape& shape) {
    const int64_t index = position / batch_size_, slot = position % batch_size_;
    BatchSlots::Batch& b = slots_->batches[index];
    if (component < 0) return absl::InternalError("map_into: negative component");
    if (b.tensors.size() <= static_cast<size_t>(component)) b.tensors.resize(component + 1);
    Tensor& t = b.tensors[component];
    if (!t.valid()) {
      Shape batch_shape = shape;
      batch_shape.insert(0, batch_size_);
      KILN_ASSIGN_OR_RETURN(t, slots_->pool->Allocate(dtype, batch_shape));
    }
    Shape expected = t.shape();
    expected.erase(0);
    if (t.dtype() != dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("Cannot batch tensors with different dtypes in component ", component,
                       ". Batch ", index, " started with dtype ", DTypeName(t.dtype()),
                       " and its element ", slot, " had dtype ", DTypeName(dtype)));
    }
    if (shape != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("Cannot batch tensors with different shapes in component ", component,
                       ". Batch ", index, " started with element shape ", expected.ToString(),
                       " and its element ", slot, " had shape ", shape.ToString(), "."));
    }
    return t.SubTensor(slot);
  }

  const MapFn& fn_;
  const int64_t batch_size_;
  const bool deterministic_;
  std::shared_ptr<BatchSlots> slots_;
};

class MapAndBatchIterator : public IteratorBase {
 public:
  MapAndBatchIterator(const IteratorContext& ctx, const ParallelMapSpec& map, FusedSpec spec)
      : IteratorBase(ctx, "MapAndBatch", false),
        map_spec_(map),
        spec_(spec),
        slots_(std::make_shared<BatchSlots>()) {
    slots_->pool = map.batch_buffers;
  }
  absl::Status Init() {
    // The map's results are views of batch slots that are already allocated, so its buffer may
    // hold a whole batch and the workers' lead into the next one at no cost in memory: the
    // consumer then takes a batch's results after one wake-up (ExpectResults), and the workers
    // do not stop for it in between.
    const int64_t lead = std::max(8, 2 * ctx_.pipeline->cpu_budget());
    AsyncStage::Config config{"ParallelMap", spec_.parallelism, spec_.batch_size + lead,
                              spec_.deterministic};
    auto map = std::make_unique<MapIntoSlotsStage>(InputContext(), config, map_spec_.input,
                                                   map_spec_.fn, spec_.batch_size, slots_);
    KILN_RETURN_IF_ERROR(map->Init());
    map_stage_ = map.get();
    map_ = std::move(map);
    return absl::OkStatus();
  }

 protected:
  absl::Status GetNextInternal(Element* out, bool* end) override {
    return spec_.deterministic ? NextInOrder(out, end) : NextAsFinished(out, end);
  }
  uint64_t StateConfig() const override {
    return ConfigFingerprint({spec_.batch_size, spec_.drop_remainder});
  }
  // In order, the map's consumer position is exactly batch_size per batch handed out, so the
  // map stage's own state (a snapshot of its input) is this stage's.
  absl::Status SaveInternal(StateWriter& writer) override {
    if (!spec_.deterministic) return IteratorBase::SaveInternal(writer);
    return map_->Save(writer);
  }
  absl::Status RestoreInternal(StateReader& reader) override {
    if (!spec_.deterministic) return IteratorBase::RestoreInternal(reader);
    return map_->Restore(reader);
  }
  // In order, every batch but the last takes exactly batch_size inputs (a failed element
  // fails its batch but keeps its place), so n batches are n * batch_size map inputs, skipped
  // without calling the function. Slot positions count from the first element after the
  // skip, so next_index_ stays relative to it.
  absl::Status SkipInternal(int64_t n, int64_t* skipped) override {
    const int64_t batch_size = spec_.batch_size;
    if (!spec_.deterministic || next_index_ != 0) {
      return IteratorBase::SkipInternal(n, skipped);
    }
    int64_t inputs = 0;
    KILN_RETURN_IF_ERROR(map_->Skip(n * batch_size, &inputs));
    *skipped = spec_.drop_remainder ? inputs / batch_size : (inputs + batch_size - 1) / batch_size;
    return absl::OkStatus();
  }

 private:
  // Results come in input order: the next batch_size of them are exactly this batch's slots.
  // An error fails the batch (as in tf.data's fused map-and-batch); its other slots are
  // drained so the next batch starts at the next batch boundary.
  absl::Status NextInOrder(Element* out, bool* end) {
    const int64_t batch_size = spec_.batch_size;
    const int64_t index = next_index_++;
    int64_t n = 0;
    absl::Status error;
    for (; n < batch_size; ++n) {
      Element slot_view;
      bool input_end = false;
      map_stage_->ExpectResults(batch_size - n);
      absl::Status s = map_->GetNext(&slot_view, &input_end);
      if (absl::IsCancelled(s)) return s;
      if (!s.ok() && error.ok()) error = s;
      if (input_end) break;
    }
    BatchSlots::Batch batch = TakeBatch(index);
    if (!error.ok()) return error;
    return Deliver(std::move(batch), n, out, end);
  }

  // Slots are handed out as calls finish, so a result of the next batch may arrive before
  // the last one of this batch: wait until this batch's slots are all written. An error
  // (which has no slot) is returned at once; the batch goes on filling.
  absl::Status NextAsFinished(Element* out, bool* end) {
    const int64_t batch_size = spec_.batch_size;
    while (true) {
      int64_t missing = batch_size;
      {
        std::lock_guard<std::mutex> lock(slots_->mu);
        auto found = slots_->batches.find(next_index_);
        if (found != slots_->batches.end() && found->second.written == batch_size) {
          BatchSlots::Batch batch = std::move(found->second);
          slots_->batches.erase(found);
          ++next_index_;
          return Deliver(std::move(batch), batch_size, out, end);
        }
        if (found != slots_->batches.end()) missing -= found->second.written;
      }
      // At least this many more results must finish before the batch is complete.
      map_stage_->ExpectResults(missing);
      Element slot_view;
      bool input_end = false;
      KILN_RETURN_IF_ERROR(map_->GetNext(&slot_view, &input_end));
      if (input_end) {
        // Every call has finished: the last batch holds what was written.
        KILN_RETURN_IF_ERROR(FillHoles());
        BatchSlots::Batch batch = TakeBatch(next_index_);
        const int64_t n = batch.written;
        if (n > 0) ++next_index_;
        return Deliver(std::move(batch), n, out, end);
      }
    }
  }

  // Nondeterministic, once every call has finished: holes left by failed MapIntoFn calls
  // (nothing came after them to fill them) are filled with the elements of the last positions,
  // so that, as without the holes, only the last batch is short. Batches below next_index_
  // were all full, so the holes are all at or above it.
  absl::Status FillHoles() {
    std::lock_guard<std::mutex> lock(slots_->mu);
    if (slots_->holes.empty()) return absl::OkStatus();
    const int64_t batch_size = spec_.batch_size;
    const int64_t first = next_index_ * batch_size;
    int64_t to = first;
    for (int64_t from = first; from < slots_->next_slot; ++from) {
      if (slots_->holes.count(from) > 0) continue;
      if (from != to) {
        BatchSlots::Batch& source = slots_->batches[from / batch_size];
        BatchSlots::Batch& target = slots_->batches[to / batch_size];
        if (target.tensors.size() < source.tensors.size()) {
          target.tensors.resize(source.tensors.size());
        }
        target.shaped = true;
        for (size_t c = 0; c < source.tensors.size(); ++c) {
          if (!target.tensors[c].valid()) {
            absl::StatusOr<Tensor> t =
                slots_->pool->Allocate(source.tensors[c].dtype(), source.tensors[c].shape());
            if (!t.ok()) return t.status();
            target.tensors[c] = *std::move(t);
          }
          Tensor slot = target.tensors[c].Slice(to % batch_size, to % batch_size + 1);
          CopyIntoSlot(source.tensors[c].Slice(from % batch_size, from % batch_size + 1), slot);
        }
        if (!target.names) target.names = source.names;
        ++target.written;
        --source.written;
      }
      ++to;
    }
    slots_->holes.clear();
    slots_->next_slot = to;
    for (auto it = slots_->batches.begin(); it != slots_->batches.end();) {
      it = it->second.written == 0 && it->first * batch_size >= to ? slots_->batches.erase(it)
                                                                   : std::next(it);
    }
    return absl::OkStatus();
  }

  BatchSlots::Batch TakeBatch(int64_t index) {
    BatchSlots::Batch batch;
    std::lock_guard<std::mutex> lock(slots_->mu);
    auto found = slots_->batches.find(index);
    if (found != slots_->batches.end()) {
      batch = std::move(found->second);
      slots_->batches.erase(found);
    }
    return batch;
  }

  absl::Status Deliver(BatchSlots::Batch batch, int64_t n, Element* out, bool* end) {
    const int64_t batch_size = spec_.batch_size;
    if (n == 0 || (spec_.drop_remainder && n < batch_size)) {
      *end = true;
      return absl::OkStatus();
    }
    out->names = std::move(batch.names);
    out->tensors.clear();
    for (Tensor& t : batch.tensors) {
      out->tensors.push_back(n < batch_size ? t.Slice(0, n) : std::move(t));
    }
    return absl::OkStatus();
  }

  const ParallelMapSpec& map_spec_;  // the map node outlives this iterator (see MakeFused...)
  const FusedSpec spec_;
  std::shared_ptr<BatchSlots> slots_;
  std::unique_ptr<IteratorBase> map_;
  AsyncStage* map_stage_ = nullptr;  // map_, to tell it how many results the batch awaits
  int64_t next_index_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IteratorBase>> MakeFusedMapAndBatch(const IteratorContext& ctx,
                                                                   const Dataset& input,
                                                                   const BatchSpec& batch) {
  if (!input.ok() || batch.batch_size <= 1 || !ctx.pipeline->options().map_and_batch_fusion) {
    return std::unique_ptr<IteratorBase>();
  }
  const ParallelMapSpec* map = input.node()->AsParallelMap();
  if (map == nullptr) return std::unique_ptr<IteratorBase>();
  FusedSpec spec;
  spec.batch_size = batch.batch_size;
  spec.drop_remainder = batch.drop_remainder;
  spec.parallelism = map->parallelism == kAutotune || batch.parallelism == kAutotune
                         ? kAutotune
                         : std::max(map->parallelism, batch.parallelism);
  // A sequential Batch has no order to relax; a parallel one's deterministic = false does.
  spec.deterministic =
      map->deterministic && (batch.parallelism == kSequential || batch.deterministic);
  auto it = std::make_unique<MapAndBatchIterator>(ctx, *map, spec);
  KILN_RETURN_IF_ERROR(it->Init());
  // The map node, which holds what the iterator refers to (function, input), is kept alive by
  // the Batch node that MakeInputIterator attaches to this iterator.
  return std::unique_ptr<IteratorBase>(std::move(it));
}

}  // namespace kiln::data
