/* kiln train: trains a model on arrays from an .npz file (the trainer:
 * src/train/trainer.c). The command-line contract is issue 12's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "cli/cli.h"
#include "tensor/npy.h"

static const char *train_help =
    "usage: kiln train MODEL.onnx --data TRAIN.npz --loss mse|l1|cross_entropy|nll|bce_with_logits\n"
    "                  [--target KEY] [--output NAME] [--eval EVAL.npz]\n"
    "                  [--optimizer sgd|adam|adamw] [--lr LR] [--momentum M] [--nesterov] [--weight-decay W]\n"
    "                  [--lr-schedule constant|step:EVERY:GAMMA|cosine|warmup:STEPS] [--grad-accum K] [--clip-norm C]\n"
    "                  [--epochs E] [--steps N] [--batch-size B] [--shuffle SEED | --no-shuffle] [--freeze REGEX]\n"
    "                  [--device D] [--threads N] [--save TRAINED.onnx] [--checkpoint DIR] [--resume DIR]\n"
    "                  [--log FILE.jsonl]\n"
    "\n"
    "TRAIN.npz holds one array per graph input, keyed by the input's name, and the\n"
    "targets under `target` (or KEY); axis 0 is the sample axis and batches are\n"
    "consecutive slices of it, reordered each epoch (--shuffle SEED, default 0;\n"
    "--no-shuffle keeps the order); a final short batch is kept. The loss applies\n"
    "to graph output NAME (default: the first). Trainable values: the float\n"
    "initializers the loss depends on through differentiable inputs, minus those\n"
    "matching --freeze. A step is one optimizer update (K batches with --grad-accum;\n"
    "--steps N stops after N). Defaults: sgd, lr 0.01, batch 32, 1 epoch.\n"
    "--log writes {\"step\", \"epoch\", \"loss\", \"lr\"} per step and, with --eval,\n"
    "{\"epoch\", \"eval_loss\", \"eval_accuracy\"} after each epoch (accuracy for\n"
    "cross_entropy and nll). --checkpoint DIR saves after each epoch (and at the end);\n"
    "--resume DIR continues a run exactly where its checkpoint left it. --save\n"
    "writes the trained model for inference. On the cpu, kernels are compiled\n"
    "before the first step (KILN_JIT=sync unless set), so a run repeats exactly.\n";

typedef struct dataset {
  int n;
  char **names;
  kiln_tensor **arrays;
  int target; /* index of the targets */
  int64_t samples;
} dataset;

static void dataset_free(dataset *d) {
  if (d->names) kiln_npz_free(d->n, d->names, d->arrays);
  memset(d, 0, sizeof *d);
}

/* Loads an .npz and checks it against the model: every input without an
 * initializer present with its dtype, the targets present, the same number
 * of samples everywhere, class targets integers in [0, classes) when the
 * model says how many. */
