// Calibration for static int8 quantization: runs the fp32-optimized graph on calibration
// examples and measures the range of the values the int8 passes quantize (the inputs and
// outputs of Conv / FusedConv, the pools, Relu / Clip / Add, MatMul / Gemm and their fused
// forms), keyed by value name as opt::CompressionOptions::activation_ranges wants them.
//
// Ranges clip outliers: a single extreme activation would otherwise spread the 256 int8 steps
// so thin that the bulk of the values lands in a handful of them. Two methods, as TensorRT and
// ONNX Runtime calibrate:
//  - kPercentile: the threshold below which `percentile` % of |x| lie (99.99 by default).
//  - kEntropy: the threshold whose 128-level quantized histogram of |x| is closest to the
//    full histogram in KL divergence (TensorRT's entropy calibration).
//  - kMinMax: no clipping (the exact observed min and max).
// A value that is never negative keeps min = 0, so the pass can give it an unsigned type.
//
// Histograms of |x| are collected in one pass over the examples: each value's histogram
// covers [0, R) in `num_bins` bins and doubles R (merging bin pairs) when a larger magnitude
// arrives, so no second run is needed to find the range first.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/core/tensor.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/graph.h"
#include "kiln/opt/compression.h"

namespace kiln::runtime {

struct CalibrationOptions {
  enum class Method { kPercentile, kEntropy, kMinMax };
  Method method = Method::kPercentile;
  double percentile = 99.99;  // kPercentile only; in (0, 100]
  int num_bins = 2048;        // histogram resolution (>= 256)
  // Examples concatenated along dimension 0 per run (when their other dimensions agree).
  int batch_size = 8;
  int intra_op_threads = 1;
  // The model's plan options (threads, backends), so that the graph's own outputs of these
  // runs are what the model's plans compute; unset: `intra_op_threads` and the defaults.
  std::optional<exec::CompileOptions> compile;
};

// Runs `graph` (fp32, already optimized; not modified) on each example (input tensors by graph
// input name; every graph input must be present, with the same non-batch dimensions across
// examples) and returns the calibrated range of every float value the int8 passes read or
// write. InvalidArgument for a missing or mistyped input; errors of the run are passed on.
//
// `graph_outputs`, when given, receives the graph's own outputs for each example (in graph
// output order; rows of a joined run are sliced back per example), so that a caller that also
// needs the fp32 outputs on the same examples (the accuracy guard's reference) does not run the
// network a second time. It is left empty when a joined run has an output whose first
// dimension does not count the examples' rows (nothing to slice by).
absl::StatusOr<absl::flat_hash_map<std::string, opt::ActivationRange>> CollectActivationRanges(
    const ir::Graph& graph, absl::Span<const std::map<std::string, Tensor>> examples,
    const CalibrationOptions& options = {},
    std::vector<std::vector<Tensor>>* graph_outputs = nullptr);

}  // namespace kiln::runtime
