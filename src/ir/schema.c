/* Attribute schemas: the attrs column of the op table parsed once into
 * specs (ir.h), which the attribute check, the default readers of shape
 * rules, kernels and passes, and the public introspection share, and the
 * check of a node's attributes against its op's schema. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/status.h"
#include "ir/ir.h"

static ir_schema_t schemas[IR_OP_COUNT];
static pthread_once_t parsed = PTHREAD_ONCE_INIT;

static const char *const kind_names[] = {
    [LOOM_ATTR_INT] = "int",     [LOOM_ATTR_FLOAT] = "float", [LOOM_ATTR_INTS] = "ints",
    [LOOM_ATTR_DTYPE] = "dtype", [LOOM_ATTR_GRAPH] = "graph",
};
enum { N_KINDS = sizeof kind_names / sizeof *kind_names };

const char *ir_attr_kind_name(loom_attr_kind_t kind) {
  return (unsigned)kind < N_KINDS ? kind_names[kind] : "?";
}

ir_attr_kind_t ir_attr_storage(loom_attr_kind_t kind) {
  if (kind == LOOM_ATTR_FLOAT) return IR_ATTR_FLOAT;
  if (kind == LOOM_ATTR_INTS) return IR_ATTR_INTS;
  return IR_ATTR_INT; /* int, and dtypes and subgraph numbers are ints */
}

static bool parse_kind(const char *s, size_t len, loom_attr_kind_t *kind) {
  for (int k = 0; k < N_KINDS; k++)
    if (strlen(kind_names[k]) == len && !strncmp(s, kind_names[k], len)) {
      *kind = (loom_attr_kind_t)k;
      return true;
    }
  return false;
}

/* An integer that is all of s. */
static bool parse_int(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  *out = strtoll(s, &end, 10);
  return end != s && !*end && errno == 0;
}

static bool parse_ints(char *s, ir_attr_spec_t *a) {
  char *save;
  for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (a->n_ints == IR_MAX_DEFAULT_INTS || !parse_int(tok, &a->ints[a->n_ints])) return false;
    a->n_ints++;
  }
  return a->n_ints > 0;
}

static bool parse_dtype(const char *s, int64_t *out) {
  for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
    if (!strcmp(s, loom_dtype_name((loom_dtype_t)d))) {
      *out = d;
      return true;
    }
  return false;
}

/* Reads a->text as a default of a's kind into a. */
static bool parse_default(ir_attr_spec_t *a) {
  char buf[sizeof a->text];
  memcpy(buf, a->text, sizeof buf);
  char *end;
  switch (a->kind) {
  case LOOM_ATTR_INT: return parse_int(buf, &a->ints[0]);
  case LOOM_ATTR_FLOAT: a->f = strtod(buf, &end); return end != buf && !*end;
  case LOOM_ATTR_INTS: return parse_ints(buf, a);
  case LOOM_ATTR_DTYPE: return parse_dtype(buf, &a->ints[0]);
  case LOOM_ATTR_GRAPH: return false; /* a subgraph has no default */
  }
  return false;
}

/* Parses one word "name:kind[?|=default]" of length len into a; NULL or
 * what is wrong. */
static const char *parse_word(const char *w, size_t len, ir_attr_spec_t *a) {
  const char *colon = memchr(w, ':', len), *end = w + len;
  if (!colon || colon == w) return "a word lacks 'name:'";
  if ((size_t)(colon - w) >= sizeof a->name) return "a name is too long";
  memcpy(a->name, w, (size_t)(colon - w));
  const char *kind = colon + 1, *eq = memchr(kind, '=', (size_t)(end - kind));
  const char *kind_end = eq ? eq : end;
  a->optional = eq || kind_end[-1] == '?';
  if (!eq && kind_end[-1] == '?') kind_end--;
  if (!parse_kind(kind, (size_t)(kind_end - kind), &a->kind)) return "an unknown kind";
  if (!eq) return NULL;
  if ((size_t)(end - eq - 1) >= sizeof a->text) return "a default is too long";
  memcpy(a->text, eq + 1, (size_t)(end - eq - 1));
  a->has_default = true;
  return parse_default(a) ? NULL : "a default does not parse as its kind";
}

static void parse_op(ir_op_t op) {
  ir_schema_t *s = &schemas[op];
  for (const char *p = ir_ops[op].attrs; *p;) {
    size_t len = strcspn(p, " ");
    const char *why = s->n == IR_MAX_ATTRS ? "too many attributes"
                      : len ? parse_word(p, len, &s->a[s->n]) : NULL;
    if (why) {
      snprintf(s->error, sizeof s->error, "%s (attribute %d)", why, s->n);
      s->n = 0;
      return;
    }
    s->n += len > 0;
    p += len + (p[len] == ' ');
  }
}