static kiln_status_t load_dataset(const char *path, const char *target_key, const kiln_model *model, kiln_loss loss,
                                  const char *output, dataset *d) {
  memset(d, 0, sizeof *d);
  KILN_TRY(kiln_npz_read_file(path, &d->n, &d->names, &d->arrays));
  d->target = -1;
  for (int i = 0; i < d->n; i++)
    if (!strcmp(d->names[i], target_key)) d->target = i;
  if (d->target < 0) return kiln_error(KILN_INVALID_ARGUMENT, "%s: no array '%s' (the targets)", path, target_key);
  const kiln_graph *g = model->ir->graph;
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_value_def *v = &g->values[g->inputs[i]];
    if (v->constant) continue; /* an input with an initializer default may be left out */
    int k = -1;
    for (int j = 0; j < d->n; j++)
      if (!strcmp(d->names[j], v->name)) k = j;
    if (k < 0) return kiln_error(KILN_INVALID_ARGUMENT, "%s: no array '%s' for the model's input", path, v->name);
    if (v->type.dtype && d->arrays[k]->dtype != v->type.dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: array '%s' is %s, the model's input is %s", path, v->name,
                        kiln_dtype_name(d->arrays[k]->dtype), kiln_dtype_name(v->type.dtype));
  }
  for (int i = 0; i < d->n; i++) {
    if (d->arrays[i]->rank < 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: array '%s' is a scalar; axis 0 must be the samples", path, d->names[i]);
    int64_t s = d->arrays[i]->dims[0];
    if (i == 0) d->samples = s;
    else if (s != d->samples)
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: array '%s' has %lld samples, '%s' %lld", path, d->names[i],
                        (long long)s, d->names[0], (long long)d->samples);
  }
  if (d->samples < 1) return kiln_error(KILN_INVALID_ARGUMENT, "%s: no samples", path);
  const kiln_tensor *t = d->arrays[d->target];
  if (loss == KILN_LOSS_CROSS_ENTROPY || loss == KILN_LOSS_NLL) {
    if (t->dtype != KILN_DTYPE_I64 && t->dtype != KILN_DTYPE_I32)
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: targets '%s' are %s; cross_entropy and nll take int64 classes", path,
                        target_key, kiln_dtype_name(t->dtype));
    int out = -1;
    for (int i = 0; i < g->n_outputs; i++)
      if (!output || !strcmp(g->values[g->outputs[i]].name, output)) {
        out = g->outputs[i];
        break;
      }
    int64_t classes = out >= 0 && g->values[out].type.rank >= 2 ? g->values[out].type.dims[1] : -1;
    for (int64_t i = 0; i < t->numel; i++) {
      int64_t c = kiln_load_i64(t->data, t->dtype, i);
      if (c < 0 || (classes > 0 && c >= classes))
        return kiln_error(KILN_OUT_OF_RANGE, "%s: target %lld (sample %lld) is class %lld, expected 0..%lld", path,
                          (long long)i, (long long)(i / (t->numel / d->samples)), (long long)c,
                          (long long)(classes > 0 ? classes - 1 : INT64_MAX));
    }
  } else if (!kiln_dtype_is_float(t->dtype)) {
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: targets '%s' are %s; this loss takes float targets", path, target_key,
                      kiln_dtype_name(t->dtype));
  }
  return NULL;
}

/* Rows order[from, from + n) of array a, as a new tensor. */
static kiln_status_t gather_rows(const kiln_tensor *a, const int64_t *order, int64_t from, int64_t n, kiln_tensor **out) {
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
  dims[0] = n;
  KILN_TRY(kiln_tensor_new(a->dtype, a->rank, dims, out));
  size_t row = (size_t)(a->numel / a->dims[0]) * kiln_dtype_size(a->dtype);
  for (int64_t i = 0; i < n; i++) memcpy((char *)(*out)->data + (size_t)i * row, (const char *)a->data + (size_t)order[from + i] * row, row);
  return NULL;
}

/* Epoch e's order: the identity, or a Fisher-Yates shuffle seeded by (seed, e). */
static void epoch_order(int64_t *order, int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (!shuffle) return;
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + (uint64_t)epoch * 0xbf58476d1ce4e5b9ull + 1;
  for (int64_t i = n - 1; i > 0; i--) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    int64_t j = (int64_t)(s % (uint64_t)(i + 1));
    int64_t tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
}

/* One batch's tensors: the model's inputs (names into d) and the targets. */
static kiln_status_t make_batch(const dataset *d, const int64_t *order, int64_t from, int64_t n, int *n_in,
                                const char **names, kiln_tensor **ins, kiln_tensor **target) {
  *n_in = 0;
  for (int i = 0; i < d->n; i++) {
    kiln_tensor *x;
    KILN_TRY(gather_rows(d->arrays[i], order, from, n, &x));
    if (i == d->target) {
      *target = x;
    } else {
      names[*n_in] = d->names[i];
      ins[(*n_in)++] = x;
    }
  }
  return NULL;
}

static void release_batch(int n_in, kiln_tensor **ins, kiln_tensor *target) {
  for (int i = 0; i < n_in; i++) kiln_tensor_release(ins[i]);
  kiln_tensor_release(target);
}

