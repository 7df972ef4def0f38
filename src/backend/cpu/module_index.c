#include "backend/cpu/module_index.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/module_cache.h"
#include "backend/cpu/toolchain.h"
#include "core/alloc.h"
#include "core/build_id.h"
#include "core/cache_dir.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"

/* An entry's body, before its seal: the magic line, the module's key (64
 * hex digits, or 64 '-' for none), then int32 words: n_groups, n_maps,
 * generated[n_groups], function[n_groups], map_at[n_groups + 1],
 * maps[n_maps]. */
#define MAGIC "loom-index 1\n"
enum { MAGIC_LEN = sizeof MAGIC - 1, KEY_LEN = CORE_SHA256_HEX - 1, HEAD = MAGIC_LEN + KEY_LEN };
/* A plan of more groups or maps than this is not kept. */
enum { MAX_WORDS = 1 << 22 };

bool cpu_index_key(const loom_graph_t *g, const fuse_plan_t *plan,
                   const int32_t *slot_of_value, const int64_t *sym_values,
                   char key[CORE_SHA256_HEX]) {
  const char *build = core_build_id();
  if (!build) return false;
  core_sha256_t h;
  core_sha256_init(&h);
  core_sha256_update(&h, MAGIC, MAGIC_LEN);
  core_sha256_update(&h, build, strlen(build) + 1);
  if (cpu_toolchain_hash(&h) != LOOM_OK) {
    loom_clear_error();
    return false;
  }
  cg_key_update(&h, g, plan, slot_of_value, sym_values);
  uint8_t digest[CORE_SHA256_BYTES];
  core_sha256_final(&h, digest);
  core_sha256_hex(digest, key);
  return true;
}

static bool entry_path(const char *key, char path[PATH_MAX]) {
  char dir[PATH_MAX];
  if (core_cache_dir(dir, sizeof dir) != LOOM_OK) {
    loom_clear_error();
    return false;
  }
  return snprintf(path, PATH_MAX, "%s/%s.idx", dir, key) < PATH_MAX;
}

/* ---- Reading ------------------------------------------------------------------ */

/* Whether the products describe n groups soundly: each generated group
 * runs its own function or an earlier generated group's, and the maps
 * are in order within n_maps and name slots below n_slots. */
static bool sound(const cg_module_t *m, int n, int32_t n_maps, int n_slots) {
  if (m->map_at[0] != 0 || m->map_at[n] != n_maps) return false;
  for (int i = 0; i < n; i++) {
    if (m->map_at[i + 1] < m->map_at[i]) return false;
    if (!m->generated[i]) continue;
    int32_t f = m->function[i];
    if (f < 0 || f > i || !m->generated[f]) return false;
  }
  for (int32_t k = 0; k < n_maps; k++)
    if (m->maps[k] < 0 || m->maps[k] >= n_slots) return false;
  return true;
}

bool cpu_index_parse(const char *body, size_t size, int n_groups, int n_slots, cg_module_t *out,
                     char module_key[CORE_SHA256_HEX]) {
  *out = (cg_module_t){0};
  module_key[0] = '\0';
  if (size < HEAD + 8 || memcmp(body, MAGIC, MAGIC_LEN)) return false;
  int32_t head[2];
  memcpy(head, body + HEAD, sizeof head);
  int32_t n = head[0], n_maps = head[1];
  if (n < 0 || n != n_groups || n > MAX_WORDS || n_maps < 0 || n_maps > MAX_WORDS) return false;
  size_t words = 2 + 3 * (size_t)n + 1 + (size_t)n_maps;
  if (size != HEAD + 4 * words) return false;
  const char *key = body + MAGIC_LEN;
  bool none = key[0] == '-';
  for (int i = 0; i < KEY_LEN; i++)
    if (none ? key[i] != '-' : !strchr("0123456789abcdef", key[i]) || !key[i]) return false;
  memcpy(module_key, key, KEY_LEN);
  module_key[none ? 0 : KEY_LEN] = '\0';
  out->generated = core_calloc((size_t)n + 1, sizeof(bool));
  out->function = core_malloc(sizeof(int32_t) * ((size_t)n + 1));
  out->map_at = core_malloc(sizeof(int32_t) * ((size_t)n + 1));
  out->maps = core_malloc(sizeof(int32_t) * ((size_t)n_maps + 1));
  if (!out->generated || !out->function || !out->map_at || !out->maps) return false;
  const char *at = body + HEAD + 8;
  for (int i = 0; i < n; i++, at += 4) {
    int32_t w;
    memcpy(&w, at, 4);
    out->generated[i] = w != 0;
  }
  memcpy(out->function, at, 4 * (size_t)n);
  at += 4 * (size_t)n;
  memcpy(out->map_at, at, 4 * ((size_t)n + 1));
  at += 4 * ((size_t)n + 1);
  memcpy(out->maps, at, 4 * (size_t)n_maps);
  for (int i = 0; i < n; i++) out->n_functions += out->generated[i] && out->function[i] == i;
  return sound(out, n, n_maps, n_slots);
}

