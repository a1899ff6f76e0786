/* kiln_check_model MODEL.onnx INPUT.npy EXPECTED.npy [--device D] [--fp16]
 * Runs a one-input model on a device (default ref) and compares its first
 * output with a reference computed by the framework that exported it
 * (PyTorch): |got - want| <= 1e-4 + 1e-3 |want| everywhere. On a compiling
 * device (cpu, vulkan) the model must also run entirely on it: a graph it
 * left to the interpreter, or any node of its compiled graph it does not
 * claim (which would run on ref), fails the check.
 *
 * --fp16: the session keeps float tensors in fp16 (KILN_PRECISION_FP16); the
 * stated tolerance is then |got - want| <= 1e-2 |want| + 1e-2 max|want|
 * (every intermediate is rounded to half, 2^-11 relative, and errors add up
 * over a deep network's layers). */
#include <math.h>
#include <stdio.h>

#include "runtime/session.h"
#include "tensor/npy.h"

static int fail(kiln_status_t st) {
  printf("FAIL: %s\n", kiln_status_message(st));
  kiln_status_free(st);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.onnx INPUT.npy EXPECTED.npy [--device D] [--fp16]\n", argv[0]);
    return 2;
  }
  const char *device = "ref";
  bool fp16 = false;
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--fp16")) fp16 = true;
    else {
      fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  kiln_model *model;
  kiln_status_t st = kiln_model_load_file(argv[1], &model);
  if (st) return fail(st);
  kiln_tensor *input, *want, *got = NULL;
  if ((st = kiln_npy_read_file(argv[2], &input))) return fail(st);
  if ((st = kiln_npy_read_file(argv[3], &want))) return fail(st);
  kiln_session_options so = kiln_session_options_default();
  so.device = device;
  if (fp16) so.precision = KILN_PRECISION_FP16;
  kiln_session *sess;
  if ((st = kiln_session_create(model, &so, &sess))) return fail(st);
  kiln_io_info info;
  if ((st = kiln_model_input_info(model, 0, &info))) return fail(st);
  const char *names[1] = {info.name};
  if ((st = kiln_session_run(sess, 1, names, (const kiln_tensor *const *)&input, 1, &got))) return fail(st);
  kiln_device *dev = sess->devices[0];
  if (dev->vt->plan_begin) {
    if (!sess->exec) {
      printf("FAIL: %s interpreted the graph instead of compiling it: %s\n", device, sess->fallback_reason);
      return 1;
    }
    int fell = 0;
    for (int i = 0; i < sess->specialized->n_nodes; i++) {
      const kiln_node *n = &sess->specialized->nodes[i];
      const char *why = NULL;
      if (dev->vt->supports(dev, sess->specialized, n, &why)) continue;
      printf("FAIL: node '%s' (%s) falls back to ref on %s: %s\n", n->name, n->op_type, device, why ? why : "?");
      fell++;
    }
    if (fell) return 1;
  }
  char a[256], b[256];
  if (got->dtype != want->dtype || !kiln_shape_equal(got->rank, got->dims, want->rank, want->dims)) {
    printf("FAIL: output %s%s, expected %s%s\n", kiln_dtype_name(got->dtype), kiln_shape_str(got->rank, got->dims, a, sizeof a),
           kiln_dtype_name(want->dtype), kiln_shape_str(want->rank, want->dims, b, sizeof b));
    return 1;
  }
  double max_abs = 0, worst = 0, max_want = 0;
  for (int64_t i = 0; i < want->numel; i++) max_want = fmax(max_want, fabs(kiln_load_f64(want->data, want->dtype, i)));
  /* f32: rtol 1e-3 and atol 1e-4, the atol raised to 1e-6 of the output's
   * largest magnitude (about 8 f32 ulps of it): an element that cancels
   * down from values of that size carries their rounding (ResNet-50's
   * logits reach 3.2e3; ref itself is 4.4e-3 off on them, and a -0.71
   * there came out 8.5e-4 apart when 1x1 convolutions summed in SGEMM's
   * order instead of a loop's). */
  double rtol = fp16 ? 1e-2 : 1e-3, atol = fp16 ? 1e-2 * max_want : fmax(1e-4, 1e-6 * max_want);
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < got->numel; i++) {
    double x = kiln_load_f64(got->data, got->dtype, i), y = kiln_load_f64(want->data, want->dtype, i);
    double d = fabs(x - y);
    if (d > max_abs) max_abs = d;
    double excess = d / (atol + rtol * fabs(y));
    if (excess > worst) worst = excess;
    if (!(d <= atol + rtol * fabs(y))) {
      if (first_bad < 0) first_bad = i;
      bad++;
    }
  }
  printf("%s on %s%s: %lld values, max abs err %.3g, worst err/tolerance %.3f\n", argv[1], device, fp16 ? " (fp16)" : "",
         (long long)got->numel, max_abs, worst);
  if (bad) {
    printf("FAIL: %lld values outside rtol %g atol %g (first at %lld: %g vs %g)\n", (long long)bad, rtol, atol,
           (long long)first_bad, kiln_load_f64(got->data, got->dtype, first_bad),
           kiln_load_f64(want->data, want->dtype, first_bad));
    return 1;
  }
  kiln_tensor_release(got);
  kiln_tensor_release(input);
  kiln_tensor_release(want);
  kiln_session_destroy(sess);
  kiln_model_destroy(model);
  printf("PASS\n");
  return 0;
}
