// Winograd 3x3 convolutions on vs off, same process, interleaved (issue 9):
//
//   build/bench/runtime/runtime_winograd_ab MODEL.onnx [--batch 1] [--rounds 20] [--threads 2]
//       [--winograd auto|1]
//
// Optimizes the model's graph as the runtime does, compiles one plan with
// KILN_CONV_WINOGRAD=0 (every convolution direct) and one with --winograd (default auto: each
// 3x3 stride-1 convolution timed at plan compile), then alternates one run of each per round
// on the same synthetic images. Prints one JSON line: each plan's compile time, median and
// minimum run time (the minimum is the figure least distorted by other processes on a shared
// machine) and median process CPU time (with --threads 1, the work done, which other
// processes on the machine distort least), the ratios, and the accuracy of the Winograd plan
// against the direct one (largest logit error relative to the row's largest |logit|, top-1
// agreement).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/clock.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan.h"
#include "kiln/import/onnx.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/opt/pass.h"

namespace {

using kiln::Shape;
using kiln::Tensor;

// Images normalized like torchvision's ImageNet transform: smooth random patterns in [0, 1].
Tensor SyntheticImages(int64_t n, int64_t h, int64_t w, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stddev[3] = {0.229f, 0.224f, 0.225f};
  Tensor t(kiln::DType::kFloat32, Shape{n, 3, h, w});
  float* d = t.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      const float fx = u(rng) * 0.1f, fy = u(rng) * 0.1f, ph = u(rng) * 6.28f, base = u(rng);
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const float v = std::clamp(base + 0.3f * std::sin(fx * x + fy * y + ph), 0.0f, 1.0f);
          *d++ = (v - mean[c]) / stddev[c];
        }
      }
    }
  }
  return t;
}

