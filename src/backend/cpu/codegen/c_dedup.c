/* Functions shared by groups. A group's text names its locals after the
 * graph's values (v12 holds value 12, p12 points at it, acc12 folds into
 * it) and its helpers after the group (loom_g3_body), and reads its slots
 * by their numbers in the group (cg_locals_t), so two groups of the same
 * structure (every layer of a Transformer, every piece of a long chain)
 * write texts that differ only in those names. Each text is brought to a
 * canonical form, those names numbered in the order they first appear
 * (a renaming that changes no meaning: every such name is declared within
 * the text), and a text whose form was seen before is dropped for the
 * earlier group's function: the C compiler sees each function once. */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/codegen/cg.h"
#include "core/alloc.h"

/* One function kept: its group and its canonical form in `forms`. */
typedef struct kept {
  uint64_t hash;
  int32_t group; /* -1: an empty place of the table */
  int64_t at, len;
} kept_t;

struct cg_dedup {
  kept_t *table; /* open addressing, a power of two places */
  int64_t cap, n;
  cg_buf_t forms; /* the canonical forms of the kept texts, one after another */
  cg_buf_t form;  /* the form of the text being looked up */
  /* Per value number, its number in the text being read plus 1 (0: not
   * seen yet), and the numbers seen, to clear them after it. */
  int32_t *renamed, *seen;
  int64_t n_values, n_seen, next;
};

loom_status_t cg_dedup_create(int64_t n_values, cg_dedup_t **out) {
  cg_dedup_t *d = core_calloc(1, sizeof *d);
  if (d) {
    d->cap = 64;
    d->n_values = n_values;
    d->table = core_malloc(sizeof *d->table * (size_t)d->cap);
    d->renamed = core_calloc((size_t)n_values + 1, sizeof *d->renamed);
    d->seen = core_malloc(sizeof *d->seen * ((size_t)n_values + 1));
  }
  if (!d || !d->table || !d->renamed || !d->seen) {
    cg_dedup_free(d);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  }
  for (int64_t i = 0; i < d->cap; i++) d->table[i].group = -1;
  *out = d;
  return LOOM_OK;
}

void cg_dedup_free(cg_dedup_t *d) {
  if (!d) return;
  core_free(d->table);
  core_free(d->forms.s);
  core_free(d->form.s);
  core_free(d->renamed);
  core_free(d->seen);
  core_free(d);
}

/* ---- The canonical form ------------------------------------------------------ */

static bool is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* The prefixes of names made from a value's number (the emitters' v%d,
 * p%d, acc%d, acc%d_l, cache_v%d). */
