/* Tensorized convolutions and pools (loopnest.h, kiln_conv_call,
 * kiln_pool_call) in the C dialect: one kiln_rt.conv call, the element's f
 * as the call's own bias, residual and clip where it is one of those, else
 * as its per-tile epilogue; one kiln_rt.pooling call, f as its epilogue. */
#include <stdio.h>

#include "codegen/render_internal.h"

/* An integer convolution whose output is not 4 bytes an element: its sums
 * go to the runtime's scratch (kiln_rt_conv_args.yq NULL). */
static bool scratch_sums(const render_ctx *r, const kiln_loop_nest *nest) {
  return nest->conv.tag->integer && kiln_dtype_size(te_get_buffer(r->b, nest->out_buf)->dtype) != 4;
}

/* Whether the element f (outside the routine's value `sum`) reads the
 * pixel loops' variables (loops 2..rank) only through load indices affine
 * in them with coefficients in the row-major ratio of those loops: then
 * the pixel variables can be replaced by one flat pixel index (the
 * innermost = the flat index, the others 0) and a tile row is one run the
 * compiler vectorizes, not a run per image row (7 or 14 pixels in
 * ResNet's late layers: shorter than a vector and its remainder). */
static bool pixels_flat(const kiln_loop_nest *nest, const te_expr *e, const te_expr *sum) {
  if (!e || e == sum || e->op == TE_CONST) return true;
  int rank = nest->rank;
  if (e->op == TE_VAR) {
    for (int l = 2; l < rank; l++)
      if (e->var == nest->vars[l]) return false;
    return true;
  }
  if (e->op == TE_REDUCE) { /* f reads no reduction but the sum (the schedule's rule) */
    for (int l = 2; l < rank; l++)
      if (te_uses_var(e, nest->vars[l])) return false;
    return true;
  }
  if (e->op == TE_LOAD) {
    te_affine a;
    if (te_affine_of(e->a, &a)) {
      int64_t unit = te_affine_coef(&a, nest->vars[rank - 1]), stride = 1;
      for (int l = rank - 1; l >= 2; l--) {
        if (te_affine_coef(&a, nest->vars[l]) != unit * stride) return false;
        stride *= nest->extents[l];
      }
      return true;
    }
  }
  return pixels_flat(nest, e->a, sum) && pixels_flat(nest, e->b, sum) && pixels_flat(nest, e->c, sum);
}

/* One element of an epilogue row at column j (i the row; the loops'
 * variables declared). */
static void epilogue_element(render_ctx *r, const kiln_loop_nest *nest, const te_expr *sum, bool integer,
                             bool scratch) {
  if (scratch) { /* the sums in the runtime's scratch, the output stored here */
    char sum_name[48]; /* rN for a reduction; eN for a pool's quotient (marked declared) */
    render_name_of(r, sum, sum_name, sizeof sum_name);
    render_line(r, "const %s %s = c[i * ldc + j];", integer ? "int32_t" : "float", sum_name);
    render_mark_emitted(r, sum);
    render_ensure(r, nest->value);
    char val[48];
    render_name_of(r, nest->value, val, sizeof val);
    render_line(r, "b%d[kiln_f + j] = %s;", nest->out_buf, val);
  } else {
    render_c_epilogue_element(r, nest, sum);
  }
}

/* The end of the row loop and of the function. */
static void end_rows(render_ctx *r) {
  render_close_scope(r);
  render_line(r, "}");
  render_close_scope(r);
  kiln_strbuf_puts(r->s, "}\n\n");
}

/* `NAME_epilogue`: f of each element of a tile, in place, from the value
 * the routine left there. A tile's rows start at flat output elements
 * base + (m0 + i) * row + n0 and each stays inside one (image, channel)
 * plane of pixels (kiln_rt.h; callers pass tiles of a plane with any base
 * and row), so each row's image, channel and first pixel are unflattened
 * once (divisions by constants). The row is then walked in runs along the
 * innermost output loop, whose variable is the run's start plus j inside
 * a run (so the compiler vectorizes the run: loads at the output's index
 * are contiguous, per-channel ones invariant), carried outwards between
 * runs; or, when f reads the pixels only at the output's own pattern
 * (pixels_flat), as one run with the flat pixel index. */
