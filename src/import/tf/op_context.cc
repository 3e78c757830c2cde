#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "import/tf/converter.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"
#include "kiln/ir/onnx_types.h"

namespace kiln::import::tf {

int64_t OnnxDataType(DType dtype) { return ir::OnnxCodeFromDType(dtype); }

absl::StatusOr<int> FlatOutputIndex(const tensorflow::NodeDef& node, const std::string& arg,
                                    int index) {
  auto attr_count = [&](const char* name) -> int {
    auto it = node.attr().find(name);
    if (it == node.attr().end()) return 0;
    if (it->second.value_case() == tensorflow::AttrValue::kI) return static_cast<int>(it->second.i());
    if (it->second.value_case() == tensorflow::AttrValue::kList) {
      return std::max(it->second.list().type_size(), it->second.list().s_size());
    }
    return 0;
  };
  struct Arg {
    const char* name;
    int count;
  };
  std::vector<Arg> args;
  const std::string& op = node.op();
  if (op == "Switch" || op == "RefSwitch") {
    args = {{"output_false", 1}, {"output_true", 1}};
  } else if (op == "Merge" || op == "RefMerge") {
    args = {{"output", 1}, {"value_index", 1}};
  } else if (op == "FusedBatchNorm" || op == "FusedBatchNormV2" || op == "FusedBatchNormV3") {
    args = {{"y", 1}, {"batch_mean", 1}, {"batch_variance", 1}, {"reserve_space_1", 1},
            {"reserve_space_2", 1}, {"reserve_space_3", 1}};
  } else if (op == "TopKV2" || op == "TopK") {
    args = {{"values", 1}, {"indices", 1}};
  } else if (op == "Unique") {
    args = {{"y", 1}, {"idx", 1}};
  } else if (op == "UniqueWithCounts") {
    args = {{"y", 1}, {"idx", 1}, {"count", 1}};
  } else if (op == "ParseExample") {
    const int ns = attr_count("Nsparse");
    args = {{"sparse_indices", ns}, {"sparse_values", ns}, {"sparse_shapes", ns},
            {"dense_values", attr_count("Tdense")}};
  } else if (op == "ParseSingleExample") {
    const int ns = attr_count("num_sparse");
    args = {{"sparse_indices", ns}, {"sparse_values", ns}, {"sparse_shapes", ns},
            {"dense_values", attr_count("Tdense")}};
  } else if (op == "ParseExampleV2") {
    const int ns = attr_count("num_sparse");
    args = {{"sparse_indices", ns},
            {"sparse_values", ns},
            {"sparse_shapes", ns},
            {"dense_values", attr_count("Tdense")},
            {"ragged_values", attr_count("ragged_value_types")},
            {"ragged_row_splits", attr_count("ragged_split_types")}};
  } else if (op == "SparseFillEmptyRows") {
    args = {{"output_indices", 1}, {"output_values", 1}, {"empty_row_indicator", 1},
            {"reverse_index_map", 1}};
  } else if (op == "SparseReshape") {
    args = {{"output_indices", 1}, {"output_shape", 1}};
  } else if (op == "BroadcastGradientArgs") {
    args = {{"r0", 1}, {"r1", 1}};
  } else if (op == "StringSplit" || op == "StringSplitV2") {
    args = {{"indices", 1}, {"values", 1}, {"shape", 1}};
  } else if (op == "LookupTableExportV2") {
    args = {{"keys", 1}, {"values", 1}};
  } else {
    return 0;  // one output argument (possibly a list): the index counts within it
  }
  int offset = 0;
  for (const Arg& a : args) {
    if (arg == a.name) return offset;
    offset += a.count;
  }
  return absl::InvalidArgumentError(absl::StrCat("op ", op, " (node '", node.name(),
                                                 "') has no output argument '", arg, "'"));
}

namespace {

std::optional<std::vector<int64_t>> IntsOf(const std::optional<Tensor>& t) {
  if (!t.has_value()) return std::nullopt;
  std::vector<int64_t> out;
  if (t->dtype() == DType::kInt64) {
    for (int64_t v : t->span<int64_t>()) out.push_back(v);
  } else if (t->dtype() == DType::kInt32) {
    for (int32_t v : t->span<int32_t>()) out.push_back(v);
  } else {
    return std::nullopt;
  }
  return out;
}

// The value of `id` when it is a constant seen through reshaping ops (Identity, Unsqueeze,
// Squeeze, Reshape) of constants, which the importer emits for TF's ExpandDims and friends.
// Converters that need a constant operand (Bucketize boundaries, Transpose permutations,
// ...) then accept what TensorFlow's graph builders wrote as Const -> ExpandDims.
std::optional<Tensor> FoldReshapes(const ir::Graph& g, ir::ValueId id, int depth) {
  if (id == ir::kNoValue) return std::nullopt;
  const ir::Value& v = g.value(id);
  if (v.constant.has_value()) return *v.constant;
  if (depth > 8 || v.producer == ir::kNoNode) return std::nullopt;
  const ir::Node& n = g.node(v.producer);
  if (!n.domain.empty() || n.inputs.empty()) return std::nullopt;
  auto input = [&](size_t i) -> std::optional<Tensor> {
    if (i >= n.inputs.size()) return std::nullopt;
    return FoldReshapes(g, n.inputs[i], depth + 1);
  };
  if (n.op == "Identity") return input(0);
  if (n.op != "Unsqueeze" && n.op != "Squeeze" && n.op != "Reshape") return std::nullopt;
  std::optional<Tensor> data = input(0);
  if (!data.has_value()) return std::nullopt;
  const std::vector<int64_t> in_dims(data->shape().dims().begin(), data->shape().dims().end());
  std::vector<int64_t> dims;
  if (n.op == "Unsqueeze") {
    auto axes = IntsOf(input(1));
    if (!axes.has_value()) return std::nullopt;
    const int64_t out_rank = static_cast<int64_t>(in_dims.size() + axes->size());
    std::vector<bool> inserted(out_rank, false);
    for (int64_t a : *axes) {
      if (a < 0) a += out_rank;
      if (a < 0 || a >= out_rank || inserted[a]) return std::nullopt;
      inserted[a] = true;
    }
    size_t next = 0;
    for (int64_t i = 0; i < out_rank; ++i) dims.push_back(inserted[i] ? 1 : in_dims[next++]);
  } else if (n.op == "Squeeze") {
    std::vector<bool> drop(in_dims.size(), false);
    if (n.inputs.size() > 1) {
      auto axes = IntsOf(input(1));
      if (!axes.has_value()) return std::nullopt;
      for (int64_t a : *axes) {
        if (a < 0) a += static_cast<int64_t>(in_dims.size());
        if (a < 0 || a >= static_cast<int64_t>(in_dims.size()) || in_dims[a] != 1) {
          return std::nullopt;
        }
        drop[a] = true;
      }
    } else {
      for (size_t i = 0; i < in_dims.size(); ++i) drop[i] = in_dims[i] == 1;
    }
    for (size_t i = 0; i < in_dims.size(); ++i) {
      if (!drop[i]) dims.push_back(in_dims[i]);
    }
  } else {
    auto shape = IntsOf(input(1));
    if (!shape.has_value()) return std::nullopt;
    const bool allow_zero = n.GetInt("allowzero", 0) != 0;
    int64_t known = 1;
    int infer = -1;
    for (size_t i = 0; i < shape->size(); ++i) {
      int64_t d = (*shape)[i];
      if (d == 0 && !allow_zero) {
        if (i >= in_dims.size()) return std::nullopt;
        d = in_dims[i];
      }
      if (d == -1) {
        if (infer >= 0) return std::nullopt;
        infer = static_cast<int>(i);
      } else if (d < 0) {
        return std::nullopt;
      } else {
        known *= d;
      }
      dims.push_back(d);
    }
    if (infer >= 0) {
      if (known == 0 || data->num_elements() % known != 0) return std::nullopt;
      dims[infer] = data->num_elements() / known;
    }
  }
  auto reshaped = data->Reshape(Shape(dims));
  if (!reshaped.ok()) return std::nullopt;
  return *reshaped;
}

}  // namespace

OpContext::OpContext(Converter* converter, Scope* scope, const tensorflow::NodeDef& node,
                     std::vector<TfValue> inputs)
    : converter_(converter), scope_(scope), node_(node), inputs_(std::move(inputs)) {
  // Shallow copies: a pointer into the graph's value table would dangle as soon as a
  // converter adds a value (the table is a vector that reallocates).
  const_inputs_.resize(inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].id == ir::kNoValue) continue;
    const_inputs_[i] = FoldReshapes(*scope_->frame->graph, inputs_[i].id, 0);
  }
}

