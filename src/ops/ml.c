/* Ops of the "ml" family, domain ai.onnx.ml: LabelEncoder (opsets 2-4),
 * TreeEnsemble (opset 5), ArrayFeatureExtractor and Binarizer (opset 1).
 *
 * LabelEncoder maps each element through parallel key/value lists (the
 * keys_* / values_* attributes, lists or, from opset 4, 1-D tensors); the
 * last of repeated keys wins and a NaN key matches a NaN input. Elements
 * without a key get the default_* of the values' type (spec defaults: -1,
 * -0.0, "_Unused"). Keys are searched linearly from the back: this is the
 * reference, encoders are small.
 *
 * TreeEnsemble walks every tree (tree_roots) from its root through interior
 * nodes (nodes_*) to a leaf (leaf_*), comparing feature nodes_featureids
 * with nodes_splits by nodes_modes (LEQ, LT, GTE, GT, EQ, NEQ, MEMBER of
 * the node's NaN-delimited run of membership_values, taken in node order);
 * a NaN feature takes the true branch where nodes_missing_value_tracks_true
 * says so. Leaf weights are aggregated per target (SUM, AVERAGE over the
 * trees, MIN, MAX), then post_transform (NONE, SOFTMAX, LOGISTIC,
 * SOFTMAX_ZERO; PROBIT is rejected). A walk longer than the node count is a
 * cycle and an error, never a hang. */
#include "ops/op.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#define ML_DOMAIN "ai.onnx.ml"

/* A numeric attribute as doubles (owned, *out NULL when absent): a tensor,
 * floats or ints. */
static kiln_status_t ml_attr_f64(const kiln_node *node, const char *name, double **out, int64_t *n) {
  *out = NULL;
  *n = 0;
  const kiln_attr *a = kiln_node_attr(node, name);
  if (!a) return NULL;
  int64_t count;
  if (a->type == KILN_ATTR_TENSOR && a->t)
    count = a->t->numel;
  else if (a->type == KILN_ATTR_FLOATS || a->type == KILN_ATTR_INTS)
    count = a->n;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute %s: expected a tensor, floats or ints", name);
  if (a->type == KILN_ATTR_TENSOR && !(kiln_dtype_is_float(a->t->dtype) || kiln_dtype_is_int(a->t->dtype)))
    return kiln_error(KILN_INVALID_MODEL, "attribute %s: tensor of dtype %s, expected a numeric one", name,
                      kiln_dtype_name(a->t->dtype));
  double *v = malloc(sizeof(double) * (size_t)(count > 0 ? count : 1));
  if (!v) return KILN_OOM();
  for (int64_t i = 0; i < count; i++)
    v[i] = a->type == KILN_ATTR_TENSOR ? kiln_load_f64(a->t->data, a->t->dtype, i)
           : a->type == KILN_ATTR_FLOATS ? (double)a->floats[i]
                                         : (double)a->ints[i];
  *out = v;
  *n = count;
  return NULL;
}

/* ---- LabelEncoder ----------------------------------------------------------- */

/* One side of the mapping: the attribute that holds it and its element type. */
typedef struct le_list {
  const kiln_attr *attr;
  kiln_dtype dtype;
  int64_t n;
} le_list;

static kiln_status_t le_list_of(const kiln_node *node, const char *side, le_list *out) {
  static const char *suffix[4] = {"floats", "int64s", "strings", "tensor"};
  static const kiln_dtype types[3] = {KILN_DTYPE_F32, KILN_DTYPE_I64, KILN_DTYPE_STRING};
  memset(out, 0, sizeof *out);
  for (int k = 0; k < 4; k++) {
    char name[32];
    snprintf(name, sizeof name, "%s_%s", side, suffix[k]);
    const kiln_attr *a = kiln_node_attr(node, name);
    if (!a) continue;
    if (out->attr) return kiln_error(KILN_INVALID_MODEL, "attributes %s_*: only one of them may be set", side);
    out->attr = a;
    if (k < 3) {
      out->dtype = types[k];
      out->n = a->n;
    } else {
      if (!a->t) return kiln_error(KILN_INVALID_MODEL, "attribute %s: expected a tensor", name);
      out->dtype = a->t->dtype;
      out->n = a->t->numel;
    }
  }
  if (!out->attr) return kiln_error(KILN_INVALID_MODEL, "one of the attributes %s_* is required", side);
  return NULL;
}

