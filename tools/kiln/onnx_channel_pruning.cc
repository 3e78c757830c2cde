#include "onnx_channel_pruning.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"

namespace kiln::tool {
namespace {

constexpr int kOnnxFloat = 1;  // TensorProto.DataType FLOAT

struct FloatArray {
  std::vector<int64_t> dims;
  std::vector<float> data;
};

absl::StatusOr<FloatArray> ReadFloat(const onnx::TensorProto& t) {
  if (t.data_type() != kOnnxFloat) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer '", t.name(), "' is not float (data_type ", t.data_type(), ")"));
  }
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::UnimplementedError(
        absl::StrCat("initializer '", t.name(),
                     "' keeps its data in an external file; kiln compress reads "
                     "models with their weights inside the .onnx file"));
  }
  FloatArray a;
  a.dims.assign(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : a.dims) n *= d;
  if (t.has_raw_data()) {
    if (t.raw_data().size() != static_cast<size_t>(n) * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initializer '", t.name(), "' has ", t.raw_data().size(), " bytes for ", n, " floats"));
    }
    a.data.resize(n);
    std::memcpy(a.data.data(), t.raw_data().data(), t.raw_data().size());  // little-endian
  } else {
    if (t.float_data_size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("initializer '", t.name(), "' has ",
                                                     t.float_data_size(), " floats, its dims ", n));
    }
    a.data.assign(t.float_data().begin(), t.float_data().end());
  }
  return a;
}

void WriteFloat(const FloatArray& a, onnx::TensorProto& t) {
  t.clear_dims();
  for (int64_t d : a.dims) t.add_dims(d);
  t.clear_float_data();
  t.set_raw_data(
      std::string(reinterpret_cast<const char*>(a.data.data()), a.data.size() * sizeof(float)));
}

// The slices of `a` along `axis` whose index is in `kept`.
FloatArray KeepAlong(const FloatArray& a, int axis, const std::vector<int64_t>& kept) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= a.dims[i];
  for (size_t i = axis + 1; i < a.dims.size(); ++i) inner *= a.dims[i];
  const int64_t n = a.dims[axis];
  FloatArray out;
  out.dims = a.dims;
  out.dims[axis] = static_cast<int64_t>(kept.size());
  out.data.reserve(outer * kept.size() * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k : kept) {
      const float* src = a.data.data() + (o * n + k) * inner;
      out.data.insert(out.data.end(), src, src + inner);
    }
  }
  return out;
}

int64_t IntAttr(const onnx::NodeProto& n, const std::string& name, int64_t default_value) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.name() == name) return a.i();
  }
  return default_value;
}

