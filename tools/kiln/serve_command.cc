// `kiln serve`: a drop-in tensorflow_model_server (same flags, REST and gRPC APIs).
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "kiln/serving/server.h"

namespace {

int RunServeCommand(const std::vector<std::string>& args) {
  auto flags = kiln::serving::ParseServeFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "kiln serve: %s\n\n%s", std::string(flags.status().message()).c_str(),
                 kiln::serving::ServeUsage().c_str());
    return 2;
  }
  if (flags->help) {
    std::printf("%s", kiln::serving::ServeUsage().c_str());
    return 0;
  }
  if (flags->version) {
    std::printf("%s\n", kiln::serving::kServerVersion);
    return 0;
  }
  return kiln::serving::RunServer(*flags);
}

}  // namespace

KILN_REGISTER_COMMAND("serve", "serve models with TensorFlow Serving's gRPC and REST APIs",
                      RunServeCommand);
