/* Helpers shared by the benchmark programs: a clock, medians, inputs with
 * deterministic values, and failing loudly. */
#ifndef LOOM_BENCH_UTIL_H
#define LOOM_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/loom.h"

/* Leaves the program with the call and Loom's message when it fails. */
#define BENCH_TRY(call) bench_check((call), #call)
void bench_check(loom_status_t s, const char *what);

/* Monotonic time in nanoseconds. */
double bench_now_ns(void);
/* The median of n samples (reorders them); NaN if one is not finite. */
double bench_median(double *samples, int n);

/* Waits SETTLE_MS before a side's block of timed runs, so that threads
 * the side before left spinning (ONNX Runtime's pool and OpenMP spin
 * after their work) have stopped: on two cores, one spinning thread
 * takes a core from the side timed next (ResNet-18 inference at 2
 * threads: Loom 12.4-12.6 ms right after ONNX Runtime's block, 12.0
 * after 100 ms idle; ONNX Runtime 9.9-10.0 either way). */
void bench_settle(void);

/* Locks the process's memory, present and future, in RAM (mlockall):
 * here, the pages of a process left idle for half a second while the
 * other side's block ran were taken away and faulted back in its next
 * block (ResNet-18's training step at 1 thread: 80-126 ms against 57-58
 * without the idle gaps, 87K more page faults a run, PyTorch's 90-134
 * ms likewise); locked, both sides run as they do uninterrupted (Loom
 * 58.2-59.7 ms, PyTorch 89.6-91.8, four runs). The PyTorch peers lock theirs too
 * (peers/models.py). Failing that, a note on stderr. */
void bench_lock_memory(const char *bench);

/* A new empty directory $TMPDIR/loom-bench-NAME-XXXXXX (/tmp without
 * TMPDIR), its path in dir; false, with a note on stderr, on failure. */
bool bench_temp_dir(const char *name, char *dir, size_t size);
/* Removes dir and everything in it (a note on stderr on failure). */
void bench_remove_dir(const char *dir);

/* Milliseconds per call of fn(arg): warm-up calls first, then the median
 * of at least min_reps timed calls, repeated until min_ms have passed. */
double bench_time_ms(void (*fn)(void *), void *arg, int warmup, int min_reps,
                     double min_ms);

/* One JSON object on one line: begin, fields, end (which prints it). */
typedef struct bench_json {
  char text[1024];
  size_t len;
} bench_json_t;
void bench_json_begin(bench_json_t *j, const char *bench);
/* The environment a PyTorch peer runs in ("env ... "): at its best
 * (../shared/PEERS.md: OpenBLAS's coretype variables unset, glibc's
 * allocator kept from returning memory), and within LOOM_CPU_ISA's cap
 * when one is set (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
 * OPENBLAS_CORETYPE), so that both sides run the same vectors. */
const char *bench_torch_env(void);
void bench_json_str(bench_json_t *j, const char *key, const char *value);
/* A number; NaN or an infinity prints null (a measurement that failed). */
void bench_json_num(bench_json_t *j, const char *key, double value);
void bench_json_end(bench_json_t *j);

/* A new f32 tensor of the given shape, values in [-1, 1) from a hash. */
loom_tensor_t *bench_input(int rank, const int64_t *shape);

/* The benchmark models at the sizes of issue 3 (and of the peers). */
typedef struct bench_model {
  const char *name; /* "mlp", "lenet", "transformer", "resnet18", "small_cnn" */
  int rank;         /* of the input x */
  int64_t shape[4];
} bench_model_t;
extern const bench_model_t bench_models[];
extern const int bench_n_models;
/* A new graph holding model m with its logits as the output. */
loom_graph_t *bench_build_model(const bench_model_t *m);

/* LOOM_BENCH_PEERS=0: run Loom alone; LOOM_BENCH_THREADS=N: only N. */
int bench_peers_wanted(void);
int bench_threads_wanted(int threads);
/* Whether `name` is wanted by a command line `prog BENCH_DIR [NAME...]`:
 * named there, or no names given. */
int bench_name_wanted(const char *name, int argc, char **argv);
/* The arguments of a suite run as `prog BENCH_DIR [NAME...]`: BENCH_DIR
 * (default "bench") must hold peers/ and each NAME be one of names[n];
 * else prints what is wrong and the usage, and exits with status 2.
 * Returns BENCH_DIR. */
const char *bench_suite_args(int argc, char **argv, const char *const *names, int n);

/* A peer process spoken to by lines: requests on its stdin, one reply
 * line each on its stdout (its stderr passes through). A shared machine's
 * speed drifts within seconds, so a bench alternates blocks of its own
 * steps with blocks of the peer's instead of timing one after the other. */
typedef struct bench_peer {
  int pid;
  void *to, *from; /* FILE * */
} bench_peer_t;
/* Starts `sh -c cmd`; 0 on success. */
int bench_peer_open(const char *cmd, bench_peer_t *p);
/* Sends `request` (NULL: nothing) and reads the next reply line into
 * reply (newline dropped); 0 on success, -1 when the peer has gone. */
int bench_peer_line(bench_peer_t *p, const char *request, char *reply, int cap);
/* Closes its stdin and waits: the peer's exit status (-1: abnormal). */
int bench_peer_close(bench_peer_t *p);
/* The number the peer answers `request` with (its median ms of a block);
 * NaN when *open is 0, or when it stops answering: then a note on stderr
 * naming `bench`, the peer closed and *open 0. */
double bench_peer_ask(bench_peer_t *p, int *open, const char *request, const char *bench);
/* snprintf that leaves an empty command rather than a truncated one. */
__attribute__((format(printf, 3, 4))) void bench_format_cmd(char *buf, size_t size,
                                                            const char *fmt, ...);

/* Compile options with fusion on or off and the given thread count. */
loom_compile_options_t bench_options(int fusion, int threads);

#endif
