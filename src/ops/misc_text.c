/* StringNormalizer (opset 10) and TfIdfVectorizer (opset 9).
 *
 * StringNormalizer changes case byte-wise in UTF-8: ASCII letters and the
 * two-byte Latin-1 letters (U+00C0..U+00DE <-> U+00E0..U+00FE, not U+00D7 /
 * U+00F7) keep their length, so other text passes through untouched and
 * valid UTF-8 stays valid.
 *
 * TfIdfVectorizer counts, per row, every pool n-gram found with a skip
 * distance of 1..max_skip_count+1 between its items; unigrams are counted
 * once (they do not depend on the skip), as ONNX Runtime and the ONNX
 * reference do. A pool n-gram repeated later in the pool replaces the
 * earlier one (the reference builds a trie). Weights are indexed by output
 * coordinate, as in the reference. */
#include "ops/misc_internal.h"

#include <stdio.h>

/* ---- StringNormalizer ------------------------------------------------------ */

/* In-place case change of a NUL-terminated UTF-8 string. */
static void utf8_change_case(char *s, bool upper) {
  unsigned char *p = (unsigned char *)s;
  while (*p) {
    if (*p < 0x80) {
      if (upper && *p >= 'a' && *p <= 'z') *p = (unsigned char)(*p - 32);
      if (!upper && *p >= 'A' && *p <= 'Z') *p = (unsigned char)(*p + 32);
      p++;
    } else if (*p == 0xC3 && p[1] >= 0x80 && p[1] <= 0xBF) {
      unsigned char c = p[1];
      if (upper && c >= 0xA0 && c <= 0xBE && c != 0xB7) p[1] = (unsigned char)(c - 0x20);
      if (!upper && c >= 0x80 && c <= 0x9E && c != 0x97) p[1] = (unsigned char)(c + 0x20);
      p += 2;
    } else {
      p++;
    }
  }
}

kiln_status_t kiln_misc_string_normalizer_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  const kiln_node *node = ctx->node;
  if (x->dtype != KILN_DTYPE_STRING)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, expected string", kiln_dtype_name(x->dtype));
  if (!(x->rank == 1 || (x->rank == 2 && x->dims[0] == 1))) {
    char buf[128];
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected [C] or [1, C]",
                      kiln_shape_str(x->rank, x->dims, buf, sizeof buf));
  }
  const char *action = kiln_attr_string(node, "case_change_action", "NONE");
  int change; /* 0 none, 1 lower, 2 upper */
  if (!strcmp(action, "NONE"))
    change = 0;
  else if (!strcmp(action, "LOWER"))
    change = 1;
  else if (!strcmp(action, "UPPER"))
    change = 2;
  else
    return kiln_error(KILN_INVALID_MODEL,
                      "attribute case_change_action: unknown value '%s' (expected LOWER, UPPER or NONE)", action);
  bool case_sensitive = kiln_attr_int(node, "is_case_sensitive", 0) != 0;
  const kiln_attr *sw = kiln_node_attr(node, "stopwords");
  int n_stop = sw && sw->type == KILN_ATTR_STRINGS ? sw->n : 0;

  int64_t c = x->numel;
  char *const *in = x->data;
  kiln_status_t st = NULL;
  /* Lowercased stopwords for case-insensitive matching. */
  char **stop = calloc((size_t)(n_stop > 0 ? n_stop : 1), sizeof(char *));
  bool *keep = calloc((size_t)(c > 0 ? c : 1), sizeof(bool));
  char *tmp = NULL;
  if (!stop || !keep) {
    st = KILN_OOM();
    goto done;
  }
  for (int i = 0; i < n_stop; i++) {
    stop[i] = kiln_strdup(sw->strings[i] ? sw->strings[i] : "");
    if (!stop[i]) {
      st = KILN_OOM();
      goto done;
    }
    if (!case_sensitive) utf8_change_case(stop[i], false);
  }
  int64_t kept = 0;
  for (int64_t i = 0; i < c; i++) {
    const char *s = in[i] ? in[i] : "";
    free(tmp);
    tmp = kiln_strdup(s);
    if (!tmp) {
      st = KILN_OOM();
      goto done;
    }
    if (!case_sensitive) utf8_change_case(tmp, false);
    keep[i] = true;
    for (int j = 0; j < n_stop && keep[i]; j++)
      if (!strcmp(tmp, stop[j])) keep[i] = false;
    if (keep[i]) kept++;
  }
  {
    /* All dropped: one empty string, [1] or [1, 1]. */
    int64_t odims[2];
    if (x->rank == 1) {
      odims[0] = kept ? kept : 1;
    } else {
      odims[0] = 1;
      odims[1] = kept ? kept : 1;
    }
    kiln_tensor *y;
    st = kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_STRING, x->rank, odims, &y);
    if (st) goto done;
    int64_t o = 0;
    for (int64_t i = 0; i < c; i++) {
      if (!keep[i]) continue;
      const char *s = in[i] ? in[i] : "";
      size_t len = strlen(s);
      st = kiln_tensor_set_string(y, o, s, len);
      if (st) goto done;
      char *dst = ((char **)y->data)[o];
      if (change && dst) utf8_change_case(dst, change == 2);
      o++;
    }
    if (!kept) st = kiln_tensor_set_string(y, 0, "", 0);
  }
