// `kiln compress MODEL --prune_channels=FRACTION --calibration_inputs DIR --output OUT.onnx`:
// offline, lossy structured pruning (onnx_channel_pruning.h) that writes a smaller ONNX model,
// and the accuracy report of the pruned model against the original on the calibration inputs,
// with the definitions of the load-time accuracy guard (docs/COMPRESSION.md): per output the
// max absolute error, the max relative error (max |pruned - original| / max |original|) and,
// for class scores (float [batch, classes >= 2]), the top-1 agreement.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "command.h"
#include "kiln/core/determinism.h"
#include "kiln/core/npy.h"
#include "kiln/core/status.h"
#include "onnx_channel_pruning.h"

namespace {

using kiln::Tensor;
namespace runtime = kiln::runtime;

constexpr char kUsage[] =
    R"(usage: kiln compress MODEL.onnx --prune_channels=FRACTION --calibration_inputs DIR --output OUT.onnx

Removes, in every Conv whose channels only reach per-channel operators, other convolutions
and (through a global pool and Flatten) a Gemm/MatMul head, the FRACTION of output channels
whose filters have the smallest L1 norm (at least one channel stays), with the matching
input channels of their readers, and writes a smaller ONNX model. Convolutions whose
channels reach a residual Add, a Concat, a Reshape or a graph output are left whole (the
report says which and why). Then runs the
original and the pruned model on the calibration inputs and prints the accuracy report
(with op determinism on, as TF_DETERMINISTIC_OPS=1: no timed kernel choice differs between
the two, so the report measures the pruning alone).
This is lossy: fine-tune the pruned model to recover accuracy. The exact pruning of
all-zero channels happens at load under --allow_compression instead.

  --prune_channels F      fraction of each prunable layer's output channels to remove, [0, 1)
  --calibration_inputs DIR
                          one NAME.npy per signature input (first dimension = examples)
  --output OUT.onnx       where to write the pruned model
  --signature NAME        signature to compare (default serving_default)
  --batch N               examples per run (default 32; a model with a fixed batch size runs
                          its own)
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "kiln compress: %s\n", message.c_str());
  return 1;
}

struct Flags {
  std::string model;
  double fraction = -1;
  std::string calibration_inputs;
  std::string output;
  std::string signature = "serving_default";
  int64_t batch = 32;
};

// Empty on success, else the message.
std::string ParseFlags(const std::vector<std::string>& args, Flags* flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      if (!flags->model.empty()) return absl::StrCat("a second MODEL '", arg, "'");
      flags->model = arg;
      continue;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= args.size()) return absl::StrCat("--", name, " needs a value");
      value = args[++i];
    }
    if (name == "prune_channels") {
      if (!absl::SimpleAtod(value, &flags->fraction) ||
          !(flags->fraction >= 0 && flags->fraction < 1)) {
        return absl::StrCat("--prune_channels=", value, ": expected a fraction in [0, 1)");
      }
    } else if (name == "calibration_inputs") {
      flags->calibration_inputs = value;
    } else if (name == "output") {
      flags->output = value;
    } else if (name == "signature") {
      flags->signature = value;
    } else if (name == "batch") {
      if (!absl::SimpleAtoi(value, &flags->batch) || flags->batch < 1) {
        return absl::StrCat("--batch=", value, ": must be a positive number");
      }
    } else {
      return absl::StrCat("unknown flag --", name);
    }
  }
  if (flags->model.empty()) return "no MODEL";
  if (flags->fraction < 0) return "--prune_channels is required";
  if (flags->calibration_inputs.empty()) return "--calibration_inputs is required";
  if (flags->output.empty()) return "--output is required";
  return "";
}

// Per output, over all calibration examples.
struct Accuracy {
  double max_abs_error = 0;
  double max_abs_reference = 0;
  bool class_scores = false;
  int64_t examples = 0;
  int64_t top1_agree = 0;
  int64_t non_finite_mismatch = 0;  // NaN/Inf on one side only
};

