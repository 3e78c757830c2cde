#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/exec/plan.h"
#include "kiln/exec/plan_cache.h"
#include "test_kernels.h"

namespace kiln::exec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::AddOp;
using testing::Floats;
using testing::FloatInput;
using testing::ToVector;

std::shared_ptr<const ir::Graph> Share(ir::Graph g) {
  return std::make_shared<const ir::Graph>(std::move(g));
}

TEST(ExecTest, RunsAChain) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {-1});
  const auto y = FloatInput(g, "y", {-1});
  const auto sum = AddOp(g, "Add", {x, y});
  const auto relu = AddOp(g, "Relu", {sum});
  g.outputs = {AddOp(g, "Scale", {relu}, {{"factor", 2.0f}})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{4}, Shape{4}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*plan)->Run({Floats({1, -2, 3, -4}, {4}), Floats({1, 1, 1, 1}, {4})}, &out).ok());
  EXPECT_THAT(ToVector(out[0]), ElementsAre(4, 0, 8, 0));
  EXPECT_EQ((*plan)->stats().steps, 3);
}

TEST(ExecTest, ArenaReusesMemoryOfDeadValues) {
  ir::Graph g;
  ir::ValueId v = FloatInput(g, "x", {1000});
  for (int i = 0; i < 10; ++i) v = AddOp(g, "Scale", {v}, {{"factor", 1.0f}});
  g.outputs = {v};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{1000}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PlanStats& s = (*plan)->stats();
  // 9 intermediates and 10 scratch buffers of 4000 bytes; at most 3 are live at once.
  EXPECT_LE(s.arena_bytes, 3 * 4032u);
  EXPECT_GE(s.unshared_bytes, 19 * 4000u);
  std::vector<Tensor> out;
  ASSERT_TRUE((*plan)->Run({Tensor::Zeros(DType::kFloat32, Shape{1000})}, &out).ok());
}

TEST(ExecTest, ElementwiseChainRunsInPlace) {
  ir::Graph g;
  ir::ValueId x = FloatInput(g, "x", {256});
  ir::ValueId v = AddOp(g, "Scale", {x}, {{"factor", -1.0f}});  // into the arena
  for (int i = 0; i < 5; ++i) v = AddOp(g, "Relu", {v});
  g.outputs = {AddOp(g, "Scale", {v}, {{"factor", 3.0f}})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{256}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().in_place_outputs, 5);  // every Relu reuses its input
  std::vector<float> in(256);
  for (int i = 0; i < 256; ++i) in[i] = static_cast<float>(i % 7) - 3.0f;
  std::vector<Tensor> out;
  ASSERT_TRUE((*plan)->Run({Floats(in, {256})}, &out).ok());
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(out[0].data<float>()[i], std::max(0.0f, -in[i]) * 3.0f) << i;
  }
}

TEST(ExecTest, InputsAreNeverOverwrittenInPlace) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {3});
  g.outputs = {AddOp(g, "Scale", {AddOp(g, "Relu", {x})}, {{"factor", 1.0f}})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{3}});
  ASSERT_TRUE(plan.ok());
  Tensor input = Floats({-1, 2, -3}, {3});
  std::vector<Tensor> out;
  ASSERT_TRUE((*plan)->Run({input}, &out).ok());
  EXPECT_THAT(ToVector(input), ElementsAre(-1, 2, -3));
  EXPECT_THAT(ToVector(out[0]), ElementsAre(0, 2, 0));
}

TEST(ExecTest, FoldsNodesWithConstantInputs) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {2});
  const auto c = g.AddConstant("c", Floats({5, 6}, {2}));
  const auto counted = AddOp(g, "Count", {c});  // constant in, folded at compile time
  g.outputs = {AddOp(g, "Add", {x, counted})};
  testing::CountCalls() = 0;
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().folded_nodes, 1);
  EXPECT_EQ((*plan)->stats().steps, 1);
  EXPECT_EQ(testing::CountCalls().load(), 1);
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*plan)->Run({Floats({1, 2}, {2})}, &out).ok());
  EXPECT_EQ(testing::CountCalls().load(), 1);
  EXPECT_THAT(ToVector(out[0]), ElementsAre(6, 8));
}

TEST(ExecTest, FoldingCanBeDisabled) {
  ir::Graph g;
  const auto c = g.AddConstant("c", Floats({5}, {1}));
  FloatInput(g, "unused", {1});
  g.outputs = {AddOp(g, "Count", {c})};
  CompileOptions options;
  options.fold_constants = false;
  auto plan = CompiledPlan::Compile(Share(g), {Shape{1}}, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->stats().folded_nodes, 0);
  EXPECT_EQ((*plan)->stats().steps, 1);
}

