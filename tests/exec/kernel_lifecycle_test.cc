// The kernel lifecycle across plans (kernel.h: Create -> Reshape -> Compute): the plans of one
// model, compiled for several batch sizes, Create each node's kernel once and pack each
// constant weight once, and compute what plans that create and pack for themselves compute.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>

#include "kiln/exec/created_kernels.h"
#include "kiln/exec/plan.h"
#include "kiln/exec/plan_cache.h"

namespace kiln::exec {
namespace {

using ::testing::HasSubstr;

Tensor RandomFloats(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* v = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = dist(rng);
  return t;
}

ir::ValueId Op(ir::Graph& g, const std::string& op, std::vector<ir::ValueId> inputs,
               std::map<std::string, ir::Attribute> attrs, const std::string& name,
               std::vector<int64_t> dims) {
  const ir::NodeId n = g.AddNode(op, std::move(inputs), 1, std::move(attrs), name, "");
  const ir::ValueId out = g.node(n).outputs[0];
  g.value(out).type = ir::TensorType::Of(DType::kFloat32, dims);  // -1: the open batch
  return out;
}

// x[N, 8, 10, 10] -> Conv 3x3 (16 channels, bias) -> Relu -> Flatten -> MatMul [1024, 6]
// -> Add bias: the shapes a model exported with an open batch dimension records. The product
// stays under gemm_backend.h's smallest timed size at batch 32, so the MatMul runs on oneDNN on
// every ISA (the AVX2 backend choice is per shape, and a backend that wins only at one batch
// size packs for it then).
std::shared_ptr<const ir::Graph> ConvMatMulModel(
    std::map<std::string, ir::Attribute> conv_attrs = {},
    std::vector<int64_t> x_dims = {-1, 8, 10, 10}) {
  ir::Graph g;
  const ir::ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, x_dims));
  g.inputs.push_back(x);
  const ir::ValueId w = g.AddConstant("w", RandomFloats(Shape{16, 8, 3, 3}, 1));
  const ir::ValueId b = g.AddConstant("b", RandomFloats(Shape{16}, 2));
  const ir::ValueId fc_w = g.AddConstant("fc_w", RandomFloats(Shape{16 * 8 * 8, 6}, 3));
  const ir::ValueId fc_b = g.AddConstant("fc_b", RandomFloats(Shape{6}, 4));
  conv_attrs.emplace("kernel_shape", std::vector<int64_t>{3, 3});
  const ir::ValueId conv = Op(g, "Conv", {x, w, b}, conv_attrs, "conv1", {-1, 16, 8, 8});
  const ir::ValueId relu = Op(g, "Relu", {conv}, {}, "relu1", {-1, 16, 8, 8});
  const ir::ValueId flat =
      Op(g, "Flatten", {relu}, {{"axis", int64_t{1}}}, "flatten", {-1, 16 * 8 * 8});
  const ir::ValueId fc = Op(g, "MatMul", {flat, fc_w}, {}, "fc", {-1, 6});
  g.outputs = {Op(g, "Add", {fc, fc_b}, {}, "fc_bias", {-1, 6})};
  return std::make_shared<const ir::Graph>(std::move(g));
}

// Inputs with NaN and infinities among the values: they must come out where the plan that
// packed for itself puts them.
Tensor Input(int64_t batch) {
  Tensor x = RandomFloats(Shape{batch, 8, 10, 10}, 10 + static_cast<uint32_t>(batch));
  float* v = x.data<float>();
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[x.num_elements() / 2] = std::numeric_limits<float>::infinity();
  v[x.num_elements() - 7] = -std::numeric_limits<float>::infinity();
  return x;
}

