/* test_vulkan_sessions MODELS_DIR [options] — sessions on the Vulkan device
 * (issue 4, "What it must show"), on whatever Vulkan device is first
 * (lavapipe in CI). MODELS_DIR holds what tests/models/export_models.py
 * writes (NAME.onnx, NAME.input.npy, NAME.expected.npy for mlp, small_cnn,
 * mobilenet_v2).
 *
 * Parts (all by default, in this order; --part a,b picks some):
 *   memory   1,000 consecutive runs of MobileNetV2 on one session: host RSS,
 *            the malloc heap and the device allocator's figures are sampled
 *            after run 10 and after the last run. RSS may grow by at most
 *            4 MiB, the heap by at most 256 KiB; device bytes in use, blocks
 *            and live buffers may not change at all. The first output must
 *            match PyTorch's (rtol 1e-3, atol 1e-4) and the last the first.
 *   stats    in the same session: the runtime's queue counters over the
 *            timed runs must show exactly one queue submission per run and
 *            at most 3 command buffers, and the run_stats line (what `kiln
 *            bench --profile` prints) must say the same.
 *   threads  two sessions used from two threads at once (small_cnn +
 *            small_cnn, then mlp + small_cnn), each thread running N times with
 *            inputs that change per run, every output compared with the ref
 *            device's output for that input (rtol 1e-3, atol 1e-4).
 *   leaks    with the Khronos validation layer forced on (a fresh context):
 *            sessions on mlp, small_cnn and mobilenet_v2 are created, run and
 *            destroyed (one at a time, then two alive at once, destroyed out
 *            of order); after each destroy the allocator's live buffers and
 *            used bytes are back at their starting values; then
 *            kiln_vulkan_shutdown() destroys the context so the layer reports
 *            every leaked Vulkan object, and the validation error count must
 *            not have grown.
 *   shapes   small_cnn_dyn (a symbolic batch axis) on one session whose
 *            input batch changes between runs (1, 4, 2, 4, 1): each output
 *            is compared with a ref session's for the same input. Sizes are
 *            specialization constants, so each new batch size takes
 *            modules from the cache and a size seen before compiles no
 *            SPIR-V module (the runtime's pipeline counters).
 *
 *   train    a kiln_trainer on small_cnn (SGD with momentum, MSE against a
 *            fixed target) on the device for --train-steps steps (default
 *            1000; issue 12): each step must be exactly one queue
 *            submission, and host RSS, the heap and the device allocator's
 *            figures are checked between step 10 and the last step as the
 *            memory part checks them; the loss must have gone down.
 *
 * Options: --runs N (memory part, default 1000; at least 20),
 *          --train-steps N (train part, default 1000; at least 20),
 *          --thread-runs N (per thread, default 200), --device NAME (default
 *          vulkan), --leak-control (after the leaks part, leak a vk_stream on
 *          purpose and check the layer reports it: proves the check is live;
 *          exits 0 only if the leak was reported), --fresh-cache (an empty
 *          KILN_CACHE_DIR for this process, removed at exit: every shader is
 *          compiled cold, the threads part compiles the same shaders in two
 *          threads at once).
 *
 * Exit: 0 pass, 1 fail (each failure printed as "FAIL: ...", a missing
 * model file included), 2 usage, 77 no Vulkan device or a kiln built
 * without Vulkan (register it only in Vulkan builds, where 77 is a failure). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <ftw.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "devices/vulkan/vk_public.h"
#include "runtime/device.h"
#include "runtime/plan.h"
#include "runtime/session.h"

#if !KILN_HAVE_VULKAN
int main(void) {
  printf("SKIP: this kiln was built without Vulkan\n");
  return 77;
}
#else
#include "devices/vulkan/vk_plan.h"

/* Under AddressSanitizer freed memory sits in a quarantine (up to 256 MiB)
 * and mallinfo2 sees nothing, so host figures are printed, not checked;
 * LeakSanitizer checks host leaks at exit instead. */
#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_ASAN 1
#endif
#endif
#ifndef KILN_TEST_ASAN
#define KILN_TEST_ASAN 0
#endif

#define RTOL 1e-3
#define ATOL 1e-4
#define RSS_SLACK_BYTES (4.0 * 1024 * 1024)
#define HEAP_SLACK_BYTES (256.0 * 1024)
#define MAX_COMMAND_BUFFERS 3
#define N_VARIANTS 3

static const char *g_dir;
static const char *g_device = "vulkan";
static int g_failures;
static uint64_t g_expected_errors; /* validation errors caused on purpose (--leak-control) */

#define FAILF(...)                     \
  do {                                 \
    printf("FAIL: " __VA_ARGS__);      \
    printf("\n");                      \
    fflush(stdout);                    \
    g_failures++;                      \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Consumes st: prints it as a failure with `what`; true if it was an error. */
static bool failed(kiln_status_t st, const char *what) {
  if (!st) return false;
  FAILF("%s: %s", what, kiln_status_message(st));
  kiln_status_free(st);
  return true;
}

/* ---- models and tensors -------------------------------------------------------- */

typedef struct model_files {
  char name[64];
  kiln_model *model;     /* owned */
  kiln_tensor *input;    /* owned: NAME.input.npy */
  kiln_tensor *expected; /* owned: NAME.expected.npy (PyTorch's output for `input`) */
  const char *input_name; /* borrowed from model */
} model_files;

static bool model_open_(const char *name, model_files *m) {
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s", name);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.onnx", g_dir, name);
  if (access(path, R_OK) != 0) {
    FAILF("%s is missing: export the models first (/usr/bin/python3 tests/models/export_models.py %s)", path, g_dir);
    return false;
  }
  if (failed(kiln_model_load_file(path, &m->model), path)) return false;
  snprintf(path, sizeof path, "%s/%s.input.npy", g_dir, name);
  if (failed(kiln_tensor_load_npy(path, &m->input), path)) return false;
  snprintf(path, sizeof path, "%s/%s.expected.npy", g_dir, name);
  if (failed(kiln_tensor_load_npy(path, &m->expected), path)) return false;
  kiln_io_info info;
  if (failed(kiln_model_input_info(m->model, 0, &info), "input info")) return false;
  m->input_name = info.name;
  if (kiln_tensor_dtype(m->input) != KILN_DTYPE_F32) {
    FAILF("%s: input is %s, expected f32", name, kiln_dtype_name(kiln_tensor_dtype(m->input)));
    return false;
  }
  return true;
}

