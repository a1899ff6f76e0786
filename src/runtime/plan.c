/* Building the shared plan (see plan.h): steps, memory, flushes. */
#include "runtime/plan.h"

#include "base/limits.h"
#include "codegen/lower.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"
#include "passes/passes_opt.h"
#include "tensor/dtype.h"

int64_t kiln_plan_value_bytes(const kiln_plan *p, int v) {
  const kiln_type *t = &p->g->values[v].type;
  int64_t n = kiln_type_numel(t);
  if (n < 0) return -1;
  int64_t elem = p->target.f32_as_half && t->dtype == KILN_DTYPE_F32 ? 2 : (int64_t)kiln_dtype_size(t->dtype);
  int64_t r = p->target.size_rounding > 1 ? p->target.size_rounding : 1;
  return (n * elem + r - 1) / r * r;
}

/* ---- steps ----------------------------------------------------------------------- */

/* The device's claim, less what the plan cannot do for it: run-time
 * indices are range-checked on the host before the kernel, which needs the
 * values in host memory. */
static kiln_op_class plan_claim(const kiln_plan_target *t, const kiln_graph *g, const kiln_node *node,
                                const char **why) {
  kiln_op_class c = t->claim(t->user, g, node, why);
  int input, n_bounds;
  int64_t bounds[KILN_MAX_RANK];
  if (c != KILN_OPCLASS_NONE && !t->host_memory && kiln_lower_runtime_indices(g, node, &input, &n_bounds, bounds)) {
    if (why) *why = "indices computed at run time (their range is checked on the host; this device keeps them apart)";
    return KILN_OPCLASS_NONE;
  }
  return c;
}

static kiln_status_t kernel_step(kiln_plan *p, int root, kiln_plan_step *s) {
  const kiln_graph *g = p->g;
  KILN_TRY(kiln_fusion_build(g, &p->fusion, root, true, &s->fk));
  s->flat = s->fk.flat;
  s->elementwise_only = s->fk.elementwise_only;
  s->n_fused = p->fusion.n_members[root];
  s->args = malloc((size_t)s->fk.n_args * sizeof(int));
  if (!s->args) return KILN_OOM();
  memcpy(s->args, s->fk.args, (size_t)s->fk.n_args * sizeof(int));
  s->n_args = s->fk.n_args;
  const int *members = &p->fusion.members[p->fusion.member_start[root]];
  for (int m = 0; m < s->n_fused; m++)
    if (members[m] != root) s->flops += kiln_node_flops(g, &g->nodes[members[m]]);
  for (int m = 0; m < s->n_fused; m++) {
    const kiln_node *mn = &g->nodes[members[m]];
    kiln_index_check c = {.node = mn, .value = -1};
    if (!kiln_lower_runtime_indices(g, mn, &c.input, &c.n_bounds, c.bounds)) continue;
    c.value = mn->inputs[c.input];
    kiln_index_check *grown = realloc(s->checks, ((size_t)s->n_checks + 1) * sizeof *grown);
    if (!grown) return KILN_OOM();
    (s->checks = grown)[s->n_checks++] = c;
  }
  snprintf(s->name, sizeof s->name, "%s%s", s->node->op_type, s->n_fused > 1 ? "+fused" : "");
  return NULL;
}

/* The values of g a node's subgraphs read from it by name (each once). */
static kiln_status_t outer_reads(const kiln_graph *g, const kiln_node *node, kiln_plan_step *s) {
  kiln_ptr_vec names = {0};
  kiln_status_t st = kiln_opt_subgraph_reads(node, &names);
  for (int i = 0; i < names.count && !st; i++) {
    int v = kiln_graph_find_value(g, names.items[i]);
    bool seen = v < 0;
    for (int k = 0; k < s->n_outer && !seen; k++) seen = s->outer[k] == v;
    if (seen) continue;
    int *o = realloc(s->outer, ((size_t)s->n_outer + 1) * sizeof *o);
    if (!o) st = KILN_OOM();
    else (s->outer = o)[s->n_outer++] = v;
  }
  kiln_ptr_vec_free(&names);
  return st;
}

/* A node the device would compile if its shapes were known: an op with a
 * compute definition, one output, no subgraphs, and a tensor it reads or
 * writes whose shape only the run tells. */
