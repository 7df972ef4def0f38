/* conv2d 3x3, stride 1, by Winograd's minimal filtering F(m x m, 3x3):
 * each m x m block of outputs (a tile) is A^T [U (.) V] A, where V = B^T
 * d B is the tile's (m + 2)^2 input patch transformed and U = G g G^T the
 * filter's. Summed over input channels, the element-wise products of the
 * (m + 2)^2 transformed positions xi are as many GEMMs, M[xi] = U[xi] (o x
 * c) @ V[xi] (c x tiles). F(2x2): 16 multiplies per 4 outputs and channel
 * where the direct form spends 36 (1/2.25 of the FMAs); F(4x4): 36 per
 * 16 (1/4), fastest where the image has room for its larger tiles. Which
 * one a layer runs (if any) is chosen from their measured error bounds
 * (kern_conv2d_winograd_tile).
 *
 * The tiles of an image are cut into blocks; one task transforms a
 * block's input (V, in L2), runs the GEMMs on it with the transformed
 * weights packed once per call (or once per executable for frozen
 * weights), and transforms the products back into Y with the bias and the
 * epilogue. The transforms themselves are in winograd_transforms.c. */
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/gemm_impl.h"
#include "backend/cpu/kernels/scratch.h"
#include "backend/cpu/kernels/winograd_impl.h"

/* Output positions a call must have to transform the weights itself: U
 * is 16/9 (or 4) of the weights, and a 14x14 layer of 256 channels spent
 * more on it than the GEMMs saved (3.6 ms against the implicit form's
 * 3.2). */
enum { PER_CALL_MIN_POSITIONS = 512 };

/* F(4x4) where both output sides have at least this many positions: a
 * 7x7 layer would run 4-column GEMMs on its 2x2 tiles. */
enum { F4_MIN_SIDE = 12 };

/* The tile side m fastest for d's outputs. */
static int fastest_tile(const loom_abi_conv2d_t *d) {
  return d->ho >= F4_MIN_SIDE && d->wo >= F4_MIN_SIDE ? 4 : 2;
}

static int64_t positions_xi(int m) { return (int64_t)(m + 2) * (m + 2); }

/* Most channel pairs (o x c) taken: U is 4 times the weights under
 * F(4x4), 37 MB at 512 x 512. */
enum { MAX_CHANNEL_PAIRS = 512 * 512 };

int kern_conv2d_winograd_suits(const loom_abi_conv2d_t *d) {
  /* The transforms cost per channel and tile what the GEMMs save only
   * with enough channels; below 7x7 outputs (16 tiles of F(2x2), 64
   * positions for 49), the transformed weights dominate. */
  return d->kh == 3 && d->kw == 3 && d->stride[0] == 1 && d->stride[1] == 1 &&
         d->dilation[0] == 1 && d->dilation[1] == 1 && d->groups == 1 && d->c >= 16 &&
         d->o >= 16 && d->o * d->c <= MAX_CHANNEL_PAIRS && d->ho >= 7 && d->wo >= 7 &&
         d->wo <= WINO_MAX_W;
}

/* ---- Accuracy ---------------------------------------------------------- */

/* Error bounds by input channels c = 16, 32, ..., 512 (row i: c = 16 <<
 * i): the largest error of an output against conv2d summed in double,
 * over the root sum of squares of its 9c products, measured on random
 * layers (normal and half-normal inputs, 7x7 to 56x56 outputs;
 * test_conv_winograd checks the order they imply, docs/contractions.md
 * has the figures). "direct" is a direct f32 sum in a direct-convolution
 * kernel's order (FMAs into one accumulator over channels and taps, as
 * oneDNN's kernels under PyTorch's CPU conv2d keep theirs in registers):
 * the smallest of its measurements. F(2x2) and F(4x4): the largest. The
 * transforms' roundings make Winograd's error less dependent on c than
 * a long sum's, so the ratio shrinks as c grows. */
enum { BOUND_ROWS = 6 };
static const double bound_direct[BOUND_ROWS] = {1.3e-6, 2.1e-6, 2.7e-6, 5.6e-6, 5.1e-6, 8.3e-6};
static const double bound_f2[BOUND_ROWS] = {1.1e-6, 1.0e-6, 1.6e-6, 2.2e-6, 2.9e-6, 2.8e-6};
static const double bound_f4[BOUND_ROWS] = {2.5e-5, 1.7e-5, 3.5e-5, 4.5e-5, 3.4e-5, 2.6e-5};

