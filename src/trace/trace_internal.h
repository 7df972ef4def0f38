/* The tracer's insides, shared by its files. The files are layers,
 * listed bottom first: each calls only files listed before it, never one
 * after, so that each can be read knowing only those before it:
 *   state.c          the trace's state that all read: whose step it is (the
 *                    claim), the per-value, per-node and per-symbol tables,
 *                    tensors, sizes, and the modes of symbols under their
 *                    shape policies;
 *   recycle.c        the step's small tensors, kept for the next step's;
 *   grad_defer.c     weight gradients deferred to the end of the backward
 *                    walk: the backward graphs that return a product's
 *                    operands, and one product over all their rows;
 *   segment_graph.c  building a segment's graph from its description (the
 *                    cache's builder; runs on workers too);
 *   segment_key.c    a segment's inputs' types under the policies, its
 *                    GraphKey and its description;
 *   segment_pack.c   running an executable with the weights its GEMMs read
 *                    packed once per epoch;
 *   tape.c           the records of a training step's tape;
 *   segment_run.c    looking a segment up and running it (the hot path,
 *                    compiled, padded to a bucket, or interpreted),
 *                    speculation, the tape records of training segments;
 *   segment_replay.c stitched boundaries: a region that repeats after the
 *                    same segment runs the hot path's successor at once;
 *   segment.c        cuts: extracting a segment, kept values, graph breaks;
 *   backward.c       the backward pass over the tape, gradients;
 *   trace_optim.c    the optimizer step (loom/train.h's optimizers);
 *   trace.c          the public API: options, create and destroy, inputs,
 *                    parameters, reads, callbacks, steps, statistics, the
 *                    node hook.
 * (backward.c and trace_optim.c hold the public calls of their part.)
 * Any of them may call the GraphKey cache (cache.h), which calls none of
 * them.
 * The declarations at the end of this header follow the same order.
 *
 * Values are the trace graph's value ids. A value is materialized when
 * the trace holds a tensor for it; a cut materializes what is asked for
 * plus the leaves of the pending region, and a value not materialized is
 * recomputed by a later segment from its nearest materialized ancestors,
 * so nothing is lost and nothing is reference counted: step_end frees
 * everything. */
#ifndef LOOM_RUNTIME_TRACE_INTERNAL_H
#define LOOM_RUNTIME_TRACE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/text.h"
#include "ir/ir.h"
#include "loom/trace.h"
#include "runtime/executable.h"
#include "trace/cache.h"

/* 64-bit hash combining (a multiply-rotate mix: cheap and well spread). */
static inline uint64_t tr_mix(uint64_t h, uint64_t v) {
  h ^= v * 0x9e3779b97f4a7c15ULL;
  h = (h << 29) | (h >> 35);
  return h * 0xbf58476d1ce4e5b9ULL;
}

/* How a symbol's size enters a segment's key this step. */
typedef enum tr_mode {
  TR_EXACT,    /* the size itself */
  TR_SYMBOLIC, /* any size (RT_DIM_ANY) */
  TR_BUCKET,   /* its bucket */
} tr_mode_t;

#define TR_PINNED (-2) /* sym_policy of a symbol an op specialized */

/* A policy's persistent state, found by the symbol's name. */
typedef struct tr_policy {
  char *name;
  loom_dim_policy_t p;
  int64_t seen[16]; /* LOOM_DIM_AUTO: distinct sizes seen (up to 16) */
  int n_seen;
  bool switched;    /* LOOM_DIM_AUTO: now symbolic */
  bool profiled;    /* the profile's buckets were queued */
  bool data;        /* a size data decided (data_dims: nonzero's count) */
  bool unnamed;     /* an automatic dim known by position (trace.c's slots) */
} tr_policy_t;

/* Per value of the trace graph. */
typedef struct tr_value {
  loom_tensor_t *t; /* the materialized tensor, or NULL */
  loom_tensor_t *padded; /* t zero-padded to its buckets, kept for the step */
  bool owned;       /* t belongs to the trace */
  bool grad;        /* depends on a parameter: gradients flow to it */
  int32_t uses;     /* nodes recorded that read it */
  int32_t made_uses; /* uses when a cut made it real: reads inside its own segment */
  uint8_t provisional; /* an input's automatic dims not symbolic yet (bit per dim) */
  /* loom_trace_retain_grad: each backward keeps its gradient. Pending
   * when marked: its cut outputs it, and the segment's backward returns
   * its whole gradient (its reads inside the segment included). */
  bool retain;
} tr_value_t;

/* The optimizer state a parameter may have: "momentum", "m", "v", "step"
 * (trace_optim.c). */
enum { TR_OPTIM_STATES = 4 };

