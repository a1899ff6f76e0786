#include "tensor/tensor.h"

#include "base/limits.h"

#include <stdio.h>

void kiln_keepalive_retain(kiln_keepalive *k) {
  if (k) k->refcount++;
}

void kiln_keepalive_release(kiln_keepalive *k) {
  if (k && --k->refcount == 0) k->destroy(k);
}

int64_t kiln_shape_numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    if (!kiln_mul_i64(n, dims[i], &n)) return -1;
  return n;
}

char *kiln_shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
  size_t o = 0;
  if (size == 0) return buf;
  buf[0] = 0;
  if (rank < 0) {
    snprintf(buf, size, "[?]");
    return buf;
  }
  o += (size_t)snprintf(buf + o, size - o, "[");
  for (int i = 0; i < rank && o < size; i++) {
    if (dims[i] < 0)
      o += (size_t)snprintf(buf + o, size - o, "%s?", i ? "," : "");
    else
      o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)dims[i]);
  }
  if (o < size) snprintf(buf + o, size - o, "]");
  return buf;
}

bool kiln_shape_equal(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra != rb) return false;
  for (int i = 0; i < ra; i++)
    if (a[i] != b[i]) return false;
  return true;
}

/* Data of at most this many bytes shares the header's block (one
 * allocation instead of two, and no aligned one: a Loop body's small
 * results are allocated every iteration). */
#define KILN_TENSOR_INLINE_BYTES 512

/* The header; with `inline_data`, followed in the same block by room for
 * the data (64-byte aligned) when it is small, t->data then pointing there
 * (and owns_data false: freeing the header frees it). */
static kiln_status_t tensor_header(kiln_dtype dtype, int rank, const int64_t *dims, bool inline_data,
                                   kiln_tensor **out, int64_t *out_bytes) {
  *out = NULL;
  if (!kiln_dtype_is_valid((int)dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "invalid dtype %d", (int)dtype);
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_error(KILN_UNSUPPORTED, "rank %d outside 0..%d", rank, KILN_MAX_RANK);
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0) return kiln_error(KILN_INVALID_ARGUMENT, "negative dimension %lld", (long long)dims[i]);
  int64_t numel = kiln_shape_numel(rank, dims), bytes;
  int64_t limit = kiln_limits_get()->max_tensor_bytes;
  if (numel < 0 || !kiln_mul_i64(numel, (int64_t)kiln_dtype_size(dtype), &bytes) || bytes > limit) {
    char s[256];
    return kiln_error(KILN_OUT_OF_MEMORY, "tensor of shape %s and dtype %s is too large (limit %lld bytes%s)",
                      kiln_shape_str(rank, dims, s, sizeof s), kiln_dtype_name(dtype), (long long)limit,
                      limit < KILN_MAX_TENSOR_BYTES ? ", KILN_MAX_TENSOR_BYTES" : "");
  }
  bool in_block = inline_data && dtype != KILN_DTYPE_STRING && bytes <= KILN_TENSOR_INLINE_BYTES;
  kiln_tensor *t = calloc(1, sizeof *t + (in_block ? 63 + (size_t)(bytes ? bytes : 1) : 0));
  if (!t) return KILN_OOM();
  if (in_block) t->data = (void *)(((uintptr_t)(t + 1) + 63) & ~(uintptr_t)63);
  t->refcount = 1;
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  t->numel = numel;
  *out = t;
  *out_bytes = bytes;
  return NULL;
}

static kiln_status_t tensor_alloc(kiln_dtype dtype, int rank, const int64_t *dims, bool zero, kiln_tensor **out) {
  int64_t bytes;
  KILN_TRY(tensor_header(dtype, rank, dims, true, out, &bytes));
  kiln_tensor *t = *out;
  if (t->data) return NULL; /* in the header's block, zeroed with it */
  /* At least one line so data != NULL. */
  size_t alloc = ((size_t)bytes + 63) & ~(size_t)63;
  if (alloc == 0) alloc = 64;
  t->data = alloc >= KILN_BIG_BLOCK ? kiln_big_alloc(alloc) : kiln_alloc_aligned(alloc);
  if (!t->data) {
    free(t);
    *out = NULL;
    return kiln_error(KILN_OUT_OF_MEMORY, "out of memory allocating %lld bytes", (long long)bytes);
  }
  if (zero || dtype == KILN_DTYPE_STRING) memset(t->data, 0, alloc);
  t->owns_data = true;
  return NULL;
}

