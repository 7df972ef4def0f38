/* Checkpoints in the safetensors format (huggingface/safetensors, the
 * "Format" section of its README): an unsigned 64-bit little-endian header
 * length N, N bytes of JSON mapping each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets relative to the end of the
 * header) plus an optional "__metadata__" map of strings, then the data.
 * The reader is a small strict JSON parser that knows only what this
 * header holds: objects, strings with escapes, non-negative integers and
 * arrays of them. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/sized.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/ir.h"
#include "loom/checkpoint.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c copies tensor bytes as they are: it needs a little-endian host"
#endif

/* The reference reader refuses headers over 100 MB; a corrupt length must
 * not make us allocate more than that. */
#define CK_MAX_HEADER ((uint64_t)100 << 20)
#define CK_METADATA "__metadata__"
/* The reference writer pads the header with spaces so that the data
 * starts 8-byte aligned. */
#define CK_ALIGN 8

static const struct {
  const char *name;
  loom_dtype_t dtype;
} ck_dtypes[] = {
    {"F32", LOOM_F32}, {"F64", LOOM_F64}, {"F16", LOOM_F16},
    {"BF16", LOOM_BF16}, {"I8", LOOM_I8}, {"I32", LOOM_I32},
    {"I64", LOOM_I64}, {"BOOL", LOOM_BOOL},
};
#define CK_N_DTYPES (sizeof ck_dtypes / sizeof ck_dtypes[0])

static const char *ck_dtype_name(loom_dtype_t d) {
  for (size_t i = 0; i < CK_N_DTYPES; i++)
    if (ck_dtypes[i].dtype == d) return ck_dtypes[i].name;
  return "?";
}

/* ---- The graph's parameters ----------------------------------------------- */

typedef struct ck_param {
  const char *given;     /* the value's name; NULL for none or "" */
  char gen[32];          /* "__param<k>", the name of one without */
  loom_tensor_t *t;      /* the graph's storage */
  loom_tensor_t *staged; /* load: the file's data, before it is committed */
  int64_t begin;         /* save: offset of the data */
} ck_param_t;

typedef struct ck_params {
  ck_param_t *p;
  int64_t n;
} ck_params_t;

/* The saved name. (Not a stored pointer: sorting moves gen.) */
static const char *pname(const ck_param_t *p) { return p->given ? p->given : p->gen; }

static int by_name(const void *a, const void *b) {
  return strcmp(pname(a), pname(b));
}

/* Larger elements first, so that every tensor's data starts aligned to its
 * element size; then by name, so that files are reproducible. */
static int by_alignment(const void *a, const void *b) {
  const ck_param_t *x = a, *y = b;
  size_t sx = loom_dtype_size(x->t->dtype), sy = loom_dtype_size(y->t->dtype);
  if (sx != sy) return sx > sy ? -1 : 1;
  return strcmp(pname(x), pname(y));
}

static void params_free(ck_params_t *ps) {
  for (int64_t i = 0; i < ps->n; i++) loom_tensor_destroy(ps->p[i].staged);
  core_free(ps->p);
  ps->p = NULL;
  ps->n = 0;
}

/* The parameters of g sorted by name, each with its saved name; fails
 * when two share a name or one takes the metadata key. */
static loom_status_t params_collect(const loom_graph_t *g, const char *path,
                                    ck_params_t *ps) {
  ps->p = core_calloc((size_t)(g->n_params ? g->n_params : 1), sizeof *ps->p);
  if (!ps->p) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for the parameter list", path);
  ps->n = g->n_params;
  for (int64_t k = 0; k < g->n_params; k++) {
    const ir_value_t *v = &g->values[g->params[k]];
    ck_param_t *p = &ps->p[k];
    snprintf(p->gen, sizeof p->gen, "__param%lld", (long long)k);
    p->given = v->name && v->name[0] ? v->name : NULL;
    p->t = v->data;
  }
  qsort(ps->p, (size_t)ps->n, sizeof *ps->p, by_name);
  for (int64_t k = 0; k < ps->n; k++) {
    const char *name = pname(&ps->p[k]);
    if (!strcmp(name, CK_METADATA))
      return loom_fail(LOOM_ERR_INVALID,
                       "%s: a parameter is named '%s', the key safetensors "
                       "keeps for metadata; rename it", path, CK_METADATA);
    if (k > 0 && !strcmp(pname(&ps->p[k - 1]), name))
      return loom_fail(LOOM_ERR_INVALID,
                       "%s: two parameters are named '%s'; checkpoint names "
                       "must be unique", path, name);
  }
  return LOOM_OK;
}