TEST(ExecTest, FoldsShapeComputationsOnceShapesAreKnown) {
  if (kernels::KernelRegistry::Global().Find("", "Shape") == nullptr) {
    GTEST_SKIP() << "no Shape kernel linked";
  }
  ir::Graph g;
  const auto x = FloatInput(g, "x", {-1, 3});
  const ir::NodeId shape = g.AddNode("Shape", {x}, 1);
  g.outputs = {g.node(shape).outputs[0]};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{7, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().folded_nodes, 1);
  EXPECT_EQ((*plan)->stats().steps, 0);
  std::vector<Tensor> out;
  ASSERT_TRUE((*plan)->Run({Tensor::Zeros(DType::kFloat32, Shape{7, 3})}, &out).ok());
  ASSERT_EQ(out[0].dtype(), DType::kInt64);
  EXPECT_EQ(out[0].data<int64_t>()[0], 7);
}

TEST(ExecTest, PrunesNodesNoOutputNeeds) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {2});
  AddOp(g, "Relu", {x});  // dead
  g.outputs = {AddOp(g, "Scale", {x}, {{"factor", 2.0f}})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->stats().pruned_nodes, 1);
  EXPECT_EQ((*plan)->stats().steps, 1);
}

TEST(ExecTest, DataDependentShapesArePreparedAtRunTime) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {5});
  const auto pos = AddOp(g, "Positives", {x});
  g.outputs = {AddOp(g, "Scale", {AddOp(g, "Relu", {pos})}, {{"factor", 10.0f}})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{5}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().runtime_prepared_steps, 2);
  std::vector<Tensor> out;
  ASSERT_TRUE((*plan)->Run({Floats({1, -1, 2, -2, 3}, {5})}, &out).ok());
  EXPECT_THAT(ToVector(out[0]), ElementsAre(10, 20, 30));
  ASSERT_TRUE((*plan)->Run({Floats({-1, -1, 4, -2, -3}, {5})}, &out).ok());
  EXPECT_THAT(ToVector(out[0]), ElementsAre(40));
}

TEST(ExecTest, OutputsMayBeInputsAndConstantsAndRepeated) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {2});
  const auto c = g.AddConstant("c", Floats({7, 8}, {2}));
  const auto r = AddOp(g, "Relu", {x});
  g.outputs = {x, c, r, r};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*plan)->Run({Floats({-1, 1}, {2})}, &out).ok());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_THAT(ToVector(out[0]), ElementsAre(-1, 1));
  EXPECT_THAT(ToVector(out[1]), ElementsAre(7, 8));
  EXPECT_THAT(ToVector(out[2]), ElementsAre(0, 1));
  EXPECT_THAT(ToVector(out[3]), ElementsAre(0, 1));
}

TEST(ExecTest, OutputsDoNotAliasBetweenRuns) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {2});
  g.outputs = {AddOp(g, "Relu", {x})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}});
  ASSERT_TRUE(plan.ok());
  std::vector<Tensor> first, second;
  ASSERT_TRUE((*plan)->Run({Floats({1, 2}, {2})}, &first).ok());
  ASSERT_TRUE((*plan)->Run({Floats({3, 4}, {2})}, &second).ok());
  EXPECT_THAT(ToVector(first[0]), ElementsAre(1, 2));
  EXPECT_THAT(ToVector(second[0]), ElementsAre(3, 4));
}

TEST(ExecTest, ErrorsNameTheInput) {
  ir::Graph g;
  const auto x = FloatInput(g, "pixels", {2});
  g.outputs = {AddOp(g, "Relu", {x})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}});
  ASSERT_TRUE(plan.ok());
  std::vector<Tensor> out;
  absl::Status s = (*plan)->Run({Floats({1, 2, 3}, {3})}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("pixels"));
  EXPECT_THAT(s.message(), HasSubstr("float[2]"));
}

TEST(ExecTest, PrepareErrorsNameTheNodeAndShapes) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {2});
  const auto y = FloatInput(g, "y", {3});
  const ir::NodeId n = g.AddNode("Add", {x, y}, 1, {}, "bad_add", "test");
  g.outputs = {g.node(n).outputs[0]};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}, Shape{3}});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("bad_add"));
  EXPECT_THAT(plan.status().message(), HasSubstr("float[2], float[3]"));
}

TEST(ExecTest, MissingKernelIsUnimplemented) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {2});
  const ir::NodeId n = g.AddNode("NoSuchOp", {x}, 1, {}, "mystery", "test");
  g.outputs = {g.node(n).outputs[0]};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(plan.status().message(), HasSubstr("test::NoSuchOp"));
}

