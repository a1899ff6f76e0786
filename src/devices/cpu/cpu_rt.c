/* The runtime table generated C calls (codegen/kiln_rt.h) on the cpu
 * device: the thread pool, the packed SGEMM and integer GEMM, B packed once per launch,
 * convolutions by the measured algorithms of cpu_conv.c, each planned once
 * per launch, and transposed convolutions (cpu_conv_transpose.c). */
#include <stddef.h>
#include <stdio.h>

#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"
#include "devices/cpu/gemm/igemm.h"

/* The exec whose table rt is (cpu_exec.rt). */
static cpu_exec *exec_of(const kiln_rt *rt) { return (cpu_exec *)(void *)((char *)rt - offsetof(cpu_exec, rt)); }

static void rt_fail(const kiln_rt *rt, const char *message) {
  cpu_exec *x = exec_of(rt);
  if (!x->rt_error) x->rt_error = kiln_error(KILN_OUT_OF_MEMORY, "%s", message);
}

static void rt_parallel_for(void *pool, int64_t n, int64_t grain, kiln_rt_parallel_fn fn, void *ctx) {
  kiln_parallel_for((kiln_threadpool *)pool, n, grain, (kiln_parallel_fn)fn, ctx);
}

static void rt_sgemm(void *pool, const kiln_rt_sgemm_args *a) {
  kiln_sgemm_args g = {a->trans_a, a->trans_b, a->m, a->n, a->k, a->alpha, a->a, a->lda, a->b, a->ldb,
                       a->packed_b, a->beta, a->c, a->ldc, a->bias, a->bias_axis,
                       (kiln_gemm_epilogue_fn)a->epilogue, a->epilogue_ctx};
  kiln_sgemm((kiln_threadpool *)pool, &g);
}

static void rt_igemm(void *pool, const kiln_rt_igemm_args *a) {
  kiln_igemm((kiln_threadpool *)pool, a);
}

/* ---- B packed once -------------------------------------------------------------- */

/* A packed B, shared (refs) by the launches' state slots and, for an
 * SGEMM operand, the exec's table (key: what was packed). */
typedef struct cpu_packed_b {
  kiln_rt_state base;
  void *packed; /* 64-byte aligned; owned */
  int refs;
  const void *b; /* the key: B's address and layout */
  int64_t k, n, ldb;
  bool trans_b;
} packed_b_state;

static void packed_b_destroy(kiln_rt_state *s) {
  packed_b_state *p = (packed_b_state *)s;
  if (--p->refs > 0) return;
  free(p->packed);
  free(p);
}

/* The packed B in *slot, or a new state of `bytes` (NULL, reported, when
 * out of memory) that the caller fills. */
static packed_b_state *packed_b_slot(const kiln_rt *rt, int64_t k, int64_t n, size_t bytes, kiln_rt_state **slot) {
  packed_b_state *s = calloc(1, sizeof *s);
  void *packed = bytes ? kiln_alloc_aligned(bytes) : NULL;
  if (!s || !packed) {
    free(s);
    free(packed);
    char msg[128];
    snprintf(msg, sizeof msg, "out of memory packing a %lld x %lld GEMM operand (%zu bytes)", (long long)k,
             (long long)n, bytes);
    rt_fail(rt, msg);
    return NULL;
  }
  s->base.destroy = packed_b_destroy;
  s->packed = packed;
  s->refs = 1;
  *slot = &s->base;
  return s;
}

void kiln_cpu_release_packed(cpu_exec *x) {
  for (int i = 0; i < x->n_packed; i++) packed_b_destroy(&x->packed[i]->base);
  free(x->packed);
  x->packed = NULL;
  x->n_packed = x->cap_packed = 0;
}

/* Launches run one at a time (a plan is used by one thread at a time), so
 * the table needs no lock. */
