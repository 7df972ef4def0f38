/* Fusion: which nodes become one kernel. Softmax and layer_norm after
 * decomposition are one reduction group each, matmul + bias + relu one
 * contraction group, an elementwise diamond one group; values crossing
 * groups (and graph outputs) are group outputs, nothing else is; no node
 * is in two groups; the order respects every dependency; fusion off gives
 * one group per node. Every plan is also checked by check_plan. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "harness.h"
#include "loom/ops.h"
#include "backend/cpu/codegen/codegen.h"
#include "passes/fuse.h"

static const fuse_options_t fusion_on = {.enabled = true};
static const fuse_options_t fusion_off = {.enabled = false};

/* An input named x<position>. */
static loom_value_t input(loom_graph_t *g, int rank, const int64_t *dims) {
  loom_value_t v = {-1};
  char name[16];
  snprintf(name, sizeof name, "x%d", loom_graph_num_inputs(g));
  CHECK_OK(loom_graph_input(g, name, LOOM_F32, rank, dims, &v));
  return v;
}

/* A one-element f32 constant; the tensor is released at once (the graph
 * keeps its own copy). */
static loom_value_t scalar(loom_graph_t *g, double x) {
  int64_t one[] = {1};
  loom_tensor_t *t = test_tensor(LOOM_F32, 1, one, &x);
  loom_value_t v = {-1};
  CHECK_OK(loom_graph_constant(g, t, &v));
  loom_tensor_destroy(t);
  return v;
}

static bool has(const int32_t *list, int n, int32_t v) {
  for (int i = 0; i < n; i++)
    if (list[i] == v) return true;
  return false;
}

static int32_t producer_of(const loom_graph_t *g, int32_t v) {
  return g->values[v].kind == IR_VALUE_NODE ? g->values[v].node : -1;
}

static bool is_graph_output(const loom_graph_t *g, int32_t v) {
  for (int64_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return true;
  return false;
}

/* Whether some node outside group gi reads v, or no node does. */
static bool read_elsewhere(const loom_graph_t *g, const fuse_plan_t *p,
                           int gi, int32_t v) {
  bool read = false;
  for (int64_t n = 0; n < g->n_nodes; n++)
    for (int k = 0; k < g->nodes[n].n_in; k++) {
      if (g->nodes[n].in[k] != v) continue;
      if (p->group_of_node[n] != gi) return true;
      read = true;
    }
  return !read;
}

/* Each node in one group; inputs come from earlier groups' outputs;
 * outputs are exactly the values read elsewhere, read nowhere, or graph
 * outputs (a group of one node lists every output: its reference kernel
 * writes them all); assigns come last. */
static void check_node_once(const loom_graph_t *g, const fuse_plan_t *p) {
  for (int64_t n = 0; n < g->n_nodes; n++) {
    int seen = 0;
    for (int i = 0; i < p->n_groups; i++)
      seen += has(p->groups[i].nodes, p->groups[i].n_nodes, (int32_t)n);
    CHECK(seen == 1);
    int gi = p->group_of_node[n];
    CHECK(gi >= 0 && gi < p->n_groups &&
          has(p->groups[gi].nodes, p->groups[gi].n_nodes, (int32_t)n));
  }
}

static void check_group_io(const loom_graph_t *g, const fuse_plan_t *p, int i) {
  const fuse_group_t *grp = &p->groups[i];
  for (int j = 1; j < grp->n_nodes; j++) CHECK(grp->nodes[j - 1] < grp->nodes[j]);
  for (int j = 0; j < grp->n_nodes; j++) {
    const ir_node_t *node = &g->nodes[grp->nodes[j]];
    for (int k = 0; k < node->n_in; k++) {
      int32_t q = producer_of(g, node->in[k]);
      if (q < 0 || p->group_of_node[q] != i)
        CHECK(has(grp->inputs, grp->n_inputs, node->in[k]));
    }
  }
  for (int j = 0; j < grp->n_inputs; j++) {
    int32_t v = grp->inputs[j], q = producer_of(g, v);
    for (int k = 0; k < j; k++) CHECK(grp->inputs[k] != v);
    if (q < 0) continue;
    int pg = p->group_of_node[q];
    CHECK(pg < i); /* dependencies respected */
    CHECK(has(p->groups[pg].outputs, p->groups[pg].n_outputs, v));
  }
  bool whole = grp->n_nodes == 1;
  for (int j = 0; j < grp->n_outputs; j++) {
    int32_t v = grp->outputs[j], q = producer_of(g, v);
    CHECK(q >= 0 && p->group_of_node[q] == i);
    CHECK(whole || is_graph_output(g, v) || read_elsewhere(g, p, i, v));
  }
}

static bool same_shape(const loom_graph_t *g, int32_t a, int32_t b) {
  const ir_type_t *x = &g->values[a].type, *y = &g->values[b].type;
  if (x->rank != y->rank) return false;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i] != y->dims[i]) return false;
  return true;
}

/* An elementwise group's outputs share its space; a contraction group
 * holds one contraction, its anchor, which reads nothing computed in the
 * group; a reduction group's reductions all read its full space. */
static void check_group_kind(const loom_graph_t *g, const fuse_group_t *grp) {
  int contractions = 0;
  int32_t space = -1;
  for (int j = 0; j < grp->n_nodes; j++) {
    const ir_node_t *node = &g->nodes[grp->nodes[j]];
    ir_fusion_class_t cls = ir_ops[node->op].fusion_class;
    contractions += cls == IR_CLASS_CONTRACT;
    if (grp->kind == FUSE_REDUCTION && cls == IR_CLASS_REDUCE) {
      if (space >= 0) CHECK(same_shape(g, space, node->in[0]));
      space = node->in[0];
    }
  }
  if (grp->kind == FUSE_ELEMENTWISE)
    for (int j = 1; j < grp->n_outputs; j++)
      CHECK(same_shape(g, grp->outputs[0], grp->outputs[j]));
  if (grp->kind == FUSE_CONTRACTION) {
    CHECK(contractions == 1 && has(grp->nodes, grp->n_nodes, grp->anchor));
    const ir_node_t *anchor = &g->nodes[grp->anchor];
    for (int k = 0; k < anchor->n_in; k++) {
      int32_t q = producer_of(g, anchor->in[k]);
      CHECK(q < 0 || !has(grp->nodes, grp->n_nodes, q));
    }
  }
  else CHECK(contractions == 0 || grp->kind == FUSE_REFERENCE);
  if (grp->kind == FUSE_REDUCTION)
    CHECK(grp->anchor >= 0 &&
          ir_ops[g->nodes[grp->anchor].op].fusion_class == IR_CLASS_REDUCE &&
          has(grp->nodes, grp->n_nodes, grp->anchor));
}

