#include "nn_dnnl.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/simd/ops.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/status.h"

namespace kiln::kernels::nn {

using dnnl::algorithm;
using dnnl::memory;

dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = [] {
    // oneDNN reads its cap once, before its first primitive: pass Kiln's on (kiln/core/cpu_isa.h).
    // It refuses (throws) once it has dispatched anything, which Kiln does only through here.
    if (EffectiveCpuIsa() < DetectedCpuIsa()) {
      try {
        dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
      } catch (const dnnl::error&) {
      }
    }
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return *engine;
}

dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

memory::dims ToDnnlDims(const Shape& shape) {
  return memory::dims(shape.dims().begin(), shape.dims().end());
}

memory::dims ToDnnlDims(const std::vector<int64_t>& dims) {
  return memory::dims(dims.begin(), dims.end());
}

RawMemory::RawMemory(const memory::desc& desc, const void* data) {
  dnnl::error::wrap_c_api(
      dnnl_memory_create(&memory_, &desc.data, CpuEngine().get(), const_cast<void*>(data)),
      "could not create a memory object");
}

RawMemory::~RawMemory() {
  if (memory_ != nullptr) dnnl_memory_destroy(memory_);
}

void* RawMemory::data() const {
  void* handle = nullptr;
  dnnl_memory_get_data_handle(memory_, &handle);
  return handle;
}

void ExecutePrimitive(const dnnl::primitive& primitive, dnnl::stream& stream,
                      std::initializer_list<dnnl_exec_arg_t> args) {
  dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive.get(), stream.get(),
                                                 static_cast<int>(args.size()), args.begin()),
                          "could not execute a primitive");
}

absl::Status ReshapeForCreate(const CreateContext& ctx, const Shape& first_input, bool* creating,
                              absl::FunctionRef<absl::Status(ReshapeContext&)> reshape) {
  ReshapeContext model_shape;
  model_shape.node = ctx.node;
  model_shape.inputs = ctx.inputs;
  model_shape.inputs[0].shape = first_input;
  model_shape.packed_constants = ctx.packed_constants;
  model_shape.SetNumOutputs(1);
  *creating = true;
  absl::Status packed;
  try {
    packed = reshape(model_shape);
  } catch (const dnnl::error&) {
    packed = absl::UnimplementedError("no oneDNN primitive for the graph's shape");
  }
  *creating = false;
  return packed;
}

absl::StatusOr<std::shared_ptr<const dnnl::memory>> PackConstant(PackedConstantCache* cache,
                                                                 const ir::Node& node,
                                                                 const memory::desc& user,
                                                                 const void* data,
                                                                 const memory::desc& packed) {
  auto pack = [&]() -> absl::StatusOr<std::pair<std::shared_ptr<const dnnl::memory>, size_t>> {
    auto& engine = CpuEngine();
    auto memory = std::make_shared<dnnl::memory>(packed, engine);
    dnnl::memory user_memory(user, engine, const_cast<void*>(data));
    dnnl::stream stream(engine);
    dnnl::reorder(user_memory, *memory).execute(stream, user_memory, *memory);
    stream.wait();
    return std::make_pair(std::shared_ptr<const dnnl::memory>(std::move(memory)),
                          packed.get_size());
  };
  if (cache == nullptr) {
    KILN_ASSIGN_OR_RETURN(auto made, pack());
    return made.first;
  }
  // The key is the packed descriptor's bytes: a primitive for another shape may pick another
  // weight layout, which is then packed (and counted) once more.
  const std::string key(reinterpret_cast<const char*>(&packed.data), sizeof(packed.data));
  return cache->GetOrCreate<dnnl::memory>(&node, key, pack);
}

absl::Status PrimitiveWeights::Prepare(const ReshapeContext& ctx, const ir::Node& node,
                                       const InputInfo& w, const memory::desc& chosen_layout,
                                       size_t* offset, const PrimitiveWeights* created) {
  // Read before this object changes: `created` may be this object (Create and Reshape on one
  // kernel outside a plan).
  std::shared_ptr<const dnnl::memory> created_packed;
  if (created != nullptr && created->packed && created->chosen == chosen_layout &&
      created->user == user) {
    created_packed = created->packed;
  }
  chosen = chosen_layout;
  reorder = chosen != user;
  scratch_offset = *offset;
  packed.reset();
  if (!reorder) return absl::OkStatus();
  if (w.constant != nullptr && created_packed) {
    packed = std::move(created_packed);
  } else if (w.constant != nullptr) {
    KILN_ASSIGN_OR_RETURN(packed, PackConstant(ctx.packed_constants, ctx.node ? *ctx.node : node,
                                               user, w.constant->raw_data(), chosen));
  } else {
    *offset += Align64(chosen.get_size());
    auto& engine = CpuEngine();
    reorder_primitive = dnnl::reorder(dnnl::reorder::primitive_desc(engine, user, engine, chosen));
  }
  return absl::OkStatus();
}

