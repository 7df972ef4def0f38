/* Direct convolution for layers with few input channels (a network's
 * first layer: ResNet's 7x7 stride-2 stem on 3 channels). Posed as a
 * GEMM, such a layer has a short sum (147 taps) over many positions,
 * and packing its B, a strided gather of every input pixel kh*kw/s^2
 * times, took a quarter of its time; here nothing is packed.
 *
 * A stride s is undone by splitting the zero-padded image into s x s
 * phases: plane (c, py, px) holds the pixels at rows py, py + s, ... and
 * columns px, px + s, .... Tap (c, ky, kx) then reads plane (c, ky % s,
 * kx % s) at row oy + ky / s and column ox + kx / s: flattened with the
 * planes' row length wq, output position p = oy * wq + ox reads offset
 * off[tap] + p, contiguous in p, as a stride-1 convolution does (the
 * direct kernel's idea, conv_direct.c, whose ISA this one follows). The
 * columns of each flattened row past wo are computed and dropped.
 *
 * A task splits the planes of a few output rows of one image, computes
 * the rows (its tile in conv_polyphase_tile.inc, per ISA), storing them
 * with the bias, then runs the epilogue on them while they are in
 * cache. */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/scratch.h"

enum {
  POLY_MAX_C = 8,          /* input channels taken: beyond, the GEMM's packing pays */
  POLY_MAX_STRIDE = 4,
  POLY_MAX_TAPS = 1024,    /* c * kh * kw */
  POLY_SPAN = 3072,        /* positions a task computes, at most about */
};
/* Most floats of a task's planes (4 MiB; their offsets are int32). */
static const int64_t POLY_MAX_PLANES = (int64_t)1 << 20;

typedef struct poly poly_t;

/* One instance of the tile: ob output channels by xw positions. */
typedef struct poly_isa {
  const char *name;
  int ob, xw;
  void (*tile)(const poly_t *g, const float *in, int64_t p0, int64_t o0, float *y,
               int64_t p_end);
} poly_isa_t;

/* One call's geometry, shared by its tasks. A task's planes hold the
 * rows its output rows read, from its first (plane row oy0). */
struct poly {
  const loom_abi_conv2d_t *d;
  const poly_isa_t *isa;
  int64_t sy, sx;       /* strides */
  int64_t wq;           /* a plane's row length */
  int64_t planes, plane; /* planes (c * sy * sx); floats a plane, slack included */
  int64_t taps, opad;   /* c * kh * kw; output channels padded to ob */
  int64_t rows, chunks; /* output rows a task; tasks an image */
  int32_t *off;         /* per tap: its plane's offset + (ky / sy) * wq + kx / sx */
  float *wt;            /* weights [tap][opad], zeros past o */
  atomic_int failed;    /* a task found no scratch */
};

#define PT_TARGET __attribute__((target("avx512f,fma")))
#define PT_VEC __m512
#define PT_W 16
#define PT_ZERO() _mm512_setzero_ps()
#define PT_LOADU(p) _mm512_loadu_ps(p)
#define PT_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define PT_BCAST(p) _mm512_set1_ps(*(p))
#define PT_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define PT_ADD(a, b) _mm512_add_ps((a), (b))
#define PT_STORE_FIRST(p, n, v) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1), (v))
#define PT_SHIFT_DOWN(v, n)                                                                  \
  _mm512_permutexvar_ps(                                                                     \
      _mm512_add_epi32(_mm512_set1_epi32((int)(n)),                                          \
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)), \
      (v))
#define PT_OB 8
#define PT_NV 3
#define PT_NAME tile_avx512
#include "backend/cpu/kernels/conv_polyphase_tile.inc"
static const poly_isa_t isa_avx512 = {"avx512", PT_OB, PT_NV * PT_W, tile_avx512};
#undef PT_TARGET
#undef PT_VEC
#undef PT_W
#undef PT_ZERO
#undef PT_LOADU
#undef PT_STOREU
#undef PT_BCAST
#undef PT_FMA
#undef PT_ADD
#undef PT_STORE_FIRST
#undef PT_SHIFT_DOWN
#undef PT_OB
#undef PT_NV
#undef PT_NAME

#define PT_TARGET __attribute__((target("avx2,fma")))
#define PT_VEC __m256
#define PT_W 8
#define PT_ZERO() _mm256_setzero_ps()
#define PT_LOADU(p) _mm256_loadu_ps(p)
#define PT_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define PT_BCAST(p) _mm256_broadcast_ss(p)
#define PT_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define PT_ADD(a, b) _mm256_add_ps((a), (b))
#define PT_IOTA8 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define PT_STORE_FIRST(p, n, v) \
  _mm256_maskstore_ps((p), _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), PT_IOTA8), (v))
#define PT_SHIFT_DOWN(v, n) \
  _mm256_permutevar8x32_ps((v), _mm256_add_epi32(_mm256_set1_epi32((int)(n)), PT_IOTA8))