static int64_t tensor_bytes(const loom_tensor_t *t) {
  return loom_tensor_numel(t) * (int64_t)loom_dtype_size(t->dtype);
}

/* ---- Header text for saving ------------------------------------------------ */

/* A growing string; the first failed allocation sticks in status, so that
 * a run of appends needs one check at the end. */
typedef struct ck_buf {
  char *p;
  int64_t n, cap;
  loom_status_t status;
} ck_buf_t;

static void buf_put(ck_buf_t *b, const char *s, size_t n) {
  if (b->status != LOOM_OK) return;
  b->status = core_grow((void **)&b->p, &b->cap, b->n + (int64_t)n + 1, 1);
  if (b->status != LOOM_OK) return;
  memcpy(b->p + b->n, s, n);
  b->n += (int64_t)n;
  b->p[b->n] = '\0';
}

static void buf_puts(ck_buf_t *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_printf(ck_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void buf_printf(ck_buf_t *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  buf_put(b, tmp, (size_t)n);
}

/* A JSON string: quotes, backslashes and control bytes escaped; other
 * bytes (UTF-8) as they are. */
static void buf_json_string(ck_buf_t *b, const char *s) {
  buf_puts(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') buf_printf(b, "\\%c", c);
    else if (c < 0x20) buf_printf(b, "\\u%04x", c);
    else buf_put(b, s, 1);
  }
  buf_puts(b, "\"");
}

/* {"name":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},...}, compact
 * and keyed in the order the reference writer uses, padded with spaces to
 * a multiple of 8 bytes. Parameters are in data order. */
static loom_status_t header_text(ck_params_t *ps, const char *path,
                                 ck_buf_t *b) {
  int64_t offset = 0;
  buf_puts(b, "{");
  for (int64_t k = 0; k < ps->n; k++) {
    ck_param_t *p = &ps->p[k];
    buf_puts(b, k ? "," : "");
    buf_json_string(b, pname(p));
    buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", ck_dtype_name(p->t->dtype));
    for (int i = 0; i < p->t->rank; i++)
      buf_printf(b, "%s%lld", i ? "," : "", (long long)p->t->shape[i]);
    p->begin = offset;
    offset += tensor_bytes(p->t);
    buf_printf(b, "],\"data_offsets\":[%lld,%lld]}", (long long)p->begin,
               (long long)offset);
  }
  buf_puts(b, "}");
  while (b->status == LOOM_OK && b->n % CK_ALIGN) buf_puts(b, " ");
  if (b->status != LOOM_OK)
    return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for the header", path);
  return LOOM_OK;
}

/* ---- Saving ------------------------------------------------------------------ */

typedef struct ck_save {
  const ck_buf_t *header;
  const ck_params_t *params;
} ck_save_t;

/* The header's length, the header, then each tensor's bytes in order. */
static loom_status_t write_body(int fd, const char *path, void *ctx) {
  const ck_save_t *c = ctx;
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)c->header->n >> (8 * i));
  LOOM_TRY(core_write_all(fd, path, len, sizeof len));
  LOOM_TRY(core_write_all(fd, path, c->header->p, (size_t)c->header->n));
  for (int64_t k = 0; k < c->params->n; k++)
    LOOM_TRY(core_write_tensor(fd, path, c->params->p[k].t));
  return LOOM_OK;
}

static loom_status_t save_sorted(ck_params_t *ps, const char *path) {
  qsort(ps->p, (size_t)ps->n, sizeof *ps->p, by_alignment);
  ck_buf_t h = {0};
  loom_status_t s = header_text(ps, path, &h);
  ck_save_t c = {&h, ps};
  if (s == LOOM_OK) s = core_file_replace(path, write_body, &c);
  core_free(h.p);
  return s;
}

