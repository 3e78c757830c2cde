// Structure-aware libFuzzer target for the runtime: the input bytes choose a small ONNX-form IR
// graph (1-4 nodes of supported operators, attributes inside the ONNX spec, shapes with 0 and 1
// dimensions, constants holding NaN and Inf, shape arguments that are sometimes astronomically
// large), which then runs twice through runtime::Model: as imported (disable_optimizer) and
// optimized (folding, fusion). Findings are crashes in either, outputs that differ beyond float
// reassociation, and one run failing where the other succeeds (except RESOURCE_EXHAUSTED).
//
// Random bytes from the fuzzer would almost never form a graph that passes the verifier, so
// the bytes drive choices (which op, which operand, which attribute value) instead; tensor
// contents come from a seeded generator so that short inputs still give full tensors.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/import/imported_model.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/model.h"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kiln::ir::Attribute;
using kiln::ir::Graph;
using kiln::ir::TensorType;
using kiln::ir::ValueId;

// Tensors this fuzzer computes on stay small so one input runs in milliseconds.
constexpr int64_t kMaxElements = 4096;
constexpr int kMaxNodes = 4;

// ONNX TensorProto.DataType codes (the Cast 'to' attribute).
constexpr int64_t kOnnxFloat = 1;
constexpr int64_t kOnnxInt32 = 6;
constexpr int64_t kOnnxInt64 = 7;
constexpr int64_t kOnnxBool = 9;
constexpr int64_t kOnnxFloat16 = 10;
constexpr int64_t kOnnxDouble = 11;

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