void SetIntAttr(onnx::NodeProto& n, const std::string& name, int64_t value) {
  for (onnx::AttributeProto& a : *n.mutable_attribute()) {
    if (a.name() == name) {
      a.set_i(value);
      return;
    }
  }
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

// Names read inside subgraphs (If/Loop/Scan bodies), which may be values of this graph.
void CollectSubgraphReads(const onnx::GraphProto& g, std::set<std::string>* names) {
  for (const onnx::NodeProto& n : g.node()) {
    for (const onnx::AttributeProto& a : n.attribute()) {
      auto walk = [&](const onnx::GraphProto& sub) {
        for (const onnx::NodeProto& m : sub.node()) {
          for (const std::string& in : m.input()) names->insert(in);
        }
        for (const onnx::ValueInfoProto& out : sub.output()) names->insert(out.name());
        CollectSubgraphReads(sub, names);
      };
      if (a.has_g()) walk(a.g());
      for (const onnx::GraphProto& sub : a.graphs()) walk(sub);
    }
  }
}

struct Edit {
  int node;
  int input;
  int axis;
};

class Pruner {
 public:
  explicit Pruner(onnx::GraphProto& g) : g_(g) {
    for (int i = 0; i < g_.initializer_size(); ++i) initializer_[g_.initializer(i).name()] = i;
    for (const onnx::ValueInfoProto& out : g_.output()) outputs_.insert(out.name());
    CollectSubgraphReads(g_, &subgraph_reads_);
  }

  absl::StatusOr<ConvPruning> PruneConv(int id, double fraction) {
    const onnx::NodeProto& conv = g_.node(id);
    ConvPruning result;
    result.node = conv.name().empty() ? conv.output(0) : conv.name();
    if (IntAttr(conv, "group", 1) != 1) {
      // A depthwise conv loses the channels of the conv that feeds it, when that one is pruned.
      result.skipped =
          "grouped convolution (its channels per group must stay equal; a depthwise conv "
          "loses the channels its producer loses)";
      return result;
    }
    const onnx::TensorProto* w_proto = Initializer(conv, 1);
    if (w_proto == nullptr) {
      result.skipped = "weights are not an initializer";
      return result;
    }
    auto w = ReadFloat(*w_proto);
    if (!w.ok()) return w.status();
    if (w->dims.size() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("Conv '", result.node, "': weights of rank ", w->dims.size()));
    }
    const int64_t m = w->dims[0];
    result.channels = m;
    const int64_t remove = std::min<int64_t>(m - 1, static_cast<int64_t>(fraction * m));
    if (remove <= 0) {
      result.skipped =
          absl::StrCat("floor(", fraction, " x ", m, " channels) leaves no channel to remove");
      return result;
    }
    if (conv.input_size() > 2 && !conv.input(2).empty() && Initializer(conv, 2) == nullptr) {
      result.skipped = "bias is not an initializer";
      return result;
    }
    edits_.clear();
    resized_.clear();
    depthwise_.clear();
    edits_.push_back({id, 1, 0});
    if (conv.input_size() > 2 && !conv.input(2).empty()) edits_.push_back({id, 2, 0});
    std::string why;
    if (!Follow(conv.output(0), static_cast<int>(w->dims.size()), m, &why)) {
      result.skipped = why;
      return result;
    }
    // The filters with the smallest L1 norms go.
    const int64_t per_filter = static_cast<int64_t>(w->data.size()) / m;
    std::vector<double> l1(m, 0.0);
    for (int64_t c = 0; c < m; ++c) {
      for (int64_t i = 0; i < per_filter; ++i) l1[c] += std::fabs(w->data[c * per_filter + i]);
    }
    std::vector<int64_t> order(m);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return l1[a] < l1[b]; });
    std::vector<int64_t> kept(order.begin() + remove, order.end());
    std::sort(kept.begin(), kept.end());
    for (const Edit& e : edits_) {
      if (absl::Status s = Slice(e, kept); !s.ok()) return s;
    }
    for (int dw : depthwise_) SetIntAttr(*g_.mutable_node(dw), "group", kept.size());
    // Shapes recorded for the values between the conv and its readers are stale now.
    auto* infos = g_.mutable_value_info();
    infos->erase(
        std::remove_if(infos->begin(), infos->end(),
                       [&](const onnx::ValueInfoProto& v) { return resized_.count(v.name()) > 0; }),
        infos->end());
    result.removed = remove;
    return result;
  }

  // Drops initializers no node reads any more (and their graph inputs, for IR < 4 models).
  void DropUnusedInitializers() {
    std::set<std::string> used = subgraph_reads_;
    for (const onnx::NodeProto& n : g_.node()) {
      for (const std::string& in : n.input()) used.insert(in);
    }
    for (const onnx::ValueInfoProto& out : g_.output()) used.insert(out.name());
    std::set<std::string> dropped;
    auto* inits = g_.mutable_initializer();
    for (int i = inits->size() - 1; i >= 0; --i) {
      if (used.count(inits->Get(i).name()) == 0) {
        dropped.insert(inits->Get(i).name());
        inits->DeleteSubrange(i, 1);
      }
    }
    auto* inputs = g_.mutable_input();
    inputs->erase(
        std::remove_if(inputs->begin(), inputs->end(),
                       [&](const onnx::ValueInfoProto& v) { return dropped.count(v.name()) > 0; }),
        inputs->end());
  }

 private:
  const onnx::TensorProto* Initializer(const onnx::NodeProto& n, int input) const {
    if (input >= n.input_size()) return nullptr;
    auto it = initializer_.find(n.input(input));
    return it == initializer_.end() ? nullptr : &g_.initializer(it->second);
  }

  // The readers of `value`: (node, input index).
  std::vector<std::pair<int, int>> Readers(const std::string& value) const {
    std::vector<std::pair<int, int>> readers;
    for (int i = 0; i < g_.node_size(); ++i) {
      for (int k = 0; k < g_.node(i).input_size(); ++k) {
        if (g_.node(i).input(k) == value) readers.emplace_back(i, k);
      }
    }
    return readers;
  }

  // Whether the channels (axis 1 of a rank-`rank` value, `m` of them) can go at every reader
  // of `value`; collects the edits. `why` says what stopped it. `pooled`: every dimension
  // after the channels is 1 (a global pool made it so), so Flatten keeps channel c as
  // column c.
  bool Follow(const std::string& value, int rank, int64_t m, std::string* why,
              bool pooled = false) {
    if (outputs_.count(value) || subgraph_reads_.count(value)) {
      *why = absl::StrCat("its channels reach the graph output '", value, "'");
      return false;
    }
    resized_.insert(value);
    for (const auto& [id, input] : Readers(value)) {
      const onnx::NodeProto& n = g_.node(id);
      const std::string& op = n.op_type();
      const std::string label =
          absl::StrCat(op, " '", n.name().empty() ? n.output(0) : n.name(), "'");
      auto stop = [&](const std::string& reason) {
        *why = absl::StrCat("its channels reach ", label, ": ", reason);
        return false;
      };
      if (!n.domain().empty() && n.domain() != "ai.onnx") return stop("not an ONNX operator");
      static const std::set<std::string> kPerChannel = {"Relu",
                                                        "LeakyRelu",
                                                        "Sigmoid",
                                                        "Tanh",
                                                        "HardSigmoid",
                                                        "HardSwish",
                                                        "Elu",
                                                        "Selu",
                                                        "Celu",
                                                        "Softplus",
                                                        "Softsign",
                                                        "Identity",
                                                        "Dropout",
                                                        "Clip",
                                                        "MaxPool",
                                                        "AveragePool",
                                                        "GlobalAveragePool",
                                                        "GlobalMaxPool",
                                                        "Gelu",
                                                        "Mish",
                                                        "Exp",
                                                        "Neg",
                                                        "Abs"};
      if (input == 0 && kPerChannel.count(op)) {
        // Clip's bounds are scalars; Dropout's mask and MaxPool's indices must be unread.
        for (int k = 1; k < n.output_size(); ++k) {
          if (!n.output(k).empty() &&
              (!Readers(n.output(k)).empty() || outputs_.count(n.output(k)))) {
            return stop("a second output is read");
          }
        }
        const bool global = op == "GlobalAveragePool" || op == "GlobalMaxPool";
        const bool same_shape = op != "MaxPool" && op != "AveragePool";
        if (!Follow(n.output(0), rank, m, why, global || (pooled && same_shape))) return false;
        continue;
      }
      if (input == 0 && op == "Flatten" && pooled && IntAttr(n, "axis", 1) == 1) {
        // [N, C, 1, 1] -> [N, C].
        if (!Follow(n.output(0), 2, m, why, true)) return false;
        continue;
      }
      if (input == 0 && rank == 2 && (op == "Gemm" || op == "MatMul")) {
        // A classifier head reading the pooled channels: its weight rows (Gemm with transB:
        // columns) go with them.
        const onnx::TensorProto* w = Initializer(n, 1);
        if (w == nullptr || w->dims_size() != 2) return stop("weights are not an initializer");
        if (op == "Gemm" && IntAttr(n, "transA", 0) != 0) return stop("transA");
        const int w_axis = op == "Gemm" && IntAttr(n, "transB", 0) != 0 ? 1 : 0;
        if (w->dims(w_axis) != m) return stop("its weights do not read the channels");
        edits_.push_back({id, 1, w_axis});
        continue;
      }
      if (input == 0 && op == "BatchNormalization") {
        for (int k = 1; k <= 4; ++k) {
          const onnx::TensorProto* p = Initializer(n, k);
          if (p == nullptr || p->dims_size() != 1 || p->dims(0) != m) {
            return stop("its parameters are not [channels] initializers");
          }
          edits_.push_back({id, k, 0});
        }
        if (n.output_size() > 1) return stop("training-mode outputs");
        if (!Follow(n.output(0), rank, m, why, pooled)) return false;
        continue;
      }
      if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" ||
          (op == "PRelu" && input == 0)) {
        const int other = 1 - input;
        const onnx::TensorProto* k = Initializer(n, other);
        if (k == nullptr) {
          return stop(
              "the other operand is not a constant (a residual connection: both "
              "branches would have to lose the same channels)");
        }
        const int kr = k->dims_size();
        const int k_axis = 1 - (rank - kr);
        if (kr > rank) return stop("the constant has a higher rank");
        if (k_axis >= 0 && k->dims(k_axis) == m) {
          edits_.push_back({id, other, k_axis});
        } else if (k_axis >= 0 && k->dims(k_axis) != 1) {
          return stop("the constant does not broadcast over the channels");
        }
        // A constant with a spatial extent broadcasts a pooled value back out.
        bool still_pooled = pooled;
        for (int i = std::max(0, k_axis + 1); i < kr; ++i) still_pooled &= k->dims(i) == 1;
        if (!Follow(n.output(0), rank, m, why, still_pooled)) return false;
        continue;
      }
      if (op == "Conv" && input == 0) {
        const onnx::TensorProto* w = Initializer(n, 1);
        if (w == nullptr || w->dims_size() != rank) return stop("weights are not an initializer");
        const int64_t group = IntAttr(n, "group", 1);
        if (group == 1) {
          if (w->dims(1) != m) return stop("its weights do not read the channels");
          edits_.push_back({id, 1, 1});
          continue;
        }
        if (group != m || w->dims(0) != m || w->dims(1) != 1) {
          return stop("a grouped convolution other than depthwise with multiplier 1");
        }
        edits_.push_back({id, 1, 0});
        if (n.input_size() > 2 && !n.input(2).empty()) {
          if (Initializer(n, 2) == nullptr) return stop("bias is not an initializer");
          edits_.push_back({id, 2, 0});
        }
        depthwise_.push_back(id);
        if (!Follow(n.output(0), rank, m, why)) return false;
        continue;
      }
      return stop("only per-channel operators and convolutions are followed");
    }
    return true;
  }

  absl::Status Slice(const Edit& e, const std::vector<int64_t>& kept) {
    onnx::NodeProto& n = *g_.mutable_node(e.node);
    const std::string name = n.input(e.input);
    const int index = initializer_.at(name);
    auto a = ReadFloat(g_.initializer(index));
    if (!a.ok()) return a.status();
    if (e.axis >= static_cast<int>(a->dims.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer '", name, "' has rank ", a->dims.size()));
    }
    FloatArray sliced = KeepAlong(*a, e.axis, kept);
    // A fresh initializer: the old one may be read by another node that keeps its channels.
    onnx::TensorProto* fresh = g_.add_initializer();
    *fresh = g_.initializer(index);
    std::string fresh_name = absl::StrCat(name, "_pruned");
    for (int k = 2; initializer_.count(fresh_name); ++k)
      fresh_name = absl::StrCat(name, "_pruned", k);
    fresh->set_name(fresh_name);
    WriteFloat(sliced, *fresh);
    initializer_[fresh_name] = g_.initializer_size() - 1;
    n.set_input(e.input, fresh_name);
    // Models before IR version 4 list initializers among the graph inputs.
    for (int i = 0; i < g_.input_size(); ++i) {
      if (g_.input(i).name() != name) continue;
      onnx::ValueInfoProto* in = g_.add_input();
      *in = g_.input(i);
      in->set_name(fresh_name);
      auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
      shape->clear_dim();
      for (int64_t d : sliced.dims) shape->add_dim()->set_dim_value(d);
      break;
    }
    return absl::OkStatus();
  }

  onnx::GraphProto& g_;
  std::map<std::string, int> initializer_;
  std::set<std::string> outputs_;
  std::set<std::string> subgraph_reads_;
  std::vector<Edit> edits_;
  std::vector<int> depthwise_;
  std::set<std::string> resized_;
};

}  // namespace

absl::StatusOr<std::vector<ConvPruning>> PruneLowestL1Filters(onnx::ModelProto& model,
                                                              double fraction) {
  if (!(fraction >= 0 && fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prune_channels=", fraction, ": expected a fraction in [0, 1)"));
  }
  onnx::GraphProto& g = *model.mutable_graph();
  Pruner pruner(g);
  std::vector<ConvPruning> layers;
  // ONNX lists nodes in topological order, so a conv's input channels are already pruned
  // (by its producer's turn) when its own filters are ranked.
  for (int id = 0; id < g.node_size(); ++id) {
    if (g.node(id).op_type() != "Conv" ||
        !(g.node(id).domain().empty() || g.node(id).domain() == "ai.onnx")) {
      continue;
    }
    auto layer = pruner.PruneConv(id, fraction);
    if (!layer.ok()) return layer.status();
    layers.push_back(*layer);
  }
  pruner.DropUnusedInitializers();
  return layers;
}

}  // namespace kiln::tool
