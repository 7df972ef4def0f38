/* NumPy .npy files: the documented format (numpy/lib/format.py): magic
 * "\x93NUMPY", a version, a little-endian header length, a Python dict
 * literal {'descr', 'fortran_order', 'shape'} padded with spaces and a
 * newline to a multiple of 64 bytes, then the raw C-order data. Loom
 * hosts are little-endian, so data is copied as is. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/status.h"
#include "core/tensor.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* A sane header is a few hundred bytes; cap what a corrupt one can ask. */
#define NPY_MAX_HEADER (1 << 20)

/* The NumPy descr of each dtype Loom can store (bf16 has none). One-byte
 * types have no byte order, so '|' and '<' both name them. */
static const struct {
  const char *descr;
  loom_dtype_t dtype;
} npy_descrs[] = {
    {"<f4", LOOM_F32}, {"<f8", LOOM_F64}, {"<f2", LOOM_F16},
    {"|i1", LOOM_I8},  {"<i4", LOOM_I32}, {"<i8", LOOM_I64},
    {"|b1", LOOM_BOOL}, {"<i1", LOOM_I8}, {"<b1", LOOM_BOOL},
};
#define NPY_N_DESCRS (sizeof npy_descrs / sizeof npy_descrs[0])

/* Integer types Loom has no dtype for, read widened as the ONNX importer
 * holds them (an image of uint8 for a model's uint8 input): to i32, or to
 * i64 (uint64 by its bits). */
static const struct {
  const char *descr;
  int bytes, is_signed;
  loom_dtype_t dtype;
} npy_widened[] = {
    {"|u1", 1, 0, LOOM_I32}, {"<u1", 1, 0, LOOM_I32}, {"<i2", 2, 1, LOOM_I32},
    {"<u2", 2, 0, LOOM_I32}, {"<u4", 4, 0, LOOM_I64}, {"<u8", 8, 0, LOOM_I64},
};
#define NPY_N_WIDENED (sizeof npy_widened / sizeof npy_widened[0])

static const char *descr_of(loom_dtype_t dtype) {
  for (size_t i = 0; i < NPY_N_DESCRS; i++)
    if (npy_descrs[i].dtype == dtype) return npy_descrs[i].descr;
  return NULL;
}

/* ---- Header parsing ------------------------------------------------------ */

/* A cursor over the header text, which is nul-terminated. */
typedef struct npy_parse {
  const char *path;
  const char *p;
  char descr[32];
  int fortran;       /* -1: key absent */
  int rank;          /* -1: key absent */
  int64_t shape[LOOM_MAX_RANK];
} npy_parse_t;

static loom_status_t bad_header(const npy_parse_t *ps, const char *what) {
  return loom_fail(LOOM_ERR_FORMAT, "%s: malformed .npy header: %s", ps->path,
                   what);
}

static void skip_space(npy_parse_t *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
    ps->p++;
}

/* Consumes c (after spaces) or fails. */
static loom_status_t expect(npy_parse_t *ps, char c, const char *what) {
  skip_space(ps);
  if (*ps->p != c) return bad_header(ps, what);
  ps->p++;
  return LOOM_OK;
}

/* A quoted Python string without escapes into buf. */
static loom_status_t parse_string(npy_parse_t *ps, char *buf, size_t size) {
  skip_space(ps);
  char quote = *ps->p;
  if (quote != '\'' && quote != '"') return bad_header(ps, "expected a string");
  const char *start = ++ps->p;
  while (*ps->p && *ps->p != quote && *ps->p != '\\') ps->p++;
  if (*ps->p != quote) return bad_header(ps, "unterminated string");
  size_t len = (size_t)(ps->p - start);
  ps->p++;
  if (len >= size) return bad_header(ps, "string too long");
  memcpy(buf, start, len);
  buf[len] = '\0';
  return LOOM_OK;
}

