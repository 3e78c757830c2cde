// ONNX importer tests on models built here with the protobuf API, and on the real models in
// ../shared/testdata/models.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/import/onnx.h"
#include "kiln/ir/onnx_types.h"
#include "onnx/onnx.pb.h"

namespace kiln::import {
namespace {

using ::testing::HasSubstr;

// Small builder over the generated protobuf API.
struct ModelBuilder {
  ::onnx::ModelProto model;
  ::onnx::GraphProto* graph;

  explicit ModelBuilder(int64_t opset, const std::string& domain_extra = "") {
    model.set_ir_version(8);
    model.set_producer_name("kiln-test");
    auto* op = model.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    if (!domain_extra.empty()) {
      auto* ms = model.add_opset_import();
      ms->set_domain(domain_extra);
      ms->set_version(1);
    }
    graph = model.mutable_graph();
    graph->set_name("test_graph");
  }

  static void SetType(::onnx::ValueInfoProto* info, int32_t elem,
                      const std::vector<std::string>& dims) {
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (const std::string& d : dims) {
      auto* dim = shape->add_dim();
      if (d == "?") continue;
      if (std::isdigit(static_cast<unsigned char>(d[0]))) {
        dim->set_dim_value(std::stoll(d));
      } else {
        dim->set_dim_param(d);
      }
    }
  }
  void Input(const std::string& name, int32_t elem, const std::vector<std::string>& dims,
             ::onnx::GraphProto* g = nullptr) {
    auto* in = (g ? g : graph)->add_input();
    in->set_name(name);
    SetType(in, elem, dims);
  }
  void Output(const std::string& name, int32_t elem = ::onnx::TensorProto::FLOAT,
              const std::vector<std::string>& dims = {}, ::onnx::GraphProto* g = nullptr) {
    auto* out = (g ? g : graph)->add_output();
    out->set_name(name);
    if (elem != 0) SetType(out, elem, dims);
  }
  ::onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const std::string& name = "",
                          ::onnx::GraphProto* g = nullptr) {
    auto* n = (g ? g : graph)->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? outputs[0] + "_node" : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }
  static void IntsAttr(::onnx::NodeProto* n, const std::string& key, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void IntAttr(::onnx::NodeProto* n, const std::string& key, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void FloatAttr(::onnx::NodeProto* n, const std::string& key, float v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  ::onnx::TensorProto* FloatInit(const std::string& name, const std::vector<int64_t>& dims,
                                 const std::vector<float>& values, bool raw = true) {
    auto* t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    if (raw) {
      t->set_raw_data(values.data(), values.size() * sizeof(float));
    } else {
      for (float v : values) t->add_float_data(v);
    }
    return t;
  }
  std::string Bytes() const { return model.SerializeAsString(); }
  absl::StatusOr<ImportedModel> Import() const { return ImportOnnxBytes(Bytes(), "test.onnx"); }
};

const ir::Graph& MainGraph(const ImportedModel& m) { return m.signatures.at(0).graph; }

std::vector<std::string> LiveOps(const ir::Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes()) {
    if (!n.removed) ops.push_back(n.op);
  }
  return ops;
}

const ir::Node* FindOp(const ir::Graph& g, const std::string& op) {
  for (const auto& n : g.nodes()) {
    if (n.op == op) return &n;
  }
  return nullptr;
}

std::vector<int64_t> ConstInts(const ir::Graph& g, ir::ValueId v) {
  EXPECT_TRUE(g.IsConstant(v));
  if (!g.IsConstant(v)) return {};
  const Tensor& t = *g.value(v).constant;
  EXPECT_EQ(t.dtype(), DType::kInt64);
  return {t.data<int64_t>(), t.data<int64_t>() + t.num_elements()};
}

TEST(OnnxImport, MlpGraphWithSymbolicBatchAndInitializers) {
  ModelBuilder b(13);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"batch", "4"});
  b.FloatInit("W", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.FloatInit("B", {2}, {0.5f, -0.5f}, /*raw=*/false);
  b.Node("MatMul", {"x", "W"}, {"xw"});
  b.Node("Add", {"xw", "B"}, {"xwb"});
  b.Node("Relu", {"xwb"}, {"y"});
  b.Output("y", ::onnx::TensorProto::FLOAT, {"batch", "2"});
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->platform, "onnx");
  ASSERT_EQ(m->signatures.size(), 1u);
  const SignatureGraph& sig = m->signatures[0];
  EXPECT_EQ(sig.key, "serving_default");
  EXPECT_EQ(sig.method_name, "tensorflow/serving/predict");
  EXPECT_THAT(sig.input_keys, ::testing::ElementsAre("x"));
  EXPECT_THAT(sig.output_keys, ::testing::ElementsAre("y"));
  EXPECT_EQ(sig.inputs.at("x").dtype, DType::kFloat32);
  EXPECT_THAT(sig.inputs.at("x").shape, ::testing::ElementsAre(-1, 4));
  const ir::Graph& g = sig.graph;
  const ir::Value& x = g.value(g.inputs[0]);
  ASSERT_EQ(x.type.rank(), 2);
  EXPECT_EQ(x.type.dims[0].symbol, "batch");
  EXPECT_EQ(x.type.dims[1].value, 4);
  EXPECT_THAT(LiveOps(g), ::testing::ElementsAre("MatMul", "Add", "Relu"));
  auto w = g.FindValue("W");
  ASSERT_TRUE(w.has_value());
  ASSERT_TRUE(g.IsConstant(*w));
  EXPECT_EQ(g.value(*w).constant->data<float>()[7], 8.0f);
  auto bias = g.FindValue("B");
  ASSERT_TRUE(bias.has_value());
  EXPECT_EQ(g.value(*bias).constant->data<float>()[1], -0.5f);
  EXPECT_EQ(g.value(g.outputs[0]).name, "y");
  EXPECT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
}

TEST(OnnxImport, InitializersOfEveryDtypeInTypedFieldsAndRawData) {
  ModelBuilder b(13);
  auto add = [&](const std::string& name, int32_t type) {
    auto* t = b.graph->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    t->add_dims(3);
    return t;
  };
  using TP = ::onnx::TensorProto;
  {
    auto* t = add("i8", TP::INT8);
    for (int v : {1, -2, 3}) t->add_int32_data(v);
    t = add("u8", TP::UINT8);
    for (int v : {0, 200, 255}) t->add_int32_data(v);
    t = add("i16", TP::INT16);
    for (int v : {-300, 0, 300}) t->add_int32_data(v);
    t = add("u16", TP::UINT16);
    for (int v : {1, 60000, 3}) t->add_int32_data(v);
    t = add("i32", TP::INT32);
    for (int v : {-7, 0, 7}) t->add_int32_data(v);
    t = add("i64", TP::INT64);
    for (int64_t v : {int64_t{-1} << 40, int64_t{0}, int64_t{5}}) t->add_int64_data(v);
    t = add("u32", TP::UINT32);
    for (uint64_t v : {1u, 4000000000u, 3u}) t->add_uint64_data(v);
    t = add("u64", TP::UINT64);
    for (uint64_t v : {uint64_t{1} << 63, uint64_t{0}, uint64_t{9}}) t->add_uint64_data(v);
    t = add("f64", TP::DOUBLE);
    for (double v : {0.25, -1e300, 3.0}) t->add_double_data(v);
    t = add("bool", TP::BOOL);
    for (int v : {1, 0, 1}) t->add_int32_data(v);
    t = add("f16", TP::FLOAT16);
    for (int v : {0x3C00, 0xC000, 0x0000}) t->add_int32_data(v);  // 1, -2, 0
    t = add("bf16", TP::BFLOAT16);
    for (int v : {0x3F80, 0x4000, 0xBF80}) t->add_int32_data(v);  // 1, 2, -1
    t = add("str", TP::STRING);
    for (const char* s : {"a", "", "hello"}) t->add_string_data(s);
    t = add("raw_i64", TP::INT64);
    const int64_t raw[3] = {10, 20, 30};
    t->set_raw_data(raw, sizeof(raw));
    t = add("raw_f16", TP::FLOAT16);
    const uint16_t half[3] = {0x3C00, 0x3800, 0x4000};  // 1, 0.5, 2
    t->set_raw_data(half, sizeof(half));
  }
  b.Input("x", TP::FLOAT, {"1"});
  b.Node("Identity", {"x"}, {"y"});
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  auto get = [&](const std::string& name) -> const Tensor& {
    auto id = g.FindValue(name);
    EXPECT_TRUE(id.has_value()) << name;
    return *g.value(*id).constant;
  };
  EXPECT_EQ(get("i8").data<int8_t>()[1], -2);
  EXPECT_EQ(get("u8").data<uint8_t>()[1], 200);
  EXPECT_EQ(get("i16").data<int16_t>()[0], -300);
  EXPECT_EQ(get("u16").data<uint16_t>()[1], 60000);
  EXPECT_EQ(get("i32").data<int32_t>()[0], -7);
  EXPECT_EQ(get("i64").data<int64_t>()[0], int64_t{-1} << 40);
  EXPECT_EQ(get("u32").data<uint32_t>()[1], 4000000000u);
  EXPECT_EQ(get("u64").data<uint64_t>()[0], uint64_t{1} << 63);
  EXPECT_EQ(get("f64").data<double>()[1], -1e300);
  EXPECT_EQ(get("bool").data<bool>()[1], false);
  EXPECT_EQ(get("bool").data<bool>()[2], true);
  EXPECT_EQ(static_cast<float>(get("f16").data<Float16>()[1]), -2.0f);
  EXPECT_EQ(static_cast<float>(get("bf16").data<BFloat16>()[2]), -1.0f);
  EXPECT_EQ(get("str").data<std::string>()[2], "hello");
  EXPECT_EQ(get("raw_i64").data<int64_t>()[2], 30);
  EXPECT_EQ(static_cast<float>(get("raw_f16").data<Float16>()[1]), 0.5f);
  EXPECT_EQ(get("f64").dtype(), DType::kFloat64);
}

// ir/onnx_types.h writes ONNX's element-type codes as numbers (ir does not depend on the
// protos); they must be onnx.proto's, both ways, for every DType.
TEST(OnnxImport, IrElementTypeCodesAreOnnxProtos) {
  using ::onnx::TensorProto;
  const std::pair<DType, TensorProto::DataType> expected[] = {
      {DType::kFloat32, TensorProto::FLOAT},  {DType::kUInt8, TensorProto::UINT8},
      {DType::kInt8, TensorProto::INT8},      {DType::kUInt16, TensorProto::UINT16},
      {DType::kInt16, TensorProto::INT16},    {DType::kInt32, TensorProto::INT32},
      {DType::kInt64, TensorProto::INT64},    {DType::kString, TensorProto::STRING},
      {DType::kBool, TensorProto::BOOL},      {DType::kFloat16, TensorProto::FLOAT16},
      {DType::kFloat64, TensorProto::DOUBLE}, {DType::kUInt32, TensorProto::UINT32},
      {DType::kUInt64, TensorProto::UINT64},  {DType::kBFloat16, TensorProto::BFLOAT16},
  };
  for (const auto& [dtype, code] : expected) {
    EXPECT_EQ(ir::OnnxCodeFromDType(dtype), code) << DTypeName(dtype);
    EXPECT_EQ(ir::DTypeFromOnnxCode(code), dtype) << TensorProto::DataType_Name(code);
  }
  EXPECT_EQ(ir::OnnxCodeFromDType(DType::kInvalid), TensorProto::UNDEFINED);
  for (TensorProto::DataType unsupported :
       {TensorProto::UNDEFINED, TensorProto::COMPLEX64, TensorProto::COMPLEX128}) {
    EXPECT_EQ(ir::DTypeFromOnnxCode(unsupported), DType::kInvalid);
  }
  EXPECT_EQ(ir::DTypeFromOnnxCode(-1), DType::kInvalid);
}

TEST(OnnxImport, RawDataOfWrongSizeNamesTheTensor) {
  ModelBuilder b(13);
  auto* t = b.FloatInit("weights", {2, 3}, {1, 2, 3});  // 12 bytes for 6 floats
  (void)t;
  b.Input("x", ::onnx::TensorProto::FLOAT, {"1"});
  b.Node("Identity", {"x"}, {"y"});
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("tensor 'weights'"));
  EXPECT_THAT(m.status().message(), HasSubstr("raw_data has 12 bytes"));
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kiln_onnx_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), bytes.size());
}

