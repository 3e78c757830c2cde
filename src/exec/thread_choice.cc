#include "kiln/exec/thread_choice.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/core/clock.h"
#include "kiln/core/determinism.h"
#include "kiln/core/memory_budget.h"
#include "kiln/core/status.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/ir/op_traits.h"
#include "kiln/kernels/openmp_threads.h"

namespace kiln::exec {

namespace {

constexpr char kEnvironmentVariable[] = "KILN_THREAD_CHOICE";

// A step that reads and writes more than this takes well over kLargeStepNs anyway; not
// allocating its made-up inputs keeps compile-time memory near what the plan itself needs.
constexpr size_t kMaxScratchBytes = size_t{64} << 20;

// Bytes of the made-up inputs, outputs and scratch memory that timing the step allocates
// (shapes were checked against the run memory budget by the plan, so the sums cannot overflow).
size_t ScratchBytes(const kernels::ReshapeContext& ctx) {
  size_t bytes = ctx.scratch_bytes;
  for (const kernels::InputInfo& in : ctx.inputs) {
    if (in.present() && in.constant == nullptr) {
      bytes += static_cast<size_t>(in.shape.num_elements()) * DTypeSize(in.dtype);
    }
  }
  for (size_t i = 0; i < ctx.output_dtypes.size(); ++i) {
    bytes +=
        static_cast<size_t>(ctx.output_shapes[i].num_elements()) * DTypeSize(ctx.output_dtypes[i]);
  }
  return bytes;
}

// Whether running the node's kernel on made-up inputs is harmless and means something: no
// state it could change (variables are nondeterministic in op_traits), no subgraph, no strings
// (tables, parsing), no output whose shape depends on input values.
bool Timeable(const ir::Node& node, const kernels::ReshapeContext& ctx) {
  if (ir::IsNondeterministic(node) || ir::HasSubgraph(node)) return false;
  for (const kernels::InputInfo& in : ctx.inputs) {
    if (in.present() && in.dtype == DType::kString) return false;
  }
  for (size_t i = 0; i < ctx.output_dtypes.size(); ++i) {
    if (ctx.output_dynamic[i] || ctx.output_dtypes[i] == DType::kString) return false;
  }
  return true;
}

// Memory for the timing's made-up values, freed to malloc when the timing ends (and returned
// to the OS by the plan cache's malloc_trim): Buffer::Allocate would free blocks of 256 KiB and
// more into the process's large-block cache (core/tensor.cc), which kept about one activation
// arena per compiled batch size resident (ResNet-18: +15 to +71 MB per plan).
std::shared_ptr<Buffer> ScratchBuffer(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment, and a zero-size tensor still gets a block.
  const size_t rounded = std::max<size_t>(
      kTensorAlignment, (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment);
  void* data = std::aligned_alloc(kTensorAlignment, rounded);
  if (data == nullptr) throw std::bad_alloc();
  return Buffer::Wrap(data, bytes, [data] { std::free(data); });
}

Tensor ScratchTensor(DType dtype, const Shape& shape) {
  return Tensor(dtype, shape,
                ScratchBuffer(static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype)));
}

// Inputs, outputs and scratch memory of one step, made up for timing: constants as they are,
// other float inputs a spread of small values (no zeros that could take a fast path, no
// denormals), other inputs zero (a valid index or count for any shape that has elements).
class ScratchStep {
 public:
  explicit ScratchStep(const kernels::ReshapeContext& ctx) {
    inputs_.resize(ctx.inputs.size());
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const kernels::InputInfo& in = ctx.inputs[i];
      if (!in.present()) continue;
      if (in.constant != nullptr) {
        inputs_[i] = *in.constant;
        continue;
      }
      if (in.dtype == DType::kFloat32) {
        inputs_[i] = ScratchTensor(in.dtype, in.shape);
        float* p = inputs_[i].data<float>();
        for (int64_t k = 0, n = inputs_[i].num_elements(); k < n; ++k) {
          // Not multiples of a power of two: products and sums round, so that a kernel whose
          // summation order follows the thread count shows it in the bits.
          p[k] = static_cast<float>(static_cast<int>(k % 29) - 14) * 0.0623f + 0.0311f;
        }
      } else {
        inputs_[i] = ScratchTensor(in.dtype, in.shape);
        std::memset(inputs_[i].raw_data(), 0, inputs_[i].byte_size());
      }
    }
    outputs_.resize(ctx.output_dtypes.size());
    for (size_t i = 0; i < outputs_.size(); ++i) {
      outputs_[i] = ScratchTensor(ctx.output_dtypes[i], ctx.output_shapes[i]);
    }
  }

