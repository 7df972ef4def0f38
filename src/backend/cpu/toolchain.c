/* Placeholder until the toolchain lands. */
#include "backend/cpu/toolchain.h"
#include "core/status.h"

loom_status_t cpu_module_build(const char *source, int64_t length,
                               cpu_module_t **out) {
  (void)source;
  (void)length;
  *out = NULL;
  return loom_fail(LOOM_ERR_UNSUPPORTED, "the CPU toolchain is not built yet");
}

void *cpu_module_symbol(const cpu_module_t *m, const char *name) {
  (void)m;
  (void)name;
  return NULL;
}

const char *cpu_module_path(const cpu_module_t *m) {
  (void)m;
  return "";
}

bool cpu_module_from_cache(const cpu_module_t *m) {
  (void)m;
  return false;
}

void cpu_module_release(cpu_module_t *m) { (void)m; }

void cpu_toolchain_stats(cpu_toolchain_stats_t *out) {
  *out = (cpu_toolchain_stats_t){0};
}