/* Whether F(m x m)'s bound for d's channels is within the direct sum's
 * (beyond 512 channels, the 512 row: F(4x4) stays out). */
static int accurate_enough(const loom_abi_conv2d_t *d, int m) {
  int row = 0;
  while (row + 1 < BOUND_ROWS && (int64_t)16 << (row + 1) <= d->c) row++;
  return (m == 2 ? bound_f2 : bound_f4)[row] <= bound_direct[row];
}

int kern_conv2d_winograd_tile(const loom_abi_conv2d_t *d, kern_conv_mode_t mode) {
  if (mode == KERN_CONV_PRECISE || !kern_conv2d_winograd_suits(d)) return 0;
  int m = fastest_tile(d);
  if (mode == KERN_CONV_FAST) return m;
  if (m == 4 && !accurate_enough(d, 4)) m = 2;
  return accurate_enough(d, m) ? m : 0;
}

/* ---- Blocks of tiles -------------------------------------------------- */

typedef struct wino {
  const loom_abi_conv2d_t *d;
  const wino_transforms_t *tf;
  const void *u_packed;        /* gemm_pack_a_ahead of U: o x c, xi groups */
  int64_t tx;                  /* tiles across an image */
  int64_t tiles, blocks, span; /* per image; columns a block (the last may have fewer) */
  int64_t images;              /* > 1: a block holds all tiles of this many images */
  gemm_b_layout_t v;           /* V's panels, span columns */
  atomic_int failed;           /* a task found no scratch */
} wino_t;

static int64_t v_stride(const wino_t *w) { return w->d->c * w->v.npad + WINO_XI_SKEW; }

/* Blocks in all: per image, or per group of images. */
static int64_t block_count(const wino_t *w) {
  return w->images > 1 ? (w->d->n + w->images - 1) / w->images : w->d->n * w->blocks;
}

/* Images (parts) in block i. */
static int64_t block_parts(const wino_t *w, int64_t i) {
  if (w->images == 1) return 1;
  int64_t left = w->d->n - i * w->images;
  return left < w->images ? left : w->images;
}

/* Part j of block i: a range of one image's tiles and its columns. */
static wino_block_t block_of(const wino_t *w, int64_t i, int64_t j) {
  if (w->images > 1)
    return (wino_block_t){w->d, w->tx, i * w->images + j, 0, w->tiles, j * w->tiles,
                          block_parts(w, i) * w->tiles, w->v.nr, w->v.kc, w->v.npad,
                          v_stride(w)};
  int64_t t0 = i % w->blocks * w->span;
  int64_t t1 = t0 + w->span < w->tiles ? t0 + w->span : w->tiles;
  return (wino_block_t){w->d, w->tx, i / w->blocks, t0, t1, 0, t1 - t0, w->v.nr, w->v.kc,
                        w->v.npad, v_stride(w)};
}

static int64_t wino_xi(const wino_t *w) { return positions_xi(w->tf->m); }

/* Floats of a block's V and M, with the slack the transforms read past. */
static size_t block_floats(const wino_t *w) {
  return (size_t)(wino_xi(w) * (v_stride(w) + w->d->o * w->span) + 2 * WINO_SLACK);
}

/* M, after V (of block_floats' buffer v). */
static float *block_m(const wino_t *w, float *v) {
  return v + wino_xi(w) * v_stride(w) + WINO_SLACK;
}

/* The epilogue over block b's positions, output channels [o0, o1): whole
 * output rows in one call, the columns of a partial tile row one output
 * row at a time (another task may still be writing the rest of it). */
