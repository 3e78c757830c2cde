// What a small TensorFlow file can make the importer do is bounded: a corrupt variables.index
// whose entry claims a huge shape is refused from the bytes the entry holds, before the tensor
// is allocated (a few-byte index could otherwise claim a TiB), and a function library whose
// functions call each other over and over is refused before it expands exponentially.
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "import/tf/table_reader.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/import/saved_model.h"
#include "tensorflow/core/framework/graph.pb.h"

namespace kiln::import::tf {
namespace {

using ::testing::HasSubstr;

// Writes a bundle holding `tensor` under "v", then rewrites the index so that the entry's
// shape is `dims` (the data and its checksum stay those of `tensor`).
std::string BundleWithClaimedShape(const std::string& name, const Tensor& tensor,
                                   const std::vector<int64_t>& dims) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("kiln_bundle_limits_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::create_directories(dir);
  const std::string prefix = dir + "/" + name;
  EXPECT_TRUE(WriteBundle(prefix, {{"v", tensor}}).ok());
  absl::StatusOr<std::string> index = ReadFileToString(prefix + ".index");
  EXPECT_TRUE(index.ok()) << index.status();
  absl::StatusOr<std::map<std::string, std::string>> table = ReadLevelDbTable(*index, "index");
  EXPECT_TRUE(table.ok()) << table.status();
  tensorflow::BundleEntryProto entry;
  EXPECT_TRUE(entry.ParseFromString(table->at("v")));
  entry.mutable_shape()->clear_dim();
  for (int64_t d : dims) entry.mutable_shape()->add_dim()->set_size(d);
  (*table)["v"] = entry.SerializeAsString();
  EXPECT_TRUE(WriteStringToFile(prefix + ".index", WriteLevelDbTable(*table)).ok());
  return prefix;
}

TEST(BundleLimits, NumericEntryClaimingMoreThanItsBytesIsRefusedBeforeAllocating) {
  // 16 bytes of data, a shape of 2^38 floats (1 TiB).
  const std::string prefix = BundleWithClaimedShape(
      "numeric", Tensor::FromVector<float>({1, 2, 3, 4}), {int64_t{1} << 38});
  auto reader = BundleReader::Open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<Tensor> t = (*reader)->Lookup("v");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("holds 16 bytes"));
}

TEST(BundleLimits, StringEntryClaimingMoreElementsThanItsBytesIsRefused) {
  // Two strings' bytes, a shape of 2^36 strings (2 TiB of std::string).
  const std::string prefix = BundleWithClaimedShape(
      "strings", Tensor::FromVector<std::string>({"ab", "c"}), {int64_t{1} << 36});
  auto reader = BundleReader::Open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<Tensor> t = (*reader)->Lookup("v");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("too few for the lengths"));
}

TEST(BundleLimits, EntriesOfTheRightSizeStillRead) {
  const std::string prefix =
      BundleWithClaimedShape("fine", Tensor::FromVector<std::string>({"ab", "c"}), {2});
  auto reader = BundleReader::Open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<Tensor> t = (*reader)->Lookup("v");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->data<std::string>()[0], "ab");
  EXPECT_EQ(t->data<std::string>()[1], "c");
}

TEST(BundleLimits, BlockSizeThatWrapsAroundIsACorruptTable) {
  // The index block's handle rewritten with a size of 2^64 - 3: size + the 5-byte trailer
  // wrapped around to 2, the bounds check passed and the trailer's address overflowed
  // (saved_model_fuzz found it under UBSan).
  std::string table = WriteLevelDbTable({{"a", "b"}});
  const size_t footer = table.size() - 48;
  size_t pos = footer;
  auto get = [&]() {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t byte = static_cast<uint8_t>(table[pos++]);
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
  };
  const uint64_t meta_offset = get(), meta_size = get(), index_offset = get();
  std::string handles;
  auto put = [&](uint64_t value) {
    for (; value >= 0x80; value >>= 7) handles.push_back(static_cast<char>(value | 0x80));
    handles.push_back(static_cast<char>(value));
  };
  put(meta_offset);
  put(meta_size);
  put(index_offset);
  put(std::numeric_limits<uint64_t>::max() - 2);
  handles.resize(40, '\0');
  table.replace(footer, 40, handles);
  absl::StatusOr<std::map<std::string, std::string>> parsed = ReadLevelDbTable(table, "wrapped");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("runs past the end of the file"));
}

