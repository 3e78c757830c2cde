// `kiln inspect` and `kiln run` on SavedModels and frozen GraphDefs, through the real binary: a
// SavedModel directory or a base path with numeric versions (the highest taken), --signature,
// inputs and outputs named by the signature's keys, and every input given (or
// --random_inputs).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kiln/core/npy.h"
#include "tensorflow/core/example/example.pb.h"
#include "tensorflow/core/framework/graph.pb.h"

namespace {

namespace fs = std::filesystem;

std::string TfServing(const std::string& model) {
  return std::string(KILN_SHARED_DIR) + "/testdata/tf_serving/" + model;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs a shell command line, stdout and stderr together.
CommandResult RunShell(const std::string& command_line) {
  CommandResult result;
  const std::string command = absl::StrCat(command_line, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

CommandResult Kiln(const std::string& args) {
  return RunShell(absl::StrCat(KILN_BINARY, " ", args));
}

std::string TempDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("kiln_cli_test_", getpid(), "_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::vector<float> FloatsOf(const kiln::Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

TEST(KilnCliTest, InspectShowsWhatSavedModelCliShows) {
  // A base path: versions 00000123 and 00000124, the highest is taken.
  auto r = Kiln("inspect " + TfServing("saved_model_half_plus_two_2_versions"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected :
       {"MetaGraphDef with tag-set: 'serve' contains the following SignatureDefs:",
        "signature_def['regress_x2_to_y3']:", "inputs['inputs'] tensor_info:", "dtype: DT_FLOAT",
        "shape: (-1, 1)", "name: x2:0", "dtype: DT_STRING", "shape: unknown_rank",
        "Method name is: tensorflow/serving/regress",
        "signature_def['serving_default']:", "Method name is: tensorflow/serving/predict",
        "saved_model_half_plus_two_2_versions/00000124"}) {
    EXPECT_TRUE(absl::StrContains(r.output, expected)) << expected << "\n" << r.output;
  }
  // saved_model_cli lists signatures in key order.
  EXPECT_LT(r.output.find("signature_def['classify_x_to_y']"),
            r.output.find("signature_def['serving_default']"));
}

TEST(KilnCliTest, InspectOneSignature) {
  const std::string model = TfServing("saved_model_half_plus_two_cpu/00000123");
  auto r = Kiln("inspect " + model + " --signature regress_x2_to_y3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "signature_def['regress_x2_to_y3']")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "Signature 'regress_x2_to_y3'")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "serving_default")) << r.output;
  auto missing = Kiln("inspect " + model + " --signature no_such_signature");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(absl::StrContains(missing.output, "no_such_signature")) << missing.output;
  EXPECT_TRUE(absl::StrContains(missing.output, "regress_x_to_y2")) << missing.output;
}

TEST(KilnCliTest, RunNamesInputsAndOutputsBySignatureKeys) {
  const std::string dir = TempDir("run");
  ASSERT_TRUE(kiln::WriteNpy(dir + "/x2.npy",
                             kiln::Tensor::FromVector<float>({2.f, 0.f}, kiln::Shape{2, 1}))
                  .ok());
  auto r = Kiln(absl::StrCat("run ", TfServing("saved_model_half_plus_two_cpu"),
                             " --signature regress_x2_to_y3 --input inputs=", dir,
                             "/x2.npy --output_dir ", dir, "/out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto y3 = kiln::ReadNpy(dir + "/out/outputs.npy");
  ASSERT_TRUE(y3.ok()) << y3.status();
  EXPECT_EQ(y3->shape(), (kiln::Shape{2, 1}));
  EXPECT_EQ(FloatsOf(*y3), (std::vector<float>{4.f, 3.f}));

  // serving_default when --signature is not given; its input key is "x", its output "y".
  ASSERT_TRUE(
      kiln::WriteNpy(dir + "/x.npy", kiln::Tensor::FromVector<float>({1.f, 2.f, 5.f})).ok());
  r = Kiln(absl::StrCat("run ", TfServing("saved_model_half_plus_two_tf2_cpu"), " --input x=", dir,
                        "/x.npy --output_dir ", dir, "/default"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto y = kiln::ReadNpy(dir + "/default/y.npy");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FloatsOf(*y), (std::vector<float>{2.5f, 3.f, 4.5f}));

  // Serialized tf.Examples as a bytes (|S) array feed the regress signature.
  kiln::Tensor examples(kiln::DType::kString, kiln::Shape{3});
  const float xs[] = {1.f, 2.f, 5.f};
  for (int i = 0; i < 3; ++i) {
    tensorflow::Example e;
    (*e.mutable_features()->mutable_feature())["x"].mutable_float_list()->add_value(xs[i]);
    examples.data<std::string>()[i] = e.SerializeAsString();
  }
  ASSERT_TRUE(kiln::WriteNpy(dir + "/examples.npy", examples).ok());
  r = Kiln(absl::StrCat("run ", TfServing("saved_model_half_plus_two_cpu"),
                        " --signature regress_x_to_y --input inputs=", dir,
                        "/examples.npy --output_dir ", dir, "/regress"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto regressed = kiln::ReadNpy(dir + "/regress/outputs.npy");
  ASSERT_TRUE(regressed.ok()) << regressed.status();
  EXPECT_EQ(FloatsOf(*regressed), (std::vector<float>{2.5f, 3.f, 4.5f}));

  // A wrong input key is named with the keys the signature has.
  r = Kiln(absl::StrCat("run ", TfServing("saved_model_half_plus_two_cpu"),
                        " --signature regress_x2_to_y3 --input x2=", dir, "/x2.npy"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "has no input 'x2' (its inputs: inputs)")) << r.output;
  fs::remove_all(dir);
}

TEST(KilnCliTest, RunRefusesCustomOpsByName) {
  auto r = Kiln(std::string("run ") + KILN_SHARED_DIR +
                "/testdata/models/tfserving_tf_text_customops --output_dir " + TempDir("text"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "unsupported TensorFlow op")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "'WordpieceTokenizeWithOffsets'")) << r.output;
}

// A frozen GraphDef with two inputs of different dtypes, as a tabular model has:
// y = age + Cast<float>(count), both [-1, 1].
tensorflow::GraphDef TabularGraph() {
  tensorflow::GraphDef graph;
  graph.mutable_versions()->set_producer(1569);
  auto add = [&](const std::string& op, const std::string& name,
                 const std::vector<std::string>& inputs) {
    tensorflow::NodeDef* node = graph.add_node();
    node->set_op(op);
    node->set_name(name);
    for (const auto& in : inputs) node->add_input(in);
    return node->mutable_attr();
  };
  auto placeholder = [&](const std::string& name, tensorflow::DataType dtype) {
    auto* attrs = add("Placeholder", name, {});
    (*attrs)["dtype"].set_type(dtype);
    auto* shape = (*attrs)["shape"].mutable_shape();
    shape->add_dim()->set_size(-1);
    shape->add_dim()->set_size(1);
  };
  placeholder("age", tensorflow::DT_FLOAT);
  placeholder("count", tensorflow::DT_INT64);
  auto* cast = add("Cast", "count_float", {"count"});
  (*cast)["SrcT"].set_type(tensorflow::DT_INT64);
  (*cast)["DstT"].set_type(tensorflow::DT_FLOAT);
  (*add("AddV2", "y", {"age", "count_float"}))["T"].set_type(tensorflow::DT_FLOAT);
  return graph;
}

// Writes the tabular graph (binary) and its two inputs; returns the directory.
std::string WriteTabularModel(const std::string& name) {
  const std::string dir = TempDir(name);
  std::ofstream(dir + "/frozen.pb", std::ios::binary) << TabularGraph().SerializeAsString();
  EXPECT_TRUE(kiln::WriteNpy(dir + "/age.npy",
                             kiln::Tensor::FromVector<float>({1.5f, 2.f}, kiln::Shape{2, 1}))
                  .ok());
  EXPECT_TRUE(kiln::WriteNpy(dir + "/count.npy",
                             kiln::Tensor::FromVector<int64_t>({10, 20}, kiln::Shape{2, 1}))
                  .ok());
  return dir;
}

// docs/SAVEDMODEL.md promises that `kiln run` and `kiln inspect` take a frozen GraphDef .pb;
// they used to hand it to the ONNX parser.
TEST(KilnCliTest, FrozenGraphDefRunsAndInspects) {
  const std::string dir = WriteTabularModel("frozen");
  auto r = Kiln("inspect " + dir + "/frozen.pb");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected : {"frozen GraphDef", "age", "count", "float[-1, 1]", "int64[-1, 1]"}) {
    EXPECT_TRUE(absl::StrContains(r.output, expected)) << expected << "\n" << r.output;
  }

  r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --input age=", dir, "/age.npy --input count=", dir,
                        "/count.npy --output_dir ", dir, "/out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto y = kiln::ReadNpy(dir + "/out/y.npy");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (kiln::Shape{2, 1}));
  EXPECT_EQ(FloatsOf(*y), (std::vector<float>{11.5f, 22.f}));

  // --outputs picks other tensors than the sinks.
  r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --outputs count_float --input age=", dir,
                        "/age.npy --input count=", dir, "/count.npy --output_dir ", dir,
                        "/picked"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto picked = kiln::ReadNpy(dir + "/picked/count_float.npy");
  ASSERT_TRUE(picked.ok()) << picked.status() << "\n" << r.output;
  EXPECT_EQ(FloatsOf(*picked), (std::vector<float>{10.f, 20.f}));

  // A text GraphDef, whatever the file is called, is told from ONNX by its content.
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(TabularGraph(), &text));
  std::ofstream(dir + "/graph.pbtxt") << "# exported for a test\n" << text;
  r = Kiln(absl::StrCat("run ", dir, "/graph.pbtxt --input age=", dir,
                        "/age.npy --input count=", dir, "/count.npy --output_dir ", dir, "/text"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/text/y.npy")) << r.output;

  // --outputs is for frozen GraphDefs only.
  r = Kiln("inspect " + TfServing("saved_model_half_plus_two_cpu/00000123") + " --outputs y");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "is a SavedModel, whose outputs are its signatures'"))
      << r.output;
  fs::remove_all(dir);
}

// Missing inputs used to be filled with random values without a word; a tabular model then
// failed deep in the graph (a Concat shape mismatch) without naming the input.
TEST(KilnCliTest, RunNamesEveryMissingInputWithDtypeAndShape) {
  const std::string dir = WriteTabularModel("missing");
  auto r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --output_dir ", dir, "/out"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output,
      "kiln run: missing inputs of signature 'serving_default': 'age' float[-1, 1], 'count' "
      "int64[-1, 1]; give each with --input NAME=FILE.npy, or pass --random_inputs to fill them "
      "with seeded random values"))
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/out/y.npy"));

  r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --input age=", dir, "/age.npy"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output,
                                "missing input of signature 'serving_default': "
                                "'count' int64[-1, 1]; give each"))
      << r.output;

  // --bench too.
  r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --bench --iterations 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "missing inputs of signature 'serving_default'"))
      << r.output;
  fs::remove_all(dir);
}

TEST(KilnCliTest, RandomInputsFillWhatIsNotGiven) {
  const std::string dir = WriteTabularModel("random");
  auto r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --random_inputs --seed 7 --input age=", dir,
                             "/age.npy --output_dir ", dir, "/out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto y = kiln::ReadNpy(dir + "/out/y.npy");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (kiln::Shape{2, 1}));

  // The same seed gives the same values.
  r = Kiln(
      absl::StrCat("run ", dir, "/frozen.pb --random_inputs --seed 7 --output_dir ", dir, "/a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Kiln(
      absl::StrCat("run ", dir, "/frozen.pb --random_inputs --seed 7 --output_dir ", dir, "/b"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto a = kiln::ReadNpy(dir + "/a/y.npy");
  auto b = kiln::ReadNpy(dir + "/b/y.npy");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(FloatsOf(*a), FloatsOf(*b));

  r = Kiln(absl::StrCat("run ", dir,
                        "/frozen.pb --bench --random_inputs --batch 1,4 "
                        "--iterations 2 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\"batch\": 4")) << r.output;
  fs::remove_all(dir);
}

// --isa caps the kernels' instruction set (to measure the AVX2 path on an AVX-512 machine) and
// the benchmark's JSON says which ISA ran.
TEST(KilnCliTest, IsaCapIsAppliedAndReported) {
  const std::string dir = WriteTabularModel("isa");
  auto r = Kiln(absl::StrCat("run ", dir,
                             "/frozen.pb --bench --random_inputs --iterations 2 "
                             "--json --isa avx2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\"isa\": \"avx2\"")) << r.output;
  r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --random_inputs --isa sse2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--isa=sse2: must be avx2 or avx512")) << r.output;
  fs::remove_all(dir);
}

// Without --isa, Kiln's kernels and oneDNN choose from what CPUID reports: on a CPU that
// reports AVX2 and nothing newer (bench/peers/cpuid_cap, which hides AVX-512 and AVX-VNNI
// through the kernel's CPUID faulting) they choose their AVX2 paths, as on an AVX2-only server.
TEST(KilnCliTest, AnAvx2OnlyCpuGetsTheAvx2Kernels) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string flags((std::istreambuf_iterator<char>(cpuinfo)),
                          std::istreambuf_iterator<char>());
  if (!absl::StrContains(flags, " cpuid_fault") || !absl::StrContains(flags, " avx512f")) {
    GTEST_SKIP() << "needs an AVX-512 CPU with CPUID faulting, to make it look AVX2-only";
  }
  // A model whose convolutions run on oneDNN, so that its verbose log names the kernels.
  const std::string dir = TempDir("cpuid_avx2");
  const std::string run =
      absl::StrCat("run ", KILN_SHARED_DIR, "/testdata/models/onnx_light_zoo/light_squeezenet.onnx",
                   " --bench --random_inputs --batch 1 --iterations 2 --json");
  auto native = Kiln(run);
  ASSERT_EQ(native.exit_code, 0) << native.output;
  EXPECT_TRUE(absl::StrContains(native.output, "\"isa\": \"avx512\"")) << native.output;

  const CommandResult capped =
      RunShell(absl::StrCat("KILN_CPUID_CAP_DIR=", dir, " DNNL_VERBOSE=1 ", KILN_SOURCE_DIR,
                            "/bench/peers/cpuid_cap/as_avx2_cpu.sh ", KILN_BINARY, " ", run));
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  EXPECT_TRUE(absl::StrContains(capped.output, "\"isa\": \"avx2\"")) << capped.output;
  EXPECT_TRUE(absl::StrContains(capped.output, "isa:Intel AVX2\n")) << capped.output;
  EXPECT_FALSE(absl::StrContains(capped.output, "avx512")) << capped.output;
  fs::remove_all(dir);
}

TEST(KilnCliTest, RepeatedInputIsAnError) {
  const std::string dir = WriteTabularModel("repeated");
  auto r = Kiln(absl::StrCat("run ", dir, "/frozen.pb --input age=", dir, "/age.npy --input ",
                             "count=", dir, "/count.npy --input age=", dir, "/other.npy"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, absl::StrCat("--input age is given twice (", dir,
                                                       "/age.npy and ", dir, "/other.npy)")))
      << r.output;
  fs::remove_all(dir);
}

TEST(KilnCliTest, RunHelpDescribesInputsAndFrozenGraphs) {
  auto r = Kiln("run --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected :
       {"--random_inputs", "every input must be given", "frozen", "--outputs"}) {
    EXPECT_TRUE(absl::StrContains(r.output, expected)) << expected << "\n" << r.output;
  }
}

}  // namespace
