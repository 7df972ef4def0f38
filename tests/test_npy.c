/* .npy files: round trips, files laid out byte by byte as the NumPy
 * format document describes, malformed files, fuzzed files, atomic
 * saves, and (when python3 has numpy) a cross-check with NumPy itself. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static char dir[64];

/* dir/name in buf. */
static const char *path_in(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/%s", dir, name);
  return buf;
}

/* How many temporaries a save of dir/name by process pid left beside it
 * ("name.tmp.PID.N"), and the first one's path in `first`. */
static int temporaries_of(const char *name, long pid, char *first, size_t size) {
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", name, pid);
  return test_files_with_prefix(dir, prefix, first, size);
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    test_fail(__FILE__, __LINE__, "cannot write %s", path);
    return;
  }
  fwrite(bytes, 1, n, f);
  fclose(f);
}

/* Reads a whole file into a malloc'd buffer; its size in *n. */
static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)size + 1);
  *n = fread(b, 1, (size_t)size, f);
  fclose(f);
  return b;
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* An .npy image as the format document lays it out: magic, version,
 * little-endian header length (2 bytes in 1.0, 4 in 2.0 and 3.0), the dict
 * padded with spaces and a newline to a multiple of 64, then data. */
static unsigned char *npy_image(int major, const char *dict, const void *data,
                                size_t data_bytes, size_t *n) {
  size_t prefix = major == 1 ? 10 : 12;
  size_t len = strlen(dict) + 1;
  size_t total = (prefix + len + 63) / 64 * 64;
  size_t header = total - prefix;
  unsigned char *b = calloc(1, total + data_bytes + 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  b[7] = 0;
  for (size_t i = 0; i < prefix - 8; i++) b[8 + i] = (unsigned char)(header >> (8 * i));
  memset(b + prefix, ' ', header);
  memcpy(b + prefix, dict, strlen(dict));
  b[total - 1] = '\n';
  if (data_bytes) memcpy(b + total, data, data_bytes);
  *n = total + data_bytes;
  return b;
}

/* Writes an image to dir/fixture.npy and loads it. */
static loom_status_t load_image(const unsigned char *b, size_t n,
                                loom_tensor_t **out) {
  char p[128];
  path_in(p, sizeof p, "fixture.npy");
  write_bytes(p, b, n);
  return loom_tensor_load_npy(p, out);
}

static loom_status_t load_dict(int major, const char *dict, const void *data,
                               size_t data_bytes, loom_tensor_t **out) {
  size_t n;
  unsigned char *b = npy_image(major, dict, data, data_bytes, &n);
  loom_status_t s = load_image(b, n, out);
  free(b);
  return s;
}

static const float arange6[6] = {0, 1, 2, 3, 4, 5};
static const char *arange6_dict =
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

/* Whether a and b have the same dtype, shape and bytes. */
static bool same_tensor(const loom_tensor_t *a, const loom_tensor_t *b) {
  if (!a || !b || loom_tensor_dtype(a) != loom_tensor_dtype(b) ||
      loom_tensor_rank(a) != loom_tensor_rank(b))
    return false;
  for (int i = 0; i < loom_tensor_rank(a); i++)
    if (loom_tensor_dim(a, i) != loom_tensor_dim(b, i)) return false;
  size_t n = (size_t)loom_tensor_numel(a) * loom_dtype_size(loom_tensor_dtype(a));
  unsigned char *x = malloc(n + 1), *y = malloc(n + 1);
  loom_tensor_read(a, x, n);
  loom_tensor_read(b, y, n);
  bool same = memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return same;
}

/* ---- Tests ----------------------------------------------------------------- */

static void round_trip_every_dtype_and_rank(void) {
  static const loom_dtype_t dtypes[] = {LOOM_F32, LOOM_F64, LOOM_F16, LOOM_I8,
                                        LOOM_I32, LOOM_I64, LOOM_BOOL};
  static const int64_t dims[] = {2, 3, 1, 4};
  char p[128];
  path_in(p, sizeof p, "rt.npy");
  test_seed(7);
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (int rank = 0; rank <= 4; rank++) {
      loom_tensor_t *t = test_rand_tensor(dtypes[d], rank, dims, -100, 100);
      loom_tensor_t *back = NULL;
      CHECK_OK(loom_tensor_save_npy(t, p));
      CHECK_OK(loom_tensor_load_npy(p, &back));
      CHECK(same_tensor(t, back));
      size_t n;
      unsigned char *b = read_bytes(p, &n);
      /* Header padded to 64 bytes, version 1.0. */
      CHECK(b && b[6] == 1 && b[7] == 0 && (10 + (b[8] | b[9] << 8)) % 64 == 0);
      free(b);
      loom_tensor_destroy(t);
      loom_tensor_destroy(back);
    }
}

static void round_trip_empty_dim(void) {
  int64_t shape[] = {3, 0, 2};
  loom_tensor_t *t, *back = NULL;
  char p[128];
  CHECK_OK(loom_tensor_create(LOOM_I32, 3, shape, &t));
  CHECK_OK(loom_tensor_save_npy(t, path_in(p, sizeof p, "empty.npy")));
  CHECK_OK(loom_tensor_load_npy(p, &back));
  CHECK(same_tensor(t, back));
  loom_tensor_destroy(t);
  loom_tensor_destroy(back);
}

/* Loom writes exactly the bytes NumPy writes for
 * np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)). */
static void save_matches_numpy_bytes(void) {
  size_t n_want, n_got;
  unsigned char *want = npy_image(1, arange6_dict, arange6, sizeof arange6, &n_want);
  CHECK(n_want == 128 + 24);
  int64_t shape[] = {2, 3};
  loom_tensor_t *t;
  CHECK_OK(loom_tensor_from_data(LOOM_F32, 2, shape, arange6, sizeof arange6, &t));
  char p[128];
  CHECK_OK(loom_tensor_save_npy(t, path_in(p, sizeof p, "arange.npy")));
  unsigned char *got = read_bytes(p, &n_got);
  CHECK(got && n_got == n_want && memcmp(got, want, n_want) == 0);
  free(want);
  free(got);
  loom_tensor_destroy(t);
}

static void load_numpy_layouts(void) {
  loom_tensor_t *t = NULL;
  double want6[] = {0, 1, 2, 3, 4, 5};
  for (int major = 1; major <= 3; major++) {
    CHECK_OK(load_dict(major, arange6_dict, arange6, sizeof arange6, &t));
    CHECK(loom_tensor_dtype(t) == LOOM_F32 && loom_tensor_rank(t) == 2 &&
          loom_tensor_dim(t, 0) == 2 && loom_tensor_dim(t, 1) == 3);
    CHECK_TENSOR(t, want6, 6, 0, 0);
    loom_tensor_destroy(t);
    t = NULL;
  }
  /* Keys in another order, double quotes, odd spacing, no trailing comma. */
  int64_t i8[3] = {-5, 0, 1LL << 40};
  CHECK_OK(load_dict(1, "{ \"shape\" :(3 ,) ,\"descr\":\"<i8\",'fortran_order':False}",
                     i8, sizeof i8, &t));
  double want_i8[] = {-5, 0, (double)(1LL << 40)};
  CHECK(loom_tensor_dtype(t) == LOOM_I64 && loom_tensor_rank(t) == 1);
  CHECK_TENSOR(t, want_i8, 3, 0, 0);
  loom_tensor_destroy(t);
  /* A scalar. */
  double pi = 3.25;
  CHECK_OK(load_dict(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                     &pi, 8, &t));
  CHECK(loom_tensor_rank(t) == 0 && test_get(t, 0) == 3.25);
  loom_tensor_destroy(t);
  /* Bools, '|i1' and '<f2' (1.5 is 0x3e00 in half precision). */
  unsigned char bools[4] = {0, 1, 1, 0};
  CHECK_OK(load_dict(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }",
                     bools, 4, &t));
  double want_b[] = {0, 1, 1, 0};
  CHECK(loom_tensor_dtype(t) == LOOM_BOOL);
  CHECK_TENSOR(t, want_b, 4, 0, 0);
  loom_tensor_destroy(t);
  signed char bytes[2] = {-128, 127};
  CHECK_OK(load_dict(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (2,), }",
                     bytes, 2, &t));
  double want_i1[] = {-128, 127};
  CHECK(loom_tensor_dtype(t) == LOOM_I8);
  CHECK_TENSOR(t, want_i1, 2, 0, 0);
  loom_tensor_destroy(t);
  unsigned char half[2] = {0x00, 0x3e};
  CHECK_OK(load_dict(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }",
                     half, 2, &t));
  CHECK(loom_tensor_dtype(t) == LOOM_F16 && test_get(t, 0) == 1.5);
  loom_tensor_destroy(t);
  /* Integer types without a dtype of their own, widened: uint8, int16
   * (sign-extended) and uint16 to i32, uint32 to i64, uint64 by its bits. */
  unsigned char u8[3] = {0, 200, 255};
  CHECK_OK(load_dict(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", u8, 3, &t));
  double want_u8[] = {0, 200, 255};
  CHECK(loom_tensor_dtype(t) == LOOM_I32 && loom_tensor_dim(t, 0) == 3);
  CHECK_TENSOR(t, want_u8, 3, 0, 0);
  loom_tensor_destroy(t);
  unsigned char i16[4] = {0x00, 0x80, 0xff, 0x7f}; /* -32768, 32767 */
  CHECK_OK(load_dict(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", i16, 4, &t));
  double want_i16[] = {-32768, 32767};
  CHECK(loom_tensor_dtype(t) == LOOM_I32);
  CHECK_TENSOR(t, want_i16, 2, 0, 0);
  loom_tensor_destroy(t);
  CHECK_OK(load_dict(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", i16, 4, &t));
  double want_u16[] = {32768, 32767};
  CHECK(loom_tensor_dtype(t) == LOOM_I32);
  CHECK_TENSOR(t, want_u16, 2, 0, 0);
  loom_tensor_destroy(t);
  unsigned char u32[4] = {0xff, 0xff, 0xff, 0xff};
  CHECK_OK(load_dict(1, "{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }", u32, 4, &t));
  CHECK(loom_tensor_dtype(t) == LOOM_I64 && test_get(t, 0) == 4294967295.0);
  loom_tensor_destroy(t);
  unsigned char u64[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  CHECK_OK(load_dict(1, "{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }", u64, 8, &t));
  CHECK(loom_tensor_dtype(t) == LOOM_I64 && test_get(t, 0) == -1.0);
  loom_tensor_destroy(t);
}

/* Each malformed or unsupported header fails with its status and a word
 * of its message. */
static void malformed_headers(void) {
  static const struct {
    const char *dict;
    loom_status_t status;
    const char *word;
  } cases[] = {
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", LOOM_ERR_UNSUPPORTED, ">f4"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", LOOM_ERR_UNSUPPORTED, "<c8"},
      {"{'descr': '>u2', 'fortran_order': False, 'shape': (12,), }", LOOM_ERR_UNSUPPORTED, ">u2"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (25,), }", LOOM_ERR_FORMAT, "truncated data"},
      {"{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", LOOM_ERR_FORMAT, "extra bytes"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", LOOM_ERR_UNSUPPORTED, "fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 6), }", LOOM_ERR_UNSUPPORTED, "dims"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", LOOM_ERR_UNSUPPORTED, "structured"},
      {"{'fortran_order': False, 'shape': (6,), }", LOOM_ERR_FORMAT, "missing key 'descr'"},
      {"{'descr': '<f4', 'shape': (6,), }", LOOM_ERR_FORMAT, "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, }", LOOM_ERR_FORMAT, "missing key 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", LOOM_ERR_FORMAT, "bad shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", LOOM_ERR_FORMAT, "bad shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", LOOM_ERR_FORMAT, "bad shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': 6, }", LOOM_ERR_FORMAT, "bad shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", LOOM_ERR_FORMAT, "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", LOOM_ERR_FORMAT, "unknown key"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", LOOM_ERR_FORMAT, "twice"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", LOOM_ERR_FORMAT, "fortran_order"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (6,), }", LOOM_ERR_FORMAT, "malformed"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x", LOOM_ERR_FORMAT, "after the dict"},
      {"['descr', '<f4']", LOOM_ERR_FORMAT, "expected '{'"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (6,)}", LOOM_ERR_FORMAT, "expected ','"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", LOOM_ERR_FORMAT, "extra bytes"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }", LOOM_ERR_FORMAT, "truncated data"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, 4000000000, 4000000000), }", LOOM_ERR_FORMAT, "more bytes than int64"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loom_tensor_t *t = (loom_tensor_t *)&t; /* must be reset to null */
    CHECK_ERR(load_dict(1, cases[i].dict, arange6, sizeof arange6, &t),
              cases[i].status, cases[i].word);
    CHECK(t == NULL);
    if (test_failures) fprintf(stderr, "  (case %zu: %s)\n", i, cases[i].dict);
    if (test_failures) break;
  }
}

static void malformed_preambles(void) {
  size_t n;
  unsigned char *b = npy_image(1, arange6_dict, arange6, sizeof arange6, &n);
  loom_tensor_t *t;
  char p[128];
  path_in(p, sizeof p, "fixture.npy");
  b[1] = 'L';
  CHECK_ERR(load_image(b, n, &t), LOOM_ERR_FORMAT, "bad magic");
  CHECK_ERR(load_image(b, n, &t), LOOM_ERR_FORMAT, p);
  b[1] = 'N';
  b[6] = 4;
  CHECK_ERR(load_image(b, n, &t), LOOM_ERR_UNSUPPORTED, "version 4.0");
  b[6] = 1;
  b[9] = 0x10; /* header length 0x1076: beyond the file */
  CHECK_ERR(load_image(b, n, &t), LOOM_ERR_FORMAT, "beyond the end");
  b[9] = 0;
  CHECK_ERR(load_image(b, 9, &t), LOOM_ERR_FORMAT, "truncated header");
  b[20] = '\0';
  CHECK_ERR(load_image(b, n, &t), LOOM_ERR_FORMAT, "nul");
  free(b);
  CHECK_ERR(loom_tensor_load_npy(path_in(p, sizeof p, "missing.npy"), &t),
            LOOM_ERR_IO, "missing.npy");
  CHECK_ERR(loom_tensor_load_npy(p, &t), LOOM_ERR_IO, "No such file");
  CHECK_ERR(loom_tensor_load_npy(dir, &t), LOOM_ERR_IO, "regular file");
  /* A FIFO with no writer: refused at once, not waited on. */
  CHECK(mkfifo(path_in(p, sizeof p, "fifo.npy"), 0600) == 0);
  CHECK_ERR(loom_tensor_load_npy(p, &t), LOOM_ERR_IO, "regular file");
  unlink(p);
  CHECK_ERR(loom_tensor_load_npy(NULL, &t), LOOM_ERR_INVALID, "path");
  CHECK_ERR(loom_tensor_load_npy(p, NULL), LOOM_ERR_INVALID, "out");
}

/* Every truncation fails; every header byte flip either loads or fails
 * cleanly (ASan watches for the rest). */
static void fuzz_truncations_and_flips(void) {
  size_t n;
  unsigned char *b = npy_image(1, arange6_dict, arange6, sizeof arange6, &n);
  loom_tensor_t *t = NULL;
  int truncation_fails = 0;
  for (size_t len = 0; len < n; len++) {
    loom_status_t s = load_image(b, len, &t);
    truncation_fails += s == LOOM_ERR_FORMAT && t == NULL;
    loom_tensor_destroy(t);
  }
  CHECK(truncation_fails == (int)n);
  static const unsigned char flips[] = {0x00, 0xff, ' ', '(', ')', ',', '\'',
                                        '9', '{', '}', ':', '\n', 0x80};
  int loaded = 0, failed = 0;
  for (size_t i = 0; i < 128; i++)
    for (size_t k = 0; k < sizeof flips; k++) {
      unsigned char old = b[i];
      b[i] = flips[k];
      t = NULL;
      loom_status_t s = load_image(b, n, &t);
      if (s == LOOM_OK) loaded += t != NULL;
      else failed += t == NULL && s != LOOM_ERR_NOMEM && loom_last_error()[0];
      loom_tensor_destroy(t);
      b[i] = old;
    }
  CHECK(loaded + failed == 128 * (int)sizeof flips);
  CHECK(loaded > 0 && failed > 0);
  free(b);
}

static void save_errors_leave_no_file(void) {
  int64_t shape[] = {2};
  loom_tensor_t *t;
  CHECK_OK(loom_tensor_create(LOOM_F32, 1, shape, &t));
  char p[128];
  CHECK_ERR(loom_tensor_save_npy(t, path_in(p, sizeof p, "nodir/x.npy")),
            LOOM_ERR_IO, "nodir");
  CHECK(!file_exists(p));
  /* The rename over a directory fails after the temporary is written. */
  path_in(p, sizeof p, "adir");
  CHECK(mkdir(p, 0755) == 0);
  CHECK_ERR(loom_tensor_save_npy(t, p), LOOM_ERR_IO, "rename");
  CHECK(temporaries_of("adir", (long)getpid(), NULL, 0) == 0);
  rmdir(p);
  loom_tensor_t *bf;
  CHECK_OK(loom_tensor_create(LOOM_BF16, 1, shape, &bf));
  CHECK_ERR(loom_tensor_save_npy(bf, path_in(p, sizeof p, "bf.npy")),
            LOOM_ERR_UNSUPPORTED, "bf16");
  CHECK(!file_exists(p));
  CHECK_ERR(loom_tensor_save_npy(NULL, p), LOOM_ERR_INVALID, "t");
  CHECK_ERR(loom_tensor_save_npy(t, NULL), LOOM_ERR_INVALID, "path");
  loom_tensor_destroy(t);
  loom_tensor_destroy(bf);
}

static void save_replaces_whole_file(void) {
  char p[128];
  path_in(p, sizeof p, "replace.npy");
  int64_t big[] = {100, 10}, small[] = {2};
  loom_tensor_t *a, *b, *back = NULL;
  CHECK_OK(loom_tensor_create(LOOM_F64, 2, big, &a));
  CHECK_OK(loom_tensor_save_npy(a, p));
  double v[2] = {1.5, -2};
  CHECK_OK(loom_tensor_from_data(LOOM_F64, 1, small, v, sizeof v, &b));
  CHECK_OK(loom_tensor_save_npy(b, p));
  size_t n;
  free(read_bytes(p, &n));
  CHECK(n == 128 + 16);
  CHECK_OK(loom_tensor_load_npy(p, &back));
  CHECK(same_tensor(b, back));
  loom_tensor_destroy(a);
  loom_tensor_destroy(b);
  loom_tensor_destroy(back);
}

/* A name as long as a file name may be (250 of NAME_MAX's 255 bytes)
 * saves, through a temporary whose name stays within the limit, and no
 * temporary is left. */
static void save_at_the_longest_names(void) {
  char name[251], p[512], first[512];
  memset(name, 'y', 246);
  memcpy(name + 246, ".npy", 5);
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int64_t shape[] = {3};
  double v[3] = {1, 2, 3};
  loom_tensor_t *t, *back = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_F64, 1, shape, v, sizeof v, &t));
  CHECK_OK(loom_tensor_save_npy(t, p));
  CHECK_OK(loom_tensor_load_npy(p, &back));
  CHECK(back && same_tensor(t, back));
  CHECK(test_files_with_prefix(dir, ".loom-", first, sizeof first) == 0);
  remove(p);
  loom_tensor_destroy(t);
  loom_tensor_destroy(back);
}

