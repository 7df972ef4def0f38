/* Index errors of generated code (abi.h's index_error): a body that meets
 * an index out of range reports it and stops; the launch then fails with
 * the reference kernel's message. Bodies of one step may run on several
 * threads, so the record keeps the report of the earliest
 * node, then the lowest position: the entry the reference kernels,
 * running nodes in order and walking each index in order, name. */
#include <pthread.h>
#include <stdatomic.h>

#include "backend/cpu/backend_cpu.h"
#include "core/alloc.h"
#include "core/status.h"

typedef struct cpu_index_errors {
  pthread_mutex_t lock;
  atomic_bool set; /* a report waits; read after each generated step */
  int node;
  int64_t position, value, size;
} cpu_index_errors_t;

static void report(const loom_abi_t *rt, int node, int64_t position, int64_t value,
                   int64_t size) {
  cpu_index_errors_t *r = rt->index_errors;
  pthread_mutex_lock(&r->lock);
  if (!atomic_load_explicit(&r->set, memory_order_relaxed) || node < r->node ||
      (node == r->node && position < r->position)) {
    r->node = node;
    r->position = position;
    r->value = value;
    r->size = size;
  }
  atomic_store_explicit(&r->set, true, memory_order_release);
  pthread_mutex_unlock(&r->lock);
}

loom_status_t cpu_index_errors_attach(loom_abi_t *abi) {
  cpu_index_errors_t *r = core_calloc(1, sizeof *r);
  if (!r) return loom_fail(LOOM_ERR_NOMEM, "out of memory for an executable");
  pthread_mutex_init(&r->lock, NULL);
  abi->index_error = report;
  abi->index_errors = r;
  return LOOM_OK;
}

atomic_bool *cpu_index_errors_flag(const loom_abi_t *abi) {
  return &((cpu_index_errors_t *)abi->index_errors)->set;
}

loom_status_t cpu_index_errors_take(const be_program_t *p, int32_t group,
                                    const loom_abi_t *abi) {
  cpu_index_errors_t *r = abi->index_errors;
  if (!r || !atomic_load_explicit(&r->set, memory_order_acquire)) return LOOM_OK;
  pthread_mutex_lock(&r->lock);
  loom_status_t s;
  /* The code reports the node's position in its group (abi.h). */
  const fuse_group_t *grp = &p->plan->groups[group];
  if (r->node >= 0 && r->node < grp->n_nodes)
    s = ir_index_error(&p->graph->nodes[grp->nodes[r->node]], r->value, r->position, r->size);
  else
    s = loom_fail(LOOM_ERR_VALUE, "index: index %lld (at position %lld) is out of range for "
                  "a dim of size %lld", (long long)r->value, (long long)r->position,
                  (long long)r->size);
  atomic_store_explicit(&r->set, false, memory_order_relaxed);
  pthread_mutex_unlock(&r->lock);
  return s;
}

void cpu_index_errors_free(loom_abi_t *abi) {
  cpu_index_errors_t *r = abi->index_errors;
  if (!r) return;
  pthread_mutex_destroy(&r->lock);
  core_free(r);
  abi->index_errors = NULL;
}
