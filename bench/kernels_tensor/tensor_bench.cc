// Micro-benchmarks of the copy-bound tensor kernels, each next to its peer: a plain memcpy of
// the same bytes (the bound every layout op is held to). Reports bytes/s moved (read+write).
//
//   kernels_tensor_bench --benchmark_filter=. [--threads N via KILN_BENCH_THREADS]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "kiln/core/thread_pool.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

int BenchThreads() {
  const char* env = std::getenv("KILN_BENCH_THREADS");
  return env != nullptr ? std::max(1, std::atoi(env)) : 1;
}

// One prepared kernel with preallocated outputs, run like the executor runs it.
struct Prepared {
  ir::Graph graph;
  std::unique_ptr<OpKernel> kernel;
  std::vector<Tensor> inputs, outputs;
  std::shared_ptr<Buffer> scratch;
  int threads = 1;
};

std::unique_ptr<Prepared> Prepare(const std::string& op, std::vector<Tensor> inputs,
                                  std::map<std::string, ir::Attribute> attrs,
                                  std::set<int> constant_inputs = {}, int num_outputs = 1) {
  auto p = std::make_unique<Prepared>();
  std::vector<ir::ValueId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid()) {
      ids.push_back(ir::kNoValue);
      continue;
    }
    ids.push_back(constant_inputs.count(i)
                      ? p->graph.AddConstant("c" + std::to_string(i), inputs[i])
                      : p->graph.AddValue("x" + std::to_string(i)));
  }
  const ir::NodeId id = p->graph.AddNode(op, ids, num_outputs, std::move(attrs), "bench");
  const ir::Node& node = p->graph.node(id);
  auto kernel = (*KernelRegistry::Global().Find("", op))(node);
  if (!kernel.ok()) std::abort();
  p->kernel = std::move(*kernel);
  ReshapeContext ctx;
  ctx.node = &node;
  p->threads = BenchThreads();
  ctx.intra_op_threads = p->threads;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ctx.inputs.push_back(
        {inputs[i].dtype(), inputs[i].shape(), constant_inputs.count(i) ? &inputs[i] : nullptr});
  }
  ctx.SetNumOutputs(num_outputs);
  if (!p->kernel->Reshape(ctx).ok()) std::abort();
  for (int i = 0; i < num_outputs; ++i) {
    p->outputs.emplace_back(ctx.output_dtypes[i], ctx.output_shapes[i]);
  }
  if (ctx.scratch_bytes > 0) p->scratch = Buffer::Allocate(ctx.scratch_bytes);
  p->inputs = std::move(inputs);
  return p;
}

void RunPrepared(benchmark::State& state, Prepared& p, int64_t bytes_moved) {
  ComputeContext ctx;
  ctx.inputs = absl::MakeConstSpan(p.inputs);
  ctx.outputs = absl::MakeSpan(p.outputs);
  ctx.scratch = p.scratch ? p.scratch->data() : nullptr;
  ctx.use_openmp = p.threads > 1;  // the runtime's intra-op path
  ctx.intra_op_threads = p.threads;
  for (auto _ : state) {
    if (!p.kernel->Compute(ctx).ok()) std::abort();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes_moved);
}

Tensor Filled(Shape shape) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i % 97);
  return t;
}

// Peer: memcpy of `bytes` (the bound for any op that reads and writes each byte once).
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * 4;
  auto src = Buffer::Allocate(bytes), dst = Buffer::Allocate(bytes);
  std::memset(src->data(), 1, bytes);
  for (auto _ : state) {
    std::memcpy(dst->data(), src->data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes * 2);
}
BENCHMARK(BM_Memcpy)->Arg(64 * 112 * 112)->Arg(1024 * 1024);

void BM_TransposeNchwToNhwc(benchmark::State& state) {
  auto p = Prepare("Transpose", {Filled({1, 64, 112, 112})},
                   {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
  RunPrepared(state, *p, 64 * 112 * 112 * 4 * 2);
}
BENCHMARK(BM_TransposeNchwToNhwc);

void BM_Transpose2D(benchmark::State& state) {
  auto p = Prepare("Transpose", {Filled({1024, 1024})}, {});
  RunPrepared(state, *p, 1024 * 1024 * 4 * 2);
}
BENCHMARK(BM_Transpose2D);

void BM_TransposeAttentionHeads(benchmark::State& state) {
  // [batch, seq, heads, dim] -> [batch, heads, seq, dim] (BERT's split heads).
  auto p =
      Prepare("Transpose", {Filled({8, 128, 4, 64})}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  RunPrepared(state, *p, 8 * 128 * 4 * 64 * 4 * 2);
}
BENCHMARK(BM_TransposeAttentionHeads);

void BM_ConcatChannels(benchmark::State& state) {
  auto p = Prepare("Concat", {Filled({1, 32, 112, 112}), Filled({1, 32, 112, 112})},
                   {{"axis", int64_t{1}}});
  RunPrepared(state, *p, 64 * 112 * 112 * 4 * 2);
}
BENCHMARK(BM_ConcatChannels);

void BM_GatherEmbeddingRows(benchmark::State& state) {
  Tensor idx(DType::kInt64, Shape{4096});
  for (int i = 0; i < 4096; ++i) idx.data<int64_t>()[i] = (i * 7919) % 100000;
  auto p = Prepare("Gather", {Filled({100000, 64}), idx}, {});
  RunPrepared(state, *p, 4096 * 64 * 4 * 2);
}
BENCHMARK(BM_GatherEmbeddingRows);

void BM_ResizeBilinear2x(benchmark::State& state) {
  auto p = Prepare(
      "Resize",
      {Filled({1, 32, 112, 112}), Tensor(), Tensor::FromVector<float>({1, 1, 2, 2}), Tensor()},
      {{"mode", std::string("linear")}}, {2});
  RunPrepared(state, *p, (32 * 112 * 112 + 32 * 224 * 224) * 4);
}
BENCHMARK(BM_ResizeBilinear2x);

}  // namespace
}  // namespace kiln::kernels

BENCHMARK_MAIN();