static bool dynamic_candidate(const kiln_graph *g, const kiln_node *node) {
  if (!node->op || node->op->op_class == KILN_OPCLASS_NONE || (node->op->flags & KILN_OP_CONTROL_FLOW)) return false;
  /* The same bytes under another shape: the host's one copy is all there
   * is to do, where a plan of its own would copy twice (a detector's
   * Flatten of its [1000, 256, 7, 7] RoI features: 1 -> 17 ms). */
  switch (kiln_node_op_id(node)) {
    case KILN_OP_Reshape:
    case KILN_OP_Flatten:
    case KILN_OP_Squeeze:
    case KILN_OP_Unsqueeze:
    case KILN_OP_Identity: return false;
    default: break;
  }
  if (node->n_outputs < 1 || node->outputs[0] < 0) return false;
  for (int k = 1; k < node->n_outputs; k++)
    if (node->outputs[k] >= 0) return false;
  for (int a = 0; a < node->n_attrs; a++)
    if (node->attrs[a].g || node->attrs[a].graphs) return false;
  bool unknown = false;
  for (int k = 0; k < node->n_inputs + 1; k++) {
    int v = k < node->n_inputs ? node->inputs[k] : node->outputs[0];
    if (v < 0) continue;
    const kiln_type *t = &g->values[v].type;
    if (t->kind != KILN_TYPE_TENSOR && t->kind != KILN_TYPE_UNKNOWN) return false; /* sequences stay on ref */
    if (t->dtype == KILN_DTYPE_STRING) return false;                                 /* so do strings */
    if (!kiln_opt_shape_known(t)) unknown = true;
  }
  return unknown;
}

kiln_status_t kiln_plan_check_indices(const kiln_plan *p, int step, const void *(*value_data)(void *user, int v),
                                      void *user) {
  const kiln_plan_step *s = &p->steps[step];
  for (int c = 0; c < s->n_checks; c++) {
    const kiln_index_check *k = &s->checks[c];
    const kiln_type *t = &p->g->values[k->value].type;
    const void *data = value_data(user, k->value);
    int64_t n = kiln_type_numel(t);
    if (!data || n <= 0) continue;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = t->dtype == KILN_DTYPE_I32 ? ((const int32_t *)data)[i] : ((const int64_t *)data)[i];
      int64_t bound = k->bounds[i % k->n_bounds];
      if (v < -bound || v >= bound) {
        /* The executor names the step's root; a fused member names itself too. */
        char who[160] = "";
        if (k->node != s->node) snprintf(who, sizeof who, "node '%s' (%s): ", k->node->name, k->node->op_type);
        return kiln_error(KILN_OUT_OF_RANGE, "%sinput %d (indices): value %lld out of range [%lld, %lld)", who,
                          k->input, (long long)v, (long long)-bound, (long long)bound);
      }
    }
  }
  return NULL;
}

static kiln_status_t build_steps(kiln_plan *p, const kiln_op_class *cls) {
  const kiln_graph *g = p->g;
  for (int n = 0; n < g->n_nodes; n++) {
    const kiln_node *node = &g->nodes[n];
    if (cls[n] != KILN_OPCLASS_NONE && p->fusion.group_of[n] != n) continue; /* inlined into a later kernel */
    kiln_plan_step *s = &p->steps[p->n_steps++];
    s->node = node;
    s->flops = kiln_node_flops(g, node);
    s->out_value = node->outputs[0];
    if (cls[n] == KILN_OPCLASS_NONE) {
      s->kind = KILN_STEP_HOST;
      s->routine = p->target.host_routine && p->target.host_routine(p->target.user, g, node);
      s->dynamic = !s->routine && p->target.specialize_at_run_time && dynamic_candidate(g, node);
      snprintf(s->name, sizeof s->name, "%s:%s", s->routine ? "host" : s->dynamic ? "dyn" : "ref", node->op_type);
      p->n_routine += s->routine;
      p->n_dynamic += s->dynamic;
      KILN_TRY(outer_reads(g, node, s));
      for (int k = 0; k < node->n_outputs; k++)
        if (node->outputs[k] >= 0) p->kinds[node->outputs[k]] = KILN_VALUE_HOST;
      p->n_host++;
    } else {
      s->kind = KILN_STEP_KERNEL;
      KILN_TRY(kernel_step(p, n, s));
      p->kinds[node->outputs[0]] = KILN_VALUE_ARENA;
      p->n_kernels++;
      p->n_fused_nodes += s->n_fused;
      if (p->target.schedule) KILN_TRY(p->target.schedule(p->target.user, p, p->n_steps - 1));
    }
  }
  return NULL;
}

