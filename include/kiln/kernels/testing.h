// Test helper for kernel authors: runs one operator through the real kernel registry, the
// way the plan compiler does (Create with the constant inputs, Reshape with the input
// dtypes/shapes reading what Create made, then Compute into outputs allocated from the shapes
// Reshape declared). Create and Reshape run on the same kernel object (created = itself), with
// a packed-constant store of the test's own, as the plan compiler's model store.
//
//   #include "kiln/kernels/testing.h"
//   using kiln::kernels::testing::RunKernel;
//
//   absl::StatusOr<std::vector<Tensor>> out = RunKernel("Add", {a, b});
//   auto out = RunKernel("Gemm", {a, b, c}, {{"transB", int64_t{1}}, {"alpha", 0.5f}});
//   auto out = RunKernel("Reshape", {x, shape}, {}, {.constant_inputs = {1}});
//   auto out = RunKernel("TopK", {x, k}, {{"axis", int64_t{-1}}}, {.num_outputs = 2});
//
// absl::StatusOr<std::vector<Tensor>> RunKernel(const std::string& op,
//     const std::vector<Tensor>& inputs,                 // Tensor() = omitted optional input
//     std::map<std::string, ir::Attribute> attrs = {},
//     const KernelTestOptions& options = {});
//
// Besides running the kernel it checks what the executor relies on, and fails with a
// message when the kernel breaks it:
//  - Reshape filled one dtype and shape per output; Compute kept preallocated outputs (same
//    dtype, shape, memory) and allocated every dynamic output;
//  - Compute is repeatable (a second run gives equal outputs: kernels must not keep state);
//  - where Reshape allows an output in place of an input, running it in place gives the
//    same result as running it out of place.
// Link the test with kiln_kernels_cpu: KernelRegistry::Global() holds every kernel of the
// library (its table of kernel files, not static initializers, registers them).
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/tensor.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels::testing {

struct KernelTestOptions {
  int num_outputs = 1;
  std::string domain;             // "" for ONNX ops, "kiln" for Kiln's own
  std::set<int> constant_inputs;  // inputs Reshape sees as compile-time constants
  int intra_op_threads = 1;       // > 1 runs Compute's loops on an OpenMP team that large
  bool check_repeatable = true;   // false for random ops
  bool check_in_place = true;
  // After a successful run, run again with batch 0 (see internal::BatchZero): the kernel may
  // refuse it in Reshape, but must not crash, and Compute must keep the executor's contract.
  bool check_batch_zero = true;
  bool batch_zero_run = false;  // set on that second run
};

namespace internal {

struct PreparedKernel {
  ir::Graph graph;
  PackedConstantCache packed_constants;
  std::unique_ptr<OpKernel> kernel;
  ReshapeContext prepare;
};

inline absl::StatusOr<std::vector<Tensor>> ComputeOnce(const PreparedKernel& pk,
                                                       const std::vector<Tensor>& inputs,
                                                       int threads, bool in_place) {
  const ReshapeContext& p = pk.prepare;
  const size_t n = p.output_dtypes.size();
  std::vector<Tensor> outputs(n);
  for (size_t i = 0; i < n; ++i) {
    if (p.output_dynamic[i]) continue;
    const int src = p.output_in_place_of[i];
    if (in_place && src >= 0 && src < static_cast<int>(inputs.size()) && inputs[src].valid() &&
        p.output_dtypes[i] != DType::kString && inputs[src].dtype() != DType::kString &&
        inputs[src].byte_size() == static_cast<size_t>(p.output_shapes[i].num_elements()) *
                                       DTypeSize(p.output_dtypes[i])) {
      outputs[i] = Tensor(p.output_dtypes[i], p.output_shapes[i], inputs[src].buffer(),
                          inputs[src].byte_offset());
    } else {
      outputs[i] = Tensor(p.output_dtypes[i], p.output_shapes[i]);
    }
  }
  std::vector<Tensor> expected = outputs;
  std::shared_ptr<Buffer> scratch;
  if (p.scratch_bytes > 0) scratch = Buffer::Allocate(p.scratch_bytes);
  ComputeContext ctx;
  ctx.inputs = absl::MakeConstSpan(inputs);
  ctx.outputs = absl::MakeSpan(outputs);
  ctx.scratch = scratch ? scratch->data() : nullptr;
  // The production path: Kiln's plans run parallel loops on the OpenMP team.
  ctx.use_openmp = threads > 1;
  ctx.intra_op_threads = threads;
  absl::Status status = pk.kernel->Compute(ctx);
  if (!status.ok()) return status;
  for (size_t i = 0; i < n; ++i) {
    const std::string what = absl::StrCat(pk.prepare.node->Describe(), " output ", i);
    if (p.output_dynamic[i]) {
      if (!outputs[i].valid()) {
        return absl::InternalError(
            absl::StrCat(what, " is dynamic but Compute did not allocate it"));
      }
      continue;
    }
    if (outputs[i].raw_data() != expected[i].raw_data() ||
        outputs[i].dtype() != expected[i].dtype() || outputs[i].shape() != expected[i].shape()) {
      return absl::InternalError(absl::StrCat(
          what, ": Compute replaced a preallocated output (declare it dynamic in Reshape)"));
    }
  }
  return outputs;
}

// The inputs with batch 0: every non-constant input whose first dimension equals the first
// non-constant input's gets a first dimension of 0 (the same tensors otherwise). Empty when
// there is no batch to zero.
inline std::vector<Tensor> BatchZero(const std::vector<Tensor>& inputs,
                                     const std::set<int>& constant_inputs) {
  int64_t batch = -1;
  for (size_t i = 0; i < inputs.size() && batch < 0; ++i) {
    if (inputs[i].valid() && constant_inputs.count(static_cast<int>(i)) == 0) {
      batch = inputs[i].rank() >= 1 ? inputs[i].dim(0) : 0;
    }
  }
  if (batch <= 0) return {};
  std::vector<Tensor> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.valid() && constant_inputs.count(static_cast<int>(i)) == 0 && t.rank() >= 1 &&
        t.dim(0) == batch) {
      Shape shape = t.shape();
      shape.set_dim(0, 0);
      out.push_back(Tensor(t.dtype(), shape));
    } else {
      out.push_back(t);
    }
  }
  return out;
}

}  // namespace internal

