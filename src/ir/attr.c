/* Node attributes: a small list of named ints, floats and int lists,
 * checked against the schema in the op's row of the op table. */
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

static const char *const kind_names[] = {"int", "float", "ints"};

/* Looks name up in the schema; sets its kind and whether it is optional.
 * False also when the schema spells the kind wrongly (an op table bug):
 * no kind is set then. */
static bool schema_has(const char *schema, const char *name,
                       ir_attr_kind_t *kind, bool *optional) {
  size_t len = strlen(name);
  for (const char *p = schema; *p;) {
    while (*p == ' ') p++;
    const char *colon = strchr(p, ':');
    if (!colon) return false;
    const char *end = strchr(colon, ' ');
    if (!end) end = colon + strlen(colon);
    if ((size_t)(colon - p) == len && !strncmp(p, name, len)) {
      *optional = end[-1] == '?';
      size_t klen = (size_t)(end - colon - 1) - (*optional ? 1 : 0);
      for (int k = 0; k < 3; k++)
        if (strlen(kind_names[k]) == klen && !strncmp(colon + 1, kind_names[k], klen)) {
          *kind = (ir_attr_kind_t)k;
          return true;
        }
      return false;
    }
    p = end;
  }
  return false;
}

loom_status_t ir_attrs_check(ir_op_t op, const ir_attrs_t *a) {
  const ir_op_info_t *info = &ir_ops[op];
  const char *schema = info->attrs;
  int n = a ? a->n : 0;
  for (int i = 0; i < n; i++) {
    const ir_attr_t *s = &a->a[i];
    ir_attr_kind_t kind = IR_ATTR_INT; /* an origin's */
    bool optional;
    /* Every op takes an origin (src/ir/origin.c) beside its own. */
    if (strcmp(s->name, IR_ORIGIN_ATTR) && !schema_has(schema, s->name, &kind, &optional))
      return loom_fail(LOOM_ERR_INVALID, "%s: unknown attribute '%s' (takes: %s)",
                       info->name, s->name, schema[0] ? schema : "none");
    if (kind != s->kind)
      return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' must be %s, not %s",
                       info->name, s->name, kind_names[kind], kind_names[s->kind]);
    if (s->kind == IR_ATTR_INTS && s->n < 0)
      return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' is a null or "
                       "negative-length list", info->name, s->name);
    if (s->kind == IR_ATTR_INTS && s->n > IR_MAX_ATTR_INTS)
      return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' has %d entries (at most %d)",
                       info->name, s->name, s->n, IR_MAX_ATTR_INTS);
  }
  /* Every required attribute is present. */
  for (const char *p = schema; *p;) {
    while (*p == ' ') p++;
    const char *colon = strchr(p, ':');
    if (!colon) break;
    const char *end = strchr(colon, ' ');
    if (!end) end = colon + strlen(colon);
    char name[IR_ATTR_NAME] = {0};
    size_t len = (size_t)(colon - p);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, p, len);
    if (end[-1] != '?' && !ir_attrs_find(a, name))
      return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' is required",
                       info->name, name);
    p = end;
  }
  return LOOM_OK;
}
