// If, Loop and Scan (ONNX semantics) run through the executor's subgraph runner.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/exec/plan.h"
#include "test_kernels.h"

namespace kiln::exec {
namespace {

using ::testing::ElementsAre;
using testing::AddOp;
using testing::Floats;
using testing::FloatInput;
using testing::ToVector;

std::shared_ptr<const ir::Graph> Share(ir::Graph g) {
  return std::make_shared<const ir::Graph>(std::move(g));
}

absl::StatusOr<std::vector<Tensor>> CompileAndRun(const ir::Graph& g,
                                                  const std::vector<Tensor>& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  auto plan = CompiledPlan::Compile(Share(g), shapes);
  if (!plan.ok()) return plan.status();
  std::vector<Tensor> out;
  absl::Status s = (*plan)->Run(inputs, &out);
  if (!s.ok()) return s;
  return out;
}

TEST(ControlFlowTest, IfRunsTheChosenBranchWithCapturedValues) {
  ir::Graph g;
  const auto cond = g.AddValue("cond", ir::TensorType::Of(DType::kBool, {}));
  g.inputs.push_back(cond);
  const auto x = FloatInput(g, "x", {3});
  const auto doubled = AddOp(g, "Scale", {x}, {{"factor", 2.0f}});
  auto then_branch = std::make_shared<ir::Graph>();
  then_branch->name = "then";
  {
    const auto outer = then_branch->AddValue(g.value(doubled).name);
    then_branch->captures.push_back({outer, g.value(doubled).name});
    then_branch->outputs = {AddOp(*then_branch, "Relu", {outer})};
  }
  auto else_branch = std::make_shared<ir::Graph>();
  else_branch->name = "else";
  {
    const auto outer = else_branch->AddValue("x");
    else_branch->captures.push_back({outer, "x"});
    else_branch->outputs = {AddOp(*else_branch, "Scale", {outer}, {{"factor", -1.0f}})};
  }
  const ir::NodeId n =
      g.AddNode("If", {cond}, 1, {{"then_branch", then_branch}, {"else_branch", else_branch}});
  g.outputs = {g.node(n).outputs[0]};
  ASSERT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);

  auto yes = CompileAndRun(g, {Tensor::Scalar<bool>(true), Floats({-1, 2, 3}, {3})});
  ASSERT_TRUE(yes.ok()) << yes.status();
  EXPECT_THAT(ToVector((*yes)[0]), ElementsAre(0, 4, 6));
  auto no = CompileAndRun(g, {Tensor::Scalar<bool>(false), Floats({-1, 2, 3}, {3})});
  ASSERT_TRUE(no.ok()) << no.status();
  EXPECT_THAT(ToVector((*no)[0]), ElementsAre(1, -2, -3));
}

TEST(ControlFlowTest, LoopCarriesStateAndStacksScanOutputs) {
  // for i < M: acc = acc + x; scan output: acc after each step.
  ir::Graph g;
  const auto trips = g.AddValue("M", ir::TensorType::Of(DType::kInt64, {}));
  g.inputs.push_back(trips);
  FloatInput(g, "x", {2});
  const auto acc0 = g.AddConstant("acc0", Floats({0, 0}, {2}));
  auto body = std::make_shared<ir::Graph>();
  body->name = "body";
  const auto iter = body->AddValue("iter", ir::TensorType::Of(DType::kInt64, {}));
  const auto cond_in = body->AddValue("cond_in", ir::TensorType::Of(DType::kBool, {}));
  const auto acc_in = body->AddValue("acc_in", ir::TensorType::Of(DType::kFloat32, {2}));
  body->inputs = {iter, cond_in, acc_in};
  const auto outer_x = body->AddValue("x");
  body->captures.push_back({outer_x, "x"});
  const auto acc_out = AddOp(*body, "Add", {acc_in, outer_x});
  const auto scan_out = AddOp(*body, "Scale", {acc_out}, {{"factor", 1.0f}});
  // Importers carry the declared type: it shapes the scan output of a zero-trip loop.
  body->value(scan_out).type = ir::TensorType::Of(DType::kFloat32, {2});
  body->outputs = {cond_in, acc_out, scan_out};
  const ir::NodeId n = g.AddNode("Loop", {trips, ir::kNoValue, acc0}, 2, {{"body", body}});
  g.outputs = {g.node(n).outputs[0], g.node(n).outputs[1]};
  ASSERT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);

