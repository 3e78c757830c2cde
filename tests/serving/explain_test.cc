// Sampled Shapley against the axioms and against exact Shapley values by brute force.
#include "kiln/serving/explain.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace kiln::serving {
namespace {

FeatureLayout OnePerElement(int m) {
  FeatureLayout layout;
  layout.num_features = m;
  for (int i = 0; i < m; ++i) layout.feature_of_element.push_back(i);
  return layout;
}

// Wraps a per-row model as a batch evaluator and counts the calls: one per request.
struct RowModel {
  std::function<double(const float*)> row;
  int64_t row_size;
  int calls = 0;
  ScalarBatchFn Fn() {
    return [this](absl::Span<const float> rows, int64_t n) -> absl::StatusOr<std::vector<double>> {
      ++calls;
      std::vector<double> out(n);
      for (int64_t r = 0; r < n; ++r) out[r] = row(rows.data() + r * row_size);
      return out;
    };
  }
};

// Exact Shapley values over all 2^M coalitions.
std::vector<double> BruteForceShapley(const std::function<double(const float*)>& f,
                                      const std::vector<float>& x, const std::vector<float>& b) {
  const int m = static_cast<int>(x.size());
  std::vector<double> value(1u << m);
  std::vector<float> row(m);
  for (unsigned s = 0; s < (1u << m); ++s) {
    for (int i = 0; i < m; ++i) row[i] = (s >> i) & 1 ? x[i] : b[i];
    value[s] = f(row.data());
  }
  std::vector<double> factorial(m + 1, 1.0);
  for (int i = 1; i <= m; ++i) factorial[i] = factorial[i - 1] * i;
  std::vector<double> phi(m, 0.0);
  for (int i = 0; i < m; ++i) {
    for (unsigned s = 0; s < (1u << m); ++s) {
      if ((s >> i) & 1) continue;
      const int size = __builtin_popcount(s);
      const double weight = factorial[size] * factorial[m - size - 1] / factorial[m];
      phi[i] += weight * (value[s | (1u << i)] - value[s]);
    }
  }
  return phi;
}

TEST(SampledShapleyTest, LinearModelIsExactForEveryPathCount) {
  const std::vector<double> w = {0.5, -2.0, 3.0, 0.0, 1.25, -0.75};
  RowModel model{[&](const float* r) {
                   double y = 0.3;
                   for (size_t i = 0; i < w.size(); ++i) y += w[i] * r[i];
                   return y;
                 },
                 6};
  const std::vector<float> x = {1, 2, -1, 4, 0.5, 3}, b = {0.5, 0, 0, 1, 1, -1};
  for (int paths : {1, 2, 3, 4, 7, 10, 50}) {
    auto result =
        SampledShapley(x, b, OnePerElement(6), {.path_count = paths, .seed = 7}, model.Fn());
    ASSERT_TRUE(result.ok()) << result.status();
    for (int i = 0; i < 6; ++i) {
      EXPECT_NEAR((*result)[0].attributions[i], w[i] * (x[i] - b[i]), 1e-9) << paths;
    }
    if (paths >= 2) {
      EXPECT_NEAR((*result)[0].approximation_error, 0.0, 1e-9) << paths;
    }
  }
}

// Interactions of three and more features: antithetic pairs are exact for models whose
// interactions are at most pairwise, so such a model would not exercise the estimator.
double Nonlinear(const float* r) {
  return std::tanh(r[0] * r[1] * r[2]) + r[3] * r[4] * r[5] + std::sin(r[0] + r[6] * r[7]) +
         std::max(0.0f, r[1] + r[3] - r[7]) * r[5];  // r[8] is ignored (a dummy)
}

TEST(SampledShapleyTest, NonlinearModelIsWithinTheReportedErrorOfBruteForce) {
  const int m = 9, num_instances = 20;
  RowModel model{Nonlinear, m};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> xs(m * num_instances), b(m, 0.0f);
  for (float& v : xs) v = normal(rng);
  auto result = SampledShapley(xs, b, OnePerElement(m), {.path_count = 10, .seed = 11}, model.Fn());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(model.calls, 1);  // every evaluation of the request in one batch
  double mean_error = 0, mean_reported = 0;
  for (int n = 0; n < num_instances; ++n) {
    const std::vector<float> x(xs.begin() + n * m, xs.begin() + (n + 1) * m);
    const std::vector<double> exact = BruteForceShapley(Nonlinear, x, b);
    const auto& r = (*result)[n];
    double sq = 0;
    for (int i = 0; i < m; ++i) sq += std::pow(r.attributions[i] - exact[i], 2);
    mean_error += std::sqrt(sq) / std::abs(r.instance_output - r.baseline_output);
    mean_reported += r.approximation_error;
  }
  mean_error /= num_instances;
  mean_reported /= num_instances;
  EXPECT_GT(mean_reported, 0.0);
  EXPECT_LE(mean_error, mean_reported);
  // ... and is a useful bound, not an inflated one.
  EXPECT_GE(mean_error, mean_reported / 4);
}

TEST(SampledShapleyTest, EfficiencySymmetryAndDummy) {
  // Features 0 and 1 enter symmetrically; feature 3 is ignored.
  RowModel model{[](const float* r) { return std::exp(r[0] + r[1]) * r[2]; }, 4};
  const std::vector<float> x = {0.7f, 0.7f, 2.0f, 5.0f}, b = {0, 0, 1, 0};
  auto result = SampledShapley(x, b, OnePerElement(4), {.path_count = 6, .seed = 1}, model.Fn());
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& r = (*result)[0];
  double sum = 0;
  for (double a : r.attributions) sum += a;
  EXPECT_NEAR(sum, r.instance_output - r.baseline_output, 1e-9);
  EXPECT_EQ(r.attributions[3], 0.0);
  // Each path's contributions telescope; with all 3! orders of the real features
  // covered by many paths, symmetric features agree closely.
  auto many = SampledShapley(x, b, OnePerElement(4), {.path_count = 50, .seed = 1}, model.Fn());
  ASSERT_TRUE(many.ok());
  EXPECT_NEAR((*many)[0].attributions[0], (*many)[0].attributions[1], 0.15 * std::abs(sum));
  // Exact symmetry: a model where swapping the two is the only interaction.
  RowModel sym{[](const float* r) { return r[0] * r[1]; }, 2};
  auto pair = SampledShapley(std::vector<float>{3, 3}, std::vector<float>{0, 0}, OnePerElement(2),
                             {.path_count = 2}, sym.Fn());
  ASSERT_TRUE(pair.ok());
  EXPECT_DOUBLE_EQ((*pair)[0].attributions[0], (*pair)[0].attributions[1]);
}

TEST(SampledShapleyTest, SameSeedSameAnswerAndGroupsAreOneFeature) {
  RowModel model{Nonlinear, 9};
  std::vector<float> x(9, 1.0f), b(9, 0.0f);
  auto a = SampledShapley(x, b, OnePerElement(9), {.path_count = 4, .seed = 5}, model.Fn());
  auto c = SampledShapley(x, b, OnePerElement(9), {.path_count = 4, .seed = 5}, model.Fn());
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_EQ((*a)[0].attributions, (*c)[0].attributions);
  FeatureLayout grouped;
  grouped.num_features = 2;
  grouped.feature_of_element = {0, 0, 0, 0, 1, 1, 1, 1, 1};
  auto g = SampledShapley(x, b, grouped, {.path_count = 2, .seed = 5}, model.Fn());
  ASSERT_TRUE(g.ok());
  ASSERT_EQ((*g)[0].attributions.size(), 2u);
  EXPECT_NEAR((*g)[0].attributions[0] + (*g)[0].attributions[1],
              (*g)[0].instance_output - (*g)[0].baseline_output, 1e-9);
}

TEST(SampledShapleyTest, BudgetAndBadShapesAreInvalidArgument) {
  RowModel model{Nonlinear, 9};
  std::vector<float> x(9, 1.0f), b(9, 0.0f);
  auto over =
      SampledShapley(x, b, OnePerElement(9), {.path_count = 10, .max_evaluations = 50}, model.Fn());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("budget of 50"), std::string::npos);
  EXPECT_EQ(model.calls, 0);
  auto ragged = SampledShapley(std::vector<float>(10, 1.0f), b, OnePerElement(9), {}, model.Fn());
  EXPECT_EQ(ragged.status().code(), absl::StatusCode::kInvalidArgument);
  auto zero = SampledShapley(x, b, OnePerElement(9), {.path_count = 0}, model.Fn());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::serving