static loom_status_t parse_bool(npy_parse_t *ps, int *out) {
  skip_space(ps);
  if (!strncmp(ps->p, "True", 4)) *out = 1;
  else if (!strncmp(ps->p, "False", 5)) *out = 0;
  else return bad_header(ps, "fortran_order is neither True nor False");
  ps->p += *out ? 4 : 5;
  return LOOM_OK;
}

/* A non-negative decimal dim (Python 2 files may suffix it with 'L'). */
static loom_status_t parse_dim(npy_parse_t *ps, int64_t *out) {
  skip_space(ps);
  if (*ps->p < '0' || *ps->p > '9')
    return bad_header(ps, "bad shape: a dim is not a non-negative integer");
  int64_t v = 0;
  for (; *ps->p >= '0' && *ps->p <= '9'; ps->p++) {
    if (v > (INT64_MAX - 9) / 10) return bad_header(ps, "bad shape: a dim is too large");
    v = v * 10 + (*ps->p - '0');
  }
  if (*ps->p == 'L') ps->p++;
  *out = v;
  return LOOM_OK;
}

/* A tuple of dims: "()", "(3,)", "(2, 3)", "(2, 3,)". A one-element tuple
 * needs its comma: "(3)" is an int in Python, not a shape. */
static loom_status_t parse_shape(npy_parse_t *ps) {
  LOOM_TRY(expect(ps, '(', "bad shape: expected a tuple"));
  int rank = 0;
  bool comma = false;
  for (;;) {
    skip_space(ps);
    if (*ps->p == ')') break;
    if (rank == LOOM_MAX_RANK)
      return loom_fail(LOOM_ERR_UNSUPPORTED,
                       "%s: .npy shape has more than %d dims (Loom's maximum rank)",
                       ps->path, LOOM_MAX_RANK);
    LOOM_TRY(parse_dim(ps, &ps->shape[rank++]));
    skip_space(ps);
    comma = *ps->p == ',';
    if (comma) ps->p++;
    else if (*ps->p != ')') return bad_header(ps, "bad shape: expected ',' or ')'");
  }
  ps->p++;
  if (rank == 1 && !comma) return bad_header(ps, "bad shape: '(n)' is not a tuple");
  ps->rank = rank;
  return LOOM_OK;
}

/* One "key: value" entry of the dict. */
static loom_status_t parse_entry(npy_parse_t *ps) {
  char key[32];
  LOOM_TRY(parse_string(ps, key, sizeof key));
  LOOM_TRY(expect(ps, ':', "expected ':' after a key"));
  if (!strcmp(key, "descr")) {
    if (ps->descr[0]) return bad_header(ps, "key 'descr' appears twice");
    skip_space(ps);
    if (*ps->p == '[')
      return loom_fail(LOOM_ERR_UNSUPPORTED,
                       "%s: structured .npy dtypes are not supported", ps->path);
    LOOM_TRY(parse_string(ps, ps->descr, sizeof ps->descr));
    if (!ps->descr[0]) return bad_header(ps, "empty descr");
    return LOOM_OK;
  }
  if (!strcmp(key, "fortran_order")) {
    if (ps->fortran >= 0) return bad_header(ps, "key 'fortran_order' appears twice");
    return parse_bool(ps, &ps->fortran);
  }
  if (!strcmp(key, "shape")) {
    if (ps->rank >= 0) return bad_header(ps, "key 'shape' appears twice");
    return parse_shape(ps);
  }
  return loom_fail(LOOM_ERR_FORMAT, "%s: malformed .npy header: unknown key '%s'",
                   ps->path, key);
}

/* The whole dict, with keys in any order and an optional trailing comma,
 * followed only by padding. */
static loom_status_t parse_header(npy_parse_t *ps) {
  LOOM_TRY(expect(ps, '{', "expected '{'"));
  for (;;) {
    skip_space(ps);
    if (*ps->p == '}') break;
    LOOM_TRY(parse_entry(ps));
    skip_space(ps);
    if (*ps->p == ',') ps->p++;
    else if (*ps->p != '}') return bad_header(ps, "expected ',' or '}'");
  }
  ps->p++;
  skip_space(ps);
  if (*ps->p) return bad_header(ps, "text after the dict");
  if (!ps->descr[0]) return bad_header(ps, "missing key 'descr'");
  if (ps->fortran < 0) return bad_header(ps, "missing key 'fortran_order'");
  if (ps->rank < 0) return bad_header(ps, "missing key 'shape'");
  return LOOM_OK;
}

