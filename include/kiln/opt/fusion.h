// Graph rewrites that turn exported operator soup into the larger kernels Kiln runs fast.
// Each pass rewrites the graph in place and returns a one-line summary of what it changed
// (empty when it changed nothing), for the OptimizationLog. Passes need value types
// (ir::InferShapes) to know dtypes and shapes; where a type is unknown they leave the node
// alone rather than guess.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/ir/graph.h"

namespace kiln::opt {

// Nodes with the same operator, attributes and inputs are computed once.
absl::StatusOr<std::string> EliminateCommonSubexpressions(ir::Graph& graph);

// Conv/FusedConv (constant weights) followed by an inference BatchNormalization with constant
// statistics: the BatchNorm is folded into the convolution's weights and bias.
absl::StatusOr<std::string> FoldBatchNormIntoConv(ir::Graph& graph);

// Removes Identity and inference Dropout nodes, and Transpose/Reshape chains that cancel or
// compose (Transpose(Transpose(x)) -> one or none; Reshape(Reshape(x)) -> one).
absl::StatusOr<std::string> EliminateIdentityTransposeReshape(ir::Graph& graph);

// PyTorch's decomposed GELU (x * 0.5 * (1 + erf(x / sqrt(2)))) -> Gelu.
absl::StatusOr<std::string> FuseGelu(ir::Graph& graph);

// Decomposed layer normalization over the last axis (ReduceMean, Sub, Pow, ReduceMean, Add,
// Sqrt, Div, Mul, Add) -> LayerNormalization.
absl::StatusOr<std::string> FuseLayerNorm(ir::Graph& graph);

// Conv / MatMul / Gemm followed by a bias Add, a residual Add and activations -> kiln
// FusedConv / FusedMatMul / FusedGemm running them as oneDNN post-ops.
absl::StatusOr<std::string> FuseConvMatMulPostOps(ir::Graph& graph);

// Connected chains of float elementwise ops whose intermediates have no other reader ->
// one kiln FusedElementwise node (one pass over memory).
absl::StatusOr<std::string> FuseElementwiseChains(ir::Graph& graph);

}  // namespace kiln::opt
