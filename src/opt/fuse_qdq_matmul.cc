// Already-quantized ONNX MatMuls on Kiln's int8 kernel: rewrites the forms ONNX Runtime's
// quantization tools write onto kiln::Int8MatMul (include/kiln/ir/compressed_matmul.h), which
// runs on oneDNN's u8 x s8 matmul instead of the reference loops of quantize_ops.cc.
//
//   QOperator (quantize_static):   QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)
//   dynamic (quantize_dynamic):    DynamicQuantizeLinear(x) -> MatMulInteger(x_q, b, x_zp, b_zp)
//                                  -> Cast -> Mul (the Cast and Mul stay: they are exact there)
//   QDQ (quantize_static, QDQ):    DequantizeLinear(x) -> MatMul(., DequantizeLinear(w)) or
//                                  Gemm(., DequantizeLinear(w), [DequantizeLinear(int32 bias)])
//                                  -> [Add(float bias)] -> [Relu] -> QuantizeLinear(y_scale, y_zp)
//                                  (the Add: onnxruntime's QDQ form for transformers, the bias
//                                  a float constant or DequantizeLinear of one)
//
// with a constant 8-bit weight matrix B [K, N] (Gemm's transB applied here) and constant
// scales and zero points: per tensor for A and Y, per tensor or per column for B, any zero
// points (the kernel applies them exactly in int32). A's zero point may also be
// DynamicQuantizeLinear's output, read at run time.
//
// Precision: MatMulInteger and QLinearMatMul are bit-identical to the reference kernels (the
// int32 sum is exact and the requantization is the reference's float expression, its scale
// computed here as the reference computes it). The QDQ form's reference is a float MatMul
// between DequantizeLinear and QuantizeLinear whose summation order is the float kernel's;
// the exact int32 sum may land on the other side of a rounding tie: at most one step. A float
// bias Add is folded into the int32 bias rounded to accumulator units, which moves the scaled
// sum by at most out_scale / 2 steps: done only where out_scale <= 1, so still within one step.
// MatMul -> Q -> DQ -> Add(bias) -> Q (the Add quantized as well) rewrites the MatMul -> Q and
// keeps the Add: folding it in would skip the middle Q's rounding and saturation.
//
// Without VNNI, the kernel keeps oneDNN's int16 pair sums from saturating by splitting weights
// beyond 7 bits into two 7-bit halves (exact, twice the multiply-adds); the log says which.
// The QDQ form is rewritten there only with 7-bit weights (ONNX Runtime's reduce_range): with
// 8-bit ones the split kernel is slower than the float MatMul the form otherwise runs as.
//
// Runs before constant folding (order 91), which would otherwise fold DequantizeLinear(w) into
// float weights and lose the model's int8 weights; only under --allow_compression, as
// fuse_qdq does.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/compressed_matmul.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"

namespace kiln::opt {
namespace {

bool Is8Bit(DType d) { return d == DType::kInt8 || d == DType::kUInt8; }

// Integer value i of an 8-bit (or int32) tensor.
int32_t IntAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt8:
      return t.data<int8_t>()[i];
    case DType::kUInt8:
      return t.data<uint8_t>()[i];
    default:
      return t.data<int32_t>()[i];
  }
}

// The weights as Int8MatMul takes them (see the contract): B - offset as int8 [K, N], the
// zero point minus the offset and the column sums, per column.
struct PreparedWeights {
  Tensor q, zero, colsum;
  bool seven_bits = false;
};

