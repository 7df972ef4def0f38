/* The executable's back-end parts (executable.h's rt_part_t), as the rest
 * of the runtime asks them: threads, and the target's memory for arenas.
 * It calls no other file of the runtime. */
#include <string.h>

#include "core/alloc.h"
#include "runtime/executable.h"

bool rt_step_is_reference(const loom_executable_t *e, const step_t *st) {
  return st->kind == STEP_KERNEL && e->parts[st->part].backend == be_reference();
}

int rt_threads(const loom_executable_t *e) {
  const rt_part_t *p = &e->parts[0];
  return p->program && p->backend->threads ? p->backend->threads(p->program) : 1;
}

/* Without a target (an executable that only interprets), host memory. */
void *rt_arena_alloc(const loom_executable_t *e, int64_t bytes) {
  const be_backend_t *b = e->parts[0].backend;
  if (b) return b->alloc(bytes);
  void *p = core_aligned_alloc((size_t)(bytes > 0 ? bytes : 1));
  if (p) memset(p, 0, (size_t)bytes);
  return p;
}

void rt_arena_free(const loom_executable_t *e, void *arena) {
  const be_backend_t *b = e->parts[0].backend;
  if (b) b->free(arena);
  else core_free(arena);
}
