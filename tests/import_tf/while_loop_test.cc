// TF1 while loops (tf.while_loop in graph mode): GraphDefs written node for node as TF1's
// control_flow_ops.WhileContext writes them (Enter with frame_name/is_constant/
// parallel_iterations, Merge(Enter, NextIteration), LoopCond, Switch with its _class
// colocation attr, Identity(Switch:1), constants tied to the frame by a control edge from the
// Merge (condition) or the Identity (body), Exit(Switch:0), one Enter(is_constant=true) per outer
// tensor read inside), saved as SavedModels and run through the real importer, plan compiler
// and kernels. The expected values are what TensorFlow computes (worked by hand below).
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kiln/import/saved_model.h"
#include "kiln/runtime/model.h"
#include "test_util.h"
#include "tf_graph_builder.h"

namespace kiln::import::tf {
namespace {

using testing::BoolAttr;
using testing::GraphBuilder;
using testing::IntAttr;
using testing::SignatureSpec;
using testing::StringAttr;
using testing::TypeAttr;

const auto kI = DType::kInt32;
const auto kF = DType::kFloat32;

// The nodes of one tf.while_loop frame, named as TF names them under `scope` ("while",
// "while/while" for a loop in a loop body).
class WhileWriter {
 public:
  WhileWriter(GraphBuilder& b, std::string scope)
      : b_(b), scope_(std::move(scope)), frame_(scope_ + "/while_context") {}

  std::string N(const std::string& name) const { return scope_ + "/" + name; }
  const std::string& frame() const { return frame_; }

  // A loop variable k: Enter_k -> Merge_k(Enter_k, NextIteration_k). Returns the Merge.
  std::string Var(int k, const std::string& initial, DType t) {
    const std::string suffix = k == 0 ? "" : "_" + std::to_string(k);
    Enter("Enter" + suffix, initial, t, false);
    return b_.Op("Merge", N("Merge" + suffix), {N("Enter" + suffix), N("NextIteration" + suffix)},
                 {{"T", TypeAttr(t)}, {"N", IntAttr(2)}});
  }
  std::string Enter(const std::string& name, const std::string& input, DType t, bool constant) {
    return b_.Op("Enter", N(name), {input},
                 {{"T", TypeAttr(t)},
                  {"frame_name", StringAttr(frame_)},
                  {"is_constant", BoolAttr(constant)},
                  {"parallel_iterations", IntAttr(10)}});
  }
  std::string LoopCond(const std::string& pred) { return b_.Op("LoopCond", N("LoopCond"), {pred}); }
  // Switch_k on the LoopCond; Identity_k(Switch_k:1) is what the body reads; returns it.
  std::string Switch(int k, DType t) {
    const std::string suffix = k == 0 ? "" : "_" + std::to_string(k);
    tensorflow::AttrValue colocate;
    colocate.mutable_list()->add_s("loc:@" + N("Merge" + suffix));
    b_.Op("Switch", N("Switch" + suffix), {N("Merge" + suffix), N("LoopCond")},
          {{"T", TypeAttr(t)}, {"_class", colocate}});
    return b_.Op("Identity", N("Identity" + suffix), {N("Switch" + suffix) + ":1"},
                 {{"T", TypeAttr(t)}});
  }
  // NextIteration_k(value) and Exit_k(Switch_k:0); returns the Exit.
  std::string Close(int k, const std::string& value, DType t, bool with_exit = true) {
    const std::string suffix = k == 0 ? "" : "_" + std::to_string(k);
    b_.Op("NextIteration", N("NextIteration" + suffix), {value}, {{"T", TypeAttr(t)}});
    if (!with_exit) return "";
    return b_.Op("Exit", N("Exit" + suffix), {N("Switch" + suffix)}, {{"T", TypeAttr(t)}});
  }
  // A constant created inside the loop: TF ties it to the frame with a control edge from the
  // control pivot (the first Merge in the condition, the first Identity in the body).
  std::string Const(const std::string& name, const Tensor& value, const std::string& pivot) {
    b_.Const(N(name), value);
    b_.graph().mutable_node(b_.graph().node_size() - 1)->add_input("^" + pivot);
    return N(name);
  }