/* A parameter across steps (a borrowed user tensor). */
typedef struct tr_param {
  loom_tensor_t *t;
  int32_t value;        /* its value id this step, -1: not entered */
  loom_tensor_t *grad;  /* accumulated this step, or NULL */
  loom_tensor_t *last;  /* the last backward's part when grad holds more, or NULL */
  bool got_grad;        /* a backward reached it this step */
  bool last_reached;    /* the last backward reached it */
  /* optimizer state set for the next optimizer step to start from
   * (loom_trace_optimizer_state_set), per state name, or NULL */
  loom_tensor_t *staged[TR_OPTIM_STATES];
} tr_param_t;

/* Why a cut happens: fmt with one argument, str (when not NULL) or num,
 * formatted only the first time the break is seen at its site. */
typedef struct tr_reason {
  const char *fmt;
  const char *str;
  int64_t num;
} tr_reason_t;

/* A graph break's reason at a site, counted. */
typedef struct tr_break {
  const char *fmt; /* identity: site, fmt, str (num is the first one seen) */
  int64_t num;
  char str[64];
  char reason[128];
  uint64_t site;
  int64_t count;
} tr_break_t;

/* A successor on the hot path: the cut whose key hashed to to_hash ran
 * entry `to` (whose reference it holds); replay (owned, one allocation,
 * may be NULL) stitches the two: what the cut found, so that the same
 * region runs `to` at once. */
typedef struct tr_succ {
  rt_entry_t *to; /* NULL: none */
  uint64_t to_hash;
  struct tr_replay *replay;
} tr_succ_t;

#define TR_WAYS 2 /* successors kept per entry */

/* The successors of entry `from` on the hot path, the latest first: a path
 * that forks after an entry (a TreeLSTM's last leaf before its first
 * inner node, an RNN's last step before its head) keeps both ways. */
typedef struct tr_link {
  rt_entry_t *from;
  tr_succ_t next[TR_WAYS];
} tr_link_t;

#define TR_LINKS 512 /* open addressing, power of two */

/* A training segment's backward description, kept under its forward's
 * key (the key's inputs owned). */
typedef struct tr_memo {
  rt_key_t key;
  struct seg_desc *bwd;
  uint64_t used; /* tr_runs_t.memo_clock when last found or kept */
} tr_memo_t;

/* Sets of TR_MEMO_WAYS by key hash (the least recently used replaced):
 * the segments of one path (a TreeLSTM's leaves and inner nodes) must
 * not evict each other's. */
#define TR_MEMO_SETS 16 /* power of two */
#define TR_MEMO_WAYS 4
#define TR_MEMO (TR_MEMO_SETS * TR_MEMO_WAYS)

/* The parameters' storage as stable storage for the back end
 * (segment_pack.c's): it may keep work derived from it (packed GEMM
 * weights) while an epoch lasts. Parameters change only at a step's end or
 * at the optimizer step, which begin a new epoch (stable.epoch++). */
typedef struct tr_packs {
  rt_stable_t stable;
} tr_packs_t;

/* What the run keeps across cuts and steps (segment_run.c's). */
enum { TR_HALVES = 8, TR_SEEN = 256 };

typedef struct tr_runs {
  tr_link_t *links; /* TR_LINKS slots */
  rt_entry_t *prev; /* entry of the last compiled segment; NULL: none */
  uint64_t last_site, last_key; /* of the last segment run this step: site, key hash (0: none) */
  bool prev_valid;  /* prev may be followed (a step start counts) */
  tr_memo_t memo[TR_MEMO]; /* backward descriptions */
  uint64_t memo_clock;
  uint64_t *sites; /* sites that compiled before (recompile count) */
  int64_t n_sites, cap_sites;
  uint64_t *unpadded; /* sites whose bucket padding failed: keyed symbolic */
  int64_t n_unpadded, cap_unpadded;
  /* The backward halves that the last forward eager entries' partitions
   * made too, each for the backward eager entry of the key whose hash
   * and structure are half_key[i] and half_structure[i] (a
   * forward at new exact sizes every step would otherwise be partitioned
   * twice); a ring, the oldest replaced. */
  /* Tiered: keys of sites that missed before, seen once and not compiled
   * (segment_run.c's second_sighting), a ring. */
  uint64_t seen[TR_SEEN];
  int next_seen;
  loom_graph_t *half[TR_HALVES];
  uint64_t half_key[TR_HALVES], half_structure[TR_HALVES];
  int next_half;
} tr_runs_t;

/* ---- Segment descriptions ------------------------------------------------
 * Everything needed to build a segment's graph, copied out of the trace
 * graph on a miss so that a worker can build it after the step ended. */

/* An operand: input k (node -1) or output `index` of cone node `node`. */
typedef struct seg_ref {
  int32_t node, index;
} seg_ref_t;

