/* The reference device: runs every node with its op's plain-C reference
 * kernel on host tensors. It is the oracle in tests and the fallback for
 * any node no other device claims. Stateless, thread-safe. */
#include "runtime/device.h"

static void ref_query(const kiln_device *dev, kiln_device_info *out) {
  memset(out, 0, sizeof *out);
  out->name = "ref";
  out->vendor = "kiln";
  out->description = "reference device: plain C kernels for every op, host memory, single thread";
  out->host_memory = true;
  out->features = KILN_DEVICE_FEATURE_ALL_DTYPES;
}

static bool ref_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  if (node->op && node->op->ref_kernel) return true;
  if (reason) *reason = "no reference kernel for this op";
  return false;
}

static kiln_status_t ref_run_node(kiln_device *dev, kiln_kernel_ctx *ctx) {
  const kiln_op_def *op = ctx->node->op;
  if (!op || !op->ref_kernel)
    return kiln_error(KILN_UNSUPPORTED, "no reference kernel for op %s", ctx->node->op_type);
  KILN_TRY(kiln_kernel_check_narrow_inputs(ctx));
  return op->ref_kernel(ctx);
}

static const kiln_device_vtable ref_vtable = {
    .query = ref_query,
    .supports = ref_supports,
    .run_node = ref_run_node,
};

static kiln_device ref_device = {&ref_vtable, NULL};

static int ref_enumerate(kiln_device **out, int max, const char **why_absent) {
  if (max < 1) return 0;
  out[0] = &ref_device;
  return 1;
}

const kiln_device_provider kiln_ref_provider = {.name = "ref", .enumerate = ref_enumerate};
