/* The Vulkan device's plan hooks (see vk_plan.h): claims, GLSL kernels,
 * hand-scheduled contraction shaders with fused epilogues, pipelines,
 * bindings, recorded segments. */
#if KILN_HAVE_VULKAN

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "codegen/fusion.h"
#include "codegen/loopnest.h"
#include "devices/vulkan/vk_kernels.h"
#include "devices/vulkan/vk_plan.h"
#include "ops/window.h"
#include "runtime/plan.h"
#include "tensor/dtype.h"

typedef enum vs_kind {
  VS_KERNEL,    /* a generated, fused kernel (GLSL from codegen) */
  VS_MATMUL,    /* hand-scheduled shaders (vk_kernels.c) */
  VS_GEMM,
  VS_CONV,
  VS_MAXPOOL,
  VS_ATTENTION,
  VS_HOST,      /* a host step (the plan runs it) */
} vs_kind;

/* The device's compiled form of plan step i (vk_plan_state.steps[i]). */
typedef struct vs_step {
  vs_kind kind;
  kiln_loop_nest nest;     /* KERNEL: its GPU schedule */
  vk_kernel_src src;       /* generated shader; owned */
  kiln_glsl_spec epi_spec; /* contractions with an epilogue: its specialization constants; owned */
  vk_kernel *kernel;       /* owned */
} vs_step;

/* One plan's device state. */
typedef struct vk_plan_state {
  vk_device_state *dev;   /* borrowed */
  vk_context *ctx;        /* borrowed from dev */
  const kiln_graph *g;    /* borrowed */
  bool fp16;              /* f32 values live on the device as IEEE half (KILN_PRECISION_FP16) */
  bool contractions_as_kernels; /* KILN_VULKAN_CONTRACTIONS=te: contractions as the shared templates, not vk_kernels */
  vs_step *steps;         /* one per plan step (allocated for every node); owned */
  int n_steps;
  bool *denied;           /* per node: its group did not render; the plan is rebuilt without it */
  bool retry;             /* a node was denied since the last build */
  vk_buffer **view;       /* per value id: the view bound for it; owned */
  vk_buffer *dummy;       /* bound where a tensor is empty; owned */
  vk_stream **recorded;   /* per flush: its recorded segment, or NULL; owned */
  int n_recorded;
  /* Shaders of this plan (`kiln info`): kernels, distinct sources, and what
   * the context's compiler did during prepare (other sessions preparing at
   * the same time count too). */
  int n_shader_kernels, n_shader_sources;
  uint64_t spirv_compiled, spirv_cached;
  double shader_s;
  uint64_t run0_submits, run0_command_buffers, run0_dispatches; /* the device's counters when the last run began */
} vk_plan_state;

/* ---- claims ------------------------------------------------------------------ */

static int64_t numel_of(const kiln_graph *g, int v) { return kiln_type_numel(&g->values[v].type); }


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

int64_t vk_max_loop_trips(const vk_device_props *p) {
  /* llvmpipe (lavapipe) ends every loop of a shader invocation after
   * 65535 iterations, counted over the whole invocation and with no error
   * (gallivm's loop limiter): a reduction of 100000 elements by one thread
   * came back short. */
  return strstr(p->name, "llvmpipe") ? 65535 : 0;
}

bool vk_contractions_as_kernels(void) {
  const char *cc = getenv("KILN_VULKAN_CONTRACTIONS");
  return cc && !strcmp(cc, "te");
}

