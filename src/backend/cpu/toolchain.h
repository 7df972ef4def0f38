/* The CPU toolchain: C source in, a loaded shared object out, through the
 * system C compiler (LOOM_CC, default "cc"; flags -O3 -march=native
 * -fPIC -shared) and dlopen, with a disk cache of compiled modules.
 *
 * Cache: LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else ~/.cache/loom.
 * An entry's key is the SHA-256 of the source, the compiler's identity
 * (its resolved path and `--version` output), the flags and the CPU's
 * features. Entries are written to a temporary file and renamed into
 * place, so a reader never sees half a file; each carries a seal (its key
 * and a checksum of both), checked before dlopen, so a truncated, corrupt
 * or misplaced entry is rebuilt, never loaded. Two processes building one
 * module at once both succeed (each writes its own temporary; the renames
 * are atomic). The cache is kept within LOOM_CACHE_MAX_BYTES, least
 * recently used entries first (module_cache.h). The compiler runs under a
 * time limit (LOOM_CC_TIMEOUT, compiler.h). */
#ifndef LOOM_BACKEND_CPU_TOOLCHAIN_H
#define LOOM_BACKEND_CPU_TOOLCHAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sha256.h"
#include "loom/loom.h"

typedef struct cpu_module cpu_module_t;

/* Where a module's source may be cut into translation units that the
 * compiler builds at once (LOOM_CC_JOBS, parts.h): source[0, prelude) is
 * what every unit needs (declarations and static helpers), and at[0, n)
 * are offsets, increasing and past prelude, where a unit may start (the
 * start of each function's text). A module built so is the same code as
 * one built whole, under the same cache key. */
typedef struct cpu_source_cuts {
  int64_t prelude;
  const int64_t *at;
  int n;
} cpu_source_cuts_t;

/* Compiles source (or finds it in the cache) and loads it. The module
 * must define the n_symbols functions named in symbols: one that lacks
 * any (a compiler wrapper that "succeeds" without compiling) is neither
 * cached nor returned. Fails with LOOM_ERR_UNSUPPORTED naming the
 * compiler and its first error lines when the compiler is missing,
 * rejects the source, runs out of time, or makes a module without the
 * symbols. */
loom_status_t cpu_module_build(const char *source, int64_t length,
                               const char *const *symbols, int n_symbols,
                               cpu_module_t **out);
/* Where a build failed, for the executable's fallback report. */
typedef enum cpu_build_stage {
  CPU_BUILD_DONE,      /* no failure */
  CPU_BUILD_NO_CC,     /* the compiler was not found */
  CPU_BUILD_CC_FAILED, /* the compiler ran and failed on the source */
  CPU_BUILD_NO_MODULE, /* the cache could not hold the object, or dlopen refused it */
} cpu_build_stage_t;
/* cpu_module_build of a source that may be cut (cuts; NULL: one unit),
 * also saying in *stage where it failed. */
loom_status_t cpu_module_build_staged(const char *source, int64_t length,
                                      const cpu_source_cuts_t *cuts,
                                      const char *const *symbols, int n_symbols,
                                      cpu_module_t **out, cpu_build_stage_t *stage);
/* The cache's entry under key (a module key from cpu_module_key), loaded
 * if it is there, sound and defines the symbols; else *out is NULL and
 * the call still succeeds: the caller builds from source. */
loom_status_t cpu_module_load(const char *key, const char *const *symbols, int n_symbols,
                              cpu_module_t **out);
/* The module's key in the cache (64 hex digits). */
const char *cpu_module_key(const cpu_module_t *m);
/* Feeds h the toolchain's identity, as module keys include it: the
 * compiler's, the flags, the CPU's features. Fails as a build would when
 * the compiler is missing. */
loom_status_t cpu_toolchain_hash(core_sha256_t *h);
void *cpu_module_symbol(const cpu_module_t *m, const char *name);
/* Where the shared object lives (in the cache). */
const char *cpu_module_path(const cpu_module_t *m);
bool cpu_module_from_cache(const cpu_module_t *m);
void cpu_module_release(cpu_module_t *m);

/* Process-wide counters (behind loom_stats_get). */
typedef struct cpu_toolchain_stats {
  int64_t cc_invocations, disk_hits, disk_rebuilds;
} cpu_toolchain_stats_t;
void cpu_toolchain_stats(cpu_toolchain_stats_t *out);

#endif
