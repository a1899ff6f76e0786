/* trainer.c — training as a graph (include/kiln.h's kiln_trainer_*).
 *
 * A step's graph is the model's graph, rewritten for training and
 * extended:
 *   - the trainable initializers, BatchNormalization's running statistics
 *     and the optimizer's state become graph inputs (fed from the trainer's
 *     tables each step) and their updated values graph outputs, so one
 *     session runs forward, backward and update as one plan;
 *   - BatchNormalization runs in training mode (opset 15's training_mode:
 *     batch statistics, running statistics as extra outputs); Dropout
 *     becomes x * mask with the mask an input the trainer draws (values 0
 *     or 1 / (1 - ratio)) from its seeded generator, so a run is
 *     reproducible and a checkpoint holds the generator's state;
 *   - the loss on the chosen output against the input kiln.target, built
 *     from ops that have gradient rules (cross-entropy with ignore_index and
 *     label smoothing as LogSoftmax, a one-hot and means);
 *   - kiln_pass_autodiff for the trainable values, then global-norm
 *     clipping and the optimizer's update as ordinary nodes (PyTorch's SGD
 *     with momentum, Nesterov and weight decay; Adam with L2 weight decay;
 *     AdamW decoupled), the learning rate and Adam's bias corrections as
 *     scalar inputs the trainer computes from its schedule.
 * With grad_accum > 1 the step's graph outputs the gradients instead; the
 * trainer adds them up and every grad_accum micro-batches runs a second
 * graph with clipping and the update on their mean.
 *
 * Graphs need static shapes (the gradient rules reshape by them): one is
 * built per batch signature (input and target shapes; a last short batch
 * gets its own), at its first use. Which initializers are trainable is
 * found by the first build: every float initializer the loss reads, minus
 * `freeze` and the running statistics, that autodiff gives a gradient.
 */
#include "kiln.h"

#include "onnx/onnx.h"
#include "ops/gradient.h"
#include "passes/autodiff.h"
#include "passes/passes_opt.h"
#include "runtime/session.h"
#include "tensor/npy.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <sys/stat.h>

#define MAX_PLANS 4

typedef struct plan {
  bool used;
  int n_sig;
  int64_t sig[2 * KILN_MAX_RANK * 8]; /* the inputs' and target's dims, rank-prefixed */
  kiln_model *model;
  kiln_session *sess;
  int n_in;
  char **in_names; /* graph inputs of the step graph, in feed order */
  int n_out;
  char **out_names;
  /* State kept on the device (devices without host memory: the weights and
   * optimizer state a step updates stay there, runtime/session.h): each
   * pair's graph input and graph output value names; keeps once
   * kiln_session_keep_state took them (tried after the plan's first run). */
  int n_kept;
  char **kept_in, **kept_out;
  bool keep_tried, keeps;
} plan;

/* A named tensor table (owned names and references). */
typedef struct table {
  int n, cap;
  char **names;
  kiln_tensor **t;
} table;

struct kiln_trainer {
  kiln_trainer_options opt;
  char *output, *freeze; /* owned copies */
  kiln_model_ir *base;   /* the model's graph (constants shared with the model: read-only) */
  int opset;
  table weights;   /* every float initializer's current value */
  table state;     /* the optimizer's state, "<param>.<kind>" */
  table accum;     /* summed gradients while accumulating */
  table spare;     /* weights and state a step replaced, by name: the next step writes its outputs of
                      those names into them (kiln_session_run_into) instead of into fresh tensors */
  int n_params;
  char **params;   /* the trainable initializers (after the first build) */
  int n_stats;
  char **stats;    /* BatchNormalization's running statistics */
  int n_drop;
  float *drop_ratio; /* per Dropout node, in graph order */
  bool found;     /* params and stats known (find_trainables) */
  bool built;     /* the Dropout ratios known (the first step graph) */
  plan steps[MAX_PLANS], evals[MAX_PLANS], apply;
  /* The plan whose session holds the current values of its kept pairs on
   * the device (their host tensors are stale), or NULL: every host value
   * is current. sync_host makes them current again. */
  plan *on_device;
  int64_t updates, micro;
  uint64_t rng;
};

/* ---- small helpers --------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int table_find(const table *tb, const char *name) {
  for (int i = 0; i < tb->n; i++)
    if (!strcmp(tb->names[i], name)) return i;
  return -1;
}

/* Sets name to t (takes the reference). */
static kiln_status_t table_set(table *tb, const char *name, kiln_tensor *t) {
  int i = table_find(tb, name);
  if (i >= 0) {
    kiln_tensor_release(tb->t[i]);
    tb->t[i] = t;
    return NULL;
  }
  if (tb->n == tb->cap) {
    int cap = tb->cap ? 2 * tb->cap : 16;
    char **nn = realloc(tb->names, (size_t)cap * sizeof *nn);
    if (nn) tb->names = nn;
    kiln_tensor **nt = nn ? realloc(tb->t, (size_t)cap * sizeof *nt) : NULL;
    if (!nt) {
      kiln_tensor_release(t);
      return KILN_OOM();
    }
    tb->t = nt;
    tb->cap = cap;
  }
  tb->names[tb->n] = kiln_strdup(name);
  if (!tb->names[tb->n]) {
    kiln_tensor_release(t);
    return KILN_OOM();
  }
  tb->t[tb->n++] = t;
  return NULL;
}

/* Sets name to t (takes the reference) and returns the tensor it held
 * (the table's reference, now the caller's), or NULL. */
static kiln_status_t table_replace(table *tb, const char *name, kiln_tensor *t, kiln_tensor **old) {
  int i = table_find(tb, name);
  *old = i >= 0 ? tb->t[i] : NULL;
  if (i < 0) return table_set(tb, name, t);
  tb->t[i] = t;
  return NULL;
}

static void table_free(table *tb) {
  for (int i = 0; i < tb->n; i++) {
    free(tb->names[i]);
    kiln_tensor_release(tb->t[i]);
  }
  free(tb->names);
  free(tb->t);
  memset(tb, 0, sizeof *tb);
}

