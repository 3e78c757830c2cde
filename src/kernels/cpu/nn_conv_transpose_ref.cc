#include "nn_conv_transpose_ref.h"

#include <algorithm>

namespace kiln::kernels::nn {

void ConvTransposeReference(const ConvTransposeRefGeometry& g, const float* x, const float* w,
                            const float* bias, float* y, const ComputeContext& ctx) {
  // Pad the geometry to 3 spatial dimensions so one loop nest serves 1-D to 3-D.
  const int spatial = static_cast<int>(g.in_spatial.size());
  const int off = 3 - spatial;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
          d[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  for (int i = 0; i < spatial; ++i) {
    in[off + i] = g.in_spatial[i];
    out[off + i] = g.out_spatial[i];
    k[off + i] = g.kernel[i];
    s[off + i] = g.strides[i];
    d[off + i] = g.dilations[i];
    pb[off + i] = g.pads_begin[i];
  }
  const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
  const int64_t k_plane = k[0] * k[1] * k[2];
  const int64_t c_per_group = g.in_channels / g.group, m_per_group = g.out_channels / g.group;
  ctx.ParallelFor(g.batch * g.out_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / g.out_channels, m = plane % g.out_channels;
      const int64_t group = m / m_per_group, m_in_group = m % m_per_group;
      float* yp = y + plane * out_plane;
      std::fill(yp, yp + out_plane, bias != nullptr ? bias[m] : 0.0f);
      for (int64_t cg = 0; cg < c_per_group; ++cg) {
        const int64_t c = group * c_per_group + cg;
        const float* xp = x + (n * g.in_channels + c) * in_plane;
        const float* wp = w + (c * m_per_group + m_in_group) * k_plane;
        // Scatter each input value through the kernel; taps that land outside the output
        // (cropped by padding or output_shape) are skipped.
        for (int64_t i0 = 0; i0 < in[0]; ++i0)
          for (int64_t i1 = 0; i1 < in[1]; ++i1)
            for (int64_t i2 = 0; i2 < in[2]; ++i2) {
              const float v = xp[(i0 * in[1] + i1) * in[2] + i2];
              for (int64_t k0 = 0; k0 < k[0]; ++k0) {
                const int64_t o0 = i0 * s[0] - pb[0] + k0 * d[0];
                if (o0 < 0 || o0 >= out[0]) continue;
                for (int64_t k1 = 0; k1 < k[1]; ++k1) {
                  const int64_t o1 = i1 * s[1] - pb[1] + k1 * d[1];
                  if (o1 < 0 || o1 >= out[1]) continue;
                  const float* wrow = wp + (k0 * k[1] + k1) * k[2];
                  float* yrow = yp + (o0 * out[1] + o1) * out[2];
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t o2 = i2 * s[2] - pb[2] + k2 * d[2];
                    if (o2 < 0 || o2 >= out[2]) continue;
                    yrow[o2] += v * wrow[k2];
                  }
                }
              }
            }
      }
    }
  });
}

}  // namespace kiln::kernels::nn
