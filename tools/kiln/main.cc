// The `kiln` command: `kiln <subcommand> [args]`. Invoked as `tensorflow_model_server`
// (an installed alias), it behaves as `kiln serve` so that TF Serving entrypoints run unchanged.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"

namespace kiln::tool {
std::map<std::string, Command>& CommandRegistry() {
  static std::map<std::string, Command> registry;
  return registry;
}
}  // namespace kiln::tool

namespace {

void PrintUsage() {
  std::printf("usage: kiln <command> [options]\n\ncommands:\n");
  for (const auto& [name, command] : kiln::tool::CommandRegistry()) {
    std::printf("  %-10s %s\n", name.c_str(), command.summary.c_str());
  }
  std::printf("\n`kiln <command> --help` describes a command's options.\n");
}

std::string Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

int main(int argc, char** argv) {
  auto& registry = kiln::tool::CommandRegistry();
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string name;
  if (Basename(argv[0]) == "tensorflow_model_server") {
    name = "serve";
  } else {
    if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
      PrintUsage();
      return args.empty() ? 2 : 0;
    }
    name = args[0];
    args.erase(args.begin());
  }
  auto it = registry.find(name);
  if (it == registry.end()) {
    std::fprintf(stderr, "kiln: unknown command \"%s\"\n\n", name.c_str());
    PrintUsage();
    return 2;
  }
  return it->second.run(args);
}
