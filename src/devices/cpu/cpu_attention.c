/* cpu_attention.c — ONNX Attention's decoder step (a few query rows
 * against a key/value cache) as one host routine of the cpu.
 *
 * Elsewhere the node becomes Concat (the present cache), MatMul, Softmax,
 * MatMul (passes/decompose.c). For a decoder step those kernels are
 * bound by memory, not arithmetic: the 2 x 33 MB cache is read by the
 * Concats, written as the present outputs, and read again by the two
 * products. Here each (batch, key/value head) is one task that copies a
 * block of the past cache into the present output (non-temporal stores)
 * and, while that block is still in the core's cache, computes the block's
 * scores (K) or its share of the output (V): the cache crosses memory
 * twice instead of three times.
 *   scores[r, j] = scale * q_r . k_j, softcap c: c * tanh(s / c), is_causal
 *   masking key j > i + P for query row i; softmax over j; y_r = sum_j
 *   p[r, j] v_j. Query head h reads key/value head h / (Hq / Hkv).
 * Taken (kiln_attention_decode_step, which the optimizer also consults to
 * keep the node whole for the cpu): f32, 4-D, past_key and past_value
 * given, no attn_mask, nonpad_kv_seqlen, window or qk_matmul_output, at
 * most 4 query rows. A shape ref rejects is left to ref (*handled false),
 * which words the error.
 */
#include "devices/cpu/cpu_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "codegen/kiln_math.h"
#include "passes/passes_opt.h"

#define ROWS_FN(name) name##_generic
#include "devices/cpu/cpu_attention_rows_impl.h"
#undef ROWS_FN

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATT_HAVE_AVX2 1
#include "devices/cpu/target_avx2_begin.h"
#define ROWS_FN(name) name##_avx2
#include "devices/cpu/cpu_attention_rows_impl.h"
#undef ROWS_FN
#include "devices/cpu/target_avx2_end.h"
#endif

/* Rows of the cache a task copies, then reads while they are in cache. */
#define ATT_BLOCK_BYTES ((int64_t)256 << 10)

typedef struct att_job {
  const float *q, *k, *v, *pk, *pv;
  float *y, *ok, *ov; /* ok, ov: NULL when the node has no present output */
  int64_t hq, hkv, s, l, p, e, ev;
  float scale, softcap;
  bool causal;
  void (*dots)(const float *q, int nq, const float *k, int64_t e, float scale, float *s, int64_t ts);
  void (*axpys)(float *y, int nq, const float *v, int64_t ev, const float *p, int64_t ps);
  atomic_bool failed; /* out of memory in a task (set by any, read after the join) */
} att_job;

/* Rows [j0, j1) of one head's cache: from the past (j < p) or the new K/V. */
static const float *cache_row(const float *past, const float *cur, int64_t p, int64_t d, int64_t j) {
  return j < p ? past + j * d : cur + (j - p) * d;
}

/* Copies rows [j0, j1) of a head's cache into its present output. */
static void copy_rows(float *out, const float *past, const float *cur, int64_t p, int64_t d, int64_t j0, int64_t j1) {
  if (!out) return;
  int64_t a = j0, b = j1 < p ? j1 : p;
  if (b > a) kiln_memcpy_stream(out + a * d, past + a * d, (size_t)(b - a) * (size_t)d * sizeof(float));
  a = j0 > p ? j0 : p;
  if (j1 > a) memcpy(out + a * d, cur + (a - p) * d, (size_t)(j1 - a) * (size_t)d * sizeof(float));
}

static void att_task(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  att_job *w = ctx;
  int64_t g = w->hq / w->hkv, t = w->p + w->l, nr = g * w->s; /* query rows of a key/value head */
  float *sc = malloc((size_t)(nr * t) * sizeof *sc);
  if (!sc) {
    atomic_store(&w->failed, true);
    return;
  }
  for (int64_t task = begin; task < end; task++) {
    int64_t bi = task / w->hkv, hk = task % w->hkv;
    const float *q = w->q + (bi * w->hq + hk * g) * w->s * w->e; /* the g heads' s rows, contiguous */
    const float *pk = w->pk + (bi * w->hkv + hk) * w->p * w->e, *kk = w->k + (bi * w->hkv + hk) * w->l * w->e;
    const float *pv = w->pv + (bi * w->hkv + hk) * w->p * w->ev, *vv = w->v + (bi * w->hkv + hk) * w->l * w->ev;
    float *ok = w->ok ? w->ok + (bi * w->hkv + hk) * t * w->e : NULL;
    float *ov = w->ov ? w->ov + (bi * w->hkv + hk) * t * w->ev : NULL;
    float *y = w->y + (bi * w->hq + hk * g) * w->s * w->ev;
    /* Scores, a block of K rows at a time: copied, then read. */
    int64_t kb = ATT_BLOCK_BYTES / (int64_t)sizeof(float) / (w->e > 0 ? w->e : 1);
    if (kb < 1) kb = 1;
    for (int64_t j0 = 0; j0 < t; j0 += kb) {
      int64_t j1 = j0 + kb < t ? j0 + kb : t;
      copy_rows(ok, pk, kk, w->p, w->e, j0, j1);
      for (int64_t j = j0; j < j1; j++)
        w->dots(q, (int)nr, cache_row(pk, kk, w->p, w->e, j), w->e, w->scale, sc + j, t);
    }
    /* Softcap, the causal mask, softmax over each row. */
    for (int64_t r = 0; r < nr; r++) {
      float *s = sc + r * t;
      int64_t last = w->causal ? (r % w->s) + w->p : t - 1; /* keys past it masked */
      if (last > t - 1) last = t - 1;
      float mx = -INFINITY;
      for (int64_t j = 0; j <= last; j++) {
        if (w->softcap > 0) s[j] = w->softcap * kiln_tanhf(s[j] / w->softcap);
        mx = s[j] > mx ? s[j] : mx;
      }
      float sum = 0;
      for (int64_t j = 0; j <= last; j++) sum += s[j] = kiln_expf(s[j] - mx);
      float inv = 1.0f / sum;
      for (int64_t j = 0; j <= last; j++) s[j] *= inv;
      for (int64_t j = last + 1; j < t; j++) s[j] = 0;
    }
    /* The output, a block of V rows at a time: copied, then read. */
    memset(y, 0, (size_t)(nr * w->ev) * sizeof *y);
    int64_t vb = ATT_BLOCK_BYTES / (int64_t)sizeof(float) / (w->ev > 0 ? w->ev : 1);
    if (vb < 1) vb = 1;
    for (int64_t j0 = 0; j0 < t; j0 += vb) {
      int64_t j1 = j0 + vb < t ? j0 + vb : t;
      copy_rows(ov, pv, vv, w->p, w->ev, j0, j1);
      for (int64_t j = j0; j < j1; j++) w->axpys(y, (int)nr, cache_row(pv, vv, w->p, w->ev, j), w->ev, sc + j, t);
    }
  }
  free(sc);
}

