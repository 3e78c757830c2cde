// kiln::FusedElementwise: a chain of elementwise ops run in one pass over memory. The
// optimizer replaces a connected group of fp32 elementwise nodes with one such node; the
// kernel loads each input vector once, runs the whole program in registers and stores only
// the outputs, so intermediate tensors never touch memory.
//
// Node (domain "kiln", op "FusedElementwise"):
//   inputs   x0..x{N-1}: float32 tensors whose shapes broadcast together (numpy rules).
//   outputs  one or more float32 tensors of the broadcast shape.
//   attribute "program" (strings, required): one instruction per string, in execution order:
//       "<Op> <dst> <src0> [<src1>] [key=value ...]"
//     registers: "x<i>" is input i; "t<k>" are temporaries (any k, each written before it is
//     read); "c:<number>" is an immediate constant (e.g. "c:0.5", "c:-inf").
//     unary ops: Identity Abs Neg Exp Log Sqrt Rsqrt Reciprocal Square Floor Ceil Round Sign
//       Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Erf Relu Sigmoid Tanh
//       Softplus Softsign HardSwish Mish
//       LeakyRelu alpha=  Elu alpha=  Celu alpha=  Selu alpha= gamma=
//       HardSigmoid alpha= beta=  ThresholdedRelu alpha=  Gelu approximate=none|tanh
//       Clip min= max=  Shrink lambd= bias=        (attributes default as in ONNX)
//     binary ops: Add Sub Mul Div Max Min Pow PRelu SquaredDifference FloorDiv FloorMod
//       Mod (fmod=1 semantics: C fmod)
//   attribute "outputs" (strings, optional): the register each node output takes, in order;
//     default: the destination of the last instruction (one output).
//   At most 64 registers (inputs + constants + temporaries) per program.
// Example, y = gelu_tanh(x0 * x1 + 1) and z = x0 * x1:
//   program = {"Mul t0 x0 x1", "Add t1 t0 c:1", "Gelu t2 t1 approximate=tanh"}
//   outputs = {"t2", "t0"}
// FusedElementwiseBuilder below writes these attributes. This contract lives in ir/, below
// both the optimizer pass that writes the node (src/opt/fusion.cc) and the kernel that reads
// it (src/kernels/cpu/math_fused.cc), so neither depends on the other.
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {

inline constexpr char kFusedElementwiseDomain[] = "kiln";
inline constexpr char kFusedElementwiseOp[] = "FusedElementwise";
inline constexpr char kFusedElementwiseProgramAttr[] = "program";
inline constexpr char kFusedElementwiseOutputsAttr[] = "outputs";
// Inputs + distinct constants + temporaries of one program (the kernel keeps them all in
// vector registers or on its stack; the optimizer splits longer chains).
inline constexpr int kFusedElementwiseMaxRegisters = 64;

class FusedElementwiseBuilder {
 public:
  // Register of node input i.
  static std::string Input(int i) { return absl::StrCat("x", i); }
  // Register of an immediate constant.
  static std::string Constant(float value) {
    std::ostringstream s;
    s.precision(9);
    s << value;
    return absl::StrCat("c:", s.str());
  }
  // Appends `op` (unary) and returns its destination register. `attrs` are "key=value".
  std::string Unary(const std::string& op, const std::string& src,
                    const std::vector<std::string>& attrs = {}) {
    return Emit(op, {src}, attrs);
  }
  std::string Binary(const std::string& op, const std::string& a, const std::string& b) {
    return Emit(op, {a, b}, {});
  }
  void AddOutput(const std::string& reg) { outputs_.push_back(reg); }

  std::map<std::string, Attribute> Attributes() const {
    std::map<std::string, Attribute> attrs;
    attrs[kFusedElementwiseProgramAttr] = program_;
    if (!outputs_.empty()) attrs[kFusedElementwiseOutputsAttr] = outputs_;
    return attrs;
  }
  const std::vector<std::string>& program() const { return program_; }

 private:
  std::string Emit(const std::string& op, const std::vector<std::string>& srcs,
                   const std::vector<std::string>& attrs) {
    const std::string dst = absl::StrCat("t", next_temp_++);
    std::string line = absl::StrCat(op, " ", dst);
    for (const std::string& s : srcs) absl::StrAppend(&line, " ", s);
    for (const std::string& a : attrs) absl::StrAppend(&line, " ", a);
    program_.push_back(line);
    return dst;
  }

  int next_temp_ = 0;
  std::vector<std::string> program_;
  std::vector<std::string> outputs_;
};

}  // namespace kiln::ir
