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
  // As tensorflow_model_server: an argument it does not know is reported, and it starts.
  // Reported before --help is answered, so that `kiln serve <args> --help` checks a command
  // line (tests/deploy does).
  for (const std::string& unknown : flags->unknown_arguments) {
    std::fprintf(stderr, "unknown argument: %s\n", unknown.c_str());
  }
  if (flags->help) {
    std::printf("%s", kiln::serving::ServeUsage().c_str());
    return 0;
  }
  if (flags->version) {
    std::printf("%s\n", kiln::serving::kServerVersion);
    return 0;
  }
  auto notes = kiln::serving::CheckServeFlags(*flags);
  if (!notes.ok()) {
    std::fprintf(stderr, "kiln serve: %s\n", std::string(notes.status().message()).c_str());
    return 1;
  }
  for (const std::string& note : notes->notes) {
    std::fprintf(stderr, "kiln serve: note: %s\n", note.c_str());
  }
  return kiln::serving::RunServer(*flags);
}

}  // namespace

KILN_REGISTER_COMMAND("serve", "serve models with TensorFlow Serving's gRPC and REST APIs",
                      RunServeCommand);