void Accumulate(const Tensor& reference, const Tensor& pruned, Accuracy* acc) {
  const float* r = reference.data<float>();
  const float* p = pruned.data<float>();
  const int64_t n = reference.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(r[i]) != std::isfinite(p[i])) {
      ++acc->non_finite_mismatch;
      continue;
    }
    if (!std::isfinite(r[i])) continue;
    acc->max_abs_error = std::max(acc->max_abs_error, std::fabs(static_cast<double>(p[i]) - r[i]));
    acc->max_abs_reference = std::max(acc->max_abs_reference, std::fabs(static_cast<double>(r[i])));
  }
  acc->class_scores = reference.rank() == 2 && reference.dim(1) >= 2;
  if (!acc->class_scores) return;
  const int64_t rows = reference.dim(0), classes = reference.dim(1);
  for (int64_t b = 0; b < rows; ++b) {
    int64_t best_r = 0, best_p = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (r[b * classes + c] > r[b * classes + best_r]) best_r = c;
      if (p[b * classes + c] > p[b * classes + best_p]) best_p = c;
    }
    acc->top1_agree += best_r == best_p;
  }
  acc->examples += rows;
}

int RunCompress(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("%s", kUsage);
    return 0;
  }
  Flags flags;
  if (std::string error = ParseFlags(args, &flags); !error.empty()) {
    std::fprintf(stderr, "kiln compress: %s\n\n%s", error.c_str(), kUsage);
    return 2;
  }
  std::ifstream in(flags.model, std::ios::binary);
  if (!in) return Fail(absl::StrCat("cannot read ", flags.model, " (MODEL is a .onnx file)"));
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes.str())) {
    return Fail(absl::StrCat(flags.model, " is not an ONNX ModelProto"));
  }
  auto layers = kiln::tool::PruneLowestL1Filters(model, flags.fraction);
  if (!layers.ok()) return Fail(absl::StrCat(flags.model, ": ", layers.status().message()));
  int64_t channels = 0, removed = 0, pruned_layers = 0;
  for (const kiln::tool::ConvPruning& l : *layers) {
    channels += l.channels;
    removed += l.removed;
    pruned_layers += l.removed > 0;
  }
  std::printf("pruned %lld of %zu Conv layers: %lld of %lld output channels (%.1f%%)\n",
              static_cast<long long>(pruned_layers), layers->size(),
              static_cast<long long>(removed), static_cast<long long>(channels),
              channels ? 100.0 * removed / channels : 0.0);
  for (const kiln::tool::ConvPruning& l : *layers) {
    if (l.removed > 0) {
      std::printf("  %s: %lld -> %lld channels\n", l.node.c_str(),
                  static_cast<long long>(l.channels),
                  static_cast<long long>(l.channels - l.removed));
    } else {
      std::printf("  %s: kept whole: %s\n", l.node.c_str(), l.skipped.c_str());
    }
  }
  std::string out_bytes;
  if (!model.SerializeToString(&out_bytes)) return Fail("cannot serialize the pruned model");
  {
    std::ofstream out(flags.output, std::ios::binary | std::ios::trunc);
    out.write(out_bytes.data(), static_cast<std::streamsize>(out_bytes.size()));
    if (!out) return Fail(absl::StrCat("cannot write ", flags.output));
  }
  std::printf("model: %zu -> %zu bytes (%.1f%%), written to %s\n", bytes.str().size(),
              out_bytes.size(), 100.0 * out_bytes.size() / std::max<size_t>(1, bytes.str().size()),
              flags.output.c_str());

  // Both models compile their kernels by the same fixed rules (kiln/core/determinism.h):
  // with timed choices, two loads of even the same model can round differently.
  kiln::EnableOpDeterminism();
  runtime::ModelOptions options;
  auto original = kiln::tool::LoadModelForTool("compress", flags.model, options, {});
  if (!original.ok()) return Fail(absl::StrCat(flags.model, ": ", original.status().message()));
  auto pruned = kiln::tool::LoadModelForTool("compress", flags.output, options, {});
  if (!pruned.ok()) {
    return Fail(absl::StrCat("the pruned model ", flags.output,
                             " does not load: ", pruned.status().message()));
  }
  auto info = (*original)->FindSignature(flags.signature);
  if (!info.ok()) return Fail(std::string(info.status().message()));
  const kiln::SignatureInfo& sig = **info;

  std::map<std::string, Tensor> calibration;
  int64_t examples = -1;
  int64_t batch = flags.batch;
  for (const std::string& key : sig.input_keys) {
    const std::string path =
        (std::filesystem::path(flags.calibration_inputs) / (key + ".npy")).string();
    auto t = kiln::ReadNpy(path);
    if (!t.ok()) {
      return Fail(absl::StrCat("--calibration_inputs: input '", key, "': ", t.status().message()));
    }
    if (t->rank() < 1 || (examples >= 0 && t->dim(0) != examples)) {
      return Fail(absl::StrCat("--calibration_inputs: ", path,
                               " must have the examples along its first dimension, as many as "
                               "the other inputs"));
    }
    examples = t->dim(0);
    const kiln::TensorInfo& ti = sig.inputs.at(key);
    if (ti.rank_known && !ti.shape.empty() && ti.shape[0] > 0) batch = ti.shape[0];
    calibration[key] = *t;
  }
  if (examples <= 0) return Fail("--calibration_inputs: no examples");
  if (examples % batch != 0 && batch != flags.batch) {
    return Fail(absl::StrCat("the model takes batches of ", batch,
                             " and the calibration inputs hold ", examples,
                             " examples, not a multiple"));
  }
  std::map<std::string, Accuracy> accuracy;
  for (int64_t begin = 0; begin < examples; begin += batch) {
    const int64_t end = std::min(examples, begin + batch);
    std::map<std::string, Tensor> feed;
    for (const auto& [key, t] : calibration) feed[key] = t.Slice(begin, end);
    auto reference = (*original)->Run(flags.signature, feed);
    if (!reference.ok())
      return Fail(absl::StrCat("original model: ", reference.status().message()));
    auto result = (*pruned)->Run(flags.signature, feed);
    if (!result.ok()) return Fail(absl::StrCat("pruned model: ", result.status().message()));
    for (const auto& [key, r] : *reference) {
      auto it = result->find(key);
      if (it == result->end() || it->second.shape() != r.shape()) {
        return Fail(absl::StrCat("output '", key, "' of the pruned model differs in shape"));
      }
      if (r.dtype() != kiln::DType::kFloat32) continue;
      Accumulate(r, it->second, &accuracy[key]);
    }
  }
  std::printf("accuracy on %s (%lld examples), pruned vs original:\n",
              flags.calibration_inputs.c_str(), static_cast<long long>(examples));
  for (const auto& [key, a] : accuracy) {
    const double rel =
        a.max_abs_reference > 0 ? a.max_abs_error / a.max_abs_reference : a.max_abs_error;
    std::printf("  output '%s': max abs error %.6g, max rel error %.6g", key.c_str(),
                a.max_abs_error, rel);
    if (a.class_scores) {
      std::printf(", top-1 agreement %lld/%lld (%.2f%%)", static_cast<long long>(a.top1_agree),
                  static_cast<long long>(a.examples),
                  100.0 * a.top1_agree / std::max<int64_t>(1, a.examples));
    }
    if (a.non_finite_mismatch > 0) {
      std::printf(", %lld values NaN/Inf on one side only",
                  static_cast<long long>(a.non_finite_mismatch));
    }
    std::printf("\n");
  }
  return 0;
}

KILN_REGISTER_COMMAND("compress", "prune conv channels offline (lossy) and report the accuracy",
                      RunCompress);

}  // namespace