static void finish_block(const wino_t *w, const wino_block_t *b, int64_t o0, int64_t o1) {
  const loom_abi_conv2d_t *d = w->d;
  int64_t m = w->tf->m, positions = d->ho * d->wo;
  float *y = d->y + b->img * d->o * positions;
  int64_t run0 = 0, run1 = 0; /* pending positions [run0, run1) */
  for (int64_t ty = b->t0 / w->tx; ty * w->tx < b->t1; ty++) {
    int64_t x0 = ty * w->tx < b->t0 ? b->t0 - ty * w->tx : 0;
    int64_t x1 = (ty + 1) * w->tx > b->t1 ? b->t1 - ty * w->tx : w->tx;
    int64_t c0 = m * x0, c1 = m * x1 < d->wo ? m * x1 : d->wo;
    for (int64_t r = m * ty; r < m * ty + m && r < d->ho; r++) {
      int64_t p0 = r * d->wo + c0, p1 = r * d->wo + c1;
      if (run1 > run0 && p0 == run1) {
        run1 = p1;
        continue;
      }
      if (run1 > run0)
        d->epilogue(d->epilogue_ctx, b->img, y + o0 * positions + run0, positions, o0, o1 - o0,
                    run0, run1 - run0);
      run0 = p0;
      run1 = p1;
    }
  }
  if (run1 > run0)
    d->epilogue(d->epilogue_ctx, b->img, y + o0 * positions + run0, positions, o0, o1 - o0,
                run0, run1 - run0);
}

/* The products of block b: M[xi] = U[xi] @ V[xi], V read as packed. */
static void block_gemms(const wino_t *w, const wino_block_t *b, const float *v, float *m,
                        core_pool_t *pool) {
  const loom_abi_conv2d_t *d = w->d;
  gemm_problem_t p = {.m = d->o, .n = b->n, .k = d->c, .batch = wino_xi(w), .groups = wino_xi(w),
                      .lda = d->c, .sa = {0, d->o * d->c},
                      .b = v, .sb = {0, b->xi_stride}, .pack_b = gemm_pack_b_packed,
                      .b_packed = v, .b_npad = b->npad, .b_kc = b->kc,
                      .c = m, .ldc = b->n, .sc = {0, d->o * b->n}};
  gemm_use_packed_a(&p, w->u_packed);
  gemm_run(&p, pool);
}

static void run_output(const wino_t *w, const wino_block_t *b, int64_t o0, int64_t o1,
                       const float *m) {
  w->tf->output(b, o0, o1, m);
  if (w->d->epilogue) finish_block(w, b, o0, o1);
}

/* One task computes a block whole. */
static void run_block(const wino_t *w, int64_t i, float *v, float *m) {
  int64_t parts = block_parts(w, i);
  for (int64_t j = 0; j < parts; j++) {
    wino_block_t b = block_of(w, i, j);
    w->tf->input(&b, 0, w->d->c, v);
  }
  wino_block_t whole = block_of(w, i, 0); /* the GEMMs see all parts' columns */
  block_gemms(w, &whole, v, m, NULL);
  for (int64_t j = 0; j < parts; j++) {
    wino_block_t b = block_of(w, i, j);
    run_output(w, &b, 0, w->d->o, m);
  }
}

static void wino_body(void *ctx, int64_t begin, int64_t end) {
  wino_t *w = ctx;
  kern_scratch_t s = kern_scratch_claim(block_floats(w));
  if (!s.buf) {
    atomic_store(&w->failed, 1);
    return;
  }
  float *m = block_m(w, s.buf);
  for (int64_t i = begin; i < end; i++) run_block(w, i, s.buf, m);
  kern_scratch_release(s);
}

/* Too few tiles to give each thread blocks of its own (a 7x7 layer has
 * 16): each block runs in three steps, each split over the pool, by
 * input channels, by the GEMMs and by output channels. */
typedef struct phased {
  const wino_t *w;
  wino_block_t b;
  float *v, *m;
} phased_t;

static void phased_input(void *ctx, int64_t c0, int64_t c1) {
  phased_t *ph = ctx;
  ph->w->tf->input(&ph->b, c0, c1, ph->v);
}

static void phased_output(void *ctx, int64_t o0, int64_t o1) {
  phased_t *ph = ctx;
  run_output(ph->w, &ph->b, o0, o1, ph->m);
}

static int run_phased(const wino_t *w, core_pool_t *pool) {
  const loom_abi_conv2d_t *d = w->d;
  kern_scratch_t s = kern_scratch_claim(block_floats(w));
  if (!s.buf) return 0;
  phased_t ph = {.w = w, .v = s.buf};
  ph.m = block_m(w, ph.v);
  for (int64_t i = 0; i < d->n * w->blocks; i++) {
    ph.b = block_of(w, i, 0);
    core_pool_for(pool, d->c, 8, phased_input, &ph);
    block_gemms(w, &ph.b, ph.v, ph.m, pool);
    core_pool_for(pool, d->o, 8, phased_output, &ph);
  }
  kern_scratch_release(s);
  return 1;
}

