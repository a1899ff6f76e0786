/* The Vulkan device's compiler driver and executor (see vk_plan.h). */
#if KILN_HAVE_VULKAN

#include <pthread.h>
#include <stdio.h>

#include "codegen/fusion.h"
#include "codegen/loopnest.h"
#include "devices/vulkan/vk_kernels.h"
#include "devices/vulkan/vk_plan.h"
#include "ops/window.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "tensor/dtype.h"

typedef enum vs_kind {
  VS_KERNEL,    /* a generated, fused kernel (GLSL from codegen) */
  VS_MATMUL,    /* hand-scheduled shaders (vk_kernels.c) */
  VS_GEMM,
  VS_CONV,
  VS_MAXPOOL,
  VS_ATTENTION,
  VS_REF,       /* a node the device does not claim: reference kernel on the host */
} vs_kind;

typedef struct vs_step {
  vs_kind kind;
  const kiln_node *node;  /* the node, or the group's root (KERNEL) */
  char name[64];
  int n_fused;
  int n_args;
  int *args;              /* value bound at each binding; owned */
  kiln_fused_kernel fk;   /* KERNEL: its lowering (kept until shaders are generated) */
  kiln_loop_nest nest;    /* KERNEL */
  bool flat, elementwise_only;
  int epilogue_step;      /* contractions: the KERNEL step fused in as epilogue, or -1 */
  int fused_into;         /* KERNEL: the contraction running it as epilogue, or -1 */
  int out_value;          /* the value the step materializes */
  int segment;            /* device steps: the recorded stream it is in */
  int64_t flops;
  vk_kernel_src src;      /* generated shader; owned */
  kiln_glsl_spec epi_spec; /* contractions with an epilogue: its specialization constants; owned */
  vk_kernel *kernel;      /* owned (destroyed with the executable) */
} vs_step;

typedef enum vs_value_kind {
  VV_UNUSED = 0,
  VV_CONST,   /* constant read by device steps: uploaded once at prepare */
  VV_INPUT,   /* graph input read by device steps: own buffer, uploaded per run */
  VV_DEVICE,  /* written by a device step into the arena */
  VV_HOSTDEV, /* written by a ref step, read by device steps: arena, uploaded after it */
  VV_ALIAS,   /* a contraction's raw result, never materialized (epilogue) */
  VV_HOST,    /* host only */
} vs_value_kind;

/* One submission point: the device steps of a segment, the uploads they
 * need first, the readbacks the following host steps (or the caller) need,
 * then those host steps. */
typedef struct vs_flush {
  int segment;            /* index in x->segments, or -1 when no device step runs */
  int n_up, n_down;
  int *up, *down;         /* value ids; owned */
  int ref_begin, ref_end; /* host steps [begin, end) run after the wait */
} vs_flush;

struct kiln_executable {
  const kiln_graph *g;    /* borrowed */
  vk_device_state *dev;   /* borrowed */
  vk_context *ctx;        /* borrowed from dev */
  vs_step *steps;
  int n_steps;
  vs_value_kind *kinds;   /* per value id */
  vk_buffer **buf;        /* per value id: device buffer (CONST/INPUT owned, arena views owned) */
  bool *buf_is_view;
  int *alias_of;          /* ALIAS: the value whose buffer the raw result lives in */
  vk_buffer *arena;       /* owned */
  vk_buffer *dummy;       /* bound where a tensor is empty; owned */
  size_t arena_bytes, intermediate_bytes, weight_bytes;
  vk_stream **segments;   /* recorded streams; owned */
  int n_segments;
  vs_flush *flushes;
  int n_flushes;
  vk_stream *pre, *post;  /* one-shot streams, re-recorded per run; owned */
  int n_kernels, n_ref, n_fused_nodes, n_contract;
  bool fp16;              /* f32 values live on the device as IEEE half (KILN_PRECISION_FP16) */
  /* Readbacks of fp16 values land in half buffers, converted after the wait. */
  struct vs_pending { uint16_t *half; float *dst; int64_t n; } *pending;
  int n_pending, cap_pending;
  /* Shaders of this plan (`kiln info`): kernels, distinct sources, and what
   * the context's compiler did during prepare (other sessions preparing at
   * the same time count too). */
  int n_shader_kernels, n_shader_sources;
  uint64_t spirv_compiled, spirv_cached;
  double shader_s;
  /* Counted for `kiln bench --profile`: the last run's submissions. */
  int last_submissions, last_command_buffers, last_dispatches;
};

/* ---- claims ------------------------------------------------------------------ */

static int64_t numel_of(const kiln_graph *g, int v) { return kiln_type_numel(&g->values[v].type); }

static kiln_status_t upload_value(struct kiln_executable *x, vk_stream *s, int v, const void *src);


#define VS_MAX_ELEMS ((int64_t)1 << 31)

static bool input_too_big(const kiln_graph *g, const kiln_node *node) {
  for (int i = 0; i < node->n_inputs; i++)
    if (node->inputs[i] >= 0 && numel_of(g, node->inputs[i]) >= VS_MAX_ELEMS) return true;
  for (int i = 0; i < node->n_outputs; i++)
    if (node->outputs[i] >= 0 && numel_of(g, node->outputs[i]) >= VS_MAX_ELEMS) return true;
  return false;
}

/* Fills the matmul geometry of a MatMul node; false if it has too many batch axes. */
static bool batch_strides(const kiln_type *t, int mat_rank, int64_t mat_size, int nb, int64_t *strides) {
  int r = t->rank - mat_rank;
  if (r < 0) r = 0;
  if (r > nb) return false;
  int64_t s = mat_size;
  for (int i = nb - 1; i >= 0; i--) {
    int j = i - (nb - r);
    if (j < 0) {
      strides[i] = 0;
      continue;
    }
    int64_t d = t->dims[j];
    strides[i] = d == 1 ? 0 : s;
    s *= d;
  }
  return true;
}

static kiln_status_t matmul_desc(const kiln_graph *g, const kiln_node *node, vk_matmul_desc *d) {
  const kiln_type *a = &g->values[node->inputs[0]].type, *b = &g->values[node->inputs[1]].type;
  const kiln_type *y = &g->values[node->outputs[0]].type;
  int64_t m = a->rank == 1 ? 1 : a->dims[a->rank - 2], k = a->dims[a->rank - 1];
  int64_t n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
  vk_matmul_desc_init(d, m, n, k);
  int nb = y->rank - (a->rank > 1) - (b->rank > 1);
  if (nb < 0) nb = 0;
  if (nb > VK_KERNEL_MAX_BATCH) return kiln_error(KILN_UNSUPPORTED, "more than %d batch axes", VK_KERNEL_MAX_BATCH);
  d->n_batch = nb;
  for (int i = 0; i < nb; i++) d->batch[i] = y->dims[i];
  if (!batch_strides(a, a->rank > 1 ? 2 : 1, m * k, nb, d->a_batch_stride) ||
      !batch_strides(b, b->rank > 1 ? 2 : 1, k * n, nb, d->b_batch_stride))
    return kiln_error(KILN_UNSUPPORTED, "batch axes do not broadcast");
  /* A shared B (no batch axes of its own) under a dense A is one matrix
   * product with the batch folded into M: [batch..., m, k] x [k, n] is
   * [batch*m, k] x [k, n] with the same output layout. Seq-first
   * transformers' projections ([seq, 1, d] x [d, e]) would otherwise be
   * `seq` GEMVs each reading all of B. */
  bool shared_b = true, dense_a = true;
  int64_t span = m * k, rows = m;
  for (int i = nb - 1; i >= 0; i--) {
    shared_b &= d->b_batch_stride[i] == 0;
    dense_a &= d->a_batch_stride[i] == span || d->batch[i] == 1;
    span *= d->batch[i];
    rows *= d->batch[i];
  }
  if (nb && shared_b && dense_a && m > 0 && rows <= INT32_MAX) {
    d->m = rows;
    d->n_batch = 0;
    memset(d->batch, 0, sizeof d->batch);
    memset(d->a_batch_stride, 0, sizeof d->a_batch_stride);
    memset(d->b_batch_stride, 0, sizeof d->b_batch_stride);
  }
  return NULL;
}

