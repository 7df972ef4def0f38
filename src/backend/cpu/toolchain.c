/* Source in, loaded module out: the cache key, the cache lookup, the
 * build on a miss and the dlopen. The compiler, the cache's files and
 * the CPU's features are each in their own file beside this one. */
#include "backend/cpu/toolchain.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cpu/compiler.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/module_cache.h"
#include "backend/cpu/parts.h"
#include "core/alloc.h"
#include "core/cache_dir.h"
#include "core/env.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/status.h"

struct cpu_module {
  void *handle;    /* from dlopen */
  char *path;      /* the cache entry it was loaded from */
  bool from_cache; /* loaded without running the compiler */
  char key[CORE_SHA256_HEX];
};

static atomic_llong cc_invocations, disk_hits, disk_rebuilds;

/* Each part is preceded by its length, so that no two different lists of
 * parts hash alike. */
static void hash_part(core_sha256_t *h, const void *data, size_t size) {
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)size >> (8 * i));
  core_sha256_update(h, len, sizeof len);
  core_sha256_update(h, data, size);
}

static const char *cc_name(void) {
  const char *cc = core_getenv("LOOM_CC");
  return cc && *cc ? cc : "cc";
}

static void hash_toolchain(core_sha256_t *h, const char *identity) {
  const char *flags = cpu_cc_flags(), *features = cpu_features();
  hash_part(h, identity, strlen(identity));
  hash_part(h, flags, strlen(flags));
  hash_part(h, features, strlen(features));
}

loom_status_t cpu_toolchain_hash(core_sha256_t *h) {
  char identity[PATH_MAX + 600];
  LOOM_TRY(cpu_cc_identity(cc_name(), identity, sizeof identity));
  hash_toolchain(h, identity);
  return LOOM_OK;
}

static void module_key(const char *source, size_t length, const char *identity,
                       char key[CORE_SHA256_HEX]) {
  core_sha256_t h;
  uint8_t digest[CORE_SHA256_BYTES];
  core_sha256_init(&h);
  hash_part(&h, source, length);
  hash_toolchain(&h, identity);
  core_sha256_final(&h, digest);
  core_sha256_hex(digest, key);
}

static loom_status_t file_path(char out[PATH_MAX], const char *dir, const char *name,
                               const char *ext) {
  int n = snprintf(out, PATH_MAX, "%s/%s%s", dir, name, ext);
  if (n < 0 || n >= PATH_MAX)
    return loom_fail(LOOM_ERR_IO, "module cache: path too long in '%s'", dir);
  return LOOM_OK;
}

static loom_status_t write_file(const char *path, const char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(data, 1, size, f) == size;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) return loom_fail(LOOM_ERR_IO, "module cache: cannot write '%s'", path);
  return LOOM_OK;
}

/* The symbols a module must define: the first one it lacks, or NULL. */
typedef struct symbol_list {
  const char *const *names;
  int n;
} symbol_list_t;

static const char *first_missing(void *handle, const symbol_list_t *want) {
  for (int i = 0; i < want->n; i++)
    if (!dlsym(handle, want->names[i])) return want->names[i];
  return NULL;
}

/* Loads the object at path and checks that it defines every wanted
 * symbol; NULL with the error set when it does not. */
static void *load_checked(const char *path, const symbol_list_t *want, const char *cc) {
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    loom_fail(LOOM_ERR_UNSUPPORTED, "C compiler '%s' made a module that cannot be loaded: %s",
              cc, dlerror());
    return NULL;
  }
  const char *missing = first_missing(handle, want);
  if (!missing) return handle;
  loom_fail(LOOM_ERR_UNSUPPORTED,
            "C compiler '%s' reported success but its module lacks the function %s (of %d "
            "wanted); the module is not cached",
            cc, missing, want->n);
  dlclose(handle);
  return NULL;
}

/* How many units to compile a source in at once (parts.h), and where
 * they start: 1 without cuts, or when the source is too small to repay a
 * second compiler process. */
