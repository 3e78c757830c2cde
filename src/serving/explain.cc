#include "kiln/serving/explain.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

namespace kiln::serving {

int64_t ShapleyEvaluationsPerInstance(int num_features, int path_count) {
  // f(b) and f(x) are shared by every path; each path adds its M - 1 interior coalitions.
  return 2 + static_cast<int64_t>(path_count) * std::max(0, num_features - 1);
}

absl::StatusOr<std::vector<ShapleyAttribution>> SampledShapley(absl::Span<const float> instances,
                                                               absl::Span<const float> baselines,
                                                               const FeatureLayout& layout,
                                                               const ShapleyOptions& options,
                                                               const ScalarBatchFn& f) {
  const int64_t row_size = static_cast<int64_t>(layout.feature_of_element.size());
  const int num_features = layout.num_features;
  if (row_size == 0 || num_features <= 0) {
    return absl::InvalidArgumentError("explain: the instance has no features to attribute");
  }
  if (options.path_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("explain: pathCount must be at least 1, got ", options.path_count));
  }
  if (instances.size() % row_size != 0 || instances.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("explain: ", instances.size(),
                                                   " values are not whole instances of ", row_size,
                                                   " elements"));
  }
  const int64_t num_instances = static_cast<int64_t>(instances.size()) / row_size;
  const bool shared_baseline = static_cast<int64_t>(baselines.size()) == row_size;
  if (!shared_baseline && static_cast<int64_t>(baselines.size()) != num_instances * row_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("explain: the baseline has ", baselines.size(), " values; expected ", row_size,
                     " (one instance's worth) or ", num_instances * row_size));
  }
  std::vector<std::vector<int64_t>> elements_of(num_features);
  for (int64_t e = 0; e < row_size; ++e) {
    const int feature = layout.feature_of_element[e];
    if (feature < 0 || feature >= num_features) {
      return absl::InvalidArgumentError(absl::StrCat("explain: element ", e, " maps to feature ",
                                                     feature, " outside [0, ", num_features, ")"));
    }
    elements_of[feature].push_back(e);
  }
  const int paths = options.path_count;
  const int64_t per_instance = ShapleyEvaluationsPerInstance(num_features, paths);
  const int64_t total = per_instance * num_instances;
  if (options.max_evaluations > 0 && total > options.max_evaluations) {
    return absl::InvalidArgumentError(absl::StrCat(
        "explain: the request needs ", total, " model evaluations (", num_instances,
        " instances x (2 + pathCount ", paths, " x (", num_features,
        " features - 1))), over the explain evaluation budget of ", options.max_evaluations,
        "; lower pathCount, group features or send fewer instances"));
  }
  if (total * row_size > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("explain: the evaluations would take ",
                                                   total * row_size,
                                                   " floats, too many for one request"));
  }

  // Permutations, seeded per request and per instance so that an answer can be reproduced.
  std::vector<std::vector<int>> perms(static_cast<size_t>(num_instances * paths));
  std::mt19937_64 rng(options.seed);
  for (int64_t n = 0; n < num_instances; ++n) {
    for (int p = 0; p < paths; ++p) {
      std::vector<int>& perm = perms[n * paths + p];
      if (p % 2 == 1) {  // the antithetic partner of the previous path
        perm.assign(perms[n * paths + p - 1].rbegin(), perms[n * paths + p - 1].rend());
      } else {
        perm.resize(num_features);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
      }
    }
  }

  // Every evaluation row of every instance, in one matrix: instance n owns rows
  // [n * per_instance, (n + 1) * per_instance): its baseline, itself, then each path's
  // interior coalitions in order.
  std::vector<float> rows(static_cast<size_t>(total * row_size));
  for (int64_t n = 0; n < num_instances; ++n) {
    const float* x = instances.data() + n * row_size;
    const float* b = baselines.data() + (shared_baseline ? 0 : n * row_size);
    float* out = rows.data() + n * per_instance * row_size;
    std::copy(b, b + row_size, out);
    std::copy(x, x + row_size, out + row_size);
    out += 2 * row_size;
    for (int p = 0; p < paths; ++p) {
      const std::vector<int>& perm = perms[n * paths + p];
      const float* previous = b;
      for (int k = 0; k + 1 < num_features; ++k) {
        std::copy(previous, previous + row_size, out);
        for (int64_t e : elements_of[perm[k]]) out[e] = x[e];
        previous = out;
        out += row_size;
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<double> values, f(rows, total));
  if (static_cast<int64_t>(values.size()) != total) {
    return absl::InternalError(absl::StrCat("explain: the evaluator returned ", values.size(),
                                            " values for ", total, " rows"));
  }

  std::vector<ShapleyAttribution> results(static_cast<size_t>(num_instances));
  // Independent samples for the error estimate: antithetic pairs are independent of each
  // other but their two halves are not, so a pair's mean is one sample. With a single pair
  // (pathCount 2 or 3) the paths themselves are used; with one path there is no spread to
  // measure and the error is reported as 1 (nothing is known).
  const int units = paths >= 4 ? (paths + 1) / 2 : paths;
  const int unit_size = paths >= 4 ? 2 : 1;
  std::vector<double> path_contrib(static_cast<size_t>(paths) * num_features);
  for (int64_t n = 0; n < num_instances; ++n) {
    const double* v = values.data() + n * per_instance;
    ShapleyAttribution& r = results[n];
    r.baseline_output = v[0];
    r.instance_output = v[1];
    for (int p = 0; p < paths; ++p) {
      const std::vector<int>& perm = perms[n * paths + p];
      const double* interior = v + 2 + static_cast<int64_t>(p) * (num_features - 1);
      double before = v[0];
      for (int k = 0; k < num_features; ++k) {
        const double after = k + 1 < num_features ? interior[k] : v[1];
        path_contrib[static_cast<size_t>(p) * num_features + perm[k]] = after - before;
        before = after;
      }
    }
    r.attributions.assign(num_features, 0.0);
    double variance_sum = 0;
    for (int i = 0; i < num_features; ++i) {
      std::vector<double> samples(units, 0.0);
      for (int u = 0; u < units; ++u) {
        int count = 0;
        for (int p = u * unit_size; p < std::min(paths, (u + 1) * unit_size); ++p, ++count) {
          samples[u] += path_contrib[static_cast<size_t>(p) * num_features + i];
        }
        samples[u] /= count;
      }
      double mean = 0;
      for (int p = 0; p < paths; ++p)
        mean += path_contrib[static_cast<size_t>(p) * num_features + i];
      mean /= paths;
      r.attributions[i] = mean;
      if (units >= 2) {
        double unit_mean = std::accumulate(samples.begin(), samples.end(), 0.0) / units;
        double ss = 0;
        for (double s : samples) ss += (s - unit_mean) * (s - unit_mean);
        variance_sum += ss / (units - 1) / units;
      }
    }
    const double delta = std::abs(r.instance_output - r.baseline_output);
    if (units < 2 && num_features > 1) {
      r.approximation_error = 1.0;
    } else {
      // Two standard errors: a bound the true error stays under about 95% of the time,
      // rather than a 1-sigma figure that it exceeds about half the time.
      const double bound = 2.0 * std::sqrt(variance_sum);
      r.approximation_error = delta > 1e-12 ? bound / delta : bound;
    }
  }
  return results;
}

}  // namespace kiln::serving
