// JSON <-> tensor codec of TF Serving's REST API (predict, classify, regress) and of the
// KServe v2 (Open Inference Protocol) REST API.
//
// Rules, as TF Serving applies them:
//  - "instances" (row form): a list with one entry per batch element; each entry is the
//    value of the only input, or an object keyed by input name. Tensors get a leading batch
//    dimension and every entry must have the same shape. Reply: "predictions".
//  - "inputs" (columnar form): the value of the only input, or an object keyed by input
//    name; shapes come from nesting alone. Reply: "outputs".
//  - Shapes come from list nesting; ragged lists are rejected. DT_STRING values are JSON
//    strings or {"b64": "<base64>"}; outputs whose key ends in "_bytes" are written as b64.
//  - int64 values keep all 64 bits; floats are written as the shortest decimal that reads
//    back as the same float (not widened to double); NaN, Infinity and -Infinity are read
//    and written as bare tokens, as TF Serving's rapidjson reader/writer do.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/signature.h"
#include "kiln/core/tensor.h"
#include "tensorflow/core/example/example.pb.h"

namespace kiln::serving {

enum class JsonFormat { kRow, kColumnar };

struct PredictJsonRequest {
  std::string signature_name;  // empty when the request did not name one
  JsonFormat format = JsonFormat::kRow;
  std::map<std::string, Tensor> inputs;
};

// Finds the signature the request names (the empty name means the default one).
using SignatureLookup = std::function<absl::StatusOr<const SignatureInfo*>(absl::string_view name)>;

// Parses a :predict body. Errors are INVALID_ARGUMENT naming the input and what was wrong.
absl::StatusOr<PredictJsonRequest> ParsePredictRequest(absl::string_view body,
                                                       const SignatureLookup& lookup);

// Writes {"predictions": ...} (row form) or {"outputs": ...} (columnar form).
// `output_order` lists the keys of `outputs` in the order to write them.
absl::StatusOr<std::string> WritePredictResponse(const std::map<std::string, Tensor>& outputs,
                                                 const std::vector<std::string>& output_order,
                                                 JsonFormat format);

// A :classify or :regress body: "examples" (tf.Examples written as {feature: value(s)}),
// optional "context" (features shared by every example) and "signature_name".
struct ExamplesJsonRequest {
  std::string signature_name;
  std::vector<tensorflow::Example> examples;
  bool has_context = false;
  tensorflow::Example context;
};
absl::StatusOr<ExamplesJsonRequest> ParseExamplesRequest(absl::string_view body);

// Appends a tensor's value as nested JSON lists (rank 0: a bare value). `b64` writes string
// elements as {"b64": ...}.
void AppendTensorJson(const Tensor& tensor, bool b64, std::string* out);
// Appends a float as TF Serving writes it (shortest round-trip, "x.0" for integral values,
// NaN/Infinity/-Infinity tokens).
void AppendFloatJson(float value, std::string* out);
void AppendDoubleJson(double value, std::string* out);
// Appends `text` as a JSON string literal.
void AppendJsonString(absl::string_view text, std::string* out);

// KServe v2 ("Open Inference Protocol") infer request.
struct V2InferRequest {
  std::string id;
  std::map<std::string, Tensor> inputs;
  std::vector<std::string> requested_outputs;  // empty: all
  // The binary tensor extension: outputs to send as binary data after the JSON header
  // ("binary_data": true on the output, or "binary_data_output": true on the request).
  bool binary_outputs_all = false;
  std::vector<std::string> binary_outputs;
  bool OutputIsBinary(const std::string& name) const;
};
// `body` is the JSON (with the binary tensor extension, the JSON header only); `binary` the
// bytes after it, consumed in input order by the inputs that declare
// "parameters": {"binary_data_size": n} instead of "data". Every binary byte must be used.
absl::StatusOr<V2InferRequest> ParseV2InferRequest(absl::string_view body,
                                                   const SignatureInfo& signature,
                                                   absl::string_view binary = {});

// A tensor from its raw bytes: row-major, little-endian; BYTES elements each a 4-byte
// little-endian length then the bytes. The form shared by gRPC's raw_input_contents and
// REST's binary tensor extension. The size must be exactly what `dtype` and `dims` need;
// errors name the input.
absl::StatusOr<Tensor> TensorFromRawBytes(const std::string& name, DType dtype,
                                          const std::vector<int64_t>& dims,
                                          absl::string_view bytes);
// The inverse: a tensor's raw bytes.
std::string TensorToRawBytes(const Tensor& tensor);
// "FP32", "INT64", "BYTES", ... and back.
absl::string_view V2DatatypeName(DType dtype);
absl::StatusOr<DType> V2DatatypeFromName(absl::string_view name);

}  // namespace kiln::serving
