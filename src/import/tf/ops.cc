// TensorFlow op -> Kiln IR (ONNX-semantics) converters. Each converter reads the TF node's
// attributes and inputs and emits equivalent IR nodes; NHWC convolutions and pools are
// wrapped in transposes (the optimizer removes the pairs that cancel).
//
// Why one file of ~1,100 lines: it is the op table, 77 TF_OP converters (many covering several
// ops) of a few lines each, in sections by op family, registered into the one file-local
// Registry() that FindOpConverter and SupportedTfOps read. A file per family would need that
// registry shared across files without making any converter shorter.
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "import/tf/converter.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {
namespace {

using Attrs = std::map<std::string, ir::Attribute>;

std::map<std::string, OpConverter>& Registry() {
  static auto* registry = new std::map<std::string, OpConverter>();
  return *registry;
}

struct Register {
  Register(std::initializer_list<const char*> ops, OpConverter fn) {
    for (const char* op : ops) Registry()[op] = fn;
  }
};

#define KILN_TF_CONCAT_INNER(a, b) a##b
#define KILN_TF_CONCAT(a, b) KILN_TF_CONCAT_INNER(a, b)
#define TF_OP(...) \
  static Register KILN_TF_CONCAT(reg_, __LINE__)({__VA_ARGS__}, [](OpContext& c) -> absl::Status
#define END_OP )

absl::Status NeedInputs(OpContext& c, int n) {
  if (c.num_inputs() < n) {
    return c.Error(absl::StrCat("expects ", n, " inputs, has ", c.num_inputs()));
  }
  for (int i = 0; i < n; ++i) {
    if (c.input(i) == ir::kNoValue) return c.Error(absl::StrCat("input ", i, " is not a tensor"));
  }
  return absl::OkStatus();
}

// Transposes a constant 2-D..4-D tensor by `perm` (numbers only).
Tensor TransposeConst(const Tensor& t, const std::vector<int64_t>& perm) {
  const int rank = t.rank();
  std::vector<int64_t> out_dims(rank);
  for (int i = 0; i < rank; ++i) out_dims[i] = t.dim(perm[i]);
  Tensor out(t.dtype(), Shape(out_dims));
  const size_t elem = DTypeSize(t.dtype());
  std::vector<int64_t> in_strides(rank, 1);
  for (int i = rank - 2; i >= 0; --i) in_strides[i] = in_strides[i + 1] * t.dim(i + 1);
  std::vector<int64_t> index(rank, 0);
  const int64_t n = t.num_elements();
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < n; ++o) {
    int64_t offset = 0;
    for (int i = 0; i < rank; ++i) offset += index[i] * in_strides[perm[i]];
    std::memcpy(dst + o * elem, src + offset * elem, elem);
    for (int i = rank - 1; i >= 0; --i) {
      if (++index[i] < out_dims[i]) break;
      index[i] = 0;
    }
  }
  return out;
}

ir::ValueId Transpose(OpContext& c, ir::ValueId v, const std::vector<int64_t>& perm) {
  if (const auto& value = c.graph().value(v); value.constant.has_value() &&
                                              value.constant->dtype() != DType::kString &&
                                              value.constant->rank() == (int)perm.size()) {
    return c.Const(TransposeConst(*value.constant, perm), "transposed");
  }
  return c.Emit("Transpose", {v}, {{"perm", perm}});
}

// Passes input 0 through (a tensor, or a table handle).
absl::Status PassThrough(OpContext& c) {
  if (c.num_inputs() < 1 || (c.input(0) == ir::kNoValue && c.input_value(0).table == nullptr &&
                             c.input_value(0).variable == nullptr)) {
    return NeedInputs(c, 1);
  }
  c.outputs() = {c.input_value(0)};
  return absl::OkStatus();
}

TF_OP("Identity", "StopGradient", "Snapshot", "PreventGradient", "EnsureShape", "CheckNumerics",
      "ReadVariableOp", "PlaceholderWithDefault", "TensorListFromTensor", "TensorListStack",
      "DebugIdentity") {
  return PassThrough(c);
} END_OP;

TF_OP("IdentityN") {
  c.outputs().clear();
  for (int i = 0; i < c.num_inputs(); ++i) c.outputs().push_back(c.input_value(i));
  return absl::OkStatus();
} END_OP;

TF_OP("NoOp", "AssignVariableOp", "Assign", "DisableCopyOnRead", "Assert") {
  c.outputs().clear();
  return absl::OkStatus();
} END_OP;

TF_OP("Const") {
  auto it = c.node().attr().find("value");
  if (it == c.node().attr().end()) return c.Error("Const without a value");
  auto t = FromTensorProto(it->second.tensor());
  if (!t.ok()) return c.Error(t.status().message());
  c.SetOutput(c.Const(*t, "value"));
  return absl::OkStatus();
} END_OP;

// Elementwise ---------------------------------------------------------------------------

const std::map<std::string, std::pair<std::string, std::string>>& ElementwiseOps() {
  static const auto* ops = new std::map<std::string, std::pair<std::string, std::string>>{
      {"Add", {"Add", ""}}, {"AddV2", {"Add", ""}}, {"Sub", {"Sub", ""}},
      {"Mul", {"Mul", ""}}, {"RealDiv", {"Div", ""}}, {"Div", {"Div", ""}},
      {"TruncateDiv", {"Div", ""}}, {"Maximum", {"Max", ""}}, {"Minimum", {"Min", ""}},
      {"Pow", {"Pow", ""}}, {"FloorDiv", {"FloorDiv", "kiln"}},
      {"FloorMod", {"FloorMod", "kiln"}}, {"SquaredDifference", {"SquaredDifference", "kiln"}},
      {"Equal", {"Equal", ""}}, {"Greater", {"Greater", ""}},
      {"GreaterEqual", {"GreaterOrEqual", ""}}, {"Less", {"Less", ""}},
      {"LessEqual", {"LessOrEqual", ""}}, {"LogicalAnd", {"And", ""}},
      {"LogicalOr", {"Or", ""}}, {"SelectV2", {"Where", ""}},
      {"Relu", {"Relu", ""}}, {"Elu", {"Elu", ""}}, {"Selu", {"Selu", ""}},
      {"Sigmoid", {"Sigmoid", ""}}, {"Tanh", {"Tanh", ""}}, {"Softplus", {"Softplus", ""}},
      {"Softsign", {"Softsign", ""}}, {"Erf", {"Erf", ""}}, {"Sqrt", {"Sqrt", ""}},
      {"Rsqrt", {"Rsqrt", "kiln"}}, {"Square", {"Square", "kiln"}}, {"Exp", {"Exp", ""}},
      {"Log", {"Log", ""}}, {"Neg", {"Neg", ""}}, {"Abs", {"Abs", ""}},
      {"Floor", {"Floor", ""}}, {"Ceil", {"Ceil", ""}}, {"Round", {"Round", ""}},
      {"Rint", {"Round", ""}}, {"Reciprocal", {"Reciprocal", ""}}, {"Inv", {"Reciprocal", ""}},
      {"Sign", {"Sign", ""}}, {"Sin", {"Sin", ""}}, {"Cos", {"Cos", ""}}, {"Tan", {"Tan", ""}},
      {"LogicalNot", {"Not", ""}}, {"IsNan", {"IsNaN", ""}}, {"IsInf", {"IsInf", ""}},
      {"AddN", {"Sum", ""}}, {"Atan", {"Atan", ""}}, {"Asin", {"Asin", ""}},
      {"Acos", {"Acos", ""}}, {"Sinh", {"Sinh", ""}}, {"Cosh", {"Cosh", ""}},
  };
  return *ops;
}

absl::Status Elementwise(OpContext& c) {
  const auto& [op, domain] = ElementwiseOps().at(c.node().op());
  std::vector<ir::ValueId> inputs;
  for (int i = 0; i < c.num_inputs(); ++i) inputs.push_back(c.input(i));
  KILN_RETURN_IF_ERROR(NeedInputs(c, c.node().op() == "AddN" ? 1 : 1));
  if (c.node().op() == "AddN" && inputs.size() == 1) {
    c.SetOutput(inputs[0]);
    return absl::OkStatus();
  }
  c.SetOutput(c.Emit(op, inputs, {}, domain));
  return absl::OkStatus();
}

static const bool elementwise_registered = [] {
  for (const auto& [tf_op, target] : ElementwiseOps()) Registry()[tf_op] = Elementwise;
  return true;
}();

TF_OP("NotEqual") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("Not", {c.Emit("Equal", {c.input(0), c.input(1)})}));
  return absl::OkStatus();
} END_OP;

