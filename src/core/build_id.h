/* The identity of the code running this process's Loom: the GNU build ID
 * (a hash the linker writes into the object) of the shared object or
 * program that holds Loom's functions. It changes whenever any of
 * Loom's code does, so a record kept on disk by one build (the module
 * cache's index, backend/cpu/module_index.h) is never read as another
 * build's. */
#ifndef LOOM_CORE_BUILD_ID_H
#define LOOM_CORE_BUILD_ID_H

/* The build ID in hex, computed once per process; NULL when the object
 * carries none (a linker run with --build-id=none): callers then keep
 * nothing that depends on it. */
const char *core_build_id(void);

#endif
