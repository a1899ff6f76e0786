/* Products: Gemm, MatMul (numpy semantics), Einsum (any equation), Det.
 * Float types accumulate in double. Integer types compute in 64-bit
 * wrapping arithmetic, which gives exactly numpy's result after the
 * truncation to the element type. */
#include "ops/nn_internal.h"

#include <math.h>
#include <stdio.h>

static bool is_matmul_int(kiln_dtype dt) {
  return dt == KILN_DTYPE_I32 || dt == KILN_DTYPE_I64 || dt == KILN_DTYPE_U32 || dt == KILN_DTYPE_U64;
}

/* Element i as 64 raw bits: sign-extended for signed types. */
static uint64_t load_bits(const kiln_tensor *t, int64_t i) {
  if (t->dtype == KILN_DTYPE_U64) return kiln_load_u64(t->data, t->dtype, i);
  return (uint64_t)kiln_load_i64(t->data, t->dtype, i);
}

static kiln_status_t same_dtype(const kiln_tensor *ref, int ref_index, const kiln_tensor *t, int index,
                                const char *name) {
  if (t->dtype != ref->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected %s like input %d", index, name,
                      kiln_dtype_name(t->dtype), kiln_dtype_name(ref->dtype), ref_index);
  return NULL;
}

/* ---- Gemm: Y = alpha * op(A) op(B) + beta * C ----------------------------- */

kiln_status_t nn_gemm_infer(kiln_infer_ctx *ctx) {
  const kiln_type *a = ctx->inputs[0], *b = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (!a) return NULL;
  int64_t dims[2] = {-1, -1};
  char s[256];
  if (a->rank >= 0 && a->rank != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (A): shape %s, expected rank 2",
                      kiln_shape_str(a->rank, a->dims, s, sizeof s));
  if (b && b->rank >= 0 && b->rank != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B): shape %s, expected rank 2",
                      kiln_shape_str(b->rank, b->dims, s, sizeof s));
  bool ta = kiln_attr_int(ctx->node, "transA", 0) != 0, tb = kiln_attr_int(ctx->node, "transB", 0) != 0;
  if (a->rank == 2) dims[0] = a->dims[ta ? 1 : 0];
  if (b && b->rank == 2) dims[1] = b->dims[tb ? 0 : 1];
  if (a->rank == 2 && b && b->rank == 2) {
    int64_t ka = a->dims[ta ? 0 : 1], kb = b->dims[tb ? 1 : 0];
    if (ka >= 0 && kb >= 0 && ka != kb)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B): inner dimension %lld does not match input 0 (A)'s %lld",
                        (long long)kb, (long long)ka);
  }
  kiln_infer_set(ctx, 0, a->dtype, 2, dims);
  return NULL;
}

