// C++ peer of bench/python/runtime_overhead.py: `Model::Run(handle, inputs, &outputs)` on a
// tiny model in a loop, as kiln.runtime.Model.run calls it, so that the difference between the
// two per-call times is what Python adds (argument conversion, the GIL, the output dict).
//
//   python_runtime_call_bench MODEL INPUT_KEY ROWS COLS CALLS
// prints one JSON line: {"ns_per_call": ..., "calls": ...}; the best of 5 rounds.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/core/clock.h"
#include "kiln/runtime/model.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL INPUT_KEY ROWS COLS CALLS\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1], key = argv[2];
  const int64_t rows = std::atoll(argv[3]), cols = std::atoll(argv[4]), calls = std::atoll(argv[5]);
  auto model = kiln::runtime::Model::Load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  auto handle = (*model)->GetSignature("serving_default");
  if (!handle.ok()) {
    std::fprintf(stderr, "%s\n", std::string(handle.status().message()).c_str());
    return 1;
  }
  if ((*handle)->signature_info().input_keys != std::vector<std::string>{key}) {
    std::fprintf(stderr, "the model's signature does not take exactly the input %s\n", key.c_str());
    return 1;
  }
  kiln::Tensor x(kiln::DType::kFloat32, kiln::Shape{rows, cols});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = static_cast<float>(i);
  std::vector<kiln::Tensor> inputs{x}, outputs;
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const int64_t start = kiln::NowNanos();
    for (int64_t i = 0; i < calls; ++i) {
      outputs.clear();  // the binding hands each call's outputs away, so each call makes new ones
      auto status = (*model)->Run(**handle, inputs, &outputs);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
        return 1;
      }
    }
    best = std::min(best, static_cast<double>(kiln::NowNanos() - start) / calls);
  }
  std::printf("{\"ns_per_call\": %.1f, \"calls\": %lld}\n", best, static_cast<long long>(calls));
  return 0;
}
