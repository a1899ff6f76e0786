/* Ops of the "sequence" family: sequences of tensors (SequenceEmpty ...
 * ConcatFromSequence) and optionals (Optional, OptionalHasElement,
 * OptionalGetElement).
 *
 * Values are kiln_value: a SEQUENCE holds one reference to each item
 * tensor, so sequences that share items (SequenceInsert's output and its
 * input) share the tensors, never copy them. An optional with an element
 * is just that element (a tensor or a sequence value); an empty optional is
 * a NONE value. Kernels store owned values in ctx->outputs[i] directly. */
#include "ops/op.h"

#include <stdio.h>

/* ---- helpers ------------------------------------------------------------- */

/* Input i as a sequence; an error naming it if absent or of another kind. */
static kiln_status_t require_sequence(const kiln_kernel_ctx *ctx, int i, const char *name, kiln_value **out) {
  kiln_value *v = i < ctx->n_inputs ? ctx->inputs[i] : NULL;
  if (!v) return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s) is required but absent", i, name);
  if (v->kind != KILN_VALUE_SEQUENCE)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s) must be a sequence, got %s", i, name,
                      v->kind == KILN_VALUE_NONE ? "an empty optional" : "a tensor");
  *out = v;
  return NULL;
}

static void set_output_value(kiln_kernel_ctx *ctx, int i, kiln_value *v) {
  kiln_value_free(ctx->outputs[i]);
  ctx->outputs[i] = v;
}

/* A position input (int32/int64 scalar) in [-n, n) — or [-n, n] when
 * `inclusive_end` (insertion) — normalized to [0, n]. */
static kiln_status_t read_position(const kiln_tensor *t, int n, bool inclusive_end, const char *what, int *out) {
  if (t->dtype != KILN_DTYPE_I32 && t->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s must be int32 or int64, got %s", what, kiln_dtype_name(t->dtype));
  if (t->numel != 1 || t->rank > 1) {
    char s[128];
    return kiln_error(KILN_INVALID_ARGUMENT, "%s must be a scalar, got shape %s", what,
                      kiln_shape_str(t->rank, t->dims, s, sizeof s));
  }
  int64_t p = kiln_load_i64(t->data, t->dtype, 0);
  int64_t hi = inclusive_end ? n : n - 1;
  if (p < -(int64_t)n || p > hi)
    return kiln_error(KILN_OUT_OF_RANGE, "%s = %lld out of range [%d, %lld] for a sequence of length %d", what,
                      (long long)p, -n, (long long)hi, n);
  *out = (int)(p < 0 ? p + n : p);
  return NULL;
}

/* Copies count elements from src[si...] to dst[di...]; duplicates strings. */
static kiln_status_t copy_elems(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si, int64_t count) {
  if (count <= 0) return NULL;
  if (src->dtype == KILN_DTYPE_STRING) {
    char *const *s = src->data;
    for (int64_t k = 0; k < count; k++) {
      const char *e = s[si + k] ? s[si + k] : "";
      KILN_TRY(kiln_tensor_set_string(dst, di + k, e, strlen(e)));
    }
    return NULL;
  }
  size_t es = kiln_dtype_size(src->dtype);
  memcpy((char *)dst->data + di * es, (const char *)src->data + si * es, (size_t)count * es);
  return NULL;
}

/* Sets output i's type to kind with item dtype/shape from `item` (may be NULL). */
static void infer_set_kind(kiln_infer_ctx *ctx, int i, kiln_type_kind kind, const kiln_type *item) {
  if (i >= ctx->n_outputs) return;
  if (item) {
    kiln_type_copy(&ctx->outputs[i], item);
  } else {
    kiln_type_init_tensor(&ctx->outputs[i], KILN_DTYPE_UNDEFINED, -1, NULL);
  }
  ctx->outputs[i].kind = kind;
}

/* Merges an item type into a sequence's item type: dims that differ
 * become unknown, differing ranks make the rank unknown. */
static void merge_item_shape(kiln_type *acc, const kiln_type *t) {
  if (acc->rank != t->rank) {
    kiln_type_clear(acc);
    acc->rank = -1;
    for (int d = 0; d < KILN_MAX_RANK; d++) acc->dims[d] = -1;
    return;
  }
  for (int d = 0; d < acc->rank; d++) {
    if (acc->dims[d] != t->dims[d]) {
      acc->dims[d] = -1;
      free(acc->dim_params[d]);
      acc->dim_params[d] = NULL;
    }
  }
}

/* ---- SequenceEmpty ------------------------------------------------------- */

static kiln_dtype sequence_empty_dtype(const kiln_node *node) {
  return (kiln_dtype)kiln_attr_int(node, "dtype", KILN_DTYPE_F32);
}

static kiln_status_t sequence_empty_infer(kiln_infer_ctx *ctx) {
  kiln_type item;
  memset(&item, 0, sizeof item);
  kiln_type_init_tensor(&item, sequence_empty_dtype(ctx->node), -1, NULL);
  infer_set_kind(ctx, 0, KILN_TYPE_SEQUENCE, &item);
  kiln_type_clear(&item);
  return NULL;
}

static kiln_status_t sequence_empty_kernel(kiln_kernel_ctx *ctx) {
  kiln_dtype dt = sequence_empty_dtype(ctx->node);
  if (!kiln_dtype_is_valid((int)dt) || kiln_dtype_is_narrow(dt))
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute dtype %d is not a valid element type", (int)dt);
  kiln_value *v;
  KILN_TRY(kiln_value_new_sequence(dt, &v));
  set_output_value(ctx, 0, v);
  return NULL;
}

/* ---- SequenceConstruct --------------------------------------------------- */

static kiln_status_t sequence_construct_infer(kiln_infer_ctx *ctx) {
  kiln_type item;
  memset(&item, 0, sizeof item);
  bool have = false;
  for (int i = 0; i < ctx->n_inputs; i++) {
    const kiln_type *t = ctx->inputs[i];
    if (!t) continue;
    if (!have) {
      kiln_type_copy(&item, t);
      have = true;
      continue;
    }
    if (item.dtype && t->dtype && item.dtype != t->dtype) {
      kiln_type_clear(&item);
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d has element type %s, input 0 has %s", i,
                        kiln_dtype_name(t->dtype), kiln_dtype_name(item.dtype));
    }
    if (!item.dtype) item.dtype = t->dtype;
    merge_item_shape(&item, t);
  }
  infer_set_kind(ctx, 0, KILN_TYPE_SEQUENCE, have ? &item : NULL);
  kiln_type_clear(&item);
  return NULL;
}

