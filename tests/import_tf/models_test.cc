// Real exports by others (../shared/testdata/models): each loads, runs its signatures on
// well-formed inputs and returns outputs of the declared dtypes and shapes.
#include <cmath>
#include <filesystem>
#include <functional>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/import/saved_model.h"
#include "tensorflow/core/example/example.pb.h"
#include "test_util.h"

namespace kiln::import::tf {
namespace {

using testing::FindSignature;
using testing::ModelsDir;
using testing::RunSignature;

void ExpectRowsSumToOne(const Tensor& t) {
  ASSERT_EQ(t.dtype(), DType::kFloat32);
  ASSERT_EQ(t.rank(), 2);
  for (int64_t r = 0; r < t.dim(0); ++r) {
    float sum = 0;
    for (int64_t c = 0; c < t.dim(1); ++c) {
      const float p = t.data<float>()[r * t.dim(1) + c];
      EXPECT_GE(p, 0.f);
      sum += p;
    }
    EXPECT_NEAR(sum, 1.f, 1e-5f) << "row " << r;
  }
}

TEST(RealModelsTest, PenguinKerasParsesExamplesAndEndsInSoftmax) {
  auto model = ImportSavedModel(ModelsDir("tfx_penguin_keras"));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph* sig = FindSignature(*model, "serving_default");
  ASSERT_NE(sig, nullptr);
  Tensor examples(DType::kString, Shape{2});
  const std::vector<std::pair<const char*, float>> penguin = {
      {"culmen_length_mm", 0.5f}, {"culmen_depth_mm", 0.3f}, {"flipper_length_mm", 0.6f},
      {"body_mass_g", 0.4f}};
  for (int i = 0; i < 2; ++i) {
    tensorflow::Example e;
    for (const auto& [k, v] : penguin) {
      (*e.mutable_features()->mutable_feature())[k].mutable_float_list()->add_value(v * (i + 1));
    }
    examples.data<std::string>()[i] = e.SerializeAsString();
  }
  auto out = RunSignature(*sig, {examples});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 3}));
  ExpectRowsSumToOne((*out)[0]);
}

TEST(RealModelsTest, RustKerasMultiInputSharedSubmodel) {
  auto model = ImportSavedModel(ModelsDir("rust_keras_multi_input"));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph* sig = FindSignature(*model, "serving_default");
  ASSERT_NE(sig, nullptr);
  EXPECT_EQ(sig->input_keys, (std::vector<std::string>{"test_in1", "test_in2"}));  // sorted
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[i] = 0.1f * i;
  auto out = RunSignature(*sig, {Tensor::FromVector<float>(v, Shape{2, 5}),
                                 Tensor::FromVector<float>(v, Shape{2, 5})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 1}));
  for (float p : (*out)[0].span<float>()) {
    EXPECT_GT(p, 0.f);  // a sigmoid
    EXPECT_LT(p, 1.f);
  }
}

