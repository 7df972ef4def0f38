/* The table of reference kernels, built from the op table. */
#include "kernels/ref.h"

#define LOOM_OP(ID, name, cls, imin, imax, nout, dt, fl, shape, ref, ...) \
  loom_status_t ref_##ref(ref_call_t *c);
#include "ir/ops.def"
#undef LOOM_OP

const ref_kernel_fn ref_kernels[IR_OP_COUNT] = {
#define LOOM_OP(ID, name, cls, imin, imax, nout, dt, fl, shape, ref, ...) \
  [IR_OP_##ID] = ref_##ref,
#include "ir/ops.def"
#undef LOOM_OP
};
