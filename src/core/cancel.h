/* Long waits of the calling thread that may be cut short. A C compiler's
 * run checks core_cancelled() while it waits and kills the compiler once
 * it turns true: when a flag the thread watches is set (a cache being
 * destroyed ends its workers' compiles) or a deadline passes (the bounded
 * wait for compiles at a program's exit). */
#ifndef LOOM_CORE_CANCEL_H
#define LOOM_CORE_CANCEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The calling thread's flag (NULL: none), read while it waits. */
void core_cancel_watch(const _Atomic bool *flag);
/* The calling thread's deadline on core_now_ns()'s clock (0: none). */
void core_cancel_deadline(int64_t ns);
/* Whether the calling thread's flag is set or its deadline has passed. */
bool core_cancelled(void);

#endif
