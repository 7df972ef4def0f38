/* Checkpoints: round trips in every dtype, files laid out byte by byte as
 * the safetensors format describes them, malformed and truncated files,
 * mismatched graphs, and saves that fail or die half-way, which must leave
 * the previous checkpoint intact and loadable. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "harness.h"

static char dir[64];

static const char *path_in(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/%s", dir, name);
  return buf;
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    test_fail(__FILE__, __LINE__, "cannot write %s", path);
    return;
  }
  if (n) fwrite(bytes, 1, n, f);
  fclose(f);
}

/* The whole file in a malloc'd buffer (NULL if absent); its size in *n. */
static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  *n = 0;
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

/* Files in dir whose name contains ".tmp.": what a save must not leave. */
static int count_temporaries(void) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strstr(e->d_name, ".tmp.")) n++;
  if (d) closedir(d);
  return n;
}

/* How many temporaries a save of dir/name by process pid left beside it
 * ("name.tmp.PID.N"), and the first one's path in `first`. */
static int temporaries_of(const char *name, long pid, char *first, size_t size) {
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", name, pid);
  return test_files_with_prefix(dir, prefix, first, size);
}

static void put_u64(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

/* A safetensors image as the format describes it: the header length as a
 * little-endian u64, the JSON padded with spaces to a multiple of 8 (as
 * the reference writer pads it), then the data. */
static unsigned char *st_image(const char *json, const void *data,
                               size_t data_bytes, size_t *n) {
  size_t len = (strlen(json) + 7) / 8 * 8;
  unsigned char *b = calloc(1, 8 + len + data_bytes + 1);
  put_u64(b, len);
  memset(b + 8, ' ', len);
  memcpy(b + 8, json, strlen(json));
  if (data_bytes) memcpy(b + 8 + len, data, data_bytes);
  *n = 8 + len + data_bytes;
  return b;
}

static loom_status_t load_image(loom_graph_t *g, const unsigned char *b,
                                size_t n) {
  char p[128];
  write_bytes(path_in(p, sizeof p, "fixture.safetensors"), b, n);
  return loom_checkpoint_load(g, p);
}

static loom_status_t load_json(loom_graph_t *g, const char *json,
                               const void *data, size_t data_bytes) {
  size_t n;
  unsigned char *b = st_image(json, data, data_bytes, &n);
  loom_status_t s = load_image(g, b, n);
  free(b);
  return s;
}

static loom_tensor_t *param_tensor(loom_graph_t *g, loom_value_t v) {
  loom_tensor_t *t = NULL;
  CHECK_OK(loom_graph_param_tensor(g, v, &t));
  return t;
}

/* A new f32 parameter of shape {n} filled with x. */
static loom_value_t param_filled(loom_graph_t *g, const char *name, int64_t n,
                                 double x) {
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_param(g, name, LOOM_F32, 1, &n, NULL, &v));
  loom_tensor_t *t = param_tensor(g, v);
  for (int64_t i = 0; i < n; i++) ((float *)loom_tensor_data(t))[i] = (float)x;
  return v;
}

/* Whether every element of parameter v equals x. */
static bool all_equal(loom_graph_t *g, loom_value_t v, double x) {
  loom_tensor_t *t = param_tensor(g, v);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++)
    if (test_get(t, i) != x) return false;
  return true;
}

