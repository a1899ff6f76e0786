/* The portable build of the interpreter's lane loops (lanes_impl.h), and
 * the choice between the builds at run time. */
#include <string.h>

#include "base/cpu_features.h"

#define LANES_TABLE kiln_lanes_generic
#define LANES_NAME "generic"
#include "devices/cpu/interp/lanes_impl.h"

#if !(defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)))
const kiln_lanes_ops kiln_lanes_avx2 = {0};
const kiln_lanes_ops kiln_lanes_avx512 = {0};
#endif

const kiln_lanes_ops *kiln_lanes(void) {
  const kiln_cpu_features *cpu = kiln_cpu_features_get();
  if (kiln_lanes_avx512.name && cpu->avx512f && cpu->avx512bw && cpu->avx512dq && cpu->avx512vl && cpu->fma)
    return &kiln_lanes_avx512;
  if (kiln_lanes_avx2.name && cpu->avx2 && cpu->fma) return &kiln_lanes_avx2;
  return &kiln_lanes_generic;
}

int kiln_lanes_fn_of(const char *name) {
  static const char *const names[KILN_FN_COUNT] = {
      [KILN_FN_EXP] = "kiln_expf",   [KILN_FN_SIGMOID] = "kiln_sigmoidf", [KILN_FN_TANH] = "kiln_tanhf",
      [KILN_FN_ERF] = "kiln_erff",   [KILN_FN_SOFTPLUS] = "kiln_softplusf", [KILN_FN_GELU] = "kiln_geluf",
      [KILN_FN_GELU_TANH] = "kiln_gelu_tanhf", [KILN_FN_SQRT] = "sqrtf", [KILN_FN_LOG] = "logf",
      [KILN_FN_FLOOR] = "floorf",    [KILN_FN_CEIL] = "ceilf",      [KILN_FN_ROUND] = "nearbyintf",
      [KILN_FN_SIN] = "sinf",        [KILN_FN_COS] = "cosf",        [KILN_FN_POW] = "powf",
      [KILN_FN_POW_POS] = "kiln_powf_pos", [KILN_FN_BF16_TRUNC] = "kiln_bf16_truncf",
  };
  for (int i = 0; name && i < KILN_FN_COUNT; i++)
    if (!strcmp(names[i], name)) return i;
  return -1;
}
