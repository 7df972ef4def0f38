/* The registry of back ends: a table, in the order they were added, that
 * loom_compile_options_t.target names. Built-in back ends are listed
 * here; tests (and, later, plugins) add theirs with be_register. This is
 * the one file above the back ends that names them. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/backend_cpu.h"
#include "backend/ref/backend_ref.h"
#include "core/status.h"

enum { BE_MAX = 8 };

/* The built-in back ends, the default ("cpu") first: a static table, so
 * that compiles on several threads read it without a lock. */
static const be_backend_t *table[BE_MAX] = {&be_cpu, &be_ref};
static int n_table = 2;

const be_backend_t *be_find(const char *target) {
  if (!target) target = "cpu";
  for (int i = 0; i < n_table; i++)
    if (!strcmp(table[i]->name, target)) return table[i];
  return NULL;
}

const be_backend_t *const *be_list(int *n) {
  *n = n_table;
  return table;
}

void be_names(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n_table && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", table[i]->name);
}

loom_status_t be_register(const be_backend_t *b) {
  if (!b || !b->name)
    return loom_fail(LOOM_ERR_INVALID, "be_register: a back end needs a name");
  if (be_find(b->name))
    return loom_fail(LOOM_ERR_INVALID, "be_register: a back end named '%s' is registered",
                     b->name);
  if (n_table == BE_MAX)
    return loom_fail(LOOM_ERR_INVALID, "be_register: %d back ends are registered already",
                     BE_MAX);
  table[n_table++] = b;
  return LOOM_OK;
}

void be_unregister(const be_backend_t *b) {
  for (int i = 0; i < n_table; i++) {
    if (table[i] != b) continue;
    memmove(&table[i], &table[i + 1], sizeof *table * (size_t)(n_table - i - 1));
    n_table--;
    return;
  }
}

const be_backend_t *be_reference(void) { return &be_ref; }

void be_stats(be_stats_t *out) {
  *out = (be_stats_t){0};
  for (int i = 0; i < n_table; i++)
    if (table[i]->stats) table[i]->stats(out);
}
