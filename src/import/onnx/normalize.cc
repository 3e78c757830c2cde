// Rewrites ONNX nodes of any opset into the newest-opset form the IR uses (kiln/ir/graph.h),
// and expands common com.microsoft operators into ONNX operators.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "import/onnx/onnx_internal.h"

namespace kiln::import::onnx_internal {
namespace {

using ir::Attribute;
using ir::ValueId;
using ir::kNoValue;

bool IsReduceOp(const std::string& op) {
  return op == "ReduceL1" || op == "ReduceL2" || op == "ReduceLogSum" ||
         op == "ReduceLogSumExp" || op == "ReduceMax" || op == "ReduceMean" ||
         op == "ReduceMin" || op == "ReduceProd" || op == "ReduceSum" || op == "ReduceSumSquare";
}

Tensor ScalarOf(DType dtype, double v) {
  Tensor t(dtype, Shape{});
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, std::string>) {
      // not reached: callers only ask for numeric scalars
    } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      *t.data<T>() = T(static_cast<float>(v));
    } else if constexpr (std::is_same_v<T, bool>) {
      *t.data<T>() = v != 0;
    } else if constexpr (std::is_integral_v<T>) {
      const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
      const double hi = static_cast<double>(std::numeric_limits<T>::max());
      *t.data<T>() = static_cast<T>(std::isnan(v) ? 0 : std::min(std::max(v, lo), hi));
    } else {
      *t.data<T>() = static_cast<T>(v);
    }
  });
  return t;
}

}  // namespace

std::string NodeEmitter::NodeName() const {
  return proto_.name().empty() ? proto_.op_type() : proto_.name();
}

void NodeEmitter::Final(const std::string& op, std::vector<ValueId> inputs,
                        std::map<std::string, Attribute> attrs) {
  ir::Node node;
  node.op = op;
  node.name = proto_.name();
  node.inputs = std::move(inputs);
  node.outputs = outputs_;
  node.attrs = std::move(attrs);
  // Trailing omitted inputs carry no meaning; drop them so kernels see the short form.
  while (!node.inputs.empty() && node.inputs.back() == kNoValue) node.inputs.pop_back();
  while (!node.outputs.empty() && node.outputs.back() == kNoValue) node.outputs.pop_back();
  graph_.AddNode(std::move(node));
}

ValueId NodeEmitter::Tmp(const std::string& op, std::vector<ValueId> inputs,
                         std::map<std::string, Attribute> attrs) {
  ir::Node node;
  node.op = op;
  node.name = proto_.name().empty() ? "" : absl::StrCat(proto_.name(), "/", op);
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  const ValueId out = graph_.AddValue(fresh_name_(absl::StrCat(NodeName(), "/", op)));
  node.outputs = {out};
  graph_.AddNode(std::move(node));
  return out;
}

void NodeEmitter::Alias(int index, ValueId value) {
  if (index >= static_cast<int>(outputs_.size()) || outputs_[index] == kNoValue) return;
  ir::Node node;
  node.op = "Identity";
  node.name = proto_.name();
  node.inputs = {value};
  node.outputs = {outputs_[index]};
  graph_.AddNode(std::move(node));
}

ValueId NodeEmitter::Const(Tensor t, absl::string_view hint) {
  return graph_.AddConstant(fresh_name_(absl::StrCat(NodeName(), "/", hint)), std::move(t));
}

ValueId NodeEmitter::Int64s(const std::vector<int64_t>& v, absl::string_view hint) {
  return Const(Tensor::FromVector<int64_t>(v), hint);
}

DType NodeEmitter::KnownDType(ValueId v) const {
  if (v == kNoValue) return DType::kInvalid;
  return graph_.value(v).type.dtype;
}

ValueId NodeEmitter::ScalarLike(double v, ValueId like, absl::string_view hint) {
  const DType dtype = KnownDType(like);
  if (dtype != DType::kInvalid && dtype != DType::kString) {
    return Const(ScalarOf(dtype, v), hint);
  }
  const ValueId f = Const(ScalarOf(DType::kFloat32, v), hint);
  return Tmp("CastLike", {f, like});
}