/* ---- Weights ---------------------------------------------------------- */

/* The filters of d transformed in `parts` ranges of output channels,
 * each with taps of its own after U. */
typedef struct filters_job {
  const loom_abi_conv2d_t *d;
  const wino_transforms_t *tf;
  float *u;
  int64_t parts;
  int flipped; /* d's weights are those of the layer d is the input gradient of */
} filters_job_t;

static int64_t taps_floats(const loom_abi_conv2d_t *d) { return 9 * d->c + WINO_SLACK; }

static void filters_parts(void *ctx, int64_t i0, int64_t i1) {
  const filters_job_t *j = ctx;
  const loom_abi_conv2d_t *d = j->d;
  float *taps = j->u + positions_xi(j->tf->m) * d->o * d->c;
  for (int64_t i = i0; i < i1; i++)
    j->tf->filters(d->weight, d->o, d->c, i * d->o / j->parts, (i + 1) * d->o / j->parts,
                   j->flipped, taps + i * taps_floats(d), j->u);
}

/* U for d, packed, into dst (kern_conv2d_winograd_packed_bytes), over the
 * pool (a training step transforms its changing weights in every call);
 * u: scratch of u_floats(d, m, threads), the raw U and the filters'
 * taps. */
static void pack_u(const loom_abi_conv2d_t *d, int m, int flipped, float *u, void *dst,
                   core_pool_t *pool) {
  const wino_transforms_t *tf = wino_transforms(m);
  filters_job_t j = {d, tf, u, core_pool_threads(pool), flipped};
  core_pool_for(pool, j.parts, 1, filters_parts, &j);
  int64_t xi = positions_xi(tf->m);
  gemm_pack_a_ahead(u, d->c, d->o * d->c, d->o, d->c, xi, dst, pool);
}

static size_t u_floats(const loom_abi_conv2d_t *d, int m, int threads) {
  return (size_t)(positions_xi(m) * d->o * d->c + threads * taps_floats(d) + WINO_SLACK);
}

size_t kern_conv2d_winograd_packed_bytes(const loom_abi_conv2d_t *d, int m) {
  return gemm_packed_a_bytes(d->o, d->c, positions_xi(m));
}

int kern_conv2d_winograd_pack_weight(const loom_abi_conv2d_t *d, int m, void *dst) {
  float *u = malloc(u_floats(d, m, 1) * sizeof(float));
  if (!u) return 0;
  pack_u(d, m, 0, u, dst, NULL);
  free(u);
  return 1;
}

/* Whether weight_packed holds U for d (else it is NULL or the implicit
 * form's panels). */
static int packed_for_winograd(const loom_abi_conv2d_t *d, int m) {
  int64_t xi = positions_xi(m);
  gemm_problem_t probe = {.m = d->o, .k = d->c, .batch = xi, .groups = xi};
  gemm_use_packed_a(&probe, d->weight_packed);
  return probe.a_packed != NULL;
}

/* Whether _f32 runs F(m x m) for d: weights packed transformed, or none. */
static int runs(const loom_abi_conv2d_t *d, int m) {
  return (m == 2 || m == 4) && kern_conv2d_winograd_suits(d) &&
         (!d->weight_packed || packed_for_winograd(d, m));
}

int kern_conv2d_winograd_takes(const loom_abi_conv2d_t *d, int m) {
  /* The implicit form's packed weights beat transforming them per call. */
  return runs(d, m) && (d->weight_packed || d->n * d->ho * d->wo >= PER_CALL_MIN_POSITIONS);
}

/* The busiest thread's work when n images of `tiles` go in blocks of span
 * tiles, each block in turn to the thread free first (as the pool hands
 * them out): per block, its tiles (the transforms) and its columns
 * padded to nr (the GEMMs). */
