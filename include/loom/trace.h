/* Loom: tracing dynamic programs.
 *
 * A trace is a graph under construction that eager-looking C code fills
 * with the builders of ops.h: each call records a node and returns its
 * value at once, with its shape; nothing runs yet. Values become real
 * only where the program needs them, and there the trace is cut into a
 * segment:
 *   - the program reads a value's data or a scalar (loom_trace_read,
 *     loom_trace_scalar), reads a condition to branch on
 *     (loom_trace_cond: the decision joins the path signature), or asks
 *     for a sync;
 *   - an op whose output shape depends on data (nonzero, ...) is
 *     recorded: it runs eagerly, and its output's size becomes known;
 *   - a host callback (a user's C op) runs on real tensors.
 * Each segment is looked up in the trace's cache under its GraphKey =
 * (structure hash, input shapes and dtypes under the shape policy, path
 * signature): a hit replays a compiled executable; a miss (tiered, the
 * default) runs the segment in the fallback interpreter while a
 * background worker compiles it, and waits only for a key compiled in an
 * earlier run, whose module is on disk (untiered, a miss compiles first).
 * A segment that cannot be compiled runs in the interpreter, with the
 * same results (within the float rounding that compiled code differs by).
 * Values recorded before a cut stay usable after it.
 *
 * A step (one iteration of the user's loop) ends with loom_trace_step_end,
 * which releases the step's values; the cache lives on.
 *
 * Training: parameters are entered with loom_trace_param; after
 * loom_trace_backward(loss) each parameter's gradient is available. Every
 * segment compiled for training carries its backward, and the values the
 * backward needs are kept per invocation of the segment. */
#ifndef LOOM_TRACE_H
#define LOOM_TRACE_H

#include "loom/loom.h"
#include "loom/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_trace loom_trace_t;

/* ---- Shape policies ------------------------------------------------------
 * How a dim of an input enters the GraphKey. */
typedef enum loom_dim_policy_kind {
  LOOM_DIM_EXACT,    /* one executable per size */
  LOOM_DIM_BUCKET,   /* padded up to a bucket; padding masked, outputs sliced */
  LOOM_DIM_SYMBOLIC, /* one executable for every size */
  LOOM_DIM_AUTO,     /* exact, until the size changes (auto_after): then
                        symbolic (the default: loom_trace_options_t.input_dims) */
} loom_dim_policy_kind_t;

#define LOOM_MAX_BUCKETS 16

typedef struct loom_dim_policy {
  loom_dim_policy_kind_t kind;
  /* The dim's symbol in the trace graph (dims of any inputs that share a
   * name have one size, and ops see them as equal); NULL: a fresh symbol
   * for this dim alone. Ignored for LOOM_DIM_EXACT, which keeps the
   * dim a constant. */
  const char *name;
  /* LOOM_DIM_BUCKET: ascending bucket sizes; n_buckets 0: powers of two.
   * A size above the largest bucket is its own bucket. */
  int n_buckets;
  int64_t buckets[LOOM_MAX_BUCKETS];
  /* LOOM_DIM_AUTO: distinct sizes compiled exactly before the dim turns
   * symbolic; 0 means 1: symbolic the first time the size changes (as
   * PyTorch's automatic dynamic shapes). Until then the dim is a constant
   * of the trace graph, as an exact one. Once symbolic, sizes 0 and 1
   * stay constants (broadcasting depends on them), and unnamed dims of
   * one size in a step share one symbol (an op may then combine them);
   * a named one takes its name's symbol. An op that needs the size of a
   * symbolic dim (a reshape or slice to sizes the program computed, a
   * symbolic dim meeting a constant) specializes it: the step's segments
   * that use it are keyed on its size (LOOM_LOG=recompiles says so). */
  int auto_after;
  /* LOOM_DIM_BUCKET, optional profile (as TensorRT's min/opt/max): when
   * profile_max > 0, the first time a segment sees this input, every
   * bucket covering [profile_min, profile_max] is compiled ahead of time
   * by the cache's workers, the bucket of profile_opt first. */
  int64_t profile_min, profile_opt, profile_max;
} loom_dim_policy_t;

