/* Conv as GLSL: implicit GEMM (the im2col matrix is never stored: the B
 * tile is gathered from X while it is loaded into shared memory) for every
 * group/stride/pad/dilation and 1-3 spatial axes, and a direct depthwise
 * kernel (group == in == out channels, 1-D/2-D) that stages an input patch
 * and the filter in shared memory. See vk_kernels.h. */
#if KILN_HAVE_VULKAN

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "devices/vulkan/vk_kernels_internal.h"

typedef struct conv_geom {
  int nsp;
  int64_t cig, cog, ksp, osp, isp; /* channels per group, prod(kernel), prod(out), prod(in) */
  int64_t gm, gn, gk;              /* the per-group GEMM */
} conv_geom;

static void set_why(char *why, size_t len, const char *fmt, ...) KILN_PRINTF(3, 4);
static void set_why(char *why, size_t len, const char *fmt, ...) {
  if (!why || !len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
}

static bool conv_geometry(const vk_conv_desc *d, const vk_device_props *p, conv_geom *g, char *why, size_t why_len) {
  memset(g, 0, sizeof *g);
  if (d->n_spatial < 1 || d->n_spatial > 3) {
    set_why(why, why_len, "%d spatial axes (1 to 3 supported)", d->n_spatial);
    return false;
  }
  if (d->batch < 0 || d->in_channels < 1 || d->out_channels < 1 || d->group < 1 ||
      d->in_channels % d->group || d->out_channels % d->group) {
    set_why(why, why_len, "channels %lld -> %lld do not split into the groups", (long long)d->in_channels,
            (long long)d->out_channels);
    return false;
  }
  g->nsp = d->n_spatial;
  g->cig = d->in_channels / d->group;
  g->cog = d->out_channels / d->group;
  double ksp = 1, osp = 1, isp = 1;
  for (int i = 0; i < g->nsp; i++) {
    if (d->in[i] < 1 || d->out[i] < 0 || d->kernel[i] < 1 || d->stride[i] < 1 || d->dilation[i] < 1 ||
        d->pad_begin[i] < 0) {
      set_why(why, why_len, "bad geometry on spatial axis %d (sizes, kernel, stride, dilation >= 1, pads >= 0)", i);
      return false;
    }
    ksp *= (double)d->kernel[i];
    osp *= (double)d->out[i];
    isp *= (double)d->in[i];
  }
  double y = (double)d->y_offset + (double)d->batch * (double)d->out_channels * osp;
  double x = (double)d->x_offset + (double)d->batch * (double)d->in_channels * isp;
  double w = (double)d->w_offset + (double)d->out_channels * (double)g->cig * ksp;
  double lim = (double)KK_INDEX_LIMIT;
  if (y > lim || x > lim || w > lim || (double)d->bias_offset + (double)d->out_channels > lim ||
      (double)d->batch * osp > lim) {
    set_why(why, why_len, "tensors past 2^31 elements (batch %lld, %lld output channels)", (long long)d->batch,
            (long long)d->out_channels);
    return false;
  }
  g->ksp = (int64_t)ksp;
  g->osp = (int64_t)osp;
  g->isp = (int64_t)isp;
  g->gm = g->cog;
  g->gn = d->batch * g->osp;
  g->gk = g->cig * g->ksp;
  if ((uint64_t)d->group > kk_max_groups(p, 2)) {
    set_why(why, why_len, "%lld groups exceed the device's workgroup count limit %lld", (long long)d->group,
            (long long)kk_max_groups(p, 2));
    return false;
  }
  kk_tile t = kk_pick_tile(g->gm, g->gn, d->group, p);
  if ((uint64_t)((g->gn + t.tn - 1) / t.tn) > kk_max_groups(p, 0) ||
      (uint64_t)((g->gm + t.tm - 1) / t.tm) > kk_max_groups(p, 1)) {
    set_why(why, why_len, "output of %lld x %lld per group needs too many workgroups", (long long)g->gm,
            (long long)g->gn);
    return false;
  }
  return true;
}

bool vk_conv_supported(const vk_conv_desc *d, const vk_device_props *props, char *why, size_t why_len) {
  conv_geom g;
  return conv_geometry(d, props, &g, why, why_len);
}

/* ---- implicit GEMM ------------------------------------------------------------------- */

/* Appends `int NAMEi = ...` decomposing `src` (an int expression) over dims[0..n) row-major;
 * the dims are the constants STEMi. */
static void decompose(kiln_strbuf *s, kk_consts *c, const char *src, const char *name, const char *stem, int n,
                      const int64_t *dims) {
  kiln_strbuf_printf(s, "  int %s_r = %s;\n", name, src);
  for (int i = n - 1; i >= 0; i--) {
    if (i == 0) {
      kiln_strbuf_printf(s, "  int %s%d = %s_r;\n", name, i, name);
    } else {
      const char *dim = kk_constn(c, stem, i, dims[i]);
      kiln_strbuf_printf(s, "  int %s%d = %s_r %% %s; %s_r /= %s;\n", name, i, name, dim, name, dim);
    }
  }
}

/* Kernel window, strides, dilations and pads are constants like the sizes:
 * the B loader only does index arithmetic with them (no loop over the
 * window), so one source serves every conv with the same tile and guards. */
static void emit_implicit_gemm(kiln_strbuf *s, kk_consts *c, const vk_conv_desc *d, const conv_geom *g,
                               const kk_tile *t) {
  int nsp = g->nsp;
  const char *ld = kk_ld(d->fp16), *le = kk_le(d->fp16);
  /* the per-group GEMM: M = Cout/group, N = batch * prod(out), K = Cin/group * prod(kernel) */
  const char *cm = kk_const(c, "KK_M", g->gm), *ck = kk_const(c, "KK_K", g->gk);
  const char *ksp = kk_const(c, "KK_KSP", g->ksp), *osp = kk_const(c, "KK_OSP", g->osp);
  kiln_strbuf_puts(s, "int kk_g;\nvoid kk_setup(int z) { kk_g = z; }\n");
  kiln_strbuf_printf(s, "float kk_load_a(int row, int k) { return %skk_w[%s + (kk_g * %s + row) * %s + k]%s; }\n", ld,
                     kk_const(c, "KK_W_OFF", d->w_offset), cm, ck, le);
  kiln_strbuf_puts(s, "float kk_load_b(int k, int col) {\n");
  kiln_strbuf_printf(s, "  int ci = k / %s, kr = k %% %s;\n", ksp, ksp);
  decompose(s, c, "kr", "t", "KK_KER", nsp, d->kernel);
  kiln_strbuf_printf(s, "  int n = col / %s, p = col %% %s;\n", osp, osp);
  decompose(s, c, "p", "o", "KK_OUT", nsp, d->out);
  char cond[512] = "";
  size_t cl = 0;
  for (int i = 0; i < nsp; i++) {
    kiln_strbuf_printf(s, "  int i%d = o%d * %s + t%d * %s - %s;\n", i, i, kk_constn(c, "KK_STRIDE", i, d->stride[i]), i,
                       kk_constn(c, "KK_DIL", i, d->dilation[i]), kk_constn(c, "KK_PAD", i, d->pad_begin[i]));
    /* Skip the test where the window never leaves the input on that axis
     * (a structural choice: the source has the test or not). */
    int64_t hi = (d->out[i] - 1) * d->stride[i] + (d->kernel[i] - 1) * d->dilation[i] - d->pad_begin[i];
    if (d->pad_begin[i] == 0 && hi < d->in[i]) continue;
    cl += (size_t)snprintf(cond + cl, sizeof cond - cl, "%suint(i%d) >= uint(%s)", cl ? " || " : "", i,
                           kk_constn(c, "KK_IN", i, d->in[i]));
  }
  if (cl) kiln_strbuf_printf(s, "  if (%s) return 0.0;\n", cond);
  kiln_strbuf_puts(s, "  int idx = ");
  for (int i = 0; i < nsp; i++) kiln_strbuf_puts(s, "(");
  kiln_strbuf_printf(s, "(n * %s + kk_g * %s + ci)", kk_const(c, "KK_CIN", d->in_channels), kk_const(c, "KK_CIG", g->cig));
  for (int i = 0; i < nsp; i++) kiln_strbuf_printf(s, " * %s + i%d)", kk_constn(c, "KK_IN", i, d->in[i]), i);
  kiln_strbuf_printf(s, ";\n  return %skk_x[%s + idx]%s;\n}\n", ld, kk_const(c, "KK_X_OFF", d->x_offset), le);
  kiln_strbuf_puts(s, "void kk_emit(int row, int col, float acc) {\n");
  kiln_strbuf_printf(s, "  int n = col / %s, p = col %% %s, co = kk_g * %s + row;\n", osp, osp, cm);
  if (d->has_bias)
    kiln_strbuf_printf(s, "  acc += %skk_bias[%s + co]%s;\n", ld, kk_const(c, "KK_BIAS_OFF", d->bias_offset), le);
  kiln_strbuf_printf(s, "  kk_store((n * %s + co) * %s + p, acc);\n}\n", kk_const(c, "KK_COUT", d->out_channels), osp);
  /* vec4 loads of W when its rows (K = Cin/g * prod(kernel)) and offset
   * are multiples of 4; of X when the conv is pointwise (1x1, stride 1, no
   * pads: B[ci, col] is X's plane ci, contiguous) and planes and offset are
   * multiples of 4 (so 4 columns never straddle two images). */
  bool a_vec = d->w_offset % 4 == 0 && g->gk % 4 == 0;
  bool pointwise = true;
  for (int i = 0; i < nsp; i++)
    if (d->kernel[i] != 1 || d->stride[i] != 1 || d->pad_begin[i] != 0 || d->out[i] != d->in[i]) pointwise = false;
  bool b_vec = pointwise && g->osp % 4 == 0 && d->x_offset % 4 == 0;
  if (a_vec) {
    kk_buffer_vec4(s, 1, "kk_w4", d->fp16);
    kiln_strbuf_printf(s, "vec4 kk_load_a4(int row, int k) { return %skk_w4[(%s + (kk_g * %s + row) * %s + k) >> 2]%s; }\n",
                       d->fp16 ? "vec4(" : "", kk_const(c, "KK_W_OFF", d->w_offset), cm, ck, d->fp16 ? ")" : "");
  }
  if (b_vec) {
    kk_buffer_vec4(s, 0, "kk_x4", d->fp16);
    kiln_strbuf_printf(s, "vec4 kk_load_b4(int k, int col) {\n  int n = col / %s, p = col %% %s;\n", osp, osp);
    kiln_strbuf_printf(s, "  return %skk_x4[(%s + (n * %s + kk_g * %s + k) * %s + p) >> 2]%s;\n}\n", d->fp16 ? "vec4(" : "",
                       kk_const(c, "KK_X_OFF", d->x_offset), kk_const(c, "KK_CIN", d->in_channels),
                       kk_const(c, "KK_CIG", g->cig), osp, d->fp16 ? ")" : "");
  }
  kk_emit_tiled(s, c, t, g->gm, g->gn, g->gk, true, true, a_vec, b_vec, d->fp16 && d->fp16_arith);
}

/* ---- depthwise ------------------------------------------------------------------------ */

typedef struct dw_plan {
  int64_t H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW; /* as 2-D (1-D: H = OH = KH = 1) */
  int tw, th;                                           /* output tile = workgroup */
  int64_t patch_h, patch_w;
} dw_plan;

static int pow2_ceil(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

/* False when the patch does not fit in shared memory (the implicit GEMM takes it). */
static bool dw_plan_make(const vk_conv_desc *d, const vk_device_props *p, dw_plan *w) {
  memset(w, 0, sizeof *w);
  int o = d->n_spatial == 2 ? 0 : -1;
  int l = d->n_spatial - 1;
  w->H = o < 0 ? 1 : d->in[o];
  w->OH = o < 0 ? 1 : d->out[o];
  w->KH = o < 0 ? 1 : d->kernel[o];
  w->SH = o < 0 ? 1 : d->stride[o];
  w->DH = o < 0 ? 1 : d->dilation[o];
  w->PH = o < 0 ? 0 : d->pad_begin[o];
  w->W = d->in[l];
  w->OW = d->out[l];
  w->KW = d->kernel[l];
  w->SW = d->stride[l];
  w->DW = d->dilation[l];
  w->PW = d->pad_begin[l];
  int nt = (int)kk_threads(p, 256);
  w->tw = pow2_ceil(w->OW, w->OH == 1 ? nt : (nt < 32 ? nt : 32));
  w->th = pow2_ceil(w->OH, nt / w->tw);
  uint32_t shared = p && p->max_shared_bytes ? p->max_shared_bytes : 16384;
  for (;;) {
    w->patch_h = (w->th - 1) * w->SH + (w->KH - 1) * w->DH + 1;
    w->patch_w = (w->tw - 1) * w->SW + (w->KW - 1) * w->DW + 1;
    double bytes = 4.0 * ((double)w->patch_h * (double)w->patch_w + (double)(w->KH * w->KW));
    if (bytes <= shared) return true;
    if (w->th > 1)
      w->th /= 2;
    else if (w->tw > 1)
      w->tw /= 2;
    else
      return false;
  }
}

/* Structural (literal): the tile, the window KH x KW (unrolled), strides
 * and dilations (they size the patch in shared memory). Constants: the
 * plane sizes, pads, channel count, tile grid, offsets. */
static void emit_depthwise(kiln_strbuf *s, kk_consts *c, const vk_conv_desc *d, const dw_plan *w, uint32_t groups[3]) {
  int nt = w->tw * w->th;
  const char *ld = kk_ld(d->fp16), *le = kk_le(d->fp16);
  int64_t tiles_w = (w->OW + w->tw - 1) / w->tw, tiles_h = (w->OH + w->th - 1) / w->th;
  int64_t patch = w->patch_h * w->patch_w, kk = w->KH * w->KW;
  const char *ch = kk_const(c, "KK_H", w->H), *cw = kk_const(c, "KK_W", w->W);
  const char *coh = kk_const(c, "KK_OH", w->OH), *cow = kk_const(c, "KK_OW", w->OW);
  const char *tw = kk_const(c, "KK_TILES_W", tiles_w);
  kiln_strbuf_printf(s, "shared float kk_patch[%lld];\nshared float kk_f[%lld];\n", (long long)patch, (long long)kk);
  kiln_strbuf_puts(s, "void main() {\n  int plane = int(gl_WorkGroupID.y);\n");
  kiln_strbuf_printf(s, "  int c = plane %% %s;\n", kk_const(c, "KK_C", d->in_channels));
  kiln_strbuf_printf(s, "  int tile = int(gl_WorkGroupID.x), oh0 = (tile / %s) * %d, ow0 = (tile %% %s) * %d;\n", tw, w->th,
                     tw, w->tw);
  kiln_strbuf_printf(s, "  int ih0 = oh0 * %lld - %s, iw0 = ow0 * %lld - %s;\n", (long long)w->SH,
                     kk_const(c, "KK_PH", w->PH), (long long)w->SW, kk_const(c, "KK_PW", w->PW));
  kiln_strbuf_printf(s, "  int tid = int(gl_LocalInvocationIndex);\n  int xbase = %s + plane * (%s * %s);\n",
                     kk_const(c, "KK_X_OFF", d->x_offset), ch, cw);
  kiln_strbuf_printf(s, "  for (int e = tid; e < %lld; e += %d) {\n", (long long)patch, nt);
  kiln_strbuf_printf(s, "    int ih = ih0 + e / %lld, iw = iw0 + e %% %lld;\n", (long long)w->patch_w,
                     (long long)w->patch_w);
  kiln_strbuf_printf(s, "    float v = 0.0;\n    if (uint(ih) < uint(%s) && uint(iw) < uint(%s)) v = %skk_x[xbase + ih * %s + iw]%s;\n",
                     ch, cw, ld, cw, le);
  kiln_strbuf_puts(s, "    kk_patch[e] = v;\n  }\n");
  kiln_strbuf_printf(s, "  for (int e = tid; e < %lld; e += %d) kk_f[e] = %skk_w[%s + c * %lld + e]%s;\n", (long long)kk,
                     nt, ld, kk_const(c, "KK_W_OFF", d->w_offset), (long long)kk, le);
  kiln_strbuf_puts(s, "  barrier();\n  int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);\n");
  kiln_strbuf_puts(s, "  int oh = oh0 + ly, ow = ow0 + lx;\n");
  kiln_strbuf_printf(s, "  if (oh >= %s || ow >= %s) return;\n", coh, cow);
  kiln_strbuf_printf(s, "  int pb = ly * %lld + lx * %lld;\n  float acc = 0.0;\n", (long long)(w->SH * w->patch_w),
                     (long long)w->SW);
  if (kk <= 49) {
    /* unrolled: every shared-memory offset a constant */
    for (int64_t kh = 0; kh < w->KH; kh++)
      for (int64_t kw = 0; kw < w->KW; kw++)
        kiln_strbuf_printf(s, "  acc = fma(kk_f[%lld], kk_patch[pb + %lld], acc);\n", (long long)(kh * w->KW + kw),
                           (long long)(kh * w->DH * w->patch_w + kw * w->DW));
  } else {
    kiln_strbuf_printf(s, "  for (int kh = 0; kh < %lld; kh++)\n    for (int kw = 0; kw < %lld; kw++)\n", (long long)w->KH,
                       (long long)w->KW);
    kiln_strbuf_printf(s, "      acc = fma(kk_f[kh * %lld + kw], kk_patch[pb + kh * %lld + kw * %lld], acc);\n",
                       (long long)w->KW, (long long)(w->DH * w->patch_w), (long long)w->DW);
  }
  if (d->has_bias)
    kiln_strbuf_printf(s, "  acc += %skk_bias[%s + c]%s;\n", ld, kk_const(c, "KK_BIAS_OFF", d->bias_offset), le);
  kiln_strbuf_printf(s, "  kk_store(plane * (%s * %s) + oh * %s + ow, acc);\n}\n", coh, cow, cow);
  groups[0] = (uint32_t)(tiles_w * tiles_h);
  groups[1] = (uint32_t)(d->batch * d->in_channels);
  groups[2] = 1;
}

kiln_status_t vk_gen_conv(const vk_conv_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                          vk_kernel_src *out) {
  char why[256];
  conv_geom g;
  if (!conv_geometry(d, props, &g, why, sizeof why)) return kiln_error(KILN_UNSUPPORTED, "vulkan conv: %s", why);
  int own = d->has_bias ? 4 : 3;
  KILN_TRY(kk_check_epilogue(epi, own));
  kiln_strbuf decl = {0};
  const char *ft = kk_ftype(d->fp16);
  kk_buffer(&decl, 0, ft, "kk_x", true);
  kk_buffer(&decl, 1, ft, "kk_w", true);
  if (d->has_bias) kk_buffer(&decl, 2, ft, "kk_bias", true);
  kk_buffer(&decl, own - 1, ft, "kk_y", false);
  kk_consts c = {0};
  kk_store_fn(&decl, &c, epi, "kk_y", d->y_offset, d->fp16);
  kiln_status_t st = kiln_strbuf_status(&decl);
  if (st) {
    kiln_strbuf_free(&decl);
    kk_consts_free(&c);
    return st;
  }

  kiln_strbuf s = {0};
  uint32_t groups[3];
  char name[64];
  dw_plan w;
  bool depthwise = d->group == d->in_channels && d->group == d->out_channels && d->n_spatial <= 2;
  if (depthwise && dw_plan_make(d, props, &w) &&
      (uint64_t)(d->batch * d->in_channels) <= kk_max_groups(props, 1) &&
      (uint64_t)(((w.OW + w.tw - 1) / w.tw) * ((w.OH + w.th - 1) / w.th)) <= kk_max_groups(props, 0)) {
    kk_preamble(&s, (uint32_t)w.tw, (uint32_t)w.th, 1, d->fp16);
    kiln_strbuf_puts(&s, decl.data);
    emit_depthwise(&s, &c, d, &w, groups);
    snprintf(name, sizeof name, "dwconv%lldx%lld_s%lld_c%lld", (long long)w.KH, (long long)w.KW, (long long)w.SW,
             (long long)d->in_channels);
  } else {
    kk_tile t = kk_pick_tile(g.gm, g.gn, d->group, props);
    kk_preamble(&s, (uint32_t)kk_tile_threads(&t), 1, 1, d->fp16);
    kiln_strbuf_puts(&s, decl.data);
    emit_implicit_gemm(&s, &c, d, &g, &t);
    groups[0] = (uint32_t)((g.gn + t.tn - 1) / t.tn);
    groups[1] = (uint32_t)((g.gm + t.tm - 1) / t.tm);
    groups[2] = (uint32_t)d->group;
    snprintf(name, sizeof name, "conv%dd_g%lld_%lldx%lldx%lld", d->n_spatial, (long long)d->group, (long long)g.gm,
             (long long)g.gn, (long long)g.gk);
  }
  kiln_strbuf_free(&decl);
  double flops = 2.0 * (double)d->batch * (double)d->out_channels * (double)g.osp * (double)g.gk;
  return kk_finish(&s, &c, out, name, own, epi, groups, flops);
}

#endif
