/* Loom: an AI compiler and runtime.
 *
 * The public C API. Every object is an opaque handle created by a
 * loom_<noun>_create-style call and released by its loom_<noun>_destroy.
 * Every call that can fail returns a loom_status_t; on failure,
 * loom_last_error() returns a message (per thread) naming what was wrong. */
#ifndef LOOM_LOOM_H
#define LOOM_LOOM_H

#include <stddef.h>
#include <stdint.h>

#include "loom/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status ------------------------------------------------------------ */

typedef enum loom_status {
  LOOM_OK = 0,
  LOOM_ERR_INVALID,     /* a bad argument: null handle, bad attribute, ... */
  LOOM_ERR_SHAPE,       /* shapes that do not fit together */
  LOOM_ERR_DTYPE,       /* a dtype the op does not accept */
  LOOM_ERR_AXIS,        /* an axis out of range */
  LOOM_ERR_GRAPH,       /* a malformed graph: cycle, dangling value, ... */
  LOOM_ERR_BINDING,     /* a tensor that does not fit the input it is bound to */
  LOOM_ERR_NOMEM,       /* an allocation failed */
  LOOM_ERR_IO,          /* a file could not be read or written */
  LOOM_ERR_FORMAT,      /* a malformed file */
  LOOM_ERR_VALUE,       /* bad data at run time: index out of range, x/0 */
  LOOM_ERR_UNSUPPORTED, /* a feature this build or op does not have */
  LOOM_ERR_COMM,        /* a collective failed: another rank failed or did not arrive */
} loom_status_t;

/* The message of the last failed call on this thread ("" if none). */
LOOM_API const char *loom_last_error(void);
/* A short name for a status: "LOOM_ERR_SHAPE". */
LOOM_API const char *loom_status_name(loom_status_t status);
/* Sets this thread's last error to a printf-style message and returns
 * status: how code outside Loom (a host callback, a helper of the
 * caller's) fails through the same channel as Loom's own calls:
 *   return loom_set_error(LOOM_ERR_VALUE, "tree %d has no root", i);
 * Messages longer than 1023 bytes are cut. */
LOOM_API loom_status_t loom_set_error(loom_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- Versioned structs ---------------------------------------------------
 * Every struct that the library writes into the caller's memory (the
 * _info and _stats structs) or reads options from (the _options structs)
 * begins with `size_t size`: the caller's sizeof of it. A program or a
 * binding built against an older header then keeps working with a newer
 * library, and the other way round: the library writes or reads only the
 * first min(size, its own sizeof) bytes (new fields only ever go at the
 * end), sets size to that count, and gives the options past it their
 * defaults. Set size with the struct's _INIT macro (outputs) or its init
 * function (options):
 *   loom_executable_info_t info = LOOM_EXECUTABLE_INFO_INIT;
 *   loom_compile_options_t o;
 *   loom_compile_options_init(&o);
 * A size below sizeof(size_t) (0: never set) or above
 * LOOM_MAX_STRUCT_SIZE fails with LOOM_ERR_INVALID. Structs passed by
 * value or in arrays (loom_value_t, loom_attr_t, loom_dim_policy_t, the
 * conv and pool params, loom_host_op_t) have no size field: their layout
 * stays as it is, and an extension comes as a new struct and call. */
#define LOOM_MAX_STRUCT_SIZE 65536

/* ---- Dtypes ------------------------------------------------------------ */

typedef enum loom_dtype {
  LOOM_F32,
  LOOM_F64,
  LOOM_F16,
  LOOM_BF16,
  LOOM_I8,
  LOOM_I32,
  LOOM_I64,
  LOOM_BOOL,
  LOOM_DTYPE_COUNT
} loom_dtype_t;

/* "f32", "bf16", ...; "?" for a value out of range. */
LOOM_API const char *loom_dtype_name(loom_dtype_t dtype);
/* Bytes per element; 0 for a value out of range. */
LOOM_API size_t loom_dtype_size(loom_dtype_t dtype);

#define LOOM_MAX_RANK 8

/* ---- Devices ----------------------------------------------------------- */

/* Where storage lives and kernels run: a tensor's data, an executable's
 * arena (loom_executable_info_t.device). Only the host CPU exists today;
 * a GPU back end adds its device here (docs/backends.md). */