static void free_names(char **names, int n) {
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

static void plan_free(plan *p) {
  kiln_session_destroy(p->sess);
  kiln_model_destroy(p->model);
  free_names(p->in_names, p->n_in);
  free_names(p->out_names, p->n_out);
  free_names(p->kept_in, p->n_kept);
  free_names(p->kept_out, p->n_kept);
  memset(p, 0, sizeof *p);
}

kiln_trainer_options kiln_trainer_options_default(void) {
  kiln_trainer_options o;
  memset(&o, 0, sizeof o);
  o.loss = KILN_LOSS_MSE;
  o.optimizer = KILN_OPTIMIZER_SGD;
  o.lr = 0.01f;
  o.beta1 = 0.9f;
  o.beta2 = 0.999f;
  o.eps = 1e-8f;
  o.weight_decay = -1.0f;
  o.schedule = KILN_LR_CONSTANT;
  o.gamma = 0.1f;
  o.grad_accum = 1;
  return o;
}

static float weight_decay(const kiln_trainer_options *o) {
  if (o->weight_decay >= 0) return o->weight_decay;
  return o->optimizer == KILN_OPTIMIZER_ADAMW ? 0.01f : 0.0f; /* PyTorch's defaults */
}

double kiln_trainer_lr(const kiln_trainer *t) {
  const kiln_trainer_options *o = &t->opt;
  double step = (double)(t->updates + 1), lr = o->lr;
  switch (o->schedule) {
    case KILN_LR_STEP: return lr * pow(o->gamma, floor((step - 1) / (double)(o->step_every > 0 ? o->step_every : 1)));
    case KILN_LR_COSINE: {
      double total = (double)(o->total_steps > 0 ? o->total_steps : 1);
      double f = step - 1 < total ? (step - 1) / total : 1.0;
      return lr * 0.5 * (1 + cos(M_PI * f));
    }
    case KILN_LR_WARMUP:
      return o->warmup_steps > 0 && step < (double)o->warmup_steps ? lr * step / (double)o->warmup_steps : lr;
    default: return lr;
  }
}

int64_t kiln_trainer_updates(const kiln_trainer *t) { return t->updates; }
int64_t kiln_trainer_micro_batches(const kiln_trainer *t) { return t->micro; }

/* ---- create ------------------------------------------------------------------------ */

static int64_t model_opset(const kiln_model_ir *m) {
  for (int i = 0; i < m->n_opsets; i++)
    if (!m->opsets[i].domain[0] || !strcmp(m->opsets[i].domain, "ai.onnx")) return m->opsets[i].version;
  return 13;
}

static kiln_status_t clone_ir(const kiln_model_ir *src, kiln_model_ir **out) {
  kiln_model_ir *m = calloc(1, sizeof *m);
  if (!m) return KILN_OOM();
  m->ir_version = src->ir_version < 8 ? 8 : src->ir_version;
  m->n_opsets = src->n_opsets;
  m->opsets = calloc((size_t)src->n_opsets + 1, sizeof *m->opsets);
  kiln_status_t st = m->opsets ? NULL : KILN_OOM();
  for (int i = 0; !st && i < src->n_opsets; i++) {
    m->opsets[i].domain = kiln_strdup(src->opsets[i].domain);
    m->opsets[i].version = src->opsets[i].version;
    if (!m->opsets[i].domain) st = KILN_OOM();
  }
  if (!st) st = kiln_graph_clone(src->graph, NULL, &m->graph);
  if (!st && src->file) {
    kiln_keepalive_retain(src->file);
    m->file = src->file;
  }
  if (st) {
    kiln_model_ir_free(m);
    return st;
  }
  *out = m;
  return NULL;
}

kiln_status_t kiln_trainer_create(const kiln_model *model, const kiln_trainer_options *options, kiln_trainer **out) {
  if (!model || !out) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  *out = NULL;
  kiln_trainer_options o = options ? *options : kiln_trainer_options_default();
  if (o.loss < KILN_LOSS_MSE || o.loss > KILN_LOSS_BCE_WITH_LOGITS)
    return kiln_error(KILN_INVALID_ARGUMENT, "unknown loss %d", (int)o.loss);
  if (o.optimizer < KILN_OPTIMIZER_SGD || o.optimizer > KILN_OPTIMIZER_ADAMW)
    return kiln_error(KILN_INVALID_ARGUMENT, "unknown optimizer %d", (int)o.optimizer);
  if (!(o.lr > 0) || o.momentum < 0 || o.grad_accum < 1 || o.clip_norm < 0 || o.label_smoothing < 0 ||
      o.label_smoothing > 1 || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) || !(o.eps > 0))
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "options: lr must be > 0, momentum >= 0, grad_accum >= 1, clip_norm >= 0, label_smoothing in "
                      "[0, 1], beta1 and beta2 in [0, 1), eps > 0");
  if (o.nesterov && !(o.momentum > 0))
    return kiln_error(KILN_INVALID_ARGUMENT, "Nesterov momentum needs a momentum > 0");
  if (o.schedule == KILN_LR_STEP && (o.step_every < 1 || !(o.gamma > 0)))
    return kiln_error(KILN_INVALID_ARGUMENT, "the step schedule needs step_every >= 1 and gamma > 0");
  if (o.schedule == KILN_LR_WARMUP && o.warmup_steps < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "the warmup schedule needs warmup_steps >= 1");
  if (o.schedule == KILN_LR_COSINE && o.total_steps < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "the cosine schedule needs total_steps >= 1");
  if (o.freeze) {
    regex_t re;
    int rc = regcomp(&re, o.freeze, REG_EXTENDED | REG_NOSUB);
    if (rc) {
      char why[200];
      regerror(rc, &re, why, sizeof why);
      return kiln_error(KILN_INVALID_ARGUMENT, "freeze pattern '%s': %s", o.freeze, why);
    }
    regfree(&re);
  }
  kiln_trainer *t = calloc(1, sizeof *t);
  if (!t) return KILN_OOM();
  t->opt = o;
  t->output = o.output ? kiln_strdup(o.output) : NULL;
  t->freeze = o.freeze ? kiln_strdup(o.freeze) : NULL;
  t->opt.output = t->output;
  t->opt.freeze = t->freeze;
  t->rng = o.seed ^ 0x6b696c6e2d747261ull;
  kiln_status_t st = clone_ir(model->ir, &t->base);
  if (!st) t->opset = (int)model_opset(t->base);
  const kiln_graph *g = st ? NULL : t->base->graph;
  if (!st && t->output && kiln_graph_find_value(g, t->output) < 0)
    st = kiln_error(KILN_INVALID_ARGUMENT, "--output '%s' is no value of the model", t->output);
  if (!st && !t->output && g->n_outputs < 1) st = kiln_error(KILN_INVALID_MODEL, "the model has no outputs");
  for (int v = 0; !st && g && v < g->n_values; v++) {
    const kiln_value_def *d = &g->values[v];
    if (!d->constant || d->is_graph_input || !kiln_dtype_is_float(d->constant->dtype)) continue;
    kiln_tensor *copy;
    st = kiln_tensor_clone(d->constant, &copy);
    if (!st) st = table_set(&t->weights, d->name, copy);
  }
  if (st) {
    kiln_trainer_destroy(t);
    return st;
  }
  *out = t;
  return NULL;
}

void kiln_trainer_destroy(kiln_trainer *t) {
  if (!t) return;
  for (int i = 0; i < MAX_PLANS; i++) {
    plan_free(&t->steps[i]);
    plan_free(&t->evals[i]);
  }
  plan_free(&t->apply);
  table_free(&t->weights);
  table_free(&t->spare);
  table_free(&t->state);
  table_free(&t->accum);
  free_names(t->params, t->n_params);
  free_names(t->stats, t->n_stats);
  free(t->drop_ratio);
  kiln_model_ir_free(t->base);
  free(t->output);
  free(t->freeze);
  free(t);
}

/* ---- building a graph ---------------------------------------------------------------- */

typedef enum { GRAPH_STEP, GRAPH_EVAL, GRAPH_APPLY } graph_kind;

/* The state tensors an optimizer keeps per parameter. */
static int state_kinds(kiln_optimizer o, const char **kinds, float momentum) {
  if (o == KILN_OPTIMIZER_SGD) {
    if (!(momentum > 0)) return 0;
    kinds[0] = "momentum";
    return 1;
  }
  kinds[0] = "adam_m";
  kinds[1] = "adam_v";
  return 2;
}

/* A graph input named `name` of type `type`: an existing value (made a graph input, its constant dropped) or a new one. */
static kiln_status_t make_input(kiln_graph *g, const char *name, const kiln_type *type, int *out) {
  int v = kiln_graph_find_value(g, name);
  if (v < 0) {
    KILN_TRY(kiln_graph_add_value(g, name, &v));
    kiln_type_copy(&g->values[v].type, type);
  } else {
    kiln_tensor_release(g->values[v].constant);
    g->values[v].constant = NULL;
    kiln_tensor_release(g->values[v].known_value);
    g->values[v].known_value = NULL;
    if (g->values[v].is_graph_input) {
      *out = v;
      return NULL;
    }
  }
  *out = v;
  return kiln_graph_add_input(g, v);
}

static void tensor_type(const kiln_tensor *x, kiln_type *t) {
  memset(t, 0, sizeof *t);
  kiln_type_init_tensor(t, x->dtype, x->rank, x->dims);
}

/* v's value when it is an initializer or a Constant node's tensor; else NULL. */
static const kiln_tensor *constant_of(const kiln_graph *g, int v) {
  const kiln_tensor *t = kiln_opt_const(g, v);
  if (t || g->values[v].producer < 0) return t;
  const kiln_node *n = &g->nodes[g->values[v].producer];
  if (strcmp(n->op_type, "Constant") || n->domain[0]) return NULL;
  const kiln_attr *a = kiln_node_attr(n, "value");
  return a && a->type == KILN_ATTR_TENSOR ? a->t : NULL;
}

/* Whether a node reads v or v is a graph output. */
static bool value_read(const kiln_graph *g, int v) {
  if (g->values[v].is_graph_output) return true;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] == v) return true;
  return false;
}

/* A training-mode export's BatchNormalization node i in inference mode: training_mode 0, its running
 * statistics' outputs dropped when nothing reads them. */
static kiln_status_t bn_inference(kiln_graph *g, int i) {
  kiln_node *n = &g->nodes[i];
  /* training mode: the attribute (opset 14+), or before 14 the extra outputs (a PyTorch training-mode export
   * at opset 13 has five) */
  if (!kiln_attr_int(n, "training_mode", 0) && n->n_outputs <= 1) return NULL;
  if (kiln_node_attr(n, "training_mode")) KILN_TRY(kiln_opt_set_attr_int(n, "training_mode", 0));
  bool unread = true;
  for (int k = 1; k < n->n_outputs; k++) unread &= n->outputs[k] < 0 || !value_read(g, n->outputs[k]);
  if (!unread) return kiln_error(KILN_UNSUPPORTED, "node '%s' (BatchNormalization): the model reads its running statistics", n->name);
  for (int k = 1; k < n->n_outputs; k++)
    if (n->outputs[k] >= 0) g->values[n->outputs[k]].producer = -1;
  n->n_outputs = 1;
  return NULL;
}

/* BatchNormalization to training mode (running statistics as outputs 1, 2), Dropout to x * mask; for
 * evaluation (training false), both in inference mode. */