/* ---- The executable cache ------------------------------------------------
 * Compiled segments keyed by GraphKey, bounded by a byte budget (least
 * recently used entries are evicted), safe to share between traces on
 * several threads. Its workers compile speculatively: the next bucket up
 * from a size just seen, and declared profiles. A miss never blocks a
 * hit, and two requests for one key never compile twice. */
typedef struct loom_cache loom_cache_t;

/* budget_bytes 0: 1 GiB. spec_workers: background compile threads. */
LOOM_API loom_status_t loom_cache_create(int64_t budget_bytes, int spec_workers,
                                         loom_cache_t **out);
/* Stops the workers: what is queued is dropped, and the compiles running
 * are abandoned (their C compilers killed), not waited for; no trace may
 * still use the cache. */
LOOM_API void loom_cache_destroy(loom_cache_t *c);

typedef struct loom_cache_stats {
  size_t size;             /* sizeof(loom_cache_stats_t): the caller sets it */
  int64_t hits, misses;    /* lookups */
  int64_t compiles;        /* executables built (speculative ones included) */
  int64_t spec_compiles;   /* built ahead of need by the workers */
  int64_t failed_compiles; /* segments left to the interpreter */
  int64_t evictions;
  int64_t entries, bytes;  /* now */
  double compile_ms;       /* total time spent compiling */
} loom_cache_stats_t;
#define LOOM_CACHE_STATS_INIT {.size = sizeof(loom_cache_stats_t)}
LOOM_API loom_status_t loom_cache_get_stats(const loom_cache_t *c,
                                            loom_cache_stats_t *out);

/* ---- The cache's keys ----------------------------------------------------
 * A GraphKey, the key of one compiled segment, is (structure, inputs'
 * dtypes and dims under the shape policies, path signature) plus the
 * call site the segment comes from. loom_cache_list_keys copies every
 * key the cache holds, with its entry's state and counters, into a list
 * (one critical section: safe while other threads use the cache; the
 * list does not change after). loom_trace_explain prints the same list,
 * one line per key. An evicted entry is in no later list: its counters
 * leave with it.
 *
 * What a key can and cannot tell: each dim is exact (one size), a bucket
 * (sizes up to it are padded to it; a size above the largest bucket is
 * its own bucket) or any (symbolic). LOOM_DIM_AUTO shows as exact until
 * the dim turns symbolic, then as any. Which symbolic dims share one
 * symbol, which inputs take gradients and whether a segment is a forward
 * or a backward are in the structure hash only. */
typedef struct loom_cache_keys loom_cache_keys_t;

typedef enum loom_key_state {
  LOOM_KEY_PENDING, /* a compile is queued or running */
  LOOM_KEY_READY,   /* compiled: a hit replays it */
  LOOM_KEY_FAILED,  /* could not be compiled: its segment runs in the interpreter */
  LOOM_KEY_EAGER,   /* the graph the fallback interpreter runs, kept beside the
                       compiled (or failed) entry of the same key */
} loom_key_state_t;

typedef enum loom_key_dim {
  LOOM_KEY_EXACT,  /* compiled for this size alone */
  LOOM_KEY_BUCKET, /* compiled for the bucket: the sizes up to it run padded */
  LOOM_KEY_ANY,    /* symbolic: one executable for every size (size -1) */
} loom_key_dim_t;

