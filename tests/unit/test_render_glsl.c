/* The GLSL renderer: real kernels (graph nodes through kiln_lower_node and
 * the GPU schedule) rendered as compute shaders in every mode (one
 * invocation per element or row, cooperative rows with shared memory or
 * subgroups, 32- and 64-bit indices, the contraction template), each
 * compiled by glslc. Exits 77 (skip) when glslc is not installed:
 * nothing here is checked without the compiler.
 *
 * With the Vulkan runtime (KILN_HAVE_VULKAN and a device, e.g. lavapipe)
 * each shader also runs and its output is compared with the ops' reference
 * kernels on random inputs. KILN_TEST_KEEP=1 keeps the shaders.
 *
 * fp16 storage (kiln_glsl_options.fp16): each case is rendered again with
 * its f32 buffers as float16_t (one plain and one cooperative/subgroup
 * mode), run with its inputs rounded to half (the host converts with
 * kiln_f32_to_f16 / kiln_f16_to_f32) and compared with the reference
 * recomputed on those rounded inputs: since everything in between is f32,
 * the f32 tolerance plus the one rounding of the stored result (2^-11 |ref|)
 * must hold. Also: stores round to nearest even (ties, bit for bit), and
 * the template's half tiles stay within their bound.
 *
 * Specialization constants (kiln_glsl_options.spec): every render is done
 * again with them (label_spec) and run with their values in the pipeline's
 * VkSpecializationInfo; the same op on two shapes must render to one
 * source with them and two without; 64-bit indices keep literals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/loopnest.h"
#include "codegen/lower.h"
#include "ops/op.h"
#include "tensor/dtype.h"
#if KILN_HAVE_VULKAN
#include "devices/vulkan/vk_runtime.h"
#endif

static int failures, compiled, ran;
static char glslc[512];
static char tmpdir[256];

#define CHECK(cond, ...)                               \
  do {                                                 \
    if (!(cond)) {                                     \
      failures++;                                      \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                    \
      fprintf(stderr, "\n");                           \
    }                                                  \
  } while (0)

static bool find_glslc(void) {
  const char *env = getenv("GLSLC");
  if (env && *env && access(env, X_OK) == 0) {
    snprintf(glslc, sizeof glslc, "%s", env);
    return true;
  }
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin:/usr/local/bin";
  char *copy = kiln_strdup(path);
  bool found = false;
  for (char *save = NULL, *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
    snprintf(glslc, sizeof glslc, "%s/glslc", dir);
    found = access(glslc, X_OK) == 0;
  }
  free(copy);
  return found;
}

/* Compiles src with glslc; true on success (prints the log otherwise). */
static bool compile_glsl(const char *label, const char *src) {
  char path[400], spv[400], log[400], cmd[2048];
  snprintf(path, sizeof path, "%s/%s.comp", tmpdir, label);
  snprintf(spv, sizeof spv, "%s/%s.spv", tmpdir, label);
  snprintf(log, sizeof log, "%s/%s.log", tmpdir, label);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fputs(src, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s' --target-env=vulkan1.2 -fshader-stage=compute -o '%s' '%s' > '%s' 2>&1", glslc, spv,
           path, log);
  int rc = system(cmd);
  bool ok = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
  if (!ok) {
    fprintf(stderr, "glslc failed on %s:\n", path);
    snprintf(cmd, sizeof cmd, "head -20 '%s' >&2", log);
    if (system(cmd) == -1) fprintf(stderr, "(could not show the log)\n");
  }
  compiled += ok;
  failures += !ok;
  return ok;
}

/* ---- graphs ---------------------------------------------------------------------- */

typedef struct tgraph {
  kiln_graph *g;
  kiln_tensor *val[64]; /* every value's tensor (ref results), owned */
  bool is_const[64];
  int last_node;
  uint64_t rng;
} tgraph;

static float frand(tgraph *t, float lo, float hi) {
  t->rng = t->rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (float)((t->rng >> 40) & 0xffffff) / 16777216.0f;
}

static void set_type(tgraph *t, int v) {
  kiln_type_init_tensor(&t->g->values[v].type, t->val[v]->dtype, t->val[v]->rank, t->val[v]->dims);
}

static int value_of(tgraph *t, const char *name) {
  int id;
  kiln_status_t st = kiln_graph_intern_value(t->g, name, &id);
  if (st || id >= 64) abort(); /* test programming error */
  return id;
}

/* A random f32 input (or bool when dt is BOOL). */
static int input(tgraph *t, const char *name, kiln_dtype dt, int rank, const int64_t *dims, float lo, float hi) {
  int v = value_of(t, name);
  if (kiln_tensor_new(dt, rank, dims, &t->val[v])) abort();
  for (int64_t i = 0; i < t->val[v]->numel; i++) {
    if (dt == KILN_DTYPE_BOOL) ((uint8_t *)t->val[v]->data)[i] = frand(t, 0, 1) < 0.5f;
    else ((float *)t->val[v]->data)[i] = frand(t, lo, hi);
  }
  set_type(t, v);
  return v;
}

static int const_ints(tgraph *t, const char *name, kiln_dtype dt, int n, const int64_t *vals) {
  int v = value_of(t, name);
  int64_t dims[1] = {n};
  if (kiln_tensor_new(dt, 1, dims, &t->val[v])) abort();
  for (int i = 0; i < n; i++) kiln_store_i64(t->val[v]->data, dt, i, vals[i]);
  t->g->values[v].constant = kiln_tensor_retain(t->val[v]);
  t->is_const[v] = true;
  set_type(t, v);
  return v;
}

/* Adds a node and runs its reference kernel; returns its output value. */
static int node(tgraph *t, const char *op, int opset, int n_in, const int *ins, const char *out_name) {
  int out = value_of(t, out_name);
  int idx;
  if (kiln_graph_add_node(t->g, out_name, op, "", n_in, ins, 1, &out, &idx)) abort();
  t->g->nodes[idx].opset = opset;
  t->g->nodes[idx].op = kiln_op_find("", op); /* resolved, as a session's graph is */
  t->last_node = idx;
  return out;
}

static kiln_attr *attr(tgraph *t, const char *name, kiln_attr_type type) {
  kiln_attr *a;
  if (kiln_node_add_attr(&t->g->nodes[t->last_node], name, type, &a)) abort();
  return a;
}

static void attr_int(tgraph *t, const char *name, int64_t v) { attr(t, name, KILN_ATTR_INT)->i = v; }
static void attr_float(tgraph *t, const char *name, float v) { attr(t, name, KILN_ATTR_FLOAT)->f = v; }
static void attr_ints(tgraph *t, const char *name, int n, const int64_t *v) {
  kiln_attr *a = attr(t, name, KILN_ATTR_INTS);
  a->ints = malloc((size_t)n * sizeof *a->ints);
  memcpy(a->ints, v, (size_t)n * sizeof *v);
  a->n = n;
}

