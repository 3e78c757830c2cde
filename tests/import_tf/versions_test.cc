// GraphDef versions, checked as TensorFlow checks them: a graph that needs a newer consumer
// (min_consumer) or that bans Kiln's consumer version is refused with TensorFlow's wording;
// a graph from a newer TensorFlow still loads, with a warning that names its version.
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/import/saved_model.h"
#include "tf_graph_builder.h"

namespace kiln::import {
namespace {

using ::testing::HasSubstr;
using tf::testing::GraphBuilder;
using tf::testing::TypeAttr;

constexpr auto kF = DType::kFloat32;

// y = Relu(x).
GraphBuilder ReluGraph() {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Op("Relu", "y", {"x"}, {{"T", TypeAttr(kF)}});
  return b;
}

std::string Warning(const ImportedModel& model) {
  for (const auto& [key, value] : model.properties) {
    if (key == "warning") return value;
  }
  return "";
}

absl::StatusOr<ImportedModel> ImportFrozen(const tensorflow::GraphDef& graph,
                                           const std::string& name) {
  const std::string path = tf::testing::TempDir(name) + "/frozen.pb";
  if (absl::Status s = tf::testing::WriteGraphDef(path, graph); !s.ok()) return s;
  return ImportFrozenGraph(path);
}

TEST(TfVersionsTest, CurrentGraphsLoadWithoutWarning) {
  GraphBuilder b = ReluGraph();
  b.graph().mutable_versions()->set_producer(1569);  // TensorFlow 2.14
  b.graph().mutable_versions()->set_min_consumer(12);
  auto model = ImportFrozen(b.graph(), "current");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Warning(*model), "");
}

TEST(TfVersionsTest, MinConsumerAboveKilnsVersionIsRefused) {
  GraphBuilder b = ReluGraph();
  b.graph().mutable_versions()->set_producer(9000);
  b.graph().mutable_versions()->set_min_consumer(9000);
  auto model = ImportFrozen(b.graph(), "min_consumer");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              HasSubstr("frozen.pb: GraphDef min consumer version 9000 above current version "
                        "1987 (Kiln reads GraphDefs as TensorFlow 2.18 does)"));
}

TEST(TfVersionsTest, BadConsumerNamingKilnsVersionIsRefused) {
  GraphBuilder b = ReluGraph();
  b.graph().mutable_versions()->set_producer(1000);
  b.graph().mutable_versions()->add_bad_consumers(1987);
  auto model = ImportFrozen(b.graph(), "bad_consumer");
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("GraphDef disallows consumer version 1987"));
}

TEST(TfVersionsTest, NewerProducerLoadsWithAWarningNamingIt) {
  GraphBuilder b = ReluGraph();
  b.graph().mutable_versions()->set_producer(2500);
  auto model = ImportFrozen(b.graph(), "newer_producer");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(Warning(*model),
              HasSubstr("GraphDef producer version 2500 is newer than 1987 (TensorFlow 2.18)"));
}

TEST(TfVersionsTest, SavedModelChecksItsGraphAndTensorFlowVersion) {
  const std::string dir = tf::testing::TempDir("saved_versions");
  GraphBuilder b = ReluGraph();
  tf::testing::SignatureSpec sig;
  sig.inputs["x"] = {"x:0", kF, {-1}};
  sig.outputs["y"] = {"y:0", kF, {-1}};
  ASSERT_TRUE(tf::testing::WriteSavedModel(dir, b, {sig}).ok());
  const std::string pb = dir + "/saved_model.pb";
  auto rewrite = [&](auto edit) {
    tensorflow::SavedModel saved;
    std::ifstream in(pb, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    ASSERT_TRUE(saved.ParseFromString(bytes.str()));
    edit(*saved.mutable_meta_graphs(0));
    std::ofstream(pb, std::ios::binary | std::ios::trunc) << saved.SerializeAsString();
  };

  rewrite([](tensorflow::MetaGraphDef& meta) {
    meta.mutable_meta_info_def()->set_tensorflow_version("2.14.0");
    meta.mutable_graph_def()->mutable_versions()->set_producer(1569);
  });
  auto current = ImportSavedModel(dir);
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_EQ(Warning(*current), "");

  // Saved by a TensorFlow newer than Kiln knows: loads, and says so.
  rewrite([](tensorflow::MetaGraphDef& meta) {
    meta.mutable_meta_info_def()->set_tensorflow_version("2.25.0-rc1");
    meta.mutable_graph_def()->mutable_versions()->set_producer(0);
  });
  auto newer = ImportSavedModel(dir);
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_THAT(Warning(*newer), HasSubstr("the model was saved by TensorFlow 2.25.0-rc1, newer "
                                         "than TensorFlow 2.18"));

  rewrite([](tensorflow::MetaGraphDef& meta) {
    meta.mutable_graph_def()->mutable_versions()->set_producer(3000);
    meta.mutable_graph_def()->mutable_versions()->set_min_consumer(3000);
  });
  auto refused = ImportSavedModel(dir);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr(dir));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("GraphDef min consumer version 3000 above current version 1987"));
}

TEST(TfVersionsTest, NotAGraphDefIsNamed) {
  // An ONNX model parses as a GraphDef holding only unknown fields.
  const std::string path = tf::testing::TempDir("not_graphdef") + "/model.pb";
  std::ofstream(path, std::ios::binary) << std::string("\x08\x08\x3a\x00", 4);
  auto model = ImportFrozenGraph(path);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("not a TensorFlow GraphDef"));
}

TEST(TfVersionsTest, UnknownOpIsNamed) {
  GraphBuilder b;
  b.Placeholder("x", kF, {-1});
  b.Op("FancyNewOpV7", "y", {"x"}, {{"T", TypeAttr(kF)}});
  auto model = ImportFrozen(b.graph(), "unknown_op");
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("unsupported TensorFlow op 'FancyNewOpV7'"));
}

}  // namespace
}  // namespace kiln::import
