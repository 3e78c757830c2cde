// Helpers for the tensor-kernel tests: building tensors and running one op.
#pragma once

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/testing.h"

namespace kiln::kernels::tensor_test {

using testing::KernelTestOptions;
using testing::RunKernel;

template <typename T>
Tensor T1(const std::vector<T>& v, Shape shape) {
  return Tensor::FromVector<T>(v, std::move(shape));
}
inline Tensor F(const std::vector<float>& v, Shape shape) { return T1<float>(v, shape); }
inline Tensor I64(const std::vector<int64_t>& v) { return Tensor::FromVector<int64_t>(v); }
inline Tensor I64(const std::vector<int64_t>& v, Shape s) { return T1<int64_t>(v, s); }
inline Tensor I32(const std::vector<int32_t>& v, Shape s) { return T1<int32_t>(v, s); }
inline Tensor S(const std::vector<std::string>& v, Shape shape) {
  return T1<std::string>(v, shape);
}
// 0, 1, 2, ... as float with this shape.
inline Tensor Iota(Shape shape) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}
template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

// Runs `op` and expects success; returns the outputs.
inline std::vector<Tensor> Op(const std::string& op, const std::vector<Tensor>& inputs,
                               std::map<std::string, ir::Attribute> attrs = {},
                               KernelTestOptions options = {}) {
  auto out = RunKernel(op, inputs, std::move(attrs), options);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  if (!out.ok()) return std::vector<Tensor>(options.num_outputs);
  return *std::move(out);
}

// Expects `t` to equal `expected` (dtype, shape and values).
#define EXPECT_TENSOR_EQ(t, expected)                                                   \
  EXPECT_TRUE(::kiln::TensorsEqual((t), (expected)))                                    \
      << "got " << (t).DebugString(64) << "\nwant " << (expected).DebugString(64)

}  // namespace kiln::kernels::tensor_test
