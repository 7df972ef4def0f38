/* The TreeLSTM workload (Treelstm in bench/peers/torch_dynamic.py): 8
 * random binary trees of 2 to 24 leaves over a 500-word vocabulary
 * (embedding 32), a binary TreeLSTM (hidden 64) and a 5-class head on the
 * roots; a tree's label is the clamped sum of its words' sentiments.
 *
 * Two forms of the same model:
 *   node  (form 0): the host walks each tree by recursion and records one
 *         node at a time, cutting after each: every leaf is the same
 *         segment and every inner node another, whatever the tree.
 *   level (form 1): dynamic batching. All leaves of the 8 trees form one
 *         segment; then each height (1 + the larger height of the
 *         children) is one segment over all nodes of that height, which
 *         read their children's states from a table of every node's
 *         state. The node counts (leaves, nodes per height) are the dims
 *         under the config's policy.
 * Rows are read as one_hot(idx) @ table and the level form's table (a
 * fixed number of rows: the most nodes 8 trees can have, and a scratch
 * row) is written as table + one_hot(rows)^T @ states. Both products
 * equal the rows read or written one by one (one term per row, zeros
 * besides); their gradients are GEMMs, where index_select's is a scatter
 * into a zeroed copy of the table (a reference kernel) and concat's or
 * scatter_add's needs the size of a dim that data decides. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynamic.h"
#include "loom/ops.h"
#include "loom/train.h"

enum {
  TL_TREES = 8, TL_V = 500, TL_DE = 32, TL_H = 64, TL_C = 5,
  TL_MAX_LEAVES = 24,
  TL_MAX_NODES = 2 * TL_MAX_LEAVES - 1,
  TL_ALL_LEAVES = TL_TREES * TL_MAX_LEAVES,
  TL_MAX_HEIGHT = TL_MAX_LEAVES - 1,
  TL_ROWS = TL_TREES * TL_MAX_NODES, /* the level form's table: node rows, */
  TL_SCRATCH = TL_ROWS,              /* then a row that padding writes to */
  TL_PAD = 256, /* a power of two at least TL_ALL_LEAVES */
};

/* A node: a leaf (left < 0) with its word, or an inner node; nodes are
 * numbered children first. */
typedef struct tl_node {
  int left, right, word, height;
  int row; /* level form: its row among all states of the step */
} tl_node_t;

typedef struct tl_tree {
  int n_nodes, root, label;
  tl_node_t nodes[TL_MAX_NODES];
} tl_tree_t;

typedef struct treelstm {
  int form;
  loom_dim_policy_kind_t policy;
  loom_tensor_t *emb, *w_leaf, *b_leaf, *u, *b_int, *head, *head_b;
  loom_tensor_t *all[7]; /* the parameters above */
  int sentiment[TL_V];
  tl_tree_t trees[TL_TREES];
  /* node form: one (1) word index per leaf, over words[] */
  loom_tensor_t *leaf_word[TL_ALL_LEAVES];
  /* level form: leaf words, each height's rows and its nodes' children
   * rows, the roots' rows */
  int n_heights; /* heights 1..n_heights have nodes */
  int64_t words[TL_PAD], labels[TL_TREES], roots[TL_TREES];
  int64_t rows[TL_MAX_HEIGHT + 1][TL_PAD], kids[TL_MAX_HEIGHT + 1][2][TL_PAD];
  loom_tensor_t *words_t, *labels_t, *roots_t;
  loom_tensor_t *rows_t[TL_MAX_HEIGHT + 1], *kids_t[TL_MAX_HEIGHT + 1][2];
  char sym_names[TL_MAX_HEIGHT + 1][16];
} treelstm_t;

typedef struct tl_params {
  loom_value_t emb, w_leaf, b_leaf, u, b_int, head, head_b;
} tl_params_t;

