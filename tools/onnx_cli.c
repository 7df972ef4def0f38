/* `loom run`, `loom bench` and `loom explain` on an ONNX model: load it
 * (loom_onnx_load), bind inputs (.npy files, or random values of the
 * declared shapes, with --dim NAME=SIZE for symbolic dims), compile it
 * once and run it. A sequence input's length comes with --seq-len
 * NAME=K (its elements are the inputs NAME.0 ..), an optional input is
 * none with --none NAME. */
#include "onnx_cli.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "loom/loom.h"

#define MAX_ARGS 64

typedef struct args {
  const char *model, *output_dir;
  const char *input_names[MAX_ARGS], *input_files[MAX_ARGS];
  const char *dim_names[MAX_ARGS];
  int64_t dim_values[MAX_ARGS];
  const char *seq_names[MAX_ARGS], *none_names[MAX_ARGS];
  int seq_lengths[MAX_ARGS];
  int n_inputs, n_dims, n_seqs, n_nones, threads, runs;
  char names[8192]; /* the names cut from NAME=VALUE arguments */
  size_t used;
} args_t;

/* The first len characters of v, kept in a's buffer; NULL when full. */
static const char *keep(args_t *a, const char *v, size_t len) {
  if (a->used + len + 1 > sizeof a->names) return NULL;
  char *name = a->names + a->used;
  memcpy(name, v, len);
  name[len] = 0;
  a->used += len + 1;
  return name;
}

static int usage(const char *cmd) {
  fprintf(stderr,
          "usage: loom %s MODEL.onnx [--input NAME=FILE.npy ...] [--dim NAME=SIZE ...]\n"
          "       [--seq-len NAME=K ...] [--none NAME ...] [--threads N]%s\n",
          cmd, !strcmp(cmd, "run") ? " [--output-dir DIR]" : !strcmp(cmd, "bench") ? " [--runs N]" : "");
  return 2;
}

/* text as a whole decimal number in [lo, hi]: false when it is not one
 * (letters after it, out of range, too large to hold). */
static bool count_in(const char *text, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end || errno || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static int parse(int argc, char **argv, const char *cmd, args_t *a) {
  memset(a, 0, sizeof *a);
  a->output_dir = ".";
  a->runs = 100;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(s, "--input") && v) {
      const char *eq = strchr(v, '=');
      if (!eq || a->n_inputs == MAX_ARGS) return usage(cmd);
      if (!(a->input_names[a->n_inputs] = keep(a, v, (size_t)(eq - v)))) return usage(cmd);
      a->input_files[a->n_inputs++] = eq + 1;
      i++;
    } else if (!strcmp(s, "--dim") && v) {
      const char *eq = strchr(v, '=');
      if (!eq || a->n_dims == MAX_ARGS) return usage(cmd);
      if (!(a->dim_names[a->n_dims] = keep(a, v, (size_t)(eq - v)))) return usage(cmd);
      long long size;
      if (!count_in(eq + 1, 0, INT64_MAX, &size)) {
        fprintf(stderr, "loom %s: --dim %s: the size must be a whole number >= 0\n", cmd, v);
        return 2;
      }
      a->dim_values[a->n_dims] = size;
      a->n_dims++;
      i++;
    } else if (!strcmp(s, "--seq-len") && v) {
      const char *eq = strchr(v, '=');
      if (!eq || a->n_seqs == MAX_ARGS) return usage(cmd);
      if (!(a->seq_names[a->n_seqs] = keep(a, v, (size_t)(eq - v)))) return usage(cmd);
      long long k;
      if (!count_in(eq + 1, 0, 4096, &k)) {
        fprintf(stderr, "loom %s: --seq-len %s: the length must be a number 0 to 4096\n", cmd, v);
        return 2;
      }
      a->seq_lengths[a->n_seqs++] = (int)k;
      i++;
    } else if (!strcmp(s, "--none") && v) {
      if (a->n_nones == MAX_ARGS) return usage(cmd);
      a->none_names[a->n_nones++] = v;
      i++;
    } else if (!strcmp(s, "--output-dir") && v && !strcmp(cmd, "run")) {
      a->output_dir = v;
      i++;
    } else if ((!strcmp(s, "--threads") || (!strcmp(s, "--runs") && !strcmp(cmd, "bench"))) &&
               v) {
      long long n;
      if (!count_in(v, 1, s[2] == 't' ? 1024 : INT_MAX, &n)) {
        fprintf(stderr, "loom %s: %s %s: a whole number from 1 to %d\n", cmd, s, v,
                s[2] == 't' ? 1024 : INT_MAX);
        return 2;
      }
      *(s[2] == 't' ? &a->threads : &a->runs) = (int)n;
      i++;
    } else if (s[0] != '-' && !a->model) {
      a->model = s;
    } else {
      return usage(cmd);
    }
  }
  return a->model ? 0 : usage(cmd);
}

