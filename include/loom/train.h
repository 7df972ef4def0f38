/* Loom: training. Losses and optimizers are graph builders made of
 * ordinary ops, so that fusion, autodiff and the compiler treat them like
 * any other part of the graph; initializers fill a parameter's storage.
 *
 * A training step is one graph: forward, loss, loom_grad, an optimizer
 * call that appends the updates as assigns. Optimizer state (momentum
 * buffers, moments, the step counter) lives in new zero-filled parameters
 * of the graph, named after the parameters they belong to, and is updated
 * in place by assigns: a compiled step replays with no recompilation. */
#ifndef LOOM_TRAIN_H
#define LOOM_TRAIN_H

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Losses --------------------------------------------------------------- */

typedef enum loom_reduction {
  LOOM_REDUCTION_MEAN, /* a scalar: the mean over the (non-ignored) items */
  LOOM_REDUCTION_SUM,  /* a scalar: the sum */
  LOOM_REDUCTION_NONE, /* one loss per item */
} loom_reduction_t;

/* ignore_index value meaning "no label is ignored". */
#define LOOM_NO_IGNORE_INDEX INT64_MIN

/* Cross-entropy from logits (N, C) (float) and labels (N) (i32 or i64),
 * as log_softmax and a one-hot NLL, with PyTorch's semantics: an item whose
 * label equals ignore_index contributes 0 and is not counted by the mean
 * (all ignored: the mean is NaN, 0/0, as in PyTorch); label_smoothing e in
 * [0, 1) mixes the target with the uniform distribution:
 *   loss_i = (1 - e) * -logp[i, y_i] + e / C * sum_c -logp[i, c].
 * C must be a constant dim. Any other label outside [0, C) fails at run
 * time with LOOM_ERR_VALUE, a message naming loom_cross_entropy, the
 * label's position and value, and C. */
LOOM_API loom_status_t loom_cross_entropy(loom_graph_t *g, loom_value_t logits,
                                          loom_value_t labels, int64_t ignore_index,
                                          double label_smoothing,
                                          loom_reduction_t reduction, loom_value_t *loss);
/* (pred - target)^2, pred and target of one dtype and shape. */
LOOM_API loom_status_t loom_mse(loom_graph_t *g, loom_value_t pred, loom_value_t target,
                                loom_reduction_t reduction, loom_value_t *loss);
/* Binary cross-entropy of sigmoid(logits) against targets in [0, 1], in
 * the stable form max(x, 0) - x*t + log(1 + e^-|x|). */
LOOM_API loom_status_t loom_bce_with_logits(loom_graph_t *g, loom_value_t logits,
                                            loom_value_t targets,
                                            loom_reduction_t reduction,
                                            loom_value_t *loss);

/* ---- Optimizers ------------------------------------------------------------
 * params[i] are parameters (loom_graph_param) of a float dtype, grads[i]
 * values of the same dtype and shape (from loom_grad). lr is a float value
 * of rank 0, usually a graph input, so that a schedule changes it between
 * runs without recompiling. Each call appends the updates and their
 * assigns; the new values take effect when the run ends. f16 and bf16
 * parameters are updated in f32 (their state is f32) and rounded back. */

/* SGD as PyTorch defines it (dampening 0):
 *   g = grad + weight_decay * p
 *   b = momentum * b + g                 (momentum > 0; b starts at 0)
 *   d = nesterov ? g + momentum * b : b  (d = g without momentum)
 *   p = p - lr * d
 * The buffers b are parameters named "<param name>.momentum". Nesterov
 * needs momentum > 0. */
LOOM_API loom_status_t loom_sgd(loom_graph_t *g, int n, const loom_value_t *params,
                                const loom_value_t *grads, loom_value_t lr,
                                double momentum, int nesterov, double weight_decay);

/* Adam (Kingma & Ba), with weight decay added to the gradient as PyTorch's
 * Adam does:
 *   t = t + 1;  g = grad + weight_decay * p
 *   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
 *   p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 * The moments are parameters "<param name>.m" and "<param name>.v"; t is
 * one i64 scalar parameter "adam.step" shared by the call's parameters
 * (one call per graph keeps the names unique, as checkpoints need). */
LOOM_API loom_status_t loom_adam(loom_graph_t *g, int n, const loom_value_t *params,
                                 const loom_value_t *grads, loom_value_t lr,
                                 double beta1, double beta2, double eps,
                                 double weight_decay);
/* AdamW (Loshchilov & Hutter): Adam without weight decay in the gradient,
 * and the decay decoupled: p = p * (1 - lr * weight_decay) before the Adam
 * step. The step counter is "adamw.step". */
LOOM_API loom_status_t loom_adamw(loom_graph_t *g, int n, const loom_value_t *params,
                                  const loom_value_t *grads, loom_value_t lr,
                                  double beta1, double beta2, double eps,
                                  double weight_decay);

