// Nodes that read and write a value kept in a non-plain memory layout (ir::Value::layout)
// without knowing that layout: the contract shared by the layout pass (opt/layout.cc), which
// keeps a layout through such nodes, and ir::Verify, which checks that it did so consistently.
//
// A layout is a permutation of a tensor's elements, the same one for every rank-4 value of a
// shape (blocked layouts need whole channel blocks, so no padding). Hence:
//  - an elementwise node whose non-scalar inputs and outputs all have one shape computes
//    element i of its outputs from element i of its inputs, in any order: given inputs in one
//    layout it writes its outputs in that layout, with the same values (NaN and Inf included)
//    as on NCHW bytes. A scalar (one element) input broadcasts the same in every layout, and
//    so does a broadcast over the batch (see LayoutTransparentInputs); any other broadcast (a
//    [C,1,1] bias) would pair the wrong elements, so such a node is not transparent.
//  - Concat along channels (axis 1 of a rank-4 tensor): in nChw8c / nChw16c each image's
//    bytes are its channel blocks one after another, so the concatenation's bytes are the
//    inputs' bytes per image one after another, exactly as for NCHW; in NHWC the channels are
//    concatenated per pixel, which the Concat kernel does when its first input is NHWC.
// For either kind every layout-carrying input and every output must share one layout; the
// pass decides them together and Verify checks it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kiln/ir/fused_elementwise.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {

// Standard-domain ops whose kernels are pure elementwise maps (unary, or n-ary with numpy
// broadcasting): element i of the output depends only on element i of each input.
inline bool IsElementwiseOp(const Node& node) {
  if (node.domain == kFusedElementwiseDomain) return node.op == kFusedElementwiseOp;
  if (!node.domain.empty()) return false;
  static const char* const kOps[] = {// unary (Clip's min and max are scalar inputs)
                                     "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid",
                                     "HardSwish", "Elu", "Selu", "Celu", "Softplus", "Softsign",
                                     "Abs", "Neg", "Exp", "Sqrt", "Erf", "Identity",
                                     // n-ary with broadcasting
                                     "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"};
  for (const char* op : kOps) {
    if (node.op == op) return true;
  }
  return false;
}

// Concat of rank-4 values along channels.
inline bool IsChannelConcat(const Graph& graph, const Node& node) {
  if (!node.domain.empty() || node.op != "Concat" || node.outputs.size() != 1) return false;
  const ValueId y = node.outputs[0];
  if (y < 0 || y >= graph.num_values()) return false;
  const TensorType& type = graph.value(y).type;
  if (!type.rank_known || type.rank() != 4) return false;
  const int64_t axis = node.GetInt("axis", 0);
  return axis == 1 || axis == -3;
}

namespace layout_internal {
// Rank 4 with channels, height and width known (the batch may be unknown).
inline bool KnownImage(const TensorType& t) {
  if (!t.rank_known || t.rank() != 4) return false;
  for (int d = 1; d < 4; ++d) {
    if (!t.dims[d].is_known()) return false;
  }
  return true;
}
inline bool SameImage(const TensorType& a, const TensorType& b) {
  if (!KnownImage(a) || !KnownImage(b)) return false;
  for (int d = 1; d < 4; ++d) {
    if (a.dims[d].value != b.dims[d].value) return false;
  }
  return true;
}
inline bool IsScalar(const TensorType& t) {
  if (!t.rank_known) return false;
  for (int d = 0; d < t.rank(); ++d) {
    if (!t.dims[d].is_known() || t.dims[d].value != 1) return false;
  }
  return true;
}
}  // namespace layout_internal

// If `node` can carry a layout through, the indices of its inputs that carry it (the others
// are scalars, or Clip's absent bounds) and true; false if it cannot. Its outputs carry it.
// Every output and carrying input is rank 4 with the first output's channels, height and
// width, all known (for Concat: its height and width). The batch may differ or be unknown: it
// is the outermost dimension of every layout, each image a contiguous permuted block, so a
// batch-1 input broadcast over the batch pairs the same elements in any layout.
inline bool LayoutTransparentInputs(const Graph& graph, const Node& node,
                                    std::vector<size_t>* carrying) {
  carrying->clear();
  const bool concat = IsChannelConcat(graph, node);
  if (!concat && !IsElementwiseOp(node)) return false;
  // Ids are range-checked so that this is safe on any graph, verified or not.
  for (ValueId y : node.outputs) {
    if (y < kNoValue || y >= graph.num_values()) return false;
  }
  if (node.outputs.empty() || node.outputs[0] == kNoValue) return false;
  const TensorType& out = graph.value(node.outputs[0]).type;
  if (!layout_internal::KnownImage(out)) return false;
  for (ValueId y : node.outputs) {
    if (y != kNoValue && !layout_internal::SameImage(graph.value(y).type, out)) return false;
  }
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const ValueId v = node.inputs[i];
    if (v == kNoValue) continue;
    if (v < 0 || v >= graph.num_values()) return false;
    const TensorType& in = graph.value(v).type;
    if (concat) {
      if (!layout_internal::KnownImage(in) || in.dims[2].value != out.dims[2].value ||
          in.dims[3].value != out.dims[3].value) {
        return false;
      }
      carrying->push_back(i);
    } else if (layout_internal::SameImage(in, out)) {
      carrying->push_back(i);
    } else if (!layout_internal::IsScalar(in)) {
      return false;
    }
  }
  return !carrying->empty();
}

}  // namespace kiln::ir
