#include "codegen/te.h"

#include <math.h>
#include <string.h>

#define TE_MIN_BUCKETS 256 /* the hash table starts this small (a builder per fusion attempt) and doubles */
#define TE_CHUNK (64 * 1024)

typedef struct te_chunk {
  struct te_chunk *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
} te_chunk;

struct te_builder {
  te_chunk *chunks;
  te_expr **buckets; /* n_buckets chains, a power of two, at most two expressions per chain on average */
  int n_buckets;
  int n_exprs, n_vars;
  te_buffer *buffers;
  int n_buffers, cap_buffers;
  te_conv_tag *conv_tags;
  int n_conv_tags, cap_conv_tags;
  te_pool_tag *pool_tags;
  int n_pool_tags, cap_pool_tags;
  te_resample_tag *resample_tags;
  int n_resample_tags, cap_resample_tags;
  int64_t *var_extent; /* per variable: its loop's extent, 0 when unknown */
  int cap_var_extent;
  bool oom;
};

static void *arena_alloc(te_builder *b, size_t n) {
  n = (n + 15) & ~(size_t)15;
  te_chunk *c = b->chunks;
  if (!c || c->used + n > c->size) {
    size_t size = n > TE_CHUNK ? n : TE_CHUNK;
    c = malloc(sizeof *c + size);
    if (!c) {
      b->oom = true;
      return NULL;
    }
    c->next = b->chunks;
    c->used = 0;
    c->size = size;
    b->chunks = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

kiln_status_t te_builder_create(te_builder **out) {
  te_builder *b = calloc(1, sizeof *b);
  te_expr **buckets = calloc(TE_MIN_BUCKETS, sizeof *buckets);
  if (!b || !buckets) {
    free(b);
    free(buckets);
    return KILN_OOM();
  }
  b->buckets = buckets;
  b->n_buckets = TE_MIN_BUCKETS;
  *out = b;
  return NULL;
}

void te_builder_destroy(te_builder *b) {
  if (!b) return;
  for (te_chunk *c = b->chunks, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(b->buckets);
  free(b->buffers);
  free(b->conv_tags);
  free(b->pool_tags);
  free(b->resample_tags);
  free(b->var_extent);
  free(b);
}

kiln_status_t te_builder_status(const te_builder *b) {
  return b->oom ? kiln_error(KILN_OUT_OF_MEMORY, "out of memory building tensor expressions") : NULL;
}

int te_add_buffer(te_builder *b, kiln_dtype dtype, int rank, const int64_t *dims, int value_id) {
  if (b->n_buffers == b->cap_buffers) {
    int cap = b->cap_buffers ? b->cap_buffers * 2 : 8;
    te_buffer *n = realloc(b->buffers, (size_t)cap * sizeof *n);
    if (!n) {
      b->oom = true;
      return 0;
    }
    b->buffers = n;
    b->cap_buffers = cap;
  }
  te_buffer *buf = &b->buffers[b->n_buffers];
  memset(buf, 0, sizeof *buf);
  buf->dtype = dtype;
  buf->rank = rank;
  for (int i = 0; i < rank; i++) buf->dims[i] = dims[i];
  buf->value_id = value_id;
  return b->n_buffers++;
}

void te_buffer_set_constant(te_builder *b, int i) {
  if (i >= 0 && i < b->n_buffers) b->buffers[i].constant = true;
}

/* Appends a tag of `size` bytes to a growable array (the three tag
 * kinds share this); out of memory is the builder's sticky error. */
static void append_tag(te_builder *b, void **arr, int *n, int *cap, size_t size, const void *tag) {
  if (*n == *cap) {
    int c = *cap ? *cap * 2 : 4;
    void *grown = realloc(*arr, (size_t)c * size);
    if (!grown) {
      b->oom = true;
      return;
    }
    *arr = grown;
    *cap = c;
  }
  memcpy((char *)*arr + (size_t)*n * size, tag, size);
  (*n)++;
}

void te_tag_conv(te_builder *b, const te_conv_tag *tag) {
  if (!tag->reduce || te_conv_tag_of(b, tag->reduce)) return;
  append_tag(b, (void **)&b->conv_tags, &b->n_conv_tags, &b->cap_conv_tags, sizeof *tag, tag);
}

const te_conv_tag *te_conv_tag_of(const te_builder *b, const te_expr *reduce) {
  for (int i = 0; i < b->n_conv_tags; i++)
    if (b->conv_tags[i].reduce == reduce) return &b->conv_tags[i];
  return NULL;
}

void te_tag_pool(te_builder *b, const te_pool_tag *tag) {
  if (!tag->value || te_pool_tag_of(b, tag->value)) return;
  append_tag(b, (void **)&b->pool_tags, &b->n_pool_tags, &b->cap_pool_tags, sizeof *tag, tag);
}

const te_pool_tag *te_pool_tag_of(const te_builder *b, const te_expr *value) {
  for (int i = 0; i < b->n_pool_tags; i++)
    if (b->pool_tags[i].value == value) return &b->pool_tags[i];
  return NULL;
}

void te_tag_resample(te_builder *b, const te_resample_tag *tag) {
  if (!tag->value || te_resample_tag_of(b, tag->value)) return;
  append_tag(b, (void **)&b->resample_tags, &b->n_resample_tags, &b->cap_resample_tags, sizeof *tag, tag);
}

const te_resample_tag *te_resample_tag_of(const te_builder *b, const te_expr *value) {
  for (int i = 0; i < b->n_resample_tags; i++)
    if (b->resample_tags[i].value == value) return &b->resample_tags[i];
  return NULL;
}

int te_buffer_count(const te_builder *b) { return b->n_buffers; }
const te_buffer *te_get_buffer(const te_builder *b, int i) { return &b->buffers[i]; }
int te_new_var(te_builder *b) { return b->n_vars++; }

void te_set_var_extent(te_builder *b, int var, int64_t extent) {
  if (var < 0 || extent <= 0) return;
  if (var >= b->cap_var_extent) {
    int cap = b->cap_var_extent ? b->cap_var_extent : 16;
    while (cap <= var) cap *= 2;
    int64_t *n = realloc(b->var_extent, (size_t)cap * sizeof *n);
    if (!n) return; /* only a lost simplification */
    memset(n + b->cap_var_extent, 0, (size_t)(cap - b->cap_var_extent) * sizeof *n);
    b->var_extent = n;
    b->cap_var_extent = cap;
  }
  b->var_extent[var] = extent;
}
int te_var_count(const te_builder *b) { return b->n_vars; }
int te_expr_count(const te_builder *b) { return b->n_exprs; }

bool te_has_dtype(const te_builder *b, kiln_dtype dt) {
  for (int k = 0; k < b->n_buckets; k++)
    for (const te_expr *e = b->buckets[k]; e; e = e->next_in_bucket)
      if (e->dtype == dt) return true;
  return false;
}

/* ---- hash-consing ---------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t hash_of(const te_expr *e) {
  uint64_t h = mix((uint64_t)e->op, (uint64_t)e->dtype);
  uint64_t fb;
  memcpy(&fb, &e->f, sizeof fb);
  h = mix(h, fb);
  h = mix(h, (uint64_t)e->i);
  h = mix(h, (uint64_t)(uint32_t)e->var);
  h = mix(h, (uint64_t)(uint32_t)e->buf);
  h = mix(h, (uint64_t)e->extent);
  h = mix(h, (uint64_t)e->rop);
  h = mix(h, (uint64_t)(uintptr_t)e->fn);
  h = mix(h, (uint64_t)(uintptr_t)e->a);
  h = mix(h, (uint64_t)(uintptr_t)e->b);
  h = mix(h, (uint64_t)(uintptr_t)e->c);
  return h;
}

static bool same(const te_expr *x, const te_expr *y) {
  return x->op == y->op && x->dtype == y->dtype && !memcmp(&x->f, &y->f, sizeof x->f) && x->i == y->i &&
         x->var == y->var && x->buf == y->buf && x->extent == y->extent && x->rop == y->rop && x->fn == y->fn &&
         x->a == y->a && x->b == y->b && x->c == y->c;
}

/* Twice the chains, the expressions relinked by their stored hashes; a
 * failed allocation keeps the old table (longer chains, same results). */
static void grow_buckets(te_builder *b) {
  int n = b->n_buckets * 2;
  te_expr **grown = calloc((size_t)n, sizeof *grown);
  if (!grown) return;
  for (int k = 0; k < b->n_buckets; k++)
    for (te_expr *e = b->buckets[k], *next; e; e = next) {
      next = e->next_in_bucket;
      te_expr **to = &grown[e->hash & (uint64_t)(n - 1)];
      e->next_in_bucket = *to;
      *to = e;
    }
  free(b->buckets);
  b->buckets = grown;
  b->n_buckets = n;
}

static te_expr *intern(te_builder *b, const te_expr *proto) {
  if (b->oom) return NULL;
  uint64_t h = hash_of(proto);
  if (b->n_exprs >= 2 * b->n_buckets) grow_buckets(b);
  te_expr **bucket = &b->buckets[h & (uint64_t)(b->n_buckets - 1)];
  for (te_expr *e = *bucket; e; e = e->next_in_bucket)
    if (e->hash == h && same(e, proto)) return e;
  te_expr *e = arena_alloc(b, sizeof *e);
  if (!e) return NULL;
  *e = *proto;
  e->hash = h;
  e->id = b->n_exprs++;
  e->next_in_bucket = *bucket;
  *bucket = e;
  return e;
}

static te_expr proto(te_op op, kiln_dtype dt) {
  te_expr e;
  memset(&e, 0, sizeof e);
  e.op = op;
  e.dtype = dt;
  return e;
}

te_expr *te_const_f(te_builder *b, kiln_dtype dtype, double v) {
  te_expr e = proto(TE_CONST, dtype);
  if (kiln_dtype_is_float(dtype))
    e.f = v;
  else
    e.i = (int64_t)v;
  return intern(b, &e);
}

te_expr *te_const_i(te_builder *b, kiln_dtype dtype, int64_t v) {
  te_expr e = proto(TE_CONST, dtype);
  if (kiln_dtype_is_float(dtype))
    e.f = (double)v;
  else
    e.i = v;
  return intern(b, &e);
}

te_expr *te_var(te_builder *b, int var) {
  te_expr e = proto(TE_VAR, KILN_DTYPE_I64);
  e.var = var;
  return intern(b, &e);
}

te_expr *te_load(te_builder *b, int buf, te_expr *index) {
  if (!index) return NULL;
  te_expr e = proto(TE_LOAD, b->buffers[buf].dtype);
  e.buf = buf;
  e.a = index;
  return intern(b, &e);
}

te_expr *te_unary(te_builder *b, te_op op, te_expr *a) {
  if (!a) return NULL;
  te_expr e = proto(op, op == TE_NOT ? KILN_DTYPE_BOOL : a->dtype);
  e.a = a;
  return intern(b, &e);
}

te_expr *te_cast(te_builder *b, kiln_dtype to, te_expr *a) {
  if (!a) return NULL;
  if (a->dtype == to) return a;
  te_expr e = proto(TE_CAST, to);
  e.a = a;
  return intern(b, &e);
}

te_expr *te_call1(te_builder *b, const char *fn, te_expr *a) {
  if (!a) return NULL;
  te_expr e = proto(TE_CALL1, a->dtype);
  e.fn = fn;
  e.a = a;
  return intern(b, &e);
}

static bool is_cmp(te_op op) { return op == TE_LT || op == TE_LE || op == TE_EQ || op == TE_NE; }

/* ---- index simplification ----------------------------------------------------
 *
 * A reshaped or transposed view unflattens and reflattens its index with
 * divisions and remainders by constants; knowing each loop variable's
 * range (te_set_var_extent), most of them cancel, as TVM's arithmetic
 * analyzer makes them: with x = q*c + r, q >= 0 and 0 <= r,
 * x / c = q + r / c and x % c = r % c, and r / c = 0, r % c = r when
 * r < c. */

typedef struct te_range {
  int64_t lo, hi;
  bool ok;
} te_range;

static te_range range_of(const te_builder *b, const te_expr *e, int depth) {
  te_range r = {0, 0, false}, u, v;
  if (!e || depth > 24 || e->dtype != KILN_DTYPE_I64) return r;
  switch (e->op) {
    case TE_CONST: return (te_range){e->i, e->i, true};
    case TE_VAR:
      if (e->var < b->cap_var_extent && b->var_extent[e->var] > 0) return (te_range){0, b->var_extent[e->var] - 1, true};
      return r;
    case TE_ADD: case TE_SUB:
      u = range_of(b, e->a, depth + 1);
      v = range_of(b, e->b, depth + 1);
      if (!u.ok || !v.ok) return r;
      if (e->op == TE_SUB) {
        int64_t t = v.lo;
        if (__builtin_sub_overflow(0, v.hi, &v.lo) || __builtin_sub_overflow(0, t, &v.hi)) return r;
      }
      r.ok = !__builtin_add_overflow(u.lo, v.lo, &r.lo) && !__builtin_add_overflow(u.hi, v.hi, &r.hi);
      return r;
    case TE_MUL: {
      u = range_of(b, e->a, depth + 1);
      v = range_of(b, e->b, depth + 1);
      if (!u.ok || !v.ok) return r;
      int64_t p[4];
      if (__builtin_mul_overflow(u.lo, v.lo, &p[0]) || __builtin_mul_overflow(u.lo, v.hi, &p[1]) ||
          __builtin_mul_overflow(u.hi, v.lo, &p[2]) || __builtin_mul_overflow(u.hi, v.hi, &p[3]))
        return r;
      r = (te_range){p[0], p[0], true};
      for (int i = 1; i < 4; i++) {
        if (p[i] < r.lo) r.lo = p[i];
        if (p[i] > r.hi) r.hi = p[i];
      }
      return r;
    }
    case TE_DIV: case TE_MOD:
      if (e->b->op != TE_CONST || e->b->i <= 0) return r;
      u = range_of(b, e->a, depth + 1);
      if (!u.ok || u.lo < 0) return r;
      if (e->op == TE_DIV) return (te_range){u.lo / e->b->i, u.hi / e->b->i, true};
      return (te_range){0, u.hi < e->b->i - 1 ? u.hi : e->b->i - 1, true};
    default: return r;
  }
}

/* x as c0 + sum coef[i] * t[i] (sums, differences and products with
 * constants expanded; equal terms merged, which hash-consing makes a
 * pointer comparison). */
#define TE_MAX_TERMS 24
typedef struct te_terms {
  int n;
  int64_t coef[TE_MAX_TERMS];
  te_expr *t[TE_MAX_TERMS];
  int64_t c0;
  bool ok;
} te_terms;

static void terms_add(te_expr *e, int64_t k, te_terms *out, int depth) {
  if (!out->ok) return;
  if (depth > 24) {
    out->ok = false;
    return;
  }
  int64_t p;
  switch (e->op) {
    case TE_CONST:
      if (__builtin_mul_overflow(k, e->i, &p) || __builtin_add_overflow(out->c0, p, &out->c0)) out->ok = false;
      return;
    case TE_ADD: terms_add(e->a, k, out, depth + 1); terms_add(e->b, k, out, depth + 1); return;
    case TE_SUB:
      if (k == INT64_MIN) {
        out->ok = false;
        return;
      }
      terms_add(e->a, k, out, depth + 1);
      terms_add(e->b, -k, out, depth + 1);
      return;
    case TE_MUL:
      if (e->b->op == TE_CONST || e->a->op == TE_CONST) {
        const te_expr *c = e->b->op == TE_CONST ? e->b : e->a;
        te_expr *t = e->b->op == TE_CONST ? e->a : e->b;
        if (__builtin_mul_overflow(k, c->i, &p)) {
          out->ok = false;
          return;
        }
        terms_add(t, p, out, depth + 1);
        return;
      }
      break;
    default: break;
  }
  for (int i = 0; i < out->n; i++)
    if (out->t[i] == e) {
      if (__builtin_add_overflow(out->coef[i], k, &out->coef[i])) out->ok = false;
      return;
    }
  if (out->n == TE_MAX_TERMS) {
    out->ok = false;
    return;
  }
  out->coef[out->n] = k;
  out->t[out->n++] = e;
}

/* The range of the terms whose coefficient `pick` selects (want_multiple:
 * multiples of c, else the others), plus c0. */
static te_range terms_range(const te_builder *b, const te_terms *t, int64_t c, bool want_multiple, int64_t c0) {
  te_range r = {c0, c0, true};
  for (int i = 0; i < t->n && r.ok; i++) {
    if ((t->coef[i] % c == 0) != want_multiple) continue;
    te_range u = range_of(b, t->t[i], 0);
    int64_t x, y;
    if (!u.ok || __builtin_mul_overflow(u.lo, t->coef[i], &x) || __builtin_mul_overflow(u.hi, t->coef[i], &y)) {
      r.ok = false;
      break;
    }
    if (x > y) {
      int64_t s = x;
      x = y;
      y = s;
    }
    r.ok = !__builtin_add_overflow(r.lo, x, &r.lo) && !__builtin_add_overflow(r.hi, y, &r.hi);
  }
  return r;
}

static te_expr *terms_build(te_builder *b, const te_terms *t, int64_t c, bool want_multiple, int64_t c0) {
  te_expr *acc = te_idx(b, c0);
  for (int i = 0; i < t->n; i++) {
    if ((t->coef[i] % c == 0) != want_multiple) continue;
    acc = te_iadd(b, acc, te_imul(b, t->t[i], want_multiple ? t->coef[i] / c : t->coef[i]));
  }
  return acc;
}

/* a / c or a % c (op), simplified where the ranges allow; NULL: as is. */
static te_expr *simplify_divmod(te_builder *b, te_op op, te_expr *a, int64_t c) {
  if (!b->cap_var_extent || c <= 0) return NULL;
  te_range whole = range_of(b, a, 0);
  if (!whole.ok || whole.lo < 0) return NULL;
  if (whole.hi < c) return op == TE_DIV ? te_idx(b, 0) : a;
  /* (x / c1) / c2 = x / (c1 * c2) for x >= 0 */
  int64_t cc;
  if (op == TE_DIV && a->op == TE_DIV && a->b->op == TE_CONST && a->b->i > 0 && !__builtin_mul_overflow(a->b->i, c, &cc))
    return te_idiv(b, a->a, cc);
  te_terms t = {.ok = true};
  terms_add(a, 1, &t, 0);
  if (!t.ok) return NULL;
  int64_t q0 = t.c0 / c, r0 = t.c0 % c;
  if (r0 < 0) {
    r0 += c;
    q0 -= 1;
  }
  bool any_multiple = q0 != 0;
  for (int i = 0; i < t.n; i++) any_multiple |= t.coef[i] % c == 0;
  if (!any_multiple) return NULL; /* nothing to split off */
  te_range q = terms_range(b, &t, c, true, q0 * c), r = terms_range(b, &t, c, false, r0);
  if (!q.ok || !r.ok || q.lo < 0 || r.lo < 0) return NULL;
  te_expr *rest = terms_build(b, &t, c, false, r0);
  if (op == TE_MOD) return r.hi < c ? rest : te_imod(b, rest, c);
  te_expr *quot = terms_build(b, &t, c, true, q0);
  return r.hi < c ? quot : te_iadd(b, quot, te_idiv(b, rest, c));
}

te_expr *te_binary(te_builder *b, te_op op, te_expr *a, te_expr *x) {
  if (!a || !x) return NULL;
  if ((op == TE_DIV || op == TE_MOD) && a->dtype == KILN_DTYPE_I64 && x->op == TE_CONST && x->dtype == KILN_DTYPE_I64 &&
      a->op != TE_CONST) {
    te_expr *s = simplify_divmod(b, op, a, x->i);
    if (s) return s;
  }
  /* An index clamp that its operand's range never reaches. */
  if ((op == TE_MAX || op == TE_MIN) && a->dtype == KILN_DTYPE_I64 && x->op == TE_CONST && x->dtype == KILN_DTYPE_I64 &&
      b->cap_var_extent) {
    te_range r = range_of(b, a, 0);
    if (r.ok && (op == TE_MAX ? r.lo >= x->i : r.hi <= x->i)) return a;
  }
  /* Fold integer index arithmetic: it dominates movement ops' indices. */
  if (a->dtype == KILN_DTYPE_I64 && x->dtype == KILN_DTYPE_I64) {
    bool ca = a->op == TE_CONST, cx = x->op == TE_CONST;
    if (ca && cx) {
      int64_t r;
      switch (op) {
        case TE_ADD: return te_idx(b, a->i + x->i);
        case TE_SUB: return te_idx(b, a->i - x->i);
        case TE_MUL: return te_idx(b, a->i * x->i);
        case TE_DIV:
          if (x->i) {
            r = a->i / x->i;
            return te_idx(b, r);
          }
          break;
        case TE_MOD:
          if (x->i) return te_idx(b, a->i % x->i);
          break;
        default: break;
      }
    }
    if (op == TE_ADD && ca && a->i == 0) return x;
    if ((op == TE_ADD || op == TE_SUB) && cx && x->i == 0) return a;
    if (op == TE_MUL && ((ca && a->i == 0) || (cx && x->i == 0))) return te_idx(b, 0);
    if (op == TE_MUL && ca && a->i == 1) return x;
    if ((op == TE_MUL || op == TE_DIV) && cx && x->i == 1) return a;
    if (op == TE_MOD && cx && x->i == 1) return te_idx(b, 0);
    /* Canonical order for commutative ops so hash-consing finds more. */
    if ((op == TE_ADD || op == TE_MUL) && ca && !cx) {
      te_expr *t = a;
      a = x;
      x = t;
    }
  }
  te_expr e = proto(op, is_cmp(op) ? KILN_DTYPE_BOOL : a->dtype);
  e.a = a;
  e.b = x;
  return intern(b, &e);
}

te_expr *te_call2(te_builder *b, const char *fn, te_expr *a, te_expr *x) {
  if (!a || !x) return NULL;
  te_expr e = proto(TE_CALL2, a->dtype);
  e.fn = fn;
  e.a = a;
  e.b = x;
  return intern(b, &e);
}

te_expr *te_select(te_builder *b, te_expr *cond, te_expr *a, te_expr *x) {
  if (!cond || !a || !x) return NULL;
  if (cond->op == TE_CONST) return cond->i ? a : x;
  if (a == x) return a;
  te_expr e = proto(TE_SELECT, a->dtype);
  e.a = cond;
  e.b = a;
  e.c = x;
  return intern(b, &e);
}

te_expr *te_reduce(te_builder *b, te_reduce_op rop, int var, int64_t extent, te_expr *body) {
  if (!body) return NULL;
  te_expr e = proto(TE_REDUCE, body->dtype);
  e.rop = rop;
  e.var = var;
  e.extent = extent;
  e.a = body;
  return intern(b, &e);
}

te_expr *te_idx(te_builder *b, int64_t v) { return te_const_i(b, KILN_DTYPE_I64, v); }
te_expr *te_iadd(te_builder *b, te_expr *a, te_expr *x) { return te_binary(b, TE_ADD, a, x); }
te_expr *te_imul(te_builder *b, te_expr *a, int64_t c) { return te_binary(b, TE_MUL, a, te_idx(b, c)); }
te_expr *te_idiv(te_builder *b, te_expr *a, int64_t c) { return te_binary(b, TE_DIV, a, te_idx(b, c)); }
te_expr *te_imod(te_builder *b, te_expr *a, int64_t c) { return te_binary(b, TE_MOD, a, te_idx(b, c)); }

/* memo[id]: the substituted node of original node id (n: the node count at the start). */
static te_expr *substitute(te_builder *b, te_expr *e, int var, te_expr *with, te_expr **memo, int n) {
  if (!e || b->oom) return NULL;
  if (e->id < n && memo[e->id]) return memo[e->id];
  te_expr *r = e;
  if (e->op == TE_VAR) {
    if (e->var == var) r = with;
  } else if (e->op != TE_CONST) {
    te_expr *a = substitute(b, e->a, var, with, memo, n);
    te_expr *x = substitute(b, e->b, var, with, memo, n);
    te_expr *c = substitute(b, e->c, var, with, memo, n);
    if (b->oom) return NULL;
    if (a != e->a || x != e->b || c != e->c) {
      te_expr p = *e; /* the same op, dtype and attributes over the new operands */
      p.a = a;
      p.b = x;
      p.c = c;
      p.next_in_bucket = NULL;
      r = intern(b, &p);
    }
  }
  if (r && e->id < n) memo[e->id] = r;
  return r;
}

te_expr *te_substitute(te_builder *b, te_expr *e, int var, te_expr *with) {
  if (!e || !with) return NULL;
  int n = b->n_exprs;
  te_expr **memo = calloc((size_t)n + 1, sizeof *memo);
  if (!memo) {
    b->oom = true;
    return NULL;
  }
  te_expr *r = substitute(b, e, var, with, memo, n);
  free(memo);
  return r;
}

bool te_uses_var(const te_expr *e, int var) {
  if (!e) return false;
  if (e->op == TE_VAR) return e->var == var;
  if (e->op == TE_REDUCE && e->var == var) return false;
  return te_uses_var(e->a, var) || te_uses_var(e->b, var) || te_uses_var(e->c, var);
}

/* ---- views ------------------------------------------------------------------ */

te_tensor *te_view_buffer(te_builder *b, int buf) {
  te_tensor *t = arena_alloc(b, sizeof *t);
  if (!t) return NULL;
  const te_buffer *bf = &b->buffers[buf];
  t->kind = TE_VIEW_BUFFER;
  t->dtype = bf->dtype;
  t->rank = bf->rank;
  for (int i = 0; i < bf->rank; i++) t->dims[i] = bf->dims[i];
  t->buf = buf;
  return t;
}

te_tensor *te_view_compute(te_builder *b, kiln_dtype dtype, int rank, const int64_t *dims, te_compute_fn fn) {
  te_tensor *t = arena_alloc(b, sizeof *t);
  if (!t) return NULL;
  t->kind = TE_VIEW_COMPUTE;
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  t->compute = fn;
  return t;
}

te_expr *te_linearize(te_builder *b, int rank, const int64_t *dims, te_expr *const *idx) {
  te_expr *lin = te_idx(b, 0);
  for (int i = 0; i < rank; i++) lin = te_iadd(b, te_imul(b, lin, dims[i]), idx[i]);
  return lin;
}

te_expr *te_at(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  if (!t || b->oom) return NULL;
  for (int i = 0; i < t->rank; i++)
    if (!idx[i]) return NULL;
  if (t->kind == TE_VIEW_BUFFER) return te_load(b, t->buf, te_linearize(b, t->rank, t->dims, idx));
  return t->compute(b, t, idx);
}

te_expr *te_at_broadcast(te_builder *b, const te_tensor *t, int out_rank, te_expr *const *idx) {
  te_expr *sub[KILN_MAX_RANK];
  int off = out_rank - t->rank;
  for (int i = 0; i < t->rank; i++) sub[i] = t->dims[i] == 1 ? te_idx(b, 0) : idx[off + i];
  return te_at(b, t, sub);
}

static bool affine_add_term(te_affine *a, int var, int64_t coef) {
  for (int i = 0; i < a->n; i++)
    if (a->var[i] == var) return !__builtin_add_overflow(a->coef[i], coef, &a->coef[i]);
  if (a->n == (int)KILN_ARRAY_SIZE(a->var)) return false;
  a->var[a->n] = var;
  a->coef[a->n++] = coef;
  return true;
}

/* Adds scale * e to a; false when e is not affine in its variables. */
static bool affine_add(const te_expr *e, int64_t scale, te_affine *a) {
  int64_t t;
  switch (e->op) {
    case TE_CONST:
      if (kiln_dtype_is_float(e->dtype) || __builtin_mul_overflow(scale, e->i, &t)) return false;
      return !__builtin_add_overflow(a->c0, t, &a->c0);
    case TE_VAR: return affine_add_term(a, e->var, scale);
    case TE_ADD: return affine_add(e->a, scale, a) && affine_add(e->b, scale, a);
    case TE_SUB: return affine_add(e->a, scale, a) && !__builtin_mul_overflow(scale, -1, &t) && affine_add(e->b, t, a);
    case TE_NEG: return !__builtin_mul_overflow(scale, -1, &t) && affine_add(e->a, t, a);
    case TE_MUL:
      if (e->b->op == TE_CONST && !kiln_dtype_is_float(e->b->dtype))
        return !__builtin_mul_overflow(scale, e->b->i, &t) && affine_add(e->a, t, a);
      if (e->a->op == TE_CONST && !kiln_dtype_is_float(e->a->dtype))
        return !__builtin_mul_overflow(scale, e->a->i, &t) && affine_add(e->b, t, a);
      return false;
    default: return false;
  }
}

bool te_affine_of(const te_expr *e, te_affine *out) {
  memset(out, 0, sizeof *out);
  return affine_add(e, 1, out);
}

int64_t te_affine_coef(const te_affine *a, int var) {
  for (int i = 0; i < a->n; i++)
    if (a->var[i] == var) return a->coef[i];
  return 0;
}

kiln_dtype te_compare_dtype(kiln_dtype a, kiln_dtype b) {
  if (a == b) return a;
  if (a == KILN_DTYPE_F64 || b == KILN_DTYPE_F64) return KILN_DTYPE_F64;
  if (kiln_dtype_is_float(a)) return a;
  if (kiln_dtype_is_float(b)) return b;
  if (a == KILN_DTYPE_I64 || b == KILN_DTYPE_I64 || a == KILN_DTYPE_U64 || b == KILN_DTYPE_U64) return KILN_DTYPE_I64;
  if (a == KILN_DTYPE_U32 && b == KILN_DTYPE_U32) return KILN_DTYPE_U32;
  return KILN_DTYPE_I32;
}