static int plan_units(size_t length, const cpu_source_cuts_t *cuts, int64_t *start) {
  return cuts ? cpu_parts_plan(cuts, (int64_t)length, cpu_cc_jobs(), start) : 1;
}

/* Compiles in a private directory under fixed names (so that the
 * object's bytes do not depend on the directory, and a concurrent build
 * of the same key writes the same file), seals the object, loads it and
 * checks its symbols, and only then renames it over the entry: a module
 * that lacks its functions is never published. The handle comes from the
 * sealed file itself, so a prune that removes the entry at once takes
 * nothing from this process. */
static loom_status_t build_in(const char *scratch, const char *dir, const char *key,
                              const char *cc, const char *source, size_t length,
                              const cpu_source_cuts_t *cuts, const char *entry,
                              const symbol_list_t *want, void **handle,
                              cpu_build_stage_t *stage) {
  char src[PATH_MAX], obj[PATH_MAX], kept_src[PATH_MAX];
  LOOM_TRY(file_path(src, scratch, "module", ".c"));
  LOOM_TRY(file_path(obj, scratch, "module", ".so"));
  LOOM_TRY(file_path(kept_src, dir, key, ".c"));
  /* The whole source is written also when it is compiled in units: it
   * is the one kept beside the entry. */
  LOOM_TRY(write_file(src, source, length));
  int64_t start[CPU_CC_MAX_INPUTS + 1];
  int units = plan_units(length, cuts, start);
  if (units > 1) LOOM_TRY(cpu_parts_write(scratch, source, cuts->prelude, start, units));
  atomic_fetch_add(&cc_invocations, 1);
  loom_status_t s =
      units > 1 ? cpu_parts_compile(cc, scratch, cuts->prelude, start, units, "module.so")
                : cpu_cc_compile(cc, scratch, "module.c", "module.so", cpu_cc_timeout(length));
  /* A full disk is the cache's failure, not the compiler's. */
  *stage = s == LOOM_OK || s == LOOM_ERR_IO ? CPU_BUILD_NO_MODULE : CPU_BUILD_CC_FAILED;
  LOOM_TRY(s);
  LOOM_TRY(cpu_cache_seal(obj, key));
  *handle = load_checked(obj, want, cc);
  if (!*handle) return LOOM_ERR_UNSUPPORTED;
  /* Unpublished, the module still serves this process. */
  if (cpu_cache_publish(obj, entry, dir) != LOOM_OK) {
    core_log(LOG_CACHE, "not cached: %s", loom_last_error());
    return LOOM_OK;
  }
  /* The source beside the entry is for readers; losing it is harmless. */
  rename(src, kept_src);
  return LOOM_OK;
}

static loom_status_t build_entry(const char *dir, const char *key, const char *cc,
                                 const char *source, size_t length,
                                 const cpu_source_cuts_t *cuts, const char *entry,
                                 const symbol_list_t *want, void **handle,
                                 cpu_build_stage_t *stage) {
  char scratch[PATH_MAX];
  LOOM_TRY(cpu_cache_scratch(dir, scratch, sizeof scratch));
  loom_status_t status =
      build_in(scratch, dir, key, cc, source, length, cuts, entry, want, handle, stage);
  core_remove_tree(scratch);
  return status;
}

static loom_status_t new_module(void *handle, const char *path, const char *key,
                                bool from_cache, cpu_module_t **out) {
  cpu_module_t *m = core_calloc(1, sizeof *m);
  char *copy = core_strdup(path);
  if (!m || !copy) {
    core_free(m);
    core_free(copy);
    dlclose(handle);
    return loom_fail(LOOM_ERR_NOMEM, "cpu_module_build: out of memory");
  }
  *m = (cpu_module_t){.handle = handle, .path = copy, .from_cache = from_cache};
  snprintf(m->key, sizeof m->key, "%s", key);
  *out = m;
  return LOOM_OK;
}

/* The entry, verified, loaded and marked used; NULL when it cannot be,
 * with *state and *why saying why. An entry that lacks a wanted symbol
 * (made by a broken compiler before such modules were refused) is bad. */