static void epilogue(render_ctx *r, const kiln_loop_nest *nest, const char *name, const te_expr *sum, bool integer,
                     bool scratch) {
  render_c_epilogue_head(r, name, integer);
  kiln_strbuf_puts(r->s, "  const kiln_rt_epilogue_ctx *ectx = (const kiln_rt_epilogue_ctx *)vctx;\n"
                         "  void *const *buffers = ectx->buffers;\n");
  render_c_declare_buffers(r, nest);
  r->indent = 0;
  render_open_scope(r); /* indent 1 */
  int rank = nest->rank;
  bool flat = rank > 2 && pixels_flat(nest, nest->value, sum);
  int64_t pixels = 1;
  for (int l = 2; l < rank; l++) pixels *= nest->extents[l];
  render_line(r, "for (int64_t i = 0; i < mb; i++) {");
  render_open_scope(r);
  render_line(r, "const int64_t kiln_f = ectx->base + (m0 + i) * ectx->row + n0;");
  render_line(r, "(void)kiln_f;");
  render_line(r, "const int64_t kiln_q = kiln_f / INT64_C(%lld);", (long long)pixels);
  render_line(r, "const int64_t kiln_p = kiln_f - kiln_q * INT64_C(%lld);", (long long)pixels);
  render_line(r, "(void)kiln_p;");
  render_line(r, "const int64_t v%d = kiln_q %% INT64_C(%lld);", nest->vars[1], (long long)nest->extents[1]);
  render_line(r, "const int64_t v%d = (kiln_q / INT64_C(%lld)) %% INT64_C(%lld);", nest->vars[0],
              (long long)nest->extents[1], (long long)nest->extents[0]);
  int last = nest->vars[rank - 1];
  if (flat) {
    /* One run: the innermost pixel variable is the flat pixel index. */
    render_line(r, "for (int64_t j = 0; j < nb; j++) {");
    render_open_scope(r);
    for (int l = 2; l < rank - 1; l++) render_line(r, "const int64_t v%d = 0;", nest->vars[l]);
    render_line(r, "const int64_t v%d = kiln_p + j;", last);
    epilogue_element(r, nest, sum, integer, scratch);
    render_close_scope(r);
    render_line(r, "}");
    end_rows(r);
    return;
  }
  int64_t stride = 1;
  for (int l = rank - 1; l >= 2; l--) {
    render_line(r, "int64_t v%d = (kiln_p / INT64_C(%lld)) %% INT64_C(%lld);", nest->vars[l], (long long)stride,
                (long long)nest->extents[l]);
    stride *= nest->extents[l];
  }
  long long last_extent = (long long)nest->extents[rank - 1];
  render_line(r, "for (int64_t j = 0; j < nb;) {");
  render_open_scope(r);
  render_line(r, "const int64_t kiln_left = INT64_C(%lld) - v%d;", last_extent, last);
  render_line(r, "const int64_t kiln_end = nb - j < kiln_left ? nb : j + kiln_left;");
  render_line(r, "const int64_t kiln_v0 = v%d - j;", last);
  render_line(r, "for (; j < kiln_end; j++) {");
  render_open_scope(r);
  render_line(r, "const int64_t v%d = kiln_v0 + j;", last); /* shadows the run's start inside the run */
  epilogue_element(r, nest, sum, integer, scratch);
  render_close_scope(r);
  render_line(r, "}");
  /* The run ended at the innermost loop's end (or the tile's): carry
   * through the pixel loops (a row never leaves its image's pixels). */
  render_line(r, "v%d = kiln_v0 + j;", last);
  for (int l = rank - 1; l >= 2; l--) {
    if (l == rank - 1)
      render_line(r, "if (v%d == INT64_C(%lld)) {", nest->vars[l], (long long)nest->extents[l]);
    else
      render_line(r, "if (++v%d == INT64_C(%lld)) {", nest->vars[l], (long long)nest->extents[l]);
    render_open_scope(r);
    render_line(r, "v%d = 0;", nest->vars[l]);
  }
  for (int l = 2; l < rank; l++) {
    render_close_scope(r);
    render_line(r, "}");
  }
  render_close_scope(r);
  render_line(r, "}");
  end_rows(r);
}

/* `NAME_epilogue` of a native call: y += add, then the clip, over a tile
 * (what a routine that cannot apply them in registers calls). */
static void native_epilogue(render_ctx *r, const kiln_loop_nest *nest, const char *name) {
  const kiln_conv_call *cc = &nest->conv;
  render_c_epilogue_head(r, name, false);
  kiln_strbuf_puts(r->s, "  const kiln_rt_epilogue_ctx *ectx = (const kiln_rt_epilogue_ctx *)vctx;\n"
                         "  for (int64_t i = 0; i < mb; i++) {\n    float *row = c + i * ldc;\n");
  if (cc->add_buf >= 0)
    kiln_strbuf_printf(r->s,
                       "    const float *add = (const float *)ectx->buffers[%d] + ectx->base + (m0 + i) * ectx->row + n0;\n"
                       "    for (int64_t j = 0; j < nb; j++) row[j] += add[j];\n",
                       cc->add_buf);
  else
    kiln_strbuf_puts(r->s, "    (void)ectx;\n    (void)m0;\n    (void)n0;\n");
  if (cc->clip) {
    char lo[40], hi[40];
    r->d->float_literal(r, KILN_DTYPE_F32, cc->lo, lo, sizeof lo);
    r->d->float_literal(r, KILN_DTYPE_F32, cc->hi, hi, sizeof hi);
    /* NaN compares false both times: kept, as TE_MAX/TE_MIN keep it. */
    kiln_strbuf_printf(r->s,
                       "    for (int64_t j = 0; j < nb; j++) {\n      const float v = row[j] < %s ? %s : row[j];\n"
                       "      row[j] = v > %s ? %s : v;\n    }\n",
                       lo, lo, hi, hi);
  }
  kiln_strbuf_puts(r->s, "  }\n}\n\n");
}