WeightsMemory::WeightsMemory(const PrimitiveWeights& w, const void* data, char* scratch,
                             dnnl::stream& stream)
    : user_(w.user, data),
      scratch_(w.reorder && !w.packed ? RawMemory(w.chosen, scratch + w.scratch_offset)
                                      : RawMemory()),
      memory_(user_.get()) {
  if (w.packed) {
    memory_ = w.packed->get();
  } else if (w.reorder) {
    memory_ = scratch_.get();
    ExecutePrimitive(w.reorder_primitive, stream,
                     {{DNNL_ARG_FROM, user_.get()}, {DNNL_ARG_TO, memory_}});
  }
}

memory::desc LayoutDesc(const Shape& shape, ir::MemoryLayout layout) {
  if (shape.rank() != 4) return PlainDesc(shape);
  switch (layout) {
    case ir::MemoryLayout::kNhwc:
      return memory::desc(ToDnnlDims(shape), memory::data_type::f32, memory::format_tag::nhwc);
    case ir::MemoryLayout::kNchw8c:
      return memory::desc(ToDnnlDims(shape), memory::data_type::f32, memory::format_tag::nChw8c);
    case ir::MemoryLayout::kNchw16c:
      return memory::desc(ToDnnlDims(shape), memory::data_type::f32, memory::format_tag::nChw16c);
    case ir::MemoryLayout::kPlain:
      break;
  }
  return PlainDesc(shape);
}

int64_t ChannelAt(int64_t i, const Shape& shape, ir::MemoryLayout layout) {
  const int64_t channels = shape.dim(1);
  const int64_t spatial = shape.dim(2) * shape.dim(3);
  const int64_t block = ir::ChannelBlock(layout);
  if (layout == ir::MemoryLayout::kNhwc) return i % channels;
  if (block > 0) return (i / (spatial * block)) % (channels / block) * block + i % block;
  return (i / spatial) % channels;
}

memory::format_tag PlainTag(int rank) {
  switch (rank) {
    case 1:
      return memory::format_tag::a;
    case 2:
      return memory::format_tag::ab;
    case 3:
      return memory::format_tag::abc;
    case 4:
      return memory::format_tag::abcd;
    case 5:
      return memory::format_tag::abcde;
    case 6:
      return memory::format_tag::abcdef;
    default:
      return memory::format_tag::undef;
  }
}

memory::desc PlainDesc(const Shape& shape, memory::data_type type) {
  return memory::desc(ToDnnlDims(shape), type, PlainTag(shape.rank()));
}

namespace {

struct ActivationMapping {
  const char* name;
  algorithm alg;
};

constexpr ActivationMapping kActivations[] = {
    {"Relu", algorithm::eltwise_relu},
    {"LeakyRelu", algorithm::eltwise_relu},
    {"Clip", algorithm::eltwise_clip},
    {"Sigmoid", algorithm::eltwise_logistic},
    {"Tanh", algorithm::eltwise_tanh},
    {"Elu", algorithm::eltwise_elu},
    {"HardSwish", algorithm::eltwise_hardswish},
    {"Softplus", algorithm::eltwise_soft_relu},
    {"Gelu", algorithm::eltwise_gelu_erf},
    {"GeluTanh", algorithm::eltwise_gelu_tanh},
    {"Exp", algorithm::eltwise_exp},
    {"Abs", algorithm::eltwise_abs},
    {"Sqrt", algorithm::eltwise_sqrt},
    {"Square", algorithm::eltwise_square},
};

}  // namespace

bool IsSupportedActivation(const std::string& kind) {
  for (const auto& a : kActivations) {
    if (kind == a.name) return true;
  }
  return false;
}

absl::StatusOr<std::vector<PostOp>> ReadPostOps(const ir::Node& node) {
  std::vector<PostOp> ops = ir::GetPostOps(node);
  for (const PostOp& op : ops) {
    if (op.kind != ir::kResidualPostOp && !IsSupportedActivation(op.kind)) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Describe(), ": unsupported fused post-op \"", op.kind, "\""));
    }
  }
  return ops;
}

