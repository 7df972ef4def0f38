/* Splitting a differentiable segment into a forward and a backward graph
 * (training through traces): the forward computes the segment's outputs
 * and saves what the backward needs; the backward turns the outputs'
 * gradients and the saved values into the inputs' gradients. A segment
 * replayed several times in one step (an RNN cell) keeps one set of
 * saved values per invocation, so each backward sees its own. */
#ifndef LOOM_PASSES_PARTITION_H
#define LOOM_PASSES_PARTITION_H

#include "ir/ir.h"

typedef struct partition {
  /* Inputs: src's inputs. Outputs: src's outputs, then n_saved saved
   * values. */
  loom_graph_t *forward;
  /* Inputs: the n_saved saved values (in the forward's order), then one
   * gradient per float output of src (of that output's type), in order.
   * Outputs: one gradient per wrt entry, in the order of wrt. */
  loom_graph_t *backward;
  int n_saved;
  int n_grad_inputs; /* float outputs of src */
} partition_t;

/* wrt: indices into src's inputs (float dtypes) to differentiate, or
 * n_inputs + k for output k: its whole gradient, the incoming one plus
 * what its reads inside src add (a retained gradient). src
 * has no assigns. Fails naming the op when a gradient must flow through
 * an op without a gradient rule. The backward reads src's parameters
 * and constants itself (they are not saved); both graphs own copies of
 * the constants and share the parameters' storage with src, so src may
 * be destroyed first unless it has parameters. */
loom_status_t pass_partition(const loom_graph_t *src, int n_wrt,
                             const int *wrt, partition_t *out);
void partition_free(partition_t *p);

#endif
