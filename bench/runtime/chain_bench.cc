// A chain of N tiny elementwise ops (alternating Add with a constant and Relu, on 16 floats)
// run through the plan compiler and executor: measures per-op overhead of a run.
//
//   build/bench/runtime/runtime_chain_bench [--ops 1000] [--elements 16] [--runs 2000]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/core/clock.h"
#include "kiln/exec/plan.h"
#include "kiln/exec/plan_cache.h"

namespace {

int64_t Flag(int argc, char** argv, const char* name, int64_t default_value) {
  const std::string prefix = std::string("--") + name;
  for (int i = 1; i < argc; ++i) {
    if (prefix == argv[i] && i + 1 < argc) return std::atoll(argv[i + 1]);
    if (std::strncmp(argv[i], (prefix + "=").c_str(), prefix.size() + 1) == 0) {
      return std::atoll(argv[i] + prefix.size() + 1);
    }
  }
  return default_value;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  const int64_t ops = Flag(argc, argv, "ops", 1000);
  const int64_t elements = Flag(argc, argv, "elements", 16);
  const int64_t runs = Flag(argc, argv, "runs", 2000);
  for (const char* op : {"Add", "Relu"}) {
    if (kernels::KernelRegistry::Global().Find("", op) == nullptr) {
      std::fprintf(stderr, "no %s kernel linked\n", op);
      return 1;
    }
  }
  auto graph = std::make_shared<ir::Graph>();
  const ir::ValueId x =
      graph->AddValue("x", ir::TensorType::Of(DType::kFloat32, {elements}));
  graph->inputs = {x};
  const ir::ValueId c = graph->AddConstant(
      "c", Tensor::FromVector<float>(std::vector<float>(elements, 0.001f), Shape{elements}));
  ir::ValueId v = x;
  for (int64_t i = 0; i < ops; ++i) {
    const ir::NodeId n = i % 2 == 0 ? graph->AddNode("Add", {v, c}, 1)
                                    : graph->AddNode("Relu", {v}, 1);
    v = graph->node(n).outputs[0];
  }
  graph->outputs = {v};

  exec::PlanCache cache(graph, {}, 4);
  const std::vector<Shape> shapes = {Shape{elements}};
  const int64_t compile_start = NowNanos();
  auto plan = cache.Get(shapes);
  if (!plan.ok()) {
    std::fprintf(stderr, "compile failed: %s\n", std::string(plan.status().message()).c_str());
    return 1;
  }
  const double compile_ms = (NowNanos() - compile_start) / 1e6;
  std::vector<Tensor> inputs = {Tensor::Zeros(DType::kFloat32, Shape{elements})};
  std::vector<Tensor> outputs;
  for (int i = 0; i < 20; ++i) {
    if (auto s = (*plan)->Run(inputs, &outputs); !s.ok()) {
      std::fprintf(stderr, "run failed: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::vector<double> per_run_us;
  per_run_us.reserve(runs);
  for (int64_t r = 0; r < runs; ++r) {
    const int64_t t0 = NowNanos();
    auto p = cache.Get(shapes);  // a run includes the plan lookup, as Model::Run does
    (void)(*p)->Run(inputs, &outputs);
    per_run_us.push_back((NowNanos() - t0) / 1e3);
  }
  std::sort(per_run_us.begin(), per_run_us.end());
  const double p50 = per_run_us[per_run_us.size() / 2];
  const double p99 = per_run_us[per_run_us.size() * 99 / 100];
  const exec::PlanStats& st = (*plan)->stats();
  std::printf("chain of %lld ops on float[%lld]: %d steps, arena %zu bytes (%zu without reuse), "
              "%d in place, compile %.2f ms\n",
              static_cast<long long>(ops), static_cast<long long>(elements), st.steps,
              st.arena_bytes, st.unshared_bytes, st.in_place_outputs, compile_ms);
  std::printf("per run: p50 %.1f us, p99 %.1f us; per op: p50 %.3f us, p99 %.3f us\n", p50, p99,
              p50 / ops, p99 / ops);
  std::printf("{\"ops\": %lld, \"elements\": %lld, \"p50_us_per_op\": %.4f, "
              "\"p99_us_per_op\": %.4f}\n",
              static_cast<long long>(ops), static_cast<long long>(elements), p50 / ops,
              p99 / ops);
  return 0;
}