/* The dtype of the file's elements; *widened the npy_widened entry that
 * reads them, or -1 (stored as they are). */
static loom_status_t dtype_of_descr(const npy_parse_t *ps, loom_dtype_t *out, int *widened) {
  *widened = -1;
  for (size_t i = 0; i < NPY_N_DESCRS; i++)
    if (!strcmp(npy_descrs[i].descr, ps->descr)) {
      *out = npy_descrs[i].dtype;
      return LOOM_OK;
    }
  for (size_t i = 0; i < NPY_N_WIDENED; i++)
    if (!strcmp(npy_widened[i].descr, ps->descr)) {
      *out = npy_widened[i].dtype;
      *widened = (int)i;
      return LOOM_OK;
    }
  return loom_fail(LOOM_ERR_UNSUPPORTED,
                   "%s: .npy dtype '%s' is not supported (Loom reads '<f4', "
                   "'<f8', '<f2', '|i1', '<i4', '<i8', '|b1', and '|u1', '<i2', "
                   "'<u2', '<u4', '<u8' widened to i32 or i64; little-endian)",
                   ps->path, ps->descr);
}

/* ---- Loading --------------------------------------------------------------- */

typedef struct npy_file {
  const char *path;
  FILE *f;
  int64_t size; /* bytes in the file */
} npy_file_t;

/* Reads exactly n bytes; a short read means the file ends too early. */
static loom_status_t read_exact(npy_file_t *nf, void *buf, size_t n,
                                const char *what) {
  if (n && fread(buf, 1, n, nf->f) != n) {
    if (ferror(nf->f))
      return loom_fail(LOOM_ERR_IO, "%s: reading the %s: %s", nf->path, what,
                       strerror(errno));
    return loom_fail(LOOM_ERR_FORMAT, "%s: truncated %s", nf->path, what);
  }
  return LOOM_OK;
}

static uint32_t le_u32(const unsigned char *b, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

/* Reads the magic, version and header length; leaves the file at the
 * header text. */
static loom_status_t read_preamble(npy_file_t *nf, uint32_t *header_len,
                                   int64_t *data_start) {
  unsigned char pre[NPY_MAGIC_LEN + 2 + 4];
  LOOM_TRY(read_exact(nf, pre, NPY_MAGIC_LEN + 2, "header"));
  if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return loom_fail(LOOM_ERR_FORMAT, "%s: bad magic: not a .npy file", nf->path);
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    return loom_fail(LOOM_ERR_UNSUPPORTED,
                     "%s: .npy format version %d.%d is not supported (1.0-3.0)",
                     nf->path, major, minor);
  int len_bytes = major == 1 ? 2 : 4;
  LOOM_TRY(read_exact(nf, pre + 8, (size_t)len_bytes, "header"));
  *header_len = le_u32(pre + 8, len_bytes);
  *data_start = 8 + len_bytes + (int64_t)*header_len;
  if (*data_start > nf->size)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: truncated header: header length %u goes beyond the "
                     "end of the file (%lld bytes)",
                     nf->path, *header_len, (long long)nf->size);
  if (*header_len > NPY_MAX_HEADER)
    return loom_fail(LOOM_ERR_FORMAT, "%s: header length %u is too large",
                     nf->path, *header_len);
  return LOOM_OK;
}