static kiln_status_t training_rewrites(kiln_graph *g, bool training, int *n_drop, float *ratios) {
  *n_drop = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    if (n->domain[0]) continue;
    if (!strcmp(n->op_type, "BatchNormalization") && !training) {
      KILN_TRY(bn_inference(g, i));
    } else if (!strcmp(n->op_type, "BatchNormalization")) {
      if (n->n_inputs < 5 || n->inputs[3] < 0 || n->inputs[4] < 0)
        return kiln_error(KILN_INVALID_MODEL, "node '%s' (BatchNormalization): 5 inputs expected", n->name);
      KILN_TRY(kiln_opt_set_attr_int(n, "training_mode", 1));
      if (n->opset < 15) n->opset = 15;
      int outs[3] = {n->outputs[0], -1, -1};
      for (int k = 1; k < 3; k++) {
        char name[400];
        snprintf(name, sizeof name, "%s.new", g->values[n->inputs[2 + k]].name);
        if (k < n->n_outputs && n->outputs[k] >= 0) { /* a training-mode export: its outputs, if nothing reads them */
          if (value_read(g, n->outputs[k]))
            return kiln_error(KILN_UNSUPPORTED, "node '%s' (BatchNormalization): the model reads its running statistics",
                              n->name);
          outs[k] = n->outputs[k];
          n = &g->nodes[i];
          continue;
        }
        KILN_TRY(kiln_graph_add_value(g, name, &outs[k]));
        kiln_type_copy(&g->values[outs[k]].type, &g->values[n->inputs[2 + k]].type);
        g->values[outs[k]].producer = i;
      }
      int *no = realloc(n->outputs, 3 * sizeof *no);
      if (!no) return KILN_OOM();
      memcpy(no, outs, sizeof outs);
      n->outputs = no;
      n->n_outputs = 3;
    } else if (!strcmp(n->op_type, "Dropout")) {
      if (n->n_outputs > 1 && n->outputs[1] >= 0) { /* a training-mode export's mask: fine if nothing reads it */
        if (value_read(g, n->outputs[1]))
          return kiln_error(KILN_UNSUPPORTED, "node '%s' (Dropout): the model reads its mask", n->name);
        g->values[n->outputs[1]].producer = -1;
      }
      double ratio = kiln_attr_float(n, "ratio", 0.5f);
      if (n->opset >= 12 && n->n_inputs > 1 && n->inputs[1] >= 0) {
        const kiln_tensor *r = constant_of(g, n->inputs[1]);
        if (!r || r->numel != 1)
          return kiln_error(KILN_UNSUPPORTED, "node '%s' (Dropout): its ratio must be a constant to train", n->name);
        ratio = kiln_load_f64(r->data, r->dtype, 0);
      }
      if (!(ratio >= 0 && ratio < 1))
        return kiln_error(KILN_INVALID_MODEL, "node '%s' (Dropout): ratio %g, expected in [0, 1)", n->name, ratio);
      int x = n->inputs[0], y = n->outputs[0];
      if (!training || ratio == 0) {
        KILN_TRY(kiln_opt_rewrite_node(g, i, "Identity", "", n->opset, 1, &x, 1, &y));
        continue;
      }
      char name[64];
      snprintf(name, sizeof name, "kiln.dropout_mask.%d", *n_drop);
      int mask;
      KILN_TRY(make_input(g, name, &g->values[x].type, &mask));
      int ins[2] = {x, mask};
      KILN_TRY(kiln_opt_rewrite_node(g, i, "Mul", "", n->opset, 2, ins, 1, &y));
      if (ratios) ratios[*n_drop] = (float)ratio;
      (*n_drop)++;
    }
  }
  return NULL;
}

/* Dropout's mask inputs take the shape of what they multiply, known once
 * the batch's shapes are inferred (the rewrite saw the model's symbolic
 * ones); the types are inferred again with them. */
static kiln_status_t mask_shapes(kiln_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "Mul") || n->n_inputs != 2 || n->inputs[1] < 0) continue;
    kiln_value_def *m = &g->values[n->inputs[1]];
    if (strncmp(m->name, "kiln.dropout_mask.", 18) || !m->is_graph_input) continue;
    kiln_type_copy(&m->type, &g->values[n->inputs[0]].type);
  }
  return kiln_run_pass(g, "infer-types", kiln_pass_infer_types);
}

/* The loss on y against the target, a scalar. */
static int build_loss(kiln_trainer *t, kiln_gradient_ctx *c, int y, int target) {
  const kiln_trainer_options *o = &t->opt;
  const kiln_type *ty = kiln_grad_type(c, y);
  kiln_dtype dt = ty->dtype;
  int r = ty->rank;
  int64_t ydims[KILN_MAX_RANK];
  memcpy(ydims, ty->dims, sizeof(int64_t) * (size_t)r);
  kiln_grad_attr keep0 = KILN_GRAD_INT("keepdims", 0);
  if (o->loss == KILN_LOSS_MSE || o->loss == KILN_LOSS_L1 || o->loss == KILN_LOSS_BCE_WITH_LOGITS) {
    int e;
    if (o->loss == KILN_LOSS_BCE_WITH_LOGITS) { /* max(y, 0) - y t + log(1 + exp(-|y|)) */
      int ny = kiln_grad_op1(c, "Neg", kiln_grad_op1(c, "Abs", y));
      e = kiln_grad_op2(c, "Add", kiln_grad_op2(c, "Sub", kiln_grad_op1(c, "Relu", y), kiln_grad_op2(c, "Mul", y, target)),
                        kiln_grad_op1(c, "Softplus", ny));
    } else {
      int diff = kiln_grad_op2(c, "Sub", y, target);
      e = o->loss == KILN_LOSS_MSE ? kiln_grad_op2(c, "Mul", diff, diff) : kiln_grad_op1(c, "Abs", diff);
    }
    return kiln_grad_op(c, "ReduceMean", 1, &e, 1, &keep0);
  }
  /* cross_entropy / nll over axis 1: per element -(1 - s) logp[t] - s mean(logp), the mean over targets not ignored */
  if (r < 2) return kiln_grad_fail(c, "the output has rank %d; cross_entropy and nll need [N, C, ...]", r);
  int logp = y;
  if (o->loss == KILN_LOSS_CROSS_ENTROPY) {
    kiln_grad_attr ax = KILN_GRAD_INT("axis", 1);
    int out = -1;
    logp = kiln_grad_op_ex(c, "LogSoftmax", c->opset > 13 ? c->opset : 13, 1, &y, 1, &out, 1, &ax);
  }
  int64_t ch = ydims[1], ldims[KILN_MAX_RANK], cdims[KILN_MAX_RANK];
  for (int i = 0; i < r; i++) ldims[i] = i == 1 ? 1 : ydims[i], cdims[i] = i == 1 ? ch : 1;
  kiln_dtype ldt = kiln_grad_type(c, target)->dtype;
  int lab = kiln_grad_op2(c, "Reshape", target, kiln_grad_ints(c, r, ldims));
  kiln_tensor *classes;
  kiln_status_t st = kiln_tensor_new(ldt, r, cdims, &classes);
  if (st) {
    c->status = st;
    return -1;
  }
  for (int64_t k = 0; k < ch; k++) kiln_store_f64(classes->data, ldt, k, (double)k);
  int cls = -1;
  if ((st = kiln_opt_new_const(c->g, "train/classes", classes, &cls))) {
    c->status = st;
    return -1;
  }
  kiln_grad_attr to = KILN_GRAD_INT("to", dt);
  int eq = kiln_grad_op2(c, "Equal", lab, cls);
  int onehot = kiln_grad_op(c, "Cast", 1, &eq, 1, &to);
  int64_t one = 1;
  int picked = kiln_grad_reduce_sum(c, kiln_grad_op2(c, "Mul", onehot, logp), 1, &one, false);
  double s = o->loss == KILN_LOSS_CROSS_ENTROPY ? o->label_smoothing : 0.0;
  int per = kiln_grad_op2(c, "Mul", picked, kiln_grad_scalar(c, dt, -(1.0 - s)));
  if (s > 0) {
    int mean = kiln_grad_reduce_mean(c, logp, 1, &one, false);
    per = kiln_grad_op2(c, "Sub", per, kiln_grad_op2(c, "Mul", mean, kiln_grad_scalar(c, dt, s)));
  }
  if (!o->has_ignore_index) return kiln_grad_op(c, "ReduceMean", 1, &per, 1, &keep0);
  int valid = kiln_grad_op1(c, "Not", kiln_grad_op2(c, "Equal", target, kiln_grad_scalar(c, ldt, (double)o->ignore_index)));
  int w = kiln_grad_op(c, "Cast", 1, &valid, 1, &to);
  int total = kiln_grad_op(c, "ReduceSum", 1, &w, 1, &keep0);
  int masked = kiln_grad_op(c, "ReduceSum", 1, (int[]){kiln_grad_op2(c, "Mul", per, w)}, 1, &keep0);
  return kiln_grad_op2(c, "Div", masked, total);
}

/* The loss on output y (a float tensor of static shape) into *out. */
static kiln_status_t add_loss(kiln_trainer *t, kiln_gradient_ctx *c, int y, int target, int *out) {
  const kiln_type *yt = &c->g->values[y].type;
  if (!kiln_opt_shape_known(yt) || !kiln_dtype_is_float(yt->dtype))
    return kiln_error(KILN_UNSUPPORTED, "output '%s': a float tensor of static shape is needed for the loss",
                      c->g->values[y].name);
  *out = build_loss(t, c, y, target);
  kiln_status_t st = c->status;
  c->status = NULL;
  return st;
}

/* Class targets (cross_entropy, nll) given as int64 enter the step as
 * int32 (feed converts them, range-checked): the one-hot's Reshape and
 * Equal then compile on a device whose kernels read no int64 (the GLSL
 * dialect), where they would run on ref. */
static bool int32_classes(const kiln_trainer *t, const kiln_tensor *target) {
  const kiln_trainer_options *o = &t->opt;
  return (o->loss == KILN_LOSS_CROSS_ENTROPY || o->loss == KILN_LOSS_NLL) && target->dtype == KILN_DTYPE_I64 &&
         (!o->has_ignore_index || (o->ignore_index >= INT32_MIN && o->ignore_index <= INT32_MAX));
}