static int fail(const char *cmd, const char *what) {
  fprintf(stderr, "loom %s: %s%s%s\n", cmd, what, *loom_last_error() ? ": " : "", loom_last_error());
  return 1;
}

/* Uniform [-1, 1) floats, 0..9 integers, alternating bools: a fixed seed,
 * so that runs compare. */
static void fill_random(loom_tensor_t *t) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  int64_t n = loom_tensor_numel(t);
  void *d = loom_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) / 9007199254740992.0;
    switch (loom_tensor_dtype(t)) {
      case LOOM_F32: ((float *)d)[i] = (float)(2 * u - 1); break;
      case LOOM_F64: ((double *)d)[i] = 2 * u - 1; break;
      case LOOM_I64: ((int64_t *)d)[i] = (int64_t)(u * 10); break;
      case LOOM_I32: ((int32_t *)d)[i] = (int32_t)(u * 10); break;
      case LOOM_I8: ((int8_t *)d)[i] = (int8_t)(u * 10); break;
      case LOOM_BOOL: ((uint8_t *)d)[i] = (uint8_t)(i & 1); break;
      default: break; /* f16, bf16: zeros */
    }
  }
}

/* The size of symbolic dim d from --dim, or -1 naming it. */
static int64_t dim_size(const loom_graph_t *g, loom_dim_t d, const args_t *a, char *name,
                        size_t size) {
  if (d >= 0) return d;
  loom_dim_format(g, d, name, size);
  for (int k = 0; k < a->n_dims; k++)
    if (!strcmp(a->dim_names[k], name)) return a->dim_values[k];
  return -1;
}

typedef struct session {
  loom_graph_t *g;
  loom_executable_t *e;
  loom_tensor_t *in[MAX_ARGS], *out[MAX_ARGS];
  int n_in, n_out;
  double load_ms, compile_ms, first_ms; /* first_ms: the first run's */
  /* Why the model runs in the interpreter ("" when compiled): a graph
   * whose output sizes depend on its data (NonZero, Unique, Compress...)
   * does not compile, and runs all the same. */
  char interpreted[512];
  /* Loaded with its symbolic dims fixed to the sizes given: --dim named
   * them then, and the graph has them no more. */
  int dims_fixed;
} session_t;