/* Reads and parses the header dict. */
static loom_status_t read_header(npy_file_t *nf, npy_parse_t *ps,
                                 int64_t *data_start) {
  uint32_t len = 0;
  LOOM_TRY(read_preamble(nf, &len, data_start));
  char *text = core_malloc((size_t)len + 1);
  if (!text) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for the header", nf->path);
  loom_status_t s = read_exact(nf, text, len, "header");
  if (s == LOOM_OK && memchr(text, '\0', len))
    s = bad_header(ps, "a nul byte in the header");
  if (s == LOOM_OK) {
    text[len] = '\0';
    ps->p = text;
    s = parse_header(ps);
  }
  core_free(text);
  return s;
}

/* Checks that the data after the header is exactly what the shape needs,
 * and that the shape has strides (its nonzero dims' bytes fit in int64,
 * also when a zero dim leaves it empty). */
static loom_status_t check_data_size(const npy_file_t *nf, const char *descr, size_t es,
                                     int rank, const int64_t *shape, int64_t have) {
  int64_t need = 0;
  if (!shape_size(rank, shape, es, NULL, &need)) {
    char sh[160], why[160];
    return loom_fail(LOOM_ERR_FORMAT, "%s: shape %s of '%s': %s", nf->path,
                     shape_str(rank, shape, sh, sizeof sh), descr,
                     shape_size_why(rank, shape, es, why, sizeof why));
  }
  if (need < have)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: %lld extra bytes after the data the shape needs",
                     nf->path, (long long)(have - need));
  if (need > have)
    return loom_fail(LOOM_ERR_FORMAT,
                     "%s: truncated data: the shape needs %lld bytes, the file "
                     "has %lld", nf->path, (long long)need, (long long)have);
  return LOOM_OK;
}

/* t's n elements from the file's narrower ones at raw (npy_widened[w]),
 * little-endian. */
static void widen(loom_tensor_t *t, const unsigned char *raw, int w) {
  int64_t n = loom_tensor_numel(t);
  int bytes = npy_widened[w].bytes;
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = 0;
    for (int b = bytes - 1; b >= 0; b--) v = v << 8 | raw[i * bytes + b];
    if (npy_widened[w].is_signed && bytes < 8 && (v >> (8 * bytes - 1)) & 1)
      v |= ~(uint64_t)0 << (8 * bytes); /* sign-extend */
    if (t->dtype == LOOM_I32) ((int32_t *)t->data)[i] = (int32_t)(int64_t)v;
    else ((int64_t *)t->data)[i] = (int64_t)v;
  }
}

/* NumPy bools are bytes; anything nonzero reads as true. */
static void normalize_bools(loom_tensor_t *t) {
  unsigned char *b = t->data;
  int64_t n = loom_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) b[i] = b[i] != 0;
}

static loom_status_t load_open(npy_file_t *nf, loom_tensor_t **out) {
  npy_parse_t ps = {.path = nf->path, .fortran = -1, .rank = -1};
  int64_t data_start = 0;
  LOOM_TRY(read_header(nf, &ps, &data_start));
  loom_dtype_t dtype = LOOM_F32;
  int widened;
  LOOM_TRY(dtype_of_descr(&ps, &dtype, &widened));
  if (ps.fortran)
    return loom_fail(LOOM_ERR_UNSUPPORTED,
                     "%s: fortran_order True is not supported (save C order)",
                     nf->path);
  size_t es = widened < 0 ? loom_dtype_size(dtype) : (size_t)npy_widened[widened].bytes;
  LOOM_TRY(check_data_size(nf, ps.descr, es, ps.rank, ps.shape, nf->size - data_start));
  loom_tensor_t *t;
  LOOM_TRY(tensor_new(dtype, ps.rank, ps.shape, &t));
  size_t bytes = (size_t)loom_tensor_numel(t) * es;
  unsigned char *raw = widened < 0 ? t->data : core_malloc(bytes ? bytes : 1);
  loom_status_t s = raw ? read_exact(nf, raw, bytes, "data")
                        : loom_fail(LOOM_ERR_NOMEM, "%s: out of memory for the data", nf->path);
  if (s == LOOM_OK && widened >= 0) widen(t, raw, widened);
  if (widened >= 0) core_free(raw);
  if (s != LOOM_OK) {
    loom_tensor_destroy(t);
    return s;
  }
  if (dtype == LOOM_BOOL) normalize_bools(t);
  *out = t;
  return LOOM_OK;
}

