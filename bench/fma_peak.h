/* The machine's FMA peak, measured: what a benchmark sets its FLOP/s
 * against (a shared machine's speed drifts, so each measures it in the
 * same run as its own figures). */
#ifndef LOOM_BENCH_FMA_PEAK_H
#define LOOM_BENCH_FMA_PEAK_H

/* GFLOP/s of `threads` threads (at most 8) each running `iters` steps of
 * independent FMA chains at once, with the widest vectors the CPU has
 * and LOOM_CPU_ISA allow (1e6 steps: about 2 ms at 1 thread on AVX2). */
double bench_fma_peak(int threads, long iters);

#endif