TF_OP("Relu6") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(DType t, c.AttrType("T"));
  if (t != DType::kFloat32) return c.Unsupported("Relu6 on non-float32");
  c.SetOutput(c.Emit("Clip", {c.input(0), c.Const(Tensor::Scalar<float>(0.f), "min"),
                              c.Const(Tensor::Scalar<float>(6.f), "max")}));
  return absl::OkStatus();
} END_OP;

TF_OP("LeakyRelu") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  c.SetOutput(c.Emit("LeakyRelu", {c.input(0)}, {{"alpha", c.AttrFloat("alpha", 0.2f)}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Softmax", "LogSoftmax") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  c.SetOutput(c.Emit(c.node().op(), {c.input(0)}, {{"axis", int64_t{-1}}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Log1p") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(DType t, c.AttrType("T"));
  if (t != DType::kFloat32) return c.Unsupported("Log1p on non-float32");
  c.SetOutput(c.Emit("Log", {c.Emit("Add", {c.input(0), c.Const(Tensor::Scalar<float>(1.f))})}));
  return absl::OkStatus();
} END_OP;

TF_OP("Cast") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(DType to, c.AttrType("DstT"));
  c.SetOutput(c.Emit("Cast", {c.input(0)}, {{"to", OnnxDataType(to)}}));
  return absl::OkStatus();
} END_OP;

TF_OP("ClipByValue") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  c.SetOutput(c.Emit("Max", {c.Emit("Min", {c.input(0), c.input(2)}), c.input(1)}));
  return absl::OkStatus();
} END_OP;

// v1 Select: a rank-1 condition picks whole rows of higher-rank operands.
TF_OP("Select") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  const int cond_rank = c.InputRank(0);
  const int value_rank = std::max(c.InputRank(1), c.InputRank(2));
  ir::ValueId cond = c.input(0);
  if (cond_rank == 1 && value_rank > 1) {
    std::vector<int64_t> axes;
    for (int i = 1; i < value_rank; ++i) axes.push_back(i);
    cond = c.Emit("Unsqueeze", {cond, c.ConstI64(axes)});
  } else if (!(cond_rank == 0 || (cond_rank >= 0 && cond_rank == value_rank) ||
               (value_rank >= 0 && value_rank <= 1))) {
    // Ranks unknown at import: decide when the plan is compiled.
    cond = c.Emit("SelectCondition", {cond, c.input(1)}, {}, "kiln");
  }
  c.SetOutput(c.Emit("Where", {cond, c.input(1), c.input(2)}));
  return absl::OkStatus();
} END_OP;

TF_OP("Where") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  if (c.num_inputs() == 3) {
    c.SetOutput(c.Emit("Where", {c.input(0), c.input(1), c.input(2)}));
    return absl::OkStatus();
  }
  // Coordinates of true elements: [num_true, rank] int64, as ONNX NonZero transposed.
  c.SetOutput(c.Emit("Transpose", {c.Emit("NonZero", {c.input(0)})}, {{"perm", std::vector<int64_t>{1, 0}}}));
  return absl::OkStatus();
} END_OP;

// Linear algebra ------------------------------------------------------------------------

TF_OP("MatMul") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  ir::ValueId a = c.input(0), b = c.input(1);
  if (c.AttrBool("transpose_a", false)) a = Transpose(c, a, {1, 0});
  if (c.AttrBool("transpose_b", false)) b = Transpose(c, b, {1, 0});
  c.SetOutput(c.Emit("MatMul", {a, b}));
  return absl::OkStatus();
} END_OP;

TF_OP("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  ir::ValueId x[2] = {c.input(0), c.input(1)};
  const char* adj[2] = {"adj_x", "adj_y"};
  for (int i = 0; i < 2; ++i) {
    if (!c.AttrBool(adj[i], false)) continue;
    const int rank = c.InputRank(i);
    if (rank < 2) return c.Unsupported("adjoint of an operand of unknown rank");
    std::vector<int64_t> perm;
    for (int d = 0; d < rank; ++d) perm.push_back(d);
    std::swap(perm[rank - 1], perm[rank - 2]);
    x[i] = Transpose(c, x[i], perm);
  }
  ir::ValueId out = c.Emit("MatMul", {x[0], x[1]});
  if (c.node().op() == "BatchMatMulV3" && c.HasAttr("Tout")) {
    KILN_ASSIGN_OR_RETURN(DType tout, c.AttrType("Tout"));
    out = c.CastTo(out, tout);
  }
  c.SetOutput(out);
  return absl::OkStatus();
} END_OP;

TF_OP("Einsum") {
  std::vector<ir::ValueId> inputs;
  for (int i = 0; i < c.num_inputs(); ++i) inputs.push_back(c.input(i));
  c.SetOutput(c.Emit("Einsum", inputs, {{"equation", c.AttrString("equation", "")}}));
  return absl::OkStatus();
} END_OP;

bool IsNchw(OpContext& c) { return c.AttrString("data_format", "NHWC").rfind("NC", 0) == 0; }