static void free_batch_tensors(treelstm_t *m) {
  loom_tensor_destroy(m->words_t);
  loom_tensor_destroy(m->labels_t);
  loom_tensor_destroy(m->roots_t);
  m->words_t = m->labels_t = m->roots_t = NULL;
  for (int l = 0; l <= TL_MAX_HEIGHT; l++) {
    loom_tensor_destroy(m->rows_t[l]);
    m->rows_t[l] = NULL;
    for (int s = 0; s < 2; s++) {
      loom_tensor_destroy(m->kids_t[l][s]);
      m->kids_t[l][s] = NULL;
    }
  }
}

static void tl_free(treelstm_t *m) {
  free_batch_tensors(m);
  loom_tensor_t **ps[] = {&m->emb, &m->w_leaf, &m->b_leaf, &m->u,
                          &m->b_int, &m->head, &m->head_b};
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) loom_tensor_destroy(*ps[i]);
  for (int i = 0; i < TL_ALL_LEAVES; i++) loom_tensor_destroy(m->leaf_word[i]);
}

static loom_status_t tl_init(treelstm_t *m, const dyn_config_t *c) {
  memset(m, 0, sizeof *m);
  m->form = c->form;
  m->policy = c->policy;
  const double bd = 1 / sqrt(TL_DE), b2h = 1 / sqrt(2 * TL_H), bh = 1 / sqrt(TL_H);
  int64_t es[2] = {TL_V, TL_DE}, wl[2] = {3 * TL_H, TL_DE}, bl = 3 * TL_H;
  int64_t us[2] = {5 * TL_H, 2 * TL_H}, bi = 5 * TL_H, hs[2] = {TL_C, TL_H}, hb = TL_C;
  DYN_TRY(dyn_values("tree.emb", 1.0, 2, es, &m->emb));
  DYN_TRY(dyn_values("tree.w_leaf", bd, 2, wl, &m->w_leaf));
  DYN_TRY(dyn_values("tree.b_leaf", bd, 1, &bl, &m->b_leaf));
  DYN_TRY(dyn_values("tree.u", b2h, 2, us, &m->u));
  DYN_TRY(dyn_values("tree.b_int", b2h, 1, &bi, &m->b_int));
  DYN_TRY(dyn_values("tree.head", bh, 2, hs, &m->head));
  DYN_TRY(dyn_values("tree.head_b", bh, 1, &hb, &m->head_b));
  loom_tensor_t *all[7] = {m->emb, m->w_leaf, m->b_leaf, m->u, m->b_int, m->head, m->head_b};
  memcpy(m->all, all, sizeof all);
  for (int w = 0; w < TL_V; w++) m->sentiment[w] = (int)dyn_randint("tree.sentiment", w, -1, 1);
  int64_t one = 1;
  for (int i = 0; i < TL_ALL_LEAVES; i++)
    DYN_TRY(loom_tensor_wrap(LOOM_I64, 1, &one, NULL, &m->words[i], &m->leaf_word[i]));
  for (int l = 0; l <= TL_MAX_HEIGHT; l++)
    dyn_name(m->sym_names[l], sizeof m->sym_names[l], "nodes%d", l);
  return LOOM_OK;
}

/* ---- Trees ------------------------------------------------------------------ */

typedef struct tree_draw {
  tl_tree_t *tree;
  const int64_t *words;
  char split_stream[64];
  int splits; /* drawn so far, in preorder */
} tree_draw_t;

/* The subtree over leaves lo..lo+n-1: a split drawn before the left
 * subtree is built (torch_dynamic.py's tree()); returns its node. */
static int build(tree_draw_t *d, int lo, int n) {
  tl_tree_t *t = d->tree;
  tl_node_t node = {.left = -1, .right = -1, .word = -1};
  if (n == 1) {
    node.word = (int)d->words[lo];
  } else {
    int s = (int)dyn_randint(d->split_stream, d->splits++, 1, n - 1);
    node.left = build(d, lo, s);
    node.right = build(d, lo + s, n - s);
    int hl = t->nodes[node.left].height, hr = t->nodes[node.right].height;
    node.height = 1 + (hl > hr ? hl : hr);
  }
  t->nodes[t->n_nodes] = node;
  return t->n_nodes++;
}

