// Pipeline-wide machinery: cancellation, memory accounting, per-stage counters, sampled
// stage timing, the public Iterator and Stats().
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/autotune/autotuner.h"
#include "data/internal.h"
#include "kiln/core/status.h"
#include "kiln/core/thread_pool.h"

namespace kiln::data {

// ---- Cancellation ----

std::shared_ptr<Cancellation> Cancellation::NewChild() {
  auto child = std::make_shared<Cancellation>();
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancelled()) {
    child->cancelled_.store(true, std::memory_order_release);
    return child;
  }
  std::erase_if(children_, [](const std::weak_ptr<Cancellation>& c) { return c.expired(); });
  children_.push_back(child);
  return child;
}

void Cancellation::Cancel() {
  std::vector<std::shared_ptr<Cancellation>> children;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
    for (auto& cb : callbacks_) cb.second();
    for (auto& weak : children_) {
      if (auto c = weak.lock()) children.push_back(std::move(c));
    }
    children_.clear();
  }
  for (auto& c : children) c->Cancel();
}

int Cancellation::Register(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int id = next_id_++;
  if (cancelled()) {
    wake();
  } else {
    callbacks_.emplace_back(id, std::move(wake));
  }
  return id;
}

void Cancellation::Unregister(int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(callbacks_, [id](const auto& cb) { return cb.first == id; });
}

// ---- MemoryAccountant ----

bool MemoryAccountant::TryReserve(int64_t bytes, bool holder_is_empty) {
  int64_t used = used_.load(std::memory_order_relaxed);
  while (true) {
    if (!holder_is_empty && used + bytes + headroom_.load(std::memory_order_relaxed) > budget_) {
      return false;
    }
    if (used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed)) break;
  }
  int64_t now = used + bytes;
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return true;
}

// ---- PipelineState ----

namespace {

int64_t DefaultRamBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return int64_t{4} << 30;
  return static_cast<int64_t>(pages) * page_size / 2;
}

}  // namespace

PipelineState::PipelineState(const Options& options)
    : options_(options),
      cpu_budget_(options.cpu_budget > 0 ? options.cpu_budget : ThreadPool::HardwareConcurrency()),
      start_ns_(NowNanos()),
      memory_(options.ram_budget_bytes > 0 ? options.ram_budget_bytes : DefaultRamBudget()),
      root_(std::make_shared<Cancellation>()) {
  if (!options.trace_path.empty()) trace_ = std::make_unique<TraceRecorder>();
  if (options.autotune) autotuner_ = std::make_unique<Autotuner>(this);
}

PipelineState::~PipelineState() { StopAutotuner(); }

void PipelineState::StopAutotuner() {
  if (autotuner_) autotuner_->Stop();
}

StageCounters* PipelineState::GetStage(const std::string& path, bool asynchronous) {
  std::lock_guard<std::mutex> lock(stages_mutex_);
  for (auto& s : stages_) {
    if (s->name == path) return s.get();
  }
  auto stage = std::make_unique<StageCounters>();
  stage->name = path;
  stage->asynchronous = asynchronous;
  stages_.push_back(std::move(stage));
  return stages_.back().get();
}

void PipelineState::RegisterTunable(Tunable* tunable) {
  if (autotuner_) autotuner_->Register(tunable);
}

void PipelineState::UnregisterTunable(Tunable* tunable) {
  if (autotuner_) autotuner_->Unregister(tunable);
}

