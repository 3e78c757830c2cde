// Counts heap allocations (by replacing operator new) to prove that a run of a static plan
// allocates nothing once its run state is warm.
#include <gtest/gtest.h>

#include "../testing/alloc_counter.h"
#include "kiln/exec/plan.h"
#include "kiln/exec/plan_cache.h"
#include "test_kernels.h"

namespace kiln::exec {
namespace {

using testing::AddOp;
using testing::Floats;
using testing::FloatInput;

TEST(AllocationTest, StaticPlanRunsWithoutHeapAllocations) {
  ir::Graph g;
  const auto x = FloatInput(g, "x", {64});
  const auto y = FloatInput(g, "y", {64});
  ir::ValueId v = AddOp(g, "Add", {x, y});
  for (int i = 0; i < 20; ++i) v = AddOp(g, i % 2 ? "Relu" : "Scale", {v}, {{"factor", 0.5f}});
  const auto c = g.AddConstant("c", Floats(std::vector<float>(64, 1.0f), {64}));
  g.outputs = {AddOp(g, "Add", {v, c}), AddOp(g, "Relu", {v})};
  PlanCache cache(std::make_shared<const ir::Graph>(g), {}, 4);
  std::vector<Shape> shapes = {Shape{64}, Shape{64}};
  auto plan = cache.Get(shapes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Tensor> inputs = {Floats(std::vector<float>(64, 1.0f), {64}),
                                Floats(std::vector<float>(64, 2.0f), {64})};
  std::vector<Tensor> outputs;
  ASSERT_TRUE((*plan)->Run(inputs, &outputs).ok());  // warms the run-state pool

  alloc_testing::AllocationCount count;
  absl::Status status;
  for (int run = 0; run < 100 && status.ok(); ++run) {
    auto cached = cache.Get(shapes);  // the lookup is part of a run
    status = (*cached)->Run(inputs, &outputs);
  }
  count.Stop();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(count.total(), 0);
  EXPECT_FLOAT_EQ(outputs[0].data<float>()[0], 3.0f * 0.5f * 0.5f * 0.5f * 0.5f * 0.5f *
                                                       0.5f * 0.5f * 0.5f * 0.5f * 0.5f + 1.0f);
}

}  // namespace
}  // namespace kiln::exec
