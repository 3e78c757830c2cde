// How much of a graph's convolution work Winograd can take: the passes whose choice depends on
// it (layout.cc keeps Winograd's layout, compress_conv.cc leaves convolutions fp32) ask here.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/ir/graph.h"

namespace kiln::opt {

// Whether the graph's Winograd-shaped convolutions (3x3, stride 1, no dilation or groups,
// channels in blocks of `channel_block`, as ConvWinograd takes them) carry at least three
// quarters of its convolutions' multiply-adds; false where an output's spatial size is
// unknown. On true, *share is that fraction as a percentage ("82%"). Measured on the AVX-512
// EPYC (docs/performance/runtime.md): ResNet-18 (82%) runs 2-5% faster kept in nChw16c,
// without its 35 reorders; GoogLeNet (61%) 11% slower, its 1x1 and 5x5 convolutions losing
// more in nChw16c than the 3x3 ones gain.
bool WinogradCarriesMostWork(const ir::Graph& g, int64_t channel_block, std::string* share);

}  // namespace kiln::opt
