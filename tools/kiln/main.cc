// The `kiln` command: `kiln <subcommand> [args]`. Invoked as `tensorflow_model_server`
// (an installed alias), it behaves as `kiln serve` so that TF Serving entrypoints run unchanged.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

// oneDNN (Debian's build) runs on libgomp, whose idle workers by default spin for ~300k
// iterations after every parallel region. Where cores are shared, a spinning worker holds a
// core a runnable thread needs, and a barrier waiting for a preempted worker costs a time
// slice: on the 2-core machine under load, batch-1 ResNet-18 took 235-340 ms with the default
// spin and 100-110 ms with sleeping workers. But with the cores to itself (a serving machine),
// a worker that sleeps after every region pays a futex wake-up per operator: on the idle
// machine, sleeping workers made batch-1 MobileNet-v2 12-20 ms and BERT-4 13.7 ms, against
// 4.1-4.3 ms and 6.7 ms with a spin of 10,000 iterations (tens of microseconds) before
// sleeping, which is what ONNX Runtime's and TensorFlow's thread pools also do
// (docs/performance/runtime.md). So the default is that bounded spin; on an oversubscribed
// machine set OMP_WAIT_POLICY=PASSIVE. libgomp reads these variables once, in its
// constructor, before main and after libc has reset the environment (no constructor of ours
// can set them), so the command re-executes itself once with them set. Settings the user made
// are kept.
void UseBoundedSpinOpenMpWorkers(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;
  }
  if (setenv("OMP_WAIT_POLICY", "ACTIVE", 0) != 0 || setenv("GOMP_SPINCOUNT", "10000", 0) != 0) {
    return;
  }
  execv("/proc/self/exe", argv);  // returns only on failure: run on with the default policy
}

}  // namespace

int main(int argc, char** argv) {
  UseBoundedSpinOpenMpWorkers(argv);
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
