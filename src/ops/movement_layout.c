/* Movement ops that copy elements along axes: Concat, Split, Slice, Pad,
 * Tile, Transpose, Expand, DepthToSpace, SpaceToDepth, Trilu,
 * ReverseSequence.
 *
 * Most are written as "for each output coordinate, which input element?"
 * (map_copy): slow but obviously correct.
 */
#include "ops/movement_internal.h"

/* Flat input index for an output coordinate, or -1 for the fill value. */
typedef int64_t (*src_index_fn)(const int64_t *coord, const void *user);

/* y[o] = x[src(coord(o))], or *fill (zero/"" when fill is NULL) for -1. */
static kiln_status_t map_copy(kiln_tensor *y, const kiln_tensor *x, src_index_fn src, const void *user,
                              const kiln_tensor *fill) {
  int64_t coord[KILN_MAX_RANK] = {0};
  bool is_str = y->dtype == KILN_DTYPE_STRING;
  size_t es = kiln_dtype_size(y->dtype);
  for (int64_t o = 0; o < y->numel; o++) {
    int64_t si = src(coord, user);
    if (si >= 0) {
      if (is_str)
        KILN_TRY(kiln_mv_copy(y, o, x, si, 1));
      else
        memcpy((char *)y->data + (size_t)o * es, (const char *)x->data + (size_t)si * es, es);
    } else if (fill) {
      KILN_TRY(kiln_mv_copy(y, o, fill, 0, 1));
    }
    kiln_mv_next_coord(y->rank, y->dims, coord);
  }
  return NULL;
}

/* ---- Concat ------------------------------------------------------------- */

static int64_t concat_axis_attr(const kiln_node *node, int opset) {
  return kiln_attr_int(node, "axis", opset < 4 ? 1 : 0);
}

kiln_status_t kiln_mv_infer_Concat(kiln_infer_ctx *ctx) {
  kiln_dtype dt = KILN_DTYPE_UNDEFINED;
  int rank = -1;
  for (int i = 0; i < ctx->n_inputs; i++) {
    if (!dt) dt = kiln_mv_in_dtype(ctx, i);
    int r = kiln_mv_in_rank(ctx, i);
    if (r >= 0) {
      if (rank >= 0 && r != rank)
        return kiln_error(KILN_INVALID_ARGUMENT, "input %d: rank %d differs from rank %d of other inputs", i, r, rank);
      rank = r;
    }
  }
  if (rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int axis;
  KILN_TRY(kiln_mv_norm_axis(concat_axis_attr(ctx->node, ctx->opset), rank, "attribute axis", &axis));
  int64_t out[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) out[d] = d == axis ? 0 : -1;
  for (int i = 0; i < ctx->n_inputs; i++) {
    const kiln_type *t = kiln_mv_in_type(ctx, i);
    if (!t || t->rank < 0) {
      out[axis] = -1;
      continue;
    }
    for (int d = 0; d < rank; d++) {
      if (d == axis) {
        if (out[axis] >= 0) out[axis] = t->dims[d] >= 0 ? out[axis] + t->dims[d] : -1;
      } else if (t->dims[d] >= 0) {
        if (out[d] >= 0 && out[d] != t->dims[d])
          return kiln_error(KILN_INVALID_ARGUMENT, "input %d: dim %d is %lld, other inputs have %lld", i, d,
                            (long long)t->dims[d], (long long)out[d]);
        out[d] = t->dims[d];
      }
    }
  }
  kiln_infer_set(ctx, 0, dt, rank, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Concat(kiln_kernel_ctx *ctx) {
  kiln_tensor *x0, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x0));
  int rank = x0->rank, axis;
  if (rank == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: cannot concatenate scalars");
  KILN_TRY(kiln_mv_norm_axis(concat_axis_attr(ctx->node, ctx->opset), rank, "attribute axis", &axis));
  int64_t out[KILN_MAX_RANK];
  memcpy(out, x0->dims, sizeof out);
  out[axis] = 0;
  for (int i = 0; i < ctx->n_inputs; i++) {
    kiln_tensor *x;
    KILN_TRY(kiln_kernel_require_input(ctx, i, &x));
    char s0[256], s1[256];
    if (x->dtype != x0->dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d: dtype %s differs from input 0's %s", i,
                        kiln_dtype_name(x->dtype), kiln_dtype_name(x0->dtype));
    bool ok = x->rank == rank;
    for (int d = 0; ok && d < rank; d++) ok = d == axis || x->dims[d] == x0->dims[d];
    if (!ok)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d: shape %s does not match input 0's %s except on axis %d", i,
                        kiln_shape_str(x->rank, x->dims, s1, sizeof s1),
                        kiln_shape_str(x0->rank, x0->dims, s0, sizeof s0), axis);
    out[axis] += x->dims[axis];
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x0->dtype, rank, out, &y));
  int64_t outer = kiln_mv_prod(out, 0, axis), inner = kiln_mv_prod(out, axis + 1, rank);
  int64_t row = out[axis] * inner, at = 0;
  for (int i = 0; i < ctx->n_inputs; i++) {
    const kiln_tensor *x = kiln_kernel_input(ctx, i);
    int64_t chunk = x->dims[axis] * inner;
    for (int64_t o = 0; o < outer; o++) KILN_TRY(kiln_mv_copy(y, o * row + at, x, o * chunk, chunk));
    at += chunk;
  }
  return NULL;
}

/* ---- Split -------------------------------------------------------------- */

/* Split sizes from the attribute (opset < 13; opset 1 also input 1) or
 * input 1 (opset >= 13). In the kernel ctx is the kernel's, in inference
 * `cst` gives input 1's constant. *present false: equal split. *known false
 * (inference only): sizes exist but are not constant. */