static bool value_prefix(const char *s, int64_t n) {
  static const char *const prefixes[] = {"v", "p", "acc", "cache_v"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if ((int64_t)strlen(prefixes[i]) == n && !memcmp(s, prefixes[i], (size_t)n)) return true;
  return false;
}

/* The prefixes of names made from the group's number: its function
 * loom_group_3, its helpers loom_g3_<what>, and "g3" in its comment. */
static bool group_prefix(const char *s, int64_t n) {
  return (n == 11 && !memcmp(s, "loom_group_", 11)) || (n == 6 && !memcmp(s, "loom_g", 6)) ||
         (n == 1 && s[0] == 'g');
}

/* Writes identifier s[0, n) in canonical form: a name <prefix><number>
 * <rest> made from a value's number gets the value's number in the text
 * instead, one made from group gi's number a mark; others stay. Numbers with
 * a leading zero stay, so that no two names become one. */
static void put_name(cg_dedup_t *d, const char *s, int64_t n, int gi) {
  int64_t p = 0;
  while (p < n && !is_digit(s[p])) p++;
  int64_t q = p, number = 0;
  while (q < n && is_digit(s[q]) && number <= d->n_values) number = number * 10 + (s[q++] - '0');
  bool whole = q == n || !is_digit(s[q]);
  bool plain = q > p && whole && (s[p] != '0' || q == p + 1);
  if (plain && group_prefix(s, p) && number == gi) {
    cg_append(&d->form, s, p);
    cg_append(&d->form, "\x01", 1); /* in no C name or text */
  } else if (plain && value_prefix(s, p) && number < d->n_values) {
    if (!d->renamed[number]) {
      d->renamed[number] = (int32_t)++d->next;
      d->seen[d->n_seen++] = (int32_t)number;
    }
    char digits[16];
    int m = snprintf(digits, sizeof digits, "%d", d->renamed[number] - 1);
    cg_append(&d->form, s, p);
    cg_append(&d->form, digits, m);
  } else {
    cg_append(&d->form, s, n);
    return;
  }
  cg_append(&d->form, s + q, n - q);
}

/* The canonical form of text into d->form; false when the text holds a
 * string or character literal, whose contents no renaming may touch
 * (generated code has none: such a text is kept as it is). Names in
 * comments are renamed too (the group's number, in its comment line). */
static bool canonical(cg_dedup_t *d, const char *text, int64_t len, int gi) {
  d->form.len = 0;
  d->next = 0;
  bool ok = true, comment = false;
  for (int64_t i = 0, j; i < len && ok; i = j) {
    j = i + 1;
    if (is_alpha(text[i])) {
      while (j < len && (is_alpha(text[j]) || is_digit(text[j]))) j++;
      put_name(d, text + i, j - i, gi);
      continue;
    }
    /* A number's letters (1e5f, 0x1p3) are part of it, never a name. */
    if (is_digit(text[i]))
      while (j < len && (is_alpha(text[j]) || is_digit(text[j]))) j++;
    else if (j < len && text[i] == '/' && text[j] == '*' && !comment)
      comment = true, j++;
    else if (j < len && text[i] == '*' && text[j] == '/' && comment)
      comment = false, j++;
    else if (!comment && (text[i] == '"' || text[i] == '\''))
      ok = false;
    cg_append(&d->form, text + i, j - i);
  }
  for (int64_t k = 0; k < d->n_seen; k++) d->renamed[d->seen[k]] = 0;
  d->n_seen = 0;
  return ok && !d->form.failed;
}

/* ---- The table of kept texts --------------------------------------------------- */

static uint64_t hash_of(const char *s, int64_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (int64_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static loom_status_t grow(cg_dedup_t *d) {
  kept_t *old = d->table;
  int64_t old_cap = d->cap;
  kept_t *table = core_malloc(sizeof *table * (size_t)old_cap * 2);
  if (!table) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  d->table = table;
  d->cap = old_cap * 2;
  for (int64_t i = 0; i < d->cap; i++) d->table[i].group = -1;
  for (int64_t i = 0; i < old_cap; i++) {
    if (old[i].group < 0) continue;
    int64_t at = (int64_t)(old[i].hash & (uint64_t)(d->cap - 1));
    while (d->table[at].group >= 0) at = (at + 1) & (d->cap - 1);
    d->table[at] = old[i];
  }
  core_free(old);
  return LOOM_OK;
}

loom_status_t cg_dedup_find(cg_dedup_t *d, const char *text, int64_t len, int gi,
                            int32_t *first) {
  *first = gi;
  if (!canonical(d, text, len, gi)) {
    if (d->form.failed) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
    return LOOM_OK;
  }
  uint64_t h = hash_of(d->form.s, d->form.len);
  int64_t at = (int64_t)(h & (uint64_t)(d->cap - 1));
  for (; d->table[at].group >= 0; at = (at + 1) & (d->cap - 1)) {
    const kept_t *k = &d->table[at];
    if (k->hash == h && k->len == d->form.len && !memcmp(d->forms.s + k->at, d->form.s, (size_t)k->len)) {
      *first = k->group;
      return LOOM_OK;
    }
  }
  d->table[at] = (kept_t){.hash = h, .group = gi, .at = d->forms.len, .len = d->form.len};
  cg_append(&d->forms, d->form.s, d->form.len);
  if (d->forms.failed) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a module");
  if (++d->n * 2 > d->cap) return grow(d);
  return LOOM_OK;
}