typedef struct seg_node {
  ir_op_t op;
  int n_in;
  seg_ref_t *in;
  /* Sizes in attributes: evaluated, except symbolic ones, which are
   * handles into the description's exprs (sym_attrs says there are).
   * With room for its n alone, as a graph's nodes hold theirs (a full
   * ir_attrs_t is 1.3 KB): NULL when there are none. */
  ir_attrs_t *attrs;
  bool sym_attrs;
} seg_node_t;

/* How one dim of a segment input enters its graph. */
typedef struct seg_dim {
  tr_mode_t mode;
  int64_t size; /* TR_EXACT: the size; TR_BUCKET: the bucket */
  int32_t sym;  /* TR_SYMBOLIC / TR_BUCKET: canonical symbol (group) */
} seg_dim_t;

typedef struct seg_input {
  loom_dtype_t dtype;
  int rank;
  seg_dim_t dims[LOOM_MAX_RANK];
} seg_input_t;

/* What a cut's hashing found out about its segment (a stitched boundary
 * keeps a copy). site: the cone's ops, wiring and attributes but their
 * integers (the recompile limit's unit); sized: with them (the key's
 * structure). */
typedef struct seg_ident {
  uint64_t site, sized, structure, path;
  uint64_t key_hash;  /* of the key made last (seg_make_key) */
  uint64_t cone_hash; /* the cone's nodes in order (keep positions) */
  /* Training: bit i, the backward returns wrt input i's gradient as its
   * product's operands (grad_defer.c); in the structure hash. */
  uint64_t defer;
} seg_ident_t;

/* A tensor's model for tr_tensor_like: a contiguous header, whose data
 * is not read, and the elements' bytes by which it is kept. */
typedef struct tr_model {
  loom_tensor_t header;
  size_t kept_bytes; /* 0: never kept */
} tr_model_t;

/* A stitched boundary (segment_replay.c): the region a cut found after a
 * link's `from`, node by node, and what it made of it, so that the same
 * region runs the link's entry with one check per node and input instead
 * of the cut's analysis. One allocation: the arrays follow the struct. */
typedef struct tr_replay {
  seg_ident_t id; /* the cut's (id.key_hash: the link's successor's key) */
  uint64_t from_site, from_key; /* the segment's before: site, key hash (0: the step start) */
  uint64_t keep_gen; /* the keep set it was made under (segment.c) */
  int n_nodes, n_codes, n_ins, n_outs, n_syms;
  bool train;
  uint64_t grads;         /* which inputs gradients flow to (input_grads) */
  int64_t runs;           /* times it ran */
  uint64_t *node_hash;    /* [n_nodes] */
  int32_t *codes;         /* [n_codes]: per operand, node position << 8 | output
                             index, or -1 - input position */
  seg_ref_t *outs;        /* [n_outs]: (node position, output index) */
  seg_input_t *in_types;  /* [n_ins] */
  rt_key_input_t *key_in; /* [n_ins] */
  /* The executable's outputs at exact sizes, as tensor headers (no
   * elements), so that a replay makes its output tensors as copies of
   * them (0: a training segment, or sizes from symbols: evaluated at each
   * run). */
  int n_exec_outs;
  tr_model_t *exec_outs; /* [n_exec_outs] */
} tr_replay_t;

/* The region being recorded, checked against the stitched successor of
 * the hot path node by node as it is recorded (segment_replay.c): at the
 * cut, a region that matched to its end runs at once. Its inputs are
 * numbered in first-use order, as a replay's codes number them. */
typedef struct tr_follow {
  bool armed;            /* r was looked up for the region from start */
  int64_t start;         /* the region's first node */
  /* Per way of the hot link: its replay, NULL where there is none or the
   * region differs from it. */
  const tr_replay_t *r[TR_WAYS];
  int32_t k, c;          /* nodes and operand codes matched */
  uint32_t epoch;        /* mark[v] == epoch: pos[v] is v's input position */
  uint32_t *mark;
  int32_t *pos;
  int64_t cap_vals;
  int32_t *ins;          /* the inputs, in first-use order */
  int32_t n_ins;
  int64_t cap_ins;
} tr_follow_t;