typedef enum loom_device {
  LOOM_DEVICE_CPU,
} loom_device_t;

/* ---- Tensors ----------------------------------------------------------- */

/* A dense array: dtype, shape, strides (in elements) and data. */
typedef struct loom_tensor loom_tensor_t;

/* A new zero-filled contiguous tensor. rank may be 0 (a scalar). */
LOOM_API loom_status_t loom_tensor_create(loom_dtype_t dtype, int rank,
                                          const int64_t *shape, loom_tensor_t **out);
/* A tensor over the caller's memory, without copying. strides are in
 * elements (NULL: contiguous row-major) and may be 0 to broadcast a dim.
 * The memory must outlive the tensor. */
LOOM_API loom_status_t loom_tensor_wrap(loom_dtype_t dtype, int rank,
                                        const int64_t *shape, const int64_t *strides,
                                        void *data, loom_tensor_t **out);
/* A new contiguous tensor holding a copy of `bytes` bytes of row-major data. */
LOOM_API loom_status_t loom_tensor_from_data(loom_dtype_t dtype, int rank,
                                             const int64_t *shape, const void *data,
                                             size_t bytes, loom_tensor_t **out);
/* A new contiguous tensor holding t's elements (t may be strided). */
LOOM_API loom_status_t loom_tensor_copy(const loom_tensor_t *t, loom_tensor_t **out);
LOOM_API void loom_tensor_destroy(loom_tensor_t *t);

LOOM_API loom_dtype_t loom_tensor_dtype(const loom_tensor_t *t);
LOOM_API int loom_tensor_rank(const loom_tensor_t *t);
/* Where t's data lives (LOOM_DEVICE_CPU for a null t: host memory, the
 * only device today). */
LOOM_API loom_device_t loom_tensor_device(const loom_tensor_t *t);
/* Dim i, or -1 if t is null or i is out of range. */
LOOM_API int64_t loom_tensor_dim(const loom_tensor_t *t, int i);
LOOM_API int64_t loom_tensor_numel(const loom_tensor_t *t);
/* Pointer to element 0, laid out by the tensor's strides. */
LOOM_API void *loom_tensor_data(const loom_tensor_t *t);
/* Copies the elements, row-major and contiguous, into dst (dst_bytes must
 * be at least numel * dtype size). */
LOOM_API loom_status_t loom_tensor_read(const loom_tensor_t *t, void *dst,
                                        size_t dst_bytes);
/* Overwrites the elements from row-major contiguous src. */
LOOM_API loom_status_t loom_tensor_write(loom_tensor_t *t, const void *src,
                                         size_t src_bytes);
/* Element i (row-major order) converted to double. */
LOOM_API loom_status_t loom_tensor_get_f64(const loom_tensor_t *t, int64_t i,
                                           double *out);

/* NumPy .npy files (format 1.0-3.0, little-endian, C order). Loading
 * reads uint8, int16 and uint16 widened to i32, uint32 to i64 and uint64
 * as the i64 of its bits, as the ONNX importer holds those types. */
LOOM_API loom_status_t loom_tensor_load_npy(const char *path, loom_tensor_t **out);
/* Writes atomically: a temporary file (path.tmp.PID.N) renamed over path;
 * that of a save killed midway is removed by the next save of path. */
LOOM_API loom_status_t loom_tensor_save_npy(const loom_tensor_t *t, const char *path);

/* ---- Dims -------------------------------------------------------------- */

/* A dim is a non-negative constant or a handle to a symbolic expression
 * (symbols, constants, +, *, floor-div) owned by a graph. Handles are very
 * negative numbers, so that small negatives (-1: "infer" in reshape) stay
 * free for ops to use. */
typedef int64_t loom_dim_t;

/* ---- Graphs ------------------------------------------------------------ */

typedef struct loom_graph loom_graph_t;

/* A value of a graph: an input, parameter, constant or node output. */
typedef struct loom_value {
  int32_t id;
} loom_value_t;

LOOM_API loom_status_t loom_graph_create(loom_graph_t **out);
LOOM_API void loom_graph_destroy(loom_graph_t *g);

/* The symbol called name (created on first use). */
LOOM_API loom_status_t loom_dim_symbol(loom_graph_t *g, const char *name,
                                       loom_dim_t *out);
