// TF ops with an ONNX twin: the same layer written as a TensorFlow GraphDef and as an ONNX
// model, both imported into Kiln's IR, compute the same outputs (TF's NHWC/HWIO layouts and
// SAME padding against ONNX's NCHW/OIHW and explicit pads).
#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "kiln/import/onnx.h"
#include "kiln/import/saved_model.h"
#include "onnx/onnx.pb.h"
#include "test_util.h"
#include "tf_graph_builder.h"

namespace kiln::import::tf {
namespace {

using testing::GraphBuilder;
using testing::IntsAttr;
using testing::StringAttr;
using testing::TypeAttr;

Tensor RandomFloats(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor t(DType::kFloat32, std::move(shape));
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Transposes a 4-D float tensor by `perm`.
Tensor Transpose4(const Tensor& t, const std::vector<int>& perm) {
  std::vector<int64_t> dims(4);
  for (int i = 0; i < 4; ++i) dims[i] = t.dim(perm[i]);
  Tensor out(DType::kFloat32, Shape(dims));
  int64_t idx[4];
  const int64_t in_strides[4] = {t.dim(1) * t.dim(2) * t.dim(3), t.dim(2) * t.dim(3), t.dim(3), 1};
  int64_t o = 0;
  for (idx[0] = 0; idx[0] < dims[0]; ++idx[0]) {
    for (idx[1] = 0; idx[1] < dims[1]; ++idx[1]) {
      for (idx[2] = 0; idx[2] < dims[2]; ++idx[2]) {
        for (idx[3] = 0; idx[3] < dims[3]; ++idx[3]) {
          int64_t offset = 0;
          for (int i = 0; i < 4; ++i) offset += idx[i] * in_strides[perm[i]];
          out.data<float>()[o++] = t.data<float>()[offset];
        }
      }
    }
  }
  return out;
}

class OnnxModel {
 public:
  OnnxModel() {
    model_.set_ir_version(8);
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(17);
    model_.mutable_graph()->set_name("twin");
  }
  void Input(const std::string& name, const std::vector<int64_t>& dims) {
    auto* in = model_.mutable_graph()->add_input();
    in->set_name(name);
    auto* type = in->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) type->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void Output(const std::string& name) { model_.mutable_graph()->add_output()->set_name(name); }
  void Initializer(const std::string& name, const Tensor& t) {
    auto* init = model_.mutable_graph()->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : t.shape().dims()) init->add_dims(d);
    for (float v : t.span<float>()) init->add_float_data(v);
  }
  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::string& output) {
    auto* node = model_.mutable_graph()->add_node();
    node->set_op_type(op);
    node->set_name(output);
    for (const auto& in : inputs) node->add_input(in);
    node->add_output(output);
    return node;
  }
  static void Ints(onnx::NodeProto* node, const std::string& name,
                   const std::vector<int64_t>& values) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }
  static void Int(onnx::NodeProto* node, const std::string& name, int64_t value) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) const {
    KILN_ASSIGN_OR_RETURN(ImportedModel model,
                          ImportOnnxBytes(model_.SerializeAsString(), "twin.onnx"));
    return testing::RunSignature(model.signatures[0], inputs);
  }

 private:
  onnx::ModelProto model_;
};

absl::StatusOr<std::vector<Tensor>> RunTf(GraphBuilder& b, const std::string& name,
                                          const std::vector<std::pair<std::string, Tensor>>& feeds,
                                          const std::vector<std::string>& fetches) {
  const std::string path = testing::TempDir("twin_" + name) + "/graph.pb";
  KILN_RETURN_IF_ERROR(testing::WriteGraphDef(path, b.graph()));
  FrozenGraphOptions options;
  std::vector<Tensor> inputs;
  for (const auto& [n, t] : feeds) {
    options.inputs.push_back(n);
    inputs.push_back(t);
  }
  options.outputs = fetches;
  KILN_ASSIGN_OR_RETURN(ImportedModel model, ImportFrozenGraph(path, options));
  return testing::RunSignature(model.signatures[0], inputs);
}

void ExpectSame(const Tensor& tf, const Tensor& onnx, float tol = 1e-5f) {
  ASSERT_EQ(tf.shape(), onnx.shape());
  for (int64_t i = 0; i < tf.num_elements(); ++i) {
    EXPECT_NEAR(tf.data<float>()[i], onnx.data<float>()[i], tol) << "at " << i;
  }
}