done:
  if (stop)
    for (int i = 0; i < n_stop; i++) free(stop[i]);
  free(stop);
  free(keep);
  free(tmp);
  return st;
}

kiln_status_t kiln_misc_string_normalizer_infer(kiln_infer_ctx *ctx) {
  const kiln_type *xt = ctx->inputs[0];
  if (!xt) return NULL;
  if (xt->dtype != KILN_DTYPE_UNDEFINED && xt->dtype != KILN_DTYPE_STRING)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, expected string", kiln_dtype_name(xt->dtype));
  if (xt->rank == 1) {
    int64_t d = -1;
    kiln_infer_set(ctx, 0, KILN_DTYPE_STRING, 1, &d);
  } else if (xt->rank == 2) {
    int64_t d[2] = {1, -1};
    kiln_infer_set(ctx, 0, KILN_DTYPE_STRING, 2, d);
  } else if (xt->rank < 0) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_STRING, -1, NULL);
  } else {
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected [C] or [1, C]", xt->rank);
  }
  return NULL;
}

/* ---- TfIdfVectorizer --------------------------------------------------------- */

typedef struct tfidf_ngram {
  int n;          /* length */
  int64_t offset; /* first item in the pool */
  int64_t id;     /* position among the pool's n-grams (indexes ngram_indexes) */
} tfidf_ngram;

typedef struct tfidf_model {
  int64_t min_n, max_n, max_skip;
  int mode; /* 0 TF, 1 IDF, 2 TFIDF */
  bool strings;
  const int64_t *pool_i;
  char *const *pool_s;
  int64_t pool_len;
  tfidf_ngram *grams; /* in-range n-grams, sorted by (n, items), duplicates removed */
  int64_t n_grams;
  const int64_t *indexes;
  int n_indexes;
  const float *weights;
  int n_weights;
  int64_t out_size;
} tfidf_model;

/* Compares pool n-gram a with pool n-gram b (same length n). */
static int tfidf_cmp_pool(const tfidf_model *m, const tfidf_ngram *a, const tfidf_ngram *b) {
  if (a->n != b->n) return a->n < b->n ? -1 : 1;
  for (int k = 0; k < a->n; k++) {
    int c;
    if (m->strings) {
      const char *sa = m->pool_s[a->offset + k], *sb = m->pool_s[b->offset + k];
      c = strcmp(sa ? sa : "", sb ? sb : "");
    } else {
      int64_t va = m->pool_i[a->offset + k], vb = m->pool_i[b->offset + k];
      c = va < vb ? -1 : va > vb;
    }
    if (c) return c;
  }
  return 0;
}

/* Stable merge sort of m->grams by (n, items, id). */
static void tfidf_sort(const tfidf_model *m, tfidf_ngram *a, tfidf_ngram *tmp, int64_t n) {
  if (n < 2) return;
  int64_t h = n / 2;
  tfidf_sort(m, a, tmp, h);
  tfidf_sort(m, a + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = tfidf_cmp_pool(m, &a[j], &a[i]) < 0 ? a[j++] : a[i++];
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, sizeof *a * (size_t)n);
}

static void tfidf_free(tfidf_model *m) { free(m->grams); }

