// ONNX's output-size and padding rule for one spatial axis of a sliding window: Conv (and the
// optimizer's FusedConv), QLinearConv / ConvInteger and the pools. Shape inference and the
// kernels compute the same sizes through this one function.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace kiln::ir {

// The auto_pad attribute.
enum class AutoPad : uint8_t { kNotSet, kSameUpper, kSameLower, kValid };

// "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"; nullopt for anything else (an error the
// caller names).
std::optional<AutoPad> ParseAutoPad(absl::string_view value);

struct WindowAxis {
  int64_t out = 0;  // may be 0 or negative when the window does not fit: the caller decides
  int64_t pad_begin = 0;
  int64_t pad_end = 0;
};

// One axis of input size `in` under a window of `kernel` taps, `stride` (>= 1) and `dilation`:
// explicit pads (`pad_begin`, `pad_end`) for kNotSet, none for kValid, and for kSame* the
// padding that makes out = ceil(in / stride), its odd element at the end (SAME_UPPER) or the
// beginning (SAME_LOWER). `ceil_mode` (pools, kNotSet only) rounds the window count up, as
// long as the last window starts inside the input or its begin padding.
WindowAxis WindowOutputAxis(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                            int64_t pad_begin, int64_t pad_end, AutoPad auto_pad,
                            bool ceil_mode = false);

}  // namespace kiln::ir