absl::StatusOr<std::vector<PostOp>> AppendPostOps(const ir::Node& node,
                                                  const std::vector<PostOp>& post_ops,
                                                  dnnl::post_ops& ops) {
  std::vector<PostOp> epilogue;
  for (const PostOp& op : post_ops) {
    if (epilogue.empty() && ir::PostOpRunsInsidePrimitive(op.kind, op.alpha)) {
      if (op.kind == ir::kResidualPostOp) {
        ops.append_sum(1.0f);
        continue;
      }
      for (const auto& a : kActivations) {
        if (op.kind == a.name) ops.append_eltwise(1.0f, a.alg, op.alpha, op.beta);
      }
      continue;
    }
    if (op.kind == ir::kResidualPostOp) {
      // The residual is oneDNN's sum post-op, which cannot follow an epilogue activation.
      return absl::InvalidArgumentError(absl::StrCat(
          node.Describe(), ": a residual Add after post-op \"", epilogue.front().kind,
          "\" is not supported (it must run inside oneDNN, and that activation cannot)"));
    }
    epilogue.push_back(op);
  }
  return epilogue;
}

namespace {

struct VectorActivation {
  simd::UnaryOp op = simd::UnaryOp::kIdentity;
  simd::UnaryParams params;
};

// The vector-loop op of the unfused activation node that `op` stands for.
VectorActivation ToVector(const PostOp& op) {
  using simd::UnaryOp;
  static const std::pair<const char*, UnaryOp> kOps[] = {
      {"Relu", UnaryOp::kRelu},
      {"LeakyRelu", UnaryOp::kLeakyRelu},
      {"Clip", UnaryOp::kClip},
      {"Sigmoid", UnaryOp::kSigmoid},
      {"Tanh", UnaryOp::kTanh},
      {"Elu", UnaryOp::kElu},
      {"HardSwish", UnaryOp::kHardSwish},
      {"HardSigmoid", UnaryOp::kHardSigmoid},
      {"Softplus", UnaryOp::kSoftplus},
      {"Gelu", UnaryOp::kGelu},
      {"GeluTanh", UnaryOp::kGeluTanh},
      {"Exp", UnaryOp::kExp},
      {"Abs", UnaryOp::kAbs},
      {"Sqrt", UnaryOp::kSqrt},
      {"Square", UnaryOp::kSquare},
  };
  VectorActivation v;
  for (const auto& [name, unary] : kOps) {
    if (op.kind == name) v.op = unary;
  }
  // Parameters as the unfused kernels read them (simd/ops.h): Clip alpha = min, beta = max.
  v.params.alpha = op.alpha;
  v.params.beta = op.beta;
  return v;
}

}  // namespace

bool HasHeavyActivation(const std::vector<PostOp>& post_ops) {
  return std::any_of(post_ops.begin(), post_ops.end(), [](const PostOp& op) {
    return op.kind != ir::kResidualPostOp && simd::IsHeavyUnary(ToVector(op).op);
  });
}

void ApplyActivation(const PostOp& op, float* x, int64_t n) {
  const VectorActivation v = ToVector(op);
  simd::Best().unary(v.op, v.params, x, x, n);
}

void ApplyEpilogue(const std::vector<PostOp>& epilogue, float* data, int64_t n,
                   const ComputeContext& ctx) {
  if (epilogue.empty() || n <= 0) return;
  constexpr int kMaxOps = 8;
  VectorActivation ops[kMaxOps];
  const int count = static_cast<int>(std::min<size_t>(epilogue.size(), kMaxOps));
  for (int i = 0; i < count; ++i) ops[i] = ToVector(epilogue[i]);
  const simd::Kernels& kernels = simd::Best();
  // Blocks that stay in L1 while every activation passes over them. Each thread gets at least
  // a few tens of microseconds of work, else the output runs on the calling thread: waking the
  // OpenMP team costs more than it saves, a lot more where cores are shared. That is 128K
  // floats of a Relu but 16K of a Gelu (about 1.5 ns per float): BERT's 128 x 1024 FFN
  // activation at batch 1 ran its Gelu on one thread while the other waited.
  constexpr int64_t kBlock = 4096;
  const int64_t min_chunk =
      HasHeavyActivation(epilogue) ? kMinHeavyElementsPerThread : int64_t{1} << 17;
  ctx.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t m = std::min(kBlock, end - b);
      for (int i = 0; i < count; ++i)
        kernels.unary(ops[i].op, ops[i].params, data + b, data + b, m);
    }
  });
  for (size_t i = kMaxOps; i < epilogue.size(); ++i) ApplyActivation(epilogue[i], data, n);
}

namespace {
std::atomic<int64_t> guarded_inside{0}, guarded_epilogue{0};

bool IsNegativeZero(float v) { return v == 0.0f && std::signbit(v); }
}  // namespace

