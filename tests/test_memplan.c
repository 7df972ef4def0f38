/* Memory planning and scheduling: hand-made request sets with known
 * optimal arenas, validity (no two live buffers share a byte) and
 * near-optimality on random request sets, and schedules that respect
 * dependencies and lower the peak where the plan's order is bad. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "harness.h"
#include "ir/ir.h"
#include "passes/memplan.h"

/* ---- Checking a memory plan --------------------------------------------- */

static int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

static bool overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return a0 < b1 && b0 < a1;
}

/* Whether i legally sits in place over j. */
static bool in_place_pair(const mem_request_t *r, const mem_plan_t *p, int i, int j) {
  return r[i].inplace_of == j && r[j].last == r[i].first &&
         p->offsets[i] == p->offsets[j] && r[i].bytes <= r[j].bytes;
}

/* Offsets aligned, in the arena, and no two live buffers share a byte
 * unless one took the other's place (each at most once). Returns the
 * number of in-place pairs found; took (may be null) receives for each
 * request the one whose place it took, or -1. */
static int check_plan_took(const mem_request_t *r, int n, const mem_plan_t *p,
                           int *took) {
  int pairs = 0;
  for (int i = 0; took && i < n; i++) took[i] = -1;
  int *taken = calloc((size_t)n + 1, sizeof *taken);
  int64_t naive = 0;
  for (int i = 0; i < n; i++) {
    naive += aligned(r[i].bytes);
    CHECK(p->offsets[i] % 64 == 0 && p->offsets[i] >= 0);
    CHECK(p->offsets[i] + r[i].bytes <= p->arena_bytes);
    for (int j = 0; j < n; j++) {
      if (i == j || r[i].first > r[j].last || r[j].first > r[i].last) continue;
      if (!overlap(p->offsets[i], p->offsets[i] + r[i].bytes, p->offsets[j],
                   p->offsets[j] + r[j].bytes))
        continue;
      if (in_place_pair(r, p, i, j)) {
        if (took) took[i] = j;
        pairs++;
        taken[j]++;
        CHECK(taken[j] == 1);
      } else if (!in_place_pair(r, p, j, i)) {
        test_fail(__FILE__, __LINE__, "requests %d and %d share bytes", i, j);
      }
    }
  }
  CHECK(p->naive_bytes == naive);
  CHECK(p->arena_bytes % 64 == 0);
  CHECK(p->arena_bytes >= p->lower_bound_bytes);
  CHECK(p->arena_bytes <= p->naive_bytes);
  CHECK(p->n_inplace >= pairs);
  free(taken);
  return pairs;
}

static int check_plan(const mem_request_t *r, int n, const mem_plan_t *p) {
  return check_plan_took(r, n, p, NULL);
}

/* The most aligned bytes live at one step; a request that took another's
 * place (took[i] >= 0) does not count at its first step. */
static int64_t brute_lower_bound(const mem_request_t *r, int n, const int *took) {
  int32_t steps = 0;
  for (int i = 0; i < n; i++) steps = r[i].last + 1 > steps ? r[i].last + 1 : steps;
  int64_t most = 0;
  for (int32_t t = 0; t < steps; t++) {
    int64_t live = 0;
    for (int i = 0; i < n; i++)
      if (r[i].first <= t && t <= r[i].last && !(took[i] >= 0 && t == r[i].first))
        live += aligned(r[i].bytes);
    most = live > most ? live : most;
  }
  return most;
}

/* ---- Hand-made request sets --------------------------------------------- */

/* a -> b -> c of equal sizes: two buffers, or one when each is in place. */
static void chain_fits_two_buffers_or_one_in_place(void) {
  mem_request_t r[3] = {{1000, 0, 1, -1}, {1000, 1, 2, -1}, {1000, 2, 3, -1}};
  mem_plan_t p;
  CHECK_OK(mem_plan_build(r, 3, &p));
  CHECK(p.arena_bytes == 2048);
  CHECK(p.lower_bound_bytes == 2048);
  CHECK(p.naive_bytes == 3072);
  CHECK(p.n_inplace == 0);
  CHECK(p.offsets[0] == p.offsets[2]);
  check_plan(r, 3, &p);
  mem_plan_free(&p);

  r[1].inplace_of = 0;
  r[2].inplace_of = 1;
  CHECK_OK(mem_plan_build(r, 3, &p));
  CHECK(p.arena_bytes == 1024);
  CHECK(p.lower_bound_bytes == 1024);
  CHECK(p.n_inplace == 2);
  CHECK(check_plan(r, 3, &p) == 2);
  mem_plan_free(&p);
}

