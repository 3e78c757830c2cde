// Steps that stages in different files of src/data/ share: the one-element pull of the
// asynchronous stages that read their input element by element (parallel_map.cc,
// map_and_batch.cc), and the replay with which Interleave (transforms.cc) and parallel
// Interleave (parallel_interleave.cc) restore the inputs of their open slots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/async_stage.h"
#include "data/internal.h"

namespace kiln::data {

// An asynchronous stage whose input unit is one element of its input.
class OneElementStage : public AsyncStage {
 public:
  using AsyncStage::AsyncStage;

 protected:
  absl::Status Pull(IteratorBase* input, InputUnit* unit, bool* end) override {
    return input->GetNext(&unit->element, end);
  }
};

// Restoring an interleave: reads again the first `pulled` elements of `input` (the ones it had
// read when the state was saved) and gives each open slot i the one numbered ordinal[i] in
// (*args)[i]. An input that ends sooner changed since the save: FailedPrecondition naming the
// stage `path`; a cancellation is returned as it is.
inline absl::Status ReplayInterleaveInputs(IteratorBase& input, const std::string& path,
                                           int64_t pulled, const std::vector<bool>& open,
                                           const std::vector<int64_t>& ordinal,
                                           std::vector<Element>* args) {
  for (int64_t k = 0; k < pulled; ++k) {
    Element arg;
    bool end = false;
    absl::Status s = input.GetNext(&arg, &end);
    if (absl::IsCancelled(s)) return s;
    if (s.ok() && end) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RestoreState: the input of stage ", path, " ended after ", k, " of the ", pulled,
          " elements it had produced when the state was saved; it changed since"));
    }
    for (size_t i = 0; i < args->size(); ++i) {
      if (open[i] && ordinal[i] == k) (*args)[i] = arg;
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::data
