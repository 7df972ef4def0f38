/* Communicators over MPI, and the engine thread that makes every MPI call
 * after MPI_Init (comm.h says why). */
#include "core/comm.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "core/env.h"
#include "core/log.h"
#include "core/status.h"
#include "core/tensor.h"

#define COMM_MAX 64 /* communicators alive at once */

#ifndef LOOM_HAVE_MPI

loom_comm_t *core_comm_get(int64_t id) {
  (void)id;
  return NULL;
}
static loom_status_t no_mpi(const char *fn) {
  return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: this build of Loom has no MPI (scripts/setup.sh "
                   "installs libopenmpi-dev; configure again to build with it)", fn);
}
int64_t core_comm_id(const loom_comm_t *c) {
  (void)c;
  return 0;
}
loom_status_t core_comm_run(loom_comm_t *c, const core_comm_op_t *op) {
  (void)c;
  return no_mpi(op->what);
}
loom_status_t core_comm_start(loom_comm_t *c, const core_comm_op_t *op) {
  (void)c;
  return no_mpi(op->what);
}
loom_status_t core_comm_finish(loom_comm_t *c, const void *recv, const char *what) {
  (void)c, (void)recv;
  return no_mpi(what);
}
loom_status_t loom_comm_world(loom_comm_t **out) {
  if (out) *out = NULL;
  return no_mpi(__func__);
}
loom_status_t loom_comm_from_mpi(const void *mpi_comm, loom_comm_t **out) {
  (void)mpi_comm;
  if (out) *out = NULL;
  return no_mpi(__func__);
}
void loom_comm_destroy(loom_comm_t *comm) { (void)comm; }
int loom_comm_rank(const loom_comm_t *comm) {
  (void)comm;
  return -1;
}
int loom_comm_size(const loom_comm_t *comm) {
  (void)comm;
  return -1;
}
loom_status_t loom_comm_set_timeout(loom_comm_t *comm, double seconds) {
  (void)comm, (void)seconds;
  return no_mpi(__func__);
}

#else

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Where this rank is on a communicator, for another rank's roll call. */
typedef struct roll_answer {
  uint64_t entered, completed; /* the last collective the engine began, and ended */
  int64_t count;               /* the one entered: its size, dtype and name */
  int32_t dtype;
  char what[48];
} roll_answer_t;

struct loom_comm {
  int64_t id;
  int rank, size;
  MPI_Comm mpi;
  MPI_Comm roll;   /* the roll call's messages; MPI_COMM_NULL: none */
  roll_answer_t at; /* under the engine's lock */
  double timeout_s;
  uint64_t issued; /* collectives run so far, for messages */
  struct pending *pending; /* started, not yet finished (core_comm_start) */
};

/* A collective started and not yet finished, found by its result buffer. */
typedef struct pending {
  struct job *job;
  uint64_t seq;
  int64_t started_ns; /* LOOM_LOG=comm */
  struct pending *next;
} pending_t;

/* A queued call; the engine sets done under the engine's lock. */
typedef struct job {
  enum { JOB_COLLECTIVE, JOB_DUP, JOB_FREE, JOB_STOP } kind;
  loom_comm_t *comm;
  core_comm_op_t op;
  uint64_t seq; /* the collective's number on its communicator */
  MPI_Comm dup_from;
  int err;        /* MPI's error code */
  bool done;
  bool abandoned; /* the caller stopped waiting: the engine frees it */
  struct job *next;
} job_t;

static struct engine {
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  pthread_t thread;
  bool running;
  job_t *head, *tail;
  loom_comm_t *comms[COMM_MAX];
  int alive;            /* communicators */
  bool we_initialized;  /* MPI_Init was Loom's: finalize with the last */
  /* The roll call (MPI_THREAD_MULTIPLE only): a listener thread answers
   * other ranks' questions while the engine is blocked in a collective;
   * roll_lock keeps a roll communicator alive while it is used. */
  bool multiple;
  pthread_t listener;
  atomic_bool listening;
  pthread_mutex_t roll_lock;
} eng = {.lock = PTHREAD_MUTEX_INITIALIZER,
         .work = PTHREAD_COND_INITIALIZER,
         .done = PTHREAD_COND_INITIALIZER,
         .roll_lock = PTHREAD_MUTEX_INITIALIZER};