static const void *rt_sgemm_packed_b(const kiln_rt *rt, const kiln_rt_sgemm_args *a, kiln_rt_state **slot) {
  if (*slot) return ((packed_b_state *)*slot)->packed;
  if (kiln_sgemm_streams_b(a->m, a->trans_b)) return NULL; /* read in place (gemm.h) */
  cpu_exec *x = exec_of(rt);
  for (int i = 0; i < x->n_packed; i++) {
    packed_b_state *p = x->packed[i];
    if (p->b == a->b && p->k == a->k && p->n == a->n && p->ldb == a->ldb && p->trans_b == a->trans_b) {
      p->refs++;
      *slot = &p->base;
      return p->packed;
    }
  }
  packed_b_state *s = packed_b_slot(rt, a->k, a->n, kiln_sgemm_packed_b_size(a->k, a->n), slot);
  if (!s) return NULL;
  kiln_sgemm_pack_b(a->trans_b, a->k, a->n, a->b, a->ldb, s->packed);
  s->b = a->b, s->k = a->k, s->n = a->n, s->ldb = a->ldb, s->trans_b = a->trans_b;
  if (x->n_packed == x->cap_packed) {
    int cap = x->cap_packed ? 2 * x->cap_packed : 16;
    packed_b_state **t = realloc(x->packed, (size_t)cap * sizeof *t);
    if (!t) return s->packed; /* not shared: still this launch's */
    x->packed = t;
    x->cap_packed = cap;
  }
  s->refs++;
  x->packed[x->n_packed++] = s;
  return s->packed;
}

static const void *rt_igemm_packed_b(const kiln_rt *rt, const kiln_rt_igemm_args *a, kiln_rt_state **slot) {
  if (*slot) return ((packed_b_state *)*slot)->packed;
  packed_b_state *s = packed_b_slot(rt, a->k, a->n, kiln_igemm_packed_b_size(a->k, a->n), slot);
  if (s) kiln_igemm_pack_b(a, s->packed);
  return s ? s->packed : NULL;
}

/* ---- convolutions ------------------------------------------------------------------ */

typedef struct conv_state {
  kiln_rt_state base;
  kiln_conv_plan *plan;  /* owned; NULL when dnnl runs it */
  kiln_conv_dnnl *dnnl;  /* owned; the launch on oneDNN, or NULL */
} conv_state;

static void conv_destroy(kiln_rt_state *s) {
  free(((conv_state *)s)->plan);
  kiln_conv_dnnl_free(((conv_state *)s)->dnnl);
  free(s);
}

/* The launch's state, made at its first call: oneDNN's plan where it
 * applies (*out_dnnl), else NULL (the caller plans its own). */
static kiln_status_t dnnl_of(cpu_exec *x, const kiln_rt_conv_args *a, kiln_rt_state **slot, kiln_conv_dnnl **out_dnnl) {
  *out_dnnl = NULL;
  if (*slot) {
    *out_dnnl = ((conv_state *)*slot)->dnnl;
    return NULL;
  }
  if (!kiln_conv_dnnl_candidate(a)) return NULL; /* constant weights (inference): the library stays unloaded */
  kiln_conv_dnnl *d;
  KILN_TRY(kiln_conv_dnnl_plan(a, kiln_threadpool_size(x->pool), &d));
  /* Made either way: it remembers that oneDNN did not take this launch */
  conv_state *s = calloc(1, sizeof *s);
  if (!s) {
    kiln_conv_dnnl_free(d);
    return KILN_OOM();
  }
  s->base.destroy = conv_destroy;
  s->dnnl = d;
  *slot = &s->base;
  *out_dnnl = d;
  return NULL;
}

/* One scratch for every convolution of the exec (launches run one at a
 * time), grown to `bytes`. */
static kiln_status_t grow_scratch(cpu_exec *x, size_t bytes) {
  if (bytes <= x->scratch_bytes) return NULL;
  float *grown = kiln_alloc_aligned_huge(bytes);
  if (!grown) return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for the convolution scratch (%zu bytes)", bytes);
  free(x->scratch);
  x->scratch = grown;
  x->scratch_bytes = bytes;
  return NULL;
}

