// What compiling a plan for another batch size costs: time and resident memory.
//
//   build/bench/runtime/runtime_plan_compile_bench MODEL [--batches 1,2,4,8,16,32]
//       [--signature serving_default] [--threads N]
//
// For each batch size in order: compiles the plan (Model::Precompile; every unknown dimension
// of an input is 1, the first is the batch size), then runs it once with zeros. Prints one
// JSON line per batch size: compile time, RSS growth of the compile (packed weights, oneDNN
// primitives, plan metadata) and of the first run (the run state: arena and outputs), and the
// packed-weight totals `kiln inspect` reports. Packed weights are shared by every plan of a
// model, so after the first batch size a compile should add no weight bytes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kiln/core/clock.h"
#include "kiln/runtime/model.h"

namespace {

int64_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return -1;
}

std::string Line(const std::string& text, const std::string& prefix) {
  size_t at = text.find(prefix);
  if (at == std::string::npos) return "";
  const size_t end = text.find('\n', at);
  return text.substr(at, end - at);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [--batches 1,2,4] [--signature S] [--threads N]\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32};
  std::string signature = "serving_default";
  kiln::runtime::ModelOptions options;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batches") {
      batches.clear();
      for (absl::string_view b : absl::StrSplit(value, ',')) {
        int64_t n = 0;
        if (!absl::SimpleAtoi(b, &n) || n < 1) {
          std::fprintf(stderr, "bad --batches %s\n", value.c_str());
          return 2;
        }
        batches.push_back(n);
      }
    } else if (flag == "--signature") {
      signature = value;
    } else if (flag == "--threads") {
      options.intra_op_threads = std::atoi(value.c_str());
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const int64_t rss_start = RssBytes();
  auto model = kiln::runtime::Model::Load(path, options);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  auto info = (*model)->FindSignature(signature);
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", info.status().ToString().c_str());
    return 1;
  }
  std::printf("{\"model\": \"%s\", \"load_rss_growth_bytes\": %lld}\n", path.c_str(),
              static_cast<long long>(RssBytes() - rss_start));
  for (int64_t batch : batches) {
    std::map<std::string, kiln::Shape> shapes;
    std::map<std::string, kiln::Tensor> inputs;
    for (const std::string& key : (*info)->input_keys) {
      const kiln::TensorInfo& t = (*info)->inputs.at(key);
      kiln::Shape shape;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        shape.push_back(t.shape[d] >= 0 ? t.shape[d] : (d == 0 ? batch : 1));
      }
      shapes[key] = shape;
      kiln::Tensor zeros(t.dtype, shape);
      std::memset(zeros.raw_data(), 0, zeros.byte_size());
      inputs[key] = std::move(zeros);
    }
    const int64_t rss0 = RssBytes();
    const int64_t t0 = kiln::NowNanos();
    if (absl::Status st = (*model)->Precompile(signature, shapes); !st.ok()) {
      std::fprintf(stderr, "batch %lld: %s\n", static_cast<long long>(batch),
                   st.ToString().c_str());
      return 1;
    }
    const int64_t compile_ns = kiln::NowNanos() - t0;
    const int64_t rss1 = RssBytes();
    auto outputs = (*model)->Run(signature, inputs);
    if (!outputs.ok()) {
      std::fprintf(stderr, "batch %lld: %s\n", static_cast<long long>(batch),
                   outputs.status().ToString().c_str());
      return 1;
    }
    outputs->clear();
    const int64_t rss2 = RssBytes();
    const std::string packed = Line((*model)->Inspect(), "packed weights:");
    std::printf(
        "{\"batch\": %lld, \"compile_ms\": %.2f, \"compile_rss_growth_bytes\": %lld, "
        "\"first_run_rss_growth_bytes\": %lld, \"inspect\": \"%s\"}\n",
        static_cast<long long>(batch), compile_ns / 1e6, static_cast<long long>(rss1 - rss0),
        static_cast<long long>(rss2 - rss1), packed.c_str());
  }
  return 0;
}
