/* Stitched paths (issue 18's path_replay line): the tracer's cost at a
 * segment boundary, with stitched boundaries (a region that repeats after
 * the same segment runs its entry at once) and without (LOOM_STITCH=0:
 * the cut's analysis, the hot path's successor skipping the lookup).
 * Two workloads, each cut once per cell as the dynamic examples cut:
 *   lstm: an LSTM cell (batch 4, input 8, hidden 16) per time step, 32
 *     steps, the cell state read after each;
 *   treelstm: a binary TreeLSTM over a complete tree of 16 leaves, one
 *     cell per node, leaves first, each node's state read.
 * ns_per_segment_*: the time of the read that cuts (loom_trace_read),
 * less the cell's executable run alone (compiled from the same builder,
 * timed the same way, each run after the cell is recorded into a graph
 * of its own, as the trace's runs follow their recording: run back to
 * back instead, ns_exec_run_hot, it finds its code and tables in the
 * caches and is 15-20% faster): what the tracer adds per segment,
 * recording excluded. Recording is timed too (ns_record_per_op_*, per
 * op recorded): a stitched region is checked node by node as it is
 * recorded. The weights are inputs, not parameters: no tape records (a
 * training segment adds one per run, the same stitched or not). REPS
 * rounds, each timing the run, the stitched cuts and the unstitched ones
 * in turn (the machine is shared, and its speed changes from minute to
 * minute): the segment figures are the medians of the rounds' own
 * differences, the times the fastest rounds'. */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "loom/trace.h"

enum { B = 4, D = 8, H = 16, STEPS = 32, LEAVES = 16, REPS = 7, ROUNDS = 200 };

typedef struct cell_args {
  loom_value_t x, h, c, w_ih, w_hh, b; /* lstm; treelstm: x = left h, h = right h,
                                        c = left c, w_ih = right c, w_hh = U */
} cell_args_t;

/* The LSTM cell: gates = x w_ih + h w_hh + b; c' = f c + i u; h' = o tanh(c'). */
static loom_status_t lstm_cell(loom_graph_t *g, const cell_args_t *a, loom_value_t *h,
                               loom_value_t *c) {
  loom_value_t xw, hw, s, gates, q[4], i, f, u, o, fc, iu, tc;
  BENCH_TRY(loom_matmul(g, a->x, a->w_ih, 0, 0, &xw));
  BENCH_TRY(loom_matmul(g, a->h, a->w_hh, 0, 0, &hw));
  BENCH_TRY(loom_add(g, xw, hw, &s));
  BENCH_TRY(loom_add(g, s, a->b, &gates));
  const int64_t sizes[4] = {H, H, H, H};
  BENCH_TRY(loom_split(g, gates, 1, 4, sizes, q));
  BENCH_TRY(loom_sigmoid(g, q[0], &i));
  BENCH_TRY(loom_sigmoid(g, q[1], &f));
  BENCH_TRY(loom_tanh(g, q[2], &u));
  BENCH_TRY(loom_sigmoid(g, q[3], &o));
  BENCH_TRY(loom_mul(g, f, a->c, &fc));
  BENCH_TRY(loom_mul(g, i, u, &iu));
  BENCH_TRY(loom_add(g, fc, iu, c));
  BENCH_TRY(loom_tanh(g, *c, &tc));
  return loom_mul(g, o, tc, h);
}

/* The TreeLSTM cell of two children: gates = [hl hr] U + b;
 * c = i u + fl cl + fr cr; h = o tanh(c). A leaf is the same cell over
 * zero children states and its own input as hl. */
