// Heap allocations per warm run of real models through the index-based Model::Run: a small
// Conv / pooling / MatMul / LayerNorm / attention graph, and ResNet-18-, MobileNet-v2- and
// BERT-encoder-like models (the topologies of issue 9's targets at small shapes, so the test
// runs in seconds). Allocations are counted by replacing operator new and told apart by the
// library of the caller: Kiln's code must allocate nothing, and must create no oneDNN memory
// object per run (they live in the plan's pooled run state, kernel.h's KernelRunState).
// What oneDNN 2.6 still allocates inside dnnl_primitive_execute (the std::unordered_map of
// its execution context, the std::function of its parallel loops) is printed and recorded
// per model, with the primitive calls it comes from (docs/performance/runtime.md).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>

#include "../testing/alloc_counter.h"
#include "absl/strings/str_cat.h"
#include "kiln/import/imported_model.h"
#include "kiln/runtime/model.h"

// Counts the oneDNN memory objects created and the primitives executed while counting, by
// interposing the two C API functions every oneDNN call of Kiln's goes through (dnnl.hpp's
// C++ wrappers included): a definition in the executable binds first, and forwards to
// libdnnl's.
namespace {
std::atomic<int64_t> memory_creates{0};
std::atomic<int64_t> primitive_executes{0};
std::atomic<int64_t> primitive_args{0};

template <typename Fn>
Fn* Next(const char* name) {
  return reinterpret_cast<Fn*>(dlsym(RTLD_NEXT, name));
}
}  // namespace

extern "C" dnnl_status_t dnnl_memory_create(dnnl_memory_t* memory,
                                            const dnnl_memory_desc_t* memory_desc,
                                            dnnl_engine_t engine, void* handle) {
  static auto* next = Next<decltype(dnnl_memory_create)>("dnnl_memory_create");
  if (kiln::alloc_testing::alloc_internal::counting.load()) memory_creates.fetch_add(1);
  return next(memory, memory_desc, engine, handle);
}

extern "C" dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t primitive,
                                                dnnl_stream_t stream, int nargs,
                                                const dnnl_exec_arg_t* args) {
  static auto* next = Next<decltype(dnnl_primitive_execute)>("dnnl_primitive_execute");
  if (kiln::alloc_testing::alloc_internal::counting.load()) {
    primitive_executes.fetch_add(1);
    primitive_args.fetch_add(nargs);
  }
  return next(primitive, stream, nargs, args);
}

