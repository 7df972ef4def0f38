/* Independent FMA chains, enough of them to hide the FMA latency, on
 * every thread at once. */
#include "fma_peak.h"

#include <immintrin.h>
#include <pthread.h>
#include <time.h>

#include "core/isa.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

__attribute__((target("avx2,fma"))) static double fma_loop_avx2(long iters) {
  __m256 acc[12], x = _mm256_set1_ps(1e-7f), y = _mm256_set1_ps(0.999f);
  for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], y, x);
  float sink = 0;
  for (int i = 0; i < 12; i++) sink += _mm256_cvtss_f32(acc[i]);
  return sink;
}

__attribute__((target("avx512f,fma"))) static double fma_loop_avx512(long iters) {
  __m512 acc[12], x = _mm512_set1_ps(1e-7f), y = _mm512_set1_ps(0.999f);
  for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], y, x);
  float sink = 0;
  for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_ps(acc[i]);
  return sink;
}

typedef struct peak_arg {
  long iters;
  double flops;
} peak_arg_t;

static void *peak_thread(void *arg) {
  peak_arg_t *pa = arg;
  /* The vectors Loom itself runs (LOOM_CPU_ISA may cap them). */
  int wide = core_isa_allows(CORE_ISA_AVX512) && __builtin_cpu_supports("avx512f");
  /* The sink keeps the loop alive; flops are counted, not summed. */
  double r = wide ? fma_loop_avx512(pa->iters) : fma_loop_avx2(pa->iters);
  pa->flops = 12.0 * (wide ? 16 : 8) * 2 * (double)pa->iters + (r < -1e30 ? 1 : 0);
  return NULL;
}

double bench_fma_peak(int threads, long iters) {
  enum { MOST = 8 };
  pthread_t tid[MOST];
  peak_arg_t arg[MOST];
  if (threads > MOST) threads = MOST;
  if (threads < 1) threads = 1;
  for (int i = 0; i < threads; i++) arg[i] = (peak_arg_t){iters, 0};
  double t0 = now();
  int started = 1;
  for (; started < threads; started++)
    if (pthread_create(&tid[started], NULL, peak_thread, &arg[started]) != 0) break;
  peak_thread(&arg[0]);
  for (int i = 1; i < started; i++) pthread_join(tid[i], NULL);
  double sec = now() - t0, total = 0;
  for (int i = 0; i < started; i++) total += arg[i].flops;
  return total / sec * 1e-9;
}
