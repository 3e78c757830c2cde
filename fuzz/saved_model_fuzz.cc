// libFuzzer target for the TensorFlow front end: the LevelDB table reader under
// variables.index, and whole SavedModel / frozen GraphDef imports from arbitrary bytes.
// Every input must give a result or a clean error: no crash, hang or leak.
#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
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

void Import(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)kiln::import::tf::ReadLevelDbTable(bytes, "fuzz.index");
      break;
    case 1: {
      const std::string path = ScratchDir() + "/saved_model.pb";
      if (!kiln::import::tf::WriteStringToFile(path, bytes).ok()) return;
      (void)kiln::import::ImportSavedModel(ScratchDir());
      break;
    }
    default: {
      const std::string path = ScratchDir() + "/graph.pb";
      if (!kiln::import::tf::WriteStringToFile(path, bytes).ok()) return;
      (void)kiln::import::ImportFrozenGraph(path);
      break;
    }
  }
}

// The TensorFlow converter follows a graph's edges recursively and refuses graphs nested more
// than 2000 nodes deep; on a 8 MiB stack that holds without sanitizers, but ASan's frames are
// several times larger: a 35 KB chain of 1200 Relus overflowed the main thread's stack. The
// import runs on a thread with the stack ASan needs for what the converter accepts.
constexpr size_t kImportStackBytes = size_t{64} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  struct Input {
    const uint8_t* data;
    size_t size;
  } input{data, size};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kImportStackBytes);
  pthread_t thread;
  if (pthread_create(
          &thread, &attr,
          [](void* p) -> void* {
            auto* in = static_cast<Input*>(p);
            Import(in->data, in->size);
            return nullptr;
          },
          &input) != 0) {
    std::abort();  // not a finding in Kiln: the harness could not run
  }
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  return 0;
}