  auto out = CompileAndRun(g, {Tensor::Scalar<int64_t>(3), Floats({1, 10}, {2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(ToVector((*out)[0]), ElementsAre(3, 30));
  EXPECT_EQ((*out)[1].shape(), (Shape{3, 2}));
  EXPECT_THAT(ToVector((*out)[1]), ElementsAre(1, 10, 2, 20, 3, 30));

  auto none = CompileAndRun(g, {Tensor::Scalar<int64_t>(0), Floats({1, 10}, {2})});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(ToVector((*none)[0]), ElementsAre(0, 0));
  EXPECT_EQ((*none)[1].shape(), (Shape{0, 2}));
}

TEST(ControlFlowTest, LoopWithoutBoundsIsRejected) {
  ir::Graph g;
  const auto acc0 = FloatInput(g, "a", {1});
  auto body = std::make_shared<ir::Graph>();
  const auto iter = body->AddValue("iter", ir::TensorType::Of(DType::kInt64, {}));
  const auto cond_in = body->AddValue("cond_in", ir::TensorType::Of(DType::kBool, {}));
  const auto a = body->AddValue("a_in", ir::TensorType::Of(DType::kFloat32, {1}));
  body->inputs = {iter, cond_in, a};
  body->outputs = {cond_in, a};
  const ir::NodeId n = g.AddNode("Loop", {ir::kNoValue, ir::kNoValue, acc0}, 1, {{"body", body}});
  g.outputs = {g.node(n).outputs[0]};
  auto out = CompileAndRun(g, {Floats({1}, {1})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), ::testing::HasSubstr("never ends"));
}

TEST(ControlFlowTest, ScanComputesRunningSumsInBothDirections) {
  // state = state + row; scan output = state; over the rows of a [3, 2] input.
  for (int64_t direction : {0, 1}) {
    ir::Graph g;
    const auto init = FloatInput(g, "init", {2});
    const auto xs = FloatInput(g, "xs", {3, 2});
    auto body = std::make_shared<ir::Graph>();
    const auto s_in = body->AddValue("s_in", ir::TensorType::Of(DType::kFloat32, {2}));
    const auto row = body->AddValue("row", ir::TensorType::Of(DType::kFloat32, {2}));
    body->inputs = {s_in, row};
    const auto s_out = AddOp(*body, "Add", {s_in, row});
    body->outputs = {s_out, AddOp(*body, "Scale", {s_out}, {{"factor", 1.0f}})};
    const ir::NodeId n = g.AddNode(
        "Scan", {init, xs}, 2,
        {{"body", body},
         {"num_scan_inputs", int64_t{1}},
         {"scan_input_directions", std::vector<int64_t>{direction}}});
    g.outputs = {g.node(n).outputs[0], g.node(n).outputs[1]};
    auto out = CompileAndRun(g, {Floats({0, 0}, {2}), Floats({1, 2, 3, 4, 5, 6}, {3, 2})});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_THAT(ToVector((*out)[0]), ElementsAre(9, 12));
    if (direction == 0) {
      EXPECT_THAT(ToVector((*out)[1]), ElementsAre(1, 2, 4, 6, 9, 12));
    } else {
      EXPECT_THAT(ToVector((*out)[1]), ElementsAre(5, 6, 8, 10, 9, 12));
    }
  }
}

TEST(ControlFlowTest, ScanAlongAnotherAxis) {
  // Scan the columns of a [2, 3] input (axis 1) and stack outputs along axis 1.
  ir::Graph g;
  const auto init = FloatInput(g, "init", {2});
  const auto xs = FloatInput(g, "xs", {2, 3});
  auto body = std::make_shared<ir::Graph>();
  const auto s_in = body->AddValue("s_in", ir::TensorType::Of(DType::kFloat32, {2}));
  const auto col = body->AddValue("col", ir::TensorType::Of(DType::kFloat32, {2}));
  body->inputs = {s_in, col};
  const auto s_out = AddOp(*body, "Add", {s_in, col});
  body->outputs = {s_out, AddOp(*body, "Scale", {col}, {{"factor", 2.0f}})};
  const ir::NodeId n =
      g.AddNode("Scan", {init, xs}, 2,
                {{"body", body},
                 {"num_scan_inputs", int64_t{1}},
                 {"scan_input_axes", std::vector<int64_t>{1}},
                 {"scan_output_axes", std::vector<int64_t>{1}}});
  g.outputs = {g.node(n).outputs[0], g.node(n).outputs[1]};
  auto out = CompileAndRun(g, {Floats({0, 0}, {2}), Floats({1, 2, 3, 4, 5, 6}, {2, 3})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(ToVector((*out)[0]), ElementsAre(6, 15));
  EXPECT_EQ((*out)[1].shape(), (Shape{2, 3}));
  EXPECT_THAT(ToVector((*out)[1]), ElementsAre(2, 4, 6, 8, 10, 12));
}

}  // namespace
}  // namespace kiln::exec
