// The deadline of the request the calling thread is handling: a gRPC client's deadline, or
// REST's --rest_api_timeout_in_ms counted from the request's arrival. TF Serving turns both
// into the run's timeout; here the deadline bounds the request's time in the batching queue as
// well, and work whose deadline has passed is not run (DEADLINE_EXCEEDED, HTTP 504).
//
// Why a thread-scoped value rather than a parameter: every front end (TF Serving's gRPC
// services, KServe v2 over gRPC, REST) handles a request synchronously on one thread down to
// ServableVersion::Run / Batcher::Run, through many handlers (predict, classify, regress,
// multi-inference, explain). The front end opens a RequestDeadlineScope; the two places that
// act on it (the check before a run, and the batcher's wait) read it. The batcher copies it
// into its queued task, so its worker threads never read another thread's value.
#pragma once

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "kiln/core/clock.h"

namespace kiln::serving {

namespace deadline_internal {
// NowNanos() clock; 0: no deadline. Defined in deadline.cc.
extern thread_local int64_t current_deadline_ns;
}  // namespace deadline_internal

// The calling thread's request deadline on the NowNanos() clock; 0 when it has none.
inline int64_t CurrentRequestDeadlineNs() { return deadline_internal::current_deadline_ns; }

// DEADLINE_EXCEEDED when the calling thread's request deadline has passed; `what` says which
// stage noticed (it ends up in the client's error message).
absl::Status CheckRequestDeadline(const char* what);

// Sets the calling thread's request deadline for its lifetime (nested scopes restore the
// outer one). `deadline_ns` 0: none.
class RequestDeadlineScope {
 public:
  explicit RequestDeadlineScope(int64_t deadline_ns)
      : previous_(deadline_internal::current_deadline_ns) {
    deadline_internal::current_deadline_ns = deadline_ns;
  }
  // A deadline `timeout_ms` from now; <= 0: none.
  static int64_t FromTimeoutMs(int64_t timeout_ms) {
    return timeout_ms > 0 ? NowNanos() + timeout_ms * 1000000 : 0;
  }
  // A gRPC deadline (system clock; time_point::max() when the client set none).
  static int64_t FromSystemDeadline(std::chrono::system_clock::time_point deadline) {
    if (deadline == std::chrono::system_clock::time_point::max()) return 0;
    const auto left = deadline - std::chrono::system_clock::now();
    const int64_t left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    // A deadline already past still counts (at least 1 ns ago), never as "none".
    return NowNanos() + (left_ns > 0 ? left_ns : -1);
  }
  ~RequestDeadlineScope() { deadline_internal::current_deadline_ns = previous_; }
  RequestDeadlineScope(const RequestDeadlineScope&) = delete;
  RequestDeadlineScope& operator=(const RequestDeadlineScope&) = delete;

 private:
  const int64_t previous_;
};

}  // namespace kiln::serving