TEST(OnnxImport, ExternalDataIsReadRelativeToTheModel) {
  TempDir dir;
  std::vector<float> weights = {1.5f, 2.5f, 3.5f, 4.5f};
  std::string blob(16, 'x');  // 16 bytes of padding before the tensor
  blob.append(reinterpret_cast<const char*>(weights.data()), weights.size() * sizeof(float));
  WriteFile(dir.path() + "/weights.bin", blob);

  ModelBuilder b(13);
  auto* t = b.graph->add_initializer();
  t->set_name("W");
  t->set_data_type(::onnx::TensorProto::FLOAT);
  t->add_dims(2);
  t->add_dims(2);
  t->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto kv = [&](const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  kv("location", "weights.bin");
  kv("offset", "16");
  kv("length", "16");
  b.Input("x", ::onnx::TensorProto::FLOAT, {"2", "2"});
  b.Node("MatMul", {"x", "W"}, {"y"});
  b.Output("y");
  WriteFile(dir.path() + "/model.onnx", b.Bytes());

  absl::StatusOr<ImportedModel> m = ImportOnnxFile(dir.path() + "/model.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  const Tensor& w = *g.value(*g.FindValue("W")).constant;
  EXPECT_EQ(w.data<float>()[0], 1.5f);
  EXPECT_EQ(w.data<float>()[3], 4.5f);

  // From bytes there is no directory to resolve the file against.
  absl::StatusOr<ImportedModel> from_bytes = b.Import();
  ASSERT_FALSE(from_bytes.ok());
  EXPECT_THAT(from_bytes.status().message(), HasSubstr("weights.bin"));

  // A file too short for the tensor is an error with both sizes.
  WriteFile(dir.path() + "/weights.bin", std::string(20, 'x'));
  m = ImportOnnxFile(dir.path() + "/model.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("has 20 bytes"));
  // Escaping the model directory is refused.
  t->mutable_external_data(0)->set_value("../etc/passwd");
  WriteFile(dir.path() + "/model.onnx", b.Bytes());
  m = ImportOnnxFile(dir.path() + "/model.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("inside the model's directory"));
}

TEST(OnnxImport, ConstantNodesBecomeConstants) {
  ModelBuilder b(13);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"3"});
  auto* c1 = b.Node("Constant", {}, {"c_tensor"});
  auto* a = c1->add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(::onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) a->mutable_t()->add_float_data(v);
  auto* c2 = b.Node("Constant", {}, {"c_ints"});
  ModelBuilder::IntsAttr(c2, "value_ints", {4, 5});
  auto* c3 = b.Node("Constant", {}, {"c_float"});
  ModelBuilder::FloatAttr(c3, "value_float", 0.5f);
  b.Node("Add", {"x", "c_tensor"}, {"s"});
  b.Node("Mul", {"s", "c_float"}, {"y"});
  b.Output("y");
  b.Output("c_ints", ::onnx::TensorProto::INT64, {"2"});
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  EXPECT_THAT(LiveOps(g), ::testing::ElementsAre("Add", "Mul"));
  EXPECT_THAT(ConstInts(g, *g.FindValue("c_ints")), ::testing::ElementsAre(4, 5));
  EXPECT_EQ(g.value(*g.FindValue("c_float")).constant->rank(), 0);
  EXPECT_EQ(g.value(*g.FindValue("c_tensor")).constant->data<float>()[2], 3.0f);
  EXPECT_EQ(g.outputs[1], *g.FindValue("c_ints"));
}

TEST(OnnxImport, OldOpsetAttributesBecomeInputs) {
  ModelBuilder b(9);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"2", "3", "4"});
  auto* slice = b.Node("Slice", {"x"}, {"sliced"});
  ModelBuilder::IntsAttr(slice, "starts", {0, 1});
  ModelBuilder::IntsAttr(slice, "ends", {1, 3});
  ModelBuilder::IntsAttr(slice, "axes", {0, 2});
  auto* unsq = b.Node("Unsqueeze", {"sliced"}, {"unsq"});
  ModelBuilder::IntsAttr(unsq, "axes", {0});
  auto* sq = b.Node("Squeeze", {"unsq"}, {"sq"});
  ModelBuilder::IntsAttr(sq, "axes", {0});
  auto* mean = b.Node("ReduceMean", {"sq"}, {"mean"});
  ModelBuilder::IntsAttr(mean, "axes", {-1});
  ModelBuilder::IntAttr(mean, "keepdims", 0);
  auto* sum = b.Node("ReduceSum", {"mean"}, {"sum"});  // no axes: all of them
  (void)sum;
  auto* split = b.Node("Split", {"x"}, {"s0", "s1"});
  ModelBuilder::IntAttr(split, "axis", 2);
  ModelBuilder::IntsAttr(split, "split", {1, 3});
  auto* even = b.Node("Split", {"x"}, {"e0", "e1"});
  ModelBuilder::IntAttr(even, "axis", 2);
  auto* pad = b.Node("Pad", {"x"}, {"padded"});
  ModelBuilder::IntsAttr(pad, "pads", {0, 0, 1, 0, 0, 1});
  ModelBuilder::FloatAttr(pad, "value", 2.0f);
  auto* clip = b.Node("Clip", {"x"}, {"clipped"});
  ModelBuilder::FloatAttr(clip, "min", -1.0f);
  ModelBuilder::FloatAttr(clip, "max", 1.0f);
  auto* topk = b.Node("TopK", {"x"}, {"vals", "idx"});
  ModelBuilder::IntAttr(topk, "k", 2);
  for (const char* o : {"sum", "s0", "s1", "e0", "e1", "padded", "clipped", "vals", "idx"}) {
    b.Output(o, 0);
  }
  // TopK's k attribute only existed before opset 10; run the same graph at opset 9.
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  const ir::Node* s = FindOp(g, "Slice");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->inputs.size(), 4u);
  EXPECT_THAT(ConstInts(g, s->inputs[1]), ::testing::ElementsAre(0, 1));
  EXPECT_THAT(ConstInts(g, s->inputs[2]), ::testing::ElementsAre(1, 3));
  EXPECT_THAT(ConstInts(g, s->inputs[3]), ::testing::ElementsAre(0, 2));
  EXPECT_FALSE(s->HasAttr("starts"));
  const ir::Node* u = FindOp(g, "Unsqueeze");
  ASSERT_EQ(u->inputs.size(), 2u);
  EXPECT_THAT(ConstInts(g, u->inputs[1]), ::testing::ElementsAre(0));
  const ir::Node* q = FindOp(g, "Squeeze");
  EXPECT_THAT(ConstInts(g, q->inputs[1]), ::testing::ElementsAre(0));
  const ir::Node* rm = FindOp(g, "ReduceMean");
  EXPECT_THAT(ConstInts(g, rm->inputs[1]), ::testing::ElementsAre(-1));
  EXPECT_EQ(rm->GetInt("keepdims", 1), 0);
  const ir::Node* rs = FindOp(g, "ReduceSum");
  EXPECT_EQ(rs->inputs.size(), 1u);
  std::vector<const ir::Node*> splits;
  for (const auto& n : g.nodes()) {
    if (n.op == "Split") splits.push_back(&n);
  }
  ASSERT_EQ(splits.size(), 2u);
  EXPECT_THAT(ConstInts(g, splits[0]->inputs[1]), ::testing::ElementsAre(1, 3));
  EXPECT_EQ(splits[1]->inputs.size(), 1u);
  EXPECT_EQ(splits[1]->GetInt("num_outputs", 0), 2);
  const ir::Node* p = FindOp(g, "Pad");
  ASSERT_EQ(p->inputs.size(), 3u);
  EXPECT_THAT(ConstInts(g, p->inputs[1]), ::testing::ElementsAre(0, 0, 1, 0, 0, 1));
  EXPECT_EQ(g.value(p->inputs[2]).constant->data<float>()[0], 2.0f);
  const ir::Node* c = FindOp(g, "Clip");
  ASSERT_EQ(c->inputs.size(), 3u);
  EXPECT_EQ(g.value(c->inputs[1]).constant->data<float>()[0], -1.0f);
  EXPECT_EQ(g.value(c->inputs[2]).constant->data<float>()[0], 1.0f);
  const ir::Node* t = FindOp(g, "TopK");
  EXPECT_THAT(ConstInts(g, t->inputs[1]), ::testing::ElementsAre(2));
  EXPECT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
}

