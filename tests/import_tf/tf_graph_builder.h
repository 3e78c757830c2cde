// Test utility: builds TensorFlow GraphDefs node by node and writes them as frozen .pb files
// or SavedModel directories (with a variables/ checkpoint), so that importer tests exercise
// single ops and small graphs with known answers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kiln/core/tensor.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/protobuf/saved_model.pb.h"

namespace kiln::import::tf::testing {

tensorflow::AttrValue TypeAttr(DType dtype);
tensorflow::AttrValue IntAttr(int64_t v);
tensorflow::AttrValue FloatAttr(float v);
tensorflow::AttrValue BoolAttr(bool v);
tensorflow::AttrValue StringAttr(const std::string& v);
tensorflow::AttrValue IntsAttr(const std::vector<int64_t>& v);
tensorflow::AttrValue FloatsAttr(const std::vector<float>& v);
tensorflow::AttrValue ShapeAttr(const std::vector<int64_t>& dims);
tensorflow::AttrValue FuncAttr(const std::string& name);

class GraphBuilder {
 public:
  using Attrs = std::map<std::string, tensorflow::AttrValue>;

  std::string Placeholder(const std::string& name, DType dtype,
                          const std::vector<int64_t>& shape = {-1});
  std::string Const(const std::string& name, const Tensor& value);
  // A node; returns its name (use "name:1" for other outputs).
  std::string Op(const std::string& op, const std::string& name,
                 const std::vector<std::string>& inputs, const Attrs& attrs = {});
  // A resource variable restored from checkpoint key `key` (the TF2 pattern: VarHandleOp,
  // a RestoreV2 + AssignVariableOp restore path); returns the ReadVariableOp node.
  std::string Variable(const std::string& name, const std::string& key, DType dtype);

  tensorflow::GraphDef& graph() { return graph_; }
  tensorflow::FunctionDef* AddFunction() { return graph_.mutable_library()->add_function(); }

 private:
  tensorflow::GraphDef graph_;
  std::vector<std::string> restore_keys_;
  std::vector<DType> restore_dtypes_;
  std::vector<std::string> restore_vars_;
  friend absl::Status WriteSavedModel(const std::string& dir, GraphBuilder& builder,
                                      const std::vector<struct SignatureSpec>& signatures,
                                      const std::map<std::string, kiln::Tensor>& variables,
                                      const std::vector<std::string>& tags);
};

struct SignatureSpec {
  std::string key = "serving_default";
  std::string method = "tensorflow/serving/predict";
  // key -> (tensor name, dtype, shape)
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Tensor> inputs;
  std::map<std::string, Tensor> outputs;
};

// Writes <dir>/saved_model.pb (and variables/ when `variables` is non-empty). Variables
// declared with GraphBuilder::Variable get their restore ops added here.
absl::Status WriteSavedModel(const std::string& dir, GraphBuilder& builder,
                             const std::vector<SignatureSpec>& signatures,
                             const std::map<std::string, kiln::Tensor>& variables = {},
                             const std::vector<std::string>& tags = {"serve"});

absl::Status WriteGraphDef(const std::string& path, const tensorflow::GraphDef& graph);

// A fresh empty directory under the test temp dir.
std::string TempDir(const std::string& name);

}  // namespace kiln::import::tf::testing
