/* Rewriting: passes build a new graph from an old one, node by node, so
 * that every pass leaves a topologically ordered, verified graph and no
 * pass edits a graph in place.
 *
 *   ir_rewriter_t rw;
 *   LOOM_TRY(ir_rewrite_begin(src, &rw));   // inputs, params, consts mapped
 *   for each node i of src:
 *     either ir_rewrite_copy(&rw, i)          // same op, mapped inputs
 *     or emit replacement nodes with ir_rewrite_emit and record what the
 *        node's outputs became with ir_rewrite_map
 *     or drop it (DCE) - its outputs must then not be read
 *   LOOM_TRY(ir_rewrite_finish(&rw, &dst));  // outputs mapped, verified
 *
 * The new graph has the same symbols (dim handles stay valid), the same
 * inputs in the same order, and the same parameters: their storage is
 * borrowed from src's (ir_value_t.borrowed), so that an executable built
 * from the rewritten graph updates the user's parameters. Constants are
 * borrowed too. src must outlive dst. */
#ifndef LOOM_IR_REWRITE_H
#define LOOM_IR_REWRITE_H

#include "ir/ir.h"

typedef struct ir_rewriter {
  const loom_graph_t *src;
  loom_graph_t *dst;
  int32_t *map; /* src value id -> dst value id, -1 while unmapped */
} ir_rewriter_t;

loom_status_t ir_rewrite_begin(const loom_graph_t *src, ir_rewriter_t *rw);
/* The same, but dst gets no inputs: the caller adds its own (on rw->dst)
 * and maps src values to them, so that dst may take as inputs values
 * that src computes (a backward graph taking the forward's saved values). */
loom_status_t ir_rewrite_begin_no_inputs(const loom_graph_t *src,
                                         ir_rewriter_t *rw);
/* Copies src node i with its inputs mapped; maps its outputs. */
loom_status_t ir_rewrite_copy(ir_rewriter_t *rw, int64_t node);
/* Appends a node to dst (inputs are dst value ids). */
loom_status_t ir_rewrite_emit(ir_rewriter_t *rw, ir_op_t op, int n_in,
                              const int32_t *dst_in, const ir_attrs_t *attrs,
                              int32_t *dst_out, int out_cap);
/* A new constant in dst holding t (dst takes ownership of t). */
loom_status_t ir_rewrite_constant(ir_rewriter_t *rw, loom_tensor_t *t,
                                  int32_t *dst_value);
/* A new constant in dst over t's data, which stays the caller's and must
 * outlive dst. */
loom_status_t ir_rewrite_borrowed_constant(ir_rewriter_t *rw, loom_tensor_t *t,
                                           int32_t *dst_value);
/* Records that src value v is dst value d from now on. */
void ir_rewrite_map(ir_rewriter_t *rw, int32_t v, int32_t d);
/* The dst value of src value v (-1 when unmapped). */
int32_t ir_rewrite_lookup(const ir_rewriter_t *rw, int32_t v);
/* Maps the outputs, verifies dst and hands it over. */
loom_status_t ir_rewrite_finish(ir_rewriter_t *rw, loom_graph_t **out);
/* Drops the graph under construction. */
void ir_rewrite_abort(ir_rewriter_t *rw);

/* A copy of src made with the rewriter (parameters borrowed). */
loom_status_t ir_graph_clone(const loom_graph_t *src, loom_graph_t **out);

#endif
