// Already-quantized ONNX models on Kiln's int8 kernels: rewrites the two forms ONNX Runtime's
// quantization tools write onto kiln::Int8Conv (include/kiln/ir/int8_ops.h), which runs on
// oneDNN's int8 convolution instead of the reference loops of quantize_ops.cc.
//
//   QOperator:  QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, [B int32])
//   QDQ:        DequantizeLinear(x) -> Conv(., DequantizeLinear(w), [B]) -> [Relu] ->
//               QuantizeLinear(y_scale, y_zp)
//
// with constant scales and zero points (x and y per tensor; w int8, per tensor or per output
// channel, zero point 0, the symmetric weights both tools write by default) and 2-D windows.
// The int8 values of the model are NCHW; Int8Conv reads and writes NHWC, so each int8 value
// that a rewritten conv reads gets one Transpose to NHWC (shared), unless a rewritten conv
// wrote it, and each value a rewritten conv writes is transposed back for the readers that
// want NCHW (dead-code elimination removes the transposes nobody reads). A chain of
// QLinearConvs, or of QDQ convs, therefore runs NHWC from its first input to its last output.
//
// Precision: QLinearConv's int32 bias is kept in accumulator units and the output scale is
// computed as the reference computes it (x_scale * w_scale / y_scale in float), so results
// match the reference kernel except where float rounding of the scaled sum lands on the other
// side of a tie: at most one step. The QDQ form's reference is a float convolution between
// DequantizeLinear and QuantizeLinear: the int8 kernel sums exactly in int32, so it may differ
// from that reference by one step as well. Without VNNI, oneDNN's u8 x s8 products are summed
// in pairs into 16 bits and can saturate for 8-bit weights (as in ONNX Runtime's u8s8 path
// on such CPUs); models quantized with reduce_range (7-bit weights) avoid it.
//
// Runs before constant folding (order 90), which would otherwise fold DequantizeLinear(w)
// into float weights and lose the model's int8 weights and their scales.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

bool IsOnnx(const Node& n, const char* op) { return n.domain.empty() && n.op == op; }

const Tensor* ConstantOf(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] == ir::kNoValue || !g.IsConstant(n.inputs[i])) {
    return nullptr;
  }
  return &*g.value(n.inputs[i]).constant;
}

// A float scalar (or one-element) constant.
std::optional<float> ScalarFloat(const Tensor* t) {
  if (t == nullptr || t->dtype() != DType::kFloat32 || t->num_elements() != 1) return std::nullopt;
  const float v = t->data<float>()[0];
  if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  return v;
}

// An 8-bit zero point (absent means 0) and the int8 type it gives its value.
std::optional<int64_t> ZeroPoint(const Tensor* t) {
  if (t == nullptr) return 0;
  if (t->num_elements() != 1) return std::nullopt;
  if (t->dtype() == DType::kUInt8) return t->data<uint8_t>()[0];
  if (t->dtype() == DType::kInt8) return t->data<int8_t>()[0];
  return std::nullopt;
}

