// The ONNX importer refuses models newer than it implements (IR version, ai.onnx and
// com.microsoft opsets, also inside model-local functions), as ONNX Runtime does, with an
// error naming the version; the newest versions it implements load.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/import/onnx.h"
#include "onnx/onnx.pb.h"

namespace kiln::import {
namespace {

using ::testing::HasSubstr;

// y = Identity(x), x float[2].
::onnx::ModelProto IdentityModel(int64_t ir_version, const std::string& domain, int64_t opset) {
  ::onnx::ModelProto model;
  model.set_ir_version(ir_version);
  auto* op = model.add_opset_import();
  op->set_domain(domain);
  op->set_version(opset);
  auto* graph = model.mutable_graph();
  graph->set_name("g");
  auto declare = [](::onnx::ValueInfoProto* info, const std::string& name) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
  };
  declare(graph->add_input(), "x");
  declare(graph->add_output(), "y");
  auto* node = graph->add_node();
  node->set_op_type("Identity");
  node->set_name("id");
  node->add_input("x");
  node->add_output("y");
  return model;
}

absl::StatusOr<ImportedModel> Import(const ::onnx::ModelProto& model) {
  return ImportOnnxBytes(model.SerializeAsString(), "model.onnx");
}

TEST(OnnxVersionTest, NewestSupportedVersionsLoad) {
  EXPECT_TRUE(Import(IdentityModel(kNewestOnnxIrVersion, "", kNewestOnnxOpset)).ok());
  EXPECT_TRUE(Import(IdentityModel(8, "ai.onnx", 17)).ok());
  EXPECT_EQ(kNewestOnnxOpset, 21);
  EXPECT_EQ(kNewestOnnxIrVersion, 10);
}

TEST(OnnxVersionTest, OpsetNewerThanSupportedIsRefusedByName) {
  for (const std::string domain : {"", "ai.onnx"}) {
    auto model = Import(IdentityModel(8, domain, 999));
    ASSERT_FALSE(model.ok()) << "domain '" << domain << "'";
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(),
                HasSubstr("model.onnx: opset 999 of domain 'ai.onnx' is newer than the newest "
                          "this importer supports (21)"));
    EXPECT_THAT(model.status().message(), HasSubstr("opset_version=21"));
  }
  auto next = Import(IdentityModel(10, "", kNewestOnnxOpset + 1));
  ASSERT_FALSE(next.ok());
  EXPECT_THAT(next.status().message(), HasSubstr("opset 22 of domain 'ai.onnx'"));
}

TEST(OnnxVersionTest, IrVersionNewerThanSupportedIsRefusedByName) {
  auto model = Import(IdentityModel(99, "", 17));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              HasSubstr("model.onnx: ONNX IR version 99 is newer than the newest this importer "
                        "supports (10)"));
  EXPECT_FALSE(Import(IdentityModel(kNewestOnnxIrVersion + 1, "", 17)).ok());
}

TEST(OnnxVersionTest, MicrosoftDomainNewerThanVersionOneIsRefused) {
  ::onnx::ModelProto model = IdentityModel(8, "", 17);
  auto* ms = model.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  EXPECT_TRUE(Import(model).ok());
  ms->set_version(2);
  auto refused = Import(model);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("opset 2 of domain 'com.microsoft' is newer than the newest this "
                        "importer supports (1)"));
}

TEST(OnnxVersionTest, DomainsWithoutOperatorsHereAreNotVersionChecked) {
  // ai.onnx.ml has no operators in this importer: a node of it is an unsupported operator,
  // but importing the domain at a new version without using it is harmless.
  ::onnx::ModelProto model = IdentityModel(8, "", 17);
  auto* ml = model.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(99);
  EXPECT_TRUE(Import(model).ok());
}

TEST(OnnxVersionTest, FunctionOpsetNewerThanSupportedIsRefused) {
  ::onnx::ModelProto model = IdentityModel(8, "", 17);
  auto* local = model.add_opset_import();
  local->set_domain("local");
  local->set_version(1);
  auto* f = model.add_functions();
  f->set_name("MyId");
  f->set_domain("local");
  f->add_input("a");
  f->add_output("b");
  auto* op = f->add_opset_import();
  op->set_domain("");
  op->set_version(999);
  auto* body = f->add_node();
  body->set_op_type("Identity");
  body->add_input("a");
  body->add_output("b");
  auto refused = Import(model);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("model.onnx: function 'local.MyId': opset 999 of domain 'ai.onnx' is "
                        "newer than the newest this importer supports (21)"));
}

TEST(OnnxVersionTest, FunctionOverloadsAreRefused) {
  // IR version 10 allows one name defined twice (told apart by `overload`); importing by
  // name alone would silently pick one.
  ::onnx::ModelProto model = IdentityModel(10, "", 21);
  auto* local = model.add_opset_import();
  local->set_domain("local");
  local->set_version(1);
  for (int i = 0; i < 2; ++i) {
    auto* f = model.add_functions();
    f->set_name("MyId");
    f->set_domain("local");
    f->add_input("a");
    f->add_output("b");
    auto* op = f->add_opset_import();
    op->set_domain("");
    op->set_version(21);
    auto* body = f->add_node();
    body->set_op_type("Identity");
    body->add_input("a");
    body->add_output("b");
  }
  auto refused = Import(model);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("model-local function 'local.MyId' is defined more than once"));
}

}  // namespace
}  // namespace kiln::import