const char *vk_plan_unsupported(const vk_device_state *d, const kiln_graph *g, const kiln_node *node,
                                bool contractions_as_kernels) {
  const char *why = NULL;
  kiln_op_class c = kiln_lower_class(g, node, &why);
  if (c == KILN_OPCLASS_NONE) return why ? why : "no compute definition";
  if (input_too_big(g, node)) return "a tensor of 2^31 elements or more";
  for (int i = 1; i < node->n_outputs; i++)
    if (node->outputs[i] >= 0) return "a second output is used";
  if (c == KILN_OPCLASS_CONTRACTION && !contractions_as_kernels) {
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

/* ---- plan hooks ----------------------------------------------------------------- */

static void step_reset(vk_plan_state *x, vs_step *s) {
  if (s->kernel) vk_kernel_destroy(x->ctx, s->kernel);
  kiln_loop_nest_free(&s->nest);
  vk_kernel_src_free(&s->src);
  kiln_glsl_spec_free(&s->epi_spec);
  memset(s, 0, sizeof *s);
}

static kiln_op_class vk_claim(void *user, const kiln_graph *g, const kiln_node *node, const char **why) {
  vk_plan_state *x = user;
  if (x->denied[node - g->nodes]) {
    if (why) *why = "its fused group did not render";
    return KILN_OPCLASS_NONE;
  }
  const char *no = vk_plan_unsupported(x->dev, g, node, x->contractions_as_kernels);
  if (no) {
    if (why) *why = no;
    return KILN_OPCLASS_NONE;
  }
  return kiln_lower_class(g, node, why);
}

/* Schedules a KERNEL step for the GPU and renders it as a standalone shader.
 * A group the GLSL dialect cannot express (a dtype it lacks) is denied: the
 * plan is rebuilt with its nodes on ref. */
static kiln_status_t vk_schedule(void *user, kiln_plan *p, int i) {
  vk_plan_state *x = user;
  kiln_plan_step *ps = &p->steps[i];
  vs_step *s = &x->steps[i];
  s->kind = VS_KERNEL;
  kiln_status_t st = kiln_schedule_glsl(ps->fk.b, ps->fk.root, 0, &s->nest);
  kiln_glsl_options o = kiln_glsl_options_default();
  /* Contractions as kernels: the shared contraction template in groups of
   * 64, enough of them for a few per compute unit; on a CPU
   * implementation (lavapipe) groups of 32 with big register blocks,
   * two per core (MobileNetV2 on lavapipe: 2518 ms in groups of 64, 32
   * groups at least; 1087 ms in groups of 32, 4 at least, 2 cores); row
   * reductions: one workgroup of the default size per row. */
  if (!st && x->contractions_as_kernels) {
    bool cpu = x->dev->tune.type == 4; /* VK_PHYSICAL_DEVICE_TYPE_CPU */
    long cores = cpu ? sysconf(_SC_NPROCESSORS_ONLN) : 0;
    kiln_schedule_contraction_tiles(&s->nest, cpu ? 32 : 64, cpu ? (int)KILN_MAX(2 * cores, 2) : VK_TILE_MIN_GROUPS);
  }
  o.max_loop_trips = vk_max_loop_trips(&x->dev->props);
  if (!st)
    st = kiln_schedule_cooperative_rows(ps->fk.b, &s->nest, (int)o.workgroup_size, (int)o.workgroup_size,
                                        x->dev->props.subgroup_arithmetic, o.max_loop_trips);
  /* One thread per row with a short innermost loop (attention's head dim):
   * that loop jammed, so the row's scores are computed once. */
  if (!st) st = kiln_schedule_jam_inner(ps->fk.b, &s->nest, KILN_MAX_JAM);
  o.fp16 = x->fp16;
  o.int64 = x->dev->props.int64;
  o.spec = &s->src.spec; /* sizes as specialization constants: one SPIR-V per kernel structure */
  kiln_strbuf src = {0};
  snprintf(s->src.name, sizeof s->src.name, "k%d_%s", i, ps->node->op_type);
  if (!st) st = kiln_render_glsl(ps->fk.b, &s->nest, s->src.name, &o, &src, s->src.groups);
  if (!st) st = kiln_strbuf_status(&src);
  if (st) {
    kiln_strbuf_free(&src);
    if (kiln_status_code_of(st) == KILN_UNSUPPORTED) {
      int root = (int)(ps->node - p->g->nodes);
      for (int k = 0; k < p->g->n_nodes; k++)
        if (p->fusion.group_of[k] == root) x->denied[k] = true;
      x->retry = true;
    }
    return st;
  }
  s->src.glsl = kiln_strbuf_take(&src);
  s->src.n_buffers = ps->n_args;
  s->src.flops = (double)ps->flops;
  return NULL;
}

static bool vk_retry(void *user) {
  vk_plan_state *x = user;
  bool r = x->retry;
  x->retry = false;
  for (int i = 0; r && i <= x->g->n_nodes; i++) step_reset(x, &x->steps[i]);
  return r;
}

/* Fuses flat elementwise kernels into the contraction that produces their
 * operand (as on the cpu device), when the GLSL epilogue renders and the
 * contraction's generator takes it. Any rank: broadcast operands (a bias
 * per column, a scale per channel) are indexed from the element's flat
 * index in the epilogue. */
static kiln_status_t vk_fuse_epilogues(void *user, kiln_plan *p) {
  vk_plan_state *x = user;
  for (int ki = 0; ki < p->n_steps; ki++) {
    const kiln_plan_step *k = &p->steps[ki];
    if (k->kind != KILN_STEP_KERNEL || !k->elementwise_only || x->steps[ki].nest.n_sites) continue;
    int cs[8], as[8];
    int n = kiln_plan_epilogue_candidates(p, ki, cs, as, 8);
    for (int j = 0; j < n; j++) {
      int ci = cs[j], a = as[j];
      const kiln_plan_step *c = &p->steps[ci];
      kiln_strbuf decls = {0}, func = {0};
      int base = c->n_args;
      const char *fn = "ep"; /* one fixed name: sources that differ only in sizes stay identical */
      kiln_glsl_options eo = kiln_glsl_options_default();
      eo.fp16 = x->fp16; /* the epilogue's buffers and its contraction's agree */
      kiln_glsl_spec espec = {.first_id = VK_EPILOGUE_SPEC_BASE};
      eo.spec = &espec;
      kiln_status_t st = kiln_render_glsl_epilogue_opts(k->fk.b, &x->steps[ki].nest, fn, a, base, &eo, &decls, &func);
      if (!st && espec.oom) st = KILN_OOM();
      if (!st) st = kiln_strbuf_status(&decls);
      if (!st) st = kiln_strbuf_status(&func);
      vk_kernel_src src = {0};
      if (!st) {
        vk_epilogue epi = {decls.data, func.data, fn, base, k->n_args};
        st = gen_contraction(&x->dev->tune, p->g, c->node, &epi, x->fp16, &src);
      }
      kiln_strbuf_free(&decls);
      kiln_strbuf_free(&func);
      if (st) { /* an optimization: this candidate does not fuse */
        kiln_status_free(st);
        kiln_glsl_spec_free(&espec);
        vk_kernel_src_free(&src);
        continue;
      }
      vs_step *cs_ = &x->steps[ci];
      vk_kernel_src_free(&cs_->src);
      cs_->src = src;
      kiln_glsl_spec_free(&cs_->epi_spec);
      cs_->epi_spec = espec;
      KILN_TRY(kiln_plan_fuse_epilogue(p, ci, ki, a));
      break;
    }
  }
  return NULL;
}

void vk_plan_end(kiln_device *dev, void *state, kiln_plan *p);

kiln_status_t vk_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                   kiln_plan_target *out_target, void **out_state) {
  *out_state = NULL;
  vk_device_state *d = dev->impl;
  vk_context *ctx;
  KILN_TRY(vk_device_context(d, &ctx));
  vk_plan_state *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->dev = d;
  x->ctx = ctx;
  x->g = g;
  x->fp16 = opts && opts->fp16 && d->props.fp16;
  x->contractions_as_kernels = vk_contractions_as_kernels();
  x->steps = calloc((size_t)g->n_nodes + 1, sizeof *x->steps);
  x->denied = calloc((size_t)g->n_nodes + 1, sizeof *x->denied);
  x->view = calloc((size_t)g->n_values + 1, sizeof *x->view);
  if (!x->steps || !x->denied || !x->view) {
    vk_plan_end(dev, x, NULL);
    return KILN_OOM();
  }
  int64_t align = (int64_t)d->props.min_storage_offset_align;
  *out_target = (kiln_plan_target){
      .dev = dev,
      .host_memory = false,
      .alignment = align > 64 ? align : 64,
      .f32_as_half = x->fp16,
      .size_rounding = 4, /* shaders address 16-bit data through 32-bit words */
      .contractions_as_kernels = x->contractions_as_kernels,
      .claim = vk_claim,
      .schedule = vk_schedule,
      .fuse_epilogues = vk_fuse_epilogues,
      .retry = vk_retry,
      .user = x,
  };
  *out_state = x;
  return NULL;
}

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

static bool runs_on_device(const kiln_plan_step *ps, const vs_step *s) {
  return ps->kind != KILN_STEP_HOST && ps->fused_into < 0 && s->src.glsl && s->src.groups[0] != 0;
}

/* Contraction shaders not fused with an epilogue, then every shader in one
 * batch; the bound views of every value a device step reads or writes. */
kiln_status_t vk_plan_compile(kiln_device *dev, void *state, kiln_plan *p, const kiln_plan_bindings *bind) {
  vk_plan_state *x = state;
  const kiln_graph *g = p->g;
  x->n_steps = p->n_steps;
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *ps = &p->steps[i];
    vs_step *s = &x->steps[i];
    if (ps->kind == KILN_STEP_HOST) s->kind = VS_HOST;
    if (ps->kind != KILN_STEP_CONTRACTION) continue;
    s->kind = contraction_kind(ps->node);
    if (!s->src.glsl) KILN_TRY(gen_contraction(&x->dev->tune, g, ps->node, NULL, x->fp16, &s->src));
    snprintf(s->src.name, sizeof s->src.name, "c%d_%s", i, ps->node->op_type);
  }
  vk_kernel_desc *descs = calloc((size_t)p->n_steps + 1, sizeof *descs);
  vk_kernel **kernels = calloc((size_t)p->n_steps + 1, sizeof *kernels);
  int *step_of = calloc((size_t)p->n_steps + 1, sizeof *step_of);
  vk_spec_const **specs = calloc((size_t)p->n_steps + 1, sizeof *specs);
  kiln_status_t st = (!descs || !kernels || !step_of || !specs) ? KILN_OOM() : NULL;
  int nk = 0;
  for (int i = 0; i < p->n_steps && !st; i++) {
    vs_step *s = &x->steps[i];
    if (!runs_on_device(&p->steps[i], s)) continue;
    descs[nk] = (vk_kernel_desc){s->src.name, s->src.glsl, s->src.n_buffers, s->src.push_bytes};
    st = spec_entries(&s->src.spec, &s->epi_spec, &specs[nk], &descs[nk].n_spec);
    descs[nk].spec = specs[nk];
    step_of[nk++] = i;
  }
  vk_pipeline_stats before, after;
  vk_pipeline_stats_get(x->ctx, &before);
  if (!st && nk) st = vk_kernel_create_batch(x->ctx, descs, nk, kernels);
  vk_pipeline_stats_get(x->ctx, &after);
  x->n_shader_kernels = nk;
  x->spirv_compiled = after.spirv_compiled - before.spirv_compiled;
  x->spirv_cached = after.spirv_cached - before.spirv_cached;
  /* The batch hashed every source once: each distinct one was compiled or read from the cache. */
  x->n_shader_sources = (int)(x->spirv_compiled + x->spirv_cached);
  x->shader_s = (after.spirv_s - before.spirv_s) + (after.pipeline_s - before.pipeline_s);
  for (int k = 0; !st && k < nk; k++) x->steps[step_of[k]].kernel = kernels[k];
  for (int k = 0; specs && k < nk; k++) free(specs[k]);
  free(specs);
  free(descs);
  free(kernels);
  free(step_of);
  KILN_TRY(st);
  /* The sources and schedules are no longer needed. */
  for (int i = 0; i < p->n_steps; i++) {
    kiln_loop_nest_free(&x->steps[i].nest);
    free(x->steps[i].src.glsl);
    x->steps[i].src.glsl = NULL;
  }
  KILN_TRY(vk_buffer_alloc(x->ctx, VK_MEM_DEVICE, 256, &x->dummy));
  for (int v = 0; v < g->n_values; v++) {
    int64_t bytes = kiln_plan_value_bytes(p, v);
    if (!bind->buffer[v] || bytes <= 0) continue;
    KILN_TRY(vk_buffer_view_create((vk_buffer *)bind->buffer[v], bind->offset[v], (size_t)bytes, &x->view[v]));
  }
  return NULL;
}

