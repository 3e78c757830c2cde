// kiln::ReadVariable / AssignVariable / AssignAddVariable / AssignSubVariable
// (src/kernels/cpu/tf_variables.cc) against TensorFlow's semantics: shapes must match unless
// validate_shape is off, integers wrap, floats follow IEEE, an uninitialized variable is a
// FAILED_PRECONDITION, and only a handle VariableHandle made names a variable.
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "kiln/ir/variable.h"
#include "test_util.h"

namespace kiln::kernels::tensor_test {
namespace {

// State changes between runs: the harness's repeatability and batch-zero reruns would test
// (and change) the variable, not the kernel.
KernelTestOptions VariableOptions() {
  KernelTestOptions options;
  options.domain = "kiln";
  options.check_repeatable = false;
  options.check_batch_zero = false;
  options.check_in_place = false;
  return options;
}

std::map<std::string, ir::Attribute> Names(const std::shared_ptr<ir::Variable>& v) {
  return {{ir::kVariableAttr, ir::VariableHandle(v)}};
}

TEST(VariableOpsTest, IntegersWrapAndReadsSeeWrites) {
  auto v =
      std::make_shared<ir::Variable>("i", DType::kInt32, Tensor::FromVector<int32_t>({INT_MAX, 5}));
  auto out = RunKernel("AssignAddVariable", {I32({1, -7}, Shape{2})}, Names(v), VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int32_t>((*out)[0]), (std::vector<int32_t>{INT_MIN, -2}));
  out = RunKernel("AssignSubVariable", {I32({1, 3}, Shape{2})}, Names(v), VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int32_t>((*out)[0]), (std::vector<int32_t>{INT_MAX, -5}));
  out = RunKernel("ReadVariable", {}, Names(v), VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int32_t>((*out)[0]), (std::vector<int32_t>{INT_MAX, -5}));
}

TEST(VariableOpsTest, FloatsFollowIeee) {
  const float inf = std::numeric_limits<float>::infinity();
  auto v = std::make_shared<ir::Variable>("f", DType::kFloat32, F({1.f, inf, 0.f}, Shape{3}));
  auto out =
      RunKernel("AssignAddVariable", {F({NAN, -inf, -0.f}, Shape{3})}, Names(v), VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<float> got = Values<float>((*out)[0]);
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_TRUE(std::isnan(got[1]));  // inf + -inf
  EXPECT_EQ(got[2], 0.f);
}

TEST(VariableOpsTest, AssignChecksShapesUnlessToldNot) {
  auto v = std::make_shared<ir::Variable>("s", DType::kFloat32, Tensor::Scalar<float>(1.f));
  auto out = RunKernel("AssignVariable", {F({1, 2}, Shape{2})}, Names(v), VariableOptions());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(out.status().message(),
                                "Assign requires shapes of both tensors "
                                "to match"))
      << out.status();
  auto attrs = Names(v);
  attrs["validate_shape"] = int64_t{0};
  out = RunKernel("AssignVariable", {F({1, 2}, Shape{2})}, attrs, VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  out = RunKernel("ReadVariable", {}, Names(v), VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2}));
  EXPECT_EQ(Values<float>((*out)[0]), (std::vector<float>{1, 2}));
  // AssignAdd never changes the shape.
  out = RunKernel("AssignAddVariable", {Tensor::Scalar<float>(1.f)}, Names(v), VariableOptions());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VariableOpsTest, WritesDoNotAliasTheirInputs) {
  auto v = std::make_shared<ir::Variable>("a", DType::kFloat32, F({0, 0}, Shape{2}));
  Tensor value = F({3, 4}, Shape{2});
  ASSERT_TRUE(RunKernel("AssignVariable", {value}, Names(v), VariableOptions()).ok());
  value.data<float>()[0] = 100.f;  // the caller's buffer changes afterwards
  auto out = RunKernel("ReadVariable", {}, Names(v), VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<float>((*out)[0]), (std::vector<float>{3, 4}));
  (*out)[0].data<float>()[1] = -1.f;  // nor does a read's output alias the variable
  out = RunKernel("ReadVariable", {}, Names(v), VariableOptions());
  EXPECT_EQ(Values<float>((*out)[0]), (std::vector<float>{3, 4}));
}

TEST(VariableOpsTest, UninitializedAndMistypedAreErrors) {
  auto v = std::make_shared<ir::Variable>("u", DType::kFloat32, Tensor());
  auto out = RunKernel("ReadVariable", {}, Names(v), VariableOptions());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(out.status().message(), "uninitialized value u")) << out.status();
  out = RunKernel("AssignAddVariable", {Tensor::Scalar<float>(1.f)}, Names(v), VariableOptions());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  out = RunKernel("AssignVariable", {Tensor::Scalar<int32_t>(1)}, Names(v), VariableOptions());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  auto s = std::make_shared<ir::Variable>("str", DType::kString, S({"a"}, Shape{1}));
  out = RunKernel("AssignAddVariable", {S({"b"}, Shape{1})}, Names(s), VariableOptions());
  EXPECT_FALSE(out.ok());
  // Strings can be assigned and read.
  ASSERT_TRUE(RunKernel("AssignVariable", {S({"b"}, Shape{1})}, Names(s), VariableOptions()).ok());
  out = RunKernel("ReadVariable", {}, Names(s), VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<std::string>((*out)[0]), (std::vector<std::string>{"b"}));
}

// An attribute of the right dtype and size with the magic number, but made from file bytes
// (as an ONNX model could carry), is not followed as a pointer.
TEST(VariableOpsTest, ForgedHandleIsRefused) {
  auto v = std::make_shared<ir::Variable>("x", DType::kFloat32, Tensor::Scalar<float>(1.f));
  const Tensor real = ir::VariableHandle(v);
  Tensor forged(DType::kUInt8, real.shape());
  std::memcpy(forged.raw_data(), real.raw_data(), real.byte_size());  // magic and an address
  EXPECT_EQ(ir::VariableFromHandle(forged), nullptr);
  EXPECT_EQ(ir::VariableFromHandle(real), v.get());
  auto out = RunKernel("ReadVariable", {}, {{ir::kVariableAttr, forged}}, VariableOptions());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  out = RunKernel("ReadVariable", {}, {}, VariableOptions());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  // The handle keeps its variable alive after the last other owner lets go.
  std::weak_ptr<ir::Variable> weak = v;
  v.reset();
  EXPECT_FALSE(weak.expired());
  out = RunKernel("ReadVariable", {}, {{ir::kVariableAttr, real}}, VariableOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*(*out)[0].data<float>(), 1.f);
}

}  // namespace
}  // namespace kiln::kernels::tensor_test
