/* Shared pieces of the elementwise family: the broadcast iterator, the
 * opset<7 broadcast rules, single-rounding stores and dtype checks. */
#include "ops/elementwise.h"

#include <math.h>
#include <stdio.h>

/* ---- broadcast iterator ------------------------------------------------- */

ew_shape ew_shape_of(const kiln_tensor *t) {
  ew_shape s;
  s.rank = t->rank;
  memset(s.dims, 0, sizeof s.dims);
  memcpy(s.dims, t->dims, (size_t)t->rank * sizeof t->dims[0]);
  return s;
}

kiln_status_t ew_bcast_init(ew_bcast *it, int n, const ew_shape *shapes) {
  memset(it, 0, sizeof *it);
  if (n < 1) return kiln_error(KILN_INTERNAL, "broadcast of %d inputs", n);

  /* Output shape: fold the numpy rule over the inputs. */
  int rank = 0;
  int64_t dims[KILN_MAX_RANK];
  for (int k = 0; k < n; k++) {
    if (shapes[k].rank < 0 || shapes[k].rank > KILN_MAX_RANK)
      return kiln_error(KILN_INTERNAL, "input %d: bad rank %d", k, shapes[k].rank);
    int64_t tmp[KILN_MAX_RANK];
    int r;
    kiln_status_t st = kiln_broadcast_shapes(rank, dims, shapes[k].rank, shapes[k].dims, &r, tmp);
    if (st) {
      if (k == 1) return kiln_status_annotate(st, "inputs 0 and 1");
      return kiln_status_annotate(st, "input %d against the broadcast of inputs 0..%d", k, k - 1);
    }
    rank = r;
    memcpy(dims, tmp, sizeof tmp);
  }
  int64_t numel = kiln_shape_numel(rank, dims);
  if (numel < 0) return kiln_error(KILN_INVALID_ARGUMENT, "broadcast output has too many elements");

  it->strides = calloc((size_t)n * KILN_MAX_RANK, sizeof *it->strides);
  it->offsets = calloc((size_t)n, sizeof *it->offsets);
  if (!it->strides || !it->offsets) {
    ew_bcast_free(it);
    return KILN_OOM();
  }
  it->n_inputs = n;
  it->rank = rank;
  memcpy(it->dims, dims, (size_t)rank * sizeof dims[0]);
  it->numel = numel;

  for (int k = 0; k < n; k++) {
    const ew_shape *s = &shapes[k];
    int64_t stride = 1;
    /* Walk the input's axes from the innermost; they align with the
     * output's trailing axes. */
    for (int j = s->rank - 1; j >= 0; j--) {
      int d = j + (rank - s->rank);
      it->strides[k * KILN_MAX_RANK + d] = s->dims[j] == 1 ? 0 : stride;
      stride *= s->dims[j];
    }
  }
  return NULL;
}

kiln_status_t ew_bcast_init_tensors(ew_bcast *it, int n, kiln_tensor *const *ts) {
  ew_shape shapes[8] = {0};
  ew_shape *sp = shapes;
  if (n > 8) {
    sp = malloc((size_t)n * sizeof *sp);
    if (!sp) return KILN_OOM();
  }
  for (int k = 0; k < n; k++) sp[k] = ew_shape_of(ts[k]);
  kiln_status_t st = ew_bcast_init(it, n, sp);
  if (sp != shapes) free(sp);
  return st;
}

void ew_bcast_next(ew_bcast *it) {
  for (int d = it->rank - 1; d >= 0; d--) {
    it->index[d]++;
    for (int k = 0; k < it->n_inputs; k++) it->offsets[k] += it->strides[k * KILN_MAX_RANK + d];
    if (it->index[d] < it->dims[d]) return;
    /* Carry: rewind this axis and step the next outer one. */
    for (int k = 0; k < it->n_inputs; k++) it->offsets[k] -= it->strides[k * KILN_MAX_RANK + d] * it->dims[d];
    it->index[d] = 0;
  }
}

void ew_bcast_free(ew_bcast *it) {
  free(it->strides);
  free(it->offsets);
  it->strides = NULL;
  it->offsets = NULL;
}

/* ---- opset < 7 broadcasting ------------------------------------------- */

bool ew_is_legacy_broadcast(int opset, const kiln_node *node) { return opset > 0 && opset < 7; }

kiln_status_t ew_legacy_broadcast_shape(const kiln_node *node, const kiln_tensor *a, const kiln_tensor *b,
                                        ew_shape *b_view) {
  char sa[256], sb[256];
  kiln_shape_str(a->rank, a->dims, sa, sizeof sa);
  kiln_shape_str(b->rank, b->dims, sb, sizeof sb);
  if (!kiln_attr_int(node, "broadcast", 0)) {
    if (!kiln_shape_equal(a->rank, a->dims, b->rank, b->dims))
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input shapes %s and %s differ; before opset 7 that needs attribute broadcast=1", sa, sb);
    *b_view = ew_shape_of(b);
    return NULL;
  }
  b_view->rank = a->rank;
  for (int d = 0; d < KILN_MAX_RANK; d++) b_view->dims[d] = 1;
  if (b->numel == 1 && b->rank > a->rank) return NULL; /* a one-element B of any rank */
  if (b->rank > a->rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 %s has a higher rank than input 0 %s (broadcast=1)", sb, sa);
  int64_t axis = a->rank - b->rank;
  const kiln_attr *ax = kiln_node_attr(node, "axis");
  if (ax) {
    axis = ax->i;
    if (axis < 0) axis += a->rank;
    if (axis < 0 || axis + b->rank > a->rank)
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis=%lld does not fit input 1 %s into input 0 %s",
                        (long long)ax->i, sb, sa);
  }
  for (int j = 0; j < b->rank; j++) {
    int64_t bd = b->dims[j], ad = a->dims[axis + j];
    if (bd != ad && bd != 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 %s cannot be broadcast to input 0 %s at axis %lld", sb, sa,
                        (long long)axis);
    b_view->dims[axis + j] = bd;
  }
  return NULL;
}

/* ---- element access ------------------------------------------------------ */

uint16_t ew_f64_to_f16(double v) { return kiln_f64_to_f16(v); }
uint16_t ew_f64_to_bf16(double v) { return kiln_f64_to_bf16(v); }

void ew_store_f64(void *data, kiln_dtype dt, int64_t i, double v) { kiln_store_f64(data, dt, i, v); }

bool ew_is_unsigned(kiln_dtype dt) {
  return dt == KILN_DTYPE_U8 || dt == KILN_DTYPE_U16 || dt == KILN_DTYPE_U32 || dt == KILN_DTYPE_U64 ||
         dt == KILN_DTYPE_BOOL;
}

kiln_status_t ew_check_dtype(const kiln_tensor *t, int input, unsigned allowed) {
  int dt = (int)t->dtype;
  if (dt > 0 && dt < 32 && (allowed & (1u << dt))) return NULL;
  char list[256];
  size_t len = 0;
  list[0] = 0;
  for (int d = 1; d <= KILN_DTYPE_LAST; d++)
    if (allowed & (1u << d))
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", kiln_dtype_name((kiln_dtype)d));
  return kiln_error(KILN_INVALID_ARGUMENT, "input %d has dtype %s; expected one of %s", input,
                    kiln_dtype_name(t->dtype), list);
}
