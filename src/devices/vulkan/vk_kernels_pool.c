/* MaxPool / AveragePool as GLSL: one invocation per output element, the
 * window loops bounded by specialization constants (the driver unrolls small
 * windows when it creates the pipeline).
 * Semantics follow the reference kernel (ops/nn_pool.c). See vk_kernels.h. */
#if KILN_HAVE_VULKAN

#include <stdio.h>
#include <string.h>

#include "devices/vulkan/vk_kernels_internal.h"

kiln_status_t vk_gen_pool(const vk_pool_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                          vk_kernel_src *out) {
  int nsp = d->n_spatial;
  if (nsp < 1 || nsp > 3) return kiln_error(KILN_UNSUPPORTED, "vulkan pool: %d spatial axes (1 to 3 supported)", nsp);
  if (d->kind != VK_POOL_MAX && d->kind != VK_POOL_AVG)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan pool: unknown kind %d", (int)d->kind);
  double isp = 1, osp = 1;
  for (int i = 0; i < nsp; i++) {
    if (d->in[i] < 0 || d->out[i] < 0 || d->kernel[i] < 1 || d->stride[i] < 1 || d->dilation[i] < 1 ||
        d->pad_begin[i] < 0 || d->pad_end[i] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "vulkan pool: bad geometry on spatial axis %d", i);
    isp *= (double)d->in[i];
    osp *= (double)d->out[i];
  }
  double planes = (double)d->batch * (double)d->channels;
  if (d->batch < 0 || d->channels < 0 || (double)d->x_offset + planes * isp > (double)KK_INDEX_LIMIT ||
      (double)d->y_offset + planes * osp > (double)KK_INDEX_LIMIT)
    return kiln_error(KILN_UNSUPPORTED, "vulkan pool: tensors past 2^31 elements");
  KILN_TRY(kk_check_epilogue(epi, 2));

  int64_t total = (int64_t)(planes * osp), in_plane = (int64_t)isp, out_plane = (int64_t)osp;
  uint32_t nt = kk_threads(props, 256), g2[2];
  uint64_t wgs = ((uint64_t)total + nt - 1) / nt;
  if (!kk_split_linear(wgs, props, g2))
    return kiln_error(KILN_UNSUPPORTED, "vulkan pool: %lld outputs need too many workgroups", (long long)total);
  bool is_max = d->kind == VK_POOL_MAX;

  kiln_strbuf s = {0};
  kk_preamble(&s, nt, 1, 1, d->fp16);
  kk_buffer(&s, 0, kk_ftype(d->fp16), "kk_x", true);
  kk_buffer(&s, 1, kk_ftype(d->fp16), "kk_y", false);
  kk_consts c = {0};
  kk_store_fn(&s, &c, epi, "kk_y", d->y_offset, d->fp16);
  /* Sizes, window, strides, dilations, pads are constants; the window
   * loops' bounds too (the driver unrolls small windows once the
   * constants are known, at pipeline creation). Group counts come from
   * gl_NumWorkGroups, so the source does not depend on them either. */
  const char *cin[3], *cout[3];
  for (int i = 0; i < nsp; i++) {
    cin[i] = kk_constn(&c, "KK_IN", i, d->in[i]);
    cout[i] = kk_constn(&c, "KK_OUT", i, d->out[i]);
  }
  kiln_strbuf_puts(&s, "void main() {\n");
  kiln_strbuf_printf(&s, "  int idx = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * %u + int(gl_LocalInvocationIndex);\n",
                     nt);
  kiln_strbuf_printf(&s, "  if (idx >= %s) return;\n", kk_const(&c, "KK_TOTAL", total));
  const char *cop = kk_const(&c, "KK_OUT_PLANE", out_plane);
  kiln_strbuf_printf(&s, "  int plane = idx / %s, r = idx %% %s;\n", cop, cop);
  for (int i = nsp - 1; i >= 0; i--) {
    if (i == 0)
      kiln_strbuf_printf(&s, "  int o0 = r;\n");
    else
      kiln_strbuf_printf(&s, "  int o%d = r %% %s; r /= %s;\n", i, cout[i], cout[i]);
  }
  kiln_strbuf_printf(&s, "  int xb = %s + plane * %s;\n", kk_const(&c, "KK_X_OFF", d->x_offset),
                     kk_const(&c, "KK_IN_PLANE", in_plane));
  kiln_strbuf_printf(&s, "  float acc = %s;\n  int cnt = 0;\n", is_max ? "uintBitsToFloat(0xff800000u)" : "0.0");
  bool count_pad = !is_max && d->count_include_pad;
  for (int i = 0; i < nsp; i++) {
    kiln_strbuf_printf(&s, "%*sfor (int t%d = 0; t%d < %s; t%d++) {\n", 2 + 2 * i, "", i, i,
                       kk_constn(&c, "KK_KER", i, d->kernel[i]), i);
    kiln_strbuf_printf(&s, "%*sint p%d = o%d * %s + t%d * %s - %s;\n", 4 + 2 * i, "", i, i,
                       kk_constn(&c, "KK_STRIDE", i, d->stride[i]), i, kk_constn(&c, "KK_DIL", i, d->dilation[i]),
                       kk_constn(&c, "KK_PAD", i, d->pad_begin[i]));
    if (count_pad) /* positions past pad_end (ceil_mode) are neither read nor counted */
      kiln_strbuf_printf(&s, "%*sif (p%d >= %s) continue;\n", 4 + 2 * i, "", i,
                         kk_constn(&c, "KK_IN_PADDED", i, d->in[i] + d->pad_end[i]));
  }
  int ind = 2 + 2 * nsp;
  if (count_pad) kiln_strbuf_printf(&s, "%*scnt++;\n", ind, "");
  kiln_strbuf_printf(&s, "%*sif (", ind, "");
  for (int i = 0; i < nsp; i++) kiln_strbuf_printf(&s, "%suint(p%d) >= uint(%s)", i ? " || " : "", i, cin[i]);
  kiln_strbuf_puts(&s, ") continue;\n");
  kiln_strbuf_printf(&s, "%*sfloat v = %skk_x[xb + ", ind, "", kk_ld(d->fp16));
  /* row-major offset of (p0, .., p{n-1}) */
  for (int i = 0; i < nsp; i++) kiln_strbuf_puts(&s, "(");
  kiln_strbuf_puts(&s, "0");
  for (int i = 0; i < nsp; i++) kiln_strbuf_printf(&s, " * %s + p%d)", cin[i], i);
  kiln_strbuf_printf(&s, "]%s;\n", kk_le(d->fp16));
  if (is_max) /* NaN wins, as in the reference */
    kiln_strbuf_printf(&s, "%*sif (v > acc || (isnan(v) && !isnan(acc))) acc = v;\n", ind, "");
  else
    kiln_strbuf_printf(&s, "%*sacc += v;%s\n", ind, "", count_pad ? "" : " cnt++;");
  for (int i = nsp - 1; i >= 0; i--) kiln_strbuf_printf(&s, "%*s}\n", 2 + 2 * i, "");
  if (!is_max) kiln_strbuf_puts(&s, "  acc = cnt > 0 ? acc / float(cnt) : uintBitsToFloat(0x7fc00000u);\n");
  kiln_strbuf_puts(&s, "  kk_store(idx, acc);\n}\n");

  char name[64];
  snprintf(name, sizeof name, "%spool%dd_k%lld_s%lld", is_max ? "max" : "avg", nsp, (long long)d->kernel[nsp - 1],
           (long long)d->stride[nsp - 1]);
  uint32_t groups[3] = {g2[0], g2[1], 1};
  if (total == 0) groups[0] = 0;
  double win = 1;
  for (int i = 0; i < nsp; i++) win *= (double)d->kernel[i];
  return kk_finish(&s, &c, out, name, 2, epi, groups, (double)total * win);
}

#endif
