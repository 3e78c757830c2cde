// A model signature's metadata in TF Serving's terms: the keys, dtypes and shapes of its inputs
// and outputs. Below the importers, the runtime and serving, so that the request codecs
// (kiln_serving_base) can check requests against a signature without the model runtime.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"

namespace kiln {

// One input or output of a signature (TF Serving's TensorInfo).
struct TensorInfo {
  std::string name;  // the tensor's name in the source model, e.g. "x:0"
  DType dtype = DType::kInvalid;
  bool rank_known = false;
  std::vector<int64_t> shape;  // -1 for an unknown dimension
};

// A signature as a loaded model serves it.
struct SignatureInfo {
  std::string key;
  std::string method_name;
  std::vector<std::string> input_keys;   // in graph order
  std::vector<std::string> output_keys;  // in graph order
  std::map<std::string, TensorInfo> inputs;
  std::map<std::string, TensorInfo> outputs;
};

}  // namespace kiln