PipelineStats PipelineState::Stats() const {
  PipelineStats stats;
  stats.wall_ns = NowNanos() - start_ns_;
  stats.consumer_wait_ns = consumer_wait_ns_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(stages_mutex_);
  double worst = -1;
  for (const auto& s : stages_) {
    StageStats out;
    out.name = s->name;
    out.asynchronous = s->asynchronous;
    out.elements = s->elements.load(std::memory_order_relaxed);
    const int64_t sampled = s->sampled_calls.load(std::memory_order_relaxed);
    const int64_t sampled_ns = s->sampled_self_ns.load(std::memory_order_relaxed);
    // Sampled self time scaled to all calls (elements + end/error calls ~ elements).
    int64_t busy = sampled > 0 ? static_cast<int64_t>(static_cast<double>(sampled_ns) / sampled *
                                                      std::max(out.elements, sampled))
                               : 0;
    busy += s->async_busy_ns.load(std::memory_order_relaxed);
    out.busy_ns = busy;
    out.wait_ns = s->wait_ns.load(std::memory_order_relaxed);
    out.parallelism = s->parallelism.load(std::memory_order_relaxed);
    out.buffer_capacity = s->buffer_capacity.load(std::memory_order_relaxed);
    out.buffered_bytes = s->buffered_bytes.load(std::memory_order_relaxed);
    const int64_t fills = s->fill_samples.load(std::memory_order_relaxed);
    out.average_buffer_fill =
        fills > 0 ? s->fill_sum_permille.load(std::memory_order_relaxed) / 1000.0 / fills : 0;
    out.errors_ignored = s->errors_ignored.load(std::memory_order_relaxed);
    if (out.load_ns() > worst) {
      worst = out.load_ns();
      stats.bottleneck = out.name;
    }
    stats.stages.push_back(std::move(out));
  }
  if (stats.wall_ns > 0 && stats.consumer_wait_ns < stats.wall_ns / 20) {
    stats.bottleneck = "consumer";
  }
  return stats;
}

std::string PipelineStats::ToString() const {
  std::string out = absl::StrFormat("%-44s %10s %12s %12s %5s %9s %8s\n", "stage", "elements",
                                    "busy ms", "wait ms", "par", "buffer", "fill");
  for (const StageStats& s : stages) {
    absl::StrAppendFormat(
        &out, "%-44s %10d %12.2f %12.2f %5d %9d %7.0f%%%s\n", s.name, s.elements, s.busy_ns / 1e6,
        s.wait_ns / 1e6, s.parallelism, s.buffer_capacity, s.average_buffer_fill * 100,
        s.errors_ignored > 0 ? absl::StrCat(" (", s.errors_ignored, " errors ignored)")
                             : std::string());
  }
  absl::StrAppendFormat(&out, "wall %.2f ms, consumer waited %.2f ms, bottleneck: %s\n",
                        wall_ns / 1e6, consumer_wait_ns / 1e6, bottleneck);
  return out;
}

// ---- IteratorBase ----

namespace {
// Sampled timing of synchronous stages. A stage's self time is its inclusive time minus the
// inclusive time of the stages it called on this thread; when a stage is sampled, every
// stage below it in the same call is timed too, so the subtraction is exact.
struct TimingState {
  bool active = false;
  int64_t child_ns = 0;
};
thread_local TimingState t_timing;
constexpr uint32_t kSampleMask = 15;  // time one call in 16
}  // namespace

IteratorBase::IteratorBase(const IteratorContext& ctx, const std::string& stage_name,
                           bool asynchronous)
    : ctx_(ctx),
      path_(ctx.prefix.empty() ? stage_name : absl::StrCat(ctx.prefix, "/", stage_name)),
      counters_(ctx.pipeline->GetStage(path_, asynchronous)),
      trace_(ctx.pipeline->trace()),
      stage_name_(stage_name),
      asynchronous_(asynchronous) {}

IteratorContext IteratorBase::InputContext(int input_index) const {
  // The inputs of a Zip or Concatenate are distinct iterations of a Shuffle they share.
  IteratorContext ctx = input_index > 0 ? ctx_.WithEpochKey(input_index) : ctx_;
  ctx.prefix = input_index < 0 ? path_ : absl::StrCat(path_, "[", input_index, "]");
  return ctx;
}

absl::Status IteratorBase::GetNext(Element* out, bool* end_of_sequence) {
  if (!t_timing.active && (++call_count_ & kSampleMask) != 0 && trace_ == nullptr) {
    absl::Status s = GetNextInternal(out, end_of_sequence);
    if (s.ok()) {
      if (!*end_of_sequence) {
        counters_->AddElements(1);
        ++produced_;
      }
    } else if (!absl::IsCancelled(s)) {
      ++produced_;  // an element's error is a position (checkpoints replay it)
    }
    return s;
  }
  absl::Status s = TimedGetNext(out, end_of_sequence);
  if (s.ok() ? !*end_of_sequence : !absl::IsCancelled(s)) ++produced_;
  return s;
}