static void check_plan(const loom_graph_t *g, const fuse_plan_t *p) {
  check_node_once(g, p);
  for (int i = 0; i < p->n_groups; i++) check_group_kind(g, &p->groups[i]);
  bool assigns = false;
  for (int i = 0; i < p->n_groups; i++) {
    check_group_io(g, p, i);
    bool assign = g->nodes[p->groups[i].nodes[0]].op == IR_OP_ASSIGN;
    CHECK(!assigns || assign); /* assigns last */
    assigns |= assign;
  }
  for (int64_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i], q = producer_of(g, v);
    if (q < 0) continue;
    const fuse_group_t *grp = &p->groups[p->group_of_node[q]];
    CHECK(has(grp->outputs, grp->n_outputs, v));
  }
}

static void build_checked(const loom_graph_t *g, const fuse_options_t *o,
                          fuse_plan_t *p) {
  loom_status_t s = fuse_plan_build(g, o, &cg_fuse_caps, p);
  CHECK_OK(s);
  if (s == LOOM_OK) check_plan(g, p);
}

/* softmax over the last axis, decomposed by hand: max, sub, exp, sum,
 * div. Returns the output; *e receives exp's value. */
static loom_value_t softmax_by_hand(loom_graph_t *g, loom_value_t x,
                                    loom_value_t *e) {
  int64_t last[] = {-1};
  loom_value_t m, d, s, y;
  CHECK_OK(loom_max(g, x, 1, last, 1, &m));
  CHECK_OK(loom_sub(g, x, m, &d));
  CHECK_OK(loom_exp(g, d, e));
  CHECK_OK(loom_sum(g, *e, 1, last, 1, &s));
  CHECK_OK(loom_div(g, *e, s, &y));
  return y;
}

static void softmax_is_one_reduction_group(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 8}), e;
  loom_value_t y = softmax_by_hand(g, x, &e);
  CHECK_OK(loom_graph_output(g, y));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 1);
  if (p.n_groups == 1) {
    const fuse_group_t *grp = &p.groups[0];
    CHECK(grp->kind == FUSE_REDUCTION);
    CHECK(grp->anchor == 0); /* the max */
    CHECK(grp->n_nodes == 5);
    CHECK(grp->n_inputs == 1 && grp->inputs[0] == x.id);
    CHECK(grp->n_outputs == 1 && grp->outputs[0] == y.id); /* one buffer */
  }
  char *text = NULL;
  CHECK_OK(fuse_plan_describe(g, &p, &text));
  CHECK(text && strcmp(text, "g0 reduction [max, sub, exp, sum, div] "
                             "in: %0 out: %5\n") == 0);
  core_free(text);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* mean as sum * (1/n), as the decomposition writes it. */
static loom_value_t mean_last(loom_graph_t *g, loom_value_t x, double n) {
  int64_t last[] = {-1};
  loom_value_t s, m;
  CHECK_OK(loom_sum(g, x, 1, last, 1, &s));
  CHECK_OK(loom_mul(g, s, scalar(g, 1 / n), &m));
  return m;
}

static void layer_norm_is_one_reduction_group(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 16});
  loom_value_t gamma = input(g, 1, (int64_t[]){16});
  loom_value_t beta = input(g, 1, (int64_t[]){16});
  loom_value_t mu = mean_last(g, x, 16), d, sq, var, ve, r, nrm, sc, y;
  CHECK_OK(loom_sub(g, x, mu, &d));
  CHECK_OK(loom_mul(g, d, d, &sq));
  var = mean_last(g, sq, 16);
  CHECK_OK(loom_add(g, var, scalar(g, 1e-5), &ve));
  CHECK_OK(loom_rsqrt(g, ve, &r));
  CHECK_OK(loom_mul(g, d, r, &nrm));
  CHECK_OK(loom_mul(g, nrm, gamma, &sc));
  CHECK_OK(loom_add(g, sc, beta, &y));
  CHECK_OK(loom_graph_output(g, y));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 1);
  if (p.n_groups == 1) {
    CHECK(p.groups[0].kind == FUSE_REDUCTION);
    CHECK(p.groups[0].n_nodes == loom_graph_num_nodes(g));
    CHECK(p.groups[0].n_outputs == 1 && p.groups[0].outputs[0] == y.id);
    CHECK(p.groups[0].n_inputs == 6); /* x, gamma, beta, 3 constants */
  }
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* a @ w + b, relu: one kernel with the epilogue on the output tile. */
static void matmul_bias_relu_is_one_contraction_group(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = input(g, 2, (int64_t[]){8, 16});
  loom_value_t w = input(g, 2, (int64_t[]){16, 32});
  loom_value_t b = input(g, 1, (int64_t[]){32}), mm, z, y;
  CHECK_OK(loom_matmul(g, a, w, 0, 0, &mm));
  CHECK_OK(loom_add(g, mm, b, &z));
  CHECK_OK(loom_relu(g, z, &y));
  CHECK_OK(loom_graph_output(g, y));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 1);
  if (p.n_groups == 1) {
    const fuse_group_t *grp = &p.groups[0];
    CHECK(grp->kind == FUSE_CONTRACTION);
    CHECK(grp->anchor == 0 && grp->n_nodes == 3);
    CHECK(grp->n_inputs == 3 && has(grp->inputs, 3, a.id) &&
          has(grp->inputs, 3, w.id) && has(grp->inputs, 3, b.id));
    CHECK(grp->n_outputs == 1 && grp->outputs[0] == y.id);
  }
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* m * 0.9 over the product's space, read only by the epilogue, joins the
 * contraction (an optimizer's moment beside its gradient): one group,
 * compiled equal to the interpreter. t = x * 2 feeds the matmul itself as
 * well as the epilogue, so it keeps a group and a buffer of its own. */
static void epilogue_takes_values_beside_the_product(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = input(g, 2, (int64_t[]){8, 16}), w = input(g, 2, (int64_t[]){16, 32});
  loom_value_t m = input(g, 2, (int64_t[]){8, 32}), mb, mm, y;
  CHECK_OK(loom_mul(g, m, scalar(g, 0.9), &mb));
  CHECK_OK(loom_matmul(g, a, w, 0, 0, &mm));
  CHECK_OK(loom_add(g, mm, mb, &y));
  CHECK_OK(loom_graph_output(g, y));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 1);
  if (p.n_groups == 1)
    CHECK(p.groups[0].kind == FUSE_CONTRACTION && p.groups[0].n_nodes == 3 &&
          p.groups[0].anchor == producer_of(g, mm.id) && has(p.groups[0].inputs, p.groups[0].n_inputs, m.id));
  fuse_plan_free(&p);
  loom_tensor_t *in[3] = {test_rand_tensor(LOOM_F32, 2, (int64_t[]){8, 16}, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){16, 32}, -1, 1),
                          test_rand_tensor(LOOM_F32, 2, (int64_t[]){8, 32}, -1, 1)};
  loom_tensor_destroy(test_run1(g, 3, in));
  for (int i = 0; i < 3; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);

  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){8, 8}), v = input(g, 2, (int64_t[]){8, 8}), t;
  CHECK_OK(loom_mul(g, x, scalar(g, 2), &t));
  CHECK_OK(loom_matmul(g, t, v, 0, 0, &mm));
  CHECK_OK(loom_add(g, mm, t, &y));
  CHECK_OK(loom_graph_output(g, y));
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 2);
  if (p.n_groups == 2)
    CHECK(p.groups[0].kind == FUSE_ELEMENTWISE && p.groups[1].kind == FUSE_CONTRACTION &&
          p.groups[1].n_nodes == 2);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* exp feeds sin and cos, which meet again in an add. */