static loom_status_t tree_cell(loom_graph_t *g, const cell_args_t *a, loom_value_t *h,
                               loom_value_t *c) {
  loom_value_t hh, gates0, gates, q[5], i, fl, fr, o, u, iu, flc, frc, s, tc;
  loom_value_t pair[2] = {a->x, a->h};
  BENCH_TRY(loom_concat(g, 2, pair, 1, &hh));
  BENCH_TRY(loom_matmul(g, hh, a->w_hh, 0, 0, &gates0));
  BENCH_TRY(loom_add(g, gates0, a->b, &gates));
  const int64_t sizes[5] = {H, H, H, H, H};
  BENCH_TRY(loom_split(g, gates, 1, 5, sizes, q));
  BENCH_TRY(loom_sigmoid(g, q[0], &i));
  BENCH_TRY(loom_sigmoid(g, q[1], &fl));
  BENCH_TRY(loom_sigmoid(g, q[2], &fr));
  BENCH_TRY(loom_sigmoid(g, q[3], &o));
  BENCH_TRY(loom_tanh(g, q[4], &u));
  BENCH_TRY(loom_mul(g, i, u, &iu));
  BENCH_TRY(loom_mul(g, fl, a->c, &flc));
  BENCH_TRY(loom_mul(g, fr, a->w_ih, &frc));
  BENCH_TRY(loom_add(g, iu, flc, &s));
  BENCH_TRY(loom_add(g, s, frc, c));
  BENCH_TRY(loom_tanh(g, *c, &tc));
  return loom_mul(g, o, tc, h);
}

typedef loom_status_t (*cell_fn)(loom_graph_t *, const cell_args_t *, loom_value_t *,
                                 loom_value_t *);

typedef struct workload {
  const char *name;
  cell_fn cell;
  int64_t rows;                  /* batch rows of a state */
  loom_tensor_t *w_ih, *w_hh, *b; /* lstm: (D, 4H), (H, 4H), (4H); tree: -, (2H, 5H), (5H) */
  loom_tensor_t *xs[STEPS > LEAVES ? STEPS : LEAVES], *zero;
} workload_t;

static void workload_init(workload_t *wl, int tree) {
  wl->name = tree ? "treelstm" : "lstm";
  wl->cell = tree ? tree_cell : lstm_cell;
  wl->rows = tree ? 1 : B;
  int64_t gates = tree ? 5 * H : 4 * H;
  int64_t s_ih[2] = {D, gates}, s_hh[2] = {tree ? 2 * H : H, gates};
  int64_t s_x[2] = {wl->rows, tree ? H : D}, s_h[2] = {wl->rows, H};
  wl->w_ih = bench_input(2, s_ih);
  wl->w_hh = bench_input(2, s_hh);
  wl->b = bench_input(1, &gates);
  for (int k = 0; k < (tree ? LEAVES : STEPS); k++) wl->xs[k] = bench_input(2, s_x);
  BENCH_TRY(loom_tensor_create(LOOM_F32, 2, s_h, &wl->zero));
}

static void workload_free(workload_t *wl) {
  loom_tensor_destroy(wl->w_ih);
  loom_tensor_destroy(wl->w_hh);
  loom_tensor_destroy(wl->b);
  for (int k = 0; k < STEPS; k++) loom_tensor_destroy(wl->xs[k]);
  loom_tensor_destroy(wl->zero);
}

/* One step of the workload in t: the summed time of its cuts (ns) and
 * their count; *record_ns: the summed time of the cells' recording. */
static double step_cuts(loom_trace_t *t, const workload_t *wl, int *n_cuts,
                        double *record_ns) {
  loom_graph_t *g = loom_trace_graph(t);
  cell_args_t a;
  loom_value_t zero, hs[2 * LEAVES], cs[2 * LEAVES];
  BENCH_TRY(loom_trace_input(t, wl->w_hh, NULL, &a.w_hh));
  BENCH_TRY(loom_trace_input(t, wl->b, NULL, &a.b));
  BENCH_TRY(loom_trace_input(t, wl->zero, NULL, &zero));
  int tree = wl->cell == tree_cell, n = tree ? 2 * LEAVES - 1 : STEPS;
  if (!tree) BENCH_TRY(loom_trace_input(t, wl->w_ih, NULL, &a.w_ih));
  double ns = 0;
  for (int k = 0; k < n; k++) {
    if (tree && k < LEAVES) { /* a leaf: its input beside a zero child */
      BENCH_TRY(loom_trace_input(t, wl->xs[k], NULL, &a.x));
      a.h = a.c = a.w_ih = zero;
    } else if (tree) { /* node k's children: 2(k - LEAVES), 2(k - LEAVES) + 1 */
      int l = 2 * (k - LEAVES), r = l + 1;
      a.x = hs[l], a.h = hs[r], a.c = cs[l], a.w_ih = cs[r];
    } else {
      BENCH_TRY(loom_trace_input(t, wl->xs[k], NULL, &a.x));
      a.h = k ? hs[k - 1] : zero;
      a.c = k ? cs[k - 1] : zero;
    }
    double t0 = bench_now_ns();
    BENCH_TRY(wl->cell(g, &a, &hs[k], &cs[k]));
    *record_ns += bench_now_ns() - t0;
    const loom_tensor_t *real;
    t0 = bench_now_ns();
    BENCH_TRY(loom_trace_read(t, cs[k], &real));
    ns += bench_now_ns() - t0;
  }
  BENCH_TRY(loom_trace_step_end(t));
  *n_cuts = n;
  return ns;
}