loom_comm_t *core_comm_get(int64_t id) {
  pthread_mutex_lock(&eng.lock);
  loom_comm_t *c = id >= 1 && id <= COMM_MAX ? eng.comms[id - 1] : NULL;
  pthread_mutex_unlock(&eng.lock);
  return c;
}

int64_t core_comm_id(const loom_comm_t *c) { return c ? c->id : 0; }

/* ---- The engine ------------------------------------------------------------- */

static MPI_Datatype mpi_type(loom_dtype_t dt, bool reduce) {
  switch (dt) {
    case LOOM_F32: return MPI_FLOAT;
    case LOOM_F64: return MPI_DOUBLE;
    case LOOM_I32: return MPI_INT32_T;
    case LOOM_I64: return MPI_INT64_T;
    case LOOM_I8: return MPI_INT8_T;
    default: return reduce ? MPI_DATATYPE_NULL : MPI_BYTE;
  }
}

static int run_collective(loom_comm_t *c, const core_comm_op_t *op) {
  bool reduce = op->kind == COMM_ALL_REDUCE || op->kind == COMM_REDUCE_SCATTER;
  MPI_Datatype t = mpi_type(op->dtype, reduce);
  int count = (int)op->count;
  if (t == MPI_BYTE) count *= (int)loom_dtype_size(op->dtype);
  MPI_Op mop = op->reduce == LOOM_COMM_MAX ? MPI_MAX : MPI_SUM;
  switch (op->kind) {
    case COMM_ALL_REDUCE: /* in place (core_comm_start) */
      return MPI_Allreduce(MPI_IN_PLACE, op->recv, count, t, mop, c->mpi);
    case COMM_BROADCAST: /* in place at the root (core_comm_start) */
      return MPI_Bcast(op->recv, count, t, op->root, c->mpi);
    case COMM_ALL_GATHER:
      return MPI_Allgather(op->send, count, t, op->recv, count, t, c->mpi);
    case COMM_REDUCE_SCATTER:
      return MPI_Reduce_scatter_block(op->send, op->recv, count, t, mop, c->mpi);
  }
  return MPI_ERR_OP;
}

/* A collective, with the engine's place on its communicator kept for
 * the roll call. */
static int run_tracked(job_t *j) {
  loom_comm_t *c = j->comm;
  pthread_mutex_lock(&eng.lock);
  c->at.entered = j->seq;
  c->at.count = j->op.count;
  c->at.dtype = (int32_t)j->op.dtype;
  snprintf(c->at.what, sizeof c->at.what, "%s", j->op.what ? j->op.what : "?");
  pthread_mutex_unlock(&eng.lock);
  int err = run_collective(c, &j->op);
  pthread_mutex_lock(&eng.lock);
  c->at.completed = j->seq;
  pthread_mutex_unlock(&eng.lock);
  return err;
}

/* The new communicator, what the caller reads of it, and its roll
 * call's twin. */
static int dup_comm(job_t *j) {
  loom_comm_t *c = j->comm;
  int err = MPI_Comm_dup(j->dup_from, &c->mpi);
  if (err != MPI_SUCCESS) return err;
  MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  MPI_Comm roll = MPI_COMM_NULL;
  if (eng.multiple && MPI_Comm_dup(c->mpi, &roll) == MPI_SUCCESS)
    MPI_Comm_set_errhandler(roll, MPI_ERRORS_RETURN);
  pthread_mutex_lock(&eng.lock);
  c->roll = roll;
  pthread_mutex_unlock(&eng.lock);
  return MPI_SUCCESS;
}

static int free_comm(job_t *j) {
  loom_comm_t *c = j->comm;
  pthread_mutex_lock(&eng.roll_lock);
  pthread_mutex_lock(&eng.lock);
  MPI_Comm roll = c->roll;
  c->roll = MPI_COMM_NULL;
  pthread_mutex_unlock(&eng.lock);
  if (roll != MPI_COMM_NULL) MPI_Comm_free(&roll);
  pthread_mutex_unlock(&eng.roll_lock);
  return MPI_Comm_free(&c->mpi);
}

static void run_job(job_t *j) {
  switch (j->kind) {
    case JOB_COLLECTIVE: j->err = run_tracked(j); break;
    case JOB_DUP: j->err = dup_comm(j); break;
    case JOB_FREE: j->err = free_comm(j); break;
    case JOB_STOP: j->err = MPI_SUCCESS; break;
  }
}

