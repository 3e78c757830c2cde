// Heap allocations per warm run of real kernels (Conv, pooling, MatMul, LayerNorm, attention)
// through the index-based Model::Run, counted by replacing operator new and told apart by the
// library of the caller: Kiln's code must allocate nothing; oneDNN 2.6 allocates inside
// dnnl_primitive_execute and dnnl_memory_create (its execution context is a std::unordered_map),
// which only replacing oneDNN primitives removes (reported, see docs/performance/runtime.md).
#include <gtest/gtest.h>

#include <random>

#include "../testing/alloc_counter.h"
#include "absl/strings/str_cat.h"
#include "kiln/import/imported_model.h"
#include "kiln/runtime/model.h"

namespace kiln::runtime {
namespace {

Tensor Random(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(DType::kFloat32, std::move(shape));
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// image[1, 16, 12, 12] -> Conv+Relu -> MaxPool -> Conv -> GlobalAveragePool -> Flatten [1, 16]
// -> MatMul [16, 64] -> Reshape [1, 4, 16] -> LayerNorm -> self-attention (Q K^T / 4, Softmax,
// x V) -> output.
std::shared_ptr<Model> ConvAttentionModel() {
  import::ImportedModel model;
  model.platform = "onnx";
  model.path = "alloc_test";
  import::SignatureGraph sig;
  sig.key = "serving_default";
  ir::Graph& g = sig.graph;
  auto op = [&](const std::string& name, std::vector<ir::ValueId> in,
                std::map<std::string, ir::Attribute> attrs = {}) {
    return g
        .node(g.AddNode(name, std::move(in), 1, std::move(attrs),
                        absl::StrCat(name, "_", g.num_nodes())))
        .outputs[0];
  };
  const ir::ValueId x = g.AddValue("image", ir::TensorType::Of(DType::kFloat32, {1, 16, 12, 12}));
  g.inputs = {x};
  sig.input_keys = {"image"};
  sig.inputs["image"] = TensorInfo{"image", DType::kFloat32, true, {1, 16, 12, 12}};
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  ir::ValueId v = op("Conv", {x, g.AddConstant("w1", Random({16, 16, 3, 3}, 1))}, {{"pads", pads}});
  v = op("Relu", {v});
  v = op("MaxPool", {v},
         {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  v = op("Conv", {v, g.AddConstant("w2", Random({16, 16, 3, 3}, 2))}, {{"pads", pads}});
  v = op("Flatten", {op("GlobalAveragePool", {v})});
  v = op("MatMul", {v, g.AddConstant("w3", Random({16, 64}, 3))});
  v = op("Reshape", {v, g.AddConstant("shape", Tensor::FromVector<int64_t>({1, 4, 16}))});
  v = op("LayerNormalization",
         {v, g.AddConstant("gamma", Random({16}, 4)), g.AddConstant("beta", Random({16}, 5))},
         {{"axis", int64_t{-1}}});
  const ir::ValueId q = op("MatMul", {v, g.AddConstant("wq", Random({16, 16}, 6))});
  const ir::ValueId k = op("MatMul", {v, g.AddConstant("wk", Random({16, 16}, 7))});
  const ir::ValueId val = op("MatMul", {v, g.AddConstant("wv", Random({16, 16}, 8))});
  ir::ValueId scores =
      op("MatMul", {q, op("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 2, 1}}})});
  scores = op("Div", {scores, g.AddConstant("scale", Tensor::Scalar<float>(4.0f))});
  v = op("MatMul", {op("Softmax", {scores}, {{"axis", int64_t{-1}}}), val});
  g.outputs = {v};
  sig.output_keys = {"out"};
  sig.outputs["out"] = TensorInfo{"out", DType::kFloat32, false, {}};
  model.signatures.push_back(std::move(sig));
  // The default threads: every core inside kernels (one OpenMP team), one step at a time.
  // (With inter_op_threads > 1, independent steps go through ThreadPool::ParallelFor, whose
  // queued std::function tasks allocate: not covered here.)
  auto loaded = Model::FromImported(std::move(model), ModelOptions{});
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *loaded : nullptr;
}

TEST(RunAllocationTest, WarmIndexedRunOfRealKernels) {
  std::shared_ptr<Model> model = ConvAttentionModel();
  ASSERT_NE(model, nullptr);
  auto signature = model->GetSignature("serving_default");
  ASSERT_TRUE(signature.ok()) << signature.status();
  const std::vector<Tensor> inputs = {Random({1, 16, 12, 12}, 9)};
  std::vector<Tensor> outputs;
  for (int warm = 0; warm < 3; ++warm) {
    ASSERT_TRUE(model->Run(**signature, inputs, &outputs).ok());
  }
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].shape(), (Shape{1, 4, 16}));

  constexpr int kRuns = 50;
  alloc_testing::AllocationCount count;
  absl::Status status;
  for (int run = 0; run < kRuns && status.ok(); ++run) {
    status = model->Run(**signature, inputs, &outputs);
  }
  count.Stop();
  ASSERT_TRUE(status.ok()) << status;
  const double onednn = static_cast<double>(count.from_onednn()) / kRuns;
  const double kiln = static_cast<double>(count.total()) / kRuns - onednn;
  RecordProperty("kiln_allocations_per_run", absl::StrCat(kiln));
  RecordProperty("onednn_allocations_per_run", absl::StrCat(onednn));
  std::printf("heap allocations per warm run: %.1f in Kiln's code, %.1f inside oneDNN\n", kiln,
              onednn);
  EXPECT_EQ(kiln, 0.0);
}

}  // namespace
}  // namespace kiln::runtime
