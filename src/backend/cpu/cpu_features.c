#include "backend/cpu/cpu_features.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* x86 extensions that -march=native may turn on (kernel spellings). The
 * rest of the flags line (bug mitigations, virtualization details) can
 * change with a kernel or microcode update without changing the code a
 * compiler may emit, so it stays out of the key. */
static const char *const x86_isa[] = {
    "sse",          "sse2",         "pni",          "ssse3",        "sse4_1",
    "sse4_2",       "sse4a",        "popcnt",       "abm",          "movbe",
    "aes",          "pclmulqdq",    "avx",          "f16c",         "fma",
    "fma4",         "avx2",         "bmi1",         "bmi2",         "adx",
    "sha_ni",       "gfni",         "vaes",         "vpclmulqdq",   "avx_vnni",
    "avx512f",      "avx512dq",     "avx512cd",     "avx512bw",     "avx512vl",
    "avx512ifma",   "avx512vbmi",   "avx512_vbmi2", "avx512_vnni",  "avx512_bitalg",
    "avx512_vpopcntdq", "avx512_bf16", "avx512_fp16", "amx_tile",   "amx_bf16",
    "amx_int8",
};
enum { N_X86_ISA = sizeof x86_isa / sizeof x86_isa[0] };

static char features[2048];
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void append(const char *word, size_t len) {
  size_t used = strlen(features);
  if (used + len + 2 > sizeof features) return;
  if (used > 0) features[used++] = ' ';
  memcpy(features + used, word, len);
  features[used + len] = '\0';
}

static bool is_x86_isa(const char *word, size_t len) {
  for (int i = 0; i < N_X86_ISA; i++)
    if (strlen(x86_isa[i]) == len && !memcmp(x86_isa[i], word, len)) return true;
  return false;
}

/* The words of a "name : words" line, all of them or only x86 ISA ones. */
static void take_words(const char *line, bool x86_only) {
  const char *p = strchr(line, ':');
  if (!p) return;
  for (p++; *p;) {
    p += strspn(p, " \t\n");
    size_t len = strcspn(p, " \t\n");
    if (len > 0 && (!x86_only || is_x86_isa(p, len))) append(p, len);
    p += len;
  }
}

static bool from_cpuinfo(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[8192];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "flags", 5) && strchr(" \t:", line[5])) {
      take_words(line, true);
      found = true;
    } else if (!strncmp(line, "Features", 8) && strchr(" \t:", line[8])) {
      take_words(line, false);
      found = true;
    }
  }
  fclose(f);
  return found;
}

static void from_cpuid(void) {
#if defined(__x86_64__) || defined(__i386__)
  /* __builtin_cpu_supports wants a literal, hence the table of calls. */
  const struct {
    const char *name;
    int on;
  } isa[] = {
      {"sse4.2", __builtin_cpu_supports("sse4.2")},
      {"avx", __builtin_cpu_supports("avx")},
      {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},
      {"bmi2", __builtin_cpu_supports("bmi2")},
      {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")},
      {"avx512dq", __builtin_cpu_supports("avx512dq")},
      {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
  };
  /* Marked, so that a key from cpuid never equals one from cpuinfo. */
  append("cpuid:", 6);
  for (size_t i = 0; i < sizeof isa / sizeof isa[0]; i++)
    if (isa[i].on) append(isa[i].name, strlen(isa[i].name));
#endif
}

static void detect(void) {
  if (!from_cpuinfo()) from_cpuid();
  if (!features[0]) append("unknown", 7);
}

const char *cpu_features(void) {
  pthread_once(&features_once, detect);
  return features;
}