static kiln_status_t bindings_of(vk_plan_state *x, const kiln_plan_step *ps, vk_buffer **bind) {
  if (ps->n_args > 96) return kiln_error(KILN_UNSUPPORTED, "kernel with over 96 buffers");
  for (int a = 0; a < ps->n_args; a++) {
    int v = ps->args[a];
    bind[a] = v >= 0 && x->view[v] ? x->view[v] : x->dummy;
  }
  return NULL;
}

kiln_status_t vk_launch_step(kiln_device *dev, void *state, const kiln_plan *p, int i,
                                    const kiln_plan_bindings *b) {
  vk_plan_state *x = state;
  const vs_step *s = &x->steps[i];
  if (!s->kernel) return NULL; /* empty output */
  vk_buffer *bind[96];
  KILN_TRY(bindings_of(x, &p->steps[i], bind));
  return vk_adhoc_dispatch(x->dev, s->kernel, bind, s->src.groups);
}

/* Records flush f's device steps once into a stream of their own. */
kiln_status_t vk_record(kiln_device *dev, void *state, kiln_plan *p, int f, const kiln_plan_bindings *b) {
  vk_plan_state *x = state;
  kiln_plan_flush *fl = &p->flushes[f];
  if (!x->recorded) {
    x->recorded = calloc((size_t)p->n_flushes + 1, sizeof *x->recorded);
    if (!x->recorded) return KILN_OOM();
    x->n_recorded = p->n_flushes;
  }
  bool any = false;
  for (int i = fl->device_begin; i < fl->device_end; i++) any |= x->steps[i].kernel && p->steps[i].fused_into < 0;
  if (!any) return NULL;
  vk_stream *s;
  KILN_TRY(vk_stream_create(x->ctx, &s));
  x->recorded[f] = s;
  fl->recorded = s;
  KILN_TRY(vk_stream_begin(s));
  for (int i = fl->device_begin; i < fl->device_end; i++) {
    const vs_step *st = &x->steps[i];
    if (!st->kernel || p->steps[i].fused_into >= 0) continue;
    vk_buffer *bind[96];
    KILN_TRY(bindings_of(x, &p->steps[i], bind));
    KILN_TRY(vk_stream_dispatch(s, st->kernel, bind, NULL, st->src.groups[0], st->src.groups[1], st->src.groups[2]));
  }
  return vk_stream_end(s);
}