kiln_status_t kiln_tensor_new(kiln_dtype dtype, int rank, const int64_t *dims, kiln_tensor **out) {
  return tensor_alloc(dtype, rank, dims, true, out);
}

kiln_status_t kiln_tensor_new_uninit(kiln_dtype dtype, int rank, const int64_t *dims, kiln_tensor **out) {
  return tensor_alloc(dtype, rank, dims, false, out);
}

kiln_status_t kiln_tensor_wrap_borrowed(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                               kiln_keepalive *keepalive, kiln_tensor **out) {
  int64_t bytes;
  KILN_TRY(tensor_header(dtype, rank, dims, false, out, &bytes));
  (*out)->data = data;
  (*out)->keepalive = keepalive;
  kiln_keepalive_retain(keepalive);
  return NULL;
}

size_t kiln_tensor_nbytes(const kiln_tensor *t) { return (size_t)t->numel * kiln_dtype_size(t->dtype); }

kiln_status_t kiln_tensor_set_string(kiln_tensor *t, int64_t i, const char *s, size_t len) {
  char **slot = (char **)t->data + i;
  char *c = malloc(len + 1);
  if (!c) return KILN_OOM();
  memcpy(c, s, len);
  c[len] = 0;
  free(*slot);
  *slot = c;
  return NULL;
}

kiln_status_t kiln_tensor_reshaped(const kiln_tensor *t, int rank, const int64_t *dims, kiln_tensor **out) {
  if (kiln_shape_numel(rank, dims) != t->numel)
    return kiln_error(KILN_INVALID_ARGUMENT, "cannot reshape %lld elements", (long long)t->numel);
  KILN_TRY(kiln_tensor_new_uninit(t->dtype, rank, dims, out));
  if (t->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < t->numel; i++) {
      const char *s = ((char **)t->data)[i];
      kiln_status_t st = kiln_tensor_set_string(*out, i, s ? s : "", s ? strlen(s) : 0);
      if (st) {
        kiln_tensor_release(*out);
        *out = NULL;
        return st;
      }
    }
  } else if (t->numel) {
    memcpy((*out)->data, t->data, kiln_tensor_nbytes(t));
  }
  return NULL;
}

kiln_status_t kiln_tensor_clone(const kiln_tensor *t, kiln_tensor **out) {
  return kiln_tensor_reshaped(t, t->rank, t->dims, out);
}

/* ---- public API -------------------------------------------------------- */

kiln_status_t kiln_tensor_create(kiln_dtype dtype, int rank, const int64_t *dims, kiln_tensor **out_tensor) {
  if (!out_tensor || (rank > 0 && !dims)) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  return kiln_tensor_new(dtype, rank, dims, out_tensor);
}

kiln_tensor *kiln_tensor_retain(kiln_tensor *t) {
  if (t) t->refcount++;
  return t;
}

void kiln_tensor_release(kiln_tensor *t) {
  if (!t || --t->refcount > 0) return;
  if (t->owns_data) {
    if (t->dtype == KILN_DTYPE_STRING)
      for (int64_t i = 0; i < t->numel; i++) free(((char **)t->data)[i]);
    /* (the size tensor_alloc asked for: a big block goes back to the cache) */
    size_t alloc = ((size_t)t->numel * kiln_dtype_size(t->dtype) + 63) & ~(size_t)63;
    if (alloc >= KILN_BIG_BLOCK) kiln_big_free(t->data, alloc);
    else free(t->data);
  }
  kiln_keepalive_release(t->keepalive);
  free(t);
}

kiln_dtype kiln_tensor_dtype(const kiln_tensor *t) { return t->dtype; }
int kiln_tensor_rank(const kiln_tensor *t) { return t->rank; }
const int64_t *kiln_tensor_dims(const kiln_tensor *t) { return t->dims; }
int64_t kiln_tensor_numel(const kiln_tensor *t) { return t->numel; }
void *kiln_tensor_data(kiln_tensor *t) { return t->data; }

/* ---- values -------------------------------------------------------------- */

kiln_status_t kiln_value_from_tensor(kiln_tensor *t, kiln_value **out) {
  if (!t || !out) {
    kiln_tensor_release(t);
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_value_from_tensor: NULL %s", t ? "out" : "tensor");
  }
  kiln_value *v = calloc(1, sizeof *v);
  if (!v) {
    kiln_tensor_release(t);
    return KILN_OOM();
  }
  v->kind = KILN_VALUE_TENSOR;
  v->tensor = t;
  v->elem_dtype = t->dtype;
  *out = v;
  return NULL;
}

