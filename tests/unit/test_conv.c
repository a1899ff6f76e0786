/* test_conv.c — every convolution path of the cpu device (cpu_conv.c)
 * against the reference Conv kernel (src/ops), on random inputs over odd
 * shapes, pads, strides, dilations and groups, with 1, 2 and 3 threads, with
 * and without a fused epilogue (which must visit every output element
 * exactly once).
 *
 *   test_conv [-v] [--bench]   (--bench times the applicable paths of a few
 *                               MobileNetV2 / ResNet-50 layers instead)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu_features.h"
#include "base/threadpool.h"
#include "devices/cpu/cpu_internal.h"
#include "ir/graph.h"
#include "ops/op.h"
#include "test_random.h"

static int g_failures, g_checks, g_verbose;


#define MUST(expr)                                                                  \
  do {                                                                              \
    kiln_status_t st_ = (expr);                                                     \
    if (st_) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, kiln_status_message(st_)); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

typedef struct conv_case {
  int nsp;
  int64_t n, ci, co, group;
  int64_t in[3], k[3], stride[3], dil[3], pb[3], pe[3];
  bool bias;
} conv_case;

static int64_t out_dim(const conv_case *t, int i) {
  return (t->in[i] + t->pb[i] + t->pe[i] - t->dil[i] * (t->k[i] - 1) - 1) / t->stride[i] + 1;
}

static void set_ints(kiln_node *node, const char *name, int n, const int64_t *v) {
  kiln_attr *a;
  MUST(kiln_node_add_attr(node, name, KILN_ATTR_INTS, &a));
  a->ints = malloc((size_t)n * sizeof(int64_t));
  if (!a->ints) exit(1);
  memcpy(a->ints, v, (size_t)n * sizeof(int64_t));
  a->n = n;
}

static int add_value(kiln_graph *g, const char *name, int rank, const int64_t *dims) {
  int id;
  MUST(kiln_graph_intern_value(g, name, &id));
  kiln_type_init_tensor(&g->values[id].type, KILN_DTYPE_F32, rank, dims);
  return id;
}

/* The epilogue the tests fuse: y = 0.5 * clamp(y, -1, 1) + 1e-3 * (index % 7),
 * and a count of visits per element (buffers: y, counts). */
static void test_epilogue(void *vctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const kiln_rt_epilogue_ctx *e = vctx;
  float *y = e->buffers[0];
  int *count = e->buffers[1];
  for (int64_t i = 0; i < mb; i++)
    for (int64_t j = 0; j < nb; j++) {
      int64_t idx = e->base + (m0 + i) * e->row + n0 + j;
      float v = y[idx];
      v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
      y[idx] = 0.5f * v + 1e-3f * (float)(idx % 7);
      count[idx]++;
    }
}

/* The native epilogue the tests describe (clip to [-0.75, 0.5] after adding
 * buffers[2]) and the same as a generated-style function, for the paths
 * that call it; it counts its visits too. */
#define NAT_LO (-0.75f)
#define NAT_HI 0.5f
static void native_epilogue_fn(void *vctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const kiln_rt_epilogue_ctx *e = vctx;
  float *y = e->buffers[0];
  int *count = e->buffers[1];
  const float *add = e->buffers[2];
  for (int64_t i = 0; i < mb; i++)
    for (int64_t j = 0; j < nb; j++) {
      int64_t idx = e->base + (m0 + i) * e->row + n0 + j;
      float v = y[idx] + (add ? add[idx] : 0.0f);
      v = (v != v || v > NAT_LO) ? v : NAT_LO;
      v = (v != v || v < NAT_HI) ? v : NAT_HI;
      y[idx] = v;
      count[idx]++;
    }
}

static const char *case_str(const conv_case *t, char *buf, size_t size) {
  int o = snprintf(buf, size, "n%lld ci%lld co%lld g%lld in", (long long)t->n, (long long)t->ci, (long long)t->co,
                   (long long)t->group);
  for (int i = 0; i < t->nsp; i++) o += snprintf(buf + o, size - (size_t)o, "%s%lld", i ? "x" : "", (long long)t->in[i]);
  o += snprintf(buf + o, size - (size_t)o, " k");
  for (int i = 0; i < t->nsp; i++) o += snprintf(buf + o, size - (size_t)o, "%s%lld", i ? "x" : "", (long long)t->k[i]);
  o += snprintf(buf + o, size - (size_t)o, " s");
  for (int i = 0; i < t->nsp; i++) o += snprintf(buf + o, size - (size_t)o, "%s%lld", i ? "x" : "", (long long)t->stride[i]);
  o += snprintf(buf + o, size - (size_t)o, " d");
  for (int i = 0; i < t->nsp; i++) o += snprintf(buf + o, size - (size_t)o, "%s%lld", i ? "x" : "", (long long)t->dil[i]);
  o += snprintf(buf + o, size - (size_t)o, " p");
  for (int i = 0; i < t->nsp; i++)
    o += snprintf(buf + o, size - (size_t)o, "%s%lld/%lld", i ? "," : "", (long long)t->pb[i], (long long)t->pe[i]);
  snprintf(buf + o, size - (size_t)o, "%s", t->bias ? " bias" : "");
  return buf;
}

/* The case's node (op "Conv" or "ConvTranspose", its window attributes;
 * output_padding when out_pad is given) in g, over new values x, w, b, y. */
static kiln_node *case_node(kiln_graph *g, const conv_case *t, const char *op, int rank, const int64_t *xd,
                            const int64_t *wd, const int64_t *yd, const int64_t *bd, const int64_t *out_pad) {
  int vx = add_value(g, "x", rank, xd), vw = add_value(g, "w", rank, wd), vb = add_value(g, "b", 1, bd);
  int vy = add_value(g, "y", rank, yd);
  int ins[3] = {vx, vw, vb};
  int ni;
  MUST(kiln_graph_add_node(g, op, op, "", t->bias ? 3 : 2, ins, 1, &vy, &ni));
  kiln_node *node = &g->nodes[ni];
  node->opset = 17;
  node->op = kiln_op_find("", op);
  int64_t pads[6];
  for (int i = 0; i < t->nsp; i++) {
    pads[i] = t->pb[i];
    pads[t->nsp + i] = t->pe[i];
  }
  set_ints(node, "strides", t->nsp, t->stride);
  set_ints(node, "dilations", t->nsp, t->dil);
  set_ints(node, "kernel_shape", t->nsp, t->k);
  set_ints(node, "pads", 2 * t->nsp, pads);
  if (out_pad) set_ints(node, "output_padding", t->nsp, out_pad);
  kiln_attr *ga;
  MUST(kiln_node_add_attr(node, "group", KILN_ATTR_INT, &ga));
  ga->i = t->group;
  return node;
}

/* Random x, w, b (tx, tw, tb: borrowed from in_vals) and the node's
 * reference output in out_vals[0]. */
static void case_reference(kiln_node *node, const conv_case *t, int rank, const int64_t *xd, const int64_t *wd,
                           const int64_t *bd, kiln_value **in_vals, kiln_value **out_vals, kiln_tensor **tx,
                           kiln_tensor **tw, kiln_tensor **tb) {
  MUST(kiln_tensor_new(KILN_DTYPE_F32, rank, xd, tx));
  MUST(kiln_tensor_new(KILN_DTYPE_F32, rank, wd, tw));
  MUST(kiln_tensor_new(KILN_DTYPE_F32, 1, bd, tb));
  for (int64_t i = 0; i < (*tx)->numel; i++) ((float *)(*tx)->data)[i] = rnd_float();
  for (int64_t i = 0; i < (*tw)->numel; i++) ((float *)(*tw)->data)[i] = rnd_float();
  for (int64_t i = 0; i < (*tb)->numel; i++) ((float *)(*tb)->data)[i] = rnd_float();
  MUST(kiln_value_from_tensor(*tx, &in_vals[0]));
  MUST(kiln_value_from_tensor(*tw, &in_vals[1]));
  MUST(kiln_value_from_tensor(*tb, &in_vals[2]));
  bool wanted[1] = {true};
  kiln_kernel_ctx kctx = {node, 17, t->bias ? 3 : 2, in_vals, 1, out_vals, wanted, NULL, NULL};
  MUST(node->op->ref_kernel(&kctx));
}