static void model_close(model_files *m);

/* Loads NAME's files; on failure prints why and leaves nothing open. */
static bool model_open(const char *name, model_files *m) {
  if (model_open_(name, m)) return true;
  model_close(m);
  return false;
}

static void model_close(model_files *m) {
  kiln_tensor_release(m->input);
  kiln_tensor_release(m->expected);
  kiln_model_destroy(m->model);
  memset(m, 0, sizeof *m);
}

/* A new tensor: `t` times `scale` (f32). */
static kiln_tensor *scaled(const kiln_tensor *t, float scale) {
  kiln_tensor *out = NULL;
  kiln_status_t st = kiln_tensor_create(KILN_DTYPE_F32, kiln_tensor_rank(t), kiln_tensor_dims(t), &out);
  if (failed(st, "tensor create")) return NULL;
  const float *src = kiln_tensor_data((kiln_tensor *)t);
  float *dst = kiln_tensor_data(out);
  for (int64_t i = 0; i < kiln_tensor_numel(t); i++) dst[i] = src[i] * scale;
  return out;
}

static const float kVariantScale[N_VARIANTS] = {1.0f, -0.5f, 2.0f};

typedef struct cmp_result {
  double max_abs, worst; /* worst: max |got-want| / (atol + rtol |want|) */
  int64_t bad, first_bad;
  bool shape_ok, identical;
} cmp_result;

static cmp_result compare(const kiln_tensor *got, const kiln_tensor *want) {
  cmp_result r = {0, 0, 0, -1, true, true};
  int rank = kiln_tensor_rank(got);
  if (kiln_tensor_dtype(got) != KILN_DTYPE_F32 || kiln_tensor_dtype(want) != KILN_DTYPE_F32 ||
      rank != kiln_tensor_rank(want) ||
      memcmp(kiln_tensor_dims(got), kiln_tensor_dims(want), sizeof(int64_t) * (size_t)rank) != 0) {
    r.shape_ok = r.identical = false;
    return r;
  }
  const float *g = kiln_tensor_data((kiln_tensor *)got), *w = kiln_tensor_data((kiln_tensor *)want);
  for (int64_t i = 0; i < kiln_tensor_numel(got); i++) {
    double d = fabs((double)g[i] - (double)w[i]);
    if (g[i] != w[i]) r.identical = false;
    if (d > r.max_abs || d != d) r.max_abs = d;
    double e = d / (ATOL + RTOL * fabs((double)w[i]));
    if (e > r.worst || e != e) r.worst = e;
    if (!(d <= ATOL + RTOL * fabs((double)w[i]))) {
      if (r.first_bad < 0) r.first_bad = i;
      r.bad++;
    }
  }
  return r;
}

static bool cmp_ok(const cmp_result *r) { return r->shape_ok && r->bad == 0; }

static kiln_status_t run1(kiln_session *s, const model_files *m, const kiln_tensor *input, kiln_tensor **out) {
  const char *names[1] = {m->input_name};
  *out = NULL;
  return kiln_session_run(s, 1, names, &input, 1, out);
}

static kiln_status_t session_on(const model_files *m, const char *device, kiln_session **out) {
  kiln_session_options o = kiln_session_options_default();
  o.device = device;
  return kiln_session_create(m->model, &o, out);
}

/* ---- memory figures ----------------------------------------------------------- */

typedef struct mem_sample {
  double rss;  /* bytes resident */
  double heap; /* bytes malloc'd and in use (glibc mallinfo2; 0 where unknown) */
  vk_memory_stats dev;
  vk_queue_stats q;
} mem_sample;

static double rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

static double heap_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  return (double)mi.uordblks + (double)mi.hblkhd;
#else
  return 0;
#endif
}

/* The context of the session's primary device (a Vulkan device). */
static kiln_status_t context_of(kiln_device *dev, vk_context **out) {
  kiln_device_info info;
  dev->vt->query(dev, &info);
  if (strncmp(info.name, "vulkan", 6) != 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "device '%s' is not a Vulkan device", info.name);
  return vk_device_context((vk_device_state *)dev->impl, out);
}

static void sample(vk_context *ctx, mem_sample *m) {
  m->rss = rss_bytes();
  m->heap = heap_bytes();
  vk_memory_stats_get(ctx, &m->dev);
  vk_queue_stats_get(ctx, &m->q);
}

static const double MiB = 1024.0 * 1024.0;

static void print_sample(const char *when, const mem_sample *m) {
  printf("  %-14s host RSS %8.2f MiB, heap %8.2f MiB | device: used %.2f MiB in %d live buffers, blocks %.2f MiB; "
         "host-visible: used %.2f MiB, blocks %.2f MiB; %d blocks\n",
         when, m->rss / MiB, m->heap / MiB, (double)m->dev.device_used_bytes / MiB, m->dev.n_live_buffers,
         (double)m->dev.device_block_bytes / MiB, (double)m->dev.host_used_bytes / MiB,
         (double)m->dev.host_block_bytes / MiB, m->dev.n_blocks);
}