TEST(OnnxImport, Softmax11KeepsItsTwoDimensionalSemantics) {
  ModelBuilder b(11);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"2", "3", "4"});
  auto* inner = b.Node("Softmax", {"x"}, {"flat_axis1"});
  ModelBuilder::IntAttr(inner, "axis", 1);
  auto* last = b.Node("LogSoftmax", {"x"}, {"last_axis"});
  ModelBuilder::IntAttr(last, "axis", 2);
  b.Output("flat_axis1");
  b.Output("last_axis");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  // axis=1 on rank 3: flatten to [2, 12], softmax over the 12, reshape back.
  EXPECT_THAT(LiveOps(g), ::testing::ElementsAre("Flatten", "Softmax", "Shape", "Reshape",
                                                 "LogSoftmax"));
  const ir::Node* ls = FindOp(g, "LogSoftmax");
  EXPECT_EQ(ls->GetInt("axis", 0), -1);
  EXPECT_EQ(g.value(g.outputs[0]).producer, 3);
}

TEST(OnnxImport, UpsampleAndOldResizeBecomeResize) {
  ModelBuilder b(9);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"1", "1", "2", "2"});
  b.FloatInit("scales", {4}, {1, 1, 2, 2});
  b.Node("Upsample", {"x", "scales"}, {"y"});
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Node* r = FindOp(MainGraph(*m), "Resize");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->inputs.size(), 3u);
  EXPECT_EQ(r->inputs[1], ir::kNoValue);
  EXPECT_EQ(r->GetString("coordinate_transformation_mode", ""), "asymmetric");
  EXPECT_EQ(r->GetString("nearest_mode", ""), "floor");
  EXPECT_EQ(r->GetString("mode", ""), "nearest");
}