static kiln_status_t split_sizes(const kiln_node *node, int opset, const kiln_tensor *input1, bool input1_exists,
                                 int64_t **sizes, int64_t *n, bool *present, bool *known) {
  *sizes = NULL;
  *n = 0;
  *present = false;
  *known = true;
  if (opset >= 13 || (opset < 2 && input1_exists)) {
    if (!input1_exists) return NULL;
    *present = true;
    if (!input1) {
      *known = false;
      return NULL;
    }
    return kiln_mv_read_ints(input1, "input 1 (split)", sizes, n);
  }
  const kiln_attr *a = kiln_node_attr(node, "split");
  if (!a || a->type != KILN_ATTR_INTS) return NULL;
  *present = true;
  if (a->n == 0) return NULL;
  *sizes = malloc((size_t)a->n * sizeof **sizes);
  if (!*sizes) return KILN_OOM();
  memcpy(*sizes, a->ints, (size_t)a->n * sizeof **sizes);
  *n = a->n;
  return NULL;
}

/* Checks the sizes against dim (-1 = unknown) and n_outputs; fills equal
 * parts when !present (uneven_ok: opset >= 18 allows a smaller last part).
 * out[] has n_outputs entries. */
static kiln_status_t split_resolve(const int64_t *sizes, int64_t n, bool present, int64_t dim, int n_outputs,
                                   bool uneven_ok, int64_t *out) {
  if (present) {
    if (n != n_outputs)
      return kiln_error(KILN_INVALID_ARGUMENT, "split has %lld sizes but the node has %d outputs", (long long)n,
                        n_outputs);
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
      if (sizes[i] < 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "split: negative size %lld at %lld", (long long)sizes[i],
                          (long long)i);
      if (__builtin_add_overflow(sum, sizes[i], &sum))
        return kiln_error(KILN_INVALID_ARGUMENT, "split: sizes overflow");
      out[i] = sizes[i];
    }
    if (dim >= 0 && sum != dim)
      return kiln_error(KILN_INVALID_ARGUMENT, "split sizes sum to %lld but the axis has %lld", (long long)sum,
                        (long long)dim);
    return NULL;
  }
  if (n_outputs <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "Split needs at least one output");
  if (dim >= 0 && dim % n_outputs != 0) {
    if (!uneven_ok)
      return kiln_error(KILN_INVALID_ARGUMENT, "axis of size %lld cannot be split into %d equal parts",
                        (long long)dim, n_outputs);
    /* opset 18 num_outputs: ceil-sized chunks, the last one smaller */
    int64_t chunk = dim / n_outputs + 1, left = dim;
    for (int i = 0; i < n_outputs; i++) {
      out[i] = KILN_MIN(chunk, left);
      left -= out[i];
    }
    return NULL;
  }
  for (int i = 0; i < n_outputs; i++) out[i] = dim >= 0 ? dim / n_outputs : -1;
  return NULL;
}

kiln_status_t kiln_mv_infer_Split(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (!in || in->rank < 0) {
    for (int i = 0; i < ctx->n_outputs; i++) kiln_mv_infer_unknown_rank(ctx, i, dt);
    return NULL;
  }
  int axis;
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), in->rank, "attribute axis", &axis));
  bool exists1 = kiln_mv_in_present(ctx, 1);
  int64_t *sizes, n;
  bool present, known;
  KILN_TRY(split_sizes(ctx->node, ctx->opset, kiln_mv_const(ctx, 1), exists1, &sizes, &n, &present, &known));
  int64_t *parts = calloc((size_t)ctx->n_outputs + 1, sizeof *parts);
  if (!parts) {
    free(sizes);
    return KILN_OOM();
  }
  kiln_status_t s = NULL;
  if (known)
    s = split_resolve(sizes, n, present, in->dims[axis], ctx->n_outputs, ctx->opset >= 18, parts);
  else
    for (int i = 0; i < ctx->n_outputs; i++) parts[i] = -1;
  free(sizes);
  if (!s) {
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, in->dims, sizeof dims);
    for (int i = 0; i < ctx->n_outputs; i++) {
      dims[axis] = parts[i];
      kiln_infer_set(ctx, i, dt, in->rank, dims);
    }
  }
  free(parts);
  return s;
}

kiln_status_t kiln_mv_kernel_Split(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->rank == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: cannot split a scalar");
  int axis;
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
  kiln_tensor *in1 = kiln_kernel_input(ctx, 1);
  int64_t *sizes, n;
  bool present, known;
  KILN_TRY(split_sizes(ctx->node, ctx->opset, in1, in1 != NULL, &sizes, &n, &present, &known));
  int64_t *parts = calloc((size_t)ctx->n_outputs + 1, sizeof *parts);
  if (!parts) {
    free(sizes);
    return KILN_OOM();
  }
  kiln_status_t s = split_resolve(sizes, n, present, x->dims[axis], ctx->n_outputs, ctx->opset >= 18, parts);
  free(sizes);
  int64_t outer = kiln_mv_prod(x->dims, 0, axis), inner = kiln_mv_prod(x->dims, axis + 1, x->rank);
  int64_t row = x->dims[axis] * inner, at = 0;
  for (int i = 0; !s && i < ctx->n_outputs; i++) {
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = parts[i];
    int64_t chunk = parts[i] * inner;
    if (ctx->output_wanted && !ctx->output_wanted[i]) {
      at += chunk;
      continue;
    }
    kiln_tensor *y;
    s = kiln_kernel_output_tensor(ctx, i, x->dtype, x->rank, dims, &y);
    for (int64_t o = 0; !s && o < outer; o++) s = kiln_mv_copy(y, o * chunk, x, o * row + at, chunk);
    at += chunk;
  }
  free(parts);
  return s;
}

/* ---- Slice -------------------------------------------------------------- */

typedef struct slice_plan {
  int rank;
  int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK], len[KILN_MAX_RANK], stride[KILN_MAX_RANK];
} slice_plan;

