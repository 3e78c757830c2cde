// ONNX front end: reads an ONNX ModelProto into Kiln's IR.
//
//   KILN_ASSIGN_OR_RETURN(import::ImportedModel model, import::ImportOnnxFile("model.onnx"));
//
// The model becomes one signature, "serving_default" (method "tensorflow/serving/predict"),
// whose inputs are the graph inputs that are not initializers and whose outputs are the graph
// outputs, keyed by their ONNX names. Operators are normalized to their newest-opset form
// (see kiln/ir/graph.h): attributes that later opsets turned into inputs (Slice, Squeeze,
// Unsqueeze, Split, Reduce*, Pad, Clip, TopK, Dropout, Resize/Upsample) become constant
// inputs; Softmax-family ops of opset < 13 keep their 2-D semantics through an explicit
// Flatten/Reshape; common com.microsoft ops are expanded into ONNX operators. Constant nodes
// and initializers become IR constants; external data files are read relative to the model.
// A model newer than the importer knows (IR version, or the opset of a domain it implements)
// is refused with an error naming the version, as ONNX Runtime refuses it: a newer version
// may change what an operator means.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/tensor.h"
#include "kiln/import/imported_model.h"

namespace kiln::import {

// The newest ONNX IR version and default-domain (ai.onnx) opset the importer implements
// (ONNX 1.16 and 1.17 write IR version 10; opset 21 is ONNX 1.16's). com.microsoft is
// accepted at version 1, the only one ONNX Runtime defines.
inline constexpr int64_t kNewestOnnxIrVersion = 10;
inline constexpr int64_t kNewestOnnxOpset = 21;

struct OnnxImportOptions {
  // Directory that external-data locations are relative to. ImportOnnxFile uses the model's
  // directory when this is empty; ImportOnnxBytes then rejects models with external data.
  std::string external_data_dir;
};

// Reads and imports a .onnx file. Errors name the file and what was wrong.
absl::StatusOr<ImportedModel> ImportOnnxFile(const std::string& path,
                                             const OnnxImportOptions& options = {});

// Imports a serialized ModelProto; `name` is used in error messages and as the model path.
absl::StatusOr<ImportedModel> ImportOnnxBytes(absl::string_view bytes, const std::string& name,
                                              const OnnxImportOptions& options = {});

// Decodes a serialized onnx.TensorProto (the input_N.pb / output_N.pb files of ONNX's test
// data sets). `name` is used in error messages; `external_data_dir` resolves external data.
absl::StatusOr<Tensor> ParseOnnxTensor(absl::string_view bytes, const std::string& name,
                                       const std::string& external_data_dir = "");
absl::StatusOr<Tensor> ReadOnnxTensorFile(const std::string& path);

// Encodes a tensor as a serialized onnx.TensorProto (raw_data form; strings in string_data).
absl::StatusOr<std::string> SerializeOnnxTensor(const Tensor& tensor, const std::string& name);

// ONNX operators (default domain) the importer understands, sorted. Whether each one also
// runs depends on the kernels registered (kernels::KernelRegistry).
std::vector<std::string> KnownOnnxOps();
// com.microsoft operators the importer expands into ONNX operators, sorted.
std::vector<std::string> ExpandedMicrosoftOps();

}  // namespace kiln::import