static kiln_status_t gemm_desc(const kiln_graph *g, const kiln_node *node, vk_matmul_desc *d) {
  const kiln_type *a = &g->values[node->inputs[0]].type, *b = &g->values[node->inputs[1]].type;
  if (a->rank != 2 || b->rank != 2) return kiln_error(KILN_UNSUPPORTED, "Gemm operands must be matrices");
  bool ta = kiln_attr_int(node, "transA", 0) != 0, tb = kiln_attr_int(node, "transB", 0) != 0;
  int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1], n = tb ? b->dims[0] : b->dims[1];
  vk_matmul_desc_init(d, m, n, k);
  d->trans_a = ta;
  d->trans_b = tb;
  d->alpha = kiln_attr_float(node, "alpha", 1.0f);
  if (node->n_inputs > 2 && node->inputs[2] >= 0) {
    const kiln_type *c = &g->values[node->inputs[2]].type;
    d->has_bias = true;
    d->beta = kiln_attr_float(node, "beta", 1.0f);
    if (c->rank == 0) {
      d->bias_stride_m = d->bias_stride_n = 0;
    } else if (c->rank == 1) {
      d->bias_stride_m = 0;
      d->bias_stride_n = c->dims[0] == 1 ? 0 : 1;
    } else if (c->rank == 2) {
      d->bias_stride_m = c->dims[0] == 1 ? 0 : c->dims[1];
      d->bias_stride_n = c->dims[1] == 1 ? 0 : 1;
    } else {
      return kiln_error(KILN_UNSUPPORTED, "Gemm C of rank %d", c->rank);
    }
  }
  return NULL;
}

static kiln_status_t conv_desc(const kiln_graph *g, const kiln_node *node, vk_conv_desc *d) {
  const kiln_type *x = &g->values[node->inputs[0]].type, *w = &g->values[node->inputs[1]].type;
  int nsp = x->rank - 2;
  if (nsp < 1 || nsp > 3 || w->rank != x->rank) return kiln_error(KILN_UNSUPPORTED, "Conv of rank %d", x->rank);
  kiln_window win;
  KILN_TRY(kiln_window_init(node, nsp, x->dims + 2, w->dims + 2, true, false, &win));
  memset(d, 0, sizeof *d);
  d->n_spatial = nsp;
  d->batch = x->dims[0];
  d->in_channels = x->dims[1];
  d->out_channels = w->dims[0];
  d->group = kiln_attr_int(node, "group", 1);
  for (int i = 0; i < nsp; i++) {
    d->in[i] = x->dims[2 + i];
    d->out[i] = win.out[i];
    d->kernel[i] = win.kernel[i];
    d->stride[i] = win.stride[i];
    d->dilation[i] = win.dilation[i];
    d->pad_begin[i] = win.pad_begin[i];
  }
  d->has_bias = node->n_inputs > 2 && node->inputs[2] >= 0;
  return NULL;
}

static kiln_status_t pool_desc(const kiln_graph *g, const kiln_node *node, vk_pool_desc *d) {
  const kiln_type *x = &g->values[node->inputs[0]].type;
  int nsp = x->rank - 2;
  if (nsp < 1 || nsp > 3) return kiln_error(KILN_UNSUPPORTED, "pool of rank %d", x->rank);
  kiln_window win;
  KILN_TRY(kiln_window_init(node, nsp, x->dims + 2, NULL, true, kiln_attr_int(node, "ceil_mode", 0) != 0, &win));
  memset(d, 0, sizeof *d);
  d->kind = kiln_node_is(node, KILN_OP_MaxPool) ? VK_POOL_MAX : VK_POOL_AVG;
  d->n_spatial = nsp;
  d->batch = x->dims[0];
  d->channels = x->dims[1];
  const kiln_type *y = &g->values[node->outputs[0]].type;
  for (int i = 0; i < nsp; i++) {
    d->in[i] = x->dims[2 + i];
    d->out[i] = y->dims[2 + i];
    d->kernel[i] = win.kernel[i];
    d->stride[i] = win.stride[i];
    d->dilation[i] = win.dilation[i];
    d->pad_begin[i] = win.pad_begin[i];
    d->pad_end[i] = win.pad_end[i];
  }
  d->count_include_pad = kiln_attr_int(node, "count_include_pad", 0) != 0;
  return NULL;
}

static kiln_status_t attention_desc(const kiln_graph *g, const kiln_node *node, vk_attention_desc *d) {
  const kiln_type *q = &g->values[node->inputs[0]].type, *k = &g->values[node->inputs[1]].type;
  const kiln_type *v = &g->values[node->inputs[2]].type, *y = &g->values[node->outputs[0]].type;
  if (q->rank < 2 || k->rank < 2 || v->rank < 2) return kiln_error(KILN_UNSUPPORTED, "attention operands below rank 2");
  memset(d, 0, sizeof *d);
  d->transpose_k = kiln_attr_int(node, "transpose_k", 1) != 0;
  d->scale = kiln_attr_float(node, "scale", 1.0f);
  d->m = q->dims[q->rank - 2];
  d->d = q->dims[q->rank - 1];
  d->n = d->transpose_k ? k->dims[k->rank - 2] : k->dims[k->rank - 1];
  d->dv = v->dims[v->rank - 1];
  int nb = y->rank - 2;
  if (nb > VK_KERNEL_MAX_BATCH) return kiln_error(KILN_UNSUPPORTED, "more than %d batch axes", VK_KERNEL_MAX_BATCH);
  d->n_batch = nb;
  for (int i = 0; i < nb; i++) d->batch[i] = y->dims[i];
  if (!batch_strides(q, 2, d->m * d->d, nb, d->q_batch_stride) ||
      !batch_strides(k, 2, d->n * d->d, nb, d->k_batch_stride) ||
      !batch_strides(v, 2, d->n * d->dv, nb, d->v_batch_stride))
    return kiln_error(KILN_UNSUPPORTED, "batch axes do not broadcast");
  if (node->n_inputs > 3 && node->inputs[3] >= 0) {
    const kiln_type *mk = &g->values[node->inputs[3]].type;
    d->has_mask = true;
    int64_t mm = mk->rank >= 2 ? mk->dims[mk->rank - 2] : 1, mn = mk->rank >= 1 ? mk->dims[mk->rank - 1] : 1;
    d->mask_stride_n = mn == 1 ? 0 : 1;
    d->mask_stride_m = mm == 1 ? 0 : mn;
    if (mk->rank > 2) {
      if (!batch_strides(mk, 2, mm * mn, nb, d->mask_batch_stride))
        return kiln_error(KILN_UNSUPPORTED, "mask batch axes do not broadcast");
    }
  }
  return NULL;
}

static vs_kind contraction_kind(const kiln_node *node) {
  switch (kiln_node_op_id(node)) {
    case KILN_OP_MatMul: return VS_MATMUL;
    case KILN_OP_Gemm: return VS_GEMM;
    case KILN_OP_kiln_FusedAttention: return VS_ATTENTION;
    case KILN_OP_MaxPool: return VS_MAXPOOL;
    default: return VS_CONV;
  }
}

/* Half arithmetic in the tiled contraction (fp16 precision): on GPUs, whose
 * half FMA runs two lanes per instruction and whose shared memory the half
 * tiles halve. A CPU implementation (lavapipe) measured 1.4x slower with
 * it (fp16 1024^3 GEMM), so it keeps f32 arithmetic there. */
