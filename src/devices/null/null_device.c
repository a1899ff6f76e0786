/* The null device: runs the whole compiler and executes nothing. It claims
 * what the compute definitions lower (codegen/lower.c), and the shared plan
 * fuses, lowers and plans memory; every kernel, contractions included
 * (their compute definitions), is scheduled and rendered in the C dialect. Preparing a session
 * on it is a compiler test without a backend (the suite compiles the
 * conformance models and the big models on it); running fails with a clear
 * error rather than producing garbage.
 *
 * It is also the template for a new device: a provider (enumerate) and a
 * vtable with query, supports and the plan hooks (plan_begin with the
 * target's claim/schedule/epilogue hooks and memory rules, plan_compile,
 * launch_step, plan_end). */
#include "codegen/fusion.h"
#include "runtime/plan.h"

typedef struct null_state {
  int n_kernels;       /* KERNEL steps rendered */
  size_t source_bytes; /* C rendered, in all */
} null_state;

static void null_query(const kiln_device *dev, kiln_device_info *out) {
  memset(out, 0, sizeof *out);
  out->name = "null";
  out->vendor = "kiln";
  out->description = "null device: compiles everything (kernels rendered as C), executes nothing (for compiler tests)";
  out->host_memory = true;
}

static bool null_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  return kiln_lower_class(g, node, reason) != KILN_OPCLASS_NONE;
}

static kiln_op_class null_claim(void *user, const kiln_graph *g, const kiln_node *node, const char **why) {
  return kiln_lower_class(g, node, why);
}

/* Every kernel is rendered (that is the test); the source is dropped. */
static kiln_status_t null_schedule(void *user, kiln_plan *p, int i) {
  null_state *x = user;
  char *src = NULL;
  KILN_RETURN_IF_ERROR(kiln_fused_kernel_c_source(&p->steps[i].fk, &src), "rendering the kernel of node '%s'",
                       p->steps[i].node->name);
  x->n_kernels++;
  x->source_bytes += strlen(src);
  free(src);
  return NULL;
}

static kiln_status_t null_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                     kiln_plan_target *out_target, void **out_state) {
  null_state *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  *out_target = (kiln_plan_target){
      .dev = dev,
      .host_memory = true,
      .alignment = 64,
      .size_rounding = 1,
      .claim = null_claim,
      .schedule = null_schedule,
      .user = x,
  };
  *out_state = x;
  return NULL;
}

static kiln_status_t null_launch_step(kiln_device *dev, void *state, const kiln_plan *p, int i,
                                      const kiln_plan_bindings *bind) {
  return kiln_error(KILN_UNSUPPORTED, "the null device does not execute (node '%s')", p->steps[i].node->name);
}

static void null_plan_end(kiln_device *dev, void *state, kiln_plan *p) { free(state); }

static void null_plan_describe(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  const null_state *x = state;
  fprintf(out, "null: %d kernels rendered as C (%zu bytes), executes nothing\n", x->n_kernels, x->source_bytes);
}

static kiln_status_t null_run_node(kiln_device *dev, kiln_kernel_ctx *ctx) {
  return kiln_error(KILN_UNSUPPORTED, "the null device does not execute (node '%s')", ctx->node->name);
}

static const kiln_device_vtable null_vtable = {
    .query = null_query,
    .supports = null_supports,
    .run_node = null_run_node,
    .plan_begin = null_plan_begin,
    .launch_step = null_launch_step,
    .plan_end = null_plan_end,
    .plan_describe = null_plan_describe,
};

static kiln_device null_device = {&null_vtable, NULL};

static int null_enumerate(kiln_device **out, int max, const char **why_absent) {
  if (max < 1) return 0;
  out[0] = &null_device;
  return 1;
}

const kiln_device_provider kiln_null_provider = {.name = "null", .enumerate = null_enumerate};
