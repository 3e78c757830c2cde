// Micro-benchmarks of the math kernels, run through the kernel registry exactly as the
// executor runs them (Reshape once, Compute per iteration into preallocated outputs), next to
// peers measured in the same process: memcpy (the memory-bandwidth roof for streaming ops)
// and plain C++ loops compiled with the same flags (what a straightforward kernel gets).
//
//   build-kmath/bench/kernels/kernels_math_bench --benchmark_counters_tabular=true
//   KILN_MAX_ISA=avx2 build-kmath/bench/kernels/kernels_math_bench   # the AVX2 path
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/simd/ops.h"
#include "kiln/core/tensor.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

// One prepared kernel with its inputs and preallocated outputs.
struct Prepared {
  ir::Graph graph;
  std::unique_ptr<OpKernel> kernel;
  std::vector<Tensor> inputs, outputs;
  std::shared_ptr<Buffer> scratch;

  Prepared(const std::string& op, std::vector<Tensor> in,
           std::map<std::string, ir::Attribute> attrs = {}, std::set<int> constants = {}) {
    inputs = std::move(in);
    std::vector<ir::ValueId> ids;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ids.push_back(constants.count(i) ? graph.AddConstant("c" + std::to_string(i), inputs[i])
                                       : graph.AddValue("in" + std::to_string(i)));
    }
    const ir::NodeId id = graph.AddNode(op, ids, 1, std::move(attrs), "bench");
    const ir::Node& node = graph.node(id);
    kernel = std::move(*(*KernelRegistry::Global().Find("", op))(node));
    ReshapeContext p;
    p.node = &node;
    for (size_t i = 0; i < inputs.size(); ++i) {
      InputInfo info{inputs[i].dtype(), inputs[i].shape(), constants.count(i) ? &inputs[i] : nullptr};
      p.inputs.push_back(info);
    }
    p.SetNumOutputs(1);
    if (!kernel->Reshape(p).ok()) std::abort();
    outputs.emplace_back(p.output_dtypes[0], p.output_shapes[0]);
    if (p.scratch_bytes) scratch = Buffer::Allocate(p.scratch_bytes);
  }

  void Run() {
    ComputeContext ctx;
    ctx.inputs = absl::MakeConstSpan(inputs);
    ctx.outputs = absl::MakeSpan(outputs);
    ctx.scratch = scratch ? scratch->data() : nullptr;
    if (!kernel->Compute(ctx).ok()) std::abort();
  }
};

Tensor Random(Shape shape, float lo = -4.f, float hi = 4.f) {
  Tensor t(DType::kFloat32, std::move(shape));
  float* p = t.data<float>();
  uint32_t s = 12345;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * static_cast<float>(s >> 8) / 16777216.f;
  }
  return t;
}

void SetBytes(benchmark::State& state, int64_t bytes_per_iter) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iter);
  state.counters["isa"] = std::strcmp(simd::Best().isa, "avx512") == 0 ? 512 : 256;
}

// --- Add (binary, same shape) ----------------------------------------------------------
void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  Prepared k("Add", {Random({n}), Random({n})});
  for (auto _ : state) k.Run();
  SetBytes(state, 3 * n * 4);
}
void BM_AddBroadcastRow(benchmark::State& state) {  // [n/256, 256] + [256]
  const int64_t n = state.range(0);
  Prepared k("Add", {Random({n / 256, 256}), Random({256})});
  for (auto _ : state) k.Run();
  SetBytes(state, 2 * n * 4);
}
void BM_PeerPlainAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Random({n}), b = Random({n}), c(DType::kFloat32, Shape{n});
  for (auto _ : state) {
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    float* z = c.data<float>();
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
    benchmark::DoNotOptimize(z);
  }
  SetBytes(state, 3 * n * 4);
}

// --- Relu (unary) -----------------------------------------------------------------------
void BM_Relu(benchmark::State& state) {
  const int64_t n = state.range(0);
  Prepared k("Relu", {Random({n})});
  for (auto _ : state) k.Run();
  SetBytes(state, 2 * n * 4);
}
void BM_PeerMemcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Random({n}), c(DType::kFloat32, Shape{n});
  for (auto _ : state) {
    std::memcpy(c.raw_data(), a.raw_data(), n * 4);
    benchmark::DoNotOptimize(c.raw_data());
  }
  SetBytes(state, 2 * n * 4);
}

