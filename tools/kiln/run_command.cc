// `kiln run MODEL`: runs a signature once and writes each output as .npy, or with --bench
// measures latency and throughput per batch size.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "command.h"
#include "kiln/core/clock.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/npy.h"
#include "kiln/core/status.h"
#include "kiln/runtime/inputs.h"
#include "kiln/runtime/loader.h"
#include "kiln/runtime/model.h"

// Defined by kiln_runtime when the TensorFlow importer is part of the build.
#ifdef KILN_HAVE_TF_IMPORT
#include "kiln/import/saved_model.h"
#endif

namespace kiln::tool {

absl::StatusOr<std::shared_ptr<runtime::Model>> LoadModelForTool(
    const std::string& tool, const std::string& path, const runtime::ModelOptions& options,
    const std::vector<std::string>& frozen_outputs) {
  absl::StatusOr<import::ImportedModel> imported;
  if (frozen_outputs.empty()) {
    imported = runtime::ImportModel(path, options);
  } else {
    KILN_ASSIGN_OR_RETURN(runtime::ResolvedModelPath resolved, runtime::ResolveModelPath(path));
    if (resolved.format == runtime::ModelFormat::kSavedModel) {
      return absl::InvalidArgumentError(
          absl::StrCat("--outputs: ", resolved.path,
                       " is a SavedModel, whose outputs are its signatures' "
                       "(choose one with --signature); --outputs is for frozen GraphDef files"));
    }
#ifdef KILN_HAVE_TF_IMPORT
    import::FrozenGraphOptions frozen;
    frozen.outputs = frozen_outputs;
    imported = import::ImportFrozenGraph(resolved.path, frozen);
    if (!imported.ok()) {
      return Annotate(imported.status(),
                      absl::StrCat("--outputs ", absl::StrJoin(frozen_outputs, ",")));
    }
#else
    return absl::UnimplementedError(
        "--outputs is for frozen TensorFlow GraphDefs; this build has no TensorFlow importer");
#endif
  }
  if (!imported.ok()) return imported.status();
  for (const auto& [key, value] : imported->properties) {
    if (key == "warning") {
      std::fprintf(stderr, "kiln %s: warning: %s\n", tool.c_str(), value.c_str());
    }
  }
  return runtime::Model::FromImported(*std::move(imported), options);
}

}  // namespace kiln::tool

namespace {

using kiln::Shape;
using kiln::Tensor;
namespace runtime = kiln::runtime;

constexpr char kUsage[] = R"(usage: kiln run MODEL [options]

MODEL is a .onnx file, a frozen TensorFlow GraphDef (.pb: its Placeholders are the inputs,
the nodes nothing reads the outputs), a SavedModel directory, or a base path with numeric
version folders (the highest is used).

  --signature NAME        signature to run (default serving_default)
  --input NAME=FILE.npy   an input, once per input name; every input must be given unless
                          --random_inputs is
  --random_inputs         fill the inputs not given with seeded random values (floats in
                          [-1, 1), integers in [0, 10), empty strings; unknown dimensions
                          are 1, an unknown first dimension the --batch size under --bench)
  --seed N                seed of --random_inputs (default 0)
  --outputs A,B           frozen GraphDef only: the tensors to return ("name" or "name:1")
                          instead of the nodes nothing reads
  --output_dir DIR        where to write one NAME.npy per output (default: .)
  --bench                 measure latency and throughput instead of writing outputs
  --batch 1,32            batch sizes to measure (default 1); --input files are tiled along
                          their first dimension to each size
  --threads N             intra-op threads (default: all cores)
  --inter_op_threads N    kernels run in parallel (default 1)
  --iterations N          timed runs per batch size (default: as many as fit in --seconds)
  --seconds S             time budget per batch size (default 2)
  --json                  print one JSON object per batch size
  --disable_optimizer     run the imported graph unoptimized
  --allow_compression     int8 MatMul/Gemm (and calibrated Conv) with the accuracy guard
                          (docs/COMPRESSION.md); the report goes to stderr
  --mixed_precision bfloat16
                          bf16 weights for MatMul/Gemm (TF Serving's --mixed_precision)
  --calibration_inputs DIR
                          one NAME.npy per input (first dimension = examples): calibration
                          and the accuracy guard's reference inputs
  --compression_tolerance X
                          largest accepted output error (relative to the output's range; for
                          class scores also the fraction of changed top-1); default 0.02
  --isa avx2|avx512       cap the instruction set of Kiln's kernels and oneDNN (to measure
                          the AVX2 path on an AVX-512 machine; also KILN_MAX_ISA=avx2)
)";