TEST(BundleLimits, SnappyBlockDeclaringGigabytesIsRefusedWithoutReservingThem) {
  // A varint length of 2^32 then one 7-byte literal: the fuzzer found the 4 GiB reserved
  // before the block was decoded. The error is the same as before; the reservation is now
  // bounded by what the block can expand to (which the fuzz seed of this block checks).
  std::string block = {'\x80', '\x80', '\x80', '\x80', '\x10', static_cast<char>(6 << 2)};
  block += "abcdefg";
  absl::StatusOr<std::string> out = SnappyDecompress(block);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("shorter than declared"));
  // The same literal with its true length decodes.
  std::string exact = {'\x07', static_cast<char>(6 << 2)};
  exact += "abcdefg";
  absl::StatusOr<std::string> fine = SnappyDecompress(exact);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(*fine, "abcdefg");
}

// x -> F<depth> -> y, where F0 is Relu and F<k> adds two calls of F<k-1> on its input: 2^depth
// Relus from 3 * depth + 3 NodeDefs.
tensorflow::GraphDef DoublingLibrary(int depth) {
  tensorflow::GraphDef graph;
  graph.mutable_versions()->set_producer(1000);
  auto* x = graph.add_node();
  x->set_name("x");
  x->set_op("Placeholder");
  (*x->mutable_attr())["dtype"].set_type(tensorflow::DT_FLOAT);
  auto* y = graph.add_node();
  y->set_name("y");
  y->set_op("F" + std::to_string(depth));
  y->add_input("x");
  for (int k = 0; k <= depth; ++k) {
    auto* f = graph.mutable_library()->add_function();
    auto* sig = f->mutable_signature();
    sig->set_name("F" + std::to_string(k));
    sig->add_input_arg()->set_name("a");
    sig->mutable_input_arg(0)->set_type(tensorflow::DT_FLOAT);
    sig->add_output_arg()->set_name("b");
    sig->mutable_output_arg(0)->set_type(tensorflow::DT_FLOAT);
    if (k == 0) {
      auto* relu = f->add_node_def();
      relu->set_name("n");
      relu->set_op("Relu");
      relu->add_input("a");
      (*relu->mutable_attr())["T"].set_type(tensorflow::DT_FLOAT);
      (*f->mutable_ret())["b"] = "n:activations:0";
      continue;
    }
    for (const char* name : {"n1", "n2"}) {
      auto* call = f->add_node_def();
      call->set_name(name);
      call->set_op("F" + std::to_string(k - 1));
      call->add_input("a");
    }
    auto* add = f->add_node_def();
    add->set_name("n3");
    add->set_op("AddV2");
    add->add_input("n1:b:0");
    add->add_input("n2:b:0");
    (*add->mutable_attr())["T"].set_type(tensorflow::DT_FLOAT);
    (*f->mutable_ret())["b"] = "n3:z:0";
  }
  return graph;
}

absl::StatusOr<ImportedModel> ImportGraph(const tensorflow::GraphDef& graph,
                                          const std::string& name) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiln_tf_limits_" + std::to_string(::getpid()) + "_" + name + ".pb"))
                               .string();
  EXPECT_TRUE(WriteStringToFile(path, graph.SerializeAsString()).ok());
  absl::StatusOr<ImportedModel> m = ImportFrozenGraph(path);
  std::filesystem::remove(path);
  return m;
}

TEST(FunctionLimits, LibraryCallingItselfExponentiallyIsRefused) {
  // 2^16 Relus from 1.7 KB: the import ran for minutes and grew past 400 MB before the budget.
  absl::StatusOr<ImportedModel> m = ImportGraph(DoublingLibrary(16), "doubling16");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("calls per node of the graph and its library"));
}

TEST(FunctionLimits, ModestFunctionReuseIsInlined) {
  absl::StatusOr<ImportedModel> m = ImportGraph(DoublingLibrary(3), "doubling3");
  ASSERT_TRUE(m.ok()) << m.status();
  int relus = 0;
  for (const auto& node : m->signatures.at(0).graph.nodes()) relus += node.op == "Relu";
  EXPECT_EQ(relus, 8);
}

}  // namespace
}  // namespace kiln::import::tf