kiln_status_t nn_gemm_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *a, *b, *c = kiln_kernel_input(ctx, 2), *y;
  char s1[256], s2[256];
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  bool is_int = is_matmul_int(a->dtype) && ctx->opset >= 9;
  if (!is_int) KILN_TRY(nn_require_float(a, 0, "A"));
  KILN_TRY(same_dtype(a, 0, b, 1, "B"));
  if (c) KILN_TRY(same_dtype(a, 0, c, 2, "C"));
  if (a->rank != 2 || b->rank != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "inputs 0 (A) %s and 1 (B) %s: expected rank 2",
                      kiln_shape_str(a->rank, a->dims, s1, sizeof s1), kiln_shape_str(b->rank, b->dims, s2, sizeof s2));
  bool ta = kiln_attr_int(ctx->node, "transA", 0) != 0, tb = kiln_attr_int(ctx->node, "transB", 0) != 0;
  int64_t m = a->dims[ta ? 1 : 0], k = a->dims[ta ? 0 : 1], kb = b->dims[tb ? 1 : 0], n = b->dims[tb ? 0 : 1];
  if (k != kb)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B): shape %s%s does not match input 0 (A) %s%s (inner dims %lld vs %lld)",
                      kiln_shape_str(b->rank, b->dims, s2, sizeof s2), tb ? " (transposed)" : "",
                      kiln_shape_str(a->rank, a->dims, s1, sizeof s1), ta ? " (transposed)" : "", (long long)kb,
                      (long long)k);
  int64_t ydims[2] = {m, n}, cstr[2] = {0, 0};
  if (c) KILN_TRY(nn_broadcast_strides(c->rank, c->dims, 2, ydims, "input 2 (C)", cstr));
  double alpha = kiln_attr_float(ctx->node, "alpha", 1.0f), beta = kiln_attr_float(ctx->node, "beta", 1.0f);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, a->dtype, 2, ydims, &y));
  int64_t as0 = ta ? 1 : k, as1 = ta ? m : 1; /* strides of op(A)[i][l] */
  int64_t bs0 = tb ? 1 : n, bs1 = tb ? k : 1; /* strides of op(B)[l][j] */
  if (!is_int) {
    double *av = NULL, *bv = NULL, *cv = NULL;
    kiln_status_t st = nn_load_all_f64(a, &av);
    if (!st) st = nn_load_all_f64(b, &bv);
    if (!st && c) st = nn_load_all_f64(c, &cv);
    for (int64_t i = 0; i < m && !st; i++)
      for (int64_t j = 0; j < n; j++) {
        double sum = 0;
        for (int64_t l = 0; l < k; l++) sum += av[i * as0 + l * as1] * bv[l * bs0 + j * bs1];
        double v = alpha * sum;
        if (c) v += beta * cv[i * cstr[0] + j * cstr[1]];
        kiln_store_f64(y->data, y->dtype, i * n + j, v);
      }
    free(av);
    free(bv);
    free(cv);
    return st;
  }
  bool int_exact = alpha == floor(alpha) && beta == floor(beta) && fabs(alpha) < 9e18 && fabs(beta) < 9e18;
  bool is_signed = kiln_dtype_is_signed(a->dtype);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t yi = i * n + j;
      uint64_t sum = 0;
      for (int64_t l = 0; l < k; l++) sum += load_bits(a, i * as0 + l * as1) * load_bits(b, l * bs0 + j * bs1);
      uint64_t cv = c ? load_bits(c, i * cstr[0] + j * cstr[1]) : 0;
      if (int_exact) {
        sum = (uint64_t)(int64_t)alpha * sum + (c ? (uint64_t)(int64_t)beta * cv : 0);
        kiln_store_i64(y->data, y->dtype, yi, (int64_t)sum);
      } else { /* fractional alpha/beta: through double, as numpy would */
        double v = alpha * (is_signed ? (double)(int64_t)sum : (double)sum);
        if (c) v += beta * (is_signed ? (double)(int64_t)cv : (double)cv);
        kiln_store_f64(y->data, y->dtype, yi, v);
      }
    }
  return NULL;
}

/* ---- MatMul ----------------------------------------------------------------- */

/* Output shape of numpy matmul; dims may hold -1 (unknown). */
static kiln_status_t matmul_shape(int ra, const int64_t *a, int rb, const int64_t *b, int *out_rank, int64_t *out) {
  char s1[256], s2[256];
  if (ra < 1 || rb < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "inputs 0 (A) %s and 1 (B) %s: MatMul needs rank >= 1",
                      kiln_shape_str(ra, a, s1, sizeof s1), kiln_shape_str(rb, b, s2, sizeof s2));
  int64_t ka = a[ra - 1], kb = rb == 1 ? b[0] : b[rb - 2];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B): shape %s does not match input 0 (A) %s (inner dims %lld vs %lld)",
                      kiln_shape_str(rb, b, s2, sizeof s2), kiln_shape_str(ra, a, s1, sizeof s1), (long long)kb,
                      (long long)ka);
  int r = 0;
  int64_t batch[KILN_MAX_RANK];
  KILN_RETURN_IF_ERROR(kiln_broadcast_shapes(ra > 2 ? ra - 2 : 0, a, rb > 2 ? rb - 2 : 0, b, &r, batch),
                       "batch dims of inputs 0 (A) and 1 (B)");
  memcpy(out, batch, (size_t)r * sizeof *out);
  if (ra > 1) out[r++] = a[ra - 2];
  if (rb > 1) out[r++] = b[rb - 1];
  *out_rank = r;
  return NULL;
}

kiln_status_t nn_matmul_infer(kiln_infer_ctx *ctx) {
  const kiln_type *a = ctx->inputs[0], *b = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (!a || !b) return NULL;
  if (a->rank < 0 || b->rank < 0) {
    kiln_infer_set(ctx, 0, a->dtype, -1, NULL);
    return NULL;
  }
  int r = 0;
  int64_t dims[KILN_MAX_RANK];
  KILN_TRY(matmul_shape(a->rank, a->dims, b->rank, b->dims, &r, dims));
  kiln_infer_set(ctx, 0, a->dtype, r, dims);
  return NULL;
}