TF_OP("BiasAdd", "BiasAddV1") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  ir::ValueId bias = c.input(1);
  if (IsNchw(c)) {
    int rank = c.InputRank(0);
    if (rank < 0) rank = 4;
    std::vector<int64_t> axes;
    for (int i = 2; i < rank; ++i) axes.push_back(i - 1);
    if (!axes.empty()) bias = c.Emit("Unsqueeze", {bias, c.ConstI64(axes)});
  }
  c.SetOutput(c.Emit("Add", {c.input(0), bias}));
  return absl::OkStatus();
} END_OP;

// Convolution and pooling ---------------------------------------------------------------

const std::vector<int64_t> kToNchw = {0, 3, 1, 2};
const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};

// Spatial entries of a 4-entry NHWC/NCHW attribute list (strides, dilations, ksize).
std::vector<int64_t> Spatial(OpContext& c, const std::string& name, bool nchw) {
  std::vector<int64_t> v = c.AttrInts(name);
  if (v.size() != 4) return {1, 1};
  return nchw ? std::vector<int64_t>{v[2], v[3]} : std::vector<int64_t>{v[1], v[2]};
}

absl::Status PaddingAttrs(OpContext& c, Attrs& attrs, bool nchw) {
  const std::string padding = c.AttrString("padding", "VALID");
  if (padding == "SAME") {
    attrs["auto_pad"] = std::string("SAME_UPPER");
  } else if (padding == "VALID") {
    attrs["auto_pad"] = std::string("VALID");
  } else if (padding == "EXPLICIT") {
    std::vector<int64_t> p = c.AttrInts("explicit_paddings");  // [N0,N1,H0,H1,W0,W1,C0,C1]
    if (p.size() != 8) return c.Error("explicit_paddings must have 8 entries");
    if (nchw) {
      attrs["pads"] = std::vector<int64_t>{p[4], p[6], p[5], p[7]};
    } else {
      attrs["pads"] = std::vector<int64_t>{p[2], p[4], p[3], p[5]};
    }
  } else {
    return c.Unsupported(absl::StrCat("padding '", padding, "'"));
  }
  return absl::OkStatus();
}

TF_OP("Conv2D", "DepthwiseConv2dNative") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  const bool nchw = IsNchw(c);
  const bool depthwise = c.node().op() == "DepthwiseConv2dNative";
  Attrs attrs;
  attrs["strides"] = Spatial(c, "strides", nchw);
  attrs["dilations"] = Spatial(c, "dilations", nchw);
  KILN_RETURN_IF_ERROR(PaddingAttrs(c, attrs, nchw));
  ir::ValueId filter = c.input(1);  // [H, W, Cin, Cout] or [H, W, Cin, multiplier]
  const Tensor* w = c.ConstInput(1);
  if (depthwise) {
    if (w == nullptr || w->rank() != 4) return c.Unsupported("a non-constant depthwise filter");
    const int64_t cin = w->dim(2), mult = w->dim(3);
    auto reshaped = w->Reshape(Shape{w->dim(0), w->dim(1), 1, cin * mult});
    if (!reshaped.ok()) return c.Error(reshaped.status().message());
    filter = c.Const(TransposeConst(*reshaped, {3, 2, 0, 1}), "filter");
    attrs["group"] = cin;
  } else {
    filter = Transpose(c, filter, {3, 2, 0, 1});
  }
  ir::ValueId x = nchw ? c.input(0) : Transpose(c, c.input(0), kToNchw);
  ir::ValueId y = c.Emit("Conv", {x, filter}, attrs);
  c.SetOutput(nchw ? y : Transpose(c, y, kToNhwc));
  return absl::OkStatus();
} END_OP;

TF_OP("Conv2DBackpropInput") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  const bool nchw = IsNchw(c);
  Attrs attrs;
  attrs["strides"] = Spatial(c, "strides", nchw);
  attrs["dilations"] = Spatial(c, "dilations", nchw);
  KILN_RETURN_IF_ERROR(PaddingAttrs(c, attrs, nchw));
  auto sizes = c.ConstInts(0);
  if (!sizes.ok() || sizes->size() != 4) return c.Unsupported("non-constant input_sizes");
  attrs["output_shape"] = nchw ? std::vector<int64_t>{(*sizes)[2], (*sizes)[3]}
                               : std::vector<int64_t>{(*sizes)[1], (*sizes)[2]};
  // TF filter [H, W, out_channels, in_channels] -> ONNX ConvTranspose [in, out, H, W].
  ir::ValueId filter = Transpose(c, c.input(1), {3, 2, 0, 1});
  ir::ValueId x = nchw ? c.input(2) : Transpose(c, c.input(2), kToNchw);
  ir::ValueId y = c.Emit("ConvTranspose", {x, filter}, attrs);
  c.SetOutput(nchw ? y : Transpose(c, y, kToNhwc));
  return absl::OkStatus();
} END_OP;

TF_OP("MaxPool", "AvgPool") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  const bool nchw = IsNchw(c);
  Attrs attrs;
  attrs["kernel_shape"] = Spatial(c, "ksize", nchw);
  attrs["strides"] = Spatial(c, "strides", nchw);
  KILN_RETURN_IF_ERROR(PaddingAttrs(c, attrs, nchw));
  if (c.node().op() == "AvgPool") attrs["count_include_pad"] = int64_t{0};
  ir::ValueId x = nchw ? c.input(0) : Transpose(c, c.input(0), kToNchw);
  ir::ValueId y = c.Emit(c.node().op() == "MaxPool" ? "MaxPool" : "AveragePool", {x}, attrs);
  c.SetOutput(nchw ? y : Transpose(c, y, kToNhwc));
  return absl::OkStatus();
} END_OP;

TF_OP("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 5));
  if (c.AttrBool("is_training", true)) {
    // Keras exports inference graphs with is_training=false; training-mode statistics
    // would be computed from the batch, which serving never wants.
    return c.Unsupported("FusedBatchNorm with is_training=true");
  }
  const bool nchw = IsNchw(c);
  ir::ValueId x = nchw ? c.input(0) : Transpose(c, c.input(0), kToNchw);
  ir::ValueId y = c.Emit("BatchNormalization", {x, c.input(1), c.input(2), c.input(3), c.input(4)},
                         {{"epsilon", c.AttrFloat("epsilon", 1e-4f)}});
  c.SetOutputs({nchw ? y : Transpose(c, y, kToNhwc), c.input(3), c.input(4), c.input(3),
                c.input(4), c.input(3)});
  return absl::OkStatus();
} END_OP;

// Reductions ------------------------------------------------------------------------------

// `v` (int32/int64, scalar or vector) as an int64 vector; folded when constant.
ir::ValueId AsInt64Vector(OpContext& c, int input) {
  if (auto v = c.ConstInts(input); v.ok()) return c.ConstI64(*v);
  return c.Emit("Reshape", {c.ToInt64(c.input(input)), c.ConstI64({-1})});
}

