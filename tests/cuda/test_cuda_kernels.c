/* Every generated kernel of the given models, in the CUDA C dialect,
 * compiles with NVRTC to a cubin for sm_90 (the H100/H200 class), on a
 * machine with the CUDA toolkit and no GPU. The kernels are the null
 * device's plan (the whole compiler, contractions as kernels of their
 * compute definitions), scheduled one thread per output element and
 * rendered by kiln_render_cuda; one NVRTC program per model.
 *   test_cuda_kernels MODEL.onnx...
 * Exit 0 pass, 1 a kernel failed to render or compile (NVRTC's log is
 * printed), 2 usage or a model that does not load, 77 no NVRTC. */
#include <stdio.h>
#include <time.h>

#include "codegen/loopnest.h"
#include "devices/cuda/cuda_nvrtc.h"
#include "onnx/onnx.h"
#include "runtime/plan.h"
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
  kiln_strbuf src = {0};
  int n_kernels = 0, n_host = 0;
  if (!st) kiln_strbuf_puts(&src, kiln_cuda_preamble());
  for (int i = 0; p && i < p->n_steps && !st; i++) {
    const kiln_plan_step *ps = &p->steps[i];
    if (ps->kind == KILN_STEP_HOST) {
      n_host++;
      continue;
    }
    kiln_loop_nest nest = {0};
    kiln_loop_schedule sched = kiln_loop_schedule_default();
    char name[64];
    snprintf(name, sizeof name, "k%d_%s", i, ps->node->op_type);
    st = kiln_schedule_kernel(ps->fk.b, ps->fk.root, 0, &sched, &nest);
    if (!st) st = kiln_render_cuda(ps->fk.b, &nest, name, &src);
    if (st) st = kiln_status_annotate(st, "kernel %s (node '%s')", name, ps->node->name);
    kiln_loop_nest_free(&nest);
    n_kernels++;
  }
  if (!st) st = kiln_strbuf_status(&src);
  void *cubin = NULL;
  size_t cubin_bytes = 0;
  double t0 = now_s();
  if (!st) st = kiln_nvrtc_compile(src.data, path, 90, &cubin, &cubin_bytes);
  double t1 = now_s();
  int rc = 0;
  if (st) {
    printf("FAIL %s: %s\n", path, kiln_status_message(st));
    kiln_status_free(st);
    rc = 1;
  } else {
    printf("ok   %s: %d kernels (%d nodes on ref), %zu bytes of CUDA C -> %zu-byte cubin for sm_90 in %.2f s\n", path,
           n_kernels, n_host, src.len, cubin_bytes, t1 - t0);
    if (n_host) {
      printf("FAIL %s: %d nodes left to ref: not every node was compiled\n", path, n_host);
      rc = 1;
    }
  }
  free(cubin);
  kiln_strbuf_free(&src);
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
