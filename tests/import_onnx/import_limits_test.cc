// What an ONNX file can make the importer do is bounded: each case here is a model that made
// the import allocate gigabytes from a few hundred bytes, run for minutes, or overflow its
// stack (found while fuzzing fuzz/onnx_loader_fuzz.cc; each has a seed in
// fuzz/corpus_seeds/onnx_loader_fuzz/). Each must import, or be refused with an error naming
// why, fast.
#include <pthread.h>

#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "import/onnx/onnx_internal.h"
#include "kiln/import/onnx.h"
#include "onnx/onnx.pb.h"

namespace kiln::import {
namespace {

using ::testing::HasSubstr;

::onnx::ModelProto EmptyModel() {
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  auto* op = model.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  model.mutable_graph()->set_name("g");
  return model;
}

// A sparse tensor with no values whose dense shape is `dense_dims` of `dtype`.
void EmptySparse(::onnx::SparseTensorProto* sparse, const std::string& name, int32_t dtype,
                 const std::vector<int64_t>& dense_dims) {
  sparse->mutable_values()->set_name(name);
  sparse->mutable_values()->set_data_type(dtype);
  sparse->mutable_values()->add_dims(0);
  sparse->mutable_indices()->set_data_type(::onnx::TensorProto::INT64);
  sparse->mutable_indices()->add_dims(0);
  for (int64_t d : dense_dims) sparse->add_dims(d);
}

absl::StatusOr<ImportedModel> Import(const ::onnx::ModelProto& model) {
  return ImportOnnxBytes(model.SerializeAsString(), "limits.onnx");
}

TEST(OnnxImportLimits, SparseInitializerDensifyingToGigabytesIsRefusedBeforeAllocating) {
  // 2^28 strings would be 8 GiB of std::string: the fuzzer's out-of-memory.
  ::onnx::ModelProto model = EmptyModel();
  EmptySparse(model.mutable_graph()->add_sparse_initializer(), "s", ::onnx::TensorProto::STRING,
              {int64_t{1} << 28});
  model.mutable_graph()->add_output()->set_name("s");
  absl::StatusOr<ImportedModel> m = Import(model);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("sparse tensor 's'"));
  EXPECT_THAT(m.status().message(), HasSubstr("densifying shape"));
}

TEST(OnnxImportLimits, SparseTensorsShareOneDensifyingBudget) {
  // One limit per tensor would let a model of many sparse Constants allocate without bound:
  // each densifying takes its bytes from what the whole import may still densify.
  ::onnx::SparseTensorProto sparse;
  EmptySparse(&sparse, "v", ::onnx::TensorProto::FLOAT, {4, 4});  // 64 bytes dense
  int64_t left = 100;
  absl::StatusOr<Tensor> first = onnx_internal::TensorFromSparseProto(sparse, "", &left);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(left, 36);
  absl::StatusOr<Tensor> second = onnx_internal::TensorFromSparseProto(sparse, "", &left);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("needs 64 bytes"));
  EXPECT_EQ(left, 36);
}

TEST(OnnxImportLimits, SparseConstantNodesAreBoundedToo) {
  ::onnx::ModelProto model = EmptyModel();
  auto* node = model.mutable_graph()->add_node();
  node->set_op_type("Constant");
  node->add_output("c");
  auto* attr = node->add_attribute();
  attr->set_name("sparse_value");
  attr->set_type(::onnx::AttributeProto::SPARSE_TENSOR);
  // 2^28 doubles: 2 GiB, twice the budget.
  EmptySparse(attr->mutable_sparse_tensor(), "v", ::onnx::TensorProto::DOUBLE,
              {int64_t{1} << 14, int64_t{1} << 14});
  model.mutable_graph()->add_output()->set_name("c");
  absl::StatusOr<ImportedModel> m = Import(model);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("sparse tensor 'v'"));
}

TEST(OnnxImportLimits, SmallSparseTensorsStillDensify) {
  ::onnx::ModelProto model = EmptyModel();
  auto* sparse = model.mutable_graph()->add_sparse_initializer();
  EmptySparse(sparse, "s", ::onnx::TensorProto::FLOAT, {2, 3});
  sparse->mutable_values()->set_dims(0, 1);
  sparse->mutable_values()->add_float_data(7.0f);
  sparse->mutable_indices()->set_dims(0, 1);
  sparse->mutable_indices()->add_int64_data(4);
  model.mutable_graph()->add_output()->set_name("s");
  absl::StatusOr<ImportedModel> m = Import(model);
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = m->signatures.at(0).graph;
  const Tensor& t = *g.value(g.outputs[0]).constant;
  ASSERT_EQ(t.num_elements(), 6);
  EXPECT_EQ(t.data<float>()[4], 7.0f);
  EXPECT_EQ(t.data<float>()[0], 0.0f);
}

