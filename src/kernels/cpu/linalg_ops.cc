// Det(X [..., M, M]) -> [...]: determinants by LU decomposition with partial pivoting,
// in double precision, for every float dtype.
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/math_common.h"
#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::linalg {
namespace {

using math::MathKernel;

double Determinant(std::vector<double>& a, int64_t m) {
  double det = 1.0;
  for (int64_t col = 0; col < m; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < m; ++r) {
      if (std::abs(a[r * m + col]) > std::abs(a[pivot * m + col])) pivot = r;
    }
    if (a[pivot * m + col] == 0.0) return 0.0;
    if (pivot != col) {
      for (int64_t c = 0; c < m; ++c) std::swap(a[pivot * m + c], a[col * m + c]);
      det = -det;
    }
    const double p = a[col * m + col];
    det *= p;
    for (int64_t r = col + 1; r < m; ++r) {
      const double f = a[r * m + col] / p;
      for (int64_t c = col + 1; c < m; ++c) a[r * m + c] -= f * a[col * m + c];
    }
  }
  return det;
}

class DetKernel : public MathKernel {
 public:
  explicit DetKernel(const ir::Node& node) : MathKernel(node) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.empty() || !math::IsFloat(ctx.inputs[0].dtype)) {
      return Error("'X' must be a float tensor");
    }
    const Shape& s = ctx.inputs[0].shape;
    if (s.rank() < 2 || s[s.rank() - 1] != s[s.rank() - 2]) {
      return Error("'X' must be [..., M, M], got ", s.ToString());
    }
    Shape out = s;
    out.erase(s.rank() - 1);
    out.erase(s.rank() - 2);
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[0].dtype;
    ctx.output_shapes[0] = out;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const int64_t m = x.dim(x.rank() - 1);
    const int64_t count = ctx.outputs[0].num_elements();
    math::VisitNumeric(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T> || math::kIsHalf<T>) {
        std::vector<double> a(m * m);
        for (int64_t b = 0; b < count; ++b) {
          for (int64_t i = 0; i < m * m; ++i)
            a[i] = tensor_ops::AsDouble(x.data<T>()[b * m * m + i]);
          ctx.outputs[0].data<T>()[b] = tensor_ops::FromDouble<T>(Determinant(a, m));
        }
      }
    });
    return absl::OkStatus();
  }
};

KILN_REGISTER_KERNEL_CLASS("", "Det", DetKernel);

}  // namespace

KILN_KERNEL_FILE(linalg_ops);

}  // namespace kiln::kernels::linalg