/* Effective start and length of one axis, clamped as the spec says. */
static void slice_axis(int64_t dim, int64_t s, int64_t e, int64_t step, int64_t *start, int64_t *len) {
  if (s < 0) s += dim;
  if (e < 0) e += dim;
  if (step > 0) {
    s = s < 0 ? 0 : s > dim ? dim : s;
    e = e < 0 ? 0 : e > dim ? dim : e;
    *len = e > s ? 1 + (int64_t)((uint64_t)(e - s - 1) / (uint64_t)step) : 0;
  } else {
    s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
    e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
    *len = s > e ? 1 + (int64_t)((uint64_t)(s - e - 1) / (0 - (uint64_t)step)) : 0;
  }
  *start = s;
}

/* Builds the plan; dims may hold -1 (inference: those axes get len -1). */
static kiln_status_t slice_plan_make(int rank, const int64_t *dims, const int64_t *starts, const int64_t *ends,
                                     const int64_t *axes, const int64_t *steps, int64_t n, slice_plan *p) {
  if (n > rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "%lld slice entries for a rank-%d input", (long long)n, rank);
  p->rank = rank;
  bool seen[KILN_MAX_RANK] = {false};
  for (int d = 0; d < rank; d++) {
    p->start[d] = 0;
    p->step[d] = 1;
    p->len[d] = dims[d];
  }
  for (int64_t i = 0; i < n; i++) {
    int a = (int)i;
    if (axes) KILN_TRY(kiln_mv_norm_axis(axes[i], rank, "axes", &a));
    if (seen[a]) return kiln_error(KILN_INVALID_ARGUMENT, "axes: axis %d repeated", a);
    seen[a] = true;
    int64_t step = steps ? steps[i] : 1;
    if (step == 0) return kiln_error(KILN_INVALID_ARGUMENT, "steps: entry %lld is zero", (long long)i);
    p->step[a] = step;
    if (dims[a] < 0) {
      p->len[a] = -1;
      continue;
    }
    slice_axis(dims[a], starts[i], ends[i], step, &p->start[a], &p->len[a]);
  }
  return NULL;
}

/* Slice's starts/ends/axes/steps as malloc'd arrays (axes/steps NULL when
 * absent). From attributes before opset 10, from inputs after. */
typedef struct slice_args {
  int64_t *starts, *ends, *axes, *steps;
  int64_t n;
} slice_args;

static void slice_args_free(slice_args *a) {
  free(a->starts);
  free(a->ends);
  free(a->axes);
  free(a->steps);
}

static kiln_status_t dup_ints(const int64_t *v, int n, int64_t **out) {
  *out = malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
  if (!*out) return KILN_OOM();
  if (n) memcpy(*out, v, (size_t)n * sizeof **out);
  return NULL;
}

/* `t[i]` is input i (1 starts, 2 ends, 3 axes, 4 steps) or NULL. */
static kiln_status_t slice_args_read(const kiln_node *node, int opset, const kiln_tensor *const t[5], slice_args *a) {
  memset(a, 0, sizeof *a);
  kiln_status_t s = NULL;
  int64_t n_s = 0, n_e = 0, n_a = -1, n_st = -1;
  if (opset < 10) {
    int ns, ne, na;
    const int64_t *vs = kiln_attr_ints(node, "starts", &ns), *ve = kiln_attr_ints(node, "ends", &ne);
    const int64_t *va = kiln_attr_ints(node, "axes", &na);
    if (!kiln_node_attr(node, "starts") || !kiln_node_attr(node, "ends"))
      return kiln_error(KILN_INVALID_MODEL, "attributes starts and ends are required");
    s = dup_ints(vs, ns, &a->starts);
    if (!s) s = dup_ints(ve, ne, &a->ends);
    if (!s && kiln_node_attr(node, "axes")) s = dup_ints(va, na, &a->axes), n_a = na;
    n_s = ns;
    n_e = ne;
  } else {
    if (!t[1] || !t[2]) return kiln_error(KILN_INVALID_ARGUMENT, "inputs 1 (starts) and 2 (ends) are required");
    s = kiln_mv_read_ints(t[1], "input 1 (starts)", &a->starts, &n_s);
    if (!s) s = kiln_mv_read_ints(t[2], "input 2 (ends)", &a->ends, &n_e);
    if (!s && t[3]) s = kiln_mv_read_ints(t[3], "input 3 (axes)", &a->axes, &n_a);
    if (!s && t[4]) s = kiln_mv_read_ints(t[4], "input 4 (steps)", &a->steps, &n_st);
    if (!s && t[3] && !a->axes) s = dup_ints(NULL, 0, &a->axes);
    if (!s && t[4] && !a->steps) s = dup_ints(NULL, 0, &a->steps);
  }
  if (!s && (n_e != n_s || (n_a >= 0 && n_a != n_s) || (n_st >= 0 && n_st != n_s)))
    s = kiln_error(KILN_INVALID_ARGUMENT, "starts, ends, axes and steps must have the same length (%lld, %lld, %lld, %lld)",
                   (long long)n_s, (long long)n_e, (long long)n_a, (long long)n_st);
  a->n = n_s;
  if (s) slice_args_free(a);
  return s;
}