static void overlapping_buffers_need_their_sum(void) {
  mem_request_t r[3] = {{64, 0, 2, -1}, {100, 1, 3, -1}, {192, 2, 4, -1}};
  mem_plan_t p;
  CHECK_OK(mem_plan_build(r, 3, &p));
  CHECK(p.arena_bytes == 64 + 128 + 192);
  CHECK(p.lower_bound_bytes == 64 + 128 + 192);
  check_plan(r, 3, &p);
  mem_plan_free(&p);
}

/* A big buffer dead after step 1 leaves room for two halves later. */
static void big_buffer_reused_by_two_small(void) {
  mem_request_t r[4] = {{4096, 0, 1, -1}, {64, 0, 4, -1},
                        {2048, 2, 3, -1}, {2000, 2, 4, -1}};
  mem_plan_t p;
  CHECK_OK(mem_plan_build(r, 4, &p));
  CHECK(p.arena_bytes == 4096 + 64);
  CHECK(p.lower_bound_bytes == 4096 + 64);
  CHECK(p.naive_bytes == 4096 + 64 + 2048 + 2048);
  check_plan(r, 4, &p);
  mem_plan_free(&p);
}

/* In place only with a handover at the same step, a fitting size, and
 * a buffer nobody else took. */
static void in_place_only_where_legal(void) {
  mem_request_t r[5] = {
      {512, 0, 2, -1},
      {512, 2, 3, 0},  /* takes 0 */
      {256, 2, 4, 0},  /* 0 already taken */
      {1024, 3, 5, 1}, /* larger than 1 */
      {128, 4, 5, 2},  /* 2 ends at 4 == its first: takes 2 */
  };
  mem_plan_t p;
  CHECK_OK(mem_plan_build(r, 5, &p));
  CHECK(p.n_inplace == 2);
  CHECK(p.offsets[1] == p.offsets[0]);
  CHECK(p.offsets[4] == p.offsets[2]);
  CHECK(check_plan(r, 5, &p) == 2);
  /* at step 2: 0/1 shared (512), 2 (256); at 3: 1, 2, 3 = 512+256+1024 */
  CHECK(p.lower_bound_bytes == 512 + 256 + 1024);
  mem_plan_free(&p);

  /* a wrong step: no handover */
  mem_request_t q[2] = {{512, 0, 1, -1}, {512, 2, 3, 0}};
  CHECK_OK(mem_plan_build(q, 2, &p));
  CHECK(p.n_inplace == 0);
  CHECK(p.arena_bytes == 512);
  mem_plan_free(&p);
}

static void odd_sizes_and_empty_plans(void) {
  mem_request_t r[3] = {{1, 0, 0, -1}, {65, 0, 0, -1}, {0, 0, 0, -1}};
  mem_plan_t p;
  CHECK_OK(mem_plan_build(r, 3, &p));
  CHECK(p.arena_bytes == 64 + 128);
  CHECK(p.naive_bytes == 64 + 128);
  check_plan(r, 3, &p);
  mem_plan_free(&p);
  CHECK_OK(mem_plan_build(NULL, 0, &p));
  CHECK(p.arena_bytes == 0 && p.lower_bound_bytes == 0 && p.naive_bytes == 0);
  mem_plan_free(&p);
}

