/* The system C compiler, run as a child process: its identity (for the
 * module cache's key) and the compile of one source file into a shared
 * object. `cc` is LOOM_CC's value: a program name or path, optionally
 * followed by arguments separated by spaces ("ccache cc"). */
#ifndef LOOM_BACKEND_CPU_COMPILER_H
#define LOOM_BACKEND_CPU_COMPILER_H

#include <stddef.h>

#include "loom/loom.h"

/* The flags every module is compiled with, as one string. */
const char *cpu_cc_flags(void);

/* The compiler's resolved path, its arguments and the first line of its
 * `--version` output, computed once per process per value of cc. Fails
 * with LOOM_ERR_UNSUPPORTED when the program is not found. */
loom_status_t cpu_cc_identity(const char *cc, char *out, size_t cap);

/* Compiles src into the shared object so, both named relative to
 * work_dir, where the compiler runs (so that its messages name the file
 * briefly). Fails with LOOM_ERR_UNSUPPORTED naming the compiler and the
 * first lines of what it printed when it cannot be run or exits
 * non-zero. */
loom_status_t cpu_cc_compile(const char *cc, const char *work_dir,
                             const char *src, const char *so);

#endif