static kiln_status_t sequence_construct_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *first;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &first));
  kiln_value *seq;
  KILN_TRY(kiln_value_new_sequence(first->dtype, &seq));
  for (int i = 0; i < ctx->n_inputs; i++) {
    kiln_tensor *t;
    kiln_status_t st = kiln_kernel_require_input(ctx, i, &t);
    if (!st && t->dtype != first->dtype)
      st = kiln_error(KILN_INVALID_ARGUMENT, "input %d has element type %s, input 0 has %s", i,
                      kiln_dtype_name(t->dtype), kiln_dtype_name(first->dtype));
    if (!st) st = kiln_value_seq_insert(seq, -1, kiln_tensor_retain(t));
    if (st) {
      kiln_value_free(seq);
      return st;
    }
  }
  set_output_value(ctx, 0, seq);
  return NULL;
}

/* ---- SequenceInsert ------------------------------------------------------ */

static kiln_status_t sequence_insert_infer(kiln_infer_ctx *ctx) {
  const kiln_type *s = ctx->inputs[0], *t = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (s && t && s->dtype && t->dtype && s->dtype != t->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (tensor) has element type %s, the sequence holds %s",
                      kiln_dtype_name(t->dtype), kiln_dtype_name(s->dtype));
  kiln_type item;
  memset(&item, 0, sizeof item);
  if (s) {
    kiln_type_copy(&item, s);
    if (!item.dtype && t) item.dtype = t->dtype;
    if (t) merge_item_shape(&item, t);
  } else if (t) {
    kiln_type_copy(&item, t);
    item.rank = -1;
  }
  infer_set_kind(ctx, 0, KILN_TYPE_SEQUENCE, (s || t) ? &item : NULL);
  kiln_type_clear(&item);
  return NULL;
}