/* Whether a and b have the same dtype, shape and bytes. */
static bool same_tensor(const loom_tensor_t *a, const loom_tensor_t *b) {
  if (loom_tensor_dtype(a) != loom_tensor_dtype(b) ||
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

/* ---- Round trips ------------------------------------------------------------ */

static const loom_dtype_t all_dtypes[] = {LOOM_F32, LOOM_F64, LOOM_F16,
                                          LOOM_BF16, LOOM_I8,  LOOM_I32,
                                          LOOM_I64, LOOM_BOOL};
#define N_DTYPES 8

/* One parameter per dtype with random values (shapes vary, a scalar and
 * an empty one among them), or zeros when random is false. */
static loom_graph_t *graph_every_dtype(bool random, loom_value_t *v) {
  static const int64_t shapes[N_DTYPES][3] = {
      {3, 2, 1}, {5, 0, 0}, {2, 2, 2}, {7, 0, 0},
      {1, 9, 0}, {4, 0, 0}, {2, 3, 0}, {3, 3, 0}};
  static const int ranks[N_DTYPES] = {3, 1, 3, 1, 2, 1, 2, 2};
  loom_graph_t *g = NULL;
  CHECK_OK(loom_graph_create(&g));
  for (int d = 0; d < N_DTYPES; d++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d.%s", d, loom_dtype_name(all_dtypes[d]));
    loom_tensor_t *init =
        random ? test_rand_tensor(all_dtypes[d], ranks[d], shapes[d], -100, 100) : NULL;
    CHECK_OK(loom_graph_param(g, name, all_dtypes[d], ranks[d], shapes[d], init, &v[d]));
    loom_tensor_destroy(init);
  }
  int64_t empty[] = {0, 4};
  CHECK_OK(loom_graph_param(g, "empty", LOOM_I32, 2, empty, NULL, &v[N_DTYPES]));
  /* A non-null shape for the scalar: graph.c memcmps it even at rank 0. */
  loom_tensor_t *scalar = random ? test_rand_tensor(LOOM_F64, 0, empty, -1, 1) : NULL;
  CHECK_OK(loom_graph_param(g, "scalar", LOOM_F64, 0, empty, scalar, &v[N_DTYPES + 1]));
  loom_tensor_destroy(scalar);
  return g;
}

static void round_trip_every_dtype(void) {
  test_seed(11);
  loom_value_t a[N_DTYPES + 2], b[N_DTYPES + 2];
  loom_graph_t *src = graph_every_dtype(true, a), *dst = graph_every_dtype(false, b);
  char p[128];
  CHECK_OK(loom_checkpoint_save(src, path_in(p, sizeof p, "all.safetensors")));
  CHECK_OK(loom_checkpoint_load(dst, p));
  for (int i = 0; i < N_DTYPES + 2; i++)
    CHECK(same_tensor(param_tensor(src, a[i]), param_tensor(dst, b[i])));
  /* The header is padded so that the data starts 8-byte aligned, and the
   * data is exactly the tensors' bytes. */
  size_t n, data = 0;
  unsigned char *bytes = read_bytes(p, &n);
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = len << 8 | bytes[i];
  for (int i = 0; i < N_DTYPES + 2; i++) {
    loom_tensor_t *t = param_tensor(src, a[i]);
    data += (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t));
  }
  CHECK(len % 8 == 0 && n == 8 + len + data);
  CHECK(bytes[8] == '{' && bytes[8 + len - 1] != '\0');
  CHECK(count_temporaries() == 0);
  free(bytes);
  loom_graph_destroy(src);
  loom_graph_destroy(dst);
}

/* A parameter initialized from a transposed (non-contiguous) view holds
 * the view's elements in row-major order, and saves them so. */
static void round_trip_from_strided_init(void) {
  float base[6] = {0, 1, 2, 3, 4, 5}; /* 2x3, viewed as its 3x2 transpose */
  int64_t shape[] = {3, 2}, strides[] = {1, 3};
  loom_tensor_t *view;
  CHECK_OK(loom_tensor_wrap(LOOM_F32, 2, shape, strides, base, &view));
  loom_graph_t *g, *h;
  loom_value_t v, w;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_create(&h));
  CHECK_OK(loom_graph_param(g, "t", LOOM_F32, 2, shape, view, &v));
  CHECK_OK(loom_graph_param(h, "t", LOOM_F32, 2, shape, NULL, &w));
  char p[128];
  CHECK_OK(loom_checkpoint_save(g, path_in(p, sizeof p, "strided.safetensors")));
  CHECK_OK(loom_checkpoint_load(h, p));
  double want[] = {0, 3, 1, 4, 2, 5};
  CHECK_TENSOR(param_tensor(h, w), want, 6, 0, 0);
  loom_tensor_destroy(view);
  loom_graph_destroy(g);
  loom_graph_destroy(h);
}

/* ---- The reference layout ----------------------------------------------------- */

static const char ref_json[] =
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

/* Loom writes exactly the bytes of Python's
 * safetensors.torch.save_file({"a": torch.tensor([1.5, -2.0])}, path). */
static void save_matches_reference_bytes(void) {
  const float data[2] = {1.5f, -2.0f};
  size_t n_want, n_got;
  unsigned char *want = st_image(ref_json, data, sizeof data, &n_want);
  CHECK(n_want == 8 + 56 + 8);
  loom_graph_t *g;
  loom_value_t v;
  CHECK_OK(loom_graph_create(&g));
  v = param_filled(g, "a", 2, 0);
  CHECK_OK(loom_tensor_write(param_tensor(g, v), data, sizeof data));
  char p[128];
  CHECK_OK(loom_checkpoint_save(g, path_in(p, sizeof p, "ref.safetensors")));
  unsigned char *got = read_bytes(p, &n_got);
  CHECK(got && n_got == n_want && memcmp(got, want, n_want) == 0);
  free(want);
  free(got);
  loom_graph_destroy(g);
}