static const char *le_string(const le_list *l, int64_t i) {
  const char *s = l->attr->type == KILN_ATTR_TENSOR ? ((char *const *)l->attr->t->data)[i] : l->attr->strings[i];
  return s ? s : "";
}

static double le_number(const le_list *l, int64_t i) {
  if (l->attr->type == KILN_ATTR_TENSOR) return kiln_load_f64(l->attr->t->data, l->attr->t->dtype, i);
  return l->attr->type == KILN_ATTR_FLOATS ? (double)l->attr->floats[i] : (double)l->attr->ints[i];
}

static int64_t le_int(const le_list *l, int64_t i) {
  if (l->attr->type == KILN_ATTR_TENSOR) return kiln_load_i64(l->attr->t->data, l->attr->t->dtype, i);
  return l->attr->ints[i];
}

static bool le_types_ok(kiln_dtype dt) {
  return dt == KILN_DTYPE_STRING || dt == KILN_DTYPE_I64 || dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_I32 ||
         dt == KILN_DTYPE_I16 || dt == KILN_DTYPE_F64;
}

static kiln_status_t le_lists(const kiln_node *node, int opset, le_list *keys, le_list *values) {
  if (opset < 2)
    return kiln_error(KILN_UNSUPPORTED, "LabelEncoder-1 (classes_strings) is not supported; opsets 2-4 are");
  KILN_TRY(le_list_of(node, "keys", keys));
  KILN_TRY(le_list_of(node, "values", values));
  if (keys->n != values->n)
    return kiln_error(KILN_INVALID_MODEL, "attributes keys_* and values_*: %lld keys for %lld values",
                      (long long)keys->n, (long long)values->n);
  if (!le_types_ok(keys->dtype) || !le_types_ok(values->dtype))
    return kiln_error(KILN_INVALID_MODEL, "attributes keys_*/values_*: types %s -> %s, expected string, int16, "
                      "int32, int64, float or double",
                      kiln_dtype_name(keys->dtype), kiln_dtype_name(values->dtype));
  return NULL;
}

static kiln_status_t label_encoder_kernel(kiln_kernel_ctx *ctx) {
  const kiln_node *node = ctx->node;
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  le_list keys, values;
  KILN_TRY(le_lists(node, ctx->opset, &keys, &values));
  if (x->dtype != keys.dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, the keys are %s", kiln_dtype_name(x->dtype),
                      kiln_dtype_name(keys.dtype));
  kiln_dtype odt = values.dtype;
  /* The default: default_tensor (with values_tensor), else default_<type>, else the spec's. */
  const kiln_attr *dflt_t = kiln_node_attr(node, "default_tensor");
  if (dflt_t && (!dflt_t->t || dflt_t->t->numel != 1 || dflt_t->t->dtype != odt))
    return kiln_error(KILN_INVALID_MODEL, "attribute default_tensor: expected one %s", kiln_dtype_name(odt));
  const char *dflt_s = kiln_attr_string(node, "default_string", "_Unused");
  double dflt_f = dflt_t && kiln_dtype_is_float(odt) ? kiln_load_f64(dflt_t->t->data, odt, 0)
                                                     : (double)kiln_attr_float(node, "default_float", -0.0f);
  int64_t dflt_i = dflt_t && kiln_dtype_is_int(odt) ? kiln_load_i64(dflt_t->t->data, odt, 0)
                                                    : kiln_attr_int(node, "default_int64", -1);
  if (dflt_t && odt == KILN_DTYPE_STRING) dflt_s = ((char *const *)dflt_t->t->data)[0] ? ((char *const *)dflt_t->t->data)[0] : "";

  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, odt, x->rank, x->dims, &y));
  for (int64_t e = 0; e < x->numel; e++) {
    int64_t hit = -1;
    if (x->dtype == KILN_DTYPE_STRING) {
      const char *s = ((char *const *)x->data)[e];
      if (!s) s = "";
      for (int64_t k = keys.n - 1; k >= 0 && hit < 0; k--)
        if (!strcmp(le_string(&keys, k), s)) hit = k;
    } else if (kiln_dtype_is_float(x->dtype)) {
      double v = kiln_load_f64(x->data, x->dtype, e);
      for (int64_t k = keys.n - 1; k >= 0 && hit < 0; k--) {
        double kv = le_number(&keys, k);
        if (kv == v || (isnan(kv) && isnan(v))) hit = k;
      }
    } else {
      int64_t v = kiln_load_i64(x->data, x->dtype, e);
      for (int64_t k = keys.n - 1; k >= 0 && hit < 0; k--)
        if (le_int(&keys, k) == v) hit = k;
    }
    if (odt == KILN_DTYPE_STRING) {
      const char *s = hit >= 0 ? le_string(&values, hit) : dflt_s;
      KILN_TRY(kiln_tensor_set_string(y, e, s, strlen(s)));
    } else if (kiln_dtype_is_float(odt)) {
      kiln_store_f64(y->data, odt, e, hit >= 0 ? le_number(&values, hit) : dflt_f);
    } else {
      kiln_store_i64(y->data, odt, e, hit >= 0 ? le_int(&values, hit) : dflt_i);
    }
  }
  return NULL;
}