/* Runs every node's reference kernel in order, typing the outputs. */
static kiln_status_t run_ref(tgraph *t) {
  for (int n = 0; n < t->g->n_nodes; n++) {
    kiln_node *nd = &t->g->nodes[n];
    const kiln_op_def *def = kiln_op_find("", nd->op_type);
    if (!def) return kiln_error(KILN_NOT_FOUND, "no op %s", nd->op_type);
    kiln_value *ins[8] = {0}, *outs[1] = {0};
    bool wanted[1] = {true};
    kiln_status_t st = NULL;
    for (int i = 0; i < nd->n_inputs && !st; i++)
      if (nd->inputs[i] >= 0) st = kiln_value_from_tensor(kiln_tensor_retain(t->val[nd->inputs[i]]), &ins[i]);
    if (!st) {
      kiln_kernel_ctx ctx = {.node = nd, .opset = nd->opset, .n_inputs = nd->n_inputs, .inputs = ins,
                             .n_outputs = 1, .outputs = outs, .output_wanted = wanted};
      st = def->ref_kernel(&ctx);
    }
    for (int i = 0; i < nd->n_inputs; i++) kiln_value_free(ins[i]);
    if (st) return st;
    int o = nd->outputs[0];
    t->val[o] = kiln_tensor_retain(outs[0]->tensor);
    kiln_value_free(outs[0]);
    set_type(t, o);
  }
  return NULL;
}

/* Rounds every f32 graph input (a value no node produces) to half in
 * place and recomputes the reference from them: what an fp16 kernel reads. */
static kiln_status_t round_inputs_to_half(tgraph *t) {
  bool produced[64] = {0};
  for (int n = 0; n < t->g->n_nodes; n++) {
    int o = t->g->nodes[n].outputs[0];
    produced[o] = true;
    if (t->val[o]) kiln_tensor_release(t->val[o]);
    t->val[o] = NULL;
  }
  for (int v = 0; v < 64; v++) {
    if (produced[v] || !t->val[v] || t->val[v]->dtype != KILN_DTYPE_F32) continue;
    float *x = t->val[v]->data;
    for (int64_t i = 0; i < t->val[v]->numel; i++) x[i] = kiln_f16_to_f32(kiln_f32_to_f16(x[i]));
  }
  return run_ref(t);
}

static void tgraph_free(tgraph *t) {
  for (int i = 0; i < 64; i++)
    if (t->val[i]) kiln_tensor_release(t->val[i]);
  kiln_graph_free(t->g);
}

/* One kernel: the whole graph fused (as the cpu device groups it), its
 * output buffer 0, every outside value a buffer after it. */
typedef struct kernel {
  te_builder *b;
  kiln_loop_nest nest;
  int arg_values[16]; /* graph value of each te buffer */
  int n_args;
} kernel;

static kiln_status_t build_kernel(tgraph *t, bool flat, kernel *k) {
  memset(k, 0, sizeof *k);
  KILN_TRY(te_builder_create(&k->b));
  const kiln_graph *g = t->g;
  int out = g->nodes[g->n_nodes - 1].outputs[0];
  const te_tensor *views[64] = {0};
  int64_t numel = t->val[out]->numel;
  te_add_buffer(k->b, KILN_DTYPE_F32, flat ? 1 : t->val[out]->rank, flat ? &numel : t->val[out]->dims, out);
  k->arg_values[k->n_args++] = out;
  for (int n = 0; n < g->n_nodes; n++) {
    const kiln_node *nd = &g->nodes[n];
    const te_tensor *ins[8] = {0};
    for (int i = 0; i < nd->n_inputs; i++) {
      int v = nd->inputs[i];
      if (v < 0 || kiln_lower_is_param_input(nd, i)) continue;
      if (!views[v]) {
        const kiln_tensor *x = t->val[v];
        int buf = flat ? te_add_buffer(k->b, x->dtype, x->numel == 1 ? 0 : 1, &numel, v)
                       : te_add_buffer(k->b, x->dtype, x->rank, x->dims, v);
        k->arg_values[k->n_args++] = v;
        views[v] = te_view_buffer(k->b, buf);
      }
      ins[i] = views[v];
    }
    const char *why = NULL;
    if (kiln_lower_class(g, nd, &why) == KILN_OPCLASS_NONE)
      return kiln_error(KILN_UNSUPPORTED, "%s not lowered: %s", nd->op_type, why);
    te_tensor *o = NULL;
    KILN_TRY(kiln_lower_node(k->b, g, nd, ins, &o));
    if (flat) {
      o->rank = 1;
      o->dims[0] = numel;
    }
    views[nd->outputs[0]] = o;
  }
  return kiln_schedule_glsl(k->b, views[out], 0, &k->nest);
}

static void kernel_free(kernel *k) {
  kiln_loop_nest_free(&k->nest);
  te_builder_destroy(k->b);
}

/* ---- running on Vulkan ----------------------------------------------------------- */

#if KILN_HAVE_VULKAN
static vk_context *vk;
static vk_device_props vk_props;

static void vk_open(void) {
  kiln_status_t why = NULL;
  vk_device_props props[8];
  int n = vk_enumerate(props, 8, &why);
  if (n <= 0) {
    fprintf(stderr, "note: no Vulkan device (%s): shaders are compiled, not run\n", why ? kiln_status_message(why) : "none");
    kiln_status_free(why);
    return;
  }
  kiln_status_t st = vk_context_create(0, &vk);
  if (st) {
    fprintf(stderr, "note: Vulkan context: %s: shaders are compiled, not run\n", kiln_status_message(st));
    kiln_status_free(st);
    vk = NULL;
    return;
  }
  vk_props = *vk_context_props(vk);
  fprintf(stderr, "running shaders on %s\n", vk_props.name);
}

/* Runs the shader on the kernel's buffers (inputs from t->val) and
 * returns the output in *out (malloc'd f32, numel elements). */
/* The bytes of tensor x as the kernel's buffer holds them: f32 as half
 * with fp16 (*tmp then owns the converted copy). */
static const void *device_bytes(const kiln_tensor *x, bool fp16, size_t *bytes, uint16_t **tmp) {
  *tmp = NULL;
  *bytes = kiln_tensor_nbytes(x);
  if (!fp16 || x->dtype != KILN_DTYPE_F32) return x->data;
  *tmp = malloc((size_t)x->numel * 2 + 4);
  if (!*tmp) return NULL;
  for (int64_t i = 0; i < x->numel; i++) (*tmp)[i] = kiln_f32_to_f16(((const float *)x->data)[i]);
  *bytes = (size_t)x->numel * 2;
  return *tmp;
}

/* Runs the shader on the kernel's buffers (inputs from t->val) and
 * returns the output in *out (malloc'd f32, numel elements). With fp16 the
 * f32 buffers hold half (2 bytes an element, allocations rounded up to 4
 * bytes as the plan does). */