kiln_status_t vk_enqueue_recorded(kiln_device *dev, void *state, const kiln_plan *p, int f) {
  vk_plan_state *x = state;
  return vk_adhoc_enqueue(x->dev, x->recorded[f]);
}

void vk_plan_run_begin(kiln_device *dev, void *state) {
  vk_plan_state *x = state;
  vk_device_state *d = x->dev;
  pthread_mutex_lock(&d->adhoc_lock);
  x->run0_submits = d->stat_submits;
  x->run0_command_buffers = d->stat_command_buffers;
  x->run0_dispatches = d->stat_dispatches;
  pthread_mutex_unlock(&d->adhoc_lock);
}

void vk_plan_end(kiln_device *dev, void *state, kiln_plan *p) {
  vk_plan_state *x = state;
  if (!x) return;
  for (int i = 0; x->steps && i <= x->g->n_nodes; i++) step_reset(x, &x->steps[i]);
  free(x->steps);
  for (int f = 0; x->recorded && f < x->n_recorded; f++)
    if (x->recorded[f]) vk_stream_destroy(x->ctx, x->recorded[f]);
  free(x->recorded);
  for (int v = 0; x->view && v < x->g->n_values; v++)
    if (x->view[v]) vk_buffer_view_free(x->view[v]);
  free(x->view);
  if (x->dummy) vk_buffer_free(x->ctx, x->dummy);
  free(x->denied);
  free(x);
}