static kiln_status_t label_encoder_infer(kiln_infer_ctx *ctx) {
  le_list keys, values;
  KILN_TRY(le_lists(ctx->node, ctx->opset, &keys, &values));
  const kiln_type *xt = ctx->inputs[0];
  if (xt && xt->dtype != KILN_DTYPE_UNDEFINED && xt->dtype != keys.dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, the keys are %s", kiln_dtype_name(xt->dtype),
                      kiln_dtype_name(keys.dtype));
  kiln_infer_set(ctx, 0, values.dtype, xt ? xt->rank : -1, xt && xt->rank >= 0 ? xt->dims : NULL);
  return NULL;
}

/* ---- TreeEnsemble ------------------------------------------------------------ */

enum { TE_LEQ, TE_LT, TE_GTE, TE_GT, TE_EQ, TE_NEQ, TE_MEMBER };
enum { AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX };
enum { POST_NONE, POST_SOFTMAX, POST_LOGISTIC, POST_SOFTMAX_ZERO, POST_PROBIT };

typedef struct tree_model {
  int64_t n_nodes, n_leaves, n_trees, n_targets;
  const int64_t *feature, *true_id, *false_id, *true_leaf, *false_leaf, *roots, *target, *tracks;
  double *splits, *modes, *weights, *members; /* owned */
  int64_t n_members;
  int64_t *member_start, *member_end; /* owned: run of membership_values per node (MEMBER nodes) */
  int aggregate, post;
} tree_model;

static void tree_model_free(tree_model *m) {
  free(m->splits);
  free(m->modes);
  free(m->weights);
  free(m->members);
  free(m->member_start);
  free(m->member_end);
}

/* An ints attribute of exactly n entries (n < 0: any count, stored in *n). */
static kiln_status_t tree_ints(const kiln_node *node, const char *name, bool required, int64_t *n, const int64_t **out) {
  int cnt = 0;
  *out = kiln_attr_ints(node, name, &cnt);
  if (!*out) {
    if (required && !kiln_node_attr(node, name)) return kiln_error(KILN_INVALID_MODEL, "attribute %s is required", name);
    if (!required) return NULL;
  }
  if (*n < 0) {
    *n = cnt;
  } else if (cnt != *n) {
    return kiln_error(KILN_INVALID_MODEL, "attribute %s: %d entries, expected %lld", name, cnt, (long long)*n);
  }
  return NULL;
}