static kiln_status_t sequence_insert_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = NULL;
  kiln_tensor *t, *pos_t = kiln_kernel_input(ctx, 2);
  KILN_TRY(require_sequence(ctx, 0, "input_sequence", &in));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &t));
  if (in->elem_dtype != KILN_DTYPE_UNDEFINED && in->elem_dtype != t->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (tensor) has element type %s, the sequence holds %s",
                      kiln_dtype_name(t->dtype), kiln_dtype_name(in->elem_dtype));
  int pos = in->n_items;
  if (pos_t) KILN_TRY(read_position(pos_t, in->n_items, true, "input 2 (position)", &pos));
  kiln_value *out;
  KILN_TRY(kiln_value_share(in, &out));
  out->elem_dtype = t->dtype;
  kiln_status_t st = kiln_value_seq_insert(out, pos, kiln_tensor_retain(t));
  if (st) {
    kiln_value_free(out);
    return st;
  }
  set_output_value(ctx, 0, out);
  return NULL;
}

/* ---- SequenceAt ---------------------------------------------------------- */

static kiln_status_t sequence_at_infer(kiln_infer_ctx *ctx) {
  const kiln_type *s = ctx->inputs[0];
  infer_set_kind(ctx, 0, KILN_TYPE_TENSOR, s);
  return NULL;
}

static kiln_status_t sequence_at_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = NULL;
  kiln_tensor *pos_t;
  KILN_TRY(require_sequence(ctx, 0, "input_sequence", &in));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &pos_t));
  int pos = 0;
  KILN_TRY(read_position(pos_t, in->n_items, false, "input 1 (position)", &pos));
  return kiln_kernel_set_output(ctx, 0, kiln_tensor_retain(in->items[pos]));
}

/* ---- SequenceErase ------------------------------------------------------- */

static kiln_status_t sequence_same_infer(kiln_infer_ctx *ctx) {
  infer_set_kind(ctx, 0, KILN_TYPE_SEQUENCE, ctx->inputs[0]);
  return NULL;
}

static kiln_status_t sequence_erase_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = NULL;
  kiln_tensor *pos_t = kiln_kernel_input(ctx, 1);
  KILN_TRY(require_sequence(ctx, 0, "input_sequence", &in));
  if (in->n_items == 0)
    return kiln_error(KILN_OUT_OF_RANGE, "input 0 (input_sequence): cannot erase from an empty sequence");
  int pos = in->n_items - 1;
  if (pos_t) KILN_TRY(read_position(pos_t, in->n_items, false, "input 1 (position)", &pos));
  kiln_value *out;
  KILN_TRY(kiln_value_new_sequence(in->elem_dtype, &out));
  for (int i = 0; i < in->n_items; i++) {
    if (i == pos) continue;
    kiln_status_t st = kiln_value_seq_insert(out, -1, kiln_tensor_retain(in->items[i]));
    if (st) {
      kiln_value_free(out);
      return st;
    }
  }
  set_output_value(ctx, 0, out);
  return NULL;
}

/* ---- SequenceLength ------------------------------------------------------ */

static kiln_status_t sequence_length_infer(kiln_infer_ctx *ctx) {
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, 0, NULL);
  return NULL;
}

static kiln_status_t sequence_length_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = NULL;
  KILN_TRY(require_sequence(ctx, 0, "input_sequence", &in));
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I64, 0, NULL, &y));
  *(int64_t *)y->data = in->n_items;
  return NULL;
}

/* ---- SplitToSequence ----------------------------------------------------- */

static kiln_status_t split_axis(int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis %lld out of range [%d, %d) for rank %d",
                      (long long)axis, -rank, rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return NULL;
}

static kiln_status_t split_to_sequence_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = ctx->inputs[0];
  kiln_type item;
  memset(&item, 0, sizeof item);
  kiln_type_init_tensor(&item, in ? in->dtype : KILN_DTYPE_UNDEFINED, -1, NULL);
  bool has_split = ctx->n_inputs > 1 && ctx->inputs[1];
  if (in && in->rank >= 1) {
    int axis = 0;
    KILN_TRY(split_axis(kiln_attr_int(ctx->node, "axis", 0), in->rank, &axis));
    bool keepdims = kiln_attr_int(ctx->node, "keepdims", 1) != 0;
    int64_t dims[KILN_MAX_RANK];
    int r = 0;
    for (int d = 0; d < in->rank; d++) {
      if (d != axis)
        dims[r++] = in->dims[d];
      else if (has_split)
        dims[r++] = -1; /* chunk sizes may differ */
      else if (keepdims)
        dims[r++] = 1;
    }
    kiln_type_init_tensor(&item, in->dtype, r, dims);
  }
  infer_set_kind(ctx, 0, KILN_TYPE_SEQUENCE, &item);
  kiln_type_clear(&item);
  return NULL;
}