#define PT_OB 6
#define PT_NV 2
#define PT_NAME tile_avx2
#include "backend/cpu/kernels/conv_polyphase_tile.inc"
static const poly_isa_t isa_avx2 = {"avx2", PT_OB, PT_NV * PT_W, tile_avx2};

static const poly_isa_t *const isas[] = {&isa_avx512, &isa_avx2};

/* The instance of the direct kernel's ISA (kern_conv_direct_isa), or NULL. */
static const poly_isa_t *isa_current(void) {
  const char *name = kern_conv_direct_isa();
  for (size_t i = 0; name && i < sizeof isas / sizeof *isas; i++)
    if (strcmp(isas[i]->name, name) == 0) return isas[i];
  return NULL;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The layers this kernel takes, with g's geometry set. */
static int suits(const loom_abi_conv2d_t *d, poly_t *g) {
  int64_t sy = d->stride[0], sx = d->stride[1];
  if (d->groups != 1 || d->dilation[0] != 1 || d->dilation[1] != 1 || sy < 1 || sx < 1 ||
      sy > POLY_MAX_STRIDE || sx > POLY_MAX_STRIDE || d->c < 1 || d->c > POLY_MAX_C ||
      d->o < 1 || d->n < 1 || d->ho < 1 || d->wo < 1 || d->kh < 1 || d->kw < 1 ||
      d->c * d->kh * d->kw > POLY_MAX_TAPS)
    return 0;
  if (!(g->isa = isa_current())) return 0;
  int64_t hp = d->h + d->pads[0] + d->pads[2], wp = d->w + d->pads[1] + d->pads[3];
  if ((hp - d->kh) / sy + 1 != d->ho || (wp - d->kw) / sx + 1 != d->wo || hp < d->kh ||
      wp < d->kw)
    return 0;
  g->sy = sy;
  g->sx = sx;
  g->wq = (wp + sx - 1) / sx;
  g->taps = d->c * d->kh * d->kw;
  g->opad = round_up(d->o, g->isa->ob);
  g->rows = POLY_SPAN / g->wq > 1 ? POLY_SPAN / g->wq : 1;
  g->rows = g->rows < d->ho ? g->rows : d->ho;
  g->chunks = (d->ho + g->rows - 1) / g->rows;
  g->planes = d->c * sy * sx;
  /* A task's last tile reads up to rows * wq + xw - 1 + the farthest
   * tap's (kh - 1) / sy rows and (kw - 1) / sx columns. */
  g->plane = round_up((g->rows + (d->kh - 1) / sy) * g->wq + (d->kw - 1) / sx + g->isa->xw, 16);
  return g->plane * g->planes <= POLY_MAX_PLANES;
}

int kern_conv2d_polyphase_suits(const loom_abi_conv2d_t *d) {
  poly_t g = {.d = d};
  return suits(d, &g);
}

/* dst[j] = row[j * s + x0] for j in [0, n): stride 2 (a stem's) a
 * constant, so that the compiler gathers it with shuffles. */
static void gather(const float *row, int64_t s, int64_t x0, int64_t n, float *dst) {
  if (s == 1) memcpy(dst, row + x0, (size_t)n * sizeof(float));
  else if (s == 2) for (int64_t j = 0; j < n; j++) dst[j] = row[2 * j + x0];
  else for (int64_t j = 0; j < n; j++) dst[j] = row[j * s + x0];
}

/* The planes of image img's output rows from oy0 on, into in: plane (c,
 * py, px) at index (c * sy + py) * sx + px holds the padded image's
 * pixels at rows py + s * i and columns px + s * j, from plane row oy0
 * on; zeros in the padding and the slack. */
static void split_planes(const poly_t *g, int64_t img, int64_t oy0, float *in) {
  const loom_abi_conv2d_t *d = g->d;
  int64_t rows = (g->plane - g->isa->xw) / g->wq; /* the whole rows a plane holds */
  for (int64_t q = 0; q < g->planes; q++) {
    int64_t c = q / (g->sy * g->sx), py = q / g->sx % g->sy, px = q % g->sx;
    /* Columns [j0, j1) read inside the image, from column j0 * sx + px - pad. */
    int64_t lead = d->pads[1] - px, j0 = lead > 0 ? (lead + g->sx - 1) / g->sx : 0;
    int64_t j1 = (d->w - 1 + lead) / g->sx + 1;
    j1 = j1 > g->wq ? g->wq : j1 < j0 ? j0 : j1;
    const float *src = d->x + (img * d->c + c) * d->h * d->w;
    float *dst = in + q * g->plane;
    for (int64_t i = 0; i < rows; i++, dst += g->wq) {
      int64_t iy = (oy0 + i) * g->sy + py - d->pads[0];
      if (iy < 0 || iy >= d->h) {
        memset(dst, 0, (size_t)g->wq * sizeof(float));
        continue;
      }
      memset(dst, 0, (size_t)j0 * sizeof(float));
      gather(src + iy * d->w, g->sx, j0 * g->sx - lead, j1 - j0, dst + j0);
      memset(dst + j1, 0, (size_t)(g->wq - j1) * sizeof(float));
    }
    memset(dst, 0, (size_t)(g->plane - rows * g->wq) * sizeof(float));
  }
}

/* Output rows [oy0, oy1) of image img, all channels, with the bias, from
 * the task's own planes (built here: planes split by whole images
 * across threads made each read half its rows from the other core's
 * cache, and the stem scale 1.6x on two); then the epilogue on them
 * while they are in cache. */
static void run_rows(const poly_t *g, int64_t img, int64_t oy0, int64_t oy1, float *in) {
  const loom_abi_conv2d_t *d = g->d;
  const poly_isa_t *isa = g->isa;
  int64_t p_end = (oy1 - oy0) * g->wq, positions = d->ho * d->wo;
  float *y = d->y + img * d->o * positions + oy0 * d->wo;
  split_planes(g, img, oy0, in);
  /* A group's weights stay in L1 while the planes stream from L2 (all of
   * ResNet's stem weights, 37 KB, and the planes a tile reads would not
   * fit L1 together). */
  for (int64_t o0 = 0; o0 < g->opad; o0 += isa->ob)
    for (int64_t p0 = 0; p0 < p_end; p0 += isa->xw) isa->tile(g, in, p0, o0, y, p_end);
  if (d->epilogue)
    d->epilogue(d->epilogue_ctx, img, y, positions, 0, d->o, oy0 * d->wo, (oy1 - oy0) * d->wo);
}

/* Tasks [begin, end): task i is rows chunk i % chunks of image i / chunks. */
static void run_chunks(void *ctx, int64_t begin, int64_t end) {
  poly_t *g = ctx;
  kern_scratch_t s = kern_scratch_claim((size_t)(g->planes * g->plane));
  if (!s.buf) {
    atomic_store(&g->failed, 1);
    return;
  }
  for (int64_t i = begin; i < end; i++) {
    int64_t oy0 = i % g->chunks * g->rows;
    run_rows(g, i / g->chunks, oy0, oy0 + g->rows < g->d->ho ? oy0 + g->rows : g->d->ho, s.buf);
  }
  kern_scratch_release(s);
}

/* Fewer rows a task where that makes the tasks a multiple of the threads
 * (ResNet's 112-row stem would go in 5 tasks of 26 rows, 3 of them on one
 * of two threads; it goes in 6 of 19). Tasks of up to POLY_SPAN positions
 * rather than 1024 run more tiles on a group's weights while they are in
 * L1: the stem alone 1.28-1.29 -> 1.23-1.26 ms at one thread; with the
 * balancing, 0.74-0.79 -> 0.68-0.77 ms at two, faster in 5 of 5 pairs. */
static void balance_tasks(poly_t *g, int threads) {
  const loom_abi_conv2d_t *d = g->d;
  int64_t chunks = g->chunks;
  while ((d->n * chunks) % threads && chunks < d->ho && chunks < g->chunks + threads) chunks++;
  if ((d->n * chunks) % threads) return;
  g->rows = (d->ho + chunks - 1) / chunks;
  g->chunks = (d->ho + g->rows - 1) / g->rows;
}

int kern_conv2d_polyphase_f32(const loom_abi_conv2d_t *d, core_pool_t *pool) {
  poly_t g = {.d = d};
  if (!suits(d, &g)) return 0;
  size_t off_floats = (size_t)(g.taps + 15) / 16 * 16;
  kern_scratch_t s = kern_scratch_claim(off_floats + (size_t)(g.taps * g.opad));
  if (!s.buf) return 0;
  g.off = (int32_t *)s.buf;
  g.wt = s.buf + off_floats;
  for (int64_t c = 0, t = 0; c < d->c; c++)
    for (int64_t ky = 0; ky < d->kh; ky++)
      for (int64_t kx = 0; kx < d->kw; kx++, t++) {
        int64_t q = (c * g.sy + ky % g.sy) * g.sx + kx % g.sx;
        g.off[t] = (int32_t)(q * g.plane + ky / g.sy * g.wq + kx / g.sx);
        for (int64_t o = 0; o < g.opad; o++)
          g.wt[t * g.opad + o] = o < d->o ? d->weight[o * g.taps + t] : 0.0f;
      }
  balance_tasks(&g, core_pool_threads(pool));
  /* Whichever threads take tasks, a replay finds their planes grown. */
  kern_scratch_reserve(core_pool_threads(pool), (size_t)(g.planes * g.plane));
  core_pool_for(pool, d->n * g.chunks, 1, run_chunks, &g);
  kern_scratch_release(s);
  return !atomic_load(&g.failed);
}
