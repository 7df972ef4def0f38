/* Direct convolution for layers with few output channels (LeNet's 6 and
 * 16). Posed as a GEMM, such a layer packs every image element kh*kw times
 * into B panels that then feed only o FMAs each: on LeNet packing took
 * half the run and the micro-kernel a fifth. Here nothing is replicated.
 *
 * Stride 1 and no dilation make a convolution one-dimensional over the
 * zero-padded image flattened row by row: output position p = oy * wp + ox
 * (wp the padded row length) reads tap (c, ky, kx) at input index
 * c * cs + p + ky * wp + kx, contiguous in p. A tile is up to 6 output
 * channels by 16 consecutive positions (12 accumulators, as the GEMM
 * micro-kernel): per tap two unaligned loads of the image and 6 broadcast
 * weights feed 12 FMAs. The kw - 1 columns past each output row are
 * computed and dropped when the rows are copied out. The tile is written
 * once (conv_direct_tile.inc) and built for AVX-512 (2 x 16 positions)
 * and AVX2 (2 x 8); the best the CPU runs is taken. */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"
#include "core/isa.h"

enum {
  OB = 6,                     /* output channels per tile */
  DIRECT_MAX_O = 16,          /* beyond this the GEMM's packing pays for itself */
  DIRECT_MAX_WEIGHTS = 4096,  /* floats of the transposed weights, on the stack */
  DIRECT_MAX_SCRATCH = 16384, /* floats of padded image + output rows a task */
};

typedef struct direct direct_t;
typedef void (*direct_tile_fn)(const direct_t *g, const float *in, float *out, int64_t o0,
                               int64_t p0, int64_t ob);

/* One instance of the tile: its ISA and positions per tile (xw). */
typedef struct direct_isa {
  const char *name;
  int (*supported)(void);
  int xw;
  direct_tile_fn tile;
} direct_isa_t;

/* One call's geometry, shared by its tasks. */
struct direct {
  const loom_abi_conv2d_t *d;
  const direct_isa_t *isa;
  const float *wt;    /* weights as [tap][o], tap = (c * kh + ky) * kw + kx */
  int64_t hp, wp;     /* padded image rows, row length */
  int64_t cs;         /* floats per padded channel, slack included */
  int64_t span;       /* positions computed per channel: ho * wp, to xw */
};

static const direct_isa_t *isa_current(void);

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The layers this kernel takes, with buffers that fit its limits. */
static int suits(const loom_abi_conv2d_t *d, direct_t *g) {
  if (d->groups != 1 || d->stride[0] != 1 || d->stride[1] != 1 || d->dilation[0] != 1 ||
      d->dilation[1] != 1 || d->o > DIRECT_MAX_O || d->n < 1 || d->ho < 1 || d->wo < 1)
    return 0;
  if (!(g->isa = isa_current())) return 0;
  g->hp = d->h + d->pads[0] + d->pads[2];
  g->wp = d->w + d->pads[1] + d->pads[3];
  if (g->hp - d->kh + 1 != d->ho || g->wp - d->kw + 1 != d->wo) return 0;
  g->span = round_up(d->ho * g->wp, g->isa->xw);
  /* the last tile reads up to span - 1 + (kh - 1) * wp + kw - 1 */
  g->cs = round_up(g->hp * g->wp + g->isa->xw + d->kw, 8);
  int64_t taps = d->c * d->kh * d->kw;
  return taps * d->o <= DIRECT_MAX_WEIGHTS &&
         d->c * g->cs + d->o * g->span <= DIRECT_MAX_SCRATCH;
}

/* The zero-padded image, channel after channel, cs floats apart. */
static void pad_image(const direct_t *g, const float *x, float *in) {
  const loom_abi_conv2d_t *d = g->d;
  memset(in, 0, (size_t)(d->c * g->cs) * sizeof(float));
  for (int64_t c = 0; c < d->c; c++)
    for (int64_t y = 0; y < d->h; y++)
      memcpy(in + c * g->cs + (y + d->pads[0]) * g->wp + d->pads[1],
             x + (c * d->h + y) * d->w, (size_t)d->w * sizeof(float));
}

#define DT_CAT2(a, b) a##b
#define DT_CAT(a, b) DT_CAT2(a, b)