/* ---- part: memory + stats --------------------------------------------------------- */

static bool g_part_stats;

static void part_memory(int runs) {
  printf("== memory: %d consecutive runs of mobilenet_v2 on one %s session\n", runs, g_device);
  double t0 = now_s();
  model_files m;
  if (!model_open("mobilenet_v2", &m)) return;
  kiln_session *s = NULL;
  kiln_tensor *first = NULL, *out = NULL;
  vk_context *ctx = NULL;
  mem_sample at10 = {0}, mid = {0}, last = {0};
  if (failed(session_on(&m, g_device, &s), "session create")) goto done;
  if (failed(context_of(s->devices[0], &ctx), "device context")) goto done;
  double t_first = now_s();
  if (failed(run1(s, &m, m.input, &first), "run 1")) goto done;
  t_first = now_s() - t_first;
  if (!s->exec) {
    FAILF("%s interpreted mobilenet_v2 instead of compiling it: %s", g_device, s->fallback_reason);
    goto done;
  }
  cmp_result r = compare(first, m.expected);
  printf("  run 1 (prepare + run): %.2f s; vs PyTorch: max abs err %.3g, worst err/tolerance %.3f\n", t_first,
         r.max_abs, r.worst);
  if (!cmp_ok(&r)) FAILF("mobilenet_v2 run 1: %lld values outside rtol 1e-3 atol 1e-4%s", (long long)r.bad,
                         r.shape_ok ? "" : " (wrong dtype or shape)");
  double t_loop = 0;
  int mid_run = runs / 2;
  for (int i = 2; i <= runs; i++) {
    double t = now_s();
    kiln_status_t st = run1(s, &m, m.input, &out);
    t_loop += now_s() - t;
    if (st) {
      char what[64];
      snprintf(what, sizeof what, "run %d", i);
      failed(st, what);
      goto done;
    }
    if (i < runs) {
      kiln_tensor_release(out);
      out = NULL;
    }
    if (i % 100 == 0 && i < runs)
      printf("  ... %d runs, %.1f ms per run so far, host RSS %.2f MiB\n", i, 1e3 * t_loop / (i - 1), rss_bytes() / MiB);
    if (i == 10) sample(ctx, &at10);
    if (i == mid_run && mid_run > 10) sample(ctx, &mid);
  }
  sample(ctx, &last);
  double per_run = t_loop / (runs - 1);
  printf("  runs 2..%d: %.1f s, %.1f ms per run\n", runs, t_loop, 1e3 * per_run);
  print_sample("after run 10:", &at10);
  if (mid_run > 10) {
    char w[32];
    snprintf(w, sizeof w, "after run %d:", mid_run);
    print_sample(w, &mid);
  }
  char w[32];
  snprintf(w, sizeof w, "after run %d:", runs);
  print_sample(w, &last);
  double d_rss = last.rss - at10.rss, d_heap = last.heap - at10.heap;
  printf("  growth from run 10 to run %d: host RSS %+.3f MiB (limit %.0f), heap %+.3f MiB (limit %.2f), "
         "device used %+lld B, host-visible used %+lld B, device blocks %+lld B, host-visible blocks %+lld B, "
         "live buffers %+d, blocks %+d\n",
         runs, d_rss / MiB, RSS_SLACK_BYTES / MiB, d_heap / MiB, HEAP_SLACK_BYTES / MiB,
         (long long)(last.dev.device_used_bytes - at10.dev.device_used_bytes),
         (long long)(last.dev.host_used_bytes - at10.dev.host_used_bytes),
         (long long)(last.dev.device_block_bytes - at10.dev.device_block_bytes),
         (long long)(last.dev.host_block_bytes - at10.dev.host_block_bytes),
         last.dev.n_live_buffers - at10.dev.n_live_buffers, last.dev.n_blocks - at10.dev.n_blocks);
  if (KILN_TEST_ASAN)
    printf("  (AddressSanitizer build: host RSS and heap growth not checked; LeakSanitizer checks at exit)\n");
  else if (d_rss > RSS_SLACK_BYTES) FAILF("host RSS grew by %.2f MiB over %d runs", d_rss / MiB, runs - 10);
  if (!KILN_TEST_ASAN && d_heap > HEAP_SLACK_BYTES)
    FAILF("the malloc heap grew by %.2f MiB over %d runs (%.0f bytes per run)", d_heap / MiB, runs - 10,
          d_heap / (runs - 10));
  if (last.dev.device_used_bytes != at10.dev.device_used_bytes || last.dev.host_used_bytes != at10.dev.host_used_bytes ||
      last.dev.n_live_buffers != at10.dev.n_live_buffers)
    FAILF("device memory in use changed between run 10 and run %d", runs);
  if (last.dev.device_block_bytes != at10.dev.device_block_bytes ||
      last.dev.host_block_bytes != at10.dev.host_block_bytes || last.dev.n_blocks != at10.dev.n_blocks)
    FAILF("device memory blocks held by the context changed between run 10 and run %d", runs);
  cmp_result rl = compare(out, first);
  printf("  run %d vs run 1: %s (max abs diff %.3g)\n", runs, rl.identical ? "bitwise identical" : "differs",
         rl.max_abs);
  if (!cmp_ok(&rl)) FAILF("run %d's output differs from run 1's beyond rtol 1e-3 atol 1e-4", runs);

  if (g_part_stats) {
    printf("== stats: command buffers and queue submissions per mobilenet_v2 run\n");
    double n = runs - 10;
    double subs = (double)(last.q.submissions - at10.q.submissions) / n;
    double cbs = (double)(last.q.command_buffers - at10.q.command_buffers) / n;
    double disp = (double)(last.q.dispatches - at10.q.dispatches) / n;
    printf("  runtime queue counters, runs 11..%d: %.2f submissions, %.2f command buffers, %.1f dispatches per run\n",
           runs, subs, cbs, disp);
    if (subs != 1.0) FAILF("%.2f queue submissions per run, expected exactly 1", subs);
    if (cbs > MAX_COMMAND_BUFFERS) FAILF("%.2f command buffers per run, expected at most %d", cbs, MAX_COMMAND_BUFFERS);
    if (!s->devices[0]->vt->plan_run_stats) {
      FAILF("%s has no run_stats slot (kiln bench --profile prints nothing)", g_device);
    } else {
      char *text = NULL;
      size_t len = 0;
      FILE *f = open_memstream(&text, &len);
      if (f) {
        kiln_plan_run_stats(s->devices[0], s->exec, f);
        fclose(f);
      }
      printf("  run_stats: %s", text ? text : "(none)\n");
      int ns = -1, nc = -1, nd = -1;
      const char *p = text ? strstr(text, "last run: ") : NULL;
      if (!p || sscanf(p, "last run: %d queue submission%*[s,] %d command buffer%*[s,] %d dispatches", &ns, &nc,
                       &nd) != 3)
        FAILF("cannot parse the run_stats line");
      else {
        if (ns != 1) FAILF("run_stats: %d queue submissions, expected 1", ns);
        if (nc > MAX_COMMAND_BUFFERS) FAILF("run_stats: %d command buffers, expected at most %d", nc, MAX_COMMAND_BUFFERS);
        if (nd != (int)lround(disp)) FAILF("run_stats says %d dispatches, the queue counted %.1f", nd, disp);
      }
      free(text);
    }
  }
done:
  kiln_tensor_release(first);
  kiln_tensor_release(out);
  kiln_session_destroy(s);
  model_close(&m);
  printf("  memory%s part: %.1f s\n", g_part_stats ? " + stats" : "", now_s() - t0);
}