static void bad_requests_fail(void) {
  mem_plan_t p;
  mem_request_t neg[1] = {{-1, 0, 0, -1}};
  CHECK_ERR(mem_plan_build(neg, 1, &p), LOOM_ERR_INVALID, "bytes");
  mem_request_t back[1] = {{64, 3, 2, -1}};
  CHECK_ERR(mem_plan_build(back, 1, &p), LOOM_ERR_INVALID, "interval");
  mem_request_t self[1] = {{64, 0, 1, 0}};
  CHECK_ERR(mem_plan_build(self, 1, &p), LOOM_ERR_INVALID, "in place");
  mem_request_t far[1] = {{64, 0, 1, 7}};
  CHECK_ERR(mem_plan_build(far, 1, &p), LOOM_ERR_INVALID, "in place");
  mem_request_t huge[1] = {{INT64_MAX, 0, 0, -1}};
  CHECK_ERR(mem_plan_build(huge, 1, &p), LOOM_ERR_INVALID, "bytes");
  mem_request_t many[3] = {{(int64_t)1 << 51, 0, 0, -1}, {(int64_t)1 << 51, 0, 0, -1},
                           {64, 0, 0, -1}};
  CHECK_ERR(mem_plan_build(many, 3, &p), LOOM_ERR_INVALID, "total");
  CHECK_ERR(mem_plan_build(NULL, 2, &p), LOOM_ERR_INVALID, "requests");
  CHECK_ERR(mem_plan_build(neg, 1, NULL), LOOM_ERR_INVALID, "null");
  mem_plan_free(NULL);
}

/* Each allocation failing in turn gives NOMEM and leaks nothing. */
/* Each allocation in turn fails, until the plan needs none more. */
static void allocation_failures_are_reported(void) {
  mem_request_t r[3] = {{100, 0, 1, -1}, {100, 1, 2, 0}, {100, 0, 2, -1}};
  loom_status_t s = LOOM_ERR_NOMEM;
  for (int k = 0; k < 64 && s != LOOM_OK; k++) {
    mem_plan_t p;
    core_alloc_fail_after(k);
    s = mem_plan_build(r, 3, &p);
    core_alloc_fail_after(-1);
    CHECK(s == LOOM_OK || s == LOOM_ERR_NOMEM);
    if (s == LOOM_OK) mem_plan_free(&p);
    else CHECK(p.offsets == NULL);
  }
  CHECK(s == LOOM_OK);
}

/* ---- Random request sets ------------------------------------------------ */

static int64_t random_size(void) {
  static const int64_t sizes[] = {64, 256, 1000, 4096, 16384, 65536, 262144};
  return sizes[test_rand_int(0, 6)] * test_rand_int(1, 4) - test_rand_int(0, 63);
}

/* n requests over `steps` steps; about a third in place where a
 * buffer ends where they start. */
static void random_requests(mem_request_t *r, int n, int steps, bool inplace) {
  for (int i = 0; i < n; i++) {
    int32_t first = (int32_t)test_rand_int(0, steps - 1);
    int32_t len = (int32_t)(test_rand_int(0, 3) == 0 ? test_rand_int(0, steps / 2)
                                                     : test_rand_int(0, 4));
    r[i] = (mem_request_t){random_size(), first,
                           first + len < steps ? first + len : steps - 1, -1};
    if (!inplace || i == 0 || test_rand_int(0, 2) != 0) continue;
    int j = (int)test_rand_int(0, i - 1);
    r[i].first = r[j].last;
    if (r[i].last < r[i].first) r[i].last = r[i].first;
    r[i].inplace_of = j;
    if (test_rand_int(0, 3) == 0) r[i].bytes = r[j].bytes + 64; /* too big */
    else if (r[i].bytes > r[j].bytes) r[i].bytes = r[j].bytes;
  }
}

static void random_plans_are_valid(void) {
  test_seed(11);
  mem_request_t r[160];
  for (int trial = 0; trial < 60; trial++) {
    int n = (int)test_rand_int(1, 160);
    bool inplace = trial % 2;
    random_requests(r, n, (int)test_rand_int(1, 40), inplace);
    mem_plan_t p;
    CHECK_OK(mem_plan_build(r, n, &p));
    int took[160];
    int pairs = check_plan_took(r, n, &p, took);
    CHECK(p.lower_bound_bytes == brute_lower_bound(r, n, took));
    if (!inplace) CHECK(pairs == 0 && p.n_inplace == 0);
    else CHECK(pairs == p.n_inplace);
    mem_plan_free(&p);
  }
}

