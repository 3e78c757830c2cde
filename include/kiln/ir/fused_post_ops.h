// kiln::FusedConv / FusedMatMul / FusedGemm post-ops: which of them oneDNN may run inside its
// primitive and which the kernel must run itself. Shared by the optimizer pass that writes the
// "post_ops" attribute (src/opt/fusion.cc) and the kernels that read it (src/kernels/cpu).
//
// An optimization must compute what the unfused graph computes, NaN, infinities, signed zeros
// and denormals included. oneDNN's eltwise post-ops do not: its Relu and Clip are max/min
// instructions that turn NaN into 0 (or the bound) and -0.0 into +0.0, and its transcendental
// approximations treat infinities and extremes their own way. So a post-op runs inside the
// primitive only when oneDNN computes it bit for bit like Kiln's unfused kernel; every other
// activation runs right after the primitive, on its output, in the same vector loops the
// unfused node runs (the kernel's "epilogue"). A residual "Add" is a oneDNN sum post-op, so it
// may only follow post-ops that run inside the primitive.
#pragma once

#include <cmath>
#include <string_view>

namespace kiln::kernels {

// True when oneDNN computes post-op `kind` (with its alpha) exactly as the unfused op does:
//   Add:       the sum post-op, one IEEE addition.
//   LeakyRelu: with a positive finite slope, oneDNN's x > 0 ? x : alpha * x and Kiln's
//              x < 0 ? alpha * x : x agree on every input (NaN * alpha is NaN, -0.0 * alpha
//              is -0.0). A zero slope takes oneDNN's max(x, 0) path instead.
inline bool PostOpRunsInsidePrimitive(std::string_view kind, float alpha) {
  if (kind == "Add") return true;
  if (kind == "LeakyRelu") return alpha > 0.0f && std::isfinite(alpha);
  return false;
}

}  // namespace kiln::kernels