/* ---- The roll call -----------------------------------------------------------
 * A rank whose collective timed out asks every other rank of the
 * communicator where it is (ROLL_ASK on the communicator's roll twin);
 * each rank's listener answers (ROLL_ANSWER) from the engine's record,
 * even while its engine is blocked in a collective of its own. */

enum { ROLL_ASK = 1, ROLL_ANSWER = 2, ROLL_POLL_NS = 5000000, ROLL_WAIT_S = 3 };

/* Answers every question waiting on c's roll communicator. */
static void answer_asks(MPI_Comm roll, const loom_comm_t *c) {
  int flag = 0;
  MPI_Status st;
  while (MPI_Iprobe(MPI_ANY_SOURCE, ROLL_ASK, roll, &flag, &st) == MPI_SUCCESS && flag) {
    uint64_t asked;
    MPI_Recv(&asked, 1, MPI_UINT64_T, st.MPI_SOURCE, ROLL_ASK, roll, MPI_STATUS_IGNORE);
    pthread_mutex_lock(&eng.lock);
    roll_answer_t a = c->at;
    pthread_mutex_unlock(&eng.lock);
    MPI_Send(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, ROLL_ANSWER, roll);
  }
}

static void *listener_main(void *unused) {
  (void)unused;
  while (eng.listening) {
    pthread_mutex_lock(&eng.roll_lock);
    for (int i = 0; i < COMM_MAX; i++) {
      pthread_mutex_lock(&eng.lock);
      loom_comm_t *c = eng.comms[i];
      MPI_Comm roll = c ? c->roll : MPI_COMM_NULL;
      pthread_mutex_unlock(&eng.lock);
      if (roll != MPI_COMM_NULL) answer_asks(roll, c);
    }
    pthread_mutex_unlock(&eng.roll_lock);
    struct timespec pause = {0, ROLL_POLL_NS};
    nanosleep(&pause, NULL);
  }
  return NULL;
}

/* One rank's answer about collective seq, as a phrase. */
static void describe(int q, const roll_answer_t *a, uint64_t seq, const core_comm_op_t *op,
                     char *out, size_t size) {
  bool same = a->count == op->count && a->dtype == (int32_t)op->dtype &&
              !strcmp(a->what, op->what ? op->what : "?");
  if (a->entered == seq && a->completed < seq && same)
    snprintf(out, size, "rank %d is in it", q);
  else if (a->entered == seq && a->completed < seq)
    snprintf(out, size, "rank %d is in collective #%llu as another: %s, %lld x %s (the ranks "
             "issued different collectives)", q, (unsigned long long)seq, a->what,
             (long long)a->count, loom_dtype_name((loom_dtype_t)a->dtype));
  else if (a->entered == 0)
    snprintf(out, size, "rank %d has not reached it: it has run no collective on this "
             "communicator", q);
  else if (a->entered < seq)
    snprintf(out, size, "rank %d has not reached it: its last is #%llu (%s, %s)", q,
             (unsigned long long)a->entered, a->what,
             a->completed == a->entered ? "done" : "in progress");
  else
    snprintf(out, size, "rank %d is past it, at #%llu (%s): the ranks issued different "
             "collectives", q, (unsigned long long)a->entered, a->what);
}

/* Asks every other rank of c where it is and prints the answers, waiting
 * ROLL_WAIT_S at most (the caller's thread: MPI_THREAD_MULTIPLE). */
