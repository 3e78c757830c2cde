// :explain's cost against the compiled plan it runs on (issue 13's targets), in process, on
// the same code path as `kiln serve` (serving::ExplainJson over a ServableVersion):
//
//   explain_bench penguin ../shared/testdata/models/tfx_penguin_keras
//       p50 of one-instance explain requests, pathCount 10 (target: <= 2 ms on 2 cores)
//   explain_bench tabular /tmp/tabular100/1/model.onnx     (bench/explain/make_tabular_model.py)
//       evaluations/s of explain against the plan's raw rows/s for a batch of the same size
//       (target >= 80%) and against the same evaluations as single predictions (>= 10x)
//
// Each round measures every variant once, interleaved, so machine load hits them alike.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/runtime/model.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/server_core.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "explain_bench: %s\n", status.ToString().c_str());
  return 1;
}

int Penguin(const std::string& path, int rounds, int iterations) {
  auto model = kiln::runtime::Model::Load(path);
  if (!model.ok()) return Fail(model.status());
  kiln::serving::ServableVersion servable("penguin", 1, *model, std::nullopt, nullptr);
  const std::string body =
      // The TFX penguin model takes features scaled to [0, 1].
      R"({"examples": [{"culmen_length_mm": 0.3, "culmen_depth_mm": 0.3, )"
      R"("flipper_length_mm": 0.3, "body_mass_g": 0.3}], "explanationSpecOverride": )"
      R"({"parameters": {"sampledShapleyAttribution": {"pathCount": 10}}}})";
  const kiln::serving::ExplainLimits limits;
  for (int warm = 0; warm < 20; ++warm) {
    auto reply = kiln::serving::ExplainJson(servable, body, limits);
    if (!reply.ok()) return Fail(reply.status());
  }
  std::printf("penguin explain, 1 instance, 4 features, pathCount 10 (32 evaluations)\n");
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> ms;
    for (int i = 0; i < iterations; ++i) {
      const auto start = Clock::now();
      auto reply = kiln::serving::ExplainJson(servable, body, limits);
      ms.push_back(Seconds(Clock::now() - start) * 1e3);
      if (!reply.ok()) return Fail(reply.status());
    }
    std::printf("round %d: p50 %.3f ms  p90 %.3f ms\n", round + 1, Percentile(ms, 0.5),
                Percentile(ms, 0.9));
  }
  return 0;
}

int Tabular(const std::string& path, int rounds, int iterations) {
  auto model = kiln::runtime::Model::Load(path);
  if (!model.ok()) return Fail(model.status());
  const kiln::SignatureInfo& signature = (*model)->signatures().begin()->second;
  const std::string signature_key = signature.key;
  const std::string input_key = signature.input_keys.at(0);
  const int64_t features = signature.inputs.at(input_key).shape.back();
  kiln::serving::ServableVersion servable("tabular", 1, *model, std::nullopt, nullptr);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::string body = "{\"instances\": [[";
  for (int64_t i = 0; i < features; ++i) absl::StrAppend(&body, i ? ", " : "", normal(rng));
  body +=
      "]], \"explanationSpecOverride\": {\"parameters\": {\"sampledShapleyAttribution\": "
      "{\"pathCount\": 10}}}}";
  const int64_t evaluations = kiln::serving::ShapleyEvaluationsPerInstance(features, 10);
  kiln::Tensor batch(kiln::DType::kFloat32, kiln::Shape{evaluations, features});
  for (int64_t i = 0; i < batch.num_elements(); ++i) batch.data<float>()[i] = normal(rng);
  kiln::Tensor single(kiln::DType::kFloat32, kiln::Shape{1, features});
  for (int64_t i = 0; i < features; ++i) single.data<float>()[i] = normal(rng);
  const kiln::serving::ExplainLimits limits;
  // Warm up every plan (batch of `evaluations`, batch 1) before timing.
  for (int warm = 0; warm < 5; ++warm) {
    if (auto r = kiln::serving::ExplainJson(servable, body, limits); !r.ok())
      return Fail(r.status());
    if (auto r = (*model)->Run(signature_key, {{input_key, batch}}); !r.ok())
      return Fail(r.status());
    if (auto r = (*model)->Run(signature_key, {{input_key, single}}); !r.ok())
      return Fail(r.status());
  }
  std::printf("tabular explain, 1 instance, %lld features, pathCount 10 (%lld evaluations)\n",
              static_cast<long long>(features), static_cast<long long>(evaluations));
  for (int round = 0; round < rounds; ++round) {
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      if (auto r = kiln::serving::ExplainJson(servable, body, limits); !r.ok())
        return Fail(r.status());
    }
    const double explain_s = Seconds(Clock::now() - start) / iterations;
    start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      if (auto r = (*model)->Run(signature_key, {{input_key, batch}}); !r.ok())
        return Fail(r.status());
    }
    const double raw_s = Seconds(Clock::now() - start) / iterations;
    // Single predictions: enough of them to time, scaled to `evaluations`.
    const int singles = 2000;
    start = Clock::now();
    for (int i = 0; i < singles; ++i) {
      if (auto r = (*model)->Run(signature_key, {{input_key, single}}); !r.ok())
        return Fail(r.status());
    }
    const double single_s = Seconds(Clock::now() - start) / singles * evaluations;
    std::printf(
        "round %d: explain %.3f ms (%.0f evaluations/s)  raw batch %.3f ms (%.0f rows/s)  "
        "singles %.3f ms  explain/raw %.0f%%  explain vs singles %.1fx\n",
        round + 1, explain_s * 1e3, evaluations / explain_s, raw_s * 1e3, evaluations / raw_s,
        single_s * 1e3, 100.0 * raw_s / explain_s, single_s / explain_s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: explain_bench penguin|tabular MODEL [ROUNDS [ITERATIONS]]\n"
                 "  penguin: ../shared/testdata/models/tfx_penguin_keras\n"
                 "  tabular: the ONNX model of bench/explain/make_tabular_model.py\n");
    return 2;
  }
  const std::string kind = argv[1];
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const int iterations = argc > 4 ? std::atoi(argv[4]) : (kind == "penguin" ? 500 : 50);
  if (kind == "penguin") return Penguin(argv[2], rounds, iterations);
  if (kind == "tabular") return Tabular(argv[2], rounds, iterations);
  std::fprintf(stderr, "explain_bench: unknown kind '%s'\n", kind.c_str());
  return 2;
}