static int64_t plan_cost(int64_t n, int64_t tiles, int64_t span, int64_t nr, int threads) {
  enum { MOST_THREADS = 64 };
  int64_t load[MOST_THREADS] = {0}, worst = 0;
  if (threads > MOST_THREADS) threads = MOST_THREADS;
  for (int64_t i = 0; i < n; i++)
    for (int64_t t0 = 0; t0 < tiles; t0 += span) {
      int64_t cols = tiles - t0 < span ? tiles - t0 : span, free = 0;
      for (int t = 1; t < threads; t++)
        if (load[t] < load[free]) free = t;
      load[free] += cols + (cols + nr - 1) / nr * nr;
      worst = load[free] > worst ? load[free] : worst;
    }
  return worst;
}

/* span, or a multiple of nr no larger than `most` where that costs less:
 * full panels leave the GEMMs no padded columns and the transforms none to
 * zero (a 56x56 layer's 28-tile rows in blocks of 56 padded each to 64). */
static int64_t panel_span(int64_t n, int64_t tiles, int64_t span, int64_t most, int64_t nr,
                          int threads) {
  int64_t best = span, cost = plan_cost(n, tiles, span, nr, threads);
  for (int64_t s = nr; s <= most; s += nr) {
    int64_t c = plan_cost(n, tiles, s, nr, threads);
    if (c < cost || (c == cost && best % nr != 0)) {
      best = s;
      cost = c;
    }
  }
  return best;
}

/* A block's V and M together within this many bytes, where they stay in
 * L2 while U streams past: at two threads, 49 tiles of a 128-channel
 * 28x28 layer (1 MiB) took 2.4 times as long per tile in the input
 * transform as 28 tiles did; the layer ran 0.48-0.49 ms in blocks of 49,
 * 0.44-0.45 in blocks of 25. */
enum { BLOCK_BYTES = 512 * 1024 };

/* Most tiles a block of `most` may hold within BLOCK_BYTES, but never
 * fewer than one panel of the GEMM's columns (fewer would be padded to
 * it). */
static int64_t block_fit(const loom_abi_conv2d_t *d, int m, int64_t most) {
  int64_t fit = BLOCK_BYTES / (positions_xi(m) * (d->c + d->o) * (int64_t)sizeof(float));
  int64_t nr = gemm_b_layout(d->c, most).nr;
  fit = fit / nr * nr;
  if (fit < nr) fit = nr;
  return fit < most ? fit : most;
}

/* conv2d by F(m x m); flipped: d's weights are those of the layer whose
 * input gradient d is (pack_u), never packed ahead. */
static int run_winograd(const loom_abi_conv2d_t *d, int m, int flipped, core_pool_t *pool) {
  if (!runs(d, m)) return 0;
  wino_t w = {.d = d, .tf = wino_transforms(m), .tx = (d->wo + m - 1) / m, .images = 1};
  w.tiles = w.tx * ((d->ho + m - 1) / m);
  /* About 64 tiles of F(2x2) a block, 32 of F(4x4) (V and M of 64
   * channels: 2 x 256 or 2 x 288 KiB), fewer where they would not fit
   * (block_fit), at least two blocks a thread of at least half that;
   * else blocks of `most`, each split over the pool (which splits V and
   * M with it). Blocks come in a multiple of the threads where that costs
   * little: 13 blocks of a 56x56 image kept one of two threads idle for
   * a block's time; 14 do not. */
  int64_t most = m == 2 ? 64 : 32, fit = block_fit(d, m, most);
  int threads = core_pool_threads(pool);
  int64_t blocks = (w.tiles + fit - 1) / fit;
  int phased = 0;
  if (threads > 1 && d->n * blocks < 2 * threads) {
    int64_t want = (2 * threads + d->n - 1) / d->n;
    if (w.tiles / want >= fit / 2) {
      blocks = want;
    } else {
      phased = 1;
      blocks = (w.tiles + most - 1) / most;
    }
  } else if (threads > 1) {
    int64_t even = blocks;
    while ((d->n * even) % threads && even < blocks + threads) even++;
    if ((d->n * even) % threads == 0 && w.tiles / even >= fit / 2) blocks = even;
  }
  w.span = (w.tiles + blocks - 1) / blocks;
  int64_t nr = gemm_b_layout(d->c, w.span).nr;
  if (!phased) w.span = panel_span(d->n, w.tiles, w.span, fit, nr, threads);
  w.blocks = (w.tiles + w.span - 1) / w.span;
  /* Images of at most half a block's tiles go several to a block, as many
   * as fit while each thread still gets one: a block of one 8x8 image (16
   * tiles of F(2x2)) read all of U for 16 GEMM columns (an 8 x 128 x 8 x 8
   * input gradient at one thread: 1.0 ms, 0.7 with four images a block). */
  if (w.tiles * 2 <= most && d->n > 1) {
    int64_t images = most / w.tiles < d->n ? most / w.tiles : d->n;
    while (images > 1 && (d->n + images - 1) / images < threads) images--;
    if (images > 1) {
      w.images = images;
      w.span = images * w.tiles;
      phased = 0;
    }
  }
  w.v = gemm_b_layout(d->c, w.span);
  kern_scratch_t u = {-1, NULL};
  w.u_packed = d->weight_packed;
  if (!packed_for_winograd(d, m)) {
    /* U, after the packed panels, transformed and packed for this call. */
    size_t packed = (kern_conv2d_winograd_packed_bytes(d, m) + 63) / 64 * 64 / sizeof(float);
    u = kern_scratch_claim(packed + u_floats(d, m, threads));
    if (!u.buf) return 0;
    pack_u(d, m, flipped, u.buf + packed, u.buf, pool);
    w.u_packed = u.buf;
  }
  int done = 1;
  if (phased) {
    done = run_phased(&w, pool);
  } else {
    /* Whichever threads take blocks, a replay finds their buffers grown. */
    kern_scratch_reserve(threads, block_floats(&w));
    core_pool_for(pool, block_count(&w), 1, wino_body, &w);
  }
  kern_scratch_release(u);
  return done && !atomic_load(&w.failed);
}

