/* What the C code generator offers fusion (passes/fuse.h): the nodes it
 * generates, the views its matmuls read and write in place, the index
 * prologues its emitters fold in. */
#include "backend/cpu/codegen/cg.h"

const fuse_caps_t cg_fuse_caps = {
    .supports = cg_supports,
    .matmul_reads_view = cg_matmul_reads_view,
    .matmul_writes_view = cg_matmul_writes_view,
    .index_prologue_ok = cg_index_prologue_ok,
    .index_prologue_reads = cg_index_prologue_reads,
    .index_src_fits = cg_index_src_fits,
};
