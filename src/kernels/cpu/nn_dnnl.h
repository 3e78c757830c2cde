// Shared plumbing for the kernels that run on oneDNN (Conv, ConvTranspose, MatMul, Gemm; the
// pools are Kiln's own loops, nn_pool.cc): the CPU engine, a stream per thread, descriptor
// helpers, the fused post-op list, and the conversion of oneDNN's exceptions into Status values.
//
// Fused post-ops ("kiln" domain FusedConv / FusedMatMul / FusedGemm, built by the optimizer;
// attributes and which post-ops may run inside oneDNN: include/kiln/ir/fused_post_ops.h):
// only the post-ops that oneDNN computes exactly like the unfused ops run inside the primitive;
// the rest form the kernel's epilogue, run on the output after the primitive by ApplyEpilogue
// in the unfused ops' own vector loops, so a fused node gives what the unfused nodes give, NaN,
// infinities and signed zeros included.
#pragma once

#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels::nn {

// `n` rounded up to a multiple of 64 (scratch offsets: cache-line aligned).
inline size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

dnnl::engine& CpuEngine();
// The calling thread's stream on CpuEngine().
dnnl::stream& ThreadStream();

dnnl::memory::dims ToDnnlDims(const Shape& shape);
dnnl::memory::dims ToDnnlDims(const std::vector<int64_t>& dims);
// Plain row-major layout tag for a rank (a, ab, abc, ...).
dnnl::memory::format_tag PlainTag(int rank);
dnnl::memory::desc PlainDesc(const Shape& shape,
                             dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// The f32 descriptor of a rank-4 [N, C, H, W] value whose bytes are in `layout` (ir::Value's
// layout, which the optimizer chose); PlainDesc for kPlain or another rank.
dnnl::memory::desc LayoutDesc(const Shape& shape, ir::MemoryLayout layout);
// The channel of the element at flat byte position `i` of an [N, C, H, W] value in `layout`.
int64_t ChannelAt(int64_t i, const Shape& shape, ir::MemoryLayout layout);

using PostOp = ir::PostOp;

// Reads the post-op attributes of a fused node (empty list for plain ops).
absl::StatusOr<std::vector<PostOp>> ReadPostOps(const ir::Node& node);
// Whether `kind` can be expressed as a oneDNN eltwise post-op.
bool IsSupportedActivation(const std::string& kind);
// Appends to `ops` the leading post-ops that oneDNN computes exactly ("Add" becomes a sum
// post-op: dst must hold the residual before execution) and returns the rest, the epilogue,
// for ApplyEpilogue. InvalidArgument when an "Add" would have to follow an epilogue activation
// (the optimizer never fuses that order).
absl::StatusOr<std::vector<PostOp>> AppendPostOps(const ir::Node& node,
                                                  const std::vector<PostOp>& post_ops,
                                                  dnnl::post_ops& ops);
// Applies one activation to a float buffer in place, exactly as the unfused activation node
// computes it (the same vector loops).
void ApplyActivation(const PostOp& op, float* data, int64_t n);
// Applies `post_ops` in order to n values that stand for the primitive's result (an empty sum
// plus bias): "Add" adds `residual` (n floats, read before `data` was written), the rest are
// activations. Conv and MatMul use it when there is nothing for oneDNN to sum.
void ApplyPostOpsInOrder(const std::vector<PostOp>& post_ops, const float* residual, float* data,
                         int64_t n);
// Whether one of the activations costs far more per element than a copy (Gelu, Tanh, Sigmoid,
// ...: simd::IsHeavyUnary): loops running it give each thread kMinHeavyElementsPerThread
// elements instead of the tens of thousands a Relu needs to pay for waking a thread.
bool HasHeavyActivation(const std::vector<PostOp>& post_ops);
inline constexpr int64_t kMinHeavyElementsPerThread = int64_t{1} << 14;
// Applies the epilogue activations, in order, to the n floats of a primitive's output, in
// place, on the context's intra-op threads. Nothing to do for an empty epilogue.
void ApplyEpilogue(const std::vector<PostOp>& epilogue, float* data, int64_t n,
                   const ComputeContext& ctx);

// A Relu or Clip epilogue that may run inside oneDNN's primitive on the runs where that gives
// the same bits. oneDNN computes both as max(s, lo) then min(s, hi) on the sum s, which turns a
// NaN sum into lo and a -0.0 sum into +0.0, where Kiln's kernels (and ONNX) keep NaN and -0.0;
// on every other sum the two agree. A sum cannot be NaN when the weights and bias are finite
// and every input has |x| <= input_limit (no partial sum can reach infinity, so none can be
// inf - inf), and it cannot be -0.0 when it starts from oneDNN's +0.0 accumulator and the bias
// is not -0.0 (a bias of -0.0 makes the activation unusable here). So the kernel checks its
// input on each run (InputWithinLimit: one read of the input, where the epilogue reads and
// writes the output) and runs the activation inside the primitive when it passes, in the
// epilogue otherwise. KILN_GUARDED_ACTIVATION=0 keeps every activation in the epilogue (to
// measure what this saves).
struct GuardedActivation {
  bool usable = false;
  float input_limit = 0;  // the largest |x| with which no partial sum can overflow
  // A bound on |y| when the activation ran inside (Clip with finite bounds), else +inf: the
  // plan hands it to the consumers (ComputeContext::output_bounds), whose guard then needs no
  // read of their input.
  float output_bound = std::numeric_limits<float>::infinity();
  dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
  float alpha = 0, beta = 0;  // oneDNN's parameters of `alg`
};
// For an epilogue of one Relu or Clip after a product whose weights are `rows` output channels
// of `row_length` consecutive floats each, and `bias` (rows floats, or null): usable unless the
// epilogue is anything else, a weight or bias is not finite, a bias is -0.0, or a Clip bound is
// NaN or -0.0 (where max(lo, s) and max(s, lo) differ for s = +0.0).
GuardedActivation PlanGuardedActivation(const std::vector<PostOp>& epilogue, const float* weights,
                                        int64_t rows, int64_t row_length, const float* bias);
// Whether all `count` floats at x are finite with |x| <= limit, read on the context's threads.
bool InputWithinLimit(const float* x, int64_t count, float limit, const ComputeContext& ctx);
// How often kernels with a usable GuardedActivation ran it inside oneDNN and in the epilogue,
// since the process started (for tests and benchmarks).
struct GuardedActivationRuns {
  int64_t inside = 0, epilogue = 0;
};
GuardedActivationRuns GuardedActivationRunCounts();
void CountGuardedActivationRun(bool inside);

// Sets the number of OpenMP threads oneDNN uses for primitives run by this thread, for the
// lifetime of the object.
class ScopedDnnlThreads {
 public:
  explicit ScopedDnnlThreads(int threads);
  ~ScopedDnnlThreads();

 private:
  int previous_;
};

// Runs `fn`, turning a dnnl::error into an Internal status that names `node` (described only
// then: Compute runs this on every call and must not build strings).
template <typename Fn>
absl::Status CatchDnnl(const ir::Node& node, Fn&& fn) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    return absl::InternalError(node.Describe() + ": oneDNN: " + e.what());
  }
}

