/* fuzz_npy — libFuzzer target for the .npy and .npz readers.
 *
 * Inputs starting with "PK" go to the .npz reader, everything else to the
 * .npy reader. Whatever parses must also survive a round trip: written back
 * and read again it gives the same tensor (strings that are not valid UTF-8
 * may fail to write; that is allowed). A mismatch traps.
 *
 * An untyped '<V1'/'<V2' descr (np.save of ml_dtypes arrays) is read as the
 * dtype the input's last byte picks (none, bf16, or one of the narrow
 * types), so every narrow dtype's path is reached.
 *
 * Seeds: tests/fuzz/corpus_npy/ (tiny files written by NumPy, ml_dtypes).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/npy.h"

static bool same(const kiln_tensor *a, const kiln_tensor *b) {
  if (a->dtype != b->dtype || !kiln_shape_equal(a->rank, a->dims, b->rank, b->dims)) return false;
  if (a->dtype != KILN_DTYPE_STRING) return !a->numel || !memcmp(a->data, b->data, kiln_tensor_nbytes(a));
  for (int64_t i = 0; i < a->numel; i++) {
    const char *x = ((char **)a->data)[i], *y = ((char **)b->data)[i];
    if (strcmp(x ? x : "", y ? y : "")) return false;
  }
  return true;
}

static void check_round_trip(const kiln_tensor *t) {
  void *buf = NULL;
  size_t n = 0;
  kiln_status_t st = kiln_npy_write_buffer(t, &buf, &n);
  if (st) {
    if (t->dtype != KILN_DTYPE_STRING) __builtin_trap(); /* only bad UTF-8 may fail */
    kiln_status_free(st);
    return;
  }
  kiln_tensor *back = NULL;
  st = kiln_npy_read_buffer_as(buf, n, NULL, t->dtype, &back);
  if (st || !same(t, back)) __builtin_trap();
  kiln_tensor_release(back);
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    int n = 0;
    char **names = NULL;
    kiln_tensor **ts = NULL;
    kiln_status_t st = kiln_npz_read_buffer(data, size, &n, &names, &ts);
    if (st) {
      kiln_status_free(st);
      return 0;
    }
    for (int i = 0; i < n; i++) check_round_trip(ts[i]);
    kiln_npz_free(n, names, ts);
    return 0;
  }
  static const kiln_dtype void_as[] = {
      KILN_DTYPE_UNDEFINED, KILN_DTYPE_BF16, KILN_DTYPE_F8E4M3FN, KILN_DTYPE_F8E4M3FNUZ, KILN_DTYPE_F8E5M2,
      KILN_DTYPE_F8E5M2FNUZ, KILN_DTYPE_F8E8M0, KILN_DTYPE_F4E2M1, KILN_DTYPE_U4, KILN_DTYPE_I4, KILN_DTYPE_U2,
      KILN_DTYPE_I2};
  kiln_dtype as = size ? void_as[data[size - 1] % (sizeof void_as / sizeof void_as[0])] : KILN_DTYPE_UNDEFINED;
  kiln_tensor *t = NULL;
  kiln_status_t st = kiln_npy_read_buffer_as(data, size, NULL, as, &t);
  if (st) {
    kiln_status_free(st);
    return 0;
  }
  check_round_trip(t);
  kiln_tensor_release(t);
  return 0;
}