/* ---- part: train ----------------------------------------------------------------- */

/* Bytes of the model's float initializers. */
static uint64_t weight_bytes(const kiln_model *model) {
  const kiln_graph *g = model->ir->graph;
  uint64_t n = 0;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].constant && g->values[v].constant->dtype == KILN_DTYPE_F32) n += kiln_tensor_nbytes(g->values[v].constant);
  return n;
}

static void part_train(int steps) {
  printf("== train: %d steps of small_cnn on one %s trainer\n", steps, g_device);
  double t0 = now_s();
  model_files m;
  if (!model_open("small_cnn", &m)) return;
  kiln_trainer *t = NULL;
  kiln_tensor *target = NULL;
  vk_context *ctx = NULL;
  mem_sample at10 = {0}, last = {0};
  kiln_device *dev = kiln_device_get(g_device);
  if (!dev || failed(context_of(dev, &ctx), "device context")) goto done;
  /* the target: PyTorch's output scaled, so the loss starts well above 0 */
  if (failed(kiln_tensor_clone(m.expected, &target), "target")) goto done;
  for (int64_t i = 0; i < target->numel; i++) ((float *)target->data)[i] = 0.5f * ((float *)target->data)[i] + 0.25f;
  kiln_trainer_options o = kiln_trainer_options_default();
  o.loss = KILN_LOSS_MSE;
  o.optimizer = KILN_OPTIMIZER_SGD;
  o.lr = 0.01f;
  o.momentum = 0.9f;
  o.device = g_device;
  if (failed(kiln_trainer_create(m.model, &o, &t), "trainer create")) goto done;
  const char *names[1] = {m.input_name};
  const kiln_tensor *inputs[1] = {m.input};
  double loss0 = 0, loss = 0, t_loop = 0;
  vk_queue_stats q0 = {0}, q1 = {0};
  uint64_t up = 0, down = 0;
  for (int i = 1; i <= steps; i++) {
    if (i > 10) vk_queue_stats_get(ctx, &q0);
    double ts = now_s();
    kiln_status_t st = kiln_trainer_step(t, 1, names, inputs, target, &loss);
    if (i > 1) t_loop += now_s() - ts;
    if (st) {
      char what[64];
      snprintf(what, sizeof what, "step %d", i);
      failed(st, what);
      goto done;
    }
    if (i > 10) {
      vk_queue_stats_get(ctx, &q1);
      if (q1.submissions - q0.submissions != 1) {
        FAILF("step %d: %llu queue submissions, expected exactly 1", i,
              (unsigned long long)(q1.submissions - q0.submissions));
        goto done;
      }
      /* The weights and the optimizer's state stay on the device: a step
       * uploads the batch, the target and the step's scalars, and reads
       * back the loss. */
      up = q1.uploaded_bytes - q0.uploaded_bytes;
      down = q1.read_back_bytes - q0.read_back_bytes;
      uint64_t batch = kiln_tensor_nbytes(m.input) + kiln_tensor_nbytes(target);
      if (up > batch + 64 || down > 64) {
        FAILF("step %d: %llu bytes uploaded (batch and target: %llu), %llu read back: the weights or the optimizer's "
              "state travel (%llu bytes of weights)",
              i, (unsigned long long)up, (unsigned long long)batch, (unsigned long long)down,
              (unsigned long long)weight_bytes(m.model));
        goto done;
      }
    }
    if (i == 1) loss0 = loss;
    if (i == 10) sample(ctx, &at10);
  }
  sample(ctx, &last);
  printf("  loss: step 1 %.6g, step %d %.6g; steps 2..%d: %.1f ms per step, one queue submission each from step 11\n",
         loss0, steps, loss, steps, 1e3 * t_loop / (steps - 1));
  printf("  the last step moved %llu bytes up (batch and target %llu), %llu down; the weights are %llu bytes\n",
         (unsigned long long)up, (unsigned long long)(kiln_tensor_nbytes(m.input) + kiln_tensor_nbytes(target)),
         (unsigned long long)down, (unsigned long long)weight_bytes(m.model));
  print_sample("after step 10:", &at10);
  char w[32];
  snprintf(w, sizeof w, "after step %d:", steps);
  print_sample(w, &last);
  double d_rss = last.rss - at10.rss, d_heap = last.heap - at10.heap;
  printf("  growth from step 10 to step %d: host RSS %+.3f MiB (limit %.0f), heap %+.3f MiB (limit %.2f), device used "
         "%+lld B, device blocks %+lld B, live buffers %+d\n",
         steps, d_rss / MiB, RSS_SLACK_BYTES / MiB, d_heap / MiB, HEAP_SLACK_BYTES / MiB,
         (long long)(last.dev.device_used_bytes - at10.dev.device_used_bytes),
         (long long)(last.dev.device_block_bytes - at10.dev.device_block_bytes),
         last.dev.n_live_buffers - at10.dev.n_live_buffers);
  if (!(loss < loss0)) FAILF("the loss did not go down: %.6g at step 1, %.6g at step %d", loss0, loss, steps);
  if (!KILN_TEST_ASAN && d_rss > RSS_SLACK_BYTES) FAILF("host RSS grew by %.2f MiB over %d steps", d_rss / MiB, steps - 10);
  if (!KILN_TEST_ASAN && d_heap > HEAP_SLACK_BYTES)
    FAILF("the malloc heap grew by %.2f MiB over %d steps", d_heap / MiB, steps - 10);
  if (last.dev.device_used_bytes != at10.dev.device_used_bytes || last.dev.host_used_bytes != at10.dev.host_used_bytes ||
      last.dev.n_live_buffers != at10.dev.n_live_buffers || last.dev.device_block_bytes != at10.dev.device_block_bytes ||
      last.dev.n_blocks != at10.dev.n_blocks)
    FAILF("device memory in use or held changed between step 10 and step %d", steps);
done:
  kiln_trainer_destroy(t);
  kiln_tensor_release(target);
  model_close(&m);
  printf("  train part: %.1f s\n", now_s() - t0);
}

