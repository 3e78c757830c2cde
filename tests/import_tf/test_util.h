// Helpers shared by the TF importer tests: paths to the shared test data and running an
// imported signature through the real plan compiler and kernels.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/core/status.h"
#include "kiln/exec/plan.h"
#include "kiln/import/imported_model.h"

namespace kiln::import::tf::testing {

inline std::string TfServingDir(const std::string& model) {
  return std::string(KILN_SHARED_DIR) + "/testdata/tf_serving/" + model;
}
inline std::string ModelsDir(const std::string& model) {
  return std::string(KILN_SHARED_DIR) + "/testdata/models/" + model;
}

inline const SignatureGraph* FindSignature(const ImportedModel& model, const std::string& key) {
  for (const auto& s : model.signatures) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

// Runs the signature's graph with `inputs` in input_keys order.
inline absl::StatusOr<std::vector<Tensor>> RunSignature(const SignatureGraph& sig,
                                                        const std::vector<Tensor>& inputs) {
  auto graph = std::make_shared<ir::Graph>(sig.graph);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  KILN_ASSIGN_OR_RETURN(auto plan, exec::CompiledPlan::Compile(graph, shapes));
  std::vector<Tensor> outputs;
  KILN_RETURN_IF_ERROR(plan->Run(inputs, &outputs));
  return outputs;
}

}  // namespace kiln::import::tf::testing
