/* tensor.h — host tensors and runtime values.
 *
 * kiln_tensor: reference-counted, row-major, dense. Its bytes are either
 * owned (malloc'd, 64-byte aligned) or borrowed from a longer-lived owner
 * (the memory-mapped model file), in which case `keepalive` holds a
 * reference to that owner. STRING tensors own each char* element.
 *
 * kiln_value: what flows along a graph edge at run time: a tensor, a
 * sequence of tensors, or an empty optional. Values are owned by whoever
 * holds them; kiln_value_free releases the tensors inside.
 *
 * Not thread-safe: refcounts are plain ints (a session is single-threaded).
 */
#ifndef KILN_TENSOR_TENSOR_H
#define KILN_TENSOR_TENSOR_H

#include "base/common.h"
#include "tensor/dtype.h"

/* Something that keeps borrowed bytes alive (e.g. the model's mmap). */
typedef struct kiln_keepalive {
  int refcount;
  void (*destroy)(struct kiln_keepalive *self);
} kiln_keepalive;
void kiln_keepalive_retain(kiln_keepalive *k);
void kiln_keepalive_release(kiln_keepalive *k);

struct kiln_tensor {
  int refcount;
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t numel;
  void *data;              /* numel * dtype_size bytes (NULL allowed when numel == 0) */
  bool owns_data;          /* free(data) on destroy */
  kiln_keepalive *keepalive; /* retained owner of borrowed data, or NULL */
};

/* New tensor, zero-filled, refcount 1. Checks dims (non-negative, total
 * bytes <= kiln_limits_get()->max_tensor_bytes, base/limits.h). */
kiln_status_t kiln_tensor_new(kiln_dtype dtype, int rank, const int64_t *dims, kiln_tensor **out);
/* Same but with the data uninitialized (faster for kernels that write all). */
kiln_status_t kiln_tensor_new_uninit(kiln_dtype dtype, int rank, const int64_t *dims, kiln_tensor **out);
/* Tensor over borrowed bytes kept alive by `keepalive` (retained; may be NULL
 * for static data that outlives the tensor). */
kiln_status_t kiln_tensor_wrap_borrowed(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                               kiln_keepalive *keepalive, kiln_tensor **out);
/* Deep copy (strings duplicated). */
kiln_status_t kiln_tensor_clone(const kiln_tensor *t, kiln_tensor **out);
/* Same bytes, other shape: deep copy with new dims (numel must match). */
kiln_status_t kiln_tensor_reshaped(const kiln_tensor *t, int rank, const int64_t *dims, kiln_tensor **out);
size_t kiln_tensor_nbytes(const kiln_tensor *t);
/* Number of elements of dims; -1 on overflow or negative dims. */
int64_t kiln_shape_numel(int rank, const int64_t *dims);
/* "[2,3,4]" into buf. Returns buf. */
char *kiln_shape_str(int rank, const int64_t *dims, char *buf, size_t bufsize);
bool kiln_shape_equal(int ra, const int64_t *a, int rb, const int64_t *b);
/* Sets string element i (copies s; frees any old value). */
kiln_status_t kiln_tensor_set_string(kiln_tensor *t, int64_t i, const char *s, size_t len);

/* kiln_value_kind and the value calls bindings use are public (kiln.h);
 * the struct is kiln's own. */
struct kiln_value {
  kiln_value_kind kind;
  kiln_tensor *tensor;     /* KILN_VALUE_TENSOR: one reference owned */
  kiln_tensor **items;     /* KILN_VALUE_SEQUENCE: each item one reference owned */
  int n_items;
  kiln_dtype elem_dtype;   /* SEQUENCE (also when empty), NONE: declared element dtype if known */
  bool none_is_sequence;   /* NONE: the optional's declared type was a sequence */
};

/* Wraps a tensor (takes the caller's reference). */
kiln_status_t kiln_value_from_tensor(kiln_tensor *t, kiln_value **out);
/* New empty sequence of dtype. */
kiln_status_t kiln_value_new_sequence(kiln_dtype elem_dtype, kiln_value **out);
/* Appends (takes the reference) at position pos (-1 = end). */
kiln_status_t kiln_value_seq_insert(kiln_value *seq, int pos, kiln_tensor *t);
kiln_status_t kiln_value_new_none(kiln_dtype elem_dtype, bool is_sequence, kiln_value **out);
/* Shallow copy: new value sharing (retaining) the same tensors. */
kiln_status_t kiln_value_share(const kiln_value *v, kiln_value **out);
void kiln_value_free(kiln_value *v);

#endif
