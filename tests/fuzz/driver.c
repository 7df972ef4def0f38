/* A main() for the fuzz harnesses (tests/fuzz/fuzz_*.c) where libFuzzer is
 * not at hand (gcc, or a plain build): it runs every seed of the corpus,
 * then random mutations of them, for a time budget or a count of runs.
 * No coverage guides it; it is a smoke test on every build, and clang's
 * -fsanitize=fuzzer links the same harness for real fuzzing.
 *
 *   fuzz_x [-t SECONDS] [-n RUNS] [-s SEED] [-m MAX_LEN] [-o CRASH_DIR]
 *          [CORPUS_DIR_OR_FILE...]
 *
 * Defaults: 10 s, no run limit, a seed from the clock (printed, so that a
 * run can be repeated), inputs up to 64 KiB, crash files in ".". A harness
 * reports a failure by crashing (abort, or a sanitizer's report): the
 * input is then written to CRASH_DIR/crash-SEED-RUN, its path printed, and
 * the process dies of the same signal. The harness is the libFuzzer entry
 * point, LLVMFuzzerTestOneInput, and optionally LLVMFuzzerInitialize. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
/* A sanitizer's hook, called before it ends the process on a report. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

typedef struct input {
  uint8_t *data;
  size_t size;
} input_t;

typedef struct options {
  double seconds;
  long long runs; /* 0: no limit */
  unsigned long long seed;
  size_t max_len;
  const char *crash_dir;
} options_t;

/* ---- random numbers (splitmix64) ---- */

static unsigned long long rng_state;

static unsigned long long rng(void) {
  unsigned long long z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n); 0 when n is 0. */
static size_t below(size_t n) { return n ? (size_t)(rng() % n) : 0; }

/* ---- the input being run, for the crash handler ---- */

static const uint8_t *current;
static size_t current_size;
static char crash_path[4096];

/* Writes the current input to crash_path: async-signal-safe calls only. */
static void save_current(void) {
  if (!current) return;
  int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  for (size_t done = 0; done < current_size;) {
    ssize_t n = write(fd, current + done, current_size - done);
    if (n <= 0) break;
    done += (size_t)n;
  }
  close(fd);
  static const char prefix[] = "fuzz: the failing input is in ";
  (void)!write(2, prefix, sizeof prefix - 1);
  (void)!write(2, crash_path, strlen(crash_path));
  (void)!write(2, "\n", 1);
  current = NULL;
}

static void on_signal(int sig) {
  save_current();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void catch_crashes(void) {
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_signal);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_current);
}

static void run_one(const uint8_t *data, size_t size, const options_t *o, long long run) {
  snprintf(crash_path, sizeof crash_path, "%s/crash-%llu-%lld", o->crash_dir, o->seed, run);
  current = data;
  current_size = size;
  LLVMFuzzerTestOneInput(data, size);
  current = NULL;
}

/* ---- the corpus ---- */

typedef struct corpus {
  input_t *items;
  size_t n, cap;
} corpus_t;

static void corpus_push(corpus_t *c, uint8_t *data, size_t size) {
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 16;
    c->items = realloc(c->items, c->cap * sizeof *c->items);
  }
  c->items[c->n++] = (input_t){data, size};
}

static void corpus_add_file(corpus_t *c, const char *path, size_t max_len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz: cannot read %s: %s\n", path, strerror(errno));
    exit(2);
  }
  uint8_t *data = malloc(max_len);
  size_t size = fread(data, 1, max_len, f);
  fclose(f);
  corpus_push(c, data, size);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory's regular files, in name order (so that runs repeat). */
static void corpus_add_dir(corpus_t *c, const char *dir, size_t max_len) {
  DIR *d = opendir(dir);
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, (n + 1) * sizeof *names);
    names[n++] = strdup(e->d_name);
  }
  if (d) closedir(d);
  qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) corpus_add_file(c, path, max_len);
    free(names[i]);
  }
  free(names);
}

static void corpus_add(corpus_t *c, const char *path, size_t max_len) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "fuzz: no corpus at %s\n", path);
    exit(2);
  }
  if (S_ISDIR(st.st_mode)) corpus_add_dir(c, path, max_len);
  else corpus_add_file(c, path, max_len);
}

/* ---- mutations ---- */