struct RunFlags {
  std::string model;
  std::string signature = "serving_default";
  std::vector<std::pair<std::string, std::string>> inputs;
  bool random_inputs = false;
  std::vector<std::string> frozen_outputs;
  std::string output_dir = ".";
  uint64_t seed = 0;
  bool bench = false;
  std::vector<int64_t> batches = {1};
  int threads = 0;
  int inter_op_threads = 0;
  int64_t iterations = 0;
  double seconds = 2.0;
  bool json = false;
  bool disable_optimizer = false;
  bool allow_compression = false;
  bool mixed_precision_bf16 = false;
  std::string calibration_inputs;
  double compression_tolerance = runtime::ModelOptions().compression_tolerance;
  std::string isa;  // empty: the CPU's own
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "kiln run: %s\n", message.c_str());
  return 1;
}

// Parses "--flag value" and "--flag=value". Returns an error message or "".
std::string ParseFlags(const std::vector<std::string>& args, RunFlags* flags, bool* help) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return "";
    }
    if (arg.rfind("--", 0) != 0) {
      if (!flags->model.empty()) return absl::StrCat("unexpected argument '", arg, "'");
      flags->model = arg;
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto need_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= args.size()) return false;
      value = args[++i];
      return true;
    };
    auto bad = [&](const std::string& what) {
      return absl::StrCat("--", name, "=", value, ": ", what);
    };
    if (name == "bench" || name == "json" || name == "disable_optimizer" ||
        name == "random_inputs" || name == "allow_compression") {
      const bool on = !has_value || value == "true" || value == "1";
      if (name == "bench") flags->bench = on;
      if (name == "json") flags->json = on;
      if (name == "disable_optimizer") flags->disable_optimizer = on;
      if (name == "random_inputs") flags->random_inputs = on;
      if (name == "allow_compression") flags->allow_compression = on;
      continue;
    }
    if (!need_value()) return absl::StrCat("--", name, " needs a value");
    if (name == "signature") {
      flags->signature = value;
    } else if (name == "input") {
      auto eq = value.find('=');
      if (eq == std::string::npos || eq == 0) return bad("expected NAME=FILE.npy");
      const std::string input = value.substr(0, eq);
      for (const auto& [seen, file] : flags->inputs) {
        // The second would silently replace the first.
        if (seen == input) {
          return absl::StrCat("--input ", input, " is given twice (", file, " and ",
                              value.substr(eq + 1), "); give each input once");
        }
      }
      flags->inputs.push_back({input, value.substr(eq + 1)});
    } else if (name == "outputs") {
      for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        flags->frozen_outputs.emplace_back(part);
      }
      if (flags->frozen_outputs.empty()) return bad("no output name");
    } else if (name == "output_dir") {
      flags->output_dir = value;
    } else if (name == "seed") {
      if (!absl::SimpleAtoi(value, &flags->seed)) return bad("not a number");
    } else if (name == "batch") {
      flags->batches.clear();
      for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        int64_t b;
        if (!absl::SimpleAtoi(part, &b) || b < 1) return bad("batch sizes must be positive");
        flags->batches.push_back(b);
      }
      if (flags->batches.empty()) return bad("no batch size");
    } else if (name == "threads" || name == "intra_op_threads") {
      if (!absl::SimpleAtoi(value, &flags->threads) || flags->threads < 1) {
        return bad("must be a positive number");
      }
    } else if (name == "inter_op_threads") {
      if (!absl::SimpleAtoi(value, &flags->inter_op_threads) || flags->inter_op_threads < 1) {
        return bad("must be a positive number");
      }
    } else if (name == "iterations") {
      if (!absl::SimpleAtoi(value, &flags->iterations) || flags->iterations < 1) {
        return bad("must be a positive number");
      }
    } else if (name == "mixed_precision") {
      if (value != "bfloat16" && value != "fp32") return bad("expected bfloat16 (or fp32)");
      flags->mixed_precision_bf16 = value == "bfloat16";
    } else if (name == "calibration_inputs") {
      flags->calibration_inputs = value;
    } else if (name == "compression_tolerance") {
      if (!absl::SimpleAtod(value, &flags->compression_tolerance) ||
          !(flags->compression_tolerance >= 0)) {
        return bad("not a number >= 0");
      }
    } else if (name == "isa") {
      if (value != "avx2" && value != "avx512") return bad("must be avx2 or avx512");
      flags->isa = value;
    } else if (name == "seconds") {
      if (!absl::SimpleAtod(value, &flags->seconds) || flags->seconds <= 0) {
        return bad("must be a positive number");
      }
    } else {
      return absl::StrCat("unknown flag --", name);
    }
  }
  if (flags->model.empty()) return "no MODEL given";
  return "";
}

