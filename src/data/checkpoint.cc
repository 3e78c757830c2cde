// Iterator checkpoints: the state codec (data/checkpoint.h) and the default save, restore and
// skip of every stage.
#include "data/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data/internal.h"
#include "kiln/core/coding.h"
#include "kiln/core/status.h"

namespace kiln::data {

// ---- StateWriter / StateReader ----

void StateWriter::BeginStage(std::string_view name, uint64_t config) {
  PutString(name);
  PutUint(config);
}

void StateWriter::PutUint(uint64_t v) { coding::PutVarint64(&payload_, v); }

void StateWriter::PutInt(int64_t v) {
  PutUint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}

void StateWriter::PutString(std::string_view s) {
  PutUint(s.size());
  payload_.append(s.data(), s.size());
}

std::string StateWriter::Finish() const {
  std::string out(kStateMagic, sizeof(kStateMagic) - 1);
  coding::PutVarint64(&out, kStateVersion);
  coding::PutVarint64(&out, payload_.size());
  out += payload_;
  coding::PutFixed32(&out, crc32c::Mask(crc32c::Value(payload_.data(), payload_.size())));
  return out;
}

absl::Status StateReader::Open(std::string_view state, StateReader* reader) {
  constexpr size_t kMagicBytes = sizeof(kStateMagic) - 1;
  if (state.size() < kMagicBytes || std::memcmp(state.data(), kStateMagic, kMagicBytes) != 0) {
    return absl::InvalidArgumentError(
        "RestoreState: not an iterator state (it does not start with \"KILNITER\")");
  }
  absl::string_view in(state.data() + kMagicBytes, state.size() - kMagicBytes);
  uint64_t version = 0, length = 0;
  if (!coding::GetVarint64(&in, &version)) {
    return absl::DataLossError("RestoreState: truncated iterator state (no version)");
  }
  if (version != kStateVersion) {
    return absl::InvalidArgumentError(absl::StrCat("RestoreState: iterator state version ", version,
                                                   " is not supported (this build reads version ",
                                                   kStateVersion, ")"));
  }
  if (!coding::GetVarint64(&in, &length) || in.size() < 4 || length != in.size() - 4) {
    return absl::DataLossError(
        absl::StrCat("RestoreState: truncated iterator state (", state.size(), " bytes)"));
  }
  const uint32_t stored = crc32c::Unmask(coding::DecodeFixed32(in.data() + length));
  if (stored != crc32c::Value(in.data(), length)) {
    return absl::DataLossError("RestoreState: corrupt iterator state (CRC mismatch)");
  }
  reader->in_ = std::string_view(in.data(), length);
  reader->last_stage_.clear();
  return absl::OkStatus();
}

absl::Status StateReader::BeginStage(std::string_view name, uint64_t config,
                                     const std::string& path) {
  const std::string name_str(name);  // this Abseil's StrCat takes no std::string_view
  std::string found;
  uint64_t found_config = 0;
  if (!GetString(&found).ok() || !GetUint(&found_config).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RestoreState: the state was saved from another pipeline: it has no record for stage ",
        path, " (", name_str, ")"));
  }
  if (found != name) {
    return absl::InvalidArgumentError(
        absl::StrCat("RestoreState: the state was saved from another pipeline: stage ", path,
                     " is a ", name_str, " but the state holds a ", found, " there"));
  }
  if (found_config != config) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RestoreState: the state was saved from another pipeline: stage ", path, " (", name_str,
        ") has different parameters (batch size, buffer size, seed, count, ...)"));
  }
  last_stage_ = path;
  return absl::OkStatus();
}

absl::Status StateReader::GetUint(uint64_t* v) {
  absl::string_view in(in_.data(), in_.size());
  if (!coding::GetVarint64(&in, v)) {
    return absl::DataLossError(absl::StrCat("RestoreState: truncated iterator state in stage ",
                                            last_stage_.empty() ? "(none)" : last_stage_));
  }
  in_ = std::string_view(in.data(), in.size());
  return absl::OkStatus();
}

absl::Status StateReader::GetInt(int64_t* v) {
  uint64_t u = 0;
  KILN_RETURN_IF_ERROR(GetUint(&u));
  *v = static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
  return absl::OkStatus();
}

absl::Status StateReader::GetBool(bool* v) {
  uint64_t u = 0;
  KILN_RETURN_IF_ERROR(GetUint(&u));
  *v = u != 0;
  return absl::OkStatus();
}

absl::Status StateReader::GetString(std::string* s) {
  uint64_t n = 0;
  KILN_RETURN_IF_ERROR(GetUint(&n));
  if (n > in_.size()) {
    return absl::DataLossError(absl::StrCat("RestoreState: truncated iterator state in stage ",
                                            last_stage_.empty() ? "(none)" : last_stage_));
  }
  s->assign(in_.data(), n);
  in_.remove_prefix(n);
  return absl::OkStatus();
}

absl::Status StateReader::CheckDone() const {
  if (in_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("RestoreState: the state was saved from another pipeline: it holds ", in_.size(),
                   " bytes of records after the last stage of this pipeline (", last_stage_, ")"));
}