static void elementwise_diamond_is_one_group(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 4}), a, s, c, d;
  CHECK_OK(loom_exp(g, x, &a));
  CHECK_OK(loom_sin(g, a, &s));
  CHECK_OK(loom_cos(g, a, &c));
  CHECK_OK(loom_add(g, s, c, &d));
  CHECK_OK(loom_graph_output(g, d));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 1);
  if (p.n_groups == 1) {
    CHECK(p.groups[0].kind == FUSE_ELEMENTWISE && p.groups[0].anchor == -1);
    CHECK(p.groups[0].n_nodes == 4);
    CHECK(p.groups[0].n_outputs == 1 && p.groups[0].outputs[0] == d.id);
  }
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* A small value broadcast into a bigger elementwise group is recomputed
 * per element rather than given a buffer: b * 2 ([8]) folds into the
 * [4, 8] add that reads it. */
static void broadcast_value_folds_into_its_consumer(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = input(g, 2, (int64_t[]){4, 8});
  loom_value_t b = input(g, 1, (int64_t[]){8}), b2, y;
  CHECK_OK(loom_mul(g, b, scalar(g, 2), &b2));
  CHECK_OK(loom_add(g, a, b2, &y));
  CHECK_OK(loom_graph_output(g, y));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 1);
  if (p.n_groups == 1) {
    CHECK(p.groups[0].kind == FUSE_ELEMENTWISE && p.groups[0].n_nodes == 2);
    CHECK(p.groups[0].n_outputs == 1 && p.groups[0].outputs[0] == y.id);
  }
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* h = exp(x) feeds two matmuls: h is its group's output, read by both. */
static void value_read_by_two_groups_is_an_output(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 8});
  loom_value_t w = input(g, 2, (int64_t[]){8, 8}), h, m1, m2;
  CHECK_OK(loom_exp(g, x, &h));
  CHECK_OK(loom_matmul(g, h, w, 0, 0, &m1));
  CHECK_OK(loom_matmul(g, h, w, 0, 1, &m2));
  CHECK_OK(loom_graph_output(g, m1));
  CHECK_OK(loom_graph_output(g, m2));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 3);
  const fuse_group_t *hg = &p.groups[p.group_of_node[0]];
  CHECK(hg->kind == FUSE_ELEMENTWISE);
  CHECK(hg->n_outputs == 1 && hg->outputs[0] == h.id);
  for (int n = 1; n <= 2; n++) {
    const fuse_group_t *mg = &p.groups[p.group_of_node[n]];
    CHECK(mg->kind == FUSE_CONTRACTION && mg->anchor == n);
    CHECK(has(mg->inputs, mg->n_inputs, h.id));
  }
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* mm feeds relu (its epilogue) and a sum: the sum reads mm's buffer, it
 * does not recompute the product. */
static void matmul_is_never_in_two_groups(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = input(g, 2, (int64_t[]){4, 8});
  loom_value_t w = input(g, 2, (int64_t[]){8, 8}), mm, y1, y2;
  CHECK_OK(loom_matmul(g, a, w, 0, 0, &mm));
  CHECK_OK(loom_relu(g, mm, &y1));
  CHECK_OK(loom_sum(g, mm, 1, (int64_t[]){-1}, 0, &y2));
  CHECK_OK(loom_graph_output(g, y1));
  CHECK_OK(loom_graph_output(g, y2));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p); /* checks each node is in one group */
  CHECK(p.n_groups == 2);
  const fuse_group_t *cg = &p.groups[p.group_of_node[0]];
  CHECK(cg->kind == FUSE_CONTRACTION && cg->n_nodes == 2);
  CHECK(cg->n_outputs == 2 && has(cg->outputs, 2, mm.id) &&
        has(cg->outputs, 2, y1.id));
  const fuse_group_t *rg = &p.groups[p.group_of_node[2]];
  CHECK(rg->kind == FUSE_REDUCTION && rg->n_nodes == 1);
  CHECK(p.group_of_node[0] < p.group_of_node[2]);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* d = a * transpose(a @ w): d may not join a's group, since the
 * transpose, a group of its own, sits between a and d. */
static void joins_never_break_a_dependency(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){8, 8});
  loom_value_t w = input(g, 2, (int64_t[]){8, 8}), a, m, t, d;
  CHECK_OK(loom_exp(g, x, &a));
  CHECK_OK(loom_matmul(g, a, w, 0, 0, &m));
  CHECK_OK(loom_transpose(g, m, NULL, &t));
  CHECK_OK(loom_mul(g, a, t, &d));
  CHECK_OK(loom_graph_output(g, d));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p); /* checks the order */
  CHECK(p.n_groups == 4);
  CHECK(p.group_of_node[3] != p.group_of_node[0]);
  CHECK(p.group_of_node[0] < p.group_of_node[1]);
  CHECK(p.group_of_node[1] < p.group_of_node[2]);
  CHECK(p.group_of_node[2] < p.group_of_node[3]);
  const fuse_group_t *ag = &p.groups[p.group_of_node[0]];
  CHECK(ag->n_outputs == 1 && ag->outputs[0] == a.id);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* An intermediate that is also a graph output gets a buffer. */
static void graph_outputs_are_group_outputs(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 8}), e;
  loom_value_t y = softmax_by_hand(g, x, &e);
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, e));
  CHECK_OK(loom_graph_output(g, x)); /* an input: no group writes it */
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 1);
  if (p.n_groups == 1) {
    CHECK(p.groups[0].n_outputs == 2);
    CHECK(has(p.groups[0].outputs, 2, e.id) && has(p.groups[0].outputs, 2, y.id));
  }
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