  void ReserveScratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      scratch_ = ScratchBuffer(bytes);
      scratch_bytes_ = bytes;
    }
  }

  // Nanoseconds of one Compute of `kernel` on `threads` threads.
  absl::StatusOr<int64_t> Time(const ir::Node& node, const kernels::OpKernel& kernel,
                               kernels::KernelRunState* run_state, int threads) {
    kernels::ScopedOpenMpThreads omp(threads);
    MemoryBudget memory(MemoryBudget::DefaultLimit());
    kernels::ComputeContext ctx;
    ctx.inputs = absl::MakeConstSpan(inputs_);
    ctx.outputs = absl::MakeSpan(outputs_);
    ctx.scratch = scratch_ != nullptr ? scratch_->data() : nullptr;
    ctx.intra_op_threads = threads;
    ctx.use_openmp = true;
    ctx.node = &node;
    ctx.memory = &memory;
    ctx.run_state = run_state;
    const int64_t start = NowNanos();
    absl::Status status;
    try {
      status = kernel.Compute(ctx);
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError("out of memory");
    }
    const int64_t elapsed = NowNanos() - start;
    if (!status.ok()) return status;
    return elapsed;
  }

  std::vector<Tensor> CopyOutputs() const {
    std::vector<Tensor> copies;
    for (const Tensor& t : outputs_) {
      copies.push_back(ScratchTensor(t.dtype(), t.shape()));
      std::memcpy(copies.back().raw_data(), t.raw_data(), t.byte_size());
    }
    return copies;
  }

  bool OutputsEqual(const std::vector<Tensor>& other) const {
    if (other.size() != outputs_.size()) return false;
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const size_t bytes = outputs_[i].byte_size();
      if (other[i].byte_size() != bytes ||
          (bytes > 0 && std::memcmp(other[i].raw_data(), outputs_[i].raw_data(), bytes) != 0)) {
        return false;
      }
    }
    return true;
  }

 private:
  std::vector<Tensor> inputs_;
  std::vector<Tensor> outputs_;
  std::shared_ptr<Buffer> scratch_;
  size_t scratch_bytes_ = 0;
};

int64_t Median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A kernel for the node reshaped for one thread: `ctx` is the N-thread reshape's context, whose
// inputs, layouts and model-level objects (created kernel) are reused; its results are reset.
absl::StatusOr<std::unique_ptr<kernels::OpKernel>> ReshapeForOneThread(
    const ir::Node& node, const kernels::KernelFactory& factory, kernels::ReshapeContext& ctx,
    kernels::PackedConstantCache* packed_constants) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<kernels::OpKernel> kernel, factory(node));
  const int outputs = static_cast<int>(ctx.output_dtypes.size());
  ctx.SetNumOutputs(outputs);
  ctx.intra_op_threads = 1;
  ctx.scratch_bytes = 0;
  ctx.activation_reorders = 0;
  ctx.guarded_activations = 0;
  ctx.packed_constants = packed_constants;
  KILN_RETURN_IF_ERROR(ReshapeOnThreads(*kernel, ctx));
  if (static_cast<int>(ctx.output_dtypes.size()) != outputs) {
    return absl::InternalError("the kernel reshaped for 1 thread has another number of outputs");
  }
  return kernel;
}