// Multidirectional (numpy) broadcasting of two shapes; nullopt when incompatible.
std::optional<std::vector<int64_t>> Broadcast(const std::vector<int64_t>& a,
                                              const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

class GraphBuilder {
 public:
  explicit GraphBuilder(FuzzedDataProvider& fdp)
      : fdp_(fdp), rng_(fdp.ConsumeIntegral<uint32_t>()) {
    // How often a generated element is NaN, +-Inf or -0: never, sometimes, or often.
    special_per_256_ = fdp_.PickValueInArray<int>({0, 8, 64});
  }

  Graph& graph() { return graph_; }
  const std::map<std::string, Tensor>& feeds() const { return feeds_; }
  const std::vector<std::string>& input_keys() const { return input_keys_; }
  // Outputs whose values may legitimately differ between two runs.
  bool Tainted(ValueId v) const { return tainted_.count(v) > 0; }

  // ReduceProd is left out on purpose: a product overflows (or underflows) in one
  // association order and not in another, so its two runs may differ by Inf or 0 legitimately.

  void AddInputs() {
    const int n = fdp_.ConsumeIntegralInRange(1, 2);
    for (int i = 0; i < n; ++i) {
      const DType dtype = fdp_.ConsumeIntegralInRange(0, 7) == 0 ? DType::kInt64 : DType::kFloat32;
      const std::vector<int64_t> dims = RandomShape(fdp_.ConsumeIntegralInRange(0, 4));
      const std::string name = absl::StrCat("in", i);
      const ValueId v = graph_.AddValue(name, TensorType::Of(dtype, dims));
      graph_.inputs.push_back(v);
      input_keys_.push_back(name);
      feeds_[name] = RandomTensor(dtype, dims);
      Remember(v);
    }
  }

  // Adds 1-4 nodes; returns how many were added.
  int AddNodes() {
    const int wanted = fdp_.ConsumeIntegralInRange(1, kMaxNodes);
    int added = 0;
    for (int attempt = 0; attempt < 3 * wanted && added < wanted && fdp_.remaining_bytes() > 0;
         ++attempt) {
      if (AddOneNode()) ++added;
    }
    return added;
  }

  // Every value that no node reads becomes a graph output, plus some intermediates (not all:
  // an intermediate that is also an output keeps the optimizer from fusing through it).
  void ChooseOutputs() {
    std::vector<bool> read(graph_.num_values(), false);
    for (const auto& node : graph_.nodes()) {
      for (ValueId v : node.inputs) {
        if (v != kiln::ir::kNoValue) read[v] = true;
      }
    }
    for (const auto& node : graph_.nodes()) {
      for (ValueId v : node.outputs) {
        if (!read[v] || fdp_.ConsumeIntegralInRange(0, 3) == 0) graph_.outputs.push_back(v);
      }
    }
  }

 private:
  // Values usable as operands, by dtype, with their shapes when known.
  struct Known {
    ValueId id;
    DType dtype;
    std::optional<std::vector<int64_t>> dims;
  };

  int64_t RandomDim() {
    // 0 and 1 are the dimensions kernels most often get wrong.
    return fdp_.PickValueInArray<int64_t>({1, 1, 2, 2, 3, 3, 4, 5, 0, 1, 2, 7, 8, 16});
  }

  std::vector<int64_t> RandomShape(int rank) {
    std::vector<int64_t> dims;
    for (int i = 0; i < rank; ++i) dims.push_back(RandomDim());
    while (NumElements(dims) > kMaxElements) {
      *std::max_element(dims.begin(), dims.end()) /= 2;
    }
    return dims;
  }

  // A dimension for shape arguments (ConstantOfShape, Expand, Tile, Range): small, or so large
  // that no machine's memory budget admits it (2^40 and more, products that overflow int64),
  // or negative; never "merely large" (2^32 floats fit a big machine's budget), which would be a
  // legitimate multi-GiB run that libFuzzer's malloc limit reports. Huge values are rare enough
  // that the first unchecked allocation does not take over every run.
  int64_t ShapeArgument() {
    switch (fdp_.ConsumeIntegralInRange(0, 23)) {
      case 0:
        return int64_t{1} << 40;
      case 1:
        return fdp_.PickValueInArray<int64_t>(
            {int64_t{1} << 50, int64_t{1} << 62, std::numeric_limits<int64_t>::max()});
      case 2:
        return -1;
      default:
        return fdp_.ConsumeIntegralInRange<int64_t>(0, 4);
    }
  }

  float RandomFloat() {
    const uint32_t r = rng_();
    if (static_cast<int>(r & 255) < special_per_256_) {
      switch ((r >> 8) & 3) {
        case 0:
          return std::numeric_limits<float>::quiet_NaN();
        case 1:
          return std::numeric_limits<float>::infinity();
        case 2:
          return -std::numeric_limits<float>::infinity();
        default:
          return -0.0f;
      }
    }
    // Multiples of 1/4 in [-4, 4]: sums and products of these are exact in float, so
    // reassociation by the optimizer changes nothing and any difference is a real one.
    return static_cast<float>(static_cast<int>((r >> 10) % 33) - 16) * 0.25f;
  }

  Tensor RandomTensor(DType dtype, const std::vector<int64_t>& dims) {
    Tensor t(dtype, Shape(dims));
    const int64_t n = t.num_elements();
    switch (dtype) {
      case DType::kFloat32:
        for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = RandomFloat();
        break;
      case DType::kInt64:
        for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng_() % 9) - 4;
        break;
      case DType::kBool:
        for (int64_t i = 0; i < n; ++i) t.data<bool>()[i] = (rng_() & 1) != 0;
        break;
      default:
        abort();  // a fuzzer bug: only the dtypes above are generated
    }
    return t;
  }

  ValueId Const(Tensor t) {
    const ValueId v = graph_.AddConstant(absl::StrCat("c", graph_.num_values()), std::move(t));
    return v;
  }
  ValueId Ints(const std::vector<int64_t>& values) {
    return Const(Tensor::FromVector<int64_t>(values));
  }
  ValueId IntScalar(int64_t value) { return Const(Tensor::Scalar<int64_t>(value)); }
  ValueId FloatScalar(float value) { return Const(Tensor::Scalar<float>(value)); }
  ValueId RandomConst(DType dtype, const std::vector<int64_t>& dims) {
    const ValueId v = Const(RandomTensor(dtype, dims));
    Remember(v);
    return v;
  }

  void Remember(ValueId v) {
    const auto& type = graph_.value(v).type;
    Known k{v, type.dtype, std::nullopt};
    if (type.fully_known()) {
      std::vector<int64_t> dims;
      for (const auto& d : type.dims) dims.push_back(d.value);
      // Outputs past the size cap (a huge ConstantOfShape that ran) are not built upon.
      if (NumElements(dims) < 0 || NumElements(dims) > kMaxElements) return;
      k.dims = std::move(dims);
    }
    if (k.dtype == DType::kInvalid) return;
    pool_.push_back(std::move(k));
  }

  // An operand of `dtype` (kInvalid: any dtype) with a known shape of rank >= min_rank; nullopt
  // when the pool holds none.
  std::optional<Known> Pick(DType dtype, int min_rank = 0, bool need_shape = true) {
    std::vector<const Known*> fits;
    for (const Known& k : pool_) {
      if (dtype != DType::kInvalid && k.dtype != dtype) continue;
      if (need_shape && !k.dims) continue;
      if (k.dims && static_cast<int>(k.dims->size()) < min_rank) continue;
      if (!k.dims && min_rank > 0) continue;
      fits.push_back(&k);
    }
    if (fits.empty()) return std::nullopt;
    return *fits[fdp_.ConsumeIntegralInRange<size_t>(0, fits.size() - 1)];
  }

  // A float operand of rank >= min_rank: from the pool, or a fresh constant.
  Known PickFloat(int min_rank = 0) {
    if (fdp_.ConsumeIntegralInRange(0, 4) != 0) {
      if (auto k = Pick(DType::kFloat32, min_rank)) return *k;
    }
    const std::vector<int64_t> dims = RandomShape(fdp_.ConsumeIntegralInRange(min_rank, 4));
    const ValueId v = RandomConst(DType::kFloat32, dims);
    return Known{v, DType::kFloat32, dims};
  }

  // A shape that broadcasts to `dims` (unidirectionally): a suffix with some dims set to 1.
  std::vector<int64_t> BroadcastableTo(const std::vector<int64_t>& dims) {
    const int rank = fdp_.ConsumeIntegralInRange<int>(0, static_cast<int>(dims.size()));
    std::vector<int64_t> out(dims.end() - rank, dims.end());
    for (int64_t& d : out) {
      if (fdp_.ConsumeBool()) d = 1;
    }
    return out;
  }

  // A second operand for a binary op on `a`: another pool value that broadcasts with it, or a
  // constant shaped to broadcast (sometimes the larger of the two).
  ValueId SecondOperand(const Known& a) {
    if (fdp_.ConsumeBool()) {
      for (const Known& k : pool_) {
        if (k.id != a.id && k.dtype == a.dtype && k.dims && a.dims && fdp_.ConsumeBool()) {
          // Two small tensors can broadcast to a huge one ([1, 4096] with [16, 16, 16, 1]):
          // keep results as small as inputs, or one execution takes seconds.
          const auto both = Broadcast(*k.dims, *a.dims);
          if (both && NumElements(*both) >= 0 && NumElements(*both) <= kMaxElements) return k.id;
        }
      }
    }
    std::vector<int64_t> dims = a.dims ? BroadcastableTo(*a.dims) : std::vector<int64_t>{};
    if (a.dims && fdp_.ConsumeIntegralInRange(0, 5) == 0) {
      // The constant is the bigger side: a leading dimension the other operand lacks.
      dims = *a.dims;
      dims.insert(dims.begin(), RandomDim());
      if (NumElements(dims) > kMaxElements) dims = *a.dims;
    }
    return RandomConst(a.dtype, dims);
  }

  // Adds a node with `num_outputs` outputs; remembers them with their inferred types.
  std::vector<ValueId> Emit(const std::string& op, std::vector<ValueId> inputs,
                            std::map<std::string, Attribute> attrs = {}, int num_outputs = 1,
                            bool tainted = false) {
    const auto id = graph_.AddNode(op, std::move(inputs), num_outputs, std::move(attrs),
                                   absl::StrCat(op, "_", graph_.num_nodes()));
    (void)kiln::ir::InferShapes(graph_);
    std::vector<ValueId> outs = graph_.node(id).outputs;
    bool inherits_taint = tainted, inexact_input = false;
    for (ValueId in : graph_.node(id).inputs) {
      if (in != kiln::ir::kNoValue && tainted_.count(in)) inherits_taint = true;
      if (in != kiln::ir::kNoValue && inexact_.count(in)) inexact_input = true;
    }
    // A rounding difference of one ulp (a fused kernel's own exp, a reciprocal instead of a
    // division) moves a value across Floor's or Greater's threshold: such outputs of values
    // that are not exact in both runs are not compared.
    if (inexact_input && kDiscontinuous.count(op)) inherits_taint = true;
    const bool inexact = kInexact.count(op) > 0 || (inexact_input && !kDiscontinuous.count(op));
    for (ValueId v : outs) {
      if (inherits_taint) tainted_.insert(v);
      if (inexact) inexact_.insert(v);
      Remember(v);
    }
    return outs;
  }

  int64_t Axis(int rank, bool allow_end = false) {
    const int hi = allow_end ? rank : rank - 1;
    if (hi < 0) return 0;
    const int64_t axis = fdp_.ConsumeIntegralInRange<int64_t>(0, hi);
    return fdp_.ConsumeBool() ? axis : axis - (allow_end ? rank + 1 : rank);
  }

  bool AddOneNode() {
    // The operators and how each picks operands and attributes within the ONNX spec.
    using Builder = bool (GraphBuilder::*)();
    static constexpr Builder kBuilders[] = {
        &GraphBuilder::Unary,
        &GraphBuilder::Unary,
        &GraphBuilder::Binary,
        &GraphBuilder::Binary,
        &GraphBuilder::MatMul,
        &GraphBuilder::Gemm,
        &GraphBuilder::Conv,
        &GraphBuilder::Pool,
        &GraphBuilder::GlobalPool,
        &GraphBuilder::BatchNorm,
        &GraphBuilder::Softmax,
        &GraphBuilder::Concat,
        &GraphBuilder::Reshape,
        &GraphBuilder::Transpose,
        &GraphBuilder::Flatten,
        &GraphBuilder::Squeeze,
        &GraphBuilder::Unsqueeze,
        &GraphBuilder::Reduce,
        &GraphBuilder::Gather,
        &GraphBuilder::Slice,
        &GraphBuilder::Pad,
        &GraphBuilder::Clip,
        &GraphBuilder::ConstantOfShape,
        &GraphBuilder::Range,
        &GraphBuilder::Tile,
        &GraphBuilder::Expand,
        &GraphBuilder::Cast,
        &GraphBuilder::Where,
        &GraphBuilder::Compare,
        &GraphBuilder::ShapeOp,
        &GraphBuilder::Dropout,
        &GraphBuilder::Variadic,
    };
    const Builder b = fdp_.PickValueInArray(kBuilders);
    return (this->*b)();
  }

  bool Unary() {
    static constexpr const char* kOps[] = {
        "Relu", "Sigmoid", "Tanh",       "Abs",         "Neg",      "Floor",     "Ceil",
        "Sqrt", "Erf",     "Elu",        "HardSigmoid", "Softplus", "LeakyRelu", "Identity",
        "Exp",  "Log",     "Reciprocal", "Sign",        "Round"};
    const std::string op = fdp_.PickValueInArray(kOps);
    // Elementwise: shape need not be known.
    std::optional<Known> x = Pick(DType::kFloat32, 0, /*need_shape=*/false);
    if (!x || fdp_.ConsumeIntegralInRange(0, 5) == 0) x = PickFloat();
    std::map<std::string, Attribute> attrs;
    if (op == "LeakyRelu" || op == "Elu") {
      attrs["alpha"] = fdp_.PickValueInArray<float>({0.01f, 0.1f, 0.5f, 1.0f, 0.0f, -0.5f});
    } else if (op == "HardSigmoid") {
      attrs["alpha"] = fdp_.PickValueInArray<float>({0.2f, 0.5f, 1.0f});
      attrs["beta"] = fdp_.PickValueInArray<float>({0.5f, 0.0f, 1.0f});
    }
    Emit(op, {x->id}, std::move(attrs));
    return true;
  }

  bool Binary() {
    static constexpr const char* kOps[] = {"Add", "Sub", "Mul", "Div",
                                           "Max", "Min", "Pow", "PRelu"};
    const std::string op = fdp_.PickValueInArray(kOps);
    Known a = PickFloat();
    // Integer operands sometimes (Shape outputs, int64 inputs): integer Div by zero included.
    if (op != "Pow" && op != "PRelu" && fdp_.ConsumeIntegralInRange(0, 5) == 0) {
      if (auto k = Pick(DType::kInt64)) a = *k;
    }
    ValueId b;
    if (op == "PRelu") {
      b = RandomConst(DType::kFloat32, BroadcastableTo(*a.dims));  // slope broadcasts to x
    } else {
      b = SecondOperand(a);
    }
    if (op != "PRelu" && fdp_.ConsumeBool()) {
      Emit(op, {b, a.id});
    } else {
      Emit(op, {a.id, b});
    }
    return true;
  }

  bool Variadic() {
    const std::string op = fdp_.PickValueInArray({"Sum", "Mean", "Max", "Min"});
    const Known a = PickFloat();
    std::vector<ValueId> ins = {a.id};
    const int n = fdp_.ConsumeIntegralInRange(0, 2);
    std::optional<std::vector<int64_t>> out = a.dims;
    for (int i = 0; i < n; ++i) {
      const ValueId b = SecondOperand(a);
      // Every operand broadcasts with `a`, but two of them may broadcast to a huge result.
      const kiln::ir::TensorType& type = graph_.value(b).type;
      if (!out || !type.fully_known()) break;
      const auto wider = Broadcast(*out, type.shape()->ToVector());
      if (!wider || NumElements(*wider) < 0 || NumElements(*wider) > kMaxElements) break;
      out = *wider;
      ins.push_back(b);
    }
    Emit(op, ins);
    return true;
  }

  bool MatMul() {
    const Known a = PickFloat(1);
    const std::vector<int64_t>& ad = *a.dims;
    const int64_t k = ad.back();
    // B: [K, N], or batched [.., K, N] broadcasting with A's batch dims, or rank 1 [K].
    std::vector<int64_t> bd;
    switch (fdp_.ConsumeIntegralInRange(0, 3)) {
      case 0:
        bd = {k};
        break;
      case 1:
        if (ad.size() >= 2) {
          bd = std::vector<int64_t>(ad.begin(), ad.end() - 2);
          for (int64_t& d : bd) {
            if (fdp_.ConsumeBool()) d = 1;
          }
          bd.push_back(k);
          bd.push_back(RandomDim());
          break;
        }
        [[fallthrough]];
      default:
        bd = {k, RandomDim()};
    }
    if (NumElements(bd) > kMaxElements) bd = {k, 1};
    const ValueId b = RandomConst(DType::kFloat32, bd);
    // Sometimes the constant is the left operand, as in x @ W^T written as W @ x.
    if (ad.size() >= 2 && bd.size() == 2 && fdp_.ConsumeIntegralInRange(0, 4) == 0) {
      const ValueId left = RandomConst(DType::kFloat32, {RandomDim(), ad[ad.size() - 2]});
      Emit("MatMul", {left, a.id});
      return true;
    }
    Emit("MatMul", {a.id, b});
    return true;
  }

  bool Gemm() {
    std::optional<Known> a = Pick(DType::kFloat32, 2);
    if (!a || a->dims->size() != 2) {
      const std::vector<int64_t> dims = RandomShape(2);
      a = Known{RandomConst(DType::kFloat32, dims), DType::kFloat32, dims};
    }
    const int64_t trans_a = fdp_.ConsumeBool(), trans_b = fdp_.ConsumeBool();
    const int64_t m = (*a->dims)[trans_a ? 1 : 0], k = (*a->dims)[trans_a ? 0 : 1];
    const int64_t n = RandomDim();
    const ValueId b = RandomConst(
        DType::kFloat32, trans_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n});
    std::vector<ValueId> ins = {a->id, b};
    if (fdp_.ConsumeBool()) ins.push_back(RandomConst(DType::kFloat32, BroadcastableTo({m, n})));
    std::map<std::string, Attribute> attrs = {{"transA", trans_a}, {"transB", trans_b}};
    if (fdp_.ConsumeBool())
      attrs["alpha"] = fdp_.PickValueInArray<float>({1.0f, 0.5f, -2.0f, 0.0f});
    if (fdp_.ConsumeBool()) attrs["beta"] = fdp_.PickValueInArray<float>({1.0f, 0.5f, 0.0f});
    Emit("Gemm", ins, std::move(attrs));
    return true;
  }

  // An N-D image operand [N, C, spatial...] with 1 or 2 spatial dims.
  std::optional<Known> Image() {
    std::optional<Known> x = Pick(DType::kFloat32, 3);
    if (x && x->dims->size() <= 4 && fdp_.ConsumeIntegralInRange(0, 3) != 0) return x;
    std::vector<int64_t> dims = {fdp_.PickValueInArray<int64_t>({1, 1, 2, 0}),
                                 fdp_.PickValueInArray<int64_t>({1, 2, 3, 4, 8})};
    const int spatial = fdp_.ConsumeIntegralInRange(1, 2);
    for (int i = 0; i < spatial; ++i) {
      dims.push_back(fdp_.PickValueInArray<int64_t>({1, 2, 3, 5, 7, 8, 0}));
    }
    while (NumElements(dims) > kMaxElements) dims.back() /= 2;
    return Known{RandomConst(DType::kFloat32, dims), DType::kFloat32, dims};
  }

  // Spatial attributes shared by Conv and the pools: kernel, strides, pads, dilations.
  void Window(int spatial, std::vector<int64_t>* kernel, std::map<std::string, Attribute>* attrs,
              bool dilations) {
    std::vector<int64_t> strides, pads(2 * spatial), dil;
    for (int i = 0; i < spatial; ++i) {
      kernel->push_back(fdp_.ConsumeIntegralInRange<int64_t>(1, 3));
      strides.push_back(fdp_.ConsumeIntegralInRange<int64_t>(1, 2));
      dil.push_back(dilations ? fdp_.ConsumeIntegralInRange<int64_t>(1, 2) : 1);
    }
    // ONNX pads are smaller than the kernel in practice; allow up to kernel-1 (and sometimes
    // more, which the spec does not forbid for Conv).
    for (int i = 0; i < 2 * spatial; ++i) {
      pads[i] = fdp_.ConsumeIntegralInRange<int64_t>(0, (*kernel)[i % spatial]);
    }
    const int pad_mode = fdp_.ConsumeIntegralInRange(0, 4);
    if (pad_mode == 0) {
      (*attrs)["auto_pad"] = std::string("SAME_UPPER");
    } else if (pad_mode == 1) {
      (*attrs)["auto_pad"] = std::string("VALID");
    } else if (pad_mode == 2) {
      (*attrs)["auto_pad"] = std::string("SAME_LOWER");
    } else {
      (*attrs)["pads"] = pads;
    }
    (*attrs)["strides"] = strides;
    if (dilations) (*attrs)["dilations"] = dil;
  }

  bool Conv() {
    const std::optional<Known> x = Image();
    const std::vector<int64_t>& xd = *x->dims;
    const int spatial = static_cast<int>(xd.size()) - 2;
    const int64_t c = xd[1];
    // group divides C and M.
    int64_t group = 1;
    if (c > 1 && fdp_.ConsumeBool()) group = fdp_.ConsumeBool() ? c : (c % 2 == 0 ? 2 : 1);
    const int64_t m = group * fdp_.ConsumeIntegralInRange<int64_t>(1, 3);
    std::vector<int64_t> kernel;
    std::map<std::string, Attribute> attrs;
    Window(spatial, &kernel, &attrs, /*dilations=*/true);
    attrs["group"] = group;
    if (fdp_.ConsumeBool()) attrs["kernel_shape"] = kernel;
    std::vector<int64_t> wd = {m, c / std::max<int64_t>(group, 1)};
    wd.insert(wd.end(), kernel.begin(), kernel.end());
    std::vector<ValueId> ins = {x->id, RandomConst(DType::kFloat32, wd)};
    if (fdp_.ConsumeBool()) ins.push_back(RandomConst(DType::kFloat32, {m}));
    Emit("Conv", ins, std::move(attrs));
    return true;
  }

  bool Pool() {
    const std::optional<Known> x = Image();
    const int spatial = static_cast<int>(x->dims->size()) - 2;
    const bool max = fdp_.ConsumeBool();
    std::vector<int64_t> kernel;
    std::map<std::string, Attribute> attrs;
    Window(spatial, &kernel, &attrs, /*dilations=*/max);
    // Pads must be smaller than the kernel for pools.
    if (auto it = attrs.find("pads"); it != attrs.end()) {
      auto& pads = std::get<std::vector<int64_t>>(it->second);
      for (size_t i = 0; i < pads.size(); ++i) pads[i] = std::min(pads[i], kernel[i % spatial] - 1);
    }
    attrs["kernel_shape"] = kernel;
    attrs["ceil_mode"] = int64_t{fdp_.ConsumeBool()};
    if (!max) attrs["count_include_pad"] = int64_t{fdp_.ConsumeBool()};
    Emit(max ? "MaxPool" : "AveragePool", {x->id}, std::move(attrs));
    return true;
  }

  bool GlobalPool() {
    const std::optional<Known> x = Image();
    Emit(fdp_.ConsumeBool() ? "GlobalAveragePool" : "GlobalMaxPool", {x->id});
    return true;
  }

  bool BatchNorm() {
    const Known x = PickFloat(2);
    const int64_t c = (*x.dims)[1];
    auto param = [&](bool positive) {
      Tensor t = RandomTensor(DType::kFloat32, {c});
      if (positive) {
        for (float& v : t.span<float>()) {
          if (std::isfinite(v)) v = std::fabs(v) + 0.25f;
        }
      }
      return Const(std::move(t));
    };
    const ValueId scale = param(false), bias = param(false), mean = param(false);
    const ValueId var = param(true);
    std::map<std::string, Attribute> attrs;
    if (fdp_.ConsumeBool()) attrs["epsilon"] = fdp_.PickValueInArray<float>({1e-5f, 1e-3f, 0.0f});
    Emit("BatchNormalization", {x.id, scale, bias, mean, var}, std::move(attrs));
    return true;
  }

  bool Softmax() {
    const Known x = PickFloat(1);
    const std::string op = fdp_.PickValueInArray({"Softmax", "LogSoftmax", "Hardmax"});
    Emit(op, {x.id}, {{"axis", Axis(static_cast<int>(x.dims->size()))}});
    return true;
  }

  bool Concat() {
    const Known a = PickFloat(1);
    const int rank = static_cast<int>(a.dims->size());
    const int64_t axis = Axis(rank);
    const int64_t pos = axis < 0 ? axis + rank : axis;
    std::vector<ValueId> ins = {a.id};
    const int n = fdp_.ConsumeIntegralInRange(1, 2);
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> dims = *a.dims;
      dims[pos] = fdp_.PickValueInArray<int64_t>({0, 1, 2, 3});
      if (NumElements(dims) > kMaxElements) dims[pos] = 0;
      ins.push_back(RandomConst(DType::kFloat32, dims));
    }
    if (fdp_.ConsumeBool()) std::swap(ins[0], ins.back());
    Emit("Concat", ins, {{"axis", axis}});
    return true;
  }

  bool Reshape() {
    std::optional<Known> x = Pick(DType::kInvalid, 0);
    if (!x) x = PickFloat();
    const std::vector<int64_t>& xd = *x->dims;
    const int64_t n = NumElements(xd);
    std::vector<int64_t> target;
    switch (fdp_.ConsumeIntegralInRange(0, 4)) {
      case 0:
        target = {-1};
        break;
      case 1:
        target = {n};
        break;
      case 2: {
        // Split the count into two factors, one given as -1 or 0 (copy) when valid.
        std::vector<int64_t> divisors;
        for (int64_t d = 1; d <= std::max<int64_t>(n, 1); ++d) {
          if (n == 0 || n % d == 0) divisors.push_back(d);
        }
        const int64_t d = divisors[fdp_.ConsumeIntegralInRange<size_t>(0, divisors.size() - 1)];
        target = {d, n == 0 ? 0 : n / d};
        if (n != 0 && fdp_.ConsumeBool()) target[1] = -1;
        if (!xd.empty() && xd[0] == d && fdp_.ConsumeBool()) target[0] = 0;  // allowzero=0 copy
        break;
      }
      case 3: {
        target = xd;
        std::reverse(target.begin(), target.end());
        if (!target.empty() && fdp_.ConsumeBool()) target.push_back(1);
        break;
      }
      default:
        // Anything, including invalid ones: must fail cleanly.
        for (int i = fdp_.ConsumeIntegralInRange(0, 3); i > 0; --i) {
          target.push_back(fdp_.PickValueInArray<int64_t>({-1, 0, 1, 2, 3, 4, -2}));
        }
    }
    std::map<std::string, Attribute> attrs;
    if (fdp_.ConsumeIntegralInRange(0, 7) == 0) attrs["allowzero"] = int64_t{1};
    ValueId shape = Ints(target);
    if (auto dyn = Pick(DType::kInt64, 1);
        dyn && dyn->dims->size() == 1 && fdp_.ConsumeIntegralInRange(0, 5) == 0) {
      shape = dyn->id;  // a computed shape (Shape's output, an int64 input)
    }
    Emit("Reshape", {x->id, shape}, std::move(attrs));
    return true;
  }

  bool Transpose() {
    std::optional<Known> x = Pick(DType::kInvalid, 0);
    if (!x) x = PickFloat();
    std::vector<int64_t> perm(x->dims->size());
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size(); i > 1; --i) {
      std::swap(perm[i - 1], perm[fdp_.ConsumeIntegralInRange<size_t>(0, i - 1)]);
    }
    std::map<std::string, Attribute> attrs;
    if (fdp_.ConsumeIntegralInRange(0, 3) != 0) attrs["perm"] = perm;  // absent: reversed
    Emit("Transpose", {x->id}, std::move(attrs));
    return true;
  }

  bool Flatten() {
    const Known x = PickFloat();
    Emit("Flatten", {x.id}, {{"axis", Axis(static_cast<int>(x.dims->size()), true)}});
    return true;
  }

  bool Squeeze() {
    const Known x = PickFloat(1);
    std::vector<int64_t> axes;
    const int rank = static_cast<int>(x.dims->size());
    for (int i = 0; i < rank; ++i) {
      if ((*x.dims)[i] == 1 && fdp_.ConsumeBool())
        axes.push_back(fdp_.ConsumeBool() ? i : i - rank);
    }
    if (axes.empty() && fdp_.ConsumeBool()) {
      Emit("Squeeze", {x.id});  // every dimension of size 1
    } else {
      Emit("Squeeze", {x.id, Ints(axes)});
    }
    return true;
  }

  bool Unsqueeze() {
    const Known x = PickFloat();
    const int out_rank = static_cast<int>(x.dims->size()) + fdp_.ConsumeIntegralInRange(1, 2);
    std::set<int64_t> chosen;
    while (static_cast<int>(chosen.size()) < out_rank - static_cast<int>(x.dims->size())) {
      chosen.insert(fdp_.ConsumeIntegralInRange<int64_t>(0, out_rank - 1));
      if (fdp_.remaining_bytes() == 0) chosen.insert(static_cast<int64_t>(chosen.size()));
    }
    std::vector<int64_t> axes;
    for (int64_t a : chosen) axes.push_back(fdp_.ConsumeBool() ? a : a - out_rank);
    Emit("Unsqueeze", {x.id, Ints(axes)});
    return true;
  }

  bool Reduce() {
    static constexpr const char* kOps[] = {"ReduceSum",       "ReduceMean", "ReduceMax",
                                           "ReduceMin",       "ReduceL2",   "ReduceSumSquare",
                                           "ReduceLogSumExp", "ArgMax",     "ArgMin"};
    const std::string op = fdp_.PickValueInArray(kOps);
    const Known x = PickFloat(op.rfind("Arg", 0) == 0 ? 1 : 0);
    const int rank = static_cast<int>(x.dims->size());
    std::map<std::string, Attribute> attrs = {{"keepdims", int64_t{fdp_.ConsumeBool()}}};
    if (op.rfind("Arg", 0) == 0) {
      attrs["axis"] = Axis(rank);
      attrs["select_last_index"] = int64_t{fdp_.ConsumeBool()};
      Emit(op, {x.id}, std::move(attrs));
      return true;
    }
    if (fdp_.ConsumeBool()) attrs["noop_with_empty_axes"] = int64_t{fdp_.ConsumeBool()};
    std::set<int64_t> axes;
    for (int i = 0; i < rank; ++i) {
      if (fdp_.ConsumeBool()) axes.insert(fdp_.ConsumeBool() ? i : i - rank);
    }
    if (axes.empty() && fdp_.ConsumeBool()) {
      Emit(op, {x.id}, std::move(attrs));
    } else {
      Emit(op, {x.id, Ints(std::vector<int64_t>(axes.begin(), axes.end()))}, std::move(attrs));
    }
    return true;
  }

  bool Gather() {
    const Known x = PickFloat(1);
    const int rank = static_cast<int>(x.dims->size());
    const int64_t axis = Axis(rank);
    const int64_t d = (*x.dims)[axis < 0 ? axis + rank : axis];
    std::vector<int64_t> idims = RandomShape(fdp_.ConsumeIntegralInRange(0, 2));
    Tensor indices(DType::kInt64, Shape(idims));
    for (int64_t& v : indices.span<int64_t>()) {
      // In [-d, d-1]; now and then out of range, which must be an error.
      v = d == 0 || fdp_.ConsumeIntegralInRange(0, 15) == 0
              ? fdp_.PickValueInArray<int64_t>({d, -d - 1, std::numeric_limits<int64_t>::min()})
              : static_cast<int64_t>(rng_() % (2 * d)) - d;
    }
    const bool elements = fdp_.ConsumeIntegralInRange(0, 3) == 0;
    if (elements) {
      // GatherElements: indices of the data's rank.
      std::vector<int64_t> edims = *x.dims;
      Tensor eidx(DType::kInt64, Shape(edims));
      for (int64_t& v : eidx.span<int64_t>()) v = d == 0 ? 0 : static_cast<int64_t>(rng_() % d);
      Emit("GatherElements", {x.id, Const(std::move(eidx))}, {{"axis", axis}});
      return true;
    }
    Emit("Gather", {x.id, Const(std::move(indices))}, {{"axis", axis}});
    return true;
  }

  int64_t SliceBound() {
    return fdp_.PickValueInArray<int64_t>({0, 1, 2, 3, -1, -2, 100,
                                           std::numeric_limits<int64_t>::max(),
                                           std::numeric_limits<int64_t>::min(), -100});
  }

  bool Slice() {
    const Known x = PickFloat(1);
    const int rank = static_cast<int>(x.dims->size());
    std::vector<int64_t> starts, ends, axes, steps;
    for (int i = 0; i < rank; ++i) {
      if (!fdp_.ConsumeBool()) continue;
      axes.push_back(fdp_.ConsumeBool() ? i : i - rank);
      starts.push_back(SliceBound());
      ends.push_back(SliceBound());
      steps.push_back(fdp_.PickValueInArray<int64_t>({1, 1, 2, -1, -2, 3}));
    }
    std::vector<ValueId> ins = {x.id, Ints(starts), Ints(ends)};
    const int form = fdp_.ConsumeIntegralInRange(0, 2);
    if (form >= 1) ins.push_back(Ints(axes));
    if (form == 2) ins.push_back(Ints(steps));
    Emit("Slice", ins);
    return true;
  }

  bool Pad() {
    const Known x = PickFloat();
    const int rank = static_cast<int>(x.dims->size());
    std::vector<int64_t> pads(2 * rank);
    for (int64_t& p : pads) p = fdp_.PickValueInArray<int64_t>({0, 0, 1, 2, 3, -1});
    const std::string mode = fdp_.PickValueInArray({"constant", "reflect", "edge", "wrap"});
    std::vector<ValueId> ins = {x.id, Ints(pads)};
    if (mode == "constant" && fdp_.ConsumeBool()) ins.push_back(FloatScalar(RandomFloat()));
    std::vector<int64_t> padded = *x.dims;
    for (int i = 0; i < rank; ++i) padded[i] += pads[i] + pads[i + rank];
    if (NumElements(padded) > kMaxElements) return false;
    Emit("Pad", ins, {{"mode", mode}});
    return true;
  }

  bool Clip() {
    std::optional<Known> x = Pick(DType::kFloat32, 0, /*need_shape=*/false);
    if (!x) x = PickFloat();
    std::vector<ValueId> ins = {x->id};
    const int form = fdp_.ConsumeIntegralInRange(0, 3);
    float lo = RandomFloat(), hi = RandomFloat();
    if (lo > hi) std::swap(lo, hi);
    if (form >= 1) ins.push_back(FloatScalar(lo));
    if (form == 2) ins.push_back(FloatScalar(hi));
    if (form == 3) {
      ins.push_back(kiln::ir::kNoValue);  // min omitted, max given
      ins.push_back(FloatScalar(hi));
    }
    Emit("Clip", ins);
    return true;
  }

  std::vector<int64_t> ShapeArguments(int rank) {
    std::vector<int64_t> dims;
    for (int i = 0; i < rank; ++i) dims.push_back(ShapeArgument());
    return dims;
  }

  bool ConstantOfShape() {
    ValueId shape = Ints(ShapeArguments(fdp_.ConsumeIntegralInRange(0, 3)));
    if (auto dyn = Pick(DType::kInt64, 1); dyn && dyn->dims->size() == 1 && fdp_.ConsumeBool()) {
      shape = dyn->id;
    }
    std::map<std::string, Attribute> attrs;
    if (fdp_.ConsumeBool()) attrs["value"] = Tensor::FromVector<float>({RandomFloat()});
    Emit("ConstantOfShape", {shape}, std::move(attrs));
    return true;
  }

  bool Range() {
    if (fdp_.ConsumeBool()) {
      const int64_t start = fdp_.PickValueInArray<int64_t>({0, 1, -3, 5});
      const int64_t limit = fdp_.ConsumeIntegralInRange(0, 3) == 0
                                ? ShapeArgument()
                                : fdp_.ConsumeIntegralInRange<int64_t>(-5, 8);
      const int64_t delta = fdp_.PickValueInArray<int64_t>({1, 2, -1, 3, 0});
      Emit("Range", {IntScalar(start), IntScalar(limit), IntScalar(delta)});
    } else {
      const float start = fdp_.PickValueInArray<float>({0.0f, 0.5f, -2.0f});
      const float limit = fdp_.PickValueInArray<float>({4.0f, -1.0f, 1e30f, 3.5f,
                                                        std::numeric_limits<float>::infinity(),
                                                        std::numeric_limits<float>::quiet_NaN()});
      const float delta = fdp_.PickValueInArray<float>({1.0f, 0.5f, -0.5f, 0.0f, 1e-30f});
      Emit("Range", {FloatScalar(start), FloatScalar(limit), FloatScalar(delta)});
    }
    return true;
  }

  bool Tile() {
    const Known x = PickFloat(1);
    std::vector<int64_t> repeats;
    for (size_t i = 0; i < x.dims->size(); ++i) {
      repeats.push_back(fdp_.ConsumeIntegralInRange(0, 3) == 0
                            ? ShapeArgument()
                            : fdp_.ConsumeIntegralInRange<int64_t>(0, 2));
    }
    Emit("Tile", {x.id, Ints(repeats)});
    return true;
  }

  bool Expand() {
    const Known x = PickFloat();
    std::vector<int64_t> shape = *x.dims;
    // Expand to: the same, a dimension 1 stretched, an extra leading dim, or huge ones.
    for (int64_t& d : shape) {
      if (d == 1 && fdp_.ConsumeBool())
        d = fdp_.ConsumeIntegralInRange(0, 3) == 0 ? ShapeArgument() : RandomDim();
      else if (fdp_.ConsumeIntegralInRange(0, 3) == 0)
        d = 1;
    }
    if (fdp_.ConsumeBool())
      shape.insert(shape.begin(), fdp_.ConsumeBool() ? RandomDim() : ShapeArgument());
    Emit("Expand", {x.id, Ints(shape)});
    return true;
  }

  bool Cast() {
    std::optional<Known> x = Pick(DType::kInvalid, 0, /*need_shape=*/false);
    if (!x) x = PickFloat();
    const int64_t to = fdp_.PickValueInArray<int64_t>(
        {kOnnxFloat, kOnnxInt32, kOnnxInt64, kOnnxBool, kOnnxFloat16, kOnnxDouble});
    // Float to integer is unspecified by ONNX for NaN, Inf and out-of-range values: such
    // outputs are not compared (a crash there is still a finding).
    const bool unspecified =
        (x->dtype == DType::kFloat32) && (to == kOnnxInt32 || to == kOnnxInt64);
    Emit("Cast", {x->id}, {{"to", to}}, 1, unspecified);
    return true;
  }

  bool Compare() {
    const std::string op =
        fdp_.PickValueInArray({"Equal", "Greater", "Less", "GreaterOrEqual", "IsNaN", "IsInf"});
    const Known a = PickFloat();
    if (op == "IsNaN" || op == "IsInf") {
      Emit(op, {a.id});
    } else {
      Emit(op, {a.id, SecondOperand(a)});
    }
    return true;
  }

  bool Where() {
    const Known a = PickFloat();
    const ValueId b = SecondOperand(a);
    ValueId cond;
    std::optional<Known> c = Pick(DType::kBool);
    if (c && Broadcast(*c->dims, *a.dims) && fdp_.ConsumeBool()) {
      cond = c->id;
    } else {
      cond = RandomConst(DType::kBool, BroadcastableTo(*a.dims));
    }
    Emit("Where", {cond, a.id, b});
    return true;
  }

  bool ShapeOp() {
    std::optional<Known> x = Pick(DType::kInvalid, 0);
    if (!x) x = PickFloat();
    Emit(fdp_.ConsumeIntegralInRange(0, 3) == 0 ? "Size" : "Shape", {x->id});
    return true;
  }

  bool Dropout() {
    const Known x = PickFloat();
    std::vector<ValueId> ins = {x.id};
    bool training = false;
    if (fdp_.ConsumeBool()) {
      ins.push_back(FloatScalar(fdp_.PickValueInArray<float>({0.5f, 0.0f, 0.9f})));
      training = fdp_.ConsumeBool();
      ins.push_back(Const(Tensor::Scalar<bool>(training)));
    }
    // In training mode Dropout draws random masks: its outputs differ between runs.
    Emit("Dropout", ins, {}, 1, training);
    return true;
  }

  FuzzedDataProvider& fdp_;
  std::mt19937 rng_;
  int special_per_256_ = 0;
  Graph graph_;
  std::vector<Known> pool_;
  std::set<ValueId> tainted_;
  // Values that are not exact in float (transcendentals, divisions, means and whatever reads
  // them); everything else computes exactly on the quarter-valued inputs.
  std::set<ValueId> inexact_;
  inline static const std::set<std::string> kInexact = {"Sigmoid",
                                                        "Tanh",
                                                        "Sqrt",
                                                        "Erf",
                                                        "Elu",
                                                        "HardSigmoid",
                                                        "Softplus",
                                                        "Exp",
                                                        "Log",
                                                        "Reciprocal",
                                                        "Div",
                                                        "Pow",
                                                        "Softmax",
                                                        "LogSoftmax",
                                                        "ReduceMean",
                                                        "ReduceL2",
                                                        "ReduceLogSumExp",
                                                        "Mean",
                                                        "AveragePool",
                                                        "GlobalAveragePool",
                                                        "BatchNormalization",
                                                        "Range",
                                                        "LeakyRelu",
                                                        "Gemm"};
  inline static const std::set<std::string> kDiscontinuous = {
      "Floor",          "Ceil",   "Round",  "Sign",    "Equal", "Greater", "Less",
      "GreaterOrEqual", "ArgMax", "ArgMin", "Hardmax", "Cast",  "IsInf"};
  std::map<std::string, Tensor> feeds_;
  std::vector<std::string> input_keys_;
};

double ElementAsDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data<float>()[i];
    case DType::kFloat64:
      return t.data<double>()[i];
    case DType::kFloat16:
      return kiln::HalfToFloat(t.data<uint16_t>()[i]);
    case DType::kBFloat16:
      return kiln::BFloat16ToFloat(t.data<uint16_t>()[i]);
    case DType::kInt64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kInt32:
      return t.data<int32_t>()[i];
    case DType::kBool:
      return t.data<bool>()[i] ? 1 : 0;
    case DType::kUInt8:
      return t.data<uint8_t>()[i];
    case DType::kInt8:
      return t.data<int8_t>()[i];
    default:
      return 0;
  }
}

[[noreturn]] void Finding(const std::string& what, const Graph& graph) {
  std::fprintf(stderr, "onnx_graph_fuzz FINDING: %s\ngraph:\n%s\n", what.c_str(),
               graph.ToString().c_str());
  std::abort();
}

// NaN where NaN, the same infinities, other values within what reassociating float sums can
// change (relative 1e-3, absolute 1e-4 plus a little of the tensor's largest magnitude, since
// cancellation errors scale with the addends, not with the result).
void CompareOutputs(const std::string& key, const Tensor& plain, const Tensor& optimized,
                    const Graph& graph) {
  if (plain.dtype() != optimized.dtype() || plain.shape() != optimized.shape()) {
    Finding(absl::StrCat("output '", key, "' is ", kiln::DTypeName(plain.dtype()),
                         plain.shape().ToString(), " unoptimized but ",
                         kiln::DTypeName(optimized.dtype()), optimized.shape().ToString(),
                         " optimized"),
            graph);
  }
  const int64_t n = plain.num_elements();
  if (plain.dtype() == DType::kString) return;
  const bool floating = kiln::IsFloatingPoint(plain.dtype());
  double scale = 0;
  for (int64_t i = 0; i < n && floating; ++i) {
    const double v = std::fabs(ElementAsDouble(plain, i));
    if (std::isfinite(v)) scale = std::max(scale, v);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double a = ElementAsDouble(plain, i), b = ElementAsDouble(optimized, i);
    bool same;
    if (!floating) {
      same = a == b;
    } else if (std::isnan(a) || std::isnan(b)) {
      same = std::isnan(a) && std::isnan(b);
    } else if (std::isinf(a) || std::isinf(b)) {
      same = a == b;
    } else {
      same = std::fabs(a - b) <= 1e-4 + 1e-3 * std::max(std::fabs(a), std::fabs(b)) + 1e-5 * scale;
    }
    if (!same) {
      Finding(absl::StrCat("output '", key, "' element ", i, ": unoptimized ", a, ", optimized ", b,
                           "\n  unoptimized: ", plain.DebugString(32),
                           "\n  optimized:   ", optimized.DebugString(32)),
              graph);
    }
  }
}