kiln_status_t kiln_mv_infer_Slice(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (!in || in->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  const kiln_tensor *t[5] = {NULL};
  if (ctx->opset >= 10) {
    bool all_const = true;
    for (int i = 1; i < 5; i++) {
      bool exists = kiln_mv_in_present(ctx, i);
      t[i] = exists ? kiln_mv_const(ctx, i) : NULL;
      if (exists && !t[i]) all_const = false;
    }
    if (!all_const || !t[1] || !t[2]) {
      kiln_infer_set(ctx, 0, dt, in->rank, NULL);
      return NULL;
    }
  }
  slice_args a;
  KILN_TRY(slice_args_read(ctx->node, ctx->opset, t, &a));
  slice_plan p;
  kiln_status_t s = slice_plan_make(in->rank, in->dims, a.starts, a.ends, a.axes, a.steps, a.n, &p);
  slice_args_free(&a);
  KILN_TRY(s);
  kiln_infer_set(ctx, 0, dt, in->rank, p.len);
  return NULL;
}

static int64_t slice_src(const int64_t *coord, const void *user) {
  const slice_plan *p = user;
  int64_t off = 0;
  for (int d = 0; d < p->rank; d++) off += (p->start[d] + coord[d] * p->step[d]) * p->stride[d];
  return off;
}

kiln_status_t kiln_mv_kernel_Slice(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  const kiln_tensor *t[5] = {NULL};
  for (int i = 1; i < 5; i++) t[i] = kiln_kernel_input(ctx, i);
  slice_args a;
  KILN_TRY(slice_args_read(ctx->node, ctx->opset, t, &a));
  slice_plan p;
  kiln_status_t s = slice_plan_make(x->rank, x->dims, a.starts, a.ends, a.axes, a.steps, a.n, &p);
  slice_args_free(&a);
  KILN_TRY(s);
  kiln_mv_strides(x->rank, x->dims, p.stride);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, p.len, &y));
  return map_copy(y, x, slice_src, &p, NULL);
}

/* ---- Pad ---------------------------------------------------------------- */

typedef enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP } pad_mode; /* the values kiln_pad_geometry reports */

/* wrap (opset 19): the input repeated as a torus, numpy.pad's "wrap". */
static kiln_status_t pad_mode_of(const kiln_node *node, int opset, pad_mode *out) {
  const char *m = kiln_attr_string(node, "mode", "constant");
  if (!strcmp(m, "constant"))
    *out = PAD_CONSTANT;
  else if (!strcmp(m, "reflect"))
    *out = PAD_REFLECT;
  else if (!strcmp(m, "edge"))
    *out = PAD_EDGE;
  else if (opset >= 19 && !strcmp(m, "wrap"))
    *out = PAD_WRAP;
  else
    return kiln_error(KILN_UNSUPPORTED, "attribute mode: unsupported pad mode '%s'", m);
  return NULL;
}

/* pads[2*rank] from the attribute (opset < 11) or input 1 (with optional
 * axes input 3, opset >= 18). pads_t/axes_t may be NULL. *known false in
 * inference when input 1 is not constant. */
static kiln_status_t pad_amounts(const kiln_node *node, int opset, int rank, const kiln_tensor *pads_t,
                                 const kiln_tensor *axes_t, int64_t *pads) {
  int64_t *v = NULL, n = 0;
  if (opset < 11) {
    int cnt;
    const int64_t *a = kiln_attr_ints(node, opset < 2 ? "paddings" : "pads", &cnt);
    if (!a && cnt == 0 && !kiln_node_attr(node, opset < 2 ? "paddings" : "pads"))
      return kiln_error(KILN_INVALID_MODEL, "attribute %s is required", opset < 2 ? "paddings" : "pads");
    if (cnt != 2 * rank)
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute pads: %d values for a rank-%d input (need %d)", cnt, rank,
                        2 * rank);
    if (cnt) memcpy(pads, a, (size_t)cnt * sizeof *pads);
    return NULL;
  }
  if (!pads_t) return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (pads) is required");
  KILN_TRY(kiln_mv_read_ints(pads_t, "input 1 (pads)", &v, &n));
  int64_t *axes = NULL, na = rank;
  kiln_status_t s = NULL;
  if (axes_t) s = kiln_mv_read_ints(axes_t, "input 3 (axes)", &axes, &na);
  if (!s && n != 2 * na)
    s = kiln_error(KILN_INVALID_ARGUMENT, "input 1 (pads): %lld values, need %lld", (long long)n, (long long)(2 * na));
  if (!s) {
    for (int d = 0; d < 2 * rank; d++) pads[d] = 0;
    bool seen[KILN_MAX_RANK] = {false};
    for (int64_t i = 0; !s && i < na; i++) {
      int a = (int)i;
      if (axes) s = kiln_mv_norm_axis(axes[i], rank, "input 3 (axes)", &a);
      if (!s && seen[a]) s = kiln_error(KILN_INVALID_ARGUMENT, "input 3 (axes): axis %d repeated", a);
      if (!s) {
        seen[a] = true;
        pads[a] = v[i];
        pads[a + rank] = v[i + na];
      }
    }
  }
  free(v);
  free(axes);
  return s;
}

static kiln_status_t pad_out_dims(int rank, const int64_t *dims, const int64_t *pads, int64_t *out) {
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0) {
      out[d] = -1;
      continue;
    }
    int64_t v;
    if (__builtin_add_overflow(dims[d], pads[d], &v) || __builtin_add_overflow(v, pads[d + rank], &v) || v < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "pads %lld, %lld on axis %d of size %lld give an invalid size",
                        (long long)pads[d], (long long)pads[d + rank], d, (long long)dims[d]);
    out[d] = v;
  }
  return NULL;
}

