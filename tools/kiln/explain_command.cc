// `kiln explain MODEL --input NAME=FILE.npy [--path_count N]`: the :explain answer for a
// model on disk, without a server (the same code path: ExplainJson over a ServableVersion).
#include <iostream>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "command.h"
#include "kiln/core/npy.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/json_tensor.h"
#include "kiln/serving/server_core.h"

namespace kiln::tool {
namespace {

constexpr char kUsage[] = R"(usage: kiln explain MODEL --input NAME=FILE.npy [options]

Sampled-Shapley attributions of each row of the inputs (the first dimension is the batch),
printed as the JSON that `kiln serve` answers on :explain (docs/EXPLAIN.md).

  --input NAME=FILE.npy   an input of the signature, once per input
  --path_count N          permutations per instance, 1..50 (default 10)
  --signature_name NAME   the signature (default serving_default)
)";

int Fail(const std::string& message) {
  std::cerr << "kiln explain: " << message << "\n";
  return 1;
}

int RunExplainCommand(const std::vector<std::string>& args) {
  std::string model_path, signature_name;
  std::map<std::string, std::string> input_files;
  int path_count = 10;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](const std::string& flag, std::string* out) {
      if (arg.rfind(flag + "=", 0) == 0) {
        *out = arg.substr(flag.size() + 1);
        return true;
      }
      if (arg == flag && i + 1 < args.size()) {
        *out = args[++i];
        return true;
      }
      return false;
    };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (value("--input", &v)) {
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0)
        return Fail("--input " + v + ": expects NAME=FILE.npy");
      if (!input_files.emplace(v.substr(0, eq), v.substr(eq + 1)).second) {
        return Fail("--input " + v.substr(0, eq) + " is given twice");
      }
    } else if (value("--path_count", &v)) {
      if (!absl::SimpleAtoi(v, &path_count) || path_count < 1 || path_count > 50) {
        return Fail("--path_count " + v + ": expects an integer in [1, 50]");
      }
    } else if (value("--signature_name", &v)) {
      signature_name = v;
    } else if (!arg.empty() && arg[0] != '-' && model_path.empty()) {
      model_path = arg;
    } else {
      return Fail("unknown argument " + arg + "\n" + kUsage);
    }
  }
  if (model_path.empty()) return Fail(std::string("no MODEL given\n") + kUsage);
  if (input_files.empty()) return Fail("no --input given");
  auto model = LoadModelForTool("explain", model_path, runtime::ModelOptions{}, {});
  if (!model.ok()) return Fail(std::string(model.status().message()));
  // The request :explain would receive, in the columnar form; floats are written with
  // round-trip precision, so the values the model sees are the file's.
  std::string body = "{\"inputs\": {";
  bool first = true;
  for (const auto& [name, file] : input_files) {
    auto tensor = ReadNpy(file);
    if (!tensor.ok()) {
      return Fail(absl::StrCat("--input ", name, "=", file, ": ", tensor.status().message()));
    }
    if (!first) body.append(", ");
    first = false;
    serving::AppendJsonString(name, &body);
    body.append(": ");
    serving::AppendTensorJson(*tensor, false, &body);
  }
  body.append("}");
  if (!signature_name.empty()) {
    body.append(", \"signature_name\": ");
    serving::AppendJsonString(signature_name, &body);
  }
  body.append(absl::StrCat(
      ", \"explanationSpecOverride\": {\"parameters\": {\"sampledShapleyAttribution\": "
      "{\"pathCount\": ",
      path_count, "}}}}"));
  serving::ServableVersion servable(model_path, 1, *model, std::nullopt, nullptr);
  auto answer = serving::ExplainJson(servable, body, serving::ExplainLimits{});
  if (!answer.ok()) return Fail(std::string(answer.status().message()));
  std::cout << *answer << "\n";
  return 0;
}

KILN_REGISTER_COMMAND("explain", "sampled-Shapley attributions of a model's predictions",
                      RunExplainCommand);

}  // namespace
}  // namespace kiln::tool