/* Bytes that parsers treat specially: ends of ranges, separators. */
static const uint8_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, '\n', ':', '-', '.', '0', '9',
                                      'a', 'f', 'g', 'x', '"', '{', '}', ',', ' '};

/* One random change to buf (size *size, capacity cap). */
static void mutate_once(uint8_t *buf, size_t *size, size_t cap, const corpus_t *c) {
  size_t n = *size, at = below(n + 1);
  switch (below(8)) {
  case 0: /* flip a bit */
    if (n) buf[below(n)] ^= (uint8_t)(1u << below(8));
    break;
  case 1: /* a random byte */
    if (n) buf[below(n)] = (uint8_t)rng();
    break;
  case 2: /* an interesting byte */
    if (n) buf[below(n)] = interesting[below(sizeof interesting)];
    break;
  case 3: { /* insert random bytes */
    size_t k = 1 + below(8);
    if (n + k > cap) break;
    memmove(buf + at + k, buf + at, n - at);
    for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)rng();
    *size = n + k;
    break;
  }
  case 4: { /* delete a range */
    size_t k = 1 + below(n - at < 16 ? n - at : 16);
    if (at >= n) break;
    memmove(buf + at, buf + at + k, n - at - k);
    *size = n - k;
    break;
  }
  case 5: /* truncate */
    *size = at;
    break;
  case 6: { /* overwrite with a piece of another input */
    const input_t *o = &c->items[below(c->n)];
    if (!o->size || !n) break;
    size_t from = below(o->size), k = 1 + below(o->size - from), to = below(n);
    if (k > n - to) k = n - to;
    memcpy(buf + to, o->data + from, k);
    break;
  }
  default: { /* splice: this input's head, another's tail */
    const input_t *o = &c->items[below(c->n)];
    size_t from = below(o->size + 1), k = o->size - from;
    if (at + k > cap) k = cap - at;
    memcpy(buf + at, o->data + from, k);
    *size = at + k;
    break;
  }
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [-t SECONDS] [-n RUNS] [-s SEED] [-m MAX_LEN] [-o CRASH_DIR] "
          "[CORPUS...]\n",
          argv0);
  exit(2);
}

static options_t parse(int argc, char **argv, int *first_corpus) {
  options_t o = {.seconds = 10,
                 .seed = (unsigned long long)time(NULL) ^ (unsigned long long)getpid(),
                 .max_len = 65536,
                 .crash_dir = "."};
  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] && !argv[i][2]; i += 2) {
    if (i + 1 >= argc) usage(argv[0]);
    const char *v = argv[i + 1];
    switch (argv[i][1]) {
    case 't': o.seconds = atof(v); break;
    case 'n': o.runs = atoll(v); break;
    case 's': o.seed = strtoull(v, NULL, 0); break;
    case 'm': o.max_len = (size_t)atoll(v); break;
    case 'o': o.crash_dir = v; break;
    default: usage(argv[0]);
    }
  }
  if (o.max_len == 0) usage(argv[0]);
  *first_corpus = i;
  return o;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int first;
  options_t o = parse(argc, argv, &first);
  corpus_t c = {0};
  for (int i = first; i < argc; i++) corpus_add(&c, argv[i], o.max_len);
  /* An empty input always, so that mutations have something to grow. */
  corpus_push(&c, malloc(1), 0);
  rng_state = o.seed;
  catch_crashes();
  double start = now_s();
  long long run = 0;
  for (size_t i = 0; i < c.n; i++) run_one(c.items[i].data, c.items[i].size, &o, run++);
  uint8_t *buf = malloc(o.max_len);
  while ((o.runs == 0 || run < o.runs) && now_s() - start < o.seconds) {
    const input_t *base = &c.items[below(c.n)];
    size_t size = base->size;
    memcpy(buf, base->data, size);
    for (size_t k = 1 + below(4); k > 0; k--) mutate_once(buf, &size, o.max_len, &c);
    run_one(buf, size, &o, run++);
  }
  printf("fuzz: %lld runs (%zu seeds) in %.1f s with seed %llu, no failure\n", run, c.n,
         now_s() - start, o.seed);
  for (size_t i = 0; i < c.n; i++) free(c.items[i].data);
  free(c.items);
  free(buf);
  return 0;
}
