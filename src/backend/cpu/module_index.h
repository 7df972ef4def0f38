/* The module cache's index: what compiling a request produced, kept so
 * that the same request in a later process (or a later trace) loads its
 * module without the code generator running again.
 *
 * A request is the code generator's inputs (the graph after the passes,
 * the fusion plan, the slots, the symbols' values: cg_key_update), the
 * build of Loom (core_build_id) and the toolchain (the module key's
 * parts: compiler, flags, CPU features). Its entry, <dir>/<key>.idx, holds
 * the emission's products (which groups have code, the function each
 * runs, their slot maps) and the key of the module built from the
 * source (none for a trial), sealed as modules are (module_cache.h) and
 * replaced whole. Emitting C and hashing it cost more than the rest of a
 * compile whose module is on disk; the index skips both. An entry whose
 * module has been pruned sends the request down the full path, which
 * builds the module again. */
#ifndef LOOM_BACKEND_CPU_MODULE_INDEX_H
#define LOOM_BACKEND_CPU_MODULE_INDEX_H

#include <stdbool.h>

#include "backend/cpu/codegen/codegen.h"
#include "core/sha256.h"

/* The request's key; false when it has none (no build ID, no compiler):
 * the index is then not used. */
bool cpu_index_key(const loom_graph_t *g, const fuse_plan_t *plan,
                   const int32_t *slot_of_value, const int64_t *sym_values,
                   char key[CORE_SHA256_HEX]);

/* The products kept under key for a plan of n_groups groups over
 * n_slots slots, into *out (no source: out->source is NULL), and the
 * module's key ("" for none); false when there is no sound entry. */
bool cpu_index_recall(const char *key, int n_groups, int n_slots, cg_module_t *out,
                      char module_key[CORE_SHA256_HEX]);

/* An entry's body (the bytes before its seal) read into *out and
 * module_key, as cpu_index_recall does after checking the seal; false
 * when it does not describe n_groups groups over n_slots slots soundly.
 * *out holds allocations either way: cg_module_free releases them. (The
 * fuzz harness calls it on arbitrary bytes.) */
bool cpu_index_parse(const char *body, size_t size, int n_groups, int n_slots, cg_module_t *out,
                     char module_key[CORE_SHA256_HEX]);

/* Keeps cg's products and module_key ("" for none) under key. Best
 * effort: a cache that cannot be written is logged (LOOM_LOG=cache) and
 * left as it was. */
void cpu_index_keep(const char *key, int n_groups, const cg_module_t *cg,
                    const char *module_key);

#endif
