// What the int8 kernels (src/kernels/cpu/nn_int8_conv.cc) can compute exactly on this CPU.
#pragma once

namespace kiln::kernels {

// True when oneDNN's int8 primitives, under Kiln's ISA cap (KILN_MAX_ISA), use VNNI
// (avx512_vnni or avx_vnni): u8 x s8 products accumulate straight into int32. Without it they
// are summed in pairs into 16 bits (vpmaddubsw) and saturate unless the weights have 7 bits;
// CompressionOptions::vnni should be set from this.
bool Int8HasVnni();

}  // namespace kiln::kernels
