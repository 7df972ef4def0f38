/* The public builders that the op table writes itself: every op of fixed
 * arity (1, 2 or 3 inputs), one output and no attributes has the builder
 * loom_<name>(g, in..., out) (include/loom/ops.h), generated here from
 * its row (build column IN1, IN2, IN3). Ops with attributes, optional or
 * variadic inputs have builders written beside their shape rules
 * (build column OWN, src/ir/op_<family>.c). */
#include "ir/ir.h"
#include "loom/ops.h"

/* A row's build column must agree with its arity and attributes: a
 * generated builder takes exactly its inputs, and an op that could have
 * one does (sizeof "" == 1: no attributes). */
#define FIXED(imin, imax, nout, at, k) \
  ((imin) == (k) && (imax) == (k) && (nout) == 1 && sizeof(at) == 1)
#define DERIVABLE(imin, imax, nout, at) \
  (FIXED(imin, imax, nout, at, 1) || FIXED(imin, imax, nout, at, 2) || \
   FIXED(imin, imax, nout, at, 3))

#define BUILD_IN1(ID, nm)                                                       \
  loom_status_t loom_##nm(loom_graph_t *g, loom_value_t x, loom_value_t *out) { \
    return ir_build1(g, IR_OP_##ID, 1, &x, NULL, out);                          \
  }
#define BUILD_IN2(ID, nm)                                                       \
  loom_status_t loom_##nm(loom_graph_t *g, loom_value_t a, loom_value_t b,      \
                          loom_value_t *out) {                                  \
    loom_value_t in[2] = {a, b};                                                \
    return ir_build1(g, IR_OP_##ID, 2, in, NULL, out);                          \
  }
#define BUILD_IN3(ID, nm)                                                       \
  loom_status_t loom_##nm(loom_graph_t *g, loom_value_t a, loom_value_t b,      \
                          loom_value_t c, loom_value_t *out) {                  \
    loom_value_t in[3] = {a, b, c};                                             \
    return ir_build1(g, IR_OP_##ID, 3, in, NULL, out);                          \
  }
#define BUILD_OWN(ID, nm)

#define CHECK_IN1(ID, imin, imax, nout, at) \
  _Static_assert(FIXED(imin, imax, nout, at, 1), #ID ": build IN1 needs 1 input, no attributes");
#define CHECK_IN2(ID, imin, imax, nout, at) \
  _Static_assert(FIXED(imin, imax, nout, at, 2), #ID ": build IN2 needs 2 inputs, no attributes");
#define CHECK_IN3(ID, imin, imax, nout, at) \
  _Static_assert(FIXED(imin, imax, nout, at, 3), #ID ": build IN3 needs 3 inputs, no attributes");
#define CHECK_OWN(ID, imin, imax, nout, at)                                      \
  _Static_assert(!DERIVABLE(imin, imax, nout, at),                               \
                 #ID ": fixed arity and no attributes: its builder is generated " \
                 "(build IN1, IN2 or IN3)");

#define LOOM_OP(ID, nm, cls, imin, imax, nout, dt, fl, shp, ref, grad, dec, pad, build, at, dc) \
  CHECK_##build(ID, imin, imax, nout, at) BUILD_##build(ID, nm)
#include "ir/ops.def"
#undef LOOM_OP
