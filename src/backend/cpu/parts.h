/* A large module compiled as several translation units at once, then
 * linked (parts.c). */
#ifndef LOOM_BACKEND_CPU_PARTS_H
#define LOOM_BACKEND_CPU_PARTS_H

#include "backend/cpu/toolchain.h"

/* How to cut a source of `length` bytes into units for up to `jobs`
 * compiler processes: the number of units n, unit i holding the prelude
 * and source[start[i], start[i + 1]) (start has CPU_CC_MAX_INPUTS + 1
 * places). 1 when the source is too small to repay a second process (or
 * has no cuts); start is then not set. */
int cpu_parts_plan(const cpu_source_cuts_t *cuts, int64_t length, int jobs, int64_t *start);

/* Writes the n units into work_dir as unit<i>.c: each the prelude,
 * source[0, prelude), then source[start[i], start[i + 1]). */
loom_status_t cpu_parts_write(const char *work_dir, const char *source, int64_t prelude,
                              const int64_t *start, int n);

/* Compiles the units cpu_parts_write wrote, one compiler process each, at
 * once, and links them into so (named relative to work_dir); fails as
 * cpu_cc_compile does, with the first failing unit's message. */
loom_status_t cpu_parts_compile(const char *cc, const char *work_dir, int64_t prelude,
                                const int64_t *start, int n, const char *so);

#endif