// --- Transcendentals --------------------------------------------------------------------
void BM_Sigmoid(benchmark::State& state) {
  const int64_t n = state.range(0);
  Prepared k("Sigmoid", {Random({n})});
  for (auto _ : state) k.Run();
  SetBytes(state, 2 * n * 4);
}
void BM_Gelu(benchmark::State& state) {
  const int64_t n = state.range(0);
  Prepared k("Gelu", {Random({n})});
  for (auto _ : state) k.Run();
  SetBytes(state, 2 * n * 4);
}
void BM_PeerLibmSigmoid(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Random({n}), c(DType::kFloat32, Shape{n});
  for (auto _ : state) {
    const float* x = a.data<float>();
    float* z = c.data<float>();
    for (int64_t i = 0; i < n; ++i) z[i] = 1.f / (1.f + std::exp(-x[i]));
    benchmark::DoNotOptimize(z);
  }
  SetBytes(state, 2 * n * 4);
}
void BM_PeerLibmGelu(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = Random({n}), c(DType::kFloat32, Shape{n});
  for (auto _ : state) {
    const float* x = a.data<float>();
    float* z = c.data<float>();
    for (int64_t i = 0; i < n; ++i) z[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * 0.70710678f));
    benchmark::DoNotOptimize(z);
  }
  SetBytes(state, 2 * n * 4);
}

// --- Softmax over rows of 1024 (attention-like) ----------------------------------------
void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0), row = 1024;
  Prepared k("Softmax", {Random({n / row, row})});
  for (auto _ : state) k.Run();
  SetBytes(state, 2 * n * 4);
}
void BM_PeerPlainSoftmax(benchmark::State& state) {
  const int64_t n = state.range(0), row = 1024;
  Tensor a = Random({n / row, row}), c(DType::kFloat32, Shape{n / row, row});
  for (auto _ : state) {
    for (int64_t r = 0; r < n / row; ++r) {
      const float* x = a.data<float>() + r * row;
      float* z = c.data<float>() + r * row;
      const float m = *std::max_element(x, x + row);
      float s = 0;
      for (int64_t i = 0; i < row; ++i) s += (z[i] = std::exp(x[i] - m));
      for (int64_t i = 0; i < row; ++i) z[i] /= s;
    }
    benchmark::DoNotOptimize(c.raw_data());
  }
  SetBytes(state, 2 * n * 4);
}

// --- ReduceMean over the last axis (rows of 768, LayerNorm-like) and over axis 0 --------
void BM_ReduceMeanRows(benchmark::State& state) {
  const int64_t n = state.range(0), row = 768;
  Prepared k("ReduceMean", {Random({n / row, row}), Tensor::FromVector(std::vector<int64_t>{-1})},
             {}, {1});
  for (auto _ : state) k.Run();
  SetBytes(state, n * 4);
}
void BM_ReduceMeanColumns(benchmark::State& state) {
  const int64_t n = state.range(0), row = 768;
  Prepared k("ReduceMean", {Random({n / row, row}), Tensor::FromVector(std::vector<int64_t>{0})},
             {}, {1});
  for (auto _ : state) k.Run();
  SetBytes(state, n * 4);
}
void BM_PeerPlainMeanRows(benchmark::State& state) {
  const int64_t n = state.range(0), row = 768;
  Tensor a = Random({n / row, row}), c(DType::kFloat32, Shape{n / row});
  for (auto _ : state) {
    for (int64_t r = 0; r < n / row; ++r) {
      const float* x = a.data<float>() + r * row;
      c.data<float>()[r] = std::accumulate(x, x + row, 0.f) / row;
    }
    benchmark::DoNotOptimize(c.raw_data());
  }
  SetBytes(state, n * 4);
}

// 16 K floats (64 KB, L2-resident) and 4 M floats (16 MB, memory-bound).
#define KILN_SIZES ->Arg(1 << 14)->Arg(1 << 18)->Arg(1 << 22)
#define KILN_ROW_SIZES ->Arg(768 * 32)->Arg(768 * 1024)->Arg(768 * 8192)
BENCHMARK(BM_Add) KILN_SIZES;
BENCHMARK(BM_PeerPlainAdd) KILN_SIZES;
BENCHMARK(BM_AddBroadcastRow) KILN_SIZES;
BENCHMARK(BM_Relu) KILN_SIZES;
BENCHMARK(BM_PeerMemcpy) KILN_SIZES;
BENCHMARK(BM_Sigmoid) KILN_SIZES;
BENCHMARK(BM_PeerLibmSigmoid) KILN_SIZES;
BENCHMARK(BM_Gelu) KILN_SIZES;
BENCHMARK(BM_PeerLibmGelu) KILN_SIZES;
BENCHMARK(BM_Softmax) KILN_SIZES;
BENCHMARK(BM_PeerPlainSoftmax) KILN_SIZES;
BENCHMARK(BM_ReduceMeanRows) KILN_ROW_SIZES;
BENCHMARK(BM_ReduceMeanColumns) KILN_ROW_SIZES;
BENCHMARK(BM_PeerPlainMeanRows) KILN_ROW_SIZES;

}  // namespace
}  // namespace kiln::kernels

BENCHMARK_MAIN();