static kiln_status_t tree_model_of(const kiln_node *node, int64_t n_features, tree_model *m) {
  memset(m, 0, sizeof *m);
  m->n_nodes = -1;
  m->n_leaves = -1;
  m->n_trees = -1;
  KILN_TRY(tree_ints(node, "nodes_featureids", true, &m->n_nodes, &m->feature));
  KILN_TRY(tree_ints(node, "nodes_truenodeids", true, &m->n_nodes, &m->true_id));
  KILN_TRY(tree_ints(node, "nodes_falsenodeids", true, &m->n_nodes, &m->false_id));
  KILN_TRY(tree_ints(node, "nodes_trueleafs", true, &m->n_nodes, &m->true_leaf));
  KILN_TRY(tree_ints(node, "nodes_falseleafs", true, &m->n_nodes, &m->false_leaf));
  KILN_TRY(tree_ints(node, "nodes_missing_value_tracks_true", false, &m->n_nodes, &m->tracks));
  KILN_TRY(tree_ints(node, "leaf_targetids", true, &m->n_leaves, &m->target));
  KILN_TRY(tree_ints(node, "tree_roots", true, &m->n_trees, &m->roots));
  m->n_targets = kiln_attr_int(node, "n_targets", 0);
  m->aggregate = (int)kiln_attr_int(node, "aggregate_function", AGG_SUM);
  m->post = (int)kiln_attr_int(node, "post_transform", POST_NONE);
  if (m->n_targets <= 0 || m->n_targets > ((int64_t)1 << 31))
    return kiln_error(KILN_INVALID_MODEL, "attribute n_targets: %lld, expected a positive count",
                      (long long)m->n_targets);
  if (m->aggregate < AGG_AVERAGE || m->aggregate > AGG_MAX)
    return kiln_error(KILN_INVALID_MODEL, "attribute aggregate_function: %d, expected 0-3", m->aggregate);
  if (m->post < POST_NONE || m->post > POST_PROBIT)
    return kiln_error(KILN_INVALID_MODEL, "attribute post_transform: %d, expected 0-4", m->post);
  if (m->post == POST_PROBIT) return kiln_error(KILN_UNSUPPORTED, "attribute post_transform: PROBIT is not supported");
  int64_t n;
  kiln_status_t st = ml_attr_f64(node, "nodes_splits", &m->splits, &n);
  if (!st && n != m->n_nodes)
    st = kiln_error(KILN_INVALID_MODEL, "attribute nodes_splits: %lld entries for %lld nodes", (long long)n,
                    (long long)m->n_nodes);
  if (!st) st = ml_attr_f64(node, "nodes_modes", &m->modes, &n);
  if (!st && n != m->n_nodes)
    st = kiln_error(KILN_INVALID_MODEL, "attribute nodes_modes: %lld entries for %lld nodes", (long long)n,
                    (long long)m->n_nodes);
  if (!st) st = ml_attr_f64(node, "leaf_weights", &m->weights, &n);
  if (!st && n != m->n_leaves)
    st = kiln_error(KILN_INVALID_MODEL, "attribute leaf_weights: %lld entries for %lld leaves", (long long)n,
                    (long long)m->n_leaves);
  if (!st) st = ml_attr_f64(node, "membership_values", &m->members, &m->n_members);
  if (!st) {
    m->member_start = calloc((size_t)(m->n_nodes > 0 ? m->n_nodes : 1), sizeof(int64_t));
    m->member_end = calloc((size_t)(m->n_nodes > 0 ? m->n_nodes : 1), sizeof(int64_t));
    if (!m->member_start || !m->member_end) st = KILN_OOM();
  }
  /* Every reference in range; each MEMBER node's run of members, in node order. */
  int64_t pos = 0;
  for (int64_t i = 0; !st && i < m->n_nodes; i++) {
    double mode = m->modes[i];
    if (!(mode >= TE_LEQ && mode <= TE_MEMBER) || mode != floor(mode)) {
      st = kiln_error(KILN_INVALID_MODEL, "attribute nodes_modes: entry %lld is %g, expected 0-6", (long long)i, mode);
      break;
    }
    bool degenerate = m->true_leaf[i] && m->false_leaf[i] && m->true_id[i] == m->false_id[i];
    if (!degenerate && (m->feature[i] < 0 || m->feature[i] >= n_features))
      st = kiln_error(KILN_INVALID_ARGUMENT, "attribute nodes_featureids: entry %lld is %lld, X has %lld features",
                      (long long)i, (long long)m->feature[i], (long long)n_features);
    int64_t limits[2] = {m->true_leaf[i] ? m->n_leaves : m->n_nodes, m->false_leaf[i] ? m->n_leaves : m->n_nodes};
    int64_t ids[2] = {m->true_id[i], m->false_id[i]};
    for (int b = 0; !st && b < 2; b++)
      if (ids[b] < 0 || ids[b] >= limits[b])
        st = kiln_error(KILN_INVALID_MODEL, "attribute nodes_%snodeids: entry %lld is %lld, out of range [0, %lld)",
                        b ? "false" : "true", (long long)i, (long long)ids[b], (long long)limits[b]);
    if (!st && mode == TE_MEMBER) {
      if (pos >= m->n_members && m->n_members == 0)
        st = kiln_error(KILN_INVALID_MODEL, "node %lld is BRANCH_MEMBER but membership_values is missing", (long long)i);
      m->member_start[i] = pos;
      while (pos < m->n_members && !isnan(m->members[pos])) pos++;
      m->member_end[i] = pos;
      if (pos < m->n_members) pos++; /* the NaN delimiter */
    }
  }
  for (int64_t i = 0; !st && i < m->n_leaves; i++)
    if (m->target[i] < 0 || m->target[i] >= m->n_targets)
      st = kiln_error(KILN_INVALID_MODEL, "attribute leaf_targetids: entry %lld is %lld, out of range [0, %lld)",
                      (long long)i, (long long)m->target[i], (long long)m->n_targets);
  for (int64_t t = 0; !st && t < m->n_trees; t++)
    if (m->roots[t] < 0 || m->roots[t] >= m->n_nodes)
      st = kiln_error(KILN_INVALID_MODEL, "attribute tree_roots: entry %lld is %lld, out of range [0, %lld)",
                      (long long)t, (long long)m->roots[t], (long long)m->n_nodes);
  if (st) tree_model_free(m);
  return st;
}