/* Copies input's slice [start, start+len) along axis into a new tensor;
 * drop_axis removes that (size-1) axis. */
static kiln_status_t slice_along(const kiln_tensor *x, int axis, int64_t start, int64_t len, bool drop_axis,
                                 kiln_tensor **out) {
  int64_t dims[KILN_MAX_RANK];
  int r = 0;
  for (int d = 0; d < x->rank; d++) {
    if (d == axis && drop_axis) continue;
    dims[r++] = d == axis ? len : x->dims[d];
  }
  kiln_tensor *t;
  KILN_TRY(kiln_tensor_new(x->dtype, r, dims, &t));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
  int64_t n = x->dims[axis];
  for (int64_t o = 0; o < outer; o++) {
    kiln_status_t st = copy_elems(t, o * len * inner, x, (o * n + start) * inner, len * inner);
    if (st) {
      kiln_tensor_release(t);
      return st;
    }
  }
  *out = t;
  return NULL;
}

static kiln_status_t split_to_sequence_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *split = kiln_kernel_input(ctx, 1);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->rank == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) must have rank >= 1, got a scalar");
  int axis = 0;
  KILN_TRY(split_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, &axis));
  bool keepdims = kiln_attr_int(ctx->node, "keepdims", 1) != 0;
  int64_t n = x->dims[axis];
  if (split && split->dtype != KILN_DTYPE_I32 && split->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (split) must be int32 or int64, got %s",
                      kiln_dtype_name(split->dtype));
  if (split && split->rank > 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (split) must be a scalar or 1-D, got rank %d", split->rank);
  int64_t n_pieces, chunk = 1;
  if (!split) {
    n_pieces = n;
  } else if (split->rank == 0) {
    chunk = kiln_load_i64(split->data, split->dtype, 0);
    if (chunk <= 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (split) = %lld must be positive", (long long)chunk);
    n_pieces = (n + chunk - 1) / chunk;
  } else {
    n_pieces = split->numel;
    int64_t total = 0;
    for (int64_t i = 0; i < n_pieces; i++) {
      int64_t s = kiln_load_i64(split->data, split->dtype, i);
      if (s < 0 || s > n)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (split)[%lld] = %lld out of range [0, %lld]", (long long)i,
                          (long long)s, (long long)n);
      total += s;
    }
    if (total != n)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (split) sums to %lld, axis %d of input 0 has size %lld",
                        (long long)total, axis, (long long)n);
  }
  if (n_pieces > INT32_MAX)
    return kiln_error(KILN_INVALID_ARGUMENT, "split into %lld pieces: too many for a sequence", (long long)n_pieces);
  kiln_value *seq;
  KILN_TRY(kiln_value_new_sequence(x->dtype, &seq));
  int64_t start = 0;
  for (int64_t i = 0; i < n_pieces; i++) {
    int64_t len;
    if (split && split->rank == 1)
      len = kiln_load_i64(split->data, split->dtype, i);
    else
      len = KILN_MIN(chunk, n - start);
    kiln_tensor *piece;
    kiln_status_t st = slice_along(x, axis, start, len, !split && !keepdims, &piece);
    if (!st) st = kiln_value_seq_insert(seq, -1, piece);
    if (st) {
      kiln_value_free(seq);
      return st;
    }
    start += len;
  }
  set_output_value(ctx, 0, seq);
  return NULL;
}

/* ---- ConcatFromSequence -------------------------------------------------- */

