/* Layout ops without a copy, by where the memory plan puts buffers.
 *
 * A concat that is the last reader of each of its operands, each one
 * contiguous block of its result (the dims before the axis all 1): the
 * operands' producers write straight into their blocks of the result's
 * buffer, and the concat has nothing left to do. Data parallelism's
 * gradient buckets are such concats (train/data_parallel.c): every weight
 * gradient is written by the backward pass into the bucket its
 * all_reduce sends, as PyTorch's gradient_as_bucket_view does.
 *
 * A slice that is one contiguous block of its input: its readers read
 * that block in place, and the input's buffer lives as long as they do
 * (the bucket's gradients, read by the optimizer out of the bucket the
 * all_reduce filled). */
#ifndef LOOM_COMPILER_LAYOUT_PLACE_H
#define LOOM_COMPILER_LAYOUT_PLACE_H

#include <stdint.h>

#include "passes/memplan.h"
#include "runtime/executable.h"

/* Where a slot lives inside another request's bytes. */
typedef struct rt_inside {
  int32_t request; /* the request holding it, or -1: the slot is its own */
  int64_t at;      /* its first byte there */
} rt_inside_t;

/* What a request holds besides its own value (per request, flags). */
enum {
  RT_HOLDS_OPERANDS = 1, /* a concat's operands, dead once the concat has run */
  RT_HOLDS_VIEWS = 2,    /* slices read in place: nothing may write it in place */
};

/* Finds such concats and slices among e's groups, given the arena's
 * requests (live intervals set) and the request of each slot. A placed
 * op's inner slots (a concat's operands, a slice's result) leave
 * req_of_slot for inside[], their requests emptied (0 bytes); the
 * holding request's live interval grows to cover them, holds[] says what
 * it holds, and e->in_place_groups marks the op's group, which runs as no
 * step. inside and holds have e->n_slots entries (requests are one per
 * slot at most). Returns how many ops it placed. Executables with
 * runtime symbols are left alone: their sizes, so the blocks' places,
 * change between runs. */
int rt_place_layouts(loom_executable_t *e, mem_request_t *req, int32_t *req_of_slot,
                     rt_inside_t *inside, uint8_t *holds);

#endif