static void load_reference_layout(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = param_filled(g, "a", 2, 0);
  const float data[2] = {1.5f, -2.0f};
  CHECK_OK(load_json(g, ref_json, data, sizeof data));
  double want[] = {1.5, -2.0};
  CHECK_TENSOR(param_tensor(g, a), want, 2, 0, 0);
  loom_graph_destroy(g);
}

/* Metadata, escaped and non-ASCII names, keys in another order, spacing,
 * and BF16 / I64 / BOOL data laid out by hand. */
static void load_varied_header(void) {
  static const char json[] =
      "{\n  \"__metadata__\": {\"format\": \"pt\", \"note\": \"a \\\"q\\\"\"},\n"
      "  \"w\\\"q\": {\"shape\": [2], \"dtype\": \"BF16\", \"data_offsets\": [16, 20]},\n"
      "  \"caf\\u00e9\" : {\"data_offsets\":[0,16],\"dtype\":\"I64\",\"shape\":[2, 1]},\n"
      "  \"\\ud83d\\ude00\\/\\t\": {\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[20,23]}\n}";
  unsigned char data[23] = {0};
  int64_t ints[2] = {-7, (int64_t)1 << 40};
  memcpy(data, ints, 16);
  data[16] = 0x80, data[17] = 0x3F; /* bf16 1.0 */
  data[18] = 0x00, data[19] = 0xC0; /* bf16 -2.0 */
  data[20] = 0, data[21] = 1, data[22] = 2; /* a nonzero byte reads as true */
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t w, c, b;
  int64_t s2[] = {2}, s21[] = {2, 1}, s3[] = {3};
  CHECK_OK(loom_graph_param(g, "w\"q", LOOM_BF16, 1, s2, NULL, &w));
  CHECK_OK(loom_graph_param(g, "caf\xc3\xa9", LOOM_I64, 2, s21, NULL, &c));
  CHECK_OK(loom_graph_param(g, "\xf0\x9f\x98\x80/\t", LOOM_BOOL, 1, s3, NULL, &b));
  CHECK_OK(load_json(g, json, data, sizeof data));
  double want_w[] = {1, -2}, want_c[] = {-7, (double)((int64_t)1 << 40)},
         want_b[] = {0, 1, 1};
  CHECK_TENSOR(param_tensor(g, w), want_w, 2, 0, 0);
  CHECK_TENSOR(param_tensor(g, c), want_c, 2, 0, 0);
  CHECK_TENSOR(param_tensor(g, b), want_b, 3, 0, 0);
  /* Saved again and read back under the same names. */
  char p[128];
  CHECK_OK(loom_checkpoint_save(g, path_in(p, sizeof p, "varied.safetensors")));
  CHECK_OK(loom_tensor_write(param_tensor(g, c), (int64_t[]){0, 0}, 16));
  CHECK_OK(loom_checkpoint_load(g, p));
  CHECK_TENSOR(param_tensor(g, c), want_c, 2, 0, 0);
  loom_graph_destroy(g);
}

/* ---- Names ------------------------------------------------------------------ */

static void unnamed_parameters_get_generated_names(void) {
  loom_graph_t *g, *h;
  CHECK_OK(loom_graph_create(&g));
  CHECK_OK(loom_graph_create(&h));
  param_filled(g, "named", 2, 1);
  loom_value_t u = param_filled(g, NULL, 3, 2);
  loom_value_t e = param_filled(g, "", 1, 3);
  param_filled(h, "named", 2, 0);
  loom_value_t hu = param_filled(h, NULL, 3, 0), he = param_filled(h, NULL, 1, 0);
  char p[128];
  CHECK_OK(loom_checkpoint_save(g, path_in(p, sizeof p, "unnamed.safetensors")));
  size_t n;
  unsigned char *b = read_bytes(p, &n);
  CHECK(b && memmem(b, n, "\"__param1\"", 10) && memmem(b, n, "\"__param2\"", 10));
  free(b);
  CHECK_OK(loom_checkpoint_load(h, p));
  CHECK(all_equal(h, hu, 2) && all_equal(h, he, 3));
  (void)u;
  (void)e;
  loom_graph_destroy(g);
  loom_graph_destroy(h);
}

