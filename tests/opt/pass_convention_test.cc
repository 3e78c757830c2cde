// The pass convention of include/kiln/opt/pass.h, checked on small graphs and on the real ONNX
// models of the shared test data:
// - one ctx.Note per rewrite, naming the rewritten nodes;
// - value types inferred once per round (and after a pass that does not keep them): every pass
//   registered as keeping types leaves the types it touched as inference would write them, so
//   optimizing gives the same graph as inferring before every pass (what the optimizer did
//   before) would.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/import/onnx.h"
#include "kiln/opt/pass.h"

namespace kiln::opt {
namespace {

using ir::Graph;
using ir::TensorType;
using ir::ValueId;

ValueId Op(Graph& g, const std::string& op, const std::string& name, std::vector<ValueId> inputs,
           std::map<std::string, ir::Attribute> attrs = {}) {
  const ir::NodeId id = g.AddNode(op, std::move(inputs), 1, std::move(attrs), name);
  return g.node(id).outputs[0];
}

ValueId Scalar(Graph& g, const std::string& name, float v) {
  return g.AddConstant(name, Tensor::Scalar<float>(v));
}

Tensor Ones(Shape shape) {
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = 1.0f;
  return t;
}

// Every note of every pass that changed the graph, one string.
std::string AllNotes(const OptimizationLog& log) {
  std::string out;
  for (const OptimizationLogEntry& e : log.entries) {
    for (const std::string& c : e.changes) absl::StrAppend(&out, e.pass, ": ", c, "\n");
  }
  return out;
}

// A conv block, a decomposed GELU, a duplicate node and a Transpose pair, each node named.
Graph NamedGraph() {
  Graph g;
  const ValueId x = g.AddValue("x", TensorType::Of(DType::kFloat32, {1, 4, 5, 5}));
  g.inputs = {x};
  const ValueId w = g.AddConstant("w", Ones(Shape{4, 4, 1, 1}));
  const ValueId conv = Op(g, "Conv", "conv1", {x, w});
  const ValueId relu = Op(g, "Relu", "relu1", {conv});
  // GELU(relu) written out: relu * 0.5 * (1 + erf(relu / sqrt(2))).
  const ValueId scaled = Op(g, "Div", "gelu_div", {relu, Scalar(g, "sqrt2", 1.41421356f)});
  const ValueId erf = Op(g, "Erf", "gelu_erf", {scaled});
  const ValueId plus = Op(g, "Add", "gelu_add", {erf, Scalar(g, "one", 1.0f)});
  const ValueId times = Op(g, "Mul", "gelu_mul", {relu, plus});
  const ValueId gelu = Op(g, "Mul", "gelu_half", {times, Scalar(g, "half", 0.5f)});
  const std::vector<int64_t> perm = {0, 2, 3, 1};
  const std::vector<int64_t> back = {0, 3, 1, 2};
  const ValueId t1 = Op(g, "Transpose", "to_nhwc", {gelu}, {{"perm", perm}});
  const ValueId t2 = Op(g, "Transpose", "to_nchw", {t1}, {{"perm", back}});
  const ValueId e1 = Op(g, "Exp", "exp_a", {t2});
  const ValueId e2 = Op(g, "Exp", "exp_b", {t2});
  g.outputs = {Op(g, "Sub", "diff", {e1, e2})};
  return g;
}

TEST(PassConventionTest, EveryRewriteIsNotedWithItsNodeNames) {
  Graph g = NamedGraph();
  const exec::KernelEvaluator evaluator;
  PassOptions options;
  options.evaluator = &evaluator;
  OptimizationLog log;
  ASSERT_TRUE(Optimize(g, options, &log).ok());
  const std::string notes = AllNotes(log);
  for (const char* expected : {
           "conv_matmul_post_op_fusion: fused Conv 'conv1' + Relu 'relu1' + Gelu "
           "'gelu_erf_gelu' into FusedConv",
           "gelu_fusion: fused Div 'gelu_div' + Erf 'gelu_erf' + Add 'gelu_add' + Mul "
           "'gelu_mul' + Mul 'gelu_half' into Gelu 'gelu_erf_gelu'",
           "identity_transpose_reshape_elimination: merged Transpose 'to_nhwc' into Transpose "
           "'to_nchw'",
           "identity_transpose_reshape_elimination: removed identity Transpose 'to_nchw'",
           "common_subexpression_elimination: merged Exp 'exp_b' into its twin Exp 'exp_a'",
       }) {
    EXPECT_TRUE(absl::StrContains(notes, expected)) << expected << "\nnotes:\n" << notes;
  }
  // The log `kiln inspect` prints shows the same lines.
  EXPECT_TRUE(absl::StrContains(log.ToString(), "fused Conv 'conv1' + Relu 'relu1' + Gelu"))
      << log.ToString();
}

TEST(PassConventionTest, RunPassRunsOneNamedPass) {
  Graph g = NamedGraph();
  auto notes = RunPass("common_subexpression_elimination", g, PassOptions{});
  ASSERT_TRUE(notes.ok()) << notes.status();
  EXPECT_EQ(*notes, (std::vector<std::string>{"merged Exp 'exp_b' into its twin Exp 'exp_a'"}));
  EXPECT_EQ(RunPass("no_such_pass", g, PassOptions{}).status().code(), absl::StatusCode::kNotFound);
}

// The graphs the check below runs on: the small named graph and the ONNX models of the shared
// test data (CNNs with BatchNorm, residual Adds, concatenations, channel shuffles; an LSTM-like
// voice model with control flow).
std::vector<std::pair<std::string, Graph>> TestGraphs() {
  std::vector<std::pair<std::string, Graph>> graphs;
  graphs.emplace_back("named graph", NamedGraph());
  namespace fs = std::filesystem;
  const fs::path models = fs::path(KILN_SHARED_DIR) / "testdata" / "models";
  for (const char* file :
       {"onnx_light_zoo/light_resnet50.onnx", "onnx_light_zoo/light_inception_v1.onnx",
        "onnx_light_zoo/light_shufflenet.onnx", "onnx_light_zoo/light_squeezenet.onnx",
        "onnx_ultraface_rfb320/version-RFB-320.onnx", "onnx_silero_vad/silero_vad_16k_op15.onnx"}) {
    const fs::path path = models / file;
    if (!fs::exists(path)) continue;
    auto model = import::ImportOnnxFile(path.string());
    EXPECT_TRUE(model.ok()) << path << ": " << model.status();
    if (!model.ok()) continue;
    for (import::SignatureGraph& sig : model->signatures) {
      graphs.emplace_back(absl::StrCat(file, " ", sig.key), std::move(sig.graph));
    }
  }
  return graphs;
}

// "name: type layout" for every value, in id order.
std::string Types(const Graph& g) {
  std::string out;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    absl::StrAppend(&out, g.value(v).name, ": ", g.value(v).type.ToString(), " ",
                    ir::MemoryLayoutName(g.value(v).layout), "\n");
  }
  return out;
}

// The first line where `a` and `b` differ.
std::string FirstDifference(const std::string& a, const std::string& b) {
  size_t line_start = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) {
      const size_t end_a = a.find('\n', i), end_b = b.find('\n', i);
      return absl::StrCat(a.substr(line_start, end_a - line_start), "\n  vs\n",
                          b.substr(line_start, end_b - line_start));
    }
    if (a[i] == '\n') line_start = i + 1;
  }
  return a.size() == b.size() ? "" : "one is a prefix of the other";
}

