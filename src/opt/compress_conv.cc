// Static int8 quantization of 2-D convolutions from calibrated ranges
// (CompressionOptions::int8_static, activation_ranges; include/kiln/opt/compression.h).
//
// Each Conv / FusedConv with constant weights whose input, output (and residual) ranges were
// calibrated becomes a kiln::Int8Conv (include/kiln/ir/int8_ops.h): weights int8 per output
// channel, symmetric; activations uint8 when their calibrated range is never negative (the
// output of a Relu), int8 otherwise, zero point 0; the requantization to the next layer's
// scale, the residual sum and Relu/Clip fused into the one oneDNN primitive. MaxPools between
// such convolutions become kiln::Int8Pool. A value stays int8 when it is produced by one of
// these nodes and every reader is one of them (as input or residual); elsewhere the chain
// ends: the producing conv writes float itself (the dequantization is its output scale), a
// pool is followed by an Int8Dequantize, and a float value entering a chain gets one shared
// Int8Quantize. So Conv -> ReLU -> MaxPool -> Conv and ResNet's residual blocks stay int8
// from the first quantization to the last conv.
//
// Without VNNI (CompressionOptions::vnni false) the u8 x s8 products are summed in pairs into
// 16 bits (vpmaddubsw) and can saturate; weights are then quantized to 7 bits (|q| <= 63, as
// ONNX Runtime's reduce_range does), which keeps every pair sum below 2^15.
//
// Without VNNI, where fp32 convolutions may run as Winograd (CompressionOptions::
// fp32_winograd), a graph whose Winograd-shaped convolutions carry most of its convolution
// work keeps every convolution fp32: their Winograd form does a quarter of the multiplies and
// int8 without VNNI has only about twice fp32's multiply rate, and int8 chains cut around them
// would quantize, dequantize and reorder at every border. ResNet-18 capped to AVX2 (Kiln's
// AVX2 Winograd), batch 32: all fp32 128.5 images/s, every conv int8 115.5, only the others
// int8 94.2. The log says so.
//
// Int8 values are channels-last by shape (int8_ops.h), so every value this pass reads or
// writes keeps ir::MemoryLayout::kPlain; the float values at chain borders are reset to
// plain here and the layout pass (order 400, after this one) recomputes the rest.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/opt/pass.h"
#include "opt/graph_view.h"
#include "opt/winograd_share.h"

namespace kiln::opt {
namespace {

struct QuantParams {
  DType dtype = DType::kInvalid;  // kUInt8 or kInt8
  float scale = 1;
};

QuantParams ParamsFor(const ActivationRange& r) {
  QuantParams p;
  const float absmax = std::max(std::fabs(r.min), std::fabs(r.max));
  // A value that is all zeros over the calibration data: any scale represents it.
  const float bound = absmax > 0 && std::isfinite(absmax) ? absmax : 1.0f;
  if (r.min >= 0) {
    p.dtype = DType::kUInt8;
    p.scale = bound / 255.0f;
  } else {
    p.dtype = DType::kInt8;
    p.scale = bound / 127.0f;
  }
  return p;
}

bool IsConv(const Node& n) { return (n.domain.empty() && n.op == "Conv") || ir::IsFusedConv(n); }

bool IsRank4Float(const Graph& g, ValueId v) {
  const ir::TensorType& t = g.value(v).type;
  return (t.dtype == DType::kFloat32 || t.dtype == DType::kInvalid) && t.rank_known &&
         t.rank() == 4;
}

class Int8ConvRewriter {
 public:
  Int8ConvRewriter(Graph& g, PassContext& ctx, const CompressionOptions& options)
      : g_(g), ctx_(ctx), options_(options) {}

  absl::Status Run() {
    consumers_ = g_.Consumers();
    graph_outputs_ = std::set<ValueId>(g_.outputs.begin(), g_.outputs.end());
    std::string winograd_share;
    if (!options_.vnni && options_.fp32_winograd &&
        WinogradCarriesMostWork(g_, 8, &winograd_share)) {
      ctx_.Note(
          absl::StrCat("Conv layers kept fp32: without VNNI, fp32 Winograd is faster and "
                       "its 3x3 convolutions carry ",
                       winograd_share, " of the convolutions' multiply-adds"));
      return absl::OkStatus();
    }
    for (NodeId id = 0; id < g_.num_nodes(); ++id) {
      const Node& n = g_.node(id);
      if (n.removed) continue;
      if (ConvCandidate(n) || PoolCandidate(n)) selected_.insert(id);
    }
    if (selected_.empty()) return absl::OkStatus();
    Settle();
    if (selected_.empty()) return absl::OkStatus();
    KILN_ASSIGN_OR_RETURN(std::vector<NodeId> order, g_.TopologicalOrder());
    for (NodeId id : order) {
      if (!selected_.count(id)) continue;
      if (IsConv(g_.node(id))) {
        RewriteConv(id);
      } else {
        RewritePool(id);
      }
    }
    return absl::OkStatus();
  }

