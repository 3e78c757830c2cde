#include "kiln/ir/conv_geometry.h"

#include <algorithm>

namespace kiln::ir {
namespace {

// Floor and ceiling of a / b for b > 0: C++ division truncates toward zero, which made a
// window one tap larger than the input count as one output (floor(-1/2) is -1, not 0).
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t CeilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

}  // namespace

std::optional<AutoPad> ParseAutoPad(absl::string_view value) {
  if (value == "NOTSET") return AutoPad::kNotSet;
  if (value == "SAME_UPPER") return AutoPad::kSameUpper;
  if (value == "SAME_LOWER") return AutoPad::kSameLower;
  if (value == "VALID") return AutoPad::kValid;
  return std::nullopt;
}

WindowAxis WindowOutputAxis(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                            int64_t pad_begin, int64_t pad_end, AutoPad auto_pad, bool ceil_mode) {
  const int64_t k_eff = (kernel - 1) * dilation + 1;
  WindowAxis axis;
  switch (auto_pad) {
    case AutoPad::kSameUpper:
    case AutoPad::kSameLower: {
      axis.out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>(0, (axis.out - 1) * stride + k_eff - in);
      axis.pad_begin = auto_pad == AutoPad::kSameUpper ? total / 2 : total - total / 2;
      axis.pad_end = total - axis.pad_begin;
      break;
    }
    case AutoPad::kValid:
      axis.out = FloorDiv(in - k_eff, stride) + 1;
      break;
    case AutoPad::kNotSet: {
      axis.pad_begin = pad_begin;
      axis.pad_end = pad_end;
      const int64_t span = in + pad_begin + pad_end - k_eff;
      axis.out = (ceil_mode ? CeilDiv(span, stride) : FloorDiv(span, stride)) + 1;
      if (ceil_mode && (axis.out - 1) * stride >= in + pad_begin) --axis.out;
      break;
    }
  }
  return axis;
}

}  // namespace kiln::ir
