/* The process environment as Loom's own threads read it (core/env.c).
 *
 * setenv may move the environment's array while another thread reads it
 * (glibc reallocates it), and a program (Python's os.environ, a test)
 * changes variables on its own thread while Loom's background compiles
 * run. So no thread that Loom starts reads `environ`: each reads a
 * snapshot that the thread which handed it work took (a compile job: when
 * it was queued; a long-lived worker: when it started). Loom code reads
 * variables through core_getenv only, and starts processes with
 * core_env_vector. */
#ifndef LOOM_CORE_ENV_H
#define LOOM_CORE_ENV_H

typedef struct core_env core_env_t;

/* This thread's view of the environment, referenced: its entered
 * snapshot, or (a thread that entered none: the caller's own) a snapshot
 * of `environ`, shared with the last one taken while nothing changed.
 * NULL when out of memory (a thread entering NULL reads `environ`). */
core_env_t *core_env_hold(void);
void core_env_release(core_env_t *e);

/* This thread reads e from now on, which it takes over (its reference);
 * core_env_leave releases it and returns the thread to `environ`. */
void core_env_enter(core_env_t *e);
void core_env_leave(void);

/* The variable's value in this thread's view, or NULL; valid while the
 * thread stays in its snapshot (a caller's thread: until it changes the
 * environment). */
const char *core_getenv(const char *name);
/* This thread's view as an execve environment. */
char *const *core_env_vector(void);

#endif