/* The batch's shapes on g's inputs, the targets as the input kiln.target; *y: the loss's output. */
static kiln_status_t bind_batch(const kiln_trainer *t, kiln_graph *g, int n_in, const char *const *names,
                                const kiln_tensor *const *inputs, const kiln_tensor *target, int *y, int *tgt) {
  for (int i = 0; i < n_in; i++) {
    int v = kiln_graph_find_value(g, names[i]);
    if (v < 0 || !g->values[v].is_graph_input)
      return kiln_error(KILN_INVALID_ARGUMENT, "the model has no input '%s'", names[i]);
    kiln_type_clear(&g->values[v].type);
    kiln_type_init_tensor(&g->values[v].type, inputs[i]->dtype, inputs[i]->rank, inputs[i]->dims);
  }
  *y = t->output ? kiln_graph_find_value(g, t->output) : g->outputs[0];
  kiln_type tt;
  tensor_type(target, &tt);
  if (int32_classes(t, target)) tt.dtype = KILN_DTYPE_I32;
  kiln_status_t st = make_input(g, "kiln.target", &tt, tgt);
  kiln_type_clear(&tt);
  return st;
}

/* Clipping and the optimizer's update of params[k] by grads[k]; the new values into new_params and new_state
 * (state kinds per parameter: state_kinds). lr, bc1, bc2: scalar inputs. */
static void build_update(kiln_trainer *t, kiln_gradient_ctx *c, int n, const int *params, int *grads, const int *state,
                         int lr, int bc1, int bc2, int *new_params, int *new_state) {
  const kiln_trainer_options *o = &t->opt;
  const char *kinds[2];
  int ns = state_kinds(o->optimizer, kinds, o->momentum);
  float wd = weight_decay(o);
  if (o->clip_norm > 0 && n > 0) { /* PyTorch's clip_grad_norm_: coef = min(1, max_norm / (norm + 1e-6)) */
    kiln_grad_attr keep0 = KILN_GRAD_INT("keepdims", 0);
    int sum = -1;
    for (int k = 0; k < n; k++) {
      int sq = kiln_grad_op(c, "ReduceSumSquare", 1, &grads[k], 1, &keep0);
      sum = sum < 0 ? sq : kiln_grad_op2(c, "Add", sum, sq);
    }
    kiln_dtype dt = kiln_grad_type(c, sum)->dtype;
    int norm = kiln_grad_op1(c, "Sqrt", sum);
    int coef = kiln_grad_op2(c, "Div", kiln_grad_scalar(c, dt, o->clip_norm),
                             kiln_grad_op2(c, "Add", norm, kiln_grad_scalar(c, dt, 1e-6)));
    coef = kiln_grad_op2(c, "Min", coef, kiln_grad_scalar(c, dt, 1.0));
    for (int k = 0; k < n; k++) grads[k] = kiln_grad_op2(c, "Mul", grads[k], coef);
  }
  for (int k = 0; k < n && !c->status; k++) {
    int p = params[k], g = grads[k];
    kiln_dtype dt = kiln_grad_type(c, p)->dtype;
    int lr_p = kiln_grad_op(c, "Cast", 1, &lr, 1, (kiln_grad_attr[]){KILN_GRAD_INT("to", dt)});
    if (o->optimizer == KILN_OPTIMIZER_SGD) {
      if (wd > 0) g = kiln_grad_op2(c, "Add", g, kiln_grad_op2(c, "Mul", p, kiln_grad_scalar(c, dt, wd)));
      int u = g;
      if (ns) {
        int v = kiln_grad_op2(c, "Add", kiln_grad_op2(c, "Mul", state[k * ns], kiln_grad_scalar(c, dt, o->momentum)), g);
        new_state[k * ns] = v;
        u = o->nesterov ? kiln_grad_op2(c, "Add", g, kiln_grad_op2(c, "Mul", v, kiln_grad_scalar(c, dt, o->momentum))) : v;
      }
      new_params[k] = kiln_grad_op2(c, "Sub", p, kiln_grad_op2(c, "Mul", u, lr_p));
      continue;
    }
    int pd = p;
    if (o->optimizer == KILN_OPTIMIZER_ADAM && wd > 0)
      g = kiln_grad_op2(c, "Add", g, kiln_grad_op2(c, "Mul", p, kiln_grad_scalar(c, dt, wd)));
    if (o->optimizer == KILN_OPTIMIZER_ADAMW && wd > 0) /* decoupled: p (1 - lr wd) first */
      pd = kiln_grad_op2(c, "Sub", p, kiln_grad_op2(c, "Mul", p, kiln_grad_op2(c, "Mul", lr_p, kiln_grad_scalar(c, dt, wd))));
    int m = kiln_grad_op2(c, "Add", kiln_grad_op2(c, "Mul", state[k * ns], kiln_grad_scalar(c, dt, o->beta1)),
                          kiln_grad_op2(c, "Mul", g, kiln_grad_scalar(c, dt, 1.0 - o->beta1)));
    int v = kiln_grad_op2(c, "Add", kiln_grad_op2(c, "Mul", state[k * ns + 1], kiln_grad_scalar(c, dt, o->beta2)),
                          kiln_grad_op2(c, "Mul", kiln_grad_op2(c, "Mul", g, g), kiln_grad_scalar(c, dt, 1.0 - o->beta2)));
    new_state[k * ns] = m;
    new_state[k * ns + 1] = v;
    int b1 = kiln_grad_op(c, "Cast", 1, &bc1, 1, (kiln_grad_attr[]){KILN_GRAD_INT("to", dt)});
    int b2 = kiln_grad_op(c, "Cast", 1, &bc2, 1, (kiln_grad_attr[]){KILN_GRAD_INT("to", dt)});
    int den = kiln_grad_op2(c, "Add", kiln_grad_op1(c, "Sqrt", kiln_grad_op2(c, "Div", v, b2)), kiln_grad_scalar(c, dt, o->eps));
    int stepv = kiln_grad_op2(c, "Div", kiln_grad_op2(c, "Div", m, b1), den);
    new_params[k] = kiln_grad_op2(c, "Sub", pd, kiln_grad_op2(c, "Mul", stepv, lr_p));
  }
}

/* A scalar f64 graph input. */
static kiln_status_t scalar_input(kiln_graph *g, const char *name, int *out) {
  kiln_type ty = {0};
  kiln_type_init_tensor(&ty, KILN_DTYPE_F32, 0, NULL); /* scalar() feeds it */
  kiln_status_t st = make_input(g, name, &ty, out);
  kiln_type_clear(&ty);
  return st;
}

/* v as the next graph output, its feed-back name (the table entry it updates) appended to names. */
static kiln_status_t add_output(kiln_graph *g, int v, const char *name, char ***names, int *n) {
  KILN_TRY(kiln_graph_add_output(g, v));
  char **nn = realloc(*names, (size_t)(*n + 1) * sizeof *nn);
  if (!nn) return KILN_OOM();
  *names = nn;
  nn[*n] = kiln_strdup(name);
  if (!nn[*n]) return KILN_OOM();
  (*n)++;
  return NULL;
}

/* Renames value v (a new name for a graph output). */
static kiln_status_t rename_value(kiln_graph *g, int v, const char *name) {
  char *s = kiln_strdup(name);
  if (!s) return KILN_OOM();
  free(g->values[v].name);
  g->values[v].name = s;
  kiln_graph_names_changed(g);
  return NULL;
}

static bool frozen(const kiln_trainer *t, const char *name) {
  if (!t->freeze) return false;
  regex_t re;
  if (regcomp(&re, t->freeze, REG_EXTENDED | REG_NOSUB)) return false;
  bool m = regexec(&re, name, 0, NULL, 0) == 0;
  regfree(&re);
  return m;
}

