// The kernel registry: built from the explicit table of kernel files (no static initializers,
// no whole-archive linking), and a kernel registered twice is an error naming both files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

class NoopKernel : public OpKernel {
 public:
  explicit NoopKernel(const ir::Node&) {}
  absl::Status Reshape(ReshapeContext&) override { return absl::OkStatus(); }
  absl::Status Compute(ComputeContext&) const override { return absl::OkStatus(); }
};

// A kernel file of this test's own, with the same op twice.
KILN_REGISTER_KERNEL_CLASS("registry_test", "Twice", NoopKernel);
KILN_REGISTER_KERNEL_CLASS("registry_test", "Once", NoopKernel);
KILN_REGISTER_KERNEL_CLASS("registry_test", "Twice", NoopKernel);

}  // namespace

KILN_KERNEL_FILE(registry_test_duplicates);

namespace {

TEST(KernelRegistryTest, DuplicateRegistrationIsAnErrorNamingBothFiles) {
  KernelRegistry registry;
  registry.set_source("first_file");
  EXPECT_TRUE(registry.Register("x", "Op", nullptr).ok());
  registry.set_source("second_file");
  const absl::Status duplicate = registry.Register("x", "Op", nullptr);
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(duplicate.message().find("'first_file' and by 'second_file'"), std::string::npos)
      << duplicate;
  EXPECT_EQ(registry.status(), duplicate);

  // Through the macros: the file's function registers each line, and the repeated op fails.
  KernelRegistry from_file;
  from_file.set_source("registry_test_duplicates");
  KilnRegisterKernels_registry_test_duplicates(&from_file);
  EXPECT_NE(from_file.Find("registry_test", "Once"), nullptr);
  EXPECT_NE(from_file.Find("registry_test", "Twice"), nullptr);
  EXPECT_EQ(from_file.status().code(), absl::StatusCode::kAlreadyExists) << from_file.status();
}

// Every registration line of src/kernels/cpu reaches the global registry, once: a file left
// out of kernel_files.inc, or a line its KILN_KERNEL_FILE cannot see, would be missing here.
// (KILN_BINARY and KILN_UNARY are math_binary.cc's and math_unary.cc's shorthands.)
TEST(KernelRegistryTest, GlobalRegistryHoldsEveryKernelOfTheLibrary) {
  const KernelRegistry& registry = KernelRegistry::Global();
  ASSERT_TRUE(registry.status().ok()) << registry.status();
  const std::regex with_domain(
      R"re(^KILN_(REGISTER_KERNEL|REGISTER_KERNEL_CLASS|BINARY)\(\s*"([^"]*)",\s*"([^"]*)")re");
  const std::regex unary(R"re(^KILN_UNARY\(\s*"([^"]*)")re");
  const std::regex any(R"re(^KILN_(REGISTER_KERNEL|REGISTER_KERNEL_CLASS|BINARY|UNARY)\()re");
  int lines = 0;
  const std::filesystem::path dir = std::filesystem::path(KILN_SOURCE_DIR) / "src/kernels/cpu";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".cc") continue;
    std::ifstream in(entry.path());
    std::string text;
    while (std::getline(in, text)) {
      if (!std::regex_search(text, any)) continue;
      ++lines;
      // Lines whose names are constants or on the next line count without a name check.
      std::smatch m;
      std::string domain, op;
      if (std::regex_search(text, m, with_domain)) {
        domain = m[2];
        op = m[3];
      } else if (std::regex_search(text, m, unary)) {
        op = m[1];
      } else {
        continue;
      }
      EXPECT_NE(registry.Find(domain, op), nullptr)
          << entry.path().filename() << ": " << domain << "::" << op << " is not registered";
    }
  }
  EXPECT_GT(lines, 150);
  EXPECT_EQ(static_cast<int>(registry.RegisteredOps().size()), lines);
}

}  // namespace
}  // namespace kiln::kernels
