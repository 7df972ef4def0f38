#include "train_step.h"

#include <string.h>

#include "bench_util.h"
#include "loom/train.h"

/* AdamW as torch.optim.AdamW's defaults, with lr 1e-3. */
static const double LR = 1e-3, BETA1 = 0.9, BETA2 = 0.999, EPS = 1e-8, DECAY = 0.01;

/* The configurations of issue 4 and ../shared/PEERS.md's training table. */
const train_model_t train_models[] = {
    {"mlp", 2, {64, 784}, 10},
    {"resnet18", 4, {8, 3, 64, 64}, 1000},
    {"transformer", 3, {8, 128, 256}, 10},
    {"vit", 4, {8, 3, 64, 64}, 10},
};
const int train_n_models = sizeof train_models / sizeof train_models[0];

const train_model_t *train_model_find(const char *name) {
  for (int i = 0; i < train_n_models; i++)
    if (!strcmp(train_models[i].name, name)) return &train_models[i];
  return NULL;
}

static loom_status_t build_forward(loom_graph_t *g, const train_model_t *m,
                                   loom_value_t *logits) {
  const int64_t *s = m->shape;
  if (!strcmp(m->name, "mlp")) return model_mlp(g, s[0], logits);
  if (!strcmp(m->name, "resnet18")) return model_resnet18(g, s[0], s[2], logits);
  if (!strcmp(m->name, "transformer")) return model_transformer_encoder(g, s[0], s[1], logits);
  return model_vit(g, s[0], s[2], 8, 192, 6, 3, m->classes, logits);
}

/* AdamW's update of p, its state split across comm's ranks. */
static loom_status_t zero_adamw(loom_graph_t *g, loom_comm_t *comm, model_params_t *p,
                                const loom_value_t *grads, loom_value_t lr) {
  loom_optimizer_t adamw;
  loom_data_parallel_options_t o;
  loom_status_t s = loom_optimizer_init(&adamw, LOOM_OPTIMIZER_ADAMW);
  if (s == LOOM_OK) s = loom_data_parallel_options_init(&o);
  if (s != LOOM_OK) return s;
  adamw.beta1 = BETA1, adamw.beta2 = BETA2, adamw.eps = EPS, adamw.weight_decay = DECAY;
  o.shard_optimizer_state = 1;
  return loom_data_parallel_step(g, comm, &adamw, p->n, p->v, grads, lr, &o);
}

loom_status_t train_build_step(loom_graph_t *g, const train_model_t *m, model_params_t *p,
                               loom_comm_t *comm, int zero) {
  loom_value_t logits, labels, lr, loss, grads[MODEL_MAX_PARAMS];
  model_train_begin(p);
  loom_status_t s = build_forward(g, m, &logits);
  model_train_end();
  if (s != LOOM_OK) return s;
  if ((s = loom_graph_input(g, "labels", LOOM_I64, 1, (loom_dim_t[]){m->shape[0]}, &labels)) ||
      (s = loom_graph_input(g, "lr", LOOM_F32, 0, NULL, &lr)) ||
      (s = loom_cross_entropy(g, logits, labels, LOOM_NO_IGNORE_INDEX, 0,
                              LOOM_REDUCTION_MEAN, &loss)) ||
      (s = loom_grad(g, loss, p->n, p->v, grads)))
    return s;
  if (comm && zero) s = zero_adamw(g, comm, p, grads, lr);
  else if ((!comm || (s = loom_data_parallel_grads(g, comm, p->n, grads, NULL, grads)) == LOOM_OK))
    s = loom_adamw(g, p->n, p->v, grads, lr, BETA1, BETA2, EPS, DECAY);
  if (s != LOOM_OK) return s;
  return loom_graph_output(g, loss);
}

void train_make_inputs(const train_model_t *m, loom_tensor_t **in) {
  int64_t batch = m->shape[0];
  float lr = (float)LR;
  in[0] = bench_input(m->rank, m->shape);
  BENCH_TRY(loom_tensor_create(LOOM_I64, 1, &batch, &in[1]));
  int64_t *labels = loom_tensor_data(in[1]);
  for (int64_t i = 0; i < batch; i++) labels[i] = i * 7 % m->classes;
  BENCH_TRY(loom_tensor_from_data(LOOM_F32, 0, NULL, &lr, sizeof lr, &in[2]));
}
