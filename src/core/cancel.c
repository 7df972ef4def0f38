/* Cancellation of the calling thread's long waits (cancel.h). */
#include "core/cancel.h"

#include "core/clock.h"

static _Thread_local const _Atomic bool *watched;
static _Thread_local int64_t deadline;

void core_cancel_watch(const _Atomic bool *flag) { watched = flag; }

void core_cancel_deadline(int64_t ns) { deadline = ns; }

bool core_cancelled(void) {
  if (watched && atomic_load_explicit(watched, memory_order_acquire)) return true;
  return deadline > 0 && core_now_ns() >= deadline;
}