absl::Status IteratorBase::TimedGetNext(Element* out, bool* end_of_sequence) {
  TimingState& tls = t_timing;
  const bool was_active = tls.active;
  const int64_t saved_child = tls.child_ns;
  tls.active = true;
  tls.child_ns = 0;
  const int64_t start = NowNanos();
  absl::Status s = GetNextInternal(out, end_of_sequence);
  const int64_t end = NowNanos();
  const int64_t inclusive = end - start;
  const int64_t self = inclusive - tls.child_ns;
  tls.child_ns = saved_child + inclusive;
  tls.active = was_active;
  if (!*end_of_sequence && s.ok()) counters_->AddElements(1);
  if (!asynchronous_) {
    counters_->sampled_calls.fetch_add(1, std::memory_order_relaxed);
    counters_->sampled_self_ns.fetch_add(self, std::memory_order_relaxed);
    if (trace_ != nullptr) trace_->AddEvent(path_, "GetNext", start, end);
  }
  return s;
}

absl::StatusOr<std::unique_ptr<IteratorBase>> MakeInputIterator(const Dataset& dataset,
                                                                const IteratorContext& ctx) {
  if (!dataset.ok()) return dataset.status();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<IteratorBase> it, dataset.node()->MakeIterator(ctx));
  it->KeepAlive(dataset.node());
  return it;
}

int ResolveParallelism(int requested, const IteratorContext& ctx) {
  if (requested == kAutotune) return ctx.pipeline->cpu_budget();
  return std::max(1, requested);
}

// ---- Element helpers ----

int64_t ElementBytes(const Element& element) {
  int64_t bytes = 0;
  for (const Tensor& t : element.tensors) {
    if (t.dtype() == DType::kString) {
      for (const std::string& s : t.span<std::string>()) bytes += s.size() + sizeof(std::string);
    } else {
      bytes += t.byte_size();
    }
  }
  return bytes;
}

absl::StatusOr<Element> StackElements(std::vector<Element>& elements) {
  return StackElements(elements, elements.size());
}

absl::StatusOr<Element> StackElements(std::vector<Element>& elements, size_t count) {
  Element out;
  if (count == 0) return out;
  const Element& first = elements[0];
  const size_t components = first.size();
  const int64_t n = static_cast<int64_t>(count);
  out.names = first.names;
  out.tensors.reserve(components);
  for (size_t c = 0; c < components; ++c) {
    const Tensor& t0 = first[c];
    for (int64_t i = 1; i < n; ++i) {
      if (elements[i].size() != components) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Cannot batch elements with different numbers of components: first element had ",
            components, " and element ", i, " had ", elements[i].size()));
      }
      const Tensor& ti = elements[i][c];
      if (ti.dtype() != t0.dtype()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Cannot batch tensors with different dtypes in component ", c,
                         ". First element had dtype ", DTypeName(t0.dtype()), " and element ", i,
                         " had dtype ", DTypeName(ti.dtype())));
      }
      if (ti.shape() != t0.shape()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Cannot batch tensors with different shapes in component ", c,
                         ". First element had shape ", t0.shape().ToString(), " and element ", i,
                         " had shape ", ti.shape().ToString(), "."));
      }
    }
    Shape shape = t0.shape();
    shape.insert(0, n);
    Tensor batch(t0.dtype(), shape);
    if (t0.dtype() == DType::kString) {
      std::string* dst = batch.data<std::string>();
      const int64_t per = t0.num_elements();
      for (int64_t i = 0; i < n; ++i) {
        const Tensor& src = elements[i][c];
        const bool unique = src.buffer().use_count() == 1;
        std::string* s = src.data<std::string>();
        for (int64_t k = 0; k < per; ++k) {
          dst[i * per + k] = unique ? std::move(s[k]) : s[k];
        }
      }
    } else {
      const size_t bytes = t0.byte_size();
      char* dst = static_cast<char*>(batch.raw_data());
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + i * bytes, elements[i][c].raw_data(), bytes);
      }
    }
    out.tensors.push_back(std::move(batch));
  }
  return out;
}

// ---- Iterator (public) ----

class IteratorImpl {
 public:
  std::unique_ptr<PipelineState> pipeline;
  std::unique_ptr<IteratorBase> root;
  uint32_t calls = 0;
};