static void draw_tree(treelstm_t *m, int k, int j, tl_tree_t *t) {
  char name[64];
  int leaves = (int)dyn_randint(dyn_name(name, sizeof name, "tree.leaves.%d", k), j, 2, 24);
  int64_t words[TL_MAX_LEAVES];
  dyn_name(name, sizeof name, "tree.word.%d.%d", k, j);
  int sum = 0;
  for (int i = 0; i < leaves; i++) {
    words[i] = dyn_randint(name, i, 0, TL_V - 1);
    sum += m->sentiment[words[i]];
  }
  tree_draw_t d = {.tree = t, .words = words};
  dyn_name(d.split_stream, sizeof d.split_stream, "tree.split.%d.%d", k, j);
  t->n_nodes = 0;
  t->root = build(&d, 0, leaves);
  t->label = (sum < -2 ? -2 : sum > 2 ? 2 : sum) + 2;
}

static loom_status_t wrap_i64(int64_t *data, int64_t n, loom_tensor_t **out) {
  return loom_tensor_wrap(LOOM_I64, 1, &n, NULL, data, out);
}

/* The number of nodes at a height as the level form enters it: padded up
 * to a power of two for the bucket policy. The trace keys a training
 * segment at exact sizes even when its dims are bucketed (docs/dynamic.md),
 * so this form pads itself: a padding node reads row 0, writes the scratch
 * row that no node reads, and so gets a zero gradient. */
static int64_t entered(const treelstm_t *m, int64_t count) {
  if (m->policy != LOOM_DIM_BUCKET) return count;
  int64_t b = 1;
  while (b < count) b *= 2;
  return b;
}

/* The level form's inputs: rows are numbered leaves first (tree by tree),
 * then the nodes of height 1, 2, ...; per height, its rows and its nodes'
 * children rows (padding: rows TL_SCRATCH, children and words 0). */
static loom_status_t level_inputs(treelstm_t *m) {
  int64_t count[TL_MAX_HEIGHT + 1] = {0}, start[TL_MAX_HEIGHT + 2] = {0};
  m->n_heights = 0;
  for (int j = 0; j < TL_TREES; j++)
    for (int i = 0; i < m->trees[j].n_nodes; i++) {
      int h = m->trees[j].nodes[i].height;
      count[h]++;
      if (h > m->n_heights) m->n_heights = h;
    }
  for (int h = 0; h <= m->n_heights; h++) {
    start[h + 1] = start[h] + count[h];
    for (int64_t i = 0; i < TL_PAD; i++) {
      m->rows[h][i] = i < count[h] ? start[h] + i : TL_SCRATCH;
      m->kids[h][0][i] = m->kids[h][1][i] = 0;
    }
  }
  memset(m->words, 0, sizeof m->words);
  int64_t placed[TL_MAX_HEIGHT + 1] = {0};
  /* children come before parents, so their rows are known when needed */
  for (int j = 0; j < TL_TREES; j++) {
    tl_tree_t *t = &m->trees[j];
    for (int i = 0; i < t->n_nodes; i++) {
      tl_node_t *n = &t->nodes[i];
      int64_t at = placed[n->height]++;
      n->row = (int)(start[n->height] + at);
      if (n->left < 0) {
        m->words[at] = n->word;
      } else {
        m->kids[n->height][0][at] = t->nodes[n->left].row;
        m->kids[n->height][1][at] = t->nodes[n->right].row;
      }
    }
    m->roots[j] = t->nodes[t->root].row;
  }
  DYN_TRY(wrap_i64(m->words, entered(m, count[0]), &m->words_t));
  DYN_TRY(wrap_i64(m->roots, TL_TREES, &m->roots_t));
  for (int h = 0; h <= m->n_heights; h++)
    DYN_TRY(wrap_i64(m->rows[h], entered(m, count[h]), &m->rows_t[h]));
  for (int h = 1; h <= m->n_heights; h++)
    for (int s = 0; s < 2; s++)
      DYN_TRY(wrap_i64(m->kids[h][s], entered(m, count[h]), &m->kids_t[h][s]));
  return LOOM_OK;
}

