/* Snapshots of the environment (core/env.h). A snapshot is one
 * allocation: the header, the execve vector, and the strings it points
 * to. The newest is kept, so that a caller queueing compile after compile
 * in an unchanged environment copies it once. */
#include "core/env.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

extern char **environ;

struct core_env {
  atomic_int refs;
  int n;
  char *vars[]; /* n "NAME=value" and a NULL */
};

static pthread_mutex_t newest_lock = PTHREAD_MUTEX_INITIALIZER;
static core_env_t *newest; /* referenced */
static _Thread_local core_env_t *entered;

static bool same_as_environ(const core_env_t *e) {
  char **env = environ;
  int i = 0;
  for (; env && env[i]; i++)
    if (i == e->n || strcmp(env[i], e->vars[i]) != 0) return false;
  return i == e->n;
}

static core_env_t *take(void) {
  char **env = environ;
  int n = 0;
  size_t bytes = 0;
  for (; env && env[n]; n++) bytes += strlen(env[n]) + 1;
  core_env_t *e = core_malloc(sizeof *e + sizeof(char *) * ((size_t)n + 1) + bytes);
  if (!e) return NULL;
  atomic_init(&e->refs, 1);
  e->n = n;
  char *s = (char *)(e->vars + n + 1);
  for (int i = 0; i < n; i++) {
    size_t len = strlen(env[i]) + 1;
    memcpy(s, env[i], len);
    e->vars[i] = s;
    s += len;
  }
  e->vars[n] = NULL;
  return e;
}

static core_env_t *share(core_env_t *e) {
  if (e) atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
  return e;
}

core_env_t *core_env_hold(void) {
  if (entered) return share(entered);
  pthread_mutex_lock(&newest_lock);
  if (!newest || !same_as_environ(newest)) {
    core_env_t *e = take();
    core_env_release(newest);
    newest = e; /* NULL when out of memory: the next hold tries again */
  }
  core_env_t *e = share(newest);
  pthread_mutex_unlock(&newest_lock);
  return e;
}

void core_env_release(core_env_t *e) {
  if (e && atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) core_free(e);
}

void core_env_enter(core_env_t *e) {
  core_env_release(entered);
  entered = e;
}

void core_env_leave(void) { core_env_enter(NULL); }

const char *core_getenv(const char *name) {
  const core_env_t *e = entered;
  if (!e) return getenv(name);
  size_t len = strlen(name);
  for (int i = 0; i < e->n; i++)
    if (strncmp(e->vars[i], name, len) == 0 && e->vars[i][len] == '=') return e->vars[i] + len + 1;
  return NULL;
}

char *const *core_env_vector(void) { return entered ? entered->vars : environ; }