absl::Status OpContext::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(DescribeNode(scope_, node_), ": ", message));
}

absl::Status OpContext::Unsupported(absl::string_view what) const {
  return absl::UnimplementedError(absl::StrCat(DescribeNode(scope_, node_), ": ", what,
                                               " is not supported"));
}

bool OpContext::HasAttr(const std::string& name) const { return node_.attr().count(name) > 0; }

absl::StatusOr<int64_t> OpContext::AttrInt(const std::string& name) const {
  auto it = node_.attr().find(name);
  if (it == node_.attr().end()) return Error(absl::StrCat("missing attribute '", name, "'"));
  return it->second.i();
}
int64_t OpContext::AttrInt(const std::string& name, int64_t default_value) const {
  auto it = node_.attr().find(name);
  return it == node_.attr().end() ? default_value : it->second.i();
}
float OpContext::AttrFloat(const std::string& name, float default_value) const {
  auto it = node_.attr().find(name);
  return it == node_.attr().end() ? default_value : it->second.f();
}
bool OpContext::AttrBool(const std::string& name, bool default_value) const {
  auto it = node_.attr().find(name);
  return it == node_.attr().end() ? default_value : it->second.b();
}
std::string OpContext::AttrString(const std::string& name,
                                  const std::string& default_value) const {
  auto it = node_.attr().find(name);
  return it == node_.attr().end() ? default_value : it->second.s();
}
std::vector<int64_t> OpContext::AttrInts(const std::string& name) const {
  auto it = node_.attr().find(name);
  if (it == node_.attr().end()) return {};
  return {it->second.list().i().begin(), it->second.list().i().end()};
}
std::vector<float> OpContext::AttrFloats(const std::string& name) const {
  auto it = node_.attr().find(name);
  if (it == node_.attr().end()) return {};
  return {it->second.list().f().begin(), it->second.list().f().end()};
}
std::vector<std::string> OpContext::AttrStrings(const std::string& name) const {
  auto it = node_.attr().find(name);
  if (it == node_.attr().end()) return {};
  return {it->second.list().s().begin(), it->second.list().s().end()};
}
absl::StatusOr<DType> OpContext::AttrType(const std::string& name) const {
  auto it = node_.attr().find(name);
  if (it == node_.attr().end()) return Error(absl::StrCat("missing attribute '", name, "'"));
  auto dtype = FromTfDataType(it->second.type());
  if (!dtype.ok()) return Annotate(dtype.status(), DescribeNode(scope_, node_));
  return dtype;
}
std::vector<int> OpContext::AttrTypeList(const std::string& name) const {
  auto it = node_.attr().find(name);
  if (it == node_.attr().end()) return {};
  return {it->second.list().type().begin(), it->second.list().type().end()};
}
std::string OpContext::AttrFunction(const std::string& name) const {
  auto it = node_.attr().find(name);
  return it == node_.attr().end() ? std::string() : it->second.func().name();
}