absl::Status Reduce(OpContext& c, const std::string& onnx_op) {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  const int64_t keep = c.AttrBool("keep_dims", false) ? 1 : 0;
  ir::ValueId axes = AsInt64Vector(c, 1);
  c.SetOutput(c.Emit(onnx_op, {c.input(0), axes},
                     {{"keepdims", keep}, {"noop_with_empty_axes", int64_t{1}}}));
  return absl::OkStatus();
}

TF_OP("Sum") { return Reduce(c, "ReduceSum"); } END_OP;
TF_OP("Mean") { return Reduce(c, "ReduceMean"); } END_OP;
TF_OP("Max") { return Reduce(c, "ReduceMax"); } END_OP;
TF_OP("Min") { return Reduce(c, "ReduceMin"); } END_OP;
TF_OP("Prod") { return Reduce(c, "ReduceProd"); } END_OP;

TF_OP("All", "Any") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  const int64_t keep = c.AttrBool("keep_dims", false) ? 1 : 0;
  ir::ValueId axes = AsInt64Vector(c, 1);
  ir::ValueId as_int = c.Emit("Cast", {c.input(0)}, {{"to", OnnxDataType(DType::kInt32)}});
  ir::ValueId r = c.Emit(c.node().op() == "All" ? "ReduceMin" : "ReduceMax", {as_int, axes},
                         {{"keepdims", keep}, {"noop_with_empty_axes", int64_t{1}}});
  c.SetOutput(c.Emit("Cast", {r}, {{"to", OnnxDataType(DType::kBool)}}));
  return absl::OkStatus();
} END_OP;

TF_OP("ArgMax", "ArgMin") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axis, c.ConstInts(1));
  if (axis.size() != 1) return c.Error("dimension must be a scalar");
  ir::ValueId out = c.Emit(c.node().op(), {c.input(0)}, {{"axis", axis[0]}, {"keepdims", int64_t{0}}});
  if (c.HasAttr("output_type")) {
    KILN_ASSIGN_OR_RETURN(DType t, c.AttrType("output_type"));
    if (t != DType::kInt64) out = c.Emit("Cast", {out}, {{"to", OnnxDataType(t)}});
  }
  c.SetOutput(out);
  return absl::OkStatus();
} END_OP;

TF_OP("Cumsum") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("CumSum", {c.input(0), c.input(1)},
                     {{"exclusive", int64_t{c.AttrBool("exclusive", false)}},
                      {"reverse", int64_t{c.AttrBool("reverse", false)}}}));
  return absl::OkStatus();
} END_OP;

TF_OP("TopKV2") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  ir::ValueId k = AsInt64Vector(c, 1);
  auto outs = c.EmitN("TopK", {c.input(0), k}, 2,
                      {{"axis", int64_t{-1}}, {"largest", int64_t{1}},
                       {"sorted", int64_t{c.AttrBool("sorted", true)}}});
  c.SetOutputs({outs[0], c.Emit("Cast", {outs[1]}, {{"to", OnnxDataType(DType::kInt32)}})});
  return absl::OkStatus();
} END_OP;

// Shapes and indexing -----------------------------------------------------------------------

TF_OP("Reshape") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("Reshape", {c.input(0), c.ToInt64(c.input(1))}, {{"allowzero", int64_t{1}}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Transpose") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> perm, c.ConstInts(1));
  c.SetOutput(Transpose(c, c.input(0), perm));
  return absl::OkStatus();
} END_OP;

TF_OP("InvertPermutation") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> perm, c.ConstInts(0));
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= (int64_t)perm.size()) return c.Error("not a permutation");
    inverse[perm[i]] = static_cast<int64_t>(i);
  }
  if (c.ConstInput(0)->dtype() == DType::kInt32) {
    std::vector<int32_t> v(inverse.begin(), inverse.end());
    c.SetOutput(c.Const(Tensor::FromVector<int32_t>(v)));
  } else {
    c.SetOutput(c.ConstI64(inverse));
  }
  return absl::OkStatus();
} END_OP;

