// Lossy structured pruning of an ONNX model for `kiln compress --prune_channels`: in each
// prunable Conv, the FRACTION of output channels whose filters have the smallest L1 norm
// (Li et al., "Pruning Filters for Efficient ConvNets", 2017) are removed, together with the
// matching input channels of the nodes that read them, directly in the ModelProto's
// initializers, so that the result is a smaller ONNX model any runtime loads.
//
// Which convolutions are prunable: a channel can only go where every reader of the conv's
// output can lose it too. The walk follows per-channel nodes (activations, BatchNormalization,
// Add/Sub/Mul/Div/PRelu with a constant, pools, depthwise Conv with multiplier 1) and must end
// in Conv nodes with group 1, or, after a global pool and Flatten, in a Gemm/MatMul classifier
// head. A conv whose channels reach a residual Add, a Concat, a Reshape, any other MatMul/Gemm
// or a graph output is left whole: pruning it would need the other branch pruned the same
// way, which this tool does not attempt. Grouped convolutions other than depthwise
// are neither pruned nor followed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx.pb.h"

namespace kiln::tool {

struct ConvPruning {
  std::string node;      // the Conv's name (or its output's when unnamed)
  int64_t channels = 0;  // output channels before
  int64_t removed = 0;   // 0 when skipped
  std::string skipped;   // why the conv was left whole; empty when pruned
};

// Prunes `model` in place; `fraction` in [0, 1). Each pruned layer keeps at least one channel
// and loses floor(fraction * channels). Errors: a malformed model (a Conv weight that is not a
// float initializer with the shape its readers need), external data.
absl::StatusOr<std::vector<ConvPruning>> PruneLowestL1Filters(onnx::ModelProto& model,
                                                              double fraction);

}  // namespace kiln::tool