/* Batch k: 8 trees; the node form's leaf words in walk order (children
 * first, tree by tree), or the level form's inputs. */
static loom_status_t tl_batch(void *self, int k, int64_t *items) {
  treelstm_t *m = self;
  free_batch_tensors(m);
  for (int j = 0; j < TL_TREES; j++) {
    draw_tree(m, k, j, &m->trees[j]);
    m->labels[j] = m->trees[j].label;
  }
  DYN_TRY(wrap_i64(m->labels, TL_TREES, &m->labels_t));
  *items = TL_TREES;
  if (m->form == 1) return level_inputs(m);
  int at = 0;
  for (int j = 0; j < TL_TREES; j++)
    for (int i = 0; i < m->trees[j].n_nodes; i++) {
      tl_node_t *n = &m->trees[j].nodes[i];
      if (n->left < 0) n->row = at, m->words[at++] = n->word;
    }
  return LOOM_OK;
}

/* ---- The cells ----------------------------------------------------------- */

/* Rows idx (n) of table (depth, d), as one_hot(idx) @ table. */
static loom_status_t take_rows(loom_graph_t *g, loom_value_t table,
                               loom_value_t idx, int64_t depth,
                               loom_value_t *out) {
  loom_value_t oh;
  DYN_TRY(loom_one_hot(g, idx, depth, LOOM_F32, &oh));
  return loom_matmul(g, oh, table, 0, 0, out);
}

/* Leaf: g = x W_leaf^T + b_leaf = (i, o, u); c = s(i) tanh(u);
 * h = s(o) tanh(c). x: (n, DE) embeddings. */
static loom_status_t leaf_cell(loom_graph_t *g, const tl_params_t *p,
                               loom_value_t x, loom_value_t *h, loom_value_t *c) {
  loom_value_t a, z, gate[3], si, tu, so, tc;
  const int64_t sizes[3] = {TL_H, TL_H, TL_H};
  DYN_TRY(loom_matmul(g, x, p->w_leaf, 0, 1, &a));
  DYN_TRY(loom_add(g, a, p->b_leaf, &z));
  DYN_TRY(loom_split(g, z, 1, 3, sizes, gate));
  DYN_TRY(loom_sigmoid(g, gate[0], &si));
  DYN_TRY(loom_tanh(g, gate[2], &tu));
  DYN_TRY(loom_mul(g, si, tu, c));
  DYN_TRY(loom_sigmoid(g, gate[1], &so));
  DYN_TRY(loom_tanh(g, *c, &tc));
  return loom_mul(g, so, tc, h);
}

/* Inner node: g = [hl hr] U^T + b_int = (i, fl, fr, o, u);
 * c = s(i) tanh(u) + s(fl) cl + s(fr) cr; h = s(o) tanh(c). */
static loom_status_t inner_cell(loom_graph_t *g, const tl_params_t *p,
                                loom_value_t hl, loom_value_t cl, loom_value_t hr,
                                loom_value_t cr, loom_value_t *h, loom_value_t *c) {
  loom_value_t hh[2] = {hl, hr}, cat, a, z, gate[5], s[4], tu, iu, fl, fr, c1, tc;
  const int64_t sizes[5] = {TL_H, TL_H, TL_H, TL_H, TL_H};
  DYN_TRY(loom_concat(g, 2, hh, 1, &cat));
  DYN_TRY(loom_matmul(g, cat, p->u, 0, 1, &a));
  DYN_TRY(loom_add(g, a, p->b_int, &z));
  DYN_TRY(loom_split(g, z, 1, 5, sizes, gate));
  for (int i = 0; i < 4; i++) DYN_TRY(loom_sigmoid(g, gate[i], &s[i]));
  DYN_TRY(loom_tanh(g, gate[4], &tu));
  DYN_TRY(loom_mul(g, s[0], tu, &iu));
  DYN_TRY(loom_mul(g, s[1], cl, &fl));
  DYN_TRY(loom_mul(g, s[2], cr, &fr));
  DYN_TRY(loom_add(g, iu, fl, &c1));
  DYN_TRY(loom_add(g, c1, fr, c));
  DYN_TRY(loom_tanh(g, *c, &tc));
  return loom_mul(g, s[3], tc, h);
}

