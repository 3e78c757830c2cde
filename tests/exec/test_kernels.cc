#include "test_kernels.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kiln/kernels/kernel.h"

namespace kiln::exec::testing {

std::atomic<int>& CountCalls() {
  static std::atomic<int> calls{0};
  return calls;
}
std::atomic<int>& RendezvousArrivals() {
  static std::atomic<int> arrivals{0};
  return arrivals;
}

namespace {
using kernels::ComputeContext;
using kernels::OpKernel;
using kernels::ReshapeContext;

absl::Status NeedFloat(const ReshapeContext& ctx, size_t i) {
  if (i >= ctx.inputs.size() || ctx.inputs[i].dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " must be float"));
  }
  return absl::OkStatus();
}

// out = a + b (same shapes), may run in place of a.
class AddKernel : public OpKernel {
 public:
  explicit AddKernel(const ir::Node&) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 2) return absl::InvalidArgumentError("Add takes 2 inputs");
    if (ctx.inputs[0].shape != ctx.inputs[1].shape) {
      return absl::InvalidArgumentError(absl::StrCat("shapes differ: ",
                                                     ctx.inputs[0].shape.ToString(), " vs ",
                                                     ctx.inputs[1].shape.ToString()));
    }
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    ctx.output_in_place_of[0] = 0;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const float* a = ctx.inputs[0].data<float>();
    const float* b = ctx.inputs[1].data<float>();
    float* out = ctx.outputs[0].data<float>();
    const int64_t n = ctx.outputs[0].num_elements();
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
    return absl::OkStatus();
  }
};

// out = x + b with b of shape [1]; x must be rank 1 or have a last dimension of 1 (so that
// runtime tests have a graph that rejects some shapes).
class AddBroadcast1Kernel : public OpKernel {
 public:
  explicit AddBroadcast1Kernel(const ir::Node&) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    const Shape& x = ctx.inputs[0].shape;
    if (ctx.inputs[1].shape != Shape{1}) return absl::InvalidArgumentError("b must be [1]");
    if (x.rank() > 1 && x.dim(x.rank() - 1) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("x's last dimension must be 1, got ", x.ToString()));
    }
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = x;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const float b = ctx.inputs[1].data<float>()[0];
    const float* x = ctx.inputs[0].data<float>();
    float* out = ctx.outputs[0].data<float>();
    for (int64_t i = 0; i < ctx.outputs[0].num_elements(); ++i) out[i] = x[i] + b;
    return absl::OkStatus();
  }
};

// out = max(x, 0), in place allowed.
class ReluKernel : public OpKernel {
 public:
  explicit ReluKernel(const ir::Node&) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (auto s = NeedFloat(ctx, 0); !s.ok()) return s;
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    ctx.output_in_place_of[0] = 0;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const float* x = ctx.inputs[0].data<float>();
    float* out = ctx.outputs[0].data<float>();
    for (int64_t i = 0; i < ctx.outputs[0].num_elements(); ++i) out[i] = x[i] > 0 ? x[i] : 0;
    return absl::OkStatus();
  }
};

// out = x * factor, never in place; uses scratch to exercise scratch planning.
class ScaleKernel : public OpKernel {
 public:
  explicit ScaleKernel(const ir::Node& node) : factor_(node.GetFloat("factor", 1.0f)) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (auto s = NeedFloat(ctx, 0); !s.ok()) return s;
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    ctx.scratch_bytes = sizeof(float) * ctx.inputs[0].shape.num_elements();
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    const float* x = ctx.inputs[0].data<float>();
    float* tmp = static_cast<float*>(ctx.scratch);
    const int64_t n = ctx.outputs[0].num_elements();
    for (int64_t i = 0; i < n; ++i) tmp[i] = x[i] * factor_;
    float* out = ctx.outputs[0].data<float>();
    for (int64_t i = 0; i < n; ++i) out[i] = tmp[i];
    return absl::OkStatus();
  }

 private:
  float factor_;
};

// Identity that counts its runs.
class CountKernel : public OpKernel {
 public:
  explicit CountKernel(const ir::Node&) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    CountCalls().fetch_add(1);
    ctx.outputs[0].CopyFrom(ctx.inputs[0]);
    return absl::OkStatus();
  }
};

// The positive elements of x, in order: a data-dependent (dynamic) output shape.
class PositivesKernel : public OpKernel {
 public:
  explicit PositivesKernel(const ir::Node&) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    if (auto s = NeedFloat(ctx, 0); !s.ok()) return s;
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    std::vector<float> kept;
    for (float v : ctx.inputs[0].span<float>()) {
      if (v > 0) kept.push_back(v);
    }
    auto allocated = ctx.Allocate(0, DType::kFloat32, Shape{static_cast<int64_t>(kept.size())});
    if (!allocated.ok()) return allocated.status();
    Tensor& out = **allocated;
    for (size_t i = 0; i < kept.size(); ++i) out.data<float>()[i] = kept[i];
    return absl::OkStatus();
  }
};

class RendezvousKernel : public OpKernel {
 public:
  explicit RendezvousKernel(const ir::Node& node) : parties_(node.GetInt("parties", 2)) {}
  absl::Status Reshape(ReshapeContext& ctx) override {
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    RendezvousArrivals().fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (RendezvousArrivals().load() < parties_) {
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError("the other branch never ran concurrently");
      }
      std::this_thread::yield();
    }
    ctx.outputs[0].CopyFrom(ctx.inputs[0]);
    return absl::OkStatus();
  }

 private:
  int64_t parties_;
};

KILN_REGISTER_KERNEL_CLASS("test", "Add", AddKernel);
KILN_REGISTER_KERNEL_CLASS("test", "Relu", ReluKernel);
KILN_REGISTER_KERNEL_CLASS("test", "AddBroadcast1", AddBroadcast1Kernel);
KILN_REGISTER_KERNEL_CLASS("test", "Scale", ScaleKernel);
KILN_REGISTER_KERNEL_CLASS("test", "Count", CountKernel);
KILN_REGISTER_KERNEL_CLASS("test", "Positives", PositivesKernel);
KILN_REGISTER_KERNEL_CLASS("test", "Rendezvous", RendezvousKernel);

}  // namespace

KILN_KERNEL_FILE(exec_test_kernels);

namespace {
// The test kernels join the global registry before any test runs: this object file is linked
// into each test that uses them, so its initializer runs (the library's kernels come from
// the registry's own table).
const bool kTestKernelsRegistered = [] {
  KilnRegisterKernels_exec_test_kernels(&kernels::KernelRegistry::Global());
  return true;
}();
}  // namespace

ir::ValueId AddOp(ir::Graph& g, const std::string& op, std::vector<ir::ValueId> inputs,
                  std::map<std::string, ir::Attribute> attrs) {
  const ir::NodeId n = g.AddNode(op, std::move(inputs), 1, std::move(attrs), "", "test");
  return g.node(n).outputs[0];
}

ir::ValueId FloatInput(ir::Graph& g, const std::string& name, std::vector<int64_t> dims) {
  const ir::ValueId v = g.AddValue(name, ir::TensorType::Of(DType::kFloat32, dims));
  g.inputs.push_back(v);
  return v;
}

Tensor Floats(std::vector<float> values, Shape shape) {
  return Tensor::FromVector<float>(values, std::move(shape));
}

std::vector<float> ToVector(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

}  // namespace kiln::exec::testing