static void parse_all(void) {
  for (int op = 0; op < IR_OP_COUNT; op++) parse_op((ir_op_t)op);
}

const ir_schema_t *ir_op_schema(ir_op_t op) {
  pthread_once(&parsed, parse_all);
  return &schemas[op];
}

const ir_attr_spec_t *ir_op_attr_spec(ir_op_t op, const char *name) {
  const ir_schema_t *s = ir_op_schema(op);
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->a[i].name, name)) return &s->a[i];
  return NULL;
}

/* ---- Defaults ----------------------------------------------------------------- */

int64_t ir_op_int(ir_op_t op, const ir_attrs_t *a, const char *name) {
  const ir_attr_t *v = ir_attrs_find(a, name);
  if (v && v->kind == IR_ATTR_INT) return v->ints[0];
  const ir_attr_spec_t *s = ir_op_attr_spec(op, name);
  return s && s->has_default ? s->ints[0] : 0;
}

double ir_op_float(ir_op_t op, const ir_attrs_t *a, const char *name) {
  const ir_attr_t *v = ir_attrs_find(a, name);
  if (v && v->kind == IR_ATTR_FLOAT) return v->f;
  const ir_attr_spec_t *s = ir_op_attr_spec(op, name);
  return s && s->has_default ? s->f : 0.0;
}

void ir_op_ints(ir_op_t op, const ir_attrs_t *a, const char *name, int count,
                int64_t *out) {
  const int64_t *v = NULL;
  if (ir_attr_ints(a, name, &v) == count) {
    memcpy(out, v, sizeof *out * (size_t)count);
    return;
  }
  const ir_attr_spec_t *s = ir_op_attr_spec(op, name);
  bool fits = s && s->has_default && s->n_ints == count;
  for (int i = 0; i < count; i++) out[i] = fits ? s->ints[i] : 0;
}

/* Checks attribute s of op against its spec (NULL: not in the schema). */
static loom_status_t check_one(ir_op_t op, const ir_attr_t *s, const ir_attr_spec_t *spec) {
  const char *name = ir_ops[op].name, *schema = ir_ops[op].attrs;
  /* Every op takes an origin (src/ir/origin.c) beside its own. */
  ir_attr_kind_t want = spec ? ir_attr_storage(spec->kind) : IR_ATTR_INT;
  static const char *const storage[] = {"int", "float", "ints"};
  if (!spec && strcmp(s->name, IR_ORIGIN_ATTR))
    return loom_fail(LOOM_ERR_INVALID, "%s: unknown attribute '%s' (takes: %s)", name,
                     s->name, schema[0] ? schema : "none");
  if (s->kind != want)
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' must be %s, not %s", name,
                     s->name, spec ? ir_attr_kind_name(spec->kind) : "int", storage[s->kind]);
  if (s->kind == IR_ATTR_INTS && s->n < 0)
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' is a null or "
                     "negative-length list", name, s->name);
  if (s->kind == IR_ATTR_INTS && s->n > IR_MAX_ATTR_INTS)
    return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' has %d entries (at most %d)",
                     name, s->name, s->n, IR_MAX_ATTR_INTS);
  if (spec && spec->kind == LOOM_ATTR_DTYPE && (uint64_t)s->ints[0] >= LOOM_DTYPE_COUNT)
    return loom_fail(LOOM_ERR_DTYPE, "%s: attribute '%s' is %lld, not a dtype", name,
                     s->name, (long long)s->ints[0]);
  return LOOM_OK;
}

loom_status_t ir_attrs_check(ir_op_t op, const ir_attrs_t *a) {
  if ((!a || !a->n) && !ir_ops[op].attrs[0]) return LOOM_OK; /* none taken, none given */
  const ir_schema_t *schema = ir_op_schema(op);
  if (schema->error[0])
    return loom_fail(LOOM_ERR_INVALID, "%s: the op table's attribute schema is malformed: %s",
                     ir_ops[op].name, schema->error);
  int n = a ? a->n : 0;
  for (int i = 0; i < n; i++)
    LOOM_TRY(check_one(op, &a->a[i], ir_op_attr_spec(op, a->a[i].name)));
  for (int i = 0; i < schema->n; i++)
    if (!schema->a[i].optional && !ir_attrs_find(a, schema->a[i].name))
      return loom_fail(LOOM_ERR_INVALID, "%s: attribute '%s' is required",
                       ir_ops[op].name, schema->a[i].name);
  return LOOM_OK;
}