static bool half_arith_pays(const vk_device_props *props) {
  return props && props->type != 4 /* VK_PHYSICAL_DEVICE_TYPE_CPU */;
}

/* Generates a contraction's shader (epi may be NULL); fp16: its f32 buffers
 * hold half (KILN_PRECISION_FP16). */
static kiln_status_t gen_contraction(const vk_device_props *props, const kiln_graph *g, const kiln_node *node,
                                     const vk_epilogue *epi, bool fp16, vk_kernel_src *out) {
  switch (contraction_kind(node)) {
    case VS_MATMUL:
    case VS_GEMM: {
      vk_matmul_desc d;
      KILN_TRY(kiln_node_is(node, KILN_OP_Gemm) ? gemm_desc(g, node, &d) : matmul_desc(g, node, &d));
      d.fp16 = fp16;
      d.fp16_arith = fp16 && half_arith_pays(props);
      return vk_gen_matmul(&d, props, epi, out);
    }
    case VS_CONV: {
      vk_conv_desc d;
      KILN_TRY(conv_desc(g, node, &d));
      d.fp16 = fp16;
      d.fp16_arith = fp16 && half_arith_pays(props);
      char why[160];
      if (!vk_conv_supported(&d, props, why, sizeof why)) return kiln_error(KILN_UNSUPPORTED, "%s", why);
      return vk_gen_conv(&d, props, epi, out);
    }
    case VS_MAXPOOL: {
      vk_pool_desc d;
      KILN_TRY(pool_desc(g, node, &d));
      d.fp16 = fp16;
      return vk_gen_pool(&d, props, epi, out);
    }
    case VS_ATTENTION: {
      vk_attention_desc d;
      KILN_TRY(attention_desc(g, node, &d));
      d.fp16 = fp16;
      char why[160];
      if (!vk_attention_supported(&d, props, why, sizeof why)) return kiln_error(KILN_UNSUPPORTED, "%s", why);
      return vk_gen_attention(&d, props, epi, out);
    }
    default: return kiln_error(KILN_INTERNAL, "not a contraction");
  }
}

const char *vk_plan_unsupported(const vk_device_state *d, const kiln_graph *g, const kiln_node *node) {
  const char *why = NULL;
  kiln_op_class c = kiln_lower_class(g, node, &why);
  if (c == KILN_OPCLASS_NONE) return why ? why : "no compute definition";
  if (input_too_big(g, node)) return "a tensor of 2^31 elements or more";
  for (int i = 1; i < node->n_outputs; i++)
    if (node->outputs[i] >= 0) return "a second output is used";
  if (c == KILN_OPCLASS_CONTRACTION) {
    /* Ask the generator: it knows its limits (rank, shared memory, batch axes). */
    vk_kernel_src src = {0};
    kiln_status_t st = gen_contraction(&d->tune, g, node, NULL, false, &src);
    vk_kernel_src_free(&src);
    if (st) {
      kiln_status_free(st);
      return "the Vulkan shader generator does not take this shape";
    }
  }
  return NULL;
}

/* ---- prepare ------------------------------------------------------------------- */

static void step_free(vs_step *s) {
  free(s->args);
  kiln_loop_nest_free(&s->nest);
  kiln_fused_kernel_free(&s->fk);
  vk_kernel_src_free(&s->src);
  kiln_glsl_spec_free(&s->epi_spec);
}

void vk_plan_free(kiln_device *dev, struct kiln_executable *x) {
  if (!x) return;
  vk_context *ctx = x->ctx;
  for (int i = 0; i < x->n_segments; i++) vk_stream_destroy(ctx, x->segments[i]);
  free(x->segments);
  if (x->pre) vk_stream_destroy(ctx, x->pre);
  if (x->post) vk_stream_destroy(ctx, x->post);
  for (int i = 0; x->steps && i < x->n_steps; i++) {
    if (x->steps[i].kernel) vk_kernel_destroy(ctx, x->steps[i].kernel);
    step_free(&x->steps[i]);
  }
  free(x->steps);
  for (int v = 0; x->buf && v < x->g->n_values; v++) {
    if (!x->buf[v]) continue;
    if (x->buf_is_view[v]) vk_buffer_view_free(x->buf[v]);
    else vk_buffer_free(ctx, x->buf[v]);
  }
  free(x->buf);
  free(x->buf_is_view);
  vk_buffer_free(ctx, x->arena);
  vk_buffer_free(ctx, x->dummy);
  for (int i = 0; i < x->n_flushes; i++) {
    free(x->flushes[i].up);
    free(x->flushes[i].down);
  }
  free(x->flushes);
  for (int i = 0; i < x->n_pending; i++) free(x->pending[i].half);
  free(x->pending);
  free(x->kinds);
  free(x->alias_of);
  free(x);
}


static bool is_device_step(const vs_step *s) { return s->kind != VS_REF; }

/* A kernel's specialization constants: the generator's, then its epilogue's
 * (ids from VK_EPILOGUE_SPEC_BASE). *out owned by the caller (NULL when none). */
static kiln_status_t spec_entries(const kiln_glsl_spec *own, const kiln_glsl_spec *epi, vk_spec_const **out, int *n) {
  *out = NULL;
  *n = own->n + epi->n;
  if (!*n) return NULL;
  vk_spec_const *e = malloc((size_t)*n * sizeof *e);
  if (!e) return KILN_OOM();
  for (int i = 0; i < own->n; i++) e[i] = (vk_spec_const){(uint32_t)(own->first_id + i), (uint32_t)own->values[i]};
  for (int i = 0; i < epi->n; i++)
    e[own->n + i] = (vk_spec_const){(uint32_t)(epi->first_id + i), (uint32_t)epi->values[i]};
  *out = e;
  return NULL;
}

/* Renders a KERNEL step (lowered, scheduled) as a standalone shader. */
static kiln_status_t render_kernel(const vk_device_state *d, bool fp16, vs_step *s, int index) {
  kiln_glsl_options o = kiln_glsl_options_default();
  o.fp16 = fp16;
  o.int64 = d->props.int64;
  o.subgroup_arithmetic = d->props.subgroup_arithmetic;
  o.cooperative_rows = true;
  o.spec = &s->src.spec; /* sizes as specialization constants: one SPIR-V per kernel structure */
  kiln_strbuf src = {0};
  snprintf(s->src.name, sizeof s->src.name, "k%d_%s", index, s->node->op_type);
  kiln_status_t st = kiln_render_glsl(s->fk.b, &s->nest, s->src.name, &o, &src, s->src.groups);
  if (!st) st = kiln_strbuf_status(&src);
  if (st) {
    kiln_strbuf_free(&src);
    return st;
  }
  s->src.glsl = kiln_strbuf_take(&src);
  s->src.n_buffers = s->n_args;
  s->src.flops = (double)s->flops;
  return NULL;
}

/* Lowers and schedules group `root` into step s. */
static kiln_status_t build_group(const kiln_graph *g, const kiln_fusion *f, int root, vs_step *s) {
  KILN_TRY(kiln_fusion_build(g, f, root, true, &s->fk));
  KILN_TRY(kiln_schedule_glsl(s->fk.b, s->fk.root, 0, &s->nest));
  s->flat = s->fk.flat;
  s->elementwise_only = s->fk.elementwise_only;
  s->n_args = s->fk.n_args;
  s->args = malloc((size_t)s->n_args * sizeof(int));
  if (!s->args) return KILN_OOM();
  memcpy(s->args, s->fk.args, (size_t)s->n_args * sizeof(int));
  return NULL;
}

