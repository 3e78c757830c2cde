// TensorFlow front end: SavedModel directories (saved_model.pb or saved_model.pbtxt plus the
// variables/ checkpoint and assets/) and bare frozen GraphDefs, imported into Kiln's IR with
// one graph per signature. Variables become constants; function calls are inlined; If/While
// become IR If/Loop with subgraphs; v1 Switch/Merge conditionals become If. Only what a
// signature's outputs need is imported, so training-only branches never matter.
//
//   auto model = kiln::import::ImportSavedModel("/models/half_plus_two/00000123");
//   const auto& sig = model->signatures[0];   // sig.graph, sig.inputs, sig.outputs
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/import/imported_model.h"

namespace kiln::import {

// Imports the MetaGraph whose tag set equals `tags` (order-insensitive). Errors name the
// directory and, for an unknown tag set, the tag sets that exist; an unsupported op is named
// with its node and the function it sits in. Signatures whose name starts with "__" (such as
// __saved_model_init_op) are not imported.
absl::StatusOr<ImportedModel> ImportSavedModel(const std::string& dir,
                                               const std::vector<std::string>& tags = {"serve"});

// A frozen GraphDef (.pb, binary or text): variables already folded into constants.
struct FrozenGraphOptions {
  // Placeholders fed by the caller ("X" or "X:0"); empty: every Placeholder in the graph.
  std::vector<std::string> inputs;
  // Tensors returned ("output" or "output:0"); empty: every node whose outputs nothing reads
  // (Const, NoOp and Assert nodes excepted).
  std::vector<std::string> outputs;
};
// One "serving_default" predict signature whose keys are the node names.
absl::StatusOr<ImportedModel> ImportFrozenGraph(const std::string& path,
                                                const FrozenGraphOptions& options = {});

// True when `dir` holds saved_model.pb or saved_model.pbtxt.
bool IsSavedModelDir(const std::string& dir);

// What `saved_model_cli show --all` shows, without importing any graph.
struct SignatureTensorSummary {
  std::string key;
  std::string name;   // "x:0"
  std::string dtype;  // "DT_FLOAT"
  bool rank_known = false;
  std::vector<int64_t> shape;  // -1 unknown
};
struct SignatureSummary {
  std::string key;
  std::string method_name;
  std::vector<SignatureTensorSummary> inputs;   // sorted by key
  std::vector<SignatureTensorSummary> outputs;  // sorted by key
};
struct MetaGraphSummary {
  std::vector<std::string> tags;
  std::string tensorflow_version;
  std::vector<SignatureSummary> signatures;  // sorted by key
  std::vector<std::string> ops;  // every op type in the graph and its functions, sorted
};
struct SavedModelSummary {
  std::string path;
  int64_t schema_version = 0;
  std::vector<MetaGraphSummary> meta_graphs;
};
absl::StatusOr<SavedModelSummary> DescribeSavedModel(const std::string& dir);
// The summary in saved_model_cli's layout ("MetaGraphDef with tag-set: 'serve' contains the
// following SignatureDefs: ...").
std::string FormatSavedModelSummary(const SavedModelSummary& summary);

}  // namespace kiln::import