// A kernel on oneDNN primitives: Create, Reshape and Compute run CreateImpl, ReshapeImpl and
// ComputeImpl through CatchDnnl.
class DnnlKernel : public OpKernel {
 public:
  explicit DnnlKernel(const ir::Node& node) : node_(node) {}

  absl::Status Create(CreateContext& ctx) final {
    return CatchDnnl(node_, [&] { return CreateImpl(ctx); });
  }
  absl::Status Reshape(ReshapeContext& ctx) final {
    return CatchDnnl(node_, [&] { return ReshapeImpl(ctx); });
  }
  absl::Status Compute(ComputeContext& ctx) const final {
    return CatchDnnl(node_, [&] { return ComputeImpl(ctx); });
  }

 protected:
  virtual absl::Status CreateImpl(CreateContext& /*ctx*/) { return absl::OkStatus(); }
  virtual absl::Status ReshapeImpl(ReshapeContext& ctx) = 0;
  virtual absl::Status ComputeImpl(ComputeContext& ctx) const = 0;

  ir::Node node_;
};

// A oneDNN memory object over bytes Kiln owns, for one Compute call, made through oneDNN's C
// API: dnnl::memory adds a shared_ptr control block (a heap allocation per object per call).
class RawMemory {
 public:
  RawMemory() = default;
  RawMemory(const dnnl::memory::desc& desc, const void* data);
  RawMemory(const RawMemory&) = delete;
  RawMemory& operator=(const RawMemory&) = delete;
  ~RawMemory();
  dnnl_memory_t get() const { return memory_; }
  void* data() const;