/* Contraction args: its data inputs, then its output. */
static kiln_status_t contraction_args(const kiln_node *node, vs_step *s) {
  s->args = malloc(((size_t)node->n_inputs + 2) * sizeof(int));
  if (!s->args) return KILN_OOM();
  s->n_args = 0;
  for (int i = 0; i < node->n_inputs; i++)
    if (node->inputs[i] >= 0) s->args[s->n_args++] = node->inputs[i];
  s->args[s->n_args++] = node->outputs[0];
  return NULL;
}

/* Fuses flat elementwise kernels into the contraction that produces their
 * operand (as on the cpu device), when the GLSL epilogue renders. */
static void fuse_epilogues(struct kiln_executable *x, const int *uses) {
  const kiln_graph *g = x->g;
  int *step_of_value = malloc(((size_t)g->n_values + 1) * sizeof(int));
  if (!step_of_value) return; /* an optimization: skip it */
  for (int v = 0; v < g->n_values; v++) step_of_value[v] = -1;
  for (int i = 0; i < x->n_steps; i++)
    for (int k = 0; k < x->steps[i].node->n_outputs; k++)
      if (x->steps[i].node->outputs[k] >= 0) step_of_value[x->steps[i].node->outputs[k]] = i;
  for (int ki = 0; ki < x->n_steps; ki++) {
    vs_step *k = &x->steps[ki];
    /* Any rank: broadcast operands (a bias per column, a scale per channel)
     * are indexed from the element's flat index in the epilogue. */
    if (k->kind != VS_KERNEL || !k->elementwise_only || k->nest.n_sites) continue;
    for (int a = 1; a < k->n_args; a++) {
      int v = k->args[a];
      int ci = step_of_value[v];
      if (ci < 0) continue;
      vs_step *c = &x->steps[ci];
      if (c->kind == VS_KERNEL || c->kind == VS_REF) continue;
      if (c->epilogue_step >= 0 || uses[v] != 1 || g->values[v].is_graph_output) continue;
      if (numel_of(g, v) != numel_of(g, k->args[0])) continue;
      bool ready = true;
      for (int b = 1; b < k->n_args && ready; b++)
        if (b != a) ready = step_of_value[k->args[b]] < ci;
      if (!ready) continue;
      /* Render the epilogue now: a load of the raw result at another index
       * cannot be fused. */
      kiln_strbuf decls = {0}, func = {0};
      int base = c->n_args;
      /* One fixed name: sources that differ only in sizes stay identical. */
      const char *fn = "ep";
      kiln_glsl_options eo = kiln_glsl_options_default();
      eo.fp16 = x->fp16; /* the epilogue's buffers and its contraction's agree */
      kiln_glsl_spec espec = {.first_id = VK_EPILOGUE_SPEC_BASE};
      eo.spec = &espec;
      kiln_status_t st = kiln_render_glsl_epilogue_opts(k->fk.b, &k->nest, fn, a, base, &eo, &decls, &func);
      if (!st && espec.oom) st = KILN_OOM();
      if (!st) st = kiln_strbuf_status(&decls);
      if (!st) st = kiln_strbuf_status(&func);
      if (!st) {
        vk_epilogue epi = {decls.data, func.data, fn, base, k->n_args};
        vk_kernel_src src = {0};
        st = gen_contraction(&x->dev->tune, g, c->node, &epi, x->fp16, &src);
        if (!st) {
          int *args = realloc(c->args, ((size_t)c->n_args + (size_t)k->n_args) * sizeof(int));
          if (!args) {
            vk_kernel_src_free(&src);
            st = KILN_OOM();
          } else {
            c->args = args;
            c->args[c->n_args - 1] = k->args[0]; /* the contraction writes the epilogue's output */
            memcpy(c->args + c->n_args, k->args, (size_t)k->n_args * sizeof(int));
            c->n_args += k->n_args;
            vk_kernel_src_free(&c->src);
            c->src = src;
            kiln_glsl_spec_free(&c->epi_spec);
            c->epi_spec = espec;
            espec = (kiln_glsl_spec){0};
            c->epilogue_step = ki;
            c->out_value = k->args[0];
            k->fused_into = ci;
            x->kinds[v] = VV_ALIAS;
            x->alias_of[v] = k->args[0];
          }
        }
      }
      kiln_strbuf_free(&decls);
      kiln_strbuf_free(&func);
      kiln_glsl_spec_free(&espec);
      if (st) {
        kiln_status_free(st);
        continue;
      }
      break;
    }
  }
  free(step_of_value);
}

static size_t value_bytes(const kiln_graph *g, int v) {
  return (size_t)numel_of(g, v) * kiln_dtype_size(g->values[v].type.dtype);
}

/* Bytes of a value on the device: f32 values are half in fp16 mode; sizes
 * round up to 4 bytes (shaders address 16-bit data through 32-bit words). */
static bool is_half(const struct kiln_executable *x, int v) {
  return x->fp16 && x->g->values[v].type.dtype == KILN_DTYPE_F32;
}

static size_t device_bytes(const struct kiln_executable *x, int v) {
  size_t b = is_half(x, v) ? (size_t)numel_of(x->g, v) * 2 : value_bytes(x->g, v);
  return (b + 3) & ~(size_t)3;
}

static bool is_arena_kind(vs_value_kind k) { return k == VV_DEVICE || k == VV_HOSTDEV; }

/* The arena: every VV_DEVICE / VV_HOSTDEV value, placed by liveness. A
 * value read back for host steps lives until the first of them runs. */
static kiln_status_t plan_memory(struct kiln_executable *x, const int *first_host_read) {
  const kiln_graph *g = x->g;
  int nv = g->n_values;
  int *buf_of = malloc(((size_t)nv + 1) * sizeof(int));
  int *value_of = malloc(((size_t)nv + 1) * sizeof(int));
  kiln_mem_buffer *bufs = calloc((size_t)nv + 1, sizeof *bufs);
  kiln_memory_plan plan = {0};
  kiln_status_t st = NULL;
  if (!buf_of || !value_of || !bufs) {
    st = KILN_OOM();
    goto out;
  }
  int64_t align = (int64_t)x->dev->props.min_storage_offset_align;
  if (align < 64) align = 64;
  int nb = 0;
  for (int v = 0; v < nv; v++) {
    buf_of[v] = -1;
    if (!is_arena_kind(x->kinds[v])) continue;
    value_of[nb] = v;
    bufs[nb] = (kiln_mem_buffer){(int64_t)device_bytes(x, v), align, -1, -1, -1};
    buf_of[v] = nb++;
  }
  for (int i = 0; i < x->n_steps; i++) {
    const vs_step *s = &x->steps[i];
    if (s->kind == VS_KERNEL && s->fused_into >= 0) continue;
    if (s->kind == VS_REF) {
      for (int k = 0; k < s->node->n_outputs; k++) {
        int v = s->node->outputs[k];
        if (v >= 0 && buf_of[v] >= 0 && bufs[buf_of[v]].first_use < 0) bufs[buf_of[v]].first_use = i;
      }
      continue;
    }
    int out = s->out_value;
    if (out >= 0 && buf_of[out] >= 0 && bufs[buf_of[out]].first_use < 0) bufs[buf_of[out]].first_use = i;
    for (int k = 0; k < s->n_args; k++) {
      int v = s->args[k];
      if (v >= 0 && v != out && buf_of[v] >= 0 && bufs[buf_of[v]].last_use < i) bufs[buf_of[v]].last_use = i;
    }
  }
  for (int v = 0; v < nv; v++)
    if (buf_of[v] >= 0 && first_host_read[v] >= 0 && bufs[buf_of[v]].last_use < first_host_read[v])
      bufs[buf_of[v]].last_use = first_host_read[v];
  /* In place: an elementwise kernel over an input of its own shape that
   * dies there (each invocation reads its element before writing it). */
  kiln_plan_step_io *io = calloc((size_t)x->n_steps + 1, sizeof *io);
  if (!io) {
    st = KILN_OOM();
    goto out;
  }
  for (int i = 0; i < x->n_steps; i++) {
    const vs_step *s = &x->steps[i];
    io[i] = (kiln_plan_step_io){s->args, s->n_args, s->kind == VS_KERNEL && s->elementwise_only && s->fused_into < 0};
  }
  kiln_memory_plan_finish_steps(g, buf_of, bufs, nb, io, x->n_steps);
  free(io);
  if ((st = kiln_memory_plan_compute(bufs, nb, &plan))) goto out;
  x->intermediate_bytes = (size_t)plan.total_size;
  x->arena_bytes = (size_t)plan.arena_size;
  if (x->arena_bytes) {
    if ((st = vk_buffer_alloc(x->ctx, VK_MEM_DEVICE, x->arena_bytes, &x->arena))) goto out;
    for (int b = 0; b < nb && !st; b++) {
      int v = value_of[b];
      if (!bufs[b].size) continue;
      st = vk_buffer_view_create(x->arena, (size_t)plan.offsets[b], (size_t)bufs[b].size, &x->buf[v]);
      if (!st) x->buf_is_view[v] = true;
    }
  }
out:
  kiln_memory_plan_free(&plan);
  free(buf_of);
  free(value_of);
  free(bufs);
  return st;
}