/* Best fit stays close to the bound on random interval sets. */
static void random_arenas_near_lower_bound(void) {
  test_seed(12);
  mem_request_t r[200];
  double ratio = 0, worst = 0;
  int trials = 40;
  for (int trial = 0; trial < trials; trial++) {
    random_requests(r, 200, 50, false);
    mem_plan_t p;
    CHECK_OK(mem_plan_build(r, 200, &p));
    double q = (double)p.arena_bytes / (double)p.lower_bound_bytes;
    ratio += q / trials;
    worst = q > worst ? q : worst;
    mem_plan_free(&p);
  }
  printf("  arena / lower bound: mean %.3f, worst %.3f\n", ratio, worst);
  CHECK(ratio <= 1.15);
}

static void plans_are_deterministic(void) {
  test_seed(13);
  mem_request_t r[120];
  random_requests(r, 120, 30, true);
  mem_plan_t a, b;
  CHECK_OK(mem_plan_build(r, 120, &a));
  CHECK_OK(mem_plan_build(r, 120, &b));
  CHECK(memcmp(a.offsets, b.offsets, sizeof *a.offsets * 120) == 0);
  CHECK(a.arena_bytes == b.arena_bytes && a.n_inplace == b.n_inplace);
  mem_plan_free(&a);
  mem_plan_free(&b);
}

/* ---- Schedules ---------------------------------------------------------- */

/* A plan built by hand: the graph's nodes cut into runs of consecutive
 * nodes, one group per run. */
static void plan_from_cuts(const loom_graph_t *g, const int32_t *group_of_node,
                           int n_groups, fuse_plan_t *plan) {
  plan->n_groups = n_groups;
  plan->groups = calloc((size_t)n_groups, sizeof *plan->groups);
  plan->group_of_node = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
  memcpy(plan->group_of_node, group_of_node, sizeof(int32_t) * (size_t)g->n_nodes);
  for (int gi = 0; gi < n_groups; gi++) {
    fuse_group_t *grp = &plan->groups[gi];
    grp->kind = FUSE_REFERENCE;
    grp->anchor = -1;
    grp->nodes = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
    grp->inputs = malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
    grp->outputs = malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
  }
  for (int64_t i = 0; i < g->n_nodes; i++) {
    fuse_group_t *grp = &plan->groups[group_of_node[i]];
    const ir_node_t *node = &g->nodes[i];
    grp->nodes[grp->n_nodes++] = (int32_t)i;
    for (int k = 0; k < node->n_in; k++) {
      int32_t v = node->in[k];
      const ir_value_t *val = &g->values[v];
      if (val->kind == IR_VALUE_NODE && group_of_node[val->node] == group_of_node[i])
        continue;
      bool seen = false;
      for (int q = 0; q < grp->n_inputs; q++) seen |= grp->inputs[q] == v;
      if (!seen) grp->inputs[grp->n_inputs++] = v;
    }
  }
  /* outputs: values read by another group, or graph outputs */
  for (int64_t v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != IR_VALUE_NODE) continue;
    int32_t gp = group_of_node[g->values[v].node];
    bool out = false;
    for (int64_t k = 0; k < g->n_outputs; k++) out |= g->outputs[k] == v;
    for (int gi = 0; gi < n_groups; gi++)
      for (int q = 0; gi != gp && q < plan->groups[gi].n_inputs; q++)
        out |= plan->groups[gi].inputs[q] == v;
    if (out) plan->groups[gp].outputs[plan->groups[gp].n_outputs++] = (int32_t)v;
  }
}

static void plan_free(fuse_plan_t *plan) {
  for (int i = 0; i < plan->n_groups; i++) {
    free(plan->groups[i].nodes);
    free(plan->groups[i].inputs);
    free(plan->groups[i].outputs);
  }
  free(plan->groups);
  free(plan->group_of_node);
}

static int32_t producer(const loom_graph_t *g, const fuse_plan_t *plan, int32_t v) {
  const ir_value_t *val = &g->values[v];
  return val->kind == IR_VALUE_NODE ? plan->group_of_node[val->node] : -1;
}

/* order is a permutation in which every group runs after the groups it
 * reads from. */
