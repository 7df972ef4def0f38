/* Node attributes: a small list of named ints, floats and int lists,
 * checked against the schema in the op's row of the op table. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "ir/ir.h"

/* The slot for name: the existing one, or a new one (NULL when full). */
static ir_attr_t *slot(ir_attrs_t *a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->a[i].name, name)) return &a->a[i];
  if (a->n == IR_MAX_ATTRS || strlen(name) >= IR_ATTR_NAME) return NULL;
  ir_attr_t *s = &a->a[a->n++];
  memset(s, 0, sizeof *s);
  strcpy(s->name, name);
  return s;
}

void ir_attrs_int(ir_attrs_t *a, const char *name, int64_t v) {
  ir_attr_t *s = slot(a, name);
  if (!s) return;
  s->kind = IR_ATTR_INT;
  s->n = 1;
  s->ints[0] = v;
}

void ir_attrs_float(ir_attrs_t *a, const char *name, double v) {
  ir_attr_t *s = slot(a, name);
  if (!s) return;
  s->kind = IR_ATTR_FLOAT;
  s->f = v;
}

void ir_attrs_ints(ir_attrs_t *a, const char *name, int n, const int64_t *v) {
  ir_attr_t *s = slot(a, name);
  if (!s) return;
  s->kind = IR_ATTR_INTS;
  /* An over-long or null list is kept marked (n > capacity, n < 0) for
   * the check to report. */
  s->n = n > 0 && !v ? -1 : n;
  for (int i = 0; v && i < n && i < IR_MAX_ATTR_INTS; i++) s->ints[i] = v[i];
}

const ir_attr_t *ir_attrs_find(const ir_attrs_t *a, const char *name) {
  if (!a) return NULL;
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->a[i].name, name)) return &a->a[i];
  return NULL;
}

int64_t ir_attr_int(const ir_attrs_t *a, const char *name, int64_t dflt) {
  const ir_attr_t *s = ir_attrs_find(a, name);
  return s && s->kind == IR_ATTR_INT ? s->ints[0] : dflt;
}

double ir_attr_float(const ir_attrs_t *a, const char *name, double dflt) {
  const ir_attr_t *s = ir_attrs_find(a, name);
  return s && s->kind == IR_ATTR_FLOAT ? s->f : dflt;
}

int ir_attr_ints(const ir_attrs_t *a, const char *name, const int64_t **v) {
  const ir_attr_t *s = ir_attrs_find(a, name);
  if (!s || s->kind != IR_ATTR_INTS) return -1;
  *v = s->ints;
  return s->n;
}

void ir_attr_ints_or(const ir_attrs_t *a, const char *name, int count, int64_t dflt,
                     int64_t *out) {
  const int64_t *v = NULL;
  int got = ir_attr_ints(a, name, &v);
  for (int i = 0; i < count; i++) out[i] = got == count ? v[i] : dflt;
}

size_t ir_attrs_bytes(int n) { return offsetof(ir_attrs_t, a) + sizeof(ir_attr_t) * (size_t)n; }

void ir_attrs_copy(ir_attrs_t *dst, const ir_attrs_t *src) {
  dst->n = src ? src->n : 0;
  if (dst->n) memcpy(dst->a, src->a, sizeof *src->a * (size_t)dst->n);
}