GuardedActivation PlanGuardedActivation(const std::vector<PostOp>& epilogue, const float* weights,
                                        int64_t rows, int64_t row_length, const float* bias) {
  GuardedActivation guard;
  const char* env = std::getenv("KILN_GUARDED_ACTIVATION");
  if (env != nullptr && std::string(env) == "0") return guard;
  if (epilogue.size() != 1 || weights == nullptr || rows <= 0 || row_length < 0) return guard;
  const PostOp& op = epilogue[0];
  if (op.kind == "Relu") {
    guard.alg = dnnl::algorithm::eltwise_relu;
    guard.alpha = 0.0f;
  } else if (op.kind == "Clip") {
    // Kiln's Clip is min(hi, max(lo, x)) (simd/ops.h: alpha = lo, beta = hi), oneDNN's
    // min(max(x, lo), hi): the same for every x but NaN and signed zeros.
    if (std::isnan(op.alpha) || std::isnan(op.beta) || IsNegativeZero(op.alpha) ||
        IsNegativeZero(op.beta)) {
      return guard;
    }
    guard.alg = dnnl::algorithm::eltwise_clip;
    guard.alpha = op.alpha;
    guard.beta = op.beta;
    // min(max(s, lo), hi) of a sum that is not NaN lies in [lo, hi] (or is hi when lo > hi).
    guard.output_bound = std::max(std::fabs(op.alpha), std::fabs(op.beta));
  } else {
    return guard;
  }
  // Every partial sum of an output is bounded by max|x| * sum|w| of its channel + |bias|
  // (in exact arithmetic; float rounding adds a relative n * 2^-24, far inside the margin).
  double max_row = 0, max_bias = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    const float* w = weights + r * row_length;
    for (int64_t i = 0; i < row_length; ++i) {
      if (!std::isfinite(w[i])) return guard;
      sum += std::fabs(w[i]);
    }
    max_row = std::max(max_row, sum);
    if (bias != nullptr) {
      if (!std::isfinite(bias[r]) || IsNegativeZero(bias[r])) return guard;
      max_bias = std::max(max_bias, static_cast<double>(std::fabs(bias[r])));
    }
  }
  const double room = std::numeric_limits<float>::max() / 8.0 - max_bias;
  if (room <= 0) return guard;
  guard.input_limit =
      max_row > 0
          ? static_cast<float>(std::min<double>(room / max_row, std::numeric_limits<float>::max()))
          : std::numeric_limits<float>::max();
  guard.usable = true;
  return guard;
}

bool InputWithinLimit(const float* x, int64_t count, float limit, const ComputeContext& ctx) {
  std::atomic<bool> within{true};
  // Bandwidth-bound: large inputs are read on every intra-op thread.
  ctx.ParallelFor(count, int64_t{1} << 17, [&](int64_t begin, int64_t end) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lim = _mm256_set1_ps(limit);
    __m256 outside = _mm256_setzero_ps();
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
      // Not (a <= limit), unordered: true for NaN, +-Inf and anything above the limit.
      outside = _mm256_or_ps(outside, _mm256_cmp_ps(a, lim, _CMP_NLE_UQ));
    }
    bool ok = _mm256_movemask_ps(outside) == 0;
    for (; i < end; ++i) ok = ok && std::fabs(x[i]) <= limit;
    if (!ok) within.store(false, std::memory_order_relaxed);
  });
  return within.load(std::memory_order_relaxed);
}

GuardedActivationRuns GuardedActivationRunCounts() {
  return {guarded_inside.load(std::memory_order_relaxed),
          guarded_epilogue.load(std::memory_order_relaxed)};
}

void CountGuardedActivationRun(bool inside) {
  (inside ? guarded_inside : guarded_epilogue).fetch_add(1, std::memory_order_relaxed);
}

ScopedDnnlThreads::ScopedDnnlThreads(int threads) : previous_(omp_get_max_threads()) {
  omp_set_num_threads(threads < 1 ? 1 : threads);
}

ScopedDnnlThreads::~ScopedDnnlThreads() { omp_set_num_threads(previous_); }

void ApplyPostOpsInOrder(const std::vector<PostOp>& post_ops, const float* residual, float* data,
                         int64_t n) {
  for (const PostOp& op : post_ops) {
    if (op.kind == ir::kResidualPostOp) {
      for (int64_t i = 0; i < n; ++i) data[i] += residual[i];
    } else {
      ApplyActivation(op, data, n);
    }
  }
}

}  // namespace kiln::kernels::nn
