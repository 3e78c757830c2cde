// Monotonic time and sleeping to absolute deadlines.
#pragma once

#include <cstdint>

namespace kiln {

// Nanoseconds on CLOCK_MONOTONIC.
int64_t NowNanos();
// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (clock_nanosleep with TIMER_ABSTIME), so
// that oversleeping in one call does not add up over many calls.
void SleepUntilNanos(int64_t deadline_ns);
void SleepForNanos(int64_t duration_ns);

}  // namespace kiln