/* Builds the graph of `kind` for the given batch (NULL for APPLY) into p. */
static kiln_status_t build(kiln_trainer *t, graph_kind kind, int n_in, const char *const *names,
                           const kiln_tensor *const *inputs, const kiln_tensor *target, plan *p) {
  kiln_model_ir *ir = NULL;
  KILN_TRY(clone_ir(t->base, &ir));
  kiln_graph *g = ir->graph;
  kiln_gradient_ctx c = {.g = g, .node = -1, .opset = t->opset};
  int *params = NULL, *grads = NULL, *state = NULL, *new_params = NULL, *new_state = NULL, *wrt = NULL;
  char **cand = NULL;
  int n_cand = 0, loss = -1, y = -1, tgt = -1;
  const char *kinds[2];
  int ns = state_kinds(t->opt.optimizer, kinds, t->opt.momentum);
  kiln_status_t st = NULL;
  int out_count = 0;
  char **out_names = NULL;
  if (kind == GRAPH_APPLY) {
    /* parameters, state and (mean) gradients in, the updates out: a graph of its own */
    for (int i = g->n_outputs - 1; i >= 0; i--) g->values[g->outputs[i]].is_graph_output = false;
    g->n_outputs = 0;
    for (int i = 0; i < g->n_inputs; i++) g->values[g->inputs[i]].is_graph_input = false;
    g->n_inputs = 0;
    for (int i = 0; i < g->n_nodes; i++) kiln_node_clear(&g->nodes[i]);
    g->n_nodes = 0;
    for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
  }
  /* 1. the batch's shapes */
  if (!st && kind != GRAPH_APPLY) st = bind_batch(t, g, n_in, names, inputs, target, &y, &tgt);
  /* 2. training mode */
  int n_drop = 0;
  float *ratios = calloc((size_t)g->n_nodes + 1, sizeof *ratios);
  if (!st && !ratios) st = KILN_OOM();
  if (!st && kind != GRAPH_APPLY) st = training_rewrites(g, kind == GRAPH_STEP, &n_drop, ratios);
  if (!st && kind == GRAPH_STEP && !t->built) {
    free(t->drop_ratio);
    t->drop_ratio = ratios;
    t->n_drop = n_drop;
    ratios = NULL;
  }
  free(ratios);
  /* 3. the trainable initializers and the running statistics become inputs */
  cand = calloc((size_t)t->n_params + 1, sizeof *cand);
  if (!st && !cand) st = KILN_OOM();
  for (int k = 0; cand && k < t->n_params; k++) cand[n_cand++] = t->params[k];
  int nv_alloc = n_cand + 1;
  params = calloc((size_t)nv_alloc, sizeof *params);
  grads = calloc((size_t)nv_alloc, sizeof *grads);
  wrt = calloc((size_t)nv_alloc, sizeof *wrt);
  state = calloc((size_t)nv_alloc * 2, sizeof *state);
  new_params = calloc((size_t)nv_alloc, sizeof *new_params);
  new_state = calloc((size_t)nv_alloc * 2, sizeof *new_state);
  if (!st && (!params || !grads || !wrt || !state || !new_params || !new_state)) st = KILN_OOM();
  for (int k = 0; !st && k < n_cand; k++) {
    int wi = table_find(&t->weights, cand[k]);
    kiln_type ty;
    tensor_type(t->weights.t[wi], &ty);
    st = make_input(g, cand[k], &ty, &params[k]);
    kiln_type_clear(&ty);
  }
  for (int k = 0; !st && kind != GRAPH_APPLY && k < t->n_stats; k++) {
    int wi = table_find(&t->weights, t->stats[k]), v;
    kiln_type ty;
    tensor_type(t->weights.t[wi], &ty);
    st = make_input(g, t->stats[k], &ty, &v);
    kiln_type_clear(&ty);
  }
  if (!st && kind != GRAPH_APPLY) {
    st = kiln_run_pass(g, "resolve-ops", kiln_pass_resolve_ops);
    if (!st) st = kiln_graph_toposort(g);
    if (!st) st = kiln_run_pass(g, "infer-types", kiln_pass_infer_types);
    if (!st && n_drop) st = mask_shapes(g);
  }
  /* 4. the loss, the gradients, the update */
  if (!st && kind != GRAPH_APPLY) st = add_loss(t, &c, y, tgt, &loss);
  if (!st && kind == GRAPH_STEP) {
    for (int k = 0; k < n_cand; k++) wrt[k] = params[k];
    st = kiln_pass_autodiff(g, t->opset, loss, n_cand, wrt, grads);
    for (int k = 0; !st && k < n_cand; k++)
      if (grads[k] < 0) st = kiln_error(KILN_INTERNAL, "no gradient for the trainable value '%s'", cand[k]);
  }
  if (!st && kind == GRAPH_APPLY) {
    for (int k = 0; !st && k < n_cand; k++) {
      char name[400];
      snprintf(name, sizeof name, "%s.grad", cand[k]);
      kiln_type ty = {0};
      kiln_type_copy(&ty, &g->values[params[k]].type);
      st = make_input(g, name, &ty, &grads[k]);
      kiln_type_clear(&ty);
    }
  }
  bool update = kind == GRAPH_APPLY || (kind == GRAPH_STEP && t->opt.grad_accum == 1);
  int lr = -1, bc1 = -1, bc2 = -1;
  if (!st && update) {
    st = scalar_input(g, "kiln.lr", &lr);
    if (!st && ns == 2) st = scalar_input(g, "kiln.adam_bc1", &bc1);
    if (!st && ns == 2) st = scalar_input(g, "kiln.adam_bc2", &bc2);
    for (int k = 0; !st && k < n_cand; k++)
      for (int s = 0; !st && s < ns; s++) {
        char name[400];
        snprintf(name, sizeof name, "%s.%s", g->values[params[k]].name, kinds[s]);
        kiln_type ty = {0};
        kiln_type_copy(&ty, &g->values[params[k]].type);
        st = make_input(g, name, &ty, &state[k * ns + s]);
        kiln_type_clear(&ty);
      }
    if (!st) {
      build_update(t, &c, n_cand, params, grads, state, lr, bc1, bc2, new_params, new_state);
      st = c.status;
      c.status = NULL;
    }
  }
  /* 5. the outputs: the loss (and the model's output when evaluating), then what the step updates */
  if (!st) {
    for (int i = 0; i < g->n_outputs; i++) g->values[g->outputs[i]].is_graph_output = false;
    g->n_outputs = 0;
  }
  if (!st && kind != GRAPH_APPLY) {
    st = rename_value(g, loss, "kiln.loss");
    if (!st) st = add_output(g, loss, "kiln.loss", &out_names, &out_count);
    if (!st && kind == GRAPH_EVAL) {
      st = add_output(g, y, g->values[y].name, &out_names, &out_count);
    }
  }
  for (int k = 0; !st && update && k < n_cand; k++) {
    char name[400];
    snprintf(name, sizeof name, "%s", g->values[params[k]].name);
    st = add_output(g, new_params[k], name, &out_names, &out_count);
    for (int s = 0; !st && s < ns; s++) {
      snprintf(name, sizeof name, "%s.%s", g->values[params[k]].name, kinds[s]);
      st = add_output(g, new_state[k * ns + s], name, &out_names, &out_count);
    }
  }
  for (int k = 0; !st && kind == GRAPH_STEP && !update && k < n_cand; k++) {
    if (grads[k] < 0) continue;
    char name[400];
    snprintf(name, sizeof name, "%s.grad", g->values[params[k]].name);
    st = add_output(g, grads[k], name, &out_names, &out_count);
  }
  for (int i = 0; !st && kind == GRAPH_STEP && i < g->n_nodes; i++) { /* BatchNormalization's new running statistics */
    const kiln_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "BatchNormalization") || n->domain[0] || n->n_outputs < 3) continue;
    for (int k = 1; !st && k < 3; k++) {
      st = add_output(g, n->outputs[k], g->values[n->inputs[2 + k]].name, &out_names, &out_count);
    }
  }
  /* 6. a model and a session for it */
  if (!st) {
    p->n_in = g->n_inputs;
    p->in_names = calloc((size_t)g->n_inputs + 1, sizeof *p->in_names);
    if (!p->in_names) st = KILN_OOM();
    for (int i = 0; !st && i < g->n_inputs; i++)
      if (!(p->in_names[i] = kiln_strdup(g->values[g->inputs[i]].name))) st = KILN_OOM();
    p->out_names = out_names;
    p->n_out = out_count;
    out_names = NULL;
    out_count = 0;
  }
  /* The pairs a device may keep: an output of the name of a graph input
   * (a weight, a running statistic or the optimizer's state it updates). */
  if (!st) {
    p->kept_in = calloc((size_t)p->n_out + 1, sizeof *p->kept_in);
    p->kept_out = calloc((size_t)p->n_out + 1, sizeof *p->kept_out);
    if (!p->kept_in || !p->kept_out) st = KILN_OOM();
    for (int k = 0; !st && k < p->n_out; k++) {
      int in = kiln_graph_find_value(g, p->out_names[k]);
      if (in < 0 || !g->values[in].is_graph_input) continue;
      p->kept_in[p->n_kept] = kiln_strdup(p->out_names[k]);
      p->kept_out[p->n_kept] = kiln_strdup(g->values[g->outputs[k]].name);
      if (!p->kept_in[p->n_kept] || !p->kept_out[p->n_kept]) st = KILN_OOM();
      p->n_kept++;
    }
  }
  /* A debugging aid (docs/TRAINING.md): the step graph as an ONNX file, for
   * `kiln bench --profile` or `kiln info` on it. */
  const char *save = getenv("KILN_TRAIN_SAVE_GRAPH");
  if (!st && save && *save && kind == GRAPH_STEP) st = kiln_onnx_save_file(ir, save);
  if (!st) {
    st = kiln_model_from_ir(ir, &p->model);
    ir = NULL;
  }
  if (!st) {
    kiln_session_options so = kiln_session_options_default();
    so.device = t->opt.device;
    so.threads = t->opt.threads;
    st = kiln_session_create(p->model, &so, &p->sess);
  }
  if (!st && kind == GRAPH_STEP) t->built = true;
  free_names(out_names, out_count);
  kiln_model_ir_free(ir);
  free(cand);
  free(params);
  free(grads);
  free(wrt);
  free(state);
  free(new_params);
  free(new_state);
  if (st) plan_free(p);
  return st;
}

/* Which float initializers are trainable: a probe graph (the weights still
 * constants) differentiated with respect to every candidate (not a running
 * statistic, not frozen); those autodiff gives a gradient. A float
 * initializer the loss reads only where no gradient flows (Resize's scales,
 * Clip's bounds, a loss's class weights) is not trainable. */
