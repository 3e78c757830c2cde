// Prepares models for the serving benchmarks (bench/serving/*.sh):
//   serving_bench_model dynamic-batch IN.onnx OUT.onnx [--row_shape=3,112,112]
//       writes a copy whose graph inputs and outputs have a symbolic first dimension
//       ("batch"), so that a model exported for batch 1 can be served with batching (its
//       intermediate value_info shapes, which pin batch 1, are dropped). --row_shape
//       redeclares the other dimensions of the (single) input, for fully convolutional models
//       that run at other image sizes (smaller images: shorter benchmarks).
//   serving_bench_model warmup OUT_FILE --model=NAME --input=NAME --shape=1,3,224,224
//       writes assets.extra/tf_serving_warmup_requests: a TFRecord with one PredictionLog
//       holding a PredictRequest of that shape (float32), as TF Serving's docs describe.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/data/formats/tfrecord.h"
#include "onnx/onnx.pb.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: serving_bench_model dynamic-batch IN.onnx OUT.onnx [--row_shape=D1,D2,...]\n"
               "       serving_bench_model warmup OUT_FILE --model=NAME --input=NAME "
               "--shape=D0,D1,...\n");
  return 2;
}

int DynamicBatch(const std::string& in, const std::string& out, const std::string& row_shape) {
  std::ifstream file(in, std::ios::binary);
  onnx::ModelProto model;
  if (!file || !model.ParseFromIstream(&file)) {
    std::fprintf(stderr, "cannot read ONNX model %s\n", in.c_str());
    return 1;
  }
  auto make_dynamic = [](onnx::ValueInfoProto* info) {
    auto* shape = info->mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() > 0) shape->mutable_dim(0)->set_dim_param("batch");
  };
  onnx::GraphProto* graph = model.mutable_graph();
  for (auto& input : *graph->mutable_input()) {
    // Initializers listed as inputs (old exporters) keep their shapes.
    bool is_initializer = false;
    for (const auto& init : graph->initializer()) is_initializer |= init.name() == input.name();
    if (is_initializer) continue;
    make_dynamic(&input);
    if (!row_shape.empty()) {
      auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
      std::stringstream dims(row_shape);
      std::string dim;
      int d = 1;
      while (std::getline(dims, dim, ',')) {
        if (d >= shape->dim_size()) shape->add_dim();
        shape->mutable_dim(d++)->set_dim_value(std::stoll(dim));
      }
    }
  }
  for (auto& output : *graph->mutable_output()) make_dynamic(&output);
  graph->clear_value_info();
  std::ofstream dest(out, std::ios::binary | std::ios::trunc);
  if (!dest || !model.SerializeToOstream(&dest)) {
    std::fprintf(stderr, "cannot write %s\n", out.c_str());
    return 1;
  }
  return 0;
}

int Warmup(const std::string& out, const std::vector<std::string>& flags) {
  std::string model_name, input_name;
  std::vector<int64_t> shape;
  for (const std::string& flag : flags) {
    if (flag.rfind("--model=", 0) == 0) {
      model_name = flag.substr(8);
    } else if (flag.rfind("--input=", 0) == 0) {
      input_name = flag.substr(8);
    } else if (flag.rfind("--shape=", 0) == 0) {
      std::stringstream dims(flag.substr(8));
      std::string dim;
      while (std::getline(dims, dim, ',')) shape.push_back(std::stoll(dim));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (model_name.empty() || input_name.empty() || shape.empty()) return Usage();
  tensorflow::serving::PredictionLog log;
  auto* request = log.mutable_predict_log()->mutable_request();
  request->mutable_model_spec()->set_name(model_name);
  auto& tensor = (*request->mutable_inputs())[input_name];
  tensor.set_dtype(tensorflow::DT_FLOAT);
  int64_t elements = 1;
  for (int64_t d : shape) {
    tensor.mutable_tensor_shape()->add_dim()->set_size(d);
    elements *= d;
  }
  std::vector<float> values(elements);
  for (int64_t i = 0; i < elements; ++i) values[i] = static_cast<float>(i % 255) / 255.0f;
  tensor.set_tensor_content(values.data(), values.size() * sizeof(float));
  std::ofstream dest(out, std::ios::binary | std::ios::trunc);
  dest << kiln::data::formats::SerializeRecord(log.SerializeAsString());
  if (!dest) {
    std::fprintf(stderr, "cannot write %s\n", out.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if ((args.size() == 3 || args.size() == 4) && args[0] == "dynamic-batch") {
    std::string row_shape;
    if (args.size() == 4) {
      if (args[3].rfind("--row_shape=", 0) != 0) return Usage();
      row_shape = args[3].substr(12);
    }
    return DynamicBatch(args[1], args[2], row_shape);
  }
  if (args.size() >= 2 && args[0] == "warmup") {
    return Warmup(args[1], std::vector<std::string>(args.begin() + 2, args.end()));
  }
  return Usage();
}