/* A graph holding shards of its state (ZeRO-1) has no whole state to
 * save or load alone. */
static loom_status_t check_whole(const loom_graph_t *g, const char *fn) {
  if (g->n_shards == 0) return LOOM_OK;
  return loom_fail(LOOM_ERR_INVALID, "%s: the graph's optimizer state is split across ranks "
                   "(loom_data_parallel_step with shard_optimizer_state); save and load it "
                   "whole with loom_comm_checkpoint_save / loom_comm_checkpoint_load on "
                   "every rank", fn);
}

loom_status_t loom_checkpoint_save(loom_graph_t *g, const char *path) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(path);
  LOOM_TRY(check_whole(g, __func__));
  ck_params_t ps = {0};
  loom_status_t s = params_collect(g, path, &ps);
  if (s == LOOM_OK) s = save_sorted(&ps, path);
  params_free(&ps);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

/* ---- The JSON reader -------------------------------------------------------- */

/* One tensor of the header. */
typedef struct ck_entry {
  char *name;
  loom_dtype_t dtype;
  int rank;
  int64_t shape[LOOM_MAX_RANK];
  int64_t begin, end;
  bool used; /* matched to a parameter */
} ck_entry_t;

/* A cursor over the header text, and the entries read so far. */
typedef struct ck_reader {
  const char *path;
  const char *text, *p, *end;
  ck_entry_t *e;
  int64_t n, cap;
} ck_reader_t;

static loom_status_t bad_json(const ck_reader_t *r, const char *what) {
  return loom_fail(LOOM_ERR_FORMAT,
                   "%s: malformed safetensors header at byte %lld: %s", r->path,
                   (long long)(r->p - r->text), what);
}

