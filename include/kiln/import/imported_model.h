// What a front end (ONNX, TensorFlow SavedModel) hands to the runtime: one IR graph per
// signature plus the signature's metadata, in TF Serving's terms.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/core/signature.h"
#include "kiln/ir/graph.h"

namespace kiln::import {

// One input or output of a signature (defined below the importers, in core/signature.h).
using kiln::TensorInfo;

struct SignatureGraph {
  std::string key;          // "serving_default", "classify_x_to_y", ...
  std::string method_name;  // "tensorflow/serving/predict", ".../classify", ".../regress"
  // The graph's inputs are the signature's inputs in the order of input_keys; its outputs
  // are the signature's outputs in the order of output_keys.
  std::vector<std::string> input_keys;
  std::vector<std::string> output_keys;
  std::map<std::string, TensorInfo> inputs;
  std::map<std::string, TensorInfo> outputs;
  ir::Graph graph;
};

struct ImportedModel {
  std::string platform;  // "tensorflow" or "onnx"
  std::string path;      // file or directory it was read from
  std::vector<std::string> tags;  // SavedModel tag set used ("serve"); empty for ONNX
  std::vector<SignatureGraph> signatures;
  std::string assets_extra_dir;  // "<dir>/assets.extra" when it exists, else empty
  // Human-readable facts for `kiln inspect` (producer, opsets, variables restored, ...).
  std::vector<std::pair<std::string, std::string>> properties;
};

}  // namespace kiln::import