static void duplicate_and_reserved_names(void) {
  char p[128];
  path_in(p, sizeof p, "dup.safetensors");
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  /* Two parameters of one name cannot be made (loom_graph_param fails);
   * a name can still clash with the one generated for an unnamed one. */
  param_filled(g, "w", 2, 1);
  loom_value_t v;
  CHECK_ERR(loom_graph_param(g, "w", LOOM_F32, 0, NULL, NULL, &v), LOOM_ERR_INVALID,
            "the name 'w' is taken by parameter 0");
  param_filled(g, NULL, 3, 1);
  param_filled(g, "__param1", 3, 1);
  CHECK_ERR(loom_checkpoint_save(g, p), LOOM_ERR_INVALID, "two parameters are named '__param1'");
  CHECK(!file_exists(p));
  /* A graph that cannot be saved cannot be loaded either. */
  loom_graph_t *ok;
  CHECK_OK(loom_graph_create(&ok));
  param_filled(ok, "w", 2, 1);
  param_filled(ok, "__param1", 3, 1);
  CHECK_OK(loom_checkpoint_save(ok, p));
  CHECK_ERR(loom_checkpoint_load(g, p), LOOM_ERR_INVALID, "'__param1'");
  loom_graph_destroy(g);
  CHECK_OK(loom_graph_create(&g));
  param_filled(g, "__metadata__", 2, 1);
  CHECK_ERR(loom_checkpoint_save(g, p), LOOM_ERR_INVALID, "__metadata__");
  loom_graph_destroy(g);
  loom_graph_destroy(ok);
}

/* ---- Graphs that do not match the file ----------------------------------------- */

static void mismatched_graphs(void) {
  char p[128];
  path_in(p, sizeof p, "wb.safetensors");
  loom_graph_t *src;
  CHECK_OK(loom_graph_create(&src));
  int64_t s23[] = {2, 3}, s32[] = {3, 2};
  loom_value_t v;
  CHECK_OK(loom_graph_param(src, "w", LOOM_F32, 2, s23, NULL, &v));
  param_filled(src, "b", 3, 5);
  CHECK_OK(loom_checkpoint_save(src, p));

  /* "b" sorts first and matches; "w" fails; "b" must stay as it was. */
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t b = param_filled(g, "b", 3, 7);
  CHECK_OK(loom_graph_param(g, "w", LOOM_F64, 2, s23, NULL, &v));
  CHECK_ERR(loom_checkpoint_load(g, p), LOOM_ERR_DTYPE,
            "parameter 'w': the checkpoint holds f32 (2, 3), the graph declares f64 (2, 3)");
  CHECK(all_equal(g, b, 7));
  loom_graph_destroy(g);

  CHECK_OK(loom_graph_create(&g));
  b = param_filled(g, "b", 3, 7);
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, s32, NULL, &v));
  CHECK_ERR(loom_checkpoint_load(g, p), LOOM_ERR_SHAPE,
            "parameter 'w': the checkpoint holds f32 (2, 3), the graph declares f32 (3, 2)");
  CHECK(all_equal(g, b, 7));
  loom_graph_destroy(g);

  /* A parameter the file lacks. */
  CHECK_OK(loom_graph_create(&g));
  b = param_filled(g, "b", 3, 7);
  CHECK_OK(loom_graph_param(g, "w", LOOM_F32, 2, s23, NULL, &v));
  loom_value_t c = param_filled(g, "c", 1, 9);
  CHECK_ERR(loom_checkpoint_load(g, p), LOOM_ERR_INVALID, "parameter 'c' (f32 (1)) is not in");
  CHECK(all_equal(g, b, 7));
  loom_checkpoint_options_t o = {.size = sizeof o, .allow_missing = 1};
  CHECK_OK(loom_checkpoint_load_ex(g, p, &o));
  CHECK(all_equal(g, b, 5) && all_equal(g, c, 9));
  loom_graph_destroy(g);

  /* A tensor the graph lacks. */
  CHECK_OK(loom_graph_create(&g));
  b = param_filled(g, "b", 3, 7);
  CHECK_ERR(loom_checkpoint_load(g, p), LOOM_ERR_INVALID, "tensor 'w' of the checkpoint");
  CHECK(all_equal(g, b, 7));
  o = (loom_checkpoint_options_t){.size = sizeof o, .allow_unexpected = 1};
  CHECK_OK(loom_checkpoint_load_ex(g, p, &o));
  CHECK(all_equal(g, b, 5));
  loom_graph_destroy(g);
  loom_graph_destroy(src);
}

/* ---- Malformed files ----------------------------------------------------------- */

typedef struct bad_case {
  const char *json;
  size_t data_bytes;
  const char *word;
} bad_case_t;