static void skip_space(ck_reader_t *r) {
  while (r->p < r->end &&
         (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    r->p++;
}

/* True (and consumes it) when the next token is c. */
static bool accept(ck_reader_t *r, char c) {
  skip_space(r);
  if (r->p < r->end && *r->p == c) {
    r->p++;
    return true;
  }
  return false;
}

static loom_status_t expect(ck_reader_t *r, char c, const char *what) {
  return accept(r, c) ? LOOM_OK : bad_json(r, what);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The four hex digits of a \u escape. */
static loom_status_t read_hex4(ck_reader_t *r, uint32_t *out) {
  if (r->end - r->p < 4) return bad_json(r, "truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(r->p[i]);
    if (d < 0) return bad_json(r, "bad hex digit in a \\u escape");
    v = v << 4 | (uint32_t)d;
  }
  r->p += 4;
  *out = v;
  return LOOM_OK;
}

/* A \u escape (a surrogate pair counts as one) as a code point. */
static loom_status_t read_unicode(ck_reader_t *r, uint32_t *cp) {
  LOOM_TRY(read_hex4(r, cp));
  if (*cp >= 0xDC00 && *cp <= 0xDFFF) return bad_json(r, "a lone low surrogate");
  if (*cp < 0xD800 || *cp > 0xDBFF) return LOOM_OK;
  uint32_t lo = 0;
  if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
    return bad_json(r, "a high surrogate without its low half");
  r->p += 2;
  LOOM_TRY(read_hex4(r, &lo));
  if (lo < 0xDC00 || lo > 0xDFFF)
    return bad_json(r, "a high surrogate without its low half");
  *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
  return LOOM_OK;
}

static char *put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) {
    *o++ = (char)cp;
  } else if (cp < 0x800) {
    *o++ = (char)(0xC0 | cp >> 6);
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = (char)(0xE0 | cp >> 12);
    *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *o++ = (char)(0xF0 | cp >> 18);
    *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
    *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  }
  return o;
}

static const char ck_escapes[] = "\"\"\\\\//b\bf\fn\nr\rt\t";

/* One escape sequence after its backslash, decoded at *o. */
static loom_status_t read_escape(ck_reader_t *r, char **o) {
  if (r->p >= r->end) return bad_json(r, "unterminated string");
  char c = *r->p++;
  if (c == 'u') {
    uint32_t cp = 0;
    LOOM_TRY(read_unicode(r, &cp));
    if (cp == 0) return bad_json(r, "a \\u0000 in a string");
    *o = put_utf8(*o, cp);
    return LOOM_OK;
  }
  for (const char *e = ck_escapes; *e; e += 2)
    if (e[0] == c) {
      *(*o)++ = e[1];
      return LOOM_OK;
    }
  r->p--;
  return bad_json(r, "unknown escape in a string");
}

/* Bytes from p to the string's closing quote (or the end of the text). */
static size_t raw_length(const ck_reader_t *r) {
  const char *q = r->p;
  while (q < r->end && *q != '"') q += *q == '\\' ? 2 : 1;
  return q < r->end ? (size_t)(q - r->p) : (size_t)(r->end - r->p);
}

/* A JSON string into a new nul-terminated buffer (escapes never make the
 * text longer, so the raw length bounds it). */
static loom_status_t read_string(ck_reader_t *r, char **out) {
  skip_space(r);
  if (r->p >= r->end || *r->p != '"') return bad_json(r, "expected a string");
  r->p++;
  char *s = core_malloc(raw_length(r) + 1), *o = s;
  if (!s) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for a name", r->path);
  loom_status_t st = LOOM_OK;
  for (;;) {
    if (r->p >= r->end) {
      st = bad_json(r, "unterminated string");
      break;
    }
    unsigned char c = (unsigned char)*r->p++;
    if (c == '"') break;
    if (c < 0x20) {
      r->p--;
      st = bad_json(r, "a control character in a string");
    } else if (c == '\\') {
      st = read_escape(r, &o);
    } else {
      *o++ = (char)c;
    }
    if (st != LOOM_OK) break;
  }
  *o = '\0';
  if (st != LOOM_OK) core_free(s);
  else *out = s;
  return st;
}

/* A non-negative JSON integer (no sign, fraction or exponent). */
static loom_status_t read_uint(ck_reader_t *r, const char *what, int64_t *out) {
  skip_space(r);
  const char *start = r->p;
  if (r->p < r->end && *r->p == '-')
    return bad_json(r, what);
  int64_t v = 0;
  while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
    if (v > (INT64_MAX - 9) / 10) return bad_json(r, "an integer too large");
    v = v * 10 + (*r->p++ - '0');
  }
  if (r->p == start) return bad_json(r, what);
  if (r->p - start > 1 && *start == '0') return bad_json(r, "an integer with a leading zero");
  if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E'))
    return bad_json(r, what);
  *out = v;
  return LOOM_OK;
}

/* [n, n, ...] of at most max non-negative integers. */
static loom_status_t read_uint_array(ck_reader_t *r, const char *what,
                                     int max, int64_t *v, int *n) {
  LOOM_TRY(expect(r, '[', what));
  *n = 0;
  if (accept(r, ']')) return LOOM_OK;
  do {
    if (*n == max) return bad_json(r, what);
    LOOM_TRY(read_uint(r, what, &v[(*n)++]));
  } while (accept(r, ','));
  return expect(r, ']', "expected ',' or ']'");
}

/* ---- The header's schema ------------------------------------------------------ */

static loom_status_t read_dtype(ck_reader_t *r, ck_entry_t *e) {
  char *name = NULL;
  const char *at = r->p;
  LOOM_TRY(read_string(r, &name));
  for (size_t i = 0; i < CK_N_DTYPES; i++)
    if (!strcmp(name, ck_dtypes[i].name)) {
      e->dtype = ck_dtypes[i].dtype;
      core_free(name);
      return LOOM_OK;
    }
  loom_status_t s = loom_fail(LOOM_ERR_FORMAT,
                              "%s: tensor '%s' at byte %lld: dtype '%s' is not "
                              "one Loom reads (F32 F64 F16 BF16 I8 I32 I64 BOOL)",
                              r->path, e->name, (long long)(at - r->text), name);
  core_free(name);
  return s;
}

/* Which fields of a tensor's object were seen. */
enum { SEEN_DTYPE = 1, SEEN_SHAPE = 2, SEEN_OFFSETS = 4, SEEN_ALL = 7 };