kiln_status_t nn_matmul_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *a, *b, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  bool is_int = is_matmul_int(a->dtype) && ctx->opset >= 9;
  if (!is_int) KILN_TRY(nn_require_float(a, 0, "A"));
  KILN_TRY(same_dtype(a, 0, b, 1, "B"));
  int r = 0;
  int64_t ydims[KILN_MAX_RANK];
  KILN_TRY(matmul_shape(a->rank, a->dims, b->rank, b->dims, &r, ydims));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, a->dtype, r, ydims, &y));
  if (y->numel == 0) return NULL;
  /* View both as [batch..., M, K] x [batch..., K, N]. */
  int64_t m = a->rank > 1 ? a->dims[a->rank - 2] : 1, k = a->dims[a->rank - 1];
  int64_t n = b->rank > 1 ? b->dims[b->rank - 1] : 1;
  int nb = r - (a->rank > 1) - (b->rank > 1);
  int64_t astr[KILN_MAX_RANK], bstr[KILN_MAX_RANK];
  KILN_TRY(nn_broadcast_strides(a->rank > 2 ? a->rank - 2 : 0, a->dims, nb, ydims, "input 0 (A) batch dims", astr));
  KILN_TRY(nn_broadcast_strides(b->rank > 2 ? b->rank - 2 : 0, b->dims, nb, ydims, "input 1 (B) batch dims", bstr));
  for (int i = 0; i < nb; i++) { /* batch strides count matrices; scale to elements */
    astr[i] *= m * k;
    bstr[i] *= k * n;
  }
  double *av = NULL, *bv = NULL;
  kiln_status_t st = NULL;
  if (!is_int) {
    st = nn_load_all_f64(a, &av);
    if (!st) st = nn_load_all_f64(b, &bv);
  }
  int64_t bidx[KILN_MAX_RANK] = {0}, yi = 0;
  if (!st) do {
      int64_t ao = 0, bo = 0;
      for (int i = 0; i < nb; i++) {
        ao += bidx[i] * astr[i];
        bo += bidx[i] * bstr[i];
      }
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++, yi++) {
          if (is_int) {
            uint64_t sum = 0;
            for (int64_t l = 0; l < k; l++) sum += load_bits(a, ao + i * k + l) * load_bits(b, bo + l * n + j);
            kiln_store_i64(y->data, y->dtype, yi, (int64_t)sum);
          } else {
            double sum = 0;
            for (int64_t l = 0; l < k; l++) sum += av[ao + i * k + l] * bv[bo + l * n + j];
            kiln_store_f64(y->data, y->dtype, yi, sum);
          }
        }
    } while (nn_next_index(nb, ydims, bidx));
  free(av);
  free(bv);
  return st;
}

/* ---- Einsum ------------------------------------------------------------------- */

/* The plan (labels per input axis, output and summed labels, sizes) is
 * kiln_einsum_plan (ops/op.h): the compute definition reads it too. */
#define EIN_LETTERS KILN_EINSUM_LETTERS
#define EIN_MAX_LABELS KILN_EINSUM_MAX_LABELS
#define EIN_MAX_INPUTS KILN_EINSUM_MAX_INPUTS
typedef kiln_einsum_plan einsum_plan;

static int letter_label(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
  return -1;
}

/* Splits one term into labels; ellipsis as -2. Returns the count. */
static kiln_status_t parse_term(const char *s, size_t len, int *labels, int *count, bool *has_ell, const char *what) {
  int n = 0;
  *has_ell = false;
  for (size_t i = 0; i < len;) {
    if (s[i] == ' ') {
      i++;
      continue;
    }
    if (s[i] == '.') {
      if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.' || *has_ell)
        return kiln_error(KILN_INVALID_MODEL, "attribute equation: %s: malformed or repeated ellipsis", what);
      *has_ell = true;
      if (n >= EIN_MAX_LABELS)
        return kiln_error(KILN_INVALID_MODEL, "attribute equation: %s: too many subscripts", what);
      labels[n++] = -2;
      i += 3;
      continue;
    }
    int l = letter_label(s[i]);
    if (l < 0)
      return kiln_error(KILN_INVALID_MODEL, "attribute equation: %s: invalid character '%c'", what, s[i]);
    if (n >= EIN_MAX_LABELS)
      return kiln_error(KILN_INVALID_MODEL, "attribute equation: %s: too many subscripts", what);
    labels[n++] = l;
    i++;
  }
  *count = n;
  return NULL;
}

/* Builds the plan from the equation and input shapes (ranks known; dims
 * may be -1). */
