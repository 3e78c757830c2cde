// kiln::FusedElementwise (attribute format in include/kiln/ir/fused_elementwise.h): the
// program is parsed once when the kernel is created; Compute walks the broadcast runs and
// hands each run to the vector interpreter in simd/loops.inc.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/math_common.h"
#include "kiln/ir/fused_elementwise.h"

namespace kiln::kernels::math {
namespace {

using simd::BinaryOp;
using simd::UnaryOp;

// The optimizer sizes fused chains by the contract's limit; the kernel's register file must match.
static_assert(simd::kMaxFusedRegisters == ir::kFusedElementwiseMaxRegisters);

const std::map<std::string, UnaryOp>& UnaryOps() {
  static const auto* ops = new std::map<std::string, UnaryOp>{
      {"Identity", UnaryOp::kIdentity}, {"Abs", UnaryOp::kAbs}, {"Neg", UnaryOp::kNeg},
      {"Exp", UnaryOp::kExp}, {"Log", UnaryOp::kLog}, {"Sqrt", UnaryOp::kSqrt},
      {"Rsqrt", UnaryOp::kRsqrt}, {"Reciprocal", UnaryOp::kReciprocal},
      {"Square", UnaryOp::kSquare}, {"Floor", UnaryOp::kFloor}, {"Ceil", UnaryOp::kCeil},
      {"Round", UnaryOp::kRound}, {"Sign", UnaryOp::kSign}, {"Sin", UnaryOp::kSin},
      {"Cos", UnaryOp::kCos}, {"Tan", UnaryOp::kTan}, {"Asin", UnaryOp::kAsin},
      {"Acos", UnaryOp::kAcos}, {"Atan", UnaryOp::kAtan}, {"Sinh", UnaryOp::kSinh},
      {"Cosh", UnaryOp::kCosh}, {"Asinh", UnaryOp::kAsinh}, {"Acosh", UnaryOp::kAcosh},
      {"Atanh", UnaryOp::kAtanh}, {"Erf", UnaryOp::kErf}, {"Relu", UnaryOp::kRelu},
      {"LeakyRelu", UnaryOp::kLeakyRelu}, {"Elu", UnaryOp::kElu}, {"Selu", UnaryOp::kSelu},
      {"Celu", UnaryOp::kCelu}, {"Sigmoid", UnaryOp::kSigmoid},
      {"HardSigmoid", UnaryOp::kHardSigmoid}, {"HardSwish", UnaryOp::kHardSwish},
      {"Tanh", UnaryOp::kTanh}, {"Softplus", UnaryOp::kSoftplus},
      {"Softsign", UnaryOp::kSoftsign}, {"ThresholdedRelu", UnaryOp::kThresholdedRelu},
      {"Gelu", UnaryOp::kGelu}, {"Mish", UnaryOp::kMish}, {"Clip", UnaryOp::kClip},
      {"Shrink", UnaryOp::kShrink}};
  return *ops;
}

const std::map<std::string, BinaryOp>& BinaryOps() {
  static const auto* ops = new std::map<std::string, BinaryOp>{
      {"Add", BinaryOp::kAdd}, {"Sub", BinaryOp::kSub}, {"Mul", BinaryOp::kMul},
      {"Div", BinaryOp::kDiv}, {"Max", BinaryOp::kMax}, {"Min", BinaryOp::kMin},
      {"Pow", BinaryOp::kPow}, {"PRelu", BinaryOp::kPRelu},
      {"SquaredDifference", BinaryOp::kSquaredDifference}, {"FloorDiv", BinaryOp::kFloorDiv},
      {"FloorMod", BinaryOp::kFloorMod}, {"Mod", BinaryOp::kFmod}};
  return *ops;
}

bool ParseFloatToken(absl::string_view s, float* out) {
  std::string l = absl::AsciiStrToLower(s);
  if (l == "inf" || l == "+inf") {
    *out = std::numeric_limits<float>::infinity();
    return true;
  }
  if (l == "-inf") {
    *out = -std::numeric_limits<float>::infinity();
    return true;
  }
  if (l == "nan") {
    *out = std::numeric_limits<float>::quiet_NaN();
    return true;
  }
  return absl::SimpleAtof(s, out);
}

// Default parameters as ONNX defines them, then key=value overrides.
absl::Status ParseParams(UnaryOp* op, const std::vector<std::string>& kv,
                         simd::UnaryParams* p) {
  switch (*op) {
    case UnaryOp::kLeakyRelu: p->alpha = 0.01f; break;
    case UnaryOp::kElu: case UnaryOp::kCelu: case UnaryOp::kThresholdedRelu: p->alpha = 1.f; break;
    case UnaryOp::kSelu:
      p->alpha = 1.67326319217681884765625f;
      p->gamma = 1.05070102214813232421875f;
      break;
    case UnaryOp::kHardSigmoid: p->alpha = 0.2f; p->beta = 0.5f; break;
    case UnaryOp::kClip:
      p->alpha = -std::numeric_limits<float>::infinity();
      p->beta = std::numeric_limits<float>::infinity();
      break;
    case UnaryOp::kShrink: p->alpha = 0.5f; p->beta = 0.f; break;
    default: break;
  }
  for (const std::string& item : kv) {
    std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (parts.size() != 2) return absl::InvalidArgumentError(absl::StrCat("bad parameter '", item, "'"));
    const std::string& key = parts[0];
    if (*op == UnaryOp::kGelu && key == "approximate") {
      if (parts[1] == "tanh") {
        *op = UnaryOp::kGeluTanh;
      } else if (parts[1] != "none") {
        return absl::InvalidArgumentError(absl::StrCat("approximate='", parts[1], "'"));
      }
      continue;
    }
    float v;
    if (!ParseFloatToken(parts[1], &v)) {
      return absl::InvalidArgumentError(absl::StrCat("bad number in '", item, "'"));
    }
    if (key == "alpha" || key == "min" || key == "lambd") {
      p->alpha = v;
    } else if (key == "beta" || key == "max" || key == "bias") {
      p->beta = v;
    } else if (key == "gamma") {
      p->gamma = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown parameter '", key, "'"));
    }
  }
  return absl::OkStatus();
}

class FusedElementwiseKernel : public MathKernel {
 public:
  explicit FusedElementwiseKernel(const ir::Node& node) : MathKernel(node) {
    num_inputs_ = static_cast<int>(node.inputs.size());
    absl::Status st = Parse(node.GetStrings(ir::kFusedElementwiseProgramAttr),
                            node.GetStrings(ir::kFusedElementwiseOutputsAttr));
    if (!st.ok()) SetAttrError(Error(st.message()));
    if (!node.outputs.empty() && static_cast<size_t>(node.outputs.size()) != program_.output_registers.size() && st.ok()) {
      SetAttrError(Error("the node has ", node.outputs.size(), " outputs but the program names ",
                         program_.output_registers.size()));
    }
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (static_cast<int>(ctx.inputs.size()) != num_inputs_) {
      return Error("expects ", num_inputs_, " inputs, got ", ctx.inputs.size());
    }
    std::vector<Shape> shapes;
    for (int i = 0; i < num_inputs_; ++i) {
      if (!ctx.inputs[i].present()) return Error("input ", i, " is missing");
      if (ctx.inputs[i].dtype != DType::kFloat32) {
        return Error("input ", i, " has dtype ", DTypeName(ctx.inputs[i].dtype),
                     "; FusedElementwise runs float only");
      }
      shapes.push_back(ctx.inputs[i].shape);
    }
    Shape out_shape;
    if (!shapes.empty()) {
      KILN_ASSIGN_OR_RETURN(out_shape, BroadcastShapes(shapes, where()));
    }
    const int num_out = static_cast<int>(program_.output_registers.size());
    ctx.SetNumOutputs(num_out);
    for (int o = 0; o < num_out; ++o) {
      ctx.output_dtypes[o] = DType::kFloat32;
      ctx.output_shapes[o] = out_shape;
    }
    // Each vector step loads every input before storing any output, so output 0 may share
    // memory with a full-shape input.
    for (int i = 0; i < num_inputs_; ++i) {
      if (shapes[i] == out_shape) {
        ctx.output_in_place_of[0] = i;
        break;
      }
    }
    iterator_ = BroadcastIterator(out_shape, shapes);
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const BroadcastIterator& it = iterator_;
    const int num_out = static_cast<int>(program_.output_registers.size());
    absl::InlinedVector<int64_t, 8> strides(num_inputs_);
    for (int i = 0; i < num_inputs_; ++i) strides[i] = it.inner_stride(i);
    int64_t weight = 1 + static_cast<int64_t>(program_.code.size());
    ctx.ParallelFor(it.num_elements(), std::max<int64_t>(256, 4 * kParallelGrain / weight),
                    [&](int64_t begin, int64_t end) {
      absl::InlinedVector<const float*, 8> ins(num_inputs_);
      absl::InlinedVector<float*, 4> outs(num_out);
      it.ForEachRun(begin, end, [&](int64_t o, const int64_t* off, int64_t n) {
        for (int i = 0; i < num_inputs_; ++i) ins[i] = ctx.inputs[i].data<float>() + off[i];
        for (int k = 0; k < num_out; ++k) outs[k] = ctx.outputs[k].data<float>() + o;
        simd::Best().fused(program_, ins.data(), strides.data(), outs.data(), n);
      });
    });
    return absl::OkStatus();
  }