TEST(OnnxImport, Resize11DropsEmptyRoiAndScalesAndNewerOpsetsPassThrough) {
  ModelBuilder b(11);
  using TP = ::onnx::TensorProto;
  b.Input("x", TP::FLOAT, {"1", "1", "2", "2"});
  b.FloatInit("roi", {0}, {});
  b.FloatInit("scales", {0}, {});
  auto* sizes = b.graph->add_initializer();
  sizes->set_name("sizes");
  sizes->set_data_type(TP::INT64);
  sizes->add_dims(4);
  for (int64_t v : {1, 1, 4, 4}) sizes->add_int64_data(v);
  b.Node("Resize", {"x", "roi", "scales", "sizes"}, {"y"});
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Node* r = FindOp(MainGraph(*m), "Resize");
  ASSERT_EQ(r->inputs.size(), 4u);
  EXPECT_EQ(r->inputs[1], ir::kNoValue);
  EXPECT_EQ(r->inputs[2], ir::kNoValue);
  EXPECT_THAT(ConstInts(MainGraph(*m), r->inputs[3]), ::testing::ElementsAre(1, 1, 4, 4));

  // Opset 18 already has Reduce* axes as inputs: nothing to move.
  ModelBuilder n(18);
  n.Input("x", TP::FLOAT, {"2", "3"});
  n.Input("axes", TP::INT64, {"1"});
  auto* red = n.Node("ReduceMax", {"x", "axes"}, {"y"});
  ModelBuilder::IntAttr(red, "keepdims", 0);
  n.Output("y");
  m = n.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Node* rm = FindOp(MainGraph(*m), "ReduceMax");
  ASSERT_EQ(rm->inputs.size(), 2u);
  EXPECT_EQ(MainGraph(*m).value(rm->inputs[1]).name, "axes");
}

