/* conv2d, its weight gradient and conv_transpose2d (conv2d's input
 * gradient) of f32 NCHW tensors on the kernels generated code calls
 * (kernels/gemm.h, kernels/conv.h): the fallback interpreter's, and a
 * compiled executable's where its code declined the node (a batch known
 * only at run time), which the reference kernels' direct sums in double
 * would run 100x slower. */
#include "backend/cpu/eager.h"
#include "backend/cpu/kernels/conv.h"
#include "backend/cpu/kernels/gemm.h"
#include "core/tensor.h"
#include "ir/ir.h"

/* Every tensor of the call f32 and dense; images and weights of rank 4. */
static bool dense_f32(const ref_call_t *c) {
  if (c->out[0]->dtype != LOOM_F32 || c->out[0]->rank != 4 || !tensor_is_contiguous(c->out[0]))
    return false;
  for (int i = 0; i < c->n_in; i++) {
    const loom_tensor_t *t = c->in[i];
    if (t->dtype != LOOM_F32 || t->rank != (i == 2 ? 1 : 4) || !tensor_is_contiguous(t))
      return false;
  }
  return true;
}

/* The geometry of the conv2d that maps image x (n, c, h, w) to y's (ho,
 * wo) with o output channels of kh x kw windows, from the node's attrs. */
static loom_abi_conv2d_t geometry(const ref_call_t *c, const int64_t *x, int64_t o, int64_t kh,
                                  int64_t kw, int64_t ho, int64_t wo) {
  loom_abi_conv2d_t d = {.n = x[0], .c = x[1], .h = x[2], .w = x[3],
                         .o = o, .kh = kh, .kw = kw, .ho = ho, .wo = wo,
                         .groups = ir_attr_int(c->attrs, "groups", 1)};
  ir_attr_ints_or(c->attrs, "stride", 2, 1, d.stride);
  ir_attr_ints_or(c->attrs, "pads", 4, 0, d.pads);
  ir_attr_ints_or(c->attrs, "dilation", 2, 1, d.dilation);
  return d;
}

bool cpu_eager_conv(ref_call_t *c, loom_status_t *status) {
  if (!dense_f32(c)) return false;
  const loom_tensor_t *x = c->in[0], *w = c->in[1];
  loom_tensor_t *y = c->out[0];
  const float *bias = c->n_in > 2 ? c->in[2]->data : NULL;
  *status = LOOM_OK;
  if (loom_tensor_numel(y) == 0) return true;
  switch (c->node->op) {
    case IR_OP_CONV2D: {
      loom_abi_conv2d_t d = geometry(c, x->shape, w->shape[0], w->shape[2], w->shape[3],
                                     y->shape[2], y->shape[3]);
      d.x = x->data, d.weight = w->data, d.bias = bias, d.y = y->data;
      kern_conv2d_f32(&d, KERN_CONV_DEFAULT, c->pool);
      return true;
    }
    case IR_OP_CONV_TRANSPOSE2D: { /* y = dX of the conv2d from y's image to x */
      loom_abi_conv2d_t d = geometry(c, y->shape, x->shape[1], w->shape[2], w->shape[3],
                                     x->shape[2], x->shape[3]);
      d.x = y->data, d.weight = w->data, d.bias = bias, d.y = x->data;
      kern_conv2d_input_grad_f32(&d, KERN_CONV_DEFAULT, c->pool);
      return true;
    }
    case IR_OP_CONV2D_WEIGHT_GRAD: { /* in: x, dy; out: dW */
      const loom_tensor_t *dy = c->in[1];
      loom_abi_conv2d_t d = geometry(c, x->shape, y->shape[0], y->shape[2], y->shape[3],
                                     dy->shape[2], dy->shape[3]);
      d.x = x->data, d.weight = y->data, d.y = dy->data;
      kern_conv2d_weight_grad_f32(&d, c->pool);
      return true;
    }
    default: return false;
  }
}
