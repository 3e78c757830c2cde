// Internals of the ONNX importer shared between its files.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/tensor.h"
#include "kiln/ir/graph.h"
#include "onnx/onnx.pb.h"

namespace kiln::import::onnx_internal {

// ONNX TensorProto.DataType <-> DType. Types Kiln has no DType for (complex, float8, int4)
// give an error naming the ONNX type.
absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type);
int32_t OnnxFromDType(DType dtype);
std::string OnnxTypeName(int32_t onnx_type);

// Decodes a TensorProto (raw_data, typed fields or external data under `external_data_dir`).
absl::StatusOr<Tensor> TensorFromProto(const ::onnx::TensorProto& proto,
                                       const std::string& external_data_dir);
// What one model's sparse tensors may densify to, in all. 1 GiB is far above the sparse
// initializers and Constant(sparse_value) nodes real models carry (masks, embedding deltas),
// and keeps a malicious few-byte model from making the importer allocate more.
constexpr int64_t kMaxDensifiedBytes = int64_t{1} << 30;

// Densifies a SparseTensorProto. A few bytes of sparse tensor can claim a dense shape of any
// size, so densifying is the one place where a model's bytes do not bound what importing it
// allocates: `dense_bytes_left` is what the whole import may still densify (strings counted
// as sizeof(std::string) each); the dense size is subtracted from it, and a tensor above it
// is RESOURCE_EXHAUSTED before anything is allocated.
absl::StatusOr<Tensor> TensorFromSparseProto(const ::onnx::SparseTensorProto& proto,
                                             const std::string& external_data_dir,
                                             int64_t* dense_bytes_left);
absl::StatusOr<::onnx::TensorProto> TensorToProto(const Tensor& tensor, const std::string& name);

// For bytes that failed to parse as a ModelProto: where the structure first breaks ("field
// 7 (graph) at byte offset 12 declares 500 bytes but only 80 remain"), or "" when the
// wire structure looks intact.
std::string DescribeMalformedModel(absl::string_view bytes);

// The ai.onnx operator names the importer knows (all opsets up to 21).
const std::set<std::string>& KnownOnnxOpSet();

// State for emitting the IR nodes of one ONNX node.
class NodeEmitter {
 public:
  NodeEmitter(ir::Graph& graph, const ::onnx::NodeProto& proto, int64_t opset,
              std::vector<ir::ValueId> inputs, std::vector<ir::ValueId> outputs,
              std::map<std::string, ir::Attribute> attrs,
              std::function<std::string(absl::string_view)> fresh_name)
      : graph_(graph),
        proto_(proto),
        opset_(opset),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        attrs_(std::move(attrs)),
        fresh_name_(std::move(fresh_name)) {}

  // Emits the node of the default ONNX domain in its newest-opset form.
  absl::Status EmitOnnx();
  // Emits a com.microsoft node expanded into ONNX operators; NotFound when it has no
  // expansion.
  absl::Status EmitMicrosoft();

 private:
  // Adds a node whose outputs are the ONNX node's outputs.
  void Final(const std::string& op, std::vector<ir::ValueId> inputs,
             std::map<std::string, ir::Attribute> attrs);
  // Adds a node with one fresh output value; returns it.
  ir::ValueId Tmp(const std::string& op, std::vector<ir::ValueId> inputs,
                  std::map<std::string, ir::Attribute> attrs = {});
  // Makes output `index` of the ONNX node an alias of `value` through Identity.
  void Alias(int index, ir::ValueId value);
  ir::ValueId Const(Tensor t, absl::string_view hint);
  ir::ValueId Int64s(const std::vector<int64_t>& v, absl::string_view hint);
  // A scalar constant with the dtype of `like` when known, else float32 plus CastLike.
  ir::ValueId ScalarLike(double v, ir::ValueId like, absl::string_view hint);
  DType KnownDType(ir::ValueId v) const;
  ir::ValueId Input(int i) const { return i < static_cast<int>(inputs_.size()) ? inputs_[i] : ir::kNoValue; }
  bool TakeInts(const std::string& key, std::vector<int64_t>* out);
  std::string NodeName() const;

  absl::Status AttrToInput(const std::string& attr, int position, bool required);
  absl::Status EmitSoftmaxFamily();
  absl::Status EmitResize();
  absl::Status EmitPadLegacy();
  absl::Status EmitClipLegacy();
  absl::Status EmitSplit();
  absl::Status EmitGelu(ir::ValueId x, int output, bool tanh_approximation);

  ir::Graph& graph_;
  const ::onnx::NodeProto& proto_;
  int64_t opset_;
  std::vector<ir::ValueId> inputs_;
  std::vector<ir::ValueId> outputs_;
  std::map<std::string, ir::Attribute> attrs_;
  std::function<std::string(absl::string_view)> fresh_name_;
};

}  // namespace kiln::import::onnx_internal