static void check_order(const loom_graph_t *g, const fuse_plan_t *plan,
                        const int32_t *order) {
  int n = plan->n_groups;
  int *step = malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) step[i] = -1;
  for (int t = 0; t < n; t++) {
    CHECK(order[t] >= 0 && order[t] < n);
    if (order[t] < 0 || order[t] >= n) break;
    CHECK(step[order[t]] == -1);
    step[order[t]] = t;
  }
  for (int i = 0; i < n; i++) {
    const fuse_group_t *grp = &plan->groups[i];
    for (int q = 0; q < grp->n_inputs; q++) {
      int32_t p = producer(g, plan, grp->inputs[q]);
      if (p >= 0 && p != i && !(step[p] < step[i]))
        test_fail(__FILE__, __LINE__, "group %d runs before its input's group %d", i, p);
    }
  }
  free(step);
}

/* The most bytes live at one step of order: a group's outputs live from
 * its step to their last reader's step. */
static int64_t peak_of(const fuse_plan_t *plan, const int64_t *bytes,
                       const int32_t *order) {
  int n = plan->n_groups;
  int *step = malloc(sizeof(int) * (size_t)n);
  for (int t = 0; t < n; t++) step[order[t]] = t;
  int64_t *delta = calloc((size_t)n + 1, sizeof *delta);
  for (int i = 0; i < n; i++) {
    const fuse_group_t *grp = &plan->groups[i];
    for (int k = 0; k < grp->n_outputs; k++) {
      int32_t v = grp->outputs[k];
      if (bytes[v] < 0) continue;
      int last = step[i];
      for (int j = 0; j < n; j++)
        for (int q = 0; q < plan->groups[j].n_inputs; q++)
          if (plan->groups[j].inputs[q] == v && step[j] > last) last = step[j];
      delta[step[i]] += bytes[v];
      delta[last + 1] -= bytes[v];
    }
  }
  int64_t live = 0, peak = 0;
  for (int t = 0; t < n; t++) {
    live += delta[t];
    peak = live > peak ? live : peak;
  }
  free(step);
  free(delta);
  return peak;
}

/* x feeds two branches, each a big temporary reduced to a small value,
 * then joined. The plan runs both big steps first; finishing one branch
 * before the other halves the peak. */
static void schedule_finishes_a_branch_first(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, t1, t2, s1, s2, y;
  loom_dim_t dims[] = {8};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, dims, &x));
  CHECK_OK(loom_exp(g, x, &t1));
  CHECK_OK(loom_sin(g, x, &t2));
  CHECK_OK(loom_neg(g, t1, &s1));
  CHECK_OK(loom_neg(g, t2, &s2));
  CHECK_OK(loom_add(g, s1, s2, &y));
  CHECK_OK(loom_graph_output(g, y));
  int64_t *bytes = malloc(sizeof(int64_t) * (size_t)g->n_values);
  for (int64_t v = 0; v < g->n_values; v++) bytes[v] = -1;
  bytes[t1.id] = bytes[t2.id] = 1 << 20;
  bytes[s1.id] = bytes[s2.id] = 64;
  fuse_plan_t plan;
  plan_from_cuts(g, (int32_t[]){0, 1, 2, 3, 4}, 5, &plan);
  int32_t order[5], own[5] = {0, 1, 2, 3, 4};
  CHECK_OK(sched_order(g, &plan, bytes, order));
  check_order(g, &plan, order);
  int64_t before = peak_of(&plan, bytes, own), after = peak_of(&plan, bytes, order);
  CHECK(before == 2 * (1 << 20) + 64);
  CHECK(after == (1 << 20) + 128);
  plan_free(&plan);
  free(bytes);
  loom_graph_destroy(g);
}

/* A random DAG of elementwise nodes over one shape, cut into groups of
 * one to three consecutive nodes, with random buffer sizes. */
