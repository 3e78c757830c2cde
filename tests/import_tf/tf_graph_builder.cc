#include "tf_graph_builder.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "import/tf/tensor_bundle.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"

namespace kiln::import::tf::testing {

tensorflow::AttrValue TypeAttr(DType dtype) {
  tensorflow::AttrValue a;
  a.set_type(ToTfDataType(dtype));
  return a;
}
tensorflow::AttrValue IntAttr(int64_t v) {
  tensorflow::AttrValue a;
  a.set_i(v);
  return a;
}
tensorflow::AttrValue FloatAttr(float v) {
  tensorflow::AttrValue a;
  a.set_f(v);
  return a;
}
tensorflow::AttrValue BoolAttr(bool v) {
  tensorflow::AttrValue a;
  a.set_b(v);
  return a;
}
tensorflow::AttrValue StringAttr(const std::string& v) {
  tensorflow::AttrValue a;
  a.set_s(v);
  return a;
}
tensorflow::AttrValue IntsAttr(const std::vector<int64_t>& v) {
  tensorflow::AttrValue a;
  for (int64_t x : v) a.mutable_list()->add_i(x);
  return a;
}
tensorflow::AttrValue FloatsAttr(const std::vector<float>& v) {
  tensorflow::AttrValue a;
  for (float x : v) a.mutable_list()->add_f(x);
  return a;
}
tensorflow::AttrValue ShapeAttr(const std::vector<int64_t>& dims) {
  tensorflow::AttrValue a;
  for (int64_t d : dims) a.mutable_shape()->add_dim()->set_size(d);
  return a;
}
tensorflow::AttrValue FuncAttr(const std::string& name) {
  tensorflow::AttrValue a;
  a.mutable_func()->set_name(name);
  return a;
}

std::string GraphBuilder::Placeholder(const std::string& name, DType dtype,
                                      const std::vector<int64_t>& shape) {
  return Op("Placeholder", name, {}, {{"dtype", TypeAttr(dtype)}, {"shape", ShapeAttr(shape)}});
}

std::string GraphBuilder::Const(const std::string& name, const Tensor& value) {
  tensorflow::AttrValue v;
  *v.mutable_tensor() = ToTensorProto(value);
  return Op("Const", name, {}, {{"value", v}, {"dtype", TypeAttr(value.dtype())}});
}

std::string GraphBuilder::Op(const std::string& op, const std::string& name,
                             const std::vector<std::string>& inputs, const Attrs& attrs) {
  tensorflow::NodeDef* node = graph_.add_node();
  node->set_name(name);
  node->set_op(op);
  for (const auto& in : inputs) node->add_input(in);
  for (const auto& [k, v] : attrs) (*node->mutable_attr())[k] = v;
  return name;
}

std::string GraphBuilder::Variable(const std::string& name, const std::string& key, DType dtype) {
  Op("VarHandleOp", name, {}, {{"dtype", TypeAttr(dtype)}, {"shared_name", StringAttr(name)}});
  restore_keys_.push_back(key);
  restore_dtypes_.push_back(dtype);
  restore_vars_.push_back(name);
  return Op("ReadVariableOp", name + "/Read", {name}, {{"dtype", TypeAttr(dtype)}});
}

absl::Status WriteGraphDef(const std::string& path, const tensorflow::GraphDef& graph) {
  return WriteStringToFile(path, graph.SerializeAsString());
}

absl::Status WriteSavedModel(const std::string& dir, GraphBuilder& builder,
                             const std::vector<SignatureSpec>& signatures,
                             const std::map<std::string, kiln::Tensor>& variables,
                             const std::vector<std::string>& tags) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  if (!builder.restore_keys_.empty()) {
    // save/RestoreV2 with the keys, then AssignVariableOp per variable (TF1/TF2 layout).
    Tensor names(DType::kString, Shape{static_cast<int64_t>(builder.restore_keys_.size())});
    Tensor slices(DType::kString, Shape{static_cast<int64_t>(builder.restore_keys_.size())});
    for (size_t i = 0; i < builder.restore_keys_.size(); ++i) {
      names.data<std::string>()[i] = builder.restore_keys_[i];
    }
    builder.Const("save/Const", Tensor::Scalar<std::string>("model"));
    builder.Const("save/RestoreV2/tensor_names", names);
    builder.Const("save/RestoreV2/shape_and_slices", slices);
    tensorflow::AttrValue dtypes;
    for (DType d : builder.restore_dtypes_) dtypes.mutable_list()->add_type(ToTfDataType(d));
    builder.Op("RestoreV2", "save/RestoreV2",
               {"save/Const", "save/RestoreV2/tensor_names", "save/RestoreV2/shape_and_slices"},
               {{"dtypes", dtypes}});
    for (size_t i = 0; i < builder.restore_vars_.size(); ++i) {
      const std::string id = builder.Op("Identity", "save/Identity_" + std::to_string(i),
                                        {"save/RestoreV2:" + std::to_string(i)});
      builder.Op("AssignVariableOp", "save/Assign_" + std::to_string(i),
                 {builder.restore_vars_[i], id});
    }
  }
  tensorflow::SavedModel model;
  model.set_saved_model_schema_version(1);
  auto* meta = model.add_meta_graphs();
  for (const auto& t : tags) meta->mutable_meta_info_def()->add_tags(t);
  *meta->mutable_graph_def() = builder.graph();
  for (const SignatureSpec& s : signatures) {
    auto& sig = (*meta->mutable_signature_def())[s.key];
    sig.set_method_name(s.method);
    auto fill = [](const SignatureSpec::Tensor& t, tensorflow::TensorInfo* info) {
      info->set_name(t.name);
      info->set_dtype(ToTfDataType(t.dtype));
      for (int64_t d : t.shape) info->mutable_tensor_shape()->add_dim()->set_size(d);
    };
    for (const auto& [k, t] : s.inputs) fill(t, &(*sig.mutable_inputs())[k]);
    for (const auto& [k, t] : s.outputs) fill(t, &(*sig.mutable_outputs())[k]);
  }
  KILN_RETURN_IF_ERROR(
      WriteStringToFile((fs::path(dir) / "saved_model.pb").string(), model.SerializeAsString()));
  if (!variables.empty()) {
    fs::create_directories(fs::path(dir) / "variables");
    KILN_RETURN_IF_ERROR(WriteBundle((fs::path(dir) / "variables" / "variables").string(), variables));
  }
  return absl::OkStatus();
}

std::string TempDir(const std::string& name) {
  namespace fs = std::filesystem;
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) /
                 ("kiln_tf_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace kiln::import::tf::testing