static bool tree_branch_true(const tree_model *m, int64_t i, double v) {
  if (isnan(v) && m->tracks && m->tracks[i]) return true;
  double s = m->splits[i];
  switch ((int)m->modes[i]) {
    case TE_LEQ: return v <= s;
    case TE_LT: return v < s;
    case TE_GTE: return v >= s;
    case TE_GT: return v > s;
    case TE_EQ: return v == s;
    case TE_NEQ: return v != s;
    default:
      for (int64_t k = m->member_start[i]; k < m->member_end[i]; k++)
        if (m->members[k] == v) return true;
      return false;
  }
}

/* The leaf tree t reaches for features x, or -1 on a cycle. */
static int64_t tree_leaf(const tree_model *m, int64_t t, const double *x) {
  int64_t i = m->roots[t];
  if (m->true_leaf[i] && m->false_leaf[i] && m->true_id[i] == m->false_id[i]) return m->true_id[i];
  for (int64_t steps = 0; steps <= m->n_nodes; steps++) {
    bool go_true = tree_branch_true(m, i, x[m->feature[i]]);
    int64_t next = go_true ? m->true_id[i] : m->false_id[i];
    if (go_true ? m->true_leaf[i] : m->false_leaf[i]) return next;
    i = next;
  }
  return -1;
}