/* A trace timed at its cuts, stitched or not. */
typedef struct cut_meter {
  loom_trace_t *t;
  int n;         /* cuts a step */
  double ns;     /* the last round's nanoseconds per cut */
  double record; /* and per op recorded */
} cut_meter_t;

static void cut_open(cut_meter_t *m, const workload_t *wl, int stitch) {
  if (stitch) unsetenv("LOOM_STITCH");
  else setenv("LOOM_STITCH", "0", 1);
  loom_trace_options_t o;
  loom_trace_options_init(&o);
  o.spec_workers = 0;
  o.num_threads = 1;
  BENCH_TRY(loom_trace_create(&o, &m->t));
  unsetenv("LOOM_STITCH");
  double rec = 0;
  for (int i = 0; i < 5; i++) step_cuts(m->t, wl, &m->n, &rec); /* compile, warm */
}

/* One round of ROUNDS steps. */
static void cut_round(cut_meter_t *m, const workload_t *wl) {
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  BENCH_TRY(loom_trace_get_stats(m->t, &s));
  int64_t ops = s.recorded_ops;
  double ns = 0, rec = 0;
  for (int i = 0; i < ROUNDS; i++) ns += step_cuts(m->t, wl, &m->n, &rec);
  BENCH_TRY(loom_trace_get_stats(m->t, &s));
  m->ns = ns / (ROUNDS * m->n);
  m->record = rec / (double)(s.recorded_ops - ops);
}

/* The share of segments run through a stitched boundary; closes m. */
static double cut_close(cut_meter_t *m) {
  loom_trace_stats_t s = LOOM_TRACE_STATS_INIT;
  BENCH_TRY(loom_trace_get_stats(m->t, &s));
  loom_trace_destroy(m->t);
  return s.segments ? (double)s.replayed / (double)s.segments : 0;
}

/* Records the cell into g: its inputs, then its ops. */
static void record_cell(loom_graph_t *g, const workload_t *wl, const int64_t (*shapes)[2],
                        const int64_t *s_b, loom_value_t *h, loom_value_t *c) {
  cell_args_t a;
  BENCH_TRY(loom_graph_input(g, "x", LOOM_F32, 2, shapes[0], &a.x));
  BENCH_TRY(loom_graph_input(g, "h", LOOM_F32, 2, shapes[1], &a.h));
  BENCH_TRY(loom_graph_input(g, "c", LOOM_F32, 2, shapes[1], &a.c));
  BENCH_TRY(loom_graph_input(g, "w_ih", LOOM_F32, 2, shapes[2], &a.w_ih));
  BENCH_TRY(loom_graph_input(g, "w_hh", LOOM_F32, 2, shapes[3], &a.w_hh));
  BENCH_TRY(loom_graph_input(g, "b", LOOM_F32, 1, s_b, &a.b));
  BENCH_TRY(wl->cell(g, &a, h, c));
}

/* The cell's executable (an inner cell for the tree), timed alone. */
typedef struct exec_meter {
  loom_graph_t *g;
  loom_executable_t *e;
  loom_tensor_t *ins[6], *outs[2];
  int64_t shapes[4][2], s_b;
  double ns, hot; /* the last round's: each run after the cell is recorded
                     into a scratch graph; runs back to back */
} exec_meter_t;