kiln_status_t kiln_einsum_parse(const char *eq, int n_inputs, const int *ranks, const int64_t *const *dims,
                                kiln_einsum_plan *p) {
  memset(p, 0, sizeof *p);
  if (n_inputs > EIN_MAX_INPUTS) return kiln_error(KILN_UNSUPPORTED, "Einsum with more than %d inputs", EIN_MAX_INPUTS);
  p->n_inputs = n_inputs;
  const char *arrow = strstr(eq, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
  int term_labels[EIN_MAX_LABELS], n_terms = 0, ell_rank = 0, count[EIN_MAX_LABELS] = {0};
  int ell_ranks[EIN_MAX_INPUTS];
  const char *t = eq;
  for (int in = 0;; in++) {
    const char *comma = memchr(t, ',', lhs_len - (size_t)(t - eq));
    size_t len = comma ? (size_t)(comma - t) : lhs_len - (size_t)(t - eq);
    if (in >= n_inputs)
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute equation '%s' has more terms than the %d inputs", eq, n_inputs);
    char what[32];
    snprintf(what, sizeof what, "term %d", in);
    int cnt = 0;
    bool ell;
    KILN_TRY(parse_term(t, len, term_labels, &cnt, &ell, what));
    int letters = cnt - (ell ? 1 : 0);
    int er = ranks[in] - letters;
    if (er < 0 || (!ell && er != 0))
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d: rank %d does not match equation term %d ('%.*s')", in,
                        ranks[in], in, (int)len, t);
    ell_ranks[in] = er;
    if (er > ell_rank) ell_rank = er;
    p->rank[in] = ranks[in];
    int ax = 0;
    for (int j = 0; j < cnt; j++) {
      if (term_labels[j] == -2) {
        for (int e = 0; e < er; e++) p->label[in][ax++] = -2 - e; /* fixed below, once ell_rank is known */
      } else {
        p->label[in][ax++] = term_labels[j];
        count[term_labels[j]]++;
      }
    }
    n_terms++;
    if (!comma) break;
    t = comma + 1;
  }
  if (n_terms != n_inputs)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute equation '%s' has %d terms for %d inputs", eq, n_terms, n_inputs);
  /* Ellipsis axes are right-aligned across inputs (numpy broadcasting). */
  for (int in = 0; in < n_inputs; in++)
    for (int ax = 0; ax < p->rank[in]; ax++)
      if (p->label[in][ax] <= -2) {
        int e = -2 - p->label[in][ax];
        p->label[in][ax] = EIN_LETTERS + (ell_rank - ell_ranks[in]) + e;
      }
  /* Label sizes; size-1 axes broadcast. */
  for (int l = 0; l < EIN_MAX_LABELS; l++) p->size[l] = 0;
  for (int in = 0; in < n_inputs; in++)
    for (int ax = 0; ax < p->rank[in]; ax++) {
      int l = p->label[in][ax];
      int64_t d = dims[in] ? dims[in][ax] : -1;
      if (!p->used[l]) {
        p->used[l] = true;
        p->size[l] = d;
      } else if (d >= 0 && p->size[l] >= 0 && d != p->size[l]) {
        if (p->size[l] == 1)
          p->size[l] = d;
        else if (d != 1)
          return kiln_error(KILN_INVALID_ARGUMENT, "input %d: axis %d has size %lld but the same subscript has size %lld elsewhere",
                            in, ax, (long long)d, (long long)p->size[l]);
      } else if (p->size[l] < 0 && d > 1) {
        p->size[l] = d;
      }
    }
  /* Output labels. */
  bool in_out[EIN_MAX_LABELS] = {0};
  if (arrow) {
    int labels[EIN_MAX_LABELS], cnt;
    bool ell;
    KILN_TRY(parse_term(arrow + 2, strlen(arrow + 2), labels, &cnt, &ell, "output"));
    for (int j = 0; j < cnt; j++) {
      if (labels[j] == -2) {
        for (int e = 0; e < ell_rank; e++) {
          if (p->out_rank >= KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "Einsum output rank above %d", KILN_MAX_RANK);
          p->out_label[p->out_rank++] = EIN_LETTERS + e;
          in_out[EIN_LETTERS + e] = true;
        }
        continue;
      }
      int l = labels[j];
      if (!p->used[l])
        return kiln_error(KILN_INVALID_ARGUMENT, "attribute equation '%s': output subscript '%c' appears in no input", eq,
                          l < 26 ? 'A' + l : 'a' + (l - 26));
      if (in_out[l])
        return kiln_error(KILN_INVALID_ARGUMENT, "attribute equation '%s': output subscript '%c' repeated", eq,
                          l < 26 ? 'A' + l : 'a' + (l - 26));
      if (p->out_rank >= KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "Einsum output rank above %d", KILN_MAX_RANK);
      p->out_label[p->out_rank++] = l;
      in_out[l] = true;
    }
  } else { /* implicit: ellipsis axes, then subscripts used once, in ASCII order */
    for (int e = 0; e < ell_rank; e++) {
      p->out_label[p->out_rank++] = EIN_LETTERS + e;
      in_out[EIN_LETTERS + e] = true;
    }
    for (int l = 0; l < EIN_LETTERS; l++)
      if (count[l] == 1) {
        if (p->out_rank >= KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "Einsum output rank above %d", KILN_MAX_RANK);
        p->out_label[p->out_rank++] = l;
        in_out[l] = true;
      }
  }
  for (int l = 0; l < EIN_MAX_LABELS; l++)
    if (p->used[l] && !in_out[l]) p->sum_label[p->n_sum++] = l;
  return NULL;
}