 private:
  GraphBuilder& b_;
  std::string scope_;
  std::string frame_;
};

std::string Binary(GraphBuilder& b, const std::string& op, const std::string& name,
                   const std::string& x, const std::string& y, DType t) {
  return b.Op(op, name, {x, y}, {{"T", TypeAttr(t)}});
}

// i = 0; while i < n: i = i + 1   (tf.while_loop(lambda i: i < n, lambda i: i + 1, [0]))
// n: a graph input, or the constant 7 (then the whole loop is constant).
void WriteCounter(GraphBuilder& b, bool with_exit, bool constant_bound = false) {
  if (constant_bound) {
    b.Const("n", Tensor::Scalar<int32_t>(7));
  } else {
    b.Placeholder("n", kI, {});
  }
  b.Const("Const", Tensor::Scalar<int32_t>(0));
  WhileWriter w(b, "while");
  const std::string i = w.Var(0, "Const", kI);
  w.Enter("Less/Enter", "n", kI, true);
  Binary(b, "Less", w.N("Less"), i, w.N("Less/Enter"), kI);
  w.LoopCond(w.N("Less"));
  const std::string body_i = w.Switch(0, kI);
  w.Const("add/y", Tensor::Scalar<int32_t>(1), body_i);
  Binary(b, "AddV2", w.N("add"), body_i, w.N("add/y"), kI);
  w.Close(0, w.N("add"), kI, with_exit);
}

SignatureSpec Signature(std::map<std::string, SignatureSpec::Tensor> inputs,
                        std::map<std::string, SignatureSpec::Tensor> outputs) {
  SignatureSpec sig;
  sig.inputs = std::move(inputs);
  sig.outputs = std::move(outputs);
  return sig;
}

absl::StatusOr<ImportedModel> Save(const std::string& name, GraphBuilder& b,
                                   const SignatureSpec& sig) {
  const std::string dir = testing::TempDir(name);
  KILN_RETURN_IF_ERROR(testing::WriteSavedModel(dir, b, {sig}));
  return ImportSavedModel(dir);
}

int32_t I32(const Tensor& t) { return *t.data<int32_t>(); }

TEST(TfWhileLoopTest, CounterRunsUntilTheConditionFails) {
  GraphBuilder b;
  WriteCounter(b, true);
  auto model = Save("while_counter", b,
                    Signature({{"n", {"n:0", kI, {}}}}, {{"i", {"while/Exit:0", kI, {}}}}));
  ASSERT_TRUE(model.ok()) << model.status();
  // TF: n = 5 -> 5; the condition is tested before the first trip, so n = 0 or n < 0 -> 0.
  for (auto [n, want] : std::vector<std::pair<int32_t, int32_t>>{{5, 5}, {1, 1}, {0, 0}, {-3, 0}}) {
    auto out = testing::RunSignature(model->signatures[0], {Tensor::Scalar<int32_t>(n)});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(I32((*out)[0]), want) << "n = " << n;
  }
}

// i, acc = 0, zeros_like(x); while i < n: i, acc = i + 1, acc + x * cast(i, float)
TEST(TfWhileLoopTest, AccumulatesATensorOverTwoLoopVariables) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Placeholder("n", kI, {});
  b.Const("Const", Tensor::Scalar<int32_t>(0));
  b.Op("ZerosLike", "zeros_like", {"x"}, {{"T", TypeAttr(kF)}});
  WhileWriter w(b, "while");
  const std::string i = w.Var(0, "Const", kI);
  w.Var(1, "zeros_like", kF);
  w.Enter("Less/Enter", "n", kI, true);
  Binary(b, "Less", w.N("Less"), i, w.N("Less/Enter"), kI);
  w.LoopCond(w.N("Less"));
  const std::string body_i = w.Switch(0, kI);
  const std::string body_acc = w.Switch(1, kF);
  w.Const("add/y", Tensor::Scalar<int32_t>(1), body_i);
  Binary(b, "AddV2", w.N("add"), body_i, w.N("add/y"), kI);
  b.Op("Cast", w.N("Cast"), {body_i},
       {{"SrcT", TypeAttr(kI)}, {"DstT", TypeAttr(kF)}, {"Truncate", BoolAttr(false)}});
  w.Enter("mul/Enter", "x", kF, true);
  Binary(b, "Mul", w.N("mul"), w.N("mul/Enter"), w.N("Cast"), kF);
  Binary(b, "AddV2", w.N("add_1"), body_acc, w.N("mul"), kF);
  w.Close(0, w.N("add"), kI);
  w.Close(1, w.N("add_1"), kF);
  auto model =
      Save("while_accumulate", b,
           Signature({{"n", {"n:0", kI, {}}}, {"x", {"x:0", kF, {-1}}}},
                     {{"acc", {"while/Exit_1:0", kF, {-1}}}, {"i", {"while/Exit:0", kI, {}}}}));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph& sig = model->signatures[0];
  ASSERT_EQ(sig.input_keys, (std::vector<std::string>{"n", "x"}));
  ASSERT_EQ(sig.output_keys, (std::vector<std::string>{"acc", "i"}));
  const Tensor x = Tensor::FromVector<float>({1, 2, -3});
  // TF: n = 4 -> acc = x * (0 + 1 + 2 + 3) = [6, 12, -18], i = 4; n = 0 -> zeros, i = 0.
  auto out = testing::RunSignature(sig, {Tensor::Scalar<int32_t>(4), x});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].num_elements(), 3);
  EXPECT_EQ(std::vector<float>((*out)[0].data<float>(), (*out)[0].data<float>() + 3),
            (std::vector<float>{6, 12, -18}));
  EXPECT_EQ(I32((*out)[1]), 4);
  out = testing::RunSignature(sig, {Tensor::Scalar<int32_t>(0), x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::vector<float>((*out)[0].data<float>(), (*out)[0].data<float>() + 3),
            (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(I32((*out)[1]), 0);
}

// w = 1.5 (outside the loop); i, v = 0, x; while i < 3: i, v = i + 1, v * (w * w).
// w * w reads only the loop invariant, so TF gives it a control edge from the body's pivot.
TEST(TfWhileLoopTest, LoopInvariantConstantIsReadEveryIteration) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Const("w", Tensor::Scalar<float>(1.5f));
  b.Const("Const", Tensor::Scalar<int32_t>(0));
  WhileWriter w(b, "while");
  const std::string i = w.Var(0, "Const", kI);
  w.Var(1, "x", kF);
  w.Const("Less/y", Tensor::Scalar<int32_t>(3), w.N("Merge"));
  Binary(b, "Less", w.N("Less"), i, w.N("Less/y"), kI);
  w.LoopCond(w.N("Less"));
  const std::string body_i = w.Switch(0, kI);
  const std::string body_v = w.Switch(1, kF);
  w.Const("add/y", Tensor::Scalar<int32_t>(1), body_i);
  Binary(b, "AddV2", w.N("add"), body_i, w.N("add/y"), kI);
  w.Enter("mul/Enter", "w", kF, true);
  Binary(b, "Mul", w.N("mul"), w.N("mul/Enter"), w.N("mul/Enter"), kF);
  b.graph().mutable_node(b.graph().node_size() - 1)->add_input("^" + body_i);
  Binary(b, "Mul", w.N("mul_1"), body_v, w.N("mul"), kF);
  w.Close(0, w.N("add"), kI);
  w.Close(1, w.N("mul_1"), kF);
  auto model = Save("while_invariant", b,
                    Signature({{"x", {"x:0", kF, {-1}}}}, {{"y", {"while/Exit_1:0", kF, {-1}}}}));
  ASSERT_TRUE(model.ok()) << model.status();
  // TF: x * 2.25^3 = x * 11.390625 (exact in float).
  auto out = testing::RunSignature(model->signatures[0], {Tensor::FromVector<float>({1, -2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::vector<float>((*out)[0].data<float>(), (*out)[0].data<float>() + 2),
            (std::vector<float>{11.390625f, -22.78125f}));
}

// i, acc = 0, 0
// while i < n:
//   j, a = 0, acc
//   while j < i: j, a = j + 1, a + step      (step: a graph input, entered through both frames)
//   i, acc = i + 1, a
// acc = step * (0 + 1 + ... + n-1)
void WriteNested(GraphBuilder& b) {
  b.Placeholder("n", kI, {});
  b.Placeholder("step", kI, {});
  b.Const("Const", Tensor::Scalar<int32_t>(0));
  b.Const("Const_1", Tensor::Scalar<int32_t>(0));
  WhileWriter outer(b, "while");
  const std::string i = outer.Var(0, "Const", kI);
  outer.Var(1, "Const_1", kI);
  outer.Enter("Less/Enter", "n", kI, true);
  Binary(b, "Less", outer.N("Less"), i, outer.N("Less/Enter"), kI);
  outer.LoopCond(outer.N("Less"));
  const std::string body_i = outer.Switch(0, kI);
  const std::string body_acc = outer.Switch(1, kI);
  const std::string j0 = outer.Const("Const", Tensor::Scalar<int32_t>(0), body_i);
  // The inner loop, built inside the outer body.
  WhileWriter inner(b, "while/while");
  const std::string j = inner.Var(0, j0, kI);
  inner.Var(1, body_acc, kI);
  inner.Enter("Less/Enter", body_i, kI, true);
  Binary(b, "Less", inner.N("Less"), j, inner.N("Less/Enter"), kI);
  inner.LoopCond(inner.N("Less"));
  const std::string inner_j = inner.Switch(0, kI);
  const std::string inner_a = inner.Switch(1, kI);
  inner.Const("add/y", Tensor::Scalar<int32_t>(1), inner_j);
  Binary(b, "AddV2", inner.N("add"), inner_j, inner.N("add/y"), kI);
  // `step` comes from the top level: an Enter into the outer frame, then one into the inner.
  outer.Enter("while/add_1/Enter", "step", kI, true);
  inner.Enter("add_1/Enter_1", outer.N("while/add_1/Enter"), kI, true);
  Binary(b, "AddV2", inner.N("add_1"), inner_a, inner.N("add_1/Enter_1"), kI);
  inner.Close(0, inner.N("add"), kI);
  inner.Close(1, inner.N("add_1"), kI);
  outer.Const("add/y", Tensor::Scalar<int32_t>(1), body_i);
  Binary(b, "AddV2", outer.N("add"), body_i, outer.N("add/y"), kI);
  outer.Close(0, outer.N("add"), kI);
  outer.Close(1, inner.N("Exit_1"), kI);
}

const SignatureSpec kNestedSignature =
    Signature({{"n", {"n:0", kI, {}}}, {"step", {"step:0", kI, {}}}},
              {{"acc", {"while/Exit_1:0", kI, {}}}, {"i", {"while/Exit:0", kI, {}}}});

TEST(TfWhileLoopTest, NestedLoopReadsTheOuterLoopAndAnInvariantOfBoth) {
  GraphBuilder b;
  WriteNested(b);
  auto model = Save("while_nested", b, kNestedSignature);
  ASSERT_TRUE(model.ok()) << model.status();
  // TF: n = 5, step = 3 -> acc = 3 * 10 = 30, i = 5; n = 1 -> the inner loop never runs, 0.
  for (auto [n, want] : std::vector<std::pair<int32_t, int32_t>>{{5, 30}, {1, 0}, {0, 0}}) {
    auto out = testing::RunSignature(model->signatures[0],
                                     {Tensor::Scalar<int32_t>(n), Tensor::Scalar<int32_t>(3)});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(I32((*out)[0]), want) << "n = " << n;
    EXPECT_EQ(I32((*out)[1]), std::max(n, 0)) << "n = " << n;
  }
}

// A tf.cond inside the loop body (v1 Switch/Merge on a predicate computed in the body):
// x = 1; for i in 0..n-1: x = x + 1 if i % 2 == 0 else x * 2.   n = 4: 2, 4, 5, 10.
TEST(TfWhileLoopTest, ConditionalInsideTheLoopBody) {
  GraphBuilder b;
  b.Placeholder("n", kI, {});
  b.Const("Const", Tensor::Scalar<int32_t>(0));
  b.Const("Const_1", Tensor::Scalar<float>(1.f));
  WhileWriter w(b, "while");
  const std::string i = w.Var(0, "Const", kI);
  w.Var(1, "Const_1", kF);
  w.Enter("Less/Enter", "n", kI, true);
  Binary(b, "Less", w.N("Less"), i, w.N("Less/Enter"), kI);
  w.LoopCond(w.N("Less"));
  const std::string body_i = w.Switch(0, kI);
  const std::string body_x = w.Switch(1, kF);
  w.Const("add/y", Tensor::Scalar<int32_t>(1), body_i);
  Binary(b, "AddV2", w.N("add"), body_i, w.N("add/y"), kI);
  w.Const("FloorMod/y", Tensor::Scalar<int32_t>(2), body_i);
  Binary(b, "FloorMod", w.N("FloorMod"), body_i, w.N("FloorMod/y"), kI);
  w.Const("Equal/y", Tensor::Scalar<int32_t>(0), body_i);
  Binary(b, "Equal", w.N("Equal"), w.N("FloorMod"), w.N("Equal/y"), kI);
  // tf.cond(pred, lambda: x + 1, lambda: x * 2) as TF1's CondContext writes it.
  const auto T = [&](DType t) { return GraphBuilder::Attrs{{"T", TypeAttr(t)}}; };
  b.Op("Switch", w.N("cond/Switch"), {w.N("Equal"), w.N("Equal")}, T(DType::kBool));
  b.Op("Identity", w.N("cond/switch_t"), {w.N("cond/Switch:1")}, T(DType::kBool));
  b.Op("Identity", w.N("cond/switch_f"), {w.N("cond/Switch")}, T(DType::kBool));
  b.Op("Identity", w.N("cond/pred_id"), {w.N("Equal")}, T(DType::kBool));
  b.Op("Switch", w.N("cond/add/Switch"), {body_x, w.N("cond/pred_id")}, T(kF));
  w.Const("cond/add/y", Tensor::Scalar<float>(1.f), w.N("cond/switch_t"));
  Binary(b, "AddV2", w.N("cond/add"), w.N("cond/add/Switch:1"), w.N("cond/add/y"), kF);
  b.Op("Switch", w.N("cond/mul/Switch"), {body_x, w.N("cond/pred_id")}, T(kF));
  w.Const("cond/mul/y", Tensor::Scalar<float>(2.f), w.N("cond/switch_f"));
  Binary(b, "Mul", w.N("cond/mul"), w.N("cond/mul/Switch"), w.N("cond/mul/y"), kF);
  b.Op("Merge", w.N("cond/Merge"), {w.N("cond/mul"), w.N("cond/add")},
       {{"T", TypeAttr(kF)}, {"N", IntAttr(2)}});
  w.Close(0, w.N("add"), kI);
  w.Close(1, w.N("cond/Merge"), kF);
  auto model = Save("while_cond", b,
                    Signature({{"n", {"n:0", kI, {}}}}, {{"x", {"while/Exit_1:0", kF, {}}}}));
  ASSERT_TRUE(model.ok()) << model.status();
  for (auto [n, want] : std::vector<std::pair<int32_t, float>>{{4, 10.f}, {3, 5.f}, {0, 1.f}}) {
    auto out = testing::RunSignature(model->signatures[0], {Tensor::Scalar<int32_t>(n)});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*(*out)[0].data<float>(), want) << "n = " << n;
  }
}

// Through the runtime, with its optimizer (constant folding, fusion) and without: a loop whose
// inputs are all constants folds at load and still gives TF's value; the nested loop runs.
TEST(TfWhileLoopTest, RuntimeWithAndWithoutOptimizerComputesTheSame) {
  GraphBuilder counter;
  WriteCounter(counter, true, /*constant_bound=*/true);
  const std::string counter_dir = testing::TempDir("while_runtime_counter");
  ASSERT_TRUE(testing::WriteSavedModel(counter_dir, counter,
                                       {Signature({}, {{"i", {"while/Exit:0", kI, {}}}})})
                  .ok());
  GraphBuilder nested;
  WriteNested(nested);
  const std::string nested_dir = testing::TempDir("while_runtime_nested");
  ASSERT_TRUE(testing::WriteSavedModel(nested_dir, nested, {kNestedSignature}).ok());
  for (bool disable_optimizer : {false, true}) {
    runtime::ModelOptions options;
    options.disable_optimizer = disable_optimizer;
    auto model = runtime::Model::Load(counter_dir, options);
    ASSERT_TRUE(model.ok()) << model.status();
    auto out = (*model)->Run("serving_default", {});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(I32(out->at("i")), 7) << "disable_optimizer " << disable_optimizer;
    model = runtime::Model::Load(nested_dir, options);
    ASSERT_TRUE(model.ok()) << model.status();
    out = (*model)->Run("serving_default",
                        {{"n", Tensor::Scalar<int32_t>(4)}, {"step", Tensor::Scalar<int32_t>(-2)}});
    ASSERT_TRUE(out.ok()) << out.status();
    // TF: acc = -2 * (0 + 1 + 2 + 3) = -12, i = 4.
    EXPECT_EQ(I32(out->at("acc")), -12) << "disable_optimizer " << disable_optimizer;
    EXPECT_EQ(I32(out->at("i")), 4) << "disable_optimizer " << disable_optimizer;
  }
}

// Malformed frames are errors naming the node, never a wrong value or a crash.
TEST(TfWhileLoopTest, ValueReadFromInsideALoopWithoutExitIsAnError) {
  GraphBuilder b;
  WriteCounter(b, /*with_exit=*/false);
  auto model = Save("while_no_exit", b,
                    Signature({{"n", {"n:0", kI, {}}}}, {{"i", {"while/Switch:0", kI, {}}}}));
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::StrContains(model.status().message(), "node 'while/Switch' (op Switch)"))
      << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(), "Exit")) << model.status();
}