static void roll_call(loom_comm_t *c, uint64_t seq, const core_comm_op_t *op) {
  int n = c->size;
  roll_answer_t *ans = core_calloc((size_t)n, sizeof *ans);
  MPI_Request *req = core_calloc((size_t)n * 2, sizeof *req);
  bool *got = core_calloc((size_t)n, sizeof *got);
  if (!ans || !req || !got) return; /* about to end the job: nothing to free */
  for (int q = 0; q < n; q++) {
    got[q] = q == c->rank;
    req[2 * q] = req[2 * q + 1] = MPI_REQUEST_NULL;
    if (got[q]) continue;
    MPI_Isend(&seq, 1, MPI_UINT64_T, q, ROLL_ASK, c->roll, &req[2 * q]);
    MPI_Irecv(&ans[q], (int)sizeof ans[q], MPI_BYTE, q, ROLL_ANSWER, c->roll, &req[2 * q + 1]);
  }
  fprintf(stderr, "loom:   where the other ranks are (asked just now):\n");
  int64_t until = core_now_ns() + (int64_t)ROLL_WAIT_S * 1000000000;
  for (int left = n - 1; left > 0 && core_now_ns() < until;) {
    for (int q = 0; q < n; q++) {
      int done = 0;
      if (!got[q] && MPI_Test(&req[2 * q + 1], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
        got[q] = true, left--;
    }
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  for (int q = 0; q < n; q++) {
    char line[256];
    if (q == c->rank) continue;
    if (got[q]) describe(q, &ans[q], seq, op, line, sizeof line);
    else snprintf(line, sizeof line, "rank %d did not answer within %d s (it exited, was "
                  "stopped, or hangs outside Loom's communication)", q, ROLL_WAIT_S);
    fprintf(stderr, "loom:     %s\n", line);
  }
}

static void *engine_main(void *unused) {
  (void)unused;
  pthread_mutex_lock(&eng.lock);
  for (;;) {
    while (!eng.head) pthread_cond_wait(&eng.work, &eng.lock);
    job_t *j = eng.head;
    pthread_mutex_unlock(&eng.lock);
    run_job(j);
    pthread_mutex_lock(&eng.lock);
    eng.head = j->next;
    if (!eng.head) eng.tail = NULL;
    bool stop = j->kind == JOB_STOP;
    if (j->abandoned) core_free(j);
    else j->done = true;
    pthread_cond_broadcast(&eng.done);
    if (stop) break;
  }
  pthread_mutex_unlock(&eng.lock);
  return NULL;
}


/* Queues a copy of job for the engine; NULL when memory runs out. */
static job_t *enqueue(const job_t *job) {
  job_t *j = core_malloc(sizeof *j);
  if (!j) return NULL;
  *j = *job;
  j->done = j->abandoned = false;
  j->next = NULL;
  pthread_mutex_lock(&eng.lock);
  if (eng.tail) eng.tail->next = j;
  else eng.head = j;
  eng.tail = j;
  pthread_cond_signal(&eng.work);
  pthread_mutex_unlock(&eng.lock);
  return j;
}

/* Waits for a queued job up to the timeout: LOOM_OK when it ran (MPI's
 * error code in *err; j freed), LOOM_ERR_COMM when the time ran out (the
 * engine then frees j when, if ever, MPI returns). */
static loom_status_t await(job_t *j, double timeout_s, int *err) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  double whole = (double)(time_t)timeout_s;
  until.tv_sec += (time_t)whole;
  until.tv_nsec += (long)((timeout_s - whole) * 1e9);
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&eng.lock);
  int rc = 0;
  while (!j->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&eng.done, &eng.lock, &until);
  bool done = j->done;
  if (done) *err = j->err;
  else j->abandoned = true;
  pthread_mutex_unlock(&eng.lock);
  if (!done) return LOOM_ERR_COMM;
  core_free(j);
  return LOOM_OK;
}

static loom_status_t submit(const job_t *job, double timeout_s, int *err) {
  job_t *j = enqueue(job);
  if (!j) return loom_fail(LOOM_ERR_NOMEM, "loom_comm: out of memory");
  return await(j, timeout_s, err);
}

static loom_status_t mpi_fail(const char *what, int err) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(err, text, &len);
  return loom_fail(LOOM_ERR_COMM, "%s: MPI failed: %s", what, text);
}

/* Starts MPI (when the program has not) and the engine. Called with no
 * communicator alive, from the thread that will finalize. */
static loom_status_t engine_start(void) {
  if (eng.running) return LOOM_OK;
  int inited = 0, provided = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "loom_comm: MPI was finalized (when the last "
                     "communicator was destroyed), and a process starts MPI once: keep a "
                     "communicator alive for as long as the program communicates");
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return loom_fail(LOOM_ERR_COMM, "loom_comm_world: MPI_Init_thread failed");
    eng.we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "loom_comm: MPI was initialized with thread level "
                     "%d; Loom needs MPI_THREAD_SERIALIZED (MPI_Init_thread)", provided);
  /* Errors come back as codes, so that a failure is a status (the
   * communicators Loom duplicates get the same handler; a program's own
   * MPI_COMM_WORLD keeps its). */
  if (eng.we_initialized) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  /* Set before the engine starts: its first job makes a roll twin or not. */
  eng.multiple = provided >= MPI_THREAD_MULTIPLE;
  eng.listening = eng.multiple;
  if (eng.listening && pthread_create(&eng.listener, NULL, listener_main, NULL) != 0)
    eng.listening = eng.multiple = false; /* no roll call, as without MPI_THREAD_MULTIPLE */
  if (pthread_create(&eng.thread, NULL, engine_main, NULL) != 0) {
    if (eng.listening) {
      eng.listening = false;
      pthread_join(eng.listener, NULL);
    }
    return loom_fail(LOOM_ERR_NOMEM, "loom_comm: could not start the communication thread");
  }
  eng.running = true;
  return LOOM_OK;
}

