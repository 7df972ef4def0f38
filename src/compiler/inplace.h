/* Parameters updated in place. assign(p, v) copies v into p's storage at
 * the end of a run; when nothing reads p after the group that computes v,
 * that group can write v straight into p's storage and the copy goes.
 * An optimizer's new weights and moments then cost no second pass over
 * memory (three copies of every parameter per training step before). */
#ifndef LOOM_RUNTIME_INPLACE_H
#define LOOM_RUNTIME_INPLACE_H

#include "runtime/executable.h"

/* Points each such v at its parameter's slot. Runs after the fixed slots
 * are assigned and before the arena is planned; a contraction group that
 * writes parameters this way gets its product a buffer of its own (a
 * group output), since its kernel cannot accumulate into a value that its
 * epilogue still reads. */
loom_status_t rt_alias_assigns(loom_executable_t *e);

/* Whether grp is an assign's group (an assign is always alone). */
bool rt_is_assign_group(const loom_graph_t *g, const fuse_group_t *grp);

#endif