static loom_status_t read_field(ck_reader_t *r, ck_entry_t *e, int *seen) {
  char *key = NULL;
  LOOM_TRY(read_string(r, &key));
  int bit = !strcmp(key, "dtype") ? SEEN_DTYPE
            : !strcmp(key, "shape") ? SEEN_SHAPE
            : !strcmp(key, "data_offsets") ? SEEN_OFFSETS : 0;
  core_free(key);
  if (!bit) return bad_json(r, "a tensor has a key other than dtype, shape and data_offsets");
  if (*seen & bit) return bad_json(r, "a tensor has the same key twice");
  *seen |= bit;
  LOOM_TRY(expect(r, ':', "expected ':' after a key"));
  if (bit == SEEN_DTYPE) return read_dtype(r, e);
  if (bit == SEEN_SHAPE)
    return read_uint_array(r, "shape must be a list of at most 8 non-negative integers",
                           LOOM_MAX_RANK, e->shape, &e->rank);
  int64_t off[2];
  int n = 0;
  LOOM_TRY(read_uint_array(r, "data_offsets must be [begin, end]", 2, off, &n));
  if (n != 2) return bad_json(r, "data_offsets must be [begin, end]");
  e->begin = off[0];
  e->end = off[1];
  return LOOM_OK;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} */
static loom_status_t read_tensor(ck_reader_t *r, ck_entry_t *e) {
  LOOM_TRY(expect(r, '{', "a tensor's entry must be an object"));
  int seen = 0;
  if (!accept(r, '}')) {
    do {
      LOOM_TRY(read_field(r, e, &seen));
    } while (accept(r, ','));
    LOOM_TRY(expect(r, '}', "expected ',' or '}'"));
  }
  if (seen != SEEN_ALL)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: tensor '%s' lacks %s", r->path, e->name,
                     !(seen & SEEN_DTYPE) ? "its dtype"
                     : !(seen & SEEN_SHAPE) ? "its shape" : "its data_offsets");
  return LOOM_OK;
}

/* The metadata: a map of strings to strings, which Loom does not use. */
static loom_status_t read_metadata(ck_reader_t *r) {
  LOOM_TRY(expect(r, '{', "__metadata__ must be an object"));
  if (accept(r, '}')) return LOOM_OK;
  do {
    for (int i = 0; i < 2; i++) {
      char *s = NULL;
      LOOM_TRY(read_string(r, &s));
      core_free(s);
      if (i == 0) LOOM_TRY(expect(r, ':', "expected ':' after a key"));
    }
  } while (accept(r, ','));
  return expect(r, '}', "expected ',' or '}'");
}

/* One "name": value member of the top object. */
static loom_status_t read_member(ck_reader_t *r, bool *seen_metadata) {
  char *name = NULL;
  LOOM_TRY(read_string(r, &name));
  loom_status_t s = expect(r, ':', "expected ':' after a key");
  if (s == LOOM_OK && !strcmp(name, CK_METADATA)) {
    core_free(name);
    if (*seen_metadata) return bad_json(r, "__metadata__ appears twice");
    *seen_metadata = true;
    return read_metadata(r);
  }
  if (s == LOOM_OK) s = core_grow((void **)&r->e, &r->cap, r->n + 1, sizeof *r->e);
  if (s != LOOM_OK) {
    core_free(name);
    return s;
  }
  ck_entry_t *e = &r->e[r->n++];
  memset(e, 0, sizeof *e);
  e->name = name;
  return read_tensor(r, e);
}

/* The whole header: one object, then only padding. */
static loom_status_t read_header(ck_reader_t *r) {
  LOOM_TRY(expect(r, '{', "the header must be a JSON object"));
  bool seen_metadata = false;
  if (!accept(r, '}')) {
    do {
      LOOM_TRY(read_member(r, &seen_metadata));
    } while (accept(r, ','));
    LOOM_TRY(expect(r, '}', "expected ',' or '}'"));
  }
  skip_space(r);
  if (r->p != r->end) return bad_json(r, "text after the header's object");
  return LOOM_OK;
}

static void reader_free(ck_reader_t *r) {
  for (int64_t i = 0; i < r->n; i++) core_free(r->e[i].name);
  core_free(r->e);
}