static void engine_stop(void) {
  job_t stop = {.kind = JOB_STOP};
  int err;
  if (submit(&stop, 30.0, &err) != LOOM_OK) return; /* stuck in a collective: leave it */
  pthread_join(eng.thread, NULL);
  if (eng.listening) {
    eng.listening = false;
    pthread_join(eng.listener, NULL);
  }
  eng.running = false;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (eng.we_initialized && !finalized) MPI_Finalize();
  eng.we_initialized = false;
}

/* ---- Communicators --------------------------------------------------------- */

/* LOOM_COMM_TIMEOUT in seconds, as loom_comm_set_timeout takes it; 300
 * when unset, or (with a warning) when it is not such a number. */
static double env_timeout(void) {
  const char *env = core_getenv("LOOM_COMM_TIMEOUT");
  if (!env || !*env) return 300.0;
  char *end;
  double v = strtod(env, &end);
  if (*end == '\0' && v > 0 && v <= 1e7) return v;
  core_warn("LOOM_COMM_TIMEOUT=%s is not a number of seconds in (0, 1e7]; 300 s it is", env);
  return 300.0;
}

static loom_status_t comm_create(const char *fn, MPI_Comm from, loom_comm_t **out) {
  LOOM_CHECK_ARG(out);
  *out = NULL;
  loom_comm_t *c = core_calloc(1, sizeof *c);
  if (!c) return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", fn);
  c->mpi = c->roll = MPI_COMM_NULL;
  c->timeout_s = env_timeout();
  pthread_mutex_lock(&eng.lock);
  int slot = -1;
  for (int i = 0; i < COMM_MAX && slot < 0; i++)
    if (!eng.comms[i]) slot = i;
  if (slot >= 0) eng.comms[slot] = c, eng.alive++;
  pthread_mutex_unlock(&eng.lock);
  if (slot < 0) {
    core_free(c);
    return loom_fail(LOOM_ERR_NOMEM, "%s: %d communicators are alive, the most at once", fn,
                     COMM_MAX);
  }
  c->id = slot + 1;
  static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&start_lock);
  loom_status_t s = engine_start();
  pthread_mutex_unlock(&start_lock);
  job_t dup = {.kind = JOB_DUP, .comm = c, .dup_from = from};
  int err = MPI_SUCCESS;
  if (s == LOOM_OK) s = submit(&dup, c->timeout_s, &err);
  if (s == LOOM_OK && err != MPI_SUCCESS) s = mpi_fail(fn, err);
  if (s == LOOM_OK) {
    *out = c;
    return LOOM_OK;
  }
  if (s == LOOM_ERR_COMM) { /* the engine may still write c->mpi: keep c */
    pthread_mutex_lock(&eng.lock);
    eng.comms[slot] = NULL, eng.alive--;
    pthread_mutex_unlock(&eng.lock);
    return loom_fail(s, "%s: MPI_Comm_dup did not complete within %g s", fn, c->timeout_s);
  }
  c->mpi = MPI_COMM_NULL;
  loom_comm_destroy(c);
  return s;
}

loom_status_t loom_comm_world(loom_comm_t **out) {
  return comm_create(__func__, MPI_COMM_WORLD, out);
}

loom_status_t loom_comm_from_mpi(const void *mpi_comm, loom_comm_t **out) {
  LOOM_CHECK_ARG(mpi_comm);
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited)
    return loom_fail(LOOM_ERR_INVALID, "%s: MPI is not initialized (MPI_Init_thread first, "
                     "or loom_comm_world)", __func__);
  return comm_create(__func__, *(const MPI_Comm *)mpi_comm, out);
}

static loom_status_t finish(loom_comm_t *c, pending_t *p);

