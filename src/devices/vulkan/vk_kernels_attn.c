/* kiln.FusedAttention as GLSL: one workgroup per (batch, block of query
 * rows). The scaled Q block stays in shared memory; for each block of keys
 * the K block is staged, every invocation computes a register block of
 * scores, the row maxima are reduced across the workgroup through shared
 * memory, an online (flash) softmax update rescales the running row max,
 * the partial sums and the output accumulators (all registers), and the V
 * block is multiplied in, again as register blocks. Any n fits; the block
 * sizes are chosen by device type and to fit its shared memory. */
#if KILN_HAVE_VULKAN

#include <stdio.h>
#include <string.h>

#include "devices/vulkan/vk_kernels_internal.h"

/* The work of a workgroup: bm = tr * rm query rows against blocks of
 * bn = tc * rn keys, tr x tc invocations. Invocation (ty, tx) owns query
 * rows ty + i * tr (i < rm); of each key block it computes the scores of
 * keys tx + j * tc (j < rn) in registers (each row element and key element
 * read from shared memory once per block of rm x rn), and it accumulates
 * the output columns of groups tx + j * tc (j < ro) of those rows, a group
 * being w consecutive columns (w 4: vec4 shared rows, when d and dv are
 * multiples of 4). The row maximum of a block is reduced over the tc
 * invocations of a row through shared memory; every one of them then
 * computes the same new maximum and rescale factor, so the running max and
 * the softmax denominators (each invocation's partial sum over its own
 * keys, added up once at the end) stay in registers. */
typedef struct attn_plan {
  int tr, tc, rm, rn, ro, w;
  int bm, bn;
  int qs, ks, vs; /* shared row strides in units of w: Q, K, V */
  int64_t kv;     /* shared K/V array length in units of w */
} attn_plan;