static kiln_status_t tfidf_parse(const kiln_node *node, tfidf_model *m) {
  memset(m, 0, sizeof *m);
  const char *mode = kiln_attr_string(node, "mode", NULL);
  if (!mode) return kiln_error(KILN_INVALID_MODEL, "attribute mode is required (TF, IDF or TFIDF)");
  if (!strcmp(mode, "TF"))
    m->mode = 0;
  else if (!strcmp(mode, "IDF"))
    m->mode = 1;
  else if (!strcmp(mode, "TFIDF"))
    m->mode = 2;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute mode: unknown value '%s' (expected TF, IDF or TFIDF)", mode);
  m->min_n = kiln_attr_int(node, "min_gram_length", -1);
  m->max_n = kiln_attr_int(node, "max_gram_length", -1);
  m->max_skip = kiln_attr_int(node, "max_skip_count", -1);
  if (m->min_n < 1 || m->max_n < m->min_n)
    return kiln_error(KILN_INVALID_MODEL,
                      "attributes min_gram_length %lld and max_gram_length %lld: expected 1 <= min <= max",
                      (long long)m->min_n, (long long)m->max_n);
  if (m->max_skip < 0)
    return kiln_error(KILN_INVALID_MODEL, "attribute max_skip_count: %lld, expected >= 0", (long long)m->max_skip);
  int n_counts;
  const int64_t *counts = kiln_attr_ints(node, "ngram_counts", &n_counts);
  m->indexes = kiln_attr_ints(node, "ngram_indexes", &m->n_indexes);
  m->weights = kiln_attr_floats(node, "weights", &m->n_weights);
  const kiln_attr *ps = kiln_node_attr(node, "pool_strings");
  int n_pool_i;
  m->pool_i = kiln_attr_ints(node, "pool_int64s", &n_pool_i);
  bool have_s = ps && ps->type == KILN_ATTR_STRINGS && ps->n > 0;
  if (have_s && n_pool_i > 0)
    return kiln_error(KILN_INVALID_MODEL, "attributes pool_strings and pool_int64s: only one may be set");
  m->strings = have_s;
  m->pool_s = have_s ? ps->strings : NULL;
  m->pool_len = have_s ? ps->n : n_pool_i;
  if (m->n_indexes == 0) return kiln_error(KILN_INVALID_MODEL, "attribute ngram_indexes is required");
  m->out_size = 0;
  for (int i = 0; i < m->n_indexes; i++) {
    if (m->indexes[i] < 0 || m->indexes[i] >= ((int64_t)1 << 40))
      return kiln_error(KILN_INVALID_MODEL, "attribute ngram_indexes: value %lld at %d out of range",
                        (long long)m->indexes[i], i);
    if (m->indexes[i] + 1 > m->out_size) m->out_size = m->indexes[i] + 1;
  }
  if (m->weights && m->n_weights < m->out_size)
    return kiln_error(KILN_INVALID_MODEL, "attribute weights: %d values, expected one per output coordinate (%lld)",
                      m->n_weights, (long long)m->out_size);

  /* Enumerate the pool's n-grams: ngram_counts[i] starts the (i+1)-grams. */
  m->grams = malloc(sizeof(tfidf_ngram) * (size_t)(m->pool_len > 0 ? m->pool_len : 1));
  if (!m->grams) return KILN_OOM();
  int64_t id = 0;
  for (int i = 0; i < n_counts; i++) {
    int64_t start = counts[i], end = i + 1 < n_counts ? counts[i + 1] : m->pool_len;
    int n = i + 1;
    if (start < 0 || end < start || end > m->pool_len)
      return kiln_error(KILN_INVALID_MODEL, "attribute ngram_counts: [%lld, %lld) for %d-grams is not within the pool "
                        "of %lld items", (long long)start, (long long)end, n, (long long)m->pool_len);
    if ((end - start) % n)
      return kiln_error(KILN_INVALID_MODEL, "attribute ngram_counts: %lld items for %d-grams is not a multiple of %d",
                        (long long)(end - start), n, n);
    for (int64_t off = start; off < end; off += n, id++) {
      if (n < m->min_n || n > m->max_n) continue;
      if (n > 63)
        return kiln_error(KILN_UNSUPPORTED, "attribute ngram_counts: %d-grams are longer than the supported 63", n);
      if (id >= m->n_indexes)
        return kiln_error(KILN_INVALID_MODEL, "attribute ngram_indexes: %d values, but the pool has more n-grams",
                          m->n_indexes);
      m->grams[m->n_grams].n = n;
      m->grams[m->n_grams].offset = off;
      m->grams[m->n_grams].id = id;
      m->n_grams++;
    }
  }
  tfidf_ngram *tmp = malloc(sizeof(tfidf_ngram) * (size_t)(m->n_grams > 0 ? m->n_grams : 1));
  if (!tmp) return KILN_OOM();
  tfidf_sort(m, m->grams, tmp, m->n_grams);
  free(tmp);
  /* Keep the last of equal n-grams (stable sort: highest id last). */
  int64_t w = 0;
  for (int64_t i = 0; i < m->n_grams; i++) {
    if (i + 1 < m->n_grams && !tfidf_cmp_pool(m, &m->grams[i], &m->grams[i + 1])) continue;
    m->grams[w++] = m->grams[i];
  }
  m->n_grams = w;
  return NULL;
}

/* Compares the row's n-gram (items row[j], row[j+d], ...) with pool n-gram g
 * of the same length. */
