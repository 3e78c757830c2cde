// Control flow with ONNX semantics: If, Loop and Scan. Their bodies are subgraph attributes
// run through the executor's SubgraphRunner (which binds captured outer values and compiles
// a plan per body input shape). Output shapes depend on the data, so every output is dynamic.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

// Copies `count` elements (any dtype, strings included) between tensors' element offsets.
void CopyElements(const Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset,
                  int64_t count) {
  if (count <= 0) return;
  if (src.dtype() == DType::kString) {
    const std::string* s = src.data<std::string>() + src_offset;
    std::string* d = dst.data<std::string>() + dst_offset;
    for (int64_t i = 0; i < count; ++i) d[i] = s[i];
    return;
  }
  const size_t size = DTypeSize(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_offset * size,
              static_cast<const char*>(src.raw_data()) + src_offset * size, count * size);
}

// Element `index` along `axis`, that axis removed.
Tensor SliceAlongAxis(const Tensor& t, int axis, int64_t index) {
  if (axis == 0) return t.SubTensor(index);
  Shape shape = t.shape();
  const int64_t len = shape.dim(axis);
  shape.erase(axis);
  Tensor out(t.dtype(), shape);
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= t.dim(i);
  int64_t inner = 1;
  for (int i = axis + 1; i < t.rank(); ++i) inner *= t.dim(i);
  for (int64_t o = 0; o < outer; ++o) {
    CopyElements(out, o * inner, t, (o * len + index) * inner, inner);
  }
  return out;
}

// Stacks equally shaped `elements` along a new `axis`, last-first when `reverse`.
absl::StatusOr<Tensor> Stack(const std::vector<Tensor>& elements, int axis, bool reverse,
                             const std::string& what) {
  const Tensor& first = elements.front();
  if (axis < 0) axis += first.rank() + 1;
  if (axis < 0 || axis > first.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": axis out of range"));
  }
  Shape shape = first.shape();
  const int64_t n = static_cast<int64_t>(elements.size());
  shape.insert(axis, n);
  Tensor out(first.dtype(), shape);
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= first.dim(i);
  int64_t inner = 1;
  for (int i = axis; i < first.rank(); ++i) inner *= first.dim(i);
  for (int64_t k = 0; k < n; ++k) {
    const Tensor& e = elements[k];
    if (e.shape() != first.shape() || e.dtype() != first.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": iteration ", k, " produced ", DTypeName(e.dtype()), e.shape().ToString(),
          ", earlier ones ", DTypeName(first.dtype()), first.shape().ToString()));
    }
    const int64_t position = reverse ? n - 1 - k : k;
    for (int64_t o = 0; o < outer; ++o) {
      CopyElements(out, (o * n + position) * inner, e, o * inner, inner);
    }
  }
  return out;
}

// An empty scan output when the body never ran: shape [0, ...] from the body's declared type.
Tensor EmptyScanOutput(const ir::Graph& body, int body_output) {
  const ir::TensorType& type = body.value(body.outputs[body_output]).type;
  DType dtype = type.dtype == DType::kInvalid ? DType::kFloat32 : type.dtype;
  Shape shape{0};
  if (type.fully_known()) {
    for (const ir::Dim& d : type.dims) shape.push_back(d.value);
  }
  return Tensor(dtype, shape);
}

absl::StatusOr<bool> ScalarBool(const Tensor& t, const std::string& what) {
  if (t.num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must have one element, got shape ", t.shape().ToString()));
  }
  switch (t.dtype()) {
    case DType::kBool: return *t.data<bool>();
    case DType::kInt32: return *t.data<int32_t>() != 0;
    case DType::kInt64: return *t.data<int64_t>() != 0;
    case DType::kFloat32: return *t.data<float>() != 0;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must be bool, got ", DTypeName(t.dtype())));
  }
}

class ControlFlowKernel : public OpKernel {
 public:
  explicit ControlFlowKernel(const ir::Node& node) : node_(node) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    ctx.SetNumOutputs(static_cast<int>(node_.outputs.size()));
    ctx.output_dynamic.assign(node_.outputs.size(), true);
    return CheckAttributes(ctx);
  }

 protected:
  virtual absl::Status CheckAttributes(ReshapeContext& ctx) = 0;
  absl::StatusOr<const ir::Graph*> Body(const char* key) const {
    ir::GraphPtr g = node_.GetGraph(key);
    if (!g) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), " has no subgraph attribute '", key, "'"));
    }
    return g.get();
  }
  absl::Status NeedRunner(const ComputeContext& ctx) const {
    if (ctx.subgraphs == nullptr) {
      return absl::InternalError(absl::StrCat(node_.Describe(), ": no subgraph runner"));
    }
    return absl::OkStatus();
  }
  const ir::Node& node_;
};

class IfKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;

  absl::Status CheckAttributes(ReshapeContext& ctx) override {
    KILN_ASSIGN_OR_RETURN(const ir::Graph* then_branch, Body("then_branch"));
    KILN_ASSIGN_OR_RETURN(const ir::Graph* else_branch, Body("else_branch"));
    for (const ir::Graph* g : {then_branch, else_branch}) {
      if (g->outputs.size() != node_.outputs.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_.Describe(), ": branch '", g->name, "' has ", g->outputs.size(),
            " outputs, the node ", node_.outputs.size()));
      }
    }
    if (ctx.inputs.empty() || !ctx.inputs[0].present()) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), " needs a condition"));
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    KILN_RETURN_IF_ERROR(NeedRunner(ctx));
    KILN_ASSIGN_OR_RETURN(bool cond, ScalarBool(ctx.inputs[0], "If condition"));
    KILN_ASSIGN_OR_RETURN(const ir::Graph* branch, Body(cond ? "then_branch" : "else_branch"));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> results, ctx.subgraphs->Run(*branch, {}));
    for (size_t i = 0; i < ctx.outputs.size() && i < results.size(); ++i) {
      ctx.outputs[i] = std::move(results[i]);
    }
    return absl::OkStatus();
  }
};

class LoopKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;

  absl::Status CheckAttributes(ReshapeContext& ctx) override {
    KILN_ASSIGN_OR_RETURN(const ir::Graph* body, Body("body"));
    if (ctx.inputs.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), " needs inputs M and cond (either may be omitted)"));
    }
    const size_t carried = ctx.inputs.size() - 2;
    if (body->inputs.size() != carried + 2 || body->outputs.size() < carried + 1 ||
        node_.outputs.size() != body->outputs.size() - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          node_.Describe(), ": body takes ", body->inputs.size(), " inputs and gives ",
          body->outputs.size(), " outputs; expected ", carried + 2, " inputs and ",
          node_.outputs.size() + 1, " outputs for ", carried, " loop-carried values"));
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    KILN_RETURN_IF_ERROR(NeedRunner(ctx));
    KILN_ASSIGN_OR_RETURN(const ir::Graph* body, Body("body"));
    const size_t carried = ctx.inputs.size() - 2;
    const size_t scans = node_.outputs.size() - carried;
    int64_t max_trips = -1;
    if (ctx.inputs[0].valid()) {
      const Tensor& m = ctx.inputs[0];
      if (m.num_elements() != 1 || (m.dtype() != DType::kInt64 && m.dtype() != DType::kInt32)) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_.Describe(), ": M must be an int64 scalar, got ", DTypeName(m.dtype()),
            m.shape().ToString()));
      }
      max_trips = m.dtype() == DType::kInt64 ? *m.data<int64_t>() : *m.data<int32_t>();
    }
    bool cond = true;
    if (ctx.inputs[1].valid()) {
      KILN_ASSIGN_OR_RETURN(cond, ScalarBool(ctx.inputs[1], "Loop condition"));
    }
    if (max_trips < 0 && !ctx.inputs[1].valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": neither M nor cond given: the loop never ends"));
    }
    std::vector<Tensor> state(ctx.inputs.begin() + 2, ctx.inputs.end());
    std::vector<std::vector<Tensor>> scan_elements(scans);
    std::vector<Tensor> body_inputs(carried + 2);
    for (int64_t i = 0; (max_trips < 0 || i < max_trips) && cond; ++i) {
      body_inputs[0] = Tensor::Scalar<int64_t>(i);
      body_inputs[1] = Tensor::Scalar<bool>(cond);
      for (size_t k = 0; k < carried; ++k) body_inputs[k + 2] = state[k];
      auto results = ctx.subgraphs->Run(*body, body_inputs);
      if (!results.ok()) {
        return Annotate(results.status(), absl::StrCat("iteration ", i));
      }
      KILN_ASSIGN_OR_RETURN(cond, ScalarBool((*results)[0], "Loop body condition"));
      for (size_t k = 0; k < carried; ++k) state[k] = std::move((*results)[k + 1]);
      for (size_t k = 0; k < scans; ++k) {
        scan_elements[k].push_back(std::move((*results)[carried + 1 + k]));
      }
    }
    for (size_t k = 0; k < carried; ++k) ctx.outputs[k] = state[k];
    for (size_t k = 0; k < scans; ++k) {
      if (scan_elements[k].empty()) {
        ctx.outputs[carried + k] = EmptyScanOutput(*body, static_cast<int>(carried + 1 + k));
        continue;
      }
      KILN_ASSIGN_OR_RETURN(ctx.outputs[carried + k],
                            Stack(scan_elements[k], 0, false,
                                  absl::StrCat(node_.Describe(), " scan output ", k)));
    }
    return absl::OkStatus();
  }
};

class ScanKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;

  absl::Status CheckAttributes(ReshapeContext& ctx) override {
    KILN_ASSIGN_OR_RETURN(const ir::Graph* body, Body("body"));
    const int64_t m = node_.GetInt("num_scan_inputs", -1);
    if (m <= 0 || m > static_cast<int64_t>(ctx.inputs.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": num_scan_inputs must be in [1, number of inputs]"));
    }
    const size_t states = ctx.inputs.size() - m;
    if (body->inputs.size() != ctx.inputs.size() || body->outputs.size() != node_.outputs.size() ||
        node_.outputs.size() < states) {
      return absl::InvalidArgumentError(absl::StrCat(
          node_.Describe(), ": body takes ", body->inputs.size(), " inputs and gives ",
          body->outputs.size(), " outputs; the node has ", ctx.inputs.size(), " and ",
          node_.outputs.size()));
    }
    for (size_t j = 0; j < static_cast<size_t>(m); ++j) {
      const InputInfo& info = ctx.inputs[states + j];
      const int64_t axis = ScanInputAxis(j, info.shape.rank());
      if (axis < 0 || axis >= info.shape.rank()) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_.Describe(), ": scan input ", j, " of shape ", info.shape.ToString(),
            " has no axis ", axis));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    KILN_RETURN_IF_ERROR(NeedRunner(ctx));
    KILN_ASSIGN_OR_RETURN(const ir::Graph* body, Body("body"));
    const size_t m = static_cast<size_t>(node_.GetInt("num_scan_inputs", 1));
    const size_t states = ctx.inputs.size() - m;
    const size_t scans = node_.outputs.size() - states;
    const std::vector<int64_t> directions = node_.GetInts("scan_input_directions");
    const std::vector<int64_t> out_axes = node_.GetInts("scan_output_axes");
    const std::vector<int64_t> out_directions = node_.GetInts("scan_output_directions");
    int64_t length = -1;
    for (size_t j = 0; j < m; ++j) {
      const Tensor& t = ctx.inputs[states + j];
      const int64_t len = t.dim(static_cast<int>(ScanInputAxis(j, t.rank())));
      if (length >= 0 && len != length) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_.Describe(), ": scan inputs have different lengths (", length, " and ", len,
            ")"));
      }
      length = len;
    }
    std::vector<Tensor> state(ctx.inputs.begin(), ctx.inputs.begin() + states);
    std::vector<std::vector<Tensor>> elements(scans);
    std::vector<Tensor> body_inputs(states + m);
    for (int64_t i = 0; i < length; ++i) {
      for (size_t k = 0; k < states; ++k) body_inputs[k] = state[k];
      for (size_t j = 0; j < m; ++j) {
        const Tensor& t = ctx.inputs[states + j];
        const bool reverse = j < directions.size() && directions[j] == 1;
        body_inputs[states + j] = SliceAlongAxis(
            t, static_cast<int>(ScanInputAxis(j, t.rank())), reverse ? length - 1 - i : i);
      }
      auto results = ctx.subgraphs->Run(*body, body_inputs);
      if (!results.ok()) return Annotate(results.status(), absl::StrCat("iteration ", i));
      for (size_t k = 0; k < states; ++k) state[k] = std::move((*results)[k]);
      for (size_t k = 0; k < scans; ++k) elements[k].push_back(std::move((*results)[states + k]));
    }
    for (size_t k = 0; k < states; ++k) ctx.outputs[k] = state[k];
    for (size_t k = 0; k < scans; ++k) {
      if (elements[k].empty()) {
        ctx.outputs[states + k] = EmptyScanOutput(*body, static_cast<int>(states + k));
        continue;
      }
      const int axis = k < out_axes.size() ? static_cast<int>(out_axes[k]) : 0;
      const bool reverse = k < out_directions.size() && out_directions[k] == 1;
      KILN_ASSIGN_OR_RETURN(ctx.outputs[states + k],
                            Stack(elements[k], axis, reverse,
                                  absl::StrCat(node_.Describe(), " scan output ", k)));
    }
    return absl::OkStatus();
  }

 private:
  int64_t ScanInputAxis(size_t j, int rank) const {
    const std::vector<int64_t> axes = node_.GetInts("scan_input_axes");
    int64_t axis = j < axes.size() ? axes[j] : 0;
    if (axis < 0) axis += rank;
    return axis;
  }
};

KILN_REGISTER_KERNEL_CLASS("", "If", IfKernel);
KILN_REGISTER_KERNEL_CLASS("", "Loop", LoopKernel);
KILN_REGISTER_KERNEL_CLASS("", "Scan", ScanKernel);

}  // namespace

KILN_KERNEL_FILE(control_flow);

}  // namespace kiln::kernels