static void run_case(const conv_case *t, kiln_threadpool **pools, int n_pools) {
  char desc[256];
  case_str(t, desc, sizeof desc);
  kiln_graph *g;
  MUST(kiln_graph_new("conv", NULL, &g));
  int rank = t->nsp + 2;
  int64_t xd[5] = {t->n, t->ci}, wd[5] = {t->co, t->ci / t->group}, yd[5] = {t->n, t->co}, bd[1] = {t->co};
  for (int i = 0; i < t->nsp; i++) {
    xd[2 + i] = t->in[i];
    wd[2 + i] = t->k[i];
    yd[2 + i] = out_dim(t, i);
  }
  kiln_node *node = case_node(g, t, "Conv", rank, xd, wd, yd, bd, NULL);
  kiln_value *in_vals[3] = {0}, *out_vals[1] = {0};
  kiln_tensor *tx, *tw, *tb;
  case_reference(node, t, rank, xd, wd, bd, in_vals, out_vals, &tx, &tw, &tb);
  const kiln_tensor *ref = out_vals[0]->tensor;
  const float *r = ref->data;
  int64_t numel = ref->numel;

  kiln_conv_geom c;
  MUST(kiln_conv_geometry(g, node, &c));
  float *y = malloc((size_t)numel * sizeof(float) + 64), *want = malloc((size_t)numel * sizeof(float) + 64);
  float *addend = malloc((size_t)numel * sizeof(float) + 64), *want_nat = malloc((size_t)numel * sizeof(float) + 64);
  float *want_clip = malloc((size_t)numel * sizeof(float) + 64);
  int *count = calloc((size_t)numel + 1, sizeof(int));
  if (!y || !want || !count || !addend || !want_nat || !want_clip) exit(1);
  for (int64_t i = 0; i < numel; i++) {
    float v = r[i];
    v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
    want[i] = 0.5f * v + 1e-3f * (float)(i % 7);
    addend[i] = rnd_float();
    float a = r[i] + addend[i];
    want_nat[i] = a < NAT_LO ? NAT_LO : a > NAT_HI ? NAT_HI : a;
    want_clip[i] = r[i] < NAT_LO ? NAT_LO : r[i] > NAT_HI ? NAT_HI : r[i];
  }
  /* Each path with the weights constant (planned with them), then, where
   * it takes them, as a graph input (planned without, read at run time). */
  for (int aw = 2 * KILN_CONV_GEMM; aw < 2 * KILN_CONV_N_ALGOS; aw++) {
    int a = aw / 2;
    bool const_w = aw % 2 == 0;
    if (!kiln_conv_algo_applies(&c, (kiln_conv_algo)a, const_w)) continue;
    const char *wdesc = const_w ? "" : " (weights at run time)";
    bool wino = a == KILN_CONV_WINOGRAD;
    double rtol = wino ? 1e-3 : 1e-4, atol = wino ? 1e-4 : 1e-5;
    for (int pi = 0; pi < n_pools; pi++) {
      int threads = kiln_threadpool_size(pools[pi]);
      kiln_conv_plan *plan;
      MUST(kiln_conv_plan_create(&c, (kiln_conv_algo)a, const_w ? tw->data : NULL, threads, &plan));
      size_t sb = kiln_conv_plan_scratch_bytes(plan);
      void *scratch = sb ? aligned_alloc(64, (sb + 63) & ~(size_t)63) : NULL;
      /* 0: none, 1: generated-style, 2: native clip + add, 3: native clip */
      static const char *const epi_names[4] = {"", " + epilogue", " + clip(add)", " + clip"};
      for (int with_epi = 0; with_epi < 4; with_epi++) {
        for (int64_t i = 0; i < numel; i++) y[i] = NAN;
        memset(count, 0, (size_t)numel * sizeof(int));
        void *bufs[3] = {y, count, with_epi == 2 ? addend : NULL};
        kiln_conv_epilogue epi = {test_epilogue, bufs, false, false, 0.0f, 0.0f, NULL};
        if (with_epi >= 2) {
          epi.fn = native_epilogue_fn;
          epi.native = true;
          epi.clip = true;
          epi.lo = NAT_LO;
          epi.hi = NAT_HI;
          epi.add = with_epi == 2 ? addend : NULL;
        }
        kiln_conv_run(plan, pools[pi], tx->data, tw->data, t->bias ? tb->data : NULL, y, scratch, with_epi ? &epi : NULL);
        const float *expect = with_epi == 0 ? r : with_epi == 1 ? want : with_epi == 2 ? want_nat : want_clip;
        double worst = 0;
        int64_t bad = -1, miscount = -1;
        for (int64_t i = 0; i < numel; i++) {
          /* relative to the conv's own value too: the added tensor can cancel it */
          double mag = fabs(expect[i]) > fabs(r[i]) ? fabs(expect[i]) : fabs(r[i]);
          double err = fabs((double)y[i] - expect[i]), lim = atol + rtol * mag;
          if (!(err <= lim) && bad < 0) bad = i;
          if (err > worst || err != err) worst = err;
          /* native epilogues: the path applies it itself or calls fn once per element */
          if (with_epi == 1 && count[i] != 1 && miscount < 0) miscount = i;
          if (with_epi >= 2 && count[i] != 0 && count[i] != 1 && miscount < 0) miscount = i;
        }
        g_checks++;
        if (bad >= 0 || miscount >= 0) {
          g_failures++;
          if (bad >= 0)
            fprintf(stderr, "FAIL %s%s, %d thread(s)%s: %s: element %lld is %g, want %g (max err %g)\n",
                    kiln_conv_algo_name((kiln_conv_algo)a), wdesc, threads, epi_names[with_epi], desc, (long long)bad,
                    y[bad], expect[bad], worst);
          else
            fprintf(stderr, "FAIL %s%s, %d thread(s)%s: %s: element %lld visited %d times\n",
                    kiln_conv_algo_name((kiln_conv_algo)a), wdesc, threads, epi_names[with_epi], desc,
                    (long long)miscount, count[miscount]);
        } else if (g_verbose) {
          printf("ok   %-9s %d thread(s)%-13s %s (max err %.2g)%s\n", kiln_conv_algo_name((kiln_conv_algo)a), threads,
                 epi_names[with_epi], desc, worst, wdesc);
        }
      }
      free(scratch);
      free(plan);
    }
  }
  /* The output as [co, n, spatial] (y_cn: a Transpose of the first two
   * axes fused after a weight gradient's Conv; group 1, no bias): AUTO
   * (with tap and output pruning where they apply), BATCHED and IM2ROW. */
  if (c.group == 1 && !t->bias) {
    kiln_conv_geom cn = c;
    cn.y_cn = true;
    int64_t osz = numel / (t->n * t->co);
    const kiln_conv_algo algos[3] = {KILN_CONV_AUTO, KILN_CONV_BATCHED, KILN_CONV_IM2ROW};
    for (int ai = 0; ai < 3; ai++)
      for (int cw = 0; cw < 2; cw++) {
        bool const_w = cw == 1;
        if (algos[ai] != KILN_CONV_AUTO && !kiln_conv_algo_applies(&cn, algos[ai], const_w)) continue;
        for (int pi = 0; pi < n_pools; pi++) {
          int threads = kiln_threadpool_size(pools[pi]);
          kiln_conv_plan *plan;
          MUST(kiln_conv_plan_create(&cn, algos[ai], const_w ? tw->data : NULL, threads, &plan));
          size_t sb = kiln_conv_plan_scratch_bytes(plan);
          void *scratch = sb ? aligned_alloc(64, (sb + 63) & ~(size_t)63) : NULL;
          for (int64_t i = 0; i < numel; i++) y[i] = NAN;
          kiln_conv_run(plan, pools[pi], tx->data, tw->data, NULL, y, scratch, NULL);
          int64_t bad = -1;
          for (int64_t img = 0; img < t->n && bad < 0; img++)
            for (int64_t ch = 0; ch < t->co && bad < 0; ch++)
              for (int64_t q = 0; q < osz && bad < 0; q++) {
                int64_t at = (ch * t->n + img) * osz + q;
                double want_v = r[(img * t->co + ch) * osz + q];
                if (!(fabs(y[at] - want_v) <= 1e-5 + 1e-4 * fabs(want_v))) bad = at;
              }
          g_checks++;
          if (bad >= 0) {
            g_failures++;
            fprintf(stderr, "FAIL %s y_cn%s, %d thread(s): %s: element %lld of [co, n, ...] is %g\n",
                    algos[ai] == KILN_CONV_AUTO ? "auto" : kiln_conv_algo_name(algos[ai]),
                    const_w ? "" : " (weights at run time)", threads, desc, (long long)bad, y[bad]);
          }
          free(scratch);
          free(plan);
        }
      }
  }
  free(y);
  free(want);
  free(addend);
  free(want_nat);
  free(want_clip);
  free(count);
  for (int i = 0; i < 3; i++) kiln_value_free(in_vals[i]);
  kiln_value_free(out_vals[0]);
  kiln_graph_free(g);
}