static kiln_status_t concat_from_sequence_infer(kiln_infer_ctx *ctx) {
  const kiln_type *s = ctx->inputs[0];
  kiln_dtype dt = s ? s->dtype : KILN_DTYPE_UNDEFINED;
  bool new_axis = kiln_attr_int(ctx->node, "new_axis", 0) != 0;
  if (!s || s->rank < 0) {
    kiln_infer_set(ctx, 0, dt, -1, NULL);
    return NULL;
  }
  /* The item count is a run-time fact: the concatenated dim stays unknown. */
  int r = s->rank + (new_axis ? 1 : 0);
  int64_t axis = kiln_attr_int(ctx->node, "axis", 0);
  if (axis < -r || axis >= r)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis %lld out of range [%d, %d)", (long long)axis, -r, r);
  if (axis < 0) axis += r;
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0, j = 0; d < r; d++) {
    if (d == axis) {
      dims[d] = -1;
      if (!new_axis) j++;
    } else {
      dims[d] = s->dims[j++];
    }
  }
  kiln_infer_set(ctx, 0, dt, r, dims);
  return NULL;
}

static kiln_status_t concat_from_sequence_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = NULL;
  KILN_TRY(require_sequence(ctx, 0, "input_sequence", &in));
  if (!kiln_node_attr(ctx->node, "axis")) return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis is required");
  if (in->n_items == 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input_sequence) is empty: nothing to concatenate");
  bool new_axis = kiln_attr_int(ctx->node, "new_axis", 0) != 0;
  const kiln_tensor *first = in->items[0];
  int r = first->rank + (new_axis ? 1 : 0);
  if (r == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input_sequence): cannot concatenate scalars");
  if (r > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "output rank %d exceeds %d", r, KILN_MAX_RANK);
  int64_t axis64 = kiln_attr_int(ctx->node, "axis", 0);
  if (axis64 < -r || axis64 >= r)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis %lld out of range [%d, %d)", (long long)axis64, -r, r);
  int axis = (int)(axis64 < 0 ? axis64 + r : axis64);
  /* Each item viewed with the output's rank: new_axis inserts a 1 at axis. */
  int64_t dims[KILN_MAX_RANK];
  int64_t total = 0;
  for (int i = 0; i < in->n_items; i++) {
    const kiln_tensor *t = in->items[i];
    char s0[128], s1[128];
    if (t->dtype != first->dtype || t->rank != first->rank)
      return kiln_error(KILN_INVALID_ARGUMENT, "sequence item %d is %s%s, item 0 is %s%s", i,
                        kiln_dtype_name(t->dtype), kiln_shape_str(t->rank, t->dims, s0, sizeof s0),
                        kiln_dtype_name(first->dtype), kiln_shape_str(first->rank, first->dims, s1, sizeof s1));
    for (int d = 0, j = 0; d < r; d++) {
      int64_t td = (new_axis && d == axis) ? 1 : t->dims[j];
      int64_t fd = (new_axis && d == axis) ? 1 : first->dims[j];
      if (!(new_axis && d == axis)) j++;
      if (d == axis) continue;
      if (td != fd)
        return kiln_error(KILN_INVALID_ARGUMENT,
                          "sequence item %d has shape %s, item 0 has %s: only axis %d may differ", i,
                          kiln_shape_str(t->rank, t->dims, s0, sizeof s0),
                          kiln_shape_str(first->rank, first->dims, s1, sizeof s1), axis);
      dims[d] = fd;
    }
    total += new_axis ? 1 : t->dims[axis];
  }
  dims[axis] = total;
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, first->dtype, r, dims, &y));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= dims[d];
  for (int d = axis + 1; d < r; d++) inner *= dims[d];
  int64_t di = 0;
  for (int64_t o = 0; o < outer; o++) {
    for (int i = 0; i < in->n_items; i++) {
      const kiln_tensor *t = in->items[i];
      int64_t len = (new_axis ? 1 : t->dims[axis]) * inner;
      KILN_TRY(copy_elems(y, di, t, o * len, len));
      di += len;
    }
  }
  return NULL;
}

/* ---- Optional ------------------------------------------------------------ */

static kiln_status_t optional_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = ctx->n_inputs > 0 ? ctx->inputs[0] : NULL;
  if (!in) {
    /* The element type is in the "type" attribute (a TypeProto), which the
     * importer does not decode: leave the output's (declared) type alone. */
    return NULL;
  }
  kiln_type_kind kind = in->kind;
  if (kind == KILN_TYPE_TENSOR) kind = KILN_TYPE_OPTIONAL_TENSOR;
  if (kind == KILN_TYPE_SEQUENCE) kind = KILN_TYPE_OPTIONAL_SEQUENCE;
  infer_set_kind(ctx, 0, kind, in);
  return NULL;
}

