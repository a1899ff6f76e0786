/* Control flow: If, Loop, Scan, SequenceMap. Each runs its body subgraphs
 * through ctx->run_subgraph, which resolves outer-scope names from the
 * calling frame. */
#include "ops/op.h"

#include <stdio.h>

static const kiln_graph *graph_attr(const kiln_node *n, const char *name) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_GRAPH ? a->g : NULL;
}

static kiln_status_t require_graph(const kiln_node *n, const char *name, const kiln_graph **out) {
  *out = graph_attr(n, name);
  if (!*out) return kiln_error(KILN_INVALID_MODEL, "attribute '%s' (a graph) is missing", name);
  return NULL;
}

static kiln_status_t scalar_bool(const kiln_tensor *t, const char *what, bool *out) {
  if (t->numel != 1) return kiln_error(KILN_INVALID_ARGUMENT, "%s must hold one element, has %lld", what, (long long)t->numel);
  if (t->dtype == KILN_DTYPE_STRING) return kiln_error(KILN_INVALID_ARGUMENT, "%s must be bool, is string", what);
  *out = kiln_load_f64(t->data, t->dtype, 0) != 0.0;
  return NULL;
}

static void free_values(kiln_value **v, int n) {
  for (int i = 0; i < n; i++) {
    kiln_value_free(v[i]);
    v[i] = NULL;
  }
}

/* Copies slice `index` along `axis` of t (the axis removed). */
static kiln_status_t slice_axis(const kiln_tensor *t, int axis, int64_t index, kiln_tensor **out) {
  int64_t dims[KILN_MAX_RANK];
  int r = 0;
  for (int i = 0; i < t->rank; i++)
    if (i != axis) dims[r++] = t->dims[i];
  KILN_TRY(kiln_tensor_new(t->dtype, r, dims, out));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= t->dims[i];
  for (int i = axis + 1; i < t->rank; i++) inner *= t->dims[i];
  size_t es = kiln_dtype_size(t->dtype);
  int64_t n = t->dims[axis];
  for (int64_t o = 0; o < outer; o++) {
    const char *src = (const char *)t->data + ((o * n + index) * inner) * (int64_t)es;
    if (t->dtype == KILN_DTYPE_STRING) {
      for (int64_t k = 0; k < inner; k++) {
        const char *s = ((char *const *)src)[k];
        KILN_TRY(kiln_tensor_set_string(*out, o * inner + k, s ? s : "", s ? strlen(s) : 0));
      }
    } else {
      memcpy((char *)(*out)->data + o * inner * (int64_t)es, src, (size_t)(inner * (int64_t)es));
    }
  }
  return NULL;
}

/* Stacks n same-shaped tensors along a new `axis`. */
static kiln_status_t stack_axis(kiln_tensor *const *items, int n, int axis, kiln_tensor **out) {
  const kiln_tensor *t0 = items[0];
  for (int i = 1; i < n; i++)
    if (!kiln_shape_equal(items[i]->rank, items[i]->dims, t0->rank, t0->dims) || items[i]->dtype != t0->dtype) {
      char a[128], b[128];
      return kiln_error(KILN_INVALID_ARGUMENT, "scan output iteration %d has shape %s %s, iteration 0 had %s %s", i,
                        kiln_dtype_name(items[i]->dtype), kiln_shape_str(items[i]->rank, items[i]->dims, a, sizeof a),
                        kiln_dtype_name(t0->dtype), kiln_shape_str(t0->rank, t0->dims, b, sizeof b));
    }
  if (t0->rank + 1 > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "rank too large to stack");
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0, k = 0; i <= t0->rank; i++) dims[i] = i == axis ? n : t0->dims[k++];
  KILN_TRY(kiln_tensor_new(t0->dtype, t0->rank + 1, dims, out));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= t0->dims[i];
  for (int i = axis; i < t0->rank; i++) inner *= t0->dims[i];
  size_t es = kiln_dtype_size(t0->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int j = 0; j < n; j++) {
      int64_t dst = (o * n + j) * inner;
      if (t0->dtype == KILN_DTYPE_STRING) {
        for (int64_t k = 0; k < inner; k++) {
          const char *s = ((char *const *)items[j]->data)[o * inner + k];
          KILN_TRY(kiln_tensor_set_string(*out, dst + k, s ? s : "", s ? strlen(s) : 0));
        }
      } else {
        memcpy((char *)(*out)->data + dst * (int64_t)es, (const char *)items[j]->data + o * inner * (int64_t)es,
               (size_t)(inner * (int64_t)es));
      }
    }
  return NULL;
}