static kiln_status_t tree_ensemble_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F64 && x->dtype != KILN_DTYPE_F16)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, expected float, double or float16",
                      kiln_dtype_name(x->dtype));
  if (x->rank != 2) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected [N, F]", x->rank);
  int64_t nb = x->dims[0], nf = x->dims[1];
  tree_model m;
  KILN_TRY(tree_model_of(ctx->node, nf, &m));
  int64_t odims[2] = {nb, m.n_targets};
  kiln_status_t st = kiln_kernel_output_tensor(ctx, 0, x->dtype, 2, odims, &y);
  double *row = malloc(sizeof(double) * (size_t)(nf + m.n_targets + 1));
  if (!st && !row) st = KILN_OOM();
  double hi = x->dtype == KILN_DTYPE_F64 ? DBL_MAX : x->dtype == KILN_DTYPE_F32 ? FLT_MAX : 65504.0;
  for (int64_t b = 0; !st && b < nb; b++) {
    double *feat = row, *acc = row + nf;
    for (int64_t f = 0; f < nf; f++) feat[f] = kiln_load_f64(x->data, x->dtype, b * nf + f);
    for (int64_t k = 0; k < m.n_targets; k++) acc[k] = m.aggregate == AGG_MIN ? hi : m.aggregate == AGG_MAX ? -hi : 0;
    for (int64_t t = 0; t < m.n_trees; t++) {
      int64_t leaf = tree_leaf(&m, t, feat);
      if (leaf < 0) {
        st = kiln_error(KILN_INVALID_MODEL, "tree %lld (root %lld): the nodes form a cycle", (long long)t,
                        (long long)m.roots[t]);
        break;
      }
      double w = m.weights[leaf], *a = &acc[m.target[leaf]];
      switch (m.aggregate) {
        case AGG_SUM: *a += w; break;
        case AGG_AVERAGE: *a += w / (double)m.n_trees; break;
        case AGG_MIN: *a = w < *a ? w : *a; break;
        default: *a = w > *a ? w : *a; break;
      }
    }
    if (m.post == POST_LOGISTIC) {
      for (int64_t k = 0; k < m.n_targets; k++) acc[k] = 1 / (1 + exp(-acc[k]));
    } else if (m.post == POST_SOFTMAX || m.post == POST_SOFTMAX_ZERO) {
      /* SOFTMAX_ZERO: zero scores stay zero and take no share */
      bool skip_zero = m.post == POST_SOFTMAX_ZERO;
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < m.n_targets; k++)
        if (!(skip_zero && acc[k] == 0) && acc[k] > mx) mx = acc[k];
      for (int64_t k = 0; k < m.n_targets; k++) {
        if (skip_zero && acc[k] == 0) continue;
        acc[k] = exp(acc[k] - mx);
        sum += acc[k];
      }
      for (int64_t k = 0; k < m.n_targets; k++)
        if (!(skip_zero && acc[k] == 0) && sum > 0) acc[k] /= sum;
    }
    for (int64_t k = 0; k < m.n_targets; k++) kiln_store_f64(y->data, x->dtype, b * m.n_targets + k, acc[k]);
  }
  free(row);
  tree_model_free(&m);
  return st;
}