static int pow2_ceil(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

static double attn_shared_bytes(const vk_attention_desc *d, attn_plan *pl) {
  int pad = 1; /* keys read by neighbouring invocations start in different banks */
  pl->bm = pl->tr * pl->rm;
  pl->bn = pl->tc * pl->rn;
  int64_t groups = d->dv / pl->w;
  pl->ro = (int)((groups + pl->tc - 1) / pl->tc);
  pl->qs = (int)(d->d / pl->w) + pad;
  pl->ks = (int)(d->d / pl->w) + pad;
  pl->vs = (int)groups;
  int64_t kv_row = pl->ks > pl->vs ? pl->ks : pl->vs;
  pl->kv = (int64_t)pl->bn * kv_row;
  return 4.0 * ((double)pl->bm * pl->qs * pl->w + (double)pl->kv * pl->w + (double)pl->bm * pl->bn +
                (double)pl->bm * pl->tc);
}

static bool attn_plan_make(const vk_attention_desc *d, const vk_device_props *p, attn_plan *pl, char *why,
                           size_t why_len) {
  memset(pl, 0, sizeof *pl);
  int lim = (int)kk_threads(p, 1024);
  double shared = p && p->max_shared_bytes ? p->max_shared_bytes : 16384;
  bool cpu = p && p->type == 4; /* VK_PHYSICAL_DEVICE_TYPE_CPU */
  pl->w = d->d % 4 == 0 && d->dv % 4 == 0 ? 4 : 1;
  double batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= (double)d->batch[i];
  int tr, tc, rm, rn;
  if (cpu) {
    /* lavapipe runs a workgroup on one core, its invocations as 8-wide SIMD
     * lanes; a shared-memory load is one broadcast where all lanes read one
     * address (a row: tc >= 8 gives the lanes one ty) and a per-lane loop
     * otherwise (keys, V columns), so few invocations with tall blocks.
     * BERT (128x128, d 64) measured 32x32 blocks of 8x4 about as fast as
     * 16x64 of 8x8 or 4x16, 1.5-2x faster than 8-row ones. */
    tr = 4, tc = 8, rm = 8, rn = 4;
  } else {
    /* GPUs: 16 x 4 keys per block and 4 rows per invocation; the query
     * block 64 rows while that leaves at least 256 workgroups to fill a
     * large device, down to 16 (BERT at batch 1: 12 heads x 8 blocks) */
    tc = 16, rn = 4, rm = 4, tr = 16;
    while (tr > 4 && (double)((d->m + tr * rm - 1) / (tr * rm)) * batch < 256.0) tr /= 2;
  }
  /* small problems: no larger blocks than needed */
  if (rm > pow2_ceil(d->m, rm)) rm = pow2_ceil(d->m, rm);
  if (tr > pow2_ceil((d->m + rm - 1) / rm, tr)) tr = pow2_ceil((d->m + rm - 1) / rm, tr);
  if (rn > pow2_ceil((d->n + tc - 1) / tc, rn)) rn = pow2_ceil((d->n + tc - 1) / tc, rn);
  pl->tr = tr, pl->tc = tc, pl->rm = rm, pl->rn = rn;
  for (int step = 0; step < 64; step++) {
    double bytes = attn_shared_bytes(d, pl);
    int nt = pl->tr * pl->tc;
    if (nt > lim) {
      if (pl->tr > 1)
        pl->tr /= 2;
      else
        pl->tc /= 2;
    } else if ((int64_t)pl->rm * pl->ro * pl->w > 64) { /* output registers */
      if (pl->rm > 1)
        pl->rm /= 2;
      else if (nt * 2 <= lim) {
        pl->tc *= 2;
        if (pl->rn > 1) pl->rn /= 2;
      } else
        break;
    } else if (bytes > shared) {
      if (pl->rn > 1)
        pl->rn /= 2;
      else if (pl->rm > 1)
        pl->rm /= 2;
      else if (pl->tr > 1)
        pl->tr /= 2;
      else if (pl->tc > 1)
        pl->tc /= 2;
      else
        break;
    } else
      return true;
  }
  if (why)
    snprintf(why, why_len, "head sizes d=%lld dv=%lld do not fit %.0f bytes of shared memory and %d invocations",
             (long long)d->d, (long long)d->dv, shared, lim);
  return false;
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
  const int tr = pl.tr, tc = pl.tc, rm = pl.rm, rn = pl.rn, ro = pl.ro, w = pl.w, bm = pl.bm, bn = pl.bn;
  const int nt = tr * tc;
  const long long DW = (long long)(D / w), G = (long long)(DV / w); /* row lengths in units of w */
  const char *vt = w == 4 ? "vec4" : "float";
  char scale[48];
  kk_float(scale, sizeof scale, d->scale);
  /* Q/K/V rows read from memory as vec4s when rows, offsets and batch strides are aligned */
  bool q_vec = w == 4 && kk_vec4_ok(d->q_offset, d->n_batch, d->batch, d->q_batch_stride, D);
  bool k_vec = w == 4 && d->transpose_k && kk_vec4_ok(d->k_offset, d->n_batch, d->batch, d->k_batch_stride, D);
  bool v_vec = w == 4 && kk_vec4_ok(d->v_offset, d->n_batch, d->batch, d->v_batch_stride, DV);
  bool m_edge = M % bm != 0, n_edge = N % bn != 0; /* which guards exist: structure */

  kiln_strbuf s = {0};
  const char *ft = kk_ftype(d->fp16), *ld = kk_ld(d->fp16), *le = kk_le(d->fp16);
  const char *v4 = d->fp16 ? "vec4(" : "", *v4e = d->fp16 ? ")" : "";
  kk_preamble(&s, (uint32_t)nt, 1, 1, d->fp16);
  kk_buffer(&s, 0, ft, "kk_q", true);
  kk_buffer(&s, 1, ft, "kk_k", true);
  kk_buffer(&s, 2, ft, "kk_v", true);
  if (d->has_mask) kk_buffer(&s, 3, ft, "kk_mask", true);
  kk_buffer(&s, own - 1, ft, "kk_y", false);
  if (q_vec) kk_buffer_vec4(&s, 0, "kk_q4", d->fp16);
  if (k_vec) kk_buffer_vec4(&s, 1, "kk_k4", d->fp16);
  if (v_vec) kk_buffer_vec4(&s, 2, "kk_v4", d->fp16);
  /* d and dv size the shared arrays and the registers: structure, literal.
   * m, n, strides and offsets are specialization constants. */
  kk_consts c = {0};
  kk_store_fn(&s, &c, epi, "kk_y", d->y_offset, d->fp16);
  const char *cm = kk_const(&c, "KK_M", M), *cn = kk_const(&c, "KK_N", N);
  const char *csm = d->has_mask ? kk_const(&c, "KK_MASK_SM", d->mask_stride_m) : NULL;
  const char *csn = d->has_mask ? kk_const(&c, "KK_MASK_SN", d->mask_stride_n) : NULL;
  kiln_strbuf_printf(&s, "shared %s kk_sq[%lld];\nshared %s kk_skv[%lld];\nshared float kk_ss[%d];\nshared float kk_sr[%d];\n",
                     vt, (long long)bm * pl.qs, vt, (long long)(pl.kv > 0 ? pl.kv : 1), bm * bn, bm * tc);
  kiln_strbuf_puts(&s, "int kk_oq, kk_ok, kk_ov, kk_om;\n");
  kiln_strbuf_puts(&s, "void main() {\n  int z = int(gl_WorkGroupID.z);\n");
  {
    const char *names[4] = {"kk_oq", "kk_ok", "kk_ov", "kk_om"};
    const int64_t *strides[4] = {d->q_batch_stride, d->k_batch_stride, d->v_batch_stride,
                                 d->has_mask ? d->mask_batch_stride : NULL};
    const int64_t offs[4] = {d->q_offset, d->k_offset, d->v_offset, d->mask_offset};
    kk_batch_offsets(&s, &c, "z", d->n_batch, d->batch, d->has_mask ? 4 : 3, names, strides, offs);
  }
  kiln_strbuf_printf(&s, "  int tid = int(gl_LocalInvocationIndex), ty = tid / %d, tx = tid %% %d;\n", tc, tc);
  kiln_strbuf_printf(&s, "  int i0 = int(gl_WorkGroupID.x) * %d;\n", bm);
  for (int i = 0; i < rm; i++)
    kiln_strbuf_printf(&s, "  int r%d = ty + %d, gi%d = i0 + r%d;\n  float m%d = uintBitsToFloat(0xff800000u), l%d = 0.0;\n", i,
                       i * tr, i, i, i, i);
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < ro; j++) kiln_strbuf_printf(&s, "  %s o%d_%d = %s(0.0);\n", vt, i, j, vt);
  /* Q block, pre-scaled: scale * (q . k) becomes (scale * q) . k */
  const char *sub = w == 4 ? "[dd & 3]" : "", *cdiv = w == 4 ? "(dd >> 2)" : "dd";
  const char *zero = w == 4 ? "vec4(0.0)" : "0.0";
  if (q_vec) {
    kiln_strbuf_printf(&s, "  for (int e = tid; e < %lld; e += %d) {\n    int r = e / %lld, c = e %% %lld, gi = i0 + r;\n",
                       (long long)bm * DW, nt, DW, DW);
    kiln_strbuf_printf(&s, "    kk_sq[r * %d + c] = ", pl.qs);
    if (m_edge) kiln_strbuf_printf(&s, "gi >= %s ? %s : ", cm, zero);
    kiln_strbuf_printf(&s, "%skk_q4[((kk_oq + gi * %lld) >> 2) + c]%s * %s;\n  }\n", v4, (long long)D, v4e, scale);
  } else {
    kiln_strbuf_printf(&s, "  for (int e = tid; e < %lld; e += %d) {\n    int r = e / %lld, dd = e %% %lld, gi = i0 + r;\n",
                       (long long)(bm * D), nt, (long long)D, (long long)D);
    kiln_strbuf_printf(&s, "    kk_sq[r * %d + %s]%s = ", pl.qs, cdiv, sub);
    if (m_edge) kiln_strbuf_printf(&s, "gi >= %s ? 0.0 : ", cm);
    kiln_strbuf_printf(&s, "%skk_q[kk_oq + gi * %lld + dd]%s * %s;\n  }\n", ld, (long long)D, le, scale);
  }
  for (int j = 0; j < rn; j++) kiln_strbuf_printf(&s, "  int c%d = tx + %d;\n", j, j * tc);
  for (int j = 0; j < ro; j++) {
    bool clamp = (long long)(j + 1) * tc > G; /* a group past dv: computed (from a valid address), never stored */
    if (clamp)
      kiln_strbuf_printf(&s, "  int g%d = tx + %d, gv%d = min(g%d, %lld);\n", j, j * tc, j, j, G - 1);
    else
      kiln_strbuf_printf(&s, "  int g%d = tx + %d, gv%d = g%d;\n", j, j * tc, j, j);
  }
  kiln_strbuf_printf(&s, "  for (int j0 = 0; j0 < %s; j0 += %d) {\n    barrier();\n", cn, bn);
  /* K block -> kk_skv[key * ks + d] */
  if (k_vec) {
    kiln_strbuf_printf(&s, "    for (int e = tid; e < %lld; e += %d) {\n      int jj = e / %lld, c = e %% %lld, gj = j0 + jj;\n",
                       (long long)bn * DW, nt, DW, DW);
    kiln_strbuf_printf(&s, "      kk_skv[jj * %d + c] = ", pl.ks);
    if (n_edge) kiln_strbuf_printf(&s, "gj >= %s ? %s : ", cn, zero);
    kiln_strbuf_printf(&s, "%skk_k4[((kk_ok + gj * %lld) >> 2) + c]%s;\n    }\n", v4, (long long)D, v4e);
  } else {
    kiln_strbuf_printf(&s, "    for (int e = tid; e < %lld; e += %d) {\n", (long long)(bn * D), nt);
    if (d->transpose_k) /* K [n, d]: d contiguous */
      kiln_strbuf_printf(&s, "      int jj = e / %lld, dd = e %% %lld, gj = j0 + jj;\n", (long long)D, (long long)D);
    else /* K [d, n]: keys contiguous */
      kiln_strbuf_printf(&s, "      int dd = e / %d, jj = e %% %d, gj = j0 + jj;\n", bn, bn);
    kiln_strbuf_printf(&s, "      kk_skv[jj * %d + %s]%s = ", pl.ks, cdiv, sub);
    if (n_edge) kiln_strbuf_printf(&s, "gj >= %s ? 0.0 : ", cn);
    if (d->transpose_k)
      kiln_strbuf_printf(&s, "%skk_k[kk_ok + gj * %lld + dd]%s;\n    }\n", ld, (long long)D, le);
    else
      kiln_strbuf_printf(&s, "%skk_k[kk_ok + dd * %s + gj]%s;\n    }\n", ld, cn, le);
  }
  kiln_strbuf_puts(&s, "    barrier();\n");
  /* scores: an rm x rn block per invocation */
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++) kiln_strbuf_printf(&s, "    float s%d_%d = 0.0;\n", i, j);
  kiln_strbuf_printf(&s, "    for (int dd = 0; dd < %lld; dd++) {\n", DW);
  for (int i = 0; i < rm; i++) kiln_strbuf_printf(&s, "      %s q%d = kk_sq[r%d * %d + dd];\n", vt, i, i, pl.qs);
  for (int j = 0; j < rn; j++) kiln_strbuf_printf(&s, "      %s k%d = kk_skv[c%d * %d + dd];\n", vt, j, j, pl.ks);
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++)
      if (w == 4)
        kiln_strbuf_printf(&s, "      s%d_%d += dot(q%d, k%d);\n", i, j, i, j);
      else
        kiln_strbuf_printf(&s, "      s%d_%d = fma(q%d, k%d, s%d_%d);\n", i, j, i, j, i, j);
  kiln_strbuf_puts(&s, "    }\n");
  for (int j = 0; j < rn; j++) kiln_strbuf_printf(&s, "    int gj%d = j0 + c%d;\n", j, j);
  if (d->has_mask)
    for (int i = 0; i < rm; i++)
      for (int j = 0; j < rn; j++) {
        kiln_strbuf_puts(&s, "    ");
        if (m_edge && n_edge)
          kiln_strbuf_printf(&s, "if (gi%d < %s && gj%d < %s) ", i, cm, j, cn);
        else if (m_edge)
          kiln_strbuf_printf(&s, "if (gi%d < %s) ", i, cm);
        else if (n_edge)
          kiln_strbuf_printf(&s, "if (gj%d < %s) ", j, cn);
        kiln_strbuf_printf(&s, "s%d_%d += %skk_mask[kk_om + gi%d * %s + gj%d * %s]%s;\n", i, j, ld, i, csm, j, csn, le);
      }
  if (n_edge)
    for (int j = 0; j < rn; j++) {
      kiln_strbuf_printf(&s, "    if (gj%d >= %s) {", j, cn);
      for (int i = 0; i < rm; i++) kiln_strbuf_printf(&s, " s%d_%d = uintBitsToFloat(0xff800000u);", i, j);
      kiln_strbuf_puts(&s, " }\n");
    }
  /* each invocation's maximum over its keys, per row */
  for (int i = 0; i < rm; i++) {
    kiln_strbuf_printf(&s, "    kk_sr[r%d * %d + tx] = ", i, tc);
    for (int j = 0; j < rn - 1; j++) kiln_strbuf_printf(&s, "max(s%d_%d, ", i, j);
    kiln_strbuf_printf(&s, "s%d_%d", i, rn - 1);
    for (int j = 0; j < rn - 1; j++) kiln_strbuf_puts(&s, ")");
    kiln_strbuf_puts(&s, ";\n");
  }
  kiln_strbuf_puts(&s, "    barrier();\n");
  /* V block -> kk_skv[key * vs + group] (K is no longer read) */
  if (v_vec) {
    kiln_strbuf_printf(&s, "    for (int e = tid; e < %lld; e += %d) {\n      int jj = e / %lld, c = e %% %lld, gj = j0 + jj;\n",
                       (long long)bn * G, nt, G, G);
    kiln_strbuf_printf(&s, "      kk_skv[jj * %d + c] = ", pl.vs);
    if (n_edge) kiln_strbuf_printf(&s, "gj >= %s ? %s : ", cn, zero);
    kiln_strbuf_printf(&s, "%skk_v4[((kk_ov + gj * %lld) >> 2) + c]%s;\n    }\n", v4, (long long)DV, v4e);
  } else {
    kiln_strbuf_printf(&s, "    for (int e = tid; e < %lld; e += %d) {\n      int jj = e / %lld, dd = e %% %lld, gj = j0 + jj;\n",
                       (long long)(bn * DV), nt, (long long)DV, (long long)DV);
    kiln_strbuf_printf(&s, "      kk_skv[jj * %d + %s]%s = ", pl.vs, cdiv, sub);
    if (n_edge) kiln_strbuf_printf(&s, "gj >= %s ? 0.0 : ", cn);
    kiln_strbuf_printf(&s, "%skk_v[kk_ov + gj * %lld + dd]%s;\n    }\n", ld, (long long)DV, le);
  }
  /* online softmax update: the block's row maximum over the tc partial
   * maxima (the same in every invocation of the row); all -inf so far:
   * weights 0, and the row ends as 0 / 0 = NaN like the reference */
  for (int i = 0; i < rm; i++) {
    kiln_strbuf_printf(&s, "    {\n      float mx = m%d;\n      for (int t = 0; t < %d; t++) mx = max(mx, kk_sr[r%d * %d + t]);\n",
                       i, tc, i, tc);
    kiln_strbuf_puts(&s, "      bool dead = isinf(mx) && mx < 0.0;\n");
    kiln_strbuf_printf(&s, "      float a = dead ? 1.0 : exp(m%d - mx), sb = dead ? 0.0 : mx, ps = 0.0;\n      m%d = mx;\n", i, i);
    for (int j = 0; j < rn; j++)
      kiln_strbuf_printf(&s, "      { float p = exp(s%d_%d - sb); ps += p; kk_ss[r%d * %d + c%d] = p; }\n", i, j, i, bn, j);
    kiln_strbuf_printf(&s, "      l%d = l%d * a + ps;\n", i, i);
    for (int j = 0; j < ro; j++) kiln_strbuf_printf(&s, "      o%d_%d *= a;\n", i, j);
    kiln_strbuf_puts(&s, "    }\n");
  }
  kiln_strbuf_puts(&s, "    barrier();\n");
  /* O += P V: an rm x ro block of groups per invocation */
  kiln_strbuf_printf(&s, "    for (int jj = 0; jj < %d; jj++) {\n", bn);
  for (int i = 0; i < rm; i++) kiln_strbuf_printf(&s, "      float p%d = kk_ss[r%d * %d + jj];\n", i, i, bn);
  for (int j = 0; j < ro; j++) kiln_strbuf_printf(&s, "      %s v%d = kk_skv[jj * %d + gv%d];\n", vt, j, pl.vs, j);
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < ro; j++)
      kiln_strbuf_printf(&s, "      o%d_%d = fma(%s(p%d), v%d, o%d_%d);\n", i, j, vt, i, j, i, j);
  kiln_strbuf_puts(&s, "    }\n  }\n");
  /* the denominators: the sum of the row's tc partial sums (kk_sr was last
   * read before the loop's last barrier) */
  for (int i = 0; i < rm; i++) kiln_strbuf_printf(&s, "  kk_sr[r%d * %d + tx] = l%d;\n", i, tc, i);
  kiln_strbuf_puts(&s, "  barrier();\n");
  for (int i = 0; i < rm; i++) {
    kiln_strbuf_printf(&s, "  float L%d = 0.0;\n  for (int t = 0; t < %d; t++) L%d += kk_sr[r%d * %d + t];\n", i, tc, i, i, tc);
    for (int j = 0; j < ro; j++) {
      bool g_edge = (long long)(j + 1) * tc > G;
      if (m_edge || g_edge) {
        kiln_strbuf_puts(&s, "  if (");
        if (m_edge) kiln_strbuf_printf(&s, "gi%d < %s%s", i, cm, g_edge ? " && " : "");
        if (g_edge) kiln_strbuf_printf(&s, "g%d < %lld", j, G);
        kiln_strbuf_puts(&s, ")");
      }
      kiln_strbuf_puts(&s, " {\n");
      for (int k = 0; k < w; k++) {
        char comp[4] = "";
        if (w == 4) snprintf(comp, sizeof comp, ".%c", "xyzw"[k]);
        /* no keys: the reference's empty sum, 0 */
        char div[16] = "";
        if (N) snprintf(div, sizeof div, " / L%d", i);
        kiln_strbuf_printf(&s, "    kk_store((z * %s + gi%d) * %lld + g%d * %d + %d, o%d_%d%s%s);\n", cm, i, (long long)DV, j, w,
                           k, i, j, comp, div);
      }
      kiln_strbuf_puts(&s, "  }\n");
    }
  }
  kiln_strbuf_puts(&s, "}\n");
  double batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= (double)d->batch[i];
  uint32_t groups[3] = {(uint32_t)((M + bm - 1) / bm), 1, (uint32_t)batch};
  if (M == 0 || DV == 0) groups[0] = 0;
  char name[64];
  snprintf(name, sizeof name, "attn_b%.0f_%lldx%lldx%lld_%dx%d_%dx%d", batch, (long long)M, (long long)N, (long long)D,
           bm, bn, rm, rn);
  return kk_finish(&s, &c, out, name, own, epi, groups, 2.0 * batch * (double)M * (double)N * (double)(D + DV));
}

#endif
