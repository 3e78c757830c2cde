#include "kiln/core/cpu_isa.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

// One process, one cap: these run in order in their own test binary.
TEST(CpuIsaTest, CapIsValidatedAndFixedAtFirstUse) {
  EXPECT_EQ(SetMaxCpuIsa("sse2").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(SetMaxCpuIsa("avx2").ok());
  EXPECT_EQ(EffectiveCpuIsa(), CpuIsa::kAvx2);  // whatever the CPU has
  EXPECT_STREQ(CpuIsaName(EffectiveCpuIsa()), "avx2");
  // Kernels have chosen their code by now: a later cap would not apply, so it is refused.
  EXPECT_EQ(SetMaxCpuIsa("avx512").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(EffectiveCpuIsa(), CpuIsa::kAvx2);
  EXPECT_LE(EffectiveCpuIsa(), DetectedCpuIsa());
}

}  // namespace
}  // namespace kiln
