#include "math_test_util.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kiln::kernels::math_test {

Tensor Bools(std::vector<int> v, Shape s) {
  Tensor t(DType::kBool, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}

std::vector<bool> BoolValues(const Tensor& t) {
  std::vector<bool> out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.data<bool>()[i]);
  return out;
}

Tensor Run1(const std::string& op, const std::vector<Tensor>& inputs,
            std::map<std::string, ir::Attribute> attrs, KernelTestOptions options) {
  auto out = RunKernel(op, inputs, std::move(attrs), options);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  if (!out.ok() || out->empty()) return Tensor();
  return (*out)[0];
}

::testing::AssertionResult Near(const std::vector<float>& actual,
                                const std::vector<float>& expected, double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isnan(e) ? std::isnan(a) : (std::isinf(e) ? a == e : std::fabs(a - e) <= atol + rtol * std::fabs(e))) {
      continue;
    }
    return ::testing::AssertionFailure()
           << "element " << i << ": got " << a << ", expected " << e;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::kernels::math_test