static int tfidf_cmp_row(const tfidf_model *m, const kiln_tensor *x, int64_t row_off, int64_t j, int64_t d,
                         const tfidf_ngram *g) {
  for (int k = 0; k < g->n; k++) {
    int64_t xi = row_off + j + k * d;
    int c;
    if (m->strings) {
      const char *sa = ((char *const *)x->data)[xi], *sb = m->pool_s[g->offset + k];
      c = strcmp(sa ? sa : "", sb ? sb : "");
    } else {
      int64_t va = kiln_load_i64(x->data, x->dtype, xi), vb = m->pool_i[g->offset + k];
      c = va < vb ? -1 : va > vb;
    }
    if (c) return c;
  }
  return 0;
}

/* Binary search among the n-grams of length n; -1 if not found. */
static int64_t tfidf_find(const tfidf_model *m, int64_t lo, int64_t hi, const kiln_tensor *x, int64_t row_off,
                          int64_t j, int64_t d) {
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = tfidf_cmp_row(m, x, row_off, j, d, &m->grams[mid]);
    if (!c) return mid;
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return -1;
}

kiln_status_t kiln_misc_tfidf_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  tfidf_model m;
  kiln_status_t st = tfidf_parse(ctx->node, &m);
  if (st) {
    tfidf_free(&m);
    return st;
  }
  int64_t *counts = NULL;
  if (m.strings ? x->dtype != KILN_DTYPE_STRING : (x->dtype != KILN_DTYPE_I32 && x->dtype != KILN_DTYPE_I64)) {
    st = kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, expected %s to match the pool",
                    kiln_dtype_name(x->dtype), m.strings ? "string" : "i32 or i64");
    goto done;
  }
  int64_t rows, c;
  if (x->rank == 0) {
    rows = 1;
    c = 1;
  } else if (x->rank == 1) {
    rows = 1;
    c = x->dims[0];
  } else if (x->rank == 2) {
    rows = x->dims[0];
    c = x->dims[1];
  } else {
    st = kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected [C] or [N, C]", x->rank);
    goto done;
  }
  int64_t odims[2] = {rows, m.out_size};
  kiln_tensor *y;
  if (x->rank == 2)
    st = kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_F32, 2, odims, &y);
  else
    st = kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_F32, 1, &odims[1], &y);
  if (st) goto done;
  counts = calloc((size_t)(m.out_size > 0 ? m.out_size : 1), sizeof(int64_t));
  if (!counts) {
    st = KILN_OOM();
    goto done;
  }
  /* [first, end) of each length among the sorted n-grams */
  int64_t first[64] = {0}, last[64] = {0};
  int64_t max_n = m.max_n < 63 ? m.max_n : 63;
  for (int64_t i = m.n_grams - 1; i >= 0; i--) first[m.grams[i].n] = i;
  for (int64_t i = 0; i < m.n_grams; i++) last[m.grams[i].n] = i + 1;

  float *out = y->data;
  for (int64_t r = 0; r < rows; r++) {
    memset(counts, 0, sizeof(int64_t) * (size_t)m.out_size);
    int64_t row_off = r * c;
    for (int64_t d = 1; d <= m.max_skip + 1 && d <= (c > 0 ? c : 1); d++) {
      int64_t nmin = d == 1 ? m.min_n : (m.min_n > 2 ? m.min_n : 2); /* unigrams: first pass only */
      for (int64_t j = 0; j < c; j++) {
        for (int64_t n = nmin; n <= max_n && j + (n - 1) * d < c; n++) {
          if (last[n] <= first[n]) continue;
          int64_t g = tfidf_find(&m, first[n], last[n], x, row_off, j, d);
          if (g >= 0) counts[m.indexes[m.grams[g].id]]++;
        }
      }
      if (m.min_n == 1 && m.max_n == 1) break;
    }
    for (int64_t i = 0; i < m.out_size; i++) {
      double w = m.weights ? m.weights[i] : 1.0;
      double v = m.mode == 0 ? (double)counts[i] : m.mode == 1 ? (counts[i] > 0 ? w : 0) : (double)counts[i] * w;
      out[r * m.out_size + i] = (float)v;
    }
  }
done:
  free(counts);
  tfidf_free(&m);
  return st;
}

kiln_status_t kiln_misc_tfidf_infer(kiln_infer_ctx *ctx) {
  const kiln_type *xt = ctx->inputs[0];
  int n_idx;
  const int64_t *idx = kiln_attr_ints(ctx->node, "ngram_indexes", &n_idx);
  int64_t out_size = n_idx ? 0 : -1;
  for (int i = 0; i < n_idx; i++)
    if (idx[i] + 1 > out_size) out_size = idx[i] + 1;
  if (!xt || xt->rank < 0) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_F32, -1, NULL);
  } else if (xt->rank <= 1) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_F32, 1, &out_size);
  } else if (xt->rank == 2) {
    int64_t d[2] = {xt->dims[0], out_size};
    kiln_infer_set(ctx, 0, KILN_DTYPE_F32, 2, d);
  } else {
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected [C] or [N, C]", xt->rank);
  }
  return NULL;
}
