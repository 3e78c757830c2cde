// Subcommands of the `kiln` tool register themselves here; each lives in its own
// <name>_command.cc in this folder (compiled straight into the executable, so the static
// registrations are kept).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kiln::tool {

struct Command {
  std::string summary;  // one line for `kiln help`
  // Arguments after the subcommand name; returns the process exit code.
  std::function<int(const std::vector<std::string>& args)> run;
};

std::map<std::string, Command>& CommandRegistry();

struct CommandRegistration {
  CommandRegistration(const std::string& name, std::string summary,
                      std::function<int(const std::vector<std::string>&)> run) {
    CommandRegistry()[name] = Command{std::move(summary), std::move(run)};
  }
};

}  // namespace kiln::tool

#define KILN_REGISTER_COMMAND(name, summary, fn) \
  static ::kiln::tool::CommandRegistration kiln_command_registration_##fn(name, summary, fn)
