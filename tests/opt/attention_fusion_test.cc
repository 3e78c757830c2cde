// attention_fusion (src/opt/fuse_attention.cc) and kiln::Attention (nn_attention.cc): BERT-style
// attention graphs built here, loaded with the optimizer off and on through
// kiln::runtime::Model, must compute the same outputs: NaN where the unoptimized graph has NaN,
// the same infinities, other values within the rounding of another summation order in the two
// products. Special values (NaN, +-Inf in Q/K/V; -inf and NaN in the mask, whole masked-out
// rows) go through both. Patterns that do not match exactly must be left alone. Built twice:
// at this CPU's ISA and capped to AVX2 (KILN_TEST_MAX_ISA).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/runtime/model.h"

namespace kiln::opt {
namespace {

#ifdef KILN_TEST_MAX_ISA
// Before any kernel exists: the cap is fixed at the first use.
const bool kIsaCapped = [] {
  absl::Status status = SetMaxCpuIsa(KILN_TEST_MAX_ISA);
  if (!status.ok()) std::abort();
  return true;
}();
#endif

using ir::Graph;
using ir::TensorType;
using ir::ValueId;
using runtime::Model;
using runtime::ModelOptions;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor Random(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Sets element `index` (flat) of `t` to `value`.
void Put(Tensor& t, int64_t index, float value) { t.span<float>()[index] = value; }

struct TestGraph {
  Graph graph;
  std::vector<std::pair<std::string, Shape>> inputs;

  ValueId Input(const std::string& name, Shape shape) {
    const ValueId v = graph.AddValue(name, TensorType::Of(DType::kFloat32, shape.ToVector()));
    graph.inputs.push_back(v);
    inputs.emplace_back(name, shape);
    return v;
  }
  ValueId Op(const std::string& op, std::vector<ValueId> in,
             std::map<std::string, ir::Attribute> attrs = {}) {
    const ir::NodeId id =
        graph.AddNode(op, std::move(in), 1, std::move(attrs), absl::StrCat(op, "_", counter++));
    return graph.node(id).outputs[0];
  }
  ValueId Const(Tensor t) { return graph.AddConstant(absl::StrCat("c", counter++), std::move(t)); }
  ValueId Ints(std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return Const(Tensor::FromVector<int64_t>(v, Shape{n}));
  }
  ValueId Transpose(ValueId x, std::vector<int64_t> perm) {
    return Op("Transpose", {x}, {{"perm", perm}});
  }
  int counter = 0;
};

import::ImportedModel ToModel(const TestGraph& t){import::ImportedModel m;
m.platform = "onnx";
m.path = "attention_fusion_test";
import::SignatureGraph sig;
sig.key = "serving_default";
sig.method_name = "tensorflow/serving/predict";
for (const auto& [name, shape] : t.inputs) {
  sig.input_keys.push_back(name);
  import::TensorInfo info;
  info.name = name;
  info.dtype = DType::kFloat32;
  info.rank_known = true;
  info.shape = shape.ToVector();
  sig.inputs[name] = info;
}
for (size_t i = 0; i < t.graph.outputs.size(); ++i) {
  const std::string key = absl::StrCat("y", i);
  sig.output_keys.push_back(key);
  import::TensorInfo info;
  info.name = key;
  info.dtype = DType::kFloat32;
  sig.outputs[key] = info;
}
sig.graph = t.graph;
m.signatures.push_back(std::move(sig));
return m;
}  // namespace

std::shared_ptr<Model> Load(const TestGraph& t, bool optimize) {
  ModelOptions options;
  options.disable_optimizer = !optimize;
  auto model = Model::FromImported(ToModel(t), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// Empty when equal under the rules at the top of this file; else the first mismatches.
std::string Mismatches(const Tensor& expected, const Tensor& actual) {
  if (expected.shape() != actual.shape()) {
    return absl::StrCat("shape ", actual.shape().ToString(), ", expected ",
                        expected.shape().ToString());
  }
  std::string out;
  int bad = 0;
  const float* e = expected.data<float>();
  const float* a = actual.data<float>();
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const float r = e[i], x = a[i];
    bool ok;
    if (std::isnan(r) || std::isnan(x)) {
      ok = std::isnan(r) && std::isnan(x);
    } else if (std::isinf(r) || std::isinf(x)) {
      ok = r == x;
    } else {
      ok = std::fabs(static_cast<double>(x) - r) <= 1e-5 + 1e-4 * std::fabs(static_cast<double>(r));
    }
    if (!ok && bad++ < 6) absl::StrAppend(&out, "\n  [", i, "] optimized ", x, ", unoptimized ", r);
  }
  if (bad > 0) out = absl::StrCat(bad, " of ", expected.num_elements(), " values differ:", out);
  return out;
}

// Runs `t` unoptimized and optimized on `inputs`; returns the optimized model's inspect text.
std::string ExpectSameResults(const TestGraph& t, const std::vector<Tensor>& inputs) {
  std::shared_ptr<Model> plain = Load(t, false);
  std::shared_ptr<Model> optimized = Load(t, true);
  if (!plain || !optimized) return "";
  const std::string inspect = optimized->Inspect();
  std::map<std::string, Tensor> feed;
  for (size_t i = 0; i < inputs.size(); ++i) feed[t.inputs[i].first] = inputs[i];
  auto expected = plain->Run("serving_default", feed);
  auto actual = optimized->Run("serving_default", feed);
  EXPECT_TRUE(expected.ok()) << expected.status();
  EXPECT_TRUE(actual.ok()) << actual.status();
  if (!expected.ok() || !actual.ok()) return inspect;
  for (const auto& [key, value] : *expected) {
    EXPECT_TRUE(actual->count(key)) << key;
    if (!actual->count(key)) continue;
    const std::string diff = Mismatches(value, actual->at(key));
    EXPECT_TRUE(diff.empty()) << "output " << key << ": " << diff << "\n" << inspect;
  }
  return inspect;
}

bool Fused(const std::string& inspect) {
  return inspect.find("attention_fusion") != std::string::npos &&
         inspect.find("kiln::Attention") != std::string::npos;
}

// The heads of `x` [B, S, H*D] as PyTorch's BERT splits them: Reshape to [B, S, H, D].
ValueId SplitHeads(TestGraph& t, ValueId x, int64_t b, int64_t s, int64_t h, int64_t d) {
  return t.Op("Reshape", {x, t.Ints({b, s, h, d})});
}

struct Dims {
  int64_t b = 2, sq = 5, sk = 5, h = 2, d = 4;
};

// BERT's attention: Q, K, V split into heads (K transposed in one Transpose [0,2,3,1]), scores
// divided by sqrt(d), the mask added, softmax, context merged back to [B, S, H*D].
TestGraph BertAttention(const Dims& n, bool with_mask, Shape mask_shape = {}) {
  TestGraph t;
  const ValueId qx = t.Input("q", Shape{n.b, n.sq, n.h * n.d});
  const ValueId kx = t.Input("k", Shape{n.b, n.sk, n.h * n.d});
  const ValueId vx = t.Input("v", Shape{n.b, n.sk, n.h * n.d});
  const ValueId q = t.Transpose(SplitHeads(t, qx, n.b, n.sq, n.h, n.d), {0, 2, 1, 3});
  const ValueId k = t.Transpose(SplitHeads(t, kx, n.b, n.sk, n.h, n.d), {0, 2, 3, 1});
  const ValueId v = t.Transpose(SplitHeads(t, vx, n.b, n.sk, n.h, n.d), {0, 2, 1, 3});
  ValueId s = t.Op("MatMul", {q, k});
  s = t.Op("Div", {s, t.Const(Tensor::Scalar<float>(std::sqrt(static_cast<float>(n.d))))});
  if (with_mask) s = t.Op("Add", {s, t.Input("mask", mask_shape)});
  const ValueId p = t.Op("Softmax", {s}, {{"axis", int64_t{-1}}});
  const ValueId ctx = t.Transpose(t.Op("MatMul", {p, v}), {0, 2, 1, 3});
  t.graph.outputs = {t.Op("Reshape", {ctx, t.Ints({n.b, n.sq, n.h * n.d})})};
  return t;
}

TEST(AttentionFusionTest, BertAttentionWithMask) {
  const Dims n;
  TestGraph t = BertAttention(n, true, Shape{n.b, 1, 1, n.sk});
  Tensor mask = Random(Shape{n.b, 1, 1, n.sk}, 4, -1, 0);
  Put(mask, 3, -10000.0f);
  const std::string inspect =
      ExpectSameResults(t, {Random(Shape{n.b, n.sq, n.h * n.d}, 1, -2, 2),
                            Random(Shape{n.b, n.sk, n.h * n.d}, 2, -2, 2),
                            Random(Shape{n.b, n.sk, n.h * n.d}, 3, -2, 2), mask});
  EXPECT_TRUE(Fused(inspect)) << inspect;
  // The four Transposes, two MatMuls, Div, Add and Softmax are gone.
  EXPECT_EQ(inspect.find("Transpose:"), std::string::npos) << inspect;
  EXPECT_EQ(inspect.find("Softmax:"), std::string::npos) << inspect;
}

TEST(AttentionFusionTest, SpecialValuesMatchTheUnfusedGraph) {
  const Dims n;
  TestGraph t = BertAttention(n, true, Shape{n.b, 1, n.sq, n.sk});
  Tensor q = Random(Shape{n.b, n.sq, n.h * n.d}, 1, -2, 2);
  Tensor k = Random(Shape{n.b, n.sk, n.h * n.d}, 2, -2, 2);
  Tensor v = Random(Shape{n.b, n.sk, n.h * n.d}, 3, -2, 2);
  Tensor mask = Random(Shape{n.b, 1, n.sq, n.sk}, 4, -1, 0);
  Put(q, 0, kNaN);                     // batch 0, query 0, head 0: a NaN row
  Put(q, n.h * n.d + 1, kInf);         // query 1, head 0: +-inf scores
  Put(k, 2 * n.h * n.d + n.d, -kInf);  // key 2, head 1
  Put(v, 3 * n.h * n.d + 2, kInf);     // value 3, head 0
  for (int64_t c = 0; c < n.sk; ++c) Put(mask, 2 * n.sk + c, -kInf);  // query 2 fully masked
  Put(mask, 3 * n.sk + 1, -kInf);                                     // one masked key
  Put(mask, n.sq * n.sk + 4 * n.sk, kNaN);                            // batch 1: NaN mask
  const std::string inspect = ExpectSameResults(t, {q, k, v, mask});
  EXPECT_TRUE(Fused(inspect)) << inspect;
}

TEST(AttentionFusionTest, CrossAttentionBatchOneAndNoMask) {
  Dims n;
  n.b = 1;
  n.sq = 3;
  n.sk = 7;
  n.h = 3;
  n.d = 8;
  TestGraph t = BertAttention(n, false);
  const std::string inspect =
      ExpectSameResults(t, {Random(Shape{1, 3, 24}, 5, -2, 2), Random(Shape{1, 7, 24}, 6, -2, 2),
                            Random(Shape{1, 7, 24}, 7, -2, 2)});
  EXPECT_TRUE(Fused(inspect)) << inspect;
}

// K transposed in two steps, the scale a Mul with the constant first, the mask added on the
// left and broadcast from [Sq, Sk], no merge Transpose after the context.
TEST(AttentionFusionTest, ComposedTransposesMulScaleMaskOnLeft) {
  TestGraph t;
  const int64_t b = 2, s = 6, h = 2, d = 4;
  const ValueId q = t.Transpose(t.Input("q", Shape{b, s, h, d}), {0, 2, 1, 3});
  ValueId k = t.Transpose(t.Input("k", Shape{b, s, h, d}), {0, 2, 1, 3});
  k = t.Transpose(k, {0, 1, 3, 2});
  const ValueId v = t.Input("v", Shape{b, h, s, d});
  ValueId sc = t.Op("MatMul", {q, k});
  sc = t.Op("Mul", {t.Const(Tensor::Scalar<float>(0.3f)), sc});
  sc = t.Op("Add", {t.Input("mask", Shape{s, s}), sc});
  t.graph.outputs = {t.Op("MatMul", {t.Op("Softmax", {sc}, {{"axis", int64_t{3}}}), v})};
  Tensor mask = Random(Shape{s, s}, 9, -3, 0);
  Put(mask, 7, -kInf);
  const std::string inspect = ExpectSameResults(
      t, {Random(Shape{b, s, h, d}, 1, -2, 2), Random(Shape{b, s, h, d}, 2, -2, 2),
          Random(Shape{b, h, s, d}, 3, -2, 2), mask});
  EXPECT_TRUE(Fused(inspect)) << inspect;
  EXPECT_EQ(inspect.find("Transpose:"), std::string::npos) << inspect;
}

// The mask widens a single query row ([B, H, 1, N] scores, a [B, 1, 4, N] mask), as Add would.
TEST(AttentionFusionTest, MaskWidensASingleQueryRow) {
  TestGraph t;
  const ValueId q = t.Input("q", Shape{2, 2, 1, 4});
  const ValueId k = t.Input("k", Shape{2, 2, 4, 5});
  const ValueId v = t.Input("v", Shape{2, 2, 5, 3});
  ValueId sc = t.Op("Add", {t.Op("MatMul", {q, k}), t.Input("mask", Shape{2, 1, 4, 5})});
  t.graph.outputs = {t.Op("MatMul", {t.Op("Softmax", {sc}), v})};
  const std::string inspect =
      ExpectSameResults(t, {Random(Shape{2, 2, 1, 4}, 1), Random(Shape{2, 2, 4, 5}, 2),
                            Random(Shape{2, 2, 5, 3}, 3), Random(Shape{2, 1, 4, 5}, 4, -2, 0)});
  EXPECT_TRUE(Fused(inspect)) << inspect;
}

// Patterns that do not match exactly are left alone (and still compute the same).
TEST(AttentionFusionTest, NonMatchingPatternsAreLeftAlone) {
  const int64_t b = 1, h = 2, s = 4, d = 3;
  const std::vector<Tensor> inputs = {Random(Shape{b, h, s, d}, 1), Random(Shape{b, h, d, s}, 2),
                                      Random(Shape{b, h, s, d}, 3)};
  {
    SCOPED_TRACE("softmax over axis 2");
    TestGraph t;
    const ValueId q = t.Input("q", Shape{b, h, s, d});
    const ValueId k = t.Input("k", Shape{b, h, d, s});
    const ValueId v = t.Input("v", Shape{b, h, s, d});
    t.graph.outputs = {
        t.Op("MatMul", {t.Op("Softmax", {t.Op("MatMul", {q, k})}, {{"axis", int64_t{2}}}), v})};
    EXPECT_FALSE(Fused(ExpectSameResults(t, inputs)));
  }
  {
    SCOPED_TRACE("scores are also a graph output");
    TestGraph t;
    const ValueId q = t.Input("q", Shape{b, h, s, d});
    const ValueId k = t.Input("k", Shape{b, h, d, s});
    const ValueId v = t.Input("v", Shape{b, h, s, d});
    const ValueId scores = t.Op("MatMul", {q, k});
    t.graph.outputs = {t.Op("MatMul", {t.Op("Softmax", {scores}), v}), scores};
    EXPECT_FALSE(Fused(ExpectSameResults(t, inputs)));
  }
  {
    SCOPED_TRACE("scaled by a non-scalar");
    TestGraph t;
    const ValueId q = t.Input("q", Shape{b, h, s, d});
    const ValueId k = t.Input("k", Shape{b, h, d, s});
    const ValueId v = t.Input("v", Shape{b, h, s, d});
    const ValueId sc = t.Op("Div", {t.Op("MatMul", {q, k}), t.Const(Random(Shape{s}, 7, 1, 2))});
    t.graph.outputs = {t.Op("MatMul", {t.Op("Softmax", {sc}), v})};
    EXPECT_FALSE(Fused(ExpectSameResults(t, inputs)));
  }
  {
    SCOPED_TRACE("constant V (a MatMul with weights stays a MatMul)");
    TestGraph t;
    const ValueId q = t.Input("q", Shape{b, h, s, d});
    const ValueId k = t.Input("k", Shape{b, h, d, s});
    t.Input("v", Shape{b, h, s, d});
    const ValueId sm = t.Op("Softmax", {t.Op("MatMul", {q, k})});
    t.graph.outputs = {t.Op("MatMul", {sm, t.Const(Random(Shape{b, h, s, d}, 8))})};
    EXPECT_FALSE(Fused(ExpectSameResults(t, inputs)));
  }
}

// The exported BERT-4 (bench/peers/export_runtime_models.py), when it is on this machine:
// every layer's attention fused, the pooled output as the unoptimized graph computes it.
TEST(AttentionFusionTest, Bert4OnnxWhenPresent) {
  const char* env = std::getenv("KILN_BERT4_ONNX");
  const std::string path = env != nullptr ? env : "/tmp/peers_run/models/bert4.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  ModelOptions off;
  off.disable_optimizer = true;
  auto plain = Model::Load(path, off);
  auto optimized = Model::Load(path, ModelOptions{});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(optimized.ok()) << optimized.status();
  const std::string inspect = (*optimized)->Inspect();
  EXPECT_NE(inspect.find("kiln::Attention: 4"), std::string::npos) << inspect;
  Tensor ids(DType::kInt64, Shape{2, 128});
  Tensor mask(DType::kInt64, Shape{2, 128});
  for (int64_t i = 0; i < 256; ++i) {
    ids.span<int64_t>()[i] = (i * 7919) % 30522;
    mask.span<int64_t>()[i] = i % 128 < 100 || i < 128 ? 1 : 0;  // batch 1 pads its tail
  }
  std::map<std::string, Tensor> feed = {{"input_ids", ids}, {"attention_mask", mask}};
  auto expected = (*plain)->Run("serving_default", feed);
  auto actual = (*optimized)->Run("serving_default", feed);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  const std::string diff = Mismatches(expected->at("pooled"), actual->at("pooled"));
  EXPECT_TRUE(diff.empty()) << diff;
}

}  // namespace kiln::opt
}  // namespace kiln::opt
