// libFuzzer target for the ONNX loader: arbitrary bytes as a serialized ModelProto (and as a
// TensorProto). Any input must give a model or an error, never a crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/import/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  // No external-data directory: external tensors must fail cleanly, not touch the disk.
  absl::StatusOr<kiln::import::ImportedModel> model =
      kiln::import::ImportOnnxBytes(bytes, "fuzz.onnx");
  if (model.ok()) {
    for (const auto& sig : model->signatures) (void)sig.graph.ToString();
  }
  (void)kiln::import::ParseOnnxTensor(bytes, "fuzz.pb");
  return 0;
}
