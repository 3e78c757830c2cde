// Subcommands of the `kiln` tool register themselves here; each lives in its own
// <name>_command.cc in this folder (compiled straight into the executable, so the static
// registrations are kept).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/runtime/model.h"

namespace kiln::tool {

struct Command {
  std::string summary;  // one line for `kiln help`
  // Arguments after the subcommand name; returns the process exit code.
  std::function<int(const std::vector<std::string>& args)> run;
};

std::map<std::string, Command>& CommandRegistry();

// Loads MODEL for `kiln run` and `kiln inspect` as Model::Load does (a .onnx file, a frozen
// GraphDef .pb, a SavedModel, a base path), printing the importer's warnings (a graph from a
// newer TensorFlow, ...) to stderr as "kiln TOOL: warning: ...". `frozen_outputs`, when not
// empty, are the tensors a frozen GraphDef returns instead of its sink nodes; any other model
// is then an error, since its outputs are its signatures'. Defined in run_command.cc.
absl::StatusOr<std::shared_ptr<runtime::Model>> LoadModelForTool(
    const std::string& tool, const std::string& path, const runtime::ModelOptions& options,
    const std::vector<std::string>& frozen_outputs);

struct CommandRegistration {
  CommandRegistration(const std::string& name, std::string summary,
                      std::function<int(const std::vector<std::string>&)> run) {
    CommandRegistry()[name] = Command{std::move(summary), std::move(run)};
  }
};

}  // namespace kiln::tool

#define KILN_REGISTER_COMMAND(name, summary, fn) \
  static ::kiln::tool::CommandRegistration kiln_command_registration_##fn(name, summary, fn)