kiln_status_t kiln_mv_infer_Pad(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (!in || in->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  pad_mode mode;
  KILN_TRY(pad_mode_of(ctx->node, ctx->opset, &mode));
  int64_t pads[2 * KILN_MAX_RANK], out[KILN_MAX_RANK];
  if (ctx->opset >= 11) {
    bool axes_exists = ctx->opset >= 18 && kiln_mv_in_present(ctx, 3);
    if (!kiln_mv_const(ctx, 1) || (axes_exists && !kiln_mv_const(ctx, 3))) {
      kiln_infer_set(ctx, 0, dt, in->rank, NULL);
      return NULL;
    }
  }
  KILN_TRY(pad_amounts(ctx->node, ctx->opset, in->rank, kiln_mv_const(ctx, 1), kiln_mv_const(ctx, 3), pads));
  KILN_TRY(pad_out_dims(in->rank, in->dims, pads, out));
  kiln_infer_set(ctx, 0, dt, in->rank, out);
  return NULL;
}

typedef struct pad_plan {
  int rank;
  pad_mode mode;
  int64_t before[KILN_MAX_RANK]; /* positive padding at the start */
  int64_t crop[KILN_MAX_RANK];   /* elements removed at the start (negative pads) */
  int64_t len[KILN_MAX_RANK];    /* input length after cropping */
  int64_t stride[KILN_MAX_RANK];
} pad_plan;

static int64_t pad_src(const int64_t *coord, const void *user) {
  const pad_plan *p = user;
  int64_t off = 0;
  for (int d = 0; d < p->rank; d++) {
    int64_t c = coord[d] - p->before[d], n = p->len[d];
    if (c < 0 || c >= n) {
      if (p->mode == PAD_CONSTANT) return -1;
      if (p->mode == PAD_EDGE) {
        c = c < 0 ? 0 : n - 1;
      } else if (p->mode == PAD_WRAP) {
        c %= n;
        if (c < 0) c += n;
      } else if (n == 1) {
        c = 0;
      } else { /* reflect without repeating the edge, as numpy.pad */
        int64_t period = 2 * (n - 1);
        c %= period;
        if (c < 0) c += period;
        if (c >= n) c = period - c;
      }
    }
    off += (c + p->crop[d]) * p->stride[d];
  }
  return off;
}

kiln_status_t kiln_pad_geometry(const kiln_node *node, int opset, int rank, const int64_t *dims,
                                const kiln_tensor *pads_t, const kiln_tensor *axes_t, int *mode, int64_t *before,
                                int64_t *crop, int64_t *len) {
  pad_mode m;
  KILN_TRY(pad_mode_of(node, opset, &m));
  *mode = (int)m;
  int64_t pads[2 * KILN_MAX_RANK], out[KILN_MAX_RANK];
  KILN_TRY(pad_amounts(node, opset, rank, pads_t, opset >= 18 ? axes_t : NULL, pads));
  KILN_TRY(pad_out_dims(rank, dims, pads, out));
  for (int d = 0; d < rank; d++) {
    int64_t b = pads[d], e = pads[d + rank];
    before[d] = b > 0 ? b : 0;
    crop[d] = b < 0 ? -b : 0;
    len[d] = dims[d] - crop[d] - (e < 0 ? -e : 0);
    if (len[d] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "pads %lld, %lld remove more than the %lld elements of axis %d",
                        (long long)b, (long long)e, (long long)dims[d], d);
    if (m != PAD_CONSTANT && len[d] == 0 && out[d] > 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "cannot %s-pad the empty axis %d",
                        m == PAD_EDGE ? "edge" : m == PAD_WRAP ? "wrap" : "reflect", d);
  }
  return NULL;
}

kiln_status_t kiln_mv_kernel_Pad(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int imode;
  int64_t pads[2 * KILN_MAX_RANK], out[KILN_MAX_RANK];
  pad_plan p = {.rank = x->rank};
  KILN_TRY(kiln_pad_geometry(ctx->node, ctx->opset, x->rank, x->dims, kiln_kernel_input(ctx, 1),
                             kiln_kernel_input(ctx, 3), &imode, p.before, p.crop, p.len));
  KILN_TRY(pad_amounts(ctx->node, ctx->opset, x->rank, kiln_kernel_input(ctx, 1),
                       ctx->opset >= 18 ? kiln_kernel_input(ctx, 3) : NULL, pads));
  KILN_TRY(pad_out_dims(x->rank, x->dims, pads, out));
  pad_mode mode = (pad_mode)imode;
  p.mode = mode;
  kiln_mv_strides(x->rank, x->dims, p.stride);
  /* The fill value: attribute `value` before opset 11, input 2 after. */
  kiln_tensor *fill = NULL;
  if (mode == PAD_CONSTANT) {
    if (ctx->opset < 11) {
      if (x->dtype != KILN_DTYPE_STRING) {
        KILN_TRY(kiln_tensor_new(x->dtype, 0, NULL, &fill));
        kiln_store_f64(fill->data, x->dtype, 0, kiln_attr_float(ctx->node, "value", 0.0f));
      }
    } else {
      kiln_tensor *cv = kiln_kernel_input(ctx, 2);
      if (cv) {
        if (cv->dtype != x->dtype)
          return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (constant_value): dtype %s differs from data's %s",
                            kiln_dtype_name(cv->dtype), kiln_dtype_name(x->dtype));
        if (cv->numel < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (constant_value): empty");
        fill = kiln_tensor_retain(cv);
      }
    }
  }
  kiln_status_t s = kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, out, &y);
  if (!s) s = map_copy(y, x, pad_src, &p, fill);
  kiln_tensor_release(fill);
  return s;
}

/* ---- Tile --------------------------------------------------------------- */

/* Repeats per axis: input 1 (opset >= 6), or tiles/axis scalars (opset < 6). */
static kiln_status_t tile_repeats(int opset, int rank, const kiln_tensor *t1, const kiln_tensor *t2, int64_t *reps) {
  if (opset < 6) {
    if (!t1 || !t2) return kiln_error(KILN_INVALID_ARGUMENT, "inputs 1 (tiles) and 2 (axis) are required");
    if (t1->numel != 1 || t2->numel != 1 || !kiln_dtype_is_int(t1->dtype) || !kiln_dtype_is_int(t2->dtype))
      return kiln_error(KILN_INVALID_ARGUMENT, "inputs 1 (tiles) and 2 (axis) must be integer scalars");
    int axis;
    KILN_TRY(kiln_mv_norm_axis(kiln_load_i64(t2->data, t2->dtype, 0), rank, "input 2 (axis)", &axis));
    for (int d = 0; d < rank; d++) reps[d] = 1;
    reps[axis] = kiln_load_i64(t1->data, t1->dtype, 0);
  } else {
    if (!t1) return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (repeats) is required");
    int64_t *v, n;
    KILN_TRY(kiln_mv_read_ints(t1, "input 1 (repeats)", &v, &n));
    if (n != rank) {
      free(v);
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (repeats): %lld values for a rank-%d input", (long long)n,
                        rank);
    }
    if (n) memcpy(reps, v, (size_t)n * sizeof *reps);
    free(v);
  }
  for (int d = 0; d < rank; d++)
    if (reps[d] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "repeats: negative value %lld on axis %d", (long long)reps[d], d);
  return NULL;
}