bool AllZero(const Tensor* t) {
  if (t == nullptr) return true;
  if (t->dtype() != DType::kInt8 && t->dtype() != DType::kUInt8) return false;
  const uint8_t* b = static_cast<const uint8_t*>(t->raw_data());
  for (size_t i = 0; i < t->byte_size(); ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

// Per-output-channel weight scales for `m` channels, or nullopt.
std::optional<std::vector<float>> WeightScales(const Tensor* t, int64_t m) {
  if (t == nullptr || t->dtype() != DType::kFloat32) return std::nullopt;
  const int64_t n = t->num_elements();
  if (n != 1 && n != m) return std::nullopt;
  std::vector<float> s(t->data<float>(), t->data<float>() + n);
  for (float v : s) {
    if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  }
  return s;
}

// One rewritable convolution, in either form.
struct QConv {
  NodeId conv = ir::kNoNode;
  ValueId x = ir::kNoValue;  // int8 NCHW input
  ValueId w = ir::kNoValue;  // int8 constant weights
  ValueId bias = ir::kNoValue;
  ValueId y = ir::kNoValue;  // int8 NCHW output
  float x_scale = 1, y_scale = 1;
  int64_t x_zero_point = 0, y_zero_point = 0;
  DType y_type = DType::kUInt8;  // the output zero point's type (uint8 when it is absent)
  std::vector<float> w_scales;
  std::vector<ir::PostOp> post_ops;
  std::vector<NodeId> replaced;  // nodes the Int8Conv stands for (besides `conv`)
  std::string form;
};

class QdqFuser {
 public:
  QdqFuser(Graph& g, PassContext& ctx) : g_(g), ctx_(ctx) {}

  absl::Status Run() {
    consumers_ = g_.Consumers();
    KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, g_.TopologicalOrder());
    std::vector<QConv> found;
    for (NodeId id : order) {
      const Node& n = g_.node(id);
      std::optional<QConv> q;
      if (IsOnnx(n, "QLinearConv")) q = MatchQLinearConv(id);
      if (IsOnnx(n, "QuantizeLinear")) q = MatchQdq(id);
      if (q.has_value()) found.push_back(std::move(*q));
    }
    for (const QConv& q : found) Rewrite(q);
    return absl::OkStatus();
  }

 private:
  bool Rank4(ValueId v) const {
    const ir::TensorType& t = g_.value(v).type;
    return t.rank_known && t.rank() == 4;
  }

  bool WeightsOk(const Tensor* w) const {
    return w != nullptr && w->dtype() == DType::kInt8 && w->rank() == 4;
  }

  std::optional<QConv> MatchQLinearConv(NodeId id) const {
    const Node& n = g_.node(id);
    if (n.inputs.size() < 8 || n.outputs.size() != 1 || !Rank4(n.inputs[0])) return std::nullopt;
    const Tensor* w = ConstantOf(g_, n, 3);
    if (!WeightsOk(w) || !AllZero(ConstantOf(g_, n, 5))) return std::nullopt;
    QConv q;
    q.form = "QLinearConv";
    q.conv = id;
    q.x = n.inputs[0];
    q.w = n.inputs[3];
    q.y = n.outputs[0];
    const auto xs = ScalarFloat(ConstantOf(g_, n, 1)), ys = ScalarFloat(ConstantOf(g_, n, 6));
    const auto xz = ZeroPoint(ConstantOf(g_, n, 2)), yz = ZeroPoint(ConstantOf(g_, n, 7));
    const auto ws = WeightScales(ConstantOf(g_, n, 4), w->dim(0));
    if (!xs || !ys || !xz || !yz || !ws || ConstantOf(g_, n, 7) == nullptr) return std::nullopt;
    q.x_scale = *xs;
    q.y_scale = *ys;
    q.x_zero_point = *xz;
    q.y_zero_point = *yz;
    q.y_type = ConstantOf(g_, n, 7)->dtype();
    q.w_scales = *ws;
    if (n.inputs.size() > 8 && n.inputs[8] != ir::kNoValue) {
      const Tensor* b = ConstantOf(g_, n, 8);
      if (b == nullptr || b->dtype() != DType::kInt32) return std::nullopt;
      q.bias = n.inputs[8];
    }
    return q;
  }

  // The DequantizeLinear producing input `i` of `n`, with constant per-tensor parameters.
  const Node* DequantizeInput(const Node& n, size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i] == ir::kNoValue) return nullptr;
    const NodeId p = g_.value(n.inputs[i]).producer;
    if (p == ir::kNoNode) return nullptr;
    const Node& dq = g_.node(p);
    return IsOnnx(dq, "DequantizeLinear") ? &dq : nullptr;
  }

  // QuantizeLinear(y) where y = Conv(DQ(x), DQ(w), [B]) or Relu of it, each read only here.
  std::optional<QConv> MatchQdq(NodeId q_id) const {
    const Node& qn = g_.node(q_id);
    if (qn.inputs.empty() || qn.outputs.size() != 1) return std::nullopt;
    const auto ys = ScalarFloat(ConstantOf(g_, qn, 1));
    const auto yz = ZeroPoint(ConstantOf(g_, qn, 2));
    // Without a zero point, QuantizeLinear writes uint8.
    if (!ys || !yz) return std::nullopt;
    QConv q;
    q.form = "QDQ Conv";
    q.y = qn.outputs[0];
    q.y_scale = *ys;
    q.y_zero_point = *yz;
    if (const Tensor* z = ConstantOf(g_, qn, 2)) q.y_type = z->dtype();
    if (qn.HasAttr("output_dtype")) return std::nullopt;  // opset 21's other output types
    q.replaced.push_back(q_id);
    ValueId v = qn.inputs[0];
    auto read_only_by = [&](ValueId value, NodeId reader) {
      return consumers_[value].size() == 1 && consumers_[value][0] == reader &&
             std::find(g_.outputs.begin(), g_.outputs.end(), value) == g_.outputs.end();
    };
    NodeId reader = q_id;
    NodeId p = g_.value(v).producer;
    if (p != ir::kNoNode && IsOnnx(g_.node(p), "Relu") && read_only_by(v, reader)) {
      q.post_ops.push_back({"Relu", 0, 0});
      q.replaced.push_back(p);
      reader = p;
      v = g_.node(p).inputs[0];
      p = g_.value(v).producer;
    }
    if (p == ir::kNoNode || !IsOnnx(g_.node(p), "Conv") || !read_only_by(v, reader)) {
      return std::nullopt;
    }
    const Node& conv = g_.node(p);
    q.conv = p;
    const Node* dx = DequantizeInput(conv, 0);
    const Node* dw = DequantizeInput(conv, 1);
    if (dx == nullptr || dw == nullptr || !Rank4(dx->inputs[0])) return std::nullopt;
    const auto xs = ScalarFloat(ConstantOf(g_, *dx, 1));
    const auto xz = ZeroPoint(ConstantOf(g_, *dx, 2));
    if (!xs || !xz) return std::nullopt;
    const Tensor* w = ConstantOf(g_, *dw, 0);
    if (!WeightsOk(w) || !AllZero(ConstantOf(g_, *dw, 2))) return std::nullopt;
    const auto ws = WeightScales(ConstantOf(g_, *dw, 1), w->dim(0));
    if (!ws) return std::nullopt;
    // Per-channel weight scales must run along the output channels.
    if (ws->size() > 1 && dw->GetInt("axis", 1) != 0) return std::nullopt;
    q.x = dx->inputs[0];
    q.x_scale = *xs;
    q.x_zero_point = *xz;
    q.w = dw->inputs[0];
    q.w_scales = *ws;
    if (conv.inputs.size() > 2 && conv.inputs[2] != ir::kNoValue) {
      const ValueId b = conv.inputs[2];
      if (g_.IsConstant(b) && g_.value(b).constant->dtype() == DType::kFloat32) {
        q.bias = b;
      } else if (const Node* db = DequantizeInput(conv, 2)) {
        // ONNX Runtime's int32 bias with scale x_scale * w_scale: keep it in accumulator units
        // when the scales say so exactly, else as the float the DequantizeLinear would give.
        const Tensor* bq = ConstantOf(g_, *db, 0);
        const Tensor* bs = ConstantOf(g_, *db, 1);
        if (bq == nullptr || bq->dtype() != DType::kInt32 || bs == nullptr ||
            bs->dtype() != DType::kFloat32 || !AllZeroInt32(ConstantOf(g_, *db, 2))) {
          return std::nullopt;
        }
        bool accumulator_units = bs->num_elements() == 1 || bs->num_elements() == w->dim(0);
        for (int64_t c = 0; accumulator_units && c < w->dim(0); ++c) {
          const float s = bs->data<float>()[bs->num_elements() == 1 ? 0 : c];
          accumulator_units = s == q.x_scale * q.w_scales[q.w_scales.size() == 1 ? 0 : c];
        }
        if (accumulator_units) {
          q.bias = db->inputs[0];
        } else {
          bias_float_[p] = Dequantized(*bq, *bs);
          q.bias = ir::kNoValue;  // made in Rewrite from bias_float_
        }
      } else {
        return std::nullopt;
      }
    }
    return q;
  }

  static bool AllZeroInt32(const Tensor* t) {
    if (t == nullptr) return true;
    if (t->dtype() != DType::kInt32) return false;
    for (int32_t v : t->span<int32_t>()) {
      if (v != 0) return false;
    }
    return true;
  }

  static Tensor Dequantized(const Tensor& q, const Tensor& scale) {
    Tensor out(DType::kFloat32, q.shape());
    for (int64_t i = 0; i < q.num_elements(); ++i) {
      out.data<float>()[i] = static_cast<float>(q.data<int32_t>()[i]) *
                             scale.data<float>()[scale.num_elements() == 1 ? 0 : i];
    }
    return out;
  }

  static std::vector<int64_t> Permuted(const ir::TensorType& t, const int perm[4]) {
    std::vector<int64_t> d(4, -1);
    if (!t.rank_known || t.rank() != 4) return d;
    for (int i = 0; i < 4; ++i) d[i] = t.dims[perm[i]].value;
    return d;
  }

  ValueId Transpose(ValueId v, bool to_nhwc, ValueId out = ir::kNoValue) {
    static const int kToNhwc[4] = {0, 2, 3, 1}, kToNchw[4] = {0, 3, 1, 2};
    const int* perm = to_nhwc ? kToNhwc : kToNchw;
    Node t;
    t.op = "Transpose";
    t.name = g_.UniqueName(g_.value(v).name + (to_nhwc ? "/nhwc" : "/nchw"));
    t.inputs = {v};
    t.attrs["perm"] = std::vector<int64_t>(perm, perm + 4);
    if (out == ir::kNoValue) {
      out = g_.AddValue(
          t.name, ir::TensorType::Of(g_.value(v).type.dtype, Permuted(g_.value(v).type, perm)));
    }
    t.outputs = {out};
    g_.AddNode(std::move(t));
    return out;
  }

  ValueId Nhwc(ValueId x) {
    auto it = nhwc_.find(x);
    if (it != nhwc_.end()) return it->second;
    return nhwc_[x] = Transpose(x, true);
  }

  void Rewrite(const QConv& q) {
    const Node conv = g_.node(q.conv);
    const ValueId x = Nhwc(q.x);
    Node n = Int8ConvReplacing(conv, q.post_ops, q.x_scale, q.x_zero_point, q.w_scales);
    const DType y_type = q.y_type;
    n.attrs["out_type"] = std::string(ir::Int8TypeName(y_type));
    n.attrs["y_scale"] = q.y_scale;
    n.attrs["y_zero_point"] = q.y_zero_point;
    ValueId bias = q.bias;
    auto fb = bias_float_.find(q.conv);
    if (fb != bias_float_.end())
      bias = g_.AddConstant(g_.UniqueName(conv.name + "/bias"), fb->second);
    n.inputs = {x, q.w};
    if (bias != ir::kNoValue) n.inputs.push_back(bias);
    static const int kToNhwc[4] = {0, 2, 3, 1};
    const ValueId y =
        g_.AddValue(g_.UniqueName(g_.value(q.y).name + "/nhwc"),
                    ir::TensorType::Of(y_type, Permuted(g_.value(q.y).type, kToNhwc)));
    n.outputs = {y};
    g_.node(q.conv).removed = true;
    for (NodeId r : q.replaced) g_.node(r).removed = true;
    g_.AddNode(std::move(n));
    nhwc_[q.y] = y;
    // NCHW for whoever else reads the value (nothing, once every reader is rewritten: then
    // dead-code elimination drops this transpose).
    Transpose(y, false, q.y);
    ctx_.Note(absl::StrCat(q.form, " '", conv.name, "' -> kiln Int8Conv (",
                           q.w_scales.size() > 1 ? "per-channel" : "per-tensor", " weights)"));
  }

  Graph& g_;
  PassContext& ctx_;
  std::vector<std::vector<NodeId>> consumers_;
  std::map<ValueId, ValueId> nhwc_;  // int8 NCHW value -> its NHWC form
  mutable std::map<NodeId, Tensor> bias_float_;
};

// Only under --allow_compression (PassOptions::compression set): an optimization must compute
// what the unoptimized graph computes, and this one may differ from the reference kernels by
// one step; without compression a quantized model runs on those kernels, exactly as ONNX
// defines it.
absl::Status FuseQdq(Graph& g, PassContext& ctx) {
  if (ctx.options().compression == nullptr) return absl::OkStatus();
  return QdqFuser(g, ctx).Run();
}

}  // namespace

KILN_REGISTER_PASS("fuse_qdq", 90, FuseQdq);

}  // namespace kiln::opt