static conv_case conv2d(int64_t ci, int64_t co, int64_t group, int64_t h, int64_t w, int64_t k, int64_t s, int64_t d,
                        int64_t pb, int64_t pe) {
  conv_case t = {2, 1, ci, co, group, {h, w}, {k, k}, {s, s}, {d, d}, {pb, pb}, {pe, pe}, true};
  return t;
}

static conv_case random_case(void) {
  conv_case t;
  memset(&t, 0, sizeof t);
  t.nsp = rnd_int(0, 5) == 0 ? (int)rnd_int(1, 3) : 2;
  t.n = rnd_int(1, 2);
  int kind = (int)rnd_int(0, 4);
  t.group = 1;
  if (kind == 0) { /* depthwise */
    t.group = rnd_int(2, 24);
    t.ci = t.co = t.group;
  } else if (kind == 1) { /* grouped */
    t.group = rnd_int(2, 4);
    t.ci = t.group * rnd_int(1, 5);
    t.co = t.group * rnd_int(1, 5);
  } else {
    t.ci = rnd_int(1, 40);
    t.co = rnd_int(1, 40);
  }
  t.bias = rnd_int(0, 3) != 0;
  for (int i = 0; i < t.nsp; i++) {
    t.in[i] = rnd_int(1, t.nsp == 3 ? 7 : 19);
    t.k[i] = kind == 2 ? 3 : rnd_int(1, 5);
    t.stride[i] = kind == 2 ? 1 : rnd_int(1, 3);
    t.dil[i] = kind == 2 ? 1 : rnd_int(1, 2);
    t.pb[i] = rnd_int(0, 2);
    t.pe[i] = rnd_int(0, 2);
    while (t.in[i] + t.pb[i] + t.pe[i] < t.dil[i] * (t.k[i] - 1) + 1) t.in[i]++;
  }
  return t;
}

/* ---- ConvTranspose (cpu_conv_transpose.c) ------------------------------------------------ */

/* kiln_conv_transpose_run against the reference ConvTranspose kernel: t's
 * geometry with W [ci, co/group, k...], output_padding out_pad on every
 * axis; epilogues: none, generated-style, residual + clip. */
static void run_transpose_case(const conv_case *t, int64_t out_pad, kiln_threadpool **pools, int n_pools) {
  char desc[256];
  case_str(t, desc, sizeof desc);
  kiln_graph *g;
  MUST(kiln_graph_new("conv_transpose", NULL, &g));
  int rank = t->nsp + 2;
  int64_t xd[5] = {t->n, t->ci}, wd[5] = {t->ci, t->co / t->group}, yd[5] = {t->n, t->co}, bd[1] = {t->co};
  int64_t ops[3];
  for (int i = 0; i < t->nsp; i++) {
    xd[2 + i] = t->in[i];
    wd[2 + i] = t->k[i];
    yd[2 + i] = t->stride[i] * (t->in[i] - 1) + out_pad + t->dil[i] * (t->k[i] - 1) + 1 - t->pb[i] - t->pe[i];
    ops[i] = out_pad;
  }
  kiln_node *node = case_node(g, t, "ConvTranspose", rank, xd, wd, yd, bd, ops);
  kiln_value *in_vals[3] = {0}, *out_vals[1] = {0};
  kiln_tensor *tx, *tw, *tb;
  case_reference(node, t, rank, xd, wd, bd, in_vals, out_vals, &tx, &tw, &tb);
  const float *r = out_vals[0]->tensor->data;
  int64_t numel = out_vals[0]->tensor->numel;

  float *y = malloc((size_t)numel * sizeof(float) + 64), *addend = malloc((size_t)numel * sizeof(float) + 64);
  int *count = calloc((size_t)numel + 1, sizeof(int));
  if (!y || !addend || !count) exit(1);
  for (int64_t i = 0; i < numel; i++) addend[i] = rnd_float();
  kiln_rt_conv_args a = {.nsp = t->nsp, .transposed = true, .n = t->n, .ci = t->ci, .co = t->co, .group = t->group,
                         .x = tx->data, .w = tw->data, .bias = t->bias ? tb->data : NULL};
  for (int i = 0; i < t->nsp; i++) {
    a.in[i] = t->in[i];
    a.out[i] = yd[2 + i];
    a.kernel[i] = t->k[i];
    a.stride[i] = t->stride[i];
    a.dilation[i] = t->dil[i];
    a.pad_begin[i] = t->pb[i];
  }
  size_t sb = kiln_conv_transpose_scratch_bytes(&a);
  float *scratch = aligned_alloc(64, (sb + 64 + 63) & ~(size_t)63);
  if (!scratch) exit(1);
  static const char *const epi_names[3] = {"", " + epilogue", " + clip(add)"};
  for (int pi = 0; pi < n_pools; pi++)
    for (int mode = 0; mode < 3; mode++) {
      for (int64_t i = 0; i < numel; i++) y[i] = NAN;
      memset(count, 0, (size_t)numel * sizeof(int));
      void *bufs[2] = {y, count};
      kiln_rt_conv_args m = a;
      m.y = y;
      if (mode == 1) {
        m.epilogue = test_epilogue;
        m.epilogue_buffers = bufs;
      } else if (mode == 2) {
        m.add = addend;
        m.clip = true;
        m.lo = NAT_LO;
        m.hi = NAT_HI;
      }
      kiln_conv_transpose_run(pools[pi], &m, scratch);
      int64_t bad = -1;
      double worst = 0;
      float want_bad = 0.0f;
      for (int64_t i = 0; i < numel; i++) {
        float e = r[i];
        if (mode == 1) {
          float v = e < -1.0f ? -1.0f : e > 1.0f ? 1.0f : e;
          e = 0.5f * v + 1e-3f * (float)(i % 7);
        } else if (mode == 2) {
          float v = r[i] + addend[i];
          e = v < NAT_LO ? NAT_LO : v > NAT_HI ? NAT_HI : v;
        }
        double mag = fabs(e) > fabs(r[i]) ? fabs(e) : fabs(r[i]);
        double err = fabs((double)y[i] - e);
        if (err > worst || err != err) worst = err;
        if ((!(err <= 1e-5 + 1e-4 * mag) || (mode == 1 && count[i] != 1)) && bad < 0) {
          bad = i;
          want_bad = e;
        }
      }
      g_checks++;
      if (bad >= 0) {
        g_failures++;
        fprintf(stderr, "FAIL conv_transpose, %d thread(s)%s: %s op%lld: element %lld is %g, want %g (visits %d)\n",
                kiln_threadpool_size(pools[pi]), epi_names[mode], desc, (long long)out_pad, (long long)bad, y[bad],
                want_bad, count[bad]);
      } else if (g_verbose) {
        printf("ok   conv_transpose %d thread(s)%-13s %s op%lld (max err %.2g)\n", kiln_threadpool_size(pools[pi]),
               epi_names[mode], desc, (long long)out_pad, worst);
      }
    }
  free(scratch);
  free(y);
  free(addend);
  free(count);
  for (int i = 0; i < 3; i++) kiln_value_free(in_vals[i]);
  kiln_value_free(out_vals[0]);
  kiln_graph_free(g);
}