/* ---- If ------------------------------------------------------------------ */

static kiln_status_t if_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *cond;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &cond));
  bool c;
  KILN_TRY(scalar_bool(cond, "input 0 (cond)", &c));
  const kiln_graph *branch;
  KILN_TRY(require_graph(ctx->node, c ? "then_branch" : "else_branch", &branch));
  if (branch->n_outputs < ctx->n_outputs)
    return kiln_error(KILN_INVALID_MODEL, "%s has %d outputs, the node %d", c ? "then_branch" : "else_branch",
                      branch->n_outputs, ctx->n_outputs);
  return ctx->run_subgraph(ctx->runner_data, branch, 0, NULL, ctx->n_outputs, ctx->outputs);
}

static kiln_status_t if_infer(kiln_infer_ctx *ctx) {
  const kiln_graph *g = graph_attr(ctx->node, "then_branch");
  for (int i = 0; g && i < ctx->n_outputs && i < g->n_outputs; i++) {
    kiln_type_copy(&ctx->outputs[i], &g->values[g->outputs[i]].type);
    /* Branches may differ in shape: keep only what they agree on. */
    const kiln_graph *e = graph_attr(ctx->node, "else_branch");
    if (e && i < e->n_outputs) {
      const kiln_type *te = &e->values[e->outputs[i]].type;
      kiln_type *t = &ctx->outputs[i];
      if (te->rank != t->rank) t->rank = -1;
      for (int d = 0; t->rank > 0 && d < t->rank; d++)
        if (te->dims[d] != t->dims[d]) t->dims[d] = -1;
    }
  }
  return NULL;
}

/* ---- Loop ---------------------------------------------------------------- */

