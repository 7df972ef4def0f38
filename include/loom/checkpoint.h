/* Checkpoints: a graph's parameters (weights, and optimizer moments and
 * step counters, which are parameters too) saved to and loaded from a
 * safetensors file: an 8-byte little-endian header length N, a JSON header
 * of N bytes mapping each tensor's name to its dtype ("F32", "F64", "F16",
 * "BF16", "I8", "I32", "I64", "BOOL"), shape and data_offsets, then the
 * raw little-endian data. Files written by other safetensors writers load
 * here, and files written here load there.
 *
 * Names: a parameter is saved under its name. A parameter made without a
 * name (or with "") is saved under the generated name "__param<k>", k its
 * position among the graph's parameters, which holds only as long as the
 * graph declares its parameters in the same order. */
#ifndef LOOM_CHECKPOINT_H
#define LOOM_CHECKPOINT_H

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes every parameter of g to path, atomically: the file is written
 * beside path under a temporary name, flushed to disk and renamed over
 * path, so that a failed or interrupted save leaves the previous file at
 * path intact. A failed save removes its temporary; one of a process
 * killed midway (path.tmp.PID.N) is removed by the next save of path.
 * Fails with LOOM_ERR_INVALID when two parameters share a name or one is
 * named "__metadata__". */
LOOM_API loom_status_t loom_checkpoint_save(loom_graph_t *g, const char *path);

typedef struct loom_checkpoint_options {
  size_t size;          /* sizeof(loom_checkpoint_options_t): init sets it */
  int allow_missing;    /* 1: parameters absent from the file keep their values */
  int allow_unexpected; /* 1: tensors of the file that g lacks are skipped */
} loom_checkpoint_options_t;
/* The strict defaults (both 0); size is the caller's sizeof (C calls the
 * macro). */
LOOM_API loom_status_t loom_checkpoint_options_init_sized(loom_checkpoint_options_t *o,
                                                          size_t size);
#define loom_checkpoint_options_init(o) loom_checkpoint_options_init_sized((o), sizeof *(o))

/* Loads path into g's parameters. Every parameter of g must be in the
 * file with its dtype (else LOOM_ERR_DTYPE) and shape (else
 * LOOM_ERR_SHAPE), and every tensor of the file must be a parameter of g
 * (else LOOM_ERR_INVALID); a malformed file gives LOOM_ERR_FORMAT. The
 * file is checked and read whole before any parameter changes, so a
 * failed load leaves every parameter as it was. */
LOOM_API loom_status_t loom_checkpoint_load(loom_graph_t *g, const char *path);
/* The same, with options (NULL: the strict defaults above). */
LOOM_API loom_status_t loom_checkpoint_load_ex(loom_graph_t *g, const char *path,
                                               const loom_checkpoint_options_t *o);

#ifdef __cplusplus
}
#endif

#endif