static kiln_status_t optional_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = ctx->n_inputs > 0 ? ctx->inputs[0] : NULL, *out;
  if (in)
    KILN_TRY(kiln_value_share(in, &out));
  else
    KILN_TRY(kiln_value_new_none(KILN_DTYPE_UNDEFINED, false, &out));
  set_output_value(ctx, 0, out);
  return NULL;
}

/* ---- OptionalHasElement / OptionalGetElement ----------------------------- */

static kiln_status_t optional_has_element_infer(kiln_infer_ctx *ctx) {
  kiln_infer_set(ctx, 0, KILN_DTYPE_BOOL, 0, NULL);
  return NULL;
}

static kiln_status_t optional_has_element_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = ctx->n_inputs > 0 ? ctx->inputs[0] : NULL;
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_BOOL, 0, NULL, &y));
  *(uint8_t *)y->data = in && in->kind != KILN_VALUE_NONE;
  return NULL;
}

static kiln_status_t optional_get_element_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = ctx->inputs[0];
  if (!in) return NULL;
  kiln_type_kind kind = in->kind;
  if (kind == KILN_TYPE_OPTIONAL_TENSOR) kind = KILN_TYPE_TENSOR;
  if (kind == KILN_TYPE_OPTIONAL_SEQUENCE) kind = KILN_TYPE_SEQUENCE;
  infer_set_kind(ctx, 0, kind, in);
  return NULL;
}

static kiln_status_t optional_get_element_kernel(kiln_kernel_ctx *ctx) {
  kiln_value *in = ctx->n_inputs > 0 ? ctx->inputs[0] : NULL, *out;
  if (!in) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) is required but absent");
  if (in->kind == KILN_VALUE_NONE)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) is an empty optional: it has no element to get");
  KILN_TRY(kiln_value_share(in, &out));
  set_output_value(ctx, 0, out);
  return NULL;
}

/* ---- table --------------------------------------------------------------- */

static const kiln_op_def sequence_ops[] = {
    {"", "SequenceEmpty", 0, 0, 1, 1, sequence_empty_infer, sequence_empty_kernel, 0, .id = KILN_OP_SequenceEmpty},
    {"", "SequenceConstruct", 1, -1, 1, 1, sequence_construct_infer, sequence_construct_kernel, 0, .id = KILN_OP_SequenceConstruct},
    {"", "SequenceInsert", 2, 3, 1, 1, sequence_insert_infer, sequence_insert_kernel, 0, .id = KILN_OP_SequenceInsert},
    {"", "SequenceAt", 2, 2, 1, 1, sequence_at_infer, sequence_at_kernel, 0, .id = KILN_OP_SequenceAt},
    {"", "SequenceErase", 1, 2, 1, 1, sequence_same_infer, sequence_erase_kernel, 0, .id = KILN_OP_SequenceErase},
    {"", "SequenceLength", 1, 1, 1, 1, sequence_length_infer, sequence_length_kernel, 0, .id = KILN_OP_SequenceLength},
    {"", "SplitToSequence", 1, 2, 1, 1, split_to_sequence_infer, split_to_sequence_kernel, 0, .id = KILN_OP_SplitToSequence},
    {"", "ConcatFromSequence", 1, 1, 1, 1, concat_from_sequence_infer, concat_from_sequence_kernel, 0, .id = KILN_OP_ConcatFromSequence},
    {"", "Optional", 0, 1, 1, 1, optional_infer, optional_kernel, 0, .id = KILN_OP_Optional},
    {"", "OptionalHasElement", 0, 1, 1, 1, optional_has_element_infer, optional_has_element_kernel, 0, .id = KILN_OP_OptionalHasElement},
    {"", "OptionalGetElement", 1, 1, 1, 1, optional_get_element_infer, optional_get_element_kernel, 0, .id = KILN_OP_OptionalGetElement},
};

const kiln_op_def *kiln_ops_sequence(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(sequence_ops);
  return sequence_ops;
}