static kiln_status_t loop_kernel(kiln_kernel_ctx *ctx) {
  const kiln_graph *body;
  KILN_TRY(require_graph(ctx->node, "body", &body));
  int n_carried = ctx->n_inputs - 2;
  if (n_carried < 0) return kiln_error(KILN_INVALID_MODEL, "Loop needs inputs M and cond (may be empty names)");
  if (body->n_inputs != n_carried + 2)
    return kiln_error(KILN_INVALID_MODEL, "body takes %d inputs, expected %d (iteration, cond, %d carried)",
                      body->n_inputs, n_carried + 2, n_carried);
  int n_scan = body->n_outputs - 1 - n_carried;
  if (n_scan < 0)
    return kiln_error(KILN_INVALID_MODEL, "body has %d outputs, fewer than 1 + %d carried", body->n_outputs, n_carried);
  int64_t max_trip = INT64_MAX;
  kiln_tensor *m = kiln_kernel_input(ctx, 0), *cond_in = kiln_kernel_input(ctx, 1);
  if (m) {
    if (m->numel != 1 || !kiln_dtype_is_int(m->dtype))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (M) must be an integer scalar");
    max_trip = kiln_load_i64(m->data, m->dtype, 0);
  }
  bool cond = true;
  if (cond_in) KILN_TRY(scalar_bool(cond_in, "input 1 (cond)", &cond));
  /* Without M or cond the loop would only end by the body's cond: bound it
   * so a hostile model cannot hang the process. */
  const int64_t hard_limit = (int64_t)1 << 31;

  kiln_status_t st = NULL;
  int nb_in = n_carried + 2, nb_out = body->n_outputs;
  kiln_value **carried = calloc((size_t)n_carried + 1, sizeof *carried);
  kiln_value **bin = calloc((size_t)nb_in, sizeof *bin);
  kiln_value **bout = calloc((size_t)nb_out, sizeof *bout);
  kiln_ptr_vec *scans = calloc((size_t)n_scan + 1, sizeof *scans);
  kiln_tensor *iter_t = NULL, *cond_t = NULL;
  if (!carried || !bin || !bout || !scans) {
    st = KILN_OOM();
    goto done;
  }
  for (int i = 0; i < n_carried; i++) {
    if (!ctx->inputs[i + 2]) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "loop-carried input %d is absent", i + 2);
      goto done;
    }
    if ((st = kiln_value_share(ctx->inputs[i + 2], &carried[i]))) goto done;
  }
  int64_t it = 0;
  for (; it < max_trip && cond; it++) {
    if (it >= hard_limit) {
      st = kiln_error(KILN_OUT_OF_RANGE, "loop ran %lld iterations without ending", (long long)it);
      goto done;
    }
    if ((st = kiln_tensor_new(KILN_DTYPE_I64, 0, NULL, &iter_t))) goto done;
    ((int64_t *)iter_t->data)[0] = it;
    if ((st = kiln_tensor_new(KILN_DTYPE_BOOL, 0, NULL, &cond_t))) goto done;
    ((uint8_t *)cond_t->data)[0] = cond;
    if ((st = kiln_value_from_tensor(iter_t, &bin[0]))) { iter_t = NULL; goto done; }
    iter_t = NULL;
    if ((st = kiln_value_from_tensor(cond_t, &bin[1]))) { cond_t = NULL; goto done; }
    cond_t = NULL;
    for (int i = 0; i < n_carried; i++) {
      bin[i + 2] = carried[i];
      carried[i] = NULL;
    }
    st = ctx->run_subgraph(ctx->runner_data, body, nb_in, bin, nb_out, bout);
    free_values(bin, nb_in);
    if (st) {
      st = kiln_status_annotate(st, "iteration %lld", (long long)it);
      goto done;
    }
    if (bout[0]->kind != KILN_VALUE_TENSOR) {
      st = kiln_error(KILN_INVALID_MODEL, "body output 0 (cond) must be a tensor");
      goto done;
    }
    if ((st = scalar_bool(bout[0]->tensor, "body output 0 (cond)", &cond))) goto done;
    for (int i = 0; i < n_carried; i++) {
      carried[i] = bout[i + 1];
      bout[i + 1] = NULL;
    }
    for (int k = 0; k < n_scan; k++) {
      kiln_value *v = bout[1 + n_carried + k];
      if (v->kind != KILN_VALUE_TENSOR) {
        st = kiln_error(KILN_UNSUPPORTED, "scan output %d of the body is not a tensor", k);
        goto done;
      }
      if ((st = kiln_ptr_vec_push(&scans[k], kiln_tensor_retain(v->tensor)))) {
        kiln_tensor_release(v->tensor);
        goto done;
      }
    }
    free_values(bout, nb_out);
  }
  for (int i = 0; i < n_carried && i < ctx->n_outputs; i++) {
    ctx->outputs[i] = carried[i];
    carried[i] = NULL;
  }
  for (int k = 0; k < n_scan && n_carried + k < ctx->n_outputs; k++) {
    kiln_tensor *t = NULL;
    if (scans[k].count) {
      st = stack_axis((kiln_tensor *const *)scans[k].items, scans[k].count, 0, &t);
    } else {
      /* Zero iterations: an empty stack shaped by the body's declared output. */
      const kiln_type *ty = &body->values[body->outputs[1 + n_carried + k]].type;
      int64_t dims[KILN_MAX_RANK] = {0};
      int r = ty->rank >= 0 && ty->rank < KILN_MAX_RANK ? ty->rank : 0;
      for (int d = 0; d < r; d++) dims[d + 1] = ty->dims[d] > 0 ? ty->dims[d] : 0;
      st = kiln_tensor_new(ty->dtype ? ty->dtype : KILN_DTYPE_F32, r + 1, dims, &t);
    }
    if (st) goto done;
    if ((st = kiln_kernel_set_output(ctx, n_carried + k, t))) goto done;
  }
