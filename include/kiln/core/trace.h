// Records timed events and writes them as Chrome trace JSON (open in Perfetto or
// chrome://tracing). Each "track" becomes a named row in the viewer.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kiln {

// Thread safety: every method may be called from any thread at once (pipeline stages and
// kernels record from their own threads); one mutex guards the events.
class TraceRecorder {
 public:
  TraceRecorder() = default;

  // A complete event ("ph":"X") on `track` from start_ns to end_ns (NowNanos() clock).
  void AddEvent(absl::string_view track, absl::string_view name, int64_t start_ns, int64_t end_ns);
  // A counter sample ("ph":"C"), e.g. buffer fill of a stage.
  void AddCounter(absl::string_view track, absl::string_view name, int64_t ts_ns, double value);

  size_t num_events() const;
  // The whole trace as JSON ({"traceEvents": [...]}, times in microseconds).
  std::string ToJson() const;
  absl::Status WriteJson(const std::string& path) const;

 private:
  struct Event {
    int track_id;
    bool counter;
    std::string name;
    int64_t ts_ns;
    int64_t dur_ns;
    double value;
  };
  int TrackIdLocked(absl::string_view track) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, int> track_ids_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> track_names_ ABSL_GUARDED_BY(mutex_);
  std::vector<Event> events_ ABSL_GUARDED_BY(mutex_);
};

// Records an event covering the lifetime of the scope, if `recorder` is not null.
class ScopedTraceEvent {
 public:
  ScopedTraceEvent(TraceRecorder* recorder, absl::string_view track, absl::string_view name);
  ~ScopedTraceEvent();

 private:
  TraceRecorder* recorder_;
  absl::string_view track_;
  absl::string_view name_;
  int64_t start_ns_;
};

}  // namespace kiln