static vk_buffer *binding_of(struct kiln_executable *x, int v) {
  if (v < 0) return x->dummy;
  if (x->kinds[v] == VV_ALIAS) v = x->alias_of[v];
  return x->buf[v] ? x->buf[v] : x->dummy;
}

static kiln_status_t record_step(struct kiln_executable *x, vk_stream *s, const vs_step *st) {
  if (!st->kernel || st->src.groups[0] == 0) return NULL; /* empty output */
  vk_buffer *bind[96];
  if (st->n_args > 96) return kiln_error(KILN_UNSUPPORTED, "kernel with over 96 buffers");
  for (int a = 0; a < st->n_args; a++) bind[a] = binding_of(x, st->args[a]);
  return vk_stream_dispatch(s, st->kernel, bind, NULL, st->src.groups[0], st->src.groups[1], st->src.groups[2]);
}

static kiln_status_t int_list_add(int **list, int *n, int v) {
  for (int i = 0; i < *n; i++)
    if ((*list)[i] == v) return NULL;
  int *l = realloc(*list, ((size_t)*n + 1) * sizeof(int));
  if (!l) return KILN_OOM();
  l[(*n)++] = v;
  *list = l;
  return NULL;
}

/* Values a step reads: bindings other than its output (device steps), node
 * inputs (ref steps). */
static int step_inputs(const vs_step *s, int *out, int max) {
  int n = 0;
  if (s->kind == VS_REF) {
    for (int i = 0; i < s->node->n_inputs && n < max; i++)
      if (s->node->inputs[i] >= 0) out[n++] = s->node->inputs[i];
    return n;
  }
  for (int a = 0; a < s->n_args && n < max; a++)
    if (s->args[a] != s->out_value) out[n++] = s->args[a];
  return n;
}

/* Splits the steps into flushes and records each segment's stream. */
static kiln_status_t build_flushes(struct kiln_executable *x) {
  const kiln_graph *g = x->g;
  char *uploaded = calloc((size_t)g->n_values + 1, 1), *on_host = calloc((size_t)g->n_values + 1, 1);
  x->flushes = calloc((size_t)x->n_steps + 1, sizeof *x->flushes);
  x->segments = calloc((size_t)x->n_steps + 1, sizeof *x->segments);
  kiln_status_t st = (!uploaded || !on_host || !x->flushes || !x->segments) ? KILN_OOM() : NULL;
  for (int v = 0; v < g->n_values && !st; v++)
    on_host[v] = x->kinds[v] == VV_CONST || x->kinds[v] == VV_INPUT || x->kinds[v] == VV_HOST || x->kinds[v] == VV_UNUSED;
  for (int v = 0; v < g->n_values && !st; v++) on_host[v] |= g->values[v].constant != NULL;
  int i = 0;
  while (i <= x->n_steps && !st) {
    vs_flush *f = &x->flushes[x->n_flushes];
    f->segment = -1;
    int seg_begin = i;
    while (i < x->n_steps && is_device_step(&x->steps[i])) i++;
    int seg_end = i;
    bool any = false;
    for (int k = seg_begin; k < seg_end; k++) any |= !(x->steps[k].kind == VS_KERNEL && x->steps[k].fused_into >= 0);
    if (any) {
      vk_stream *s;
      if ((st = vk_stream_create(x->ctx, &s))) break;
      x->segments[x->n_segments] = s;
      f->segment = x->n_segments++;
      if ((st = vk_stream_begin(s))) break;
      for (int k = seg_begin; k < seg_end && !st; k++) {
        vs_step *sp = &x->steps[k];
        if (sp->kind == VS_KERNEL && sp->fused_into >= 0) continue;
        sp->segment = f->segment;
        int ins[128];
        int n_in = step_inputs(sp, ins, 128);
        for (int a = 0; a < n_in && !st; a++) {
          int v = ins[a];
          if (v >= 0 && (x->kinds[v] == VV_INPUT || x->kinds[v] == VV_HOSTDEV) && !uploaded[v]) {
            uploaded[v] = 1;
            st = int_list_add(&f->up, &f->n_up, v);
          }
        }
        if (!st) st = record_step(x, s, sp);
      }
      if (!st) st = vk_stream_end(s);
    }
    f->ref_begin = i;
    while (i < x->n_steps && !is_device_step(&x->steps[i])) i++;
    f->ref_end = i;
    /* Readbacks: device values the host steps read, or (at the end) the outputs. */
    for (int k = f->ref_begin; k < f->ref_end && !st; k++) {
      const kiln_node *node = x->steps[k].node;
      for (int a = 0; a < node->n_inputs && !st; a++) {
        int v = node->inputs[a];
        if (v >= 0 && !on_host[v]) {
          on_host[v] = 1;
          st = int_list_add(&f->down, &f->n_down, v);
        }
      }
      for (int a = 0; a < node->n_outputs; a++)
        if (node->outputs[a] >= 0) on_host[node->outputs[a]] = 1;
    }
    if (i >= x->n_steps)
      for (int o = 0; o < g->n_outputs && !st; o++) {
        int v = g->outputs[o];
        if (!on_host[v]) {
          on_host[v] = 1;
          st = int_list_add(&f->down, &f->n_down, v);
        }
      }
    x->n_flushes++;
    if (i >= x->n_steps) break;
  }
  free(uploaded);
  free(on_host);
  return st;
}

