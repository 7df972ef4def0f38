/* The widest x86 vector ISA Loom may use: every kernel family that has
 * instances per ISA (GEMM, Winograd's transforms, the direct convolution)
 * and the code generated for the CPU back end stay within it. By default
 * that is whatever the CPU runs; LOOM_CPU_ISA=avx2 or portable caps it
 * lower, as oneDNN's ONEDNN_MAX_CPU_ISA does, so that one machine can
 * test and time what a machine without AVX-512 (or AVX2) runs. */
#ifndef LOOM_CORE_ISA_H
#define LOOM_CORE_ISA_H

typedef enum core_isa { CORE_ISA_PORTABLE, CORE_ISA_AVX2, CORE_ISA_AVX512 } core_isa_t;

/* Whether LOOM_CPU_ISA lets Loom use isa (the CPU itself is not asked:
 * each caller checks that it runs the instructions). Read once per
 * process; a value it does not know warns once and caps nothing. */
int core_isa_allows(core_isa_t isa);
/* The C compiler flag that keeps generated code within the cap
 * ("-mno-avx512f", "-mno-avx"), or NULL when nothing is capped. */
const char *core_isa_cc_flag(void);
/* "avx2" or "portable" when LOOM_CPU_ISA caps the ISA, else NULL. */
const char *core_isa_cap_name(void);

#endif