TEST(KernelLifecycleTest, PlansOfEveryBatchSizeShareOneCreatedKernelPerNode) {
  auto graph = ConvMatMulModel();
  PlanCache cache(graph, CompileOptions{}, 8);
  const int nodes = graph->num_nodes();
  size_t packed_bytes = 0, packed_entries = 0;
  for (int64_t batch : {1, 4, 32}) {
    auto plan = cache.Get({Shape{batch, 8, 10, 10}});
    ASSERT_TRUE(plan.ok()) << plan.status();
    // The first plan creates every node; the next batch sizes create nothing.
    EXPECT_EQ((*plan)->stats().kernels_created, batch == 1 ? nodes : 0) << "batch " << batch;
    if (batch == 1) {
      packed_bytes = cache.packed_constants().bytes();
      packed_entries = cache.packed_constants().entries();
    }
    // Each weight packed once: no new packed bytes, and no plan asked the store for the
    // weights (Reshape takes the created kernel's without a lookup).
    EXPECT_EQ(cache.packed_constants().bytes(), packed_bytes) << "batch " << batch;
    EXPECT_EQ(cache.packed_constants().hits(), 0u) << "batch " << batch;

    // What a plan that creates and packs for itself computes (a store of its own).
    auto own = CompiledPlan::Compile(graph, {Shape{batch, 8, 10, 10}});
    ASSERT_TRUE(own.ok()) << own.status();
    const Tensor x = Input(batch);
    std::vector<Tensor> shared_out, own_out;
    ASSERT_TRUE((*plan)->Run({x}, &shared_out).ok());
    ASSERT_TRUE((*own)->Run({x}, &own_out).ok());
    ASSERT_EQ(shared_out[0].shape(), (Shape{batch, 6}));
    EXPECT_TRUE(TensorsEqual(shared_out[0], own_out[0])) << "batch " << batch;
    // The NaN and infinities reach the output (no finite value hides them).
    int non_finite = 0;
    for (int64_t i = 0; i < shared_out[0].num_elements(); ++i) {
      non_finite += std::isfinite(shared_out[0].data<float>()[i]) ? 0 : 1;
    }
    EXPECT_GT(non_finite, 0);
  }
  EXPECT_EQ(cache.created_kernels().creates(), nodes);
  EXPECT_EQ(cache.created_kernels().size(), static_cast<size_t>(nodes));
  // The conv's weights are in a blocked layout on every ISA oneDNN runs on: packed, once (and
  // MatMul's where oneDNN packs them, brgemm).
  EXPECT_GT(packed_bytes, 0u);
  EXPECT_GE(packed_entries, 1u);
}

// Spatial dimensions the graph leaves open: Create cannot choose the conv's weight layout, so
// the first plan's Reshape packs it through the model's store and later plans find it there.
TEST(KernelLifecycleTest, WeightsCreateCouldNotPackArePackedOncePerLayoutByThePlans) {
  auto graph = ConvMatMulModel({}, {-1, 8, -1, -1});
  PlanCache cache(graph, CompileOptions{}, 8);
  size_t packed_bytes = 0;
  for (int64_t batch : {1, 4}) {
    auto plan = cache.Get({Shape{batch, 8, 10, 10}});
    ASSERT_TRUE(plan.ok()) << plan.status();
    if (batch == 1) packed_bytes = cache.packed_constants().bytes();
    EXPECT_GT(packed_bytes, 0u);
    EXPECT_EQ(cache.packed_constants().bytes(), packed_bytes) << "batch " << batch;
    auto own = CompiledPlan::Compile(graph, {Shape{batch, 8, 10, 10}});
    ASSERT_TRUE(own.ok()) << own.status();
    const Tensor x = Input(batch);
    std::vector<Tensor> shared_out, own_out;
    ASSERT_TRUE((*plan)->Run({x}, &shared_out).ok());
    ASSERT_TRUE((*own)->Run({x}, &own_out).ok());
    EXPECT_TRUE(TensorsEqual(shared_out[0], own_out[0])) << "batch " << batch;
  }
  // The batch-4 plan asked the store for the conv's packed weights and found them.
  EXPECT_GE(cache.packed_constants().hits(), 1u);
  EXPECT_EQ(cache.created_kernels().creates(), graph->num_nodes());
}

// x[N, 16, 12, 12] -> Conv 3x3 pad 1 (16 channels, bias): a Winograd-eligible convolution.
std::shared_ptr<const ir::Graph> WinogradConvModel() {
  ir::Graph g;
  const ir::ValueId x = g.AddValue("x", ir::TensorType::Of(DType::kFloat32, {-1, 16, 12, 12}));
  g.inputs.push_back(x);
  Tensor w = RandomFloats(Shape{16, 16, 3, 3}, 5);
  for (float& v : w.span<float>()) v *= 0.1f;
  const ir::ValueId wv = g.AddConstant("w", w);
  const ir::ValueId b = g.AddConstant("b", RandomFloats(Shape{16}, 6));
  g.outputs = {
      Op(g, "Conv", {x, wv, b},
         {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}},
         "conv", {-1, 16, 12, 12})};
  return std::make_shared<const ir::Graph>(std::move(g));
}