/* One key and its entry (a versioned struct: loom.h). */
typedef struct loom_cache_key_info {
  size_t size;          /* sizeof(loom_cache_key_info_t): the caller sets it */
  uint64_t hash;        /* the whole key's hash: what the cache's table indexes */
  uint64_t structure;   /* ops and wiring, the inputs' symbolic and bucket
                           pattern, sizes fixed in attributes, training part */
  uint64_t path;        /* path signature: the host's decisions (loom_trace_cond,
                           loom_trace_branch) since the previous cut; 0: none */
  uint64_t site;        /* call site: the ops and wiring alone */
  int n_inputs;         /* read each with loom_cache_keys_input */
  loom_key_state_t state;
  const char *error;    /* LOOM_KEY_FAILED: why (owned by the list), else NULL */
  int64_t hits;         /* runs that reused it: lookups that found it ready,
                           and runs a trace found by its hot path (stitched) */
  int64_t stitched;     /* of hits, those found by a trace's hot path */
  int64_t misses;       /* lookups that did not find it ready: the one that
                           made it (0 if a worker made it ahead of need),
                           then those that found it pending or failed */
  int speculative;      /* 1: made ahead of need (the next bucket, a profile) */
  int in_use;           /* references held now: runs, waiters, hot-path links */
  double compile_ms;    /* building its graph and compiling it (0: pending) */
  int64_t bytes;        /* counted against the budget (0: pending) */
} loom_cache_key_info_t;
#define LOOM_CACHE_KEY_INFO_INIT {.size = sizeof(loom_cache_key_info_t)}

/* One input of a key (a versioned struct: loom.h). */
typedef struct loom_cache_key_input {
  size_t size;                         /* sizeof(loom_cache_key_input_t): the caller sets it */
  loom_dtype_t dtype;
  int rank;
  loom_key_dim_t kinds[LOOM_MAX_RANK]; /* of dims [0, rank) */
  int64_t dims[LOOM_MAX_RANK];         /* the size, the bucket, or -1 (any) */
} loom_cache_key_input_t;
#define LOOM_CACHE_KEY_INPUT_INIT {.size = sizeof(loom_cache_key_input_t)}

/* The keys of c, the most recently used first, then those being
 * compiled: *out (free it with loom_cache_keys_destroy) holds *n keys. */
LOOM_API loom_status_t loom_cache_list_keys(const loom_cache_t *c, loom_cache_keys_t **out,
                                            int64_t *n);
/* Key i (0 <= i < n) of the list. */
LOOM_API loom_status_t loom_cache_keys_get(const loom_cache_keys_t *keys, int64_t i,
                                           loom_cache_key_info_t *out);
/* Input `input` (0 <= input < n_inputs) of key i. */
LOOM_API loom_status_t loom_cache_keys_input(const loom_cache_keys_t *keys, int64_t i,
                                             int input, loom_cache_key_input_t *out);
LOOM_API void loom_cache_keys_destroy(loom_cache_keys_t *keys);

/* ---- Traces ---------------------------------------------------------------
 * Threads: a trace records one thread's program, one step at a time. A
 * step belongs to the thread that began it (its first call after
 * loom_trace_create or loom_trace_step_end, a builder of ops.h recording
 * into loom_trace_graph included) until that thread's loom_trace_step_end.
 * Meanwhile a call from another thread, a builder's included, fails with
 * LOOM_ERR_INVALID ("in use by another thread") and changes nothing; after
 * the step ends, any thread may begin the next, and so may any thread
 * once the step's thread has ended (it releases its traces as it exits)
 * or called loom_trace_release. Programs that trace on several threads at
 * once give each thread a trace of its own; those may share one
 * loom_cache_t. loom_trace_destroy must not race with calls. */

#define LOOM_RECOMPILE_UNLIMITED (-1)

