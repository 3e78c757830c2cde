// A large fp32 MatMul through the whole runtime (kiln::runtime::Model running a MatMul .onnx)
// against oneDNN's own GEMM (dnnl_sgemm) on the same sizes, in the same process, with the
// same thread count: the runtime's share of the GEMM rate (target: >= 90%).
//
//   build/bench/runtime/runtime_matmul_bench MODEL.onnx [--m 2048] [--threads 2] [--seconds 3]
//
// MODEL has one float input A [M, K] (M dynamic) and a constant B [K, N], e.g. matmul_2048.onnx
// written by bench/peers/export_runtime_models.py. Prints one JSON line per measurement.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "kiln/core/clock.h"
#include "kiln/runtime/model.h"

namespace {

std::string Flag(int argc, char** argv, const char* name, const std::string& default_value) {
  const std::string prefix = std::string("--") + name;
  for (int i = 1; i < argc; ++i) {
    if (prefix == argv[i] && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], (prefix + "=").c_str(), prefix.size() + 1) == 0) {
      return argv[i] + prefix.size() + 1;
    }
  }
  return default_value;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s MODEL.onnx [--m 2048] [--threads 2] [--seconds 3]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int64_t m = std::atoll(Flag(argc, argv, "m", "2048").c_str());
  const int threads = std::atoi(Flag(argc, argv, "threads", "2").c_str());
  const double seconds = std::atof(Flag(argc, argv, "seconds", "3").c_str());
  if (m < 1 || threads < 1 || seconds <= 0) {
    std::fprintf(stderr, "--m, --threads and --seconds must be positive\n");
    return 2;
  }

  kiln::runtime::ModelOptions options;
  options.intra_op_threads = threads;
  options.inter_op_threads = 1;
  auto model = kiln::runtime::Model::Load(path, options);
  if (!model.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(model.status().message()).c_str());
    return 1;
  }
  const auto& signature = (*model)->signatures().begin()->second;
  if (signature.input_keys.size() != 1 || signature.output_keys.size() != 1) {
    std::fprintf(stderr, "%s: expected one input A [M, K] and one output\n", path.c_str());
    return 1;
  }
  const std::string input = signature.input_keys[0];
  const auto& info = signature.inputs.at(input);
  const int64_t k = info.shape.size() == 2 ? info.shape[1] : -1;
  if (k < 1) {
    std::fprintf(stderr, "%s: input '%s' must be [M, K] with a known K\n", path.c_str(),
                 input.c_str());
    return 1;
  }
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1, 1);
  kiln::Tensor a(kiln::DType::kFloat32, kiln::Shape{m, k});
  for (int64_t i = 0; i < m * k; ++i) a.data<float>()[i] = dist(rng);
  std::map<std::string, kiln::Tensor> inputs{{input, a}};
  auto first = (*model)->Run(signature.key, inputs);
  if (!first.ok()) {
    std::fprintf(stderr, "run: %s\n", std::string(first.status().message()).c_str());
    return 1;
  }
  const kiln::Tensor& out = first->begin()->second;
  const int64_t n = out.shape().dim(out.shape().rank() - 1);
  const double flops = 2.0 * m * k * n;

  std::vector<float> b(k * n), c(m * n);
  for (float& v : b) v = dist(rng);
  omp_set_num_threads(threads);
  // Calls alternate, so that a burst of load from other processes hits both sides alike.
  std::vector<double> gemm_times, kiln_times;
  const int64_t end = kiln::NowNanos() + static_cast<int64_t>(seconds * 1e9);
  for (int i = 0; i < 2 || kiln::NowNanos() < end || gemm_times.size() < 5; ++i) {
    int64_t t0 = kiln::NowNanos();
    dnnl_sgemm('N', 'N', m, n, k, 1.0f, a.data<float>(), k, b.data(), n, 0.0f, c.data(), n);
    int64_t t1 = kiln::NowNanos();
    auto outputs = (*model)->Run(signature.key, inputs);
    const int64_t t2 = kiln::NowNanos();
    if (!outputs.ok()) {
      std::fprintf(stderr, "run: %s\n", std::string(outputs.status().message()).c_str());
      return 1;
    }
    if (i < 2) continue;  // warmup
    gemm_times.push_back((t1 - t0) / 1e9);
    kiln_times.push_back((t2 - t1) / 1e9);
  }
  const double gemm_s = Median(gemm_times), kiln_s = Median(kiln_times);
  const double gemm_gflops = flops / gemm_s / 1e9, kiln_gflops = flops / kiln_s / 1e9;
  std::printf(
      "{\"m\": %lld, \"k\": %lld, \"n\": %lld, \"threads\": %d, \"dnnl_sgemm_gflops\": %.1f, "
      "\"kiln_gflops\": %.1f, \"kiln_vs_sgemm\": %.3f, \"pairs\": %zu}\n",
      static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), threads,
      gemm_gflops, kiln_gflops, kiln_gflops / gemm_gflops, gemm_times.size());
  return 0;
}