 private:
  dnnl_memory_t memory_ = nullptr;
};

// Runs `primitive` with `args` as oneDNN's C API takes them, from the caller's stack:
// dnnl::primitive::execute takes an unordered_map and builds a vector from it on every call.
void ExecutePrimitive(const dnnl::primitive& primitive, dnnl::stream& stream,
                      std::initializer_list<dnnl_exec_arg_t> args);

// Create's packing pass of a kernel on oneDNN primitives: runs `reshape` (the kernel's own
// Reshape work) with `*creating` set, on the graph's inputs with input 0's shape replaced by
// `first_input` (the graph's shape with its open dimensions made concrete), so that constant
// weights are packed once per model for the layout oneDNN picks there. A oneDNN error (no
// primitive for that shape) comes back as a Status like any other: the caller then drops what
// it packed, and the plans' Reshape reports the error or packs for their own shape.
absl::Status ReshapeForCreate(const CreateContext& ctx, const Shape& first_input, bool* creating,
                              absl::FunctionRef<absl::Status(ReshapeContext&)> reshape);

// `user` (a constant input's bytes) reordered into `packed`, the layout a primitive chose.
// Through `cache` (ReshapeContext::packed_constants) when there is one, so every plan of the
// model shares one packed copy per node and layout; the kernel's own copy otherwise.
absl::StatusOr<std::shared_ptr<const dnnl::memory>> PackConstant(PackedConstantCache* cache,
                                                                 const ir::Node& node,
                                                                 const dnnl::memory::desc& user,
                                                                 const void* data,
                                                                 const dnnl::memory::desc& packed);

// A primitive's weights in the layout it chose: packed once per model when they are a
// constant, else reordered into scratch on every run; the input itself when the layouts agree.
//
// Packing belongs to Create (kernel.h): the model's kernel for the node builds its primitive
// descriptor for the shape the graph records (batch 1 where the graph leaves it open) and
// packs the constant weights into that layout, in the model's PackedConstantCache. A plan's
// Reshape then takes those packed weights from the created kernel when its own primitive
// chose the same layout, which is the common case: a oneDNN convolution's weight layout
// follows the ISA, the channels and the implementation, not the batch. When a plan's primitive
// wants another layout (another implementation for that batch or for spatial dimensions the
// graph did not fix), Reshape packs through the same cache, keyed by node and layout, so that
// layout too is packed once per model and counted once.
struct PrimitiveWeights {
  dnnl::memory::desc user, chosen;
  bool reorder = false;  // chosen != user
  size_t scratch_offset = 0;
  std::shared_ptr<const dnnl::memory> packed;  // shared by the model's plans
  dnnl::reorder reorder_primitive;             // user -> chosen, when not packed

  // At Create or Reshape, `user` set, with the primitive's layout `chosen_layout`: takes the
  // constant weights packed by `created` (the created kernel's weights; may be this object)
  // when they are in that layout, else packs them; or places the per-run copy of weights that
  // are not constant in scratch at *offset (advancing it).
  absl::Status Prepare(const ReshapeContext& ctx, const ir::Node& node, const InputInfo& w,
                       const dnnl::memory::desc& chosen_layout, size_t* offset,
                       const PrimitiveWeights* created = nullptr);
};

// The weights' memory for one Compute call: reordered into scratch first when they are
// neither packed nor in the primitive's layout.
class WeightsMemory {
 public:
  WeightsMemory(const PrimitiveWeights& w, const void* data, char* scratch, dnnl::stream& stream);
  dnnl_memory_t get() const { return memory_; }

 private:
  const RawMemory user_, scratch_;
  dnnl_memory_t memory_;
};

}  // namespace kiln::kernels::nn