static void session_free(session_t *s) {
  for (int i = 0; i < MAX_ARGS; i++) {
    loom_tensor_destroy(s->in[i]);
    loom_tensor_destroy(s->out[i]);
  }
  loom_executable_destroy(s->e);
  loom_graph_destroy(s->g);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Input i's declared dtype and dims. */
typedef struct input_type {
  loom_dtype_t dtype;
  int rank;
  loom_dim_t dims[LOOM_MAX_RANK];
} input_type_t;

static int input_type(const char *cmd, const session_t *s, int i, input_type_t *t) {
  loom_value_t v;
  if (loom_graph_input_value(s->g, i, &v) != LOOM_OK ||
      loom_value_type(s->g, v, &t->dtype, &t->rank, t->dims) != LOOM_OK)
    return fail(cmd, "input");
  return 0;
}

/* Whether name appears among the first n of names. */
static int seen(const char *const *names, int n, const char *name) {
  for (int j = 0; j < n; j++)
    if (!strcmp(names[j], name)) return 1;
  return 0;
}

/* Every --input names one input of the model, once. */
static int check_input_names(const char *cmd, const session_t *s, const args_t *a) {
  for (int k = 0; k < a->n_inputs; k++) {
    int found = 0;
    for (int i = 0; i < s->n_in; i++) found |= !strcmp(loom_graph_input_name(s->g, i), a->input_names[k]);
    if (seen(a->input_names, k, a->input_names[k])) {
      fprintf(stderr, "loom %s: --input %s is given twice\n", cmd, a->input_names[k]);
      return 1;
    }
    if (!found) {
      fprintf(stderr, "loom %s: --input %s: the model has no input of that name\n", cmd,
              a->input_names[k]);
      return 1;
    }
  }
  return 0;
}

/* Whether name is a symbolic dim of g's inputs. */
static int is_input_symbol(const loom_graph_t *g, const char *name) {
  for (int i = 0; i < loom_graph_num_inputs(g); i++) {
    loom_value_t v;
    loom_dtype_t dt;
    int rank;
    loom_dim_t dims[LOOM_MAX_RANK];
    if (loom_graph_input_value(g, i, &v) != LOOM_OK ||
        loom_value_type(g, v, &dt, &rank, dims) != LOOM_OK)
      continue;
    for (int d = 0; d < rank; d++) {
      char sym[128];
      if (dims[d] >= 0) continue;
      loom_dim_format(g, dims[d], sym, sizeof sym);
      if (!strcmp(sym, name)) return 1;
    }
  }
  return 0;
}

/* Every --dim names a symbolic dim of the model's inputs, once. */
static int check_dim_names(const char *cmd, const session_t *s, const args_t *a) {
  for (int k = 0; k < a->n_dims; k++) {
    if (seen(a->dim_names, k, a->dim_names[k])) {
      fprintf(stderr, "loom %s: --dim %s is given twice\n", cmd, a->dim_names[k]);
      return 1;
    }
    if (!s->dims_fixed && !is_input_symbol(s->g, a->dim_names[k])) {
      fprintf(stderr, "loom %s: --dim %s: no input of the model has a symbolic dim of that "
              "name\n", cmd, a->dim_names[k]);
      return 1;
    }
  }
  return 0;
}

/* An input file of another dtype or rank than the model's input, or
 * whose size disagrees with a --dim given for its dim. */
static int check_input(const char *cmd, const session_t *s, const args_t *a, int i) {
  input_type_t t;
  if (input_type(cmd, s, i, &t)) return 1;
  const char *name = loom_graph_input_name(s->g, i);
  if (loom_tensor_dtype(s->in[i]) != t.dtype || loom_tensor_rank(s->in[i]) != t.rank) {
    fprintf(stderr, "loom %s: input '%s' is %s of rank %d, but the model takes %s of rank %d\n",
            cmd, name, loom_dtype_name(loom_tensor_dtype(s->in[i])), loom_tensor_rank(s->in[i]),
            loom_dtype_name(t.dtype), t.rank);
    return 1;
  }
  for (int d = 0; d < t.rank; d++) {
    char sym[128];
    int64_t want = dim_size(s->g, t.dims[d], a, sym, sizeof sym);
    if (t.dims[d] < 0 && want >= 0 && want != loom_tensor_dim(s->in[i], d)) {
      fprintf(stderr, "loom %s: input '%s' dim %d is %lld, but --dim %s=%lld\n", cmd, name, d,
              (long long)loom_tensor_dim(s->in[i], d), sym, (long long)want);
      return 1;
    }
  }
  return 0;
}

static int bind_inputs(const char *cmd, session_t *s, const args_t *a) {
  s->n_in = loom_graph_num_inputs(s->g);
  if (s->n_in > MAX_ARGS) return fail(cmd, "too many inputs");
  if (check_input_names(cmd, s, a) || check_dim_names(cmd, s, a)) return 1;
  for (int i = 0; i < s->n_in; i++) {
    const char *name = loom_graph_input_name(s->g, i);
    for (int k = 0; k < a->n_inputs; k++) {
      if (strcmp(a->input_names[k], name)) continue;
      if (loom_tensor_load_npy(a->input_files[k], &s->in[i]) != LOOM_OK) return fail(cmd, "--input");
    }
    if (s->in[i] && check_input(cmd, s, a, i)) return 1;
    if (s->in[i]) continue;
    /* Random values stand for all the inputs or none: a random index
     * beside real data fails far from its cause. */
    if (a->n_inputs > 0 && !strcmp(cmd, "run")) {
      fprintf(stderr, "loom run: input '%s' is not given (--input %s=FILE.npy); random values "
              "are made only when no input is given\n", name, name);
      return 1;
    }
    input_type_t t;
    int64_t shape[LOOM_MAX_RANK];
    if (input_type(cmd, s, i, &t)) return 1;
    for (int d = 0; d < t.rank; d++) {
      char sym[128];
      shape[d] = dim_size(s->g, t.dims[d], a, sym, sizeof sym);
      if (shape[d] < 0) {
        fprintf(stderr, "loom %s: input '%s' has the symbolic dim '%s': give its size with "
                "--dim %s=SIZE, or the input with --input %s=FILE.npy\n", cmd, name, sym, sym, name);
        return 1;
      }
    }
    if (loom_tensor_create(t.dtype, t.rank, shape, &s->in[i]) != LOOM_OK) return fail(cmd, "input");
    fill_random(s->in[i]);
  }
  return 0;
}

/* The load options: sequence lengths, their elements' shapes from the
 * --input files given for them, optionals that are none. */
typedef struct load_opts {
  loom_onnx_options_t o;
  const loom_tensor_t *nulls[MAX_ARGS];
  const char *elem_names[MAX_ARGS];
  int elem_ranks[MAX_ARGS];
  int64_t shapes[MAX_ARGS][LOOM_MAX_RANK];
  const int64_t *elem_dims[MAX_ARGS];
  /* The shapes of the tensor inputs given as files, for a load with
   * fixed sizes (session_open) */
  int n_given;
  const char *given_names[MAX_ARGS];
  int given_ranks[MAX_ARGS];
  int64_t given_shapes[MAX_ARGS][LOOM_MAX_RANK];
  const int64_t *given_dims[MAX_ARGS];
} load_opts_t;

/* Whether input name is an element "SEQ.i" of a --seq-len sequence. */
static int is_element(const args_t *a, const char *name) {
  const char *dot = strrchr(name, '.');
  for (int k = 0; dot && k < a->n_seqs; k++)
    if (strlen(a->seq_names[k]) == (size_t)(dot - name) &&
        !strncmp(a->seq_names[k], name, (size_t)(dot - name)))
      return 1;
  return 0;
}

static int load_options(const char *cmd, const args_t *a, load_opts_t *l) {
  memset(l, 0, sizeof *l);
  loom_onnx_options_init(&l->o);
  l->o.n_fixed = a->n_nones;
  l->o.fixed_names = a->none_names;
  l->o.fixed_values = l->nulls;
  l->o.n_seqs = a->n_seqs;
  l->o.seq_names = a->seq_names;
  l->o.seq_lengths = a->seq_lengths;
  for (int k = 0; k < a->n_inputs; k++) {
    loom_tensor_t *t = NULL;
    if (loom_tensor_load_npy(a->input_files[k], &t) != LOOM_OK) return fail(cmd, "--input");
    int element = is_element(a, a->input_names[k]);
    int e = element ? l->o.n_elem_shapes++ : l->n_given++;
    const char **names = element ? l->elem_names : l->given_names;
    int *ranks = element ? l->elem_ranks : l->given_ranks;
    int64_t *shape = element ? l->shapes[e] : l->given_shapes[e];
    names[e] = a->input_names[k];
    ranks[e] = loom_tensor_rank(t);
    for (int d = 0; d < ranks[e]; d++) shape[d] = loom_tensor_dim(t, d);
    if (element) l->elem_dims[e] = shape;
    else l->given_dims[e] = shape;
    loom_tensor_destroy(t);
  }
  l->o.elem_names = l->elem_names;
  l->o.elem_ranks = l->elem_ranks;
  l->o.elem_dims = l->elem_dims;
  return 0;
}

/* The inputs do not fit the model: the error counts them in the model's
 * order, which the message spells out. */
static int fail_inputs(const char *cmd, const session_t *s) {
  char names[512] = "";
  size_t used = 0;
  for (int i = 0; i < s->n_in && used < sizeof names; i++)
    used += (size_t)snprintf(names + used, sizeof names - used, "%s%d '%s'", i ? ", " : "", i,
                             loom_graph_input_name(s->g, i));
  fprintf(stderr, "loom %s: the inputs do not fit the model (its inputs: %s): %s\n", cmd, names,
          loom_last_error());
  return 1;
}

/* Loads, binds and compiles: the symbols' sizes come from the inputs;
 * fixed: the model loaded with its symbolic dims fixed to them at once. */
static int session_open(const char *cmd, session_t *s, const args_t *a, bool fixed) {
  memset(s, 0, sizeof *s);
  load_opts_t l;
  if (load_options(cmd, a, &l)) return 1;
  double t0 = now_ms();
  loom_status_t ls = loom_onnx_load(a->model, &l.o, &s->g);
  const char *unknown = NULL;
  for (int k = 0; ls == LOOM_OK && k < a->n_dims && !unknown; k++)
    if (!is_input_symbol(s->g, a->dim_names[k])) unknown = a->dim_names[k];
  if (((fixed || ls == LOOM_ERR_UNSUPPORTED || ls == LOOM_ERR_SHAPE) &&
       (a->n_dims || l.n_given)) ||
      unknown) {
    /* An op Loom imports only over static dims, or shapes it cannot prove
     * to agree while a dim is symbolic (x[N, D] + bias[5], a Reshape to
     * [B, T, 2, C/2]), or a --dim that names a dim the import merged
     * (tf2onnx's unk__10, imported as dim0): the model loads again with
     * its symbolic dims fixed to the sizes given (--dim, the files), as
     * ONNX Runtime's free dimension overrides; the first error stands if
     * that fails too. */
    loom_status_t first_status = ls;
    char first[1024];
    snprintf(first, sizeof first, "%s", unknown ? "" : loom_last_error());
    loom_graph_destroy(s->g);
    s->g = NULL;
    l.o.n_dims = a->n_dims, l.o.dim_names = a->dim_names, l.o.dim_sizes = a->dim_values;
    l.o.n_shapes = l.n_given, l.o.shape_names = l.given_names;
    l.o.shape_ranks = l.given_ranks, l.o.shape_dims = l.given_dims;
    ls = loom_onnx_load(a->model, &l.o, &s->g);
    s->dims_fixed = ls == LOOM_OK;
    if (ls == LOOM_OK && !unknown && first_status != LOOM_OK) /* else session_first says why */
      fprintf(stderr, "loom %s: loaded with its symbolic dims fixed to the sizes given (with "
              "them symbolic: %s)\n", cmd, first);
    else if (ls != LOOM_OK && !unknown) {
      char second[1024];
      snprintf(second, sizeof second, "%s", loom_last_error());
      loom_set_error(first_status, "%s (and with the symbolic dims fixed to the sizes given: %s)",
                     first, second);
    }
  }
  if (ls != LOOM_OK) return fail(cmd, "cannot load the model");
  s->load_ms = now_ms() - t0;
  if (bind_inputs(cmd, s, a)) return 1;
  loom_compile_options_t o;
  loom_compile_options_init(&o);
  o.num_threads = a->threads;
  o.dynamic_symbols = 1;
  o.freeze_params = 1;
  t0 = now_ms();
  loom_status_t st = loom_compile(s->g, &o, &s->e);
  s->compile_ms = now_ms() - t0;
  s->n_out = loom_graph_num_outputs(s->g);
  if (s->n_out > MAX_ARGS) return fail(cmd, "too many outputs");
  if (st == LOOM_ERR_UNSUPPORTED) {
    snprintf(s->interpreted, sizeof s->interpreted, "%s", loom_last_error());
    fprintf(stderr, "loom %s: the interpreter runs this model (%s)\n", cmd, s->interpreted);
    return 0;
  }
  if (st != LOOM_OK) return fail(cmd, "cannot compile the model");
  for (int k = 0; k < s->n_out; k++)
    if (loom_executable_new_output_for(s->e, s->n_in, s->in, k, &s->out[k]) != LOOM_OK)
      return fail_inputs(cmd, s);
  return 0;
}

/* One run, compiled or interpreted, into s->out. */
static loom_status_t session_run(session_t *s) {
  if (s->e) return loom_executable_run(s->e, s->n_in, s->in, s->n_out, s->out);
  for (int k = 0; k < s->n_out; k++) {
    loom_tensor_destroy(s->out[k]);
    s->out[k] = NULL;
  }
  return loom_interpret(s->g, s->n_in, s->in, s->n_out, s->out);
}

/* Opens s and runs it once. A run whose sizes do not fit what the model
 * computes with its dims symbolic (a Slice to [0, 512) of a dim the run
 * gives 10: ONNX clamps the bound, which Loom does only for a size it
 * knows) runs again with the dims fixed to the sizes given. */
static int session_first(const char *cmd, session_t *s, const args_t *a) {
  if (session_open(cmd, s, a, false)) return 1;
  double t0 = now_ms();
  loom_status_t rs = session_run(s);
  s->first_ms = now_ms() - t0;
  if (rs == LOOM_ERR_BINDING && !s->dims_fixed && (a->n_dims || a->n_inputs)) {
    char first[1024];
    snprintf(first, sizeof first, "%s", loom_last_error());
    session_free(s);
    if (session_open(cmd, s, a, true)) return 1;
    fprintf(stderr, "loom %s: runs with its symbolic dims fixed to the sizes given (with them "
            "symbolic: %s)\n", cmd, first);
    t0 = now_ms();
    rs = session_run(s);
    s->first_ms = now_ms() - t0;
  }
  return rs == LOOM_OK ? 0 : fail(cmd, "the run failed");
}

/* NAME with characters other than letters, digits, '.', '_' and '-' as '_',
 * and a leading '.' too. */
static void file_name(const char *name, int k, char *out, size_t size) {
  if (!*name) {
    snprintf(out, size, "output_%d", k);
    return;
  }
  size_t i = 0;
  for (; name[i] && i + 1 < size; i++) {
    char c = name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    out[i] = ok ? c : '_';
  }
  out[i] = 0;
  if (out[0] == '.') out[0] = '_'; /* not a hidden file, nor "." or ".." */
}

/* file_name of output k, made unlike those of outputs 0..k-1 (names[]) by
 * a suffix _k, _k_k...: names that differ only in characters it replaces
 * ("a::b", "a__b") would else write one file. */
static void unique_file_name(const char *name, int k, char (*names)[256], char *out) {
  file_name(name, k, out, 256);
  for (int j = 0; j < k; j++) {
    if (strcmp(out, names[j])) continue;
    size_t len = strlen(out);
    if (len > 200) len = 200;
    snprintf(out + len, 256 - len, "_%d", k);
    j = -1; /* again from the first */
  }
}

/* t as path (.npy); bfloat16, which NumPy has not, as float32 (exact). */
static loom_status_t save_output(const loom_tensor_t *t, const char *path, int *widened) {
  *widened = loom_tensor_dtype(t) == LOOM_BF16;
  if (!*widened) return loom_tensor_save_npy(t, path);
  int64_t shape[LOOM_MAX_RANK];
  for (int d = 0; d < loom_tensor_rank(t); d++) shape[d] = loom_tensor_dim(t, d);
  loom_tensor_t *f;
  loom_status_t st = loom_tensor_create(LOOM_F32, loom_tensor_rank(t), shape, &f);
  if (st != LOOM_OK) return st;
  float *dst = loom_tensor_data(f);
  for (int64_t i = 0; st == LOOM_OK && i < loom_tensor_numel(t); i++) {
    double v;
    st = loom_tensor_get_f64(t, i, &v);
    dst[i] = (float)v;
  }
  if (st == LOOM_OK) st = loom_tensor_save_npy(f, path);
  loom_tensor_destroy(f);
  return st;
}

int loom_onnx_run_main(int argc, char **argv) {
  args_t a;
  int rc = parse(argc, argv, "run", &a);
  if (rc) return rc;
  session_t s;
  rc = session_first("run", &s, &a);
  if (!rc && mkdir(a.output_dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "loom run: cannot create %s: %s\n", a.output_dir, strerror(errno));
    rc = 1;
  }
  char (*names)[256] = rc ? NULL : calloc((size_t)s.n_out + 1, sizeof *names);
  if (!rc && !names) rc = fail("run", "out of memory");
  for (int k = 0; !rc && k < s.n_out; k++) {
    char path[4096];
    unique_file_name(loom_graph_output_name(s.g, k), k, names, names[k]);
    snprintf(path, sizeof path, "%s/%s.npy", a.output_dir, names[k]);
    int widened;
    if (save_output(s.out[k], path, &widened) != LOOM_OK) {
      rc = fail("run", "cannot write an output");
      break;
    }
    if (widened)
      fprintf(stderr, "loom run: %s is bfloat16, which NumPy has not: written as float32 "
              "(the same values)\n", path);
    printf("%s: %s [", path, loom_dtype_name(loom_tensor_dtype(s.out[k])));
    for (int d = 0; d < loom_tensor_rank(s.out[k]); d++)
      printf("%s%lld", d ? ", " : "", (long long)loom_tensor_dim(s.out[k], d));
    printf("]\n");
  }
  free(names);
  session_free(&s);
  return rc;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

int loom_onnx_bench_main(int argc, char **argv) {
  args_t a;
  int rc = parse(argc, argv, "bench", &a);
  if (rc) return rc;
  session_t s;
  rc = session_first("bench", &s, &a);
  double *ms = calloc((size_t)a.runs, sizeof *ms);
  double first = s.first_ms;
  double total = 0;
  for (int r = 0; !rc && r < a.runs; r++) {
    double t0 = now_ms();
    if (session_run(&s) != LOOM_OK) {
      rc = fail("bench", "the run failed");
      break;
    }
    ms[r] = now_ms() - t0;
    total += ms[r];
  }
  if (!rc) {
    qsort(ms, (size_t)a.runs, sizeof *ms, cmp_double);
    loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
    if (s.e) loom_executable_info(s.e, &info);
    else info.threads = 1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int at[3] = {50, 90, 99};
    printf("{\"model\":\"%s\",\"threads\":%d,\"compiled\":%s,\"runs\":%d,\"load_ms\":%.3f,"
           "\"compile_ms\":%.3f,\"first_run_ms\":%.3f", a.model, info.threads,
           s.e ? "true" : "false", a.runs, s.load_ms, s.compile_ms, first);
    for (int k = 0; k < 3; k++)
      printf(",\"p%d_ms\":%.4f", at[k], ms[(a.runs - 1) * at[k] / 100]);
    printf(",\"runs_per_s\":%.2f,\"arena_bytes\":%lld,\"lower_bound_bytes\":%lld,"
           "\"peak_rss_bytes\":%lld}\n", a.runs / (total / 1e3), (long long)info.arena_bytes,
           (long long)info.lower_bound_bytes, (long long)ru.ru_maxrss * 1024);
  }
  free(ms);
  session_free(&s);
  return rc;
}

int loom_onnx_explain_main(int argc, char **argv) {
  args_t a;
  int rc = parse(argc, argv, "explain", &a);
  if (rc) return rc;
  /* The model as it is first: a model that does not load still shows its
   * ops and every one the importer lacks. */
  char *about = NULL;
  if (loom_onnx_describe(a.model, &about) == LOOM_OK) {
    fputs(about, stdout);
    loom_free(about);
  }
  session_t s;
  rc = session_open("explain", &s, &a, false);
  if (!rc) {
    printf("imported: %d inputs, %d outputs, %d nodes in Loom's IR\n", s.n_in, s.n_out,
           loom_graph_num_nodes(s.g));
    for (int i = 0; i < s.n_in; i++) {
      loom_value_t v;
      loom_dtype_t dt;
      int rank;
      loom_dim_t dims[LOOM_MAX_RANK];
      loom_graph_input_value(s.g, i, &v);
      loom_value_type(s.g, v, &dt, &rank, dims);
      printf("  input %s: %s [", loom_graph_input_name(s.g, i), loom_dtype_name(dt));
      for (int d = 0; d < rank; d++) {
        char text[128];
        loom_dim_format(s.g, dims[d], text, sizeof text);
        printf("%s%s", d ? ", " : "", text);
      }
      printf("]\n");
    }
    for (int k = 0; k < s.n_out; k++) printf("  output %s\n", loom_graph_output_name(s.g, k));
    char *text = NULL;
    if (!s.e) printf("run by the interpreter: %s\n", s.interpreted);
    else if (loom_executable_explain(s.e, &text) == LOOM_OK) {
      fputs(text, stdout);
      loom_free(text);
    }
  }
  session_free(&s);
  return rc;
}