/* ---- part: threads --------------------------------------------------------------- */

typedef struct worker {
  const model_files *m;
  kiln_tensor *inputs[N_VARIANTS]; /* borrowed */
  kiln_tensor *want[N_VARIANTS];   /* borrowed: ref outputs */
  int runs, id;
  pthread_barrier_t *start;
  /* results */
  double max_abs, worst, seconds;
  int done;
  char error[512];
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  kiln_session *s = NULL;
  kiln_status_t st = session_on(w->m, g_device, &s);
  pthread_barrier_wait(w->start); /* both threads prepare (first run) and run at once */
  double t0 = now_s();
  for (int i = 0; i < w->runs && !st; i++) {
    int v = (i + w->id) % N_VARIANTS;
    kiln_tensor *out = NULL;
    st = run1(s, w->m, w->inputs[v], &out);
    if (st) break;
    if (i == 0 && !s->exec) {
      snprintf(w->error, sizeof w->error, "thread %d (%s): %s interpreted the model instead of compiling it: %s", w->id,
               w->m->name, g_device, s->fallback_reason);
      kiln_tensor_release(out);
      break;
    }
    cmp_result r = compare(out, w->want[v]);
    kiln_tensor_release(out);
    if (r.max_abs > w->max_abs) w->max_abs = r.max_abs;
    if (r.worst > w->worst) w->worst = r.worst;
    if (!cmp_ok(&r)) {
      snprintf(w->error, sizeof w->error,
               "thread %d (%s), run %d (input variant %d): %lld values outside rtol 1e-3 atol 1e-4 of ref "
               "(max abs err %.3g, first bad at %lld)%s",
               w->id, w->m->name, i + 1, v, (long long)r.bad, r.max_abs, (long long)r.first_bad,
               r.shape_ok ? "" : " (wrong dtype or shape)");
      break;
    }
    w->done++;
  }
  w->seconds = now_s() - t0;
  if (st) {
    snprintf(w->error, sizeof w->error, "thread %d (%s), run %d: %s", w->id, w->m->name, w->done + 1,
             kiln_status_message(st));
    kiln_status_free(st);
  }
  kiln_session_destroy(s);
  return NULL;
}

typedef struct threaded_model {
  model_files m;
  kiln_tensor *inputs[N_VARIANTS]; /* owned */
  kiln_tensor *want[N_VARIANTS];   /* owned: ref device outputs */
} threaded_model;

static bool threaded_open(const char *name, threaded_model *t) {
  memset(t, 0, sizeof *t);
  if (!model_open(name, &t->m)) return false;
  kiln_session *ref = NULL;
  if (failed(session_on(&t->m, "ref", &ref), "ref session")) return false;
  bool ok = true;
  for (int v = 0; v < N_VARIANTS && ok; v++) {
    t->inputs[v] = scaled(t->m.input, kVariantScale[v]);
    ok = t->inputs[v] && !failed(run1(ref, &t->m, t->inputs[v], &t->want[v]), "ref run");
  }
  kiln_session_destroy(ref);
  if (ok) { /* the ref device itself agrees with PyTorch on the exported input */
    cmp_result r = compare(t->want[0], t->m.expected);
    if (!cmp_ok(&r)) {
      FAILF("%s: the ref device's output does not match PyTorch's (max abs err %.3g)", name, r.max_abs);
      ok = false;
    }
  }
  return ok;
}