kiln_status_t vk_plan_prepare(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                              struct kiln_executable **out) {
  *out = NULL;
  vk_device_state *d = dev->impl;
  const char *why = NULL;
  if (kiln_fusion_needs_interpreter(g, &why))
    return kiln_error(KILN_UNSUPPORTED, "the vulkan compiler does not handle graphs with %s yet", why);
  vk_context *ctx;
  KILN_TRY(vk_device_context(d, &ctx));
  int nn = g->n_nodes, nv = g->n_values;
  /* Nodes whose group could not be rendered are left to ref; planning
   * restarts without them (rare: a dtype the GLSL dialect lacks). */
  bool *denied = calloc((size_t)nn + 1, sizeof *denied);
  if (!denied) return KILN_OOM();
  struct kiln_executable *x = NULL;
  kiln_status_t st = NULL;
  for (int attempt = 0; attempt < 16; attempt++) {
    kiln_op_class *cls = calloc((size_t)nn + 1, sizeof *cls);
    kiln_fusion fu = {0};
    int *first_host_read = malloc(((size_t)nv + 1) * sizeof(int));
    x = calloc(1, sizeof *x);
    if (!cls || !first_host_read || !x) {
      free(cls);
      free(first_host_read);
      free(x);
      free(denied);
      return KILN_OOM();
    }
    x->g = g;
    x->dev = d;
    x->ctx = ctx;
    x->fp16 = opts && opts->fp16 && d->props.fp16;
    x->kinds = calloc((size_t)nv + 1, sizeof *x->kinds);
    x->buf = calloc((size_t)nv + 1, sizeof *x->buf);
    x->buf_is_view = calloc((size_t)nv + 1, sizeof *x->buf_is_view);
    x->alias_of = calloc((size_t)nv + 1, sizeof *x->alias_of);
    x->steps = calloc((size_t)nn + 1, sizeof *x->steps);
    if (!x->kinds || !x->buf || !x->buf_is_view || !x->alias_of || !x->steps) st = KILN_OOM();
    for (int n = 0; n < nn && !st; n++)
      cls[n] = denied[n] || vk_plan_unsupported(d, g, &g->nodes[n]) ? KILN_OPCLASS_NONE
                                                                     : kiln_lower_class(g, &g->nodes[n], NULL);
    if (!st) st = kiln_fusion_plan(g, cls, &fu);
    int retry_root = -1;
    /* Steps in node order: one per group root, contraction or ref node. */
    for (int n = 0; n < nn && !st; n++) {
      const kiln_node *node = &g->nodes[n];
      vs_step *s = &x->steps[x->n_steps];
      s->node = node;
      s->flops = kiln_node_flops(g, node);
      s->out_value = node->outputs[0];
      s->epilogue_step = s->fused_into = s->segment = -1;
      if (cls[n] == KILN_OPCLASS_NONE) {
        s->kind = VS_REF;
        snprintf(s->name, sizeof s->name, "ref:%s", node->op_type);
        x->n_ref++;
        x->n_steps++;
        continue;
      }
      if (cls[n] == KILN_OPCLASS_CONTRACTION) {
        s->kind = contraction_kind(node);
        snprintf(s->name, sizeof s->name, "%s", node->op_type);
        st = contraction_args(node, s);
        if (!st) st = gen_contraction(&d->tune, g, node, NULL, x->fp16, &s->src);
        if (!st) snprintf(s->src.name, sizeof s->src.name, "c%d_%s", x->n_steps, node->op_type);
        x->n_contract++;
        x->n_steps++;
        continue;
      }
      if (fu.group_of[n] != n) continue; /* inlined into a later kernel */
      s->kind = VS_KERNEL;
      s->n_fused = fu.n_members[n];
      snprintf(s->name, sizeof s->name, "%s%s", node->op_type, s->n_fused > 1 ? "+fused" : "");
      for (int k = 0; k < n; k++)
        if (fu.group_of[k] == n) s->flops += kiln_node_flops(g, &g->nodes[k]);
      st = build_group(g, &fu, n, s);
      if (!st) st = render_kernel(d, x->fp16, s, x->n_steps);
      if (st && kiln_status_code_of(st) == KILN_UNSUPPORTED) retry_root = n;
      x->n_kernels++;
      x->n_fused_nodes += s->n_fused;
      x->n_steps++;
    }
    if (retry_root >= 0) {
      for (int k = 0; k < nn; k++)
        if (fu.group_of[k] == retry_root) denied[k] = true;
      kiln_status_free(st);
      st = NULL;
      kiln_fusion_free(&fu);
      free(cls);
      free(first_host_read);
      vk_plan_free(dev, x);
      x = NULL;
      continue;
    }
    /* Value kinds. */
    for (int v = 0; v < nv && !st; v++) x->kinds[v] = VV_UNUSED;
    for (int i = 0; i < x->n_steps && !st; i++) {
      vs_step *s = &x->steps[i];
      if (s->kind == VS_REF) {
        for (int k = 0; k < s->node->n_outputs; k++)
          if (s->node->outputs[k] >= 0) x->kinds[s->node->outputs[k]] = VV_HOST;
      } else {
        x->kinds[s->out_value] = VV_DEVICE;
      }
    }
    for (int i = 0; i < x->n_steps && !st; i++) {
      vs_step *s = &x->steps[i];
      if (s->kind == VS_REF) continue;
      int ins[128];
      int n_in = step_inputs(s, ins, 128);
      for (int a = 0; a < n_in; a++) {
        int v = ins[a];
        if (v < 0) continue;
        bool is_input = false;
        for (int k = 0; k < g->n_inputs; k++) is_input |= g->inputs[k] == v;
        if (is_input) x->kinds[v] = VV_INPUT;
        else if (g->values[v].constant) x->kinds[v] = VV_CONST;
        else if (x->kinds[v] == VV_HOST) x->kinds[v] = VV_HOSTDEV;
      }
    }
    if (!st) fuse_epilogues(x, fu.uses);
    /* First host step reading each value (readbacks keep it alive till then). */
    for (int v = 0; v < nv; v++) first_host_read[v] = -1;
    for (int i = x->n_steps - 1; i >= 0 && !st; i--) {
      const vs_step *s = &x->steps[i];
      if (s->kind != VS_REF) continue;
      for (int k = 0; k < s->node->n_inputs; k++)
        if (s->node->inputs[k] >= 0) first_host_read[s->node->inputs[k]] = i;
    }
    /* Compile every shader in one batch. */
    if (!st) {
      vk_kernel_desc *descs = calloc((size_t)x->n_steps + 1, sizeof *descs);
      vk_kernel **kernels = calloc((size_t)x->n_steps + 1, sizeof *kernels);
      int *step_of = calloc((size_t)x->n_steps + 1, sizeof *step_of);
      vk_spec_const **specs = calloc((size_t)x->n_steps + 1, sizeof *specs);
      int nk = 0;
      if (!descs || !kernels || !step_of || !specs) st = KILN_OOM();
      for (int i = 0; i < x->n_steps && !st; i++) {
        vs_step *s = &x->steps[i];
        if (s->kind == VS_REF || (s->kind == VS_KERNEL && s->fused_into >= 0) || !s->src.glsl) continue;
        if (s->src.groups[0] == 0) continue; /* empty output: nothing to run */
        descs[nk] = (vk_kernel_desc){s->src.name, s->src.glsl, s->src.n_buffers, s->src.push_bytes};
        st = spec_entries(&s->src.spec, &s->epi_spec, &specs[nk], &descs[nk].n_spec);
        descs[nk].spec = specs[nk];
        step_of[nk++] = i;
      }
      vk_pipeline_stats before, after;
      vk_pipeline_stats_get(ctx, &before);
      if (!st && nk) st = vk_kernel_create_batch(ctx, descs, nk, kernels);
      vk_pipeline_stats_get(ctx, &after);
      x->n_shader_kernels = nk;
      x->spirv_compiled = after.spirv_compiled - before.spirv_compiled;
      x->spirv_cached = after.spirv_cached - before.spirv_cached;
      /* The batch hashed every source once: each distinct one was compiled or read from the cache. */
      x->n_shader_sources = (int)(x->spirv_compiled + x->spirv_cached);
      x->shader_s = (after.spirv_s - before.spirv_s) + (after.pipeline_s - before.pipeline_s);
      for (int k = 0; k < nk; k++) x->steps[step_of[k]].kernel = kernels[k];
      for (int k = 0; specs && k < nk; k++) free(specs[k]);
      free(specs);
      free(descs);
      free(kernels);
      free(step_of);
    }
    /* Buffers: weights uploaded once, graph inputs, the arena. */
    if (!st) st = vk_buffer_alloc(ctx, VK_MEM_DEVICE, 256, &x->dummy);
    vk_stream *up = NULL;
    if (!st) st = vk_stream_create(ctx, &up);
    if (!st) st = vk_stream_begin(up);
    for (int v = 0; v < nv && !st; v++) {
      if (x->kinds[v] != VV_CONST && x->kinds[v] != VV_INPUT) continue;
      size_t bytes = device_bytes(x, v);
      if (!value_bytes(g, v)) continue;
      st = vk_buffer_alloc(ctx, VK_MEM_DEVICE, bytes, &x->buf[v]);
      if (!st && x->kinds[v] == VV_CONST) {
        x->weight_bytes += bytes;
        st = upload_value(x, up, v, g->values[v].constant->data);
      }
    }
    if (!st) st = vk_stream_end(up);
    uint64_t done_value = 0;
    if (!st) st = vk_submit(ctx, &up, 1, &done_value);
    if (!st) st = vk_wait(ctx, done_value);
    if (up) vk_stream_destroy(ctx, up);
    if (!st) st = plan_memory(x, first_host_read);
    if (!st) st = vk_stream_create(ctx, &x->pre);
    if (!st) st = vk_stream_create(ctx, &x->post);
    if (!st) st = build_flushes(x);
    /* The lowered groups are no longer needed. */
    for (int i = 0; i < x->n_steps; i++) {
      kiln_loop_nest_free(&x->steps[i].nest);
      kiln_fused_kernel_free(&x->steps[i].fk);
      free(x->steps[i].src.glsl);
      x->steps[i].src.glsl = NULL;
    }
    kiln_fusion_free(&fu);
    free(cls);
    free(first_host_read);
    break;
  }
  free(denied);
  if (st) {
    vk_plan_free(dev, x);
    return st;
  }
  *out = x;
  return NULL;
}