TEST(TfWhileLoopTest, MergeWithoutNextIterationIsAnError) {
  GraphBuilder b;
  WriteCounter(b, true);
  // Drop the back edge: the Merge names a NextIteration that is not in the graph.
  auto* nodes = b.graph().mutable_node();
  for (int k = 0; k < nodes->size(); ++k) {
    if (nodes->Get(k).name() == "while/NextIteration") {
      nodes->DeleteSubrange(k, 1);
      break;
    }
  }
  auto model = Save("while_no_next", b,
                    Signature({{"n", {"n:0", kI, {}}}}, {{"i", {"while/Exit:0", kI, {}}}}));
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::StrContains(model.status().message(), "while/Merge")) << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(), "NextIteration")) << model.status();
}

TEST(TfWhileLoopTest, FrameWithTwoLoopCondsIsAnError) {
  GraphBuilder b;
  WriteCounter(b, true);
  b.Op("LoopCond", "while/LoopCond_1", {"while/Less"});
  auto model = Save("while_two_loopconds", b,
                    Signature({{"n", {"n:0", kI, {}}}}, {{"i", {"while/Exit:0", kI, {}}}}));
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::StrContains(model.status().message(),
                                "two LoopCond nodes, 'while/LoopCond' "
                                "and 'while/LoopCond_1'"))
      << model.status();
}

