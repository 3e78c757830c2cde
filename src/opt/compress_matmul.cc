// Compression of Linear layers (MatMul/Gemm with a constant weight matrix), when
// PassOptions::compression allows it:
//  - int8_dynamic_matmul: weights quantized once here (symmetric, per output channel; 7-bit
//    without VNNI), activations per row at run time: kiln::DynamicQuantMatMul.
//  - bf16: weights stored as bfloat16: kiln::Bf16MatMul (layers int8 does not take).
// The operator contract is include/kiln/ir/compressed_matmul.h. Layers named in
// keep_fp32 (the accuracy guard's decisions) stay as they are.
//
// The pass runs after fusion (order 800), so bias, residual and activations already sit in
// the node's post_ops and the compressed node keeps them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/compressed_matmul.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

// What the pass needs from a Linear layer, with Gemm's attributes applied.
struct LinearLayer {
  Tensor weight;               // float [K, N]
  float alpha = 1.0f;          // folded into the weight scales
  std::optional<Tensor> bias;  // float [N] (beta * C), when the layer has one
  ir::ValueId residual = ir::kNoValue;
};

// The layer's name in keep_fp32 and in the report.
std::string LayerName(const ir::Graph& graph, const ir::Node& node) {
  if (!node.name.empty()) return node.name;
  if (!node.outputs.empty() && node.outputs[0] != ir::kNoValue) {
    return graph.value(node.outputs[0]).name;
  }
  return node.op;
}

// Why a node is not a Linear layer the compressed kernels take, or the layer.
std::optional<LinearLayer> AsLinearLayer(const ir::Graph& graph, const ir::Node& node) {
  const bool plain = node.domain.empty() && (node.op == "MatMul" || node.op == "Gemm");
  const bool fused = node.domain == "kiln" && (node.op == "FusedMatMul" || node.op == "FusedGemm");
  if (!plain && !fused) return std::nullopt;
  const bool gemm = node.op == "Gemm" || node.op == "FusedGemm";
  if (node.inputs.size() < 2 || node.outputs.size() != 1) return std::nullopt;
  if (node.GetInt("transA", 0) != 0) return std::nullopt;
  const ir::ValueId a = node.inputs[0], b = node.inputs[1];
  if (a == ir::kNoValue || !graph.IsConstant(b)) return std::nullopt;
  const ir::TensorType& a_type = graph.value(a).type;
  if (a_type.dtype != DType::kFloat32) return std::nullopt;
  if (gemm && (!a_type.rank_known || a_type.rank() != 2)) return std::nullopt;
  const Tensor& w = *graph.value(b).constant;
  if (w.dtype() != DType::kFloat32 || w.shape().rank() != 2) return std::nullopt;
  const int64_t k = w.shape().dim(0), n = w.shape().dim(1);
  if (k == 0 || n == 0) return std::nullopt;
  if (a_type.rank_known && a_type.rank() >= 1 && a_type.dims.back().is_known() &&
      a_type.dims.back().value != (node.GetInt("transB", 0) ? n : k)) {
    return std::nullopt;  // the kernel would reject it: leave the error to the fp32 kernel
  }
  LinearLayer layer;
  const std::vector<std::string> post_ops = node.GetStrings("post_ops");
  const bool has_residual = std::find(post_ops.begin(), post_ops.end(), "Add") != post_ops.end();
  size_t operands = node.inputs.size();
  if (has_residual) {
    layer.residual = node.inputs.back();
    --operands;
  }
  // Weight as [K, N].
  const bool trans_b = gemm && node.GetInt("transB", 0) != 0;
  if (trans_b) {
    Tensor t(DType::kFloat32, Shape{n, k});
    const float* src = w.data<float>();
    float* dst = t.data<float>();
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < n; ++j) dst[j * k + i] = src[i * n + j];
    }
    layer.weight = t;
  } else {
    layer.weight = w;
  }
  const int64_t out_n = layer.weight.shape().dim(1);
  if (gemm) {
    layer.alpha = node.GetFloat("alpha", 1.0f);
    if (!std::isfinite(layer.alpha)) return std::nullopt;
  }
  // Bias: MatMul has none; FusedMatMul's input 2 is [N]; Gemm's C must be a constant [N] or
  // [1, N] (a general C stays with the fp32 kernel).
  if (operands > 2 && node.inputs[2] != ir::kNoValue) {
    const ir::ValueId c = node.inputs[2];
    if (!graph.IsConstant(c)) return std::nullopt;
    const Tensor& ct = *graph.value(c).constant;
    if (ct.dtype() != DType::kFloat32) return std::nullopt;
    const Shape& cs = ct.shape();
    const bool row = (cs.rank() == 1 && cs.dim(0) == out_n) ||
                     (cs.rank() == 2 && cs.dim(0) == 1 && cs.dim(1) == out_n);
    if (!row) return std::nullopt;
    const float beta = gemm ? node.GetFloat("beta", 1.0f) : 1.0f;
    Tensor bias(DType::kFloat32, Shape{out_n});
    for (int64_t j = 0; j < out_n; ++j) bias.data<float>()[j] = beta * ct.data<float>()[j];
    layer.bias = bias;
  }
  for (float v : layer.weight.span<float>()) {
    if (!std::isfinite(v)) return std::nullopt;  // NaN/Inf weights stay exact in fp32
  }
  return layer;
}

