/* Tensorized nests (loopnest.h, kiln_gemm_call) in the C dialect: one
 * kiln_rt.sgemm call (kiln_rt.igemm for integer sums) per batch index, the
 * element's f as the call's per-tile epilogue, a constant B packed once
 * per launch. */
#include <stdio.h>

#include "codegen/render_internal.h"

void render_c_epilogue_head(render_ctx *r, const char *name, bool integer) {
  kiln_strbuf_printf(r->s,
                     "static void %s_epilogue(void *vctx, %s *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, "
                     "int64_t nb) {\n",
                     name, integer ? "int32_t" : "float");
}

void render_c_epilogue_element(render_ctx *r, const kiln_loop_nest *nest, const te_expr *sum) {
  bool integer = sum->dtype == KILN_DTYPE_I32;
  char sum_name[48]; /* rN for a reduction; eN for a pool's quotient (marked declared) */
  render_name_of(r, sum, sum_name, sizeof sum_name);
  render_line(r, "const %s %s = c[i * ldc + j];", integer ? "int32_t" : "float", sum_name);
  render_mark_emitted(r, sum);
  render_ensure(r, nest->value);
  char val[48];
  render_name_of(r, nest->value, val, sizeof val);
  if (integer && nest->value->dtype == KILN_DTYPE_F32) { /* a float stored over the int32 product */
    render_line(r, "const float kiln_v = %s;", val);
    render_line(r, "__builtin_memcpy(&c[i * ldc + j], &kiln_v, 4);");
  } else {
    render_line(r, "c[i * ldc + j] = %s;", val);
  }
}

/* `NAME_epilogue`: the element of output (batch, m0 + i, n0 + j) from the
 * product GEMM left there, in place. */
static void epilogue(render_ctx *r, const kiln_loop_nest *nest, const char *name) {
  const kiln_gemm_call *g = &nest->gemm;
  render_c_epilogue_head(r, name, g->integer);
  kiln_strbuf_printf(r->s, "  const %s_gemm_ctx *gctx = (const %s_gemm_ctx *)vctx;\n  void *const *buffers = gctx->buffers;\n",
                     name, name);
  render_c_declare_buffers(r, nest);
  r->indent = 0;
  render_open_scope(r); /* indent 1 */
  render_line(r, "const int64_t kiln_b = gctx->batch;");
  render_line(r, "(void)kiln_b;");
  render_unflatten_loops(r, nest, "kiln_b", g->batch_loops, g->n_batch);
  render_line(r, "for (int64_t i = 0; i < mb; i++) {");
  render_open_scope(r);
  render_line(r, "const int64_t kiln_m = m0 + i;");
  render_unflatten_loops(r, nest, "kiln_m", g->m_loops, g->n_m);
  render_line(r, "for (int64_t j = 0; j < nb; j++) {");
  render_open_scope(r);
  render_line(r, "const int64_t kiln_n = n0 + j;");
  render_unflatten_loops(r, nest, "kiln_n", g->n_loops, g->n_n);
  render_c_epilogue_element(r, nest, g->sum);
  render_close_scope(r);
  render_line(r, "}");
  render_close_scope(r);
  render_line(r, "}");
  render_close_scope(r);
  kiln_strbuf_puts(r->s, "}\n\n");
}

/* `base + off + sum stride * v` of one operand's matrix at the batch index. */
static void operand_at(render_ctx *r, const kiln_loop_nest *nest, const char *field, int buf, int64_t off,
                       const int64_t *stride, const char *type) {
  const kiln_gemm_call *g = &nest->gemm;
  render_indent(r);
  kiln_strbuf_printf(r->s, "g.%s = (const %s *)buffers[%d] + INT64_C(%lld)", field, type, buf, (long long)off);
  for (int i = 0; i < g->n_batch; i++)
    if (stride[i] && nest->extents[g->batch_loops[i]] != 1)
      kiln_strbuf_printf(r->s, " + INT64_C(%lld) * v%d", (long long)stride[i], nest->vars[g->batch_loops[i]]);
  kiln_strbuf_puts(r->s, ";\n");
}

/* `g.FIELD = ` a zero point: the constant, or the 8-bit element of its buffer. */
static void render_zero_point(render_ctx *r, const char *g, const char *field, int buf, bool is_signed, int64_t zp) {
  if (buf < 0)
    render_line(r, "%s.%s = %lld;", g, field, (long long)zp);
  else
    render_line(r, "%s.%s = (int32_t)((const %s *)buffers[%d])[%lld];", g, field, is_signed ? "int8_t" : "uint8_t",
                buf, (long long)zp);
}