static kiln_status_t find_trainables(kiln_trainer *t, int n_in, const char *const *names, const kiln_tensor *const *inputs,
                                     const kiln_tensor *target) {
  kiln_model_ir *ir = NULL;
  KILN_TRY(clone_ir(t->base, &ir));
  kiln_graph *g = ir->graph;
  kiln_gradient_ctx c = {.g = g, .node = -1, .opset = t->opset};
  kiln_status_t st = NULL;
  int tgt = -1, n_drop = 0, n_cand = 0;
  int y = -1;
  st = bind_batch(t, g, n_in, names, inputs, target, &y, &tgt);
  float *ratios = calloc((size_t)g->n_nodes + 1, sizeof *ratios);
  if (!st && !ratios) st = KILN_OOM();
  bool *is_stat = calloc((size_t)g->n_values + 1, 1);
  int *wrt = calloc((size_t)t->weights.n + 1, sizeof *wrt), *grads = calloc((size_t)t->weights.n + 1, sizeof *grads);
  const char **cand = calloc((size_t)t->weights.n + 1, sizeof *cand);
  if (!st && (!is_stat || !wrt || !grads || !cand)) st = KILN_OOM();
  for (int i = 0; !st && i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].op_type, "BatchNormalization") && !g->nodes[i].domain[0] && g->nodes[i].n_inputs >= 5)
      for (int k = 3; k < 5; k++)
        if (g->nodes[i].inputs[k] >= 0) is_stat[g->nodes[i].inputs[k]] = true;
  if (!st) st = training_rewrites(g, true, &n_drop, ratios);
  for (int w = 0; !st && w < t->weights.n; w++) {
    int v = kiln_graph_find_value(g, t->weights.names[w]);
    if (v < 0) continue;
    if (is_stat[v]) {
      char **ns2 = realloc(t->stats, (size_t)(t->n_stats + 1) * sizeof *ns2);
      if (!ns2) st = KILN_OOM();
      else if (!((t->stats = ns2)[t->n_stats] = kiln_strdup(t->weights.names[w]))) st = KILN_OOM();
      else t->n_stats++;
    } else if (!frozen(t, t->weights.names[w])) {
      cand[n_cand] = t->weights.names[w];
      wrt[n_cand++] = v;
    }
  }
  if (!st) st = kiln_run_pass(g, "resolve-ops", kiln_pass_resolve_ops);
  if (!st) st = kiln_graph_toposort(g);
  if (!st) st = kiln_run_pass(g, "infer-types", kiln_pass_infer_types);
  int loss = -1;
  if (!st) st = add_loss(t, &c, y, tgt, &loss);
  if (!st) st = kiln_pass_autodiff(g, t->opset, loss, n_cand, wrt, grads);
  int n = 0;
  for (int k = 0; !st && k < n_cand; k++) n += grads[k] >= 0;
  if (!st) {
    t->params = calloc((size_t)n + 1, sizeof *t->params);
    if (!t->params) st = KILN_OOM();
  }
  for (int k = 0; !st && k < n_cand; k++)
    if (grads[k] >= 0 && !(t->params[t->n_params++] = kiln_strdup(cand[k]))) st = KILN_OOM();
  if (!st && t->n_params == 0)
    st = kiln_error(KILN_INVALID_ARGUMENT, "nothing to train: no float initializer the loss depends on%s",
                    t->freeze ? " outside the freeze pattern" : "");
  if (!st) t->found = true;
  free(ratios);
  free(is_stat);
  free(wrt);
  free(grads);
  free(cand);
  kiln_model_ir_free(ir);
  return st;
}

/* ---- running ------------------------------------------------------------------------------ */

static int signature(int n_in, const kiln_tensor *const *inputs, const kiln_tensor *target, int64_t *sig) {
  int n = 0;
  for (int i = 0; i <= n_in; i++) {
    const kiln_tensor *x = i < n_in ? inputs[i] : target;
    if (n + 1 + x->rank > 2 * KILN_MAX_RANK * 8) return -1;
    sig[n++] = x->rank;
    for (int d = 0; d < x->rank; d++) sig[n++] = x->dims[d];
  }
  return n;
}

static kiln_status_t plan_for(kiln_trainer *t, plan *plans, graph_kind kind, int n_in, const char *const *names,
                              const kiln_tensor *const *inputs, const kiln_tensor *target, plan **out) {
  int64_t sig[2 * KILN_MAX_RANK * 8];
  int n = signature(n_in, inputs, target, sig);
  if (n < 0) return kiln_error(KILN_INVALID_ARGUMENT, "too many inputs");
  for (int i = 0; i < MAX_PLANS; i++)
    if (plans[i].used && plans[i].n_sig == n && !memcmp(plans[i].sig, sig, (size_t)n * sizeof sig[0])) {
      *out = &plans[i];
      return NULL;
    }
  int slot = 0;
  for (int i = 0; i < MAX_PLANS; i++)
    if (!plans[i].used) {
      slot = i;
      break;
    } else if (i == MAX_PLANS - 1) {
      slot = MAX_PLANS - 1; /* replace the last: batch shapes beyond 4 are rebuilt */
      plan_free(&plans[slot]);
    }
  plan *p = &plans[slot];
  KILN_TRY(build(t, kind, n_in, names, inputs, target, p));
  p->used = true;
  p->n_sig = n;
  memcpy(p->sig, sig, (size_t)n * sizeof sig[0]);
  *out = p;
  return NULL;
}

/* The step's scalars (learning rate, Adam's bias corrections) are f32
 * inputs, rounded here from the double the schedule computes: what
 * PyTorch's optimizers do with a Python float against f32 tensors, and a
 * dtype every device reads (a GLSL kernel reads no f64). */
static kiln_status_t scalar(double v, kiln_tensor **out) {
  KILN_TRY(kiln_tensor_new(KILN_DTYPE_F32, 0, NULL, out));
  ((float *)(*out)->data)[0] = (float)v;
  return NULL;
}

/* The value an input of plan p takes: a batch input, the target, a weight, a state tensor, a scalar, a mask. */
static kiln_status_t feed(kiln_trainer *t, const plan *p, int k, int n_in, const char *const *names,
                          const kiln_tensor *const *inputs, const kiln_tensor *target, kiln_tensor **owned,
                          const kiln_tensor **out) {
  const char *name = p->in_names[k];
  *owned = NULL;
  for (int i = 0; i < n_in; i++)
    if (!strcmp(names[i], name)) {
      *out = inputs[i];
      return NULL;
    }
  if (!strcmp(name, "kiln.target") && int32_classes(t, target)) {
    KILN_TRY(kiln_tensor_new_uninit(KILN_DTYPE_I32, target->rank, target->dims, owned));
    for (int64_t i = 0; i < target->numel; i++) {
      int64_t v = ((const int64_t *)target->data)[i];
      if (v < INT32_MIN || v > INT32_MAX)
        return kiln_error(KILN_INVALID_ARGUMENT, "target %lld at element %lld: not a class index", (long long)v,
                          (long long)i);
      ((int32_t *)(*owned)->data)[i] = (int32_t)v;
    }
    *out = *owned;
    return NULL;
  }
  if (!strcmp(name, "kiln.target")) {
    *out = target;
    return NULL;
  }
  int w = table_find(&t->weights, name);
  if (w >= 0) {
    *out = t->weights.t[w];
    return NULL;
  }
  int s = table_find(&t->state, name);
  if (s >= 0) {
    *out = t->state.t[s];
    return NULL;
  }
  int a = table_find(&t->accum, name);
  if (a >= 0) {
    *out = t->accum.t[a];
    return NULL;
  }
  int64_t step = t->updates + 1;
  if (!strcmp(name, "kiln.lr")) KILN_TRY(scalar(kiln_trainer_lr(t), owned));
  else if (!strcmp(name, "kiln.adam_bc1")) KILN_TRY(scalar(1.0 - pow(t->opt.beta1, (double)step), owned));
  else if (!strcmp(name, "kiln.adam_bc2")) KILN_TRY(scalar(1.0 - pow(t->opt.beta2, (double)step), owned));
  else if (!strncmp(name, "kiln.dropout_mask.", 18)) {
    int d = atoi(name + 18);
    const kiln_graph *g = p->model->ir->graph;
    const kiln_type *ty = &g->values[kiln_graph_find_value(g, name)].type;
    KILN_TRY(kiln_tensor_new(ty->dtype, ty->rank, ty->dims, owned));
    double keep = 1.0 - t->drop_ratio[d], scale = 1.0 / keep;
    for (int64_t i = 0; i < (*owned)->numel; i++) {
      double u = (double)(splitmix(&t->rng) >> 11) / 9007199254740992.0;
      kiln_store_f64((*owned)->data, (*owned)->dtype, i, u < keep ? scale : 0.0);
    }
  } else {
    /* an optimizer state not created yet: zeros like its parameter */
    const kiln_graph *g = p->model->ir->graph;
    const kiln_type *ty = &g->values[kiln_graph_find_value(g, name)].type;
    kiln_tensor *z;
    KILN_TRY(kiln_tensor_new(ty->dtype, ty->rank, ty->dims, &z));
    memset(z->data, 0, (size_t)z->numel * kiln_dtype_size(z->dtype));
    KILN_TRY(table_set(&t->state, name, z));
    *out = z;
    return NULL;
  }
  *out = *owned;
  return NULL;
}

/* KILN_TRAIN_SAVE_GRAPH's other half: the step's feeds, one .npy per
 * input in DIR = "<graph path>.inputs", and DIR/args holding a
 * `--input NAME=FILE` per line for kiln bench (a profile of the step on
 * real values: random ones can make denormals, whose arithmetic is slow). */