bool SameOutputs(const kernels::ReshapeContext& a, const kernels::ReshapeContext& b) {
  return a.output_dtypes == b.output_dtypes && a.output_shapes == b.output_shapes &&
         a.output_dynamic == b.output_dynamic;
}

}  // namespace

absl::Status ReshapeOnThreads(kernels::OpKernel& kernel, kernels::ReshapeContext& ctx) {
  kernels::ScopedOpenMpThreads omp(ctx.intra_op_threads);
  return kernel.Reshape(ctx);
}

absl::StatusOr<ThreadChoiceMode> ParseThreadChoiceMode(absl::string_view text) {
  if (text == "auto") return ThreadChoiceMode::kAuto;
  if (text == "off") return ThreadChoiceMode::kOff;
  if (text == "one") return ThreadChoiceMode::kOne;
  return absl::InvalidArgumentError(
      absl::StrCat(kEnvironmentVariable, "=", text, ": expected auto, off or one"));
}

absl::StatusOr<ThreadChoiceMode> ResolveThreadChoiceMode(ThreadChoiceMode mode) {
  if (mode == ThreadChoiceMode::kEnvironment) {
    const char* value = std::getenv(kEnvironmentVariable);
    if (value == nullptr || *value == '\0') {
      mode = ThreadChoiceMode::kAuto;
    } else {
      KILN_ASSIGN_OR_RETURN(mode, ParseThreadChoiceMode(value));
    }
  }
  // Timings can differ between two compiles of one model (kiln/core/determinism.h).
  if (mode == ThreadChoiceMode::kAuto && OpDeterminismEnabled()) return ThreadChoiceMode::kOff;
  return mode;
}

const char* ThreadChoiceModeName(ThreadChoiceMode mode) {
  switch (mode) {
    case ThreadChoiceMode::kEnvironment:
      return "environment";
    case ThreadChoiceMode::kAuto:
      return "auto";
    case ThreadChoiceMode::kOff:
      return "off";
    case ThreadChoiceMode::kOne:
      return "one";
  }
  return "?";
}

std::string StepThreads::Describe() const {
  if (!timed) return absl::StrCat("threads ", threads);
  return absl::StrFormat("threads %d (N %.1f us, 1 %.1f us%s)", threads, n_ns / 1e3, one_ns / 1e3,
                         one_differs ? ", 1 thread computes other bits" : "");
}

ThreadChooser::ThreadChooser(ThreadChoiceMode mode, int threads)
    : mode_(mode), threads_(std::max(1, threads)) {}

