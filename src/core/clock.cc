#include "kiln/core/clock.h"

#include <cerrno>
#include <ctime>

namespace kiln {

int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void SleepUntilNanos(int64_t deadline_ns) {
  timespec ts;
  ts.tv_sec = deadline_ns / 1000000000;
  ts.tv_nsec = deadline_ns % 1000000000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void SleepForNanos(int64_t duration_ns) { SleepUntilNanos(NowNanos() + duration_ns); }

}  // namespace kiln