static kiln_status_t tree_ensemble_infer(kiln_infer_ctx *ctx) {
  const kiln_type *xt = ctx->inputs[0];
  if (!xt) return NULL;
  if (xt->rank >= 0 && xt->rank != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected [N, F]", xt->rank);
  int64_t dims[2] = {xt->rank == 2 ? xt->dims[0] : -1, kiln_attr_int(ctx->node, "n_targets", -1)};
  if (dims[1] <= 0) dims[1] = -1;
  kiln_infer_set(ctx, 0, xt->dtype, 2, dims);
  return NULL;
}

/* ---- ArrayFeatureExtractor --------------------------------------------------- */

static bool afe_dtype_ok(kiln_dtype dt) {
  return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_I64 || dt == KILN_DTYPE_I32 ||
         dt == KILN_DTYPE_STRING;
}

/* Output dims: X's with the last axis replaced by the number of indices; a
 * 1-D X gives [1, n] (as ONNX Runtime). */
static int afe_dims(int rank, const int64_t *xd, int64_t n_idx, int64_t *out) {
  if (rank <= 1) {
    out[0] = 1;
    out[1] = n_idx;
    return 2;
  }
  memcpy(out, xd, sizeof(int64_t) * (size_t)(rank - 1));
  out[rank - 1] = n_idx;
  return rank;
}

static kiln_status_t array_feature_extractor_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *idx, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &idx));
  if (!afe_dtype_ok(x->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, expected float, double, int64, int32 or string",
                      kiln_dtype_name(x->dtype));
  if (idx->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (Y): dtype %s, expected int64", kiln_dtype_name(idx->dtype));
  if (x->rank < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): a scalar, expected rank >= 1");
  int64_t last = x->dims[x->rank - 1], n_idx = idx->numel, rows = last > 0 ? x->numel / last : 0;
  const int64_t *iv = idx->data;
  for (int64_t k = 0; k < n_idx; k++)
    if (iv[k] < 0 || iv[k] >= last)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (Y): index %lld is out of range for the last axis of X (%lld)",
                        (long long)iv[k], (long long)last);
  int64_t dims[KILN_MAX_RANK];
  int rank = afe_dims(x->rank, x->dims, n_idx, dims);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, rank, dims, &y));
  size_t es = kiln_dtype_size(x->dtype);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < n_idx; k++) {
      int64_t src = r * last + iv[k], dst = r * n_idx + k;
      if (x->dtype == KILN_DTYPE_STRING) {
        const char *s = ((char *const *)x->data)[src];
        if (s) KILN_TRY(kiln_tensor_set_string(y, dst, s, strlen(s)));
      } else {
        memcpy((char *)y->data + (size_t)dst * es, (const char *)x->data + (size_t)src * es, es);
      }
    }
  return NULL;
}

static kiln_status_t array_feature_extractor_infer(kiln_infer_ctx *ctx) {
  const kiln_type *xt = ctx->inputs[0], *it = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (!xt) return NULL;
  if (xt->rank < 1 || xt->rank > KILN_MAX_RANK) {
    kiln_infer_set(ctx, 0, xt->dtype, -1, NULL);
    return NULL;
  }
  int64_t n_idx = -1;
  if (it && it->rank >= 0) {
    n_idx = 1;
    for (int d = 0; d < it->rank; d++) n_idx = it->dims[d] < 0 || n_idx < 0 ? -1 : n_idx * it->dims[d];
  }
  int64_t dims[KILN_MAX_RANK];
  int rank = afe_dims(xt->rank, xt->dims, n_idx, dims);
  kiln_infer_set(ctx, 0, xt->dtype, rank, dims);
  return NULL;
}

/* ---- Binarizer --------------------------------------------------------------- */

static kiln_status_t binarizer_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F64 && x->dtype != KILN_DTYPE_I64 &&
      x->dtype != KILN_DTYPE_I32)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, expected float, double, int64 or int32",
                      kiln_dtype_name(x->dtype));
  double thr = kiln_attr_float(ctx->node, "threshold", 0.0f);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  for (int64_t i = 0; i < x->numel; i++)
    kiln_store_f64(y->data, x->dtype, i, kiln_load_f64(x->data, x->dtype, i) > thr ? 1.0 : 0.0);
  return NULL;
}

static kiln_status_t binarizer_infer(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

static const kiln_op_def ml_ops[] = {
    {ML_DOMAIN, "LabelEncoder", 1, 1, 1, 1, label_encoder_infer, label_encoder_kernel, 0, .id = KILN_OP_ml_LabelEncoder},
    {ML_DOMAIN, "TreeEnsemble", 1, 1, 1, 1, tree_ensemble_infer, tree_ensemble_kernel, 0, .id = KILN_OP_ml_TreeEnsemble},
    {ML_DOMAIN, "ArrayFeatureExtractor", 2, 2, 1, 1, array_feature_extractor_infer, array_feature_extractor_kernel, 0,
     .id = KILN_OP_ml_ArrayFeatureExtractor},
    {ML_DOMAIN, "Binarizer", 1, 1, 1, 1, binarizer_infer, binarizer_kernel, 0, .id = KILN_OP_ml_Binarizer},
};

const kiln_op_def *kiln_ops_ml(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(ml_ops);
  return ml_ops;
}