static kiln_status_t vk_run(const char *label, const char *src, const kernel *k, tgraph *t, const uint32_t groups[3],
                            bool fp16, const kiln_glsl_spec *spec, float **out) {
  int n = k->n_args;
  vk_buffer *bufs[16] = {0};
  vk_kernel *kern = NULL;
  vk_stream *s = NULL;
  kiln_status_t st = NULL;
  /* The specialization constants (spec NULL: none): id first_id + i = values[i]. */
  vk_spec_const consts[256];
  int n_spec = spec ? spec->n : 0;
  *out = NULL;
  if (n_spec > (int)KILN_ARRAY_SIZE(consts)) return kiln_error(KILN_INTERNAL, "%s: %d constants", label, n_spec);
  for (int i = 0; i < n_spec; i++) consts[i] = (vk_spec_const){(uint32_t)(spec->first_id + i), (uint32_t)spec->values[i]};
  size_t numel = (size_t)t->val[k->arg_values[0]]->numel;
  size_t out_bytes = numel * (fp16 ? 2 : 4);
  uint16_t *half_out = NULL;
  *out = malloc(numel ? numel * 4 : 1);
  if (fp16) half_out = malloc(out_bytes + 4);
  if (!*out || (fp16 && !half_out)) {
    free(half_out);
    return KILN_OOM();
  }
  vk_kernel_desc desc = {label, src, n, 0, n_spec ? consts : NULL, n_spec};
  st = vk_kernel_create(vk, &desc, &kern);
  for (int i = 0; i < n && !st; i++) {
    size_t bytes = kiln_tensor_nbytes(t->val[k->arg_values[i]]);
    if (fp16 && t->val[k->arg_values[i]]->dtype == KILN_DTYPE_F32) bytes /= 2;
    if (i == 0) bytes = out_bytes;
    st = vk_buffer_alloc(vk, VK_MEM_DEVICE, (bytes + 3) / 4 * 4 + 4, &bufs[i]);
  }
  if (!st) st = vk_stream_create(vk, &s);
  if (!st) st = vk_stream_begin(s);
  for (int i = 1; i < n && !st; i++) {
    size_t bytes;
    uint16_t *tmp;
    const void *data = device_bytes(t->val[k->arg_values[i]], fp16, &bytes, &tmp);
    if (!data) st = KILN_OOM();
    else if (bytes) st = vk_stream_upload(s, bufs[i], 0, data, bytes);
    free(tmp); /* the upload copied it */
  }
  if (!st && groups[0]) st = vk_stream_dispatch(s, kern, bufs, NULL, groups[0], groups[1], groups[2]);
  if (!st && out_bytes) st = vk_stream_readback(s, fp16 ? (void *)half_out : (void *)*out, bufs[0], 0, out_bytes);
  if (!st) st = vk_stream_end(s);
  uint64_t value = 0;
  if (!st) st = vk_submit(vk, &s, 1, &value);
  if (!st) st = vk_wait(vk, value);
  if (!st && fp16)
    for (size_t i = 0; i < numel; i++) (*out)[i] = kiln_f16_to_f32(half_out[i]);
  free(half_out);
  if (s) vk_stream_destroy(vk, s);
  for (int i = 0; i < n; i++) vk_buffer_free(vk, bufs[i]);
  if (kern) vk_kernel_destroy(vk, kern);
  return st;
}
#endif

/* Per output element, the error a mode may add on top (the template's half
 * arithmetic), or NULL. */
static const double *extra_tol;

#if KILN_HAVE_VULKAN
/* Compares the device result with the reference (rtol 1e-3, atol 1e-4, NaN = NaN;
 * fp16: plus 2^-11 |ref|, the rounding of the stored result to half). */
static void compare(const char *label, const float *got, const kiln_tensor *want, bool fp16) {
  const float *w = want->data;
  int bad = 0;
  for (int64_t i = 0; i < want->numel; i++) {
    float a = got[i], b = w[i];
    double tol = 1e-4 + 1e-3 * fabs((double)b) + (fp16 ? 1.001 * ldexp(fabs((double)b), -11) : 0.0);
    if (extra_tol) tol += extra_tol[i];
    bool ok = (isnan(a) && isnan(b)) || a == b || fabs((double)a - (double)b) <= tol;
    if (!ok && bad++ < 5) CHECK(false, "%s: element %lld: got %.9g, want %.9g", label, (long long)i, a, b);
  }
  if (bad > 5) CHECK(false, "%s: %d elements differ", label, bad);
}
#endif

/* ---- one case, every mode ----------------------------------------------------------- */

/* How many times needle occurs in hay. */
static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay ? strstr(hay, needle) : NULL; p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The schedule step of cooperative rows on k's nest, or (threads 0) its
 * removal: the modes below render one nest several ways. */