/* ---- execute ------------------------------------------------------------------- */

static kiln_status_t host_value_of(struct kiln_executable *x, int v, kiln_value **host, kiln_value **owned,
                                   kiln_value **out) {
  if (host[v]) {
    *out = host[v];
    return NULL;
  }
  const kiln_tensor *c = x->g->values[v].constant;
  if (!c) return kiln_error(KILN_INTERNAL, "value '%s' is not on the host", x->g->values[v].name);
  const kiln_type *t = &x->g->values[v].type;
  kiln_tensor *tt;
  KILN_TRY(kiln_tensor_wrap(t->dtype, t->rank, t->dims, c->data, NULL, &tt));
  KILN_TRY(kiln_value_from_tensor(tt, owned));
  *out = *owned;
  return NULL;
}

/* Records the upload of value v's host data (converted to half in fp16 mode;
 * the ring copies the bytes at once, so the temporary goes right away). */
static kiln_status_t upload_value(struct kiln_executable *x, vk_stream *s, int v, const void *src) {
  size_t bytes = value_bytes(x->g, v);
  if (!bytes) return NULL;
  if (!is_half(x, v)) return vk_stream_upload(s, binding_of(x, v), 0, src, bytes);
  int64_t n = numel_of(x->g, v);
  size_t hb = device_bytes(x, v);
  uint16_t *half = calloc(1, hb);
  if (!half) return KILN_OOM();
  const float *f = src;
  for (int64_t i = 0; i < n; i++) half[i] = kiln_f32_to_f16(f[i]);
  kiln_status_t st = vk_stream_upload(s, binding_of(x, v), 0, half, hb);
  free(half);
  return st;
}

/* Records the uploads of `ups` into s. */
static kiln_status_t record_uploads(struct kiln_executable *x, vk_stream *s, const int *ups, int n,
                                    kiln_value *const *inputs_by_value) {
  for (int i = 0; i < n; i++) {
    int v = ups[i];
    size_t bytes = value_bytes(x->g, v);
    if (!bytes) continue;
    const kiln_value *hv = inputs_by_value[v];
    const void *src = hv && hv->kind == KILN_VALUE_TENSOR ? hv->tensor->data
                      : x->g->values[v].constant ? x->g->values[v].constant->data
                                                  : NULL;
    if (!src) return kiln_error(KILN_INTERNAL, "no host data to upload for value '%s'", x->g->values[v].name);
    KILN_TRY(upload_value(x, s, v, src));
  }
  return NULL;
}

/* Records readbacks of `downs` into fresh host tensors (host[v]). */
static kiln_status_t record_readbacks(struct kiln_executable *x, vk_stream *s, const int *downs, int n,
                                      kiln_value **host) {
  for (int i = 0; i < n; i++) {
    int v = downs[i];
    const kiln_type *t = &x->g->values[v].type;
    kiln_tensor *tt;
    KILN_TRY(kiln_tensor_new_uninit(t->dtype, t->rank, t->dims, &tt));
    kiln_value_free(host[v]);
    host[v] = NULL;
    KILN_TRY(kiln_value_from_tensor(tt, &host[v]));
    size_t bytes = kiln_tensor_nbytes(tt);
    if (!bytes) continue;
    if (!is_half(x, v)) {
      KILN_TRY(vk_stream_readback(s, tt->data, binding_of(x, v), 0, bytes));
      continue;
    }
    if (x->n_pending == x->cap_pending) {
      int cap = x->cap_pending ? 2 * x->cap_pending : 16;
      struct vs_pending *p = realloc(x->pending, (size_t)cap * sizeof *p);
      if (!p) return KILN_OOM();
      x->pending = p;
      x->cap_pending = cap;
    }
    size_t hb = device_bytes(x, v);
    uint16_t *half = malloc(hb);
    if (!half) return KILN_OOM();
    x->pending[x->n_pending++] = (struct vs_pending){half, tt->data, tt->numel};
    KILN_TRY(vk_stream_readback(s, half, binding_of(x, v), 0, hb));
  }
  return NULL;
}

static kiln_status_t run_ref(struct kiln_executable *x, const vs_step *s, kiln_value **host) {
  const kiln_node *node = s->node;
  kiln_value *ins[64] = {0}, *owned[64] = {0}, *outs[64] = {0};
  kiln_status_t st = NULL;
  for (int i = 0; i < node->n_inputs && i < 64 && !st; i++)
    if (node->inputs[i] >= 0) st = host_value_of(x, node->inputs[i], host, &owned[i], &ins[i]);
  if (!st) st = kiln_run_ref_node(x->g, node, ins, outs);
  for (int i = 0; i < node->n_outputs && i < 64 && !st; i++) {
    int v = node->outputs[i];
    if (v < 0) continue;
    kiln_value_free(host[v]);
    host[v] = outs[i];
    outs[i] = NULL;
  }
  for (int i = 0; i < 64; i++) {
    kiln_value_free(owned[i]);
    kiln_value_free(outs[i]);
  }
  return st;
}

static kiln_status_t submit_and_wait(struct kiln_executable *x, vk_stream *const *streams, int n) {
  if (!n) return NULL;
  uint64_t value;
  KILN_TRY(vk_submit(x->ctx, streams, n, &value));
  x->last_submissions++;
  x->last_command_buffers += n;
  for (int i = 0; i < n; i++) x->last_dispatches += vk_stream_dispatch_count(streams[i]);
  kiln_status_t st = vk_wait(x->ctx, value);
  if (st) vk_cancel_readbacks(x->ctx, value); /* the host tensors they target are freed on this error path */
  for (int i = 0; i < x->n_pending; i++) {
    struct vs_pending *p = &x->pending[i];
    if (!st)
      for (int64_t k = 0; k < p->n; k++) p->dst[k] = kiln_f16_to_f32(p->half[k]);
    free(p->half);
  }
  x->n_pending = 0;
  return st;
}