static void fusion_off_gives_one_group_per_node(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 8}), e, mm, z;
  loom_value_t w = input(g, 2, (int64_t[]){8, 8});
  loom_value_t y = softmax_by_hand(g, x, &e);
  CHECK_OK(loom_matmul(g, y, w, 0, 0, &mm));
  CHECK_OK(loom_relu(g, mm, &z));
  CHECK_OK(loom_graph_output(g, z));
  fuse_plan_t p;
  build_checked(g, &fusion_off, &p);
  static const fuse_kind_t kinds[] = {
      FUSE_REDUCTION,   FUSE_ELEMENTWISE, FUSE_ELEMENTWISE, FUSE_REDUCTION,
      FUSE_ELEMENTWISE, FUSE_CONTRACTION, FUSE_ELEMENTWISE};
  CHECK(p.n_groups == 7);
  for (int i = 0; i < p.n_groups && i < 7; i++) {
    CHECK(p.groups[i].n_nodes == 1 && p.groups[i].nodes[0] == i);
    CHECK(p.groups[i].kind == kinds[i]);
    CHECK(p.groups[i].n_outputs == 1);
  }
  CHECK(p.groups[0].anchor == 0 && p.groups[5].anchor == 5);
  CHECK(p.groups[1].anchor == -1);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* reshape into a kernel: an alias; reshape as a graph output: a copy;
 * transpose: a layout kernel; nonzero: a reference kernel; an assign,
 * built first, runs last. */
static void layout_reference_and_assign_groups(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {4, 8};
  loom_value_t x = input(g, 2, shape), st, r1, r2, t, e, nz;
  CHECK_OK(loom_graph_param(g, "state", LOOM_F32, 2, shape, NULL, &st));
  CHECK_OK(loom_assign(g, st, x));
  CHECK_OK(loom_reshape(g, x, 2, (loom_dim_t[]){8, 4}, &r1));
  CHECK_OK(loom_exp(g, r1, &e));
  CHECK_OK(loom_reshape(g, e, 1, (loom_dim_t[]){32}, &r2));
  CHECK_OK(loom_transpose(g, x, NULL, &t));
  CHECK_OK(loom_nonzero(g, t, &nz));
  CHECK_OK(loom_graph_output(g, r2));
  CHECK_OK(loom_graph_output(g, nz));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 6);
  const fuse_group_t *last = &p.groups[p.n_groups - 1];
  CHECK(last->kind == FUSE_REFERENCE && last->nodes[0] == 0);
  CHECK(p.groups[p.group_of_node[1]].kind == FUSE_ALIAS);
  CHECK(p.groups[p.group_of_node[2]].kind == FUSE_ELEMENTWISE);
  CHECK(p.groups[p.group_of_node[3]].kind == FUSE_LAYOUT);
  CHECK(p.groups[p.group_of_node[4]].kind == FUSE_LAYOUT);
  CHECK(p.groups[p.group_of_node[5]].kind == FUSE_REFERENCE);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* An optimizer's update: m' = 0.9 m + g and v' = 0.8 v + g g, each
 * assigned to its state, and p' = p - 0.1 m' / (v' + 1), assigned to p.
 * The update joins one of its producers' groups; the other's value is
 * read by its assign and by the update: the assign runs last from a
 * buffer whichever group wrote it, so that group folds into the update's
 * (one pass over the parameter, m' and v' written from it) instead of
 * writing a value the update reads back. The states come out as computed
 * here. */
static void value_an_assign_stores_folds_into_its_reader(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  int64_t shape[] = {4, 8};
  double g0[32], m0[32], v0[32], p0[32], want_m[32], want_v[32], want_p[32];
  for (int i = 0; i < 32; i++) {
    g0[i] = sin(0.3 * i), m0[i] = cos(0.7 * i), v0[i] = 0.02 * i, p0[i] = 0.05 * i - 0.5;
    want_m[i] = 0.9 * m0[i] + g0[i];
    want_v[i] = 0.8 * v0[i] + g0[i] * g0[i];
    want_p[i] = p0[i] - 0.1 * want_m[i] / (want_v[i] + 1);
  }
  loom_tensor_t *mt = test_tensor(LOOM_F32, 2, shape, m0), *vt = test_tensor(LOOM_F32, 2, shape, v0);
  loom_tensor_t *pt = test_tensor(LOOM_F32, 2, shape, p0), *gt = test_tensor(LOOM_F32, 2, shape, g0);
  loom_value_t grad = input(g, 2, shape), m, v, p, t[8];
  CHECK_OK(loom_graph_param_borrow(g, "m", mt, &m));
  CHECK_OK(loom_graph_param_borrow(g, "v", vt, &v));
  CHECK_OK(loom_graph_param_borrow(g, "p", pt, &p));
  CHECK_OK(loom_mul(g, m, scalar(g, 0.9), &t[0]));
  CHECK_OK(loom_add(g, t[0], grad, &t[1])); /* m' */
  CHECK_OK(loom_assign(g, m, t[1]));
  CHECK_OK(loom_mul(g, v, scalar(g, 0.8), &t[2]));
  CHECK_OK(loom_mul(g, grad, grad, &t[3]));
  CHECK_OK(loom_add(g, t[2], t[3], &t[4])); /* v' */
  CHECK_OK(loom_assign(g, v, t[4]));
  CHECK_OK(loom_add(g, t[4], scalar(g, 1.0), &t[5]));
  CHECK_OK(loom_div(g, t[1], t[5], &t[6]));
  CHECK_OK(loom_mul(g, t[6], scalar(g, 0.1), &t[7]));
  loom_value_t p1;
  CHECK_OK(loom_sub(g, p, t[7], &p1));
  CHECK_OK(loom_assign(g, p, p1));
  fuse_plan_t plan;
  build_checked(g, &fusion_on, &plan);
  int32_t gi = plan.group_of_node[producer_of(g, p1.id)];
  const fuse_group_t *update = &plan.groups[gi];
  for (int k = 0; k < 8; k++) CHECK(plan.group_of_node[producer_of(g, t[k].id)] == gi);
  CHECK(update->kind == FUSE_ELEMENTWISE);
  CHECK(has(update->outputs, update->n_outputs, t[1].id));
  CHECK(has(update->outputs, update->n_outputs, t[4].id));
  CHECK(has(update->outputs, update->n_outputs, p1.id));
  fuse_plan_free(&plan);
  loom_executable_t *e;
  CHECK_OK(loom_compile(g, NULL, &e));
  CHECK_OK(loom_executable_run(e, 1, &gt, 0, NULL));
  CHECK_TENSOR(mt, want_m, 32, 1e-6, 1e-6);
  CHECK_TENSOR(vt, want_v, 32, 1e-6, 1e-6);
  CHECK_TENSOR(pt, want_p, 32, 1e-6, 1e-6);
  loom_executable_destroy(e);
  loom_graph_destroy(g);
  loom_tensor_destroy(mt);
  loom_tensor_destroy(vt);
  loom_tensor_destroy(pt);
  loom_tensor_destroy(gt);
}

/* ---- Strided views ------------------------------------------------------ */

enum { VB = 2, VS = 5, VH = 2, VD = 4, VW = 3 * VH * VD };

/* Columns [part * H * D, (part + 1) * H * D) of x (B, S, 3 H D), as
 * (B, H, S, D): attention's head split. */
static loom_value_t head(loom_graph_t *g, loom_value_t x, int part) {
  loom_value_t sl, r, t;
  int64_t start = part * VH * VD, end = start + VH * VD, axis = 2;
  CHECK_OK(loom_slice(g, x, 1, &start, &end, &axis, NULL, &sl));
  CHECK_OK(loom_reshape(g, sl, 4, (loom_dim_t[]){VB, VS, VH, VD}, &r));
  CHECK_OK(loom_transpose(g, r, (int64_t[]){0, 2, 1, 3}, &t));
  return t;
}

/* q, k and v of one (B, S, 3 H D) product are read in place by the two
 * batched matmuls: no copy is left, and the result matches values
 * computed here (test_run1 also checks the compiled run against the
 * interpreter's). */
static void head_split_is_read_in_place(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 3, (int64_t[]){VB, VS, VW}), q = head(g, x, 0), k = head(g, x, 1);
  loom_value_t v = head(g, x, 2), scores, out;
  CHECK_OK(loom_matmul(g, q, k, 0, 1, &scores));
  CHECK_OK(loom_matmul(g, scores, v, 0, 0, &out));
  CHECK_OK(loom_graph_output(g, out));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  int layout = 0, strided = 0;
  for (int i = 0; i < p.n_groups; i++) {
    layout += p.groups[i].kind == FUSE_LAYOUT;
    strided += p.groups[i].strided;
  }
  CHECK(layout == 0 && strided >= 3);
  fuse_plan_free(&p);
  double xv[VB * VS * VW], want[VB * VH * VS * VD];
  for (int i = 0; i < VB * VS * VW; i++) xv[i] = sin(0.37 * i);
  for (int b = 0; b < VB; b++)
    for (int h = 0; h < VH; h++)
      for (int i = 0; i < VS; i++)
        for (int d = 0; d < VD; d++) {
          double o = 0;
          for (int j = 0; j < VS; j++) {
            double sc = 0;
            for (int e = 0; e < VD; e++)
              sc += xv[(b * VS + i) * VW + h * VD + e] * xv[(b * VS + j) * VW + (VH + h) * VD + e];
            o += sc * xv[(b * VS + j) * VW + (2 * VH + h) * VD + d];
          }
          want[((b * VH + h) * VS + i) * VD + d] = o;
        }
  loom_tensor_t *in = test_tensor(LOOM_F32, 3, (int64_t[]){VB, VS, VW}, xv);
  loom_tensor_t *y = test_run1(g, 1, &in);
  CHECK_TENSOR(y, want, VB * VH * VS * VD, 1e-5, 1e-5);
  loom_tensor_destroy(y);
  loom_tensor_destroy(in);
  loom_graph_destroy(g);
}

