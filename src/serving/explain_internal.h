// What the two halves of :explain share (explain_rest.cc: the request, the spec, baselines,
// tensor inputs; explain_examples.cc: tf.Example models). Internal to kiln_serving.
#pragma once

#include <simdjson.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/core/signature.h"
#include "kiln/core/tensor.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/server_core.h"

namespace kiln::serving::explain_internal {

// One baseline of an input (its elements, flattened) or of a tf.Example feature (its values:
// numbers, or strings for a bytes feature).
struct BaselineValue {
  std::vector<float> numbers;
  std::vector<std::string> strings;
  bool empty() const { return numbers.empty() && strings.empty(); }
};

// What ExplanationMetadata says about one input or feature (only the fields Kiln uses).
struct InputSpec {
  std::vector<BaselineValue> baselines;  // inputBaselines: one entry per baseline
  std::string group;                     // groupName: the whole input is one feature
};
struct OutputSpec {
  std::string name;
  std::vector<std::string> display_names;  // indexDisplayNameMapping
};
struct ExplainSpec {
  std::map<std::string, InputSpec> inputs;  // by input name, or feature name for tf.Examples
  std::optional<OutputSpec> output;
  int path_count = 10;
};

// Default baselines from the model's warmup data (assets.extra/tf_serving_warmup_requests):
// the median of each element (tensor inputs) or numeric feature value, the most frequent
// value of a bytes feature.
struct WarmupBaselines {
  std::map<std::string, std::vector<float>> inputs;  // by input key, one row's elements
  std::map<std::string, BaselineValue> features;     // by tf.Example feature name
};

// The warmup baselines of `servable`'s model; empty when it has no warmup file. Read once per
// file version (path, size, mtime), not per request.
std::shared_ptr<const WarmupBaselines> GetWarmupBaselines(const ServableVersion& servable);

// The shared problem: `num_instances` instances, each explained against `num_baselines`
// baselines (Vertex averages the attributions over them). Rows are laid out instance-major:
// row (n * num_baselines + b) of `instances` and `baselines` is instance n against baseline b.
struct Problem {
  int64_t num_instances = 0;
  int num_baselines = 1;
  FeatureLayout layout;
  std::vector<float> instances;
  std::vector<float> baselines;
};
// The explained output's instance rows: its size per instance and each instance's top class.
struct OutputSelection {
  std::string name;
  int64_t size = 1;
  std::vector<int64_t> class_index;
};

// Runs rows [begin, begin + count) of the evaluation matrix (already built into `inputs`) and
// stores each row's explained value in (*values)[row]; `rows_per_instance` rows belong to
// each instance (all its baselines' evaluations).
absl::Status RunEvaluationBatch(const ServableVersion& servable, const std::string& signature_key,
                                std::map<std::string, Tensor> inputs,
                                const OutputSelection& selected, int64_t begin, int64_t count,
                                int64_t rows_per_instance, std::vector<double>* values);

OutputSelection SelectClasses(const std::string& name, const Tensor& output, int64_t num_instances);

// The explained output: the metadata's, else the class scores ("scores", "probabilities")
// when the signature has them, else its first float output.
absl::StatusOr<std::string> ExplainedOutput(const ExplainSpec& spec, const SignatureInfo& signature,
                                            const std::map<std::string, Tensor>& outputs);

// INVALID_ARGUMENT naming the budget when `num_instances` x `num_baselines` problems of
// `num_features` features need more evaluations than limits.max_evaluations; checked before
// the rows are built, so an oversized request allocates nothing.
absl::Status CheckEvaluationBudget(int64_t num_instances, int num_baselines, int num_features,
                                   int path_count, const ExplainLimits& limits);

// Runs SampledShapley over every (instance, baseline) row in one call of `evaluate` and
// averages each instance's attributions over its baselines.
absl::StatusOr<std::vector<ShapleyAttribution>> Solve(const Problem& problem, int path_count,
                                                      const ExplainLimits& limits,
                                                      const ScalarBatchFn& evaluate);

// One instance's entry of "explanations", around its featureAttributions object's members.
void AppendExplanation(const ShapleyAttribution& a, const std::string& feature_attributions,
                       int64_t class_index, bool class_scores, const ExplainSpec& spec,
                       const std::string& output_name, std::string* out);

// Appends {"predictions": ...}'s members (without the opening brace) to `out`, closing it.
absl::Status AppendPredictions(const std::map<std::string, Tensor>& outputs,
                               const std::vector<std::string>& order, std::string* out);

// :explain of a signature taking one string input of serialized tf.Examples.
absl::StatusOr<std::string> ExplainExamples(const ServableVersion& servable, absl::string_view body,
                                            simdjson::dom::element root,
                                            const SignatureInfo& signature, const ExplainSpec& spec,
                                            const ExplainLimits& limits);

}  // namespace kiln::serving::explain_internal
