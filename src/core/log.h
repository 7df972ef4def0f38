/* Log lines by category, chosen with LOOM_LOG (comma-separated: passes,
 * fusion, compile, memory, cache, recompiles, breaks, steps, or all). Silent by
 * default; lines go to stderr. */
#ifndef LOOM_CORE_LOG_H
#define LOOM_CORE_LOG_H

#include <stdbool.h>

typedef enum core_log_category {
  LOG_PASSES = 1 << 0,
  LOG_FUSION = 1 << 1,
  LOG_COMPILE = 1 << 2,
  LOG_MEMORY = 1 << 3,
  LOG_CACHE = 1 << 4,
  LOG_RECOMPILES = 1 << 5,
  LOG_BREAKS = 1 << 6,
  LOG_STEPS = 1 << 7, /* per-step timings of executables */
  LOG_COMM = 1 << 8,  /* each collective: its size and time */
} core_log_category_t;

/* Whether LOOM_LOG enables the category (read once per process). */
bool core_log_enabled(core_log_category_t category);
/* Writes "loom[category]: message\n" to stderr when enabled. */
void core_log(core_log_category_t category, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Writes a warning to stderr whatever LOOM_LOG says. */
void core_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Re-reads LOOM_LOG (for tests that change it). */
void core_log_reload(void);

#endif