// `b` is 8-bit [K, N] (or [N, K] when `transposed`); `zero` null, one element or [N] of b's
// type. The offset centres B's range, so that B - offset fits int8 always and 7 bits whenever
// B's range allows (the symmetric int8 and reduce_range weights of ONNX Runtime need no offset).
std::optional<PreparedWeights> PrepareWeights(const Tensor& b, bool transposed,
                                              const Tensor* zero) {
  if (!Is8Bit(b.dtype()) || b.rank() != 2) return std::nullopt;
  const int64_t k = transposed ? b.dim(1) : b.dim(0), n = transposed ? b.dim(0) : b.dim(1);
  if (zero != nullptr && (zero->dtype() != b.dtype() || zero->rank() > 1 ||
                          (zero->num_elements() != 1 && zero->num_elements() != n))) {
    return std::nullopt;
  }
  int32_t lo = 255, hi = -128;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    lo = std::min(lo, IntAt(b, i));
    hi = std::max(hi, IntAt(b, i));
  }
  const int32_t offset = b.num_elements() == 0 ? 0 : (lo + hi + 1) >> 1;  // floor
  PreparedWeights w;
  w.seven_bits = hi - offset <= 64 && lo - offset >= -64;
  w.q = Tensor(DType::kInt8, Shape{k, n});
  w.zero = Tensor(DType::kInt32, Shape{n});
  w.colsum = Tensor(DType::kInt32, Shape{n});
  int8_t* q = w.q.data<int8_t>();
  int32_t* colsum = w.colsum.data<int32_t>();
  std::fill(colsum, colsum + n, 0);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int32_t v = IntAt(b, transposed ? j * k + i : i * n + j) - offset;
      q[i * n + j] = static_cast<int8_t>(v);
      colsum[j] += v;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const int32_t z = zero == nullptr ? 0 : IntAt(*zero, zero->num_elements() == 1 ? 0 : j);
    w.zero.data<int32_t>()[j] = z - offset;
  }
  return w;
}

// A float constant of one element or [n] elements, each finite and positive.
std::optional<std::vector<float>> Scales(const Tensor* t, int64_t n) {
  if (t == nullptr || t->dtype() != DType::kFloat32 || t->rank() > 1) return std::nullopt;
  if (t->num_elements() != 1 && t->num_elements() != n) return std::nullopt;
  std::vector<float> s(t->data<float>(), t->data<float>() + t->num_elements());
  for (float v : s) {
    if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  }
  return s;
}

// A one-element 8-bit constant zero point, or absent (kNoValue: zero).
bool ZeroPointOk(const GraphView& view, ValueId v) {
  if (v == kNoValue) return true;
  const Tensor* t = view.Constant(v);
  return t != nullptr && Is8Bit(t->dtype()) && t->num_elements() == 1;
}

ValueId Input(const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : kNoValue; }

class QdqMatMulFuser {
 public:
  QdqMatMulFuser(Graph& g, PassContext& ctx) : g_(g), view_(g), ctx_(ctx) {
    vnni_ = ctx.options().compression->vnni;
  }