int kern_conv2d_winograd_f32(const loom_abi_conv2d_t *d, int m, core_pool_t *pool) {
  return run_winograd(d, m, 0, pool);
}

/* ---- conv2d's input gradient ---------------------------------------------- */

/* dX of a 3x3 stride-1 conv2d with pads p is the stride-1 convolution of
 * dY, padded by 2 - p, with the filters flipped and their channels
 * swapped: W'[ci][oc][ky][kx] = W[oc][ci][2 - ky][2 - kx]. */
static int igrad_shape(const loom_abi_conv2d_t *d) {
  if (d->kh != 3 || d->kw != 3 || d->stride[0] != 1 || d->stride[1] != 1 ||
      d->dilation[0] != 1 || d->dilation[1] != 1 || d->groups != 1)
    return 0;
  for (int i = 0; i < 4; i++)
    if (d->pads[i] > 2) return 0;
  return 1;
}

/* The forward layer that computes d's input gradient (its weights
 * unset). */
static loom_abi_conv2d_t transposed(const loom_abi_conv2d_t *d) {
  return (loom_abi_conv2d_t){
      .n = d->n, .c = d->o, .h = d->ho, .w = d->wo, .o = d->c, .kh = 3, .kw = 3,
      .ho = d->h, .wo = d->w, .stride = {1, 1},
      .pads = {2 - d->pads[0], 2 - d->pads[1], 2 - d->pads[2], 2 - d->pads[3]},
      .dilation = {1, 1}, .groups = 1, .x = d->y, .bias = d->bias, .y = (float *)d->x,
      .epilogue = d->epilogue, .epilogue_ctx = d->epilogue_ctx};
}

int kern_conv2d_input_grad_winograd_tile(const loom_abi_conv2d_t *d, kern_conv_mode_t mode) {
  if (!igrad_shape(d)) return 0;
  loom_abi_conv2d_t t = transposed(d);
  return kern_conv2d_winograd_tile(&t, mode);
}

int kern_conv2d_input_grad_winograd_takes(const loom_abi_conv2d_t *d, int m) {
  if (!igrad_shape(d)) return 0;
  loom_abi_conv2d_t t = transposed(d);
  return kern_conv2d_winograd_takes(&t, m);
}

int kern_conv2d_input_grad_winograd_f32(const loom_abi_conv2d_t *d, int m, core_pool_t *pool) {
  if (!igrad_shape(d)) return 0;
  loom_abi_conv2d_t t = transposed(d);
  t.weight = d->weight; /* read flipped and transposed by the filter transform */
  return run_winograd(&t, m, 1, pool);
}