TF_OP("ConcatV2", "Concat") {
  const bool v2 = c.node().op() == "ConcatV2";
  const int axis_input = v2 ? c.num_inputs() - 1 : 0;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axis, c.ConstInts(axis_input));
  if (axis.size() != 1) return c.Error("axis must be a scalar");
  std::vector<ir::ValueId> values;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (i != axis_input) values.push_back(c.input(i));
  }
  if (values.size() == 1) {
    c.SetOutput(values[0]);
    return absl::OkStatus();
  }
  c.SetOutput(c.Emit("Concat", values, {{"axis", axis[0]}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Pack") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  const int64_t axis = c.AttrInt("axis", 0);
  // All-constant packs (shape vectors) fold right away: later ops need them as constants.
  bool all_const = true;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Tensor* t = c.ConstInput(i);
    all_const = all_const && t != nullptr && t->rank() == 0 &&
                (t->dtype() == DType::kInt32 || t->dtype() == DType::kInt64);
  }
  if (all_const && axis == 0) {
    const DType dtype = c.ConstInput(0)->dtype();
    Tensor out(dtype, Shape{c.num_inputs()});
    for (int i = 0; i < c.num_inputs(); ++i) {
      const Tensor* t = c.ConstInput(i);
      if (t->dtype() != dtype) { all_const = false; break; }
      if (dtype == DType::kInt32) out.data<int32_t>()[i] = *t->data<int32_t>();
      else out.data<int64_t>()[i] = *t->data<int64_t>();
    }
    if (all_const) {
      c.SetOutput(c.Const(out, "packed"));
      return absl::OkStatus();
    }
  }
  ir::ValueId axes = c.ConstI64({axis});
  std::vector<ir::ValueId> parts;
  for (int i = 0; i < c.num_inputs(); ++i) parts.push_back(c.Emit("Unsqueeze", {c.input(i), axes}));
  c.SetOutput(parts.size() == 1 ? parts[0] : c.Emit("Concat", parts, {{"axis", axis}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Unpack") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(int64_t num, c.AttrInt("num"));
  const int64_t axis = c.AttrInt("axis", 0);
  if (num < 1 || num > 100000) return c.Error("bad num");
  std::vector<ir::ValueId> parts =
      num == 1 ? std::vector<ir::ValueId>{c.input(0)}
               : c.EmitN("Split", {c.input(0)}, static_cast<int>(num),
                         {{"axis", axis}, {"num_outputs", num}});
  ir::ValueId axes = c.ConstI64({axis});
  std::vector<ir::ValueId> outs;
  for (ir::ValueId p : parts) outs.push_back(c.Emit("Squeeze", {p, axes}));
  c.SetOutputs(outs);
  return absl::OkStatus();
} END_OP;

TF_OP("Split") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axis, c.ConstInts(0));
  KILN_ASSIGN_OR_RETURN(int64_t num, c.AttrInt("num_split"));
  if (axis.size() != 1 || num < 1 || num > 100000) return c.Error("bad axis or num_split");
  if (num == 1) {
    c.SetOutput(c.input(1));
    return absl::OkStatus();
  }
  c.SetOutputs(c.EmitN("Split", {c.input(1)}, static_cast<int>(num),
                       {{"axis", axis[0]}, {"num_outputs", num}}));
  return absl::OkStatus();
} END_OP;

TF_OP("SplitV") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, c.ConstInts(1));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axis, c.ConstInts(2));
  if (axis.size() != 1 || sizes.empty()) return c.Error("bad axis or size_splits");
  // One -1 takes the rest (the Split kernel infers it at run time, as TensorFlow does).
  int inferred = 0;
  for (int64_t s : sizes) {
    if (s < -1) return c.Error(absl::StrCat("size_splits holds ", s));
    inferred += s == -1;
  }
  if (inferred > 1) return c.Error("size_splits holds more than one -1");
  c.SetOutputs(c.EmitN("Split", {c.input(0), c.ConstI64(sizes)}, static_cast<int>(sizes.size()),
                       {{"axis", axis[0]}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Slice") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  auto begin = c.ConstInts(1);
  auto size = c.ConstInts(2);
  if (begin.ok() && size.ok()) {
    if (begin->size() != size->size()) return c.Error("begin and size differ in length");
    std::vector<int64_t> ends, axes;
    for (size_t i = 0; i < begin->size(); ++i) {
      ends.push_back((*size)[i] < 0 ? std::numeric_limits<int64_t>::max()
                                    : (*begin)[i] + (*size)[i]);
      axes.push_back(static_cast<int64_t>(i));
    }
    c.SetOutput(c.Emit("Slice", {c.input(0), c.ConstI64(*begin), c.ConstI64(ends), c.ConstI64(axes)}));
    return absl::OkStatus();
  }
  // ends = size == -1 ? INT64_MAX : begin + size
  ir::ValueId b = c.ToInt64(c.input(1)), s = c.ToInt64(c.input(2));
  ir::ValueId is_all = c.Emit("Equal", {s, c.ScalarI64(-1)});
  ir::ValueId ends = c.Emit("Where", {is_all, c.ScalarI64(std::numeric_limits<int64_t>::max()),
                                      c.Emit("Add", {b, s})});
  c.SetOutput(c.Emit("Slice", {c.input(0), b, ends}));
  return absl::OkStatus();
} END_OP;

TF_OP("StridedSlice") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 4));
  Attrs attrs;
  for (const char* mask : {"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                           "shrink_axis_mask"}) {
    attrs[mask] = c.AttrInt(mask, 0);
  }
  c.SetOutput(c.Emit("StridedSlice",
                     {c.input(0), c.ToInt64(c.input(1)), c.ToInt64(c.input(2)),
                      c.ToInt64(c.input(3))},
                     attrs, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("Squeeze") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  std::vector<int64_t> dims = c.AttrInts("squeeze_dims");
  if (dims.empty()) dims = c.AttrInts("axis");
  if (dims.empty()) {
    c.SetOutput(c.Emit("Squeeze", {c.input(0)}));
  } else {
    c.SetOutput(c.Emit("Squeeze", {c.input(0), c.ConstI64(dims)}));
  }
  return absl::OkStatus();
} END_OP;

TF_OP("ExpandDims") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("Unsqueeze", {c.input(0), AsInt64Vector(c, 1)}));
  return absl::OkStatus();
} END_OP;

absl::Status ShapeLike(OpContext& c, const std::string& op) {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  DType out_type = DType::kInt32;
  if (c.HasAttr("out_type")) {
    KILN_ASSIGN_OR_RETURN(out_type, c.AttrType("out_type"));
  }
  ir::ValueId v = c.Emit(op, {c.input(0)});
  if (out_type != DType::kInt64) v = c.Emit("Cast", {v}, {{"to", OnnxDataType(out_type)}});
  c.SetOutput(v);
  return absl::OkStatus();
}

TF_OP("Shape") { return ShapeLike(c, "Shape"); } END_OP;
TF_OP("Size") { return ShapeLike(c, "Size"); } END_OP;
TF_OP("Rank") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  ir::ValueId v = c.Emit("Size", {c.Emit("Shape", {c.input(0)})});
  c.SetOutput(c.Emit("Cast", {v}, {{"to", OnnxDataType(DType::kInt32)}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Fill") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  const Tensor* value = c.ConstInput(1);
  ir::ValueId dims = c.ToInt64(c.input(0));
  if (value != nullptr && value->dtype() != DType::kString) {
    auto one = value->Reshape(Shape{1});
    if (!one.ok()) return c.Error("value must be a scalar");
    c.SetOutput(c.Emit("ConstantOfShape", {dims}, {{"value", one->Clone()}}));
  } else {
    c.SetOutput(c.Emit("Expand", {c.input(1), dims}));
  }
  return absl::OkStatus();
} END_OP;

Tensor ScalarOf(DType dtype, double v) {
  Tensor t(dtype, Shape{});
  switch (dtype) {
    case DType::kFloat32: *t.data<float>() = static_cast<float>(v); break;
    case DType::kFloat64: *t.data<double>() = v; break;
    case DType::kInt32: *t.data<int32_t>() = static_cast<int32_t>(v); break;
    case DType::kInt64: *t.data<int64_t>() = static_cast<int64_t>(v); break;
    case DType::kInt8: *t.data<int8_t>() = static_cast<int8_t>(v); break;
    case DType::kUInt8: *t.data<uint8_t>() = static_cast<uint8_t>(v); break;
    case DType::kInt16: *t.data<int16_t>() = static_cast<int16_t>(v); break;
    case DType::kUInt16: *t.data<uint16_t>() = static_cast<uint16_t>(v); break;
    case DType::kUInt32: *t.data<uint32_t>() = static_cast<uint32_t>(v); break;
    case DType::kUInt64: *t.data<uint64_t>() = static_cast<uint64_t>(v); break;
    case DType::kBool: *t.data<bool>() = v != 0; break;
    case DType::kFloat16: t.data<Float16>()[0] = Float16(static_cast<float>(v)); break;
    case DType::kBFloat16: t.data<BFloat16>()[0] = BFloat16(static_cast<float>(v)); break;
    default: break;
  }
  return t;
}

TF_OP("ZerosLike", "OnesLike") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(DType t, c.AttrType("T"));
  if (t == DType::kString) return c.Unsupported("ZerosLike of strings");
  const double v = c.node().op() == "OnesLike" ? 1.0 : 0.0;
  c.SetOutput(c.Emit("Expand", {c.Const(ScalarOf(t, v)), c.Emit("Shape", {c.input(0)})}));
  return absl::OkStatus();
} END_OP;

TF_OP("Range") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  c.SetOutput(c.Emit("Range", {c.input(0), c.input(1), c.input(2)}));
  return absl::OkStatus();
} END_OP;

TF_OP("Tile") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("Tile", {c.input(0), c.ToInt64(c.input(1))}));
  return absl::OkStatus();
} END_OP;