static void threaded_close(threaded_model *t) {
  for (int v = 0; v < N_VARIANTS; v++) {
    kiln_tensor_release(t->inputs[v]);
    kiln_tensor_release(t->want[v]);
  }
  model_close(&t->m);
}

static void run_pair(threaded_model *a, threaded_model *b, int runs) {
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  worker w[2];
  threaded_model *tm[2] = {a, b};
  pthread_t th[2];
  int started = 0;
  for (int i = 0; i < 2; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].m = &tm[i]->m;
    for (int v = 0; v < N_VARIANTS; v++) {
      w[i].inputs[v] = tm[i]->inputs[v];
      w[i].want[v] = tm[i]->want[v];
    }
    w[i].runs = runs;
    w[i].id = i;
    w[i].start = &start;
  }
  for (int i = 0; i < 2; i++) {
    if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
      FAILF("pthread_create failed");
      break;
    }
    started++;
  }
  if (started < 2) { /* release the barrier for a lone thread: run it alone, the pair is already failed */
    if (started == 1) pthread_barrier_wait(&start);
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < started; i++) {
    printf("  thread %d: %-10s %d/%d runs correct in %.1f s (incl. prepare); max abs err vs ref %.3g, worst "
           "err/tolerance %.3f\n",
           i, w[i].m->name, w[i].done, runs, w[i].seconds, w[i].max_abs, w[i].worst);
    if (w[i].error[0]) FAILF("%s", w[i].error);
  }
}

static void part_threads(int runs) {
  printf("== threads: two %s sessions used from two threads at once, %d runs each\n", g_device, runs);
  double t0 = now_s();
  threaded_model mlp, cnn, cnn2;
  bool ok = threaded_open("mlp", &mlp);
  ok = threaded_open("small_cnn", &cnn) && ok;
  ok = threaded_open("small_cnn", &cnn2) && ok; /* its own model object: nothing shared but the device */
  if (ok) {
    /* The same model first: with --fresh-cache both threads compile (and
     * cache) the same shaders at once. */
    printf(" small_cnn + small_cnn (two sessions of the same model):\n");
    run_pair(&cnn, &cnn2, runs);
    printf(" mlp + small_cnn:\n");
    run_pair(&mlp, &cnn, runs);
  }
  threaded_close(&mlp);
  threaded_close(&cnn);
  threaded_close(&cnn2);
  printf("  threads part: %.1f s\n", now_s() - t0);
}

/* ---- part: leaks ------------------------------------------------------------------ */

/* Whether the loader lists the Khronos validation layer (else
 * KILN_VULKAN_VALIDATION only prints a note, and the check would prove nothing). */
static bool validation_layer_installed(void) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  typedef void *(*get_proc_fn)(void *, const char *);
  typedef int (*enum_layers_fn)(uint32_t *, void *);
  get_proc_fn gipa = (get_proc_fn)dlsym(lib, "vkGetInstanceProcAddr");
  enum_layers_fn enum_layers = gipa ? (enum_layers_fn)gipa(NULL, "vkEnumerateInstanceLayerProperties") : NULL;
  bool found = false;
  uint32_t n = 0;
  if (enum_layers && enum_layers(&n, NULL) == 0 && n) {
    /* VkLayerProperties: char layerName[256]; uint32_t specVersion, implementationVersion; char description[256]; */
    enum { PROPS_BYTES = 256 + 4 + 4 + 256 };
    char *props = calloc(n, PROPS_BYTES);
    if (props && enum_layers(&n, props) >= 0)
      for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(props + (size_t)i * PROPS_BYTES, "VK_LAYER_KHRONOS_validation");
    free(props);
  }
  dlclose(lib);
  return found;
}

static bool same_use(const vk_memory_stats *a, const vk_memory_stats *b) {
  return a->n_live_buffers == b->n_live_buffers && a->device_used_bytes == b->device_used_bytes &&
         a->host_used_bytes == b->host_used_bytes;
}

static void check_back(vk_context *ctx, const vk_memory_stats *start, const char *after) {
  vk_memory_stats now;
  vk_memory_stats_get(ctx, &now);
  printf("  after %-44s live buffers %d, device used %llu B, host-visible used %llu B, blocks %d (%.1f MiB)\n", after,
         now.n_live_buffers, (unsigned long long)now.device_used_bytes, (unsigned long long)now.host_used_bytes,
         now.n_blocks, (double)(now.device_block_bytes + now.host_block_bytes) / MiB);
  if (!same_use(&now, start))
    FAILF("after %s: %d live buffers / %llu device bytes / %llu host-visible bytes in use, expected %d / %llu / %llu "
          "as before the session",
          after, now.n_live_buffers, (unsigned long long)now.device_used_bytes, (unsigned long long)now.host_used_bytes,
          start->n_live_buffers, (unsigned long long)start->device_used_bytes,
          (unsigned long long)start->host_used_bytes);
}

/* Creates a session, runs it twice (checked against PyTorch's output), keeps it. */
static kiln_session *open_and_run(const model_files *m) {
  kiln_session *s = NULL;
  if (failed(session_on(m, g_device, &s), "session create")) return NULL;
  for (int i = 0; i < 2; i++) {
    kiln_tensor *out = NULL;
    char what[128];
    snprintf(what, sizeof what, "%s run %d", m->name, i + 1);
    if (failed(run1(s, m, m->input, &out), what)) break;
    cmp_result r = compare(out, m->expected);
    kiln_tensor_release(out);
    if (!cmp_ok(&r)) FAILF("%s: %lld values outside rtol 1e-3 atol 1e-4 of PyTorch's output", what, (long long)r.bad);
  }
  if (!s->exec) FAILF("%s: %s interpreted the model instead of compiling it: %s", m->name, g_device, s->fallback_reason);
  return s;
}

