// kiln::ParseExample: TensorFlow's ParseExample, ParseExampleV2 and ParseSingleExample as the
// TF importer normalizes them. Input 0 holds serialized tf.Example protos (a vector [B], or a
// scalar when attribute single=1); inputs 1.. are the dense defaults (an empty tensor marks a
// required feature). Outputs follow TF's layout: per sparse feature its indices, then values,
// then dense shapes; then per dense feature its values [B, dense shape...].
// Attributes: sparse_keys, sparse_types, dense_keys, dense_types (ONNX dtype numbers),
// dense_ranks and dense_dims (the dense shapes, flattened), single.
#include "absl/strings/str_cat.h"
#include "kiln/data/formats/example.h"
#include "kiln/core/status.h"
#include "kiln/ir/onnx_types.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

using data::formats::ExampleSpec;
using data::formats::FeatureSpec;

// tf.Example holds floats, int64s and bytes only: other dtypes are kInvalid (refused).
DType FromOnnx(int64_t t) {
  const DType dtype = ir::DTypeFromOnnxCode(t);
  return dtype == DType::kFloat32 || dtype == DType::kInt64 || dtype == DType::kString
             ? dtype
             : DType::kInvalid;
}

class ParseExampleKernel : public OpKernel {
 public:
  explicit ParseExampleKernel(const ir::Node& node)
      : node_(node.Describe()),
        sparse_keys_(node.GetStrings("sparse_keys")),
        dense_keys_(node.GetStrings("dense_keys")),
        sparse_types_(node.GetInts("sparse_types")),
        dense_types_(node.GetInts("dense_types")),
        dense_ranks_(node.GetInts("dense_ranks")),
        dense_dims_(node.GetInts("dense_dims")),
        single_(node.GetInt("single", 0) != 0) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    const size_t ns = sparse_keys_.size(), nd = dense_keys_.size();
    if (sparse_types_.size() != ns || dense_types_.size() != nd || dense_ranks_.size() != nd) {
      return Error("attributes differ in length");
    }
    if (ctx.inputs.size() != 1 + nd) {
      return Error(absl::StrCat("expects serialized examples and ", nd, " dense defaults"));
    }
    if (ctx.inputs[0].dtype != DType::kString) return Error("serialized input must be strings");
    if (single_ ? ctx.inputs[0].shape.rank() != 0 : ctx.inputs[0].shape.rank() != 1) {
      return Error(absl::StrCat("serialized input must be ", single_ ? "a scalar" : "a vector",
                                ", is ", ctx.inputs[0].shape.ToString()));
    }
    ExampleSpec spec;
    for (size_t i = 0; i < ns; ++i) {
      const DType t = FromOnnx(sparse_types_[i]);
      if (t == DType::kInvalid) return Error("sparse features must be float, int64 or string");
      spec.features.push_back(FeatureSpec::VarLen(sparse_keys_[i], t));
    }
    size_t offset = 0;
    std::vector<Shape> dense_shapes;
    for (size_t i = 0; i < nd; ++i) {
      const DType t = FromOnnx(dense_types_[i]);
      if (t == DType::kInvalid) return Error("dense features must be float, int64 or string");
      Shape shape;
      for (int64_t r = 0; r < dense_ranks_[i]; ++r) {
        if (offset >= dense_dims_.size()) return Error("dense_dims too short");
        shape.push_back(dense_dims_[offset++]);
      }
      dense_shapes.push_back(shape);
      if (ctx.inputs[1 + i].dtype != t) {
        return Error(absl::StrCat("default of '", dense_keys_[i], "' is ",
                                  DTypeName(ctx.inputs[1 + i].dtype), ", feature is ",
                                  DTypeName(t)));
      }
      spec.features.push_back(FeatureSpec::FixedLen(dense_keys_[i], t, shape));
    }
    KILN_RETURN_IF_ERROR(spec.Validate());
    spec_ = spec;
    ctx.SetNumOutputs(static_cast<int>(3 * ns + nd));
    for (size_t i = 0; i < ns; ++i) {
      ctx.output_dtypes[i] = DType::kInt64;
      ctx.output_dynamic[i] = true;
      ctx.output_dtypes[ns + i] = FromOnnx(sparse_types_[i]);
      ctx.output_dynamic[ns + i] = true;
      ctx.output_dtypes[2 * ns + i] = DType::kInt64;
      ctx.output_shapes[2 * ns + i] = Shape{single_ ? 1 : 2};
    }
    for (size_t i = 0; i < nd; ++i) {
      const int out = static_cast<int>(3 * ns + i);
      ctx.output_dtypes[out] = FromOnnx(dense_types_[i]);
      Shape shape = dense_shapes[i];
      if (!single_) shape.insert(0, ctx.inputs[0].shape.dim(0));
      ctx.output_shapes[out] = shape;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    ExampleSpec spec = spec_;
    const size_t ns = sparse_keys_.size(), nd = dense_keys_.size();
    for (size_t i = 0; i < nd; ++i) {
      const Tensor& def = ctx.inputs[1 + i];
      auto& feature = spec.features[ns + i];
      if (def.num_elements() > 0) feature.default_value = def;
    }
    auto parsed = data::formats::ParseExamples(ctx.inputs[0], spec);
    // The plan prefixes the node's name to a failing step's status; adding it here too
    // printed it twice.
    if (!parsed.ok()) return absl::InvalidArgumentError(parsed.status().message());
    const std::vector<Tensor>& t = *parsed;
    for (size_t i = 0; i < ns; ++i) {
      ctx.outputs[i] = t[3 * i];
      ctx.outputs[ns + i] = t[3 * i + 1];
      ctx.outputs[2 * ns + i].CopyFrom(t[3 * i + 2]);
    }
    for (size_t i = 0; i < nd; ++i) ctx.outputs[3 * ns + i].CopyFrom(t[3 * ns + i]);
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(node_, ": ", message));
  }
  std::string node_;
  std::vector<std::string> sparse_keys_, dense_keys_;
  std::vector<int64_t> sparse_types_, dense_types_, dense_ranks_, dense_dims_;
  bool single_;
  ExampleSpec spec_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "ParseExample", ParseExampleKernel);

}  // namespace

KILN_KERNEL_FILE(tf_parse_example);

}  // namespace kiln::kernels
