/* The CPU back end (backend_cpu.h): a plan's groups as C functions in one
 * module, compiled by the system compiler (or found in the module cache)
 * and called through the ABI on a thread pool. */
#include <limits.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/eager.h"
#include "backend/cpu/codegen/codegen.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/module_index.h"
#include "backend/cpu/toolchain.h"
#include "core/alloc.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"

_Static_assert(BE_SYM_RUNTIME == CG_SYM_RUNTIME, "one marker for runtime symbols");

/* The symbol values the code generator sees: runtime ones marked. */
static int64_t *codegen_syms(const be_request_t *req) {
  int n = (int)req->graph->n_symbols;
  int64_t *v = core_malloc(sizeof(int64_t) * (size_t)(n + 1));
  if (!v) return NULL;
  for (int k = 0; k < n; k++)
    v[k] = req->sym_runtime && req->sym_runtime[k] ? BE_SYM_RUNTIME : req->syms[k];
  return v;
}

/* A trial: which groups the emitters take, every value in a slot of its
 * own (storage does not change what is generated); from the module
 * index when a trial of the same request ran before. */
static loom_status_t trial(const be_request_t *req, be_result_t *res) {
  const loom_graph_t *g = req->graph;
  int n_groups = req->plan->n_groups;
  int32_t *slot_of_value = core_malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
  int64_t *syms = codegen_syms(req);
  loom_status_t s = slot_of_value && syms ? LOOM_OK
                                          : loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  for (int64_t v = 0; s == LOOM_OK && v < g->n_values; v++) slot_of_value[v] = (int32_t)v;
  char key[CORE_SHA256_HEX], module_key[CORE_SHA256_HEX];
  bool keyed = s == LOOM_OK && cpu_index_key(g, req->plan, slot_of_value, syms, key);
  cg_module_t cg = {0};
  if (s == LOOM_OK &&
      !(keyed && cpu_index_recall(key, n_groups, (int)g->n_values, &cg, module_key))) {
    s = cg_emit_module(g, req->plan, slot_of_value, syms, &cg);
    if (s == LOOM_OK && keyed) cpu_index_keep(key, n_groups, &cg, "");
  }
  if (s == LOOM_OK) memcpy(res->generated, cg.generated, sizeof(bool) * (size_t)n_groups);
  cg_module_free(&cg);
  core_free(slot_of_value);
  core_free(syms);
  return s;
}

/* The functions the module must define: loom_group_<i> for each wanted
 * group that runs its own function (others share an earlier group's), in
 * one block that the caller frees. */
static loom_status_t group_symbols(const be_request_t *req, const cg_module_t *cg,
                                   char ***out, int *n) {
  enum { NAME = 24 };
  int n_groups = req->plan->n_groups, count = 0;
  for (int i = 0; i < n_groups; i++) count += cg->generated[i] && cg->function[i] == i;
  char **names = core_malloc((size_t)count * (sizeof(char *) + NAME) + 1);
  if (!names) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  char *text = (char *)(names + count);
  *n = 0;
  for (int i = 0; i < n_groups; i++) {
    if (!cg->generated[i] || cg->function[i] != i) continue;
    names[*n] = text + (size_t)*n * NAME;
    snprintf(names[*n], NAME, "loom_group_%d", i);
    (*n)++;
  }
  *out = names;
  return LOOM_OK;
}

/* Compiles and loads cg's module; a missing or failing compiler is a
 * lost build (res), not an error. */