absl::StatusOr<StepThreads> ThreadChooser::Choose(const ir::Node& node,
                                                  const kernels::KernelFactory& factory,
                                                  kernels::ReshapeContext& reshaped,
                                                  std::unique_ptr<kernels::OpKernel>& kernel) {
  StepThreads result;
  result.threads = threads_;
  if (threads_ <= 1 || mode_ == ThreadChoiceMode::kOff) return result;
  if (mode_ == ThreadChoiceMode::kOne) {
    // Forced: no timing, so the plan is the same on every run of every machine.
    kernels::ReshapeContext one = reshaped;
    KILN_ASSIGN_OR_RETURN(kernel,
                          ReshapeForOneThread(node, factory, one, reshaped.packed_constants));
    reshaped = std::move(one);
    result.threads = 1;
    ++one_thread_steps_;
    return result;
  }
  if (spent_ns_ >= kPlanBudgetNs || !Timeable(node, reshaped) || AllOutputsEmpty(reshaped) ||
      ScratchBytes(reshaped) > kMaxScratchBytes) {
    return result;
  }
  const int64_t start = NowNanos();
  bool one_wins = false;
  // Made-up tensors the size of the step's values: running out of memory for them keeps N.
  try {
    ScratchStep scratch(reshaped);
    scratch.ReserveScratch(reshaped.scratch_bytes);
    std::unique_ptr<kernels::KernelRunState> n_state = kernel->NewRunState();
    // The first run also warms caches and any lazily built state (and may wait for a worker
    // the OS has not scheduled yet): the faster of two decides whether the step is large, and
    // a large step stops here.
    absl::StatusOr<int64_t> first = scratch.Time(node, *kernel, n_state.get(), threads_);
    if (first.ok()) {
      absl::StatusOr<int64_t> second = scratch.Time(node, *kernel, n_state.get(), threads_);
      first = second.ok() ? std::min(*first, *second) : second;
    }
    if (first.ok()) result.n_ns = *first;
    if (first.ok() && *first < kLargeStepNs) {
      // The trial kernel packs into a cache of its own, so that a losing trial leaves nothing
      // in the model's cache of packed weights.
      kernels::PackedConstantCache trial_cache;
      kernels::ReshapeContext trial = reshaped;
      absl::StatusOr<std::unique_ptr<kernels::OpKernel>> one =
          ReshapeForOneThread(node, factory, trial, &trial_cache);
      if (one.ok() && SameOutputs(trial, reshaped) && trial.scratch_bytes <= kMaxScratchBytes) {
        scratch.ReserveScratch(trial.scratch_bytes);
        std::unique_ptr<kernels::KernelRunState> one_state = (*one)->NewRunState();
        absl::StatusOr<int64_t> warm = scratch.Time(node, **one, one_state.get(), 1);
        if (warm.ok()) {
          // Interleaved, so that a change of load during timing hits both alike; more runs
          // for tiny steps, whose times are noisier and cheap to repeat.
          const int runs = *first < 100'000 ? 9 : 5;
          std::vector<int64_t> n_ns, one_ns;
          bool ok = true;
          for (int r = 0; r < runs && ok; ++r) {
            absl::StatusOr<int64_t> tn = scratch.Time(node, *kernel, n_state.get(), threads_);
            absl::StatusOr<int64_t> t1 = scratch.Time(node, **one, one_state.get(), 1);
            ok = tn.ok() && t1.ok();
            if (ok) {
              n_ns.push_back(*tn);
              one_ns.push_back(*t1);
            }
          }
          if (ok) {
            result.timed = true;
            result.n_ns = Median(n_ns);
            result.one_ns = Median(one_ns);
            one_wins = static_cast<double>(result.one_ns) <
                       (1.0 - kMargin) * static_cast<double>(result.n_ns);
          }
          if (one_wins) {
            // The bits of N threads, then of 1, on the same inputs.
            absl::StatusOr<int64_t> tn = scratch.Time(node, *kernel, n_state.get(), threads_);
            const std::vector<Tensor> n_outputs =
                tn.ok() ? scratch.CopyOutputs() : std::vector<Tensor>();
            absl::StatusOr<int64_t> t1 = scratch.Time(node, **one, one_state.get(), 1);
            if (!tn.ok() || !t1.ok() || !scratch.OutputsEqual(n_outputs)) {
              one_wins = false;
              result.one_differs = true;
            }
          }
        }
      }
    }
  } catch (const std::bad_alloc&) {
    result.timed = false;
    one_wins = false;
  }
  spent_ns_ += NowNanos() - start;
  if (result.timed) ++timed_steps_;
  if (!one_wins) return result;
  // The kept kernel is reshaped again with the model's cache: its packed weights are then
  // shared with (and counted once for) every plan of the model, as the N kernel's would be.
  kernels::ReshapeContext one = reshaped;
  KILN_ASSIGN_OR_RETURN(kernel, ReshapeForOneThread(node, factory, one, reshaped.packed_constants));
  reshaped = std::move(one);
  result.threads = 1;
  ++one_thread_steps_;
  return result;
}

}  // namespace kiln::exec