bool cpu_index_recall(const char *key, int n_groups, int n_slots, cg_module_t *out,
                      char module_key[CORE_SHA256_HEX]) {
  *out = (cg_module_t){0};
  char path[PATH_MAX];
  if (!entry_path(key, path)) return false;
  int fd;
  const char *why;
  cpu_entry_state_t state = cpu_cache_open(path, key, &fd, &why);
  if (state != CPU_ENTRY_OK) {
    if (state == CPU_ENTRY_BAD) core_log(LOG_CACHE, "index %.12s not read: %s", key, why);
    return false;
  }
  off_t end = lseek(fd, 0, SEEK_END);
  size_t size = end > CPU_CACHE_SEAL_BYTES ? (size_t)(end - CPU_CACHE_SEAL_BYTES) : 0;
  char *body = size > 0 && size <= HEAD + 4 * (size_t)MAX_WORDS * 2 ? core_malloc(size) : NULL;
  bool ok = body && pread(fd, body, size, 0) == (ssize_t)size &&
            cpu_index_parse(body, size, n_groups, n_slots, out, module_key);
  if (ok) cpu_cache_touch(fd);
  close(fd);
  core_free(body);
  if (!ok) {
    core_log(LOG_CACHE, "index %.12s not used: its contents do not fit the plan", key);
    cg_module_free(out);
  }
  return ok;
}

/* ---- Writing ------------------------------------------------------------------ */

typedef struct keep {
  const char *key, *module_key;
  int n_groups;
  const cg_module_t *cg;
} keep_t;

static char *put_words(char *at, const int32_t *w, int64_t n) {
  if (n > 0) memcpy(at, w, 4 * (size_t)n);
  return at + 4 * n;
}

static loom_status_t fill(int fd, const char *tmp, void *ctx) {
  const keep_t *k = ctx;
  const cg_module_t *cg = k->cg;
  int n = k->n_groups;
  int32_t n_maps = cg->map_at[n];
  size_t words = 2 + 3 * (size_t)n + 1 + (size_t)n_maps;
  char *body = core_malloc(HEAD + 4 * words);
  if (!body) return loom_fail(LOOM_ERR_NOMEM, "out of memory for the module index");
  memcpy(body, MAGIC, MAGIC_LEN);
  if (k->module_key[0]) memcpy(body + MAGIC_LEN, k->module_key, KEY_LEN);
  else memset(body + MAGIC_LEN, '-', KEY_LEN);
  char *at = body + HEAD;
  int32_t head[2] = {n, n_maps};
  at = put_words(at, head, 2);
  for (int i = 0; i < n; i++) {
    int32_t g = cg->generated[i];
    at = put_words(at, &g, 1);
  }
  for (int i = 0; i < n; i++) {
    int32_t f = cg->generated[i] ? cg->function[i] : -1;
    at = put_words(at, &f, 1);
  }
  at = put_words(at, cg->map_at, n + 1);
  put_words(at, cg->maps, n_maps);
  char seal[CPU_CACHE_SEAL_BYTES + 1];
  loom_status_t s = cpu_cache_seal_of(body, HEAD + 4 * words, k->key, seal)
                        ? core_write_all(fd, tmp, body, HEAD + 4 * words)
                        : loom_fail(LOOM_ERR_INVALID, "module index: '%s' is not a key", k->key);
  if (s == LOOM_OK) s = core_write_all(fd, tmp, seal, CPU_CACHE_SEAL_BYTES);
  core_free(body);
  return s;
}

void cpu_index_keep(const char *key, int n_groups, const cg_module_t *cg,
                    const char *module_key) {
  char path[PATH_MAX];
  if (n_groups > MAX_WORDS / 4 || cg->map_at[n_groups] > MAX_WORDS || !entry_path(key, path))
    return;
  keep_t k = {key, module_key, n_groups, cg};
  if (core_file_replace(path, fill, &k) != LOOM_OK) {
    core_log(LOG_CACHE, "index %.12s not kept: %s", key, loom_last_error());
    loom_clear_error();
  }
}
