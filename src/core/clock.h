/* The monotonic clock that timings in Loom read. */
#ifndef LOOM_CORE_CLOCK_H
#define LOOM_CORE_CLOCK_H

#include <stdint.h>

/* Nanoseconds of CLOCK_MONOTONIC. */
int64_t core_now_ns(void);

#endif
