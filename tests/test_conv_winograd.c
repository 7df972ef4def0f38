/* conv2d 3x3 stride 1 by Winograd's F(4x4, 3x3) and F(2x2, 3x3)
 * (kern_conv2d_winograd_f32): against conv2d's definition summed in
 * double, over odd and even output sizes (partial tiles), pads from 0 to 2
 * and asymmetric, ragged channel counts, several images, 1 and 2 threads
 * (blocks per task, and the phased form of small layers), weights
 * transformed per call and ahead; the epilogue sees every output exactly
 * once; layers it does not take are left alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "harness.h"
#include "kernels/conv.h"
#include "kernels/gemm.h"

typedef struct wcase {
  int64_t n, c, h, w, o, pads[4];
} wcase_t;

static float *rand_floats(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) p[i] = (float)test_rand_uniform(-1, 1);
  return p;
}

static loom_abi_conv2d_t geometry(const wcase_t *q) {
  return (loom_abi_conv2d_t){.n = q->n, .c = q->c, .h = q->h, .w = q->w, .o = q->o,
                             .kh = 3, .kw = 3, .ho = q->h + q->pads[0] + q->pads[2] - 2,
                             .wo = q->w + q->pads[1] + q->pads[3] - 2, .stride = {1, 1},
                             .pads = {q->pads[0], q->pads[1], q->pads[2], q->pads[3]},
                             .dilation = {1, 1}, .groups = 1};
}

/* Counts, per output element, the epilogue's visits, and maps y to 2y + 1
 * (which a second visit would apply twice). */
typedef struct visits {
  const loom_abi_conv2d_t *d;
  int *count;
} visits_t;

static void epilogue(void *ctx, int64_t item, float *tile, int64_t ldc, int64_t row0,
                     int64_t rows, int64_t col0, int64_t cols) {
  visits_t *v = ctx;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) {
      tile[r * ldc + j] = 2.0f * tile[r * ldc + j] + 1.0f;
      v->count[(item * v->d->o + row0 + r) * ldc + col0 + j]++;
    }
}

/* Outputs of d (epilogue applied) farther from 2 * conv + 1 than float
 * rounding of the sum allows, or not visited exactly once. */
static int count_wrong(const loom_abi_conv2d_t *d, const int *count) {
  int wrong = 0;
  int64_t positions = d->ho * d->wo;
  for (int64_t img = 0; img < d->n; img++)
    for (int64_t o = 0; o < d->o; o++)
      for (int64_t oy = 0; oy < d->ho; oy++)
        for (int64_t ox = 0; ox < d->wo; ox++) {
          double s = d->bias[o], abs_sum = fabs(s);
          for (int64_t ci = 0; ci < d->c; ci++)
            for (int64_t ky = 0; ky < 3; ky++)
              for (int64_t kx = 0; kx < 3; kx++) {
                int64_t iy = oy - d->pads[0] + ky, ix = ox - d->pads[1] + kx;
                if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
                double xy = (double)d->x[((img * d->c + ci) * d->h + iy) * d->w + ix] *
                            d->weight[((o * d->c + ci) * 3 + ky) * 3 + kx];
                s += xy;
                abs_sum += fabs(xy);
              }
          int64_t at = (img * d->o + o) * positions + oy * d->wo + ox;
          double got = d->y[at], want = 2.0 * s + 1.0;
          /* the transforms add up to 9 terms before and after the sum */
          wrong += count[at] != 1 ||
                   !(fabs(got - want) <= 2e-6 * (double)(9 * d->c + 16) * abs_sum + 1e-5);
        }
  return wrong;
}