typedef struct loom_trace_options {
  size_t size;     /* sizeof(loom_trace_options_t): init sets it */
  int compile;     /* 1: compile segments; 0: interpret every segment */
  /* 1 (default): a miss interprets while a worker compiles (or loads a
   * key compiled before from disk: the caller loads it when every worker
   * is busy), and the optimizer step
   * runs interpreted until its own compile, beside the trace, is done;
   * background compiles run at a lower CPU priority (nice +10, Linux).
   * 0: a miss compiles before it runs, so that runs alike compute alike */
  int tiered;
  /* threads of compiled segments, and of the fallback's larger kernels
   * (0: LOOM_NUM_THREADS) */
  int num_threads;
  /* Compiles per call site; past it, the site's new keys run in the
   * fallback interpreter (eager kernels) after one warning. 0: 8;
   * LOOM_RECOMPILE_UNLIMITED: no limit. */
  int recompile_limit;
  /* A cache shared with other traces (borrowed), or NULL: the trace makes
   * its own with cache_bytes and spec_workers. */
  loom_cache_t *cache;
  int64_t cache_bytes;
  int spec_workers;
  /* Policy of sizes that data decides (the count of nonzero, ...):
   * default LOOM_DIM_SYMBOLIC (such a count is rarely the same twice). */
  loom_dim_policy_t data_dims;
  /* Policy of the dims of inputs entered without policies: default
   * LOOM_DIM_AUTO (exact until a size changes, then symbolic); its name
   * must be NULL. */
  loom_dim_policy_t input_dims;
} loom_trace_options_t;

/* Defaults: compile on, tiered on, own cache of 1 GiB, one worker,
 * automatic dynamic shapes for inputs (input_dims), symbolic sizes that
 * data decides (data_dims); size
 * is the caller's sizeof(loom_trace_options_t) (C calls the macro). */
LOOM_API loom_status_t loom_trace_options_init_sized(loom_trace_options_t *o, size_t size);
#define loom_trace_options_init(o) loom_trace_options_init_sized((o), sizeof *(o))

LOOM_API loom_status_t loom_trace_create(const loom_trace_options_t *o,
                                         loom_trace_t **out);
LOOM_API void loom_trace_destroy(loom_trace_t *t);

/* The graph that ops record into: give it to the builders of ops.h. Its
 * values are valid until loom_trace_step_end. */
LOOM_API loom_graph_t *loom_trace_graph(loom_trace_t *t);

/* Enters x (borrowed, not copied: it must stay unchanged until the step
 * ends). policies: one per dim of x, or NULL: every dim under the
 * options' input_dims (LOOM_DIM_AUTO unless set otherwise). An unnamed
 * automatic dim keeps its state by position: dim d of the step's k-th
 * input. */
LOOM_API loom_status_t loom_trace_input(loom_trace_t *t, loom_tensor_t *x,
                                        const loom_dim_policy_t *policies,
                                        loom_value_t *out);
/* Enters a parameter: persistent storage whose gradient
 * loom_trace_backward collects. Borrowed; the same tensor is the same
 * parameter in every step. */
LOOM_API loom_status_t loom_trace_param(loom_trace_t *t, loom_tensor_t *p,
                                        loom_value_t *out);
/* Ends the trace's borrowing of parameter p: it leaves the parameters,
 * with its optimizer state (the next optimizer step is rebuilt for the
 * others, their state kept), so that p may be freed. A front end calls it
 * when its user drops a model: without it, every parameter ever entered
 * stays in the optimizer step. Not for a parameter the current step has
 * entered (LOOM_ERR_INVALID); LOOM_ERR_INVALID too when p is not one. */
LOOM_API loom_status_t loom_trace_param_forget(loom_trace_t *t, const loom_tensor_t *p);

/* v's shape in this step (symbolic dims evaluated); shape has room for
 * LOOM_MAX_RANK dims. Runs nothing. */
LOOM_API loom_status_t loom_trace_shape(const loom_trace_t *t, loom_value_t v,
                                        int *rank, int64_t *shape);

/* Makes v real: *out is a tensor owned by the trace until the step ends.
 * A read whose segment fails (an index out of range, a failing callback)
 * returns that error and leaves the step usable: later reads of values
 * that do not depend on the failure succeed, and those that do fail the
 * same way. */
LOOM_API loom_status_t loom_trace_read(loom_trace_t *t, loom_value_t v,
                                       const loom_tensor_t **out);
