// libFuzzer target for the REST JSON request decoders (predict, classify/regress, KServe v2):
// any bytes must give a tensor map or an error, never a crash, and a decoded tensor map must
// encode back to JSON.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/serving/json_tensor.h"

namespace {

kiln::TensorInfo Info(kiln::DType dtype, std::vector<int64_t> shape) {
  kiln::TensorInfo info;
  info.dtype = dtype;
  info.rank_known = true;
  info.shape = std::move(shape);
  return info;
}

const kiln::SignatureInfo& Single() {
  static const auto* signature = [] {
    auto* s = new kiln::SignatureInfo;
    s->key = "serving_default";
    s->input_keys = {"x"};
    s->inputs["x"] = Info(kiln::DType::kFloat32, {-1, 1});
    return s;
  }();
  return *signature;
}

const kiln::SignatureInfo& Multi() {
  static const auto* signature = [] {
    auto* s = new kiln::SignatureInfo;
    s->key = "multi";
    s->input_keys = {"ids", "name", "flag", "small"};
    s->inputs["ids"] = Info(kiln::DType::kInt64, {-1, 2});
    s->inputs["name"] = Info(kiln::DType::kString, {-1});
    s->inputs["flag"] = Info(kiln::DType::kBool, {-1});
    s->inputs["small"] = Info(kiln::DType::kUInt8, {-1});
    return s;
  }();
  return *signature;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  auto lookup = [](absl::string_view name) -> absl::StatusOr<const kiln::SignatureInfo*> {
    if (name == "multi") return &Multi();
    return &Single();
  };
  auto request = kiln::serving::ParsePredictRequest(body, lookup);
  if (request.ok()) {
    std::vector<std::string> order;
    for (const auto& [key, tensor] : request->inputs) order.push_back(key);
    (void)kiln::serving::WritePredictResponse(request->inputs, order, request->format);
  }
  (void)kiln::serving::ParseExamplesRequest(body);
  (void)kiln::serving::ParseV2InferRequest(body, Multi());
  return 0;
}