kiln_status_t nn_einsum_infer(kiln_infer_ctx *ctx) {
  const char *eq = kiln_attr_string(ctx->node, "equation", NULL);
  if (!eq) return kiln_error(KILN_INVALID_MODEL, "attribute equation is required");
  if (ctx->n_inputs < 1 || !ctx->inputs[0]) return NULL;
  kiln_dtype dt = ctx->inputs[0]->dtype;
  int ranks[EIN_MAX_INPUTS];
  const int64_t *dims[EIN_MAX_INPUTS];
  if (ctx->n_inputs > EIN_MAX_INPUTS) return NULL;
  for (int i = 0; i < ctx->n_inputs; i++) {
    if (!ctx->inputs[i] || ctx->inputs[i]->rank < 0) {
      kiln_infer_set(ctx, 0, dt, -1, NULL);
      return NULL;
    }
    ranks[i] = ctx->inputs[i]->rank;
    dims[i] = ctx->inputs[i]->dims;
  }
  einsum_plan *p = malloc(sizeof *p);
  if (!p) return KILN_OOM();
  kiln_status_t st = kiln_einsum_parse(eq, ctx->n_inputs, ranks, dims, p);
  if (!st) {
    int64_t od[KILN_MAX_RANK];
    for (int i = 0; i < p->out_rank; i++) od[i] = p->size[p->out_label[i]];
    kiln_infer_set(ctx, 0, dt, p->out_rank, od);
  }
  free(p);
  return st;
}

