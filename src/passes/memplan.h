/* Memory planning: the order the groups run in, and offsets for every
 * intermediate buffer in one 64-byte-aligned arena.
 *
 * Steps are positions in the schedule (0..n_steps-1). A buffer is live
 * from the step that writes it (first) through the last step that reads
 * it (last), inclusive. Two buffers may share bytes only if their live
 * intervals do not overlap, except in place: a buffer whose `inplace_of`
 * names another whose last read is this buffer's first step may take the
 * other's offset (an elementwise kernel reading and writing the same
 * element). */
#ifndef LOOM_PASSES_MEMPLAN_H
#define LOOM_PASSES_MEMPLAN_H

#include "passes/fuse.h"

/* The most bytes one request, and all of them together, may ask: keeps
 * sums of aligned sizes far from overflow (4 PiB is beyond any host). */
#define MEM_PLAN_MAX_BYTES ((int64_t)1 << 52)

typedef struct mem_request {
  int64_t bytes;
  int32_t first, last; /* steps, first <= last */
  int32_t inplace_of;  /* index of a request it may overwrite, or -1 */
} mem_request_t;

typedef struct mem_plan {
  int64_t *offsets;          /* per request, multiples of 64 */
  int64_t arena_bytes;       /* the arena's size */
  int64_t lower_bound_bytes; /* the most bytes live at any one step */
  int64_t naive_bytes;       /* the sum of all requests (64-aligned) */
  int n_inplace;             /* requests placed in place */
} mem_plan_t;

/* Offsets by best fit over live intervals (or better); every request
 * gets bytes no other live request uses. */
loom_status_t mem_plan_build(const mem_request_t *requests, int n,
                             mem_plan_t *out);
void mem_plan_free(mem_plan_t *plan);

/* Plans of one set of requests whose sizes change between plans (runtime
 * symbols: the live intervals stay, the bytes do not). The scratch is
 * kept, so a replan allocates nothing. */
typedef struct mem_replanner mem_replanner_t;
loom_status_t mem_replanner_create(int n, mem_replanner_t **out);
/* Plans the n requests (as created) into plan, whose offsets hold n:
 * the same result mem_plan_build gives for them. */
loom_status_t mem_replan(mem_replanner_t *r, const mem_request_t *requests,
                         mem_plan_t *plan);
void mem_replanner_destroy(mem_replanner_t *r);

/* An order of plan's groups that respects dependencies and keeps the
 * bytes live at once low (a greedy list schedule: among ready groups,
 * prefer the one that frees the most and allocates the least). bytes_of
 * gives each value's size (-1 for values that need no buffer). order
 * receives n_groups group indices. */
loom_status_t sched_order(const loom_graph_t *g, const fuse_plan_t *plan,
                          const int64_t *bytes_of_value, int32_t *order);

#endif
