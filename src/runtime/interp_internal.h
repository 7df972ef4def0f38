/* The interpreter's state, shared by interp.c (binding, the walk over the
 * nodes, outputs and assigns), interp_node.c (one node's step) and
 * interp_blocks.c (runs of elementwise nodes in blocks, for the fast
 * interpreter), layered in that order, top first. Internal to
 * src/runtime. */
#ifndef LOOM_RUNTIME_INTERP_INTERNAL_H
#define LOOM_RUNTIME_INTERP_INTERNAL_H

#include "core/pool.h"
#include "runtime/interp.h"

typedef struct interp {
  loom_graph_t *g;
  loom_tensor_t **vals; /* tensor of each value, once computed */
  bool *owned;          /* vals[i] belongs to the interpreter */
  int64_t *last_use;    /* index of the last node reading each value */
  int64_t *last_read;   /* the same, not counting an assign's target */
  int64_t *assigned_by; /* the assign that is a value's only reader, or -1 */
  bool *index_only;     /* read only as a scatter_add's index (index_view) */
  int64_t *syms;        /* symbol values, -1 while unbound */
  const be_backend_t *fast; /* whose eager kernels to try first, or NULL */
  core_pool_t *pool;        /* lent to the eager kernels and block runs, or NULL */
  /* Block runs (run_blocks): per value, the run that makes it (id, or
   * -id for a scalar node inside it) and its buffer slot (a slot number,
   * SLOT_WHOLE or SLOT_PARAM). */
  int64_t *run_of;
  int32_t *slot;
  int64_t runs;
} interp_t;

enum {
  SLOT_WHOLE = -1, /* a value written whole, read after its run */
  SLOT_PARAM = -2, /* written into the parameter its assign commits it to */
};

static inline bool interp_is_assign(const ir_node_t *n) {
  return ir_ops[n->op].flags & F_SIDE_EFFECT;
}

/* interp_node.c */
/* Binds the plain symbols of type t (dims that are just "n") to the sizes
 * of x, where no earlier tensor bound them. */
void interp_bind_symbols(interp_t *it, const ir_type_t *t, const loom_tensor_t *x);
/* Checks x against type t once the symbols are bound; the printf format
 * what and its arguments name x in the error (formatted only then). */
loom_status_t interp_check_dims(interp_t *it, const ir_type_t *t, const loom_tensor_t *x,
                                const char *what, ...) __attribute__((format(printf, 4, 5)));
void interp_release(interp_t *it, int32_t v);
/* The shape of output k of n for the bound symbols. */
loom_status_t interp_output_shape(interp_t *it, const ir_node_t *n, int k, int64_t *shape);
/* Runs node `index` with its own kernels (whole tensors). */
loom_status_t interp_run_node(interp_t *it, int64_t index);

/* interp_blocks.c: when a run of elementwise nodes starts at node
 * `first` (the fast interpreter only), runs it and sets *end past its
 * last node; else leaves *end at first. */
loom_status_t interp_blocks(interp_t *it, int64_t first, int64_t *end);

#endif
