// Sampled-Shapley feature attributions (Castro, Gomez & Tejada 2009), the one explanation
// method of Vertex AI's optimized runtime, served on :explain.
//
// For an instance x and a baseline b, feature i's Shapley value is its marginal contribution
// f(S + i) - f(S) averaged over every order in which features can be switched from b to x.
// We sample `path_count` orders (permutations): each path starts at f(b), switches one
// feature at a time, and ends at f(x), so its M marginal contributions telescope to
// f(x) - f(b): efficiency holds exactly for every sample, not just in expectation.
// Permutations come in antithetic pairs (pi, reverse(pi)): a feature that comes early in one
// comes late in the other, which cancels most of the variance position causes.
//
// Cost model: f(b) and f(x) are shared, so one instance costs 2 + path_count * (M - 1)
// evaluations. All evaluations of all instances of a request are built up front and handed
// to the evaluator as one matrix, so the model sees large batches, never single rows.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/serving/server_core.h"

namespace kiln::serving {

// Evaluates the model on `num_rows` rows of `row_size` floats each (row-major in `rows`)
// and returns one scalar per row: the explained output.
using ScalarBatchFn = std::function<absl::StatusOr<std::vector<double>>(
    absl::Span<const float> rows, int64_t num_rows)>;

struct ShapleyOptions {
  int path_count = 10;          // permutations per instance; Vertex allows 1..50
  uint64_t seed = 0;            // same seed, same permutations: reproducible answers
  int64_t max_evaluations = 0;  // refuse requests costing more; 0 = no limit
};

struct ShapleyAttribution {
  std::vector<double> attributions;  // one per feature
  double baseline_output = 0;        // f(b)
  double instance_output = 0;        // f(x)
  // Two standard errors of the attribution vector (sqrt of the sum over features of each
  // estimate's variance of the mean over independent antithetic pairs), relative to
  // |f(x) - f(b)| as Vertex reports it; 0 when every sample agrees (additive models, and
  // models of pairwise interactions, which antithetic pairs attribute exactly).
  double approximation_error = 0;
};

// A feature groups one or more elements of the flattened row: `feature_of_element[e]` is
// the feature that element e belongs to (0..num_features-1), so Vertex's groupName and
// multi-element features are the same thing here.
struct FeatureLayout {
  std::vector<int> feature_of_element;
  int num_features = 0;
};

// Evaluations one instance costs under `layout` and `path_count`.
int64_t ShapleyEvaluationsPerInstance(int num_features, int path_count);

// Explains every instance of `instances` (each `row_size` = feature_of_element.size()
// floats, baselines the same, one baseline per instance or one shared) in one call of `f`
// (which may split the matrix into batches it prefers). INVALID_ARGUMENT names the budget
// when the evaluations exceed options.max_evaluations.
absl::StatusOr<std::vector<ShapleyAttribution>> SampledShapley(absl::Span<const float> instances,
                                                               absl::Span<const float> baselines,
                                                               const FeatureLayout& layout,
                                                               const ShapleyOptions& options,
                                                               const ScalarBatchFn& f);

// The REST :explain handler: parses Vertex's request (TF Serving's "instances" or "inputs"
// plus an optional "explanationSpecOverride"), explains every instance over the float inputs
// of the signature, running all evaluations through `servable` in batches of `batch_rows`,
// and writes Vertex's response ("explanations" and "predictions"). The model's
// assets.extra/explanation_metadata.json (Vertex's ExplanationMetadata) supplies defaults
// per input and output that the request's override replaces.
struct ExplainLimits {
  int64_t max_evaluations = int64_t{1} << 22;  // per request, all instances together
  int64_t batch_rows = 4096;  // rows per model call; at most the batcher's max_batch_size
  uint64_t seed = 0x5eed;     // fixed: the same request gets the same answer
};
absl::StatusOr<std::string> ExplainJson(const ServableVersion& servable, absl::string_view body,
                                        const ExplainLimits& limits);

}  // namespace kiln::serving
