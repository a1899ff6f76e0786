/* The cpu device: kiln's default. It compiles the graph (fused, generated C
 * kernels and packed SGEMM micro-kernels, multi-threaded) and runs what it
 * cannot compile on the reference kernels inside the same executable. It is
 * absent when no C compiler is found at run time. */
#include <stdio.h>

#include "base/cpu_features.h"
#include "codegen/jit.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"

static char description[512];

static void cpu_query(const kiln_device *dev, kiln_device_info *out) {
  memset(out, 0, sizeof *out);
  out->name = "cpu";
  out->vendor = "kiln";
  if (!description[0]) {
    /* The paths this process takes (after KILN_CPU_DISABLE): the usable
     * features, the SGEMM micro-kernel and what generated C targets. */
    char feats[192], target[192];
    kiln_cpu_features_string(kiln_cpu_features_get(), feats, (int)sizeof feats);
    kiln_jit_target_flags(target, (int)sizeof target);
    snprintf(description, sizeof description,
             "compiled C kernels, %d physical cores, %s; SGEMM kernel %s; generated C %s", kiln_physical_cores(),
             feats[0] ? feats : "(no SIMD features)", kiln_sgemm_kernel_name(), target);
  }
  out->description = description;
  out->host_memory = true;
}

static bool cpu_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  return kiln_lower_class(g, node, reason) != KILN_OPCLASS_NONE;
}

static void cpu_describe(kiln_device *dev, const struct kiln_executable *x, FILE *out) {
  const kiln_graph *g = x->g;
  int n_contract = 0, n_epilogues = 0;
  for (int i = 0; i < x->n_steps; i++) {
    n_contract += x->steps[i].kind != CPU_STEP_KERNEL && x->steps[i].kind != CPU_STEP_REF;
    n_epilogues += x->steps[i].kind == CPU_STEP_KERNEL && x->steps[i].fused_into >= 0;
  }
  fprintf(out,
          "compiled: %d nodes after optimization -> %d generated kernels (fusing %d nodes; %d of them run as GEMM/conv "
          "epilogues), %d contractions on SGEMM micro-kernels (%s), %d nodes on ref\n",
          g->n_nodes, x->n_kernels, x->n_fused_nodes, n_epilogues, n_contract, kiln_sgemm_kernel_name(), x->n_ref);
  if (x->n_ref) {
    fprintf(out, "fell back to ref:\n");
    for (int i = 0; i < x->n_steps; i++) {
      const cpu_step *s = &x->steps[i];
      if (s->kind != CPU_STEP_REF) continue;
      const char *why = NULL;
      kiln_lower_class(g, s->node, &why);
      fprintf(out, "  %-24s %-28s %s\n", s->node->op_type, s->node->name, why ? why : "?");
    }
  }
  fprintf(out, "memory: intermediates %.2f MiB in total, planned arena %.2f MiB (%.1f%%); im2col scratch %.2f MiB\n",
          (double)x->intermediate_bytes / (1 << 20), (double)x->arena_bytes / (1 << 20),
          x->intermediate_bytes ? 100.0 * (double)x->arena_bytes / (double)x->intermediate_bytes : 0.0,
          (double)x->scratch_bytes / (1 << 20));
}

static const kiln_device_vtable cpu_vtable = {
    .describe = cpu_describe,
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
