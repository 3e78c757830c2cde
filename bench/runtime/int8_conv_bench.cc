// Static int8 CNNs against Kiln fp32, same process, interleaved (issue 10's ResNet-18 /
// MobileNet-v2 targets):
//
//   build/bench/runtime/runtime_int8_conv_bench MODEL.onnx [--batch 32] [--calibration 200]
//       [--rounds 5] [--threads 1] [--method percentile|entropy|minmax]
//   KILN_MAX_ISA=avx2 build/bench/runtime/runtime_int8_conv_bench ...   (AVX2, no VNNI)
//
// Loads the model's ONNX graph, optimizes it in fp32 as the runtime does, calibrates on
// `--calibration` synthetic images (smooth random patterns plus noise, normalized with
// ImageNet's mean and std: realistic statistics without an image set), compresses with the
// static int8 pass (7-bit weights without VNNI), then times fp32 and int8 plans at `--batch`,
// alternating one run of each per round, and prints one JSON line: medians, the speedup, the
// time compression took at load (calibration + pass), and the accuracy against fp32 on
// held-out images (top-1 agreement, max relative error of the logits).
#include <algorithm>
#include <cmath>
#include <cstdio>
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
#include "kiln/runtime/calibration.h"

namespace {

using kiln::Shape;
using kiln::Tensor;

// N images [n, 3, h, w]: a few random low-frequency waves per channel plus noise, in [0, 1],
// then normalized like torchvision's ImageNet transform.
Tensor SyntheticImages(int64_t n, int64_t h, int64_t w, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  std::normal_distribution<float> noise(0, 0.05f);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stddev[3] = {0.229f, 0.224f, 0.225f};
  Tensor t(kiln::DType::kFloat32, Shape{n, 3, h, w});
  float* d = t.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      float fx[3], fy[3], ph[3], amp[3];
      for (int k = 0; k < 3; ++k) {
        fx[k] = u(rng) * 0.1f;
        fy[k] = u(rng) * 0.1f;
        ph[k] = u(rng) * 6.28f;
        amp[k] = u(rng) * 0.3f;
      }
      const float base = u(rng);
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          float v = base;
          for (int k = 0; k < 3; ++k) v += amp[k] * std::sin(fx[k] * x + fy[k] * y + ph[k]);
          v = std::clamp(v + noise(rng), 0.0f, 1.0f);
          *d++ = (v - mean[c]) / stddev[c];
        }
      }
    }
  }
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL.onnx [--batch 32] [--calibration 200] [--rounds 5] "
                 "[--threads 1] [--method percentile|entropy|minmax]\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  int64_t batch = 32;
  int calibration = 200, rounds = 5, threads = 1;
  kiln::runtime::CalibrationOptions calib;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batch") {
      batch = std::atoll(value.c_str());
    } else if (flag == "--calibration") {
      calibration = std::atoi(value.c_str());
    } else if (flag == "--rounds") {
      rounds = std::atoi(value.c_str());
    } else if (flag == "--threads") {
      threads = std::atoi(value.c_str());
    } else if (flag == "--method") {
      calib.method = value == "entropy"  ? kiln::runtime::CalibrationOptions::Method::kEntropy
                     : value == "minmax" ? kiln::runtime::CalibrationOptions::Method::kMinMax
                                         : kiln::runtime::CalibrationOptions::Method::kPercentile;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  calib.intra_op_threads = threads;
  auto imported = kiln::import::ImportOnnxFile(path);
  if (!imported.ok()) return Fail(imported.status());
  kiln::ir::Graph source = imported->signatures.at(0).graph;
  if (source.inputs.size() != 1)
    return Fail(absl::InvalidArgumentError("one image input expected"));
  source.value(source.inputs[0]).type.dtype = kiln::DType::kFloat32;
  const std::string input_name = source.value(source.inputs[0]).name;

  const kiln::exec::KernelEvaluator evaluator;
  kiln::opt::PassOptions pass_options;
  pass_options.conv_activation_layout = kiln::kernels::PreferredConvActivationLayout();
  pass_options.evaluator = &evaluator;
  auto fp32 = std::make_shared<kiln::ir::Graph>(source);
  kiln::opt::OptimizationLog log;
  if (auto s = kiln::opt::Optimize(*fp32, pass_options, &log); !s.ok()) return Fail(s);
  if (auto s = kiln::ir::InferShapes(*fp32); !s.ok()) return Fail(s);

  // Compression at load: calibration on the fp32 graph, then the int8 pass.
  const int64_t load_start = kiln::NowNanos();
  const Tensor calibration_images = SyntheticImages(calibration, 224, 224, 1);
  std::vector<std::map<std::string, Tensor>> examples;
  for (int i = 0; i < calibration; ++i) {
    examples.push_back({{input_name, calibration_images.Slice(i, i + 1)}});
  }
  const int64_t calib_start = kiln::NowNanos();
  auto ranges = kiln::runtime::CollectActivationRanges(*fp32, examples, calib);
  if (!ranges.ok()) return Fail(ranges.status());
  const int64_t calib_end = kiln::NowNanos();
  kiln::opt::CompressionOptions compression;
  compression.activation_ranges = *ranges;
  // VNNI as the capped ISA sees it: oneDNN's AVX2 cap excludes AVX-VNNI.
  compression.vnni = kiln::EffectiveCpuIsa() == kiln::CpuIsa::kAvx512;
  pass_options.compression = &compression;
  auto int8 = std::make_shared<kiln::ir::Graph>(source);
  kiln::opt::OptimizationLog int8_log;
  if (auto s = kiln::opt::Optimize(*int8, pass_options, &int8_log); !s.ok()) return Fail(s);
  if (auto s = kiln::ir::InferShapes(*int8); !s.ok()) return Fail(s);
  const int64_t load_end = kiln::NowNanos();
  int int8_convs = 0, float_convs = 0;
  for (const auto& n : int8->nodes()) {
    if (n.removed) continue;
    int8_convs += n.op == "Int8Conv";
    float_convs += n.op == "FusedConv" || n.op == "Conv";
  }

  kiln::exec::CompileOptions compile;
  compile.intra_op_threads = threads;
  compile.intra_op_openmp = threads > 1;
  const Tensor x = SyntheticImages(batch, 224, 224, 12345);
  auto fp32_plan = kiln::exec::CompiledPlan::Compile(fp32, {x.shape()}, compile);
  if (!fp32_plan.ok()) return Fail(fp32_plan.status());
  auto int8_plan = kiln::exec::CompiledPlan::Compile(int8, {x.shape()}, compile);
  if (!int8_plan.ok()) return Fail(int8_plan.status());
  std::vector<Tensor> fp32_out, int8_out;
  // Warm-up (first runs touch the arena and oneDNN's caches).
  if (auto s = (*fp32_plan)->Run({x}, &fp32_out); !s.ok()) return Fail(s);
  if (auto s = (*int8_plan)->Run({x}, &int8_out); !s.ok()) return Fail(s);
  std::vector<double> fp32_ms, int8_ms;
  for (int r = 0; r < rounds; ++r) {
    int64_t t0 = kiln::NowNanos();
    if (auto s = (*fp32_plan)->Run({x}, &fp32_out); !s.ok()) return Fail(s);
    int64_t t1 = kiln::NowNanos();
    if (auto s = (*int8_plan)->Run({x}, &int8_out); !s.ok()) return Fail(s);
    int64_t t2 = kiln::NowNanos();
    fp32_ms.push_back((t1 - t0) / 1e6);
    int8_ms.push_back((t2 - t1) / 1e6);
  }
  // Accuracy on the held-out batch: top-1 agreement and the largest error relative to the
  // largest logit magnitude of the same row.
  const Tensor& a = fp32_out[0];
  const Tensor& b = int8_out[0];
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
      "{\"model\": \"%s\", \"isa\": \"%s\", \"vnni\": %s, \"batch\": %lld, \"threads\": %d, "
      "\"fp32_ms\": %.1f, \"int8_ms\": %.1f, \"speedup\": %.2f, \"int8_convs\": %d, "
      "\"fp32_convs\": %d, \"calibration_images\": %d, \"calibration_s\": %.2f, "
      "\"compression_at_load_s\": %.2f, \"top1_agreement\": %.3f, \"max_rel_error\": %.4f}\n",
      path.c_str(), kiln::CpuIsaName(kiln::EffectiveCpuIsa()), compression.vnni ? "true" : "false",
      static_cast<long long>(batch), threads, Median(fp32_ms), Median(int8_ms),
      Median(fp32_ms) / Median(int8_ms), int8_convs, float_convs, calibration,
      (calib_end - calib_start) / 1e9, (load_end - load_start) / 1e9,
      static_cast<double>(agree) / batch, max_rel);
  return 0;
}