void loom_comm_destroy(loom_comm_t *c) {
  if (!c) return;
  while (c->pending) {
    pending_t *p = c->pending;
    c->pending = p->next;
    finish(c, p);
  }
  bool freed = c->mpi == MPI_COMM_NULL || !eng.running;
  if (!freed) {
    job_t j = {.kind = JOB_FREE, .comm = c};
    int err;
    freed = submit(&j, c->timeout_s, &err) == LOOM_OK;
  }
  pthread_mutex_lock(&eng.lock);
  if (c->id >= 1 && eng.comms[c->id - 1] == c) eng.comms[c->id - 1] = NULL, eng.alive--;
  bool last = eng.alive == 0;
  pthread_mutex_unlock(&eng.lock);
  if (last && eng.running && freed) engine_stop();
  if (freed) core_free(c);
}

int loom_comm_rank(const loom_comm_t *c) { return c ? c->rank : -1; }
int loom_comm_size(const loom_comm_t *c) { return c ? c->size : -1; }

loom_status_t loom_comm_set_timeout(loom_comm_t *c, double seconds) {
  LOOM_CHECK_ARG(c);
  if (!(seconds > 0) || seconds > 1e7)
    return loom_fail(LOOM_ERR_INVALID, "%s: timeout %g s is not in (0, 1e7]", __func__, seconds);
  c->timeout_s = seconds;
  return LOOM_OK;
}

/* ---- Collectives ------------------------------------------------------------- */

static loom_status_t check_op(const loom_comm_t *c, const core_comm_op_t *op) {
  bool reduce = op->kind == COMM_ALL_REDUCE || op->kind == COMM_REDUCE_SCATTER;
  if (reduce && mpi_type(op->dtype, true) == MPI_DATATYPE_NULL)
    return loom_fail(LOOM_ERR_DTYPE, "%s: cannot reduce %s across ranks (f32, f64, i8, i32, "
                     "i64 reduce)", op->what, loom_dtype_name(op->dtype));
  if (reduce && op->reduce == LOOM_COMM_MEAN && !dtype_is_float(op->dtype))
    return loom_fail(LOOM_ERR_DTYPE, "%s: the mean over ranks needs a float dtype, not %s",
                     op->what, loom_dtype_name(op->dtype));
  int64_t elems = op->count * (mpi_type(op->dtype, reduce) == MPI_BYTE
                                   ? (int64_t)loom_dtype_size(op->dtype) : 1);
  if (op->count < 0 || elems > INT32_MAX)
    return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: %lld elements a rank; one collective moves "
                     "at most %d", op->what, (long long)op->count, INT32_MAX);
  if (op->kind == COMM_BROADCAST && (op->root < 0 || op->root >= c->size))
    return loom_fail(LOOM_ERR_INVALID, "%s: root %d is not a rank of %d", op->what, op->root,
                     c->size);
  return LOOM_OK;
}

static void divide(void *data, loom_dtype_t dt, int64_t n, int size) {
  if (dt == LOOM_F32)
    for (int64_t i = 0; i < n; i++) ((float *)data)[i] /= (float)size;
  else if (dt == LOOM_F64)
    for (int64_t i = 0; i < n; i++) ((double *)data)[i] /= (double)size;
}

static const char *reduce_name(const core_comm_op_t *op) {
  if (op->kind != COMM_ALL_REDUCE && op->kind != COMM_REDUCE_SCATTER) return "";
  return op->reduce == LOOM_COMM_SUM ? ", sum" : op->reduce == LOOM_COMM_MEAN ? ", mean" : ", max";
}

/* MPI cannot cancel a collective, which still writes into the caller's
 * buffers if it ever completes, and the ranks no longer agree on which
 * collective is which: the job ends, as a GPU collective library's
 * watchdog ends it, with the reason from this rank. */
static void timed_out(loom_comm_t *c, const core_comm_op_t *op, uint64_t seq) {
  fprintf(stderr, "loom: %s (collective #%llu of its communicator, %lld x %s) on rank %d of "
          "%d: the other ranks did not complete it within %g s (one failed or exited, or "
          "they ran other collectives; LOOM_COMM_TIMEOUT sets the limit): ending the job\n",
          op->what, (unsigned long long)seq, (long long)op->count, loom_dtype_name(op->dtype),
          c->rank, c->size, c->timeout_s);
  pthread_mutex_lock(&eng.lock);
  bool can_ask = c->roll != MPI_COMM_NULL;
  pthread_mutex_unlock(&eng.lock);
  if (can_ask) roll_call(c, seq, op);
  else fprintf(stderr, "loom:   (no roll call of the other ranks: MPI runs without "
               "MPI_THREAD_MULTIPLE)\n");
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  _exit(3); /* MPI_Abort does not return; if it did, nothing may go on */
}