static void exec_open(exec_meter_t *m, const workload_t *wl) {
  BENCH_TRY(loom_graph_create(&m->g));
  int tree = wl->cell == tree_cell;
  loom_tensor_t *ins[6] = {tree ? wl->zero : wl->xs[0], wl->zero, wl->zero,
                           tree ? wl->zero : wl->w_ih, wl->w_hh, wl->b};
  memcpy(m->ins, ins, sizeof ins);
  const int64_t shapes[4][2] = {{wl->rows, tree ? H : D},
                                {wl->rows, H},
                                {loom_tensor_dim(ins[3], 0), loom_tensor_dim(ins[3], 1)},
                                {loom_tensor_dim(wl->w_hh, 0), loom_tensor_dim(wl->w_hh, 1)}};
  memcpy(m->shapes, shapes, sizeof shapes);
  m->s_b = loom_tensor_dim(wl->b, 0);
  loom_value_t h, c;
  record_cell(m->g, wl, m->shapes, &m->s_b, &h, &c);
  BENCH_TRY(loom_graph_output(m->g, c));
  BENCH_TRY(loom_graph_output(m->g, h));
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = 1;
  BENCH_TRY(loom_compile(m->g, &o, &m->e));
  BENCH_TRY(loom_executable_new_output(m->e, 0, &m->outs[0]));
  BENCH_TRY(loom_executable_new_output(m->e, 1, &m->outs[1]));
}

static void exec_round(exec_meter_t *m, const workload_t *wl) {
  const int n = 20000;
  double t0 = bench_now_ns();
  for (int i = 0; i < n; i++) BENCH_TRY(loom_executable_run(m->e, 6, m->ins, 2, m->outs));
  m->hot = (bench_now_ns() - t0) / n;
  double ns = 0;
  for (int i = 0; i < n / 4; i++) {
    loom_graph_t *scratch;
    BENCH_TRY(loom_graph_create(&scratch));
    loom_value_t h, c;
    record_cell(scratch, wl, m->shapes, &m->s_b, &h, &c);
    t0 = bench_now_ns();
    BENCH_TRY(loom_executable_run(m->e, 6, m->ins, 2, m->outs));
    ns += bench_now_ns() - t0;
    loom_graph_destroy(scratch);
  }
  m->ns = ns / (n / 4);
}

static void exec_close(exec_meter_t *m) {
  loom_tensor_destroy(m->outs[0]);
  loom_tensor_destroy(m->outs[1]);
  loom_executable_destroy(m->e);
  loom_graph_destroy(m->g);
}

static double least(const double *x, int n) {
  double m = x[0];
  for (int i = 1; i < n; i++) m = x[i] < m ? x[i] : m;
  return m;
}

int main(void) {
  for (int tree = 0; tree < 2; tree++) {
    workload_t wl = {0};
    workload_init(&wl, tree);
    exec_meter_t run;
    cut_meter_t on, off;
    exec_open(&run, &wl);
    cut_open(&on, &wl, 1);
    cut_open(&off, &wl, 0);
    /* Rounds of the three in turn, each segment figure taken within its
     * round: the machine's speed changes from minute to minute. */
    double d_on[REPS], d_off[REPS], c_on[REPS], c_off[REPS], r_on[REPS], r_off[REPS];
    double ex[REPS], hot[REPS];
    for (int rep = 0; rep < REPS; rep++) {
      exec_round(&run, &wl);
      cut_round(&on, &wl);
      cut_round(&off, &wl);
      ex[rep] = run.ns, hot[rep] = run.hot;
      c_on[rep] = on.ns, c_off[rep] = off.ns, r_on[rep] = on.record, r_off[rep] = off.record;
      d_on[rep] = on.ns - run.ns, d_off[rep] = off.ns - run.ns;
    }
    double replayed = cut_close(&on);
    cut_close(&off);
    exec_close(&run);
    bench_json_t j;
    bench_json_begin(&j, "path_replay");
    bench_json_str(&j, "workload", wl.name);
    bench_json_num(&j, "ns_per_segment_stitched", bench_median(d_on, REPS));
    bench_json_num(&j, "ns_per_segment_unstitched", bench_median(d_off, REPS));
    bench_json_num(&j, "ns_cut_stitched", least(c_on, REPS));
    bench_json_num(&j, "ns_cut_unstitched", least(c_off, REPS));
    bench_json_num(&j, "ns_exec_run", least(ex, REPS));
    bench_json_num(&j, "ns_exec_run_hot", least(hot, REPS));
    bench_json_num(&j, "ns_record_per_op_stitched", bench_median(r_on, REPS));
    bench_json_num(&j, "ns_record_per_op_unstitched", bench_median(r_off, REPS));
    bench_json_num(&j, "replayed_fraction", replayed);
    bench_json_num(&j, "target_ns", 100);
    bench_json_end(&j);
    workload_free(&wl);
  }
  return 0;
}