static void set_rows(kernel *k, int threads, bool subgroups) {
  k->nest.rows = (kiln_cooperative_rows){0};
  if (!threads) return;
  kiln_status_t st = kiln_schedule_cooperative_rows(k->b, &k->nest, threads, threads, subgroups, 0);
  CHECK(!st, "cooperative rows: %s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
}

/* Renders, compiles and (with a device) runs one kernel, comparing with
 * the reference. spec non-NULL (empty, first_id 0): with specialization
 * constants, whose values the run passes to the pipeline. *src_out (if
 * given) receives the source (the caller frees it). */
static void render_one(const char *label, kernel *k, tgraph *t, const kiln_glsl_options *opts, kiln_glsl_spec *spec,
                       char **src_out) {
  kiln_glsl_options o = *opts;
  o.spec = spec;
  kiln_strbuf src = {0};
  uint32_t groups[3];
  kiln_status_t st = kiln_render_glsl(k->b, &k->nest, label, &o, &src, groups);
  CHECK(!st, "%s: %s", label, st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  if (!st && spec) /* each constant declared once; the default is 1, so forgetting the values breaks the run */
    CHECK(count_of(src.data, "layout(constant_id = ") == spec->n && count_of(src.data, "const int KS") == spec->n,
          "%s: %d constants, declarations: %d", label, spec->n, count_of(src.data, "layout(constant_id = "));
  if (!st && compile_glsl(label, src.data)) {
#if KILN_HAVE_VULKAN
    bool subgroups_ok = !(k->nest.rows.threads && k->nest.rows.subgroups) || vk_props.subgroup_arithmetic;
    if (vk && t && subgroups_ok) {
      float *got = NULL;
      st = vk_run(label, src.data, k, t, groups, o.fp16, spec, &got);
      CHECK(!st, "%s: running: %s", label, st ? kiln_status_message(st) : "");
      kiln_status_free(st);
      if (!st) {
        compare(label, got, t->val[k->arg_values[0]], o.fp16);
        ran++;
      }
      free(got);
    }
#else
    (void)t;
    (void)groups;
#endif
  }
  if (src_out) *src_out = kiln_strbuf_take(&src);
  kiln_strbuf_free(&src);
}

/* Every case twice: sizes as literals, then as specialization constants
 * (label_spec), which must change the source and give the same results. */
static void render_and_check(const char *label, kernel *k, tgraph *t, const kiln_glsl_options *o) {
  char *lit = NULL, *spec_src = NULL, spec_label[160];
  render_one(label, k, t, o, NULL, &lit);
  CHECK(!lit || !strstr(lit, "constant_id"), "%s: a constant without opts.spec", label);
  kiln_glsl_spec spec = {0};
  snprintf(spec_label, sizeof spec_label, "%s_spec", label);
  render_one(spec_label, k, t, o, &spec, &spec_src);
  CHECK(spec.n > 0 && !spec.oom, "%s: no specialization constants (%d)", spec_label, spec.n);
  kiln_glsl_spec_free(&spec);
  free(lit);
  free(spec_src);
}

static void check_case(const char *name, tgraph *t, bool flat) {
  kiln_status_t st = run_ref(t);
  CHECK(!st, "%s: reference: %s", name, st ? kiln_status_message(st) : "");
  if (st) {
    kiln_status_free(st);
    return;
  }
  kernel k;
  st = build_kernel(t, flat, &k);
  CHECK(!st, "%s: building the kernel: %s", name, st ? kiln_status_message(st) : "");
  if (!st) {
    static const struct {
      const char *suffix;
      uint32_t wg;
      bool coop, subgroups;
    } modes[] = {{"plain", 64, false, false}, {"coop", 64, true, false}, {"coop128_sg", 128, true, true},
                 {"coop32", 32, true, false}};
    for (size_t m = 0; m < KILN_ARRAY_SIZE(modes); m++) {
      kiln_glsl_options o = kiln_glsl_options_default();
      o.workgroup_size = modes[m].wg;
      set_rows(&k, modes[m].coop ? (int)modes[m].wg : 0, modes[m].subgroups);
      char label[128];
      snprintf(label, sizeof label, "%s_%s", name, modes[m].suffix);
      render_and_check(label, &k, t, &o);
    }
    /* fp16 storage: the same kernel on half-rounded inputs */
    st = round_inputs_to_half(t);
    CHECK(!st, "%s: fp16 reference: %s", name, st ? kiln_status_message(st) : "");
    kiln_status_free(st);
    for (size_t m = 0; m < 2 && !st; m++) {
      kiln_glsl_options o = kiln_glsl_options_default();
      o.fp16 = true;
      o.workgroup_size = m ? 128 : 64;
      set_rows(&k, m ? 128 : 0, m == 1);
      char label[128];
      snprintf(label, sizeof label, "%s_%s", name, m ? "coop128_sg_fp16" : "plain_fp16");
      render_and_check(label, &k, t, &o);
    }
  } else {
    kiln_status_free(st);
  }
  if (k.b) kernel_free(&k);
  tgraph_free(t);
}

static tgraph new_graph(uint64_t seed) {
  tgraph t;
  memset(&t, 0, sizeof t);
  t.rng = seed;
  if (kiln_graph_new("t", NULL, &t.g)) abort();
  return t;
}

/* ---- the cases ------------------------------------------------------------------------ */

static void case_unary_chain(void) {
  tgraph t = new_graph(1);
  int64_t d[2] = {3, 37};
  int x = input(&t, "x", KILN_DTYPE_F32, 2, d, -4, 4);
  static const char *ops[] = {"Erf", "Tanh", "Sigmoid", "Softplus", "Sin", "Cos", "Elu", "Selu", "HardSwish",
                              "LeakyRelu", "Softsign", "Exp", "Abs", "Sqrt", "Log", "Neg", "Floor", "Relu"};
  int v = x;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(ops); i++) {
    char name[16];
    snprintf(name, sizeof name, "u%zu", i);
    v = node(&t, ops[i], 13, 1, &v, name);
  }
  check_case("unary_chain", &t, true);

  /* The activations' edges: large |x|; Round, Ceil, Pow of negative bases. */
  t = new_graph(2);
  int64_t d2[1] = {1000};
  x = input(&t, "x", KILN_DTYPE_F32, 1, d2, -30, 30);
  int th = node(&t, "Tanh", 13, 1, &x, "th");
  int sg = node(&t, "Sigmoid", 13, 1, &x, "sg");
  int sp = node(&t, "Softplus", 13, 1, &x, "sp");
  int r = node(&t, "Round", 13, 1, &x, "r");
  int c = node(&t, "Ceil", 13, 1, &x, "c");
  int ef = node(&t, "Erf", 13, 1, &x, "ef");
  int m = node(&t, "Mul", 14, 2, (int[]){th, sg}, "m");
  int p = node(&t, "Sum", 13, 5, (int[]){ef, m, sp, r, c}, "p");
  int ex = input(&t, "ex", KILN_DTYPE_F32, 1, d2, -3, 3);
  int fl = node(&t, "Floor", 13, 1, &ex, "fl");
  int pw = node(&t, "Pow", 15, 2, (int[]){x, fl}, "pw"); /* negative bases, integral exponents */
  node(&t, "Add", 14, 2, (int[]){p, pw}, "out");
  check_case("activations", &t, true);
}

/* ---- math helpers the ONNX reference lacks (Gelu is opset 20): against libm ---- */

static te_expr *compute_gelus(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *x = te_at(b, t->in[0], idx);
  return te_binary(b, TE_ADD, te_call1(b, "kiln_geluf", x),
                   te_binary(b, TE_MUL, te_const_f(b, KILN_DTYPE_F32, 3), te_call1(b, "kiln_gelu_tanhf", x)));
}

static void gelu_ref(tgraph *t, int x, int out) {
  for (int i = 0; i < 777; i++) {
    double v = ((float *)t->val[x]->data)[i];
    double g = 0.5 * v * (1 + erf(v / sqrt(2.0)));
    double gt = 0.5 * v * (1 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    ((float *)t->val[out]->data)[i] = (float)(g + 3 * gt);
  }
}

static void case_gelu(void) {
  tgraph t = new_graph(5);
  int64_t d[1] = {777};
  int x = input(&t, "x", KILN_DTYPE_F32, 1, d, -12, 12);
  int out = value_of(&t, "out");
  kiln_tensor_new(KILN_DTYPE_F32, 1, d, &t.val[out]);
  gelu_ref(&t, x, out);
  kernel k;
  memset(&k, 0, sizeof k);
  te_builder_create(&k.b);
  te_add_buffer(k.b, KILN_DTYPE_F32, 1, d, out);
  int bx = te_add_buffer(k.b, KILN_DTYPE_F32, 1, d, x);
  k.arg_values[0] = out;
  k.arg_values[1] = x;
  k.n_args = 2;
  te_tensor *g = te_view_compute(k.b, KILN_DTYPE_F32, 1, d, compute_gelus);
  g->in[0] = te_view_buffer(k.b, bx);
  g->n_in = 1;
  kiln_status_t st = kiln_schedule_glsl(k.b, g, 0, &k.nest);
  CHECK(!st, "gelu schedule");
  kiln_status_free(st);
  kiln_glsl_options o = kiln_glsl_options_default();
  render_and_check("gelu", &k, &t, &o);
  float *xv = t.val[x]->data; /* fp16: half inputs */
  for (int i = 0; i < 777; i++) xv[i] = kiln_f16_to_f32(kiln_f32_to_f16(xv[i]));
  gelu_ref(&t, x, out);
  o.fp16 = true;
  render_and_check("gelu_fp16", &k, &t, &o);
  kernel_free(&k);
  tgraph_free(&t);
}

static void case_broadcast(void) {
  tgraph t = new_graph(3);
  int64_t da[3] = {4, 1, 5}, db[2] = {3, 1}, dc[3] = {4, 3, 5};
  int a = input(&t, "a", KILN_DTYPE_F32, 3, da, -2, 2);
  int b = input(&t, "b", KILN_DTYPE_F32, 2, db, -2, 2);
  int c = input(&t, "c", KILN_DTYPE_BOOL, 3, dc, 0, 1);
  int s = node(&t, "Add", 14, 2, (int[]){a, b}, "s");
  int mx = node(&t, "Max", 13, 2, (int[]){s, a}, "mx");
  int mn = node(&t, "Min", 13, 2, (int[]){s, b}, "mn");
  node(&t, "Where", 16, 3, (int[]){c, mx, mn}, "out");
  check_case("broadcast_where", &t, false);
}

static void case_movement(void) {
  tgraph t = new_graph(4);
  int64_t d[3] = {2, 3, 7};
  int x = input(&t, "x", KILN_DTYPE_F32, 3, d, -2, 2);
  int tr = node(&t, "Transpose", 13, 1, &x, "tr");
  attr_ints(&t, "perm", 3, (int64_t[]){2, 0, 1});
  int shape = const_ints(&t, "shape", KILN_DTYPE_I64, 2, (int64_t[]){7, 6});
  int rs = node(&t, "Reshape", 14, 2, (int[]){tr, shape}, "rs");
  int st = const_ints(&t, "st", KILN_DTYPE_I64, 2, (int64_t[]){6, 1});
  int en = const_ints(&t, "en", KILN_DTYPE_I64, 2, (int64_t[]){-100, 5});
  int ax = const_ints(&t, "ax", KILN_DTYPE_I64, 2, (int64_t[]){0, 1});
  int sp = const_ints(&t, "sp", KILN_DTYPE_I64, 2, (int64_t[]){-2, 2});
  int sl = node(&t, "Slice", 13, 5, (int[]){rs, st, en, ax, sp}, "sl"); /* [4, 2] */
  int64_t dy[2] = {4, 3};
  int y = input(&t, "y", KILN_DTYPE_F32, 2, dy, -2, 2);
  node(&t, "Concat", 13, 2, (int[]){sl, y}, "out");
  attr_int(&t, "axis", 1);
  check_case("transpose_reshape_slice_concat", &t, false);
}

static void case_softmax(void) {
  int64_t sizes[][2] = {{5, 77}, {3, 1}, {2, 768}, {1, 3000}};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(sizes); i++) {
    tgraph t = new_graph(10 + i);
    int x = input(&t, "x", KILN_DTYPE_F32, 2, sizes[i], -8, 8);
    node(&t, i % 2 ? "LogSoftmax" : "Softmax", 13, 1, &x, "out");
    char name[64];
    snprintf(name, sizeof name, "softmax_%lldx%lld", (long long)sizes[i][0], (long long)sizes[i][1]);
    check_case(name, &t, false);
  }
}

static void case_layernorm(void) {
  int64_t sizes[][3] = {{2, 3, 96}, {1, 2, 1}, {3, 1, 130}};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(sizes); i++) {
    tgraph t = new_graph(20 + i);
    int x = input(&t, "x", KILN_DTYPE_F32, 3, sizes[i], -3, 3);
    int s = input(&t, "s", KILN_DTYPE_F32, 1, &sizes[i][2], 0.5f, 1.5f);
    int b = input(&t, "b", KILN_DTYPE_F32, 1, &sizes[i][2], -1, 1);
    int ln = node(&t, "LayerNormalization", 17, 3, (int[]){x, s, b}, "ln");
    attr_int(&t, "axis", -1);
    attr_float(&t, "epsilon", 1e-5f);
    node(&t, "Relu", 14, 1, &ln, "out");
    char name[64];
    snprintf(name, sizeof name, "layernorm_%lld", (long long)sizes[i][2]);
    check_case(name, &t, false);
  }
  /* Normalized over the last two axes: a chain of two reductions. */
  tgraph t = new_graph(29);
  int64_t d[3] = {3, 5, 33};
  int x = input(&t, "x", KILN_DTYPE_F32, 3, d, -3, 3);
  int s = input(&t, "s", KILN_DTYPE_F32, 2, d + 1, 0.5f, 1.5f);
  node(&t, "LayerNormalization", 17, 2, (int[]){x, s}, "out");
  attr_int(&t, "axis", 1);
  check_case("layernorm_2axes", &t, false);
}