static kiln_status_t tile_dims(int rank, const int64_t *dims, const int64_t *reps, int64_t *out) {
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0) {
      out[d] = reps[d] == 0 ? 0 : -1;
    } else if (!kiln_mul_i64(dims[d], reps[d], &out[d])) {
      return kiln_error(KILN_INVALID_ARGUMENT, "repeats: axis %d of size %lld repeated %lld times overflows", d,
                        (long long)dims[d], (long long)reps[d]);
    }
  }
  return NULL;
}

kiln_status_t kiln_mv_infer_Tile(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (!in || in->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  const kiln_tensor *t1 = kiln_mv_const(ctx, 1), *t2 = kiln_mv_const(ctx, 2);
  if (!t1 || (ctx->opset < 6 && !t2)) {
    kiln_infer_set(ctx, 0, dt, in->rank, NULL);
    return NULL;
  }
  int64_t reps[KILN_MAX_RANK], out[KILN_MAX_RANK];
  KILN_TRY(tile_repeats(ctx->opset, in->rank, t1, t2, reps));
  KILN_TRY(tile_dims(in->rank, in->dims, reps, out));
  kiln_infer_set(ctx, 0, dt, in->rank, out);
  return NULL;
}

typedef struct strided_plan {
  int rank;
  int64_t dims[KILN_MAX_RANK];   /* input dims (for modulo / broadcast) */
  int64_t stride[KILN_MAX_RANK]; /* input stride for output axis d (0 = broadcast) */
} strided_plan;

static int64_t tile_src(const int64_t *coord, const void *user) {
  const strided_plan *p = user;
  int64_t off = 0;
  for (int d = 0; d < p->rank; d++) off += (coord[d] % p->dims[d]) * p->stride[d];
  return off;
}

kiln_status_t kiln_mv_kernel_Tile(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int64_t reps[KILN_MAX_RANK], out[KILN_MAX_RANK];
  KILN_TRY(tile_repeats(ctx->opset, x->rank, kiln_kernel_input(ctx, 1), kiln_kernel_input(ctx, 2), reps));
  KILN_TRY(tile_dims(x->rank, x->dims, reps, out));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, out, &y));
  strided_plan p = {.rank = x->rank};
  memcpy(p.dims, x->dims, sizeof p.dims);
  kiln_mv_strides(x->rank, x->dims, p.stride);
  return map_copy(y, x, tile_src, &p, NULL);
}

/* ---- Transpose ---------------------------------------------------------- */

static kiln_status_t transpose_perm(const kiln_node *node, int rank, int *perm) {
  int n;
  const int64_t *a = kiln_attr_ints(node, "perm", &n);
  if (!kiln_node_attr(node, "perm")) {
    for (int d = 0; d < rank; d++) perm[d] = rank - 1 - d;
    return NULL;
  }
  if (n != rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute perm: %d values for a rank-%d input", n, rank);
  bool seen[KILN_MAX_RANK] = {false};
  for (int d = 0; d < rank; d++) {
    int v;
    KILN_TRY(kiln_mv_norm_axis(a[d], rank, "attribute perm", &v));
    if (seen[v]) return kiln_error(KILN_INVALID_ARGUMENT, "attribute perm: axis %d repeated", v);
    seen[v] = true;
    perm[d] = v;
  }
  return NULL;
}

kiln_status_t kiln_mv_infer_Transpose(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (!in || in->rank < 0) {
    int n;
    kiln_attr_ints(ctx->node, "perm", &n);
    if (kiln_node_attr(ctx->node, "perm") && n <= KILN_MAX_RANK)
      kiln_infer_set(ctx, 0, dt, n, NULL);
    else
      kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int perm[KILN_MAX_RANK];
  KILN_TRY(transpose_perm(ctx->node, in->rank, perm));
  int64_t out[KILN_MAX_RANK];
  for (int d = 0; d < in->rank; d++) out[d] = in->dims[perm[d]];
  kiln_infer_set(ctx, 0, dt, in->rank, out);
  return NULL;
}

static int64_t strided_src(const int64_t *coord, const void *user) {
  const strided_plan *p = user;
  int64_t off = 0;
  for (int d = 0; d < p->rank; d++) off += coord[d] * p->stride[d];
  return off;
}

kiln_status_t kiln_mv_kernel_Transpose(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int perm[KILN_MAX_RANK];
  KILN_TRY(transpose_perm(ctx->node, x->rank, perm));
  int64_t out[KILN_MAX_RANK], in_stride[KILN_MAX_RANK];
  kiln_mv_strides(x->rank, x->dims, in_stride);
  strided_plan p = {.rank = x->rank};
  for (int d = 0; d < x->rank; d++) {
    out[d] = x->dims[perm[d]];
    p.stride[d] = in_stride[perm[d]];
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, out, &y));
  return map_copy(y, x, strided_src, &p, NULL);
}

/* ---- Expand ------------------------------------------------------------- */

kiln_status_t kiln_mv_infer_Expand(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  int64_t shape[KILN_MAX_RANK], out[KILN_MAX_RANK];
  int n, r;
  if (!kiln_mv_const_ints(kiln_mv_const(ctx, 1), shape, KILN_MAX_RANK, &n)) {
    const kiln_type *st = kiln_mv_in_type(ctx, 1);
    if (in && in->rank >= 0 && st && st->rank == 1 && st->dims[0] >= 0 && st->dims[0] <= KILN_MAX_RANK)
      kiln_infer_set(ctx, 0, dt, KILN_MAX(in->rank, (int)st->dims[0]), NULL);
    else
      kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (shape[i] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape): negative dim %lld", (long long)shape[i]);
  if (!in || in->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  KILN_TRY(kiln_broadcast_shapes(in->rank, in->dims, n, shape, &r, out));
  kiln_infer_set(ctx, 0, dt, r, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Expand(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *st, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &st));
  int64_t *shape, n;
  KILN_TRY(kiln_mv_read_ints(st, "input 1 (shape)", &shape, &n));
  kiln_status_t s = NULL;
  if (n > KILN_MAX_RANK)
    s = kiln_error(KILN_UNSUPPORTED, "input 1 (shape): %lld dims exceed the maximum rank", (long long)n);
  for (int64_t i = 0; !s && i < n; i++)
    if (shape[i] < 0) s = kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape): negative dim %lld", (long long)shape[i]);
  int64_t out[KILN_MAX_RANK];
  int r = 0;
  if (!s) s = kiln_broadcast_shapes(x->rank, x->dims, (int)n, shape, &r, out);
  free(shape);
  KILN_TRY(s);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, r, out, &y));
  int64_t in_stride[KILN_MAX_RANK];
  kiln_mv_strides(x->rank, x->dims, in_stride);
  strided_plan p = {.rank = r};
  for (int d = 0; d < r; d++) {
    int xd = d - (r - x->rank);
    p.stride[d] = (xd < 0 || x->dims[xd] == 1) ? 0 : in_stride[xd];
  }
  return map_copy(y, x, strided_src, &p, NULL);
}