#define T_A(body) "{\"a\":{" body "}}"
static const bad_case_t bad_cases[] = {
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "expected ',' or '}'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "expected a string"},
    {"[]", 0, "must be a JSON object"},
    {"{} x", 0, "text after"},
    {"{\"a\":true}", 0, "must be an object"},
    {"{\"a\":[1]}", 0, "must be an object"},
    {"{\"a\" {}}", 0, "expected ':'"},
    {"{\"a\":{\"dtype\":F32}}", 0, "expected a string"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]"), 8, "shape must be"},
    {T_A("\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]"), 8, "shape must be"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]"), 8, "shape must be"},
    {T_A("\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]"), 8, "leading zero"},
    {T_A("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]"), 8, "at most 8"},
    {T_A("\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]"), 8, "too large"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]"), 8, "[begin, end]"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]"), 8, "[begin, end]"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1"), 8, "other than dtype"},
    {T_A("\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, "same key twice"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2]"), 8, "lacks its data_offsets"},
    {T_A("\"shape\":[2],\"data_offsets\":[0,8]"), 8, "lacks its dtype"},
    {T_A("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 8, "lacks its shape"},
    {T_A("\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]"), 2, "dtype 'F8_E4M3'"},
    {T_A("\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, "dtype 'f32'"},
    {"{\"a\x01\":{}}", 0, "control character"},
    {"{\"a\\q\":{}}", 0, "unknown escape"},
    {"{\"a\\u00\":{}}", 0, "hex digit"},
    {"{\"a\\u0000\":{}}", 0, "\\u0000"},
    {"{\"a\\ud800x\":{}}", 0, "surrogate"},
    {"{\"a\\udc00\":{}}", 0, "surrogate"},
    {"{\"a", 0, "unterminated"},
    {"{\"a\\", 0, "unknown escape"}, /* the padding follows the backslash */
    {"{\"__metadata__\":{\"k\":1}}", 0, "expected a string"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice"},
    /* Offsets that do not hold the shape, or do not tile the data. */
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]"), 12, "do not hold"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]"), 8, "do not hold"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 4, "truncated"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 12, "4 bytes after the end"},
    {T_A("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]"), 16, "a gap in the data"},
    {T_A("\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
         "\"data_offsets\":[0,8]"), 8, "more bytes than int64"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}", 24, "a gap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "'a' appears twice"},
};
#define N_BAD (sizeof bad_cases / sizeof bad_cases[0])

static void malformed_headers(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = param_filled(g, "a", 2, 7);
  unsigned char data[32] = {0};
  for (size_t i = 0; i < N_BAD; i++) {
    int before = test_failures;
    CHECK_ERR(load_json(g, bad_cases[i].json, data, bad_cases[i].data_bytes),
              LOOM_ERR_FORMAT, bad_cases[i].word);
    CHECK(all_equal(g, a, 7));
    if (test_failures != before) fprintf(stderr, "  in case %zu: %s\n", i, bad_cases[i].json);
  }
  loom_graph_destroy(g);
}

/* The 8-byte header length: missing, huge, beyond the file, too small. */
static void malformed_lengths(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = param_filled(g, "a", 2, 7);
  unsigned char b[64];
  memset(b, ' ', sizeof b);
  CHECK_ERR(load_image(g, b, 0), LOOM_ERR_FORMAT, "fewer than the 8");
  CHECK_ERR(load_image(g, b, 7), LOOM_ERR_FORMAT, "fewer than the 8");
  put_u64(b, (uint64_t)1 << 40);
  CHECK_ERR(load_image(g, b, sizeof b), LOOM_ERR_FORMAT, "too large");
  put_u64(b, UINT64_MAX);
  CHECK_ERR(load_image(g, b, sizeof b), LOOM_ERR_FORMAT, "too large");
  put_u64(b, 100);
  CHECK_ERR(load_image(g, b, sizeof b), LOOM_ERR_FORMAT, "truncated");
  put_u64(b, 0);
  CHECK_ERR(load_image(g, b, 8), LOOM_ERR_FORMAT, "too short");
  /* An empty object loads into a graph without parameters. */
  loom_graph_t *empty;
  CHECK_OK(loom_graph_create(&empty));
  put_u64(b, 8);
  memcpy(b + 8, "{}      ", 8);
  CHECK_OK(load_image(empty, b, 16));
  CHECK_ERR(load_image(g, b, 16), LOOM_ERR_INVALID, "parameter 'a'");
  /* A nul byte in the header. */
  memcpy(b + 8, "{}\0     ", 8);
  CHECK_ERR(load_image(empty, b, 16), LOOM_ERR_FORMAT, "text after");
  CHECK(all_equal(g, a, 7));
  loom_graph_destroy(g);
  loom_graph_destroy(empty);
}