 private:
  const ActivationRange* Range(ValueId v) const {
    auto it = options_.activation_ranges.find(g_.value(v).name);
    if (it == options_.activation_ranges.end()) return nullptr;
    if (!std::isfinite(it->second.min) || !std::isfinite(it->second.max)) return nullptr;
    return &it->second;
  }

  bool ConvCandidate(const Node& n) const {
    if (!IsConv(n) || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
    if (options_.keep_fp32.count(n.name)) return false;
    const ValueId x = n.inputs[0], w = n.inputs[1], y = n.outputs[0];
    if (x == ir::kNoValue || w == ir::kNoValue || !g_.IsConstant(w)) return false;
    const Tensor& weights = *g_.value(w).constant;
    if (weights.dtype() != DType::kFloat32 || weights.rank() != 4) return false;
    if (!IsRank4Float(g_, x) || Range(x) == nullptr || Range(y) == nullptr) return false;
    // A conv the model quantized itself (QDQ: DequantizeLinear before, QuantizeLinear after)
    // that fuse_qdq left (weights it cannot take) keeps the model's own scales: calibrated
    // ones would quantize its input a second time, on another grid.
    if (ProducedBy(x, "DequantizeLinear") || ReadBy(y, "QuantizeLinear")) return false;
    if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue && n.inputs[2] != ResidualOf(n)) {
      const ir::TensorType& b = g_.value(n.inputs[2]).type;
      if (b.dtype != DType::kFloat32 && b.dtype != DType::kInvalid) return false;
    }
    const std::vector<ir::PostOp> post_ops = ir::GetPostOps(n);
    for (size_t i = 0; i < post_ops.size(); ++i) {
      const ir::PostOp& p = post_ops[i];
      if (p.kind == ir::kResidualPostOp) {
        // oneDNN sums first; an Add after an activation is another computation.
        if (i != 0 || Range(ResidualOf(n)) == nullptr || !IsRank4Float(g_, ResidualOf(n))) {
          return false;
        }
      } else if (p.kind == "LeakyRelu") {
        if (!(p.alpha > 0)) return false;
      } else if (p.kind != "Relu" && p.kind != "Clip") {
        return false;
      }
    }
    return true;
  }

  bool ProducedBy(ValueId v, const char* op) const {
    const NodeId p = g_.value(v).producer;
    return p != ir::kNoNode && g_.node(p).domain.empty() && g_.node(p).op == op;
  }
  bool ReadBy(ValueId v, const char* op) const {
    for (NodeId c : consumers_[v]) {
      if (g_.node(c).domain.empty() && g_.node(c).op == op) return true;
    }
    return false;
  }

  static ValueId ResidualOf(const Node& n) {
    const int i = ir::ResidualInput(n);
    return i < 0 ? ir::kNoValue : n.inputs[i];
  }

  bool PoolCandidate(const Node& n) const {
    if (!n.domain.empty() || n.op != "MaxPool" || n.inputs.size() != 1) return false;
    if (n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue) return false;  // Indices
    if (options_.keep_fp32.count(n.name)) return false;
    if (n.GetInts("kernel_shape").size() != 2 || n.GetInt("storage_order", 0) != 0) return false;
    for (int64_t d : n.GetInts("dilations")) {
      if (d != 1) return false;
    }
    return IsRank4Float(g_, n.inputs[0]) && Range(n.inputs[0]) != nullptr;
  }

  bool Selected(NodeId id) const { return id != ir::kNoNode && selected_.count(id) > 0; }

  // Whether `reader` (selected) reads `v` where it can take an int8 value: a conv's X or its
  // residual when the conv writes int8; a pool's X.
  bool ReadsInt8(const Node& reader, ValueId v) const {
    for (size_t i = 0; i < reader.inputs.size(); ++i) {
      if (reader.inputs[i] != v) continue;
      if (i == 0) continue;
      if (IsConv(reader) && static_cast<int>(i) == ir::ResidualInput(reader) &&
          int8_values_.count(reader.outputs[0])) {
        continue;
      }
      return false;
    }
    return true;
  }