/* Makes v (one element) real and returns it as a double: a value for the
 * host (a loss to print), which keys nothing. */
LOOM_API loom_status_t loom_trace_scalar(loom_trace_t *t, loom_value_t v,
                                         double *out);
/* Makes v (one element) real and returns whether it is nonzero in
 * *taken: a condition the host branches on. The decision joins the path
 * signature, so the segments after each outcome are keyed apart and a
 * branch compiles at most once per outcome. */
LOOM_API loom_status_t loom_trace_cond(loom_trace_t *t, loom_value_t v, int *taken);
/* Adds a host decision (a branch taken, a loop count) to the path
 * signature without reading a value. */
LOOM_API loom_status_t loom_trace_branch(loom_trace_t *t, int64_t decision);
/* Runs everything recorded so far. */
LOOM_API loom_status_t loom_trace_sync(loom_trace_t *t);
/* Waits until every compile that t's cache has queued or running is done,
 * its module in the module cache on disk: a program about to end calls
 * it so that its next run finds them (loom_trace_destroy, destroying its
 * cache, drops the queued and abandons the running). */
LOOM_API loom_status_t loom_trace_wait_compiles(loom_trace_t *t);
/* The same for at most seconds (< 0: no bound), so that a program's exit
 * does not wait on a long queue; a compile this call itself runs on the
 * calling thread is abandoned at the bound (its C compiler killed). What
 * the workers run or have queued stays so (loom_trace_destroy abandons
 * it). */
LOOM_API loom_status_t loom_trace_wait_compiles_for(loom_trace_t *t, double seconds);

/* ---- Host callbacks ------------------------------------------------------
 * A user's C op: forward fills outputs (allocated by the trace with the
 * declared types) from inputs. backward (may be NULL: not
 * differentiable) receives the inputs, the outputs' gradients and fills
 * the inputs' gradients (zeroed tensors of the inputs' types). A non-OK
 * return stops the run with that status; a message the callback set with
 * loom_set_error is kept in loom_last_error's, after the callback's name. */
typedef loom_status_t (*loom_host_fn_t)(void *user, int n_in,
                                        const loom_tensor_t *const *in,
                                        int n_out, loom_tensor_t *const *out);
typedef struct loom_host_op {
  /* Borrowed, not copied: it must stay valid until the step ends (the
   * tape keeps it for the backward's messages). */
  const char *name;
  loom_host_fn_t forward;
  /* in: the n inputs, then the n_out output gradients; out: n input
   * gradients. */
  loom_host_fn_t backward;
  void *user;
} loom_host_op_t;

/* Records a call of op: a cut before it, then op->forward on real
 * tensors. Output i has dtypes[i], ranks[i] and shapes[i]. */
LOOM_API loom_status_t loom_trace_call(loom_trace_t *t, const loom_host_op_t *op,
                                       int n_in, const loom_value_t *in, int n_out,
                                       const loom_dtype_t *dtypes, const int *ranks,
                                       const int64_t *const *shapes,
                                       loom_value_t *out);

/* ---- Training ------------------------------------------------------------ */

/* Back-propagates from loss (a float scalar) through every segment of
 * the step, in reverse order, eager pieces and host callbacks included.
 * Gradients accumulate over calls within a step. */
LOOM_API loom_status_t loom_trace_backward(loom_trace_t *t, loom_value_t loss);
/* The gradient of parameter p accumulated in this step (owned by the
 * trace until the step ends; zeros if loss does not depend on p). */
LOOM_API loom_status_t loom_trace_grad(loom_trace_t *t, const loom_tensor_t *p,
                                       const loom_tensor_t **out);
/* The gradient of parameter p from the last loom_trace_backward alone:
 * what a front end whose gradients accumulate in its own tensors adds
 * for that call; *out NULL where that backward did not reach p (the loss
 * does not depend on p through float values and differentiable ops, as
 * PyTorch leaves such a .grad None). Owned by the trace until the next
 * backward or the step's end. */
