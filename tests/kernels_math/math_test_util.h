// Helpers for the math kernel tests: building tensors and running one op.
#pragma once

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/core/tensor.h"
#include "kiln/kernels/testing.h"

namespace kiln::kernels::math_test {

using testing::KernelTestOptions;
using testing::RunKernel;

inline Tensor F32(std::vector<float> v, Shape s) { return Tensor::FromVector(v, std::move(s)); }
inline Tensor F32(std::vector<float> v) { return Tensor::FromVector(v); }
inline Tensor I64(std::vector<int64_t> v, Shape s) { return Tensor::FromVector(v, std::move(s)); }
inline Tensor I64(std::vector<int64_t> v) { return Tensor::FromVector(v); }
inline Tensor I32(std::vector<int32_t> v) { return Tensor::FromVector(v); }
Tensor Bools(std::vector<int> v, Shape s);

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}
std::vector<bool> BoolValues(const Tensor& t);

// Runs `op` and returns output 0, failing the test on error.
Tensor Run1(const std::string& op, const std::vector<Tensor>& inputs,
            std::map<std::string, ir::Attribute> attrs = {}, KernelTestOptions options = {});

// Element-wise closeness with NaN == NaN and equal infinities.
::testing::AssertionResult Near(const std::vector<float>& actual, const std::vector<float>& expected,
                                double rtol = 1e-6, double atol = 1e-7);

}  // namespace kiln::kernels::math_test