typedef struct seg_desc {
  /* the tape, the kept backward descriptions and the cache's builders
   * (on workers too) share it */
  _Atomic int refs;
  int n_inputs, n_nodes, n_outputs;
  seg_input_t *inputs;
  seg_node_t *nodes;
  seg_ref_t *outputs;
  int n_syms;   /* canonical symbols of symbolic dims (s0, s1, ...) */
  /* Symbolic attribute sizes: expressions over canonical symbols (SYM:
   * c is the canonical number) whose operands are sizes or handles
   * IR_DIM_SYM_BASE + i into this array. */
  ir_expr_t *exprs;
  int64_t n_exprs, cap_exprs;
  /* Some dims are padded to buckets: one group per bucketed symbol. The
   * plain graph (part 0) is built at the buckets; the training halves
   * are cut from a graph with the buckets as symbols b0, b1, ...
   * (canonical symbols n_syms + g), each half masked, then compiled with
   * the symbols set to group_bucket. */
  bool bucket;
  int n_groups;
  int64_t group_bucket[32];
  /* Training: the forward of pass_partition, or its backward; defer: the
   * cut's seg_ident_t.defer. */
  int n_wrt;
  int *wrt;
  uint64_t defer;
  int part; /* 0: the plain graph; 1: forward; 2: backward */
  int num_threads;
  /* Copies of the subgraphs of the control ops among nodes (their
   * attributes name them by index here), adopted by each graph built. */
  loom_graph_t **subgraphs;
  int n_subgraphs;
} seg_desc_t;

/* Whether wrt input i's gradient is deferred (bit i of mask; only the
 * first 64 can be: a segment may have more wrt inputs). */
static inline bool seg_deferred(uint64_t mask, int i) { return i < 64 && (mask >> i & 1); }

/* ---- The tape -------------------------------------------------------------- */

typedef enum tape_kind { TAPE_SEGMENT, TAPE_CALLBACK } tape_kind_t;

typedef struct tape_rec {
  tape_kind_t kind;
  int n_in, n_out;
  int32_t *in, *out;        /* value ids */
  /* TAPE_SEGMENT: the backward's description and key, and this
   * invocation's saved values. */
  seg_desc_t *bwd;
  rt_key_t key; /* the backward's: the forward's with another structure */
  int n_saved;
  loom_tensor_t **saved;
  /* Bucketed (bwd->bucket): the backward graph's symbol values (s0..,
   * then b0.. at their buckets: bwd->n_syms + bwd->n_groups) and each
   * group's real size after them; NULL otherwise. */
  int64_t *sizes;
  /* The forward stood in for a bucketed key in the fallback, at its real
   * sizes: its backward runs there too, never compiling a key the policy
   * did not ask for. */
  bool eager_only;
  /* TAPE_CALLBACK: the op (copied: the caller's may be on its stack) */
  loom_host_op_t op;
} tape_rec_t;

/* This step's tape (tape.c's records) and the backward walk's gradients
 * (backward.c's). */
typedef struct tr_tape {
  tape_rec_t *recs;
  int64_t n, cap;
  /* Records [0, stale) were taped before this step's optimizer step
   * changed the parameters. */
  int64_t stale;
  loom_tensor_t **grads; /* per value, during one backward walk */
  int64_t cap_grads;
  /* Per value retained (loom_trace_retain_grad): its gradient from the
   * last backward walk, or NULL where that walk did not reach it. */
  loom_tensor_t **kept;
  int64_t cap_kept;
  /* During a walk with retained values: per value, whether a path of
   * nodes or host callbacks leads from it to the loss (the others get no
   * gradient, as PyTorch's stays None). */
  uint8_t *reach;
  /* Deferred weight gradients of the walk (grad_defer.c), a list a value
   * (n 0: free for another). */
  struct tr_deferred *defer;
  int n_defer;
  int64_t cap_defer;
  /* The thread that takes their products with two threads or more
   * (grad_defer.c), started at the first; failed: it could not be. */
  struct tr_defer_worker *worker;
  bool worker_failed;
} tr_tape_t;

typedef struct tr_defer_worker tr_defer_worker_t;

/* The operands of a value's deferred gradient a^T b, its parts stacked
 * by rows: a (rows, m), b (rows, n), in cap_a and cap_b bytes (kept for
 * the next value; free when no rows are pending or reserved). */
typedef struct tr_deferred {
  int32_t v;
  loom_dtype_t dtype;
  int64_t m, n, rows;
  int64_t reserved; /* rows reserved for a run, not committed yet */
  void *a, *b;
  size_t cap_a, cap_b;
} tr_deferred_t;

/* ---- Tensors kept for the next step (recycle.c) ----------------------------- */

#define TR_RECYCLE_BYTES 65536 /* the largest elements kept */
#define TR_KEPT 64             /* sizes kept: open addressing, power of two */

/* The tensors kept whose elements take `bytes`. */
typedef struct tr_kept_item {
  loom_tensor_t *x;
  void *data; /* x's elements: a taken tensor is rewritten without reading it */
} tr_kept_item_t;

typedef struct tr_kept {
  size_t bytes; /* 0: an empty slot */
  tr_kept_item_t *items;
  int64_t n, cap;
  int64_t made; /* tensors of this size the step made */
} tr_kept_t;

typedef struct tr_recycle {
  tr_kept_t slots[TR_KEPT];
} tr_recycle_t;

