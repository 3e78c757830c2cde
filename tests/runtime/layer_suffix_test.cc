// SuffixRunner (src/runtime/layer_suffix.h) on real kernels: a graph with one node changed
// gives, from its suffix on kept fp32 values, what it gives run whole; only the nodes the
// change reaches run; an output upstream of the change is fp32's; a kept value in another
// layout than the suffix reads is converted; and a change at the first node cuts at the
// graph input.
#include "runtime/layer_suffix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "kiln/runtime/inputs.h"

namespace kiln::runtime {
namespace {

using ir::Graph;
using ir::MemoryLayout;
using ir::TensorType;
using ir::ValueId;

// Floats uniform in [-scale, scale).
Tensor Uniform(Shape shape, uint32_t seed, float scale = 1) {
  std::mt19937_64 rng(seed);
  Tensor t = RandomTensor(DType::kFloat32, shape, rng);
  for (float& v : t.span<float>()) v *= scale;
  return t;
}

ValueId Conv(Graph& g, ValueId x, const std::string& weights, uint32_t seed,
             const std::string& name, MemoryLayout layout) {
  const ValueId w = g.AddConstant(weights, Uniform({16, 16, 3, 3}, seed, 0.2f));
  const ir::NodeId id =
      g.AddNode("Conv", {x, w}, 1, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, name);
  const ValueId y = g.node(id).outputs[0];
  g.value(y).name = name;
  g.value(y).type = TensorType::Of(DType::kFloat32, {-1, 16, 8, 8});
  g.value(y).layout = layout;
  return y;
}

// x -> a -> b -> c (output 0); a -> d (output 1). a and b in `layout`, as the layout pass
// leaves conv chains.
std::shared_ptr<Graph> Chain(MemoryLayout layout) {
  auto g = std::make_shared<Graph>();
  const ValueId x = g->AddValue("x", TensorType::Of(DType::kFloat32, {-1, 16, 8, 8}));
  g->inputs = {x};
  const ValueId a = Conv(*g, x, "wa", 1, "a", layout);
  const ValueId b = Conv(*g, a, "wb", 2, "b", layout);
  const ValueId c = Conv(*g, b, "wc", 3, "c", MemoryLayout::kPlain);
  const ValueId d = Conv(*g, a, "wd", 4, "d", MemoryLayout::kPlain);
  g->outputs = {c, d};
  return g;
}

// `g` with node `name`'s weights replaced (another constant, another name).
std::shared_ptr<Graph> Reweighted(const Graph& g, const std::string& name, uint32_t seed) {
  auto changed = std::make_shared<Graph>(g);
  for (ir::Node& n : changed->nodes()) {
    if (n.name == name) {
      n.inputs[1] = changed->AddConstant(name + "_int8", Uniform({16, 16, 3, 3}, seed, 0.2f));
    }
  }
  return changed;
}

std::vector<std::vector<Tensor>> Batches() {
  return {{Uniform({2, 16, 8, 8}, 10)}, {Uniform({3, 16, 8, 8}, 11)}};
}

exec::CompileOptions Compile() {
  exec::CompileOptions compile;
  compile.intra_op_threads = 1;
  return compile;
}

float MaxDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float diff = 0;
  for (int64_t i = 0; i < a.num_elements() && i < b.num_elements(); ++i) {
    diff = std::max(diff, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  }
  return diff;
}

void ExpectSameOutputs(const std::vector<std::vector<Tensor>>& got,
                       const std::vector<std::vector<Tensor>>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t b = 0; b < got.size(); ++b) {
    ASSERT_EQ(got[b].size(), want[b].size());
    for (size_t o = 0; o < got[b].size(); ++o) {
      EXPECT_LE(MaxDiff(got[b][o], want[b][o]), tolerance) << "batch " << b << " output " << o;
    }
  }
}

TEST(LayerSuffixTest, TheSuffixGivesWhatTheWholeGraphGives) {
  for (MemoryLayout layout : {MemoryLayout::kPlain, MemoryLayout::kNhwc, MemoryLayout::kNchw8c}) {
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    auto fp32 = Chain(layout);
    std::vector<std::shared_ptr<const Graph>> changed = {
        Reweighted(*fp32, "b", 20), Reweighted(*fp32, "a", 21), Reweighted(*fp32, "c", 22)};
    auto runner = SuffixRunner::Make(fp32, changed, Compile(), Batches());
    ASSERT_TRUE(runner.ok()) << runner.status();
    // b changed: b and c run from the kept a; d (output 1) is upstream of the change.
    EXPECT_EQ((*runner)->nodes_run(0), 2);
    EXPECT_EQ((*runner)->nodes(0), 4);
    // a changed: everything downstream of the graph input.
    EXPECT_EQ((*runner)->nodes_run(1), 4);
    EXPECT_EQ((*runner)->nodes_run(2), 1);
    auto fp32_out = RunOnBatches(fp32, Compile(), Batches());
    ASSERT_TRUE(fp32_out.ok()) << fp32_out.status();
    for (size_t i = 0; i < changed.size(); ++i) {
      auto whole = RunOnBatches(changed[i], Compile(), Batches());
      auto suffix = (*runner)->Run(i);
      ASSERT_TRUE(whole.ok()) << whole.status();
      ASSERT_TRUE(suffix.ok()) << suffix.status();
      // The same kernels on the same bytes: the same bits.
      ExpectSameOutputs(*suffix, *whole, 0.0f);
      // And the change is visible: the changed output is not fp32's.
      EXPECT_GT(MaxDiff((*suffix)[0][0], (*fp32_out)[0][0]), 1e-3f) << i;
    }
    // d does not depend on b: fp32's own output.
    auto suffix_b = (*runner)->Run(0);
    ASSERT_TRUE(suffix_b.ok());
    EXPECT_EQ(MaxDiff((*suffix_b)[1][1], (*fp32_out)[1][1]), 0.0f);
  }
}

TEST(LayerSuffixTest, AKeptValueInAnotherLayoutIsConverted) {
  // fp32 keeps a in nChw8c; the changed graph writes and reads it plain (as when an int8
  // layer breaks a conv chain).
  auto fp32 = Chain(MemoryLayout::kNchw8c);
  auto changed = Reweighted(*fp32, "b", 30);
  for (ValueId v = 0; v < changed->num_values(); ++v) {
    if (changed->value(v).name == "a" || changed->value(v).name == "b") {
      changed->value(v).layout = MemoryLayout::kPlain;
    }
  }
  auto runner = SuffixRunner::Make(fp32, {changed}, Compile(), Batches());
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->nodes_run(0), 2);
  auto whole = RunOnBatches(changed, Compile(), Batches());
  auto suffix = (*runner)->Run(0);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(suffix.ok()) << suffix.status();
  // conv a wrote other layouts in the two runs: other kernels, equal up to rounding.
  ExpectSameOutputs(*suffix, *whole, 1e-5f);
}

