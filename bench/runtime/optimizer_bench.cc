// What the optimizer costs at load, and what inferring value types once per round saves.
//
//   build/bench/runtime/runtime_optimizer_bench MODEL.onnx... [--repeats 7]
//
// For each model (its first signature), interleaved `repeats` times on copies of the imported
// graph: opt::Optimize as the runtime runs it (types inferred once per round, pass.h), and the
// same passes with types inferred before every pass at or above kFirstTypedPassOrder (what the
// optimizer did before; opt::RunPass infers first), until nothing changes. Also one
// ir::InferShapes alone. Prints one JSON line per model with the medians (ms), their ratio and
// the rounds; both ways must give the same graph (checked, and reported).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "kiln/core/clock.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/import/onnx.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/opt/pass.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  int repeats = 7;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &repeats) || repeats < 1) {
        std::fprintf(stderr, "--repeats wants a positive number\n");
        return 2;
      }
    } else {
      models.push_back(argv[i]);
    }
  }
  if (models.empty()) {
    std::fprintf(stderr, "usage: %s MODEL.onnx... [--repeats N]\n", argv[0]);
    return 2;
  }
  const exec::KernelEvaluator evaluator;
  opt::PassOptions options;
  options.evaluator = &evaluator;
  options.conv_activation_layout = kernels::PreferredConvActivationLayout();
  for (const std::string& path : models) {
    auto imported = import::ImportOnnxFile(path);
    if (!imported.ok() || imported->signatures.empty()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   imported.ok() ? "no signature" : imported.status().ToString().c_str());
      return 1;
    }
    const ir::Graph& original = imported->signatures[0].graph;
    std::vector<double> once_ms, every_ms, infer_ms;
    int rounds = 0;
    bool same = true;
    for (int r = 0; r < repeats; ++r) {
      ir::Graph once = original;
      opt::OptimizationLog log;
      int64_t start = NowNanos();
      absl::Status status = opt::Optimize(once, options, &log);
      once_ms.push_back((NowNanos() - start) / 1e6);
      if (!status.ok()) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), status.ToString().c_str());
        return 1;
      }
      ir::Graph every = original;
      start = NowNanos();
      for (rounds = 1; rounds <= options.max_rounds; ++rounds) {
        bool changed = false;
        for (const opt::PassInfo& pass : opt::PassRegistry::Global().Passes()) {
          auto notes = opt::RunPass(pass.name, every, options);
          if (!notes.ok()) {
            std::fprintf(stderr, "%s: %s\n", path.c_str(), notes.status().ToString().c_str());
            return 1;
          }
          changed = changed || !notes->empty();
        }
        if (!changed) break;
      }
      every_ms.push_back((NowNanos() - start) / 1e6);
      same = same && once.ToString() == every.ToString();
      ir::Graph typed = original;
      start = NowNanos();
      status = ir::InferShapes(typed);
      infer_ms.push_back((NowNanos() - start) / 1e6);
    }
    const double once = Median(once_ms), every = Median(every_ms);
    std::printf(
        "{\"model\": \"%s\", \"nodes\": %d, \"rounds\": %d, \"optimize_once_per_round_ms\": %.2f, "
        "\"optimize_infer_before_every_pass_ms\": %.2f, \"ratio\": %.3f, \"one_inference_ms\": "
        "%.2f, \"same_graph\": %s}\n",
        path.c_str(), original.num_live_nodes(), std::min(rounds, options.max_rounds), once, every,
        every > 0 ? once / every : 0.0, Median(infer_ms), same ? "true" : "false");
  }
  return 0;
}
