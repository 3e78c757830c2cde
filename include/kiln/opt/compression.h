// What `--allow_compression` may change in a graph: the contract between the runtime, which
// decides it (calibration, the accuracy guard: src/runtime/compression.cc), and the
// compression passes, which read it (src/opt/compress_*.cc). Passes see it through
// PassOptions::compression; null there means no compression pass changes anything.
//
// Flow at load (ModelOptions::allow_compression): the fp32 graph is optimized as always; the
// runtime runs it on the calibration inputs to fill `activation_ranges` (keyed by the value
// names of that optimized graph); it optimizes a copy again with these options; the accuracy
// guard compares that copy with fp32 and, when an output moves beyond the tolerance, adds the
// most sensitive nodes to `keep_fp32` and compresses again.
#pragma once

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace kiln::opt {

// The range of one value over the calibration inputs, after outlier clipping (percentile or
// entropy calibration decides min/max; the pass only turns them into a scale and zero point).
struct ActivationRange {
  float min = 0;
  float max = 0;
};

struct CompressionOptions {
  // MatMul/Gemm with a constant weight: weights int8 per output channel at load, activations
  // quantized per row at run time (no calibration needed).
  bool int8_dynamic_matmul = true;
  // Conv (and MatMul) whose input range is in `activation_ranges`: int8 end to end through
  // chains, quantize/dequantize only at their borders.
  bool int8_static = true;
  // Weights stored as bf16 (computed in bf16 with fp32 accumulation where the CPU has
  // avx512_bf16/AMX, widened in the kernel elsewhere). TF Serving's --mixed_precision=bfloat16.
  bool bf16 = false;
  // Remove output channels / neurons whose weights are all zero (exact: outputs unchanged).
  bool prune_zero_channels = true;
  // The CPU has VNNI (avx512_vnni or avx_vnni): u8s8 products cannot saturate. Without it the
  // int8 passes use 7-bit weights (as ONNX Runtime does) and the log says so.
  bool vnni = false;
  // 3x3 stride-1 convolutions run as Winograd in fp32 (KILN_CONV_WINOGRAD not off). Without
  // VNNI that beats int8's direct convolution (a quarter of the multiplies against int8's
  // twice the multiply rate): the static int8 pass leaves the convolutions of a graph where
  // they carry most of the work fp32 there, and says so.
  bool fp32_winograd = false;
  // Calibrated ranges by value name; empty without calibration data (then only dynamic
  // quantization and bf16 apply).
  absl::flat_hash_map<std::string, ActivationRange> activation_ranges;
  // Node names the accuracy guard keeps in fp32.
  absl::flat_hash_set<std::string> keep_fp32;
};

}  // namespace kiln::opt