/* ---- memory ---------------------------------------------------------------------- */

static bool in_arena(kiln_plan_value_kind k) { return k == KILN_VALUE_ARENA || k == KILN_VALUE_HOST_ARENA; }

/* Host-step results device steps read: on a device without host memory they
 * are uploaded into the arena. */
static void mark_host_arena(kiln_plan *p) {
  if (p->target.host_memory) return;
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (s->kind == KILN_STEP_HOST) continue;
    for (int a = 0; a < s->n_args; a++) {
      int v = s->args[a];
      if (v >= 0 && p->kinds[v] == KILN_VALUE_HOST && v != s->out_value) p->kinds[v] = KILN_VALUE_HOST_ARENA;
    }
  }
}

static kiln_status_t plan_memory(kiln_plan *p) {
  const kiln_graph *g = p->g;
  int nv = g->n_values;
  int *buf_of = malloc(((size_t)nv + 1) * sizeof(int));
  int *value_of = malloc(((size_t)nv + 1) * sizeof(int));
  kiln_mem_buffer *bufs = calloc((size_t)nv + 1, sizeof *bufs);
  kiln_plan_step_io *io = calloc((size_t)p->n_steps + 1, sizeof *io);
  char *host_read = calloc((size_t)nv + 1, 1);
  kiln_memory_plan mp = {0};
  kiln_status_t st = NULL;
  if (!buf_of || !value_of || !bufs || !io || !host_read) {
    st = KILN_OOM();
    goto out;
  }
  int64_t align = p->target.alignment > 64 ? p->target.alignment : 64;
  int nb = 0;
  for (int v = 0; v < nv; v++) {
    buf_of[v] = -1;
    if (!in_arena(p->kinds[v])) continue;
    /* The tensor cap (base/limits.h) before any arena is sized: a value a
     * run-time specialization sizes from the data (ConstantOfShape of a
     * huge shape) is the same error a tensor of that size is. */
    int64_t numel = kiln_type_numel(&g->values[v].type), bytes = 0, limit = kiln_limits_get()->max_tensor_bytes;
    if (numel < 0 || !kiln_mul_i64(numel, (int64_t)kiln_dtype_size(g->values[v].type.dtype), &bytes) || bytes > limit) {
      char t[256];
      st = kiln_error(KILN_OUT_OF_MEMORY, "value '%s' (%s) is too large (limit %lld bytes%s)", g->values[v].name,
                      kiln_type_str(&g->values[v].type, t, sizeof t), (long long)limit,
                      limit < KILN_MAX_TENSOR_BYTES ? ", KILN_MAX_TENSOR_BYTES" : "");
      goto out;
    }
    value_of[nb] = v;
    bufs[nb] = (kiln_mem_buffer){kiln_plan_value_bytes(p, v), align, -1, -1, -1};
    buf_of[v] = nb++;
  }
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (s->kind == KILN_STEP_HOST) {
      for (int k = 0; k < s->node->n_outputs; k++) {
        int v = s->node->outputs[k];
        if (v >= 0 && buf_of[v] >= 0 && bufs[buf_of[v]].first_use < 0) bufs[buf_of[v]].first_use = i;
      }
      /* A host step reads arena values in place (host memory), or from the
       * readback that precedes its flush: then the first host read is the
       * last one that needs the arena bytes. */
      for (int k = 0; k < s->node->n_inputs + s->n_outer; k++) {
        int v = k < s->node->n_inputs ? s->node->inputs[k] : s->outer[k - s->node->n_inputs];
        if (v < 0 || buf_of[v] < 0 || (host_read[v] && !p->target.host_memory)) continue;
        host_read[v] = 1;
        if (bufs[buf_of[v]].last_use < i) bufs[buf_of[v]].last_use = i;
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
  /* In place: an elementwise kernel over an input of its own shape that
   * dies there (each element is read before it is written). */
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *s = &p->steps[i];
    io[i] = (kiln_plan_step_io){s->args, s->n_args, s->kind == KILN_STEP_KERNEL && s->elementwise_only};
  }
  kiln_memory_plan_finish_steps(g, buf_of, bufs, nb, io, p->n_steps);
  if ((st = kiln_memory_plan_compute(bufs, nb, &mp))) goto out;
  p->intermediate_bytes = mp.total_size;
  p->arena_bytes = mp.arena_size;
  for (int b = 0; b < nb; b++) p->offset[value_of[b]] = mp.offsets[b];
out:
  kiln_memory_plan_free(&mp);
  free(buf_of);
  free(value_of);
  free(bufs);
  free(io);
  free(host_read);
  return st;
}

/* ---- flushes --------------------------------------------------------------------- */

static bool is_device_step(const kiln_plan_step *s) { return s->kind != KILN_STEP_HOST; }

static kiln_status_t int_list_add(int **list, int *n, int v) {
  for (int i = 0; i < *n; i++)
    if ((*list)[i] == v) return NULL;
  int *l = realloc(*list, ((size_t)*n + 1) * sizeof(int));
  if (!l) return KILN_OOM();
  l[(*n)++] = v;
  *list = l;
  return NULL;
}

/* Splits the steps into flushes: device steps, then the host steps after
 * them; uploads are inputs and host results a segment reads first, readbacks
 * device values the host steps (or, after the last, the caller) read. */
static kiln_status_t build_flushes(kiln_plan *p) {
  const kiln_graph *g = p->g;
  bool transfers = !p->target.host_memory;
  char *uploaded = calloc((size_t)g->n_values + 1, 1), *on_host = calloc((size_t)g->n_values + 1, 1);
  p->flushes = calloc((size_t)p->n_steps + 2, sizeof *p->flushes);
  kiln_status_t st = (!uploaded || !on_host || !p->flushes) ? KILN_OOM() : NULL;
  for (int v = 0; v < g->n_values && !st; v++) {
    kiln_plan_value_kind k = p->kinds[v];
    on_host[v] = k == KILN_VALUE_CONSTANT || k == KILN_VALUE_INPUT || k == KILN_VALUE_HOST || k == KILN_VALUE_UNUSED ||
                 g->values[v].constant != NULL;
  }
  int i = 0;
  while (!st) {
    kiln_plan_flush *f = &p->flushes[p->n_flushes++];
    f->device_begin = i;
    while (i < p->n_steps && is_device_step(&p->steps[i])) {
      const kiln_plan_step *s = &p->steps[i++];
      if (!transfers) continue;
      for (int a = 0; a < s->n_args && !st; a++) {
        int v = s->args[a];
        if (v < 0 || v == s->out_value || uploaded[v]) continue;
        if (p->kinds[v] == KILN_VALUE_INPUT || p->kinds[v] == KILN_VALUE_HOST_ARENA) {
          uploaded[v] = 1;
          st = int_list_add(&f->up, &f->n_up, v);
        }
      }
    }
    f->device_end = f->host_begin = i;
    while (i < p->n_steps && !is_device_step(&p->steps[i])) i++;
    f->host_end = i;
    for (int k = f->host_begin; k < f->host_end && !st; k++) {
      const kiln_plan_step *s = &p->steps[k];
      const kiln_node *node = s->node;
      for (int a = 0; a < node->n_inputs + s->n_outer && !st; a++) {
        int v = a < node->n_inputs ? node->inputs[a] : s->outer[a - node->n_inputs];
        if (v >= 0 && !on_host[v]) {
          on_host[v] = 1;
          if (transfers) st = int_list_add(&f->down, &f->n_down, v);
        }
      }
      for (int a = 0; a < node->n_outputs; a++)
        if (node->outputs[a] >= 0) on_host[node->outputs[a]] = 1;
    }
    if (i >= p->n_steps) {
      for (int o = 0; o < g->n_outputs && !st; o++) {
        int v = g->outputs[o];
        if (!on_host[v]) {
          on_host[v] = 1;
          if (transfers) st = int_list_add(&f->down, &f->n_down, v);
        }
      }
      break;
    }
  }
  free(uploaded);
  free(on_host);
  return st;
}

/* ---- build ----------------------------------------------------------------------- */

static kiln_status_t build_once(const kiln_graph *g, const kiln_plan_target *target, kiln_plan **out) {
  *out = NULL;
  kiln_plan *p = calloc(1, sizeof *p);
  if (!p) return KILN_OOM();
  p->g = g;
  p->target = *target;
  int nn = g->n_nodes, nv = g->n_values;
  kiln_op_class *cls = calloc((size_t)nn + 1, sizeof *cls);
  p->steps = calloc((size_t)nn + 1, sizeof *p->steps);
  p->kinds = calloc((size_t)nv + 1, sizeof *p->kinds);
  p->offset = malloc(((size_t)nv + 1) * sizeof *p->offset);
  kiln_status_t st = (!cls || !p->steps || !p->kinds || !p->offset) ? KILN_OOM() : NULL;
  for (int v = 0; v < nv && !st; v++) {
    p->offset[v] = -1;
    if (g->values[v].constant) p->kinds[v] = KILN_VALUE_CONSTANT;
  }
  for (int i = 0; i < g->n_inputs && !st; i++)
    if (!g->values[g->inputs[i]].constant) p->kinds[g->inputs[i]] = KILN_VALUE_INPUT;
  for (int n = 0; n < nn && !st; n++) cls[n] = plan_claim(target, g, &g->nodes[n], NULL);
  if (!st) st = kiln_fusion_plan(g, cls, true, target->conv_transposed_output, &p->fusion);
  if (!st) st = build_steps(p, cls);
  if (!st) {
    mark_host_arena(p);
    st = plan_memory(p);
  }
  if (!st) st = build_flushes(p);
  free(cls);
  if (st) {
    kiln_plan_free(p);
    return st;
  }
  *out = p;
  return NULL;
}

kiln_status_t kiln_plan_build(const kiln_graph *g, const kiln_plan_target *target, kiln_plan **out) {
  *out = NULL;
  /* Each retry denies the device at least one more node, so there are at
   * most as many as nodes (a 16-attempt cap returned a freed status once
   * BERT's int8 encoder needed more on a GPU dialect that refuses many of
   * its groups). */
  for (int attempt = 0;; attempt++) {
    kiln_status_t st = build_once(g, target, out);
    if (!st || !target->retry || attempt > g->n_nodes || !target->retry(target->user)) return st;
    kiln_status_free(st); /* the device narrowed its claims: plan again */
  }
}

void kiln_plan_free(kiln_plan *p) {
  if (!p) return;
  for (int i = 0; p->steps && i < p->n_steps; i++) {
    free(p->steps[i].args);
    free(p->steps[i].outer);
    free(p->steps[i].checks);
    kiln_fused_kernel_free(&p->steps[i].fk);
  }
  for (int i = 0; p->flushes && i < p->n_flushes; i++) {
    free(p->flushes[i].up);
    free(p->flushes[i].down);
  }
  free(p->flushes);
  free(p->steps);
  free(p->kinds);
  free(p->offset);
  kiln_fusion_free(&p->fusion);
  free(p);
}

/* ---- describe -------------------------------------------------------------------- */

static bool is_control_flow(const kiln_node *node) { return node->op && (node->op->flags & KILN_OP_CONTROL_FLOW); }

bool kiln_plan_step_host_only(const kiln_plan *p, const kiln_plan_step *s) {
  if (s->kind != KILN_STEP_HOST || s->routine || s->dynamic || is_control_flow(s->node)) return false;
  const kiln_node *node = s->node;
  switch (kiln_node_op_id(node)) {
    case KILN_OP_Shape:
    case KILN_OP_Size:
    case KILN_OP_NonZero: return true; /* metadata, or an output whose size the data decides */
    case KILN_OP_Reshape:
    case KILN_OP_Flatten:
    case KILN_OP_Squeeze:
    case KILN_OP_Unsqueeze:
    case KILN_OP_Identity:
    case KILN_OP_Split:
    case KILN_OP_Range: /* a relabel, block copies, or a size the values decide: only with run-time shapes */
      for (int k = 0; k < node->n_outputs; k++)
        if (node->outputs[k] >= 0 && !kiln_opt_shape_known(&p->g->values[node->outputs[k]].type)) return true;
      return false;
    default: return false;
  }
}

bool kiln_plan_step_on_ref(const kiln_plan *p, const kiln_plan_step *s) {
  return s->kind == KILN_STEP_HOST && !s->routine && !s->dynamic && !is_control_flow(s->node) &&
         !kiln_plan_step_host_only(p, s);
}

int kiln_plan_nodes_on_ref(const kiln_plan *p) {
  int n = 0;
  for (int i = 0; i < p->n_steps; i++) n += kiln_plan_step_on_ref(p, &p->steps[i]);
  return n;
}

static bool step_routine(const kiln_plan *p, const kiln_plan_step *s) {
  (void)p;
  return s->kind == KILN_STEP_HOST && s->routine;
}

/* The steps `which` picks, when there are any: `head` with their count,
 * then each op once with its count ("Concat x7, RoiAlign x2, Gemm") and ")". */
static void fprint_ops(const kiln_plan *p, FILE *out, const char *head,
                       bool (*which)(const kiln_plan *, const kiln_plan_step *)) {
  int n = 0;
  for (int i = 0; i < p->n_steps; i++) n += which(p, &p->steps[i]);
  if (!n) return;
  fprintf(out, head, n);
  for (int i = 0, first = 1; i < p->n_steps; i++) {
    const char *op = p->steps[i].node->op_type;
    if (!which(p, &p->steps[i])) continue;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = which(p, &p->steps[j]) && !strcmp(p->steps[j].node->op_type, op);
    if (seen) continue;
    int count = 0;
    for (int j = i; j < p->n_steps; j++) count += which(p, &p->steps[j]) && !strcmp(p->steps[j].node->op_type, op);
    fprintf(out, "%s%s", first ? "" : ", ", op);
    if (count > 1) fprintf(out, " x%d", count);
    first = 0;
  }
  fprintf(out, ")");
}

const char *kiln_plan_step_reason(const kiln_plan *p, const kiln_plan_step *s) {
  const char *why = NULL;
  plan_claim(&p->target, p->g, s->node, &why);
  return why ? why : "?";
}

void kiln_plan_step_ops(const kiln_plan *p, const kiln_plan_step *s, char *buf, size_t size) {
  if (!size) return;
  buf[0] = 0;
  int root = (int)(s->node - p->g->nodes);
  const kiln_fusion *f = &p->fusion;
  bool grouped = s->kind == KILN_STEP_KERNEL && f->n_members && root >= 0 && root < f->n_nodes && f->n_members[root] > 0;
  int n = grouped ? f->n_members[root] : 1;
  for (int i = 0; i < n; i++) {
    const kiln_node *m = grouped ? &p->g->nodes[f->members[f->member_start[root] + i]] : s->node;
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s%s", i ? "+" : "", m->op_type);
  }
}

void kiln_plan_describe(const kiln_plan *p, FILE *out) {
  int n_segments = 0, n_control = 0, n_ref = kiln_plan_nodes_on_ref(p);
  for (int f = 0; f < p->n_flushes; f++) n_segments += p->flushes[f].device_end > p->flushes[f].device_begin;
  for (int i = 0; i < p->n_steps; i++) n_control += p->steps[i].kind == KILN_STEP_HOST && is_control_flow(p->steps[i].node);
  fprintf(out, "plan: %d nodes after optimization -> %d generated kernels (fusing %d nodes), %d nodes on ref", p->g->n_nodes,
          p->n_kernels, p->n_fused_nodes, n_ref);
  if (p->n_routine) fprint_ops(p, out, ", %d on the device's own routines (", step_routine);
  if (p->n_dynamic)
    fprintf(out, ", %d with shapes known only when they run (specialized to them then)", p->n_dynamic);
  fprint_ops(p, out, ", %d host-only ops on the host (", kiln_plan_step_host_only);
  if (n_control) fprintf(out, ", %d control-flow nodes on the host (their bodies' plans below)", n_control);
  fprintf(out, "; %d device segments\n", n_segments);
  if (n_ref) {
    fprintf(out, "fell back to ref:\n");
    for (int i = 0; i < p->n_steps; i++) {
      const kiln_plan_step *s = &p->steps[i];
      if (!kiln_plan_step_on_ref(p, s)) continue;
      fprintf(out, "  %-24s %-28s %s\n", s->node->op_type, s->node->name, kiln_plan_step_reason(p, s));
    }
  }
  fprintf(out, "memory: intermediates %.2f MiB in total, planned arena %.2f MiB (%.1f%%)\n",
          (double)p->intermediate_bytes / (1 << 20), (double)p->arena_bytes / (1 << 20),
          p->intermediate_bytes ? 100.0 * (double)p->arena_bytes / (double)p->intermediate_bytes : 0.0);
}