static void part_leaks(bool leak_control) {
  printf("== leaks: sessions created and destroyed under the Khronos validation layer\n");
  double t0 = now_s();
  if (!validation_layer_installed()) {
    FAILF("VK_LAYER_KHRONOS_validation is not installed (Debian: vulkan-validationlayers): cannot check for leaks");
    return;
  }
  /* A fresh context with the layer on: contexts read the variable when created. */
  kiln_vulkan_shutdown();
  const char *v = getenv("KILN_VULKAN_VALIDATION");
  if (!v || !*v || !strcmp(v, "0")) setenv("KILN_VULKAN_VALIDATION", "1", 1);
  uint64_t errors0 = kiln_vulkan_validation_errors();
  kiln_device *dev = kiln_device_get(g_device);
  vk_context *ctx = NULL;
  if (!dev) {
    FAILF("no device '%s'", g_device);
    return;
  }
  if (failed(context_of(dev, &ctx), "device context")) return;
  vk_memory_stats start;
  vk_memory_stats_get(ctx, &start);
  const char *names[3] = {"mlp", "small_cnn", "mobilenet_v2"};
  model_files m[3];
  bool opened[3] = {false, false, false};
  for (int i = 0; i < 3; i++) opened[i] = model_open(names[i], &m[i]);
  for (int i = 0; i < 3; i++) {
    if (!opened[i]) continue;
    kiln_session *s = open_and_run(&m[i]);
    kiln_session_destroy(s);
    char what[96];
    snprintf(what, sizeof what, "%s session destroyed:", names[i]);
    check_back(ctx, &start, what);
  }
  if (opened[0] && opened[1]) { /* two alive at once, destroyed first-created first */
    kiln_session *a = open_and_run(&m[0]), *b = open_and_run(&m[1]);
    kiln_session_destroy(a);
    kiln_session_destroy(b);
    check_back(ctx, &start, "mlp + small_cnn together, destroyed:");
  }
  if (opened[1]) { /* created but never run (nothing compiled) */
    kiln_session *s = NULL;
    if (!failed(session_on(&m[1], g_device, &s), "session create")) kiln_session_destroy(s);
    check_back(ctx, &start, "a never-run session destroyed:");
  }
  for (int i = 0; i < 3; i++)
    if (opened[i]) model_close(&m[i]);
  /* Destroying the context makes the layer report every object still alive. */
  kiln_vulkan_shutdown();
  uint64_t errors1 = kiln_vulkan_validation_errors();
  printf("  validation errors: %llu before, %llu after kiln_vulkan_shutdown()\n", (unsigned long long)errors0,
         (unsigned long long)errors1);
  if (errors1 != errors0)
    FAILF("the validation layer reported %llu error(s) (see 'kiln: vulkan validation: error' on stderr)",
          (unsigned long long)(errors1 - errors0));
  if (leak_control) {
    /* Proves the check above can fail: a stream (command pool, descriptor
     * pool) left alive must be reported when its context is destroyed. */
    printf("  leak control: leaking a vk_stream on purpose; the layer must report it (the errors below are expected)\n");
    fflush(stdout);
    static vk_stream *leaked; /* reachable from a global: not a LeakSanitizer report */
    if (!failed(context_of(dev, &ctx), "device context") && !failed(vk_stream_create(ctx, &leaked), "stream create")) {
      kiln_vulkan_shutdown();
      uint64_t errors2 = kiln_vulkan_validation_errors();
      printf("  leak control: %llu validation error(s) reported for the leaked stream\n",
             (unsigned long long)(errors2 - errors1));
      g_expected_errors += errors2 - errors1;
      if (errors2 == errors1) FAILF("leak control: a leaked vk_stream was not reported: the leak check proves nothing");
    }
  }
  printf("  leaks part: %.1f s\n", now_s() - t0);
}

/* ---- main ------------------------------------------------------------------------ */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* ---- shapes ------------------------------------------------------------------- */