  // Decides which values stay int8 and drops pools whose input would not be int8, until
  // nothing changes (each round only removes).
  void Settle() {
    for (bool changed = true; changed;) {
      changed = false;
      int8_values_.clear();
      // Optimistic: outputs of selected nodes read only by selected nodes.
      for (NodeId id : selected_) {
        const ValueId y = g_.node(id).outputs[0];
        if (graph_outputs_.count(y) || consumers_[y].empty()) continue;
        bool all = true;
        for (NodeId c : consumers_[y]) all = all && Selected(c);
        if (all) int8_values_.insert(y);
      }
      // A residual read by a conv that writes float must be float; repeat until stable.
      for (bool shrunk = true; shrunk;) {
        shrunk = false;
        for (auto it = int8_values_.begin(); it != int8_values_.end();) {
          bool ok = true;
          for (NodeId c : consumers_[*it]) ok = ok && ReadsInt8(g_.node(c), *it);
          if (ok) {
            ++it;
          } else {
            it = int8_values_.erase(it);
            shrunk = true;
          }
        }
      }
      for (auto it = selected_.begin(); it != selected_.end();) {
        const Node& n = g_.node(*it);
        if (!IsConv(n) && !int8_values_.count(n.inputs[0])) {
          it = selected_.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
    }
  }

  static std::vector<int64_t> NhwcDims(const ir::TensorType& nchw) {
    std::vector<int64_t> d(4, -1);
    if (!nchw.rank_known || nchw.rank() != 4) return d;
    const int perm[4] = {0, 2, 3, 1};
    for (int i = 0; i < 4; ++i) d[i] = nchw.dims[perm[i]].value;
    return d;
  }

  // The int8 form of float value `v`: the value a rewritten producer wrote, or the output of
  // one Int8Quantize per value.
  std::pair<ValueId, QuantParams> Int8Input(ValueId v) {
    auto it = int8_of_.find(v);
    if (it != int8_of_.end()) return it->second;
    const QuantParams p = ParamsFor(*Range(v));
    g_.value(v).layout = ir::MemoryLayout::kPlain;  // Int8Quantize reads NCHW
    Node q;
    q.op = ir::kInt8QuantizeOp;
    q.domain = "kiln";
    q.name = g_.UniqueName(g_.value(v).name + "/quantize");
    q.inputs = {v};
    q.attrs["scale"] = p.scale;
    q.attrs["zero_point"] = int64_t{0};
    q.attrs["to"] = std::string(ir::Int8TypeName(p.dtype));
    const ValueId out =
        g_.AddValue(q.name, ir::TensorType::Of(p.dtype, NhwcDims(g_.value(v).type)));
    q.outputs = {out};
    g_.AddNode(std::move(q));
    ++quantizes_;
    int8_of_[v] = {out, p};
    return int8_of_[v];
  }

  // A new int8 value standing for float value `v`.
  ValueId NewInt8Value(ValueId v, const QuantParams& p) {
    const ValueId out = g_.AddValue(g_.UniqueName(g_.value(v).name + "/int8"),
                                    ir::TensorType::Of(p.dtype, NhwcDims(g_.value(v).type)));
    int8_of_[v] = {out, p};
    return out;
  }

  void RewriteConv(NodeId id) {
    const Node old = g_.node(id);
    g_.node(id).removed = true;
    const int qmax_w = options_.vnni ? 127 : 63;
    // Weights: symmetric int8 per output channel.
    const Tensor& w = *g_.value(old.inputs[1]).constant;
    const int64_t m = w.dim(0), per = w.num_elements() / std::max<int64_t>(m, 1);
    Tensor wq(DType::kInt8, w.shape());
    std::vector<float> w_scales(m);
    for (int64_t o = 0; o < m; ++o) {
      const float* src = w.data<float>() + o * per;
      float absmax = 0;
      for (int64_t i = 0; i < per; ++i) {
        if (std::isfinite(src[i])) absmax = std::max(absmax, std::fabs(src[i]));
      }
      w_scales[o] = absmax > 0 ? absmax / qmax_w : 1.0f;
      int8_t* dst = wq.data<int8_t>() + o * per;
      for (int64_t i = 0; i < per; ++i) {
        const float q = std::nearbyint(src[i] / w_scales[o]);
        dst[i] = static_cast<int8_t>(
            std::clamp(std::isnan(q) ? 0.0f : q, float(-qmax_w), float(qmax_w)));
      }
    }
    const ValueId wq_value =
        g_.AddConstant(g_.UniqueName(g_.value(old.inputs[1]).name + "/int8"), std::move(wq));

    const auto [x, x_params] = Int8Input(old.inputs[0]);
    Node n = Int8ConvReplacing(old, ir::GetPostOps(old), x_params.scale, 0, w_scales);
    const ValueId bias =
        old.inputs.size() > 2 && old.inputs[2] != ResidualOf(old) ? old.inputs[2] : ir::kNoValue;
    n.inputs = {x, wq_value, bias};
    const ValueId y = old.outputs[0];
    const bool int8_out = int8_values_.count(y) > 0;
    const ValueId residual = ResidualOf(old);
    std::string detail;
    if (int8_out) {
      const QuantParams yp = ParamsFor(*Range(y));
      n.attrs["out_type"] = std::string(ir::Int8TypeName(yp.dtype));
      n.attrs["y_scale"] = yp.scale;
      n.attrs["y_zero_point"] = int64_t{0};
      if (residual != ir::kNoValue) {
        // Its own type and scale: the kernel sums uint8 into int8 and the other way round.
        auto [r, rp] = Int8Input(residual);
        n.attrs["r_scale"] = rp.scale;
        n.attrs["r_zero_point"] = int64_t{0};
        n.inputs.push_back(r);
      }
      n.outputs = {NewInt8Value(y, yp)};
      detail = ir::Int8TypeName(yp.dtype);
    } else {
      n.attrs["out_type"] = std::string("float");
      if (residual != ir::kNoValue) {
        g_.value(residual).layout = ir::MemoryLayout::kPlain;
        n.inputs.push_back(residual);
      }
      g_.value(y).layout = ir::MemoryLayout::kPlain;
      n.outputs = {y};
      detail = "float (chain end)";
    }
    // The bias slot stays (absent) when there is a residual, as in FusedConv.
    if (bias == ir::kNoValue && residual == ir::kNoValue) n.inputs.resize(2);
    g_.AddNode(std::move(n));
    ctx_.Note(absl::StrCat("Conv '", old.name, "' -> int8 (", ir::Int8TypeName(x_params.dtype),
                           " in, ", detail, " out, ", options_.vnni ? "8" : "7",
                           "-bit weights per channel)"));
  }

  void RewritePool(NodeId id) {
    const Node old = g_.node(id);
    g_.node(id).removed = true;
    const auto [x, xp] = Int8Input(old.inputs[0]);
    Node n;
    n.op = ir::kInt8PoolOp;
    n.domain = "kiln";
    n.name = old.name;
    n.attrs = old.attrs;
    n.attrs["mode"] = std::string("max");
    n.inputs = {x};
    const ValueId y = old.outputs[0];
    // Max pooling commutes with the quantization: the output keeps the input's scale.
    if (int8_values_.count(y)) {
      n.outputs = {NewInt8Value(y, xp)};
      g_.AddNode(std::move(n));
    } else {
      const ValueId q = g_.AddValue(g_.UniqueName(g_.value(y).name + "/int8"),
                                    ir::TensorType::Of(xp.dtype, NhwcDims(g_.value(y).type)));
      n.outputs = {q};
      g_.AddNode(std::move(n));
      Node d;
      d.op = ir::kInt8DequantizeOp;
      d.domain = "kiln";
      d.name = g_.UniqueName(old.name + "/dequantize");
      d.inputs = {q};
      d.outputs = {y};
      d.attrs["scale"] = xp.scale;
      d.attrs["zero_point"] = int64_t{0};
      g_.value(y).layout = ir::MemoryLayout::kPlain;
      g_.AddNode(std::move(d));
    }
    ctx_.Note(absl::StrCat("MaxPool '", old.name, "' -> int8"));
  }

  Graph& g_;
  PassContext& ctx_;
  const CompressionOptions& options_;
  std::vector<std::vector<NodeId>> consumers_;
  std::set<ValueId> graph_outputs_;
  std::set<NodeId> selected_;
  std::set<ValueId> int8_values_;  // float values (ids of the input graph) that become int8
  std::map<ValueId, std::pair<ValueId, QuantParams>> int8_of_;
  int quantizes_ = 0;
};

absl::Status CompressConvInt8(Graph& g, PassContext& ctx) {
  const CompressionOptions* options = ctx.options().compression;
  if (options == nullptr || !options->int8_static || options->activation_ranges.empty()) {
    return absl::OkStatus();
  }
  return Int8ConvRewriter(g, ctx, *options).Run();
}

}  // namespace

// After fusion (300: post-ops and residuals are in place, and the calibrated value names are
// those of the fused graph), before the layout pass (400), which must see the int8 nodes.
KILN_REGISTER_PASS("int8_static_conv", 390, CompressConvInt8);

}  // namespace kiln::opt