TEST(OnnxImport, LoopBodyHasItsOwnInputsAndCapturesOuterValues) {
  ModelBuilder b(13);
  using TP = ::onnx::TensorProto;
  b.Input("trip", TP::INT64, {});
  b.Input("init", TP::FLOAT, {"2"});
  b.Input("step", TP::FLOAT, {"2"});
  auto* loop = b.Node("Loop", {"trip", "", "init"}, {"final", "scan_out"}, "loop");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto::GRAPH);
  ::onnx::GraphProto* body = a->mutable_g();
  body->set_name("body");
  b.Input("i", TP::INT64, {}, body);
  b.Input("cond_in", TP::BOOL, {}, body);
  b.Input("acc", TP::FLOAT, {"2"}, body);
  b.Node("Identity", {"cond_in"}, {"cond_out"}, "", body);
  b.Node("Add", {"acc", "step"}, {"acc_out"}, "", body);
  b.Node("Identity", {"acc_out"}, {"scanned"}, "", body);
  b.Output("cond_out", TP::BOOL, {}, body);
  b.Output("acc_out", TP::FLOAT, {"2"}, body);
  b.Output("scanned", TP::FLOAT, {"2"}, body);
  b.Output("final");
  b.Output("scan_out");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Node* l = FindOp(MainGraph(*m), "Loop");
  ASSERT_NE(l, nullptr);
  ASSERT_EQ(l->inputs.size(), 3u);
  EXPECT_EQ(l->inputs[1], ir::kNoValue);
  ir::GraphPtr g = l->GetGraph("body");
  ASSERT_EQ(g->inputs.size(), 3u);
  ASSERT_EQ(g->outputs.size(), 3u);
  ASSERT_EQ(g->captures.size(), 1u);
  EXPECT_EQ(g->captures[0].second, "step");
  EXPECT_TRUE(ir::Verify(MainGraph(*m)).ok()) << ir::Verify(MainGraph(*m));
}