/* The plan of a's convolution (made at the launch's first call). */
static kiln_status_t conv_plan_of(cpu_exec *x, const kiln_rt_conv_args *a, kiln_rt_state **slot, kiln_conv_plan **out) {
  conv_state *have = (conv_state *)*slot; /* made by dnnl_of, without a plan, where oneDNN did not take it */
  if (have && have->plan) {
    *out = have->plan;
    return NULL;
  }
  kiln_conv_geom c = {.nsp = a->nsp, .n = a->n, .ci = a->ci, .co = a->co, .group = a->group, .y_cn = a->y_cn};
  c.kdim = a->ci / a->group;
  c.osize = 1;
  for (int i = 0; i < a->nsp; i++) {
    c.in_sp[i] = a->in[i];
    c.out_sp[i] = a->out[i];
    c.k[i] = a->kernel[i];
    c.stride[i] = a->stride[i];
    c.dil[i] = a->dilation[i];
    c.pad_begin[i] = a->pad_begin[i];
    c.kdim *= c.k[i];
    c.osize *= c.out_sp[i];
  }
  conv_state *s = have ? have : calloc(1, sizeof *s);
  if (!s) return KILN_OOM();
  kiln_status_t st =
      kiln_conv_plan_create(&c, KILN_CONV_AUTO, a->w_constant ? a->w : NULL, kiln_threadpool_size(x->pool), &s->plan);
  if (!st) st = grow_scratch(x, kiln_conv_plan_scratch_bytes(s->plan));
  if (st) {
    free(s->plan);
    s->plan = NULL;
    if (!have) free(s);
    return st;
  }
  s->base.destroy = conv_destroy;
  *slot = &s->base;
  *out = s->plan;
  return NULL;
}

static void rt_conv(const kiln_rt *rt, const kiln_rt_conv_args *a, kiln_rt_state **slot) {
  cpu_exec *x = exec_of(rt);
  kiln_conv_plan *plan;
  kiln_status_t st = NULL;
  if (a->integer) {
    st = grow_scratch(x, kiln_conv_integer_scratch_bytes(a));
    if (!st) st = kiln_conv_integer_run(x->pool, a, x->scratch);
    if (st && !x->rt_error) x->rt_error = st;
    else kiln_status_free(st);
    return;
  }
  kiln_conv_dnnl *dnnl = NULL;
  if (a->y_cn && (a->group != 1 || a->epilogue || a->bias || a->add || a->clip))
    st = kiln_error(KILN_INTERNAL, "conv with a [co, n, ...] output and a bias, epilogue or groups");
  if (!st) st = dnnl_of(x, a, slot, &dnnl);
  if (st || dnnl) {
    kiln_conv_epilogue epi = {a->epilogue, a->epilogue_buffers, a->add || a->clip, a->clip, a->lo, a->hi, a->add};
    if (!st) st = kiln_conv_dnnl_run(dnnl, x->pool, a, a->epilogue ? &epi : NULL);
    if (st && !x->rt_error) x->rt_error = st;
    else kiln_status_free(st);
    return;
  }
  if (a->transposed) {
    st = grow_scratch(x, kiln_conv_transpose_scratch_bytes(a));
    if (!st) kiln_conv_transpose_run(x->pool, a, x->scratch);
    else if (!x->rt_error) x->rt_error = st;
    else kiln_status_free(st);
    return;
  }
  st = conv_plan_of(x, a, slot, &plan);
  if (st) {
    if (!x->rt_error) x->rt_error = st;
    else kiln_status_free(st);
    return;
  }
  kiln_conv_epilogue epi = {a->epilogue, a->epilogue_buffers, a->add || a->clip, a->clip, a->lo, a->hi, a->add};
  kiln_conv_run(plan, x->pool, a->x, a->w, a->bias, a->y, x->scratch, a->epilogue ? &epi : NULL);
}

kiln_rt kiln_cpu_rt(kiln_threadpool *pool, int threads) {
  return (kiln_rt){KILN_RT_ABI_VERSION, pool, threads, rt_parallel_for, rt_sgemm, rt_sgemm_packed_b, rt_conv, rt_fail,
                    rt_igemm, rt_igemm_packed_b, kiln_cpu_pool, kiln_cpu_resample};
}