static loom_graph_t *random_dag(int n_nodes, int32_t *group_of_node, int *n_groups) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t vals[256];
  loom_dim_t dims[] = {4};
  int n_vals = 0;
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, dims, &vals[n_vals++]));
  CHECK_OK(loom_graph_input(g, "y", LOOM_F32, 1, dims, &vals[n_vals++]));
  for (int i = 0; i < n_nodes; i++) {
    /* recent values are likelier inputs, so that chains form */
    int lo = n_vals > 6 && test_rand_int(0, 1) ? n_vals - 6 : 0;
    loom_value_t a = vals[test_rand_int(lo, n_vals - 1)];
    loom_value_t b = vals[test_rand_int(0, n_vals - 1)];
    if (test_rand_int(0, 1)) CHECK_OK(loom_add(g, a, b, &vals[n_vals]));
    else CHECK_OK(loom_exp(g, a, &vals[n_vals]));
    n_vals++;
  }
  CHECK_OK(loom_graph_output(g, vals[n_vals - 1]));
  int gi = 0, run = 0;
  for (int i = 0; i < n_nodes; i++) {
    if (run > 0 && test_rand_int(0, 2) == 0) gi++, run = 0;
    group_of_node[i] = gi;
    run++;
  }
  *n_groups = gi + 1;
  return g;
}

static int64_t *random_bytes(const loom_graph_t *g) {
  int64_t *bytes = malloc(sizeof(int64_t) * (size_t)g->n_values);
  for (int64_t v = 0; v < g->n_values; v++)
    bytes[v] = g->values[v].kind == IR_VALUE_NODE ? random_size() : -1;
  bytes[g->outputs[0]] = -1;
  return bytes;
}

static void random_schedules_respect_dependencies(void) {
  test_seed(21);
  int32_t group_of_node[120], order[120];
  int64_t sum_before = 0, sum_after = 0;
  for (int trial = 0; trial < 40; trial++) {
    int n_groups;
    loom_graph_t *g = random_dag((int)test_rand_int(1, 120), group_of_node, &n_groups);
    int64_t *bytes = random_bytes(g);
    fuse_plan_t plan;
    plan_from_cuts(g, group_of_node, n_groups, &plan);
    CHECK_OK(sched_order(g, &plan, bytes, order));
    check_order(g, &plan, order);
    int32_t own[120];
    for (int i = 0; i < n_groups; i++) own[i] = i;
    int64_t before = peak_of(&plan, bytes, own), after = peak_of(&plan, bytes, order);
    CHECK(after <= before);
    sum_before += before;
    sum_after += after;
    int32_t again[120];
    CHECK_OK(sched_order(g, &plan, bytes, again));
    CHECK(memcmp(order, again, sizeof(int32_t) * (size_t)n_groups) == 0);
    plan_free(&plan);
    free(bytes);
    loom_graph_destroy(g);
  }
  printf("  peak, plan order / scheduled: %.3f\n", (double)sum_before / (double)sum_after);
}

/* Alias groups share their input's buffer: the order is still valid and
 * the input stays live until the alias's last reader. */
static void alias_groups_keep_their_input_live(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, t, r, big, u, y;
  loom_dim_t dims[] = {8}, flat[] = {2, 4};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, dims, &x));
  CHECK_OK(loom_exp(g, x, &t));
  CHECK_OK(loom_reshape(g, t, 2, flat, &r));
  CHECK_OK(loom_sin(g, x, &big));
  CHECK_OK(loom_neg(g, big, &u));
  CHECK_OK(loom_reshape(g, u, 1, dims, &u));
  CHECK_OK(loom_add(g, u, t, &y));
  CHECK_OK(loom_neg(g, r, &r));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, r));
  int64_t *bytes = malloc(sizeof(int64_t) * (size_t)g->n_values);
  for (int64_t v = 0; v < g->n_values; v++) bytes[v] = g->values[v].kind == IR_VALUE_NODE ? 4096 : -1;
  bytes[y.id] = bytes[r.id] = -1;
  fuse_plan_t plan;
  plan_from_cuts(g, (int32_t[]){0, 1, 2, 3, 4, 5, 6}, 7, &plan);
  plan.groups[1].kind = plan.groups[4].kind = FUSE_ALIAS;
  int32_t order[7];
  CHECK_OK(sched_order(g, &plan, bytes, order));
  check_order(g, &plan, order);
  plan_free(&plan);
  free(bytes);
  loom_graph_destroy(g);
}