// oneDNN's Winograd weight layout depends on the batch size, one layout serving a range of
// them: the transformed weights are packed once per layout and node, plans whose batch size
// oneDNN runs on a packed layout pack nothing, and a node packs at most 3 layouts however many
// batch sizes are compiled. Every plan computes what the direct convolution does. Forced on,
// so that it does not depend on a timing; on AVX2 oneDNN has no Winograd and every plan is
// direct (its packed weights do not depend on the batch size).
TEST(KernelLifecycleTest, WinogradWeightsArePackedOncePerLayout) {
  ASSERT_EQ(setenv("KILN_CONV_WINOGRAD", "1", 1), 0);
  auto graph = WinogradConvModel();
  PlanCache cache(graph, CompileOptions{}, 16);
  std::vector<int64_t> layouts_packed_at;  // batch sizes whose plan packed more bytes
  size_t packed_bytes = 0;
  for (int64_t batch : {1, 2, 32, 4, 64, 8, 3, 16, 128, 1, 32}) {
    auto plan = cache.Get({Shape{batch, 16, 12, 12}});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const size_t bytes = cache.packed_constants().bytes();
    EXPECT_GT(bytes, 0u);
    if (bytes > packed_bytes && packed_bytes > 0) layouts_packed_at.push_back(batch);
    packed_bytes = bytes;
    ASSERT_EQ(setenv("KILN_CONV_WINOGRAD", "0", 1), 0);
    auto direct = CompiledPlan::Compile(graph, {Shape{batch, 16, 12, 12}});
    ASSERT_EQ(setenv("KILN_CONV_WINOGRAD", "1", 1), 0);
    ASSERT_TRUE(direct.ok()) << direct.status();
    const Tensor x = RandomFloats(Shape{batch, 16, 12, 12}, 20 + static_cast<uint32_t>(batch));
    std::vector<Tensor> got, want;
    ASSERT_TRUE((*plan)->Run({x}, &got).ok());
    ASSERT_TRUE((*direct)->Run({x}, &want).ok());
    float largest = 0;
    for (float v : want[0].span<float>()) largest = std::max(largest, std::abs(v));
    for (int64_t i = 0; i < want[0].num_elements(); ++i) {
      ASSERT_NEAR(got[0].data<float>()[i], want[0].data<float>()[i], 1e-5f * largest)
          << "batch " << batch << " at " << i;
    }
  }
  ASSERT_EQ(unsetenv("KILN_CONV_WINOGRAD"), 0);
  // Batch 1's layout first; at most 2 more, whatever the 11 plans asked for.
  EXPECT_LE(layouts_packed_at.size(), 2u);
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core) {
    // Batch 1's layout does not serve every batch size (here batch 2 packs the second, which
    // serves the rest). With one layout per node, those plans ran direct.
    EXPECT_FALSE(layouts_packed_at.empty());
  } else {
    EXPECT_TRUE(layouts_packed_at.empty());
  }
}

TEST(KernelLifecycleTest, InvalidAttributeFailsAtCreateNamingTheNode) {
  auto graph = ConvMatMulModel({{"strides", std::vector<int64_t>{0, 1}}});
  auto plan = CompiledPlan::Compile(graph, {Shape{2, 8, 10, 10}});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("creating"));
  EXPECT_THAT(plan.status().message(), HasSubstr("conv1"));
  EXPECT_THAT(plan.status().message(), HasSubstr("strides must be positive"));

  // Create alone rejects it: no shapes are needed to see it.
  const ir::Node* conv = nullptr;
  for (const ir::Node& n : graph->nodes()) conv = n.op == "Conv" ? &n : conv;
  ASSERT_NE(conv, nullptr);
  CreatedKernels store;
  auto created = store.GetOrCreate(graph, *conv, [&] {
    kernels::CreateContext ctx;
    ctx.node = conv;
    ctx.inputs.resize(conv->inputs.size());
    return ctx;
  });
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("conv1"));
  EXPECT_EQ(store.creates(), 0);
}

TEST(KernelLifecycleTest, UnknownAutoPadFailsAtCreate) {
  auto graph = ConvMatMulModel({{"auto_pad", std::string("SOMETIMES")}});
  auto plan = CompiledPlan::Compile(graph, {Shape{1, 8, 10, 10}});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("creating"));
  EXPECT_THAT(plan.status().message(), HasSubstr("auto_pad"));
}

}  // namespace
}  // namespace kiln::exec