void vk_plan_describe(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  const vk_plan_state *x = state;
  int n_segments = 0;
  for (int f = 0; x->recorded && f < x->n_recorded; f++) n_segments += x->recorded[f] != NULL;
  fprintf(out, "%s: contractions (MatMul/Gemm/Conv/pool/attention) as hand-scheduled shaders\n", x->dev->name);
  fprintf(out,
          "shaders: %d kernels from %d distinct sources (sizes are specialization constants); at prepare %llu SPIR-V "
          "modules compiled, %llu from the cache, %.2f s compiling and creating pipelines\n",
          x->n_shader_kernels, x->n_shader_sources, (unsigned long long)x->spirv_compiled,
          (unsigned long long)x->spirv_cached, x->shader_s);
  fprintf(out, "recorded: %d command buffer%s, %d submission%s per run\n", n_segments, n_segments == 1 ? "" : "s",
          p->n_flushes, p->n_flushes == 1 ? "" : "s");
}

void vk_plan_run_stats(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  const vk_plan_state *x = state;
  vk_device_state *d = x->dev;
  pthread_mutex_lock(&d->adhoc_lock);
  uint64_t s = d->stat_submits - x->run0_submits, c = d->stat_command_buffers - x->run0_command_buffers,
           k = d->stat_dispatches - x->run0_dispatches;
  pthread_mutex_unlock(&d->adhoc_lock);
  fprintf(out, "%s: last run: %llu queue submission%s, %llu command buffer%s, %llu dispatches\n", d->name,
          (unsigned long long)s, s == 1 ? "" : "s", (unsigned long long)c, c == 1 ? "" : "s", (unsigned long long)k);
}

#endif