inline absl::StatusOr<std::vector<Tensor>> RunKernel(
    const std::string& op, const std::vector<Tensor>& inputs,
    std::map<std::string, ir::Attribute> attrs = {}, const KernelTestOptions& options = {}) {
  std::map<std::string, ir::Attribute> attrs_for_batch_zero;
  if (options.check_batch_zero) attrs_for_batch_zero = attrs;
  auto pk = std::make_unique<internal::PreparedKernel>();
  std::vector<ir::ValueId> input_ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid()) {
      input_ids.push_back(ir::kNoValue);
    } else if (options.constant_inputs.count(static_cast<int>(i)) > 0) {
      input_ids.push_back(pk->graph.AddConstant(absl::StrCat("input", i), inputs[i]));
    } else {
      const ir::ValueId v =
          pk->graph.AddValue(absl::StrCat("input", i),
                             ir::TensorType::Of(inputs[i].dtype(), inputs[i].shape().ToVector()));
      pk->graph.inputs.push_back(v);
      input_ids.push_back(v);
    }
  }
  const ir::NodeId id = pk->graph.AddNode(op, input_ids, options.num_outputs, std::move(attrs),
                                          "node_under_test", options.domain);
  for (ir::ValueId v : pk->graph.node(id).outputs) pk->graph.outputs.push_back(v);
  const ir::Node& node = pk->graph.node(id);

  const KernelFactory* factory = KernelRegistry::Global().Find(options.domain, op);
  if (factory == nullptr) {
    return absl::NotFoundError(absl::StrCat("no kernel registered for ", node.Describe(),
                                            " (is kiln_kernels_cpu linked whole?)"));
  }
  auto kernel = (*factory)(node);
  if (!kernel.ok()) return kernel.status();
  pk->kernel = std::move(*kernel);

  CreateContext create;
  create.node = &node;
  create.packed_constants = &pk->packed_constants;
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputInfo info;
    if (inputs[i].valid()) {
      info.dtype = inputs[i].dtype();
      info.shape = inputs[i].shape();
      if (options.constant_inputs.count(static_cast<int>(i)) > 0) info.constant = &inputs[i];
    }
    create.inputs.push_back(info);
  }
  absl::Status status = pk->kernel->Create(create);
  if (!status.ok() && options.batch_zero_run) return std::vector<Tensor>{};  // op refuses it
  if (!status.ok()) return status;

  ReshapeContext& prepare = pk->prepare;
  prepare.node = &node;
  prepare.created = pk->kernel.get();
  prepare.packed_constants = &pk->packed_constants;
  prepare.intra_op_threads = options.intra_op_threads;
  prepare.inputs = create.inputs;
  prepare.SetNumOutputs(options.num_outputs);
  status = pk->kernel->Reshape(prepare);
  if (!status.ok() && options.batch_zero_run) return std::vector<Tensor>{};  // op refuses it
  if (!status.ok()) return status;
  const size_t n = static_cast<size_t>(options.num_outputs);
  if (prepare.output_dtypes.size() != n || prepare.output_shapes.size() != n ||
      prepare.output_dynamic.size() != n || prepare.output_in_place_of.size() != n) {
    return absl::InternalError(absl::StrCat(node.Describe(), ": Reshape sized its outputs for ",
                                            prepare.output_dtypes.size(), ", the node has ", n));
  }
  for (size_t i = 0; i < n; ++i) {
    if (prepare.output_dtypes[i] == DType::kInvalid && !prepare.output_dynamic[i]) {
      return absl::InternalError(
          absl::StrCat(node.Describe(), ": Reshape left the dtype of output ", i, " unset"));
    }
  }

  auto first = internal::ComputeOnce(*pk, inputs, options.intra_op_threads, false);
  if (!first.ok()) return first.status();
  if (options.check_repeatable) {
    auto second = internal::ComputeOnce(*pk, inputs, options.intra_op_threads, false);
    if (!second.ok()) return second.status();
    for (size_t i = 0; i < n; ++i) {
      if (!TensorsEqual((*first)[i], (*second)[i])) {
        return absl::InternalError(absl::StrCat(node.Describe(), ": output ", i,
                                                " differs between two runs on the same inputs"));
      }
    }
  }
  bool any_in_place = false;
  for (int src : prepare.output_in_place_of) any_in_place |= src >= 0;
  if (options.check_in_place && any_in_place) {
    std::vector<Tensor> copies;
    for (const Tensor& t : inputs) copies.push_back(t.valid() ? t.Clone() : Tensor());
    auto in_place = internal::ComputeOnce(*pk, copies, options.intra_op_threads, true);
    if (!in_place.ok()) return in_place.status();
    for (size_t i = 0; i < n; ++i) {
      if (!TensorsEqual((*first)[i], (*in_place)[i])) {
        return absl::InternalError(absl::StrCat(node.Describe(), ": output ", i,
                                                " differs when computed in place of input ",
                                                prepare.output_in_place_of[i]));
      }
    }
  }
  if (options.check_batch_zero && !options.batch_zero_run) {
    std::vector<Tensor> empty = internal::BatchZero(inputs, options.constant_inputs);
    if (!empty.empty()) {
      KernelTestOptions zero = options;
      zero.batch_zero_run = true;
      auto result = RunKernel(op, empty, std::move(attrs_for_batch_zero), zero);
      // An error for the data (an index out of range) is an answer; a broken contract is not.
      if (!result.ok() && result.status().code() == absl::StatusCode::kInternal) {
        return absl::InternalError(
            absl::StrCat("with batch 0 inputs: ", result.status().message()));
      }
    }
  }
  // The node and graph die with `pk`; outputs own their buffers.
  return std::move(*first);
}

}  // namespace kiln::kernels::testing
