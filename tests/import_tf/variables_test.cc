// Mutable variables (issue 12): TF Serving's saved_model_counter and resource-variable writes
// load and run through the real runtime (optimizer on), with TF Serving's semantics: state per
// loaded model, starting from the checkpoint; an increment is never lost under concurrency;
// variables nothing writes stay constants.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/runtime/model.h"
#include "tensorflow/core/protobuf/saved_model.pb.h"
#include "test_util.h"
#include "tf_graph_builder.h"

namespace kiln::import::tf {
namespace {

using runtime::Model;

std::string CounterDir() { return testing::TfServingDir("saved_model_counter"); }

// Runs a signature of the counter model and returns its scalar float output.
absl::StatusOr<float> Call(const Model& model, const std::string& signature,
                           const std::map<std::string, Tensor>& inputs = {}) {
  KILN_ASSIGN_OR_RETURN(auto outputs, model.Run(signature, inputs));
  auto it = outputs.find("output");
  if (it == outputs.end()) return absl::InternalError("no output");
  const Tensor& t = it->second;
  if (t.dtype() != DType::kFloat32 || t.rank() != 0) {
    return absl::InternalError("output is " + t.DebugString() + ", not a float scalar");
  }
  return *t.data<float>();
}

// TF Serving's PredictImplTest.PredictionWithCustomizedSignatures: get, incr, reset, incr,
// incr_by(3) give 0, 1, 0, 1, 4.
TEST(TfVariablesTest, CounterSignaturesAsTfServing) {
  auto model = Model::Load(CounterDir());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  EXPECT_EQ(*Call(m, "get_counter"), 0.f);
  EXPECT_EQ(*Call(m, "incr_counter"), 1.f);
  EXPECT_EQ(*Call(m, "reset_counter"), 0.f);
  EXPECT_EQ(*Call(m, "incr_counter"), 1.f);
  EXPECT_EQ(*Call(m, "incr_counter_by", {{"delta", Tensor::Scalar<float>(3.f)}}), 4.f);
  EXPECT_EQ(*Call(m, "get_counter"), 4.f);
  // Reads are never folded: the same read signature gives the new value after a write.
  EXPECT_EQ(*Call(m, "incr_counter_by", {{"delta", Tensor::Scalar<float>(-0.5f)}}), 3.5f);
  EXPECT_EQ(*Call(m, "get_counter"), 3.5f);
  // IEEE arithmetic, as TensorFlow's: Inf stays Inf, and a NaN delta makes the counter NaN.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(*Call(m, "incr_counter_by", {{"delta", Tensor::Scalar<float>(inf)}}), inf);
  EXPECT_TRUE(std::isnan(*Call(m, "incr_counter_by", {{"delta", Tensor::Scalar<float>(-inf)}})));
  EXPECT_EQ(*Call(m, "reset_counter"), 0.f);
  // The optimized graphs still read and write the variable at run time.
  const std::string inspect = m.Inspect();
  EXPECT_TRUE(absl::StrContains(inspect, "kiln::ReadVariable")) << inspect;
  EXPECT_TRUE(absl::StrContains(inspect, "kiln::AssignAddVariable")) << inspect;
  EXPECT_TRUE(absl::StrContains(inspect, "kiln::AssignVariable")) << inspect;
  EXPECT_TRUE(absl::StrContains(inspect, "mutable_variables: 1")) << inspect;
}

// The same answers with the optimizer off (what the optimizer may not change).
TEST(TfVariablesTest, CounterWithoutOptimizer) {
  runtime::ModelOptions options;
  options.disable_optimizer = true;
  auto model = Model::Load(CounterDir(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*Call(**model, "incr_counter"), 1.f);
  EXPECT_EQ(*Call(**model, "incr_counter"), 2.f);
  EXPECT_EQ(*Call(**model, "get_counter"), 2.f);
}

// TF1's AssignSub and Assign(validate_shape=false), on the real counter graph: its
// incr_counter_op/AssignAdd rewritten to AssignSub, and reset_counter's Assign told not to
// check shapes and fed a [2] value.
TEST(TfVariablesTest, AssignSubAndShapeChangingAssignOnTheCounterGraph) {
  namespace fs = std::filesystem;
  const std::string dir = testing::TempDir("counter_sub") + "/1";
  fs::create_directories(dir);
  fs::copy(CounterDir() + "/00000123", dir, fs::copy_options::recursive);
  auto bytes = ReadFileToString(dir + "/saved_model.pb");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  tensorflow::SavedModel saved;
  ASSERT_TRUE(saved.ParseFromString(*bytes));
  int rewritten = 0;
  for (tensorflow::NodeDef& node :
       *saved.mutable_meta_graphs(0)->mutable_graph_def()->mutable_node()) {
    if (node.name() == "incr_counter_op/AssignAdd") {
      node.set_op("AssignSub");
      ++rewritten;
    }
    if (node.name() == "reset_counter_op/Assign") {
      (*node.mutable_attr())["validate_shape"].set_b(false);
      ++rewritten;
    }
    if (node.name() == "reset_counter_op/Assign/value") {
      tensorflow::TensorProto* value = (*node.mutable_attr())["value"].mutable_tensor();
      value->mutable_tensor_shape()->add_dim()->set_size(2);
      value->clear_float_val();
      value->add_float_val(7);
      value->add_float_val(8);
      ++rewritten;
    }
  }
  ASSERT_EQ(rewritten, 3);
  ASSERT_TRUE(WriteStringToFile(dir + "/saved_model.pb", saved.SerializeAsString()).ok());
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*Call(**model, "incr_counter"), -1.f);
  EXPECT_EQ(*Call(**model, "incr_counter"), -2.f);
  auto reset = (*model)->Run("reset_counter", {});
  ASSERT_TRUE(reset.ok()) << reset.status();
  const Tensor& now = reset->at("output");
  ASSERT_EQ(now.shape(), (Shape{2}));
  EXPECT_EQ(now.data<float>()[0], 7.f);
  EXPECT_EQ(now.data<float>()[1], 8.f);
  // The scalar AssignSub now meets a [2] variable: TensorFlow's error, not a crash.
  auto sub = (*model)->Run("incr_counter", {});
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kInvalidArgument) << sub.status();
}

// Compression's accuracy guard runs signatures at load: one that writes is left alone, so the
// counter still starts at the checkpoint's 0.
TEST(TfVariablesTest, CompressionDoesNotRunWritingSignatures) {
  runtime::ModelOptions options;
  options.allow_compression = true;
  auto model = Model::Load(CounterDir(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*Call(**model, "get_counter"), 0.f);
  EXPECT_EQ(*Call(**model, "incr_counter"), 1.f);
  EXPECT_TRUE(absl::StrContains((*model)->Inspect(), "not compressed: the signature writes"))
      << (*model)->Inspect();
}

// TF Serving keeps one Session per loaded version: each load starts from the checkpoint (0)
// and two loaded models never share a counter.
TEST(TfVariablesTest, StateIsPerLoadedModel) {
  auto first = Model::Load(CounterDir());
  auto second = Model::Load(CounterDir());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*Call(**first, "incr_counter_by", {{"delta", Tensor::Scalar<float>(5.f)}}), 5.f);
  EXPECT_EQ(*Call(**second, "get_counter"), 0.f);
  EXPECT_EQ(*Call(**second, "incr_counter"), 1.f);
  EXPECT_EQ(*Call(**first, "get_counter"), 5.f);
  first->reset();
  auto third = Model::Load(CounterDir());
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(*Call(**third, "get_counter"), 0.f);
}

// Concurrent increments: every one lands, and each run sees the value its own write left
// (so the values returned are exactly 1..N).
TEST(TfVariablesTest, ConcurrentIncrementsAreNeverLost) {
  auto model = Model::Load(CounterDir());
  ASSERT_TRUE(model.ok()) << model.status();
  constexpr int kThreads = 8, kEach = 250;
  std::vector<std::vector<float>> seen(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        // Reads interleave with the writes; they must never fail or tear.
        auto r = i % 5 == 0 ? Call(**model, "get_counter") : Call(**model, "incr_counter");
        if (!r.ok()) {
          ++failures;
        } else if (i % 5 != 0) {
          seen[t].push_back(*r);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<float> all;
  for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  const int n = kThreads * (kEach - kEach / 5);
  ASSERT_EQ(static_cast<int>(all.size()), n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(all[i], static_cast<float>(i + 1)) << i;
  EXPECT_EQ(*Call(**model, "get_counter"), static_cast<float>(n));
}

// TensorFlow's AssignAdd needs the delta's shape to equal the variable's: a [2] delta is the
// request's error, and the counter keeps its value.
TEST(TfVariablesTest, DeltaOfAnotherShapeIsRefused) {
  auto model = Model::Load(CounterDir());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(*Call(**model, "incr_counter"), 1.f);
  auto bad = Call(**model, "incr_counter_by", {{"delta", Tensor::FromVector<float>({1.f, 2.f})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "shapes must be equal")) << bad.status();
  EXPECT_EQ(*Call(**model, "get_counter"), 1.f);
  auto wrong_type = model->get()->Run("incr_counter_by", {{"delta", Tensor::Scalar<int32_t>(1)}});
  EXPECT_FALSE(wrong_type.ok());
  EXPECT_EQ(*Call(**model, "get_counter"), 1.f);
}

// The TF2 form: resource variables, AssignAddVariableOp (AssignSubVariableOp,
// AssignVariableOp), and a ReadVariableOp ordered after it by a control dependency (tf.function's
// automatic control dependencies) through a NoOp group; a second variable nothing writes stays a
// constant the optimizer folds.
TEST(TfVariablesTest, ResourceVariableWriteThenOrderedRead) {
  using testing::GraphBuilder;
  GraphBuilder b;
  b.Placeholder("delta", DType::kFloat32, {});
  b.Placeholder("x", DType::kFloat32, {-1});
  const std::string total =
      b.Variable("total", "total/.ATTRIBUTES/VARIABLE_VALUE", DType::kFloat32);
  const std::string scale =
      b.Variable("scale", "scale/.ATTRIBUTES/VARIABLE_VALUE", DType::kFloat32);
  b.Op("AssignAddVariableOp", "add", {"total", "delta"},
       {{"dtype", testing::TypeAttr(DType::kFloat32)}});
  b.Op("NoOp", "group", {"^add"});
  b.Op("ReadVariableOp", "after", {"total", "^group"},
       {{"dtype", testing::TypeAttr(DType::kFloat32)}});
  b.Op("AssignSubVariableOp", "sub", {"total", "delta"},
       {{"dtype", testing::TypeAttr(DType::kFloat32)}});
  b.Op("ReadVariableOp", "after_sub", {"total", "^sub"},
       {{"dtype", testing::TypeAttr(DType::kFloat32)}});
  b.Op("AssignVariableOp", "set", {"total", "delta"},
       {{"dtype", testing::TypeAttr(DType::kFloat32)}});
  b.Op("ReadVariableOp", "after_set", {"total", "^set"},
       {{"dtype", testing::TypeAttr(DType::kFloat32)}});
  b.Op("Mul", "scaled", {"x", scale});
  (void)total;
  const std::string dir = testing::TempDir("resource_vars");
  testing::SignatureSpec add;
  add.key = "add";
  add.inputs["delta"] = {"delta:0", DType::kFloat32, {}};
  add.outputs["total"] = {"after:0", DType::kFloat32, {}};
  testing::SignatureSpec sub = add, set = add;
  sub.key = "sub";
  sub.outputs["total"] = {"after_sub:0", DType::kFloat32, {}};
  set.key = "set";
  set.outputs["total"] = {"after_set:0", DType::kFloat32, {}};
  testing::SignatureSpec scaled;
  scaled.key = "scaled";
  scaled.inputs["x"] = {"x:0", DType::kFloat32, {-1}};
  scaled.outputs["y"] = {"scaled:0", DType::kFloat32, {-1}};
  ASSERT_TRUE(
      testing::WriteSavedModel(dir, b, {add, sub, set, scaled},
                               {{"total/.ATTRIBUTES/VARIABLE_VALUE", Tensor::Scalar<float>(10.f)},
                                {"scale/.ATTRIBUTES/VARIABLE_VALUE", Tensor::Scalar<float>(2.f)}})
          .ok());
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto run = [&](const std::string& signature, float delta) -> float {
    auto out = (*model)->Run(signature, {{"delta", Tensor::Scalar<float>(delta)}});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out->at("total").data<float>() : -1.f;
  };
  EXPECT_EQ(run("add", 1.f), 11.f);
  EXPECT_EQ(run("add", 2.5f), 13.5f);
  EXPECT_EQ(run("sub", 0.5f), 13.f);
  EXPECT_EQ(run("set", -4.f), -4.f);
  EXPECT_EQ(run("add", 1.f), -3.f);
  auto y = (*model)->Run("scaled", {{"x", Tensor::FromVector<float>({1.f, 3.f})}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->at("y").data<float>()[1], 6.f);
  // Only `total` is mutable; `scale` is folded into the graph like any weight.
  const std::string inspect = (*model)->Inspect();
  EXPECT_TRUE(absl::StrContains(inspect, "mutable_variables: 1")) << inspect;
  const size_t scaled_at = inspect.find("Signature 'scaled'");
  ASSERT_NE(scaled_at, std::string::npos);
  const std::string scaled_text =
      inspect.substr(scaled_at, inspect.find("\nSignature '", scaled_at) - scaled_at);
  EXPECT_TRUE(absl::StrContains(scaled_text, "Mul: 1")) << inspect;
  EXPECT_FALSE(absl::StrContains(scaled_text, "ReadVariable")) << inspect;
}

// A result that waits for a write (through a NoOp group inside a called function) but reads
// no variable: the write still runs once per run, before the result (kiln::OrderAfter).
TEST(TfVariablesTest, WriteThatTheResultOnlyWaitsForStillRuns) {
  using testing::GraphBuilder;
  GraphBuilder b;
  tensorflow::FunctionDef* f = b.AddFunction();
  f->mutable_signature()->set_name("__inference_step_9");
  f->mutable_signature()->add_input_arg()->set_name("x");
  f->mutable_signature()->add_input_arg()->set_name("counter");
  f->mutable_signature()->add_output_arg()->set_name("y");
  auto node = [&](const std::string& name, const std::string& op,
                  const std::vector<std::string>& inputs) {
    tensorflow::NodeDef* n = f->add_node_def();
    n->set_name(name);
    n->set_op(op);
    for (const std::string& in : inputs) n->add_input(in);
    return n;
  };
  tensorflow::NodeDef* one = node("one", "Const", {});
  (*one->mutable_attr())["dtype"] = testing::TypeAttr(DType::kFloat32);
  tensorflow::TensorProto* value = (*one->mutable_attr())["value"].mutable_tensor();
  value->set_dtype(tensorflow::DT_FLOAT);
  value->add_float_val(1);
  node("increment", "AssignAddVariableOp", {"counter", "one:output:0"});
  node("group", "NoOp", {"^increment"});
  node("out", "Identity", {"x", "^group"});
  (*f->mutable_ret())["y"] = "out:output:0";
  b.Placeholder("x", DType::kFloat32);
  const std::string read =
      b.Variable("counter", "counter/.ATTRIBUTES/VARIABLE_VALUE", DType::kFloat32);
  b.Op("StatefulPartitionedCall", "call", {"x", "counter"},
       {{"f", testing::FuncAttr("__inference_step_9")}});
  const std::string dir = testing::TempDir("write_nothing_reads");
  testing::SignatureSpec step;
  step.key = "step";
  step.inputs["x"] = {"x:0", DType::kFloat32, {-1}};
  step.outputs["y"] = {"call:0", DType::kFloat32, {-1}};
  testing::SignatureSpec get;
  get.key = "get";
  get.outputs["count"] = {read + ":0", DType::kFloat32, {}};
  ASSERT_TRUE(
      testing::WriteSavedModel(dir, b, {step, get},
                               {{"counter/.ATTRIBUTES/VARIABLE_VALUE", Tensor::Scalar<float>(0.f)}})
          .ok());
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int i = 0; i < 3; ++i) {
    auto y = (*model)->Run("step", {{"x", Tensor::FromVector<float>({5.f, 6.f})}});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->at("y").data<float>()[1], 6.f);
  }
  auto count = (*model)->Run("get", {});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count->at("count").data<float>(), 3.f);
}

// TF2's automatic control dependencies: a tf.function's writes are control outputs of the call
// (control_ret), and its results need not depend on them. Each call runs them, before the
// results; a write behind an Identity in a control chain is refused by name.
TEST(TfVariablesTest, WritesAmongACallsControlOutputsRun) {
  using testing::GraphBuilder;
  auto build = [](bool behind_identity) {
    GraphBuilder b;
    tensorflow::FunctionDef* f = b.AddFunction();
    f->mutable_signature()->set_name("__inference_bump_3");
    f->mutable_signature()->add_input_arg()->set_name("x");
    f->mutable_signature()->add_input_arg()->set_name("counter");
    f->mutable_signature()->add_output_arg()->set_name("y");
    f->mutable_signature()->add_control_output("bump");
    auto node = [&](const std::string& name, const std::string& op,
                    const std::vector<std::string>& inputs) {
      tensorflow::NodeDef* n = f->add_node_def();
      n->set_name(name);
      n->set_op(op);
      for (const std::string& in : inputs) n->add_input(in);
      return n;
    };
    tensorflow::NodeDef* two = node("two", "Const", {});
    (*two->mutable_attr())["dtype"] = testing::TypeAttr(DType::kFloat32);
    tensorflow::TensorProto* value = (*two->mutable_attr())["value"].mutable_tensor();
    value->set_dtype(tensorflow::DT_FLOAT);
    value->add_float_val(2);
    node("bump", "AssignAddVariableOp", {"counter", "two:output:0"});
    node("out", "Identity", {"x"});
    if (behind_identity) {
      node("wrapped", "Identity", {"two:output:0", "^bump"});
      (*f->mutable_control_ret())["bump"] = "wrapped";
    } else {
      (*f->mutable_control_ret())["bump"] = "bump";
    }
    (*f->mutable_ret())["y"] = "out:output:0";
    b.Placeholder("x", DType::kFloat32);
    b.Variable("counter", "counter/.ATTRIBUTES/VARIABLE_VALUE", DType::kFloat32);
    b.Op("StatefulPartitionedCall", "call", {"x", "counter"},
         {{"f", testing::FuncAttr("__inference_bump_3")}});
    return b;
  };
  auto save = [](GraphBuilder& b, const std::string& name) {
    const std::string dir = testing::TempDir(name);
    testing::SignatureSpec step;
    step.key = "step";
    step.inputs["x"] = {"x:0", DType::kFloat32, {-1}};
    step.outputs["y"] = {"call:0", DType::kFloat32, {-1}};
    testing::SignatureSpec get;
    get.key = "get";
    get.outputs["count"] = {"counter/Read:0", DType::kFloat32, {}};
    EXPECT_TRUE(testing::WriteSavedModel(
                    dir, b, {step, get},
                    {{"counter/.ATTRIBUTES/VARIABLE_VALUE", Tensor::Scalar<float>(1.f)}})
                    .ok());
    return dir;
  };
  GraphBuilder direct = build(false);
  auto model = Model::Load(save(direct, "control_ret_write"));
  ASSERT_TRUE(model.ok()) << model.status();
  for (int i = 0; i < 2; ++i) {
    auto y = (*model)->Run("step", {{"x", Tensor::FromVector<float>({4.f})}});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(*y->at("y").data<float>(), 4.f);
  }
  auto count = (*model)->Run("get", {});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count->at("count").data<float>(), 5.f);  // 1 + 2 + 2

  GraphBuilder hidden = build(true);
  auto refused = Model::Load(save(hidden, "control_ret_hidden_write"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "'bump'")) << refused.status();
}

// A variable nothing but the initializer writes (every TF1 model's `w/Assign`) stays a
// constant: TF Serving never runs the init op, so it is not state.
TEST(TfVariablesTest, HalfPlusTwoHasNoMutableVariables) {
  auto model = Model::Load(testing::TfServingDir("saved_model_half_plus_two_cpu"));
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string inspect = (*model)->Inspect();
  EXPECT_FALSE(absl::StrContains(inspect, "mutable_variables")) << inspect;
  EXPECT_FALSE(absl::StrContains(inspect, "ReadVariable")) << inspect;
}

}  // namespace
}  // namespace kiln::import::tf
