// kiln::ScanBatched: ONNX's opset-8 Scan, which the ONNX importer maps here (opset 9 and later
// Scan runs on the "Scan" kernel in control_flow.cc).
//
// Inputs (sequence_lens?, initial states..., scan inputs...), attributes body,
// num_scan_inputs and directions. Axis 0 of every input and output is a batch axis: for each
// batch entry the body runs sequence_lens[b] times (the full length without sequence_lens)
// over slices of axis 1 of the scan inputs (last-first for directions[j] = 1), carrying the
// states. Outputs are the final states [batch, ...] and the scan outputs [batch, max_len, ...]
// in iteration order, zero beyond a shorter sequence.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

class ScanBatchedKernel : public OpKernel {
 public:
  explicit ScanBatchedKernel(const ir::Node& node) : node_(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    ctx.SetNumOutputs(static_cast<int>(node_.outputs.size()));
    ctx.output_dynamic.assign(node_.outputs.size(), true);
    if (!node_.GetGraph("body")) return Error("has no 'body' subgraph");
    const int64_t m = node_.GetInt("num_scan_inputs", -1);
    const int64_t values = static_cast<int64_t>(ctx.inputs.size()) - 1;
    if (m <= 0 || m > values) return Error("num_scan_inputs must be in [1, ", values, "]");
    const ir::Graph& body = *node_.GetGraph("body");
    const size_t states = static_cast<size_t>(values - m);
    if (body.inputs.size() != static_cast<size_t>(values) ||
        body.outputs.size() != node_.outputs.size() || node_.outputs.size() < states) {
      return Error("body takes ", body.inputs.size(), " inputs and gives ", body.outputs.size(),
                   " outputs; the node has ", values, " state and scan inputs and ",
                   node_.outputs.size(), " outputs");
    }
    for (size_t i = 1; i < ctx.inputs.size(); ++i) {
      const InputInfo& in = ctx.inputs[i];
      if (!in.present() || in.dtype == DType::kString) {
        return Error("input ", i, " must be a numeric tensor");
      }
      const int min_rank = i > states ? 2 : 1;
      if (in.shape.rank() < min_rank) {
        return Error("input ", i, " of shape ", in.shape.ToString(), " needs a batch axis",
                     i > states ? " and a sequence axis" : "");
      }
    }
    if (ctx.inputs[0].present() && ctx.inputs[0].dtype != DType::kInt64) {
      return Error("sequence_lens must be int64");
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    if (ctx.subgraphs == nullptr) return absl::InternalError(Where() + ": no subgraph runner");
    const ir::Graph& body = *node_.GetGraph("body");
    const size_t m = static_cast<size_t>(node_.GetInt("num_scan_inputs", 1));
    const size_t states = ctx.inputs.size() - 1 - m;
    const size_t scans = node_.outputs.size() - states;
    const std::vector<int64_t> directions = node_.GetInts("directions");
    const int64_t batch = ctx.inputs[1].dim(0);
    const int64_t max_len = ctx.inputs[1 + states].dim(1);
    for (size_t i = 1; i < ctx.inputs.size(); ++i) {
      if (ctx.inputs[i].dim(0) != batch || (i > states && ctx.inputs[i].dim(1) != max_len)) {
        return Error("inputs disagree on the batch size or sequence length (input ", i,
                     " has shape ", ctx.inputs[i].shape().ToString(), ")");
      }
    }
    const Tensor& lens = ctx.inputs[0];
    if (lens.valid() && lens.num_elements() != batch) {
      return Error("sequence_lens has ", lens.num_elements(), " values for batch ", batch);
    }
    std::vector<Tensor> body_inputs(states + m);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = lens.valid() ? lens.data<int64_t>()[b] : max_len;
      if (len < 0 || len > max_len) {
        return Error("sequence_lens[", b, "] = ", len, " is outside [0, ", max_len, "]");
      }
      std::vector<Tensor> state;
      for (size_t k = 0; k < states; ++k) state.push_back(ctx.inputs[1 + k].SubTensor(b));
      for (int64_t t = 0; t < len; ++t) {
        for (size_t k = 0; k < states; ++k) body_inputs[k] = state[k];
        for (size_t j = 0; j < m; ++j) {
          const bool reverse = j < directions.size() && directions[j] == 1;
          body_inputs[states + j] =
              ctx.inputs[1 + states + j].SubTensor(b).SubTensor(reverse ? len - 1 - t : t);
        }
        auto results = ctx.subgraphs->Run(body, body_inputs);
        if (!results.ok()) {
          return Annotate(results.status(), absl::StrCat("batch ", b, ", iteration ", t));
        }
        for (size_t k = 0; k < states; ++k) state[k] = (*results)[k];
        for (size_t k = 0; k < scans; ++k) {
          KILN_RETURN_IF_ERROR(Place(ctx, states + k, (*results)[states + k], batch, max_len,
                                     b * max_len + t, true));
        }
      }
      for (size_t k = 0; k < states; ++k) {
        KILN_RETURN_IF_ERROR(Place(ctx, k, state[k], batch, max_len, b, false));
      }
    }
    // Outputs no iteration produced (zero-length sequences everywhere): empty of their kind.
    for (size_t k = 0; k < node_.outputs.size(); ++k) {
      if (!ctx.outputs[k].valid()) {
        Shape shape{batch};
        if (k >= states) shape.push_back(max_len);
        KILN_RETURN_IF_ERROR(ctx.Allocate(static_cast<int>(k), DType::kFloat32, shape).status());
        std::memset(ctx.outputs[k].raw_data(), 0, ctx.outputs[k].byte_size());
      }
    }
    return absl::OkStatus();
  }

 private:
  // Writes `element` as entry `slot` of output `index` ([batch, ...] for states, [batch,
  // max_len, ...] for scan outputs), allocating the output (zeroed) at its first element.
  absl::Status Place(ComputeContext& ctx, size_t index, const Tensor& element, int64_t batch,
                     int64_t max_len, int64_t slot, bool scan) const {
    Tensor& out = ctx.outputs[index];
    if (!out.valid()) {
      Shape shape = element.shape();
      if (scan) shape.insert(0, max_len);
      shape.insert(0, batch);
      KILN_RETURN_IF_ERROR(ctx.Allocate(static_cast<int>(index), element.dtype(), shape).status());
      std::memset(out.raw_data(), 0, out.byte_size());
    }
    const int skip = scan ? 2 : 1;
    bool same = out.dtype() == element.dtype() && out.rank() == element.rank() + skip;
    for (int d = 0; same && d < element.rank(); ++d) same = out.dim(d + skip) == element.dim(d);
    if (!same || element.dtype() == DType::kString) {
      return Error("body output ", index, " changes from ", DTypeName(out.dtype()),
                   out.shape().ToString(), " to ", DTypeName(element.dtype()),
                   element.shape().ToString(), " between iterations");
    }
    std::memcpy(static_cast<char*>(out.raw_data()) + slot * element.byte_size(), element.raw_data(),
                element.byte_size());
    return absl::OkStatus();
  }

  std::string Where() const { return node_.Describe(); }
  template <typename... Args>
  absl::Status Error(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": ", args...));
  }

  ir::Node node_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "ScanBatched", ScanBatchedKernel);

}  // namespace

KILN_KERNEL_FILE(scan_batched);

}  // namespace kiln::kernels