LOOM_API loom_status_t loom_dim_add(loom_graph_t *g, loom_dim_t a, loom_dim_t b,
                                    loom_dim_t *out);
LOOM_API loom_status_t loom_dim_mul(loom_graph_t *g, loom_dim_t a, loom_dim_t b,
                                    loom_dim_t *out);
LOOM_API loom_status_t loom_dim_floordiv(loom_graph_t *g, loom_dim_t a, loom_dim_t b,
                                         loom_dim_t *out);
/* Writes the dim as text ("n*4+1") into buf. */
LOOM_API loom_status_t loom_dim_format(const loom_graph_t *g, loom_dim_t d, char *buf,
                                       size_t size);

/* A graph input; dims may be symbolic. Inputs bind by position; name
 * labels the input in messages and may be NULL or "" (unnamed). A name
 * is unique among the graph's inputs and parameters: a second input or
 * parameter of one name fails with LOOM_ERR_INVALID, naming it. */
LOOM_API loom_status_t loom_graph_input(loom_graph_t *g, const char *name,
                                        loom_dtype_t dtype, int rank,
                                        const loom_dim_t *dims, loom_value_t *out);
/* A parameter: persistent, mutable state owned by the graph, zero-filled,
 * or a copy of init when init is not null. name is its key in checkpoints
 * and optimizer state ("<name>.m"); NULL or "" makes an unnamed one
 * (saved as "__param<k>", k its position). Names are unique as inputs'
 * are: a name already given to an input or parameter of the graph fails
 * with LOOM_ERR_INVALID, naming it. */
LOOM_API loom_status_t loom_graph_param(loom_graph_t *g, const char *name,
                                        loom_dtype_t dtype, int rank,
                                        const int64_t *shape, const loom_tensor_t *init,
                                        loom_value_t *out);
/* A parameter whose storage is the caller's tensor, borrowed (not
 * copied): runs read it and assigns write it in place, so the caller sees
 * every update. storage must be contiguous and outlive g and every
 * executable compiled from g. Otherwise as loom_graph_param (name, dtype
 * and shape from storage). */
LOOM_API loom_status_t loom_graph_param_borrow(loom_graph_t *g, const char *name,
                                               loom_tensor_t *storage, loom_value_t *out);
/* A constant holding a copy of t. */
LOOM_API loom_status_t loom_graph_constant(loom_graph_t *g, const loom_tensor_t *t,
                                           loom_value_t *out);
/* Marks v as the graph's next output. */
LOOM_API loom_status_t loom_graph_output(loom_graph_t *g, loom_value_t v);
/* The same, calling the output name (NULL or "": unnamed). */
LOOM_API loom_status_t loom_graph_output_named(loom_graph_t *g, const char *name,
                                               loom_value_t v);
/* The name of input i or output i ("" when it has none), or NULL when i
 * is out of range. The string is the graph's, valid while it lives. */
LOOM_API const char *loom_graph_input_name(const loom_graph_t *g, int i);
LOOM_API const char *loom_graph_output_name(const loom_graph_t *g, int i);
/* The graph's parameters in the order they were made: their count, the
 * value of parameter i, and its name ("" when it has none; NULL when i
 * is out of range). */
LOOM_API int loom_graph_num_params(const loom_graph_t *g);
LOOM_API loom_status_t loom_graph_param_value(const loom_graph_t *g, int i, loom_value_t *out);
LOOM_API const char *loom_graph_param_name(const loom_graph_t *g, int i);
/* The value of input i or output i (for loom_value_type). */
LOOM_API loom_status_t loom_graph_input_value(const loom_graph_t *g, int i, loom_value_t *out);
LOOM_API loom_status_t loom_graph_output_value(const loom_graph_t *g, int i, loom_value_t *out);
/* Writes value into parameter param when the graph runs. Reads of the
 * parameter during a run see its value from before the run; assigns take
 * effect when the run ends. */
LOOM_API loom_status_t loom_assign(loom_graph_t *g, loom_value_t param,
                                   loom_value_t value);

/* The persistent storage of a parameter (owned by the graph). */
LOOM_API loom_status_t loom_graph_param_tensor(loom_graph_t *g, loom_value_t param,
                                               loom_tensor_t **out);

LOOM_API int loom_graph_num_inputs(const loom_graph_t *g);
LOOM_API int loom_graph_num_outputs(const loom_graph_t *g);
LOOM_API int loom_graph_num_nodes(const loom_graph_t *g);

