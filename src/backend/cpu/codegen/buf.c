/* The emitter's text buffer: appends formatted text, remembering an
 * allocation failure instead of reporting each one. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"

static void append_v(cg_buf_t *b, const char *fmt, va_list ap) {
  if (b->failed) return;
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, again);
  va_end(again);
  if (n < 0 || core_grow((void **)&b->s, &b->cap, b->len + n + 1, 1) != LOOM_OK) {
    b->failed = true;
    return;
  }
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  b->len += n;
}

void cg_vprintf(cg_buf_t *b, const char *fmt, va_list ap) { append_v(b, fmt, ap); }

void cg_printf(cg_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  append_v(b, fmt, ap);
  va_end(ap);
}

void cg_line(cg_buf_t *b, int level, const char *fmt, ...) {
  cg_printf(b, "%*s", 2 * level, "");
  va_list ap;
  va_start(ap, fmt);
  append_v(b, fmt, ap);
  va_end(ap);
}

void cg_double(cg_buf_t *b, double v) {
  if (isnan(v)) cg_printf(b, "NAN");
  else if (isinf(v)) cg_printf(b, v < 0 ? "-INFINITY" : "INFINITY");
  else cg_printf(b, "%.17g", v);
}

void cg_append(cg_buf_t *b, const char *s, int64_t n) {
  if (b->failed) return;
  if (core_grow((void **)&b->s, &b->cap, b->len + n + 1, 1) != LOOM_OK) {
    b->failed = true;
    return;
  }
  memcpy(b->s + b->len, s, (size_t)n);
  b->len += n;
  b->s[b->len] = '\0';
}

void cg_insert(cg_buf_t *b, int64_t at, const char *s, int64_t n) {
  if (b->failed) return;
  if (core_grow((void **)&b->s, &b->cap, b->len + n + 1, 1) != LOOM_OK) {
    b->failed = true;
    return;
  }
  memmove(b->s + at + n, b->s + at, (size_t)(b->len - at) + 1);
  memcpy(b->s + at, s, (size_t)n);
  b->len += n;
}