TEST(LayerSuffixTest, AValueFp32DoesNotHaveRunsTheGraphWhole) {
  auto fp32 = Chain(MemoryLayout::kPlain);
  auto changed = Reweighted(*fp32, "b", 40);
  // The suffix would read `a`, whose type here is not fp32's: fp32's `a` is another value.
  for (ValueId v = 0; v < changed->num_values(); ++v) {
    if (changed->value(v).name == "a") changed->value(v).type.dims[0] = ir::Dim::Symbol("batch");
  }
  auto runner = SuffixRunner::Make(fp32, {changed}, Compile(), Batches());
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->nodes_run(0), 4);  // whole, not b and c from a
  auto whole = RunOnBatches(changed, Compile(), Batches());
  auto suffix = (*runner)->Run(0);
  ASSERT_TRUE(whole.ok() && suffix.ok());
  ExpectSameOutputs(*suffix, *whole, 0.0f);
}

TEST(LayerSuffixTest, RelayoutPutsEachElementWhereTheLayoutSays) {
  const int64_t N = 2, C = 16, H = 3, W = 5;
  Tensor plain(DType::kFloat32, {N, C, H, W});
  for (int64_t i = 0; i < plain.num_elements(); ++i) plain.data<float>()[i] = static_cast<float>(i);
  const Tensor nhwc = Relayout(plain, MemoryLayout::kPlain, MemoryLayout::kNhwc);
  const Tensor blocked = Relayout(nhwc, MemoryLayout::kNhwc, MemoryLayout::kNchw8c);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w = 0; w < W; ++w) {
          const float want = static_cast<float>(((n * C + c) * H + h) * W + w);
          ASSERT_EQ(nhwc.data<float>()[((n * H + h) * W + w) * C + c], want);
          ASSERT_EQ(blocked.data<float>()[(((n * 2 + c / 8) * H + h) * W + w) * 8 + c % 8], want);
        }
      }
    }
  }
  const Tensor back = Relayout(Relayout(blocked, MemoryLayout::kNchw8c, MemoryLayout::kNchw16c),
                               MemoryLayout::kNchw16c, MemoryLayout::kPlain);
  EXPECT_EQ(MaxDiff(back, plain), 0.0f);
}

}  // namespace
}  // namespace kiln::runtime