/* A small graph of three parameters with distinct values, and its file. */
static loom_graph_t *three_params(loom_value_t *v, double base) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  v[0] = param_filled(g, "x", 3, base);
  v[1] = param_filled(g, "y", 1, base + 1);
  int64_t s[] = {2, 2};
  CHECK_OK(loom_graph_param(g, "z", LOOM_I8, 2, s, NULL, &v[2]));
  int8_t z[4] = {(int8_t)base, 2, 3, 4};
  CHECK_OK(loom_tensor_write(param_tensor(g, v[2]), z, 4));
  return g;
}

static bool three_unchanged(loom_graph_t *g, const loom_value_t *v, double base) {
  return all_equal(g, v[0], base) && all_equal(g, v[1], base + 1) &&
         test_get(param_tensor(g, v[2]), 0) == base;
}

/* Every proper prefix of a good file fails cleanly; random byte flips
 * never crash (the sanitizer build watches). */
static void truncations_and_flips(void) {
  loom_value_t v[3], w[3];
  loom_graph_t *src = three_params(v, 1), *g = three_params(w, 9);
  char p[128];
  CHECK_OK(loom_checkpoint_save(src, path_in(p, sizeof p, "three.safetensors")));
  size_t n;
  unsigned char *good = read_bytes(p, &n);
  int wrong = 0;
  for (size_t len = 0; len < n; len++) {
    if (load_image(g, good, len) != LOOM_ERR_FORMAT || !three_unchanged(g, w, 9)) wrong++;
  }
  CHECK(wrong == 0);
  CHECK_OK(load_image(g, good, n));
  CHECK(three_unchanged(g, w, 1));
  test_seed(5);
  unsigned char *copy = malloc(n);
  int loaded = 0, failed = 0;
  for (int i = 0; i < 400; i++) {
    memcpy(copy, good, n);
    for (int k = 0; k < 1 + i % 3; k++)
      copy[test_rand_int(0, (int64_t)n - 1)] = (unsigned char)test_rand_int(0, 255);
    if (load_image(g, copy, n) == LOOM_OK) loaded++;
    else failed++;
  }
  CHECK(loaded > 0 && failed > 0);
  free(copy);
  free(good);
  loom_graph_destroy(src);
  loom_graph_destroy(g);
}

/* ---- Failures at every allocation ------------------------------------------------ */

static void load_fails_cleanly_at_every_allocation(void) {
  loom_value_t v[3], w[3];
  loom_graph_t *src = three_params(v, 1), *g = three_params(w, 9);
  char p[128];
  CHECK_OK(loom_checkpoint_save(src, path_in(p, sizeof p, "alloc.safetensors")));
  loom_status_t s = LOOM_ERR_NOMEM;
  int n = 0, wrong = 0;
  for (; n < 1000 && s != LOOM_OK; n++) {
    core_alloc_fail_after(n);
    s = loom_checkpoint_load(g, p);
    core_alloc_fail_after(-1);
    if (s != LOOM_OK && (s != LOOM_ERR_NOMEM || !three_unchanged(g, w, 9))) wrong++;
  }
  CHECK(wrong == 0 && n > 3 && s == LOOM_OK);
  CHECK(three_unchanged(g, w, 1));
  loom_graph_destroy(src);
  loom_graph_destroy(g);
}

static void save_fails_cleanly_at_every_allocation(void) {
  loom_value_t v[3], w[3];
  loom_graph_t *old = three_params(v, 1), *next = three_params(w, 2);
  char p[128];
  CHECK_OK(loom_checkpoint_save(old, path_in(p, sizeof p, "atomic.safetensors")));
  size_t n_before, n_now;
  unsigned char *before = read_bytes(p, &n_before);
  loom_status_t s = LOOM_ERR_NOMEM;
  int n = 0, wrong = 0;
  for (; n < 1000 && s != LOOM_OK; n++) {
    core_alloc_fail_after(n);
    s = loom_checkpoint_save(next, p);
    core_alloc_fail_after(-1);
    if (s == LOOM_OK) break;
    unsigned char *now = read_bytes(p, &n_now);
    if (s != LOOM_ERR_NOMEM || !now || n_now != n_before ||
        memcmp(now, before, n_now) != 0 || count_temporaries() != 0)
      wrong++;
    free(now);
  }
  CHECK(wrong == 0 && n > 3 && s == LOOM_OK);
  CHECK_OK(loom_checkpoint_load(old, p));
  CHECK(three_unchanged(old, v, 2));
  free(before);
  loom_graph_destroy(old);
  loom_graph_destroy(next);
}

/* ---- Interrupted saves -------------------------------------------------------------- */

/* A graph whose file (16 KiB) outgrows the 1000-byte limits below; its
 * large parameter in *big. */
static loom_graph_t *big_graph(double x, loom_value_t *big) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  param_filled(g, "x", 3, x);
  *big = param_filled(g, "big", 4096, x);
  return g;
}