TEST(PassConventionTest, PassesKeepingTypesLeaveThemAsInferenceWritesThem) {
  const exec::KernelEvaluator evaluator;
  for (ir::MemoryLayout layout : {ir::MemoryLayout::kPlain, ir::MemoryLayout::kNhwc}) {
    PassOptions options;
    options.evaluator = &evaluator;
    options.conv_activation_layout = layout;
    for (auto& [name, original] : TestGraphs()) {
      SCOPED_TRACE(name);
      Graph g = original;
      for (int round = 1; round <= options.max_rounds; ++round) {
        bool changed = false;
        for (const PassInfo& pass : PassRegistry::Global().Passes()) {
          // RunPass infers types before a typed pass, so what follows checks this pass alone.
          auto notes = RunPass(pass.name, g, options);
          ASSERT_TRUE(notes.ok()) << pass.name << ": " << notes.status();
          changed = changed || !notes->empty();
          if (!pass.keeps_value_types || notes->empty()) continue;
          Graph inferred = g;
          ASSERT_TRUE(ir::InferShapes(inferred).ok());
          const std::string diff = FirstDifference(Types(g), Types(inferred));
          EXPECT_EQ(diff, "") << "after " << pass.name << " in round " << round;
        }
        if (!changed) break;
      }
    }
  }
}

// Inferring once per round instead of before every pass changes no decision: the optimized
// graph is the one that inferring before every typed pass gives.
TEST(PassConventionTest, OnceARoundGivesTheGraphOfInferringBeforeEveryPass) {
  const exec::KernelEvaluator evaluator;
  PassOptions options;
  options.evaluator = &evaluator;
  options.conv_activation_layout = ir::MemoryLayout::kNhwc;
  for (auto& [name, original] : TestGraphs()) {
    SCOPED_TRACE(name);
    Graph once = original;
    OptimizationLog log;
    ASSERT_TRUE(Optimize(once, options, &log).ok());
    Graph every = original;
    for (int round = 1; round <= options.max_rounds; ++round) {
      bool changed = false;
      for (const PassInfo& pass : PassRegistry::Global().Passes()) {
        auto notes = RunPass(pass.name, every, options);
        ASSERT_TRUE(notes.ok()) << notes.status();
        changed = changed || !notes->empty();
      }
      if (!changed) break;
    }
    EXPECT_EQ(FirstDifference(once.ToString(), every.ToString()), "");
    EXPECT_EQ(FirstDifference(Types(once), Types(every)), "");
  }
}

}  // namespace
}  // namespace kiln::opt