  absl::Status Run() {
    KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, g_.TopologicalOrder());
    for (NodeId id : order) {
      const Node& n = g_.node(id);
      if (n.removed || !n.domain.empty()) continue;
      if (n.op == "QLinearMatMul") {
        RewriteQLinearMatMul(id);
      } else if (n.op == "MatMulInteger") {
        RewriteMatMulInteger(id);
      } else if (n.op == "QuantizeLinear") {
        RewriteQdq(id);
      }
    }
    return absl::OkStatus();
  }

 private:
  // The Int8MatMul reading `a` with weights `w`, a's zero point `a_zero` (kNoValue: 0) and an
  // int32 `bias` (kNoValue: none).
  Node Int8MatMul(const Node& like, ValueId a, const PreparedWeights& w, ValueId a_zero,
                  ValueId bias) {
    Node n;
    n.op = ir::kInt8MatMulOp;
    n.domain = "kiln";
    n.name = like.name;
    const std::string base = LayerName(like);
    n.attrs[ir::kCompressedLayerAttr] = base;
    n.inputs = {a,
                g_.AddConstant(g_.UniqueName(base + "/wq"), w.q),
                g_.AddConstant(g_.UniqueName(base + "/w_zero"), w.zero),
                g_.AddConstant(g_.UniqueName(base + "/w_colsum"), w.colsum),
                a_zero,
                bias};
    while (!n.inputs.empty() && n.inputs.back() == kNoValue) n.inputs.pop_back();
    return n;
  }

  // The layer's name for the accuracy guard (its keep_fp32 set) and the report: the node's
  // name, or its output's when it has none.
  std::string LayerName(const Node& n) const {
    if (!n.name.empty()) return n.name;
    if (!n.outputs.empty() && !g_.value(n.outputs[0]).name.empty()) {
      return g_.value(n.outputs[0]).name;
    }
    // Unnamed node and value: its output's id, the same each time the guard compresses the
    // same source graph again.
    return absl::StrCat(n.op, "#", n.outputs.empty() ? -1 : n.outputs[0]);
  }
  bool KeptFp32(const Node& n) const {
    return ctx_.options().compression->keep_fp32.contains(LayerName(n));
  }

  // Sets the requantization: out_scales[j] = a_scale * w_scale[j] / y_scale, in float and in
  // that order, as the reference kernel computes it.
  // `y_zero` is read before the Int8MatMul's constants are added (which may move the values).
  struct OutputZero {
    DType type = DType::kUInt8;  // QuantizeLinear without a zero point writes uint8
    int64_t value = 0;
  };
  static OutputZero OutputZeroOf(const Tensor* y_zero) {
    if (y_zero == nullptr) return {};
    return {y_zero->dtype(), IntAt(*y_zero, 0)};
  }

  static void Requantize(Node& n, float a_scale, const std::vector<float>& w_scales, float y_scale,
                         OutputZero y_zero) {
    std::vector<float> out;
    for (float w : w_scales) out.push_back(a_scale * w / y_scale);
    n.attrs["out_scales"] = out;
    n.attrs["out_type"] = std::string(ir::Int8TypeName(y_zero.type));
    n.attrs["y_zero_point"] = y_zero.value;
  }

  std::string WeightNote(const PreparedWeights& w, const std::vector<float>* scales) const {
    const int64_t k = w.q.dim(0), n = w.q.dim(1);
    std::string s = absl::StrCat("[", k, "x", n, "]");
    if (scales != nullptr) {
      absl::StrAppend(&s, scales->size() > 1 ? ", per-column" : ", per-tensor", " weight scales");
    }
    if (w.seven_bits) {
      absl::StrAppend(&s, ", 7-bit weights");
    } else if (!vnni_) {
      absl::StrAppend(&s, ", 8-bit weights split in two 7-bit halves (no VNNI: int16 pair sums)");
    }
    return s;
  }

  void Replace(NodeId id, Node replacement) {
    Node& old = g_.node(id);
    replacement.outputs = old.outputs;
    old = std::move(replacement);
  }

  void RewriteQLinearMatMul(NodeId id) {
    const Node n = g_.node(id);
    if (n.inputs.size() != 8 || n.outputs.size() != 1 || KeptFp32(n)) return;
    const Tensor* b = view_.Constant(n.inputs[3]);
    if (b == nullptr || b->rank() != 2) return;
    const auto a_scale = Scales(view_.Constant(n.inputs[1]), 1);
    const auto b_scale = Scales(view_.Constant(n.inputs[4]), b->dim(1));
    const auto y_scale = Scales(view_.Constant(n.inputs[6]), 1);
    const Tensor* y_zero = view_.Constant(n.inputs[7]);
    if (!a_scale || !b_scale || !y_scale || !ZeroPointOk(view_, n.inputs[2]) ||
        n.inputs[2] == kNoValue || y_zero == nullptr || !ZeroPointOk(view_, n.inputs[7])) {
      return;
    }
    const auto w = PrepareWeights(*b, false, view_.Constant(n.inputs[5]));
    if (!w) return;
    const OutputZero zero = OutputZeroOf(y_zero);
    Node out = Int8MatMul(n, n.inputs[0], *w, n.inputs[2], kNoValue);
    Requantize(out, (*a_scale)[0], *b_scale, (*y_scale)[0], zero);
    Replace(id, std::move(out));
    ctx_.Note(absl::StrCat("QLinearMatMul '", LayerName(n), "' -> kiln Int8MatMul (",
                           WeightNote(*w, &*b_scale), ")"));
  }

  void RewriteMatMulInteger(NodeId id) {
    const Node n = g_.node(id);
    if (n.inputs.size() < 2 || n.outputs.size() != 1 || KeptFp32(n)) return;
    const Tensor* b = view_.Constant(n.inputs[1]);
    if (b == nullptr || b->rank() != 2) return;
    // A's zero point: absent, a one-element constant, or DynamicQuantizeLinear's (a scalar).
    const ValueId a_zero = Input(n, 2);
    if (a_zero != kNoValue && !view_.Constant(a_zero)) {
      const ir::Value& v = g_.value(a_zero);
      if (v.producer == kNoNode || !Is(&g_.node(v.producer), "DynamicQuantizeLinear") ||
          v.producer_output != 2) {
        return;
      }
    } else if (!ZeroPointOk(view_, a_zero)) {
      return;
    }
    const ValueId b_zero = Input(n, 3);
    if (b_zero != kNoValue && view_.Constant(b_zero) == nullptr) return;
    const auto w = PrepareWeights(*b, false, view_.Constant(b_zero));
    if (!w) return;
    Replace(id, Int8MatMul(n, n.inputs[0], *w, a_zero, kNoValue));
    ctx_.Note(absl::StrCat("MatMulInteger '", LayerName(n), "' -> kiln Int8MatMul (",
                           WeightNote(*w, nullptr), ")"));
  }

  // The live DequantizeLinear producing `v`, or null.
  const Node* Dequantize(ValueId v) {
    const Node* p = v == kNoValue ? nullptr : view_.Producer(v);
    if (!Is(p, "DequantizeLinear") || p->GetInt("block_size", 0) != 0) return nullptr;
    return p;
  }

  // QuantizeLinear(y) where y = [Relu](MatMul or Gemm(DQ(x), DQ(w), [DQ(bias)])), each
  // intermediate read only by the next node.
  void RewriteQdq(NodeId q_id) {
    const Node qn = g_.node(q_id);
    if (qn.inputs.empty() || qn.outputs.size() != 1 || qn.HasAttr("output_dtype")) return;
    const auto y_scale = Scales(view_.Constant(Input(qn, 1)), 1);
    const ValueId y_zero_id = Input(qn, 2);
    if (!y_scale || !ZeroPointOk(view_, y_zero_id)) return;
    std::vector<NodeId> replaced;
    ValueId v = qn.inputs[0];
    const Node* p = view_.Producer(v);
    bool relu = false;
    if (Is(p, "Relu") && view_.IsPrivate(v)) {
      relu = true;
      replaced.push_back(IdOf(g_, p));
      v = p->inputs[0];
      p = view_.Producer(v);
    }
    // A float bias added after the product (onnxruntime's QDQ form for transformers:
    // MatMul -> Add(bias) -> Q), as a constant or DequantizeLinear(constant).
    std::optional<std::vector<float>> add_bias;
    if (Is(p, "Add") && view_.IsPrivate(v) && p->inputs.size() == 2 && p->outputs.size() == 1) {
      for (int side = 0; side < 2 && !add_bias; ++side) {
        const Node* product = view_.Producer(p->inputs[side]);
        if (!Is(product, "MatMul") && !Is(product, "Gemm")) continue;
        add_bias = FloatBias(p->inputs[1 - side]);
        if (add_bias) {
          replaced.push_back(IdOf(g_, p));
          v = p->inputs[side];
          p = product;
        }
      }
    }
    if (!view_.IsPrivate(v) || p == nullptr || p->outputs.size() != 1) return;
    const bool gemm = Is(p, "Gemm");
    if ((!gemm && !Is(p, "MatMul")) || KeptFp32(*p)) return;
    if (gemm && (p->GetInt("transA", 0) != 0 || p->GetFloat("alpha", 1) != 1.0f ||
                 p->GetFloat("beta", 1) != 1.0f)) {
      return;
    }
    const bool trans_b = gemm && p->GetInt("transB", 0) != 0;
    const Node* dx = Dequantize(Input(*p, 0));
    const Node* dw = Dequantize(Input(*p, 1));
    if (dx == nullptr || dw == nullptr) return;
    const auto x_scale = Scales(view_.Constant(Input(*dx, 1)), 1);
    if (!x_scale || !ZeroPointOk(view_, Input(*dx, 2))) return;
    const Tensor* b = view_.Constant(dw->inputs[0]);
    if (b == nullptr || b->rank() != 2) return;
    const int64_t n_cols = trans_b ? b->dim(0) : b->dim(1);
    const auto w_scale = Scales(view_.Constant(Input(*dw, 1)), n_cols);
    if (!w_scale) return;
    // Per-column scales run along B's output axis: 1 for MatMul's [K, N], 0 for [N, K].
    if (w_scale->size() > 1 && n_cols > 1) {
      int64_t axis = dw->GetInt("axis", 1);
      if (axis < 0) axis += 2;
      if (axis != (trans_b ? 0 : 1)) return;
    }
    const ValueId w_zero_id = Input(*dw, 2);
    if (w_zero_id != kNoValue && view_.Constant(w_zero_id) == nullptr) return;
    const auto w = PrepareWeights(*b, trans_b, view_.Constant(w_zero_id));
    if (!w) return;
    // Without VNNI, 8-bit weights would take the split path (twice the int8 work), measured
    // slower than the float MatMul this form leaves after constant folding (0.57x at batch 1,
    // 1.01x at batch 32, MLP 512-2048-2048-512 under the AVX2 cap; docs/performance/
    // compression.md). Unlike QLinearMatMul/MatMulInteger, whose alternative is the reference
    // loops, the QDQ form's alternative is the reference itself: keep it.
    if (!vnni_ && !w->seven_bits) return;
    // Gemm's bias, when ONNX Runtime wrote it: int32 in accumulator units (its scale exactly
    // x_scale * w_scale, zero point 0), added to the int32 sum.
    ValueId bias = kNoValue;
    const ValueId c = Input(*p, 2);
    if (gemm && c != kNoValue) {
      const Node* db = Dequantize(c);
      const Tensor* bq = db ? view_.Constant(db->inputs[0]) : nullptr;
      const Tensor* bs = db ? view_.Constant(Input(*db, 1)) : nullptr;
      const Tensor* bz = db ? view_.Constant(Input(*db, 2)) : nullptr;
      if (bq == nullptr || bq->dtype() != DType::kInt32 || bq->rank() != 1 ||
          bq->num_elements() != n_cols || bs == nullptr || bs->dtype() != DType::kFloat32 ||
          (bs->num_elements() != 1 && bs->num_elements() != n_cols) ||
          (Input(*db, 2) != kNoValue && bz == nullptr)) {
        return;
      }
      for (int64_t j = 0; j < n_cols; ++j) {
        const float want = (*x_scale)[0] * (*w_scale)[w_scale->size() == 1 ? 0 : j];
        if (bs->data<float>()[bs->num_elements() == 1 ? 0 : j] != want) return;
        if (bz != nullptr && IntAt(*bz, bz->num_elements() == 1 ? 0 : j) != 0) return;
      }
      bias = db->inputs[0];
    }
    if (add_bias) {
      const std::vector<float> ws_per_col = [&] {
        std::vector<float> s(n_cols);
        for (int64_t j = 0; j < n_cols; ++j) s[j] = (*w_scale)[w_scale->size() == 1 ? 0 : j];
        return s;
      }();
      const Tensor* c_int = bias == kNoValue ? nullptr : view_.Constant(bias);
      const int64_t k = w->q.dim(0);
      std::optional<Tensor> merged =
          MergeFloatBias(*add_bias, (*x_scale)[0], ws_per_col, (*y_scale)[0], c_int, k);
      if (!merged) return;
      bias = g_.AddConstant(g_.UniqueName(LayerName(*p) + "/bias"), *merged);
    }
    replaced.push_back(IdOf(g_, p));
    const Node matmul = *p;
    const OutputZero zero = OutputZeroOf(view_.Constant(y_zero_id));
    Node out = Int8MatMul(matmul, dx->inputs[0], *w, Input(*dx, 2), bias);
    Requantize(out, (*x_scale)[0], *w_scale, (*y_scale)[0], zero);
    if (relu) out.attrs["relu"] = int64_t{1};
    const std::string name = LayerName(matmul);
    for (NodeId r : replaced) g_.node(r).removed = true;
    Replace(q_id, std::move(out));
    view_.Refresh();
    ctx_.Note(absl::StrCat(
        "QDQ ", gemm ? "Gemm" : "MatMul", add_bias ? "+Add(float bias)" : "", relu ? "+Relu" : "",
        " '", name, "' -> kiln Int8MatMul (", WeightNote(*w, &*w_scale),
        add_bias ? ", float bias rounded to accumulator units: within one step" : "", ")"));
  }

  // The float values of a constant bias `v` of rank <= 1 (a float constant, or
  // DequantizeLinear of a constant computed as the reference does: float(q - zero) * scale),
  // all finite; nullopt otherwise. Its length is checked against N by the caller.
  std::optional<std::vector<float>> FloatBias(ValueId v) {
    if (const Tensor* t = view_.Constant(v)) {
      if (t->dtype() != DType::kFloat32 || t->rank() > 1) return std::nullopt;
      std::vector<float> b(t->data<float>(), t->data<float>() + t->num_elements());
      for (float x : b) {
        if (!std::isfinite(x)) return std::nullopt;
      }
      return b;
    }
    const Node* dq = Dequantize(v);
    if (dq == nullptr) return std::nullopt;
    const Tensor* q = view_.Constant(dq->inputs[0]);
    const Tensor* scale = view_.Constant(Input(*dq, 1));
    const Tensor* zero = Input(*dq, 2) == kNoValue ? nullptr : view_.Constant(Input(*dq, 2));
    if (q == nullptr || q->rank() > 1 || (!Is8Bit(q->dtype()) && q->dtype() != DType::kInt32) ||
        scale == nullptr || scale->dtype() != DType::kFloat32 ||
        (Input(*dq, 2) != kNoValue && (zero == nullptr || zero->dtype() != q->dtype()))) {
      return std::nullopt;
    }
    const int64_t n = q->num_elements();
    auto at = [n](const Tensor& t, int64_t i) { return t.num_elements() == 1 ? 0 : i; };
    if ((scale->num_elements() != 1 && scale->num_elements() != n) ||
        (zero != nullptr && zero->num_elements() != 1 && zero->num_elements() != n)) {
      return std::nullopt;
    }
    std::vector<float> b(n);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t z = zero == nullptr ? 0 : IntAt(*zero, at(*zero, i));
      b[i] = static_cast<float>(IntAt(*q, i) - z) * scale->data<float>()[at(*scale, i)];
      if (!std::isfinite(b[i])) return std::nullopt;
    }
    return b;
  }

  // The float bias in accumulator units (x_scale * w_scale[j]), rounded to the nearest
  // integer and added to the int32 bias `c` (or zero), as Int8MatMul's bias input. Rounding
  // moves the sum by at most half a unit, out_scale / 2 output steps: with out_scale <= 1 the
  // quantized result stays within one step of the float reference (the bound the QDQ form
  // already has). Nullopt where that does not hold, or the int32 sum could overflow where the
  // float reference does not (|bias| + K * 255 * 255 must fit int32).
  static std::optional<Tensor> MergeFloatBias(const std::vector<float>& add, float x_scale,
                                              const std::vector<float>& w_scales, float y_scale,
                                              const Tensor* c, int64_t k) {
    const int64_t n = static_cast<int64_t>(w_scales.size());
    if (static_cast<int64_t>(add.size()) != n && add.size() != 1) return std::nullopt;
    Tensor out(DType::kInt32, Shape{n});
    const double limit = 2147483647.0 - static_cast<double>(k) * 255.0 * 255.0;
    for (int64_t j = 0; j < n; ++j) {
      const double unit = static_cast<double>(x_scale) * w_scales[j];
      if (!(x_scale * w_scales[j] / y_scale <= 1.0f)) return std::nullopt;
      const double b = std::nearbyint(add[add.size() == 1 ? 0 : j] / unit) +
                       (c == nullptr ? 0.0 : static_cast<double>(c->data<int32_t>()[j]));
      if (!(std::fabs(b) <= limit)) return std::nullopt;
      out.data<int32_t>()[j] = static_cast<int32_t>(b);
    }
    return out;
  }

  Graph& g_;
  GraphView view_;
  PassContext& ctx_;
  bool vnni_ = false;
};

// Only under --allow_compression, as fuse_qdq: without it a quantized model runs on the
// reference kernels, exactly as ONNX defines it (the QDQ form may move by one step here).
absl::Status FuseQdqMatMul(Graph& g, PassContext& ctx) {
  if (ctx.options().compression == nullptr) return absl::OkStatus();
  return QdqMatMulFuser(g, ctx).Run();
}

}  // namespace

KILN_REGISTER_PASS("fuse_qdq_matmul", 91, FuseQdqMatMul);

}  // namespace kiln::opt