/* The type of v: dtype, rank and dims (dims may be null). */
LOOM_API loom_status_t loom_value_type(const loom_graph_t *g, loom_value_t v,
                                       loom_dtype_t *dtype, int *rank,
                                       loom_dim_t *dims);

/* Checks the graph: types, references, acyclic order, outputs. */
LOOM_API loom_status_t loom_graph_verify(const loom_graph_t *g);
/* The graph as text, or as Graphviz DOT, in a string the caller frees
 * with loom_free. */
LOOM_API loom_status_t loom_graph_print(const loom_graph_t *g, char **out);
LOOM_API loom_status_t loom_graph_dot(const loom_graph_t *g, char **out);
LOOM_API void loom_free(void *p);

/* ---- Gradients ---------------------------------------------------------- */

/* Appends to g the gradient of `loss` (a scalar: rank 0, float dtype) with
 * respect to each wrt[i]: grads[i] receives d loss / d wrt[i], of wrt[i]'s
 * type. A value that loss does not depend on gets zeros. Fails naming the
 * op when a gradient must flow through an op without a gradient rule. */
LOOM_API loom_status_t loom_grad(loom_graph_t *g, loom_value_t loss, int n,
                                 const loom_value_t *wrt, loom_value_t *grads);
/* reached[i] = whether loss depends on wrt[i] through float values and
 * differentiable ops, where loom_grad's gradient is more than its zeros
 * (a front end leaves the others' .grad unset, as PyTorch leaves None). */
LOOM_API loom_status_t loom_grad_reaches(const loom_graph_t *g, loom_value_t loss, int n,
                                         const loom_value_t *wrt, int *reached);

/* ---- Running ----------------------------------------------------------- */

/* Runs the graph with the reference kernels. inputs[i] binds graph input
 * i; outputs[i] receives a new tensor for graph output i (the caller
 * destroys it). Parameters are updated by the graph's assigns. g is only
 * read (its parameters written by assigns): several threads may interpret
 * one graph without assigns at once, while no thread changes it. */
LOOM_API loom_status_t loom_interpret(loom_graph_t *g, int n_inputs,
                                      loom_tensor_t *const *inputs, int n_outputs,
                                      loom_tensor_t **outputs);

/* ---- Compiling ---------------------------------------------------------- */

/* A graph compiled for fixed shapes: fused kernels in a shared object, a
 * memory plan in one arena, and a flat list of steps that a run replays. */
typedef struct loom_executable loom_executable_t;

typedef struct loom_compile_options {
  size_t size;     /* sizeof(loom_compile_options_t): init sets it */
  int fusion;      /* 1: fuse ops into kernels; 0: one step per node */
  int passes;      /* 1: run the pass pipeline (folding, CSE, DCE, ...) */
  int num_threads; /* 0: LOOM_NUM_THREADS, else the CPUs available */
  int use_cc;      /* 1: generate C and compile it; 0: reference steps only */
  /* Values for the graph's symbols, by name: compiled code is specialized
   * to these sizes. A symbol fixed by the inputs may be left out only if
   * the graph has no symbolic dims. A name that is not a symbol of the
   * graph, or a negative value, fails with LOOM_ERR_INVALID. */
  int n_symbols;
  const char *const *symbol_names;
  const int64_t *symbol_values;
  /* 1: symbols given no value above stay symbolic: the executable accepts
   * every size for them (read from the inputs at each run), the generated
   * code loops over runtime sizes, and the memory plan is redone when the
   * sizes change. 0: every symbol must be known at compile time. */
  int dynamic_symbols;
  /* 1: parameters that the graph never assigns are frozen as constants
   * (as torch.jit.freeze does): the executable may prepare them once
   * (pack weight matrices), so later writes to their storage are not
   * seen. 0: parameters are read at every run. */
  int freeze_params;
  /* Which algorithms f32 convolutions may use. 1: no approximate ones:
   * every convolution is a direct sum (no Winograd), as cuDNN's
   * deterministic algorithms or PyTorch's allow_tf32 = False. 0 (the
   * default): Winograd F(2x2, 3x3) on the 3x3 stride-1 layers where its
   * measured error bound stays within a direct f32 sum's, so results stay
   * within PyTorch's f32 error (docs/contractions.md has the figures).
   * -1: the fastest, F(4x4, 3x3) on large images, whose error reaches ten
   * times a direct sum's. With 0, the environment variable LOOM_PRECISE
   * (1 or -1) decides. */
  int precise;
  /* The back end that builds and runs the kernels, by name: NULL or "cpu"
   * (generated C on the host's cores), or "ref" (every node a step running
   * its reference kernel: slow, an oracle). A name that no back end has
   * fails with LOOM_ERR_INVALID listing the registered ones. Groups the
   * target cannot build run on "ref". */
  const char *target;
} loom_compile_options_t;

