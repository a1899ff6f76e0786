/* The cpu device: kiln's default. It compiles the graph (fused, generated C
 * kernels and packed SGEMM micro-kernels, multi-threaded) and runs what it
 * cannot compile on the reference kernels inside the same executable.
 * Every kernel also has a precompiled form (interp/), so the device exists
 * without a C compiler: it then runs on those alone, and says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "codegen/jit.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"
#include "devices/cpu/interp/interp.h"

static char description[1024];

static void cpu_query(const kiln_device *dev, kiln_device_info *out) {
  memset(out, 0, sizeof *out);
  out->name = "cpu";
  out->vendor = "kiln";
  if (!description[0]) {
    /* The paths this process takes (after KILN_CPU_DISABLE): the usable
     * features, the SGEMM micro-kernel, what generated C targets, and
     * whether there is a compiler at all. */
    char feats[192], target[192], jit[320];
    kiln_cpu_features_string(kiln_cpu_features_get(), feats, (int)sizeof feats);
    kiln_jit_target_flags(target, (int)sizeof target);
    kiln_status_t st = kiln_jit_available();
    const char *mode = getenv("KILN_JIT");
    if (st) snprintf(jit, sizeof jit, "JIT unavailable (%s): precompiled kernels only", kiln_status_message(st));
    else if (mode && !strcmp(mode, "off")) snprintf(jit, sizeof jit, "JIT off (KILN_JIT=off): precompiled kernels only");
    else snprintf(jit, sizeof jit, "JIT %s; generated C %s", mode && !strcmp(mode, "sync") ? "before the first run" : "tiered", target);
    kiln_status_free(st);
    snprintf(description, sizeof description,
             "fused kernels, %d physical cores, %s; SGEMM kernel %s; precompiled kernels %s; %s",
             kiln_physical_cores(), feats[0] ? feats : "(no SIMD features)", kiln_sgemm_kernel_name(),
             kiln_interp_isa(), jit);
  }
  out->description = description;
  out->host_memory = true;
  out->features = KILN_DEVICE_FEATURE_RECURRENT_ROUTINE | KILN_DEVICE_FEATURE_ATTENTION_ROUTINE;
  /* With VNNI the 8-bit GEMM's vpdpbusd quads (gemm/igemm*) beat the f32
   * convolutions (QDQ ResNet-50: 67 against 77 ms fp32 on a Zen 4); without,
   * its int16 pairs do not. */
  const kiln_cpu_features *cf = kiln_cpu_features_get();
  if (cf->avx512_vnni || cf->avx_vnni) out->features |= KILN_DEVICE_FEATURE_QDQ_INTEGER;
}

static bool cpu_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  return kiln_cpu_recurrent_routine(g, node) || kiln_cpu_attention_routine(g, node) ||
         kiln_lower_class(g, node, reason) != KILN_OPCLASS_NONE;
}

static void cpu_plan_describe(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  cpu_exec *x = state;
  static const char *const modes[] = {"tiered", "sync", "off"};
  fprintf(out,
          "cpu: kernels: %d compiled, %d precompiled (JIT %s%s); contractions tensorized onto the %s SGEMM "
          "micro-kernel and the conv algorithms; conv scratch %.2f MiB (grown at the first run)\n",
          atomic_load(&x->kernels_jit), atomic_load(&x->kernels_interp), modes[x->mode],
          x->pending                                   ? ", compiling in the background after the first run"
          : x->compiling && !atomic_load(&x->compiled) ? ", compiling in the background"
                                                       : "",
          kiln_sgemm_kernel_name(),
          (double)x->scratch_bytes / (1 << 20));
}

static const kiln_device_vtable cpu_vtable = {
    .query = cpu_query,
    .supports = cpu_supports,
    .plan_begin = kiln_cpu_plan_begin,
    .plan_compile = kiln_cpu_plan_compile,
    .launch_step = kiln_cpu_launch_step,
    .plan_end = kiln_cpu_plan_end,
    .plan_describe = cpu_plan_describe,
    .host_kernel = kiln_cpu_host_kernel,
};

static kiln_device cpu_device = {&cpu_vtable, NULL};

/* Always there: without a C compiler it runs its precompiled kernels. */
static int cpu_enumerate(kiln_device **out, int max, const char **why_absent) {
  (void)why_absent;
  if (max < 1) return 0;
  out[0] = &cpu_device;
  return 1;
}

const kiln_device_provider kiln_cpu_provider = {.name = "cpu", .enumerate = cpu_enumerate};