static kiln_status_t save_feeds(const plan *p, const kiln_tensor *const *feeds) {
  const char *save = getenv("KILN_TRAIN_SAVE_GRAPH");
  char *dir = kiln_strfmt("%s.inputs", save);
  if (!dir) return KILN_OOM();
  kiln_status_t st = NULL;
  if (mkdir(dir, 0777) && errno != EEXIST) st = kiln_error(KILN_IO_ERROR, "cannot make %s: %s", dir, strerror(errno));
  char *args_path = st ? NULL : kiln_strfmt("%s/args", dir);
  FILE *args = args_path ? fopen(args_path, "w") : NULL;
  if (!st && !args) st = kiln_error(KILN_IO_ERROR, "cannot write %s/args", dir);
  for (int k = 0; !st && k < p->n_in; k++) {
    char *f = kiln_strfmt("%s/%d.npy", dir, k);
    st = f ? kiln_npy_write_file(f, feeds[k]) : KILN_OOM();
    if (!st) fprintf(args, "--input %s=%s\n", p->in_names[k], f);
    free(f);
  }
  if (args && fclose(args) && !st) st = kiln_error(KILN_IO_ERROR, "cannot write %s", args_path);
  free(args_path);
  free(dir);
  return st;
}

/* Runs plan p; outputs[k] receive the plan's outputs (owned). save: write
 * its feeds when KILN_TRAIN_SAVE_GRAPH asks (the first step). */
/* Makes every host value current: the kept pairs of the plan holding them
 * on the device read back into their host tensors (in place: the tables
 * keep the same tensors), that plan told its next run uploads them. A
 * const trainer's saving or export calls it too: the tensors' bytes
 * change, not what they mean. */
static kiln_status_t sync_host(kiln_trainer *t) {
  plan *p = t->on_device;
  if (!p) return NULL;
  kiln_tensor **into = calloc((size_t)p->n_kept + 1, sizeof *into);
  if (!into) return KILN_OOM();
  kiln_status_t st = NULL;
  for (int k = 0; k < p->n_kept && !st; k++) {
    int w = table_find(&t->weights, p->kept_in[k]), s = table_find(&t->state, p->kept_in[k]);
    into[k] = w >= 0 ? t->weights.t[w] : s >= 0 ? t->state.t[s] : NULL;
    if (!into[k] || into[k]->keepalive) /* borrowed bytes (a model mmap): not ours to write */
      st = kiln_error(KILN_INTERNAL, "trainer: no writable host tensor for kept state '%s'", p->kept_in[k]);
  }
  bool read = false;
  if (!st) st = kiln_session_state_read(p->sess, p->n_kept, (const char *const *)p->kept_in, into, &read);
  if (!st) {
    kiln_session_state_forget(p->sess);
    t->on_device = NULL;
  }
  free(into);
  return st;
}

static kiln_status_t run_plan(kiln_trainer *t, plan *p, int n_in, const char *const *names,
                              const kiln_tensor *const *inputs, const kiln_tensor *target, kiln_tensor **outs, bool save) {
  if (t->on_device && t->on_device != p) KILN_TRY(sync_host(t));
  const kiln_tensor **feeds = calloc((size_t)p->n_in + 1, sizeof *feeds);
  kiln_tensor **owned = calloc((size_t)p->n_in + 1, sizeof *owned);
  kiln_status_t st = feeds && owned ? NULL : KILN_OOM();
  kiln_tensor **into = calloc((size_t)p->n_out + 1, sizeof *into);
  if (!st && !into) st = KILN_OOM();
  for (int k = 0; !st && k < p->n_in; k++) st = feed(t, p, k, n_in, names, inputs, target, &owned[k], &feeds[k]);
  const char *save_path = getenv("KILN_TRAIN_SAVE_GRAPH");
  if (!st && save && save_path && *save_path) st = save_feeds(p, feeds);
  int *spare = calloc((size_t)p->n_out + 1, sizeof *spare);
  if (!st && !spare) st = KILN_OOM();
  for (int k = 0; !st && k < p->n_out; k++)
    if ((spare[k] = table_find(&t->spare, p->out_names[k])) >= 0) into[k] = t->spare.t[spare[k]];
  if (!st) st = kiln_session_run_into(p->sess, p->n_in, (const char *const *)p->in_names, feeds, p->n_out, into, outs);
  /* After the first run (the plan is compiled then): the device keeps the
   * pairs from now on where it can (else the outputs come back as ever). */
  if (!st && !p->keep_tried && p->n_kept) {
    p->keep_tried = true;
    kiln_status_t ks = kiln_session_keep_state(p->sess, p->n_kept, (const char *const *)p->kept_in,
                                               (const char *const *)p->kept_out);
    p->keeps = ks == NULL;
    kiln_status_free(ks);
  } else if (!st && p->keeps) {
    t->on_device = p; /* the run's kept outputs are the inputs' tensors, stale: the values are on the device */
  }
  for (int k = 0; !st && k < p->n_out; k++) /* written: outs[k] holds it now */
    if (into[k]) {
      kiln_tensor_release(t->spare.t[spare[k]]);
      t->spare.t[spare[k]] = NULL;
    }
  for (int k = 0; owned && k < p->n_in; k++) kiln_tensor_release(owned[k]);
  free(spare);
  free(into);
  free(owned);
  free(feeds);
  return st;
}

static kiln_status_t check_batch(int n_in, const char *const *names, const kiln_tensor *const *inputs,
                                 const kiln_tensor *target) {
  if (n_in < 1 || !names || !inputs || !target) return kiln_error(KILN_INVALID_ARGUMENT, "no inputs or no targets");
  for (int i = 0; i < n_in; i++)
    if (!names[i] || !inputs[i]) return kiln_error(KILN_INVALID_ARGUMENT, "input %d: NULL", i);
  return NULL;
}

/* Stores plan outputs [from, n) into the tables by name: weights, state, or accumulated gradients. */
static kiln_status_t take_outputs(kiln_trainer *t, const plan *p, kiln_tensor **outs, int from) {
  kiln_status_t st = NULL;
  for (int k = from; k < p->n_out; k++) {
    kiln_tensor *x = outs[k];
    outs[k] = NULL;
    if (st) {
      kiln_tensor_release(x);
      continue;
    }
    const char *name = p->out_names[k];
    size_t len = strlen(name);
    if (len > 5 && !strcmp(name + len - 5, ".grad")) {
      int a = table_find(&t->accum, name);
      if (a < 0) {
        st = table_set(&t->accum, name, x);
        continue;
      }
      kiln_tensor *sum = t->accum.t[a];
      for (int64_t i = 0; i < sum->numel; i++)
        kiln_store_f64(sum->data, sum->dtype, i, kiln_load_f64(sum->data, sum->dtype, i) + kiln_load_f64(x->data, x->dtype, i));
      kiln_tensor_release(x);
    } else {
      /* the value it replaces, when nothing else holds it, becomes the next step's output tensor */
      kiln_tensor *old = NULL;
      st = table_replace(table_find(&t->weights, name) >= 0 ? &t->weights : &t->state, name, x, &old);
      if (!st && old && old != x && old->refcount == 1 && old->owns_data) st = table_set(&t->spare, name, old);
      else kiln_tensor_release(old);
    }
  }
  return st;
}

kiln_status_t kiln_trainer_step(kiln_trainer *t, int n_in, const char *const *names, const kiln_tensor *const *inputs,
                                const kiln_tensor *target, double *out_loss) {
  if (!t) return kiln_error(KILN_INVALID_ARGUMENT, "NULL trainer");
  KILN_TRY(check_batch(n_in, names, inputs, target));
  if (!t->found) KILN_TRY(find_trainables(t, n_in, names, inputs, target));
  plan *p;
  KILN_TRY(plan_for(t, t->steps, GRAPH_STEP, n_in, names, inputs, target, &p));
  kiln_tensor **outs = calloc((size_t)p->n_out + 1, sizeof *outs);
  if (!outs) return KILN_OOM();
  kiln_status_t st = run_plan(t, p, n_in, names, inputs, target, outs, t->micro == 0);
  double loss = st ? NAN : kiln_load_f64(outs[0]->data, outs[0]->dtype, 0);
  if (!st) st = take_outputs(t, p, outs, 1);
  for (int k = 0; k < p->n_out; k++) kiln_tensor_release(outs[k]);
  free(outs);
  if (st) return st;
  t->micro++;
  if (t->opt.grad_accum == 1) {
    t->updates++;
  } else if (t->micro % t->opt.grad_accum == 0) { /* the mean of the accumulated gradients, clipped, applied */
    for (int a = 0; a < t->accum.n; a++) {
      kiln_tensor *s = t->accum.t[a];
      for (int64_t i = 0; i < s->numel; i++)
        kiln_store_f64(s->data, s->dtype, i, kiln_load_f64(s->data, s->dtype, i) / t->opt.grad_accum);
    }
    if (!t->apply.used) {
      KILN_TRY(build(t, GRAPH_APPLY, 0, NULL, NULL, NULL, &t->apply));
      t->apply.used = true;
    }
    kiln_tensor **o2 = calloc((size_t)t->apply.n_out + 1, sizeof *o2);
    if (!o2) return KILN_OOM();
    st = run_plan(t, &t->apply, 0, NULL, NULL, NULL, o2, false);
    if (!st) st = take_outputs(t, &t->apply, o2, 0);
    for (int k = 0; k < t->apply.n_out; k++) kiln_tensor_release(o2[k]);
    free(o2);
    table_free(&t->accum);
    if (st) return st;
    t->updates++;
  }
  if (out_loss) *out_loss = loss;
  if (!isfinite(loss))
    return kiln_error(KILN_INVALID_ARGUMENT, "the loss is %g at update %lld: the training diverged (lower the learning rate)",
                      loss, (long long)t->updates);
  return NULL;
}