bool NodeEmitter::TakeInts(const std::string& key, std::vector<int64_t>* out) {
  auto it = attrs_.find(key);
  if (it == attrs_.end()) return false;
  if (auto* ints = std::get_if<std::vector<int64_t>>(&it->second)) {
    *out = *ints;
  } else if (auto* one = std::get_if<int64_t>(&it->second)) {
    *out = {*one};
  } else {
    return false;
  }
  attrs_.erase(it);
  return true;
}

// Moves the int list attribute `attr` to input `position` (an int64 constant).
absl::Status NodeEmitter::AttrToInput(const std::string& attr, int position, bool required) {
  std::vector<int64_t> values;
  const bool present = TakeInts(attr, &values);
  if (!present && required) {
    return absl::InvalidArgumentError(
        absl::StrCat(proto_.op_type(), " '", NodeName(), "' (opset ", opset_,
                     ") needs the attribute '", attr, "'"));
  }
  if (static_cast<int>(inputs_.size()) <= position) inputs_.resize(position + 1, kNoValue);
  if (present) inputs_[position] = Int64s(values, attr);
  return absl::OkStatus();
}

absl::Status NodeEmitter::EmitSoftmaxFamily() {
  const std::string& op = proto_.op_type();
  if (opset_ >= 13) {
    Final(op, inputs_, attrs_);
    return absl::OkStatus();
  }
  // Before opset 13 these ops flattened the input to 2-D at `axis` (default 1) and worked on
  // the second dimension; from 13 on they work along one axis (default -1).
  if (Input(0) == kNoValue) {
    return absl::InvalidArgumentError(absl::StrCat(op, " '", NodeName(), "' has no input"));
  }
  int64_t axis = 1;
  if (auto it = attrs_.find("axis"); it != attrs_.end()) {
    if (auto* i = std::get_if<int64_t>(&it->second)) axis = *i;
  }
  if (axis != -1 && !graph_.value(Input(0)).type.rank_known) {
    // Exporters rarely record intermediate types; infer them so the common case (softmax
    // over the last axis) needs no Flatten/Reshape. Inference fails only on a cycle, which
    // is a malformed model: say so here, naming the node, instead of later with no context.
    KILN_RETURN_IF_ERROR(Annotate(ir::InferShapes(graph_),
                                  absl::StrCat(op, " '", NodeName(), "'")));
  }
  const ir::TensorType& type = graph_.value(Input(0)).type;
  const bool last_axis = axis == -1 || (type.rank_known && axis == type.rank() - 1);
  if (last_axis) {
    Final(op, {Input(0)}, {{"axis", int64_t{-1}}});
    return absl::OkStatus();
  }
  const ValueId flat = Tmp("Flatten", {Input(0)}, {{"axis", axis}});
  const ValueId result = Tmp(op, {flat}, {{"axis", int64_t{-1}}});
  const ValueId shape = Tmp("Shape", {Input(0)});
  Final("Reshape", {result, shape}, {});
  return absl::OkStatus();
}

absl::Status NodeEmitter::EmitResize() {
  const std::string& op = proto_.op_type();
  std::map<std::string, Attribute> attrs = attrs_;
  std::string mode = "nearest";
  if (auto it = attrs.find("mode"); it != attrs.end()) {
    if (auto* s = std::get_if<std::string>(&it->second)) mode = *s;
  }
  if (mode == "bilinear" || mode == "trilinear") mode = "linear";
  if (op == "Upsample" || opset_ < 11) {
    // Upsample and Resize-10 map output coordinates back with x_out / scale and pick the
    // floor for nearest: Resize-11's "asymmetric" transform with nearest_mode "floor".
    ValueId scales = Input(1);
    if (op == "Upsample" && opset_ < 9) {
      auto it = attrs.find("scales");
      if (it == attrs.end() || !std::holds_alternative<std::vector<float>>(it->second)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Upsample '", NodeName(), "' needs the attribute 'scales'"));
      }
      scales = Const(Tensor::FromVector<float>(std::get<std::vector<float>>(it->second)),
                     "scales");
    }
    attrs.erase("scales");
    attrs["mode"] = mode;
    attrs["coordinate_transformation_mode"] = std::string("asymmetric");
    if (mode == "nearest") attrs["nearest_mode"] = std::string("floor");
    Final("Resize", {Input(0), kNoValue, scales}, std::move(attrs));
    return absl::OkStatus();
  }
  // Opsets 11 and 12 required roi and scales inputs even when unused; an empty constant
  // meant "absent". The newest form leaves them out.
  std::vector<ValueId> inputs = inputs_;
  for (int i = 1; i < static_cast<int>(inputs.size()) && i <= 2; ++i) {
    if (graph_.IsConstant(inputs[i]) && graph_.value(inputs[i]).constant->num_elements() == 0) {
      inputs[i] = kNoValue;
    }
  }
  attrs["mode"] = mode;
  Final("Resize", std::move(inputs), std::move(attrs));
  return absl::OkStatus();
}