/* ---- DepthToSpace / SpaceToDepth --------------------------------------- */

typedef struct d2s_plan {
  int64_t n, c, h, w, b; /* input N, C, H, W and blocksize */
  bool crd;
} d2s_plan;

static kiln_status_t blocksize_of(const kiln_node *node, int64_t *out) {
  if (!kiln_node_attr(node, "blocksize")) return kiln_error(KILN_INVALID_MODEL, "attribute blocksize is required");
  int64_t b = kiln_attr_int(node, "blocksize", 0);
  if (b <= 0 || b > ((int64_t)1 << 31))
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute blocksize: invalid value %lld", (long long)b);
  *out = b;
  return NULL;
}

/* mode: DepthToSpace from opset 11, SpaceToDepth from opset 28. */
static kiln_status_t d2s_mode(const kiln_node *node, int opset, bool to_space, bool *crd) {
  const char *m = opset >= (to_space ? 11 : 28) ? kiln_attr_string(node, "mode", "DCR") : "DCR";
  if (!strcmp(m, "DCR"))
    *crd = false;
  else if (!strcmp(m, "CRD"))
    *crd = true;
  else
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute mode: expected DCR or CRD, got '%s'", m);
  return NULL;
}

/* Output dims of DepthToSpace (to_space) or SpaceToDepth; -1 stays -1. */
static kiln_status_t d2s_dims(bool to_space, const int64_t *in, int64_t b, int64_t *out) {
  out[0] = in[0];
  int64_t bb = b * b;
  if (to_space) {
    if (in[1] >= 0 && in[1] % bb != 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0: channels %lld not divisible by blocksize^2 = %lld",
                        (long long)in[1], (long long)bb);
    out[1] = in[1] >= 0 ? in[1] / bb : -1;
    for (int d = 2; d < 4; d++)
      if (in[d] >= 0 && !kiln_mul_i64(in[d], b, &out[d]))
        return kiln_error(KILN_INVALID_ARGUMENT, "input 0: dim %d overflows", d);
      else if (in[d] < 0)
        out[d] = -1;
  } else {
    for (int d = 2; d < 4; d++) {
      if (in[d] >= 0 && in[d] % b != 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 0: dim %d (%lld) not divisible by blocksize %lld", d,
                          (long long)in[d], (long long)b);
      out[d] = in[d] >= 0 ? in[d] / b : -1;
    }
    if (in[1] >= 0 && !kiln_mul_i64(in[1], bb, &out[1]))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0: channels overflow");
    else if (in[1] < 0)
      out[1] = -1;
  }
  return NULL;
}

static kiln_status_t d2s_infer(kiln_infer_ctx *ctx, bool to_space) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  int64_t b, out[4];
  KILN_TRY(blocksize_of(ctx->node, &b));
  bool crd;
  KILN_TRY(d2s_mode(ctx->node, ctx->opset, to_space, &crd));
  if (!in || in->rank < 0) {
    kiln_infer_set(ctx, 0, dt, 4, NULL);
    return NULL;
  }
  if (in->rank != 4) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank 4, got %d", in->rank);
  KILN_TRY(d2s_dims(to_space, in->dims, b, out));
  kiln_infer_set(ctx, 0, dt, 4, out);
  return NULL;
}

static int64_t d2s_src(const int64_t *co, const void *user) {
  const d2s_plan *p = user;
  int64_t b = p->b, cout = p->c / (b * b);
  int64_t h = co[2] / b, i = co[2] % b, w = co[3] / b, j = co[3] % b;
  int64_t ic = p->crd ? co[1] * b * b + i * b + j : (i * b + j) * cout + co[1];
  return ((co[0] * p->c + ic) * p->h + h) * p->w + w;
}

static int64_t s2d_src(const int64_t *co, const void *user) {
  const d2s_plan *p = user;
  int64_t b = p->b;
  /* DCR: channel (i*b + j)*C + c; CRD: c*b*b + i*b + j */
  int64_t k = p->crd ? co[1] % (b * b) : co[1] / p->c, c = p->crd ? co[1] / (b * b) : co[1] % p->c;
  int64_t i = k / b, j = k % b;
  return ((co[0] * p->c + c) * p->h + co[2] * b + i) * p->w + co[3] * b + j;
}