/* ---- the pointwise kernel at every ISA this CPU has ------------------------------------- */

/* kiln_conv_pw_run with isa 0 (portable C), 1 (AVX2) and 2 (AVX-512), on
 * strided X and Y, against a plain loop; epilogues: none, generated-style,
 * native clip + add. */
static void run_pw_isa_cases(kiln_threadpool **pools) {
  const kiln_cpu_features *f = kiln_cpu_features_get();
  int max_isa = f->avx512f && f->avx512vl && f->avx512dq && f->avx512bw && f->avx2 && f->fma ? 2
                : f->avx2 && f->fma                                                       ? 1
                                                                                          : 0;
  for (int i = 0; i < 40; i++) {
    int64_t co = rnd_int(1, 37), k = rnd_int(1, 300), hw = rnd_int(1, 130);
    int64_t ldx = hw + rnd_int(0, 5), ldy = hw + rnd_int(0, 5);
    int64_t ybase = rnd_int(0, 3);
    float *x = malloc((size_t)(k * ldx) * sizeof(float)), *w = malloc((size_t)(co * k) * sizeof(float));
    float *b = malloc((size_t)co * sizeof(float)), *want = malloc((size_t)(co * ldy) * sizeof(float));
    size_t ybytes = (size_t)(ybase + co * ldy) * sizeof(float);
    float *y = malloc(ybytes), *add = malloc(ybytes);
    int *count = calloc((size_t)(ybase + co * ldy), sizeof(int));
    float *pk = aligned_alloc(64, (kiln_conv_pw_packed_floats(co, k) * sizeof(float) + 63) & ~(size_t)63);
    if (!x || !w || !b || !want || !y || !add || !count || !pk) exit(1);
    for (int64_t t = 0; t < k * ldx; t++) x[t] = rnd_float();
    for (int64_t t = 0; t < co * k; t++) w[t] = rnd_float();
    for (int64_t t = 0; t < co; t++) b[t] = rnd_float();
    for (int64_t t = 0; t < ybase + co * ldy; t++) add[t] = rnd_float();
    kiln_conv_pw_pack(co, k, w, pk);
    for (int64_t o = 0; o < co; o++)
      for (int64_t n = 0; n < hw; n++) {
        double acc = b[o];
        for (int64_t kk = 0; kk < k; kk++) acc += (double)w[o * k + kk] * x[kk * ldx + n];
        want[o * ldy + n] = (float)acc;
      }
    for (int isa = 0; isa <= max_isa; isa++)
      for (int mode = 0; mode < 3; mode++) {
        for (int64_t t = 0; t < ybase + co * ldy; t++) y[t] = NAN;
        memset(count, 0, (size_t)(ybase + co * ldy) * sizeof(int));
        void *bufs[3] = {y, count, mode == 2 ? add : NULL};
        kiln_conv_epilogue epi = {mode == 1 ? test_epilogue : native_epilogue_fn, bufs, mode == 2, mode == 2,
                                  NAT_LO, NAT_HI, mode == 2 ? add : NULL};
        kiln_conv_pw_job j = {.co = co, .k = k, .hw = hw, .ldx = ldx, .ldy = ldy, .packed = pk, .x = x,
                              .bias = b, .y = y + ybase, .y_base = ybase, .epi = mode ? &epi : NULL};
        kiln_conv_pw_run(pools[i % 3], isa, &j);
        int64_t bad = -1;
        for (int64_t o = 0; o < co && bad < 0; o++)
          for (int64_t n = 0; n < hw && bad < 0; n++) {
            int64_t idx = ybase + o * ldy + n;
            float r = want[o * ldy + n], e = r;
            if (mode == 1) {
              float v = r < -1.0f ? -1.0f : r > 1.0f ? 1.0f : r;
              e = 0.5f * v + 1e-3f * (float)(idx % 7);
            } else if (mode == 2) {
              float v = r + add[idx];
              e = v < NAT_LO ? NAT_LO : v > NAT_HI ? NAT_HI : v;
            }
            double mag = fabs(r) > fabs(e) ? fabs(r) : fabs(e);
            if (!(fabs((double)y[idx] - e) <= 1e-5 + 1e-4 * mag) || (mode == 1 && count[idx] != 1)) bad = idx;
          }
        g_checks++;
        if (bad >= 0) {
          g_failures++;
          fprintf(stderr, "FAIL pw isa %d mode %d: co %lld k %lld hw %lld ldx %lld ldy %lld: element %lld is %g\n", isa,
                  mode, (long long)co, (long long)k, (long long)hw, (long long)ldx, (long long)ldy, (long long)bad,
                  y[bad]);
        }
      }
    free(x);
    free(w);
    free(b);
    free(want);
    free(y);
    free(add);
    free(count);
    free(pk);
  }
}

/* ---- --bench: time each applicable path on a few real layers ------------------------- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* const_w: the weights constant (planned with them), else a graph input. */
static void bench_layer_w(const char *name, conv_case t, kiln_threadpool *pool, bool const_w) {
  const char *filter = getenv("TEST_CONV_FILTER"); /* only layers whose name contains it */
  if (filter && *filter && !strstr(name, filter)) return;
  kiln_conv_geom c;
  memset(&c, 0, sizeof c);
  c.nsp = t.nsp;
  c.n = t.n;
  c.ci = t.ci;
  c.co = t.co;
  c.group = t.group;
  c.kdim = t.ci / t.group;
  c.osize = 1;
  for (int i = 0; i < t.nsp; i++) {
    c.in_sp[i] = t.in[i];
    c.out_sp[i] = out_dim(&t, i);
    c.k[i] = t.k[i];
    c.stride[i] = t.stride[i];
    c.dil[i] = t.dil[i];
    c.pad_begin[i] = t.pb[i];
    c.kdim *= t.k[i];
    c.osize *= c.out_sp[i];
  }
  int64_t xn = t.n * t.ci * t.in[0] * t.in[1], wn = t.co * c.kdim, yn = t.n * t.co * c.osize;
  float *x = aligned_alloc(64, (size_t)xn * 4 + 64), *w = aligned_alloc(64, (size_t)wn * 4 + 64);
  float *b = aligned_alloc(64, (size_t)t.co * 4 + 64), *y = aligned_alloc(64, (size_t)yn * 4 + 64);
  for (int64_t i = 0; i < xn; i++) x[i] = rnd_float();
  for (int64_t i = 0; i < wn; i++) w[i] = rnd_float();
  for (int64_t i = 0; i < t.co; i++) b[i] = rnd_float();
  double flops = 2.0 * (double)yn * (double)c.kdim;
  printf("%-22s", name);
  const char *only = getenv("TEST_CONV_ALGO"); /* only this algorithm */
  for (int a = KILN_CONV_GEMM; a < KILN_CONV_N_ALGOS; a++) {
    if (!kiln_conv_algo_applies(&c, (kiln_conv_algo)a, const_w)) continue;
    if (only && *only && strcmp(only, kiln_conv_algo_name((kiln_conv_algo)a))) continue;
    kiln_conv_plan *plan;
    MUST(kiln_conv_plan_create(&c, (kiln_conv_algo)a, const_w ? w : NULL, kiln_threadpool_size(pool), &plan));
    size_t sb = kiln_conv_plan_scratch_bytes(plan);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) & ~(size_t)63) : NULL;
    double times[15];
    for (int r = 0; r < 3; r++) kiln_conv_run(plan, pool, x, w, b, y, scratch, NULL);
    for (int r = 0; r < 15; r++) {
      double t0 = now_ms();
      kiln_conv_run(plan, pool, x, w, b, y, scratch, NULL);
      times[r] = now_ms() - t0;
    }
    qsort(times, 15, sizeof times[0], cmp_double);
    printf("  %s %.3f ms (%.1f GF/s)", kiln_conv_algo_name((kiln_conv_algo)a), times[7], flops / times[7] / 1e6);
    free(scratch);
    free(plan);
  }
  printf("   [auto: %s]\n", kiln_conv_algo_name(kiln_conv_choose(&c, const_w)));
  free(x);
  free(w);
  free(b);
  free(y);
}