absl::StatusOr<std::map<std::string, Tensor>> LoadAndRun(
    const kiln::import::ImportedModel& imported, bool optimize,
    const std::map<std::string, Tensor>& feeds) {
  kiln::runtime::ModelOptions options;
  options.disable_optimizer = !optimize;
  // One thread: fast to set up per input, and runs the same on every machine.
  options.intra_op_threads = 1;
  options.inter_op_threads = 1;
  // Far below the fuzzer's 2 GiB RSS limit, so that a huge shape argument is the run's
  // RESOURCE_EXHAUSTED (what is under test) and not libFuzzer's out-of-memory report.
  options.run_memory_budget_bytes = size_t{256} << 20;
  auto model = kiln::runtime::Model::FromImported(imported, options);
  if (!model.ok()) return model.status();
  return (*model)->Run("serving_default", feeds);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  GraphBuilder builder(fdp);
  builder.AddInputs();
  if (builder.AddNodes() == 0) return 0;
  builder.ChooseOutputs();
  Graph& graph = builder.graph();
  if (graph.outputs.empty()) return 0;

  kiln::import::ImportedModel imported;
  imported.platform = "onnx";
  imported.path = "onnx_graph_fuzz";
  kiln::import::SignatureGraph sig;
  sig.key = "serving_default";
  sig.method_name = "tensorflow/serving/predict";
  sig.input_keys = builder.input_keys();
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const auto& type = graph.value(graph.inputs[i]).type;
    kiln::import::TensorInfo info;
    info.name = sig.input_keys[i];
    info.dtype = type.dtype;
    info.rank_known = true;
    for (const auto& d : type.dims) info.shape.push_back(d.value);
    sig.inputs[info.name] = info;
  }
  std::vector<bool> compare;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    // A value may be listed twice; each listing is its own output key.
    const std::string key = absl::StrCat("out", i);
    sig.output_keys.push_back(key);
    kiln::import::TensorInfo info;
    info.name = graph.value(graph.outputs[i]).name;
    info.dtype = graph.value(graph.outputs[i]).type.dtype;
    sig.outputs[key] = info;
    compare.push_back(!builder.Tainted(graph.outputs[i]));
  }
  sig.graph = graph;
  imported.signatures.push_back(std::move(sig));

  // KILN_FUZZ_VERBOSE=1 when reproducing an artifact: the graph and its feeds, before a crash
  // can hide them.
  static const bool verbose = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "graph:\n%s\n", graph.ToString().c_str());
    for (const auto& [key, tensor] : builder.feeds()) {
      std::fprintf(stderr, "feed %s = %s\n", key.c_str(), tensor.DebugString(16).c_str());
    }
  }
  const auto plain = LoadAndRun(imported, /*optimize=*/false, builder.feeds());
  const auto optimized = LoadAndRun(imported, /*optimize=*/true, builder.feeds());
  if (plain.ok() != optimized.ok()) {
    const absl::Status& error = plain.ok() ? optimized.status() : plain.status();
    // Folding may allocate what the plain run never does, or the other way round.
    if (!absl::IsResourceExhausted(error)) {
      Finding(absl::StrCat(plain.ok() ? "optimized" : "unoptimized",
                           " run failed where the other succeeded: ", error.ToString()),
              graph);
    }
    return 0;
  }
  if (verbose) {
    std::fprintf(stderr, "both runs: %s\n", plain.ok() ? "ok" : plain.status().ToString().c_str());
  }
  if (!plain.ok()) return 0;
  const auto& keys = imported.signatures[0].output_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!compare[i]) continue;
    const auto a = plain->find(keys[i]), b = optimized->find(keys[i]);
    if (a == plain->end() || b == optimized->end()) {
      Finding(absl::StrCat("output '", keys[i], "' missing from a run"), graph);
    }
    CompareOutputs(keys[i], a->second, b->second, graph);
  }
  return 0;
}