 private:
  absl::Status Parse(const std::vector<std::string>& program,
                     const std::vector<std::string>& outputs) {
    if (program.empty()) return absl::InvalidArgumentError("attribute 'program' is empty or missing");
    program_.num_inputs = num_inputs_;
    std::map<std::string, int> temps;
    std::map<std::string, int> constants;
    std::vector<std::pair<std::string, int>> temp_fixups;  // resolved after constants are known
    // Registers: inputs, then constants, then temporaries. Constants are only known after
    // the whole program is read, so temporaries get provisional ids and are shifted.
    std::vector<simd::FusedInstr> code;
    std::vector<std::vector<int>> operand_kinds;  // 0 input, 1 const, 2 temp
    auto resolve_src = [&](const std::string& tok, int* id, int* kind) -> absl::Status {
      if (tok.size() > 1 && tok[0] == 'x') {
        int i;
        if (!absl::SimpleAtoi(tok.substr(1), &i) || i < 0 || i >= num_inputs_) {
          return absl::InvalidArgumentError(absl::StrCat("register '", tok, "' is not an input (the node has ", num_inputs_, ")"));
        }
        *id = i;
        *kind = 0;
        return absl::OkStatus();
      }
      if (tok.rfind("c:", 0) == 0) {
        float v;
        if (!ParseFloatToken(tok.substr(2), &v)) {
          return absl::InvalidArgumentError(absl::StrCat("bad constant '", tok, "'"));
        }
        auto [pos, inserted] = constants.emplace(tok, static_cast<int>(program_.constants.size()));
        if (inserted) program_.constants.push_back(v);
        *id = pos->second;
        *kind = 1;
        return absl::OkStatus();
      }
      auto t = temps.find(tok);
      if (t == temps.end()) {
        return absl::InvalidArgumentError(absl::StrCat("register '", tok, "' is read before it is written"));
      }
      *id = t->second;
      *kind = 2;
      return absl::OkStatus();
    };
    for (const std::string& line : program) {
      std::vector<std::string> toks = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (toks.size() < 3) {
        return absl::InvalidArgumentError(absl::StrCat("instruction '", line, "' needs an op, a destination and a source"));
      }
      simd::FusedInstr ins;
      std::vector<int> kinds(3, 2);
      const std::string& op = toks[0];
      std::vector<std::string> srcs, kv;
      for (size_t i = 2; i < toks.size(); ++i) {
        (toks[i].find('=') != std::string::npos ? kv : srcs).push_back(toks[i]);
      }
      if (auto u = UnaryOps().find(op); u != UnaryOps().end()) {
        if (srcs.size() != 1) return absl::InvalidArgumentError(absl::StrCat("'", line, "': ", op, " takes one source"));
        ins.unary = u->second;
        absl::Status st = ParseParams(&ins.unary, kv, &ins.params);
        if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("'", line, "': ", st.message()));
      } else if (auto b = BinaryOps().find(op); b != BinaryOps().end()) {
        if (srcs.size() != 2 || !kv.empty()) return absl::InvalidArgumentError(absl::StrCat("'", line, "': ", op, " takes two sources"));
        ins.is_binary = true;
        ins.binary = b->second;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("'", line, "': unknown op '", op, "'"));
      }
      KILN_RETURN_IF_ERROR(resolve_src(srcs[0], &ins.src0, &kinds[0]));
      if (ins.is_binary) KILN_RETURN_IF_ERROR(resolve_src(srcs[1], &ins.src1, &kinds[1]));
      const std::string& dst = toks[1];
      if (dst.empty() || dst[0] != 't') {
        return absl::InvalidArgumentError(absl::StrCat("'", line, "': destination '", dst, "' must be a temporary t<k>"));
      }
      auto [pos, inserted] = temps.emplace(dst, static_cast<int>(temps.size()));
      ins.dst = pos->second;
      code.push_back(ins);
      operand_kinds.push_back(kinds);
    }
    const int num_const = static_cast<int>(program_.constants.size());
    auto reg = [&](int id, int kind) {
      return kind == 0 ? id : kind == 1 ? num_inputs_ + id : num_inputs_ + num_const + id;
    };
    for (size_t k = 0; k < code.size(); ++k) {
      code[k].src0 = reg(code[k].src0, operand_kinds[k][0]);
      if (code[k].is_binary) code[k].src1 = reg(code[k].src1, operand_kinds[k][1]);
      code[k].dst = reg(code[k].dst, 2);
    }
    program_.code = std::move(code);
    program_.num_registers = num_inputs_ + num_const + static_cast<int>(temps.size());
    if (program_.num_registers > simd::kMaxFusedRegisters) {
      return absl::InvalidArgumentError(absl::StrCat("the program uses ", program_.num_registers, " registers; at most ", simd::kMaxFusedRegisters, " are supported"));
    }
    if (outputs.empty()) {
      program_.output_registers.push_back(program_.code.back().dst);
    } else {
      for (const std::string& o : outputs) {
        int id, kind;
        KILN_RETURN_IF_ERROR(resolve_src(o, &id, &kind));
        program_.output_registers.push_back(reg(id, kind));
      }
    }
    return absl::OkStatus();
  }

  int num_inputs_ = 0;
  simd::FusedProgram program_;
  BroadcastIterator iterator_;
};

KILN_REGISTER_KERNEL_CLASS(ir::kFusedElementwiseDomain, ir::kFusedElementwiseOp,
                           FusedElementwiseKernel);

}  // namespace

KILN_KERNEL_FILE(math_fused);

}  // namespace kiln::kernels::math