/* Whether path holds a checkpoint that loads into three_params with base. */
static bool holds_three(const char *path, double base) {
  loom_value_t w[3];
  loom_graph_t *g = three_params(w, 0);
  bool ok = loom_checkpoint_load(g, path) == LOOM_OK && three_unchanged(g, w, base);
  loom_graph_destroy(g);
  return ok;
}

/* The disk fills up half-way (a file size limit): the save fails with an
 * I/O error, the old file stays, the temporary goes. */
static void save_fails_when_the_disk_fills(void) {
  loom_value_t v[3];
  loom_value_t vb;
  loom_graph_t *old = three_params(v, 1), *big = big_graph(4, &vb);
  char p[128];
  CHECK_OK(loom_checkpoint_save(old, path_in(p, sizeof p, "full.safetensors")));
  struct rlimit saved;
  CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  struct rlimit small = {.rlim_cur = 1000, .rlim_max = saved.rlim_max};
  void (*handler)(int) = signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
  loom_status_t s = loom_checkpoint_save(big, p);
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, handler);
  CHECK_ERR(s, LOOM_ERR_IO, "write");
  CHECK(holds_three(p, 1));
  CHECK(count_temporaries() == 0);
  loom_graph_destroy(old);
  loom_graph_destroy(big);
}

/* The process dies in the middle of a save (killed by SIGXFSZ, so no
 * clean-up code runs): the previous checkpoint is whole and loads. */
static void save_killed_midway_keeps_the_old_file(void) {
  loom_value_t v[3];
  loom_value_t vb;
  loom_graph_t *old = three_params(v, 1), *big = big_graph(4, &vb);
  char p[128];
  CHECK_OK(loom_checkpoint_save(old, path_in(p, sizeof p, "killed.safetensors")));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit small;
    getrlimit(RLIMIT_FSIZE, &small);
    small.rlim_cur = 1000;
    signal(SIGXFSZ, SIG_DFL);
    setrlimit(RLIMIT_FSIZE, &small);
    loom_checkpoint_save(big, p);
    _exit(0); /* not reached: the write past the limit kills the child */
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ);
  CHECK(holds_three(p, 1));
  /* The dead process's temporary is left beside it, never in its place. */
  CHECK(temporaries_of("killed.safetensors", (long)pid, NULL, 0) == 1);
  /* The next save replaces the file whole, and removes the temporary of
   * the process that is gone. */
  CHECK_OK(loom_checkpoint_save(big, p));
  CHECK(temporaries_of("killed.safetensors", (long)pid, NULL, 0) == 0);
  loom_graph_t *check = big_graph(0, &vb);
  CHECK_OK(loom_checkpoint_load(check, p));
  CHECK(all_equal(check, vb, 4));
  loom_graph_destroy(check);
  loom_graph_destroy(old);
  loom_graph_destroy(big);
}

/* A pid that no process has: a child's, after it exited and was reaped. */
static long dead_pid(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  CHECK(pid > 0 && waitpid(pid, NULL, 0) == pid);
  return (long)pid;
}

static void make_temporary(const char *name, long pid, int n, time_t mtime, char *out,
                           size_t size) {
  char p[160];
  snprintf(p, sizeof p, "%s.tmp.%ld.%d", name, pid, n);
  path_in(out, size, p);
  write_bytes(out, "partial", 7);
  if (mtime) {
    struct timespec t[2] = {{.tv_sec = mtime}, {.tv_sec = mtime}};
    CHECK(utimensat(AT_FDCWD, out, t, 0) == 0);
  }
}

/* Temporaries a save finds beside its path: those of a process that is
 * gone, or of a pid now used by a process started after the file was
 * last written (a reused pid), are removed; those of a live writer (this
 * process, or its parent), and names of another form, stay. */
static void save_removes_stale_temporaries(void) {
  loom_value_t v[3];
  loom_graph_t *g = three_params(v, 1);
  char p[128], dead[256], reused[256], live[256], parent[256], other[256], sibling[256];
  path_in(p, sizeof p, "stale.safetensors");
  long gone = dead_pid();
  make_temporary("stale.safetensors", gone, 0, 0, dead, sizeof dead);
  /* A day before this process started: a writer with this pid then was
   * another process. */
  make_temporary("stale.safetensors", (long)getpid(), 7, time(NULL) - 86400, reused,
                 sizeof reused);
  make_temporary("stale.safetensors", (long)getpid(), 8, 0, live, sizeof live);
  make_temporary("stale.safetensors", (long)getppid(), 0, 0, parent, sizeof parent);
  path_in(other, sizeof other, "stale.safetensors.tmp.x.1");
  write_bytes(other, "x", 1);
  make_temporary("stale2.safetensors", gone, 0, 0, sibling, sizeof sibling);
  CHECK_OK(loom_checkpoint_save(g, p));
  CHECK(!file_exists(dead));
  CHECK(!file_exists(reused));
  CHECK(file_exists(live));
  CHECK(file_exists(parent));
  CHECK(file_exists(other));
  /* Another path's temporaries wait for a save of that path. */
  CHECK(file_exists(sibling));
  CHECK(holds_three(p, 1));
  unlink(live);
  unlink(parent);
  unlink(other);
  unlink(sibling);
  loom_graph_destroy(g);
}

