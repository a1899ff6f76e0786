/* The null device: accepts every node, compiles everything, executes
 * nothing. It exercises the whole compiler without a backend and is the
 * template for a new device (copy this file, fill the slots). Running a
 * session on it fails with a clear error rather than producing garbage. */
#include "runtime/device.h"

static void null_query(const kiln_device *dev, kiln_device_info *out) {
  memset(out, 0, sizeof *out);
  out->name = "null";
  out->vendor = "kiln";
  out->description = "null device: accepts and compiles everything, executes nothing (for compiler tests)";
  out->host_memory = true;
}

static bool null_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  return true;
}

static kiln_status_t null_run_node(kiln_device *dev, kiln_kernel_ctx *ctx) {
  return kiln_error(KILN_UNSUPPORTED, "the null device does not execute (node '%s')", ctx->node->name);
}

static const kiln_device_vtable null_vtable = {
    .query = null_query,
    .supports = null_supports,
    .run_node = null_run_node,
};

static kiln_device null_device = {&null_vtable, NULL};

kiln_device *kiln_null_device_create(void) { return &null_device; }