static void ints(render_ctx *r, const char *field, const int64_t *v, int n) {
  for (int i = 0; i < n; i++) render_line(r, "a.%s[%d] = INT64_C(%lld);", field, i, (long long)v[i]);
}

/* A window's geometry (conv and pool args share the field names). */
static void window_ints(render_ctx *r, int nsp, const int64_t *in, const int64_t *out, const int64_t *kernel,
                        const int64_t *stride, const int64_t *dilation, const int64_t *pad_begin) {
  ints(r, "in", in, nsp);
  ints(r, "out", out, nsp);
  ints(r, "kernel", kernel, nsp);
  ints(r, "stride", stride, nsp);
  ints(r, "dilation", dilation, nsp);
  ints(r, "pad_begin", pad_begin, nsp);
}

void render_c_conv(render_ctx *r, const kiln_loop_nest *nest, const char *name) {
  const te_conv_tag *t = nest->conv.tag;
  const kiln_conv_call *cc = &nest->conv;
  bool native = cc->native && (cc->add_buf >= 0 || cc->clip);
  bool has_epilogue = nest->value != t->reduce && (!cc->native || native);
  if (native) native_epilogue(r, nest, name);
  else if (has_epilogue) epilogue(r, nest, name, t->reduce, t->integer, scratch_sums(r, nest));
  kiln_strbuf_printf(r->s, "KILN_EXPORT void %s(const kiln_rt *rt, void *const *buffers) {\n", name);
  r->indent = 0;
  render_open_scope(r); /* indent 1 */
  render_line(r, "kiln_rt_conv_args a = {0};");
  render_line(r, "a.nsp = %d;", t->nsp);
  if (t->transposed) render_line(r, "a.transposed = true;");
  render_line(r, "a.n = INT64_C(%lld);", (long long)t->n);
  render_line(r, "a.ci = INT64_C(%lld);", (long long)t->ci);
  render_line(r, "a.co = INT64_C(%lld);", (long long)t->co);
  render_line(r, "a.group = INT64_C(%lld);", (long long)t->group);
  window_ints(r, t->nsp, t->in, t->out, t->kernel, t->stride, t->dilation, t->pad_begin);
  if (t->integer) {
    render_line(r, "a.integer = true;");
    render_line(r, "a.xq = buffers[%d];", t->x_buf);
    render_line(r, "a.wq = buffers[%d];", t->w_buf);
    if (!scratch_sums(r, nest)) render_line(r, "a.yq = (int32_t *)buffers[%d];", nest->out_buf);
    bool xs = te_get_buffer(r->b, t->x_buf)->dtype == KILN_DTYPE_I8, ws = te_get_buffer(r->b, t->w_buf)->dtype == KILN_DTYPE_I8;
    render_line(r, "a.x_signed = %s;", xs ? "true" : "false");
    render_line(r, "a.w_signed = %s;", ws ? "true" : "false");
    if (t->x_zp_buf >= 0)
      render_line(r, "a.x_zero = ((const %s *)buffers[%d])[0];", xs ? "int8_t" : "uint8_t", t->x_zp_buf);
    if (t->w_zp_buf >= 0) {
      render_line(r, "a.w_zero = buffers[%d];", t->w_zp_buf);
      render_line(r, "a.w_zero_signed = %s;", te_get_buffer(r->b, t->w_zp_buf)->dtype == KILN_DTYPE_I8 ? "true" : "false");
      render_line(r, "a.w_zero_count = INT64_C(%lld);", (long long)t->w_zp_count);
    }
  } else {
    render_line(r, "a.x = (const float *)buffers[%d];", t->x_buf);
    render_line(r, "a.w = (const float *)buffers[%d];", t->w_buf);
    render_line(r, "a.y = (float *)buffers[%d];", nest->out_buf);
  }
  render_line(r, "a.w_constant = %s;", cc->w_constant ? "true" : "false");
  if (cc->y_cn) render_line(r, "a.y_cn = true;");
  if (cc->native && cc->bias_buf >= 0) render_line(r, "a.bias = (const float *)buffers[%d];", cc->bias_buf);
  if (cc->native && cc->add_buf >= 0) render_line(r, "a.add = (const float *)buffers[%d];", cc->add_buf);
  if (cc->native && cc->clip) {
    char lo[40], hi[40];
    r->d->float_literal(r, KILN_DTYPE_F32, cc->lo, lo, sizeof lo);
    r->d->float_literal(r, KILN_DTYPE_F32, cc->hi, hi, sizeof hi);
    render_line(r, "a.clip = true;");
    render_line(r, "a.lo = %s;", lo);
    render_line(r, "a.hi = %s;", hi);
  }
  if (has_epilogue) {
    render_line(r, "a.%s = %s_epilogue;", t->integer ? "iepilogue" : "epilogue", name);
    render_line(r, "a.epilogue_buffers = buffers;");
  }
  render_line(r, "rt->conv(rt, &a, (kiln_rt_state **)buffers[%d]);", te_buffer_count(r->b));
  render_close_scope(r);
  kiln_strbuf_puts(r->s, "}\n\n");
}

