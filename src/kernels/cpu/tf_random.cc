// kiln::RandomUniform(shape) -> float [shape] in [0, 1): TensorFlow's RandomUniform, which
// inference graphs keep for dropout masks (fed keep_prob = 1 makes the mask all ones). Not
// bit-compatible with TF's Philox stream: a graph whose output depends on the draw is random
// in TensorFlow too.
#include <random>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

class RandomUniformKernel : public OpKernel {
 public:
  explicit RandomUniformKernel(const ir::Node& node)
      : node_(node.Describe()), seed_(node.GetInt("seed", 0)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1 || ctx.inputs[0].dtype != DType::kInt64) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": expects an int64 shape"));
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_dynamic[0] = true;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& shape_tensor = ctx.inputs[0];
    Shape shape;
    int64_t n = 1;
    for (int64_t d : shape_tensor.span<int64_t>()) {
      if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
        return absl::InvalidArgumentError(absl::StrCat(node_, ": bad shape dimension ", d));
      }
      shape.push_back(d);
      n *= d;
    }
    KILN_ASSIGN_OR_RETURN(Tensor* const out_ptr, ctx.Allocate(0, DType::kFloat32, shape));
    Tensor& out = *out_ptr;
    thread_local std::mt19937 generator(seed_ != 0 ? static_cast<uint32_t>(seed_)
                                                   : std::random_device{}());
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    float* o = out.data<float>();
    for (int64_t i = 0; i < n; ++i) o[i] = uniform(generator);
    return absl::OkStatus();
  }

 private:
  std::string node_;
  int64_t seed_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "RandomUniform", RandomUniformKernel);

}  // namespace

KILN_KERNEL_FILE(tf_random);

}  // namespace kiln::kernels