done:
  kiln_tensor_release(iter_t);
  kiln_tensor_release(cond_t);
  if (carried) free_values(carried, n_carried);
  free(carried);
  if (bin) free_values(bin, nb_in);
  free(bin);
  if (bout) free_values(bout, nb_out);
  free(bout);
  for (int k = 0; scans && k < n_scan; k++) {
    for (int j = 0; j < scans[k].count; j++) kiln_tensor_release(scans[k].items[j]);
    kiln_ptr_vec_free(&scans[k]);
  }
  free(scans);
  return st;
}

static kiln_status_t loop_infer(kiln_infer_ctx *ctx) {
  const kiln_graph *body = graph_attr(ctx->node, "body");
  if (!body) return NULL;
  int n_carried = ctx->n_inputs - 2;
  for (int i = 0; i < ctx->n_outputs && 1 + i < body->n_outputs; i++) {
    const kiln_type *bt = &body->values[body->outputs[1 + i]].type;
    if (i < n_carried) {
      /* Carried values may change shape between iterations: keep the dtype and
       * the rank, as the body declares them. */
      const kiln_type *src = (i + 2 < ctx->n_inputs && ctx->inputs[i + 2]) ? ctx->inputs[i + 2] : bt;
      kiln_type_copy(&ctx->outputs[i], src);
      if (bt->kind == KILN_TYPE_UNKNOWN) continue;
      for (int d = 0; d < KILN_MAX_RANK; d++)
        if (bt->dims[d] != ctx->outputs[i].dims[d]) ctx->outputs[i].dims[d] = -1;
    } else if (bt->kind == KILN_TYPE_TENSOR || bt->kind == KILN_TYPE_UNKNOWN) {
      int64_t dims[KILN_MAX_RANK];
      dims[0] = -1;
      int r = bt->rank >= 0 && bt->rank < KILN_MAX_RANK ? bt->rank + 1 : -1;
      for (int d = 1; r > 0 && d < r; d++) dims[d] = bt->dims[d - 1];
      kiln_infer_set(ctx, i, bt->dtype, r, dims);
    }
  }
  return NULL;
}

/* ---- Scan ---------------------------------------------------------------- */

static kiln_status_t axis_list(const kiln_node *n, const char *name, int count, int64_t *out) {
  int k;
  const int64_t *a = kiln_attr_ints(n, name, &k);
  for (int i = 0; i < count; i++) out[i] = 0;
  if (a) {
    if (k != count) return kiln_error(KILN_INVALID_MODEL, "attribute '%s' has %d entries, expected %d", name, k, count);
    for (int i = 0; i < count; i++) out[i] = a[i];
  }
  return NULL;
}

/* One Scan over tensors without a batch axis (opset >= 9 semantics).
 * states: n_state owned values in, replaced by final states. */
