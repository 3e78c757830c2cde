#include "nn_dnnl_run_state.h"

namespace kiln::kernels::nn {

DnnlMemory::DnnlMemory(const dnnl::memory::desc& desc) {
  // No data yet: Point sets it on every run.
  dnnl::error::wrap_c_api(
      dnnl_memory_create(&memory_, &desc.data, CpuEngine().get(), DNNL_MEMORY_NONE),
      "could not create a memory object");
}

DnnlMemory& DnnlMemory::operator=(DnnlMemory&& other) noexcept {
  if (this != &other) {
    if (memory_ != nullptr) dnnl_memory_destroy(memory_);
    memory_ = other.memory_;
    other.memory_ = nullptr;
  }
  return *this;
}

DnnlMemory::~DnnlMemory() {
  if (memory_ != nullptr) dnnl_memory_destroy(memory_);
}

dnnl_memory_t DnnlMemory::Point(const void* data) const {
  dnnl::error::wrap_c_api(dnnl_memory_set_data_handle(memory_, const_cast<void*>(data)),
                          "could not set a memory object's data");
  return memory_;
}

DnnlCall::DnnlCall(std::initializer_list<dnnl_exec_arg_t> args) {
  for (const dnnl_exec_arg_t& arg : args) {
    if (arg.memory != nullptr) args_.push_back(arg);
  }
}

void DnnlCall::Execute(const dnnl::primitive& primitive, dnnl::stream& stream) const {
  dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive.get(), stream.get(),
                                                 static_cast<int>(args_.size()), args_.data()),
                          "could not execute a primitive");
}

std::unique_ptr<SrcWeightsDstRunState> SrcWeightsDstRunState::Make(
    const dnnl::memory::desc& src_desc, const dnnl::memory::desc& weights_desc,
    const dnnl::memory* packed, const dnnl::memory::desc& bias_desc,
    const dnnl::memory::desc& dst_desc, const dnnl::memory::desc& scratch_desc) {
  auto s = std::make_unique<SrcWeightsDstRunState>();
  s->src = DnnlMemory(src_desc);
  if (packed == nullptr) s->weights = DnnlMemory(weights_desc);
  if (!bias_desc.is_zero()) s->bias = DnnlMemory(bias_desc);
  s->dst = DnnlMemory(dst_desc);
  s->scratchpad = DnnlMemory(scratch_desc);
  s->call = DnnlCall({{DNNL_ARG_SRC, s->src.get()},
                      {DNNL_ARG_WEIGHTS, packed != nullptr ? packed->get() : s->weights.get()},
                      {DNNL_ARG_BIAS, s->bias.get()},  // left out when null
                      {DNNL_ARG_DST, s->dst.get()},
                      {DNNL_ARG_SCRATCHPAD, s->scratchpad.get()}});
  return s;
}

void SrcWeightsDstRunState::Execute(const dnnl::primitive& primitive, dnnl::stream& stream,
                                    const void* src_data, const void* weights_data,
                                    const void* bias_data, void* dst_data,
                                    void* scratch_data) const {
  src.Point(src_data);
  if (weights) weights.Point(weights_data);
  if (bias) bias.Point(bias_data);
  dst.Point(dst_data);
  scratchpad.Point(scratch_data);
  call.Execute(primitive, stream);
  stream.wait();
}

WeightsRunMemory::WeightsRunMemory(const PrimitiveWeights& w) {
  if (w.packed) return;
  user = DnnlMemory(w.user);
  if (w.reorder) {
    reordered = DnnlMemory(w.chosen);
    reorder = DnnlCall({{DNNL_ARG_FROM, user.get()}, {DNNL_ARG_TO, reordered.get()}});
  }
}

dnnl_memory_t WeightsRunMemory::memory(const PrimitiveWeights& w) const {
  if (w.packed) return w.packed->get();
  return w.reorder ? reordered.get() : user.get();
}

dnnl_memory_t WeightsRunMemory::Point(const PrimitiveWeights& w, const void* data, char* scratch,
                                      dnnl::stream& stream) const {
  if (w.packed) return w.packed->get();
  user.Point(data);
  if (!w.reorder) return user.get();
  reordered.Point(scratch + w.scratch_offset);
  reorder.Execute(w.reorder_primitive, stream);
  return reordered.get();
}

}  // namespace kiln::kernels::nn
