/* The per-plane driver of the cpu's plane routines (kiln_rt.pooling,
 * kiln_rt.resample): planes spread over the pool, one scratch block per
 * chunk of planes, each plane computed by the routine and then given to
 * the kernel's epilogue while it is in cache (one plane a tile); with no y
 * (an output that is not f32) into a scratch plane the epilogue stores
 * from. */
#include <stdlib.h>

#include "devices/cpu/cpu_internal.h"

static void run_chunk(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const kiln_cpu_planes *p = ctx;
  /* y NULL: one more plane of scratch receives each plane, for the epilogue to store. */
  size_t extra = p->y ? 0 : (size_t)p->out_size;
  float *scratch = p->scratch + extra ? malloc((p->scratch + extra) * sizeof(float)) : NULL;
  if (p->scratch + extra && !scratch) {
    p->rt->fail(p->rt, p->oom_message);
    return;
  }
  for (int64_t i = begin; i < end; i++) {
    float *y = p->y ? p->y + i * p->out_size : scratch + p->scratch;
    p->plane(p->job, p->x + i * p->in_size, y, p->scratch ? scratch : NULL);
    if (p->epilogue) {
      kiln_rt_epilogue_ctx e = {p->epilogue_buffers, 0, p->out_size};
      p->epilogue(&e, y, p->out_size, i, 0, 1, p->out_size);
    }
  }
  free(scratch);
}

void kiln_cpu_run_planes(const kiln_cpu_planes *p, int64_t planes) {
  p->rt->parallel_for(p->rt->pool, planes, 1, run_chunk, (void *)p);
}