/* Fills the defaults: fusion, passes and the C compiler on, threads 0;
 * size is the caller's sizeof(loom_compile_options_t) (bindings call this;
 * C calls the macro below). */
LOOM_API loom_status_t loom_compile_options_init_sized(loom_compile_options_t *o,
                                                       size_t size);
#define loom_compile_options_init(o) loom_compile_options_init_sized((o), sizeof *(o))

/* Compiles g (options NULL: defaults). g's parameters are shared with the
 * executable, whose runs update them: the executable keeps g alive, so
 * loom_graph_destroy(g) may come before loom_executable_destroy (the
 * graph is freed with the last executable compiled from it). If
 * the C compiler is missing or fails, the executable still works: it runs
 * the graph with the reference kernels instead (much slower), one warning
 * a process is printed, and loom_executable_info's fallback and
 * fallback_reason, loom_executable_explain and LOOM_LOG=compile say why,
 * with the compiler's message. g is only read: several threads may compile
 * one graph at once, while no thread changes it. */
LOOM_API loom_status_t loom_compile(loom_graph_t *g, const loom_compile_options_t *o,
                                    loom_executable_t **out);
LOOM_API void loom_executable_destroy(loom_executable_t *e);

/* Runs the executable: inputs[i] binds graph input i, outputs[i] graph
 * output i, by pointer (outputs must be contiguous tensors of the output's
 * dtype and shape). One guard checks them; no allocation, hashing or shape
 * inference happens.
 *
 * Threads: any number of threads may run one executable at once, each
 * with its own bindings (as ONNX Runtime's Session::Run). Runs of an
 * executable that only reads its parameters overlap: a run that finds the
 * executable's storage busy runs in storage of its own (an arena of
 * loom_executable_info's arena_bytes, made at the first overlap and kept
 * for later runs until destroy: at most one per run in progress), and
 * parallel loops that find the executable's thread pool busy run on the
 * caller's thread. Runs of an executable that writes parameters (assigns:
 * a training step), reads sizes at run time (dynamic_symbols) or has
 * if/loop nodes take turns instead, each seeing the parameters the run
 * before it left, as calls one after another would. Inputs are only
 * read; outputs must not be shared by runs in progress. */
LOOM_API loom_status_t loom_executable_run(loom_executable_t *e, int n_inputs,
                                           loom_tensor_t *const *inputs, int n_outputs,
                                           loom_tensor_t *const *outputs);
/* A new zero-filled tensor fit to be bound as output i. With runtime
 * symbols (dynamic_symbols), outputs bind with the shapes the inputs'
 * symbols give them: this one has the last run's shape (an error before
 * the first run), and _for the shape these inputs give. */
LOOM_API loom_status_t loom_executable_new_output(const loom_executable_t *e, int i,
                                                  loom_tensor_t **out);
LOOM_API loom_status_t loom_executable_new_output_for(const loom_executable_t *e, int n_inputs,
                                                      loom_tensor_t *const *inputs, int i,
                                                      loom_tensor_t **out);

/* Why an executable runs reference kernels for groups the code generator
 * has code for (loom_executable_info_t.fallback). Ops without a code
 * generation rule, and graphs that only the interpreter can run (a
 * data-dependent shape), use the reference kernels by design: that is no
 * fallback. */