/* The kind of the group computing value v. */
static fuse_kind_t kind_of(const fuse_plan_t *p, const loom_graph_t *g, loom_value_t v) {
  return p->groups[p->group_of_node[producer_of(g, v.id)]].kind;
}

/* The product of the heads, merged back into rows by a transpose and a
 * reshape, is written where the merged rows lie; the next matmul reads
 * them in order. */
static void heads_merged_back_are_written_in_place(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 3, (int64_t[]){VB, VS, VW}), q = head(g, x, 0), k = head(g, x, 1);
  loom_value_t v = head(g, x, 2), w = input(g, 2, (int64_t[]){VH * VD, 3});
  loom_value_t scores, ctx, t, merged, y;
  CHECK_OK(loom_matmul(g, q, k, 0, 1, &scores));
  CHECK_OK(loom_matmul(g, scores, v, 0, 0, &ctx));
  CHECK_OK(loom_transpose(g, ctx, (int64_t[]){0, 2, 1, 3}, &t));
  CHECK_OK(loom_reshape(g, t, 3, (loom_dim_t[]){VB, VS, VH * VD}, &merged));
  CHECK_OK(loom_matmul(g, merged, w, 0, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  const fuse_group_t *pv = &p.groups[p.group_of_node[producer_of(g, ctx.id)]];
  const fuse_group_t *tg = &p.groups[p.group_of_node[producer_of(g, t.id)]];
  CHECK(pv->kind == FUSE_CONTRACTION && pv->strided);
  CHECK(tg->kind == FUSE_ALIAS && tg->into);
  CHECK(kind_of(&p, g, merged) == FUSE_ALIAS);
  fuse_plan_free(&p);
  double xv[VB * VS * VW], wv[VH * VD * 3], want[VB * VS * 3];
  for (int i = 0; i < VB * VS * VW; i++) xv[i] = cos(0.23 * i);
  for (int i = 0; i < VH * VD * 3; i++) wv[i] = 0.1 * (i % 5) - 0.2;
  for (int b = 0; b < VB; b++)
    for (int i = 0; i < VS; i++)
      for (int o = 0; o < 3; o++) {
        double acc = 0;
        for (int h = 0; h < VH; h++)
          for (int d = 0; d < VD; d++) {
            double c = 0; /* ctx[b][h][i][d] */
            for (int j = 0; j < VS; j++) {
              double sc = 0;
              for (int e = 0; e < VD; e++)
                sc += xv[(b * VS + i) * VW + h * VD + e] * xv[(b * VS + j) * VW + (VH + h) * VD + e];
              c += sc * xv[(b * VS + j) * VW + (2 * VH + h) * VD + d];
            }
            acc += c * wv[(h * VD + d) * 3 + o];
          }
        want[(b * VS + i) * 3 + o] = acc;
      }
  loom_tensor_t *in[2] = {test_tensor(LOOM_F32, 3, (int64_t[]){VB, VS, VW}, xv),
                          test_tensor(LOOM_F32, 2, (int64_t[]){VH * VD, 3}, wv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  CHECK_TENSOR(out, want, VB * VS * 3, 1e-4, 1e-5);
  loom_tensor_destroy(out);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}


/* A product whose chain ends in a graph output is written in order and
 * copied: the output lives in the caller's tensor. */
static void product_chain_to_graph_output_is_copied(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t a = input(g, 3, (int64_t[]){2, 3, 4}), w = input(g, 2, (int64_t[]){4, 5});
  loom_value_t y, t;
  CHECK_OK(loom_matmul(g, a, w, 0, 0, &y));                  /* (2, 3, 5) */
  CHECK_OK(loom_transpose(g, y, (int64_t[]){1, 0, 2}, &t)); /* (3, 2, 5) */
  CHECK_OK(loom_graph_output(g, t));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(kind_of(&p, g, t) == FUSE_LAYOUT);
  CHECK(!p.groups[p.group_of_node[producer_of(g, y.id)]].strided);
  fuse_plan_free(&p);
  double av[24], wv[20], want[30];
  for (int i = 0; i < 24; i++) av[i] = i % 5 - 2;
  for (int i = 0; i < 20; i++) wv[i] = i % 3 - 1;
  for (int i = 0; i < 3; i++)
    for (int b = 0; b < 2; b++)
      for (int n = 0; n < 5; n++) {
        double acc = 0;
        for (int q = 0; q < 4; q++) acc += av[(b * 3 + i) * 4 + q] * wv[q * 5 + n];
        want[(i * 2 + b) * 5 + n] = acc;
      }
  loom_tensor_t *in[2] = {test_tensor(LOOM_F32, 3, (int64_t[]){2, 3, 4}, av),
                          test_tensor(LOOM_F32, 2, (int64_t[]){4, 5}, wv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  CHECK_TENSOR(out, want, 30, 0, 1e-6);
  loom_tensor_destroy(out);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* A reshape that would merge dims no longer adjacent in memory is no
 * view: the transpose before it stays a copy. */
static void reshape_across_strides_is_copied(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 3, (int64_t[]){2, 3, 4}), w = input(g, 2, (int64_t[]){8, 5});
  loom_value_t t, r, y;
  CHECK_OK(loom_transpose(g, x, (int64_t[]){1, 0, 2}, &t)); /* (3, 2, 4) */
  CHECK_OK(loom_reshape(g, t, 2, (loom_dim_t[]){3, 8}, &r));
  CHECK_OK(loom_matmul(g, r, w, 0, 0, &y));
  CHECK_OK(loom_graph_output(g, y));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(kind_of(&p, g, t) == FUSE_LAYOUT);
  CHECK(kind_of(&p, g, r) == FUSE_ALIAS && !p.groups[p.group_of_node[producer_of(g, r.id)]].strided);
  fuse_plan_free(&p);
  double xv[24], wv[40], want[15];
  for (int i = 0; i < 24; i++) xv[i] = i % 7 - 3;
  for (int i = 0; i < 40; i++) wv[i] = i % 5 - 2;
  for (int a = 0; a < 3; a++) /* r[a][b * 4 + c] = x[b][a][c] */
    for (int n = 0; n < 5; n++) {
      want[a * 5 + n] = 0;
      for (int q = 0; q < 8; q++) want[a * 5 + n] += xv[(q / 4) * 12 + a * 4 + q % 4] * wv[q * 5 + n];
    }
  loom_tensor_t *in[2] = {test_tensor(LOOM_F32, 3, (int64_t[]){2, 3, 4}, xv),
                          test_tensor(LOOM_F32, 2, (int64_t[]){8, 5}, wv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  CHECK_TENSOR(out, want, 15, 0, 1e-6);
  loom_tensor_destroy(out);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* A transpose that an elementwise op reads too stays a copy, which both
 * readers share. */
static void view_read_by_another_op_is_copied(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 3, (int64_t[]){2, 3, 4}), w = input(g, 2, (int64_t[]){3, 5});
  loom_value_t u, y, e, s, z;
  CHECK_OK(loom_transpose(g, x, (int64_t[]){0, 2, 1}, &u)); /* (2, 4, 3) */
  CHECK_OK(loom_matmul(g, u, w, 0, 0, &y));                 /* (2, 4, 5) */
  CHECK_OK(loom_exp(g, u, &e));
  CHECK_OK(loom_sum(g, e, 1, (int64_t[]){2}, 1, &s));       /* (2, 4, 1) */
  CHECK_OK(loom_add(g, y, s, &z));
  CHECK_OK(loom_graph_output(g, z));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(kind_of(&p, g, u) == FUSE_LAYOUT);
  fuse_plan_free(&p);
  double xv[24], wv[15], want[40];
  for (int i = 0; i < 24; i++) xv[i] = 0.1 * (i % 9) - 0.4;
  for (int i = 0; i < 15; i++) wv[i] = i % 4 - 1.5;
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 4; i++) {
      double sum = 0;
      for (int c = 0; c < 3; c++) sum += exp(xv[b * 12 + c * 4 + i]);
      for (int n = 0; n < 5; n++) {
        double acc = sum;
        for (int c = 0; c < 3; c++) acc += xv[b * 12 + c * 4 + i] * wv[c * 5 + n];
        want[(b * 4 + i) * 5 + n] = acc;
      }
    }
  loom_tensor_t *in[2] = {test_tensor(LOOM_F32, 3, (int64_t[]){2, 3, 4}, xv),
                          test_tensor(LOOM_F32, 2, (int64_t[]){3, 5}, wv)};
  loom_tensor_t *out = test_run1(g, 2, in);
  CHECK_TENSOR(out, want, 40, 1e-5, 1e-5);
  loom_tensor_destroy(out);
  for (int i = 0; i < 2; i++) loom_tensor_destroy(in[i]);
  loom_graph_destroy(g);
}

/* ---- Back-end capabilities ---------------------------------------------- */

static bool supports_nothing(const loom_graph_t *g, int64_t node) {
  (void)g;
  (void)node;
  return false;
}

/* Fusion decides through the back end's capabilities alone: one that
 * cannot read views copies the head split (layout groups, no strided
 * one); one that generates nothing gets a reference group per node, but
 * for reshapes, whose output shares its input's storage with no step. */
static void fusion_follows_the_back_ends_capabilities(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 3, (int64_t[]){VB, VS, VW}), q = head(g, x, 0), k = head(g, x, 1);
  loom_value_t scores;
  CHECK_OK(loom_matmul(g, q, k, 0, 1, &scores));
  CHECK_OK(loom_graph_output(g, scores));
  const fuse_caps_t no_views = {.supports = cg_supports};
  fuse_plan_t p;
  CHECK_OK(fuse_plan_build(g, &fusion_on, &no_views, &p));
  check_plan(g, &p);
  int layout = 0, strided = 0;
  for (int i = 0; i < p.n_groups; i++) {
    layout += p.groups[i].kind == FUSE_LAYOUT;
    strided += p.groups[i].strided;
  }
  CHECK(layout >= 2 && strided == 0);
  fuse_plan_free(&p);
  const fuse_caps_t nothing = {.supports = supports_nothing};
  CHECK_OK(fuse_plan_build(g, &fusion_on, &nothing, &p));
  CHECK(p.n_groups == (int)loom_graph_num_nodes(g));
  for (int i = 0; i < p.n_groups; i++) {
    const fuse_group_t *grp = &p.groups[i];
    CHECK(grp->kind == FUSE_REFERENCE ||
          (grp->kind == FUSE_ALIAS && g->nodes[grp->nodes[0]].op == IR_OP_RESHAPE));
  }
  fuse_plan_free(&p);
  CHECK_ERR(fuse_plan_build(g, &fusion_on, NULL, &p), LOOM_ERR_INVALID, "caps");
  const fuse_caps_t empty = {0};
  CHECK_ERR(fuse_plan_build(g, &fusion_on, &empty, &p), LOOM_ERR_INVALID, "supports");
  loom_graph_destroy(g);
}


/* One random op on random earlier values; shapes that do not fit make
 * the builder fail, and the graph stays as it was. */
/* An op reading, as its first input, one of the last `near` values (all
 * of them when near is 0). */
static void random_op_near(loom_graph_t *g, loom_value_t *vals, int *n, int near) {
  loom_value_t a = vals[test_rand_int(near && near < *n ? *n - near : 0, *n - 1)];
  loom_value_t b = vals[test_rand_int(0, *n - 1)], r = {-1};
  int64_t last[] = {-1}, first[] = {0};
  loom_status_t s = LOOM_OK;
  /* Reductions of scalars are left out (they reduce nothing). */
  int op = (int)test_rand_int(0, 8);
  if ((op == 4 || op == 5) && g->values[a.id].type.rank == 0) op = 0;
  switch (op) {
  case 0: s = loom_exp(g, a, &r); break;
  case 1: s = loom_relu(g, a, &r); break;
  case 2: s = loom_add(g, a, b, &r); break;
  case 3: s = loom_mul(g, a, b, &r); break;
  case 4: s = loom_sum(g, a, 1, last, (int)test_rand_int(0, 1), &r); break;
  case 5: s = loom_max(g, a, 1, first, 1, &r); break;
  case 6: s = loom_matmul(g, a, b, 0, 0, &r); break;
  case 7: s = loom_transpose(g, a, NULL, &r); break;
  default: s = loom_sub(g, a, b, &r); break;
  }
  if (s == LOOM_OK) vals[(*n)++] = r;
}

static void random_op(loom_graph_t *g, loom_value_t *vals, int *n) {
  random_op_near(g, vals, n, 0);
}

/* conv2d + per-channel bias + relu + residual: one kernel. A value that
 * broadcasts over W but not H cannot ride the epilogue, which walks
 * (H, W) as one run of positions. */
static void conv_epilogue_fuses_what_fits(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 4, (int64_t[]){1, 2, 6, 6});
  loom_value_t w = input(g, 4, (int64_t[]){4, 2, 3, 3});
  loom_value_t b = input(g, 3, (int64_t[]){4, 1, 1});
  loom_value_t res = input(g, 4, (int64_t[]){1, 4, 6, 6});
  loom_value_t row = input(g, 1, (int64_t[]){6}), y, z, r, s, q;
  loom_conv_params_t cp = {.pads = {1, 1, 1, 1}};
  CHECK_OK(loom_conv2d(g, x, w, 0, x, &cp, &y));
  CHECK_OK(loom_add(g, y, b, &z));
  CHECK_OK(loom_relu(g, z, &r));
  CHECK_OK(loom_add(g, r, res, &s));
  CHECK_OK(loom_mul(g, s, row, &q));
  CHECK_OK(loom_graph_output(g, q));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 2);
  const fuse_group_t *cg = &p.groups[p.group_of_node[0]];
  CHECK(cg->kind == FUSE_CONTRACTION && cg->n_nodes == 4);
  CHECK(cg->n_outputs == 1 && cg->outputs[0] == s.id);
  CHECK(p.groups[p.group_of_node[4]].kind == FUSE_ELEMENTWISE);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* rms_norm by hand: the prologue x*x joins the reduction; a reduced
 * value without keepdim stays out of the row kernel (its epilogue over
 * the reduced space must keep the reduced dims). */
static void reduction_prologue_and_keepdim(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 16}), sq, ms, r, y, s0, t;
  CHECK_OK(loom_mul(g, x, x, &sq));
  ms = mean_last(g, sq, 16);
  CHECK_OK(loom_rsqrt(g, ms, &r));
  CHECK_OK(loom_mul(g, x, r, &y));
  CHECK_OK(loom_sum(g, x, 1, (int64_t[]){-1}, 0, &s0));
  CHECK_OK(loom_exp(g, s0, &t));
  CHECK_OK(loom_graph_output(g, y));
  CHECK_OK(loom_graph_output(g, t));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  CHECK(p.n_groups == 3);
  const fuse_group_t *rg = &p.groups[p.group_of_node[0]];
  CHECK(rg->kind == FUSE_REDUCTION && rg->anchor == 1 && rg->n_nodes == 5);
  CHECK(rg->n_outputs == 1 && rg->outputs[0] == y.id);
  CHECK(p.group_of_node[6] != p.group_of_node[5]);
  CHECK(p.groups[p.group_of_node[5]].kind == FUSE_REDUCTION);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* 1000 elementwise ops in a chain: one kernel, built quickly. */
static void long_chain_is_split_in_bounded_groups(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 1, (int64_t[]){64}), c = scalar(g, 0.5), v = x;
  for (int i = 0; i < 1000; i++)
    CHECK_OK(i % 2 ? loom_mul(g, v, c, &v) : loom_relu(g, v, &v));
  CHECK_OK(loom_graph_output(g, v));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  /* Full groups in graph order, each reading the last one's output. */
  int want = (1000 + FUSE_MAX_NODES - 1) / FUSE_MAX_NODES;
  CHECK(p.n_groups == want);
  for (int i = 0; i < p.n_groups; i++) {
    const fuse_group_t *grp = &p.groups[i];
    int size = i < want - 1 ? FUSE_MAX_NODES : 1000 - (want - 1) * FUSE_MAX_NODES;
    CHECK(grp->kind == FUSE_ELEMENTWISE && grp->n_nodes == size);
    CHECK(grp->nodes[0] == i * FUSE_MAX_NODES);
    int32_t before = i ? p.groups[i - 1].outputs[0] : x.id;
    CHECK(grp->n_inputs == 2 && has(grp->inputs, 2, before) && has(grp->inputs, 2, c.id));
    CHECK(grp->n_outputs == 1);
  }
  CHECK(p.n_groups > 0 && p.groups[p.n_groups - 1].outputs[0] == v.id);
  fuse_plan_free(&p);
  build_checked(g, &fusion_off, &p);
  CHECK(p.n_groups == 1000);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* Softmax after softmax, 20 deep: the reductions share one space, yet a
 * group takes at most FUSE_MAX_FOLDS of them. */
static void stacked_softmaxes_bound_the_folds_per_group(void) {
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t v = input(g, 2, (int64_t[]){4, 8}), e;
  for (int i = 0; i < 20; i++) v = softmax_by_hand(g, v, &e);
  CHECK_OK(loom_graph_output(g, v));
  fuse_plan_t p;
  build_checked(g, &fusion_on, &p);
  int folds = 0;
  for (int i = 0; i < p.n_groups; i++) {
    int here = 0;
    for (int k = 0; k < p.groups[i].n_nodes; k++) {
      ir_op_t op = g->nodes[p.groups[i].nodes[k]].op;
      here += op == IR_OP_MAX || op == IR_OP_SUM;
    }
    CHECK(here <= FUSE_MAX_FOLDS);
    folds += here;
  }
  CHECK(folds == 40);
  CHECK(p.n_groups == (40 + FUSE_MAX_FOLDS - 1) / FUSE_MAX_FOLDS);
  fuse_plan_free(&p);
  loom_graph_destroy(g);
}

/* Random DAGs of elementwise, reduction, contraction and layout ops:
 * every plan passes check_plan, with fusion on and off. */
static void random_graphs_give_valid_plans(void) {
  test_seed(7);
  for (int round = 0; round < 200; round++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t vals[64];
    int n = 0;
    vals[n++] = input(g, 2, (int64_t[]){8, 8});
    vals[n++] = input(g, 2, (int64_t[]){8, 1});
    vals[n++] = input(g, 1, (int64_t[]){8});
    for (int k = 0; k < 40 && n < 64; k++) random_op(g, vals, &n);
    for (int k = 0; k < 3; k++)
      CHECK_OK(loom_graph_output(g, vals[test_rand_int(3, n - 1)]));
    fuse_plan_t p;
    build_checked(g, &fusion_on, &p);
    CHECK(p.n_groups <= loom_graph_num_nodes(g));
    fuse_plan_free(&p);
    build_checked(g, &fusion_off, &p);
    CHECK(p.n_groups == loom_graph_num_nodes(g));
    fuse_plan_free(&p);
    loom_graph_destroy(g);
  }
}

/* Longer random graphs whose ops mostly read recent values, so that
 * groups grow long and other groups read their early nodes (groups are
 * not convex in node order: a dependency may enter a group at a late
 * node and leave it at an early one). */
static void long_random_graphs_give_valid_plans(void) {
  test_seed(8);
  enum { MAX_VALUES = 320 };
  for (int round = 0; round < 60; round++) {
    loom_graph_t *g;
    CHECK_OK(loom_graph_create(&g));
    loom_value_t vals[MAX_VALUES];
    int n = 0;
    vals[n++] = input(g, 2, (int64_t[]){8, 8});
    vals[n++] = input(g, 2, (int64_t[]){8, 1});
    vals[n++] = input(g, 1, (int64_t[]){8});
    int ops = (int)test_rand_int(20, MAX_VALUES - 8);
    for (int k = 0; k < ops && n < MAX_VALUES; k++) random_op_near(g, vals, &n, 12);
    for (int k = 0; k < 3; k++)
      CHECK_OK(loom_graph_output(g, vals[test_rand_int(3, n - 1)]));
    fuse_plan_t p;
    build_checked(g, &fusion_on, &p);
    fuse_plan_free(&p);
    loom_graph_destroy(g);
  }
}

static void bad_arguments_and_allocation_failures(void) {
  fuse_plan_t p;
  CHECK_ERR(fuse_plan_build(NULL, &fusion_on, &cg_fuse_caps, &p), LOOM_ERR_INVALID, "null");
  CHECK(p.n_groups == 0 && p.groups == NULL);
  loom_graph_t *g;
  CHECK_OK(loom_graph_create(&g));
  loom_value_t x = input(g, 2, (int64_t[]){4, 8}), e;
  CHECK_OK(loom_graph_output(g, softmax_by_hand(g, x, &e)));
  CHECK_ERR(fuse_plan_build(g, NULL, &cg_fuse_caps, &p), LOOM_ERR_INVALID, "null");
  int64_t n;
  for (n = 0; n < 1000; n++) {
    core_alloc_fail_after(n);
    loom_status_t s = fuse_plan_build(g, &fusion_on, &cg_fuse_caps, &p);
    char *text = NULL;
    if (s == LOOM_OK) s = fuse_plan_describe(g, &p, &text);
    core_alloc_fail_after(-1);
    CHECK(s == LOOM_OK || s == LOOM_ERR_NOMEM);
    core_free(text);
    fuse_plan_free(&p);
    if (s == LOOM_OK) break;
  }
  CHECK(n > 5 && n < 1000);
  loom_graph_destroy(g);
}

int main(void) {
  TEST_RUN(softmax_is_one_reduction_group);
  TEST_RUN(layer_norm_is_one_reduction_group);
  TEST_RUN(matmul_bias_relu_is_one_contraction_group);
  TEST_RUN(epilogue_takes_values_beside_the_product);
  TEST_RUN(elementwise_diamond_is_one_group);
  TEST_RUN(broadcast_value_folds_into_its_consumer);
  TEST_RUN(value_read_by_two_groups_is_an_output);
  TEST_RUN(matmul_is_never_in_two_groups);
  TEST_RUN(joins_never_break_a_dependency);
  TEST_RUN(graph_outputs_are_group_outputs);
  TEST_RUN(fusion_off_gives_one_group_per_node);
  TEST_RUN(layout_reference_and_assign_groups);
  TEST_RUN(value_an_assign_stores_folds_into_its_reader);
  TEST_RUN(conv_epilogue_fuses_what_fits);
  TEST_RUN(reduction_prologue_and_keepdim);
  TEST_RUN(long_chain_is_split_in_bounded_groups);
  TEST_RUN(stacked_softmaxes_bound_the_folds_per_group);
  TEST_RUN(head_split_is_read_in_place);
  TEST_RUN(heads_merged_back_are_written_in_place);
  TEST_RUN(product_chain_to_graph_output_is_copied);
  TEST_RUN(reshape_across_strides_is_copied);
  TEST_RUN(view_read_by_another_op_is_copied);
  TEST_RUN(fusion_follows_the_back_ends_capabilities);
  TEST_RUN(random_graphs_give_valid_plans);
  TEST_RUN(long_random_graphs_give_valid_plans);
  TEST_RUN(bad_arguments_and_allocation_failures);
  return test_summary();
}
