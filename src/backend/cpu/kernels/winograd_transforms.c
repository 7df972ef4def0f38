/* Winograd's transforms 8 wide (winograd_transforms.inc), built for AVX2
 * and for the baseline ISA (two SSE halves), and the choice of the
 * instance a layer runs: the widest the CPU has, or one a test forces. */
#include <stdatomic.h>
#include <string.h>

#include "core/isa.h"

#define VL 8
#define WT_TARGET
#include "backend/cpu/kernels/winograd_transforms.inc"

#define AVX2 __attribute__((target("avx2,fma")))
WINO_INSTANCE(2, _avx2, AVX2)
WINO_INSTANCE(4, _avx2, AVX2)
WINO_INSTANCE(2, _base, )
WINO_INSTANCE(4, _base, )

static int avx512_supported(void) {
  return core_isa_allows(CORE_ISA_AVX512) && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("fma");
}
static int avx2_supported(void) {
  return core_isa_allows(CORE_ISA_AVX2) && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");
}
static int base_supported(void) { return 1; }

typedef struct wino_isa {
  const char *name;
  int (*supported)(void);
  const wino_transforms_t *f2, *f4;
} wino_isa_t;

/* Widest first. */
static const wino_isa_t isas[] = {
    {"avx512", avx512_supported, &wino_f2_avx512, &wino_f4_avx512},
    {"avx2", avx2_supported, &wino_f2_avx2, &wino_f4_avx2},
    {"base", base_supported, &wino_f2_base, &wino_f4_base},
};
enum { N_ISAS = sizeof isas / sizeof *isas };

static _Atomic int forced = -1; /* an index into isas, or -1 */

static const wino_isa_t *current(void) {
  int f = atomic_load_explicit(&forced, memory_order_relaxed);
  if (f >= 0) return &isas[f];
  for (int i = 0; i < N_ISAS; i++)
    if (isas[i].supported()) return &isas[i];
  return &isas[N_ISAS - 1];
}

const wino_transforms_t *wino_transforms(int m) {
  const wino_isa_t *isa = current();
  return m == 4 ? isa->f4 : isa->f2;
}

const char *kern_winograd_isa(void) { return current()->name; }

int kern_winograd_force_isa(const char *name) {
  if (!name) {
    atomic_store(&forced, -1);
    return 1;
  }
  for (int i = 0; i < N_ISAS; i++)
    if (strcmp(isas[i].name, name) == 0 && isas[i].supported()) {
      atomic_store(&forced, i);
      return 1;
    }
  return 0;
}