// Output names become file names: anything but letters, digits, '.', '_' and '-' is '_'.
std::string FileNameFor(const std::string& output) {
  std::string name = output;
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return name;
}

double Percentile(std::vector<double> sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = p / 100.0 * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

int RunRunCommand(const std::vector<std::string>& args) {
  RunFlags flags;
  bool help = false;
  if (std::string error = ParseFlags(args, &flags, &help); !error.empty()) {
    std::fprintf(stderr, "kiln run: %s\n\n%s", error.c_str(), kUsage);
    return 2;
  }
  if (help) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!flags.isa.empty()) {
    if (absl::Status status = kiln::SetMaxCpuIsa(flags.isa); !status.ok()) {
      return Fail(absl::StrCat("--isa: ", status.message()));
    }
  }
  runtime::ModelOptions options;
  options.disable_optimizer = flags.disable_optimizer;
  options.allow_compression = flags.allow_compression;
  options.mixed_precision_bf16 = flags.mixed_precision_bf16;
  options.calibration_inputs_dir = flags.calibration_inputs;
  options.compression_tolerance = flags.compression_tolerance;
  options.intra_op_threads = flags.threads;
  options.inter_op_threads = flags.inter_op_threads;
  auto model = kiln::tool::LoadModelForTool("run", flags.model, options, flags.frozen_outputs);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  auto signature = (*model)->FindSignature(flags.signature);
  if (!signature.ok()) return Fail(std::string(signature.status().message()));
  const runtime::SignatureInfo& info = **signature;

  std::map<std::string, Tensor> given;
  for (const auto& [name, file] : flags.inputs) {
    if (info.inputs.count(name) == 0) {
      std::string keys;
      for (const auto& k : info.input_keys) absl::StrAppend(&keys, keys.empty() ? "" : ", ", k);
      return Fail(absl::StrCat("--input ", name, "=", file, ": signature '", info.key,
                               "' has no input '", name, "' (its inputs: ", keys, ")"));
    }
    auto tensor = kiln::ReadNpy(file);
    if (!tensor.ok()) {
      return Fail(absl::StrCat("--input ", name, "=", file, ": ", tensor.status().message()));
    }
    given[name] = *tensor;
  }
  // Inputs made up without being asked for hide mistakes (a forgotten --input fails later as
  // some shape mismatch deep in the graph, or silently runs on noise), so each missing input
  // is named with what it must be.
  std::vector<std::string> missing;
  for (const std::string& key : info.input_keys) {
    if (given.count(key) == 0) {
      missing.push_back(absl::StrCat("'", key, "' ", runtime::ExpectedString(info.inputs.at(key))));
    }
  }
  if (!missing.empty() && !flags.random_inputs) {
    return Fail(absl::StrCat(
        "missing input", missing.size() > 1 ? "s" : "", " of signature '", info.key,
        "': ", absl::StrJoin(missing, ", "),
        "; give each with --input NAME=FILE.npy, or pass --random_inputs to fill them with "
        "seeded random values"));
  }
  std::mt19937_64 rng(flags.seed);
  // batch < 1: a single run with unknown dimensions as 1.
  auto make_inputs = [&](int64_t batch) -> absl::StatusOr<std::map<std::string, Tensor>> {
    std::map<std::string, Tensor> inputs;
    for (const std::string& key : info.input_keys) {
      const runtime::TensorInfo& ti = info.inputs.at(key);
      auto it = given.find(key);
      if (it != given.end()) {
        if (batch < 1) {
          inputs[key] = it->second;
        } else {
          auto tiled = runtime::TileRows(it->second, batch);
          if (!tiled.ok()) return kiln::Annotate(tiled.status(), absl::StrCat("input ", key));
          inputs[key] = *tiled;
        }
      } else {
        inputs[key] = runtime::RandomTensor(ti.dtype, runtime::ConcreteShape(ti, batch), rng);
      }
    }
    return inputs;
  };

  if (!flags.bench) {
    auto inputs = make_inputs(0);
    if (!inputs.ok()) return Fail(std::string(inputs.status().message()));
    auto outputs = (*model)->Run(info.key, *inputs);
    if (!outputs.ok()) return Fail(std::string(outputs.status().message()));
    std::error_code ec;
    std::filesystem::create_directories(flags.output_dir, ec);
    for (const std::string& key : info.output_keys) {
      const Tensor& t = outputs->at(key);
      const std::string path =
          (std::filesystem::path(flags.output_dir) / (FileNameFor(key) + ".npy")).string();
      if (auto s = kiln::WriteNpy(path, t); !s.ok()) {
        return Fail(absl::StrCat("writing ", path, ": ", s.message()));
      }
      std::printf("%s: %s -> %s\n", key.c_str(), t.DebugString(8).c_str(), path.c_str());
    }
    return 0;
  }

  for (int64_t batch : flags.batches) {
    auto inputs = make_inputs(batch);
    if (!inputs.ok()) return Fail(std::string(inputs.status().message()));
    // Warm up: compiles the plan for this batch size and fills caches.
    for (int i = 0; i < 3; ++i) {
      auto out = (*model)->Run(info.key, *inputs);
      if (!out.ok()) {
        return Fail(absl::StrCat("batch ", batch, ": ", out.status().message()));
      }
    }
    std::vector<double> ms;
    const int64_t budget_end = kiln::NowNanos() + static_cast<int64_t>(flags.seconds * 1e9);
    const int64_t start = kiln::NowNanos();
    for (int64_t i = 0;; ++i) {
      if (flags.iterations > 0 ? i >= flags.iterations
                               : (i >= 10 && kiln::NowNanos() >= budget_end)) {
        break;
      }
      const int64_t t0 = kiln::NowNanos();
      auto out = (*model)->Run(info.key, *inputs);
      const int64_t t1 = kiln::NowNanos();
      if (!out.ok()) return Fail(absl::StrCat("batch ", batch, ": ", out.status().message()));
      ms.push_back((t1 - t0) / 1e6);
    }
    const double total_s = (kiln::NowNanos() - start) / 1e9;
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double items_per_s = batch * static_cast<double>(ms.size()) / total_s;
    if (flags.json) {
      std::printf(
          "{\"batch\": %lld, \"p50_ms\": %.4f, \"p90_ms\": %.4f, \"p99_ms\": %.4f, "
          "\"items_per_s\": %.2f, \"runs\": %zu, \"isa\": \"%s\"}\n",
          static_cast<long long>(batch), Percentile(sorted, 50), Percentile(sorted, 90),
          Percentile(sorted, 99), items_per_s, ms.size(),
          kiln::CpuIsaName(kiln::EffectiveCpuIsa()));
    } else {
      std::printf(
          "batch %-5lld p50 %9.3f ms  p90 %9.3f ms  p99 %9.3f ms  %12.1f items/s  (%zu runs)\n",
          static_cast<long long>(batch), Percentile(sorted, 50), Percentile(sorted, 90),
          Percentile(sorted, 99), items_per_s, ms.size());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

KILN_REGISTER_COMMAND("run", "run a model once (outputs as .npy) or benchmark it (--bench)",
                      RunRunCommand);
