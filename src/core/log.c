#include "core/log.h"
#include "core/env.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  core_log_category_t category;
} categories[] = {
    {"passes", LOG_PASSES}, {"fusion", LOG_FUSION},         {"compile", LOG_COMPILE},
    {"memory", LOG_MEMORY}, {"cache", LOG_CACHE},           {"recompiles", LOG_RECOMPILES},
    {"breaks", LOG_BREAKS},         {"steps", LOG_STEPS},           {"comm", LOG_COMM},
};
enum { N_CATEGORIES = sizeof categories / sizeof categories[0] };

/* -1 until LOOM_LOG is read. */
static _Atomic int enabled = -1;

static int parse(const char *spec) {
  int mask = 0;
  while (spec && *spec) {
    size_t len = strcspn(spec, ",");
    if (len == 3 && !strncmp(spec, "all", 3)) mask = -1 & 0x7fffffff;
    for (int i = 0; i < N_CATEGORIES; i++)
      if (strlen(categories[i].name) == len && !strncmp(spec, categories[i].name, len))
        mask |= categories[i].category;
    spec += len;
    if (*spec == ',') spec++;
  }
  return mask;
}

void core_log_reload(void) { atomic_store(&enabled, parse(core_getenv("LOOM_LOG"))); }

bool core_log_enabled(core_log_category_t category) {
  int mask = atomic_load(&enabled);
  if (mask < 0) {
    core_log_reload();
    mask = atomic_load(&enabled);
  }
  return (mask & (int)category) != 0;
}

static const char *category_name(core_log_category_t category) {
  for (int i = 0; i < N_CATEGORIES; i++)
    if (categories[i].category == category) return categories[i].name;
  return "?";
}

void core_log(core_log_category_t category, const char *fmt, ...) {
  if (!core_log_enabled(category)) return;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One fputs per line, so that lines from threads do not interleave. */
  char out[2100];
  snprintf(out, sizeof out, "loom[%s]: %s\n", category_name(category), line);
  fputs(out, stderr);
}

void core_warn(const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  char out[2100];
  snprintf(out, sizeof out, "loom: warning: %s\n", line);
  fputs(out, stderr);
}
