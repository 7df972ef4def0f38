/* Weights packed once instead of at every run. Frozen weights (constants,
 * and with freeze_params the parameters that no assign writes) are packed
 * at build into the program's packed_b and packed_w, which generated
 * contractions read through rt->packed_b and rt->packed_w (c_contract.c).
 * Weights a caller declares stable for an epoch (be_stable_t: a trace's
 * parameters, bound as inputs) are packed into a cache that outlives the
 * run, and lent to the run. */
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/kernels/gemm.h"
#include "core/alloc.h"
#include "core/status.h"

static loom_status_t value_shape(const be_request_t *req, int32_t v, int64_t *shape) {
  const ir_type_t *t = &req->graph->values[v].type;
  for (int d = 0; d < t->rank; d++)
    LOOM_TRY(ir_dim_eval(req->graph, t->dims[d], req->syms, &shape[d]));
  return LOOM_OK;
}

/* Whether value v keeps its contents for the program's life: a constant,
 * or (frozen) a parameter that no assign writes (assigned[v]). */
static bool is_frozen(const loom_graph_t *g, const bool *assigned, int32_t v) {
  if (g->values[v].kind == IR_VALUE_CONST) return true;
  return g->values[v].kind == IR_VALUE_PARAM && !assigned[v];
}

/* The frozen rank-2 B operand of matmul n, packed once into
 * p->packed_b[2 * slot + trans_b]. */
static loom_status_t prepack_matmul_b(be_program_t *p, const be_request_t *req,
                                      const bool *assigned, const ir_node_t *n) {
  const loom_graph_t *g = req->graph;
  int32_t b = n->in[1];
  int64_t shape[2];
  if (g->values[b].type.rank != 2 || g->values[b].type.dtype != LOOM_F32 ||
      !is_frozen(g, assigned, b) || value_shape(req, b, shape) != LOOM_OK)
    return LOOM_OK;
  int tb = ir_attr_int(n->attrs, "trans_b", 0) != 0;
  int64_t slot = req->slot_of_value[b], k = shape[tb], cols = shape[1 - tb];
  if (slot < 0 || p->packed_b[2 * slot + tb]) return LOOM_OK;
  void *buf = core_aligned_alloc(kern_gemm_packed_bytes(k, cols));
  if (!buf) return loom_fail(LOOM_ERR_NOMEM, "out of memory packing a %lldx%lld weight",
                             (long long)shape[0], (long long)shape[1]);
  kern_gemm_pack_b(req->slots[slot], shape[1], tb, k, cols, buf);
  p->packed_b[2 * slot + tb] = buf;
  return LOOM_OK;
}

/* The frozen f32 weight (o, c/groups, kh, kw) of conv2d n, packed once
 * into p->packed_w[slot] in the form its algorithm takes (its GEMM's A
 * panels, or Winograd's transformed weights). */
static loom_status_t prepack_conv_weight(be_program_t *p, const be_request_t *req,
                                         const bool *assigned, const ir_node_t *n) {
  const loom_graph_t *g = req->graph;
  int32_t w = n->in[1];
  int64_t s[4], sx[4], sy[4], groups = ir_attr_int(n->attrs, "groups", 1);
  if (g->values[w].type.rank != 4 || g->values[w].type.dtype != LOOM_F32 ||
      !is_frozen(g, assigned, w) || value_shape(req, w, s) != LOOM_OK ||
      value_shape(req, n->in[0], sx) != LOOM_OK || value_shape(req, n->out[0], sy) != LOOM_OK ||
      groups < 1 || s[0] % groups)
    return LOOM_OK;
  int64_t slot = req->slot_of_value[w];
  if (slot < 0 || p->packed_w[slot]) return LOOM_OK;
  loom_abi_conv2d_t d = {.n = sx[0], .c = sx[1], .h = sx[2], .w = sx[3], .o = s[0],
                         .kh = s[2], .kw = s[3], .ho = sy[2], .wo = sy[3], .groups = groups,
                         .weight = req->slots[slot]};
  ir_attr_ints_or(n->attrs, "stride", 2, 1, d.stride);
  ir_attr_ints_or(n->attrs, "pads", 4, 0, d.pads);
  ir_attr_ints_or(n->attrs, "dilation", 2, 1, d.dilation);
  /* A batch known only at run time has a nominal size here: the choice is
   * timed for one image (an inference's batch) instead, and another batch
   * times its own at its first run. */
  if (req->sym_runtime && !ir_dim_is_const(g->values[n->in[0]].type.dims[0])) d.n = 1;
  /* Packed for the algorithm the layer will run, timed now if need be. */
  void *buf = NULL;
  kern_conv_algo_t algo = kern_conv2d_algo_packing(&d, p->conv_mode, p->pool, &buf);
  if (!buf && (buf = core_aligned_alloc(kern_conv2d_packed_bytes(&d, algo))) &&
      !kern_conv2d_pack_weight(&d, algo, buf)) {
    core_free(buf);
    buf = NULL;
  }
  if (!buf) {
    return loom_fail(LOOM_ERR_NOMEM, "out of memory packing a %lldx%lldx%lldx%lld conv2d weight",
                     (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3]);
  }
  p->packed_w[slot] = buf;
  return LOOM_OK;
}

