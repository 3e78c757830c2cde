// Opset-8 Scan (batch axis, sequence_lens, directions) through the ONNX importer, which maps
// it to kiln::ScanBatched, and the runtime. The backend suite has one forward case without
// sequence_lens; this covers per-batch lengths and reverse scanning against hand-worked sums.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/runtime/model.h"
#include "onnx/onnx.pb.h"

namespace kiln {
namespace {

void SetType(::onnx::ValueInfoProto* info, int32_t elem, const std::vector<int64_t>& dims) {
  auto* tt = info->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

// Scan-8 over x [2, 3, 1] with a running-sum body, sequence_lens (2, 3) and the scan input
// read last-first.
std::string RunningSumModel() {
  ::onnx::ModelProto model;
  model.set_ir_version(3);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(8);
  ::onnx::GraphProto* g = model.mutable_graph();
  g->set_name("scan8");
  SetType(g->add_input(), ::onnx::TensorProto::INT64, {2});
  g->mutable_input(0)->set_name("lens");
  SetType(g->add_input(), ::onnx::TensorProto::FLOAT, {2, 1});
  g->mutable_input(1)->set_name("initial");
  SetType(g->add_input(), ::onnx::TensorProto::FLOAT, {2, 3, 1});
  g->mutable_input(2)->set_name("x");
  for (const char* name : {"final", "partial_sums"}) g->add_output()->set_name(name);

  ::onnx::NodeProto* scan = g->add_node();
  scan->set_op_type("Scan");
  scan->set_name("scan");
  for (const char* in : {"lens", "initial", "x"}) scan->add_input(in);
  for (const char* out : {"final", "partial_sums"}) scan->add_output(out);
  auto* m = scan->add_attribute();
  m->set_name("num_scan_inputs");
  m->set_type(::onnx::AttributeProto::INT);
  m->set_i(1);
  auto* dirs = scan->add_attribute();
  dirs->set_name("directions");
  dirs->set_type(::onnx::AttributeProto::INTS);
  dirs->add_ints(1);
  auto* body_attr = scan->add_attribute();
  body_attr->set_name("body");
  body_attr->set_type(::onnx::AttributeProto::GRAPH);
  ::onnx::GraphProto* body = body_attr->mutable_g();
  body->set_name("body");
  SetType(body->add_input(), ::onnx::TensorProto::FLOAT, {1});
  body->mutable_input(0)->set_name("sum_in");
  SetType(body->add_input(), ::onnx::TensorProto::FLOAT, {1});
  body->mutable_input(1)->set_name("next");
  SetType(body->add_output(), ::onnx::TensorProto::FLOAT, {1});
  body->mutable_output(0)->set_name("sum_out");
  SetType(body->add_output(), ::onnx::TensorProto::FLOAT, {1});
  body->mutable_output(1)->set_name("scan_out");
  ::onnx::NodeProto* add = body->add_node();
  add->set_op_type("Add");
  add->add_input("sum_in");
  add->add_input("next");
  add->add_output("sum_out");
  ::onnx::NodeProto* id = body->add_node();
  id->set_op_type("Identity");
  id->add_input("sum_out");
  id->add_output("scan_out");
  return model.SerializeAsString();
}

TEST(Scan8, SequenceLengthsAndReverseDirection) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "scan8_running_sum.onnx").string();
  std::ofstream(path, std::ios::binary) << RunningSumModel();
  auto model = runtime::Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, Tensor> inputs = {
      {"lens", Tensor::FromVector<int64_t>({2, 3}, Shape{2})},
      {"initial", Tensor::FromVector<float>({0, 100}, Shape{2, 1})},
      {"x", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3, 1})},
  };
  auto out = (*model)->Run("serving_default", inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  // Batch 0 reads x[0][1], x[0][0] (length 2, reversed): sums 2, 3, then a zero pad.
  // Batch 1 starts at 100 and reads 6, 5, 4: 106, 111, 115.
  const Tensor& final_sum = out->at("final");
  ASSERT_EQ(final_sum.shape(), Shape({2, 1}));
  EXPECT_EQ(std::vector<float>(final_sum.data<float>(), final_sum.data<float>() + 2),
            (std::vector<float>{3, 115}));
  const Tensor& partial = out->at("partial_sums");
  ASSERT_EQ(partial.shape(), Shape({2, 3, 1}));
  EXPECT_EQ(std::vector<float>(partial.data<float>(), partial.data<float>() + 6),
            (std::vector<float>{2, 3, 0, 106, 111, 115}));

  inputs["lens"] = Tensor::FromVector<int64_t>({4, 1}, Shape{2});
  auto bad = (*model)->Run("serving_default", inputs);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sequence_lens[0] = 4"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace kiln