/* ---- The trace ------------------------------------------------------------- */

struct loom_trace {
  /* The thread recording this step (an address unique to it), 0 between
   * steps: other threads' calls are refused until the step ends. */
  _Atomic uintptr_t user;
  struct loom_trace *next_live; /* the traces alive (state.c), under its lock */
  loom_trace_options_t opt;
  loom_graph_t *g;
  loom_cache_t *cache;
  bool own_cache;

  tr_value_t *vals;
  int64_t cap_vals;
  /* Values this step retains gradients of (loom_trace_retain_grad): no
   * stitched replay runs or is made while there are any, since a replay
   * repeats a cut's outputs and its backward's without them. */
  int64_t retains;
  uint64_t *node_hash; /* per node: op, attributes, output dtypes */
  uint64_t *node_site; /* the same but for the attributes' integers */
  /* Per node: where it last ran this step, (cut + 1) << 32 | position
   * in its cone, with the cut's cone hash at ran_cones[cut]; 0 if it
   * has not run this step (its keep key is made only where a later cut
   * recomputes it, segment.c). */
  uint64_t *node_ran;
  uint64_t *ran_cones;
  int64_t n_ran_cones, cap_ran_cones;
  /* Segment positions whose outputs a later segment had to recompute:
   * kept at once the next time (an open-addressing set, 0 = empty). */
  uint64_t *keep;
  int64_t cap_keep, n_keep;
  uint64_t keep_gen; /* changes when keep learns: stitched paths made before go stale */
  int64_t cap_nodes;
  int64_t region_start; /* first node recorded since the last cut */

  /* Per symbol of this step's trace graph (by symbol number): its size
   * (-1 while unbound) and its policy (index into policies, -1: exact,
   * TR_PINNED: exact for the rest of the step, an op needed its size). */
  int64_t *sym_values;
  int32_t *sym_policy;
  int64_t cap_syms;
  tr_policy_t *policies;
  int64_t n_policies, cap_policies;
  int n_step_inputs; /* inputs entered this step (names fresh symbols) */
  /* The policy of unnamed automatic dim d of the step's k-th input, at
   * k * LOOM_MAX_RANK + d (-1: none yet). */
  int32_t *slots;
  int64_t cap_slots;
  const char *adding; /* the op being recorded (for messages) */
  const char *pins_logged[8]; /* ops whose specializations were logged */
  int n_pins_logged;

  tr_param_t *params;
  int64_t n_params, cap_params;
  /* Data parallelism (loom_trace_data_parallel): the ranks whose
   * gradients each optimizer step averages, and its staging buffer. */
  loom_comm_t *comm;
  void *dp_stage;
  int64_t dp_stage_bytes;
  /* Whether every rank's compiled optimizer step was ready at this step's
   * agreement: the ranks swap it in at one step, so that their updates
   * round alike (an interpreted update and a compiled one differ in the
   * last bits, and the replicas would drift apart). */
  bool dp_all_ready;

  uint64_t path; /* decisions since the last cut */
  bool in_cut;   /* a cut runs: the hook must not cut again */
  bool stitch;   /* stitched boundaries replay (LOOM_STITCH=0: off) */

  tr_runs_t run;    /* segment_run.c's */
  tr_follow_t follow; /* segment_replay.c's */
  tr_packs_t packs; /* segment_pack.c's */

  tr_break_t *breaks;
  int64_t n_breaks, cap_breaks;
  int64_t last_break; /* the break seen last (checked first) */

  tr_tape_t tape;   /* tape.c's and backward.c's */
  tr_recycle_t recycle; /* recycle.c's */

  struct tr_optim *optim; /* the optimizer step (trace_optim.c) */
  /* Steps replaced while their compile still ran, freed once it ends. */
  struct tr_optim *retired;
  /* The fallback interpreter's threads (tr_fallback_pool), made when
   * first needed with the trace's num_threads; NULL with one thread. */
  struct core_pool *fallback_pool;
  bool fallback_pool_made;
  void *seg;              /* a cut's scratch (segment.c) */

  loom_trace_stats_t stats;
};

/* ---- A cut's scratch (segment.c, segment_key.c, segment_run.c) ------------ */

/* Scratch of one cut, kept by the trace between cuts (marks are epochs,
 * so nothing is cleared per cut). */