/* The B operand of matmuls (packed_b[2 * slot + trans_b]) and conv2d
 * weights (packed_w[slot]) of the wanted generated contractions. */
loom_status_t cpu_prepack_frozen(be_program_t *p, const be_request_t *req) {
  const loom_graph_t *g = req->graph;
  p->packed_b = core_calloc((size_t)p->n_slots * 2 + 1, sizeof *p->packed_b);
  p->packed_w = core_calloc((size_t)p->n_slots + 1, sizeof *p->packed_w);
  if (!p->packed_b || !p->packed_w)
    return loom_fail(LOOM_ERR_NOMEM, "out of memory packing weights");
  bool *assigned = core_calloc((size_t)g->n_values + 1, sizeof *assigned);
  if (!assigned) return loom_fail(LOOM_ERR_NOMEM, "out of memory packing weights");
  for (int64_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == IR_OP_ASSIGN) assigned[g->nodes[i].in[0]] = true;
  loom_status_t s = LOOM_OK;
  for (int gi = 0; gi < p->plan->n_groups && s == LOOM_OK; gi++) {
    const fuse_group_t *grp = &p->plan->groups[gi];
    if (!p->kernel[gi].fn || grp->kind != FUSE_CONTRACTION || grp->anchor < 0) continue;
    const ir_node_t *n = &g->nodes[grp->anchor];
    if (n->op == IR_OP_MATMUL) s = prepack_matmul_b(p, req, assigned, n);
    else if (n->op == IR_OP_CONV2D) s = prepack_conv_weight(p, req, assigned, n);
  }
  core_free(assigned);
  return s;
}

void cpu_prepack_free(be_program_t *p) {
  for (int i = 0; p->packed_b && i < 2 * p->n_slots; i++) core_free(p->packed_b[i]);
  core_free(p->packed_b);
  for (int i = 0; p->packed_w && i < p->n_slots; i++) core_free(p->packed_w[i]);
  core_free(p->packed_w);
  p->packed_b = NULL;
  p->packed_w = NULL;
}

/* ---- Stable weights: packed once per epoch ----------------------------------
 * A traced RNN runs its cell's executables once per time step, and each of
 * their GEMMs would pack the same weight as its B operand again (W_hh: 64K
 * floats, in the forward and in the backward, the packing taking as long
 * as the product at 16 rows). The caller says which slots hold storage
 * unchanged while an epoch lasts; each (storage, layout) is packed once
 * per epoch into the cache, and lent to the run through its
 * abi.packed_b. */

/* A stable matrix packed as a GEMM's B. */
typedef struct cpu_pack {
  const void *data; /* the storage it was packed from */
  int64_t k, n;
  int trans_b;
  uint64_t epoch;   /* the epoch it was packed in */
  void *buf;        /* kern_gemm_pack_b's layout */
  size_t bytes;     /* buf's size */
} cpu_pack_t;

/* At most this many packs lent to one run: fresh packs take the cache's
 * entries round robin, so none a run holds is taken back during it. */
#define CPU_PACKS 16
_Static_assert(CPU_PACKS == sizeof ((be_run_t *)0)->lent / sizeof(int32_t),
               "a run lends at most CPU_PACKS packs");

struct be_cache {
  cpu_pack_t pack[CPU_PACKS];
  int next; /* the entry to take next */
};

be_cache_t *cpu_cache_new(void) { return core_calloc(1, sizeof(be_cache_t)); }

void cpu_cache_free(be_cache_t *c) {
  if (!c) return;
  for (int i = 0; i < CPU_PACKS; i++) core_free(c->pack[i].buf);
  core_free(c);
}

/* The matrix at data (k x n, or n x k when tb; ld columns) packed as a
 * GEMM's B, packed now unless this epoch did it. */