Iterator::Iterator(std::unique_ptr<IteratorImpl> impl) : impl_(std::move(impl)) {}

Iterator::~Iterator() {
  PipelineState* pipeline = impl_->pipeline.get();
  pipeline->StopAutotuner();
  pipeline->root_cancellation()->Cancel();
  impl_->root.reset();  // joins every worker thread of the tree
  if (pipeline->trace() != nullptr && !pipeline->options().trace_path.empty()) {
    pipeline->trace()->WriteJson(pipeline->options().trace_path).IgnoreError();
  }
}

absl::Status Iterator::GetNext(Element* out, bool* end_of_sequence) {
  *end_of_sequence = false;
  // The time the consumer spends in GetNext, measured on one call in 16 and scaled.
  if ((++impl_->calls & 15) != 0) return impl_->root->GetNext(out, end_of_sequence);
  const int64_t start = NowNanos();
  absl::Status s = impl_->root->GetNext(out, end_of_sequence);
  impl_->pipeline->consumer_wait_ns().fetch_add((NowNanos() - start) * 16,
                                                std::memory_order_relaxed);
  return s;
}

absl::StatusOr<std::optional<Element>> Iterator::GetNext() {
  Element element;
  bool end = false;
  KILN_RETURN_IF_ERROR(GetNext(&element, &end));
  if (end) return std::optional<Element>();
  return std::optional<Element>(std::move(element));
}

PipelineStats Iterator::Stats() const { return impl_->pipeline->Stats(); }

absl::Status Iterator::WriteTrace(const std::string& path) const {
  if (impl_->pipeline->trace() == nullptr) {
    return absl::FailedPreconditionError(
        "no trace recorded: set Options::trace_path when making the iterator");
  }
  return impl_->pipeline->trace()->WriteJson(path);
}

absl::StatusOr<std::string> Iterator::SaveState() {
  const std::string reason = impl_->pipeline->not_replayable_reason();
  if (!reason.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("SaveState: the pipeline's order is not reproducible: ", reason));
  }
  StateWriter writer;
  impl_->pipeline->SaveIterations(writer);
  KILN_RETURN_IF_ERROR(impl_->root->Save(writer));
  return writer.Finish();
}

absl::Status Iterator::RestoreState(std::string_view state) {
  if (impl_->root->produced() != 0 || impl_->calls != 0) {
    return absl::FailedPreconditionError(
        "RestoreState: needs a new iterator (GetNext has been called on this one)");
  }
  StateReader reader;
  KILN_RETURN_IF_ERROR(StateReader::Open(state, &reader));
  const std::string reason = impl_->pipeline->not_replayable_reason();
  if (!reason.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("RestoreState: the pipeline's order is not reproducible: ", reason));
  }
  KILN_RETURN_IF_ERROR(impl_->pipeline->RestoreIterations(reader));
  KILN_RETURN_IF_ERROR(impl_->root->Restore(reader));
  return reader.CheckDone();
}

int64_t Iterator::peak_buffered_bytes() const { return impl_->pipeline->memory().peak(); }
int64_t Iterator::ram_budget_bytes() const { return impl_->pipeline->memory().budget(); }

absl::StatusOr<std::unique_ptr<Iterator>> Dataset::MakeIterator(const Options& options) const {
  if (!ok()) return status_;
  auto impl = std::make_unique<IteratorImpl>();
  impl->pipeline = std::make_unique<PipelineState>(options);
  IteratorContext ctx;
  ctx.pipeline = impl->pipeline.get();
  ctx.cancellation = impl->pipeline->root_cancellation();
  KILN_ASSIGN_OR_RETURN(impl->root, MakeInputIterator(*this, ctx));
  return std::unique_ptr<Iterator>(new Iterator(std::move(impl)));
}

Dataset::Dataset() : status_(absl::FailedPreconditionError("empty Dataset")) {}
Dataset::Dataset(std::shared_ptr<const DatasetNode> node) : node_(std::move(node)) {}
Dataset::Dataset(absl::Status error) : status_(std::move(error)) {
  if (status_.ok()) status_ = absl::InternalError("Dataset made from an OK status");
}

int64_t Dataset::Cardinality() const { return ok() ? node_->Cardinality() : kUnknownCardinality; }

}  // namespace kiln::data