uint64_t ConfigFingerprint(std::initializer_list<int64_t> values) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t v : values) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

// ---- PipelineState ----

void PipelineState::MarkNotReplayable(const std::string& reason) {
  std::lock_guard<std::mutex> lock(checkpoint_mutex_);
  if (not_replayable_.empty()) not_replayable_ = reason;
}

std::string PipelineState::not_replayable_reason() const {
  std::lock_guard<std::mutex> lock(checkpoint_mutex_);
  return not_replayable_;
}

uint64_t PipelineState::Iteration(const void* node, const std::string& path,
                                  std::atomic<uint64_t>* counter) {
  std::lock_guard<std::mutex> lock(checkpoint_mutex_);
  uint64_t iteration = 0;
  bool found = false;
  for (const auto& [p, it] : restored_iterations_) {
    if (p == path) {
      iteration = it;
      found = true;
    }
  }
  for (const auto& [n, it] : node_iterations_) {
    if (n == node && !found) {
      iteration = it;
      found = true;
    }
  }
  if (!found) {
    iteration = counter->fetch_add(1, std::memory_order_relaxed);
    node_iterations_.emplace_back(node, iteration);
  }
  bool recorded = false;
  for (const auto& entry : path_iterations_) recorded |= entry.first == path;
  if (!recorded) path_iterations_.emplace_back(path, iteration);
  return iteration;
}

void PipelineState::SaveIterations(StateWriter& writer) const {
  std::lock_guard<std::mutex> lock(checkpoint_mutex_);
  // A restored iteration is the one the stage uses (Iteration returns it), whatever the
  // stage took from its node's counter when it was made.
  std::vector<std::pair<std::string, uint64_t>> all = restored_iterations_;
  for (const auto& entry : path_iterations_) {
    bool present = false;
    for (const auto& e : all) present |= e.first == entry.first;
    if (!present) all.push_back(entry);
  }
  writer.PutUint(all.size());
  for (const auto& [path, iteration] : all) {
    writer.PutString(path);
    writer.PutUint(iteration);
  }
}

absl::Status PipelineState::RestoreIterations(StateReader& reader) {
  uint64_t n = 0;
  KILN_RETURN_IF_ERROR(reader.GetUint(&n));
  std::vector<std::pair<std::string, uint64_t>> table;
  for (uint64_t i = 0; i < n; ++i) {
    std::string path;
    uint64_t iteration = 0;
    KILN_RETURN_IF_ERROR(reader.GetString(&path));
    KILN_RETURN_IF_ERROR(reader.GetUint(&iteration));
    table.emplace_back(std::move(path), iteration);
  }
  std::lock_guard<std::mutex> lock(checkpoint_mutex_);
  restored_iterations_ = std::move(table);
  return absl::OkStatus();
}

// ---- IteratorBase ----

absl::Status IteratorBase::Save(StateWriter& writer) {
  writer.BeginStage(stage_name_, StateConfig());
  return SaveInternal(writer);
}

absl::Status IteratorBase::Restore(StateReader& reader) {
  KILN_RETURN_IF_ERROR(reader.BeginStage(stage_name_, StateConfig(), path_));
  return RestoreInternal(reader);
}

absl::Status IteratorBase::Skip(int64_t n, int64_t* skipped) {
  *skipped = 0;
  if (n <= 0) return absl::OkStatus();
  absl::Status s = SkipInternal(n, skipped);
  produced_ += *skipped;
  return s;
}

absl::Status IteratorBase::SaveInternal(StateWriter& writer) {
  writer.PutUint(static_cast<uint64_t>(produced_));
  return absl::OkStatus();
}

absl::Status IteratorBase::RestoreInternal(StateReader& reader) {
  uint64_t n = 0;
  KILN_RETURN_IF_ERROR(reader.GetUint(&n));
  int64_t skipped = 0;
  KILN_RETURN_IF_ERROR(Skip(static_cast<int64_t>(n), &skipped));
  if (skipped != static_cast<int64_t>(n)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RestoreState: stage ", path_, " ended after ", skipped, " of the ", n,
        " elements it had produced when the state was saved; its input changed since"));
  }
  return absl::OkStatus();
}

absl::Status IteratorBase::SkipInternal(int64_t n, int64_t* skipped) {
  Element scratch;
  while (*skipped < n) {
    bool end = false;
    absl::Status s = GetNextInternal(&scratch, &end);
    if (absl::IsCancelled(s)) return s;
    if (s.ok() && end) break;
    ++*skipped;
  }
  return absl::OkStatus();
}

absl::Status IteratorBase::SkipInputExactly(IteratorBase* input, int64_t n) {
  int64_t skipped = 0;
  KILN_RETURN_IF_ERROR(input->Skip(n, &skipped));
  if (skipped != n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RestoreState: the input of stage ", path_, " ended after ", skipped, " of the ", n,
        " elements it had produced when the state was saved; it changed since"));
  }
  return absl::OkStatus();
}

}  // namespace kiln::data