kiln_status_t kiln_value_new_sequence(kiln_dtype elem_dtype, kiln_value **out) {
  if (!out) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_value_new_sequence: NULL out");
  kiln_value *v = calloc(1, sizeof *v);
  if (!v) return KILN_OOM();
  v->kind = KILN_VALUE_SEQUENCE;
  v->elem_dtype = elem_dtype;
  *out = v;
  return NULL;
}

kiln_status_t kiln_value_seq_insert(kiln_value *seq, int pos, kiln_tensor *t) {
  if (!seq || seq->kind != KILN_VALUE_SEQUENCE || !t) {
    kiln_tensor_release(t);
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_value_seq_insert: %s", !seq || seq->kind != KILN_VALUE_SEQUENCE ? "not a sequence" : "NULL tensor");
  }
  if (seq->elem_dtype != KILN_DTYPE_UNDEFINED && t->dtype != seq->elem_dtype) {
    kiln_status_t st = kiln_error(KILN_INVALID_ARGUMENT, "kiln_value_seq_insert: a %s tensor into a sequence of %s",
                                  kiln_dtype_name(t->dtype), kiln_dtype_name(seq->elem_dtype));
    kiln_tensor_release(t);
    return st;
  }
  if (pos < 0) pos = seq->n_items;
  if (pos > seq->n_items) {
    kiln_tensor_release(t);
    return kiln_error(KILN_OUT_OF_RANGE, "sequence position %d past length %d", pos, seq->n_items);
  }
  kiln_tensor **n = realloc(seq->items, (size_t)(seq->n_items + 1) * sizeof *n);
  if (!n) {
    kiln_tensor_release(t);
    return KILN_OOM();
  }
  seq->items = n;
  memmove(n + pos + 1, n + pos, (size_t)(seq->n_items - pos) * sizeof *n);
  n[pos] = t;
  seq->n_items++;
  return NULL;
}

kiln_status_t kiln_value_new_none(kiln_dtype elem_dtype, bool is_sequence, kiln_value **out) {
  if (!out) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_value_new_none: NULL out");
  kiln_value *v = calloc(1, sizeof *v);
  if (!v) return KILN_OOM();
  v->kind = KILN_VALUE_NONE;
  v->elem_dtype = elem_dtype;
  v->none_is_sequence = is_sequence;
  *out = v;
  return NULL;
}

kiln_status_t kiln_value_share(const kiln_value *src, kiln_value **out) {
  kiln_value *v = calloc(1, sizeof *v);
  if (!v) return KILN_OOM();
  *v = *src;
  v->items = NULL;
  v->n_items = 0;
  if (src->kind == KILN_VALUE_TENSOR) kiln_tensor_retain(src->tensor);
  if (src->kind == KILN_VALUE_SEQUENCE && src->n_items) {
    v->items = malloc((size_t)src->n_items * sizeof *v->items);
    if (!v->items) {
      free(v);
      return KILN_OOM();
    }
    for (int i = 0; i < src->n_items; i++) v->items[i] = kiln_tensor_retain(src->items[i]);
    v->n_items = src->n_items;
  }
  *out = v;
  return NULL;
}

void kiln_value_free(kiln_value *v) {
  if (!v) return;
  kiln_tensor_release(v->tensor);
  for (int i = 0; i < v->n_items; i++) kiln_tensor_release(v->items[i]);
  free(v->items);
  free(v);
}

kiln_value_kind kiln_value_kind_of(const kiln_value *v) { return v ? v->kind : KILN_VALUE_NONE; }

int kiln_value_count(const kiln_value *v) {
  if (!v) return 0;
  return v->kind == KILN_VALUE_TENSOR ? 1 : v->kind == KILN_VALUE_SEQUENCE ? v->n_items : 0;
}

kiln_tensor *kiln_value_item(const kiln_value *v, int index) {
  if (!v || index < 0 || index >= kiln_value_count(v)) return NULL;
  return v->kind == KILN_VALUE_TENSOR ? v->tensor : v->items[index];
}

kiln_dtype kiln_value_elem_dtype(const kiln_value *v) {
  if (!v) return KILN_DTYPE_UNDEFINED;
  return v->kind == KILN_VALUE_TENSOR ? v->tensor->dtype : v->elem_dtype;
}