/* The three optimizers named by a value instead of a function, for a
 * caller that takes the optimizer as a parameter (the tracer's
 * loom_trace_optimizer_step, a binding). */
typedef enum loom_optimizer_kind {
  LOOM_OPTIMIZER_SGD,   /* loom_sgd */
  LOOM_OPTIMIZER_ADAM,  /* loom_adam */
  LOOM_OPTIMIZER_ADAMW, /* loom_adamw */
} loom_optimizer_kind_t;

/* An optimizer and its hyperparameters (the learning rate apart: it may
 * change every step). Fields of another kind are ignored. A versioned
 * struct (loom.h): loom_optimizer_init sets size. */
typedef struct loom_optimizer {
  size_t size;         /* sizeof(loom_optimizer_t): init sets it */
  loom_optimizer_kind_t kind;
  double momentum;     /* SGD */
  int nesterov;        /* SGD: 1 for Nesterov momentum */
  double beta1, beta2; /* Adam, AdamW */
  double eps;          /* Adam, AdamW */
  double weight_decay; /* every kind, with that kind's meaning above */
} loom_optimizer_t;

/* kind with torch.optim's defaults: SGD momentum 0, no Nesterov, no
 * decay; Adam betas (0.9, 0.999), eps 1e-8, no decay; AdamW the same with
 * weight_decay 0.01. size is the caller's sizeof(loom_optimizer_t); fails
 * on an unknown kind or an unset size. */
LOOM_API loom_status_t loom_optimizer_init_sized(loom_optimizer_t *o, loom_optimizer_kind_t kind,
                                                 size_t size);
#define loom_optimizer_init(o, kind) loom_optimizer_init_sized((o), (kind), sizeof *(o))

/* Appends the updates of the optimizer o describes: loom_sgd, loom_adam
 * or loom_adamw with o's hyperparameters. */
LOOM_API loom_status_t loom_optimizer_apply(loom_graph_t *g, const loom_optimizer_t *o,
                                            int n, const loom_value_t *params,
                                            const loom_value_t *grads, loom_value_t lr);

/* Gradient clipping by global L2 norm, as PyTorch's clip_grad_norm_:
 * norm = sqrt(sum over i of sum(grads[i]^2)),
 * out_grads[i] = grads[i] * min(1, max_norm / (norm + 1e-6)).
 * total_norm (may be NULL) receives the norm, a rank-0 value of grads[0]'s
 * dtype. max_norm must be > 0. */
LOOM_API loom_status_t loom_clip_grad_norm(loom_graph_t *g, int n,
                                           const loom_value_t *grads, double max_norm,
                                           loom_value_t *out_grads,
                                           loom_value_t *total_norm);

/* ---- Initializers ----------------------------------------------------------
 * Fill a tensor (a parameter's storage: loom_graph_param_tensor) in place,
 * deterministically: element i (row-major) is drawn from the Philox
 * stream (seed, offset 0) exactly as the random_uniform / random_normal
 * ops draw it, so a seed gives the same numbers everywhere. Float dtypes
 * only (zeros and ones: any dtype).
 *
 * Fans follow PyTorch: for a weight (out, in, k...) fan_in = in * prod(k),
 * fan_out = out * prod(k); they need rank >= 2. */

typedef enum loom_fan_mode { LOOM_FAN_IN, LOOM_FAN_OUT } loom_fan_mode_t;

LOOM_API loom_status_t loom_init_zeros(loom_tensor_t *t);
LOOM_API loom_status_t loom_init_ones(loom_tensor_t *t);
LOOM_API loom_status_t loom_init_normal(loom_tensor_t *t, uint64_t seed, double mean,
                                        double std);
/* Uniform in [low, high). */
LOOM_API loom_status_t loom_init_uniform(loom_tensor_t *t, uint64_t seed, double low,
                                         double high);
/* He initialization for a leaky ReLU of negative slope a (0: ReLU):
 * gain = sqrt(2 / (1 + a^2)), std = gain / sqrt(fan); uniform in
 * [-sqrt(3) * std, sqrt(3) * std), or normal(0, std). PyTorch's
 * nn.Linear and nn.Conv2d use kaiming_uniform with a = sqrt(5), fan in. */
LOOM_API loom_status_t loom_init_kaiming_uniform(loom_tensor_t *t, uint64_t seed,
                                                 double a, loom_fan_mode_t mode);
LOOM_API loom_status_t loom_init_kaiming_normal(loom_tensor_t *t, uint64_t seed,
                                                double a, loom_fan_mode_t mode);
/* Glorot initialization: uniform in +-gain * sqrt(6 / (fan_in + fan_out)),
 * or normal with std gain * sqrt(2 / (fan_in + fan_out)). */
LOOM_API loom_status_t loom_init_xavier_uniform(loom_tensor_t *t, uint64_t seed,
                                                double gain);
LOOM_API loom_status_t loom_init_xavier_normal(loom_tensor_t *t, uint64_t seed,
                                               double gain);

#ifdef __cplusplus
}
#endif

#endif