/* A transposed view saves its logical contents, row-major. */
static void save_non_contiguous(void) {
  int32_t data[6] = {0, 1, 2, 3, 4, 5}; /* a 2x3 matrix */
  int64_t shape[] = {3, 2}, strides[] = {1, 3};
  loom_tensor_t *view, *back = NULL;
  CHECK_OK(loom_tensor_wrap(LOOM_I32, 2, shape, strides, data, &view));
  char p[128];
  CHECK_OK(loom_tensor_save_npy(view, path_in(p, sizeof p, "view.npy")));
  CHECK_OK(loom_tensor_load_npy(p, &back));
  double want[] = {0, 3, 1, 4, 2, 5};
  CHECK(loom_tensor_dim(back, 0) == 3 && loom_tensor_dim(back, 1) == 2);
  CHECK_TENSOR(back, want, 6, 0, 0);
  loom_tensor_destroy(view);
  loom_tensor_destroy(back);
}

/* NumPy reads what Loom writes and Loom reads what NumPy writes. */
static void numpy_cross_check(void) {
  if (system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    printf("note: /usr/bin/python3 has no numpy; cross-check skipped\n");
    return;
  }
  char p[128], q[128], r[128], cmd[768];
  path_in(p, sizeof p, "to_numpy.npy");
  path_in(r, sizeof r, "fortran.npy");
  path_in(q, sizeof q, "from_numpy.npy");
  int64_t shape[] = {2, 2};
  double v[4] = {0.5, -1.25, 3, 1e10};
  loom_tensor_t *t, *back = NULL;
  CHECK_OK(loom_tensor_from_data(LOOM_F64, 2, shape, v, sizeof v, &t));
  CHECK_OK(loom_tensor_save_npy(t, p));
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"import numpy as np; a = np.load('%s'); "
           "print(a.dtype, a.shape, ' '.join(repr(float(x)) for x in a.ravel())); "
           "x = np.arange(24, dtype='<i4').reshape(2, 3, 4).T; "
           "np.save('%s', np.ascontiguousarray(x[1:] * 2)); np.save('%s', x)\"",
           p, q, r);
  FILE *f = popen(cmd, "r");
  char line[256] = "";
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    pclose(f);
  }
  CHECK(strcmp(line, "float64 (2, 2) 0.5 -1.25 3.0 10000000000.0\n") == 0);
  CHECK_OK(loom_tensor_load_npy(q, &back));
  /* x.T[1:] of shape (3, 3, 2): element [i][j][k] = 2 * x[k][j][i + 1]. */
  CHECK(loom_tensor_rank(back) == 3 && loom_tensor_dim(back, 0) == 3 &&
        loom_tensor_dim(back, 1) == 3 && loom_tensor_dim(back, 2) == 2);
  double want[18];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 2; k++) want[i * 6 + j * 2 + k] = 2 * (k * 12 + j * 4 + i + 1);
  CHECK_TENSOR(back, want, 18, 0, 0);
  /* NumPy saves a transposed array in Fortran order. */
  loom_tensor_t *fortran = NULL;
  CHECK_ERR(loom_tensor_load_npy(r, &fortran), LOOM_ERR_UNSUPPORTED, "fortran_order");
  loom_tensor_destroy(t);
  loom_tensor_destroy(back);
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom_npy_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  TEST_RUN(round_trip_every_dtype_and_rank);
  TEST_RUN(round_trip_empty_dim);
  TEST_RUN(save_matches_numpy_bytes);
  TEST_RUN(load_numpy_layouts);
  TEST_RUN(malformed_headers);
  TEST_RUN(malformed_preambles);
  TEST_RUN(fuzz_truncations_and_flips);
  TEST_RUN(save_errors_leave_no_file);
  TEST_RUN(save_replaces_whole_file);
  TEST_RUN(save_at_the_longest_names);
  TEST_RUN(save_non_contiguous);
  TEST_RUN(numpy_cross_check);
  remove_dir();
  return test_summary();
}