typedef struct seg_work {
  /* seg_input_types: bucketed symbols keyed as symbolic (the padding
   * could not apply to this segment, or it runs in the fallback) */
  bool no_buckets;
  /* A bucketed segment run in the fallback, unpadded: its tape record's
   * backward does not compile (segment_run.c's interpret) */
  bool stand_in;
  uint32_t epoch;
  uint32_t *node_mark; /* == epoch: the node is in the cone */
  int32_t *node_pos;   /* its position in the cone */
  int64_t cap_nodes;
  uint32_t *val_mark;  /* == epoch: val_pos is the value's input position */
  uint32_t *out_mark;  /* == epoch: the value is an output */
  int32_t *val_pos;
  int64_t cap_vals;
  int32_t *cone, *stack, *ins, *outs;
  int64_t cap_cone, cap_stack, cap_ins, cap_outs;
  int n_cone, n_ins, n_outs;
  /* The cone is the region, nodes [region_start, region_start + n_cone)
   * in order, and cone[] is not filled (a stitched replay that keeps no
   * backward: nothing reads its cone but the end of the cut). */
  bool cone_is_region;
  seg_input_t *in_types; /* per input: dims under the policies */
  rt_key_input_t *key_in;
  int64_t cap_types, cap_key;
  int *wrt;
  int64_t cap_wrt;
  int n_wrt;
  int32_t group_sym[32]; /* bucket group k: its trace symbol */
  ir_dim_t sym_dim[32];  /* canonical symbol k: the input dim it stands for */
  int n_syms, n_groups;
  bool bucket, train;
  seg_ident_t id;
  /* A stitched replay's executable outputs (tr_replay_t.exec_outs), or
   * NULL: the run evaluates their types. */
  const tr_model_t *exec_outs;
  int n_exec_outs;
} seg_work_t;

/* An operand's reference in w's segment: input position or (cone
 * position, index). Inline: a cut takes it per operand of its cone. */
static inline seg_ref_t seg_ref_of(const loom_trace_t *t, const seg_work_t *w, int32_t v) {
  /* by the marks, not by t->vals: outputs become real during the cut */
  if (w->val_mark[v] == w->epoch) return (seg_ref_t){-1, w->val_pos[v]};
  const ir_value_t *iv = &t->g->values[v];
  return (seg_ref_t){w->node_pos[iv->node], iv->index};
}

/* ---- The layers' calls, bottom up ------------------------------------------- */

/* state.c */
/* Takes t for this thread until the step ends (a no-op when it has it);
 * LOOM_ERR_INVALID, naming fn, when another thread's step is open. */
loom_status_t tr_claim(loom_trace_t *t, const char *fn);
/* For a call that only reads t: takes t unless this thread has it
 * (*taken says so); tr_give_back(t, *taken) ends the read. */
loom_status_t tr_claim_to_read(const loom_trace_t *t, const char *fn, bool *taken);
void tr_give_back(const loom_trace_t *t, bool taken);
/* t created and about to be freed: a thread that ends with t's step open
 * releases t only while it lives. */
void tr_live_add(loom_trace_t *t);
void tr_live_remove(loom_trace_t *t);
/* The trace's record of parameter p, or a failure that names fn. */
loom_status_t tr_find_param(loom_trace_t *t, const loom_tensor_t *p, const char *fn,
                            tr_param_t **out);
/* Grows the per-value, per-node and per-symbol tables to the graph. */
loom_status_t tr_reserve_values(loom_trace_t *t);
loom_tensor_t *tr_tensor(const loom_trace_t *t, int32_t v);
/* type's shape with this step's symbol sizes. */
loom_status_t tr_eval_type(const loom_trace_t *t, const ir_type_t *type,
                           int64_t *shape);
tr_mode_t tr_sym_mode(const loom_trace_t *t, int sym, int64_t *bucket);
const loom_dim_policy_t *tr_sym_policy(const loom_trace_t *t, int sym);
/* The bucket of size under p (its list's, or the next power of two). */
int64_t tr_bucket_of(const loom_dim_policy_t *p, int64_t size);
/* The bucket just below bucket b (the one sizes below b's range fall in);
 * 0: none. */
int64_t tr_bucket_below(const loom_dim_policy_t *p, int64_t b);
/* The threads the fallback interpreter lends its eager kernels: made at
 * the first call with the trace's num_threads (NULL with one thread, or
 * when they cannot start: the fallback then runs on the calling thread). */
struct core_pool *tr_fallback_pool(loom_trace_t *t);

/* recycle.c */
/* A new tensor for a producer that writes every element: a kept one of
 * its byte size, or a fresh one. */
loom_status_t tr_tensor_new(loom_trace_t *t, loom_dtype_t dtype, int rank,
                            const int64_t *shape, loom_tensor_t **out);
void tr_model_init(tr_model_t *m, loom_dtype_t dtype, int rank, const int64_t *shape);
/* tr_tensor_new of m's dtype and shape, its header copied and its size
 * looked up rather than computed. */
loom_status_t tr_tensor_like(loom_trace_t *t, const tr_model_t *m, loom_tensor_t **out);
/* Frees x (a tensor the step owned), or keeps it for the next step. */
void tr_tensor_free(loom_trace_t *t, loom_tensor_t *x);
/* After the step's tensors went back: frees the sizes it did not make. */
void tr_recycle_step_end(loom_trace_t *t);
void tr_recycle_free(loom_trace_t *t);