// Keras' LSTM(32) -> Dense(1, sigmoid) computed directly from the checkpoint's weights
// (gate order i, f, c, o; zero initial state), to check the imported StatelessWhile loop.
std::vector<float> ReferenceKerasLstm(const BundleReader& ckpt, const std::vector<float>& x,
                                      int batch, int steps, int features) {
  auto get = [&](const std::string& key) {
    auto t = ckpt.Lookup(key);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::vector<float>(t->span<float>().begin(), t->span<float>().end())
                  : std::vector<float>();
  };
  const std::vector<float> kernel = get("variables/0/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> recurrent = get("variables/1/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> bias = get("variables/2/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> dense_w = get("layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE");
  const std::vector<float> dense_b = get("layer_with_weights-1/bias/.ATTRIBUTES/VARIABLE_VALUE");
  const int units = static_cast<int>(dense_w.size());
  EXPECT_EQ(kernel.size(), static_cast<size_t>(features * 4 * units));
  EXPECT_EQ(recurrent.size(), static_cast<size_t>(units * 4 * units));
  EXPECT_EQ(bias.size(), static_cast<size_t>(4 * units));
  if (kernel.size() != static_cast<size_t>(features * 4 * units) ||
      recurrent.size() != static_cast<size_t>(units * 4 * units) ||
      bias.size() != static_cast<size_t>(4 * units) || dense_b.size() != 1) {
    return {};
  }
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<float> out(batch);
  for (int b = 0; b < batch; ++b) {
    std::vector<double> h(units, 0.0), c(units, 0.0), z(4 * units);
    for (int t = 0; t < steps; ++t) {
      for (int j = 0; j < 4 * units; ++j) {
        double acc = bias[j];
        for (int k = 0; k < features; ++k) {
          acc += x[(b * steps + t) * features + k] * kernel[k * 4 * units + j];
        }
        for (int k = 0; k < units; ++k) acc += h[k] * recurrent[k * 4 * units + j];
        z[j] = acc;
      }
      for (int u = 0; u < units; ++u) {
        const double i = sigmoid(z[u]), f = sigmoid(z[units + u]);
        const double g = std::tanh(z[2 * units + u]), o = sigmoid(z[3 * units + u]);
        c[u] = f * c[u] + i * g;
        h[u] = o * std::tanh(c[u]);
      }
    }
    double y = dense_b[0];
    for (int u = 0; u < units; ++u) y += h[u] * dense_w[u];
    out[b] = static_cast<float>(sigmoid(y));
  }
  return out;
}

// The generic branch is a StatelessWhile over TensorList ops. (Importing it once crashed: the
// Fill converter held a pointer into the graph's value table across adding a constant.)
TEST(RealModelsTest, KerasLstmRunsItsGenericBranch) {
  auto model = ImportSavedModel(ModelsDir("tfnet_keras_lstm"));
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph* sig = FindSignature(*model, "serving_default");
  ASSERT_NE(sig, nullptr);
  EXPECT_EQ(sig->input_keys, (std::vector<std::string>{"input_1"}));
  EXPECT_EQ(sig->output_keys, (std::vector<std::string>{"dense"}));
  EXPECT_EQ(sig->outputs.at("dense").dtype, DType::kFloat32);
  EXPECT_EQ(sig->outputs.at("dense").shape, (std::vector<int64_t>{-1, 1}));
  // The CudnnRNN branch is registered in the library but never reached from the signature.
  std::function<bool(const ir::Graph&)> has_cudnn = [&](const ir::Graph& g) {
    for (const auto& n : g.nodes()) {
      if (absl::StrContains(n.op, "Cudnn")) return true;
      for (const auto& [k, a] : n.attrs) {
        if (auto* sub = std::get_if<ir::GraphPtr>(&a); sub && *sub && has_cudnn(**sub)) return true;
      }
    }
    return false;
  };
  EXPECT_FALSE(has_cudnn(sig->graph));
  auto ckpt = BundleReader::Open(ModelsDir("tfnet_keras_lstm/variables/variables"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (int batch : {2, 1, 3}) {
    std::vector<float> x(batch * 5 * 3);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * i + batch);
    auto out = RunSignature(*sig, {Tensor::FromVector<float>(x, Shape{batch, 5, 3})});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    const Tensor& y = (*out)[0];
    EXPECT_EQ(y.dtype(), DType::kFloat32);
    ASSERT_EQ(y.shape(), (Shape{batch, 1}));
    const std::vector<float> want = ReferenceKerasLstm(**ckpt, x, batch, 5, 3);
    ASSERT_EQ(want.size(), static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) EXPECT_NEAR(y.data<float>()[b], want[b], 1e-5f) << b;
  }
}

TEST(RealModelsTest, FrozenLstmGraphDef) {
  FrozenGraphOptions options;
  options.outputs = {"output"};
  auto model = ImportFrozenGraph(ModelsDir("tf2onnx_lstm_frozen/frozen.pb"), options);
  ASSERT_TRUE(model.ok()) << model.status();
  const SignatureGraph& sig = model->signatures[0];
  EXPECT_EQ(sig.input_keys, (std::vector<std::string>{"X", "keep_prob"}));
  std::vector<float> x(2 * 784);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 17) / 17.f;
  auto out = RunSignature(sig, {Tensor::FromVector<float>(x, Shape{2, 784}),
                                Tensor::Scalar<float>(1.f)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape().dim(0), 2);
  // keep_prob = 1 makes dropout the identity: two runs agree.
  auto again = RunSignature(sig, {Tensor::FromVector<float>(x, Shape{2, 784}),
                                  Tensor::Scalar<float>(1.f)});
  ASSERT_TRUE(again.ok());
  for (int64_t i = 0; i < (*out)[0].num_elements(); ++i) {
    EXPECT_EQ((*out)[0].data<float>()[i], (*again)[0].data<float>()[i]);
  }
  // Without naming outputs, the graph's sinks include "output".
  auto sinks = ImportFrozenGraph(ModelsDir("tf2onnx_lstm_frozen/frozen.pb"));
  ASSERT_TRUE(sinks.ok()) << sinks.status();
  const auto& keys = sinks->signatures[0].output_keys;
  EXPECT_NE(std::find(keys.begin(), keys.end(), "output"), keys.end());
}

// serving_default of this model (y = f(x)) does not reach the TF-Text ops: pruning to what the
// signature needs leaves them out, so it loads. The unsupported-op error itself is covered by
// TfOpsTest.UnsupportedOpIsNamedWithNodeAndFunction.
TEST(RealModelsTest, TfTextCustomOpsArePrunedFromServingDefault) {
  auto model = ImportSavedModel(ModelsDir("tfserving_tf_text_customops"));
  ASSERT_TRUE(model.ok()) << model.status();
  for (const auto& n : FindSignature(*model, "serving_default")->graph.nodes()) {
    EXPECT_FALSE(absl::StrContains(n.op, "UTF8")) << n.op;
  }
}

TEST(RealModelsTest, TaxiEstimatorsLoadOrNameWhatIsMissing) {
  for (const char* name : {"tfx_taxi_estimator_serving", "tfx_taxi_estimator_tf1_2019"}) {
    auto model = ImportSavedModel(ModelsDir(name));
    if (!model.ok()) {
      // Until the sparse feature-column ops are supported the error must name one.
      EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
      EXPECT_TRUE(absl::StrContains(model.status().message(), "(op ")) << model.status();
      continue;
    }
    EXPECT_EQ(model->signatures.size(), 4u) << name;
  }
}

}  // namespace
}  // namespace kiln::import::tf