/* The contraction template (codegen/render_tiles.c) in GLSL: MatMul with
 * an epilogue, a padded strided Conv, in groups of 64 and 256, f32 and
 * fp16 storage, against the reference. */
/* The template with half tiles (fp16_arith) on the MatMul [m,k] x [k,n]
 * of inputs a and b (then a 1-Lipschitz epilogue): inputs rounded to half,
 * each output allowed 4.5 * 2^-11 of sum_k |a||b| more (runs of 4 k's
 * summed in half). */
static void tiles_half_case(const char *name, kernel *k, tgraph *t, int a, int b, int64_t m, int64_t kd, int64_t n) {
  kiln_status_t st = round_inputs_to_half(t);
  CHECK(!st, "%s: fp16 reference: %s", name, st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  double *tol = calloc((size_t)(m * n), sizeof *tol);
  if (st || !tol) {
    free(tol);
    return;
  }
  const float *av = t->val[a]->data, *bv = t->val[b]->data;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double sum = 0;
      for (int64_t q = 0; q < kd; q++) sum += fabs((double)av[i * kd + q] * (double)bv[q * n + j]);
      tol[i * n + j] = 4.5 * ldexp(sum, -11);
    }
  k->nest.tiles = (kiln_contraction_tiles){0};
  kiln_schedule_contraction_tiles(&k->nest, 64, 1);
  kiln_glsl_options o = kiln_glsl_options_default();
  o.fp16 = o.fp16_arith = true;
  char label[128], *src = NULL;
  snprintf(label, sizeof label, "%s_half_tiles", name);
  extra_tol = tol;
  render_one(label, k, t, &o, NULL, &src);
  extra_tol = NULL;
  CHECK(src && (strstr(src, "shared float16_t kiln_la") || strstr(src, "shared f16vec4 kiln_la")) &&
            strstr(src, "float(kiln_a0_0"),
        "%s: the local tiles and products are not half", label);
  free(src);
  free(tol);
}

static void tiles_case(const char *name, tgraph *t, const int *half_mnk) {
  kiln_status_t st = run_ref(t);
  CHECK(!st, "%s: reference: %s", name, st ? kiln_status_message(st) : "");
  kernel k;
  bool built = false;
  if (!st) {
    st = build_kernel(t, false, &k);
    CHECK(!st, "%s: building the kernel: %s", name, st ? kiln_status_message(st) : "");
    built = !st;
  }
  kiln_status_free(st);
  if (built) {
    for (int threads = 64; threads <= 256; threads *= 4) {
      k.nest.tiles = (kiln_contraction_tiles){0};
      kiln_schedule_contraction_tiles(&k.nest, threads, 1);
      CHECK(k.nest.tiles.n_red > 0, "%s: the template does not apply", name);
      kiln_glsl_options o = kiln_glsl_options_default();
      char label[128];
      snprintf(label, sizeof label, "%s_tiles%d", name, threads);
      render_and_check(label, &k, t, &o);
    }
    if (half_mnk) tiles_half_case(name, &k, t, half_mnk[0], half_mnk[1], half_mnk[2], half_mnk[3], half_mnk[4]);
    kernel_free(&k);
  }
  tgraph_free(t);
}

static void case_contraction_tiles(void) {
  tgraph t = new_graph(40);
  int64_t da[2] = {130, 200}, db[2] = {200, 70};
  int a = input(&t, "a", KILN_DTYPE_F32, 2, da, -1, 1);
  int b = input(&t, "b", KILN_DTYPE_F32, 2, db, -1, 1);
  int mm = node(&t, "MatMul", 13, 2, (int[]){a, b}, "mm");
  node(&t, "Tanh", 13, 1, &mm, "out");
  tiles_case("tiles_matmul_tanh", &t, (int[]){a, b, 130, 200, 70});
  tgraph c = new_graph(41);
  int64_t dx[4] = {1, 8, 33, 35}, dw[4] = {32, 8, 3, 3};
  int x = input(&c, "x", KILN_DTYPE_F32, 4, dx, -1, 1);
  int w = input(&c, "w", KILN_DTYPE_F32, 4, dw, -1, 1);
  node(&c, "Conv", 11, 2, (int[]){x, w}, "out");
  attr_ints(&c, "pads", 4, (int64_t[]){1, 0, 1, 2});
  attr_ints(&c, "strides", 2, (int64_t[]){1, 2});
  tiles_case("tiles_conv", &c, NULL);
}

/* A driver that stops loops (llvmpipe: 65535 passes through the loops of
 * an invocation, all together): a kernel whose thread would loop longer is unsupported, and
 * the cooperative-rows step takes rows whose reduction runs past it even
 * when the heuristics would not (many rows, strided reads). */
