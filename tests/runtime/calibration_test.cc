// CollectActivationRanges on real kernels: exact ranges without clipping, outliers clipped by
// percentile and entropy calibration, batching that does not change the result, values kept
// in a conv layout, and bad examples as errors.
#include "kiln/runtime/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

namespace kiln::runtime {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;
using Method = CalibrationOptions::Method;

ValueId Op(Graph& g, const std::string& op, std::vector<ValueId> inputs, const std::string& name,
           std::map<std::string, ir::Attribute> attrs = {}) {
  const ir::NodeId id = g.AddNode(op, std::move(inputs), 1, std::move(attrs), name);
  g.value(g.node(id).outputs[0]).name = name;
  return g.node(id).outputs[0];
}

Tensor Uniform(Shape shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// x -> Relu -> r; Add(x, r) -> s (the output).
Graph ReluAdd(int64_t width) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, width}));
  g.inputs = {x};
  const ValueId r = Op(g, "Relu", {x}, "r");
  g.outputs = {Op(g, "Add", {x, r}, "s")};
  return g;
}

TEST(CalibrationTest, MinMaxIsTheExactObservedRange) {
  const Graph g = ReluAdd(64);
  std::vector<std::map<std::string, Tensor>> examples;
  float lo = 0, hi = 0;
  for (uint32_t i = 0; i < 5; ++i) {
    Tensor t = Uniform({2, 64}, i, -3.0f, 2.0f);
    for (float v : t.span<float>()) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    examples.push_back({{"x", t}});
  }
  CalibrationOptions options;
  options.method = Method::kMinMax;
  auto ranges = CollectActivationRanges(g, examples, options);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_EQ(ranges->at("x").min, lo);
  EXPECT_EQ(ranges->at("x").max, hi);
  // Never negative: min stays 0 so the pass can pick an unsigned type.
  EXPECT_EQ(ranges->at("r").min, 0.0f);
  EXPECT_EQ(ranges->at("r").max, hi);
  EXPECT_EQ(ranges->at("s").min, lo);
  EXPECT_EQ(ranges->at("s").max, 2 * hi);
}

TEST(CalibrationTest, BatchingDoesNotChangeRanges) {
  const Graph g = ReluAdd(16);
  std::vector<std::map<std::string, Tensor>> examples;
  for (uint32_t i = 0; i < 7; ++i) examples.push_back({{"x", Uniform({1, 16}, i, -1, 1)}});
  // One example of another batch size in the middle still joins (only dimension 0 differs).
  examples.insert(examples.begin() + 3, {{"x", Uniform({3, 16}, 99, -1, 1)}});
  CalibrationOptions one, many;
  one.batch_size = 1;
  many.batch_size = 4;
  auto a = CollectActivationRanges(g, examples, one);
  auto b = CollectActivationRanges(g, examples, many);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (const char* name : {"x", "r", "s"}) {
    EXPECT_EQ(a->at(name).min, b->at(name).min) << name;
    EXPECT_EQ(a->at(name).max, b->at(name).max) << name;
  }
}

// The graph's own outputs come back per example, equal to a plain run of the graph on that
// example: the accuracy guard takes them as its fp32 reference instead of a second pass.
TEST(CalibrationTest, GraphOutputsArePerExampleRunOutputs) {
  const Graph g = ReluAdd(16);
  std::vector<std::map<std::string, Tensor>> examples;
  for (uint32_t i = 0; i < 6; ++i) examples.push_back({{"x", Uniform({2, 16}, i, -1, 1)}});
  examples.insert(examples.begin() + 2, {{"x", Uniform({3, 16}, 99, -1, 1)}});
  auto shared = std::make_shared<Graph>(g);
  for (int batch_size : {1, 4}) {
    CalibrationOptions options;
    options.batch_size = batch_size;
    std::vector<std::vector<Tensor>> outputs;
    auto ranges = CollectActivationRanges(g, examples, options, &outputs);
    ASSERT_TRUE(ranges.ok()) << ranges.status();
    ASSERT_EQ(outputs.size(), examples.size()) << "batch_size " << batch_size;
    for (size_t e = 0; e < examples.size(); ++e) {
      const Tensor& x = examples[e].at("x");
      auto plan = exec::CompiledPlan::Compile(shared, {x.shape()});
      ASSERT_TRUE(plan.ok()) << plan.status();
      std::vector<Tensor> want;
      ASSERT_TRUE((*plan)->Run({x}, &want).ok());
      ASSERT_EQ(outputs[e].size(), 1u);
      ASSERT_EQ(outputs[e][0].shape(), want[0].shape()) << "example " << e;
      EXPECT_EQ(0, std::memcmp(outputs[e][0].raw_data(), want[0].raw_data(), want[0].byte_size()))
          << "batch_size " << batch_size << ", example " << e;
    }
  }
}

