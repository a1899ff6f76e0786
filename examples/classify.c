/* classify — the smallest complete use of kiln's C API: load an image
 * classifier, run it on one .npy input, print the top classes.
 *
 *   kiln_example MODEL.onnx INPUT.npy [LABELS.txt]
 *
 * Uses only the public header include/kiln.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

static int fail(kiln_status_t st) {
  fprintf(stderr, "error: %s\n", kiln_status_message(st));
  kiln_status_free(st);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.onnx INPUT.npy [LABELS.txt]\n", argv[0]);
    return 2;
  }
  kiln_model *model = NULL;
  kiln_status_t st = kiln_model_load_file(argv[1], &model);
  if (st) return fail(st);

  kiln_io_info in_info;
  st = kiln_model_input_info(model, 0, &in_info);
  if (st) return fail(st);

  kiln_tensor *input = NULL;
  st = kiln_tensor_load_npy(argv[2], &input);
  if (st) return fail(st);

  kiln_session_options opts = kiln_session_options_default();
  kiln_session *session = NULL;
  st = kiln_session_create(model, &opts, &session);
  if (st) return fail(st);

  const char *names[1] = {in_info.name};
  kiln_tensor *logits = NULL;
  st = kiln_session_run(session, 1, names, (const kiln_tensor *const *)&input, 1, &logits);
  if (st) return fail(st);

  /* Softmax over the last axis of the first row, then the top 3. */
  if (kiln_tensor_dtype(logits) != KILN_DTYPE_F32) {
    fprintf(stderr, "error: expected f32 logits\n");
    return 1;
  }
  int rank = kiln_tensor_rank(logits);
  int64_t n = rank ? kiln_tensor_dims(logits)[rank - 1] : 1;
  const float *z = kiln_tensor_data(logits);
  double mx = z[0], sum = 0;
  for (int64_t i = 1; i < n; i++) mx = z[i] > mx ? z[i] : mx;
  for (int64_t i = 0; i < n; i++) sum += exp(z[i] - mx);

  char labels[64][64];
  int n_labels = 0;
  FILE *lf = argc > 3 ? fopen(argv[3], "r") : NULL;
  while (lf && n_labels < 64 && fgets(labels[n_labels], sizeof labels[0], lf)) {
    labels[n_labels][strcspn(labels[n_labels], "\r\n")] = 0;
    n_labels++;
  }
  if (lf) fclose(lf);

  int used[64] = {0};
  printf("top classes for %s:\n", argv[2]);
  for (int k = 0; k < 3 && k < n && n <= 64; k++) {
    int best = -1;
    for (int64_t i = 0; i < n; i++)
      if (!used[i] && (best < 0 || z[i] > z[best])) best = (int)i;
    used[best] = 1;
    printf("  %d. %-12s p=%.3f\n", k + 1, best < n_labels ? labels[best] : "?", exp(z[best] - mx) / sum);
  }

  kiln_tensor_release(logits);
  kiln_tensor_release(input);
  kiln_session_destroy(session);
  kiln_model_destroy(model);
  return 0;
}
