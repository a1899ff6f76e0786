/* kiln_tensor_wrap (include/kiln.h): a tensor over a caller's buffer,
 * whose release callback runs when the last reference goes. The callback
 * rides on the tensor's keepalive (tensor/tensor.h), the same mechanism
 * that keeps a model's mapped file alive under its weights. */
#include "tensor/tensor.h"

typedef struct caller_buffer {
  kiln_keepalive keep;
  kiln_release_fn release;
  void *user_data;
} caller_buffer;

static void caller_buffer_destroy(kiln_keepalive *k) {
  caller_buffer *b = (caller_buffer *)k;
  if (b->release) b->release(b->user_data);
  free(b);
}

kiln_status_t kiln_tensor_wrap(kiln_dtype dtype, int rank, const int64_t *dims, void *data, size_t nbytes,
                               kiln_release_fn release, void *user_data, kiln_tensor **out_tensor) {
  if (!out_tensor) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_tensor_wrap: out_tensor is NULL");
  *out_tensor = NULL;
  if (rank > 0 && !dims) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_tensor_wrap: dims is NULL for rank %d", rank);
  if (!kiln_dtype_is_valid((int)dtype) || dtype == KILN_DTYPE_UNDEFINED)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_tensor_wrap: invalid dtype %d", (int)dtype);
  if (dtype == KILN_DTYPE_STRING)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "kiln_tensor_wrap: string tensors cannot wrap a buffer (their elements are owned char "
                      "pointers); create one with kiln_tensor_create");
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_tensor_wrap: rank %d outside 0..%d", rank, KILN_MAX_RANK);
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "kiln_tensor_wrap: dimension %d is negative (%lld)", i,
                        (long long)dims[i]);
  char sb[256];
  int64_t numel = kiln_shape_numel(rank, dims), expected;
  if (numel < 0 || !kiln_mul_i64(numel, (int64_t)kiln_dtype_size(dtype), &expected))
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_tensor_wrap: shape %s has too many elements",
                      kiln_shape_str(rank, dims, sb, sizeof sb));
  if ((uint64_t)expected != (uint64_t)nbytes)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "kiln_tensor_wrap: nbytes is %zu, expected %lld (%lld elements of %s%s x %zu bytes)", nbytes,
                      (long long)expected, (long long)numel, kiln_dtype_name(dtype),
                      kiln_shape_str(rank, dims, sb, sizeof sb), kiln_dtype_size(dtype));
  if (!data && numel > 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_tensor_wrap: data is NULL for %lld elements of %s%s",
                      (long long)numel, kiln_dtype_name(dtype), kiln_shape_str(rank, dims, sb, sizeof sb));
  caller_buffer *b = calloc(1, sizeof *b);
  if (!b) return KILN_OOM();
  b->keep.destroy = caller_buffer_destroy;
  b->release = release;
  b->user_data = user_data;
  /* Our reference is handed to the tensor (kiln_tensor_wrap_borrowed retains one more). */
  b->keep.refcount = 1;
  kiln_status_t st = kiln_tensor_wrap_borrowed(dtype, rank, dims, data, &b->keep, out_tensor);
  if (st) {
    free(b); /* nothing retained it: release is not called on failure */
    return st;
  }
  b->keep.refcount--; /* the tensor holds the only reference now */
  return NULL;
}
