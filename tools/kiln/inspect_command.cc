// `kiln inspect MODEL`: signatures (inputs, outputs), op histogram, optimization log and
// planned memory; for SavedModels also what `saved_model_cli show --all` shows.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "command.h"
#include "kiln/runtime/loader.h"
#include "kiln/runtime/model.h"

// Defined by kiln_runtime when the TensorFlow importer is part of the build.
#ifdef KILN_HAVE_TF_IMPORT
#include "kiln/import/saved_model.h"
#define KILN_INSPECT_HAS_SAVED_MODEL 1
#endif

namespace {

constexpr char kUsage[] = R"(usage: kiln inspect MODEL [options]

MODEL is a .onnx file, a frozen TensorFlow GraphDef (.pb: its Placeholders are the inputs,
the nodes nothing reads the outputs), a SavedModel directory, or a base path with numeric
version folders.

  --disable_optimizer   show the imported graph without optimization
  --allow_compression   compress as `kiln run --allow_compression` would, and show the
                        accuracy report and per-layer decisions (docs/COMPRESSION.md)
  --mixed_precision bfloat16
                        bf16 weights for MatMul/Gemm
  --calibration_inputs DIR
                        one NAME.npy per input (first dimension = examples)
  --compression_tolerance X
                        largest accepted output error (default 0.02)
  --tags TAGS           SavedModel tag set (default serve)
  --signature NAME      show only this signature (default: all)
  --outputs A,B         frozen GraphDef only: the tensors it returns ("name" or "name:1")
                        instead of the nodes nothing reads
)";

// The part of Model::Inspect() about one signature: the model header, then the block that
// starts with "Signature 'NAME'".
std::string OnlySignature(const std::string& text, const std::string& name) {
  const std::string marker = "\nSignature '";
  const size_t first = text.find(marker);
  if (first == std::string::npos) return text;
  const size_t start = text.find(marker + name + "'");
  if (start == std::string::npos) return text.substr(0, first + 1);
  const size_t end = text.find(marker, start + marker.size());
  return text.substr(0, first) + text.substr(start, end == std::string::npos ? end : end - start) +
         "\n";
}

int RunInspectCommand(const std::vector<std::string>& args) {
  std::string model_path;
  std::string signature;
  std::vector<std::string> frozen_outputs;
  kiln::runtime::ModelOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (arg == "--disable_optimizer") {
      options.disable_optimizer = true;
    } else if (arg == "--allow_compression" || arg == "--allow_compression=true") {
      options.allow_compression = true;
    } else if (arg == "--allow_compression=false") {
      options.allow_compression = false;
    } else if (arg.rfind("--mixed_precision", 0) == 0 ||
               arg.rfind("--calibration_inputs", 0) == 0 ||
               arg.rfind("--compression_tolerance", 0) == 0) {
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(0, eq);
      if (eq == std::string::npos && i + 1 >= args.size()) {
        std::fprintf(stderr, "kiln inspect: %s needs a value\n", arg.c_str());
        return 2;
      }
      const std::string value = eq == std::string::npos ? args[++i] : arg.substr(eq + 1);
      if (name == "--mixed_precision") {
        if (value != "bfloat16" && value != "fp32") {
          std::fprintf(stderr, "kiln inspect: --mixed_precision=%s: expected bfloat16\n",
                       value.c_str());
          return 2;
        }
        options.mixed_precision_bf16 = value == "bfloat16";
      } else if (name == "--calibration_inputs") {
        options.calibration_inputs_dir = value;
      } else if (name == "--compression_tolerance") {
        if (!absl::SimpleAtod(value, &options.compression_tolerance) ||
            !(options.compression_tolerance >= 0)) {
          std::fprintf(stderr, "kiln inspect: --compression_tolerance=%s: not a number >= 0\n",
                       value.c_str());
          return 2;
        }
      } else {
        std::fprintf(stderr, "kiln inspect: unknown flag %s\n\n%s", arg.c_str(), kUsage);
        return 2;
      }
    } else if (arg.rfind("--tags=", 0) == 0) {
      options.tags = arg.substr(7);
    } else if (arg == "--tags" && i + 1 < args.size()) {
      options.tags = args[++i];
    } else if (arg.rfind("--signature=", 0) == 0) {
      signature = arg.substr(12);
    } else if (arg == "--signature" && i + 1 < args.size()) {
      signature = args[++i];
    } else if (arg.rfind("--outputs=", 0) == 0 || (arg == "--outputs" && i + 1 < args.size())) {
      const std::string value = arg == "--outputs" ? args[++i] : arg.substr(10);
      for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        frozen_outputs.emplace_back(part);
      }
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "kiln inspect: unknown flag %s\n\n%s", arg.c_str(), kUsage);
      return 2;
    } else if (model_path.empty()) {
      model_path = arg;
    } else {
      std::fprintf(stderr, "kiln inspect: unexpected argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "kiln inspect: no MODEL given\n\n%s", kUsage);
    return 2;
  }
  auto resolved = kiln::runtime::ResolveModelPath(model_path);
  if (!resolved.ok()) {
    std::fprintf(stderr, "kiln inspect: %s\n", std::string(resolved.status().message()).c_str());
    return 1;
  }
#ifdef KILN_INSPECT_HAS_SAVED_MODEL
  // What `saved_model_cli show --all` prints comes first: it needs no import, so it is
  // shown even for a model Kiln cannot run.
  if (resolved->format == kiln::runtime::ModelFormat::kSavedModel) {
    auto summary = kiln::import::DescribeSavedModel(resolved->path);
    if (summary.ok()) {
      if (!signature.empty()) {
        for (auto& meta : summary->meta_graphs) {
          std::erase_if(meta.signatures, [&](const kiln::import::SignatureSummary& s) {
            return s.key != signature;
          });
        }
      }
      std::printf("%s\n", kiln::import::FormatSavedModelSummary(*summary).c_str());
    }
  }
#endif
  auto model = kiln::tool::LoadModelForTool("inspect", model_path, options, frozen_outputs);
  if (!model.ok()) {
    std::fprintf(stderr, "kiln inspect: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  if (signature.empty()) {
    std::printf("%s", (*model)->Inspect().c_str());
    return 0;
  }
  if (auto found = (*model)->FindSignature(signature); !found.ok()) {
    std::fprintf(stderr, "kiln inspect: --signature %s: %s\n", signature.c_str(),
                 std::string(found.status().message()).c_str());
    return 1;
  }
  std::printf("%s", OnlySignature((*model)->Inspect(), signature).c_str());
  return 0;
}

}  // namespace

KILN_REGISTER_COMMAND("inspect",
                      "show a model's signatures, ops, optimization log and planned memory",
                      RunInspectCommand);