static void check_case(const wcase_t *q, core_pool_t *pool, int ahead) {
  loom_abi_conv2d_t d = geometry(q);
  int64_t numel_y = q->n * q->o * d.ho * d.wo;
  float *x = rand_floats(q->n * q->c * q->h * q->w), *w = rand_floats(q->o * q->c * 9);
  float *bias = rand_floats(q->o), *y = rand_floats(numel_y);
  int *count = calloc((size_t)numel_y, sizeof *count);
  visits_t v = {&d, count};
  d.x = x;
  d.weight = w;
  d.bias = bias;
  d.y = y;
  d.epilogue = epilogue;
  d.epilogue_ctx = &v;
  void *packed = NULL;
  if (ahead) {
    CHECK(kern_conv2d_winograd_suits(&d));
    packed = aligned_alloc(64, (kern_conv2d_winograd_packed_bytes(&d) + 63) / 64 * 64);
    CHECK(kern_conv2d_winograd_pack_weight(&d, packed));
    d.weight_packed = packed;
  }
  CHECK(kern_conv2d_winograd_takes(&d));
  CHECK(kern_conv2d_winograd_f32(&d, pool));
  int wrong = count_wrong(&d, count);
  if (wrong)
    test_fail(__FILE__, __LINE__,
              "winograd n=%lld c=%lld %lldx%lld o=%lld pads %lld,%lld,%lld,%lld threads=%d "
              "%s: %d wrong",
              (long long)q->n, (long long)q->c, (long long)q->h, (long long)q->w,
              (long long)q->o, (long long)q->pads[0], (long long)q->pads[1],
              (long long)q->pads[2], (long long)q->pads[3], core_pool_threads(pool),
              ahead ? "packed ahead" : "per call", wrong);
  test_checks++;
  free(x);
  free(w);
  free(bias);
  free(y);
  free(count);
  free(packed);
}

/* n c h w o pads (top left bottom right); the per-call form needs 128
 * tiles a call. */
static const wcase_t per_call[] = {
    {1, 16, 32, 32, 16, {1, 1, 1, 1}},  /* 256 tiles, blocks of 64 */
    {2, 17, 15, 21, 19, {1, 1, 1, 1}},  /* odd outputs: partial tiles */
    {1, 24, 30, 26, 33, {0, 0, 0, 0}},  /* no padding: 28 x 24 */
    {3, 16, 14, 14, 20, {2, 1, 0, 2}},  /* asymmetric pads, 3 images */
    {1, 40, 60, 9, 24, {1, 1, 1, 1}},   /* narrow image: 5 tiles a row */
};

/* Packed ahead, fewer outputs: blocks of their own, or the phased form;
 * below 12x12 outputs, F(2x2). */
static const wcase_t ahead_only[] = {
    {1, 32, 14, 14, 32, {1, 1, 1, 1}}, /* 49 tiles */
    {1, 64, 7, 7, 40, {1, 1, 1, 1}},   /* 16 tiles: 7x7 outputs */
    {1, 16, 9, 11, 17, {1, 1, 1, 1}},  /* 30 tiles, odd sizes */
};

static void matches_definition(void) {
  test_seed(31);
  core_pool_t *pool = NULL;
  CHECK_OK(core_pool_create(2, &pool));
  for (size_t i = 0; i < sizeof per_call / sizeof *per_call; i++)
    for (int ahead = 0; ahead < 2; ahead++) {
      check_case(&per_call[i], NULL, ahead);
      check_case(&per_call[i], pool, ahead);
    }
  for (size_t i = 0; i < sizeof ahead_only / sizeof *ahead_only; i++) {
    check_case(&ahead_only[i], NULL, 1);
    check_case(&ahead_only[i], pool, 1);
  }
  core_pool_destroy(pool);
}

/* Layers the form does not take: nothing is written and 0 comes back. */
static void declines_other_layers(void) {
  test_seed(37);
  wcase_t q = {1, 16, 32, 32, 16, {1, 1, 1, 1}};
  loom_abi_conv2d_t base = geometry(&q);
  float *x = rand_floats(16 * 32 * 32), *w = rand_floats(16 * 16 * 9);
  float *y = calloc(16 * 32 * 32, sizeof *y);
  base.x = x;
  base.weight = w;
  base.y = y;
  loom_abi_conv2d_t stride2 = base, grouped = base, few_tiles = base, narrow = base,
                    wide = base;
  stride2.stride[0] = stride2.stride[1] = 2;
  stride2.ho = stride2.wo = 16;
  grouped.groups = 2;
  few_tiles.h = few_tiles.w = few_tiles.ho = few_tiles.wo = 12; /* 36 tiles, per call */
  narrow.c = 8;
  wide.c = 1024; /* U of 1024 x 1024 channel pairs would be 150 MB */
  wide.o = 1024;
  const loom_abi_conv2d_t *cases[] = {&stride2, &grouped, &few_tiles, &narrow, &wide};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    CHECK(!kern_conv2d_winograd_takes(cases[i]));
    CHECK(!kern_conv2d_winograd_f32(cases[i], NULL));
  }
  for (int64_t i = 0; i < 16 * 32 * 32; i++)
    if (y[i] != 0.0f) {
      CHECK(y[i] == 0.0f);
      break;
    }
  free(x);
  free(w);
  free(y);
}

int main(void) {
  TEST_RUN(matches_definition);
  TEST_RUN(declines_other_layers);
  return test_summary();
}