// An output whose first dimension does not count rows cannot be cut per example: no outputs
// (the caller then runs the reference itself), and the ranges are still collected.
TEST(CalibrationTest, UnsliceableGraphOutputsAreLeftEmpty) {
  Graph g = ReluAdd(16);
  g.outputs = {Op(g, "ReduceSum", {g.outputs[0]}, "total", {{"keepdims", int64_t{0}}})};
  std::vector<std::map<std::string, Tensor>> examples;
  for (uint32_t i = 0; i < 3; ++i) examples.push_back({{"x", Uniform({2, 16}, i, -1, 1)}});
  CalibrationOptions options;
  options.batch_size = 4;
  std::vector<std::vector<Tensor>> outputs = {{}};
  auto ranges = CollectActivationRanges(g, examples, options, &outputs);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_TRUE(outputs.empty());
  EXPECT_TRUE(ranges->contains("s"));
}

TEST(CalibrationTest, PercentileAndEntropyClipAnOutlier) {
  const Graph g = ReluAdd(1000);
  std::vector<std::map<std::string, Tensor>> examples;
  for (uint32_t i = 0; i < 20; ++i) examples.push_back({{"x", Uniform({1, 1000}, i, -1, 1)}});
  examples[7]["x"].data<float>()[5] = 500.0f;  // one in 20,000
  CalibrationOptions minmax;
  minmax.method = Method::kMinMax;
  auto exact = CollectActivationRanges(g, examples, minmax);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->at("x").max, 500.0f);

  CalibrationOptions percentile;
  percentile.percentile = 99.9;
  auto clipped = CollectActivationRanges(g, examples, percentile);
  ASSERT_TRUE(clipped.ok()) << clipped.status();
  // The bulk is within 1; the histogram's bins (range / 2048) bound the threshold's precision.
  EXPECT_GT(clipped->at("x").max, 0.9f);
  EXPECT_LT(clipped->at("x").max, 1.0f + 1000.0f / 2048);
  EXPECT_LT(clipped->at("x").min, -0.9f);
  EXPECT_GT(clipped->at("x").min, -1.0f - 1000.0f / 2048);

  CalibrationOptions entropy;
  entropy.method = Method::kEntropy;
  auto kl = CollectActivationRanges(g, examples, entropy);
  ASSERT_TRUE(kl.ok()) << kl.status();
  EXPECT_LT(kl->at("x").max, 100.0f);
  EXPECT_GT(kl->at("x").max, 0.5f);
  EXPECT_EQ(kl->at("r").min, 0.0f);
}

TEST(CalibrationTest, NanAndInfinityDoNotBreakTheRange) {
  const Graph g = ReluAdd(8);
  Tensor t = Uniform({1, 8}, 1, -1, 1);
  t.data<float>()[0] = std::nanf("");
  t.data<float>()[1] = std::numeric_limits<float>::infinity();
  std::vector<std::map<std::string, Tensor>> examples = {{{"x", t}}};
  auto ranges = CollectActivationRanges(g, examples);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_FALSE(std::isnan(ranges->at("x").max));
  EXPECT_FALSE(std::isnan(ranges->at("x").min));
  EXPECT_LE(ranges->at("x").min, -0.0f);
}

TEST(CalibrationTest, ValuesInAConvLayoutAreObserved) {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {-1, 8, 6, 6}));
  g.inputs = {x};
  Tensor w(DType::kFloat32, {8, 8, 1, 1});
  for (int64_t i = 0; i < 64; ++i) w.data<float>()[i] = (i % 9 == 0) ? 1.0f : 0.0f;  // identity
  const ValueId wv = g.AddConstant("w", w);
  const ValueId a = Op(g, "Conv", {x, wv}, "a");
  g.value(a).type = TensorType::Of(DType::kFloat32, {-1, 8, 6, 6});
  g.value(a).layout = ir::MemoryLayout::kNchw8c;  // as the layout pass leaves conv chains
  g.outputs = {Op(g, "Conv", {a, wv}, "b")};
  ASSERT_TRUE(ir::Verify(g).ok());
  Tensor input = Uniform({2, 8, 6, 6}, 3, -2, 5);
  std::vector<std::map<std::string, Tensor>> examples = {{{"x", input}}};
  CalibrationOptions minmax;
  minmax.method = Method::kMinMax;
  auto ranges = CollectActivationRanges(g, examples, minmax);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_EQ(ranges->at("a").min, ranges->at("x").min);
  EXPECT_EQ(ranges->at("a").max, ranges->at("x").max);
  // The caller's graph keeps its layout.
  EXPECT_EQ(g.value(a).layout, ir::MemoryLayout::kNchw8c);
}

TEST(CalibrationTest, BadExamplesAreErrors) {
  const Graph g = ReluAdd(4);
  std::vector<std::map<std::string, Tensor>> missing = {{{"y", Uniform({1, 4}, 0, 0, 1)}}};
  auto a = CollectActivationRanges(g, missing);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("'x'"), std::string::npos) << a.status();
  std::vector<std::map<std::string, Tensor>> ints = {{{"x", Tensor(DType::kInt32, {1, 4})}}};
  EXPECT_EQ(CollectActivationRanges(g, ints).status().code(), absl::StatusCode::kInvalidArgument);
  CalibrationOptions bad;
  bad.percentile = 0;
  std::vector<std::map<std::string, Tensor>> ok = {{{"x", Uniform({1, 4}, 0, 0, 1)}}};
  EXPECT_EQ(CollectActivationRanges(g, ok, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::runtime