LOOM_API loom_status_t loom_trace_grad_last(loom_trace_t *t, const loom_tensor_t *p,
                                            const loom_tensor_t **out);
/* Keeps the gradient of v, a value of this step that gradients flow to
 * (not a parameter: a parameter's is loom_trace_grad), from each later
 * loom_trace_backward, as PyTorch's retain_grad: the whole gradient,
 * through every read of v. v's segment then ends at v (a value still
 * pending becomes an output of its cut), and stitched replays pause for
 * the step. LOOM_ERR_INVALID when no gradient flows to v, and when v was
 * already read inside the segment that computed it (a cut made it real,
 * or ran it without keeping it, after those reads were recorded): that
 * segment's backward does not return v's part; retain v before reading
 * it. Retaining a parameter does nothing. */
LOOM_API loom_status_t loom_trace_retain_grad(loom_trace_t *t, loom_value_t v);
/* The gradient of v (retained) from the last loom_trace_backward; *out
 * NULL where that backward did not reach v. Owned by the trace until the
 * next backward or the step's end. LOOM_ERR_INVALID when v is not
 * retained. */
LOOM_API loom_status_t loom_trace_retained_grad(loom_trace_t *t, loom_value_t v,
                                                const loom_tensor_t **out);
/* One step of the optimizer o describes (loom/train.h: the update rules
 * of loom_sgd, loom_adam and loom_adamw, whose builders make it) at
 * learning rate lr (finite, >= 0), over every parameter entered so far
 * with this step's gradients, as one executable that the trace compiles
 * once and replays every step. Its state (momentum buffers, moments,
 * step counts) lives in the trace and persists across steps; a new
 * parameter or other hyperparameters rebuild the executable, and the
 * parameters it had keep their state where the new optimizer keeps state
 * of that name (Adam's and AdamW's moments and step counts are the same).
 * A parameter that received no gradient this step (not entered, or no
 * backward reached it) is skipped, as PyTorch skips a parameter whose
 * .grad is None: its value and its state stay as they were (each
 * parameter counts its own steps for Adam's bias corrections). */
LOOM_API loom_status_t loom_trace_optimizer_step(loom_trace_t *t,
                                                 const loom_optimizer_t *o, double lr);
/* loom_trace_optimizer_step with LOOM_OPTIMIZER_ADAMW and these
 * hyperparameters. */
LOOM_API loom_status_t loom_trace_adamw(loom_trace_t *t, double lr, double beta1,
                                        double beta2, double eps,
                                        double weight_decay);
/* The state the optimizer step keeps for parameter p, by name: "momentum"
 * (SGD's buffer), "m" and "v" (Adam's and AdamW's moments), of p's shape
 * in its update dtype (f32 for f16 and bf16 parameters, else p's), and
 * "step" (the count of Adam's and AdamW's steps p took, an i64 scalar).
 * What a checkpoint of the optimizer reads. *out is the trace's tensor,
 * valid until the next optimizer step or state set; NULL when the trace
 * holds no such state for p (no optimizer step made it yet, or its
 * optimizer keeps none of that name). p must be a parameter of the trace
 * (loom_trace_param), else LOOM_ERR_INVALID, as an unknown name. */
LOOM_API loom_status_t loom_trace_optimizer_state(loom_trace_t *t, const loom_tensor_t *p,
                                                  const char *name,
                                                  const loom_tensor_t **out);
/* Sets parameter p's state `name` (as above) to a copy of value, of that
 * state's dtype (else LOOM_ERR_DTYPE) and shape (else LOOM_ERR_SHAPE): the
 * next optimizer step starts from it, whether or not a step has made that
 * state yet (a checkpoint restored into a new trace), and drops it if its
 * optimizer keeps no state of that name. Until then
 * loom_trace_optimizer_state reads it. */