static kiln_status_t d2s_kernel(kiln_kernel_ctx *ctx, bool to_space) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->rank != 4) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank 4, got %d", x->rank);
  d2s_plan p = {.n = x->dims[0], .c = x->dims[1], .h = x->dims[2], .w = x->dims[3]};
  KILN_TRY(blocksize_of(ctx->node, &p.b));
  KILN_TRY(d2s_mode(ctx->node, ctx->opset, to_space, &p.crd));
  int64_t out[4];
  KILN_TRY(d2s_dims(to_space, x->dims, p.b, out));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, 4, out, &y));
  return map_copy(y, x, to_space ? d2s_src : s2d_src, &p, NULL);
}

kiln_status_t kiln_mv_infer_DepthToSpace(kiln_infer_ctx *ctx) { return d2s_infer(ctx, true); }
kiln_status_t kiln_mv_kernel_DepthToSpace(kiln_kernel_ctx *ctx) { return d2s_kernel(ctx, true); }
kiln_status_t kiln_mv_infer_SpaceToDepth(kiln_infer_ctx *ctx) { return d2s_infer(ctx, false); }
kiln_status_t kiln_mv_kernel_SpaceToDepth(kiln_kernel_ctx *ctx) { return d2s_kernel(ctx, false); }

/* ---- Trilu -------------------------------------------------------------- */

kiln_status_t kiln_mv_infer_Trilu(kiln_infer_ctx *ctx) {
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (in && in->rank >= 0 && in->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank >= 2, got %d", in->rank);
  return kiln_infer_same_as_input(ctx, 0, 0);
}

/* Trilu keeps element (i, j) of each matrix when j - i >= k (upper) or
 * j - i <= k (lower); the rest become zero. */
static bool trilu_keep(int64_t i, int64_t j, bool upper, int64_t k) {
  int64_t diff = j - i; /* both are dims: no overflow */
  return upper ? diff >= k : diff <= k;
}

kiln_status_t kiln_mv_kernel_Trilu(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->rank < 2) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank >= 2, got %d", x->rank);
  bool upper = kiln_attr_int(ctx->node, "upper", 1) != 0;
  int64_t k = 0;
  kiln_tensor *kt = kiln_kernel_input(ctx, 1);
  if (kt) {
    if (kt->numel != 1 || !kiln_dtype_is_int(kt->dtype))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (k): expected an integer scalar");
    k = kiln_load_i64(kt->data, kt->dtype, 0);
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  int64_t coord[KILN_MAX_RANK] = {0};
  for (int64_t o = 0; o < y->numel; o++) {
    if (trilu_keep(coord[x->rank - 2], coord[x->rank - 1], upper, k)) KILN_TRY(kiln_mv_copy(y, o, x, o, 1));
    kiln_mv_next_coord(y->rank, y->dims, coord);
  }
  return NULL;
}

/* ---- ReverseSequence ---------------------------------------------------- */

typedef struct revseq_plan {
  int rank, time_axis, batch_axis;
  const int64_t *lens;
  int64_t stride[KILN_MAX_RANK];
} revseq_plan;

static kiln_status_t revseq_axes(const kiln_node *node, int *time_axis, int *batch_axis) {
  int64_t t = kiln_attr_int(node, "time_axis", 0), b = kiln_attr_int(node, "batch_axis", 1);
  if ((t != 0 && t != 1) || (b != 0 && b != 1) || t == b)
    return kiln_error(KILN_INVALID_ARGUMENT, "attributes time_axis (%lld) and batch_axis (%lld) must be 0 and 1",
                      (long long)t, (long long)b);
  *time_axis = (int)t;
  *batch_axis = (int)b;
  return NULL;
}

kiln_status_t kiln_mv_infer_ReverseSequence(kiln_infer_ctx *ctx) {
  int t, b;
  KILN_TRY(revseq_axes(ctx->node, &t, &b));
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (in && in->rank >= 0 && in->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank >= 2, got %d", in->rank);
  return kiln_infer_same_as_input(ctx, 0, 0);
}

static int64_t revseq_src(const int64_t *coord, const void *user) {
  const revseq_plan *p = user;
  int64_t off = 0;
  int64_t len = p->lens[coord[p->batch_axis]];
  for (int d = 0; d < p->rank; d++) {
    int64_t c = coord[d];
    if (d == p->time_axis && c < len) c = len - 1 - c;
    off += c * p->stride[d];
  }
  return off;
}

kiln_status_t kiln_mv_kernel_ReverseSequence(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *lt, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &lt));
  revseq_plan p = {.rank = x->rank};
  KILN_TRY(revseq_axes(ctx->node, &p.time_axis, &p.batch_axis));
  if (x->rank < 2) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank >= 2, got %d", x->rank);
  int64_t *lens, n;
  KILN_TRY(kiln_mv_read_ints(lt, "input 1 (sequence_lens)", &lens, &n));
  kiln_status_t s = NULL;
  int64_t batch = x->dims[p.batch_axis], max_len = x->dims[p.time_axis];
  if (n != batch)
    s = kiln_error(KILN_INVALID_ARGUMENT, "input 1 (sequence_lens): %lld values for batch size %lld", (long long)n,
                   (long long)batch);
  for (int64_t i = 0; !s && i < n; i++)
    if (lens[i] < 0 || lens[i] > max_len)
      s = kiln_error(KILN_OUT_OF_RANGE, "input 1 (sequence_lens): value %lld out of range [0, %lld]",
                     (long long)lens[i], (long long)max_len);
  if (!s) s = kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y);
  if (!s) {
    p.lens = lens;
    kiln_mv_strides(x->rank, x->dims, p.stride);
    s = map_copy(y, x, revseq_src, &p, NULL);
  }
  free(lens);
  return s;
}
