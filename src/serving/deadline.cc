#include "kiln/serving/deadline.h"

#include "absl/strings/str_cat.h"

namespace kiln::serving {

namespace deadline_internal {
thread_local int64_t current_deadline_ns = 0;
}  // namespace deadline_internal

absl::Status CheckRequestDeadline(const char* what) {
  const int64_t deadline = deadline_internal::current_deadline_ns;
  if (deadline == 0) return absl::OkStatus();
  const int64_t now = NowNanos();
  if (now < deadline) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("the request's deadline passed ", (now - deadline) / 1000000, " ms ago ", what));
}

}  // namespace kiln::serving