static kiln_status_t scan_once(kiln_kernel_ctx *ctx, const kiln_graph *body, int n_state, int n_scan_in,
                               kiln_value **states, kiln_tensor *const *scan_in, const int64_t *in_axes,
                               const int64_t *in_dirs, const int64_t *out_axes, const int64_t *out_dirs,
                               kiln_tensor **scan_out /* n_scan_out, owned results */) {
  int n_scan_out = body->n_outputs - n_state;
  int64_t len = -1;
  int64_t axes[64];
  for (int j = 0; j < n_scan_in; j++) {
    int r = scan_in[j]->rank;
    int64_t ax = in_axes[j] < 0 ? in_axes[j] + r : in_axes[j];
    if (ax < 0 || ax >= r)
      return kiln_error(KILN_INVALID_ARGUMENT, "scan input %d: axis %lld out of range for rank %d", j,
                        (long long)in_axes[j], r);
    axes[j] = ax;
    if (len >= 0 && scan_in[j]->dims[ax] != len)
      return kiln_error(KILN_INVALID_ARGUMENT, "scan inputs disagree on sequence length (%lld vs %lld)",
                        (long long)len, (long long)scan_in[j]->dims[ax]);
    len = scan_in[j]->dims[ax];
  }
  if (len < 0) len = 0;
  kiln_status_t st = NULL;
  int nb_in = n_state + n_scan_in;
  kiln_value **bin = calloc((size_t)nb_in + 1, sizeof *bin);
  kiln_value **bout = calloc((size_t)body->n_outputs + 1, sizeof *bout);
  kiln_tensor ***per_iter = calloc((size_t)n_scan_out + 1, sizeof *per_iter);
  if (!bin || !bout || !per_iter) {
    st = KILN_OOM();
    goto done;
  }
  for (int k = 0; k < n_scan_out; k++)
    if (!(per_iter[k] = calloc((size_t)len + 1, sizeof(kiln_tensor *)))) {
      st = KILN_OOM();
      goto done;
    }
  for (int64_t t = 0; t < len; t++) {
    for (int i = 0; i < n_state; i++) {
      bin[i] = states[i];
      states[i] = NULL;
    }
    for (int j = 0; j < n_scan_in; j++) {
      int64_t idx = in_dirs[j] ? len - 1 - t : t;
      kiln_tensor *s;
      if ((st = slice_axis(scan_in[j], (int)axes[j], idx, &s))) goto done;
      if ((st = kiln_value_from_tensor(s, &bin[n_state + j]))) goto done;
    }
    st = ctx->run_subgraph(ctx->runner_data, body, nb_in, bin, body->n_outputs, bout);
    free_values(bin, nb_in);
    if (st) {
      st = kiln_status_annotate(st, "iteration %lld", (long long)t);
      goto done;
    }
    for (int i = 0; i < n_state; i++) {
      states[i] = bout[i];
      bout[i] = NULL;
    }
    for (int k = 0; k < n_scan_out; k++) {
      kiln_value *v = bout[n_state + k];
      if (v->kind != KILN_VALUE_TENSOR) {
        st = kiln_error(KILN_INVALID_MODEL, "scan output %d is not a tensor", k);
        goto done;
      }
      per_iter[k][t] = kiln_tensor_retain(v->tensor);
    }
    free_values(bout, body->n_outputs);
  }
  for (int k = 0; k < n_scan_out; k++) {
    if (len == 0) {
      const kiln_type *ty = &body->values[body->outputs[n_state + k]].type;
      int64_t dims[KILN_MAX_RANK] = {0};
      int r = ty->rank >= 0 && ty->rank < KILN_MAX_RANK ? ty->rank : 0;
      for (int d = 0; d < r; d++) dims[d + 1] = ty->dims[d] > 0 ? ty->dims[d] : 0;
      if ((st = kiln_tensor_new(ty->dtype ? ty->dtype : KILN_DTYPE_F32, r + 1, dims, &scan_out[k]))) goto done;
      continue;
    }
    if (out_dirs[k]) /* reverse: iteration t lands at len-1-t */
      for (int64_t a = 0, b = len - 1; a < b; a++, b--) {
        kiln_tensor *tmp = per_iter[k][a];
        per_iter[k][a] = per_iter[k][b];
        per_iter[k][b] = tmp;
      }
    int r = per_iter[k][0]->rank + 1;
    int64_t ax = out_axes[k] < 0 ? out_axes[k] + r : out_axes[k];
    if (ax < 0 || ax >= r) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "scan output %d: axis %lld out of range", k, (long long)out_axes[k]);
      goto done;
    }
    if ((st = stack_axis(per_iter[k], (int)len, (int)ax, &scan_out[k]))) goto done;
  }
done:
  if (bin) free_values(bin, nb_in);
  free(bin);
  if (bout) free_values(bout, body->n_outputs);
  free(bout);
  for (int k = 0; per_iter && k < n_scan_out; k++) {
    for (int64_t t = 0; per_iter[k] && t < len; t++) kiln_tensor_release(per_iter[k][t]);
    free(per_iter[k]);
  }
  free(per_iter);
  return st;
}