absl::Status NodeEmitter::EmitPadLegacy() {
  std::vector<int64_t> pads;
  if (!TakeInts("pads", &pads) && !TakeInts("paddings", &pads)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pad '", NodeName(), "' (opset ", opset_, ") needs the attribute 'pads'"));
  }
  double value = 0;
  if (auto it = attrs_.find("value"); it != attrs_.end()) {
    if (auto* f = std::get_if<float>(&it->second)) value = *f;
    attrs_.erase(it);
  }
  ValueId constant_value = kNoValue;
  if (value != 0) constant_value = ScalarLike(value, Input(0), "value");
  Final("Pad", {Input(0), Int64s(pads, "pads"), constant_value}, attrs_);
  return absl::OkStatus();
}

absl::Status NodeEmitter::EmitClipLegacy() {
  ValueId min = kNoValue;
  ValueId max = kNoValue;
  if (auto it = attrs_.find("min"); it != attrs_.end()) {
    if (auto* f = std::get_if<float>(&it->second)) min = ScalarLike(*f, Input(0), "min");
  }
  if (auto it = attrs_.find("max"); it != attrs_.end()) {
    if (auto* f = std::get_if<float>(&it->second)) max = ScalarLike(*f, Input(0), "max");
  }
  Final("Clip", {Input(0), min, max}, {});
  return absl::OkStatus();
}

absl::Status NodeEmitter::EmitSplit() {
  if (opset_ < 13) KILN_RETURN_IF_ERROR(AttrToInput("split", 1, false));
  // Without sizes, opset 18 needs num_outputs; earlier opsets split into as many equal parts
  // as the node has outputs.
  if (Input(1) == kNoValue && attrs_.count("num_outputs") == 0) {
    attrs_["num_outputs"] = static_cast<int64_t>(outputs_.size());
  }
  Final("Split", inputs_, attrs_);
  return absl::OkStatus();
}