ir::Graph& OpContext::graph() { return *scope_->frame->graph; }

const Tensor* OpContext::ConstInput(int i) const {
  if (i < 0 || i >= num_inputs() || !const_inputs_[i].has_value()) return nullptr;
  return &*const_inputs_[i];
}

absl::StatusOr<std::vector<int64_t>> OpContext::ConstInts(int i) const {
  const Tensor* t = ConstInput(i);
  if (t == nullptr) {
    return Unsupported(absl::StrCat("a non-constant input ", i));
  }
  std::vector<int64_t> out;
  switch (t->dtype()) {
    case DType::kInt32:
      for (int32_t v : t->span<int32_t>()) out.push_back(v);
      break;
    case DType::kInt64:
      for (int64_t v : t->span<int64_t>()) out.push_back(v);
      break;
    default:
      return Error(absl::StrCat("input ", i, " must be int32 or int64, is ",
                                DTypeName(t->dtype())));
  }
  return out;
}

int OpContext::InputRank(int i) const {
  if (i >= num_inputs() || inputs_[i].id == ir::kNoValue) return -1;
  const ir::Value& v = scope_->frame->graph->value(inputs_[i].id);
  if (v.constant.has_value()) return v.constant->rank();
  if (v.type.rank_known) return v.type.rank();
  return converter_->RankHint(scope_->frame->graph, inputs_[i].id);
}

ir::ValueId OpContext::Const(Tensor t, absl::string_view hint) {
  return graph().AddConstant(converter_->UniqueName(absl::StrCat(node_.name(), "/", hint)),
                             std::move(t));
}

std::vector<ir::ValueId> OpContext::EmitN(const std::string& op, std::vector<ir::ValueId> inputs,
                                          int num_outputs,
                                          std::map<std::string, ir::Attribute> attrs,
                                          const std::string& domain) {
  return converter_->AddIrNode(graph(), op, std::move(inputs), num_outputs, std::move(attrs),
                               scope_->prefix + node_.name(), domain);
}

ir::ValueId OpContext::CastTo(ir::ValueId v, DType dtype) {
  const ir::Value& value = graph().value(v);
  if (value.type.dtype == dtype) return v;
  if (value.constant.has_value() && value.constant->dtype() == dtype) return v;
  return Emit("Cast", {v}, {{"to", OnnxDataType(dtype)}});
}

ir::ValueId OpContext::ToInt64(ir::ValueId v) {
  const ir::Value& value = graph().value(v);
  if (value.constant.has_value()) {
    const Tensor& t = *value.constant;
    if (t.dtype() == DType::kInt64) return v;
    if (t.dtype() == DType::kInt32) {
      Tensor out(DType::kInt64, t.shape());
      const int32_t* in = t.data<int32_t>();
      int64_t* o = out.data<int64_t>();
      for (int64_t i = 0; i < t.num_elements(); ++i) o[i] = in[i];
      return Const(out, "i64");
    }
  }
  return CastTo(v, DType::kInt64);
}

void OpContext::SetOutputs(std::vector<ir::ValueId> ids) {
  outputs_.clear();
  for (ir::ValueId id : ids) {
    TfValue v;
    v.id = id;
    outputs_.push_back(v);
  }
}

}  // namespace kiln::import::tf
