/* The system C compiler, run as a child process: its identity (for the
 * module cache's key) and the compile of one source file into a shared
 * object (or of several into objects and their link). `cc` is LOOM_CC's value: a program name or path, optionally
 * followed by arguments separated by spaces ("ccache cc"). */
#ifndef LOOM_BACKEND_CPU_COMPILER_H
#define LOOM_BACKEND_CPU_COMPILER_H

#include <stddef.h>

#include "loom/loom.h"

/* The flags every module is compiled with, as one string. */
const char *cpu_cc_flags(void);

/* Seconds a compile of source_bytes of C may run before it is killed:
 * LOOM_CC_TIMEOUT (default 120; 0: no limit) per 64 KiB of source, and
 * never less than that. */
double cpu_cc_timeout(size_t source_bytes);

/* The compiler's resolved path, its arguments and the first line of its
 * `--version` output, computed once per process per value of cc; the
 * version line is kept in the cache directory (cc-<hash>.version, named
 * after the program's path and its file's device, inode, size and times)
 * so that later processes do not start the program to ask. Fails
 * with LOOM_ERR_UNSUPPORTED when the program is not found. A probe that
 * outlasts cpu_cc_timeout(0) is killed (with a warning): the identity is
 * then the path and arguments alone. */
loom_status_t cpu_cc_identity(const char *cc, char *out, size_t cap);

/* Compiles src into the shared object so, both named relative to
 * work_dir, where the compiler runs (so that its messages name the file
 * briefly). Fails with LOOM_ERR_UNSUPPORTED naming the compiler and the
 * first lines of what it printed when it cannot be run, exits non-zero,
 * or runs past timeout_s seconds (<= 0: no limit; then it is killed with
 * every process of its process group, which it leads). The compiler's
 * exit ends the wait even if a process it started keeps its output
 * open. */
loom_status_t cpu_cc_compile(const char *cc, const char *work_dir,
                             const char *src, const char *so, double timeout_s);

/* The same for a module in several translation units: each compiled into
 * an object (-c: the flags but -shared), then the objects linked into
 * the shared object (-shared ... -lm), with the same failures, limits and
 * logs. At most CPU_CC_MAX_INPUTS objects. */
#define CPU_CC_MAX_INPUTS 64
loom_status_t cpu_cc_compile_object(const char *cc, const char *work_dir,
                                    const char *src, const char *obj, double timeout_s);
loom_status_t cpu_cc_link(const char *cc, const char *work_dir, const char *const *objs,
                          int n_objs, const char *so, double timeout_s);

/* How many compiler processes a module's build may run at once:
 * LOOM_CC_JOBS (1 to CPU_CC_MAX_INPUTS), else the processors this process
 * may run on (LOOM_NUM_THREADS, when set). */
int cpu_cc_jobs(void);

#endif