static void part_shapes(void) {
  printf("== shapes: one %s session of small_cnn_dyn, batch 1, 4, 2, 4, 1, each output against a ref session\n",
         g_device);
  double t0 = now_s();
  model_files m;
  if (!model_open("small_cnn_dyn", &m)) return;
  kiln_session *vs = NULL, *rs = NULL;
  vk_context *ctx = NULL;
  if (failed(session_on(&m, g_device, &vs), "vulkan session") || failed(session_on(&m, "ref", &rs), "ref session") ||
      failed(context_of(kiln_device_get(g_device), &ctx), "vulkan context"))
    goto out;
  static const int64_t batches[] = {1, 4, 2, 4, 1};
  uint64_t rng = 0x2545f4914f6cdd1dull;
  for (int i = 0; i < (int)(sizeof batches / sizeof batches[0]); i++) {
    int64_t dims[4] = {batches[i], 3, 32, 32};
    kiln_tensor *x = NULL, *yv = NULL, *yr = NULL;
    if (failed(kiln_tensor_create(KILN_DTYPE_F32, 4, dims, &x), "input tensor")) goto out;
    float *p = kiln_tensor_data(x);
    for (int64_t e = 0; e < kiln_tensor_numel(x); e++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      p[e] = (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0); /* uniform [-2, 2) */
    }
    vk_pipeline_stats before, after;
    vk_pipeline_stats_get(ctx, &before);
    bool ran = !failed(run1(vs, &m, x, &yv), "vulkan run");
    vk_pipeline_stats_get(ctx, &after);
    ran = ran && !failed(run1(rs, &m, x, &yr), "ref run");
    if (ran) {
      cmp_result r = compare(yv, yr);
      bool batch_ok = kiln_tensor_rank(yv) == 2 && kiln_tensor_dims(yv)[0] == batches[i];
      unsigned long long compiled = after.spirv_compiled - before.spirv_compiled;
      printf("  batch %lld: max abs err vs ref %.3g, worst err/tolerance %.3f; SPIR-V modules compiled %llu, from the "
             "cache %llu\n",
             (long long)batches[i], r.max_abs, r.worst, compiled,
             (unsigned long long)(after.spirv_cached - before.spirv_cached));
      if (!cmp_ok(&r) || !batch_ok)
        FAILF("small_cnn_dyn batch %lld: %s", (long long)batches[i],
              !batch_ok ? "output batch differs from the input's" : "output differs from ref");
      /* A new batch size reuses the modules of the shapes before it (same
       * kernel structure, other constants); one seen before compiles none. */
      if (i > 0 && after.spirv_cached == before.spirv_cached)
        FAILF("small_cnn_dyn batch %lld took no SPIR-V module from the cache: sizes should be specialization constants",
              (long long)batches[i]);
      if (i >= 3 && compiled)
        FAILF("small_cnn_dyn batch %lld again compiled %llu SPIR-V modules; it should compile none",
              (long long)batches[i], compiled);
    }
    kiln_tensor_release(x);
    kiln_tensor_release(yv);
    kiln_tensor_release(yr);
  }
out:
  kiln_session_destroy(vs);
  kiln_session_destroy(rs);
  model_close(&m);
  printf("  shapes part: %.1f s\n", now_s() - t0);
}

static bool has_part(const char *parts, const char *p) {
  if (!parts) return true;
  size_t n = strlen(p);
  for (const char *s = parts; (s = strstr(s, p)); s += n)
    if ((s == parts || s[-1] == ',') && (s[n] == 0 || s[n] == ',')) return true;
  return false;
}

static int run_parts(const char *parts, int runs, int thread_runs, int train_steps, bool leak_control);

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s MODELS_DIR [--part memory,stats,train,threads,leaks,shapes] [--runs N] [--train-steps N] "
          "[--thread-runs N] [--device D] [--leak-control] [--fresh-cache]\n",
          argv0);
  return 2;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *parts = NULL;
  int runs = 1000, thread_runs = 200, train_steps = 1000;
  bool leak_control = false, fresh_cache = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--leak-control")) leak_control = true;
    else if (!strcmp(a, "--fresh-cache")) fresh_cache = true;
    else if (i + 1 < argc && !strcmp(a, "--part")) parts = argv[++i];
    else if (i + 1 < argc && !strcmp(a, "--runs")) runs = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(a, "--thread-runs")) thread_runs = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(a, "--train-steps")) train_steps = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(a, "--device")) g_device = argv[++i];
    else if (a[0] != '-' && !g_dir) g_dir = a;
    else return usage(argv[0]);
  }
  if (!g_dir || runs < 20 || thread_runs < 1 || train_steps < 20) return usage(argv[0]);
  char cache[] = "/tmp/kiln_vktests_cache.XXXXXX";
  if (fresh_cache) { /* before any device use: the cache folder is read once */
    if (!mkdtemp(cache)) {
      perror("mkdtemp");
      return 2;
    }
    setenv("KILN_CACHE_DIR", cache, 1);
    printf("shader cache: %s (fresh)\n", cache);
  }
  int rc = run_parts(parts, runs, thread_runs, train_steps, leak_control);
  if (fresh_cache) nftw(cache, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}

static int run_parts(const char *parts, int runs, int thread_runs, int train_steps, bool leak_control) {
  if (!kiln_device_get(g_device)) {
    printf("SKIP: no device '%s': %s\n", g_device,
           kiln_device_absent_reason("vulkan") ? kiln_device_absent_reason("vulkan") : "?");
    return 77;
  }
  kiln_device_info info;
  kiln_device_get(g_device)->vt->query(kiln_device_get(g_device), &info);
  printf("device %s: %s\n", info.name, info.description);
  double t0 = now_s();
  g_part_stats = has_part(parts, "stats");
  if (has_part(parts, "memory") || g_part_stats) part_memory(runs);
  if (has_part(parts, "train")) part_train(train_steps);
  if (has_part(parts, "threads")) part_threads(thread_runs);
  if (has_part(parts, "leaks")) part_leaks(leak_control);
  if (has_part(parts, "shapes")) part_shapes();
  /* Under KILN_VULKAN_VALIDATION (set by the caller, or by the leaks part),
   * every part counts: destroy the contexts so leaks are reported too. */
  kiln_vulkan_shutdown();
  uint64_t verrors = kiln_vulkan_validation_errors();
  const char *venv = getenv("KILN_VULKAN_VALIDATION");
  printf("validation layer %s at exit; validation errors in this process: %llu (%llu of them on purpose)\n",
         venv && *venv && strcmp(venv, "0") ? "on" : "off", (unsigned long long)verrors,
         (unsigned long long)g_expected_errors);
  if (verrors > g_expected_errors)
    FAILF("the validation layer reported %llu error(s) (see 'kiln: vulkan validation: error' on stderr)",
          (unsigned long long)(verrors - g_expected_errors));
  printf("total: %.1f s\n", now_s() - t0);
  if (g_failures) {
    printf("FAILED: %d check(s)\n", g_failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
#endif /* KILN_HAVE_VULKAN */