// Keras Dense(relu): MatMul + BiasAdd + Relu against Gemm + Relu.
TEST(OnnxTwinTest, DenseReluMatchesGemm) {
  const Tensor x = RandomFloats(Shape{4, 6}, 1);
  const Tensor w = RandomFloats(Shape{6, 3}, 2);
  const Tensor bias = RandomFloats(Shape{3}, 3);
  GraphBuilder b;
  b.Placeholder("x", DType::kFloat32, {-1, 6});
  b.Const("w", w);
  b.Const("b", bias);
  b.Op("MatMul", "mm", {"x", "w"});
  b.Op("BiasAdd", "ba", {"mm", "b"});
  b.Op("Relu", "y", {"ba"});
  auto tf = RunTf(b, "dense", {{"x", x}}, {"y"});
  ASSERT_TRUE(tf.ok()) << tf.status();

  OnnxModel m;
  m.Input("x", {4, 6});
  m.Initializer("w", w);
  m.Initializer("b", bias);
  m.Node("Gemm", {"x", "w", "b"}, "gemm");
  m.Node("Relu", {"gemm"}, "y");
  m.Output("y");
  auto onnx = m.Run({x});
  ASSERT_TRUE(onnx.ok()) << onnx.status();
  ExpectSame((*tf)[0], (*onnx)[0]);
}

// Conv2D NHWC, SAME, stride 2 (+ BiasAdd, Relu6) against Conv NCHW with explicit pads
// (+ Add, Clip), then MaxPool VALID and a Softmax over channels.
TEST(OnnxTwinTest, ConvSameStride2PoolSoftmaxMatch) {
  const Tensor x_nhwc = RandomFloats(Shape{2, 5, 5, 3}, 4);
  const Tensor w_hwio = RandomFloats(Shape{3, 3, 3, 4}, 5);
  const Tensor bias = RandomFloats(Shape{4}, 6);
  GraphBuilder b;
  b.Placeholder("x", DType::kFloat32, {-1, 5, 5, 3});
  b.Const("w", w_hwio);
  b.Const("b", bias);
  b.Op("Conv2D", "conv", {"x", "w"},
       {{"strides", IntsAttr({1, 2, 2, 1})}, {"padding", StringAttr("SAME")},
        {"data_format", StringAttr("NHWC")}, {"T", TypeAttr(DType::kFloat32)}});
  b.Op("BiasAdd", "ba", {"conv", "b"});
  b.Op("Relu6", "act", {"ba"}, {{"T", TypeAttr(DType::kFloat32)}});
  b.Op("MaxPool", "pool", {"act"},
       {{"ksize", IntsAttr({1, 2, 2, 1})}, {"strides", IntsAttr({1, 1, 1, 1})},
        {"padding", StringAttr("VALID")}});
  b.Op("Softmax", "y", {"pool"});
  auto tf = RunTf(b, "conv", {{"x", x_nhwc}}, {"y"});
  ASSERT_TRUE(tf.ok()) << tf.status();
  ASSERT_EQ((*tf)[0].shape(), (Shape{2, 2, 2, 4}));  // 5 -> SAME/2 -> 3 -> VALID 2x2/1 -> 2

  // SAME with stride 2 on 5 with a 3-wide kernel pads 1 on each side.
  OnnxModel m;
  m.Input("x", {2, 3, 5, 5});
  m.Initializer("w", Transpose4(w_hwio, {3, 2, 0, 1}));
  m.Initializer("b", Tensor::FromVector<float>(
                         std::vector<float>(bias.data<float>(), bias.data<float>() + 4),
                         Shape{1, 4, 1, 1}));
  auto* conv = m.Node("Conv", {"x", "w"}, "conv");
  OnnxModel::Ints(conv, "strides", {2, 2});
  OnnxModel::Ints(conv, "pads", {1, 1, 1, 1});
  OnnxModel::Ints(conv, "kernel_shape", {3, 3});
  m.Node("Add", {"conv", "b"}, "ba");
  m.Initializer("zero", Tensor::Scalar<float>(0.f));
  m.Initializer("six", Tensor::Scalar<float>(6.f));
  m.Node("Clip", {"ba", "zero", "six"}, "act");
  auto* pool = m.Node("MaxPool", {"act"}, "pool");
  OnnxModel::Ints(pool, "kernel_shape", {2, 2});
  auto* softmax = m.Node("Softmax", {"pool"}, "y");
  OnnxModel::Int(softmax, "axis", 1);
  m.Output("y");
  auto onnx = m.Run({Transpose4(x_nhwc, {0, 3, 1, 2})});
  ASSERT_TRUE(onnx.ok()) << onnx.status();
  ExpectSame((*tf)[0], Transpose4((*onnx)[0], {0, 2, 3, 1}));
}