absl::Status NodeEmitter::EmitOnnx() {
  const std::string& op = proto_.op_type();
  if (op == "Slice" && opset_ < 10) {
    KILN_RETURN_IF_ERROR(AttrToInput("starts", 1, true));
    KILN_RETURN_IF_ERROR(AttrToInput("ends", 2, true));
    KILN_RETURN_IF_ERROR(AttrToInput("axes", 3, false));
  } else if ((op == "Squeeze" || op == "Unsqueeze") && opset_ < 13) {
    KILN_RETURN_IF_ERROR(AttrToInput("axes", 1, op == "Unsqueeze"));
  } else if (op == "ReduceSum" && opset_ < 13) {
    KILN_RETURN_IF_ERROR(AttrToInput("axes", 1, false));
  } else if (IsReduceOp(op) && op != "ReduceSum" && opset_ < 18) {
    KILN_RETURN_IF_ERROR(AttrToInput("axes", 1, false));
  } else if (op == "TopK" && opset_ < 10) {
    KILN_RETURN_IF_ERROR(AttrToInput("k", 1, true));
  } else if (op == "Split") {
    return EmitSplit();
  } else if (op == "Pad" && opset_ < 11) {
    return EmitPadLegacy();
  } else if (op == "Clip" && opset_ < 11) {
    return EmitClipLegacy();
  } else if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
    return EmitSoftmaxFamily();
  } else if (op == "Resize" || op == "Upsample") {
    return EmitResize();
  } else if (op == "Scatter") {
    Final("ScatterElements", inputs_, attrs_);
    return absl::OkStatus();
  } else if (op == "Dropout") {
    if (opset_ < 12) {
      double ratio = 0.5;
      if (auto it = attrs_.find("ratio"); it != attrs_.end()) {
        if (auto* f = std::get_if<float>(&it->second)) ratio = *f;
      }
      attrs_.clear();  // ratio moved to an input; is_test/seed mean nothing at inference
      inputs_.resize(1);
      inputs_.push_back(Const(ScalarOf(DType::kFloat32, ratio), "ratio"));
    }
  } else if (op == "BatchNormalization" && opset_ < 14) {
    // Older opsets listed the training statistics as outputs that inference never writes.
    outputs_.resize(1);
    attrs_.erase("spatial");
    attrs_.erase("is_test");
    attrs_.erase("consumed_inputs");
  } else if (op == "Reshape" && opset_ < 5) {
    KILN_RETURN_IF_ERROR(AttrToInput("shape", 1, true));
  } else if (op == "Cast" && opset_ < 6) {
    // Cast-1 named the target type ("FLOAT"); later opsets use the DataType number.
    if (auto it = attrs_.find("to"); it != attrs_.end()) {
      if (auto* name = std::get_if<std::string>(&it->second)) {
        ::onnx::TensorProto::DataType type;
        if (!::onnx::TensorProto::DataType_Parse(*name, &type)) {
          return absl::InvalidArgumentError(
              absl::StrCat("Cast '", NodeName(), "': unknown type '", *name, "'"));
        }
        it->second = static_cast<int64_t>(type);
      }
    }
  } else if (op == "ImageScaler") {
    // Experimental opset-1 op (old model-zoo exports): y = scale * x + bias[channel].
    float scale = 1.0f;
    if (auto it = attrs_.find("scale"); it != attrs_.end()) {
      if (auto* f = std::get_if<float>(&it->second)) scale = *f;
    }
    std::vector<float> bias;
    if (auto it = attrs_.find("bias"); it != attrs_.end()) {
      if (auto* b = std::get_if<std::vector<float>>(&it->second)) bias = *b;
    }
    const ValueId scaled = Tmp("Mul", {Input(0), Const(Tensor::Scalar<float>(scale), "scale")});
    const int64_t channels = static_cast<int64_t>(bias.size());
    Final("Add", {scaled, Const(Tensor::FromVector<float>(bias, Shape{1, channels, 1, 1}), "bias")},
          {});
    return absl::OkStatus();
  } else if (op == "Scan" && opset_ < 9) {
    // Opset-8 Scan has a batch axis and sequence_lens: Kiln's own ScanBatched kernel runs it.
    Final("ScanBatched", inputs_, attrs_);
    graph_.nodes().back().domain = "kiln";
    return absl::OkStatus();
  }
  Final(op, inputs_, attrs_);
  return absl::OkStatus();
}

// Gelu(x) = 0.5 * x * (1 + erf(x / sqrt(2))), or its tanh approximation
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))). Written with plain ONNX ops so
// that every kernel set runs it; the optimizer fuses the pattern back.
absl::Status NodeEmitter::EmitGelu(ValueId x, int output, bool tanh_approximation) {
  ValueId inner;
  if (tanh_approximation) {
    const ValueId x3 = Tmp("Mul", {Tmp("Mul", {x, x}), x});
    const ValueId sum = Tmp("Add", {x, Tmp("Mul", {x3, ScalarLike(0.044715, x, "c")})});
    inner = Tmp("Tanh", {Tmp("Mul", {sum, ScalarLike(std::sqrt(2.0 / M_PI), x, "k")})});
  } else {
    inner = Tmp("Erf", {Tmp("Div", {x, ScalarLike(std::sqrt(2.0), x, "sqrt2")})});
  }
  const ValueId one_plus = Tmp("Add", {inner, ScalarLike(1.0, x, "one")});
  const ValueId half_x = Tmp("Mul", {x, ScalarLike(0.5, x, "half")});
  std::vector<ValueId> saved = outputs_;
  outputs_ = {output < static_cast<int>(saved.size()) ? saved[output] : kNoValue};
  Final("Mul", {half_x, one_plus}, {});
  outputs_ = saved;
  return absl::OkStatus();
}