typedef enum loom_fallback {
  LOOM_FALLBACK_NONE,      /* generated code runs wherever there is some */
  LOOM_FALLBACK_DISABLED,  /* loom_compile_options_t.use_cc was 0 */
  LOOM_FALLBACK_NO_CC,     /* no C compiler: LOOM_CC (default "cc") was not
                              found */
  LOOM_FALLBACK_CC_FAILED, /* the C compiler failed on the generated code
                              (rejected it, crashed, could not start): with a
                              working compiler, a bug in Loom; please report
                              it with loom_executable_explain's text */
  LOOM_FALLBACK_NO_MODULE, /* the compiled module could not be stored in the
                              module cache or loaded */
} loom_fallback_t;
/* "none", "disabled", "no-cc", "cc-failed", "no-module"; "?" out of range. */
LOOM_API const char *loom_fallback_name(loom_fallback_t f);

typedef struct loom_executable_info {
  size_t size;          /* sizeof(loom_executable_info_t): the caller sets it */
  int n_nodes;          /* nodes after the pass pipeline */
  int n_groups;         /* fused kernels and other steps */
  int n_generated;      /* steps running generated code */
  int n_reference;      /* steps running reference kernels */
  int interpreted;      /* 1: the whole graph runs in the interpreter */
  int threads;
  int64_t arena_bytes;       /* the planned arena */
  int64_t lower_bound_bytes; /* the most bytes live at one step */
  int64_t naive_bytes;       /* every intermediate in its own buffer */
  double compile_ms;
  int n_copies; /* steps that copy a value: an output computed elsewhere,
                   an assign not written in place */
  /* Floating-point operations of one run in its contractions (matmul,
   * convolutions; 2 per multiply-add), the work a FLOP/s figure counts;
   * with runtime symbols, those of the last run (-1 before one). Ops inside
   * if/loop bodies are not counted. */
  double flops;
  /* Whether generated code was lost, also in an if/loop's subgraphs (the
   * first loss). With it, the steps of the lost module run reference
   * kernels, or the whole graph runs in the interpreter. */
  loom_fallback_t fallback;
  /* Why, for people: the compiler's first error lines, or what was
   * missing; "" when fallback is LOOM_FALLBACK_NONE. Owned by the
   * executable (valid until it is destroyed). */
  const char *fallback_reason;
  /* Distinct generated functions the steps run (at most n_generated):
   * groups whose code is the same up to where their values are stored,
   * such as every layer of a model, run one function, compiled once. */
  int n_kernels;
  /* The back end that compiled it (loom_compile_options_t.target's name:
   * "cpu", "ref"), a string with the library's lifetime, and the device
   * its arena and kernels are on. */
  const char *target;
  loom_device_t device;
} loom_executable_info_t;
#define LOOM_EXECUTABLE_INFO_INIT {.size = sizeof(loom_executable_info_t)}
LOOM_API loom_status_t loom_executable_info(const loom_executable_t *e,
                                            loom_executable_info_t *out);
/* A report of the compilation: passes, fusion groups, memory plan, the
 * generated C and, when it did not compile, the compiler's first error
 * lines, in a string the caller frees with loom_free. */
LOOM_API loom_status_t loom_executable_explain(const loom_executable_t *e, char **out);

/* Counters of this process, for tests and benchmarks. */
typedef struct loom_stats {
  size_t size;             /* sizeof(loom_stats_t): the caller sets it */
  int64_t compiles;        /* loom_compile calls that built an executable */
  int64_t cc_invocations;  /* runs of the C compiler */
  int64_t disk_hits;       /* modules loaded from the disk cache */
  int64_t disk_rebuilds;   /* corrupt or truncated entries rebuilt */
} loom_stats_t;
#define LOOM_STATS_INIT {.size = sizeof(loom_stats_t)}
LOOM_API loom_status_t loom_stats_get(loom_stats_t *out);

/* ---- The API as data, for bindings -------------------------------------- */

/* This library's public API as JSON, in a string the caller frees with
 * loom_free: every function (name, header, declaration), struct (size,
 * alignment, and each field's name, C type, offset, size and array
 * count), enum (each value), typedef and integer constant of
 * include/loom/. It is generated from the headers the library was built
 * with and its numbers are the compiler's (offsetof, sizeof), so a
 * binding that reads it (`loom api` prints it) instead of copying
 * layouts by hand cannot drift from the library it loads. */
LOOM_API loom_status_t loom_api_describe(char **out);

#ifdef __cplusplus
}
#endif

#include "loom/op_table.h"
#include "loom/ops.h"
#include "loom/train.h"
#include "loom/checkpoint.h"
#include "loom/onnx.h"
#include "loom/comm.h"

#endif