namespace kiln::runtime {
namespace {

Tensor Random(Shape shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Tensor t(DType::kFloat32, std::move(shape));
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

using Attrs = std::map<std::string, ir::Attribute>;

// Builds one signature's graph node by node.
class ModelBuilder {
 public:
  ModelBuilder(const std::string& input, Shape shape) : shape_(shape) {
    sig_.key = "serving_default";
    ir::Graph& g = sig_.graph;
    const std::vector<int64_t> dims(shape.dims().begin(), shape.dims().end());
    const ir::ValueId x = g.AddValue(input, ir::TensorType::Of(DType::kFloat32, dims));
    g.inputs = {x};
    sig_.input_keys = {input};
    sig_.inputs[input] = TensorInfo{input, DType::kFloat32, true, dims};
    input_ = x;
  }
  ir::ValueId input() const { return input_; }

  ir::ValueId Op(const std::string& name, std::vector<ir::ValueId> in, Attrs attrs = {}) {
    ir::Graph& g = sig_.graph;
    return g
        .node(g.AddNode(name, std::move(in), 1, std::move(attrs),
                        absl::StrCat(name, "_", g.num_nodes())))
        .outputs[0];
  }
  ir::ValueId Const(Tensor t) {
    return sig_.graph.AddConstant(absl::StrCat("c", ++constants_), std::move(t));
  }
  ir::ValueId Weights(Shape shape, float scale = 0.2f) {
    return Const(Random(std::move(shape), ++seed_, scale));
  }
  ir::ValueId Scalar(float v) { return Const(Tensor::Scalar<float>(v)); }
  ir::ValueId Ints(std::vector<int64_t> v) { return Const(Tensor::FromVector<int64_t>(v)); }

  // Conv with bias, `k` x `k`, padding k / 2.
  ir::ValueId Conv(ir::ValueId x, int64_t cin, int64_t cout, int64_t k, int64_t stride,
                   int64_t group = 1) {
    const int64_t p = k / 2;
    return Op("Conv", {x, Weights({cout, cin / group, k, k}), Weights({cout}, 0.05f)},
              {{"pads", std::vector<int64_t>{p, p, p, p}},
               {"strides", std::vector<int64_t>{stride, stride}},
               {"group", group}});
  }
  ir::ValueId Relu6(ir::ValueId x) { return Op("Clip", {x, Scalar(0.0f), Scalar(6.0f)}); }
  // Gemm(x, W^T) + b, as torch exports nn.Linear on 2-D inputs.
  ir::ValueId Linear2d(ir::ValueId x, int64_t in, int64_t out) {
    return Op("Gemm", {x, Weights({out, in}), Weights({out}, 0.05f)}, {{"transB", int64_t{1}}});
  }
  // MatMul + Add, as torch exports nn.Linear on 3-D inputs.
  ir::ValueId Linear(ir::ValueId x, int64_t in, int64_t out) {
    return Op("Add", {Op("MatMul", {x, Weights({in, out})}), Weights({out}, 0.05f)});
  }

  std::shared_ptr<Model> Load(ir::ValueId output) {
    sig_.graph.outputs = {output};
    sig_.output_keys = {"out"};
    sig_.outputs["out"] = TensorInfo{"out", DType::kFloat32, false, {}};
    import::ImportedModel model;
    model.platform = "onnx";
    model.path = "alloc_test";
    model.signatures.push_back(std::move(sig_));
    // The default threads: every core inside kernels (one OpenMP team), one step at a time.
    // (With inter_op_threads > 1, independent steps go through ThreadPool::ParallelFor, whose
    // queued std::function tasks allocate: not covered here.)
    auto loaded = Model::FromImported(std::move(model), ModelOptions{});
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *loaded : nullptr;
  }
  const Shape& shape() const { return shape_; }

 private:
  import::SignatureGraph sig_;
  Shape shape_;
  ir::ValueId input_ = ir::kNoValue;
  int constants_ = 0;
  uint32_t seed_ = 0;
};

// image[1, 16, 12, 12] -> Conv+Relu -> MaxPool -> Conv -> GlobalAveragePool -> Flatten [1, 16]
// -> MatMul [16, 64] -> Reshape [1, 4, 16] -> LayerNorm -> self-attention (Q K^T / 4, Softmax,
// x V) -> output.
std::shared_ptr<Model> ConvAttentionModel(Shape* input_shape) {
  ModelBuilder b("image", Shape{1, 16, 12, 12});
  *input_shape = b.shape();
  const std::vector<int64_t> pads = {1, 1, 1, 1};
  ir::ValueId v = b.Op("Conv", {b.input(), b.Weights({16, 16, 3, 3})}, {{"pads", pads}});
  v = b.Op("Relu", {v});
  v = b.Op("MaxPool", {v},
           {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  v = b.Op("Conv", {v, b.Weights({16, 16, 3, 3})}, {{"pads", pads}});
  v = b.Op("Flatten", {b.Op("GlobalAveragePool", {v})});
  v = b.Op("MatMul", {v, b.Weights({16, 64})});
  v = b.Op("Reshape", {v, b.Ints({1, 4, 16})});
  v = b.Op("LayerNormalization", {v, b.Weights({16}), b.Weights({16})}, {{"axis", int64_t{-1}}});
  const ir::ValueId q = b.Op("MatMul", {v, b.Weights({16, 16})});
  const ir::ValueId k = b.Op("MatMul", {v, b.Weights({16, 16})});
  const ir::ValueId val = b.Op("MatMul", {v, b.Weights({16, 16})});
  ir::ValueId scores =
      b.Op("MatMul", {q, b.Op("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 2, 1}}})});
  scores = b.Op("Div", {scores, b.Scalar(4.0f)});
  v = b.Op("MatMul", {b.Op("Softmax", {scores}, {{"axis", int64_t{-1}}}), val});
  return b.Load(v);
}

// ResNet-18's topology (a 3x3 stem, max pool, four stages of two basic blocks with 1x1
// projection shortcuts where the stride or width changes, global average pool, Linear) at
// widths 8-64 on a 32x32 image. Batch norms are folded into the convolutions' biases, as
// torch.onnx.export writes them.
std::shared_ptr<Model> ResNet18Like(Shape* input_shape) {
  ModelBuilder b("image", Shape{1, 3, 32, 32});
  *input_shape = b.shape();
  ir::ValueId v = b.Op("Relu", {b.Conv(b.input(), 3, 8, 3, 1)});
  v = b.Op("MaxPool", {v},
           {{"kernel_shape", std::vector<int64_t>{3, 3}},
            {"strides", std::vector<int64_t>{2, 2}},
            {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  int64_t channels = 8;
  for (int64_t width : {8, 16, 32, 64}) {
    for (int block = 0; block < 2; ++block) {
      const int64_t stride = block == 0 && width != 8 ? 2 : 1;
      ir::ValueId y = b.Op("Relu", {b.Conv(v, channels, width, 3, stride)});
      y = b.Conv(y, width, width, 3, 1);
      const ir::ValueId shortcut =
          stride != 1 || channels != width ? b.Conv(v, channels, width, 1, stride) : v;
      v = b.Op("Relu", {b.Op("Add", {y, shortcut})});
      channels = width;
    }
  }
  v = b.Op("Flatten", {b.Op("GlobalAveragePool", {v})});
  return b.Load(b.Linear2d(v, 64, 10));
}

// MobileNet-v2's topology (inverted residual blocks: 1x1 expansion + ReLU6, 3x3 depthwise +
// ReLU6, linear 1x1 projection, residual Add where the shape allows; ReLU6 as Clip(0, 6)) at
// widths 8-64 on a 32x32 image.
std::shared_ptr<Model> MobileNetV2Like(Shape* input_shape) {
  ModelBuilder b("image", Shape{1, 3, 32, 32});
  *input_shape = b.shape();
  ir::ValueId v = b.Relu6(b.Conv(b.input(), 3, 16, 3, 2));
  int64_t channels = 16;
  struct Stage {
    int64_t expand, width, blocks, stride;
  };
  for (const Stage& s :
       {Stage{1, 8, 1, 1}, Stage{6, 12, 2, 2}, Stage{6, 16, 2, 2}, Stage{6, 24, 2, 1}}) {
    for (int64_t i = 0; i < s.blocks; ++i) {
      const int64_t stride = i == 0 ? s.stride : 1;
      const int64_t hidden = channels * s.expand;
      ir::ValueId y = v;
      if (s.expand != 1) y = b.Relu6(b.Conv(y, channels, hidden, 1, 1));
      y = b.Relu6(b.Conv(y, hidden, hidden, 3, stride, /*group=*/hidden));
      y = b.Conv(y, hidden, s.width, 1, 1);
      v = stride == 1 && channels == s.width ? b.Op("Add", {v, y}) : y;
      channels = s.width;
    }
  }
  v = b.Relu6(b.Conv(v, channels, 64, 1, 1));
  v = b.Op("Flatten", {b.Op("GlobalAveragePool", {v})});
  return b.Load(b.Linear2d(v, 64, 10));
}

// A BERT encoder as torch exports it (post-LayerNorm; attention through Reshape/Transpose
// per head, Q K^T / sqrt(d), Softmax; GELU as x * 0.5 * (1 + Erf(x / sqrt 2))): 2 layers,
// hidden 32, 2 heads, FFN 64, sequence 16.
std::shared_ptr<Model> BertEncoderLike(Shape* input_shape) {
  constexpr int64_t kSeq = 16, kHidden = 32, kHeads = 2, kHeadDim = 16, kFfn = 64;
  ModelBuilder b("hidden", Shape{1, kSeq, kHidden});
  *input_shape = b.shape();
  auto heads = [&](ir::ValueId x, std::vector<int64_t> perm) {
    return b.Op("Transpose", {b.Op("Reshape", {x, b.Ints({1, kSeq, kHeads, kHeadDim})})},
                {{"perm", perm}});
  };
  auto layer_norm = [&](ir::ValueId x) {
    return b.Op("LayerNormalization", {x, b.Weights({kHidden}), b.Weights({kHidden})},
                {{"axis", int64_t{-1}}, {"epsilon", 1e-12f}});
  };
  ir::ValueId v = b.input();
  for (int layer = 0; layer < 2; ++layer) {
    const ir::ValueId q = heads(b.Linear(v, kHidden, kHidden), {0, 2, 1, 3});
    const ir::ValueId k_t = heads(b.Linear(v, kHidden, kHidden), {0, 2, 3, 1});
    const ir::ValueId val = heads(b.Linear(v, kHidden, kHidden), {0, 2, 1, 3});
    ir::ValueId scores = b.Op("Div", {b.Op("MatMul", {q, k_t}), b.Scalar(4.0f)});
    scores = b.Op("Softmax", {scores}, {{"axis", int64_t{-1}}});
    ir::ValueId context = b.Op("MatMul", {scores, val});
    context = b.Op("Transpose", {context}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
    context = b.Op("Reshape", {context, b.Ints({1, kSeq, kHidden})});
    v = layer_norm(b.Op("Add", {b.Linear(context, kHidden, kHidden), v}));
    const ir::ValueId h = b.Linear(v, kHidden, kFfn);
    const ir::ValueId erf =
        b.Op("Erf", {b.Op("Div", {h, b.Scalar(static_cast<float>(std::sqrt(2.0)))})});
    const ir::ValueId gelu =
        b.Op("Mul", {b.Op("Mul", {h, b.Op("Add", {erf, b.Scalar(1.0f)})}), b.Scalar(0.5f)});
    v = layer_norm(b.Op("Add", {b.Linear(gelu, kFfn, kHidden), v}));
  }
  return b.Load(v);
}

struct RunCounts {
  double kiln = 0, onednn = 0, memory_creates = 0, primitive_executes = 0, primitive_args = 0;
};

// Warm runs of `model`, counted; the figures are per run.
RunCounts CountWarmRuns(const std::shared_ptr<Model>& model, const Shape& input_shape,
                        const std::string& name) {
  auto signature = model->GetSignature("serving_default");
  EXPECT_TRUE(signature.ok()) << signature.status();
  if (!signature.ok()) return {};
  const std::vector<Tensor> inputs = {Random(input_shape, 9)};
  std::vector<Tensor> outputs;
  RunCounts c;
  for (int warm = 0; warm < 3; ++warm) {
    absl::Status status = model->Run(**signature, inputs, &outputs);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return {};
  }
  constexpr int kRuns = 20;
  memory_creates = 0;
  primitive_executes = 0;
  primitive_args = 0;
  alloc_testing::AllocationCount count;
  absl::Status status;
  for (int run = 0; run < kRuns && status.ok(); ++run) {
    status = model->Run(**signature, inputs, &outputs);
  }
  count.Stop();
  EXPECT_TRUE(status.ok()) << status;
  c.onednn = static_cast<double>(count.from_onednn()) / kRuns;
  c.kiln = static_cast<double>(count.total()) / kRuns - c.onednn;
  c.memory_creates = static_cast<double>(memory_creates.load()) / kRuns;
  c.primitive_executes = static_cast<double>(primitive_executes.load()) / kRuns;
  c.primitive_args = static_cast<double>(primitive_args.load()) / kRuns;
  ::testing::Test::RecordProperty(name + "_kiln_allocations_per_run", absl::StrCat(c.kiln));
  ::testing::Test::RecordProperty(name + "_onednn_allocations_per_run", absl::StrCat(c.onednn));
  // dnnl_primitive_execute's argument map: a node per argument and a bucket array per call
  // (cvt_primitive_args and exec_args_t, oneDNN v2.6.3 src/common/primitive_exec_types.*);
  // the rest is the primitives' own (dnnl::impl::parallel's std::function, ...).
  const double argument_maps = c.primitive_args + c.primitive_executes;
  std::printf(
      "%s: heap allocations per warm run: %.1f in Kiln's code, %.1f inside oneDNN "
      "(%.1f primitive executions with %.1f arguments: %.1f for their argument maps, %.1f in the "
      "primitives; %.1f memory objects created)\n",
      name.c_str(), c.kiln, c.onednn, c.primitive_executes, c.primitive_args, argument_maps,
      c.onednn - argument_maps, c.memory_creates);
  return c;
}

using ModelFactory = std::shared_ptr<Model> (*)(Shape*);

void ExpectAllocationFreeRuns(ModelFactory make, const std::string& name) {
  Shape input_shape;
  std::shared_ptr<Model> model = make(&input_shape);
  ASSERT_NE(model, nullptr);
  const RunCounts c = CountWarmRuns(model, input_shape, name);
  EXPECT_EQ(c.kiln, 0.0) << name;
  // Every oneDNN memory object comes from the plan's run states, none per run.
  EXPECT_EQ(c.memory_creates, 0.0) << name;
  EXPECT_GT(c.primitive_executes, 0.0) << name << " ran no oneDNN primitive: nothing measured";

  // The warm run state's memory objects follow new input and output buffers: another input in
  // another tensor gives what a fresh model (new run state) computes for it.
  Shape unused;
  std::shared_ptr<Model> fresh = make(&unused);
  ASSERT_NE(fresh, nullptr);
  const std::vector<Tensor> other = {Random(input_shape, 10)};
  std::vector<Tensor> got, want;
  ASSERT_TRUE(model->Run(**model->GetSignature("serving_default"), other, &got).ok());
  ASSERT_TRUE(fresh->Run(**fresh->GetSignature("serving_default"), other, &want).ok());
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got[0].shape(), want[0].shape());
  const auto g = got[0].span<float>(), w = want[0].span<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], 1e-4f * (1.0f + std::fabs(w[i]))) << name << " element " << i;
  }
}

// What one oneDNN 2.6 call allocates, which the run states are designed around: creating a
// memory object allocates, re-pointing it does not (so a run state's objects serve every run),
// and dnnl_primitive_execute allocates per call however its arguments are passed (its
// exec_args_t is an std::unordered_map: one node per argument and a bucket array).
TEST(RunAllocationTest, OneDnnCallsThatAllocate) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_desc({4, 8}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc b_desc({8, 4}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc c_desc({4, 4}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc bias_desc({1, 4}, memory::data_type::f32, memory::format_tag::ab);
  std::vector<float> a(32, 1.0f), b(32, 0.5f), c(16), bias(4, 0.25f), copy(32);
  auto count = [](auto&& fn) {
    fn();  // warm: first-use allocations (thread-local buffers, lazy initialisation)
    alloc_testing::AllocationCount counting;
    for (int i = 0; i < 10; ++i) fn();
    counting.Stop();
    return static_cast<double>(counting.total()) / 10;
  };
  dnnl_memory_t a_mem = nullptr;
  const double per_create = count([&] {
    if (a_mem != nullptr) dnnl_memory_destroy(a_mem);
    dnnl_memory_create(&a_mem, &a_desc.data, engine.get(), a.data());
  });
  const double per_set_handle = count([&] {
    dnnl_memory_set_data_handle(a_mem, a.data());
    dnnl_memory_set_data_handle(a_mem, copy.data());
  });
  dnnl_memory_t b_mem, c_mem, bias_mem, copy_mem;
  dnnl_memory_create(&b_mem, &b_desc.data, engine.get(), b.data());
  dnnl_memory_create(&c_mem, &c_desc.data, engine.get(), c.data());
  dnnl_memory_create(&bias_mem, &bias_desc.data, engine.get(), bias.data());
  dnnl_memory_create(&copy_mem, &a_desc.data, engine.get(), copy.data());
  dnnl_memory_set_data_handle(a_mem, a.data());
  dnnl::reorder reorder(dnnl::reorder::primitive_desc(engine, a_desc, engine, a_desc));
  dnnl::matmul matmul(
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc, b_desc, bias_desc, c_desc), engine));
  const dnnl_exec_arg_t reorder_args[] = {{DNNL_ARG_FROM, a_mem}, {DNNL_ARG_TO, copy_mem}};
  const dnnl_exec_arg_t matmul_args[] = {{DNNL_ARG_SRC, a_mem},
                                         {DNNL_ARG_WEIGHTS, b_mem},
                                         {DNNL_ARG_DST, c_mem},
                                         {DNNL_ARG_BIAS, bias_mem}};
  const double per_reorder = count([&] {
    dnnl_primitive_execute(reorder.get(), stream.get(), 2, reorder_args);
    dnnl_stream_wait(stream.get());
  });
  const double per_matmul3 = count([&] {
    dnnl_primitive_execute(matmul.get(), stream.get(), 3, matmul_args);
    dnnl_stream_wait(stream.get());
  });
  const double per_matmul4 = count([&] {
    dnnl_primitive_execute(matmul.get(), stream.get(), 4, matmul_args);
    dnnl_stream_wait(stream.get());
  });
  for (dnnl_memory_t m : {a_mem, b_mem, c_mem, bias_mem, copy_mem}) dnnl_memory_destroy(m);
  EXPECT_EQ(std::vector<float>(copy.begin(), copy.end()), a);
  std::printf(
      "oneDNN 2.6 heap allocations per call: dnnl_memory_create %.1f, "
      "dnnl_memory_set_data_handle %.1f; dnnl_primitive_execute: reorder (2 args) %.1f, "
      "4x8x4 matmul without bias (3 args) %.1f, with bias (4 args) %.1f\n",
      per_create, per_set_handle / 2, per_reorder, per_matmul3, per_matmul4);
  ::testing::Test::RecordProperty("allocations_per_memory_create", absl::StrCat(per_create));
  ::testing::Test::RecordProperty("allocations_per_reorder_execute", absl::StrCat(per_reorder));
  EXPECT_GT(per_create, 0.0);      // what the run states save per memory object and run
  EXPECT_EQ(per_set_handle, 0.0);  // what they rely on
}

TEST(RunAllocationTest, WarmIndexedRunOfRealKernels) {
  ExpectAllocationFreeRuns(ConvAttentionModel, "conv_attention");
}

TEST(RunAllocationTest, WarmRunOfResNet18Like) {
  ExpectAllocationFreeRuns(ResNet18Like, "resnet18_like");
}

TEST(RunAllocationTest, WarmRunOfMobileNetV2Like) {
  ExpectAllocationFreeRuns(MobileNetV2Like, "mobilenet_v2_like");
}

TEST(RunAllocationTest, WarmRunOfBertEncoderLike) {
  ExpectAllocationFreeRuns(BertEncoderLike, "bert_encoder_like");
}

}  // namespace
}  // namespace kiln::runtime