// MobileNet-style block: DepthwiseConv2dNative (multiplier 2) + FusedBatchNormV3 (inference) +
// AvgPool SAME (TF averages over the valid cells only) against a grouped Conv,
// BatchNormalization and AveragePool with count_include_pad = 0.
TEST(OnnxTwinTest, DepthwiseBatchNormAvgPoolMatch) {
  const Tensor x_nhwc = RandomFloats(Shape{1, 4, 4, 3}, 7);
  const Tensor w = RandomFloats(Shape{3, 3, 3, 2}, 8);  // [H, W, Cin, multiplier]
  Tensor scale = RandomFloats(Shape{6}, 9), offset = RandomFloats(Shape{6}, 10);
  Tensor mean = RandomFloats(Shape{6}, 11), variance = RandomFloats(Shape{6}, 12);
  for (float& v : variance.span<float>()) v = std::abs(v) + 0.1f;
  GraphBuilder b;
  b.Placeholder("x", DType::kFloat32, {-1, 4, 4, 3});
  b.Const("w", w);
  for (const auto& [name, t] : {std::pair<const char*, Tensor>{"scale", scale}, {"offset", offset},
                                {"mean", mean}, {"variance", variance}}) {
    b.Const(name, t);
  }
  b.Op("DepthwiseConv2dNative", "dw", {"x", "w"},
       {{"strides", IntsAttr({1, 1, 1, 1})}, {"padding", StringAttr("VALID")},
        {"T", TypeAttr(DType::kFloat32)}});
  b.Op("FusedBatchNormV3", "bn", {"dw", "scale", "offset", "mean", "variance"},
       {{"epsilon", testing::FloatAttr(0.001f)}, {"is_training", testing::BoolAttr(false)},
        {"T", TypeAttr(DType::kFloat32)}});
  b.Op("AvgPool", "y", {"bn"},
       {{"ksize", IntsAttr({1, 2, 2, 1})}, {"strides", IntsAttr({1, 1, 1, 1})},
        {"padding", StringAttr("SAME")}, {"T", TypeAttr(DType::kFloat32)}});
  auto tf = RunTf(b, "depthwise", {{"x", x_nhwc}}, {"y"});
  ASSERT_TRUE(tf.ok()) << tf.status();
  ASSERT_EQ((*tf)[0].shape(), (Shape{1, 2, 2, 6}));

  // [H, W, Cin, mult] -> [Cin * mult, 1, H, W]: output channel c * mult + m, as TF orders it.
  Tensor w_onnx(DType::kFloat32, Shape{6, 1, 3, 3});
  for (int c = 0; c < 3; ++c) {
    for (int m = 0; m < 2; ++m) {
      for (int h = 0; h < 3; ++h) {
        for (int x = 0; x < 3; ++x) {
          w_onnx.data<float>()[((c * 2 + m) * 3 + h) * 3 + x] =
              w.data<float>()[((h * 3 + x) * 3 + c) * 2 + m];
        }
      }
    }
  }
  OnnxModel m;
  m.Input("x", {1, 3, 4, 4});
  m.Initializer("w", w_onnx);
  m.Initializer("scale", scale);
  m.Initializer("offset", offset);
  m.Initializer("mean", mean);
  m.Initializer("variance", variance);
  auto* conv = m.Node("Conv", {"x", "w"}, "dw");
  OnnxModel::Int(conv, "group", 3);
  OnnxModel::Ints(conv, "kernel_shape", {3, 3});
  auto* bn = m.Node("BatchNormalization", {"dw", "scale", "offset", "mean", "variance"}, "bn");
  auto* eps = bn->add_attribute();
  eps->set_name("epsilon");
  eps->set_type(onnx::AttributeProto::FLOAT);
  eps->set_f(0.001f);
  // SAME with a 2x2 window and stride 1 pads the end only.
  auto* pool = m.Node("AveragePool", {"bn"}, "y");
  OnnxModel::Ints(pool, "kernel_shape", {2, 2});
  OnnxModel::Ints(pool, "pads", {0, 0, 1, 1});
  OnnxModel::Int(pool, "count_include_pad", 0);
  m.Output("y");
  auto onnx = m.Run({Transpose4(x_nhwc, {0, 3, 1, 2})});
  ASSERT_TRUE(onnx.ok()) << onnx.status();
  ExpectSame((*tf)[0], Transpose4((*onnx)[0], {0, 2, 3, 1}), 1e-4f);
}

}  // namespace
}  // namespace kiln::import::tf