LOOM_API loom_status_t loom_trace_optimizer_state_set(loom_trace_t *t, const loom_tensor_t *p,
                                                      const char *name,
                                                      const loom_tensor_t *value);

/* Data parallelism through the trace: from now on, every rank of comm
 * (include/loom/comm.h) runs this program on its own share of the data,
 * and each optimizer step first averages every parameter's gradient
 * across the ranks (one all_reduce per ~25 MiB of gradients, in the order
 * the parameters were entered), whatever segments and paths each rank
 * traced; a parameter that got a gradient on any rank is updated on all.
 * Parameters entered so far, and each one entered later, are broadcast
 * from rank 0 when they are entered, so every rank starts identical:
 * every rank must enter the same parameters in the same order (checked
 * at each step). comm must outlive the trace's steps; NULL turns it off. */
LOOM_API loom_status_t loom_trace_data_parallel(loom_trace_t *t, loom_comm_t *comm);

/* Ends the step: runs what is pending, releases the step's values,
 * tensors and gradients. */
LOOM_API loom_status_t loom_trace_step_end(loom_trace_t *t);

/* This thread gives t up without ending its step, which goes on in the
 * next thread that calls: a worker that recorded a result, still lazy,
 * and handed it to another thread. Nothing when this thread does not hold
 * t. A thread that ends releases its traces as it exits; this is for a
 * host that learns of the end first (Python's Thread.join returns before
 * the thread has exited). */
LOOM_API loom_status_t loom_trace_release(loom_trace_t *t);

/* ---- Statistics ---------------------------------------------------------- */

/* This trace's counters; cache holds its cache's (shared) counters
 * (its size is the library's sizeof(loom_cache_stats_t)). */
typedef struct loom_trace_stats {
  size_t size;          /* sizeof(loom_trace_stats_t): the caller sets it */
  int64_t recorded_ops; /* nodes recorded */
  int64_t segments;     /* segments run */
  int64_t hits, misses; /* this trace's lookups */
  int64_t interpreted;  /* segments run by the interpreter */
  int64_t eager_ops;    /* data-dependent ops run eagerly */
  int64_t callbacks;    /* host callbacks run */
  int64_t breaks;       /* cuts other than at the end of a step */
  int64_t recompiles;   /* misses on a call site seen before, with a key new to
                         * the trace (a key still compiling, missed again,
                         * is a miss only) */
  int64_t stitched;     /* hits found by following the hot path */
  loom_cache_stats_t cache;
  int64_t specialized;  /* symbolic dims that an op made exact for its step */
  int64_t replayed;     /* of stitched hits, those run through a stitched
                           boundary: the region matched the one recorded
                           after the same segment, so no cut analysis ran */
  /* Weight gradients of backward segments returned as the operands of
   * their products (a time step's x^T dY) and summed over the step in
   * one product each: the parts, and the products that summed them. */
  int64_t deferred_grads, deferred_products;
} loom_trace_stats_t;
#define LOOM_TRACE_STATS_INIT {.size = sizeof(loom_trace_stats_t)}
LOOM_API loom_status_t loom_trace_get_stats(const loom_trace_t *t,
                                            loom_trace_stats_t *out);
/* A report: graph breaks with their reasons, the cache's keys (one line
 * each, from loom_trace_list_keys's list: site, structure, path, state,
 * hits, stitched, misses, compile ms, bytes, inputs such as
 * "f32[any,64] f32[b128]", and why a failed entry failed), recompiles
 * with the part of the key that differed. The caller frees it with
 * loom_free. */
LOOM_API loom_status_t loom_trace_explain(const loom_trace_t *t, char **out);
/* loom_cache_list_keys of the trace's cache (a shared cache lists the
 * keys of every trace that uses it). Like every call on a trace, refused
 * from another thread while a step is open: list the cache there. */
LOOM_API loom_status_t loom_trace_list_keys(const loom_trace_t *t, loom_cache_keys_t **out,
                                            int64_t *n);

#ifdef __cplusplus
}
#endif

#endif