static loom_status_t packed_of(be_cache_t *c, uint64_t epoch, const float *data, int64_t ld,
                               int64_t k, int64_t n, int tb, void **out) {
  cpu_pack_t *p = NULL;
  for (int i = 0; i < CPU_PACKS && !p; i++) {
    cpu_pack_t *q = &c->pack[i];
    if (q->buf && q->data == data && q->k == k && q->n == n && q->trans_b == tb) p = q;
  }
  if (!p) {
    p = &c->pack[c->next];
    c->next = (c->next + 1) % CPU_PACKS;
    size_t bytes = kern_gemm_packed_bytes(k, n);
    if (p->bytes < bytes) {
      core_free(p->buf);
      p->buf = core_aligned_alloc(bytes);
      p->bytes = p->buf ? bytes : 0;
      if (!p->buf)
        return loom_fail(LOOM_ERR_NOMEM, "out of memory packing a %lldx%lld weight",
                         (long long)(tb ? n : k), (long long)(tb ? k : n));
    }
    *p = (cpu_pack_t){.data = data, .k = k, .n = n, .trans_b = tb, .epoch = epoch - 1,
                      .buf = p->buf, .bytes = p->bytes};
  }
  if (p->epoch != epoch) {
    kern_gemm_pack_b(data, ld, tb, k, n, p->buf);
    p->epoch = epoch;
  }
  *out = p->buf;
  return LOOM_OK;
}

/* The B operand's value of generated matmul group gi, or -1. */
static int32_t matmul_b(const be_program_t *p, int gi) {
  const fuse_group_t *grp = &p->plan->groups[gi];
  if (!p->kernel[gi].fn || grp->kind != FUSE_CONTRACTION || grp->anchor < 0) return -1;
  const ir_node_t *n = &p->graph->nodes[grp->anchor];
  return n->op == IR_OP_MATMUL ? n->in[1] : -1;
}

bool cpu_stable_use(const be_program_t *p, int32_t slot) {
  if (p->packed_b || !p->module) return false;
  for (int gi = 0; gi < p->plan->n_groups; gi++) {
    int32_t b = matmul_b(p, gi);
    if (b < 0 || p->slot_of_value[b] != slot) continue;
    const ir_value_t *v = &p->graph->values[b];
    if (v->kind == IR_VALUE_INPUT && v->type.rank == 2 && v->type.dtype == LOOM_F32) return true;
  }
  return false;
}

/* The B operand of generated matmul group gi when it is an f32 matrix
 * bound as an input that st marks stable: its slot, layout and shape. */
static bool packable(const be_program_t *p, int gi, const be_stable_t *st, int32_t *slot,
                     int *tb, int64_t *shape) {
  int32_t b = matmul_b(p, gi);
  if (b < 0) return false;
  const ir_node_t *n = &p->graph->nodes[p->plan->groups[gi].anchor];
  const ir_value_t *v = &p->graph->values[b];
  *slot = p->slot_of_value[b];
  if (v->kind != IR_VALUE_INPUT || *slot < 0 || !st->slot[*slot] || v->type.rank != 2 ||
      v->type.dtype != LOOM_F32)
    return false;
  *tb = ir_attr_int(n->attrs, "trans_b", 0) != 0;
  for (int d = 0; d < 2; d++)
    if (ir_dim_eval(p->graph, v->type.dims[d], p->syms, &shape[d]) != LOOM_OK) return false;
  return true;
}

/* Takes back what the last stable run was lent. */
static void stable_end(be_program_t *p, be_run_t *run) {
  for (int i = 0; i < run->n_lent; i++) run->lent_b[run->lent[i]] = NULL;
  run->n_lent = 0;
  run->abi.packed_b = p->abi.packed_b;
}

loom_status_t cpu_stable(be_program_t *p, be_run_t *run, void *const *slots,
                         const be_stable_t *st) {
  stable_end(p, run);
  /* Frozen weights are packed for good already. */
  if (!st || !st->cache || p->packed_b || !p->module) return LOOM_OK;
  if (!run->lent_b) {
    run->lent_b = core_calloc((size_t)p->n_slots * 2 + 1, sizeof *run->lent_b);
    if (!run->lent_b) return LOOM_OK; /* the GEMMs pack for themselves */
  }
  for (int gi = 0; gi < p->plan->n_groups && run->n_lent < CPU_PACKS; gi++) {
    int32_t slot;
    int tb;
    int64_t shape[2];
    if (!packable(p, gi, st, &slot, &tb, shape) || !slots[slot] || run->lent_b[2 * slot + tb])
      continue;
    void *buf = NULL;
    if (packed_of(st->cache, st->epoch, slots[slot], shape[1], shape[tb], shape[1 - tb], tb,
                  &buf) != LOOM_OK) {
      loom_clear_error(); /* the GEMM packs for itself */
      break;
    }
    run->lent[run->n_lent++] = 2 * slot + tb;
    run->lent_b[2 * slot + tb] = buf;
  }
  if (run->n_lent) run->abi.packed_b = (const void *const *)run->lent_b;
  return LOOM_OK;
}