TF_OP("BroadcastTo") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("Expand", {c.input(0), c.ToInt64(c.input(1))}));
  return absl::OkStatus();
} END_OP;

// TF paddings [rank, 2] -> ONNX pads [begin..., end...].
ir::ValueId OnnxPads(OpContext& c, ir::ValueId paddings) {
  if (auto p = c.ConstInts(1); p.ok()) {
    std::vector<int64_t> pads(p->size());
    const size_t rank = p->size() / 2;
    for (size_t i = 0; i < rank; ++i) {
      pads[i] = (*p)[2 * i];
      pads[rank + i] = (*p)[2 * i + 1];
    }
    return c.ConstI64(pads);
  }
  ir::ValueId t = c.Emit("Transpose", {c.ToInt64(paddings)}, {{"perm", std::vector<int64_t>{1, 0}}});
  return c.Emit("Reshape", {t, c.ConstI64({-1})});
}

TF_OP("Pad", "PadV2") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  std::vector<ir::ValueId> inputs = {c.input(0), OnnxPads(c, c.input(1))};
  if (c.node().op() == "PadV2" && c.num_inputs() > 2) inputs.push_back(c.input(2));
  c.SetOutput(c.Emit("Pad", inputs, {{"mode", std::string("constant")}}));
  return absl::OkStatus();
} END_OP;

TF_OP("MirrorPad") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  const std::string mode = c.AttrString("mode", "REFLECT");
  if (mode != "REFLECT" && mode != "SYMMETRIC") {
    return c.Error(absl::StrCat("unknown mode '", mode, "'"));
  }
  // kiln::MirrorPad is TensorFlow's op: paddings [rank, 2] and the mode spelt as TF does.
  c.SetOutput(c.Emit("MirrorPad", {c.input(0), c.ToInt64(c.input(1))}, {{"mode", mode}}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("GatherV2", "Gather", "ResourceGather") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  int64_t axis = 0;
  if (c.node().op() == "GatherV2") {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> a, c.ConstInts(2));
    if (a.size() != 1) return c.Error("axis must be a scalar");
    axis = a[0];
  }
  if (c.AttrInt("batch_dims", 0) != 0) return c.Unsupported("batch_dims != 0");
  c.SetOutput(c.Emit("Gather", {c.input(0), c.input(1)}, {{"axis", axis}}));
  return absl::OkStatus();
} END_OP;

TF_OP("GatherNd") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("GatherND", {c.input(0), c.ToInt64(c.input(1))}));
  return absl::OkStatus();
} END_OP;

TF_OP("OneHot") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 4));
  ir::ValueId off = c.Emit("Reshape", {c.input(3), c.ConstI64({1})});
  ir::ValueId on = c.Emit("Reshape", {c.input(2), c.ConstI64({1})});
  ir::ValueId values = c.Emit("Concat", {off, on}, {{"axis", int64_t{0}}});
  c.SetOutput(c.Emit("OneHot", {c.input(0), c.input(1), values}, {{"axis", c.AttrInt("axis", -1)}}));
  return absl::OkStatus();
} END_OP;

TF_OP("Unique") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  auto outs = c.EmitN("Unique", {c.input(0)}, 4, {{"sorted", int64_t{0}}});
  DType idx_type = DType::kInt32;
  if (c.HasAttr("out_idx")) {
    KILN_ASSIGN_OR_RETURN(idx_type, c.AttrType("out_idx"));
  }
  c.SetOutputs({outs[0], c.Emit("Cast", {outs[2]}, {{"to", OnnxDataType(idx_type)}})});
  return absl::OkStatus();
} END_OP;

