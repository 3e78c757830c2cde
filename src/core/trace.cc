#include "kiln/core/trace.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "kiln/core/clock.h"

namespace kiln {
namespace {

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

}  // namespace

int TraceRecorder::TrackIdLocked(absl::string_view track) {
  auto it = track_ids_.find(std::string(track));
  if (it != track_ids_.end()) return it->second;
  const int id = static_cast<int>(track_names_.size()) + 1;
  track_ids_.emplace(std::string(track), id);
  track_names_.emplace_back(track);
  return id;
}

void TraceRecorder::AddEvent(absl::string_view track, absl::string_view name, int64_t start_ns,
                             int64_t end_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({TrackIdLocked(track), false, std::string(name), start_ns, end_ns - start_ns, 0});
}

void TraceRecorder::AddCounter(absl::string_view track, absl::string_view name, int64_t ts_ns,
                               double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({TrackIdLocked(track), true, std::string(name), ts_ns, 0, value});
}

size_t TraceRecorder::num_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string TraceRecorder::ToJson() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t origin = 0;
  for (const Event& e : events_) origin = origin == 0 ? e.ts_ns : std::min(origin, e.ts_ns);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (size_t i = 0; i < track_names_.size(); ++i) {
    sep();
    absl::StrAppend(&out, "{\"ph\":\"M\",\"pid\":1,\"tid\":", i + 1,
                    ",\"name\":\"thread_name\",\"args\":{\"name\":");
    AppendJsonString(&out, track_names_[i]);
    out += "}}";
    sep();
    absl::StrAppend(&out, "{\"ph\":\"M\",\"pid\":1,\"tid\":", i + 1,
                    ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", i + 1, "}}");
  }
  for (const Event& e : events_) {
    sep();
    out += "{\"name\":";
    AppendJsonString(&out, e.name);
    const double ts_us = static_cast<double>(e.ts_ns - origin) / 1000.0;
    if (e.counter) {
      absl::StrAppend(&out, ",\"ph\":\"C\",\"pid\":1,\"tid\":", e.track_id, ",\"ts\":", ts_us,
                      ",\"args\":{\"value\":", e.value, "}}");
    } else {
      absl::StrAppend(&out, ",\"ph\":\"X\",\"pid\":1,\"tid\":", e.track_id, ",\"ts\":", ts_us,
                      ",\"dur\":", static_cast<double>(e.dur_ns) / 1000.0, "}");
    }
  }
  out += "\n]}\n";
  return out;
}

absl::Status TraceRecorder::WriteJson(const std::string& path) const {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open trace file ", path));
  file << ToJson();
  if (!file) return absl::DataLossError(absl::StrCat("cannot write trace file ", path));
  return absl::OkStatus();
}

ScopedTraceEvent::ScopedTraceEvent(TraceRecorder* recorder, absl::string_view track,
                                   absl::string_view name)
    : recorder_(recorder), track_(track), name_(name), start_ns_(recorder ? NowNanos() : 0) {}

ScopedTraceEvent::~ScopedTraceEvent() {
  if (recorder_ != nullptr) recorder_->AddEvent(track_, name_, start_ns_, NowNanos());
}

}  // namespace kiln