/* The loss and accuracy over an evaluation set, in batches. */
static kiln_status_t evaluate(kiln_trainer *tr, const dataset *d, int64_t batch, double *out_loss, double *out_acc) {
  int64_t *order = malloc((size_t)d->samples * sizeof *order);
  if (!order) return KILN_OOM();
  epoch_order(order, d->samples, false, 0, 0);
  double sum = 0;
  int64_t correct = 0, counted = 0;
  kiln_status_t st = NULL;
  for (int64_t from = 0; !st && from < d->samples; from += batch) {
    int64_t n = d->samples - from < batch ? d->samples - from : batch;
    const char *names[64];
    kiln_tensor *ins[64], *target = NULL;
    int n_in = 0;
    if (d->n > 64) st = kiln_error(KILN_INVALID_ARGUMENT, "more than 64 arrays");
    if (!st) st = make_batch(d, order, from, n, &n_in, names, ins, &target);
    double l = 0;
    int64_t c = 0, k = 0;
    if (!st) st = kiln_trainer_evaluate(tr, n_in, names, (const kiln_tensor *const *)ins, target, &l, &c, &k);
    sum += l * (double)n;
    correct += c;
    counted += k;
    release_batch(n_in, ins, target);
  }
  free(order);
  *out_loss = sum / (double)d->samples;
  *out_acc = counted ? (double)correct / (double)counted : NAN;
  return st;
}