/* One submission per step, each output read back and observed: what
 * `kiln verify` and profilers need (values are read before the arena
 * reuses their bytes). */
static kiln_status_t execute_stepwise(struct kiln_executable *x, kiln_value **host, char *uploaded,
                                      const kiln_step_observer *observe) {
  const kiln_graph *g = x->g;
  kiln_status_t st = NULL;
  for (int i = 0; i < x->n_steps && !st; i++) {
    const vs_step *s = &x->steps[i];
    if (s->kind == VS_KERNEL && s->fused_into >= 0) continue;
    if (observe->before) observe->before(observe->user, g, s->node);
    const kiln_node *shown = s->epilogue_step >= 0 ? x->steps[s->epilogue_step].node : s->node;
    if (s->kind == VS_REF) {
      st = run_ref(x, s, host);
    } else {
      int ins[128];
      int n_in = step_inputs(s, ins, 128);
      st = vk_stream_begin(x->pre);
      for (int a = 0; a < n_in && !st; a++) {
        int v = ins[a];
        if (v < 0 || uploaded[v] || (x->kinds[v] != VV_INPUT && x->kinds[v] != VV_HOSTDEV)) continue;
        uploaded[v] = 1;
        st = record_uploads(x, x->pre, &v, 1, host);
      }
      if (!st) st = record_step(x, x->pre, s);
      if (!st) st = record_readbacks(x, x->pre, &s->out_value, 1, host);
      if (!st) st = vk_stream_end(x->pre);
      if (!st) st = submit_and_wait(x, &x->pre, 1);
    }
    if (st) {
      st = kiln_status_annotate(st, "node '%s' (%s)", s->node->name, s->node->op_type);
      break;
    }
    if (observe->after) {
      kiln_value *vals[64] = {0};
      for (int k = 0; k < shown->n_outputs && k < 64; k++)
        if (shown->outputs[k] >= 0) vals[k] = host[shown->outputs[k]];
      st = observe->after(observe->user, g, shown, vals);
    }
  }
  return st;
}

kiln_status_t vk_plan_execute(kiln_device *dev, struct kiln_executable *x, kiln_value *const *inputs, int n_outputs,
                              kiln_value **outs, const kiln_step_observer *observe) {
  const kiln_graph *g = x->g;
  int nv = g->n_values;
  kiln_value **host = calloc((size_t)nv + 1, sizeof *host);
  char *uploaded = calloc((size_t)nv + 1, 1);
  kiln_status_t st = (!host || !uploaded) ? KILN_OOM() : NULL;
  x->last_submissions = x->last_command_buffers = x->last_dispatches = 0;
  for (int k = 0; k < g->n_inputs && !st; k++)
    if (inputs[k]) st = kiln_value_share(inputs[k], &host[g->inputs[k]]);
  if (!st && observe) {
    st = execute_stepwise(x, host, uploaded, observe);
  } else {
    for (int f = 0; f < x->n_flushes && !st; f++) {
      const vs_flush *fl = &x->flushes[f];
      vk_stream *streams[3];
      int n = 0;
      if (fl->n_up) {
        st = vk_stream_begin(x->pre);
        if (!st) st = record_uploads(x, x->pre, fl->up, fl->n_up, host);
        if (!st) st = vk_stream_end(x->pre);
        streams[n++] = x->pre;
      }
      if (fl->segment >= 0) streams[n++] = x->segments[fl->segment];
      if (!st && fl->n_down) {
        st = vk_stream_begin(x->post);
        if (!st) st = record_readbacks(x, x->post, fl->down, fl->n_down, host);
        if (!st) st = vk_stream_end(x->post);
        streams[n++] = x->post;
      }
      if (!st) st = submit_and_wait(x, streams, n);
      for (int i = fl->ref_begin; i < fl->ref_end && !st; i++) {
        st = run_ref(x, &x->steps[i], host);
        if (st) st = kiln_status_annotate(st, "node '%s' (%s)", x->steps[i].node->name, x->steps[i].node->op_type);
      }
    }
  }
  for (int i = 0; i < n_outputs && !st; i++) {
    int id = g->outputs[i];
    kiln_value *owned = NULL, *hv = NULL;
    st = host_value_of(x, id, host, &owned, &hv);
    if (!st && owned) { /* a constant output: copy it out of the model */
      kiln_tensor *ot;
      const kiln_tensor *c = owned->tensor;
      st = kiln_tensor_new_uninit(c->dtype, c->rank, c->dims, &ot);
      if (!st) {
        if (ot->numel) memcpy(ot->data, c->data, kiln_tensor_nbytes(ot));
        st = kiln_value_from_tensor(ot, &outs[i]);
      }
    } else if (!st) {
      st = kiln_value_share(hv, &outs[i]);
    }
    kiln_value_free(owned);
    if (st)
      for (int k = 0; k < i; k++) {
        kiln_value_free(outs[k]);
        outs[k] = NULL;
      }
  }
  for (int i = 0; host && i < nv; i++) kiln_value_free(host[i]);
  free(host);
  free(uploaded);
  return st;
}

/* ---- describe -------------------------------------------------------------------- */

void vk_plan_describe(kiln_device *dev, const struct kiln_executable *x, FILE *out) {
  const kiln_graph *g = x->g;
  int n_epi = 0;
  for (int i = 0; i < x->n_steps; i++) n_epi += x->steps[i].kind == VS_KERNEL && x->steps[i].fused_into >= 0;
  fprintf(out,
          "compiled for %s: %d nodes after optimization -> %d generated GLSL kernels (fusing %d nodes; %d of them run "
          "as epilogues), %d hand-scheduled kernels (MatMul/Gemm/Conv/pool/attention), %d nodes on ref\n",
          x->dev->name, g->n_nodes, x->n_kernels, x->n_fused_nodes, n_epi, x->n_contract, x->n_ref);
  fprintf(out,
          "shaders: %d kernels from %d distinct sources (sizes are specialization constants); at prepare %llu SPIR-V "
          "modules compiled, %llu from the cache, %.2f s compiling and creating pipelines\n",
          x->n_shader_kernels, x->n_shader_sources, (unsigned long long)x->spirv_compiled,
          (unsigned long long)x->spirv_cached, x->shader_s);
  fprintf(out, "recorded: %d command buffer%s, %d submission%s per run\n", x->n_segments, x->n_segments == 1 ? "" : "s",
          x->n_flushes, x->n_flushes == 1 ? "" : "s");
  if (x->n_ref) {
    fprintf(out, "fell back to ref:\n");
    for (int i = 0; i < x->n_steps; i++) {
      const vs_step *s = &x->steps[i];
      if (s->kind != VS_REF) continue;
      const char *why = vk_plan_unsupported(x->dev, g, s->node);
      fprintf(out, "  %-24s %-28s %s\n", s->node->op_type, s->node->name, why ? why : "its fused group did not render");
    }
  }
  fprintf(out, "memory: intermediates %.2f MiB in total, planned device arena %.2f MiB (%.1f%%); weights %.2f MiB\n",
          (double)x->intermediate_bytes / (1 << 20), (double)x->arena_bytes / (1 << 20),
          x->intermediate_bytes ? 100.0 * (double)x->arena_bytes / (double)x->intermediate_bytes : 0.0,
          (double)x->weight_bytes / (1 << 20));
}

void vk_plan_run_stats(kiln_device *dev, const struct kiln_executable *x, FILE *out) {
  fprintf(out, "%s: last run: %d queue submission%s, %d command buffer%s, %d dispatches\n", x->dev->name,
          x->last_submissions, x->last_submissions == 1 ? "" : "s", x->last_command_buffers,
          x->last_command_buffers == 1 ? "" : "s", x->last_dispatches);
}

#endif
