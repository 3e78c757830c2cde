// FarmHash Fingerprint64 (farmhashna::Hash64), TensorFlow's tensorflow::Fingerprint64.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::kernels::farmhash {

uint64_t Fingerprint64(const char* data, size_t size);

}  // namespace kiln::kernels::farmhash
