// Direct-loop ConvTranspose (ONNX semantics) for the geometries oneDNN's deconvolution
// rejects, e.g. the negative padding that an output_shape smaller than the full result
// implies (the result is cropped) or larger (zero rows are appended).
#ifndef KILN_SRC_KERNELS_CPU_NN_CONV_TRANSPOSE_REF_H_
#define KILN_SRC_KERNELS_CPU_NN_CONV_TRANSPOSE_REF_H_

#include <cstdint>
#include <vector>

#include "kiln/kernels/kernel.h"

namespace kiln::kernels::nn {

struct ConvTransposeRefGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  // One entry per spatial dimension (1 to 3).
  std::vector<int64_t> in_spatial, kernel, out_spatial, strides, dilations, pads_begin;
};

// y[n, m, o...] = bias[m] + sum over the input channels c of m's group, input positions i and
// taps k with o = i * stride - pad_begin + k * dilation of x[n, c, i...] * w[c, m % (M/G), k...].
// x is [N, C, in...], w is ONNX's [C, M/G, k...], bias is [M] or null, y is [N, M, out...];
// all plain row-major float. Parallel over the N*M output planes.
void ConvTransposeReference(const ConvTransposeRefGeometry& g, const float* x, const float* w,
                            const float* bias, float* y, const ComputeContext& ctx);

}  // namespace kiln::kernels::nn

#endif  // KILN_SRC_KERNELS_CPU_NN_CONV_TRANSPOSE_REF_H_