static bool parse_schedule(const char *s, kiln_trainer_options *o) {
  if (!strcmp(s, "constant")) o->schedule = KILN_LR_CONSTANT;
  else if (!strcmp(s, "cosine")) o->schedule = KILN_LR_COSINE;
  else if (!strncmp(s, "step:", 5)) {
    char *end;
    o->schedule = KILN_LR_STEP;
    o->step_every = strtoll(s + 5, &end, 10);
    if (*end != ':') return false;
    o->gamma = strtof(end + 1, &end);
    return !*end && o->step_every >= 1 && o->gamma > 0;
  } else if (!strncmp(s, "warmup:", 7)) {
    char *end;
    o->schedule = KILN_LR_WARMUP;
    o->warmup_steps = strtoll(s + 7, &end, 10);
    return !*end && o->warmup_steps >= 1;
  } else return false;
  return true;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kiln_cmd_train(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    fputs(train_help, stdout);
    return 0;
  }
  const char *model_path = NULL, *data_path = NULL, *eval_path = NULL, *target_key = "target", *save = NULL;
  const char *ckpt = NULL, *resume = NULL, *log_path = NULL, *loss_name = NULL, *opt_name = "sgd";
  kiln_trainer_options o = kiln_trainer_options_default();
  int64_t epochs = 1, max_steps = -1, batch = 32;
  bool shuffle = true;
  uint64_t seed = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                    \
  do {                                                            \
    if (!v) return kiln_cli_failf("%s needs a value", a);         \
    i++;                                                          \
  } while (0)
#define NUM(dst, conv, ok)                                                         \
  do {                                                                             \
    NEED();                                                                        \
    char *end_;                                                                    \
    errno = 0;                                                                     \
    dst = conv;                                                                    \
    if (*end_ || errno || !(ok)) return kiln_cli_failf("%s: bad value '%s'", a, v); \
  } while (0)
    if (!strcmp(a, "--data")) { NEED(); data_path = v; }
    else if (!strcmp(a, "--loss")) { NEED(); loss_name = v; }
    else if (!strcmp(a, "--target")) { NEED(); target_key = v; }
    else if (!strcmp(a, "--output")) { NEED(); o.output = v; }
    else if (!strcmp(a, "--eval")) { NEED(); eval_path = v; }
    else if (!strcmp(a, "--optimizer")) { NEED(); opt_name = v; }
    else if (!strcmp(a, "--lr")) NUM(o.lr, strtof(v, &end_), o.lr > 0);
    else if (!strcmp(a, "--momentum")) NUM(o.momentum, strtof(v, &end_), o.momentum >= 0);
    else if (!strcmp(a, "--nesterov")) o.nesterov = 1;
    else if (!strcmp(a, "--weight-decay")) NUM(o.weight_decay, strtof(v, &end_), o.weight_decay >= 0);
    else if (!strcmp(a, "--lr-schedule")) {
      NEED();
      if (!parse_schedule(v, &o)) return kiln_cli_failf("--lr-schedule: '%s', expected constant, step:EVERY:GAMMA, cosine or warmup:STEPS", v);
    } else if (!strcmp(a, "--grad-accum")) NUM(o.grad_accum, (int)strtol(v, &end_, 10), o.grad_accum >= 1);
    else if (!strcmp(a, "--clip-norm")) NUM(o.clip_norm, strtof(v, &end_), o.clip_norm > 0);
    else if (!strcmp(a, "--epochs")) NUM(epochs, strtoll(v, &end_, 10), epochs >= 1);
    else if (!strcmp(a, "--steps")) NUM(max_steps, strtoll(v, &end_, 10), max_steps >= 1);
    else if (!strcmp(a, "--batch-size")) NUM(batch, strtoll(v, &end_, 10), batch >= 1);
    else if (!strcmp(a, "--shuffle")) { NUM(seed, strtoull(v, &end_, 10), true); shuffle = true; }
    else if (!strcmp(a, "--no-shuffle")) shuffle = false;
    else if (!strcmp(a, "--freeze")) { NEED(); o.freeze = v; }
    else if (!strcmp(a, "--device")) { NEED(); o.device = v; }
    else if (!strcmp(a, "--threads")) NUM(o.threads, (int)strtol(v, &end_, 10), o.threads >= 1);
    else if (!strcmp(a, "--save")) { NEED(); save = v; }
    else if (!strcmp(a, "--checkpoint")) { NEED(); ckpt = v; }
    else if (!strcmp(a, "--resume")) { NEED(); resume = v; }
    else if (!strcmp(a, "--log")) { NEED(); log_path = v; }
    else if (a[0] == '-') return kiln_cli_failf("unknown option %s (kiln train --help)", a);
    else if (!model_path) model_path = a;
    else return kiln_cli_failf("unexpected argument '%s'", a);
#undef NUM
#undef NEED
  }
  if (!model_path || !data_path || !loss_name)
    return kiln_cli_failf("kiln train needs MODEL.onnx, --data and --loss (kiln train --help)");
  static const char *losses[] = {"mse", "l1", "cross_entropy", "nll", "bce_with_logits"};
  int li = -1;
  for (int k = 0; k < 5; k++)
    if (!strcmp(loss_name, losses[k])) li = k;
  if (li < 0) return kiln_cli_failf("--loss: '%s', expected mse, l1, cross_entropy, nll or bce_with_logits", loss_name);
  o.loss = (kiln_loss)li;
  if (!strcmp(opt_name, "sgd")) o.optimizer = KILN_OPTIMIZER_SGD;
  else if (!strcmp(opt_name, "adam")) o.optimizer = KILN_OPTIMIZER_ADAM;
  else if (!strcmp(opt_name, "adamw")) o.optimizer = KILN_OPTIMIZER_ADAMW;
  else return kiln_cli_failf("--optimizer: '%s', expected sgd, adam or adamw", opt_name);
  o.seed = seed;
  /* Compiled kernels from the first step on: with tiered compilation the precompiled kernels' rounding would
   * give way to the compiled ones' at some step of each run, and a resumed run would not repeat a whole one. */
  setenv("KILN_JIT", "sync", 0);

  kiln_model *model = NULL;
  kiln_status_t st = kiln_model_load_file(model_path, &model);
  if (st) return kiln_cli_fail(st);
  dataset train = {0}, evald = {0};
  st = load_dataset(data_path, target_key, model, o.loss, o.output, &train);
  if (!st && eval_path) st = load_dataset(eval_path, target_key, model, o.loss, o.output, &evald);
  int64_t per_epoch = (train.samples + batch - 1) / batch; /* batches */
  int64_t steps_per_epoch = (per_epoch + o.grad_accum - 1) / o.grad_accum;
  int64_t total = max_steps > 0 ? max_steps : epochs * steps_per_epoch;
  if (o.schedule == KILN_LR_COSINE) o.total_steps = total;
  kiln_trainer *tr = NULL;
  if (!st) st = kiln_trainer_create(model, &o, &tr);
  int64_t start_micro = 0;
  if (!st && resume) {
    st = kiln_trainer_load_checkpoint(tr, resume);
    if (!st) start_micro = kiln_trainer_micro_batches(tr);
  }
  FILE *log = NULL;
  if (!st && log_path && !(log = fopen(log_path, resume ? "a" : "w")))
    st = kiln_error(KILN_IO_ERROR, "cannot write %s: %s", log_path, strerror(errno));
  int64_t *order = st ? NULL : malloc((size_t)train.samples * sizeof *order);
  if (!st && !order) st = KILN_OOM();
  double t0 = now_s(), acc_loss = 0;
  int64_t samples_done = 0, in_update = 0;
  int64_t first_epoch = per_epoch > 0 ? start_micro / per_epoch : 0; /* 0 batches: the data failed to load */
  for (int64_t e = first_epoch; !st && e < epochs && kiln_trainer_updates(tr) < total; e++) {
    epoch_order(order, train.samples, shuffle, seed, e);
    for (int64_t b = e == first_epoch ? start_micro % per_epoch : 0; !st && b < per_epoch; b++) {
      int64_t from = b * batch, n = train.samples - from < batch ? train.samples - from : batch;
      const char *names[64];
      kiln_tensor *ins[64], *target = NULL;
      int n_in = 0;
      if (train.n > 64) st = kiln_error(KILN_INVALID_ARGUMENT, "more than 64 arrays");
      if (!st) st = make_batch(&train, order, from, n, &n_in, names, ins, &target);
      double lr = kiln_trainer_lr(tr), l = 0;
      int64_t before = kiln_trainer_updates(tr);
      if (!st) st = kiln_trainer_step(tr, n_in, names, (const kiln_tensor *const *)ins, target, &l);
      release_batch(n_in, ins, target);
      if (st) break;
      samples_done += n;
      acc_loss += l;
      in_update++;
      int64_t step = kiln_trainer_updates(tr);
      if (step == before) continue; /* still accumulating */
      double mean = acc_loss / (double)in_update;
      acc_loss = 0;
      in_update = 0;
      if (log) fprintf(log, "{\"step\": %lld, \"epoch\": %lld, \"loss\": %.9g, \"lr\": %.9g}\n", (long long)step,
                       (long long)(e + 1), mean, lr);
      double dt = now_s() - t0, rate = dt > 0 ? (double)samples_done / dt : 0;
      double done = (double)(kiln_trainer_micro_batches(tr) - start_micro) / o.grad_accum;
      double left = done > 0 ? dt / done * (double)(total - step) : 0;
      fprintf(stderr, "\repoch %lld/%lld  step %lld/%lld  loss %.5g  %.0f samples/s  %.0f s left   ", (long long)(e + 1),
              (long long)epochs, (long long)step, (long long)total, mean, rate, left > 0 ? left : 0);
      if (step >= total) break;
    }
    if (st) break;
    if (eval_path) {
      double el = 0, ea = 0;
      st = evaluate(tr, &evald, batch, &el, &ea);
      if (!st && log) {
        if (isnan(ea)) fprintf(log, "{\"epoch\": %lld, \"eval_loss\": %.9g}\n", (long long)(e + 1), el);
        else fprintf(log, "{\"epoch\": %lld, \"eval_loss\": %.9g, \"eval_accuracy\": %.6f}\n", (long long)(e + 1), el, ea);
      }
      if (!st) fprintf(stderr, "\nepoch %lld: eval loss %.5g%s", (long long)(e + 1), el, "");
      if (!st && !isnan(ea)) fprintf(stderr, ", accuracy %.4f", ea);
    }
    if (!st && ckpt) st = kiln_trainer_save_checkpoint(tr, ckpt);
    if (log) fflush(log);
  }
  fprintf(stderr, "\n");
  if (!st && ckpt) st = kiln_trainer_save_checkpoint(tr, ckpt);
  if (!st && save) st = kiln_trainer_export(tr, save);
  if (log) fclose(log);
  free(order);
  kiln_trainer_destroy(tr);
  dataset_free(&train);
  dataset_free(&evald);
  kiln_model_destroy(model);
  if (st) return kiln_cli_fail(st);
  return 0;
}