TEST(OnnxImport, IfBranchesCaptureOuterValuesAndCopyConstants) {
  ModelBuilder b(13);
  using TP = ::onnx::TensorProto;
  b.Input("cond", TP::BOOL, {});
  b.Input("x", TP::FLOAT, {"3"});
  b.FloatInit("k", {1}, {2.0f});
  auto* node = b.Node("If", {"cond"}, {"y"}, "the_if");
  auto add_branch = [&](const char* key, const char* op) {
    auto* a = node->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::GRAPH);
    ::onnx::GraphProto* g = a->mutable_g();
    g->set_name(key);
    // Nested If inside the branch: reads x from two scopes out.
    auto* inner_if = b.Node("If", {"cond"}, {std::string(key) + "_inner"}, "", g);
    auto* ia = inner_if->add_attribute();
    ia->set_name("then_branch");
    ia->set_type(::onnx::AttributeProto::GRAPH);
    ia->mutable_g()->set_name("inner");
    b.Node("Neg", {"x"}, {std::string(key) + "_neg"}, "", ia->mutable_g());
    b.Output(std::string(key) + "_neg", TP::FLOAT, {"3"}, ia->mutable_g());
    auto* ea = inner_if->add_attribute();
    ea->set_name("else_branch");
    ea->set_type(::onnx::AttributeProto::GRAPH);
    ea->mutable_g()->set_name("inner_else");
    b.Output("x", TP::FLOAT, {"3"}, ea->mutable_g());
    b.Node(op, {std::string(key) + "_inner", "k"}, {std::string(key) + "_out"}, "", g);
    b.Output(std::string(key) + "_out", TP::FLOAT, {"3"}, g);
  };
  add_branch("then_branch", "Mul");
  add_branch("else_branch", "Add");
  b.Output("y", TP::FLOAT, {"3"});
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  const ir::Node* if_node = FindOp(g, "If");
  ASSERT_NE(if_node, nullptr);
  ir::GraphPtr then_graph = if_node->GetGraph("then_branch");
  ASSERT_NE(then_graph, nullptr);
  // The branch captures x (for its nested If) and cond; k is copied in as a constant.
  std::vector<std::string> captured;
  for (const auto& [id, name] : then_graph->captures) captured.push_back(name);
  EXPECT_THAT(captured, ::testing::UnorderedElementsAre("cond", "x"));
  auto k = then_graph->FindValue("k");
  ASSERT_TRUE(k.has_value());
  EXPECT_TRUE(then_graph->IsConstant(*k));
  const ir::Node* inner = FindOp(*then_graph, "If");
  ASSERT_NE(inner, nullptr);
  ir::GraphPtr inner_then = inner->GetGraph("then_branch");
  ASSERT_EQ(inner_then->captures.size(), 1u);
  EXPECT_EQ(inner_then->captures[0].second, "x");
  // An else branch that returns the outer value directly.
  ir::GraphPtr inner_else = inner->GetGraph("else_branch");
  ASSERT_EQ(inner_else->outputs.size(), 1u);
  EXPECT_EQ(inner_else->value(inner_else->outputs[0]).name, "x");
  EXPECT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
}