/* The head on the roots' states (TREES, H) and the mean cross-entropy. */
static loom_status_t head_loss(loom_trace_t *t, treelstm_t *m, const tl_params_t *p,
                               loom_value_t roots, loom_value_t *loss) {
  loom_graph_t *g = loom_trace_graph(t);
  loom_value_t a, logits, y;
  DYN_TRY(loom_trace_input(t, m->labels_t, NULL, &y));
  DYN_TRY(loom_matmul(g, roots, p->head, 0, 1, &a));
  DYN_TRY(loom_add(g, a, p->head_b, &logits));
  return loom_cross_entropy(g, logits, y, LOOM_NO_IGNORE_INDEX, 0.0,
                            LOOM_REDUCTION_MEAN, loss);
}

/* ---- Node form --------------------------------------------------------------- */

/* Records node i of tree tr and its subtrees, one segment per node. */
static loom_status_t walk(loom_trace_t *t, treelstm_t *m, const tl_params_t *p,
                          const tl_tree_t *tr, int i, loom_value_t *h,
                          loom_value_t *c) {
  loom_graph_t *g = loom_trace_graph(t);
  const tl_node_t *n = &tr->nodes[i];
  if (n->left < 0) {
    loom_value_t w, x;
    DYN_TRY(loom_trace_input(t, m->leaf_word[n->row], NULL, &w));
    DYN_TRY(take_rows(g, p->emb, w, TL_V, &x));
    DYN_TRY(leaf_cell(g, p, x, h, c));
  } else {
    loom_value_t hl, cl, hr, cr;
    DYN_TRY(walk(t, m, p, tr, n->left, &hl, &cl));
    DYN_TRY(walk(t, m, p, tr, n->right, &hr, &cr));
    DYN_TRY(inner_cell(g, p, hl, cl, hr, cr, h, c));
  }
  /* A sync would keep only the region's unconsumed outputs (h): c, read by
   * tanh inside the node, would be recomputed by the parent's segment, and
   * its parent's, down to the leaves. Reading c cuts here keeping both. */
  const loom_tensor_t *real;
  return loom_trace_read(t, *c, &real);
}

static loom_status_t node_forward(loom_trace_t *t, treelstm_t *m,
                                  const tl_params_t *p, loom_value_t *loss) {
  loom_value_t roots[TL_TREES], c, stack;
  for (int j = 0; j < TL_TREES; j++)
    DYN_TRY(walk(t, m, p, &m->trees[j], m->trees[j].root, &roots[j], &c));
  DYN_TRY(loom_concat(loom_trace_graph(t), TL_TREES, roots, 0, &stack));
  return head_loss(t, m, p, stack, loss);
}

/* ---- Level form ------------------------------------------------------------ */

/* table + the rows (n) of the table set to x (n, H). */
static loom_status_t write_rows(loom_graph_t *g, loom_value_t table,
                                loom_value_t rows, loom_value_t x,
                                loom_value_t *out) {
  loom_value_t oh, add;
  DYN_TRY(loom_one_hot(g, rows, TL_ROWS + 1, LOOM_F32, &oh));
  DYN_TRY(loom_matmul(g, oh, x, 1, 0, &add));
  return loom_add(g, table, add, out);
}

