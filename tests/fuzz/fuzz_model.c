/* fuzz_model.c — libFuzzer target for the ONNX model reader.
 *
 * Any byte string must load or fail with a status: never crash, leak, read
 * out of bounds or allocate more than the input justifies. Loaded models
 * are also serialized again, which walks every decoded structure.
 *
 *   clang -fsanitize=fuzzer,address,undefined ... fuzz_model.c libkiln.a
 *   ./fuzz_model tests/fuzz/corpus_model
 */
#include "onnx/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_model_ir *m = NULL;
  kiln_status_t st = kiln_onnx_load_buffer(data, size, &m);
  if (st) {
    kiln_status_free(st);
    return 0;
  }
  uint8_t *out = NULL;
  size_t n = 0;
  kiln_status_free(kiln_onnx_serialize(m, &out, &n));
  free(out);
  kiln_model_ir_free(m);
  return 0;
}
