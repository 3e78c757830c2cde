// The encoding of iterator checkpoints (Iterator::SaveState / RestoreState).
//
// A state is
//   "KILNITER" (8 bytes), varint version (kStateVersion), varint payload length, payload,
//   fixed32 masked CRC32C of the payload;
// the payload is one record per stage, in the order the iterator tree is walked (a stage, then
// its inputs): the stage's name as a length-prefixed string, a varint fingerprint of its
// configuration (batch size, buffer size, seed, ...; 0 where there is none), then the stage's
// own fields (varints; signed values zigzag-encoded; strings length-prefixed). The name and
// configuration let a restore name the first stage where a state saved from another pipeline
// differs, rather than silently continuing somewhere else.
//
// Stages record positions, never elements. A stage without its own encoding records how many
// elements it has produced (errors count: an element whose production failed is a position
// too), and its restore replays that many GetNext calls on a fresh iterator; stages override
// that with cheaper encodings (a source's index or file offset, a synchronous stage's input
// position) and cheaper skips (a Map skips its input without calling the function).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kiln::data {

inline constexpr char kStateMagic[] = "KILNITER";
inline constexpr uint64_t kStateVersion = 1;

class StateWriter {
 public:
  void BeginStage(std::string_view name, uint64_t config);
  void PutUint(uint64_t v);
  void PutInt(int64_t v);  // zigzag
  void PutBool(bool v) { PutUint(v ? 1 : 0); }
  void PutString(std::string_view s);
  // The whole state: header, payload and CRC.
  std::string Finish() const;
  // The records alone (a stage nests its input's records, saved earlier, in its own).
  const std::string& payload() const { return payload_; }

 private:
  std::string payload_;
};

class StateReader {
 public:
  // Checks the header and CRC of a whole state.
  static absl::Status Open(std::string_view state, StateReader* reader);
  // Reads records nested in a field (a StateWriter's payload()).
  static StateReader OverPayload(std::string_view payload) {
    StateReader reader;
    reader.in_ = payload;
    return reader;
  }
  // InvalidArgument naming `path` when the next record is not this stage's.
  absl::Status BeginStage(std::string_view name, uint64_t config, const std::string& path);
  absl::Status GetUint(uint64_t* v);
  absl::Status GetInt(int64_t* v);
  absl::Status GetBool(bool* v);
  absl::Status GetString(std::string* s);
  // OK when every record has been read.
  absl::Status CheckDone() const;

 private:
  std::string_view in_;
  std::string last_stage_;
};

// Fingerprints configuration values for BeginStage (FNV-1a over their bytes).
uint64_t ConfigFingerprint(std::initializer_list<int64_t> values);

}  // namespace kiln::data