static void *load_cached(const char *entry, const char *key, const symbol_list_t *want,
                         cpu_entry_state_t *state, const char **why) {
  int fd;
  *state = cpu_cache_open(entry, key, &fd, why);
  if (*state != CPU_ENTRY_OK) return NULL;
  void *handle = dlopen(entry, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    *state = CPU_ENTRY_BAD;
    *why = "the dynamic loader refused it (or it was pruned meanwhile)";
  } else if (first_missing(handle, want)) {
    dlclose(handle);
    handle = NULL;
    *state = CPU_ENTRY_BAD;
    *why = "it lacks a function of the module";
  } else {
    cpu_cache_touch(fd);
  }
  close(fd);
  return handle;
}

/* Counts and logs a lookup that did not load: a miss or a rebuild. */
static void note_build(cpu_entry_state_t state, const char *key, const char *entry,
                       const char *why) {
  if (state == CPU_ENTRY_MISSING) {
    core_log(LOG_CACHE, "miss %.12s %s", key, entry);
    return;
  }
  atomic_fetch_add(&disk_rebuilds, 1);
  core_log(LOG_CACHE, "rebuild %.12s %s: %s", key, entry, why);
}

/* ---- pruning ---- */

/* When this process last pruned, per process: the directory (a new one
 * is pruned at its first use, which also clears the scratch directories
 * of killed builds) and the bytes published since. */
static struct {
  pthread_mutex_t lock;
  char dir[PATH_MAX];
  int64_t published;
} pruned = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Prunes at a directory's first use by this process, unless another
 * process did within the last minute, then whenever this process has
 * published 1/64 of the budget since. A prune reads every entry's
 * metadata: 10,000 entries took 0.3 s on a 2-core machine under a load of
 * 16, so that pruning after each of many small modules, or at the start
 * of each of many short processes, would cost more than the overshoot it
 * saves (at most 1/64 of the budget per process). */
static void maybe_prune(const char *dir, int64_t published) {
  int64_t budget = cpu_cache_budget();
  pthread_mutex_lock(&pruned.lock);
  bool first = strcmp(pruned.dir, dir) != 0;
  pruned.published = first ? 0 : pruned.published + published;
  bool due = first || (budget > 0 && pruned.published >= budget / 64);
  if (due) {
    snprintf(pruned.dir, sizeof pruned.dir, "%s", dir);
    pruned.published = 0;
  }
  pthread_mutex_unlock(&pruned.lock);
  if (due && !(first && cpu_cache_pruned_since(dir, 60)))
    (void)cpu_cache_prune(dir, budget, NULL);
}

/* The bytes an entry occupies on disk: its object and its source. */
static int64_t entry_bytes(const char *entry, size_t source_length) {
  struct stat st;
  return (stat(entry, &st) == 0 ? (int64_t)st.st_size : 0) + (int64_t)source_length;
}

loom_status_t cpu_module_build(const char *source, int64_t length, const char *const *symbols,
                               int n_symbols, cpu_module_t **out) {
  cpu_build_stage_t stage;
  return cpu_module_build_staged(source, length, NULL, symbols, n_symbols, out, &stage);
}

/* Whether cuts describe source: a prelude within it and cuts increasing
 * within the rest. */
static bool cuts_fit(const cpu_source_cuts_t *cuts, int64_t length) {
  if (cuts->prelude < 0 || cuts->prelude > length || cuts->n < 0 || (cuts->n > 0 && !cuts->at))
    return false;
  for (int i = 0; i < cuts->n; i++)
    if (cuts->at[i] < cuts->prelude || cuts->at[i] > length ||
        (i > 0 && cuts->at[i] <= cuts->at[i - 1]))
      return false;
  return true;
}