static loom_status_t load_module(be_program_t *p, const be_request_t *req,
                                 const cg_module_t *cg, be_result_t *res) {
  if (!req->options->use_cc) {
    res->lost = LOOM_FALLBACK_DISABLED;
    res->lost_reason = core_strdup("use_cc is 0");
    return LOOM_OK;
  }
  char **names = NULL;
  int n_names = 0;
  cpu_build_stage_t stage = CPU_BUILD_NO_MODULE;
  loom_status_t s = group_symbols(req, cg, &names, &n_names);
  cpu_source_cuts_t cuts = {.prelude = cg->prelude, .at = cg->cuts, .n = cg->n_functions};
  if (s == LOOM_OK)
    s = cpu_module_build_staged(cg->source, cg->length, &cuts, (const char *const *)names,
                                n_names, &p->module, &stage);
  core_free(names);
  if (s == LOOM_ERR_NOMEM || s == LOOM_OK) return s;
  res->lost = stage == CPU_BUILD_NO_CC       ? LOOM_FALLBACK_NO_CC
              : stage == CPU_BUILD_CC_FAILED ? LOOM_FALLBACK_CC_FAILED
                                             : LOOM_FALLBACK_NO_MODULE;
  res->lost_reason = core_strdup(loom_last_error());
  return LOOM_OK;
}

/* Whether group grp has a node that indexes its data (only index code
 * reports index errors). */
static bool indexes(const loom_graph_t *g, const fuse_group_t *grp) {
  for (int k = 0; k < grp->n_nodes; k++)
    if (ir_ops[g->nodes[grp->nodes[k]].op].flags & F_INDEX) return true;
  return false;
}

/* Each wanted generated group's function and slot map: the function of
 * the first group whose code is the same (cg_module_t.function). */
static loom_status_t bind_functions(be_program_t *p, const be_request_t *req,
                                    const cg_module_t *cg, be_result_t *res) {
  int n_groups = req->plan->n_groups;
  int64_t n_map = cg->map_at[n_groups];
  p->maps = core_malloc(sizeof *p->maps * ((size_t)n_map + 1));
  bool *used = core_calloc((size_t)n_groups + 1, sizeof *used);
  if (!p->maps || !used) {
    core_free(used);
    return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  }
  if (n_map) memcpy(p->maps, cg->maps, sizeof *p->maps * (size_t)n_map);
  loom_status_t s = LOOM_OK;
  for (int gi = 0; gi < n_groups && s == LOOM_OK; gi++) {
    if (!cg->generated[gi] || !req->want[gi]) continue;
    int32_t f = cg->function[gi];
    char name[32];
    snprintf(name, sizeof name, "loom_group_%d", f);
    void *sym = cpu_module_symbol(p->module, name);
    if (!sym) {
      s = loom_fail(LOOM_ERR_UNSUPPORTED, "module lacks %s", name);
      break;
    }
    memcpy(&p->kernel[gi].fn, &sym, sizeof sym);
    p->kernel[gi].map = p->maps + cg->map_at[gi];
    p->kernel[gi].checks = indexes(req->graph, &req->plan->groups[gi]);
    res->generated[gi] = true;
    res->n_kernels += !used[f];
    used[f] = true;
  }
  core_free(used);
  return s;
}

static void cpu_destroy(be_program_t *p);

static loom_status_t program_new(const be_request_t *req, be_program_t **out) {
  be_program_t *p = core_calloc(1, sizeof *p);
  *out = p;
  if (!p) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  int n_groups = req->plan->n_groups;
  *p = (be_program_t){.graph = req->graph, .plan = req->plan,
                      .slot_of_value = req->slot_of_value, .syms = req->syms,
                      .n_slots = req->n_slots,
                      .conv_mode = cpu_conv_mode(req->options)};
  p->kernel = core_calloc((size_t)n_groups + 1, sizeof *p->kernel);
  if (!p->kernel) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  return LOOM_OK;
}

/* Where the source of a module from the cache is kept beside it (for
 * readers only: it may be gone). */
static bool kept_source_path(const cpu_module_t *m, char path[PATH_MAX]) {
  const char *so = cpu_module_path(m);
  size_t n = strlen(so);
  return n >= 3 && n + 1 <= PATH_MAX && snprintf(path, PATH_MAX, "%.*s.c", (int)(n - 3), so) > 0;
}