/* ---- Checking the layout ------------------------------------------------------ */

static int by_offsets(const void *a, const void *b) {
  const ck_entry_t *x = *(const ck_entry_t *const *)a;
  const ck_entry_t *y = *(const ck_entry_t *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

static loom_status_t check_sizes(const ck_reader_t *r) {
  for (int64_t i = 0; i < r->n; i++) {
    const ck_entry_t *e = &r->e[i];
    char sh[160], why[160];
    int64_t need = 0;
    size_t es = loom_dtype_size(e->dtype);
    /* Also when a zero dim empties it: a shape must have strides. */
    if (!shape_size(e->rank, e->shape, es, NULL, &need))
      return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s': shape %s of %s: %s", r->path,
                       e->name, shape_str(e->rank, e->shape, sh, sizeof sh),
                       ck_dtype_name(e->dtype), shape_size_why(e->rank, e->shape, es, why,
                                                               sizeof why));
    if (e->end < e->begin || need != e->end - e->begin)
      return loom_fail(LOOM_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%lld, %lld] do not hold "
                       "the %s %s it declares", r->path, e->name,
                       (long long)e->begin, (long long)e->end,
                       ck_dtype_name(e->dtype), shape_str(e->rank, e->shape, sh, sizeof sh));
  }
  return LOOM_OK;
}

/* The tensors must tile the data exactly: from 0, each starting where the
 * one before ends, the last ending at the end of the file. */
static loom_status_t check_tiling(const ck_reader_t *r, ck_entry_t **order,
                                  int64_t data_bytes) {
  for (int64_t i = 0; i < r->n; i++) order[i] = &r->e[i];
  qsort(order, (size_t)r->n, sizeof *order, by_offsets);
  int64_t at = 0;
  for (int64_t i = 0; i < r->n; i++) {
    const ck_entry_t *e = order[i];
    if (e->begin < at)
      return loom_fail(LOOM_ERR_FORMAT,
                       "%s: tensor '%s' (bytes %lld to %lld) overlaps tensor "
                       "'%s' (ending at %lld)", r->path, e->name,
                       (long long)e->begin, (long long)e->end, order[i - 1]->name,
                       (long long)at);
    if (e->begin > at)
      return loom_fail(LOOM_ERR_FORMAT,
                       "%s: a gap in the data: bytes %lld to %lld belong to no "
                       "tensor", r->path, (long long)at, (long long)e->begin);
    at = e->end;
  }
  if (at > data_bytes)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: truncated: the tensors need %lld bytes of data, the "
                     "file has %lld", r->path, (long long)at, (long long)data_bytes);
  if (at < data_bytes)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: %lld bytes after the end of the last tensor",
                     r->path, (long long)(data_bytes - at));
  return LOOM_OK;
}

static loom_status_t check_layout(const ck_reader_t *r, int64_t data_bytes) {
  LOOM_TRY(check_sizes(r));
  ck_entry_t **order = core_malloc(sizeof *order * (size_t)(r->n ? r->n : 1));
  if (!order) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", r->path);
  loom_status_t s = check_tiling(r, order, data_bytes);
  core_free(order);
  return s;
}

static int entry_by_name(const void *a, const void *b) {
  return strcmp(((const ck_entry_t *)a)->name, ((const ck_entry_t *)b)->name);
}

/* Sorts the entries by name, for lookups, and refuses a name twice. */
static loom_status_t index_names(ck_reader_t *r) {
  if (r->n > 1) qsort(r->e, (size_t)r->n, sizeof *r->e, entry_by_name);
  for (int64_t i = 1; i < r->n; i++)
    if (!strcmp(r->e[i - 1].name, r->e[i].name))
      return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' appears twice in the header",
                       r->path, r->e[i].name);
  return LOOM_OK;
}

/* ---- Loading ----------------------------------------------------------------- */

typedef struct ck_file {
  const char *path;
  int fd;
  int64_t size;
  int64_t data_start; /* 8 + header length */
} ck_file_t;