kiln_status_t nn_einsum_kernel(kiln_kernel_ctx *ctx) {
  const char *eq = kiln_attr_string(ctx->node, "equation", NULL);
  if (!eq) return kiln_error(KILN_INVALID_MODEL, "attribute equation is required");
  int n = ctx->n_inputs;
  if (n < 1 || n > EIN_MAX_INPUTS) return kiln_error(KILN_UNSUPPORTED, "Einsum with %d inputs", n);
  kiln_tensor *in[EIN_MAX_INPUTS];
  int ranks[EIN_MAX_INPUTS];
  const int64_t *dims[EIN_MAX_INPUTS];
  for (int i = 0; i < n; i++) {
    KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
    if (i > 0) KILN_TRY(same_dtype(in[0], 0, in[i], i, "Inputs"));
    ranks[i] = in[i]->rank;
    dims[i] = in[i]->dims;
  }
  kiln_dtype dt = in[0]->dtype;
  bool is_int = kiln_dtype_is_int(dt);
  if (!is_int && !kiln_dtype_is_float(dt))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0: dtype %s not supported, expected a numeric type", kiln_dtype_name(dt));
  einsum_plan *p = malloc(sizeof *p);
  if (!p) return KILN_OOM();
  kiln_status_t st = kiln_einsum_parse(eq, n, ranks, dims, p);
  kiln_tensor *y = NULL;
  int64_t od[KILN_MAX_RANK], sd[EIN_MAX_LABELS];
  if (!st) {
    for (int i = 0; i < p->out_rank; i++) od[i] = p->size[p->out_label[i]];
    for (int i = 0; i < p->n_sum; i++) sd[i] = p->size[p->sum_label[i]];
    st = kiln_kernel_output_tensor(ctx, 0, dt, p->out_rank, od, &y);
  }
  if (st || y->numel == 0) {
    free(p);
    return st;
  }
  /* Per input: (label, stride) pairs; an input element's offset is the sum
   * of label value times stride. A repeated label (diagonal) adds its axes'
   * strides; broadcast axes of size 1 contribute nothing. */
  int n_terms[EIN_MAX_INPUTS], term_label[EIN_MAX_INPUTS][KILN_MAX_RANK];
  int64_t term_stride[EIN_MAX_INPUTS][KILN_MAX_RANK];
  for (int i = 0; i < n; i++) {
    int64_t s[KILN_MAX_RANK];
    nn_row_major_strides(in[i]->rank, in[i]->dims, s);
    n_terms[i] = 0;
    for (int ax = 0; ax < in[i]->rank; ax++) {
      if (in[i]->dims[ax] == 1) continue;
      int l = p->label[i][ax], j = 0;
      while (j < n_terms[i] && term_label[i][j] != l) j++;
      if (j == n_terms[i]) {
        term_label[i][j] = l;
        term_stride[i][j] = 0;
        n_terms[i]++;
      }
      term_stride[i][j] += s[ax];
    }
  }
  int64_t val[EIN_MAX_LABELS] = {0}, oidx[KILN_MAX_RANK] = {0}, yi = 0;
  bool empty_sum = false;
  for (int i = 0; i < p->n_sum; i++) empty_sum |= sd[i] == 0;
  do {
    for (int i = 0; i < p->out_rank; i++) val[p->out_label[i]] = oidx[i];
    double fsum = 0;
    uint64_t isum = 0;
    int64_t sidx[EIN_MAX_LABELS] = {0};
    if (!empty_sum) do {
        for (int i = 0; i < p->n_sum; i++) val[p->sum_label[i]] = sidx[i];
        double fprod = 1;
        uint64_t iprod = 1;
        for (int t = 0; t < n; t++) {
          int64_t off = 0;
          for (int j = 0; j < n_terms[t]; j++) off += val[term_label[t][j]] * term_stride[t][j];
          if (is_int)
            iprod *= load_bits(in[t], off);
          else
            fprod *= kiln_load_f64(in[t]->data, dt, off);
        }
        fsum += fprod;
        isum += iprod;
      } while (nn_next_index(p->n_sum, sd, sidx));
    if (is_int)
      kiln_store_i64(y->data, dt, yi, (int64_t)isum);
    else
      kiln_store_f64(y->data, dt, yi, fsum);
    yi++;
  } while (nn_next_index(p->out_rank, od, oidx));
  free(p);
  return NULL;
}

/* ---- Det ------------------------------------------------------------------------ */

kiln_status_t nn_det_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  char s[256];
  if (x->rank < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    return NULL;
  }
  if (x->rank < 2 || (x->dims[x->rank - 1] >= 0 && x->dims[x->rank - 2] >= 0 && x->dims[x->rank - 1] != x->dims[x->rank - 2]))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected [*, M, M] (square matrices)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  kiln_infer_set(ctx, 0, x->dtype, x->rank - 2, x->dims);
  return NULL;
}

kiln_status_t nn_det_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  char s[256];
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "X"));
  if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected [*, M, M] (square matrices)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank - 2, x->dims, &y));
  int64_t m = x->dims[x->rank - 1];
  double *a;
  KILN_TRY(nn_load_all_f64(x, &a));
  /* Gaussian elimination with partial pivoting, per matrix. */
  for (int64_t b = 0; b < y->numel; b++) {
    double *mat = a + b * m * m, det = 1;
    for (int64_t col = 0; col < m && det != 0; col++) {
      int64_t piv = col;
      for (int64_t r = col + 1; r < m; r++)
        if (fabs(mat[r * m + col]) > fabs(mat[piv * m + col])) piv = r;
      if (mat[piv * m + col] == 0) {
        det = 0;
        break;
      }
      if (piv != col) {
        for (int64_t j = 0; j < m; j++) {
          double t = mat[col * m + j];
          mat[col * m + j] = mat[piv * m + j];
          mat[piv * m + j] = t;
        }
        det = -det;
      }
      double d = mat[col * m + col];
      det *= d;
      for (int64_t r = col + 1; r < m; r++) {
        double f = mat[r * m + col] / d;
        for (int64_t j = col; j < m; j++) mat[r * m + j] -= f * mat[col * m + j];
      }
    }
    kiln_store_f64(y->data, y->dtype, b, det);
  }
  free(a);
  return NULL;
}