/* grad_defer.c */
/* Rewrites the backward half *g of d (outputs: one gradient per wrt
 * input) to return, for each wrt input i in d->defer, the two operands of
 * its gradient's product A^T B: A in output i, B after the n_wrt
 * outputs, in the order of i. */
loom_status_t seg_defer_graph(const seg_desc_t *d, loom_graph_t **g);
/* Views *a (k, m) and *b (k, n) of the next rows of value v's stacks,
 * for a run to write a part of v's gradient a^T b in (the caller
 * destroys them). grad_defer_commit then counts the rows in (commit) or
 * gives them back (the run failed); *due: enough rows are pending to
 * take the product now. */
loom_status_t grad_defer_reserve(loom_trace_t *t, int32_t v, loom_dtype_t dtype, int64_t k,
                                 int64_t m, int64_t n, loom_tensor_t **a, loom_tensor_t **b);
loom_status_t grad_defer_commit(loom_trace_t *t, int32_t v, bool commit, bool *due);
/* Reserves, copies and commits a (k, m) and b (k, n), consumed. */
loom_status_t grad_defer_push(loom_trace_t *t, int32_t v, loom_tensor_t *a,
                              loom_tensor_t *b, bool *due);
bool grad_defer_pending(loom_trace_t *t, int32_t v);
/* Hands v's pending rows to the thread that takes products, if the trace
 * has one (false: it has not; grad_defer_take them). */
bool grad_defer_submit(loom_trace_t *t, int32_t v);
/* A product of v's parts: the first of those handed over (waited for),
 * else of the pending rows; NULL when none are left. Calls until NULL sum
 * them in the order they were made. */
loom_status_t grad_defer_take(loom_trace_t *t, int32_t v, loom_tensor_t **out);
/* Drops every pending part and product (the walk's end); _free also the
 * lists and ends the thread. */
void grad_defer_clear(loom_trace_t *t);
void grad_defer_free(loom_trace_t *t);

/* segment_graph.c */
void seg_desc_release(seg_desc_t *d);
/* The bucket groups (ascending) whose symbol sizes an axis of g's inputs
 * [0, n_in): a masked backward has one real-size input per such group,
 * in this order, after them. Returns their count. */
int seg_groups_present(const seg_desc_t *d, const loom_graph_t *g, int n_in,
                       int *groups);
/* The graph of d (plain, forward or backward, padded when bucketed) and
 * its compile options; the rt_builder_t callback. */
loom_status_t seg_desc_build(void *ctx, loom_graph_t **graph,
                             loom_compile_options_t *options);
/* seg_desc_build of a training half for the fallback, with the other
 * half that the partition made in *other (NULL for a plain graph). */
loom_status_t seg_desc_build_both(const seg_desc_t *d, loom_graph_t **graph,
                                  loom_graph_t **other);

/* segment_key.c */
/* How seg_input_types types the inputs: under the policies; with the
 * bucketed dims symbolic instead (the padding could not apply); or every
 * dim a size. */
typedef enum seg_types { SEG_POLICIES, SEG_NO_BUCKETS, SEG_EXACT } seg_types_t;
loom_status_t seg_input_types(loom_trace_t *t, seg_work_t *w, seg_types_t how);
/* The GraphKey of w's segment (part 0: plain, 1: forward); its inputs
 * point into w. */
void seg_make_key(const loom_trace_t *t, seg_work_t *w, int part,
                  rt_key_t *key);
/* A description of w's segment (part 0: plain, 1: forward, 2: backward). */
loom_status_t seg_make_desc(loom_trace_t *t, seg_work_t *w, int part,
                            seg_desc_t **out);
/* Each bucket group's bucket, from w's input types. */
void seg_group_buckets(const seg_work_t *w, int64_t *out);

/* segment_pack.c: rt_entry_run, with the inputs bound to parameters'
 * storage marked stable for the epoch (the back end packs the GEMM
 * weights among them once per epoch); matched: as rt_binding_t's. */
loom_status_t seg_entry_run(loom_trace_t *t, rt_entry_t *e, int n_in,
                            loom_tensor_t *const *ins, int n_out,
                            loom_tensor_t *const *outs, bool matched);
void seg_packs_free(loom_trace_t *t);

/* tape.c */
/* The key of the backward of the forward keyed fwd (its inputs shared):
 * a structure and a site of its own, so that the recompile limit counts
 * forwards and backwards apart (a bucket compiles one of each). */