double CpuMs() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL.onnx [--batch 1] [--rounds 20] [--threads 2] "
                 "[--winograd auto|1]\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  int64_t batch = 1;
  int rounds = 20, threads = 2;
  std::string winograd = "auto";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batch") {
      batch = std::atoll(value.c_str());
    } else if (flag == "--rounds") {
      rounds = std::atoi(value.c_str());
    } else if (flag == "--threads") {
      threads = std::atoi(value.c_str());
    } else if (flag == "--winograd") {
      winograd = value;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (batch < 1 || rounds < 1 || threads < 1) {
    std::fprintf(stderr, "--batch, --rounds and --threads must be positive\n");
    return 2;
  }
  auto imported = kiln::import::ImportOnnxFile(path);
  if (!imported.ok()) return Fail(imported.status());
  kiln::ir::Graph source = imported->signatures.at(0).graph;
  if (source.inputs.size() != 1) {
    return Fail(absl::InvalidArgumentError("one image input expected"));
  }
  source.value(source.inputs[0]).type.dtype = kiln::DType::kFloat32;
  const kiln::exec::KernelEvaluator evaluator;
  kiln::opt::PassOptions pass_options;
  pass_options.conv_activation_layout = kiln::kernels::PreferredConvActivationLayout();
  pass_options.evaluator = &evaluator;
  auto graph = std::make_shared<kiln::ir::Graph>(source);
  kiln::opt::OptimizationLog log;
  if (auto s = kiln::opt::Optimize(*graph, pass_options, &log); !s.ok()) return Fail(s);
  if (auto s = kiln::ir::InferShapes(*graph); !s.ok()) return Fail(s);

  kiln::exec::CompileOptions compile;
  compile.intra_op_threads = threads;
  compile.intra_op_openmp = threads > 1;
  const Tensor x = SyntheticImages(batch, 224, 224, 12345);
  // The kernels read KILN_CONV_WINOGRAD when a plan is compiled.
  setenv("KILN_CONV_WINOGRAD", "0", 1);
  int64_t t0 = kiln::NowNanos();
  auto direct_plan = kiln::exec::CompiledPlan::Compile(graph, {x.shape()}, compile);
  if (!direct_plan.ok()) return Fail(direct_plan.status());
  setenv("KILN_CONV_WINOGRAD", winograd.c_str(), 1);
  int64_t t1 = kiln::NowNanos();
  auto winograd_plan = kiln::exec::CompiledPlan::Compile(graph, {x.shape()}, compile);
  if (!winograd_plan.ok()) return Fail(winograd_plan.status());
  int64_t t2 = kiln::NowNanos();
  const double direct_compile_ms = (t1 - t0) / 1e6, winograd_compile_ms = (t2 - t1) / 1e6;

  std::vector<Tensor> direct_out, winograd_out;
  if (auto s = (*direct_plan)->Run({x}, &direct_out); !s.ok()) return Fail(s);
  if (auto s = (*winograd_plan)->Run({x}, &winograd_out); !s.ok()) return Fail(s);
  std::vector<double> direct_ms, winograd_ms, direct_cpu_ms, winograd_cpu_ms;
  for (int r = 0; r < rounds; ++r) {
    // Alternate which goes first, so that neither always follows the other's cache state.
    for (int k = 0; k < 2; ++k) {
      const bool run_winograd = (r + k) % 2 == 1;
      const int64_t start = kiln::NowNanos();
      const double cpu_start = CpuMs();
      auto s = run_winograd ? (*winograd_plan)->Run({x}, &winograd_out)
                            : (*direct_plan)->Run({x}, &direct_out);
      if (!s.ok()) return Fail(s);
      (run_winograd ? winograd_ms : direct_ms).push_back((kiln::NowNanos() - start) / 1e6);
      (run_winograd ? winograd_cpu_ms : direct_cpu_ms).push_back(CpuMs() - cpu_start);
    }
  }
  const Tensor& a = direct_out[0];
  const Tensor& b = winograd_out[0];
  const int64_t classes = a.num_elements() / batch;
  int agree = 0;
  double max_rel = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const float* pa = a.data<float>() + i * classes;
    const float* pb = b.data<float>() + i * classes;
    agree += std::max_element(pa, pa + classes) - pa == std::max_element(pb, pb + classes) - pb;
    double row_max = 0, row_diff = 0;
    for (int64_t k = 0; k < classes; ++k) {
      row_max = std::max(row_max, double{std::fabs(pa[k])});
      row_diff = std::max(row_diff, double{std::fabs(pa[k] - pb[k])});
    }
    max_rel = std::max(max_rel, row_diff / row_max);
  }
  std::printf(
      "{\"model\": \"%s\", \"isa\": \"%s\", \"batch\": %lld, \"threads\": %d, \"winograd\": "
      "\"%s\", \"direct_compile_ms\": %.0f, \"winograd_compile_ms\": %.0f, \"direct_median_ms\": "
      "%.2f, \"winograd_median_ms\": %.2f, \"direct_min_ms\": %.2f, \"winograd_min_ms\": %.2f, "
      "\"direct_cpu_median_ms\": %.2f, \"winograd_cpu_median_ms\": %.2f, \"speedup_median\": "
      "%.2f, \"speedup_min\": %.2f, \"speedup_cpu\": %.2f, \"top1_agreement\": %.3f, "
      "\"max_rel_error\": %.3g}\n",
      path.c_str(), kiln::CpuIsaName(kiln::EffectiveCpuIsa()), static_cast<long long>(batch),
      threads, winograd.c_str(), direct_compile_ms, winograd_compile_ms, Median(direct_ms),
      Median(winograd_ms), *std::min_element(direct_ms.begin(), direct_ms.end()),
      *std::min_element(winograd_ms.begin(), winograd_ms.end()), Median(direct_cpu_ms),
      Median(winograd_cpu_ms), Median(direct_ms) / Median(winograd_ms),
      *std::min_element(direct_ms.begin(), direct_ms.end()) /
          *std::min_element(winograd_ms.begin(), winograd_ms.end()),
      Median(direct_cpu_ms) / Median(winograd_cpu_ms), static_cast<double>(agree) / batch, max_rel);
  return 0;
}