loom_status_t loom_tensor_load_npy(const char *path, loom_tensor_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_CHECK_ARG(path);
  /* O_NONBLOCK: opening a FIFO must not wait for a writer; the regular
   * file check below then refuses it. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return loom_fail(LOOM_ERR_IO, "%s: %s", path, strerror(errno));
  npy_file_t nf = {.path = path, .f = fdopen(fd, "rb")};
  if (!nf.f) {
    close(fd);
    return loom_fail(LOOM_ERR_IO, "%s: %s", path, strerror(errno));
  }
  struct stat st;
  loom_status_t s = LOOM_OK;
  if (fstat(fileno(nf.f), &st) != 0)
    s = loom_fail(LOOM_ERR_IO, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    s = loom_fail(LOOM_ERR_IO, "%s: not a regular file", path);
  else nf.size = st.st_size;
  if (s == LOOM_OK) s = load_open(&nf, out);
  fclose(nf.f);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}

/* ---- Saving ----------------------------------------------------------------- */

/* The header text with its padding and newline; returns its length. The
 * dict's form is the one NumPy writes. */
static size_t format_header(const char *descr, const loom_tensor_t *t,
                            size_t prefix, char *buf, size_t size) {
  int n = snprintf(buf, size, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   descr);
  for (int i = 0; i < t->rank; i++)
    n += snprintf(buf + n, size - (size_t)n, "%s%lld", i ? ", " : "",
                  (long long)t->shape[i]);
  n += snprintf(buf + n, size - (size_t)n, "%s), }", t->rank == 1 ? "," : "");
  size_t len = (size_t)n + 1; /* + the newline */
  size_t total = (prefix + len + 63) / 64 * 64;
  memset(buf + n, ' ', total - prefix - len);
  len = total - prefix;
  buf[len - 1] = '\n';
  return len;
}

/* Writes the preamble, header and data of t to fd. */
static loom_status_t write_npy(int fd, const char *path, const char *descr,
                               const loom_tensor_t *t) {
  /* At most ~250 bytes of dict plus 63 of padding at LOOM_MAX_RANK. */
  char header[1024];
  /* Version 1.0 holds headers up to 65535 bytes; 2.0 beyond. */
  size_t len = format_header(descr, t, 10, header, sizeof header);
  bool v2 = len > 65535;
  if (v2) len = format_header(descr, t, 12, header, sizeof header);
  unsigned char pre[12];
  memcpy(pre, NPY_MAGIC, NPY_MAGIC_LEN);
  pre[6] = v2 ? 2 : 1;
  pre[7] = 0;
  for (int i = 0; i < (v2 ? 4 : 2); i++) pre[8 + i] = (unsigned char)(len >> (8 * i));
  LOOM_TRY(core_write_all(fd, path, pre, v2 ? 12 : 10));
  LOOM_TRY(core_write_all(fd, path, header, len));
  return core_write_tensor(fd, path, t);
}

typedef struct npy_save {
  const char *descr;
  const loom_tensor_t *t;
} npy_save_t;

static loom_status_t fill_npy(int fd, const char *tmp, void *ctx) {
  const npy_save_t *n = ctx;
  return write_npy(fd, tmp, n->descr, n->t);
}

loom_status_t loom_tensor_save_npy(const loom_tensor_t *t, const char *path) {
  LOOM_CHECK_ARG(t);
  LOOM_CHECK_ARG(path);
  const char *descr = descr_of(t->dtype);
  if (!descr)
    return loom_fail(LOOM_ERR_UNSUPPORTED,
                     "%s: dtype %s has no NumPy .npy descr; cast it (to f32) "
                     "before saving", path, loom_dtype_name(t->dtype));
  npy_save_t n = {descr, t};
  loom_status_t s = core_file_replace(path, fill_npy, &n);
  if (s == LOOM_OK) loom_clear_error();
  return s;
}