TEST(ExecTest, IndependentBranchesRunInParallel) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {2});
  const auto a = AddOp(g, "Rendezvous", {AddOp(g, "Relu", {x})});
  const auto b = AddOp(g, "Rendezvous", {AddOp(g, "Scale", {x}, {{"factor", 2.0f}})});
  g.outputs = {AddOp(g, "Add", {a, b})};
  ThreadPool pool(2);
  CompileOptions options;
  options.inter_op_threads = 2;
  options.inter_op_pool = &pool;
  auto plan = CompiledPlan::Compile(Share(g), {Shape{2}}, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats().parallel_levels, 3);
  testing::RendezvousArrivals() = 0;
  std::vector<Tensor> out;
  absl::Status s = (*plan)->Run({Floats({-1, 3}, {2})}, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(ToVector(out[0]), ElementsAre(-2, 9));
}

TEST(ExecTest, ParallelPlanKeepsBranchMemorySeparate) {
  // Two wide branches of the same level must not share arena memory.
  ir::Graph g;
  const auto x = FloatInput(g, "x", {64});
  ir::ValueId a = AddOp(g, "Scale", {x}, {{"factor", 2.0f}});
  ir::ValueId b = AddOp(g, "Scale", {x}, {{"factor", 3.0f}});
  for (int i = 0; i < 4; ++i) {
    a = AddOp(g, "Scale", {a}, {{"factor", 1.0f}});
    b = AddOp(g, "Relu", {b});
  }
  g.outputs = {AddOp(g, "Add", {a, b})};
  ThreadPool pool(2);
  CompileOptions options;
  options.inter_op_threads = 3;
  options.inter_op_pool = &pool;
  auto plan = CompiledPlan::Compile(Share(g), {Shape{64}}, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<float> in(64);
  for (int i = 0; i < 64; ++i) in[i] = static_cast<float>(i) - 32;
  for (int run = 0; run < 50; ++run) {
    std::vector<Tensor> out;
    ASSERT_TRUE((*plan)->Run({Floats(in, {64})}, &out).ok());
    for (int i = 0; i < 64; ++i) {
      ASSERT_EQ(out[0].data<float>()[i], 2 * in[i] + std::max(0.0f, 3 * in[i])) << i;
    }
  }
}

TEST(ExecTest, ConcurrentRunsOfOnePlan) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {128});
  ir::ValueId v = AddOp(g, "Scale", {x}, {{"factor", 2.0f}});
  v = AddOp(g, "Relu", {v});
  v = AddOp(g, "Add", {v, x});
  g.outputs = {AddOp(g, "Scale", {v}, {{"factor", 0.5f}})};
  auto plan = CompiledPlan::Compile(Share(g), {Shape{128}});
  ASSERT_TRUE(plan.ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Tensor> out;
      for (int run = 0; run < 200; ++run) {
        const float base = static_cast<float>(t * 1000 + run);
        std::vector<float> in(128, base);
        in[0] = -base;
        if (!(*plan)->Run({Floats(in, {128})}, &out).ok()) {
          ++failures;
          continue;
        }
        // relu(2x) + x, halved: 1.5x for x >= 0, 0.5x below.
        if (out[0].data<float>()[5] != 1.5f * base || out[0].data<float>()[0] != -0.5f * base) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(PlanCacheTest, CompilesOncePerShapeAndEvictsLeastRecentlyUsed) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {-1});
  g.outputs = {AddOp(g, "Relu", {x})};
  PlanCache cache(Share(g), {}, 2);
  bool compiled = false;
  ASSERT_TRUE(cache.Get({Shape{1}}, &compiled).ok());
  EXPECT_TRUE(compiled);
  ASSERT_TRUE(cache.Get({Shape{1}}, &compiled).ok());
  EXPECT_FALSE(compiled);
  ASSERT_TRUE(cache.Get({Shape{2}}, &compiled).ok());
  ASSERT_TRUE(cache.Get({Shape{1}}, &compiled).ok());  // 1 is now the most recent
  ASSERT_TRUE(cache.Get({Shape{3}}, &compiled).ok());  // evicts 2
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_EQ(cache.compiles(), 3);
  auto shapes = cache.CachedShapes();
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0][0], Shape{3});
  EXPECT_EQ(shapes[1][0], Shape{1});
  ASSERT_TRUE(cache.Get({Shape{2}}, &compiled).ok());
  EXPECT_TRUE(compiled);
}

TEST(PlanCacheTest, ConcurrentFirstRequestsCompileOnce) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {-1});
  g.outputs = {AddOp(g, "Relu", {x})};
  PlanCache cache(Share(g), {}, 4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] { EXPECT_TRUE(cache.Get({Shape{16}}).ok()); });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.compiles(), 1);
}

}  // namespace
}  // namespace kiln::exec
