// libFuzzer target for the TensorFlow front end: the LevelDB table reader under
// variables.index, and whole SavedModel / frozen GraphDef imports from arbitrary bytes.
// Every input must give a result or a clean error: no crash, hang or leak.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "import/tf/table_reader.h"
#include "import/tf/tensor_bundle.h"
#include "kiln/import/saved_model.h"

namespace {

const std::string& ScratchDir() {
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("kiln_saved_model_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)kiln::import::tf::ReadLevelDbTable(bytes, "fuzz.index");
      break;
    case 1: {
      const std::string path = ScratchDir() + "/saved_model.pb";
      if (!kiln::import::tf::WriteStringToFile(path, bytes).ok()) return 0;
      (void)kiln::import::ImportSavedModel(ScratchDir());
      break;
    }
    default: {
      const std::string path = ScratchDir() + "/graph.pb";
      if (!kiln::import::tf::WriteStringToFile(path, bytes).ok()) return 0;
      (void)kiln::import::ImportFrozenGraph(path);
      break;
    }
  }
  return 0;
}