bool kiln_cpu_attention_routine(const kiln_graph *g, const kiln_node *node) {
  return kiln_node_op_id(node) == KILN_OP_Attention && kiln_attention_decode_step(g, node);
}

kiln_status_t kiln_cpu_host_attention(cpu_exec *x, kiln_kernel_ctx *ctx, bool *handled) {
  const kiln_node *n = ctx->node;
  kiln_tensor *q = kiln_kernel_input(ctx, 0), *k = kiln_kernel_input(ctx, 1), *v = kiln_kernel_input(ctx, 2);
  kiln_tensor *pk = kiln_kernel_input(ctx, 4), *pv = kiln_kernel_input(ctx, 5);
  /* Every host step's Attention reaches this hook: the routine's node rules
   * (kiln_attention_decode_node), then the run's tensors. */
  if (!kiln_attention_decode_node(n) || !q || !k || !v || !pk || !pv) return NULL;
  const kiln_tensor *all[5] = {q, k, v, pk, pv};
  for (int i = 0; i < 5; i++)
    if (all[i]->dtype != KILN_DTYPE_F32 || all[i]->rank != 4) return NULL;
  int64_t B = q->dims[0], Hq = q->dims[1], S = q->dims[2], E = q->dims[3];
  int64_t Hkv = k->dims[1], L = k->dims[2], Ev = v->dims[3], P = pk->dims[2];
  if (S > 4) return NULL;
  /* The run's shapes as ref checks them; anything else is ref's to word. */
  if (Hkv < 1 || Hq % Hkv || k->dims[0] != B || k->dims[3] != E || v->dims[0] != B || v->dims[1] != Hkv ||
      v->dims[2] != L || pk->dims[0] != B || pk->dims[1] != Hkv || pk->dims[3] != E || pv->dims[0] != B ||
      pv->dims[1] != Hkv || pv->dims[2] != P || pv->dims[3] != Ev)
    return NULL;
  int64_t T = P + L;
  kiln_tensor *y = NULL, *ok = NULL, *ov = NULL;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, 4, (const int64_t[]){B, Hq, S, Ev}, &y));
  if (ctx->n_outputs > 1 && ctx->output_wanted[1])
    KILN_TRY(kiln_kernel_output_uninit(ctx, 1, KILN_DTYPE_F32, 4, (const int64_t[]){B, Hkv, T, E}, &ok));
  if (ctx->n_outputs > 2 && ctx->output_wanted[2])
    KILN_TRY(kiln_kernel_output_uninit(ctx, 2, KILN_DTYPE_F32, 4, (const int64_t[]){B, Hkv, T, Ev}, &ov));
  *handled = true;
  const kiln_attr *sa = kiln_node_attr(n, "scale");
  att_job w = {.q = q->data, .k = k->data, .v = v->data, .pk = pk->data, .pv = pv->data, .y = y->data,
               .ok = ok ? ok->data : NULL, .ov = ov ? ov->data : NULL, .hq = Hq, .hkv = Hkv, .s = S, .l = L, .p = P,
               .e = E, .ev = Ev, .softcap = kiln_attr_float(n, "softcap", 0.0f),
               .scale = sa && sa->type == KILN_ATTR_FLOAT ? sa->f : (float)(1.0 / sqrt((double)E)),
               .causal = kiln_attr_int(n, "is_causal", 0) != 0,
               .dots = dots_generic, .axpys = axpys_generic};
#ifdef ATT_HAVE_AVX2
  const kiln_cpu_features *cpu = kiln_cpu_features_get();
  if (cpu->avx2 && cpu->fma) w.dots = dots_avx2, w.axpys = axpys_avx2;
#endif
  if (B * Hkv > 0 && T > 0) kiln_parallel_for(x->pool, B * Hkv, 1, att_task, &w);
  if (atomic_load(&w.failed)) return kiln_error(KILN_OUT_OF_MEMORY, "Attention: no memory for the scores of %lld keys", (long long)T);
  return NULL;
}