/* Exactly n bytes at offset; a short read means the file shrank. */
static loom_status_t read_at(const ck_file_t *f, void *buf, size_t n,
                             int64_t offset) {
  char *p = buf;
  while (n > 0) {
    ssize_t got = pread(f->fd, p, n, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return loom_fail(LOOM_ERR_IO, "%s: read: %s", f->path, strerror(errno));
    if (got == 0) return loom_fail(LOOM_ERR_FORMAT, "%s: truncated file", f->path);
    p += got;
    n -= (size_t)got;
    offset += got;
  }
  return LOOM_OK;
}

/* Reads the header length and checks it against the file and the cap. */
static loom_status_t read_length(ck_file_t *f, uint64_t *len) {
  if (f->size < 8)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: truncated: %lld bytes, fewer than the 8 of the "
                     "header length", f->path, (long long)f->size);
  unsigned char b[8];
  LOOM_TRY(read_at(f, b, sizeof b, 0));
  *len = 0;
  for (int i = 7; i >= 0; i--) *len = *len << 8 | b[i];
  if (*len > CK_MAX_HEADER)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: header length %llu is too large (the limit is %llu): "
                     "not a safetensors file, or a corrupt one", f->path,
                     (unsigned long long)*len, (unsigned long long)CK_MAX_HEADER);
  if (*len > (uint64_t)(f->size - 8))
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: truncated: the header length is %llu bytes, the "
                     "file has %lld after it", f->path, (unsigned long long)*len,
                     (long long)(f->size - 8));
  if (*len < 2) return loom_fail(LOOM_ERR_FORMAT, "%s: header of %llu bytes is too short",
                                 f->path, (unsigned long long)*len);
  f->data_start = 8 + (int64_t)*len;
  return LOOM_OK;
}

/* Reads and parses the header, and checks the data's layout. */
static loom_status_t read_entries(ck_file_t *f, ck_reader_t *r) {
  uint64_t len = 0;
  LOOM_TRY(read_length(f, &len));
  char *text = core_malloc((size_t)len + 1);
  if (!text) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for the header", f->path);
  loom_status_t s = read_at(f, text, (size_t)len, 8);
  if (s == LOOM_OK) {
    text[len] = '\0';
    r->text = r->p = text;
    r->end = text + len;
    s = read_header(r);
  }
  if (s == LOOM_OK) s = check_layout(r, f->size - f->data_start);
  if (s == LOOM_OK) s = index_names(r);
  core_free(text);
  r->text = r->p = r->end = NULL;
  return s;
}

/* Pairs a parameter with its entry, checking dtype and shape. */
static loom_status_t match_param(const ck_file_t *f, ck_reader_t *r,
                                 ck_param_t *p, const loom_checkpoint_options_t *o,
                                 ck_entry_t **out) {
  const loom_tensor_t *t = p->t;
  ck_entry_t key = {.name = (char *)pname(p)};
  ck_entry_t *e = r->n ? bsearch(&key, r->e, (size_t)r->n, sizeof *r->e, entry_by_name) : NULL;
  char want[160], got[160];
  shape_str(t->rank, t->shape, want, sizeof want);
  *out = e;
  if (!e) {
    if (o->allow_missing) return LOOM_OK;
    return loom_fail(LOOM_ERR_INVALID,
                     "%s: parameter '%s' (%s %s) is not in the checkpoint",
                     f->path, pname(p), loom_dtype_name(t->dtype), want);
  }
  e->used = true;
  shape_str(e->rank, e->shape, got, sizeof got);
  if (e->dtype != t->dtype)
    return loom_fail(LOOM_ERR_DTYPE,
                     "%s: parameter '%s': the checkpoint holds %s %s, the graph "
                     "declares %s %s", f->path, pname(p), loom_dtype_name(e->dtype),
                     got, loom_dtype_name(t->dtype), want);
  if (e->rank != t->rank ||
      memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)t->rank) != 0)
    return loom_fail(LOOM_ERR_SHAPE,
                     "%s: parameter '%s': the checkpoint holds %s %s, the graph "
                     "declares %s %s", f->path, pname(p), loom_dtype_name(e->dtype),
                     got, loom_dtype_name(t->dtype), want);
  return LOOM_OK;
}