/* The entry point of a plane routine's call (pooling, resample): its
 * epilogue first when f is more than the routine's value, then `TYPE a`
 * (the caller fills the geometry between open and close). */
static bool plane_call_open(render_ctx *r, const kiln_loop_nest *nest, const char *name, const te_expr *value,
                            const char *type, bool scratch) {
  bool has_epilogue = nest->value != value;
  if (has_epilogue) epilogue(r, nest, name, value, false, scratch);
  kiln_strbuf_printf(r->s, "KILN_EXPORT void %s(const kiln_rt *rt, void *const *buffers) {\n", name);
  r->indent = 0;
  render_open_scope(r); /* indent 1 */
  render_line(r, "%s a = {0};", type);
  return has_epilogue;
}

/* x, y, the epilogue and the call `rt->FN(rt, &a)`. */
static void plane_call_close(render_ctx *r, const kiln_loop_nest *nest, const char *name, int x_buf,
                             bool has_epilogue, const char *fn, bool scratch) {
  render_line(r, "a.x = (const float *)buffers[%d];", x_buf);
  if (scratch) render_line(r, "a.y = NULL; /* the output is not f32: the epilogue stores it */");
  else render_line(r, "a.y = (float *)buffers[%d];", nest->out_buf);
  if (has_epilogue) {
    render_line(r, "a.epilogue = %s_epilogue;", name);
    render_line(r, "a.epilogue_buffers = buffers;");
  }
  render_line(r, "rt->%s(rt, &a);", fn);
  render_close_scope(r);
  kiln_strbuf_puts(r->s, "}\n\n");
}

void render_c_pool(render_ctx *r, const kiln_loop_nest *nest, const char *name) {
  const te_pool_tag *t = nest->pool.tag;
  bool has_epilogue = plane_call_open(r, nest, name, t->value, "kiln_rt_pool_args", nest->pool.scratch);
  render_line(r, "a.nsp = %d;", t->nsp);
  render_line(r, "a.max = %s;", t->max ? "true" : "false");
  render_line(r, "a.count_include_pad = %s;", t->count_include_pad ? "true" : "false");
  render_line(r, "a.planes = INT64_C(%lld);", (long long)(t->n * t->c));
  window_ints(r, t->nsp, t->in, t->out, t->kernel, t->stride, t->dilation, t->pad_begin);
  ints(r, "pad_end", t->pad_end, t->nsp);
  plane_call_close(r, nest, name, t->x_buf, has_epilogue, "pooling", nest->pool.scratch);
}

void render_c_resample(render_ctx *r, const kiln_loop_nest *nest, const char *name) {
  const te_resample_tag *t = nest->resample.tag;
  bool has_epilogue = plane_call_open(r, nest, name, t->value, "kiln_rt_resample_args", false);
  render_line(r, "a.nsp = %d;", t->rank - 2);
  render_line(r, "a.planes = INT64_C(%lld);", (long long)(t->out[0] * t->out[1]));
  ints(r, "in", t->in + 2, t->rank - 2);
  ints(r, "out", t->out + 2, t->rank - 2);
  render_line(r, "a.n_axes = %d;", t->n_axes);
  for (int k = 0; k < t->n_axes; k++) {
    render_line(r, "a.axis[%d] = %d;", k, t->axis[k] - 2);
    render_line(r, "a.taps[%d] = INT64_C(%lld);", k, (long long)t->taps[k]);
    render_line(r, "a.index[%d] = (const int32_t *)buffers[%d];", k, t->index_buf[k]);
    if (t->weight_buf[k] >= 0) render_line(r, "a.weight[%d] = (const float *)buffers[%d];", k, t->weight_buf[k]);
  }
  plane_call_close(r, nest, name, t->x_buf, has_epilogue, "resample", false);
}
