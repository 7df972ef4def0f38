#include "core/isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/log.h"

static core_isa_t cap = CORE_ISA_AVX512;
static pthread_once_t cap_once = PTHREAD_ONCE_INIT;

static void read_cap(void) {
  static const struct {
    const char *name;
    core_isa_t isa;
  } names[] = {{"avx512", CORE_ISA_AVX512}, {"avx2", CORE_ISA_AVX2}, {"portable", CORE_ISA_PORTABLE}};
  const char *v = core_getenv("LOOM_CPU_ISA");
  if (!v || !*v) return;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcmp(v, names[i].name)) {
      cap = names[i].isa;
      return;
    }
  core_warn("LOOM_CPU_ISA=%s is not one of avx512, avx2, portable; ignored", v);
}

int core_isa_allows(core_isa_t isa) {
  pthread_once(&cap_once, read_cap);
  return isa <= cap;
}

const char *core_isa_cap_name(void) {
  pthread_once(&cap_once, read_cap);
  return cap == CORE_ISA_AVX2 ? "avx2" : cap == CORE_ISA_PORTABLE ? "portable" : NULL;
}

const char *core_isa_cc_flag(void) {
  pthread_once(&cap_once, read_cap);
  /* -mno-avx also turns off AVX2, FMA and AVX-512, which build on it. */
  return cap == CORE_ISA_AVX2 ? "-mno-avx512f" : cap == CORE_ISA_PORTABLE ? "-mno-avx" : NULL;
}