/* Waits for p (unlinked by the caller) and frees it. */
static loom_status_t finish(loom_comm_t *c, pending_t *p) {
  core_comm_op_t op = p->job->op;
  int err = MPI_SUCCESS;
  int64_t waiting_ns = p->started_ns ? core_now_ns() : 0;
  if (await(p->job, c->timeout_s, &err) != LOOM_OK) timed_out(c, &op, p->seq);
  if (p->started_ns) {
    int64_t now = core_now_ns();
    core_log(LOG_COMM, "rank %d: %s #%llu, %lld bytes (%lld x %s%s): %.3f ms from its start, "
             "%.3f ms of them waiting", c->rank, op.what, (unsigned long long)p->seq,
             (long long)(op.count * (int64_t)loom_dtype_size(op.dtype)), (long long)op.count,
             loom_dtype_name(op.dtype), reduce_name(&op), 1e-6 * (double)(now - p->started_ns),
             1e-6 * (double)(now - waiting_ns));
  }
  core_free(p);
  if (err != MPI_SUCCESS) return mpi_fail(op.what, err);
  bool reduce = op.kind == COMM_ALL_REDUCE || op.kind == COMM_REDUCE_SCATTER;
  if (reduce && op.reduce == LOOM_COMM_MEAN) divide(op.recv, op.dtype, op.count, c->size);
  return LOOM_OK;
}

/* The pending collective whose result is recv, unlinked; NULL if none. */
static pending_t *take_pending(loom_comm_t *c, const void *recv) {
  for (pending_t **at = &c->pending; *at; at = &(*at)->next)
    if ((*at)->job->op.recv == recv) {
      pending_t *p = *at;
      *at = p->next;
      return p;
    }
  return NULL;
}

loom_status_t core_comm_start(loom_comm_t *c, const core_comm_op_t *op) {
  if (!c) return loom_fail(LOOM_ERR_INVALID, "%s: the communicator is null or destroyed",
                           op->what);
  LOOM_TRY(check_op(c, op));
  if (!eng.running)
    return loom_fail(LOOM_ERR_COMM, "%s: MPI has been finalized", op->what);
  /* A run that failed between a start and its finish left it pending. */
  pending_t *old = take_pending(c, op->recv);
  if (old) LOOM_TRY(finish(c, old));
  /* All_reduce and broadcast run in place, their input copied now: the
   * caller's send buffer is free once this returns. */
  job_t job = {.kind = JOB_COLLECTIVE, .comm = c, .op = *op, .seq = c->issued + 1};
  bool copies = op->kind == COMM_ALL_REDUCE || (op->kind == COMM_BROADCAST && c->rank == op->root);
  if (copies && op->send != op->recv) {
    memcpy(op->recv, op->send, (size_t)op->count * loom_dtype_size(op->dtype));
    job.op.send = op->recv;
  }
  pending_t *p = core_calloc(1, sizeof *p);
  if (p) p->job = enqueue(&job);
  if (!p || !p->job) {
    core_free(p);
    return loom_fail(LOOM_ERR_NOMEM, "%s: out of memory", op->what);
  }
  p->seq = ++c->issued;
  p->started_ns = core_log_enabled(LOG_COMM) ? core_now_ns() : 0;
  p->next = c->pending;
  c->pending = p;
  return LOOM_OK;
}

loom_status_t core_comm_finish(loom_comm_t *c, const void *recv, const char *what) {
  pending_t *p = c ? take_pending(c, recv) : NULL;
  if (!p)
    return loom_fail(LOOM_ERR_INVALID, "%s: no collective was started on this buffer (its "
                     "input must come from the start, on the same communicator)", what);
  return finish(c, p);
}

loom_status_t core_comm_run(loom_comm_t *c, const core_comm_op_t *op) {
  LOOM_TRY(core_comm_start(c, op));
  return core_comm_finish(c, op->recv, op->what);
}

#endif /* LOOM_HAVE_MPI */
