/* MaxPool / AveragePool as GLSL: one invocation per output element, the
 * window loops bounded by constants (the driver unrolls small windows).
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
  kk_store_fn(&s, epi, "kk_y", d->y_offset, d->fp16);
  kiln_strbuf_puts(&s, "void main() {\n");
  kiln_strbuf_printf(&s, "  int idx = int(gl_WorkGroupID.y * %uu + gl_WorkGroupID.x) * %u + int(gl_LocalInvocationIndex);\n",
                     g2[0], nt);
  kiln_strbuf_printf(&s, "  if (idx >= %lld) return;\n", (long long)total);
  kiln_strbuf_printf(&s, "  int plane = idx / %lld, r = idx %% %lld;\n", (long long)out_plane, (long long)out_plane);
  for (int i = nsp - 1; i >= 0; i--) {
    if (i == 0)
      kiln_strbuf_printf(&s, "  int o0 = r;\n");
    else
      kiln_strbuf_printf(&s, "  int o%d = r %% %lld; r /= %lld;\n", i, (long long)d->out[i], (long long)d->out[i]);
  }
  kiln_strbuf_printf(&s, "  int xb = %lld + plane * %lld;\n", (long long)d->x_offset, (long long)in_plane);
  kiln_strbuf_printf(&s, "  float acc = %s;\n  int cnt = 0;\n", is_max ? "uintBitsToFloat(0xff800000u)" : "0.0");
  bool count_pad = !is_max && d->count_include_pad;
  for (int i = 0; i < nsp; i++) {
    kiln_strbuf_printf(&s, "%*sfor (int t%d = 0; t%d < %lld; t%d++) {\n", 2 + 2 * i, "", i, i, (long long)d->kernel[i], i);
    kiln_strbuf_printf(&s, "%*sint p%d = o%d * %lld + t%d * %lld - %lld;\n", 4 + 2 * i, "", i, i, (long long)d->stride[i], i,
                       (long long)d->dilation[i], (long long)d->pad_begin[i]);
    if (count_pad) /* positions past pad_end (ceil_mode) are neither read nor counted */
      kiln_strbuf_printf(&s, "%*sif (p%d >= %lld) continue;\n", 4 + 2 * i, "", i, (long long)(d->in[i] + d->pad_end[i]));
  }
  int ind = 2 + 2 * nsp;
  if (count_pad) kiln_strbuf_printf(&s, "%*scnt++;\n", ind, "");
  kiln_strbuf_printf(&s, "%*sif (", ind, "");
  for (int i = 0; i < nsp; i++) kiln_strbuf_printf(&s, "%suint(p%d) >= %lldu", i ? " || " : "", i, (long long)d->in[i]);
  kiln_strbuf_puts(&s, ") continue;\n");
  kiln_strbuf_printf(&s, "%*sfloat v = %skk_x[xb + ", ind, "", kk_ld(d->fp16));
  /* row-major offset of (p0, .., p{n-1}) */
  for (int i = 0; i < nsp; i++) kiln_strbuf_puts(&s, "(");
  kiln_strbuf_puts(&s, "0");
  for (int i = 0; i < nsp; i++) kiln_strbuf_printf(&s, " * %lld + p%d)", (long long)d->in[i], i);
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
  return kk_finish(&s, out, name, 2, epi, groups, (double)total * win);
}

#endif
