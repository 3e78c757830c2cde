// `kiln inspect` through the real binary names the nodes of every rewrite in its optimization
// log (issue 16: it printed "1 change" for 53 folded BatchNorms and 33 fused convolutions).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(InspectCliTest, OptimizationLogNamesTheNodesOfEachRewrite) {
  const std::filesystem::path model = std::filesystem::path(KILN_SHARED_DIR) / "testdata" /
                                      "models" / "onnx_light_zoo" / "light_resnet50.onnx";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not available";
  const CommandResult r = RunCommand(absl::StrCat(KILN_BINARY, " inspect ", model.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // One line per rewrite, with the nodes' names (the model's nodes are named n0, n1, ...), and
  // counts of rewrites: 53 BatchNormalization nodes folded, 33 convolutions fused.
  for (const char* expected : {"batchnorm_folding (round 1): 53 changes",
                               "    folded BatchNormalization 'n1' into Conv 'n0'\n",
                               "conv_matmul_post_op_fusion (round 1): 33 changes",
                               "    fused Conv 'n0' + Relu 'n2' into FusedConv\n"}) {
    EXPECT_TRUE(absl::StrContains(r.output, expected)) << expected << "\n" << r.output;
  }
}

}  // namespace