static int64_t kept_source_bytes(const cpu_module_t *m) {
  char path[PATH_MAX];
  struct stat st;
  return kept_source_path(m, path) && stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

static char *kept_source(const cpu_module_t *m) {
  char path[PATH_MAX];
  void *text = NULL;
  size_t size;
  if (kept_source_path(m, path) && core_read_file(path, (size_t)1 << 28, &text, &size) != LOOM_OK)
    loom_clear_error();
  return text;
}

/* The module the index names for the request, loaded, with the
 * emission's products in *cg; false (and nothing loaded) when the index
 * or the cache lacks it. */
static loom_status_t recall(be_program_t *p, const be_request_t *req, const char *key,
                            cg_module_t *cg, bool *found) {
  char module_key[CORE_SHA256_HEX];
  *found = false;
  if (!cpu_index_recall(key, req->plan->n_groups, req->n_slots, cg, module_key)) return LOOM_OK;
  char **names = NULL;
  int n_names = 0;
  loom_status_t s = module_key[0] ? group_symbols(req, cg, &names, &n_names) : LOOM_OK;
  if (s == LOOM_OK && module_key[0])
    s = cpu_module_load(module_key, (const char *const *)names, n_names, &p->module);
  core_free(names);
  *found = s == LOOM_OK && p->module;
  if (*found) {
    p->source_kept = true;
    p->source_bytes = kept_source_bytes(p->module);
  } else {
    cg_module_free(cg);
  }
  return s;
}

/* The module: the one the index names for this request when it is on
 * disk, else emitted, built (or found by its source) and indexed. */
static loom_status_t module_for(be_program_t *p, const be_request_t *req, cg_module_t *cg,
                                be_result_t *res) {
  int64_t *syms = codegen_syms(req);
  if (!syms) return loom_fail(LOOM_ERR_NOMEM, "out of memory compiling");
  char key[CORE_SHA256_HEX];
  bool keyed = req->options->use_cc &&
               cpu_index_key(req->graph, req->plan, req->slot_of_value, syms, key), found = false;
  loom_status_t s = keyed ? recall(p, req, key, cg, &found) : LOOM_OK;
  if (s == LOOM_OK && !found)
    s = cg_emit_module(req->graph, req->plan, req->slot_of_value, syms, cg);
  core_free(syms);
  if (s != LOOM_OK || found) return s;
  bool any = false;
  for (int i = 0; i < req->plan->n_groups; i++) any |= cg->generated[i];
  if (!any) return LOOM_OK;
  p->source = core_strdup(cg->source);
  p->source_bytes = cg->length;
  s = load_module(p, req, cg, res);
  if (s == LOOM_OK && p->module && keyed)
    cpu_index_keep(key, req->plan->n_groups, cg, cpu_module_key(p->module));
  return s;
}

static loom_status_t build_program(be_program_t *p, const be_request_t *req, be_result_t *res) {
  cg_module_t cg = {0};
  loom_status_t s = module_for(p, req, &cg, res);
  if (s == LOOM_OK && p->module) s = bind_functions(p, req, &cg, res);
  /* The pool first: frozen conv weights are packed for the algorithm
   * timed on the threads that will run it (conv_choice.c). */
  if (s == LOOM_OK && p->module && req->options->freeze_params) {
    s = core_pool_acquire(req->options->num_threads, &p->pool);
    if (s == LOOM_OK) s = cpu_prepack_frozen(p, req);
  }
  cg_module_free(&cg);
  return s;
}

static loom_status_t cpu_build(const be_request_t *req, be_result_t *res, be_program_t **out) {
  *out = NULL;
  memset(res->generated, 0, sizeof(bool) * (size_t)req->plan->n_groups);
  res->n_kernels = 0;
  res->lost = LOOM_FALLBACK_NONE;
  res->lost_reason = NULL;
  if (req->trial || !req->want) return trial(req, res);
  be_program_t *p;
  loom_status_t s = program_new(req, &p);
  if (s == LOOM_OK) s = build_program(p, req, res);
  if (s != LOOM_OK) {
    cpu_destroy(p);
    return s;
  }
  *out = p;
  return LOOM_OK;
}

static loom_status_t cpu_start(be_program_t *p, int threads) {
  if (!p->pool) LOOM_TRY(core_pool_acquire(threads, &p->pool)); /* else made to prepack */
  kern_gemm_reserve(core_pool_threads(p->pool));
  cpu_abi_init(p);
  return cpu_split_start(p);
}

static int cpu_threads(const be_program_t *p) { return core_pool_threads(p->pool); }

static const char *cpu_source(const be_program_t *p, const char **where) {
  *where = p->module ? cpu_module_path(p->module) : "not compiled";
  char *text = atomic_load(&p->source), *none = NULL;
  if (text || !p->source_kept) return text;
  /* Explain may ask from several threads: the first text read is kept. */
  text = kept_source(p->module);
  be_program_t *q = (be_program_t *)p;
  if (text && !atomic_compare_exchange_strong(&q->source, &none, text)) core_free(text);
  return atomic_load(&p->source);
}

/* A loaded shared object maps at least its ELF headers, tables and a few
 * pages of code and data whatever its size; -O3 code of a fused kernel is
 * of the order of its source. */
#define MODULE_BASE_BYTES (16 * 1024)

static int64_t cpu_bytes(const be_program_t *p) {
  if (!p->module) return 0;
  return MODULE_BASE_BYTES + p->source_bytes;
}

static void cpu_destroy(be_program_t *p) {
  if (!p) return;
  core_pool_release(p->pool);
  cpu_split_free(p);
  cpu_module_release(p->module);
  cpu_prepack_free(p);
  core_free(p->source);
  core_free(p->kernel);
  core_free(p->maps);
  core_free(p);
}

/* ---- Runs ------------------------------------------------------------------ */

static loom_status_t cpu_run_new(be_program_t *p, be_run_t **out) {
  be_run_t *r = core_calloc(1, sizeof *r);
  *out = NULL;
  if (!r) return loom_fail(LOOM_ERR_NOMEM, "out of memory for a run's storage");
  r->abi = p->abi;
  loom_status_t s = cpu_index_errors_attach(&r->abi);
  if (s != LOOM_OK) {
    core_free(r);
    return s;
  }
  r->index_error = cpu_index_errors_flag(&r->abi);
  *out = r;
  return LOOM_OK;
}

static void cpu_run_free(be_program_t *p, be_run_t *r) {
  (void)p;
  if (!r) return;
  cpu_index_errors_free(&r->abi);
  core_free(r->lent_b);
  core_free(r);
}

/* ---- Memory: the host's ------------------------------------------------------ */

static void *cpu_alloc(int64_t bytes) {
  void *p = core_aligned_alloc((size_t)(bytes > 0 ? bytes : 1));
  if (!p) return NULL;
  /* First touches cost ~11 us a small page here (core_aligned_alloc):
   * take them now, not in a run. */
  memset(p, 0, (size_t)bytes);
  return p;
}

static void cpu_free(void *p) { core_free(p); }

static loom_status_t cpu_copy(void *dst, const void *src, int64_t bytes) {
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
  return LOOM_OK;
}

static void cpu_stats(be_stats_t *out) {
  cpu_toolchain_stats_t t;
  cpu_toolchain_stats(&t);
  out->cc_invocations += t.cc_invocations;
  out->disk_hits += t.disk_hits;
  out->disk_rebuilds += t.disk_rebuilds;
}

const be_backend_t be_cpu = {
    .name = "cpu",
    .device = LOOM_DEVICE_CPU,
    .fuse = &cg_fuse_caps,
    .generates = cg_op_generated,
    .build = cpu_build,
    .start = cpu_start,
    .threads = cpu_threads,
    .source = cpu_source,
    .bytes = cpu_bytes,
    .destroy = cpu_destroy,
    .run_new = cpu_run_new,
    .run_free = cpu_run_free,
    .launch = cpu_launch,
    .sync = NULL, /* calls return when their work is done */
    .stable_use = cpu_stable_use,
    .stable = cpu_stable,
    .cache_new = cpu_cache_new,
    .cache_free = cpu_cache_free,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .eager = cpu_eager,
    .stats = cpu_stats,
    .isa = kern_gemm_isa,
};