TEST(OnnxImport, UnsupportedOpsAreReportedByNameNodeAndOpset) {
  ModelBuilder b(15, "com.example");
  b.Input("x", ::onnx::TensorProto::FLOAT, {"3"});
  b.Node("FrobnicateTensor", {"x"}, {"a"}, "frob1");
  auto* custom = b.Node("MyCustomOp", {"a"}, {"y"}, "custom1");
  custom->set_domain("com.example");
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(m.status().message(),
              HasSubstr("FrobnicateTensor (node 'frob1', domain ai.onnx, opset 15)"));
  EXPECT_THAT(m.status().message(),
              HasSubstr("MyCustomOp (node 'custom1', domain com.example, opset 1)"));
}

TEST(OnnxImport, UndefinedInputNamesTheNode) {
  ModelBuilder b(13);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"3"});
  b.Node("Add", {"x", "nowhere"}, {"y"}, "adder");
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("Add 'adder'"));
  EXPECT_THAT(m.status().message(), HasSubstr("'nowhere'"));
}

TEST(OnnxImport, TruncatedAndGarbageFilesGiveClearErrors) {
  ModelBuilder b(13);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"3"});
  b.FloatInit("w", {64}, std::vector<float>(64, 1.0f));
  b.Node("Mul", {"x", "w"}, {"y"});
  b.Output("y");
  const std::string bytes = b.Bytes();
  absl::StatusOr<ImportedModel> m =
      ImportOnnxBytes(bytes.substr(0, bytes.size() - 40), "cut.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("cut.onnx"));
  EXPECT_THAT(m.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(m.status().message(), HasSubstr("byte offset"));

  m = ImportOnnxBytes("", "empty.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("empty"));

  m = ImportOnnxBytes("this is not a model at all, just some text\n", "text.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("text.onnx"));

  m = ImportOnnxFile("/nonexistent/model.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("/nonexistent/model.onnx"));

  // Every prefix must fail cleanly or import; none may crash.
  for (size_t n = 0; n < bytes.size(); n += 7) {
    (void)ImportOnnxBytes(bytes.substr(0, n), "prefix.onnx");
  }
}

TEST(OnnxImport, MicrosoftGeluAndSkipLayerNormExpandToOnnxOps) {
  ModelBuilder b(13, "com.microsoft");
  b.Input("x", ::onnx::TensorProto::FLOAT, {"2", "4"});
  b.Input("skip", ::onnx::TensorProto::FLOAT, {"2", "4"});
  b.FloatInit("gamma", {4}, {1, 1, 1, 1});
  b.FloatInit("beta", {4}, {0, 0, 0, 0});
  b.Node("Gelu", {"x"}, {"g"})->set_domain("com.microsoft");
  b.Node("SkipLayerNormalization", {"g", "skip", "gamma", "beta"}, {"y", "", "", "sum"})
      ->set_domain("com.microsoft");
  b.Output("y");
  b.Output("sum");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  EXPECT_NE(FindOp(g, "Erf"), nullptr);
  EXPECT_NE(FindOp(g, "LayerNormalization"), nullptr);
  for (const auto& n : g.nodes()) EXPECT_EQ(n.domain, "") << n.op;
  EXPECT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
}

TEST(OnnxImport, ModelLocalFunctionsAreInlined) {
  ModelBuilder b(15, "custom.fn");
  auto* f = b.model.add_functions();
  f->set_name("ScaleAdd");
  f->set_domain("custom.fn");
  f->add_input("a");
  f->add_input("b");
  f->add_output("out");
  f->add_attribute("alpha");
  auto* op = f->add_opset_import();
  op->set_domain("");
  op->set_version(15);
  auto* c = f->add_node();
  c->set_op_type("Constant");
  c->add_output("alpha_t");
  auto* ca = c->add_attribute();
  ca->set_name("value_float");
  ca->set_type(::onnx::AttributeProto::FLOAT);
  ca->set_ref_attr_name("alpha");
  auto* mul = f->add_node();
  mul->set_op_type("Mul");
  mul->add_input("a");
  mul->add_input("alpha_t");
  mul->add_output("scaled");
  auto* add = f->add_node();
  add->set_op_type("Add");
  add->add_input("scaled");
  add->add_input("b");
  add->add_output("out");

  b.Input("x", ::onnx::TensorProto::FLOAT, {"3"});
  b.Input("z", ::onnx::TensorProto::FLOAT, {"3"});
  auto* call = b.Node("ScaleAdd", {"x", "z"}, {"y"}, "call1");
  call->set_domain("custom.fn");
  ModelBuilder::FloatAttr(call, "alpha", 3.0f);
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  const ir::Graph& g = MainGraph(*m);
  EXPECT_THAT(LiveOps(g), ::testing::ElementsAre("Mul", "Add"));
  const ir::Node* mul_node = FindOp(g, "Mul");
  EXPECT_EQ(g.value(mul_node->inputs[1]).constant->data<float>()[0], 3.0f);
  EXPECT_EQ(g.value(g.outputs[0]).name, "y");
}

TEST(OnnxImport, OutOfOrderNodesAreSortedAndInitializerInputsAreNotSignatureInputs) {
  ModelBuilder b(13);
  b.model.set_ir_version(3);
  b.Input("x", ::onnx::TensorProto::FLOAT, {"3"});
  b.Input("w", ::onnx::TensorProto::FLOAT, {"3"});  // also an initializer (IR v3 style)
  b.FloatInit("w", {3}, {1, 2, 3});
  b.Node("Relu", {"t"}, {"y"});
  b.Node("Mul", {"x", "w"}, {"t"});
  b.Output("y");
  absl::StatusOr<ImportedModel> m = b.Import();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->signatures[0].input_keys, ::testing::ElementsAre("x"));
  EXPECT_THAT(LiveOps(MainGraph(*m)), ::testing::ElementsAre("Mul", "Relu"));
}

TEST(OnnxImport, TensorFilesRoundTrip) {
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  absl::StatusOr<std::string> bytes = SerializeOnnxTensor(t, "t");
  ASSERT_TRUE(bytes.ok());
  absl::StatusOr<Tensor> back = ParseOnnxTensor(*bytes, "t.pb");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(TensorsEqual(t, *back));
  EXPECT_FALSE(ParseOnnxTensor("\xff\xff\xff", "bad.pb").ok());
}

// Every ONNX model in the shared test data imports and verifies.
TEST(OnnxImport, SharedTestdataModelsAllLoad) {
  const std::string root = std::string(KILN_SHARED_DIR) + "/testdata/models";
  if (!std::filesystem::exists(root)) GTEST_SKIP() << "no " << root;
  int loaded = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".onnx") continue;
    absl::StatusOr<ImportedModel> m = ImportOnnxFile(entry.path().string());
    ASSERT_TRUE(m.ok()) << m.status();
    const ir::Graph& g = MainGraph(*m);
    EXPECT_TRUE(ir::Verify(g).ok()) << entry.path() << ": " << ir::Verify(g);
    EXPECT_FALSE(m->signatures[0].input_keys.empty());
    ++loaded;
  }
  EXPECT_GE(loaded, 6);
}

TEST(OnnxImport, SileroVadSignatureAndSubgraphs) {
  const std::string path =
      std::string(KILN_SHARED_DIR) + "/testdata/models/onnx_silero_vad/silero_vad_16k_op15.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const SignatureGraph& sig = m->signatures[0];
  EXPECT_THAT(sig.input_keys, ::testing::ElementsAre("input", "state", "sr"));
  EXPECT_THAT(sig.output_keys, ::testing::ElementsAre("output", "stateN"));
  EXPECT_THAT(sig.inputs.at("state").shape, ::testing::ElementsAre(2, -1, 128));
  EXPECT_EQ(sig.inputs.at("sr").dtype, DType::kInt64);
  EXPECT_TRUE(sig.inputs.at("sr").rank_known);
  EXPECT_TRUE(sig.inputs.at("sr").shape.empty());
  const ir::Graph& g = sig.graph;
  EXPECT_EQ(g.value(g.inputs[0]).type.dims[0].symbol, "batch");
  int ifs = 0;
  bool saw_lstm = false;
  std::function<void(const ir::Graph&)> walk = [&](const ir::Graph& graph) {
    for (const auto& n : graph.nodes()) {
      if (n.op == "If") ++ifs;
      if (n.op == "LSTM") saw_lstm = true;
      for (const auto& [key, attr] : n.attrs) {
        if (auto* sub = std::get_if<ir::GraphPtr>(&attr)) walk(**sub);
      }
    }
  };
  walk(g);
  EXPECT_EQ(ifs, 12);  // 3 at top level, 9 nested
  EXPECT_TRUE(saw_lstm);
}

}  // namespace
}  // namespace kiln::import
