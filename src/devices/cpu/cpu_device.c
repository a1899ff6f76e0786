/* The cpu device: kiln's default. It compiles the graph (fused, generated C
 * kernels and packed SGEMM micro-kernels, multi-threaded) and runs what it
 * cannot compile on the reference kernels inside the same executable. It is
 * absent when no C compiler is found at run time. */
#include <stdio.h>

#include "base/cpu_features.h"
#include "codegen/jit.h"
#include "devices/cpu/cpu_internal.h"

static char description[256];

static void cpu_query(const kiln_device *dev, kiln_device_info *out) {
  memset(out, 0, sizeof *out);
  out->name = "cpu";
  out->vendor = "kiln";
  if (!description[0]) {
    char feats[192];
    kiln_cpu_features_string(kiln_cpu_features_get(), feats, (int)sizeof feats);
    snprintf(description, sizeof description, "compiled C kernels, %d physical cores, %s", kiln_physical_cores(), feats);
  }
  out->description = description;
  out->host_memory = true;
}

static bool cpu_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  return kiln_lower_class(g, node, reason) != KILN_OPCLASS_NONE;
}

static const kiln_device_vtable cpu_vtable = {
    .query = cpu_query,
    .supports = cpu_supports,
    .prepare = kiln_cpu_prepare,
    .execute = kiln_cpu_execute,
    .executable_free = kiln_cpu_executable_free,
};

static kiln_device cpu_device = {&cpu_vtable, NULL};

kiln_device *kiln_cpu_device_create(void) {
  kiln_status_t st = kiln_jit_available();
  if (st) { /* no C compiler: the device is simply absent */
    kiln_status_free(st);
    return NULL;
  }
  return &cpu_device;
}
