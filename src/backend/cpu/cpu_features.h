/* The CPU's instruction-set features, as one string for the module
 * cache's key: code compiled with -march=native on one CPU may use
 * instructions another lacks, so a cache shared between machines must
 * tell them apart. */
#ifndef LOOM_BACKEND_CPU_CPU_FEATURES_H
#define LOOM_BACKEND_CPU_CPU_FEATURES_H

/* Space-separated feature names, computed once per process: the ISA
 * extensions from /proc/cpuinfo's "flags" line (x86) or its whole
 * "Features" line (other architectures), else from cpuid. Never null. */
const char *cpu_features(void);

#endif