absl::Status NodeEmitter::EmitMicrosoft() {
  const std::string& op = proto_.op_type();
  auto float_attr = [&](const char* key, float def) {
    auto it = attrs_.find(key);
    if (it != attrs_.end()) {
      if (auto* f = std::get_if<float>(&it->second)) return *f;
    }
    return def;
  };
  auto int_attr = [&](const char* key, int64_t def) {
    auto it = attrs_.find(key);
    if (it != attrs_.end()) {
      if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
    }
    return def;
  };
  if (op == "Gelu") return EmitGelu(Input(0), 0, false);
  if (op == "BiasGelu") return EmitGelu(Tmp("Add", {Input(0), Input(1)}), 0, false);
  if (op == "FastGelu") {
    ValueId x = Input(0);
    if (Input(1) != kNoValue) x = Tmp("Add", {x, Input(1)});
    return EmitGelu(x, 0, true);
  }
  if (op == "QuickGelu") {
    const ValueId x = Input(0);
    const ValueId scaled = Tmp("Mul", {x, ScalarLike(float_attr("alpha", 1.702f), x, "alpha")});
    Final("Mul", {x, Tmp("Sigmoid", {scaled})}, {});
    return absl::OkStatus();
  }
  if (op == "BiasAdd") {  // X + bias + skip
    Final("Add", {Tmp("Add", {Input(0), Input(1)}), Input(2)}, {});
    return absl::OkStatus();
  }
  if (op == "LayerNormalization") {
    Final("LayerNormalization", inputs_, attrs_);
    return absl::OkStatus();
  }
  const bool simplified =
      op == "SimplifiedLayerNormalization" || op == "SkipSimplifiedLayerNormalization";
  if (op == "SkipLayerNormalization" || op == "SkipSimplifiedLayerNormalization" ||
      simplified) {
    const float epsilon = float_attr("epsilon", 1e-5f);
    ValueId x = Input(0);
    ValueId gamma = Input(1);
    ValueId beta = kNoValue;
    int sum_output = -1;
    if (op != "SimplifiedLayerNormalization") {
      // (input, skip, gamma, [beta], [bias]); outputs (out, mean, inv_std, input+skip+bias).
      x = Tmp("Add", {Input(0), Input(1)});
      gamma = Input(2);
      const int bias_index = op == "SkipLayerNormalization" ? 4 : 3;
      if (op == "SkipLayerNormalization") beta = Input(3);
      if (Input(bias_index) != kNoValue) x = Tmp("Add", {x, Input(bias_index)});
      sum_output = 3;
    }
    std::vector<ValueId> saved = outputs_;
    outputs_ = {saved.empty() ? kNoValue : saved[0]};
    if (simplified) {
      // RMS norm: x / sqrt(mean(x^2, last axis) + eps) * gamma.
      const int64_t axis = int_attr("axis", -1);
      const ValueId mean_sq =
          Tmp("ReduceMean", {Tmp("Mul", {x, x}), Int64s({axis}, "axes")}, {{"keepdims", int64_t{1}}});
      const ValueId denom = Tmp("Sqrt", {Tmp("Add", {mean_sq, ScalarLike(epsilon, x, "eps")})});
      Final("Mul", {Tmp("Div", {x, denom}), gamma}, {});
    } else {
      Final("LayerNormalization", {x, gamma, beta},
            {{"axis", int64_t{-1}}, {"epsilon", epsilon}});
    }
    outputs_ = saved;
    if (sum_output >= 0) Alias(sum_output, x);
    return absl::OkStatus();
  }
  if (op == "FusedMatMul") {
    const float alpha = float_attr("alpha", 1.0f);
    if (int_attr("transBatchA", 0) != 0 || int_attr("transBatchB", 0) != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "com.microsoft FusedMatMul '", NodeName(), "' with transBatchA/transBatchB"));
    }
    auto swap_last_two = [&](ValueId v) {
      return Tmp("Einsum", {v}, {{"equation", std::string("...ij->...ji")}});
    };
    ValueId a = int_attr("transA", 0) != 0 ? swap_last_two(Input(0)) : Input(0);
    ValueId b = int_attr("transB", 0) != 0 ? swap_last_two(Input(1)) : Input(1);
    if (alpha == 1.0f) {
      Final("MatMul", {a, b}, {});
    } else {
      Final("Mul", {Tmp("MatMul", {a, b}), ScalarLike(alpha, Input(0), "alpha")}, {});
    }
    return absl::OkStatus();
  }
  return absl::NotFoundError(op);
}

}  // namespace kiln::import::onnx_internal
