/* kiln.FusedAttention as GLSL: one workgroup per (batch, block of query
 * rows). The scaled Q block stays in shared memory; for each block of keys
 * the K block is staged, the score block computed, an online (flash)
 * softmax update rescales the running row max/sum and the output
 * accumulators (registers), and the V block is multiplied in. Any n fits;
 * the block sizes are chosen to fit the device's shared memory. */
#if KILN_HAVE_VULKAN

#include <stdio.h>
#include <string.h>

#include "devices/vulkan/vk_kernels_internal.h"

typedef struct attn_plan {
  int nt, bm, bn, oe; /* threads, query rows and keys per block, outputs per invocation */
  int64_t qs, ks, kv; /* shared row strides (Q, K) and K/V buffer floats */
} attn_plan;

static int pow2_ceil(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

static double attn_shared_bytes(const vk_attention_desc *d, int bm, int bn, attn_plan *pl) {
  pl->qs = d->d;
  pl->ks = d->d + 1; /* odd stride: invocations reading different keys hit different banks */
  int64_t kv_row = pl->ks > d->dv ? pl->ks : d->dv;
  pl->kv = (int64_t)bn * kv_row;
  return 4.0 * ((double)bm * (double)pl->qs + (double)pl->kv + (double)bm * bn + 3.0 * bm);
}

static bool attn_plan_make(const vk_attention_desc *d, const vk_device_props *p, attn_plan *pl, char *why,
                           size_t why_len) {
  memset(pl, 0, sizeof *pl);
  pl->nt = (int)kk_threads(p, 256);
  if (pl->nt < 64) {
    if (why) snprintf(why, why_len, "the device allows only %d invocations per workgroup", pl->nt);
    return false;
  }
  double shared = p && p->max_shared_bytes ? p->max_shared_bytes : 16384;
  int bm = pow2_ceil(d->m, 32), bn = pow2_ceil(d->n, 64);
  for (;;) {
    double bytes = attn_shared_bytes(d, bm, bn, pl);
    int oe = (int)(((int64_t)bm * d->dv + pl->nt - 1) / pl->nt);
    if (bytes <= shared && oe <= 32) {
      pl->bm = bm;
      pl->bn = bn;
      pl->oe = oe;
      return true;
    }
    if (bn > 16 || (bn > 1 && bm == 1))
      bn /= 2;
    else if (bm > 1)
      bm /= 2;
    else {
      if (why)
        snprintf(why, why_len, "head sizes d=%lld dv=%lld do not fit %.0f bytes of shared memory", (long long)d->d,
                 (long long)d->dv, shared);
      return false;
    }
  }
}

static bool attn_check(const vk_attention_desc *d, const vk_device_props *p, attn_plan *pl, char *why,
                       size_t why_len) {
  if (d->m < 0 || d->n < 0 || d->d < 0 || d->dv < 0 || d->n_batch < 0 || d->n_batch > VK_KERNEL_MAX_BATCH) {
    if (why) snprintf(why, why_len, "bad sizes or %d batch axes", d->n_batch);
    return false;
  }
  double batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= (double)(d->batch[i] > 0 ? d->batch[i] : 0);
  double lim = (double)KK_INDEX_LIMIT;
  if ((double)d->y_offset + batch * (double)d->m * (double)d->dv > lim ||
      kk_extent(d->q_offset, d->n_batch, d->batch, d->q_batch_stride, d->m * d->d) > KK_INDEX_LIMIT ||
      kk_extent(d->k_offset, d->n_batch, d->batch, d->k_batch_stride, d->n * d->d) > KK_INDEX_LIMIT ||
      kk_extent(d->v_offset, d->n_batch, d->batch, d->v_batch_stride, d->n * d->dv) > KK_INDEX_LIMIT ||
      (d->has_mask &&
       (d->mask_stride_m < 0 || d->mask_stride_n < 0 ||
        kk_extent(d->mask_offset, d->n_batch, d->batch, d->mask_batch_stride,
                  (d->m > 0 ? (d->m - 1) * d->mask_stride_m : 0) + (d->n > 0 ? (d->n - 1) * d->mask_stride_n : 0) + 1) >
            KK_INDEX_LIMIT))) {
    if (why) snprintf(why, why_len, "tensors past 2^31 elements");
    return false;
  }
  if (batch > kk_max_groups(p, 2)) {
    if (why) snprintf(why, why_len, "batch %.0f exceeds the workgroup count limit", batch);
    return false;
  }
  char f[48];
  if (!kk_float(f, sizeof f, d->scale)) {
    if (why) snprintf(why, why_len, "scale is not finite");
    return false;
  }
  if (!attn_plan_make(d, p, pl, why, why_len)) return false;
  if ((uint64_t)((d->m + pl->bm - 1) / pl->bm) > kk_max_groups(p, 0)) {
    if (why) snprintf(why, why_len, "%lld query rows need too many workgroups", (long long)d->m);
    return false;
  }
  return true;
}

bool vk_attention_supported(const vk_attention_desc *d, const vk_device_props *props, char *why, size_t why_len) {
  attn_plan pl;
  return attn_check(d, props, &pl, why, why_len);
}

kiln_status_t vk_gen_attention(const vk_attention_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                               vk_kernel_src *out) {
  attn_plan pl;
  char why[256];
  if (!attn_check(d, props, &pl, why, sizeof why)) return kiln_error(KILN_UNSUPPORTED, "vulkan attention: %s", why);
  int own = d->has_mask ? 5 : 4;
  KILN_TRY(kk_check_epilogue(epi, own));
  int64_t M = d->m, N = d->n, D = d->d, DV = d->dv;
  int nt = pl.nt, bm = pl.bm, bn = pl.bn;
  char scale[48];
  kk_float(scale, sizeof scale, d->scale);

  kiln_strbuf s = {0};
  const char *ft = kk_ftype(d->fp16), *ld = kk_ld(d->fp16), *le = kk_le(d->fp16);
  kk_preamble(&s, (uint32_t)nt, 1, 1, d->fp16);
  kk_buffer(&s, 0, ft, "kk_q", true);
  kk_buffer(&s, 1, ft, "kk_k", true);
  kk_buffer(&s, 2, ft, "kk_v", true);
  if (d->has_mask) kk_buffer(&s, 3, ft, "kk_mask", true);
  kk_buffer(&s, own - 1, ft, "kk_y", false);
  /* d and dv size the shared arrays and the outputs each invocation
   * keeps (oe): they are structure, literal. m, n, strides and offsets are
   * specialization constants. */
  kk_consts c = {0};
  kk_store_fn(&s, &c, epi, "kk_y", d->y_offset, d->fp16);
  const char *cm = kk_const(&c, "KK_M", M), *cn = kk_const(&c, "KK_N", N);
  /* (GLSL arrays cannot be empty: d or dv may be 0) */
  kiln_strbuf_printf(&s, "shared float kk_sq[%lld];\nshared float kk_skv[%lld];\nshared float kk_ss[%d];\n",
                     (long long)(bm * pl.qs > 0 ? bm * pl.qs : 1), (long long)(pl.kv > 0 ? pl.kv : 1), bm * bn);
  kiln_strbuf_printf(&s, "shared float kk_sm[%d];\nshared float kk_sl[%d];\nshared float kk_sa[%d];\n", bm, bm, bm);
  kiln_strbuf_puts(&s, "int kk_oq, kk_ok, kk_ov, kk_om;\n");
  kiln_strbuf_puts(&s, "void main() {\n  int z = int(gl_WorkGroupID.z);\n");
  {
    const char *names[4] = {"kk_oq", "kk_ok", "kk_ov", "kk_om"};
    const int64_t *strides[4] = {d->q_batch_stride, d->k_batch_stride, d->v_batch_stride,
                                 d->has_mask ? d->mask_batch_stride : NULL};
    const int64_t offs[4] = {d->q_offset, d->k_offset, d->v_offset, d->mask_offset};
    kk_batch_offsets(&s, &c, "z", d->n_batch, d->batch, d->has_mask ? 4 : 3, names, strides, offs);
  }
  kiln_strbuf_printf(&s, "  int tid = int(gl_LocalInvocationIndex);\n  int i0 = int(gl_WorkGroupID.x) * %d;\n", bm);
  /* Q block, pre-scaled: scale * (q . k) becomes (scale * q) . k */
  kiln_strbuf_printf(&s, "  for (int e = tid; e < %lld; e += %d) {\n", (long long)(bm * D), nt);
  kiln_strbuf_printf(&s, "    int r = e / %lld, c = e %% %lld, gi = i0 + r;\n", (long long)D, (long long)D);
  kiln_strbuf_printf(&s, "    kk_sq[r * %lld + c] = gi < %s ? %skk_q[kk_oq + gi * %lld + c]%s * %s : 0.0;\n  }\n",
                     (long long)pl.qs, cm, ld, (long long)D, le, scale);
  kiln_strbuf_printf(&s, "  if (tid < %d) { kk_sm[tid] = uintBitsToFloat(0xff800000u); kk_sl[tid] = 0.0; }\n", bm);
  for (int o = 0; o < pl.oe; o++) kiln_strbuf_printf(&s, "  float o%d = 0.0;\n", o);
  kiln_strbuf_printf(&s, "  for (int j0 = 0; j0 < %s; j0 += %d) {\n    barrier();\n", cn, bn);
  /* K block -> kk_skv[key * ks + d] */
  kiln_strbuf_printf(&s, "    for (int e = tid; e < %lld; e += %d) {\n", (long long)(bn * D), nt);
  if (d->transpose_k) /* K [n, d]: d contiguous */
    kiln_strbuf_printf(&s, "      int jj = e / %lld, dd = e %% %lld, gj = j0 + jj;\n", (long long)D, (long long)D);
  else /* K [d, n]: keys contiguous */
    kiln_strbuf_printf(&s, "      int dd = e / %d, jj = e %% %d, gj = j0 + jj;\n", bn, bn);
  char kidx[64];
  if (d->transpose_k)
    snprintf(kidx, sizeof kidx, "gj * %lld + dd", (long long)D);
  else
    snprintf(kidx, sizeof kidx, "dd * %s + gj", cn);
  kiln_strbuf_printf(&s, "      kk_skv[jj * %lld + dd] = gj < %s ? %skk_k[kk_ok + %s]%s : 0.0;\n    }\n    barrier();\n",
                     (long long)pl.ks, cn, ld, kidx, le);
  /* scores */
  kiln_strbuf_printf(&s, "    for (int e = tid; e < %d; e += %d) {\n", bm * bn, nt);
  kiln_strbuf_printf(&s, "      int r = e / %d, c = e %% %d, gj = j0 + c;\n      float acc = 0.0;\n", bn, bn);
  kiln_strbuf_printf(&s, "      for (int dd = 0; dd < %lld; dd++) acc = fma(kk_sq[r * %lld + dd], kk_skv[c * %lld + dd], acc);\n",
                     (long long)D, (long long)pl.qs, (long long)pl.ks);
  if (d->has_mask)
    kiln_strbuf_printf(&s, "      int gi = i0 + r;\n      if (gi < %s && gj < %s) acc += %skk_mask[kk_om + gi * %s + gj * %s]%s;\n",
                       cm, cn, ld, kk_const(&c, "KK_MASK_SM", d->mask_stride_m),
                       kk_const(&c, "KK_MASK_SN", d->mask_stride_n), le);
  if (N % bn) kiln_strbuf_printf(&s, "      if (gj >= %s) acc = uintBitsToFloat(0xff800000u);\n", cn);
  kiln_strbuf_puts(&s, "      kk_ss[e] = acc;\n    }\n    barrier();\n");
  /* online softmax update, one invocation per row */
  kiln_strbuf_printf(&s, "    if (tid < %d) {\n      int b = tid * %d;\n      float mo = kk_sm[tid], mx = mo;\n", bm, bn);
  kiln_strbuf_printf(&s, "      for (int c = 0; c < %d; c++) mx = max(mx, kk_ss[b + c]);\n", bn);
  kiln_strbuf_puts(&s, "      float alpha = 1.0, sum = 0.0;\n");
  kiln_strbuf_puts(&s, "      if (isinf(mx) && mx < 0.0) {\n");
  kiln_strbuf_printf(&s, "        for (int c = 0; c < %d; c++) kk_ss[b + c] = 0.0;\n", bn);
  kiln_strbuf_puts(&s, "      } else {\n        alpha = exp(mo - mx);\n");
  kiln_strbuf_printf(&s, "        for (int c = 0; c < %d; c++) { float pv = exp(kk_ss[b + c] - mx); kk_ss[b + c] = pv; sum += pv; }\n",
                     bn);
  kiln_strbuf_puts(&s, "      }\n      kk_sl[tid] = kk_sl[tid] * alpha + sum;\n      kk_sm[tid] = mx;\n      kk_sa[tid] = alpha;\n    }\n");
  /* V block -> kk_skv[key * dv + c] (K is no longer read) */
  kiln_strbuf_printf(&s, "    for (int e = tid; e < %lld; e += %d) {\n", (long long)(bn * DV), nt);
  kiln_strbuf_printf(&s, "      int jj = e / %lld, c = e %% %lld, gj = j0 + jj;\n", (long long)DV, (long long)DV);
  kiln_strbuf_printf(&s, "      kk_skv[e] = gj < %s ? %skk_v[kk_ov + gj * %lld + c]%s : 0.0;\n    }\n    barrier();\n",
                     cn, ld, (long long)DV, le);
  /* O = O * alpha + P V */
  for (int o = 0; o < pl.oe; o++) {
    bool partial = (int64_t)(o + 1) * nt > bm * DV;
    kiln_strbuf_printf(&s, "    { int e = tid + %d;\n", o * nt);
    if (partial) kiln_strbuf_printf(&s, "      if (e < %lld) {\n", (long long)(bm * DV));
    kiln_strbuf_printf(&s, "      int r = e / %lld, c = e %% %lld;\n      float acc = o%d * kk_sa[r];\n", (long long)DV,
                       (long long)DV, o);
    kiln_strbuf_printf(&s, "      for (int jj = 0; jj < %d; jj++) acc = fma(kk_ss[r * %d + jj], kk_skv[jj * %lld + c], acc);\n",
                       bn, bn, (long long)DV);
    kiln_strbuf_printf(&s, "      o%d = acc;\n", o);
    if (partial) kiln_strbuf_puts(&s, "      }\n");
    kiln_strbuf_puts(&s, "    }\n");
  }
  kiln_strbuf_puts(&s, "  }\n  barrier();\n");
  for (int o = 0; o < pl.oe; o++) {
    kiln_strbuf_printf(&s, "  { int e = tid + %d, r = e / %lld, c = e %% %lld, gi = i0 + r;\n", o * nt, (long long)DV,
                       (long long)DV);
    /* no keys: the reference's empty sum, 0 */
    kiln_strbuf_printf(&s, "    if (e < %lld && gi < %s) kk_store((z * %s + gi) * %lld + c, o%d%s); }\n",
                       (long long)(bm * DV), cm, cm, (long long)DV, o, N ? " / kk_sl[r]" : "");
  }
  kiln_strbuf_puts(&s, "}\n");

  double batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= (double)d->batch[i];
  uint32_t groups[3] = {(uint32_t)((M + bm - 1) / bm), 1, (uint32_t)batch};
  if (M == 0 || DV == 0) groups[0] = 0;
  char name[64];
  snprintf(name, sizeof name, "attn_b%.0f_%lldx%lldx%lld_%d_%d", batch, (long long)M, (long long)N, (long long)D, bm, bn);
  return kk_finish(&s, &c, out, name, own, epi, groups, 2.0 * batch * (double)M * (double)N * (double)(D + DV));
}

#endif