static void case_loop_trips(void) {
  tgraph t = new_graph(42);
  int64_t d[2] = {300, 260};
  int x = input(&t, "x", KILN_DTYPE_F32, 2, d, -1, 1);
  int ax = node(&t, "ReduceSum", 11, 1, &x, "out");
  (void)ax;
  attr_ints(&t, "axes", 1, (int64_t[]){0});
  attr_int(&t, "keepdims", 0);
  kiln_status_t st = run_ref(&t);
  CHECK(!st, "loop trips: reference: %s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  kernel k;
  st = build_kernel(&t, false, &k);
  CHECK(!st, "loop trips: building: %s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  if (!st) {
    kiln_glsl_options o = kiln_glsl_options_default();
    o.max_loop_trips = 200; /* the 300-long column sum of one thread is past it */
    kiln_strbuf src = {0};
    uint32_t groups[3];
    set_rows(&k, 0, false);
    st = kiln_render_glsl(k.b, &k.nest, "trips", &o, &src, groups);
    CHECK(st && kiln_status_code_of(st) == KILN_UNSUPPORTED && strstr(kiln_status_message(st), "stops loops"),
          "a loop past the driver's limit must be unsupported: %s", st ? kiln_status_message(st) : "rendered");
    kiln_status_free(st);
    kiln_strbuf_free(&src);
    st = kiln_schedule_cooperative_rows(k.b, &k.nest, 64, 64, false, 0);
    CHECK(!st && !k.nest.rows.threads, "260 strided rows are not cooperative by the heuristics");
    kiln_status_free(st);
    st = kiln_schedule_cooperative_rows(k.b, &k.nest, 64, 64, false, 200);
    CHECK(!st && k.nest.rows.threads == 64, "rows past the trip limit must be cooperative");
    kiln_status_free(st);
    render_and_check("trips_coop", &k, &t, &o); /* 5 trips per thread: renders, runs, matches */
    kernel_free(&k);
  }
  tgraph_free(&t);
  /* The limit counts every loop's passes together, the last one of each
   * loop included: the contraction template's slab copies are unrolled and
   * spend none, and so are its local products where their 18 passes a
   * k-step would not fit, so only the k-steps spend. K = 32000 would have
   * spent 2000 * 60 passes in the four loops (llvmpipe then ended them
   * early and the sums came back short, with no error). */
  tgraph c = new_graph(43);
  int64_t da[2] = {64, 32000}, db[2] = {32000, 64};
  int a = input(&c, "a", KILN_DTYPE_F32, 2, da, -1, 1);
  int b = input(&c, "b", KILN_DTYPE_F32, 2, db, -1, 1);
  node(&c, "MatMul", 13, 2, (int[]){a, b}, "out");
  st = run_ref(&c);
  CHECK(!st, "loop trips, long K: reference: %s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  st = build_kernel(&c, false, &k);
  CHECK(!st, "loop trips, long K: building: %s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  if (!st) {
    k.nest.tiles = (kiln_contraction_tiles){0};
    kiln_schedule_contraction_tiles(&k.nest, 64, 1);
    CHECK(k.nest.tiles.n_red > 0 && k.nest.tiles.tile_k == 16, "long K: the template with k-steps of 16 does not apply");
    kiln_glsl_options o = kiln_glsl_options_default();
    o.max_loop_trips = 2000; /* 2000 k-steps and the pass that ends them: one past */
    kiln_strbuf src = {0};
    uint32_t groups[3];
    st = kiln_render_glsl(k.b, &k.nest, "trips_k", &o, &src, groups);
    CHECK(st && kiln_status_code_of(st) == KILN_UNSUPPORTED && strstr(kiln_status_message(st), "stops loops"),
          "long K: 2001 passes must be past a limit of 2000: %s", st ? kiln_status_message(st) : "rendered");
    kiln_status_free(st);
    kiln_strbuf_free(&src);
    /* llvmpipe's limit: renders, runs there to the last k, matches within
     * f32 summation's error over 32000 products (2^-20 of sum |a||b|, which
     * a lost tail of k's is far past: about 1 of 60 in magnitude). */
    o.max_loop_trips = 65535;
    double *tol = calloc(64 * 64, sizeof *tol);
    const float *av = c.val[a]->data, *bv = c.val[b]->data;
    for (int i = 0; tol && i < 64; i++)
      for (int j = 0; j < 64; j++) {
        double sum = 0;
        for (int q = 0; q < 32000; q++) sum += fabs((double)av[i * 32000 + q] * (double)bv[q * 64 + j]);
        tol[i * 64 + j] = ldexp(sum, -20);
      }
    CHECK(tol, "long K: out of memory");
    extra_tol = tol;
    if (tol) render_and_check("trips_long_k", &k, &c, &o);
    extra_tol = NULL;
    free(tol);
    kernel_free(&k);
  }
  tgraph_free(&c);
}

static void case_reduce(void) {
  static const struct {
    const char *op;
    int64_t axes[2];
    int n_axes;
    int keep;
  } cases[] = {{"ReduceSum", {1}, 1, 0},  {"ReduceMax", {1}, 1, 1},      {"ReduceMean", {0}, 0, 0},
               {"ReduceL2", {2}, 1, 1},   {"ReduceLogSumExp", {1, 2}, 2, 0}, {"ReduceMin", {0, 2}, 2, 1},
               {"ReduceProd", {2}, 1, 0}};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(cases); i++) {
    tgraph t = new_graph(30 + i);
    int64_t d[3] = {4, 33, 7};
    int x = input(&t, "x", KILN_DTYPE_F32, 3, d, -2, 2);
    if (!strcmp(cases[i].op, "ReduceProd")) x = node(&t, "Sigmoid", 13, 1, &x, "sx"); /* keep products finite */
    int r;
    if (cases[i].n_axes) {
      int ax = const_ints(&t, "axes", KILN_DTYPE_I64, cases[i].n_axes, cases[i].axes);
      r = node(&t, cases[i].op, 18, 2, (int[]){x, ax}, "r");
    } else {
      r = node(&t, cases[i].op, 18, 1, &x, "r");
    }
    attr_int(&t, "keepdims", cases[i].keep);
    /* Something after it, so that reductions and elements mix. */
    int64_t dy[1] = {1};
    int y = input(&t, "y", KILN_DTYPE_F32, 1, dy, -1, 1);
    node(&t, "Add", 14, 2, (int[]){r, y}, "out");
    char name[64];
    snprintf(name, sizeof name, "%s_%zu", cases[i].op, i);
    check_case(name, &t, false);
  }
  /* x - mean(x) over everything: a reduction before all loops. */
  tgraph t = new_graph(40);
  int64_t d[2] = {9, 31};
  int x = input(&t, "x", KILN_DTYPE_F32, 2, d, -2, 2);
  int m = node(&t, "ReduceMean", 13, 1, &x, "m");
  attr_int(&t, "keepdims", 1);
  node(&t, "Sub", 14, 2, (int[]){x, m}, "out");
  check_case("center_all", &t, false);
}

static void case_pool(void) {
  tgraph t = new_graph(50);
  int64_t d[4] = {2, 3, 9, 11};
  int x = input(&t, "x", KILN_DTYPE_F32, 4, d, -2, 2);
  int ap = node(&t, "AveragePool", 11, 1, &x, "ap");
  attr_ints(&t, "kernel_shape", 2, (int64_t[]){3, 2});
  attr_ints(&t, "strides", 2, (int64_t[]){2, 1});
  attr_ints(&t, "pads", 4, (int64_t[]){1, 0, 1, 1});
  node(&t, "GlobalAveragePool", 1, 1, &ap, "out");
  check_case("avgpool_global", &t, false);
}

/* ---- specialization constants: one source for every shape ---- */

/* The same graph on two shapes: with specialization constants both render
 * to one source (byte for byte; the label is the same too) and each runs
 * with its own values against its own reference; with literals the
 * sources differ. */
static void same_source(const char *name, tgraph *ta, tgraph *tb) {
  tgraph *ts[2] = {ta, tb};
  kernel ks[2];
  memset(ks, 0, sizeof ks);
  bool ok = true;
  for (int i = 0; i < 2 && ok; i++) {
    kiln_status_t st = run_ref(ts[i]);
    if (!st) st = build_kernel(ts[i], false, &ks[i]);
    CHECK(!st, "%s: shape %d: %s", name, i, st ? kiln_status_message(st) : "");
    ok = !st;
    kiln_status_free(st);
  }
  static const struct {
    uint32_t wg;
    bool coop, subgroups;
  } modes[] = {{64, false, false}, {64, true, false}, {128, true, true}};
  for (size_t m = 0; m < KILN_ARRAY_SIZE(modes) && ok; m++) {
    kiln_glsl_options o = kiln_glsl_options_default();
    o.workgroup_size = modes[m].wg;
    for (int i = 0; i < 2; i++) set_rows(&ks[i], modes[m].coop ? (int)modes[m].wg : 0, modes[m].subgroups);
    char label[128];
    snprintf(label, sizeof label, "%s_m%zu", name, m);
    char *lit[2] = {0}, *spec_src[2] = {0};
    kiln_glsl_spec spec[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++) {
      render_one(label, &ks[i], ts[i], &o, NULL, &lit[i]);
      render_one(label, &ks[i], ts[i], &o, &spec[i], &spec_src[i]);
    }
    CHECK(lit[0] && lit[1] && strcmp(lit[0], lit[1]), "%s: the literal sources of two shapes are equal", label);
    if (spec_src[0] && spec_src[1]) { /* the first line that differs */
      size_t at = 0, line = 0;
      for (; spec_src[0][at] && spec_src[0][at] == spec_src[1][at]; at++)
        if (spec_src[0][at] == '\n') line = at + 1;
      CHECK(!spec_src[0][at] && !spec_src[1][at], "%s: with specialization constants the sources differ:\n%.160s\n----\n%.160s",
            label, spec_src[0] + line, spec_src[1] + line);
    } else {
      CHECK(false, "%s: no source", label);
    }
    bool differ = spec[0].n != spec[1].n;
    for (int j = 0; j < spec[0].n && !differ; j++) differ = spec[0].values[j] != spec[1].values[j];
    CHECK(spec[0].n > 0 && spec[0].n == spec[1].n && differ, "%s: %d and %d constants", label, spec[0].n, spec[1].n);
    for (int i = 0; i < 2; i++) {
      free(lit[i]);
      free(spec_src[i]);
      kiln_glsl_spec_free(&spec[i]);
    }
  }
  for (int i = 0; i < 2; i++) {
    if (ks[i].b) kernel_free(&ks[i]);
    tgraph_free(ts[i]);
  }
}

static void case_same_source(void) {
  /* Add with broadcasting: [3,5] + [5] and [7,9] + [9]. */
  tgraph t[2];
  for (int i = 0; i < 2; i++) {
    t[i] = new_graph(100 + i);
    int64_t da[2] = {i ? 7 : 3, i ? 9 : 5}, db[1] = {da[1]};
    int a = input(&t[i], "a", KILN_DTYPE_F32, 2, da, -2, 2);
    int b = input(&t[i], "b", KILN_DTYPE_F32, 1, db, -2, 2);
    node(&t[i], "Add", 14, 2, (int[]){a, b}, "out");
  }
  same_source("same_add", &t[0], &t[1]);
  /* Softmax over rows of 10 and of 37. */
  for (int i = 0; i < 2; i++) {
    t[i] = new_graph(102 + i);
    int64_t d[2] = {i ? 6 : 4, i ? 37 : 10};
    int x = input(&t[i], "x", KILN_DTYPE_F32, 2, d, -8, 8);
    node(&t[i], "Softmax", 13, 1, &x, "out");
  }
  same_source("same_softmax", &t[0], &t[1]);
  /* ReduceSum over the middle axis: [4,6,5] and [3,11,7]. */
  for (int i = 0; i < 2; i++) {
    t[i] = new_graph(104 + i);
    int64_t d[3] = {i ? 3 : 4, i ? 11 : 6, i ? 7 : 5};
    int x = input(&t[i], "x", KILN_DTYPE_F32, 3, d, -2, 2);
    int ax = const_ints(&t[i], "axes", KILN_DTYPE_I64, 1, (int64_t[]){1});
    node(&t[i], "ReduceSum", 18, 2, (int[]){x, ax}, "out");
    attr_int(&t[i], "keepdims", 0);
  }
  same_source("same_reducesum", &t[0], &t[1]);
}

/* ---- gathers on constant indices (built directly: no Gather lowering yet) ---- */

static te_expr *compute_gather(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *k = te_cast(b, KILN_DTYPE_I64, te_at(b, t->in[1], idx));
  te_expr *n = te_idx(b, t->in[0]->dims[0]);
  k = te_select(b, te_binary(b, TE_LT, k, te_idx(b, 0)), te_iadd(b, k, n), k);
  te_expr *sub[2] = {k, idx[1]};
  return te_at(b, t->in[0], sub);
}

static void case_gather(kiln_dtype index_dtype) {
  tgraph t = new_graph(60);
  int64_t dd[2] = {6, 5}, di[1] = {9}, dout[2] = {9, 5};
  int data = input(&t, "data", KILN_DTYPE_F32, 2, dd, -2, 2);
  int64_t ivals[9] = {0, 5, -1, 3, -6, 2, 2, 4, 1};
  int ind = const_ints(&t, "ind", index_dtype, 9, ivals);
  int out = value_of(&t, "out");
  kiln_tensor_new(KILN_DTYPE_F32, 2, dout, &t.val[out]);
  float *dv = t.val[data]->data; /* half values: the same data serve the f32 and the fp16 kernel */
  for (int i = 0; i < 30; i++) dv[i] = kiln_f16_to_f32(kiln_f32_to_f16(dv[i]));
  for (int i = 0; i < 9; i++)
    for (int j = 0; j < 5; j++) {
      int64_t r = ivals[i] < 0 ? ivals[i] + 6 : ivals[i];
      ((float *)t.val[out]->data)[i * 5 + j] = ((float *)t.val[data]->data)[r * 5 + j];
    }
  kernel k;
  memset(&k, 0, sizeof k);
  te_builder_create(&k.b);
  te_add_buffer(k.b, KILN_DTYPE_F32, 2, dout, out);
  int bd = te_add_buffer(k.b, KILN_DTYPE_F32, 2, dd, data), bi = te_add_buffer(k.b, index_dtype, 1, di, ind);
  k.arg_values[0] = out;
  k.arg_values[1] = data;
  k.arg_values[2] = ind;
  k.n_args = 3;
  te_tensor *g = te_view_compute(k.b, KILN_DTYPE_F32, 2, dout, compute_gather);
  g->in[0] = te_view_buffer(k.b, bd);
  g->in[1] = te_view_buffer(k.b, bi);
  g->n_in = 2;
  kiln_status_t st = kiln_schedule_glsl(k.b, g, 0, &k.nest);
  CHECK(!st, "gather schedule");
  kiln_status_free(st);
  kiln_glsl_options o = kiln_glsl_options_default();
  render_and_check(index_dtype == KILN_DTYPE_I64 ? "gather_i64" : "gather_i32", &k, &t, &o);
  o.fp16 = true; /* f16 data, the index buffer unchanged */
  render_and_check(index_dtype == KILN_DTYPE_I64 ? "gather_i64_fp16" : "gather_i32_fp16", &k, &t, &o);
  kernel_free(&k);
  tgraph_free(&t);
}

/* ---- 64-bit indices (rendered and compiled only: too big to run) ---- */

static void case_int64(void) {
  tgraph t = new_graph(70);
  int64_t d[2] = {3, 37};
  int x = input(&t, "x", KILN_DTYPE_F32, 2, d, -1, 1);
  int e = node(&t, "Exp", 13, 1, &x, "e");
  node(&t, "Softmax", 13, 1, &e, "out");
  kiln_status_t st = run_ref(&t);
  kiln_status_free(st);
  kernel k;
  st = build_kernel(&t, false, &k);
  CHECK(!st, "int64 kernel");
  kiln_status_free(st);
  /* Pretend the rows are many: every buffer and extent past 2^31. */
  k.nest.extents[0] = INT64_C(3000000000);
  for (int i = 0; i < te_buffer_count(k.b); i++) ((te_buffer *)te_get_buffer(k.b, i))->dims[0] = INT64_C(3000000000);
  kiln_strbuf src = {0};
  uint32_t groups[3];
  kiln_glsl_options o = kiln_glsl_options_default();
  st = kiln_render_glsl(k.b, &k.nest, "big", &o, &src, groups);
  CHECK(st && kiln_status_code_of(st) == KILN_UNSUPPORTED, "64-bit indices without int64 must be unsupported");
  kiln_status_free(st);
  kiln_strbuf_free(&src);
  o.int64 = true;
  st = kiln_render_glsl(k.b, &k.nest, "big", &o, &src, groups);
  CHECK(!st, "int64 render: %s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  CHECK(groups[1] > 1 && (uint64_t)groups[0] * groups[1] * 64 >= INT64_C(3000000000), "int64 dispatch %u x %u", groups[0],
        groups[1]);
  if (src.data) compile_glsl("int64_plain", src.data);
  kiln_strbuf_free(&src);
  set_rows(&k, 64, false);
  CHECK(k.nest.rows.threads == 64 && k.nest.rows.rows == INT64_C(3000000000), "int64 rows are cooperative");
  st = kiln_render_glsl(k.b, &k.nest, "big", &o, &src, groups);
  CHECK(!st, "int64 coop render");
  kiln_status_free(st);
  if (src.data) compile_glsl("int64_coop", src.data);
  kiln_strbuf_free(&src);
  /* 64-bit indices keep their literals (a constant is an int), whatever opts.spec says. */
  for (int coop = 0; coop < 2; coop++) {
    kiln_glsl_spec spec = {0};
    set_rows(&k, coop ? 64 : 0, false);
    o.spec = &spec;
    st = kiln_render_glsl(k.b, &k.nest, "big", &o, &src, groups);
    CHECK(!st && spec.n == 0 && !strstr(src.data, "constant_id"), "int64 with spec: %d constants", spec.n);
    kiln_status_free(st);
    if (src.data) compile_glsl(coop ? "int64_coop_spec" : "int64_plain_spec", src.data);
    kiln_strbuf_free(&src);
    kiln_glsl_spec_free(&spec);
  }
  kernel_free(&k);
  tgraph_free(&t);
}

/* ---- fp16: stores round to nearest even ---- */

/* x * y with x = 1.5, y = +-(1 + j 2^-10): exact in f32, every odd j a tie
 * in half. The stored halves must be the host's round-to-nearest-even of
 * the f32 products, bit for bit. */
static void case_fp16_rounding(void) {
  tgraph t = new_graph(90);
  int64_t d[1] = {600};
  int x = input(&t, "x", KILN_DTYPE_F32, 1, d, 0, 1), y = input(&t, "y", KILN_DTYPE_F32, 1, d, 0, 1);
  for (int j = 0; j < 600; j++) {
    ((float *)t.val[x]->data)[j] = 1.5f;
    ((float *)t.val[y]->data)[j] = (j % 3 ? 1.0f : -1.0f) * (1.0f + (float)(j % 300) / 1024.0f);
  }
  node(&t, "Mul", 14, 2, (int[]){x, y}, "out");
  kiln_status_t st = run_ref(&t);
  CHECK(!st, "fp16 rounding reference");
  kiln_status_free(st);
  kernel k;
  st = st ? NULL : build_kernel(&t, true, &k);
  CHECK(!st, "fp16 rounding kernel: %s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
  if (!st) {
    kiln_glsl_options o = kiln_glsl_options_default();
    o.fp16 = true;
    kiln_strbuf src = {0};
    uint32_t groups[3];
    st = kiln_render_glsl(k.b, &k.nest, "fp16_rounding", &o, &src, groups);
    CHECK(!st, "fp16 rounding render: %s", st ? kiln_status_message(st) : "");
    kiln_status_free(st);
    if (!st && compile_glsl("fp16_rounding", src.data)) {
#if KILN_HAVE_VULKAN
      float *got = NULL;
      if (vk) {
        st = vk_run("fp16_rounding", src.data, &k, &t, groups, true, NULL, &got);
        CHECK(!st, "fp16 rounding run: %s", st ? kiln_status_message(st) : "");
        kiln_status_free(st);
        const float *want = t.val[k.arg_values[0]]->data;
        int bad = 0;
        for (int j = 0; !st && j < 600; j++) {
          uint16_t h = kiln_f32_to_f16(want[j]);
          if (kiln_f32_to_f16(got[j]) != h || got[j] != kiln_f16_to_f32(h))
            if (bad++ < 3) CHECK(false, "fp16 rounding: [%d] %.9g * %.9g stored as %.9g, want %.9g", j, 1.5, (double)want[j] / 1.5, (double)got[j], (double)kiln_f16_to_f32(h));
        }
        if (!st) ran++;
      }
      free(got);
#endif
    }
    kiln_strbuf_free(&src);
    kernel_free(&k);
  }
  tgraph_free(&t);
}

int main(void) {
  if (!find_glslc()) {
    printf("SKIP: glslc not found (set GLSLC or install glslc)\n");
    return 77;
  }
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_glsl_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
#if KILN_HAVE_VULKAN
  vk_open();
#endif
  case_unary_chain();
  case_gelu();
  case_broadcast();
  case_movement();
  case_softmax();
  case_layernorm();
  case_reduce();
  case_contraction_tiles();
  case_loop_trips();
  case_pool();
  case_gather(KILN_DTYPE_I64);
  case_gather(KILN_DTYPE_I32);
  case_int64();
  case_same_source();
  case_fp16_rounding();
#if KILN_HAVE_VULKAN
  if (vk) vk_context_destroy(vk);
  CHECK(vk_validation_error_count() == 0, "%llu Vulkan validation errors (KILN_VULKAN_VALIDATION=1)",
        (unsigned long long)vk_validation_error_count());
#endif
  if (!getenv("KILN_TEST_KEEP")) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) == -1) fprintf(stderr, "could not remove %s\n", tmpdir);
  } else {
    fprintf(stderr, "shaders kept in %s\n", tmpdir);
  }
  printf("%d shaders compiled, %d run and compared; %d failures\n", compiled, ran, failures);
  return failures ? 1 : 0;
}
