/* Every generated kernel of the given models, in the CUDA C dialect,
 * compiles with NVRTC to a cubin for sm_90 (the H100/H200 class), on a
 * machine with the CUDA toolkit and no GPU. The kernels are the null
 * device's plan (the whole compiler, contractions as kernels of their
 * compute definitions), rendered into one module by
 * kiln_plan_render_kernels in the CUDA C dialect exactly as the CUDA
 * device builds it at prepare; one NVRTC program per model.
 *   test_cuda_kernels MODEL.onnx...
 * Exit 0 pass, 1 a kernel failed to render or compile (NVRTC's log is
 * printed), 2 usage or a model that does not load, 77 no NVRTC. */
#include <stdio.h>
#include <time.h>

#include "devices/cuda/cu_internal.h"
#include "devices/cuda/cuda_nvrtc.h"
#include "onnx/onnx.h"
#include "runtime/plan_kernels.h"
#include "runtime/session.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The model's plan on the null device, specialized to its declared input
 * shapes (symbolic dims 1). */
static kiln_status_t plan_of(const kiln_model *model, kiln_session **out_s, const kiln_plan **out_p) {
  kiln_session_options so = kiln_session_options_default();
  so.device = "null";
  kiln_session *s;
  KILN_TRY(kiln_session_create(model, &so, &s));
  const kiln_graph *spec = NULL;
  kiln_status_t st = kiln_session_specialize_declared(s, &spec);
  if (!st && !s->exec) st = kiln_error(KILN_INTERNAL, "the null device did not compile it: %s", s->fallback_reason);
  if (st) {
    kiln_session_destroy(s);
    return st;
  }
  *out_s = s;
  *out_p = kiln_plan_of(s->exec);
  return NULL;
}

static int test_model(const char *path) {
  kiln_model *model;
  kiln_status_t st = kiln_model_load_file(path, &model);
  if (st) {
    printf("FAIL %s: %s\n", path, kiln_status_message(st));
    kiln_status_free(st);
    return 2;
  }
  kiln_session *s = NULL;
  const kiln_plan *p = NULL;
  st = plan_of(model, &s, &p);
  kiln_plan_kernels ks = {0};
  int n_host = 0;
  for (int i = 0; p && i < p->n_steps; i++) n_host += p->steps[i].kind == KILN_STEP_HOST;
  /* Exactly what the CUDA device builds at prepare: one module of every kernel. */
  kiln_loop_schedule sched = cu_gpu_schedule(132); /* an H200's SMs */
  kiln_plan_dialect dialect = {"cuda", "cu", kiln_cuda_preamble(), NULL, kiln_render_cuda};
  if (!st) st = kiln_plan_render_kernels(p, &dialect, &sched, &ks);
  void *cubin = NULL;
  size_t cubin_bytes = 0;
  double t0 = now_s();
  if (!st) st = kiln_nvrtc_compile(ks.source, path, 90, &cubin, &cubin_bytes);
  double t1 = now_s();
  int rc = 0;
  if (st) {
    printf("FAIL %s: %s\n", path, kiln_status_message(st));
    kiln_status_free(st);
    rc = 1;
  } else {
    printf("ok   %s: %d kernels (%d nodes on ref), %zu bytes of CUDA C -> %zu-byte cubin for sm_90 in %.2f s\n", path,
           ks.n_kernels, n_host, ks.source_bytes, cubin_bytes, t1 - t0);
    if (n_host) {
      printf("FAIL %s: %d nodes left to ref: not every node was compiled\n", path, n_host);
      rc = 1;
    }
  }
  free(cubin);
  kiln_plan_kernels_free(&ks);
  kiln_session_destroy(s);
  kiln_model_destroy(model);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_cuda_kernels MODEL.onnx...\n");
    return 2;
  }
  char version[32];
  kiln_status_t st = kiln_nvrtc_available(version, sizeof version);
  if (st) {
    printf("SKIP: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 77;
  }
  printf("NVRTC %s\n", version);
  int worst = 0;
  for (int i = 1; i < argc; i++) {
    int rc = test_model(argv[i]);
    if (rc > worst) worst = rc;
  }
  printf("%s\n", worst ? "FAIL" : "PASS");
  return worst;
}