void CopyPostOps(const ir::Node& from, ir::Node& to) {
  for (const char* key : {"post_ops", "post_op_alphas", "post_op_betas"}) {
    auto it = from.attrs.find(key);
    if (it != from.attrs.end()) to.attrs[key] = it->second;
  }
}

// Rewrites node `id` in place as `replacement`, which keeps its outputs (and its position in
// the node list).
void Replace(ir::Graph& graph, ir::NodeId id, ir::Node replacement) {
  ir::Node& old = graph.node(id);
  replacement.outputs = old.outputs;
  old = std::move(replacement);
}

// Symmetric per-output-channel int8 weights of a [K, N] matrix.
struct QuantizedWeight {
  Tensor q;                 // int8 [K, N]
  Tensor scale;             // float [N]
  Tensor colsum;            // int32 [N]
  float max_rel_error = 0;  // max |w - dequant(w)| / max |w| over channels, for the log
};

QuantizedWeight QuantizeWeight(const Tensor& w, float alpha, int bits) {
  const int64_t k = w.shape().dim(0), n = w.shape().dim(1);
  const int qmax = (1 << (bits - 1)) - 1;
  QuantizedWeight out{Tensor(DType::kInt8, Shape{k, n}), Tensor(DType::kFloat32, Shape{n}),
                      Tensor(DType::kInt32, Shape{n})};
  const float* wv = w.data<float>();
  int8_t* q = out.q.data<int8_t>();
  std::vector<float> max_abs(n, 0.0f);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) max_abs[j] = std::max(max_abs[j], std::fabs(wv[i * n + j]));
  }
  std::vector<float> scale(n);
  for (int64_t j = 0; j < n; ++j) scale[j] = max_abs[j] > 0 ? max_abs[j] / qmax : 1.0f;
  std::vector<int32_t> colsum(n, 0);
  std::vector<float> err(n, 0.0f);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float v = wv[i * n + j] / scale[j];
      const int r = static_cast<int>(std::lrint(std::clamp(v, float(-qmax), float(qmax))));
      q[i * n + j] = static_cast<int8_t>(r);
      colsum[j] += r;
      err[j] = std::max(err[j], std::fabs(wv[i * n + j] - r * scale[j]));
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    out.scale.data<float>()[j] = scale[j] * alpha;
    out.colsum.data<int32_t>()[j] = colsum[j];
    if (max_abs[j] > 0) out.max_rel_error = std::max(out.max_rel_error, err[j] / max_abs[j]);
  }
  return out;
}

absl::Status CompressMatMul(ir::Graph& graph, PassContext& ctx) {
  const CompressionOptions* options = ctx.options().compression;
  if (options == nullptr || (!options->int8_dynamic_matmul && !options->bf16)) {
    return absl::OkStatus();
  }
  const int bits = options->vnni ? 8 : 7;
  for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
    const ir::Node& node = graph.node(id);
    if (node.removed) continue;
    std::optional<LinearLayer> layer = AsLinearLayer(graph, node);
    if (!layer) continue;
    const std::string name = LayerName(graph, node);
    if (options->keep_fp32.contains(name)) continue;
    const int64_t k = layer->weight.shape().dim(0), n = layer->weight.shape().dim(1);
    ir::Node out;
    out.domain = "kiln";
    out.name = node.name;
    out.attrs[ir::kCompressedLayerAttr] = name;
    CopyPostOps(node, out);
    out.inputs.push_back(node.inputs[0]);
    if (options->int8_dynamic_matmul) {
      QuantizedWeight qw = QuantizeWeight(layer->weight, layer->alpha, bits);
      out.op = ir::kDynamicQuantMatMulOp;
      out.attrs["weight_bits"] = int64_t{bits};
      out.inputs.push_back(graph.AddConstant(graph.UniqueName(name + "/wq"), qw.q));
      out.inputs.push_back(graph.AddConstant(graph.UniqueName(name + "/w_scale"), qw.scale));
      out.inputs.push_back(graph.AddConstant(graph.UniqueName(name + "/w_colsum"), qw.colsum));
      ctx.Note(absl::StrCat("int8 ", node.Describe(), " [", k, "x", n, "] (", bits,
                            "-bit weights per output channel, max weight error ", qw.max_rel_error,
                            " of the channel's range)"));
    } else {
      Tensor wb(DType::kBFloat16, Shape{k, n});
      const float* src = layer->weight.data<float>();
      uint16_t* dst = reinterpret_cast<uint16_t*>(wb.raw_data());
      // Gemm's alpha cannot ride on a scale here: fold it into the weights before rounding.
      for (int64_t i = 0; i < k * n; ++i) dst[i] = FloatToBFloat16(src[i] * layer->alpha);
      out.op = ir::kBf16MatMulOp;
      out.inputs.push_back(graph.AddConstant(graph.UniqueName(name + "/w_bf16"), wb));
      ctx.Note(absl::StrCat("bf16 weights ", node.Describe(), " [", k, "x", n, "]"));
    }
    out.inputs.push_back(layer->bias
                             ? graph.AddConstant(graph.UniqueName(name + "/bias"), *layer->bias)
                             : ir::kNoValue);
    if (layer->residual != ir::kNoValue) out.inputs.push_back(layer->residual);
    Replace(graph, id, std::move(out));
  }
  return absl::OkStatus();
}

KILN_REGISTER_PASS("compress_matmul", 800, CompressMatMul);

}  // namespace
}  // namespace kiln::opt