void tape_backward_key(const rt_key_t *fwd, rt_key_t *out);
/* sizes: see tape_rec_t (copied; NULL unless bwd->bucket). */
loom_status_t tape_push_segment(loom_trace_t *t, seg_desc_t *bwd,
                                const rt_key_t *key, int n_in,
                                const int32_t *in, int n_out,
                                const int32_t *out, int n_saved,
                                loom_tensor_t **saved, const int64_t *sizes);
loom_status_t tape_push_callback(loom_trace_t *t, const loom_host_op_t *op,
                                 int n_in, const int32_t *in, int n_out,
                                 const int32_t *out);
void tape_clear(loom_trace_t *t);
/* Frees the retained gradients of the last backward walk. */
void tape_clear_kept(loom_trace_t *t);
void tape_destroy(loom_trace_t *t);

/* segment_run.c: looks w's segment up (the hot path first) and runs it. */
loom_status_t seg_run(loom_trace_t *t, seg_work_t *w);
/* A zero tensor of shape with x's elements in its leading corner. */
loom_status_t seg_pad_copy(const loom_tensor_t *x, const int64_t *shape,
                           loom_tensor_t **out);
/* The leading corner of shape out of padded p. */
loom_status_t seg_slice_copy(const loom_tensor_t *p, int rank,
                             const int64_t *shape, loom_tensor_t **out);
void seg_links_clear(loom_trace_t *t);
/* Releases the kept backward descriptions. */
void seg_memo_clear(loom_trace_t *t);
/* Frees the kept backward halves (tr_runs_t.half). */
void seg_halves_clear(loom_trace_t *t);
/* The backward eager entry of tape record r: its graph from the kept
 * halves when its forward's partition made it, else built (backward.c). */
loom_status_t seg_backward_eager(loom_trace_t *t, const rt_key_t *key, seg_desc_t *bwd,
                                 rt_entry_t **e);
/* The hot path's link from the last segment run (NULL: none to follow). */
tr_link_t *seg_hot_link(loom_trace_t *t);
/* Whether a training forward keyed key has its backward description kept. */
bool seg_memo_has(const loom_trace_t *t, const rt_key_t *key);
/* Runs the entry of way `way` of link l for w (keyed key) as a hot-path
 * hit, and follows it (it becomes the link's latest way). */
loom_status_t seg_run_linked(loom_trace_t *t, seg_work_t *w, tr_link_t *l, int way,
                             const rt_key_t *key);

/* segment_replay.c: stitched paths. */
/* Runs the region recorded since the last cut through the hot path's
 * stitched boundary when it matches it (*done: w then describes the
 * segment run, for the cut to finish), with want[0..n) produced;
 * nothing happens otherwise. */
loom_status_t seg_replay(loom_trace_t *t, seg_work_t *w, int n, const int32_t *want,
                         bool *done);
/* After cut w ran the entry that a way of `link` led to before the cut
 * (now its latest way): stitches that way with what w found, when the
 * region can be replayed (from_site, from_key: the segment before's, for
 * the report). */
void seg_replay_record(loom_trace_t *t, seg_work_t *w, tr_link_t *link, uint64_t from_site,
                       uint64_t from_key);
/* Checks node, just recorded, against the stitched successor of the hot
 * path (t->follow), looked up at the region's first node. */
void seg_follow_node(loom_trace_t *t, int32_t node);
void seg_follow_free(loom_trace_t *t);
/* Appends the stitched boundaries, one line each, to text. */
void seg_replay_describe(const loom_trace_t *t, core_text_t *text);

/* segment.c: runs a segment materializing want[0..n) and the pending
 * region's leaves; reason names the cut (NULL: the end of a step). A
 * stitched boundary (segment_replay.c) is tried first. */
loom_status_t seg_cut(loom_trace_t *t, int n, const int32_t *want,
                      const tr_reason_t *reason);
void seg_work_free(loom_trace_t *t);
/* The cut's scratch, reset for a new cut. */
loom_status_t seg_work_reserve(loom_trace_t *t, seg_work_t **out);
/* Marks w's cone as run (for keep: segment.c) and opens the next region. */
void seg_cut_done(loom_trace_t *t, seg_work_t *w);
/* Counts a break at site and logs it the first time. */
loom_status_t tr_note_break(loom_trace_t *t, uint64_t site,
                            const tr_reason_t *reason);

/* backward.c: loom_trace_backward and loom_trace_grad only. */

/* trace_optim.c */
void tr_optim_destroy(loom_trace_t *t);
/* Parameter p leaves the parameters: its state is carried to no one, its
 * staged state dropped. */
void tr_optim_forget(loom_trace_t *t, const loom_tensor_t *p);
/* Whether t's optimizer step runs compiled code, after waiting for its
 * background compile when wait (tests); false before the first step. */
bool tr_optim_compiled(loom_trace_t *t, bool wait);

/* trace.c: the public API only. */

#endif