static loom_status_t level_forward(loom_trace_t *t, treelstm_t *m,
                                   const tl_params_t *p, loom_value_t *loss) {
  loom_graph_t *g = loom_trace_graph(t);
  /* bucketed sizes are padded already (entered): exact from here */
  loom_dim_policy_kind_t kind = m->policy == LOOM_DIM_BUCKET ? LOOM_DIM_EXACT : m->policy;
  loom_dim_policy_t pol = dyn_policy(kind, m->sym_names[0]);
  int64_t ts[2] = {TL_ROWS + 1, TL_H};
  loom_value_t words, rows, x, h, c, hs, cs, roots, rh;
  DYN_TRY(loom_trace_input(t, m->words_t, &pol, &words));
  DYN_TRY(loom_trace_input(t, m->rows_t[0], &pol, &rows));
  DYN_TRY(take_rows(g, p->emb, words, TL_V, &x));
  DYN_TRY(leaf_cell(g, p, x, &h, &c));
  /* hs, cs: the state of every node, rows of heights not done yet zero */
  DYN_TRY(loom_full(g, 2, ts, 0.0, LOOM_F32, &hs));
  DYN_TRY(loom_full(g, 2, ts, 0.0, LOOM_F32, &cs));
  DYN_TRY(write_rows(g, hs, rows, h, &hs));
  DYN_TRY(write_rows(g, cs, rows, c, &cs));
  DYN_TRY(loom_trace_sync(t));
  for (int l = 1; l <= m->n_heights; l++) {
    loom_value_t kid[2], hk[2], ck[2];
    pol = dyn_policy(kind, m->sym_names[l]);
    DYN_TRY(loom_trace_input(t, m->rows_t[l], &pol, &rows));
    for (int s = 0; s < 2; s++) {
      DYN_TRY(loom_trace_input(t, m->kids_t[l][s], &pol, &kid[s]));
      DYN_TRY(take_rows(g, hs, kid[s], TL_ROWS + 1, &hk[s]));
      DYN_TRY(take_rows(g, cs, kid[s], TL_ROWS + 1, &ck[s]));
    }
    DYN_TRY(inner_cell(g, p, hk[0], ck[0], hk[1], ck[1], &h, &c));
    DYN_TRY(write_rows(g, hs, rows, h, &hs));
    DYN_TRY(write_rows(g, cs, rows, c, &cs));
    DYN_TRY(loom_trace_sync(t));
  }
  DYN_TRY(loom_trace_input(t, m->roots_t, NULL, &roots));
  DYN_TRY(take_rows(g, hs, roots, TL_ROWS + 1, &rh));
  return head_loss(t, m, p, rh, loss);
}

static loom_status_t tl_forward(void *self, loom_trace_t *t, int k,
                                loom_value_t *loss) {
  (void)k;
  treelstm_t *m = self;
  tl_params_t p;
  DYN_TRY(loom_trace_param(t, m->emb, &p.emb));
  DYN_TRY(loom_trace_param(t, m->w_leaf, &p.w_leaf));
  DYN_TRY(loom_trace_param(t, m->b_leaf, &p.b_leaf));
  DYN_TRY(loom_trace_param(t, m->u, &p.u));
  DYN_TRY(loom_trace_param(t, m->b_int, &p.b_int));
  DYN_TRY(loom_trace_param(t, m->head, &p.head));
  DYN_TRY(loom_trace_param(t, m->head_b, &p.head_b));
  return m->form == 1 ? level_forward(t, m, &p, loss) : node_forward(t, m, &p, loss);
}

loom_status_t dyn_treelstm_run(const dyn_config_t *c, int warmup, int steps,
                               dyn_result_t *out) {
  DYN_CHECK_ARG(c);
  DYN_CHECK_ARG(out);
  if (c->form != 0 && c->form != 1)
    return loom_set_error(LOOM_ERR_INVALID, "dyn_treelstm_run: form %d (0: one "
                          "segment per node, 1: level batching)", c->form);
  treelstm_t *m = calloc(1, sizeof *m);
  if (!m) return loom_set_error(LOOM_ERR_NOMEM, "out of memory for the TreeLSTM");
  loom_trace_t *t = NULL;
  loom_status_t s = tl_init(m, c);
  if (s == LOOM_OK) s = dyn_trace_create(c, NULL, &t);
  if (s == LOOM_OK) {
    dyn_model_t model = {m, tl_batch, tl_forward};
    s = dyn_train(c, t, &model, warmup, steps, out);
  }
  if (s == LOOM_OK) s = dyn_copy_params(c, 7, m->all, out);
  loom_trace_destroy(t);
  tl_free(m);
  free(m);
  return s;
}