static void bench_layer(const char *name, conv_case t, kiln_threadpool *pool) { bench_layer_w(name, t, pool, true); }

static conv_case batch_of(int64_t n, conv_case t) {
  t.n = n;
  return t;
}

/* Training's convolutions (the weights a graph input): ResNet-18 on 32x32
 * images, batch 32, forward and the weight gradients (images and channels
 * swapped: dW = Conv(X^T, dY^T)). */
static void run_train_bench(kiln_threadpool *pool) {
  bench_layer_w("r18 stem 7x7 s2 16", batch_of(32, conv2d(3, 64, 1, 32, 32, 7, 2, 1, 3, 3)), pool, false);
  bench_layer_w("r18 l1 3x3 64 8", batch_of(32, conv2d(64, 64, 1, 8, 8, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l2 3x3 s2 64>128", batch_of(32, conv2d(64, 128, 1, 8, 8, 3, 2, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l2 ds 1x1 s2", batch_of(32, conv2d(64, 128, 1, 8, 8, 1, 2, 1, 0, 0)), pool, false);
  bench_layer_w("r18 l2 3x3 128 4", batch_of(32, conv2d(128, 128, 1, 4, 4, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l3 3x3 s2 128>256", batch_of(32, conv2d(128, 256, 1, 4, 4, 3, 2, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l3 ds 1x1 s2", batch_of(32, conv2d(128, 256, 1, 4, 4, 1, 2, 1, 0, 0)), pool, false);
  bench_layer_w("r18 l3 3x3 256 2", batch_of(32, conv2d(256, 256, 1, 2, 2, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l4 3x3 s2 256>512", batch_of(32, conv2d(256, 512, 1, 2, 2, 3, 2, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l4 ds 1x1 s2", batch_of(32, conv2d(256, 512, 1, 2, 2, 1, 2, 1, 0, 0)), pool, false);
  bench_layer_w("r18 l4 3x3 512 1", batch_of(32, conv2d(512, 512, 1, 1, 1, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l4 3x3 512 1 n8", batch_of(8, conv2d(512, 512, 1, 1, 1, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 l4 3x3 512 1 n2", batch_of(2, conv2d(512, 512, 1, 1, 1, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 dW l1 8x8", batch_of(64, conv2d(32, 64, 1, 8, 8, 8, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 dW l2 4x4", batch_of(128, conv2d(32, 128, 1, 4, 4, 4, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 dW l3 2x2", batch_of(256, conv2d(32, 256, 1, 2, 2, 2, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 dW l4 1x1", batch_of(512, conv2d(32, 512, 1, 1, 1, 1, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r18 dW stem", batch_of(3, conv2d(32, 64, 1, 32, 32, 16, 1, 2, 3, 3)), pool, false);
  bench_layer_w("fmnist dW 14x14", batch_of(32, conv2d(64, 64, 1, 14, 14, 14, 1, 1, 1, 1)), pool, false);
  /* weight gradients of stride-2 layers (the kernel dilated 2; Conv's
   * output cut to the kernel after) and of fmnist_cnn's first conv */
  bench_layer_w("r18 dW l2 s2 4x4d2", batch_of(64, conv2d(32, 128, 1, 8, 8, 4, 1, 2, 1, 1)), pool, false);
  bench_layer_w("r18 dW l2 ds 4x4d2", batch_of(64, conv2d(32, 128, 1, 8, 8, 4, 1, 2, 0, 0)), pool, false);
  bench_layer_w("r18 dW l3 s2 2x2d2", batch_of(128, conv2d(32, 256, 1, 4, 4, 2, 1, 2, 1, 1)), pool, false);
  bench_layer_w("r18 dW l3 ds 2x2d2", batch_of(128, conv2d(32, 256, 1, 4, 4, 2, 1, 2, 0, 0)), pool, false);
  bench_layer_w("r18 dW l4 s2 1x1", batch_of(256, conv2d(32, 512, 1, 2, 2, 1, 1, 2, 1, 1)), pool, false);
  bench_layer_w("r18 dW l4 ds 1x1", batch_of(256, conv2d(32, 512, 1, 2, 2, 1, 1, 2, 0, 0)), pool, false);
  bench_layer_w("fmnist dW1 28x28", batch_of(1, conv2d(64, 32, 1, 28, 28, 28, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r50 dW 3x3 14x14 n8", batch_of(256, conv2d(8, 256, 1, 14, 14, 14, 1, 1, 1, 1)), pool, false);
  bench_layer_w("dW 3x3 16x16 n32", batch_of(32, conv2d(32, 32, 1, 16, 16, 16, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r50 3x3 512 7 n8", batch_of(8, conv2d(512, 512, 1, 7, 7, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("r50 1x1 2048>512 7 n8", batch_of(8, conv2d(2048, 512, 1, 7, 7, 1, 1, 1, 0, 0)), pool, false);
  bench_layer_w("r50 3x3 256 14 n8", batch_of(8, conv2d(256, 256, 1, 14, 14, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("3x3 128 6 n32", batch_of(32, conv2d(128, 128, 1, 6, 6, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("3x3 64 6 n32", batch_of(32, conv2d(64, 64, 1, 6, 6, 3, 1, 1, 1, 1)), pool, false);
  bench_layer_w("3x3 32 16 n32", batch_of(32, conv2d(32, 32, 1, 16, 16, 3, 1, 1, 1, 1)), pool, false);
}

static void run_bench(int threads) {
  kiln_threadpool *pool;
  MUST(kiln_threadpool_create(threads, &pool));
  printf("threads %d\n", threads);
  bench_layer("mnv2 stem 3>32 s2", conv2d(3, 32, 1, 224, 224, 3, 2, 1, 1, 1), pool);
  bench_layer("mnv2 dw32 112 s1", conv2d(32, 32, 32, 112, 112, 3, 1, 1, 1, 1), pool);
  bench_layer("mnv2 dw96 112 s2", conv2d(96, 96, 96, 112, 112, 3, 2, 1, 1, 1), pool);
  bench_layer("mnv2 dw144 56 s1", conv2d(144, 144, 144, 56, 56, 3, 1, 1, 1, 1), pool);
  bench_layer("mnv2 dw960 7 s1", conv2d(960, 960, 960, 7, 7, 3, 1, 1, 1, 1), pool);
  bench_layer("mnv2 pw 16>96 112", conv2d(16, 96, 1, 112, 112, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 144>24 56", conv2d(144, 24, 1, 56, 56, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 960>160 7", conv2d(960, 160, 1, 7, 7, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 160>960 7", conv2d(160, 960, 1, 7, 7, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 320>1280 7", conv2d(320, 1280, 1, 7, 7, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 64>384 14", conv2d(64, 384, 1, 14, 14, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 384>64 14", conv2d(384, 64, 1, 14, 14, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 32>192 28", conv2d(32, 192, 1, 28, 28, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 576>96 14", conv2d(576, 96, 1, 14, 14, 1, 1, 1, 0, 0), pool);
  bench_layer("mnv2 pw 960>320 7", conv2d(960, 320, 1, 7, 7, 1, 1, 1, 0, 0), pool);
  bench_layer("r50 1x1 2048>512 7", conv2d(2048, 512, 1, 7, 7, 1, 1, 1, 0, 0), pool);
  bench_layer("r50 1x1 256>1024 14", conv2d(256, 1024, 1, 14, 14, 1, 1, 1, 0, 0), pool);
  bench_layer("r50 stem 7x7 s2", conv2d(3, 64, 1, 224, 224, 7, 2, 1, 3, 3), pool);
  bench_layer("r50 3x3 64 56", conv2d(64, 64, 1, 56, 56, 3, 1, 1, 1, 1), pool);
  bench_layer("r50 3x3 128 28", conv2d(128, 128, 1, 28, 28, 3, 1, 1, 1, 1), pool);
  bench_layer("r50 3x3 128 s2 56", conv2d(128, 128, 1, 56, 56, 3, 2, 1, 1, 1), pool);
  bench_layer("r50 3x3 256 14", conv2d(256, 256, 1, 14, 14, 3, 1, 1, 1, 1), pool);
  bench_layer("r50 3x3 512 7", conv2d(512, 512, 1, 7, 7, 3, 1, 1, 1, 1), pool);
  bench_layer("r50 1x1 64>256 56", conv2d(64, 256, 1, 56, 56, 1, 1, 1, 0, 0), pool);
  bench_layer("r50 1x1 256>64 56", conv2d(256, 64, 1, 56, 56, 1, 1, 1, 0, 0), pool);
  bench_layer("r50 1x1 1024>256 14", conv2d(1024, 256, 1, 14, 14, 1, 1, 1, 0, 0), pool);
  bench_layer("r50 1x1 512>2048 7", conv2d(512, 2048, 1, 7, 7, 1, 1, 1, 0, 0), pool);
  bench_layer("r50 3x3 256 s2 28", conv2d(256, 256, 1, 28, 28, 3, 2, 1, 1, 1), pool);
  bench_layer("r50 1x1 s2 256>512 56", conv2d(256, 512, 1, 56, 56, 1, 2, 1, 0, 0), pool);
  bench_layer("r50 1x1 s2 1024>2048", conv2d(1024, 2048, 1, 14, 14, 1, 2, 1, 0, 0), pool);
  bench_layer("mnv2 dw576 14 s1", conv2d(576, 576, 576, 14, 14, 3, 1, 1, 1, 1), pool);
  bench_layer("mnv2 dw576 14 s2", conv2d(576, 576, 576, 14, 14, 3, 2, 1, 1, 1), pool);
  bench_layer("regnet g25x16 3x3 7", conv2d(400, 400, 25, 7, 7, 3, 1, 1, 1, 1), pool);
  bench_layer("regnet g10x16 3x3 14", conv2d(160, 160, 10, 14, 14, 3, 1, 1, 1, 1), pool);
  bench_layer("regnet g4x16 3x3 28", conv2d(64, 64, 4, 28, 28, 3, 1, 1, 1, 1), pool);
  bench_layer("rnext g32x8 3x3 56", conv2d(256, 256, 32, 56, 56, 3, 1, 1, 1, 1), pool);
  bench_layer("rnext g32x64 3x3 7", conv2d(2048, 2048, 32, 7, 7, 3, 1, 1, 1, 1), pool);
  run_train_bench(pool);
  kiln_threadpool_destroy(pool);
}

int main(int argc, char **argv) {
  g_rng = 0x243f6a8885a308d3ull;
  bool bench = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) g_verbose = 1;
    else if (!strcmp(argv[i], "--bench")) bench = true;
  }
  if (bench) {
    run_bench(1);
    run_bench(2);
    return 0;
  }
  kiln_threadpool *pools[3];
  for (int i = 0; i < 3; i++) MUST(kiln_threadpool_create(i + 1, &pools[i]));

  /* Fixed cases: the shapes each path is specialized for, at odd sizes. */
  conv_case fixed[] = {
      conv2d(5, 7, 1, 9, 11, 1, 1, 1, 0, 0),     /* pointwise */
      conv2d(33, 17, 1, 13, 6, 1, 2, 1, 0, 0),   /* 1x1 stride 2 */
      conv2d(3, 8, 1, 17, 15, 3, 2, 1, 1, 1),    /* stem-like */
      conv2d(16, 16, 16, 9, 13, 3, 1, 1, 1, 1),  /* dw 3x3 s1 */
      conv2d(24, 24, 24, 14, 17, 3, 2, 1, 1, 1), /* dw 3x3 s2 */
      conv2d(7, 7, 7, 5, 6, 3, 2, 1, 0, 2),      /* dw s2, asymmetric pad */
      conv2d(9, 9, 9, 8, 8, 3, 1, 1, 2, 0),      /* dw s1, pad 2/0 */
      conv2d(5, 5, 5, 3, 3, 3, 1, 1, 2, 2),      /* dw, output larger than input */
      conv2d(6, 6, 6, 11, 12, 5, 1, 1, 2, 2),    /* dw 5x5 */
      conv2d(6, 6, 6, 11, 12, 3, 1, 2, 2, 2),    /* dw dilated */
      conv2d(6, 6, 6, 11, 12, 3, 3, 1, 1, 1),    /* dw stride 3 */
      conv2d(32, 32, 1, 16, 16, 3, 1, 1, 1, 1),  /* Winograd, exact tiles */
      conv2d(35, 19, 1, 13, 10, 3, 1, 1, 1, 1),  /* Winograd, ragged */
      conv2d(17, 40, 1, 7, 7, 3, 1, 1, 0, 2),    /* Winograd, asymmetric pads */
      conv2d(3, 5, 1, 6, 5, 3, 1, 1, 2, 2),      /* Winograd, tiny */
      conv2d(64, 64, 1, 14, 14, 3, 1, 1, 1, 1),  /* Winograd, ResNet-like */
      conv2d(20, 30, 1, 13, 11, 3, 1, 2, 2, 1),  /* dilated */
      conv2d(8, 12, 4, 9, 9, 3, 1, 1, 1, 1),     /* grouped */
      conv2d(8, 16, 8, 9, 9, 3, 2, 1, 1, 1),     /* depthwise with multiplier: grouped im2col */
      conv2d(37, 13, 1, 7, 7, 1, 1, 1, 0, 0),    /* pw: 48 + 1 columns (column kernel), ragged channel block */
      conv2d(300, 20, 1, 9, 13, 1, 1, 1, 0, 0),  /* pw: deep K, 2 * 48 + 21 columns */
      conv2d(64, 9, 1, 70, 71, 1, 1, 1, 0, 0),   /* pw: X larger than one chunk */
      conv2d(5, 5, 5, 9, 37, 3, 1, 1, 1, 1),     /* dw3x3d s1: 3 column vectors */
      conv2d(6, 6, 6, 20, 35, 3, 2, 1, 0, 2),    /* dw3x3d s2: odd width, pads 0/2 */
      conv2d(6, 6, 6, 21, 36, 3, 2, 1, 2, 0),    /* dw3x3d s2: even width, pads 2/0 */
      conv2d(3, 3, 3, 5, 70, 3, 2, 1, 1, 1),     /* dw3x3d s2: 35 outputs (3 vectors) */
      conv2d(5, 5, 5, 7, 7, 3, 1, 1, 0, 2),      /* dw3x3d s1 flat plane, pads 0/2 */
      conv2d(4, 4, 4, 14, 14, 3, 1, 1, 1, 1),    /* dw3x3d s1 flat plane, 13 vectors */
      conv2d(4, 4, 4, 1, 15, 3, 1, 1, 1, 1),     /* dw3x3d s1 flat plane, one row */
  };
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) run_case(&fixed[i], pools, 3);
  conv_case batch = conv2d(16, 16, 16, 10, 10, 3, 2, 1, 1, 1);
  batch.n = 3;
  batch.bias = false;
  run_case(&batch, pools, 3);
  conv_case pb = conv2d(19, 21, 1, 5, 11, 1, 1, 1, 0, 0);
  pb.n = 2;
  run_case(&pb, pools, 3);
  conv_case wb = conv2d(24, 20, 1, 9, 9, 3, 1, 1, 1, 1);
  wb.n = 2;
  run_case(&wb, pools, 3);
  conv_case c1 = {1, 2, 6, 5, 1, {23}, {3}, {2}, {1}, {1}, {2}, true};
  run_case(&c1, pools, 2);
  conv_case c3 = {3, 1, 4, 6, 2, {5, 6, 4}, {3, 2, 3}, {1, 2, 1}, {1, 1, 2}, {1, 0, 2}, {1, 1, 0}, true};
  run_case(&c3, pools, 2);
  /* 3-D depthwise, MViT's attention pooling: 3x3x3, strides 1x2x2, a batch of heads */
  conv_case dw3 = {3, 2, 8, 8, 8, {4, 9, 10}, {3, 3, 3}, {1, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true};
  run_case(&dw3, pools, 3);
  for (int i = 0; i < 120; i++) {
    conv_case t = random_case();
    run_case(&t, pools, 1 + i % 3);
  }
  for (int i = 0; i < 24; i++) { /* pointwise at random sizes (the direct kernel's tails) */
    conv_case t = conv2d(rnd_int(1, 200), rnd_int(1, 40), 1, rnd_int(1, 30), rnd_int(1, 30), 1, 1, 1, 0, 0);
    t.n = rnd_int(1, 2);
    t.bias = rnd_int(0, 1);
    run_case(&t, pools, 1 + i % 3);
  }
  run_pw_isa_cases(pools);
  /* depthwise windows beyond 3x3 (dwk); after the random cases, which keep their seeds */
  conv_case dwk[] = {
      conv2d(12, 12, 12, 28, 29, 5, 2, 1, 2, 2), /* 5x5 s2 (MobileNetV3) */
      conv2d(10, 10, 10, 17, 40, 5, 1, 1, 2, 2), /* 5x5 s1, 16-column blocks then a ragged one */
      conv2d(6, 6, 6, 15, 33, 3, 2, 2, 2, 2),    /* dilated and strided */
      conv2d(5, 5, 5, 9, 9, 7, 3, 1, 3, 0),      /* 7x7 s3, pads 3/0 */
      {1, 2, 8, 8, 8, {50}, {5}, {2}, {1}, {2}, {2}, true},                 /* 1-D (audio) */
      {2, 1, 6, 6, 6, {13, 19}, {3, 7}, {1, 2}, {2, 1}, {1, 3}, {1, 3}, true}, /* non-square window */
  };
  for (size_t i = 0; i < sizeof dwk / sizeof dwk[0]; i++) run_case(&dwk[i], pools, 3);
  /* Small planes over a batch (training's layers with the weights as
   * inputs: the batched path's one GEMM over every image's pixels). */
  struct {
    int64_t n;
    conv_case t;
  } batched[] = {
      {32, conv2d(24, 20, 1, 1, 1, 3, 1, 1, 1, 1)},  /* 1x1 plane, 3x3 pad 1: osize 1 */
      {3, conv2d(17, 33, 1, 2, 2, 3, 1, 1, 1, 1)},   /* osize 4 */
      {32, conv2d(16, 24, 1, 4, 4, 3, 2, 1, 1, 1)},  /* stride 2: osize 4 */
      {3, conv2d(9, 21, 1, 7, 7, 3, 1, 1, 1, 1)},    /* osize 49 */
      {1, conv2d(12, 18, 1, 14, 13, 3, 2, 1, 1, 1)}, /* batch 1, stride 2, osize 49 */
      {3, conv2d(10, 19, 1, 7, 7, 3, 1, 2, 2, 2)},   /* dilated, osize 49 */
      {3, conv2d(8, 11, 1, 6, 7, 3, 2, 2, 0, 3)},    /* dilated, strided, pads 0/3 */
      {32, conv2d(40, 36, 1, 2, 2, 1, 1, 1, 0, 0)},  /* pointwise, osize 4 */
      {3, conv2d(24, 40, 1, 4, 3, 1, 2, 1, 0, 0)},   /* 1x1 stride 2 (downsample) */
      {32, conv2d(64, 80, 1, 2, 2, 3, 1, 1, 1, 1)},  /* many SGEMM tiles (128 pixels, K 576) */
      {32, conv2d(5, 7, 1, 3, 3, 3, 1, 1, 0, 0)},    /* osize 1 without padding */
      {3, conv2d(20, 26, 1, 1, 1, 3, 1, 1, 1, 1)},   /* 3 pixels: the product as [pixels, Co] */
      {8, conv2d(16, 4, 1, 32, 32, 3, 1, 1, 1, 1)},  /* 576 KB of columns an image: chunks of 3 + 3 + 2 images */
  };
  for (size_t i = 0; i < sizeof batched / sizeof batched[0]; i++) {
    conv_case t = batched[i].t;
    t.n = batched[i].n;
    t.bias = i % 3 != 1;
    run_case(&t, pools, 3);
  }
  /* Weight gradients as Conv (dW^T = Conv(X^T, dY^T): images the forward
   * input channels, channels the forward batch, the kernel the forward
   * output plane, dilated by the forward stride): the im2row path's rows. */
  conv_case wgrad[] = {
      batch_of(6, conv2d(8, 12, 1, 7, 7, 7, 1, 1, 1, 1)),     /* fmnist_cnn's conv2, scaled down: 3x3 out */
      batch_of(5, conv2d(4, 9, 1, 8, 8, 8, 1, 1, 1, 1)),      /* ResNet 3x3 stride 1 */
      batch_of(5, conv2d(4, 9, 1, 8, 8, 4, 1, 2, 1, 1)),      /* 3x3 stride 2: dilation 2, 4x4 out */
      batch_of(5, conv2d(4, 9, 1, 9, 9, 5, 1, 2, 1, 1)),      /* 3x3 stride 2 over an odd plane */
      batch_of(7, conv2d(3, 10, 1, 8, 8, 4, 1, 2, 0, 0)),     /* 1x1 stride 2: 2x2 out (cut to 1x1 after) */
      batch_of(7, conv2d(3, 10, 1, 6, 6, 6, 1, 1, 0, 0)),     /* 1x1 stride 1: a 1x1 output plane */
      batch_of(4, conv2d(5, 6, 1, 7, 7, 7, 1, 1, 0, 2)),      /* pads 0/2 */
      batch_of(3, conv2d(3, 7, 1, 20, 21, 18, 1, 1, 1, 1)),   /* kernel rows of 18: two 16-float pieces */
      batch_of(3, conv2d(2, 5, 1, 18, 16, 16, 1, 1, 1, 1)),   /* kernel rows of exactly 16 */
      batch_of(1, conv2d(6, 4, 1, 9, 9, 9, 1, 1, 1, 1)),      /* one image (fmnist_cnn's conv1) */
      batch_of(40, conv2d(3, 5, 1, 24, 24, 24, 1, 1, 1, 1)),  /* 2.5 MB of rows: slices of 2 + 1 channels */
      batch_of(80, conv2d(1, 5, 1, 28, 28, 28, 1, 1, 1, 1)),  /* one channel's rows over 2 MB: chunks of 74 + 6 images */
      batch_of(32, conv2d(16, 24, 1, 4, 4, 3, 2, 1, 1, 1)),   /* a forward layer over small planes */
  };
  for (size_t i = 0; i < sizeof wgrad / sizeof wgrad[0]; i++) {
    wgrad[i].bias = i % 2 == 0;
    run_case(&wgrad[i], pools, 3);
  }
  conv_case w1 = {1, 4, 3, 5, 1, {20}, {18}, {1}, {1}, {1}, {1}, true}; /* 1-D */
  run_case(&w1, pools, 3);
  conv_case w3 = {3, 3, 2, 4, 1, {5, 6, 7}, {4, 5, 6}, {1, 1, 2}, {1, 1, 1}, {1, 0, 1}, {1, 1, 0}, false}; /* 3-D */
  run_case(&w3, pools, 3);
  { /* auto picks im2row for the weight gradient with the weights at run time */
    conv_case t = batch_of(32, conv2d(64, 64, 1, 14, 14, 14, 1, 1, 1, 1));
    kiln_conv_geom c = {2, t.n, t.ci, t.co, 1, {14, 14}, {3, 3}, {14, 14}, {1, 1}, {1, 1}, {1, 1}, 64 * 196, 9};
    g_checks++;
    if (kiln_conv_choose(&c, false) != KILN_CONV_IM2ROW) {
      g_failures++;
      fprintf(stderr, "FAIL auto for fmnist_cnn's weight gradient: %s, want im2row\n",
              kiln_conv_algo_name(kiln_conv_choose(&c, false)));
    }
  }
  conv_case b1 = {1, 3, 6, 10, 1, {9}, {3}, {2}, {2}, {1}, {2}, false}; /* 1-D */
  run_case(&b1, pools, 2);
  conv_case b3 = {3, 3, 4, 6, 1, {3, 4, 3}, {3, 2, 3}, {1, 2, 1}, {1, 1, 1}, {1, 0, 1}, {1, 1, 1}, true}; /* 3-D */
  run_case(&b3, pools, 2);
  /* Tap pruning (weights at run time over small planes): the taps that
   * read only padding for every output, and the outputs every tap reads
   * only padding for, left out of the GEMMs. want_k / want_o: the K and
   * output size AUTO's plan multiplies. */
  struct {
    int64_t n, want_k, want_o;
    conv_case t;
  } pruning[] = {
      {32, 24, 1, conv2d(24, 20, 1, 1, 1, 3, 1, 1, 1, 1)},   /* 1x1 plane, 3x3 pad 1: the centre tap */
      {1, 24, 1, conv2d(24, 20, 1, 1, 1, 3, 1, 1, 1, 1)},    /* batch 1 */
      {32, 4 * 20, 1, conv2d(20, 28, 1, 2, 2, 3, 2, 1, 1, 1)}, /* 2x2 -> 1x1 stride 2: 2x2 taps */
      {3, 9 * 12, 4, conv2d(12, 10, 1, 2, 2, 5, 1, 1, 2, 2)},  /* 5x5 pad 2 over 2x2: the middle 3x3 */
      {3, 12, 4, conv2d(12, 10, 1, 2, 2, 3, 1, 2, 2, 2)},      /* dilated 2, pad 2 over 2x2: the centre tap */
      {32, 9 * 16, 4, conv2d(16, 24, 1, 2, 2, 3, 1, 1, 1, 1)}, /* 2x2: every tap live for some pixel, none pruned */
      /* weight-gradient geometry (kernel: the forward output plane), 3x3 out */
      {40, 8, 1, batch_of(40, conv2d(8, 12, 1, 1, 1, 1, 1, 1, 1, 1))}, /* fwd 3x3 pad 1 over 1x1: the centre */
      {40, 8, 4, batch_of(40, conv2d(8, 12, 1, 2, 2, 1, 1, 2, 1, 0))}, /* fwd stride 2, 2x2 -> 1x1: 2x2 outputs */
      {5, 6 * 1, 1, {2, 5, 6, 7, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {2, 1}, {2, 1}, true}}, /* pads 2/1: 5x3 out, one live */
  };
  for (size_t i = 0; i < sizeof pruning / sizeof pruning[0]; i++) {
    conv_case t = pruning[i].t;
    t.n = pruning[i].n;
    t.bias = i % 2 == 0;
    run_case(&t, pools, 3);
    kiln_conv_geom c = {t.nsp, t.n, t.ci, t.co, t.group};
    c.kdim = t.ci / t.group;
    c.osize = 1;
    for (int a = 0; a < t.nsp; a++) {
      c.in_sp[a] = t.in[a];
      c.out_sp[a] = out_dim(&t, a);
      c.k[a] = t.k[a];
      c.stride[a] = t.stride[a];
      c.dil[a] = t.dil[a];
      c.pad_begin[a] = t.pb[a];
      c.kdim *= t.k[a];
      c.osize *= c.out_sp[a];
    }
    kiln_conv_plan *plan;
    MUST(kiln_conv_plan_create(&c, KILN_CONV_AUTO, NULL, 2, &plan));
    int64_t k, o;
    kiln_conv_plan_products(plan, &k, &o);
    g_checks++;
    if (k != pruning[i].want_k || o != pruning[i].want_o) {
      g_failures++;
      fprintf(stderr, "FAIL pruning case %zu: K %lld, output %lld; want %lld, %lld\n", i, (long long)k, (long long)o,
              (long long)pruning[i].want_k, (long long)pruning[i].want_o);
    }
    free(plan);
  }
  /* ConvTranspose: training's data gradients (small planes over a batch:
   * one GEMM over the batch's pixels) and the GEMM per image. */
  struct {
    int64_t n, out_pad;
    conv_case t;
  } transposed[] = {
      {32, 0, conv2d(24, 20, 1, 1, 1, 3, 1, 1, 1, 1)},  /* 1x1 planes, 3x3 pad 1 */
      {32, 1, conv2d(20, 12, 1, 1, 1, 3, 2, 1, 1, 1)},  /* stride 2 back to 2x2 */
      {32, 1, conv2d(16, 8, 1, 1, 1, 1, 2, 1, 0, 0)},   /* 1x1 stride 2 (downsample) */
      {3, 0, conv2d(17, 33, 1, 2, 2, 3, 1, 1, 1, 1)},   /* 2x2 planes */
      {3, 1, conv2d(9, 21, 1, 4, 4, 3, 2, 1, 1, 1)},    /* 4x4 planes, stride 2 */
      {3, 0, conv2d(10, 7, 1, 3, 5, 3, 1, 2, 2, 1)},    /* dilated, pads 2/1 */
      {3, 1, conv2d(9, 21, 1, 7, 7, 3, 2, 1, 1, 1)},    /* 7x7 planes: a GEMM per image */
      {2, 0, conv2d(6, 5, 1, 8, 9, 2, 2, 1, 0, 0)},     /* 72 pixels: a GEMM per image */
      {1, 0, conv2d(12, 10, 1, 3, 3, 3, 1, 1, 1, 1)},   /* batch 1 */
      {3, 0, conv2d(8, 12, 4, 3, 3, 3, 1, 1, 1, 1)},    /* grouped */
      {150, 0, conv2d(16, 512, 1, 4, 4, 3, 1, 1, 1, 1)}, /* 296 KB of columns an image: chunks of 56 images */
      /* live taps only (the others land outside the output for every pixel) */
      {1, 0, conv2d(12, 10, 1, 1, 1, 3, 1, 1, 1, 1)},   /* batch 1, 1x1 plane: the centre tap */
      {3, 0, conv2d(8, 12, 4, 1, 1, 3, 1, 1, 1, 1)},    /* grouped, 1x1 plane */
      {32, 0, conv2d(10, 14, 1, 2, 2, 5, 1, 1, 2, 2)},  /* 5x5 pad 2 over 2x2: the middle 3x3 */
      {32, 0, conv2d(10, 14, 1, 2, 2, 3, 1, 2, 2, 2)},  /* dilated 2, pad 2 over 2x2: the centre tap */
      {32, 1, conv2d(12, 9, 1, 1, 1, 3, 2, 1, 1, 1)},   /* stride 2, 1x1 -> 2x2: 2x2 taps */
  };
  for (size_t i = 0; i < sizeof transposed / sizeof transposed[0]; i++) {
    conv_case t = transposed[i].t;
    t.n = transposed[i].n;
    t.bias = i % 3 != 2;
    run_transpose_case(&t, transposed[i].out_pad, pools, 3);
  }
  conv_case t1 = {1, 4, 6, 5, 1, {3}, {3}, {2}, {2}, {1}, {0}, true}; /* 1-D */
  run_transpose_case(&t1, 1, pools, 2);
  for (int i = 0; i < 3; i++) kiln_threadpool_destroy(pools[i]);
  printf("test_conv: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