TF_OP("RandomUniform") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(DType dtype, c.AttrType("dtype"));
  if (dtype != DType::kFloat32) return c.Unsupported("RandomUniform of non-float32");
  c.SetOutput(c.Emit("RandomUniform", {c.ToInt64(c.input(0))},
                     {{"seed", c.AttrInt("seed", 0) * 1000003 + c.AttrInt("seed2", 0)}}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("Bucketize") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  c.SetOutput(c.Emit("Bucketize", {c.input(0)}, {{"boundaries", c.AttrFloats("boundaries")}},
                     "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("BucketizeWithInputBoundaries") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  const Tensor* b = c.ConstInput(1);
  if (b == nullptr || b->dtype() != DType::kFloat32) {
    return c.Unsupported("non-constant or non-float boundaries");
  }
  std::vector<float> boundaries(b->span<float>().begin(), b->span<float>().end());
  c.SetOutput(c.Emit("Bucketize", {c.input(0)}, {{"boundaries", boundaries}}, "kiln"));
  return absl::OkStatus();
} END_OP;

// Strings and tables ------------------------------------------------------------------------

TF_OP("StringToHashBucketFast") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  KILN_ASSIGN_OR_RETURN(int64_t buckets, c.AttrInt("num_buckets"));
  if (buckets < 1) return c.Error("num_buckets must be positive");
  c.SetOutput(c.Emit("StringToHashBucketFast", {c.input(0)}, {{"num_buckets", buckets}}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("LookupTableFindV2", "LookupTableFind") {
  if (c.num_inputs() < 3 || c.input_value(0).table == nullptr) {
    return c.Error("expects a table handle, keys and a default value");
  }
  const TableContents& table = *c.input_value(0).table;
  c.SetOutput(c.Emit("HashTableLookup",
                     {c.input(1), c.input(2), c.Const(table.keys, "table_keys"),
                      c.Const(table.values, "table_values")},
                     {}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("LookupTableSizeV2", "LookupTableSize") {
  if (c.num_inputs() < 1 || c.input_value(0).table == nullptr) {
    return c.Error("expects a table handle");
  }
  c.SetOutput(c.Const(Tensor::Scalar<int64_t>(c.input_value(0).table->keys.num_elements())));
  return absl::OkStatus();
} END_OP;

// tf.Example parsing: all three forms become one kiln::ParseExample node with TF's output
// layout (sparse indices, sparse values, sparse shapes, dense values).
absl::Status EmitParseExample(OpContext& c, ir::ValueId serialized,
                              const std::vector<std::string>& sparse_keys,
                              const std::vector<int>& sparse_types,
                              const std::vector<std::string>& dense_keys,
                              const std::vector<int>& dense_types,
                              const std::vector<ir::ValueId>& dense_defaults, bool single) {
  if (sparse_keys.size() != sparse_types.size() || dense_keys.size() != dense_types.size() ||
      dense_keys.size() != dense_defaults.size()) {
    return c.Error("feature keys, types and defaults differ in number");
  }
  auto it = c.node().attr().find("dense_shapes");
  std::vector<int64_t> dense_ranks, dense_dims;
  for (size_t i = 0; i < dense_keys.size(); ++i) {
    if (it == c.node().attr().end() || i >= (size_t)it->second.list().shape_size()) {
      return c.Error("dense_shapes missing");
    }
    const auto& shape = it->second.list().shape(i);
    if (shape.unknown_rank()) return c.Unsupported("dense feature of unknown rank");
    dense_ranks.push_back(shape.dim_size());
    for (const auto& d : shape.dim()) {
      if (d.size() < 0) return c.Unsupported("variable-length dense feature (allow_missing)");
      dense_dims.push_back(d.size());
    }
  }
  std::vector<int64_t> stypes, dtypes;
  for (int t : sparse_types) {
    KILN_ASSIGN_OR_RETURN(DType d, FromTfDataType(t));
    stypes.push_back(OnnxDataType(d));
  }
  for (int t : dense_types) {
    KILN_ASSIGN_OR_RETURN(DType d, FromTfDataType(t));
    dtypes.push_back(OnnxDataType(d));
  }
  std::vector<ir::ValueId> inputs = {serialized};
  inputs.insert(inputs.end(), dense_defaults.begin(), dense_defaults.end());
  const int n = static_cast<int>(3 * sparse_keys.size() + dense_keys.size());
  Attrs attrs = {{"sparse_keys", sparse_keys}, {"sparse_types", stypes},
                 {"dense_keys", dense_keys},   {"dense_types", dtypes},
                 {"dense_ranks", dense_ranks}, {"dense_dims", dense_dims},
                 {"single", int64_t{single}}};
  c.SetOutputs(n == 0 ? std::vector<ir::ValueId>{}
                      : c.EmitN("ParseExample", inputs, n, attrs, "kiln"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ConstStrings(OpContext& c, int i) {
  const Tensor* t = c.ConstInput(i);
  if (t == nullptr || t->dtype() != DType::kString) {
    return c.Unsupported(absl::StrCat("non-constant feature keys (input ", i, ")"));
  }
  return std::vector<std::string>(t->span<std::string>().begin(), t->span<std::string>().end());
}

TF_OP("ParseExampleV2") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 5));
  if (c.AttrInt("num_ragged", 0) != 0 || !c.AttrTypeList("ragged_value_types").empty()) {
    return c.Unsupported("ragged features");
  }
  KILN_ASSIGN_OR_RETURN(auto sparse_keys, ConstStrings(c, 2));
  KILN_ASSIGN_OR_RETURN(auto dense_keys, ConstStrings(c, 3));
  std::vector<ir::ValueId> defaults;
  for (int i = 5; i < c.num_inputs(); ++i) defaults.push_back(c.input(i));
  return EmitParseExample(c, c.input(0), sparse_keys, c.AttrTypeList("sparse_types"), dense_keys,
                          c.AttrTypeList("Tdense"), defaults, c.InputRank(0) == 0);
} END_OP;

TF_OP("ParseExample") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  const int ns = static_cast<int>(c.AttrInt("Nsparse", 0));
  const int nd = static_cast<int>(c.AttrInt("Ndense", 0));
  if (c.num_inputs() != 2 + ns + 2 * nd) return c.Error("input count does not match Nsparse/Ndense");
  std::vector<std::string> sparse_keys, dense_keys;
  for (int i = 0; i < ns + nd; ++i) {
    KILN_ASSIGN_OR_RETURN(auto k, ConstStrings(c, 2 + i));
    if (k.size() != 1) return c.Error("feature key must be a scalar");
    (i < ns ? sparse_keys : dense_keys).push_back(k[0]);
  }
  std::vector<ir::ValueId> defaults;
  for (int i = 2 + ns + nd; i < c.num_inputs(); ++i) defaults.push_back(c.input(i));
  return EmitParseExample(c, c.input(0), sparse_keys, c.AttrTypeList("sparse_types"), dense_keys,
                          c.AttrTypeList("Tdense"), defaults, false);
} END_OP;

TF_OP("ParseSingleExample") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  std::vector<ir::ValueId> defaults;
  for (int i = 1; i < c.num_inputs(); ++i) defaults.push_back(c.input(i));
  return EmitParseExample(c, c.input(0), c.AttrStrings("sparse_keys"),
                          c.AttrTypeList("sparse_types"), c.AttrStrings("dense_keys"),
                          c.AttrTypeList("Tdense"), defaults, true);
} END_OP;

// Control flow --------------------------------------------------------------------------------

TF_OP("If", "StatelessIf") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  std::vector<TfValue> args;
  for (int i = 1; i < c.num_inputs(); ++i) args.push_back(c.input_value(i));
  Attrs attrs;
  int num_outputs = -1;
  for (const char* branch : {"then_branch", "else_branch"}) {
    const std::string fname = c.AttrFunction(branch);
    if (fname.empty()) return c.Error(absl::StrCat("missing ", branch));
    std::vector<TfValue> outs;
    auto sub = c.converter()->BuildFunctionSubgraph(c.scope(), fname, args, false, &outs);
    if (!sub.ok()) return Annotate(sub.status(), DescribeNode(c.scope(), c.node()));
    if (num_outputs >= 0 && num_outputs != static_cast<int>(outs.size())) {
      return c.Error("branches return different numbers of values");
    }
    num_outputs = static_cast<int>(outs.size());
    attrs[std::string(branch) == "then_branch" ? "then_branch" : "else_branch"] = *sub;
  }
  ir::ValueId cond = c.input(0);
  const Tensor* cond_const = c.ConstInput(0);
  if (!(cond_const != nullptr && cond_const->dtype() == DType::kBool)) {
    const int rank = c.InputRank(0);
    // TF: a non-scalar condition is true when non-empty; a number when non-zero.
    if (rank > 0) {
      cond = c.Emit("Greater", {c.Emit("Size", {cond}), c.ScalarI64(0)});
    } else if (auto t = c.AttrType("Tcond"); t.ok() && *t != DType::kBool) {
      cond = c.Emit("Cast", {cond}, {{"to", OnnxDataType(DType::kBool)}});
    }
  }
  if (num_outputs == 0) {
    c.SetOutputs({});
    return absl::OkStatus();
  }
  c.SetOutputs(c.EmitN("If", {cond}, num_outputs, attrs));
  return absl::OkStatus();
} END_OP;

TF_OP("While", "StatelessWhile") {
  std::vector<TfValue> vars;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input(i) == ir::kNoValue) return c.Unsupported("a non-tensor loop variable");
    vars.push_back(c.input_value(i));
  }
  const std::string cond_fn = c.AttrFunction("cond");
  const std::string body_fn = c.AttrFunction("body");
  if (cond_fn.empty() || body_fn.empty()) return c.Error("missing cond or body");
  Converter* conv = c.converter();
  // The first test runs in the enclosing graph.
  auto first = conv->InlineFunction(c.scope(), c.scope()->prefix + c.node().name() + "/cond0/",
                                    cond_fn, vars);
  if (!first.ok()) return Annotate(first.status(), DescribeNode(c.scope(), c.node()));
  if (first->size() != 1 || (*first)[0].id == ir::kNoValue) return c.Error("cond must return one tensor");
  // Loop body: (iteration, condition, vars...) -> (condition', vars'...), with the TF cond
  // evaluated on the new values inside the body.
  auto body = std::make_shared<ir::Graph>();
  body->name = body_fn;
  GraphFrame frame;
  frame.graph = body.get();
  frame.parent = c.scope()->frame;
  Scope shim;
  shim.frame = &frame;
  shim.body = c.scope()->body;
  shim.prefix = c.scope()->prefix + c.node().name() + "/";
  ir::ValueId iter = body->AddValue(conv->UniqueName(c.node().name() + "/iter"),
                                    ir::TensorType::Of(DType::kInt64, {}));
  ir::ValueId cond_in = body->AddValue(conv->UniqueName(c.node().name() + "/cond_in"),
                                       ir::TensorType::Of(DType::kBool, {}));
  body->inputs = {iter, cond_in};
  std::vector<TfValue> local_vars;
  for (const TfValue& v : vars) {
    TfValue local;
    const ir::Value& outer = c.graph().value(v.id);
    local.id = body->AddValue(conv->UniqueName(c.node().name() + "/var"), ir::TensorType{outer.type.dtype});
    body->inputs.push_back(local.id);
    local_vars.push_back(local);
  }
  auto next = conv->InlineFunction(&shim, shim.prefix + "body/", body_fn, local_vars);
  if (!next.ok()) return Annotate(next.status(), DescribeNode(c.scope(), c.node()));
  if (next->size() != vars.size()) return c.Error("body returns a different number of values");
  auto again = conv->InlineFunction(&shim, shim.prefix + "cond/", cond_fn, *next);
  if (!again.ok()) return Annotate(again.status(), DescribeNode(c.scope(), c.node()));
  if (again->size() != 1) return c.Error("cond must return one tensor");
  auto identity = [&](ir::ValueId v) {
    return conv->AddIrNode(*body, "Identity", {v}, 1, {}, shim.prefix + "out")[0];
  };
  body->outputs.push_back(identity((*again)[0].id));
  for (const TfValue& v : *next) {
    if (v.id == ir::kNoValue) return c.Unsupported("a non-tensor loop variable");
    body->outputs.push_back(identity(v.id));
  }
  std::vector<ir::ValueId> inputs = {ir::kNoValue, (*first)[0].id};
  for (const TfValue& v : vars) inputs.push_back(v.id);
  c.SetOutputs(c.EmitN("Loop", inputs, static_cast<int>(vars.size()), {{"body", ir::GraphPtr(body)}}));
  return absl::OkStatus();
} END_OP;

// TensorLists (Keras RNN loops) are dense tensors [num_elements, element...]; a reserved list
// is allocated by its first SetItem, when the element shape is known.
TF_OP("TensorListReserve", "EmptyTensorList") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  KILN_ASSIGN_OR_RETURN(DType dtype, c.AttrType("element_dtype"));
  c.SetOutput(c.Emit("TensorListReserve", {c.ToInt64(c.input(0)), c.ToInt64(c.input(1))},
                     {{"element_dtype", OnnxDataType(dtype)}}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("TensorListSetItem") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  c.SetOutput(c.Emit("TensorListSetItem", {c.input(0), c.ToInt64(c.input(1)), c.input(2)}, {},
                     "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("TensorListGetItem") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  c.SetOutput(c.Emit("Gather", {c.input(0), c.ToInt64(c.input(1))}, {{"axis", int64_t{0}}}));
  return absl::OkStatus();
} END_OP;

TF_OP("TensorListLength") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  ir::ValueId shape = c.Emit("Shape", {c.input(0)});
  ir::ValueId n = c.Emit("Gather", {shape, c.ScalarI64(0)}, {{"axis", int64_t{0}}});
  c.SetOutput(c.Emit("Cast", {n}, {{"to", OnnxDataType(DType::kInt32)}}));
  return absl::OkStatus();
} END_OP;

// Sparse tensors (feature columns) -------------------------------------------------------------

TF_OP("SparseFillEmptyRows") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 4));
  c.SetOutputs(c.EmitN("SparseFillEmptyRows",
                       {c.ToInt64(c.input(0)), c.input(1), c.ToInt64(c.input(2)), c.input(3)}, 4,
                       {}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("SparseReshape") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  c.SetOutputs(c.EmitN("SparseReshape",
                       {c.ToInt64(c.input(0)), c.ToInt64(c.input(1)), c.ToInt64(c.input(2))}, 2,
                       {}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN",
      "SparseSegmentSumWithNumSegments", "SparseSegmentMeanWithNumSegments",
      "SparseSegmentSqrtNWithNumSegments") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 3));
  const std::string& op = c.node().op();
  const std::string mode = absl::StrContains(op, "Mean") ? "mean"
                           : absl::StrContains(op, "SqrtN") ? "sqrtn" : "sum";
  std::vector<ir::ValueId> inputs = {c.input(0), c.input(1), c.input(2)};
  if (absl::StrContains(op, "NumSegments") && c.num_inputs() > 3) inputs.push_back(c.input(3));
  c.SetOutput(c.Emit("SparseSegmentReduce", inputs, {{"mode", mode}}, "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("SparseToDense") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 4));
  c.SetOutput(c.Emit("SparseToDense", {c.input(0), c.input(1), c.input(2), c.input(3)}, {},
                     "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("UpperBound") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 2));
  DType out = DType::kInt32;
  if (c.HasAttr("out_type")) {
    KILN_ASSIGN_OR_RETURN(out, c.AttrType("out_type"));
  }
  c.SetOutput(c.Emit("UpperBound", {c.input(0), c.input(1)}, {{"out_type", OnnxDataType(out)}},
                     "kiln"));
  return absl::OkStatus();
} END_OP;

TF_OP("AsString") {
  KILN_RETURN_IF_ERROR(NeedInputs(c, 1));
  if (c.AttrInt("precision", -1) >= 0 || c.AttrInt("width", -1) >= 0 ||
      c.AttrBool("scientific", false) || c.AttrBool("shortest", false)) {
    return c.Unsupported("AsString with formatting attributes");
  }
  c.SetOutput(c.Emit("AsString", {c.input(0)}, {}, "kiln"));
  return absl::OkStatus();
} END_OP;

}  // namespace

const OpConverter* FindOpConverter(const std::string& op) {
  auto it = Registry().find(op);
  return it == Registry().end() ? nullptr : &it->second;
}

std::vector<std::string> SupportedTfOps() {
  std::vector<std::string> ops;
  for (const auto& [name, fn] : Registry()) ops.push_back(name);
  // Converted by the converter itself (converter*.cc), not through the registry.
  for (const char* op : {"Placeholder", "VarHandleOp", "VariableV2", "HashTableV2", "Switch",
                         "Merge", "PartitionedCall", "StatefulPartitionedCall", "AssignAdd",
                         "AssignSub", "AssignAddVariableOp", "AssignSubVariableOp"}) {
    ops.push_back(op);
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace kiln::import::tf