static kiln_status_t scan_kernel(kiln_kernel_ctx *ctx) {
  const kiln_graph *body;
  KILN_TRY(require_graph(ctx->node, "body", &body));
  int n_scan_in = (int)kiln_attr_int(ctx->node, "num_scan_inputs", -1);
  bool v8 = ctx->opset < 9; /* opset 8: input 0 is sequence_lens and every tensor has a batch axis */
  int first = v8 ? 1 : 0;
  int n_state = ctx->n_inputs - first - n_scan_in;
  if (n_scan_in < 0 || n_scan_in > 64 || n_state < 0)
    return kiln_error(KILN_INVALID_MODEL, "num_scan_inputs %d does not fit %d inputs", n_scan_in, ctx->n_inputs);
  int n_scan_out = body->n_outputs - n_state;
  if (n_scan_out < 0 || n_scan_out > 64 || body->n_inputs != n_state + n_scan_in)
    return kiln_error(KILN_INVALID_MODEL, "body signature (%d in, %d out) does not fit %d states + %d scan inputs",
                      body->n_inputs, body->n_outputs, n_state, n_scan_in);
  int64_t in_axes[64], in_dirs[64], out_axes[64], out_dirs[64];
  KILN_TRY(axis_list(ctx->node, "scan_input_axes", n_scan_in, in_axes));
  KILN_TRY(axis_list(ctx->node, v8 ? "directions" : "scan_input_directions", n_scan_in, in_dirs));
  KILN_TRY(axis_list(ctx->node, "scan_output_axes", n_scan_out, out_axes));
  KILN_TRY(axis_list(ctx->node, "scan_output_directions", n_scan_out, out_dirs));
  kiln_status_t st = NULL;
  kiln_value *states[64] = {0};
  kiln_tensor *scan_in[64] = {0}, *scan_out[64] = {0};
  for (int j = 0; j < n_scan_in; j++) {
    KILN_TRY(kiln_kernel_require_input(ctx, first + n_state + j, &scan_in[j]));
  }
  if (!v8) {
    for (int i = 0; i < n_state; i++) {
      if (!ctx->inputs[first + i]) { /* fuzz_pipeline: an absent state input was dereferenced */
        st = kiln_error(KILN_INVALID_ARGUMENT, "input %d (initial state %d) is absent", first + i, i);
        goto done;
      }
      if ((st = kiln_value_share(ctx->inputs[first + i], &states[i]))) goto done;
    }
    if ((st = scan_once(ctx, body, n_state, n_scan_in, states, scan_in, in_axes, in_dirs, out_axes, out_dirs,
                        scan_out)))
      goto done;
    for (int i = 0; i < n_state; i++) {
      ctx->outputs[i] = states[i];
      states[i] = NULL;
    }
    for (int k = 0; k < n_scan_out; k++) {
      st = kiln_kernel_set_output(ctx, n_state + k, scan_out[k]);
      scan_out[k] = NULL;
      if (st) goto done;
    }
    goto done;
  }
  /* Opset 8: loop over the batch axis, scanning axis 1 (axes are given
   * without the batch axis), honoring sequence_lens. */
  {
    kiln_tensor *seq_lens = kiln_kernel_input(ctx, 0);
    int64_t batch = -1;
    for (int i = 0; i < n_state + n_scan_in; i++) {
      kiln_tensor *t;
      if ((st = kiln_kernel_require_input(ctx, first + i, &t))) goto done;
      if (t->rank < 1) {
        st = kiln_error(KILN_INVALID_ARGUMENT, "input %d needs a batch axis", first + i);
        goto done;
      }
      if (batch >= 0 && t->dims[0] != batch) {
        st = kiln_error(KILN_INVALID_ARGUMENT, "inputs disagree on batch size");
        goto done;
      }
      batch = t->dims[0];
    }
    kiln_tensor **out_states_b = calloc((size_t)(batch * (n_state + 1) + 1), sizeof *out_states_b);
    kiln_tensor **out_scans_b = calloc((size_t)(batch * (n_scan_out + 1) + 1), sizeof *out_scans_b);
    if (!out_states_b || !out_scans_b) {
      free(out_states_b);
      free(out_scans_b);
      st = KILN_OOM();
      goto done;
    }
    for (int64_t b = 0; b < batch && !st; b++) {
      kiln_tensor *sin[64] = {0};
      for (int i = 0; i < n_state && !st; i++) {
        kiln_tensor *s;
        if ((st = slice_axis(ctx->inputs[first + i]->tensor, 0, b, &s))) break;
        st = kiln_value_from_tensor(s, &states[i]);
      }
      int64_t axes1[64];
      for (int j = 0; j < n_scan_in && !st; j++) {
        kiln_tensor *full;
        if ((st = slice_axis(scan_in[j], 0, b, &full))) break;
        axes1[j] = in_axes[j];
        if (seq_lens) {
          int64_t L = kiln_load_i64(seq_lens->data, seq_lens->dtype, b);
          if (L != full->dims[0]) {
            kiln_tensor_release(full);
            st = kiln_error(KILN_UNSUPPORTED, "Scan-8 with sequence_lens shorter than the sequence");
            break;
          }
        }
        sin[j] = full;
      }
      if (!st)
        st = scan_once(ctx, body, n_state, n_scan_in, states, sin, axes1, in_dirs, out_axes, out_dirs,
                       &out_scans_b[b * n_scan_out]);
      for (int j = 0; j < n_scan_in; j++) kiln_tensor_release(sin[j]);
      for (int i = 0; i < n_state; i++) {
        if (!st && states[i] && states[i]->kind == KILN_VALUE_TENSOR)
          out_states_b[b * n_state + i] = kiln_tensor_retain(states[i]->tensor);
        kiln_value_free(states[i]);
        states[i] = NULL;
      }
    }
    for (int i = 0; i < n_state && !st; i++) {
      kiln_tensor *items[4096];
      if (batch > 4096) { st = kiln_error(KILN_UNSUPPORTED, "batch too large"); break; }
      for (int64_t b = 0; b < batch; b++) items[b] = out_states_b[b * n_state + i];
      kiln_tensor *t;
      if (!(st = stack_axis(items, (int)batch, 0, &t))) st = kiln_kernel_set_output(ctx, i, t);
    }
    for (int k = 0; k < n_scan_out && !st; k++) {
      kiln_tensor *items[4096];
      for (int64_t b = 0; b < batch; b++) items[b] = out_scans_b[b * n_scan_out + k];
      kiln_tensor *t;
      if (!(st = stack_axis(items, (int)batch, 0, &t))) st = kiln_kernel_set_output(ctx, n_state + k, t);
    }
    for (int64_t i = 0; i < batch * n_state; i++) kiln_tensor_release(out_states_b[i]);
    for (int64_t i = 0; i < batch * n_scan_out; i++) kiln_tensor_release(out_scans_b[i]);
    free(out_states_b);
    free(out_scans_b);
  }
done:
  for (int i = 0; i < 64; i++) {
    kiln_value_free(states[i]);
    kiln_tensor_release(scan_out[i]);
  }
  return st;
}

