// Saves or restores an iterator of one of the checkpoint test pipelines in a process of its
// own, for CheckpointTest.ResumesInAnotherProcess:
//   checkpoint_tool save    PIPELINE N STATE_FILE OUT_FILE  (N elements, save, the rest to OUT)
//   checkpoint_tool restore PIPELINE 0 STATE_FILE OUT_FILE  (restore, the rest to OUT)
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "checkpoint_pipelines.h"

int main(int argc, char** argv) {
  using namespace kiln::data;
  if (argc != 6) {
    std::cerr << "usage: checkpoint_tool save|restore PIPELINE N STATE_FILE OUT_FILE\n";
    return 2;
  }
  const std::string mode = argv[1], name = argv[2], state_path = argv[4], out_path = argv[5];
  const int n = std::atoi(argv[3]);
  const auto& pipelines = testing::CheckpointPipelines();
  auto found = pipelines.find(name);
  if (found == pipelines.end()) {
    std::cerr << "unknown pipeline " << name << "\n";
    return 2;
  }
  auto it = found->second().MakeIterator();
  if (!it.ok()) {
    std::cerr << it.status() << "\n";
    return 1;
  }
  bool end = false;
  if (mode == "save") {
    for (int i = 0; i < n && !end; ++i) testing::DescribeNext(it->get(), &end);
    auto state = (*it)->SaveState();
    if (!state.ok()) {
      std::cerr << state.status() << "\n";
      return 1;
    }
    std::ofstream(state_path, std::ios::binary) << *state;
  } else if (mode == "restore") {
    std::ifstream in(state_path, std::ios::binary);
    std::stringstream state;
    state << in.rdbuf();
    absl::Status s = (*it)->RestoreState(state.str());
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
  } else {
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
  }
  std::ofstream out(out_path);
  for (int i = 0; i < 3000; ++i) {
    const std::string next = testing::DescribeNext(it->get(), &end);
    if (end) break;
    out << next << "\n";
  }
  return 0;
}