/* Reads an entry's data into a new tensor. */
static loom_status_t stage(const ck_file_t *f, const ck_entry_t *e,
                           loom_tensor_t **out) {
  loom_tensor_t *t;
  LOOM_TRY(tensor_new(e->dtype, e->rank, e->shape, &t));
  loom_status_t s = read_at(f, t->data, (size_t)(e->end - e->begin),
                            f->data_start + e->begin);
  if (s != LOOM_OK) {
    loom_tensor_destroy(t);
    return s;
  }
  /* A bool is a byte; anything nonzero reads as true, as in NumPy. */
  if (e->dtype == LOOM_BOOL)
    for (int64_t i = 0; i < e->end - e->begin; i++)
      ((unsigned char *)t->data)[i] = ((unsigned char *)t->data)[i] != 0;
  *out = t;
  return LOOM_OK;
}

static loom_status_t stage_all(const ck_file_t *f, ck_reader_t *r,
                               ck_params_t *ps, const loom_checkpoint_options_t *o) {
  for (int64_t k = 0; k < ps->n; k++) {
    ck_entry_t *e = NULL;
    LOOM_TRY(match_param(f, r, &ps->p[k], o, &e));
    if (e) LOOM_TRY(stage(f, e, &ps->p[k].staged));
  }
  if (o->allow_unexpected) return LOOM_OK;
  for (int64_t i = 0; i < r->n; i++)
    if (!r->e[i].used)
      return loom_fail(LOOM_ERR_INVALID,
                       "%s: tensor '%s' of the checkpoint is not a parameter of "
                       "the graph", f->path, r->e[i].name);
  return LOOM_OK;
}

/* Everything is read and checked; the staged tensors have the parameters'
 * dtypes and shapes, so no write can fail half-way through. */
static void commit(ck_params_t *ps) {
  for (int64_t k = 0; k < ps->n; k++) {
    const loom_tensor_t *src = ps->p[k].staged;
    if (src) (void)loom_tensor_write(ps->p[k].t, src->data, (size_t)tensor_bytes(src));
  }
}

loom_status_t loom_checkpoint_options_init_sized(loom_checkpoint_options_t *o,
                                                 size_t size) {
  loom_checkpoint_options_t strict = {.size = sizeof strict};
  return core_sized_init(__func__, "loom_checkpoint_options_t", o, size, &strict,
                         sizeof strict);
}

static loom_status_t load_open(loom_graph_t *g, ck_file_t *f,
                               const loom_checkpoint_options_t *o) {
  ck_reader_t r = {.path = f->path};
  ck_params_t ps = {0};
  loom_status_t s = read_entries(f, &r);
  if (s == LOOM_OK) s = params_collect(g, f->path, &ps);
  if (s == LOOM_OK) s = stage_all(f, &r, &ps, o);
  if (s == LOOM_OK) commit(&ps);
  params_free(&ps);
  reader_free(&r);
  return s;
}

loom_status_t loom_checkpoint_load_ex(loom_graph_t *g, const char *path,
                                      const loom_checkpoint_options_t *o) {
  LOOM_CHECK_ARG(g);
  LOOM_CHECK_ARG(path);
  LOOM_TRY(check_whole(g, "loom_checkpoint_load"));
  loom_checkpoint_options_t opts;
  loom_checkpoint_options_init(&opts);
  if (o) LOOM_TRY(core_sized_read(__func__, "loom_checkpoint_options_t", &opts, o,
                                  sizeof opts));
  o = &opts;
  /* O_NONBLOCK: opening a FIFO must not wait for a writer; the regular
   * file check below then refuses it. */
  ck_file_t f = {.path = path, .fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return loom_fail(LOOM_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat st;
  loom_status_t s = LOOM_OK;
  if (fstat(f.fd, &st) != 0) s = loom_fail(LOOM_ERR_IO, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode)) s = loom_fail(LOOM_ERR_IO, "%s: not a regular file", path);
  else f.size = st.st_size;
  if (s == LOOM_OK) s = load_open(g, &f, o);
  close(f.fd);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

loom_status_t loom_checkpoint_load(loom_graph_t *g, const char *path) {
  return loom_checkpoint_load_ex(g, path, NULL);
}
