#include "core/text.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/alloc.h"
#include "core/status.h"

void core_text_put(core_text_t *t, const char *fmt, ...) {
  if (t->failed) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || core_grow((void **)&t->s, &t->cap, t->len + n + 1, 1) != LOOM_OK) {
    t->failed = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->len, (size_t)(t->cap - t->len), fmt, ap);
  va_end(ap);
  t->len += n;
}

loom_status_t core_text_take(core_text_t *t, const char *what, char **out) {
  if (t->failed || !t->s) {
    core_free(t->s);
    t->s = NULL;
    return loom_fail(LOOM_ERR_NOMEM, "out of memory %s", what);
  }
  *out = t->s;
  t->s = NULL;
  return LOOM_OK;
}
