/* kiln_rt.resample on the cpu: Resize by per-axis tables (kiln.Resample)
 * as separable passes, one resampled axis at a time, innermost first.
 *
 * The generated loops evaluate every output as the tensor product of its
 * axes' taps (4 gathers and weight products for bilinear 2-D, 64 for
 * tricubic 3-D); a pass computes each intermediate row once and the outer
 * axes' passes are row combinations the compiler vectorizes. The sums
 * round differently from the product form (within the tests' tolerance);
 * both tiers call this routine, so they agree with each other. The pass
 * (cpu_resample_impl.h) is built portable and for AVX2. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/cpu_features.h"
#include "devices/cpu/cpu_internal.h"

#define RESAMPLE_FN(name) name##_generic
#include "devices/cpu/cpu_resample_impl.h"
#undef RESAMPLE_FN

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RESAMPLE_HAVE_AVX2 1
#include "devices/cpu/target_avx2_begin.h"
#define RESAMPLE_FN(name) name##_avx2
#include "devices/cpu/cpu_resample_impl.h"
#undef RESAMPLE_FN
#include "devices/cpu/target_avx2_end.h"
#endif

typedef struct resample_job {
  const kiln_rt *rt;
  const kiln_rt_resample_args *a;
  int order[3];   /* the tables, innermost axis first */
  size_t scratch; /* floats per plane: two blocks of the largest intermediate */
  bool avx2;
} resample_job;

/* One plane: a pass per resampled axis, innermost first; the last writes y. */
static void resample_plane(const void *job, const float *src, float *y, float *scratch) {
  const resample_job *j = job;
  const kiln_rt_resample_args *a = j->a;
  int nsp = a->nsp;
  int64_t dims[6], out_size = 1;
  for (int i = 0; i < nsp; i++) {
    dims[i] = a->in[i];
    out_size *= a->out[i];
  }
  for (int k = 0; k < a->n_axes; k++) {
    int t = j->order[k], ax = a->axis[t];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++) outer *= dims[d];
    for (int d = ax + 1; d < nsp; d++) inner *= dims[d];
    float *dst = k == a->n_axes - 1 ? y : scratch + (size_t)(k & 1) * (j->scratch / 2);
#ifdef RESAMPLE_HAVE_AVX2
    if (j->avx2)
      pass_avx2(src, dst, outer, dims[ax], a->out[ax], inner, a->taps[t], a->index[t], a->weight[t]);
    else
#endif
      pass_generic(src, dst, outer, dims[ax], a->out[ax], inner, a->taps[t], a->index[t], a->weight[t]);
    dims[ax] = a->out[ax];
    src = dst;
  }
  if (a->n_axes == 0)
    for (int64_t e = 0; e < out_size; e++) y[e] = src[e];
}

void kiln_cpu_resample(const kiln_rt *rt, const kiln_rt_resample_args *a) {
  resample_job j = {.rt = rt, .a = a};
  const kiln_cpu_features *cpu = kiln_cpu_features_get();
  j.avx2 = cpu->avx2 && cpu->fma;
  /* Innermost axis first (tables in any order). */
  for (int k = 0; k < a->n_axes; k++) j.order[k] = k;
  for (int k = 1; k < a->n_axes; k++)
    for (int m = k; m > 0 && a->axis[j.order[m]] > a->axis[j.order[m - 1]]; m--) {
      int t = j.order[m];
      j.order[m] = j.order[m - 1];
      j.order[m - 1] = t;
    }
  int64_t dims[6], biggest = 0;
  for (int i = 0; i < a->nsp; i++) dims[i] = a->in[i];
  for (int k = 0; k + 1 < a->n_axes; k++) { /* the intermediates (the last pass writes y) */
    dims[a->axis[j.order[k]]] = a->out[a->axis[j.order[k]]];
    int64_t e = 1;
    for (int d = 0; d < a->nsp; d++) e *= dims[d];
    if (e > biggest) biggest = e;
  }
  j.scratch = (size_t)(2 * biggest);
  kiln_cpu_planes planes = {.rt = rt, .oom_message = "out of memory for a resize's scratch",
                            .plane = resample_plane, .job = &j, .x = a->x, .y = a->y, .in_size = 1, .out_size = 1,
                            .scratch = j.scratch, .epilogue = a->epilogue, .epilogue_buffers = a->epilogue_buffers};
  for (int i = 0; i < a->nsp; i++) {
    planes.in_size *= a->in[i];
    planes.out_size *= a->out[i];
  }
  kiln_cpu_run_planes(&planes, a->planes);
}