static kiln_status_t scan_infer(kiln_infer_ctx *ctx) {
  const kiln_graph *body = graph_attr(ctx->node, "body");
  if (!body) return NULL;
  int n_scan_in = (int)kiln_attr_int(ctx->node, "num_scan_inputs", 0);
  int first = ctx->opset < 9 ? 1 : 0;
  int n_state = ctx->n_inputs - first - n_scan_in;
  for (int i = 0; i < ctx->n_outputs && i < body->n_outputs; i++) {
    const kiln_type *bt = &body->values[body->outputs[i]].type;
    if (i < n_state) {
      if (first + i < ctx->n_inputs && ctx->inputs[first + i]) kiln_type_copy(&ctx->outputs[i], ctx->inputs[first + i]);
    } else {
      kiln_infer_set(ctx, i, bt->dtype, -1, NULL);
    }
  }
  return NULL;
}

/* ---- SequenceMap ------------------------------------------------------- */

static kiln_status_t sequence_map_kernel(kiln_kernel_ctx *ctx) {
  const kiln_graph *body;
  KILN_TRY(require_graph(ctx->node, "body", &body));
  const kiln_value *seq = ctx->inputs[0];
  if (!seq || seq->kind != KILN_VALUE_SEQUENCE)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input_sequence) must be a sequence");
  if (body->n_inputs != ctx->n_inputs || body->n_outputs != ctx->n_outputs)
    return kiln_error(KILN_INVALID_MODEL, "body signature (%d in, %d out) does not match the node (%d in, %d out)",
                      body->n_inputs, body->n_outputs, ctx->n_inputs, ctx->n_outputs);
  for (int j = 1; j < ctx->n_inputs; j++) {
    const kiln_value *a = ctx->inputs[j];
    if (!a) return kiln_error(KILN_INVALID_ARGUMENT, "input %d is absent", j);
    if (a->kind == KILN_VALUE_SEQUENCE && a->n_items != seq->n_items)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d has %d items, input 0 has %d", j, a->n_items, seq->n_items);
  }
  kiln_status_t st = NULL;
  kiln_value *bin[64] = {0}, *bout[64] = {0};
  if (ctx->n_inputs > 64 || ctx->n_outputs > 64) return kiln_error(KILN_UNSUPPORTED, "too many inputs/outputs");
  for (int k = 0; k < ctx->n_outputs; k++) {
    kiln_dtype dt = body->values[body->outputs[k]].type.dtype;
    if ((st = kiln_value_new_sequence(dt, &ctx->outputs[k]))) return st;
  }
  for (int i = 0; i < seq->n_items && !st; i++) {
    for (int j = 0; j < ctx->n_inputs && !st; j++) {
      const kiln_value *a = ctx->inputs[j];
      kiln_tensor *t = a->kind == KILN_VALUE_SEQUENCE ? a->items[i] : a->tensor;
      if (!t) {
        st = kiln_error(KILN_INVALID_ARGUMENT, "input %d must be a tensor or sequence", j);
        break;
      }
      st = kiln_value_from_tensor(kiln_tensor_retain(t), &bin[j]);
    }
    if (!st) st = ctx->run_subgraph(ctx->runner_data, body, ctx->n_inputs, bin, ctx->n_outputs, bout);
    free_values(bin, ctx->n_inputs);
    for (int k = 0; k < ctx->n_outputs && !st; k++) {
      if (bout[k]->kind != KILN_VALUE_TENSOR) {
        st = kiln_error(KILN_INVALID_MODEL, "body output %d is not a tensor", k);
        break;
      }
      ctx->outputs[k]->elem_dtype = bout[k]->tensor->dtype;
      st = kiln_value_seq_insert(ctx->outputs[k], -1, kiln_tensor_retain(bout[k]->tensor));
    }
    free_values(bout, ctx->n_outputs);
  }
  return st;
}

static kiln_status_t sequence_map_infer(kiln_infer_ctx *ctx) {
  const kiln_graph *body = graph_attr(ctx->node, "body");
  for (int k = 0; body && k < ctx->n_outputs && k < body->n_outputs; k++) {
    kiln_type_copy(&ctx->outputs[k], &body->values[body->outputs[k]].type);
    ctx->outputs[k].kind = KILN_TYPE_SEQUENCE;
  }
  return NULL;
}

static const kiln_op_def control_ops[] = {
    {"", "If", 1, 1, 1, -1, if_infer, if_kernel, KILN_OP_CONTROL_FLOW, .id = KILN_OP_If},
    {"", "Loop", 2, -1, 0, -1, loop_infer, loop_kernel, KILN_OP_CONTROL_FLOW, .id = KILN_OP_Loop},
    {"", "Scan", 1, -1, 1, -1, scan_infer, scan_kernel, KILN_OP_CONTROL_FLOW, .id = KILN_OP_Scan},
    {"", "SequenceMap", 1, -1, 1, -1, sequence_map_infer, sequence_map_kernel, KILN_OP_CONTROL_FLOW, .id = KILN_OP_SequenceMap},
};

const kiln_op_def *kiln_ops_control(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(control_ops);
  return control_ops;
}