kiln_status_t kiln_trainer_evaluate(kiln_trainer *t, int n_in, const char *const *names, const kiln_tensor *const *inputs,
                                    const kiln_tensor *target, double *out_loss, int64_t *out_correct,
                                    int64_t *out_counted) {
  if (!t) return kiln_error(KILN_INVALID_ARGUMENT, "NULL trainer");
  KILN_TRY(check_batch(n_in, names, inputs, target));
  if (!t->found) KILN_TRY(find_trainables(t, n_in, names, inputs, target));
  plan *p;
  KILN_TRY(plan_for(t, t->evals, GRAPH_EVAL, n_in, names, inputs, target, &p));
  kiln_tensor *outs[2] = {NULL, NULL};
  KILN_TRY(run_plan(t, p, n_in, names, inputs, target, outs, false));
  if (out_loss) *out_loss = kiln_load_f64(outs[0]->data, outs[0]->dtype, 0);
  int64_t correct = 0, counted = 0;
  const kiln_tensor *y = outs[1];
  bool classes = t->opt.loss == KILN_LOSS_CROSS_ENTROPY || t->opt.loss == KILN_LOSS_NLL;
  if (classes && y->rank >= 2) { /* argmax over axis 1 against the target */
    int64_t n = y->dims[0], ch = y->dims[1], inner = y->numel / (n * ch > 0 ? n * ch : 1);
    for (int64_t b = 0; b < n; b++)
      for (int64_t j = 0; j < inner; j++) {
        int64_t tv = kiln_load_i64(target->data, target->dtype, b * inner + j);
        if (t->opt.has_ignore_index && tv == t->opt.ignore_index) continue;
        int64_t best = 0;
        double bv = -INFINITY;
        for (int64_t k = 0; k < ch; k++) {
          double v = kiln_load_f64(y->data, y->dtype, (b * ch + k) * inner + j);
          if (v > bv) bv = v, best = k;
        }
        counted++;
        correct += best == tv;
      }
  }
  if (out_correct) *out_correct = correct;
  if (out_counted) *out_counted = counted;
  kiln_tensor_release(outs[0]);
  kiln_tensor_release(outs[1]);
  return NULL;
}

/* ---- checkpoints and export -------------------------------------------------------------- */

static kiln_status_t write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return kiln_error(KILN_IO_ERROR, "cannot write %s", path);
  bool ok = fputs(text, f) >= 0;
  if (fclose(f)) ok = false;
  return ok ? NULL : kiln_error(KILN_IO_ERROR, "cannot write %s", path);
}

kiln_status_t kiln_trainer_save_checkpoint(const kiln_trainer *t, const char *dir) {
  if (!t || !dir) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  KILN_TRY(sync_host((kiln_trainer *)t));
  if (mkdir(dir, 0755) && errno != EEXIST) return kiln_error(KILN_IO_ERROR, "cannot create %s: %s", dir, strerror(errno));
  char path[4200];
  snprintf(path, sizeof path, "%s/weights.npz", dir);
  KILN_TRY(kiln_npz_write_file(path, t->weights.n, (const char *const *)t->weights.names,
                               (const kiln_tensor *const *)t->weights.t));
  snprintf(path, sizeof path, "%s/optimizer.npz", dir);
  KILN_TRY(kiln_npz_write_file(path, t->state.n, (const char *const *)t->state.names,
                               (const kiln_tensor *const *)t->state.t));
  snprintf(path, sizeof path, "%s/accumulated.npz", dir); /* gradients of micro-batches not yet applied */
  if (t->accum.n)
    KILN_TRY(kiln_npz_write_file(path, t->accum.n, (const char *const *)t->accum.names,
                                 (const kiln_tensor *const *)t->accum.t));
  else
    remove(path);
  char json[512];
  snprintf(json, sizeof json,
           "{\"format\": \"kiln-checkpoint-1\", \"updates\": %lld, \"micro_batches\": %lld, \"rng\": \"%016llx\", "
           "\"optimizer\": %d}\n",
           (long long)t->updates, (long long)t->micro, (unsigned long long)t->rng, (int)t->opt.optimizer);
  snprintf(path, sizeof path, "%s/trainer.json", dir);
  return write_text(path, json);
}

/* The value of "key": in a flat JSON object (our own file), as text; NULL if absent. */
static const char *json_field(const char *json, const char *key, char *buf, size_t size) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(json, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ' || *p == '"') p++;
  size_t n = 0;
  while (p[n] && p[n] != ',' && p[n] != '"' && p[n] != '}' && n + 1 < size) n++;
  memcpy(buf, p, n);
  buf[n] = '\0';
  return buf;
}

kiln_status_t kiln_trainer_load_checkpoint(kiln_trainer *t, const char *dir) {
  if (!t || !dir) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  KILN_TRY(sync_host(t)); /* the host values current first: what the checkpoint sets replaces them */
  char path[4200];
  snprintf(path, sizeof path, "%s/trainer.json", dir);
  FILE *f = fopen(path, "r");
  if (!f) return kiln_error(KILN_IO_ERROR, "cannot read %s: %s", path, strerror(errno));
  char json[1024];
  size_t n = fread(json, 1, sizeof json - 1, f);
  fclose(f);
  json[n] = '\0';
  char a[64], b[64], r[64], o[64];
  if (!json_field(json, "format", a, sizeof a) || strcmp(a, "kiln-checkpoint-1"))
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: not a kiln checkpoint (format kiln-checkpoint-1)", path);
  if (!json_field(json, "updates", a, sizeof a) || !json_field(json, "micro_batches", b, sizeof b) ||
      !json_field(json, "rng", r, sizeof r) || !json_field(json, "optimizer", o, sizeof o))
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: updates, micro_batches, rng or optimizer missing", path);
  if (atoi(o) != (int)t->opt.optimizer)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: saved with another optimizer", path);
  int nw = 0, ns = 0;
  char **wn = NULL, **sn = NULL;
  kiln_tensor **wt = NULL, **stt = NULL;
  snprintf(path, sizeof path, "%s/weights.npz", dir);
  KILN_TRY(kiln_npz_read_file(path, &nw, &wn, &wt));
  kiln_status_t st = NULL;
  for (int i = 0; !st && i < nw; i++) {
    int w = table_find(&t->weights, wn[i]);
    if (w < 0 || t->weights.t[w]->dtype != wt[i]->dtype || t->weights.t[w]->numel != wt[i]->numel)
      st = kiln_error(KILN_INVALID_ARGUMENT, "%s: '%s' is not a weight of this model, or of another shape", path, wn[i]);
    else st = table_set(&t->weights, wn[i], kiln_tensor_retain(wt[i]));
  }
  kiln_npz_free(nw, wn, wt);
  if (st) return st;
  snprintf(path, sizeof path, "%s/optimizer.npz", dir);
  KILN_TRY(kiln_npz_read_file(path, &ns, &sn, &stt));
  for (int i = 0; !st && i < ns; i++) st = table_set(&t->state, sn[i], kiln_tensor_retain(stt[i]));
  kiln_npz_free(ns, sn, stt);
  if (st) return st;
  table_free(&t->accum);
  snprintf(path, sizeof path, "%s/accumulated.npz", dir);
  struct stat sb;
  if (!stat(path, &sb)) {
    KILN_TRY(kiln_npz_read_file(path, &ns, &sn, &stt));
    for (int i = 0; !st && i < ns; i++) st = table_set(&t->accum, sn[i], kiln_tensor_retain(stt[i]));
    kiln_npz_free(ns, sn, stt);
    if (st) return st;
  }
  t->updates = atoll(a);
  t->micro = atoll(b);
  t->rng = strtoull(r, NULL, 16);
  return NULL;
}

kiln_status_t kiln_trainer_export(const kiln_trainer *t, const char *path) {
  if (!t || !path) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  KILN_TRY(sync_host((kiln_trainer *)t));
  kiln_model_ir *m;
  KILN_TRY(clone_ir(t->base, &m));
  kiln_graph *g = m->graph;
  for (int w = 0; w < t->weights.n; w++) {
    int v = kiln_graph_find_value(g, t->weights.names[w]);
    if (v < 0 || !g->values[v].constant) continue;
    kiln_tensor_release(g->values[v].constant);
    g->values[v].constant = kiln_tensor_retain(t->weights.t[w]);
  }
  kiln_status_t st = NULL;
  for (int i = 0; !st && i < g->n_nodes; i++) { /* a training-mode export's Dropout: the identity for inference */
    kiln_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "Dropout") || n->domain[0] || n->n_inputs < 3 || n->inputs[2] < 0) continue;
    if (n->n_outputs > 1 && n->outputs[1] >= 0 && value_read(g, n->outputs[1])) continue;
    int x = n->inputs[0], y = n->outputs[0];
    if (n->n_outputs > 1 && n->outputs[1] >= 0) g->values[n->outputs[1]].producer = -1;
    st = kiln_opt_rewrite_node(g, i, "Identity", "", n->opset, 1, &x, 1, &y);
  }
  for (int i = 0; !st && i < g->n_nodes; i++) /* a training-mode export's BatchNormalization, for inference */
    if (!strcmp(g->nodes[i].op_type, "BatchNormalization") && !g->nodes[i].domain[0]) st = bn_inference(g, i);
  if (!st) st = kiln_onnx_save_file(m, path);
  kiln_model_ir_free(m);
  return st;
}
