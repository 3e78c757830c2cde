#include "layer_suffix.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "kiln/core/status.h"
#include "kiln/exec/plan_cache.h"

namespace kiln::runtime {
namespace {

bool HasSubgraph(const ir::Node& node) {
  for (const auto& [key, attr] : node.attrs) {
    if (std::holds_alternative<ir::GraphPtr>(attr) ||
        std::holds_alternative<std::vector<ir::GraphPtr>>(attr)) {
      return true;
    }
  }
  return false;
}

// Whether node `n` of `g` is node `m` of `fp32`: operator, attributes, inputs by name
// (constants by value) and outputs by name.
bool SameNode(const ir::Graph& g, const ir::Node& n, const ir::Graph& fp32, const ir::Node& m) {
  if (n.op != m.op || n.domain != m.domain || n.inputs.size() != m.inputs.size() ||
      n.outputs.size() != m.outputs.size() || n.attrs.size() != m.attrs.size()) {
    return false;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if ((n.outputs[i] == ir::kNoValue) != (m.outputs[i] == ir::kNoValue)) return false;
    if (n.outputs[i] != ir::kNoValue &&
        g.value(n.outputs[i]).name != fp32.value(m.outputs[i]).name) {
      return false;
    }
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ir::ValueId a = n.inputs[i], b = m.inputs[i];
    if ((a == ir::kNoValue) != (b == ir::kNoValue)) return false;
    if (a == ir::kNoValue) continue;
    if (g.value(a).name != fp32.value(b).name || g.IsConstant(a) != fp32.IsConstant(b)) {
      return false;
    }
    if (g.IsConstant(a) && !TensorsIdentical(*g.value(a).constant, *fp32.value(b).constant)) {
      return false;
    }
  }
  for (auto it = n.attrs.begin(), jt = m.attrs.begin(); it != n.attrs.end(); ++it, ++jt) {
    if (it->first != jt->first || !ir::AttributesEqual(it->second, jt->second)) return false;
  }
  return true;
}

bool SameType(const ir::TensorType& a, const ir::TensorType& b) {
  if (a.dtype != b.dtype || a.rank_known != b.rank_known || a.dims.size() != b.dims.size()) {
    return false;
  }
  for (size_t d = 0; d < a.dims.size(); ++d) {
    if (!(a.dims[d] == b.dims[d])) return false;
  }
  return true;
}

// Element (n, c, h, w)'s offset in an [N, C, H, W] tensor stored in `layout`.
int64_t Offset(ir::MemoryLayout layout, const int64_t* d, int64_t n, int64_t c, int64_t h,
               int64_t w) {
  const int64_t C = d[1], H = d[2], W = d[3];
  switch (layout) {
    case ir::MemoryLayout::kPlain:
      return ((n * C + c) * H + h) * W + w;
    case ir::MemoryLayout::kNhwc:
      return ((n * H + h) * W + w) * C + c;
    default: {
      const int64_t b = ir::ChannelBlock(layout);
      return (((n * (C / b) + c / b) * H + h) * W + w) * b + c % b;
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<std::vector<Tensor>>> RunOnBatches(
    std::shared_ptr<const ir::Graph> graph, const exec::CompileOptions& compile,
    const std::vector<std::vector<Tensor>>& batches,
    absl::FunctionRef<bool(const std::vector<std::vector<Tensor>>&)> stop) {
  exec::CompileOptions options = compile;
  options.packed_constants = nullptr;  // this graph's own weights
  options.created_kernels = nullptr;
  exec::PlanCache cache(std::move(graph), options, 4);
  std::vector<std::vector<Tensor>> outputs;
  outputs.reserve(batches.size());
  for (const std::vector<Tensor>& batch : batches) {
    std::vector<Shape> shapes;
    for (const Tensor& t : batch) shapes.push_back(t.shape());
    KILN_ASSIGN_OR_RETURN(auto plan, cache.Get(shapes));
    KILN_RETURN_IF_ERROR(plan->Run(batch, &outputs.emplace_back()));
    if (stop(outputs)) break;
  }
  return outputs;
}

Tensor Relayout(const Tensor& t, ir::MemoryLayout from, ir::MemoryLayout to) {
  if (from == to) return t;
  Tensor out(t.dtype(), t.shape());
  const int64_t d[4] = {t.dim(0), t.dim(1), t.dim(2), t.dim(3)};
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t n = 0; n < d[0]; ++n) {
    for (int64_t c = 0; c < d[1]; ++c) {
      for (int64_t h = 0; h < d[2]; ++h) {
        for (int64_t w = 0; w < d[3]; ++w) {
          dst[Offset(to, d, n, c, h, w)] = src[Offset(from, d, n, c, h, w)];
        }
      }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SuffixRunner>> SuffixRunner::Make(
    std::shared_ptr<const ir::Graph> fp32,
    const std::vector<std::shared_ptr<const ir::Graph>>& changed,
    const exec::CompileOptions& compile, std::vector<std::vector<Tensor>> batches) {
  auto runner = std::unique_ptr<SuffixRunner>(new SuffixRunner());
  runner->compile_ = compile;
  runner->batches_ = std::move(batches);

  // fp32's nodes by the name of their first output, and its values by name.
  absl::flat_hash_map<std::string, const ir::Node*> fp32_writer;
  bool fp32_has_subgraph = false;
  for (const ir::Node& m : fp32->nodes()) {
    if (m.removed) continue;
    fp32_has_subgraph = fp32_has_subgraph || HasSubgraph(m);
    for (ir::ValueId v : m.outputs) {
      if (v != ir::kNoValue) fp32_writer[fp32->value(v).name] = &m;
    }
  }

  std::set<std::string> wanted;  // values some suffix reads
  for (const auto& g : changed) {
    Part part;
    part.whole = g;
    part.nodes = g->num_live_nodes();
    part.nodes_run = part.nodes;
    auto order = g->TopologicalOrder();
    if (!order.ok()) return order.status();
    // The suffix: changed nodes and every node reading a value one of them writes.
    std::vector<bool> in_suffix(g->num_nodes(), false);
    std::vector<bool> written_by_suffix(g->num_values(), false);
    bool cuttable = !fp32_has_subgraph;
    for (ir::NodeId id : *order) {
      const ir::Node& n = g->node(id);
      if (n.removed) continue;
      if (HasSubgraph(n)) cuttable = false;
      bool mark = false;
      for (ir::ValueId v : n.inputs) mark = mark || (v != ir::kNoValue && written_by_suffix[v]);
      if (!mark) {
        const ir::Node* twin = nullptr;
        for (ir::ValueId v : n.outputs) {
          if (v == ir::kNoValue) continue;
          auto it = fp32_writer.find(g->value(v).name);
          if (it != fp32_writer.end()) twin = it->second;
          break;
        }
        mark = twin == nullptr || !SameNode(*g, n, *fp32, *twin);
      }
      if (!mark) continue;
      in_suffix[id] = true;
      for (ir::ValueId v : n.outputs) {
        if (v != ir::kNoValue) written_by_suffix[v] = true;
      }
    }
    // What it reads from upstream: values fp32 computes under the same name and type.
    std::vector<ir::ValueId> cut;
    std::vector<bool> is_cut(g->num_values(), false);
    for (ir::NodeId id : *order) {
      if (!cuttable || !in_suffix[id]) continue;
      for (ir::ValueId v : g->node(id).inputs) {
        if (v == ir::kNoValue || g->IsConstant(v) || written_by_suffix[v] || is_cut[v]) continue;
        const std::string& name = g->value(v).name;
        const auto twin = fp32->FindValue(name);
        const bool computed = twin && (fp32_writer.count(name) > 0 ||
                                       std::find(fp32->inputs.begin(), fp32->inputs.end(), *twin) !=
                                           fp32->inputs.end());
        if (!computed || !SameType(g->value(v).type, fp32->value(*twin).type)) {
          cuttable = false;
          break;
        }
        is_cut[v] = true;
        cut.push_back(v);
      }
    }
    if (g->outputs.size() != fp32->outputs.size()) cuttable = false;
    std::vector<ir::ValueId> suffix_outputs;
    for (size_t o = 0; cuttable && o < g->outputs.size(); ++o) {
      const ir::ValueId v = g->outputs[o];
      if (written_by_suffix[v]) {
        part.output_of.push_back(static_cast<int>(suffix_outputs.size()));
        suffix_outputs.push_back(v);
      } else if (g->value(v).name == fp32->value(fp32->outputs[o]).name) {
        part.output_of.push_back(-1);  // upstream of every change: fp32's own output
      } else {
        cuttable = false;
      }
    }
    if (cuttable) {
      auto suffix = std::make_shared<ir::Graph>(*g);
      int64_t nodes_run = 0;
      for (ir::NodeId id = 0; id < suffix->num_nodes(); ++id) {
        ir::Node& n = suffix->node(id);
        if (n.removed) continue;
        if (in_suffix[id]) {
          ++nodes_run;
        } else {
          n.removed = true;
        }
      }
      for (ir::ValueId v : cut) {
        suffix->value(v).producer = ir::kNoNode;
        suffix->value(v).producer_output = 0;
        part.cut.push_back(g->value(v).name);
        part.cut_layout.push_back(g->value(v).layout);
        wanted.insert(g->value(v).name);
      }
      suffix->inputs = cut;
      suffix->outputs = suffix_outputs;
      suffix->Compact();
      part.suffix = std::move(suffix);
      part.nodes_run = nodes_run;
    } else {
      part.output_of.clear();
    }
    runner->parts_.push_back(std::move(part));
  }

  // One fp32 run keeps every wanted value. Values between convolutions come back in the layout
  // the optimizer gave them (as in calibration.cc); Run converts where a suffix reads another.
  auto keep = std::make_shared<ir::Graph>(*fp32);
  std::map<std::string, int> input_index;
  for (size_t i = 0; i < keep->inputs.size(); ++i)
    input_index[keep->value(keep->inputs[i]).name] = i;
  std::map<std::string, size_t> output_index;
  for (const std::string& name : wanted) {
    runner->kept_layout_[name] = fp32->value(*fp32->FindValue(name)).layout;
    if (input_index.count(name)) continue;
    output_index[name] = keep->outputs.size();
    keep->outputs.push_back(*keep->FindValue(name));
  }
  KILN_ASSIGN_OR_RETURN(auto kept, RunOnBatches(keep, compile, runner->batches_));
  for (size_t b = 0; b < kept.size(); ++b) {
    for (const std::string& name : wanted) {
      auto in = input_index.find(name);
      runner->kept_[name].push_back(in != input_index.end() ? runner->batches_[b][in->second]
                                                            : kept[b][output_index[name]]);
    }
    kept[b].resize(fp32->outputs.size());
    runner->fp32_outputs_.push_back(std::move(kept[b]));
  }
  return runner;
}

absl::StatusOr<std::vector<std::vector<Tensor>>> SuffixRunner::Run(size_t i) const {
  const Part& part = parts_[i];
  if (part.suffix == nullptr) return RunOnBatches(part.whole, compile_, batches_);
  std::vector<std::vector<Tensor>> inputs(batches_.size());
  for (size_t b = 0; b < batches_.size(); ++b) {
    for (size_t k = 0; k < part.cut.size(); ++k) {
      inputs[b].push_back(
          Relayout(kept_.at(part.cut[k])[b], kept_layout_.at(part.cut[k]), part.cut_layout[k]));
    }
  }
  std::vector<std::vector<Tensor>> suffix_out(batches_.size());
  if (!part.suffix->outputs.empty()) {
    KILN_ASSIGN_OR_RETURN(suffix_out, RunOnBatches(part.suffix, compile_, inputs));
  }
  std::vector<std::vector<Tensor>> out(batches_.size());
  for (size_t b = 0; b < batches_.size(); ++b) {
    for (size_t o = 0; o < part.output_of.size(); ++o) {
      out[b].push_back(part.output_of[o] >= 0 ? suffix_out[b][part.output_of[o]]
                                              : fp32_outputs_[b][o]);
    }
  }
  return out;
}

}  // namespace kiln::runtime