#define DT_TARGET __attribute__((target("avx512f,fma")))
#define DT_VEC __m512
#define DT_W 16
#define DT_ZERO() _mm512_setzero_ps()
#define DT_LOADU(p) _mm512_loadu_ps(p)
#define DT_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define DT_BCAST(p) _mm512_set1_ps(*(p))
#define DT_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define DT_NAME tile_avx512
#include "backend/cpu/kernels/conv_direct_tile.inc"
#undef DT_TARGET
#undef DT_VEC
#undef DT_W
#undef DT_ZERO
#undef DT_LOADU
#undef DT_STOREU
#undef DT_BCAST
#undef DT_FMA
#undef DT_NAME

#define DT_TARGET __attribute__((target("avx2,fma")))
#define DT_VEC __m256
#define DT_W 8
#define DT_ZERO() _mm256_setzero_ps()
#define DT_LOADU(p) _mm256_loadu_ps(p)
#define DT_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define DT_BCAST(p) _mm256_broadcast_ss(p)
#define DT_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define DT_NAME tile_avx2
#include "backend/cpu/kernels/conv_direct_tile.inc"

static int avx512_supported(void) {
  return core_isa_allows(CORE_ISA_AVX512) && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("fma");
}

static int avx2_supported(void) {
  return core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");
}

/* By preference. */
static const direct_isa_t isas[] = {
    {"avx512", avx512_supported, 32, tile_avx512},
    {"avx2", avx2_supported, 16, tile_avx2},
};
enum { N_ISAS = sizeof isas / sizeof *isas };

/* The instance in use: the best the CPU runs, or the one a test forced
 * (NULL until first asked). */
static const direct_isa_t *_Atomic isa_active;

static const direct_isa_t *isa_best(void) {
  for (int i = 0; i < N_ISAS; i++)
    if (isas[i].supported()) return &isas[i];
  return NULL;
}

static const direct_isa_t *isa_current(void) {
  const direct_isa_t *isa = atomic_load_explicit(&isa_active, memory_order_acquire);
  if (!isa) {
    isa = isa_best();
    if (isa) atomic_store_explicit(&isa_active, isa, memory_order_release);
  }
  return isa;
}

int kern_conv_direct_force_isa(const char *name) {
  if (!name) {
    atomic_store(&isa_active, isa_best());
    return 1;
  }
  for (int i = 0; i < N_ISAS; i++)
    if (!strcmp(isas[i].name, name) && isas[i].supported()) {
      atomic_store(&isa_active, &isas[i]);
      return 1;
    }
  return 0;
}

const char *kern_conv_direct_isa(void) {
  const direct_isa_t *isa = isa_current();
  return isa ? isa->name : NULL;
}

/* Images [begin, end): pad, compute every tile, copy the valid columns of
 * each row out with the bias, then the epilogue on the whole image. */
static void run_images(void *ctx, int64_t begin, int64_t end) {
  const direct_t *g = ctx;
  const loom_abi_conv2d_t *d = g->d;
  _Alignas(64) float scratch[DIRECT_MAX_SCRATCH];
  float *in = scratch, *out = scratch + d->c * g->cs;
  int64_t positions = d->ho * d->wo;
  for (int64_t img = begin; img < end; img++) {
    pad_image(g, d->x + img * d->c * d->h * d->w, in);
    for (int64_t o0 = 0; o0 < d->o; o0 += OB)
      for (int64_t p0 = 0; p0 < g->span; p0 += g->isa->xw)
        g->isa->tile(g, in, out, o0, p0, d->o - o0 < OB ? d->o - o0 : OB);
    float *y = d->y + img * d->o * positions;
    for (int64_t o = 0; o < d->o; o++) {
      float bv = d->bias ? d->bias[o] : 0.0f;
      for (int64_t oy = 0; oy < d->ho; oy++) {
        const float *src = out + o * g->span + oy * g->wp;
        float *dst = y + o * positions + oy * d->wo;
        for (int64_t ox = 0; ox < d->wo; ox++) dst[ox] = src[ox] + bv;
      }
    }
    if (d->epilogue) d->epilogue(d->epilogue_ctx, img, y, positions, 0, d->o, 0, positions);
  }
}

int kern_conv2d_direct_suits(const loom_abi_conv2d_t *d) {
  direct_t g = {.d = d};
  return suits(d, &g);
}

int kern_conv2d_direct_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  direct_t g = {.d = d};
  if (!suits(d, &g)) return 0;
  int64_t taps = d->c * d->kh * d->kw;
  _Alignas(64) float wt[DIRECT_MAX_WEIGHTS];
  for (int64_t o = 0; o < d->o; o++)
    for (int64_t t = 0; t < taps; t++) wt[t * d->o + o] = d->weight[o * taps + t];
  g.wt = wt;
  core_pool_for(pool, d->n, 1, run_images, &g);
  return 1;
}
