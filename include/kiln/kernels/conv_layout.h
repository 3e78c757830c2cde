// The activation layout the plan keeps between convolutions, chosen per CPU.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::kernels {

// The memory layout in which this CPU's fp32 2-D convolutions (oneDNN, at the effective ISA of
// kiln/core/cpu_isa.h) read and write activations fastest: NHWC on AVX-512, nChw8c on AVX2.
// The runtime hands it to the optimizer (opt::PassOptions::conv_activation_layout), which
// keeps chains of convolutions and pools in it. Decided once per process; the environment
// variable KILN_CONV_LAYOUT=nhwc|nChw8c|nChw16c|plain overrides it (to measure the others).
ir::MemoryLayout PreferredConvActivationLayout();

// The layout this CPU's Winograd convolutions read and write (oneDNN 2.6: nChw16c on
// AVX-512; none on AVX2), which the optimizer keeps instead where Winograd's 3x3 convolutions
// carry most of a graph's work (opt::PassOptions::winograd_conv_layout). kPlain where oneDNN has
// no Winograd, KILN_CONV_WINOGRAD=0 turns it off, or KILN_CONV_LAYOUT forces a layout.
ir::MemoryLayout WinogradConvActivationLayout();

// Whether 3x3 stride-1 fp32 convolutions may run as Winograd (oneDNN's on AVX-512, Kiln's own
// where oneDNN has none): false only with KILN_CONV_WINOGRAD=0/off (or an invalid value).
bool ConvWinogradEnabled();

}  // namespace kiln::kernels