/* Saves killed by SIGKILL while a temporary of theirs exists, then one
 * that finishes: no temporary is left, and the file holds the last
 * save. */
static void saves_killed_by_sigkill_leave_nothing(void) {
  loom_value_t vb;
  loom_graph_t *big = big_graph(5, &vb);
  char p[128];
  path_in(p, sizeof p, "sigkill.safetensors");
  int left = 0;
  for (int i = 0; i < 5; i++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      for (;;) loom_checkpoint_save(big, p);
    }
    /* A child that is never scheduled is killed after 10 s all the same. */
    for (int wait = 0; wait < 10000 && !temporaries_of("sigkill.safetensors", (long)pid, NULL, 0);
         wait++)
      usleep(1000);
    kill(pid, SIGKILL);
    CHECK(pid > 0 && waitpid(pid, NULL, 0) == pid);
    left += temporaries_of("sigkill.safetensors", (long)pid, NULL, 0);
  }
  /* A kill can fall between a save's rename and the next save's open,
   * but hardly five times in a row. */
  CHECK(left > 0);
  CHECK_OK(loom_checkpoint_save(big, p));
  CHECK(count_temporaries() == 0);
  loom_graph_t *check = big_graph(0, &vb);
  CHECK_OK(loom_checkpoint_load(check, p));
  CHECK(all_equal(check, vb, 5));
  loom_graph_destroy(check);
  loom_graph_destroy(big);
}

static void save_errors_leave_no_file(void) {
  loom_value_t v[3];
  loom_graph_t *g = three_params(v, 1);
  char p[128];
  CHECK_ERR(loom_checkpoint_save(g, path_in(p, sizeof p, "nodir/x.safetensors")),
            LOOM_ERR_IO, "nodir");
  CHECK(!file_exists(p));
  /* The rename over a directory fails after the temporary is written. */
  path_in(p, sizeof p, "adir");
  CHECK(mkdir(p, 0755) == 0);
  CHECK_ERR(loom_checkpoint_save(g, p), LOOM_ERR_IO, "rename");
  CHECK(temporaries_of("adir", (long)getpid(), NULL, 0) == 0);
  CHECK_ERR(loom_checkpoint_load(g, p), LOOM_ERR_IO, "not a regular file");
  rmdir(p);
  CHECK_ERR(loom_checkpoint_load(g, path_in(p, sizeof p, "absent")), LOOM_ERR_IO, "absent");
  CHECK_ERR(loom_checkpoint_save(NULL, p), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_checkpoint_save(g, NULL), LOOM_ERR_INVALID, "path");
  CHECK_ERR(loom_checkpoint_load(NULL, p), LOOM_ERR_INVALID, "g");
  CHECK_ERR(loom_checkpoint_load(g, NULL), LOOM_ERR_INVALID, "path");
  CHECK(three_unchanged(g, v, 1));
  loom_graph_destroy(g);
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom_ckpt_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  TEST_RUN(round_trip_every_dtype);
  TEST_RUN(round_trip_from_strided_init);
  TEST_RUN(save_matches_reference_bytes);
  TEST_RUN(load_reference_layout);
  TEST_RUN(load_varied_header);
  TEST_RUN(unnamed_parameters_get_generated_names);
  TEST_RUN(duplicate_and_reserved_names);
  TEST_RUN(mismatched_graphs);
  TEST_RUN(malformed_headers);
  TEST_RUN(malformed_lengths);
  TEST_RUN(truncations_and_flips);
  TEST_RUN(load_fails_cleanly_at_every_allocation);
  TEST_RUN(save_fails_cleanly_at_every_allocation);
  TEST_RUN(save_fails_when_the_disk_fills);
  TEST_RUN(save_killed_midway_keeps_the_old_file);
  TEST_RUN(save_removes_stale_temporaries);
  TEST_RUN(saves_killed_by_sigkill_leave_nothing);
  TEST_RUN(save_errors_leave_no_file);
  remove_dir();
  return test_summary();
}
