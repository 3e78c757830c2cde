// The per-run objects of the kernels on oneDNN primitives (KernelRunState, kernel.h): oneDNN
// memory objects made once per pooled run state of a plan and re-pointed on every run.
//
// Why: dnnl_memory_create allocates the memory object and its storage (two heap blocks) on
// every call, and Conv, MatMul and the int8 kernels made 3-7 of them per Compute. In oneDNN 2.6
// dnnl_memory_set_data_handle only swaps the storage's pointer (src/common/memory.cpp and
// src/cpu/cpu_memory_storage.hpp at v2.6.3: no zero padding, no allocation), so a memory object
// made at NewRunState serves every run of that run state. The argument array of each primitive
// call is built there too: the memory objects it names never change, only their data.
//
// What stays inside oneDNN per call (not removable through its public API, see
// docs/performance/runtime.md): dnnl_primitive_execute copies the arguments into an
// std::unordered_map (exec_args_t) and the CPU implementations run their loops through
// dnnl::impl::parallel, which takes an std::function.
#pragma once

#include <initializer_list>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "kiln/kernels/kernel.h"
#include "nn_dnnl.h"

namespace kiln::kernels::nn {

// One oneDNN memory object of a fixed descriptor whose data pointer changes per run.
class DnnlMemory {
 public:
  DnnlMemory() = default;
  // Throws dnnl::error when oneDNN refuses the descriptor (as dnnl::memory would).
  explicit DnnlMemory(const dnnl::memory::desc& desc);
  DnnlMemory(DnnlMemory&& other) noexcept : memory_(other.memory_) { other.memory_ = nullptr; }
  DnnlMemory& operator=(DnnlMemory&& other) noexcept;
  DnnlMemory(const DnnlMemory&) = delete;
  DnnlMemory& operator=(const DnnlMemory&) = delete;
  ~DnnlMemory();

  // Points the object at `data` (no allocation) and returns it.
  dnnl_memory_t Point(const void* data) const;
  dnnl_memory_t get() const { return memory_; }
  explicit operator bool() const { return memory_ != nullptr; }

 private:
  dnnl_memory_t memory_ = nullptr;
};

// One primitive call: its argument array, built once; the memory objects it names are the
// run state's, re-pointed before the call.
class DnnlCall {
 public:
  DnnlCall() = default;
  // Arguments whose memory is null are left out (an absent bias).
  DnnlCall(std::initializer_list<dnnl_exec_arg_t> args);
  void Execute(const dnnl::primitive& primitive, dnnl::stream& stream) const;
  bool empty() const { return args_.empty(); }

 private:
  std::vector<dnnl_exec_arg_t> args_;
};

// The kernel's run state for this Compute: ctx.run_state, which the plan made with the
// kernel's NewRunState; without one (a kernel run outside a plan: compile-time evaluation,
// kernel tests, or a NewRunState that failed) one made now through `make` into `owned`, which
// allocates but computes the same. `make` may throw dnnl::error (Compute runs in CatchDnnl).
template <typename State, typename Make>
State& RunStateFor(const ComputeContext& ctx, std::unique_ptr<State>& owned, Make&& make) {
  if (ctx.run_state != nullptr) return *static_cast<State*>(ctx.run_state);
  owned = make();
  return *owned;
}

// Calls `make` for NewRunState: null (Compute then makes its own and reports the error) when
// oneDNN refuses, since NewRunState has no Status to return.
template <typename Make>
std::unique_ptr<KernelRunState> NewDnnlRunState(Make&& make) {
  try {
    return make();
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

// The run state of a primitive on source, weights, optional bias, destination and scratchpad
// (the matmul kernels): one call of five arguments at most.
struct SrcWeightsDstRunState : KernelRunState {
  DnnlMemory src, weights, bias, dst, scratchpad;  // weights: null when packed; bias: optional
  DnnlCall call;

  // `packed`: the constant weights in the primitive's layout, or null to read input data in
  // `weights_desc`; a zero `bias_desc`: no bias argument.
  static std::unique_ptr<SrcWeightsDstRunState> Make(const dnnl::memory::desc& src_desc,
                                                     const dnnl::memory::desc& weights_desc,
                                                     const dnnl::memory* packed,
                                                     const dnnl::memory::desc& bias_desc,
                                                     const dnnl::memory::desc& dst_desc,
                                                     const dnnl::memory::desc& scratch_desc);
  // Points the memory objects at this run's data (`weights` unread when packed, `bias` when
  // there is none) and runs `primitive`, waiting for it.
  void Execute(const dnnl::primitive& primitive, dnnl::stream& stream, const void* src_data,
               const void* weights_data, const void* bias_data, void* dst_data,
               void* scratch_data) const;
};

// The memory objects a PrimitiveWeights needs per run: the user's weights and, when they are
// reordered per run (not constant), their copy in scratch. Packed weights need neither.
struct WeightsRunMemory {
  DnnlMemory user, reordered;
  DnnlCall reorder;
  WeightsRunMemory() = default;
  explicit WeightsRunMemory(const PrimitiveWeights& w);
  // The memory the primitive reads the weights from (fixed for the run state).
  dnnl_memory_t memory(const PrimitiveWeights& w) const;
  // The weights' memory for this run (reordering them into scratch first when needed).
  dnnl_memory_t Point(const PrimitiveWeights& w, const void* data, char* scratch,
                      dnnl::stream& stream) const;
};

}  // namespace kiln::kernels::nn