// F0 is one Relu; F(k) calls F(k-1) twice in a chain, so calling F(depth) inlines 2^depth Relus.
::onnx::ModelProto DoublingFunctions(int depth) {
  ::onnx::ModelProto model = EmptyModel();
  auto* local = model.add_opset_import();
  local->set_domain("local");
  local->set_version(1);
  auto* graph = model.mutable_graph();
  auto* in = graph->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(1);
  auto* call = graph->add_node();
  call->set_op_type("F" + std::to_string(depth));
  call->set_domain("local");
  call->add_input("x");
  call->add_output("y");
  graph->add_output()->set_name("y");
  for (int k = 0; k <= depth; ++k) {
    auto* f = model.add_functions();
    f->set_name("F" + std::to_string(k));
    f->set_domain("local");
    f->add_input("a");
    f->add_output("b");
    auto* op = f->add_opset_import();
    op->set_domain(k == 0 ? "" : "local");
    op->set_version(k == 0 ? 17 : 1);
    if (k == 0) {
      auto* relu = f->add_node();
      relu->set_op_type("Relu");
      relu->add_input("a");
      relu->add_output("b");
      continue;
    }
    for (int half = 0; half < 2; ++half) {
      auto* n = f->add_node();
      n->set_op_type("F" + std::to_string(k - 1));
      n->set_domain("local");
      n->add_input(half == 0 ? "a" : "t");
      n->add_output(half == 0 ? "t" : "b");
    }
  }
  return model;
}

TEST(OnnxImportLimits, FunctionsCallingEachOtherExponentiallyAreRefused) {
  // 2^30 Relus from 62 NodeProtos; before the budget this ran until the fuzzer's timeout.
  absl::StatusOr<ImportedModel> m = Import(DoublingFunctions(30));
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("inlining the model's local functions"));
}

TEST(OnnxImportLimits, ModestFunctionReuseIsInlined) {
  // 2^6 = 64 Relus from 14 NodeProtos (an expansion of less than 5 per NodeProto).
  absl::StatusOr<ImportedModel> m = Import(DoublingFunctions(6));
  ASSERT_TRUE(m.ok()) << m.status();
  int relus = 0;
  for (const auto& node : m->signatures.at(0).graph.nodes()) relus += node.op == "Relu";
  EXPECT_EQ(relus, 64);
}

// Runs `fn` on a thread with a 1 MiB stack (loader threads need not have main's 8 MiB).
void OnSmallStack(void (*fn)(void*), void* arg) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{1} << 20);
  struct Call {
    void (*fn)(void*);
    void* arg;
  } call{fn, arg};
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* p) -> void* {
                  auto* c = static_cast<Call*>(p);
                  c->fn(c->arg);
                  return nullptr;
                },
                &call),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(OnnxImportLimits, LongChainWrittenInReverseOrderIsSortedWithoutDeepRecursion) {
  // y1 = Relu(x), y2 = Relu(y1), ... written last node first: sorting them recursed once per
  // node, and 20000 nodes overflowed a 1 MiB stack.
  constexpr int kNodes = 20000;
  ::onnx::ModelProto model = EmptyModel();
  auto* graph = model.mutable_graph();
  auto* in = graph->add_input();
  in->set_name("y0");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(1);
  for (int k = kNodes; k >= 1; --k) {
    auto* n = graph->add_node();
    n->set_op_type("Relu");
    n->add_input("y" + std::to_string(k - 1));
    n->add_output("y" + std::to_string(k));
  }
  graph->add_output()->set_name("y" + std::to_string(kNodes));
  struct Result {
    ::onnx::ModelProto* model;
    absl::Status status;
    int relus = 0;
  } result{&model};
  OnSmallStack(
      [](void* p) {
        auto* r = static_cast<Result*>(p);
        absl::StatusOr<ImportedModel> m = Import(*r->model);
        r->status = m.status();
        if (!m.ok()) return;
        for (const auto& node : m->signatures.at(0).graph.nodes()) r->relus += node.op == "Relu";
      },
      &result);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.relus, kNodes);
}

TEST(OnnxImportLimits, CyclesAreStillReported) {
  ::onnx::ModelProto model = EmptyModel();
  auto* graph = model.mutable_graph();
  for (const auto& [from, to] : {std::pair{"b", "a"}, std::pair{"a", "b"}}) {
    auto* n = graph->add_node();
    n->set_op_type("Relu");
    n->add_input(from);
    n->add_output(to);
  }
  graph->add_output()->set_name("a");
  absl::StatusOr<ImportedModel> m = Import(model);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("has a cycle through node"));
}

}  // namespace
}  // namespace kiln::import