// Loop k's condition runs loop k+1, so each level is built in both condition scopes of every
// build of its parent: 2^k builds of level k. The import stops at the budget it shares with
// function inlining instead of running for hours.
TEST(TfWhileLoopTest, LoopsNestedInConditionsStopAtTheExpansionBudget) {
  GraphBuilder b;
  b.Const("Const", Tensor::Scalar<int32_t>(0));
  constexpr int kDepth = 24;
  std::function<std::string(int, const std::string&)> loop = [&](int k,
                                                                 const std::string& initial) {
    WhileWriter w(b, "L" + std::to_string(k));
    const std::string merge = w.Var(0, initial, kI);
    const std::string tested = k + 1 < kDepth ? loop(k + 1, merge) : merge;
    w.Const("Less/y", Tensor::Scalar<int32_t>(3), merge);
    Binary(b, "Less", w.N("Less"), tested, w.N("Less/y"), kI);
    w.LoopCond(w.N("Less"));
    const std::string body = w.Switch(0, kI);
    w.Const("add/y", Tensor::Scalar<int32_t>(1), body);
    Binary(b, "AddV2", w.N("add"), body, w.N("add/y"), kI);
    return w.Close(0, w.N("add"), kI);
  };
  const std::string exit = loop(0, "Const");
  auto model = Save("while_exponential", b, Signature({}, {{"y", {exit + ":0", kI, {}}}}));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kResourceExhausted) << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(), "built too many times"))
      << model.status();
}

// TF refuses a loop body that reads a top-level tensor without an Enter ("has inputs from
// different frames"); so does Kiln, naming the node.
TEST(TfWhileLoopTest, TopLevelTensorReadWithoutEnterIsAnError) {
  GraphBuilder b;
  WriteCounter(b, true);
  for (auto& node : *b.graph().mutable_node()) {
    if (node.name() == "while/Less") node.set_input(1, "n");
  }
  auto model = Save("while_no_enter", b,
                    Signature({{"n", {"n:0", kI, {}}}}, {{"i", {"while/Exit:0", kI, {}}}}));
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::StrContains(model.status().message(), "while/Less")) << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(), "different frames")) << model.status();
}

}  // namespace
}  // namespace kiln::import::tf