void render_c_gemm(render_ctx *r, const kiln_loop_nest *nest, const char *name) {
  const kiln_gemm_call *g = &nest->gemm;
  bool has_epilogue = nest->value != g->sum;
  kiln_strbuf *s = r->s;
  kiln_strbuf_printf(s,
                     "typedef struct %s_gemm_ctx {\n  const kiln_rt *rt;\n  void *const *buffers;\n  int64_t batch;\n"
                     "  const void *packed_b;\n} %s_gemm_ctx;\n\n",
                     name, name);
  /* A constant B that every batch index shares is packed once, at the
   * first launch (kept in the launch's state slot). */
  bool pack = te_get_buffer(r->b, g->b_buf)->constant && (g->b_zp_buf < 0 || te_get_buffer(r->b, g->b_zp_buf)->constant);
  for (int i = 0; i < g->n_batch; i++) pack &= g->b_stride[i] == 0 || nest->extents[g->batch_loops[i]] == 1;
  if (has_epilogue) epilogue(r, nest, name);
  /* One batch index: its matrices' addresses, the call. */
  kiln_strbuf_printf(s,
                     "static void %s_one(const kiln_rt *rt, void *pool, void *const *buffers, int64_t kiln_b, "
                     "const void *packed_b) {\n",
                     name);
  r->indent = 0;
  render_open_scope(r); /* indent 1 */
  render_unflatten_loops(r, nest, "kiln_b", g->batch_loops, g->n_batch);
  const char *ta = "float", *tb = "float", *tc = "float", *args = "kiln_rt_sgemm_args", *call = "sgemm";
  if (g->integer) {
    ta = g->a_signed ? "int8_t" : "uint8_t";
    tb = g->b_signed ? "int8_t" : "uint8_t";
    tc = "int32_t";
    args = "kiln_rt_igemm_args";
    call = "igemm";
  }
  render_line(r, "%s g = {0};", args);
  if (g->integer) {
    render_line(r, "g.a_signed = %s;", g->a_signed ? "true" : "false");
    render_line(r, "g.b_signed = %s;", g->b_signed ? "true" : "false");
    render_zero_point(r, "g", "a_zero", g->a_zp_buf, g->a_zp_signed, g->a_zp);
    render_zero_point(r, "g", "b_zero", g->b_zp_buf, g->b_zp_signed, g->b_zp);
  }
  render_line(r, "g.trans_a = %s;", g->trans_a ? "true" : "false");
  render_line(r, "g.trans_b = %s;", g->trans_b ? "true" : "false");
  render_line(r, "g.m = INT64_C(%lld);", (long long)g->m);
  render_line(r, "g.n = INT64_C(%lld);", (long long)g->n);
  render_line(r, "g.k = INT64_C(%lld);", (long long)g->k);
  if (!g->integer) render_line(r, "g.alpha = 1.0f;");
  operand_at(r, nest, "a", g->a_buf, g->a_off, g->a_stride, ta);
  render_line(r, "g.lda = INT64_C(%lld);", (long long)g->lda);
  operand_at(r, nest, "b", g->b_buf, g->b_off, g->b_stride, tb);
  render_line(r, "g.ldb = INT64_C(%lld);", (long long)g->ldb);
  render_line(r, "g.packed_b = packed_b;");
  render_line(r, "g.c = (%s *)buffers[%d] + kiln_b * INT64_C(%lld);", tc, nest->out_buf, (long long)(g->m * g->n));
  render_line(r, "g.ldc = INT64_C(%lld);", (long long)g->n);
  render_line(r, "%s_gemm_ctx e = {rt, buffers, kiln_b, packed_b};", name);
  if (has_epilogue) {
    render_line(r, "g.epilogue = %s_epilogue;", name);
    render_line(r, "g.epilogue_ctx = &e;");
  } else {
    render_line(r, "(void)e;");
  }
  render_line(r, "rt->%s(pool, &g);", call);
  render_close_scope(r);
  kiln_strbuf_puts(s, "}\n\n");
  kiln_strbuf_printf(s,
                     "static void %s_batches(void *vctx, int64_t begin, int64_t end, int thread) {\n"
                     "  const %s_gemm_ctx *gctx = (const %s_gemm_ctx *)vctx;\n  (void)thread;\n"
                     "  for (int64_t b = begin; b < end; b++) %s_one(gctx->rt, NULL, gctx->buffers, b, gctx->packed_b);\n}\n\n",
                     name, name, name, name);
  /* Many small products: a batch index per thread, each on one thread;
   * else one after another, each split over the pool. */
  double macs = (double)g->m * (double)g->n * (double)g->k;
  kiln_strbuf_printf(s,
                     "KILN_EXPORT void %s(const kiln_rt *rt, void *const *buffers) {\n"
                     "  const int64_t batch = INT64_C(%lld);\n"
                     "  const void *packed_b = NULL;\n",
                     name, (long long)g->batch);
  if (pack) {
    kiln_strbuf_printf(s,
                       "  {\n    %s p = {0};\n    p.trans_b = %s;\n    p.m = INT64_C(%lld);\n    p.k = INT64_C(%lld);\n"
                       "    p.n = INT64_C(%lld);\n    p.b = (const %s *)buffers[%d] + INT64_C(%lld);\n"
                       "    p.ldb = INT64_C(%lld);\n",
                       g->integer ? "kiln_rt_igemm_args" : "kiln_rt_sgemm_args", g->trans_b ? "true" : "false",
                       (long long)g->m, (long long)g->k, (long long)g->n,
                       g->integer ? (g->b_signed ? "int8_t" : "uint8_t") : "float", g->b_buf, (long long)g->b_off,
                       (long long)g->ldb);
    if (g->integer) {
      r->indent = 2;
      render_line(r, "p.b_signed = %s;", g->b_signed ? "true" : "false");
      render_zero_point(r, "p", "b_zero", g->b_zp_buf, g->b_zp_signed, g->b_zp);
    }
    kiln_strbuf_printf(s, "    packed_b = rt->%s_packed_b(rt, &p, (kiln_rt_state **)buffers[%d]);\n  }\n",
                       g->integer ? "igemm" : "sgemm", te_buffer_count(r->b));
  }
  kiln_strbuf_printf(s,
                     "  if (batch > 1 && batch >= 2 * (int64_t)rt->n_threads && %d) {\n"
                     "    %s_gemm_ctx c = {rt, buffers, 0, packed_b};\n"
                     "    rt->parallel_for(rt->pool, batch, 1, %s_batches, &c);\n"
                     "  } else {\n"
                     "    for (int64_t b = 0; b < batch; b++) %s_one(rt, rt->pool, buffers, b, packed_b);\n"
                     "  }\n}\n\n",
                     macs < (double)(1 << 20) ? 1 : 0, name, name, name);
}