/* Assign groups run last, in their order, even when listed first. */
static void assigns_run_last(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {4};
  loom_value_t p, q, a, b;
  CHECK_OK(loom_graph_param(g, "p", LOOM_F32, 1, shape, NULL, &p));
  CHECK_OK(loom_graph_param(g, "q", LOOM_F32, 1, shape, NULL, &q));
  CHECK_OK(loom_assign(g, q, p));
  CHECK_OK(loom_exp(g, p, &a));
  CHECK_OK(loom_assign(g, p, a));
  CHECK_OK(loom_neg(g, q, &b));
  CHECK_OK(loom_graph_output(g, b));
  int64_t *bytes = malloc(sizeof(int64_t) * (size_t)g->n_values);
  for (int64_t v = 0; v < g->n_values; v++) bytes[v] = -1;
  bytes[a.id] = 256;
  fuse_plan_t plan;
  plan_from_cuts(g, (int32_t[]){0, 1, 2, 3}, 4, &plan);
  int32_t order[4];
  CHECK_OK(sched_order(g, &plan, bytes, order));
  check_order(g, &plan, order);
  CHECK(order[2] == 0 && order[3] == 2);
  plan_free(&plan);
  free(bytes);
  loom_graph_destroy(g);
}

static void bad_schedules_fail(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x, a, b;
  loom_dim_t dims[] = {4};
  CHECK_OK(loom_graph_input(g, "x", LOOM_F32, 1, dims, &x));
  CHECK_OK(loom_exp(g, x, &a));
  CHECK_OK(loom_neg(g, a, &b));
  CHECK_OK(loom_graph_output(g, b));
  int64_t bytes[3] = {-1, 64, -1};
  fuse_plan_t plan;
  plan_from_cuts(g, (int32_t[]){0, 1}, 2, &plan);
  int32_t order[2];
  CHECK_ERR(sched_order(NULL, &plan, bytes, order), LOOM_ERR_INVALID, "null");
  CHECK_ERR(sched_order(g, NULL, bytes, order), LOOM_ERR_INVALID, "null");
  CHECK_ERR(sched_order(g, &plan, NULL, order), LOOM_ERR_INVALID, "null");
  plan.group_of_node[1] = 5;
  CHECK_ERR(sched_order(g, &plan, bytes, order), LOOM_ERR_INVALID, "group");
  plan.group_of_node[1] = 1;
  plan.groups[1].inputs[0] = 99;
  CHECK_ERR(sched_order(g, &plan, bytes, order), LOOM_ERR_INVALID, "value");
  /* a cycle: group 0 claims to read group 1's output */
  plan.groups[1].inputs[0] = a.id;
  plan.groups[0].inputs[0] = b.id;
  CHECK_ERR(sched_order(g, &plan, bytes, order), LOOM_ERR_INVALID, "cycle");
  plan.groups[0].inputs[0] = x.id;
  for (int k = 0; k < 40; k++) {
    core_alloc_fail_after(k);
    loom_status_t s = sched_order(g, &plan, bytes, order);
    core_alloc_fail_after(-1);
    CHECK(s == LOOM_OK || s == LOOM_ERR_NOMEM);
  }
  plan_free(&plan);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(chain_fits_two_buffers_or_one_in_place);
  TEST_RUN(overlapping_buffers_need_their_sum);
  TEST_RUN(big_buffer_reused_by_two_small);
  TEST_RUN(in_place_only_where_legal);
  TEST_RUN(odd_sizes_and_empty_plans);
  TEST_RUN(bad_requests_fail);
  TEST_RUN(allocation_failures_are_reported);
  TEST_RUN(random_plans_are_valid);
  TEST_RUN(random_arenas_near_lower_bound);
  TEST_RUN(plans_are_deterministic);
  TEST_RUN(schedule_finishes_a_branch_first);
  TEST_RUN(random_schedules_respect_dependencies);
  TEST_RUN(alias_groups_keep_their_input_live);
  TEST_RUN(assigns_run_last);
  TEST_RUN(bad_schedules_fail);
  return test_summary();
}