loom_status_t cpu_module_build_staged(const char *source, int64_t length,
                                      const cpu_source_cuts_t *cuts,
                                      const char *const *symbols, int n_symbols,
                                      cpu_module_t **out, cpu_build_stage_t *stage) {
  LOOM_CHECK_ARG(stage);
  /* Until the compiler runs, a failure is the cache's (its directory). */
  *stage = CPU_BUILD_NO_MODULE;
  LOOM_CHECK_ARG(out);
  *out = NULL;
  LOOM_CHECK_ARG(source);
  if (length < 0)
    return loom_fail(LOOM_ERR_INVALID, "cpu_module_build: negative length %lld",
                     (long long)length);
  if (n_symbols < 0 || (n_symbols > 0 && !symbols))
    return loom_fail(LOOM_ERR_INVALID, "cpu_module_build: %d symbols and %s symbol array",
                     n_symbols, symbols ? "a" : "no");
  if (cuts && !cuts_fit(cuts, length))
    return loom_fail(LOOM_ERR_INVALID, "cpu_module_build: cuts outside the source or out of "
                     "order");
  const char *cc = cc_name();
  char dir[PATH_MAX], identity[PATH_MAX + 600], key[CORE_SHA256_HEX], entry[PATH_MAX];
  LOOM_TRY(core_cache_dir(dir, sizeof dir));
  maybe_prune(dir, 0);
  *stage = CPU_BUILD_NO_CC;
  LOOM_TRY(cpu_cc_identity(cc, identity, sizeof identity));
  *stage = CPU_BUILD_NO_MODULE;
  module_key(source, (size_t)length, identity, key);
  LOOM_TRY(file_path(entry, dir, key, ".so"));

  symbol_list_t want = {symbols, n_symbols};
  cpu_entry_state_t state;
  const char *why;
  void *handle = load_cached(entry, key, &want, &state, &why);
  if (handle) {
    atomic_fetch_add(&disk_hits, 1);
    core_log(LOG_CACHE, "hit %.12s %s", key, entry);
    *stage = CPU_BUILD_DONE;
    return new_module(handle, entry, key, true, out);
  }
  note_build(state, key, entry, why);
  LOOM_TRY(build_entry(dir, key, cc, source, (size_t)length, cuts, entry, &want, &handle,
                       stage));
  *stage = CPU_BUILD_DONE;
  maybe_prune(dir, entry_bytes(entry, (size_t)length));
  return new_module(handle, entry, key, false, out);
}

loom_status_t cpu_module_load(const char *key, const char *const *symbols, int n_symbols,
                              cpu_module_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  char dir[PATH_MAX], entry[PATH_MAX];
  LOOM_TRY(core_cache_dir(dir, sizeof dir));
  LOOM_TRY(file_path(entry, dir, key, ".so"));
  symbol_list_t want = {symbols, n_symbols};
  cpu_entry_state_t state;
  const char *why;
  void *handle = load_cached(entry, key, &want, &state, &why);
  if (!handle) {
    core_log(LOG_CACHE, "indexed module %.12s not loaded: %s", key, why);
    return LOOM_OK;
  }
  atomic_fetch_add(&disk_hits, 1);
  core_log(LOG_CACHE, "hit %.12s %s (indexed)", key, entry);
  return new_module(handle, entry, key, true, out);
}

const char *cpu_module_key(const cpu_module_t *m) { return m ? m->key : ""; }

void *cpu_module_symbol(const cpu_module_t *m, const char *name) {
  return m && name ? dlsym(m->handle, name) : NULL;
}

const char *cpu_module_path(const cpu_module_t *m) { return m ? m->path : ""; }

bool cpu_module_from_cache(const cpu_module_t *m) { return m && m->from_cache; }

void cpu_module_release(cpu_module_t *m) {
  if (!m) return;
  dlclose(m->handle);
  core_free(m->path);
  core_free(m);
}

void cpu_toolchain_stats(cpu_toolchain_stats_t *out) {
  if (!out) return;
  *out = (cpu_toolchain_stats_t){
      .cc_invocations = atomic_load(&cc_invocations),
      .disk_hits = atomic_load(&disk_hits),
      .disk_rebuilds = atomic_load(&disk_rebuilds),
  };
}
