/* Ops of the "text" family: the string ops of opset 20 — StringConcat,
 * StringSplit and RegexFullMatch.
 *
 * StringConcat joins two string tensors elementwise with numpy
 * broadcasting. StringSplit follows Python's str.split: a delimiter splits
 * at every occurrence (consecutive ones delimit empty strings); without one
 * (unset or "") runs of ASCII whitespace separate the parts and leading
 * whitespace is dropped, trailing whitespace only from a fully split
 * string. maxsplit caps the splits; the unsplit rest is the last part. Y
 * pads every element's parts with "" to the longest count, Z holds the
 * counts.
 *
 * RegexFullMatch takes RE2 syntax. kiln matches with POSIX regcomp/regexec
 * (REG_EXTENDED | REG_NOSUB) after translating the RE2 pattern into an
 * equivalent POSIX extended one, anchored as ^(...)$, in the C.UTF-8 locale
 * when the system has it (RE2 matches UTF-8 characters, not bytes):
 *   - \d \s \w and their negations \D \S \W become explicit ASCII sets, as
 *     RE2 defines them (also inside brackets, except the negated ones);
 *   - an escaped punctuation character is that character; \t \n \r \f \v
 *     are the control characters; \b and \B stay (glibc word boundaries);
 *   - (?:...) and (?P<name>...) become plain groups and lazy quantifiers
 *     (*? +? ?? {n,m}?) greedy ones: a full match exists or not whatever
 *     the groups capture or the repetition prefers.
 * Anything else RE2-specific (flags such as (?i), \A \z \p{..} \x.. \Q..\E,
 * \C, octal escapes) is rejected with an error naming the construct rather
 * than matched with another meaning. */
#include "ops/elementwise.h"
#include "ops/op.h"

#include <locale.h>
#include <regex.h>
#include <stdio.h>

/* An element of a string tensor ("" for an unset one). */
static const char *str_at(const kiln_tensor *t, int64_t i) {
  const char *s = ((char *const *)t->data)[i];
  return s ? s : "";
}

static kiln_status_t require_string(const kiln_tensor *t, int i, const char *name) {
  if (t->dtype == KILN_DTYPE_STRING) return NULL;
  return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected string", i, name,
                    kiln_dtype_name(t->dtype));
}

static kiln_status_t infer_require_string(const kiln_infer_ctx *ctx, int i, const char *name) {
  const kiln_type *t = i < ctx->n_inputs ? ctx->inputs[i] : NULL;
  if (!t || t->dtype == KILN_DTYPE_UNDEFINED || t->dtype == KILN_DTYPE_STRING) return NULL;
  return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected string", i, name,
                    kiln_dtype_name(t->dtype));
}

/* ---- StringConcat ------------------------------------------------------------ */

static kiln_status_t string_concat_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *a, *b, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  KILN_TRY(require_string(a, 0, "X"));
  KILN_TRY(require_string(b, 1, "Y"));
  ew_bcast it;
  KILN_TRY(ew_bcast_init_tensors(&it, 2, (kiln_tensor *[]){a, b}));
  kiln_status_t st = kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_STRING, it.rank, it.dims, &y);
  char *buf = NULL;
  size_t cap = 0;
  for (int64_t k = 0; !st && k < it.numel; k++, ew_bcast_next(&it)) {
    const char *x = str_at(a, it.offsets[0]), *z = str_at(b, it.offsets[1]);
    size_t nx = strlen(x), nz = strlen(z);
    if (nx + nz + 1 > cap) {
      char *nb = realloc(buf, nx + nz + 1);
      if (!nb) {
        st = KILN_OOM();
        break;
      }
      buf = nb;
      cap = nx + nz + 1;
    }
    memcpy(buf, x, nx);
    memcpy(buf + nx, z, nz);
    st = kiln_tensor_set_string(y, k, buf, nx + nz);
  }
  free(buf);
  ew_bcast_free(&it);
  return st;
}

static kiln_status_t string_concat_infer(kiln_infer_ctx *ctx) {
  KILN_TRY(infer_require_string(ctx, 0, "X"));
  KILN_TRY(infer_require_string(ctx, 1, "Y"));
  return kiln_infer_broadcast(ctx, KILN_DTYPE_STRING);
}

/* ---- StringSplit ------------------------------------------------------------- */

/* Python's ASCII whitespace (str.isspace over bytes < 0x80). */
static bool split_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

/* The parts of s: at most max_parts (0: count only) spans written to
 * starts/lens; returns the number of parts. maxsplit < 0: unlimited. */
static int64_t split_parts(const char *s, const char *delim, int64_t maxsplit, int64_t max_parts, int64_t *starts,
                           int64_t *lens) {
  int64_t n = 0, len = (int64_t)strlen(s);
#define SPLIT_EMIT(st, ln)   \
  do {                       \
    if (n < max_parts) {     \
      starts[n] = (st);      \
      lens[n] = (ln);        \
    }                        \
    n++;                     \
  } while (0)
  if (delim && *delim) {
    int64_t dl = (int64_t)strlen(delim), pos = 0;
    for (;;) {
      const char *hit = maxsplit < 0 || n < maxsplit ? strstr(s + pos, delim) : NULL;
      if (!hit) {
        SPLIT_EMIT(pos, len - pos);
        break;
      }
      int64_t at = hit - s;
      SPLIT_EMIT(pos, at - pos);
      pos = at + dl;
    }
  } else {
    int64_t pos = 0;
    for (;;) {
      while (pos < len && split_space((unsigned char)s[pos])) pos++;
      if (pos == len) break;
      if (maxsplit >= 0 && n == maxsplit) { /* the rest, trailing whitespace kept */
        SPLIT_EMIT(pos, len - pos);
        break;
      }
      int64_t end = pos;
      while (end < len && !split_space((unsigned char)s[end])) end++;
      SPLIT_EMIT(pos, end - pos);
      pos = end;
    }
  }
#undef SPLIT_EMIT
  return n;
}

static kiln_status_t string_split_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y, *z;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(require_string(x, 0, "X"));
  if (x->rank + 1 > KILN_MAX_RANK)
    return kiln_error(KILN_UNSUPPORTED, "input 0 (X): rank %d, Y would exceed the maximum rank %d", x->rank,
                      KILN_MAX_RANK);
  const char *delim = kiln_attr_string(ctx->node, "delimiter", "");
  int64_t maxsplit = kiln_node_attr(ctx->node, "maxsplit") ? kiln_attr_int(ctx->node, "maxsplit", -1) : -1;
  if (kiln_node_attr(ctx->node, "maxsplit") && maxsplit < 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute maxsplit: %lld, expected a non-negative count",
                      (long long)maxsplit);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 1, KILN_DTYPE_I64, x->rank, x->dims, &z));
  int64_t *counts = z->data, widest = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    counts[i] = split_parts(str_at(x, i), delim, maxsplit, 0, NULL, NULL);
    if (counts[i] > widest) widest = counts[i];
  }
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
  dims[x->rank] = widest;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_STRING, x->rank + 1, dims, &y));
  if (widest == 0) return NULL;
  int64_t *spans = malloc(sizeof(int64_t) * 2 * (size_t)widest);
  if (!spans) return KILN_OOM();
  kiln_status_t st = NULL;
  for (int64_t i = 0; !st && i < x->numel; i++) {
    const char *s = str_at(x, i);
    int64_t n = split_parts(s, delim, maxsplit, widest, spans, spans + widest);
    for (int64_t k = 0; !st && k < n; k++)
      st = kiln_tensor_set_string(y, i * widest + k, s + spans[k], (size_t)spans[widest + k]);
  }
  free(spans);
  return st;
}

static kiln_status_t string_split_infer(kiln_infer_ctx *ctx) {
  KILN_TRY(infer_require_string(ctx, 0, "X"));
  const kiln_type *xt = ctx->inputs[0];
  if (!xt || xt->rank < 0 || xt->rank + 1 > KILN_MAX_RANK) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_STRING, -1, NULL);
    kiln_infer_set(ctx, 1, KILN_DTYPE_I64, xt ? xt->rank : -1, xt && xt->rank >= 0 ? xt->dims : NULL);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, xt->dims, sizeof(int64_t) * (size_t)xt->rank);
  /* the widest split: known from the data only, or 0 for no elements */
  bool empty = false;
  for (int d = 0; d < xt->rank; d++) empty = empty || xt->dims[d] == 0;
  dims[xt->rank] = empty ? 0 : -1;
  kiln_infer_set(ctx, 0, KILN_DTYPE_STRING, xt->rank + 1, dims);
  kiln_infer_set(ctx, 1, KILN_DTYPE_I64, xt->rank, xt->dims);
  return NULL;
}

/* ---- RegexFullMatch ---------------------------------------------------------- */

typedef struct re_out {
  char *s;
  size_t n, cap;
  bool oom;
} re_out;

static void re_put(re_out *o, const char *s) {
  size_t k = strlen(s);
  if (o->oom) return;
  if (o->n + k + 1 > o->cap) {
    size_t cap = (o->n + k + 1) * 2;
    char *ns = realloc(o->s, cap);
    if (!ns) {
      o->oom = true;
      return;
    }
    o->s = ns;
    o->cap = cap;
  }
  memcpy(o->s + o->n, s, k + 1);
  o->n += k;
}

static void re_putc(re_out *o, char c) { re_put(o, (char[]){c, 0}); }

#define RE_DIGITS "0123456789"
#define RE_WORD "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
#define RE_SPACE "\t\n\f\r "

/* The members of RE2's \d \s \w (ASCII), or NULL for another letter. */
static const char *re_class_chars(char c) {
  switch (c) {
    case 'd': case 'D': return RE_DIGITS;
    case 's': case 'S': return RE_SPACE;
    case 'w': case 'W': return RE_WORD;
    default: return NULL;
  }
}

/* The character an escape stands for (punctuation, \t \n \r \f \v), or 0. */
static char re_escaped_char(char c) {
  switch (c) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    default: break;
  }
  unsigned char u = (unsigned char)c;
  if (u >= 0x21 && u < 0x7f && !((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')))
    return c;
  return 0;
}

/* A literal character outside brackets. */
static void re_put_literal(re_out *o, char c) {
  if (strchr(".[]()*+?{}|^$\\", c)) re_putc(o, '\\');
  re_putc(o, c);
}

/* Translates the bracket expression starting at p[*i] == '['; *i ends
 * past its ']'. POSIX brackets take no escapes: members are collected and
 * written back with ']' first, '-' last and '^' not first. */
static kiln_status_t re_bracket(const char *p, size_t *i, re_out *o) {
  size_t k = *i + 1;
  bool negate = false, has_close = false, has_dash = false, has_caret = false, has_open = false;
  re_out body = {0};
  if (p[k] == '^') {
    negate = true;
    k++;
  }
  bool first = true;
  for (;; first = false) {
    char c = p[k];
    if (!c) {
      free(body.s);
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute pattern: unterminated [ at offset %zu", *i);
    }
    if (c == ']' && !first) {
      k++;
      break;
    }
    if (c == '[' && p[k + 1] == ':') { /* a POSIX class, as RE2 allows: copied */
      const char *end = strstr(p + k + 2, ":]");
      if (!end) {
        free(body.s);
        return kiln_error(KILN_INVALID_ARGUMENT, "attribute pattern: unterminated [: at offset %zu", k);
      }
      size_t len = (size_t)(end + 2 - (p + k));
      char tmp[64];
      if (len >= sizeof tmp) {
        free(body.s);
        return kiln_error(KILN_INVALID_ARGUMENT, "attribute pattern: unknown class at offset %zu", k);
      }
      memcpy(tmp, p + k, len);
      tmp[len] = 0;
      re_put(&body, tmp);
      k += len;
      continue;
    }
    /* One member (with an escape resolved), maybe the start of a range. */
    char lo;
    if (c == '\\') {
      char e = p[k + 1];
      const char *cls = re_class_chars(e);
      if (cls && e >= 'a') { /* \d \s \w: their members */
        re_put(&body, cls);
        k += 2;
        continue;
      }
      if (cls) {
        free(body.s);
        return kiln_error(KILN_UNSUPPORTED, "attribute pattern: \\%c inside [...] (offset %zu) is not supported", e, k);
      }
      lo = re_escaped_char(e);
      if (!lo) {
        free(body.s);
        return kiln_error(KILN_UNSUPPORTED, "attribute pattern: escape \\%c inside [...] (offset %zu) is not supported",
                          e ? e : '0', k);
      }
      k += 2;
    } else {
      lo = c;
      k++;
    }
    if (p[k] == '-' && p[k + 1] && p[k + 1] != ']') { /* a range lo-hi */
      char hi = p[k + 1];
      size_t step = 2;
      if (hi == '\\') {
        hi = re_escaped_char(p[k + 2]);
        step = 3;
        if (!hi) {
          free(body.s);
          return kiln_error(KILN_UNSUPPORTED, "attribute pattern: range end at offset %zu is not supported", k + 1);
        }
      }
      if ((unsigned char)lo >= 0x80 || (unsigned char)hi >= 0x80) {
        free(body.s);
        return kiln_error(KILN_UNSUPPORTED, "attribute pattern: a range of non-ASCII characters at offset %zu is not "
                          "supported", k - 1);
      }
      if ((unsigned char)hi < (unsigned char)lo) {
        free(body.s);
        return kiln_error(KILN_INVALID_ARGUMENT, "attribute pattern: bad range %c-%c at offset %zu", lo, hi, k - 1);
      }
      /* Written out member by member: a range's meaning in POSIX depends on the locale. */
      for (int v = (unsigned char)lo; v <= (unsigned char)hi; v++) {
        if (v == ']') has_close = true;
        else if (v == '[') has_open = true; /* written last: "[" before ":" would open a class */
        else if (v == '-') has_dash = true;
        else if (v == '^') has_caret = true;
        else if (v != 0) re_putc(&body, (char)v);
      }
      k += step;
      continue;
    }
    if (lo == ']') has_close = true;
    else if (lo == '[') has_open = true;
    else if (lo == '-') has_dash = true;
    else if (lo == '^') has_caret = true;
    else re_putc(&body, lo);
  }
  bool empty = !has_close && !has_dash && !has_caret && !has_open && (!body.s || body.n == 0);
  if (empty) {
    free(body.s);
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute pattern: empty [...] at offset %zu", *i);
  }
  if (!has_close && !has_dash && !has_open && (!body.s || body.n == 0)) { /* only '^' */
    re_put(o, negate ? "[^^]" : "\\^");
  } else {
    re_put(o, negate ? "[^" : "[");
    if (has_close) re_putc(o, ']');
    if (body.s) re_put(o, body.s);
    if (has_open) re_putc(o, '[');
    if (has_caret) re_putc(o, '^');
    if (has_dash) re_putc(o, '-');
    re_putc(o, ']');
  }
  free(body.s);
  *i = k;
  return o->oom ? KILN_OOM() : NULL;
}

/* RE2 pattern -> POSIX extended pattern anchored at both ends (owned). */
static kiln_status_t re2_to_posix(const char *p, char **out) {
  re_out o = {0};
  kiln_status_t st = NULL;
  re_put(&o, "^(");
  size_t i = 0;
  while (!st && p[i]) {
    char c = p[i];
    if (c == '\\') {
      char e = p[i + 1];
      const char *cls = re_class_chars(e);
      if (cls) {
        re_put(&o, e >= 'a' ? "[" : "[^");
        re_put(&o, cls);
        re_putc(&o, ']');
      } else if (e == 'b' || e == 'B') {
        re_putc(&o, '\\');
        re_putc(&o, e);
      } else if (re_escaped_char(e)) {
        re_put_literal(&o, re_escaped_char(e));
      } else {
        st = kiln_error(KILN_UNSUPPORTED, "attribute pattern: RE2 escape \\%c (offset %zu) is not supported", e ? e : '0',
                        i);
        break;
      }
      i += 2;
    } else if (c == '[') {
      st = re_bracket(p, &i, &o);
    } else if (c == '(' && p[i + 1] == '?') {
      if (p[i + 2] == ':') {
        i += 3;
      } else if (p[i + 2] == 'P' && p[i + 3] == '<') {
        const char *end = strchr(p + i + 4, '>');
        if (!end) {
          st = kiln_error(KILN_INVALID_ARGUMENT, "attribute pattern: unterminated group name at offset %zu", i);
          break;
        }
        i = (size_t)(end + 1 - p);
      } else {
        st = kiln_error(KILN_UNSUPPORTED, "attribute pattern: RE2 group flags (?%c at offset %zu are not supported",
                        p[i + 2] ? p[i + 2] : '0', i);
        break;
      }
      re_putc(&o, '(');
    } else if ((c == '*' || c == '+' || c == '?' || c == '}') && p[i + 1] == '?') {
      re_putc(&o, c); /* lazy: the same full matches as greedy */
      i += 2;
    } else {
      re_putc(&o, c);
      i++;
    }
  }
  re_put(&o, ")$");
  if (!st && o.oom) st = KILN_OOM();
  if (st) {
    free(o.s);
    return st;
  }
  *out = o.s;
  return NULL;
}

static kiln_status_t regex_full_match_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(require_string(x, 0, "X"));
  if (!kiln_node_attr(ctx->node, "pattern")) return kiln_error(KILN_INVALID_MODEL, "attribute pattern is required");
  const char *pattern = kiln_attr_string(ctx->node, "pattern", "");
  char *posix;
  KILN_TRY(re2_to_posix(pattern, &posix));
  /* UTF-8 characters, as RE2 matches them, where the system has C.UTF-8. */
  locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  locale_t prev = utf8 ? uselocale(utf8) : (locale_t)0;
  regex_t re;
  int rc = regcomp(&re, posix, REG_EXTENDED | REG_NOSUB);
  kiln_status_t st = NULL;
  if (rc != 0) {
    char msg[128];
    regerror(rc, &re, msg, sizeof msg);
    st = kiln_error(KILN_INVALID_ARGUMENT, "attribute pattern '%s': %s", pattern, msg);
  }
  if (!st) st = kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_BOOL, x->rank, x->dims, &y);
  for (int64_t i = 0; !st && i < x->numel; i++) ((bool *)y->data)[i] = regexec(&re, str_at(x, i), 0, NULL, 0) == 0;
  if (rc == 0) regfree(&re);
  if (utf8) {
    uselocale(prev);
    freelocale(utf8);
  }
  free(posix);
  return st;
}

static kiln_status_t regex_full_match_infer(kiln_infer_ctx *ctx) {
  KILN_TRY(infer_require_string(ctx, 0, "X"));
  const kiln_type *xt = ctx->inputs[0];
  if (!xt) return NULL;
  kiln_infer_set(ctx, 0, KILN_DTYPE_BOOL, xt->rank, xt->rank >= 0 ? xt->dims : NULL);
  return NULL;
}

static const kiln_op_def text_ops[] = {
    {"", "StringConcat", 2, 2, 1, 1, string_concat_infer, string_concat_kernel, 0, .id = KILN_OP_StringConcat},
    {"", "StringSplit", 1, 1, 2, 2, string_split_infer, string_split_kernel, 0, .id = KILN_OP_StringSplit},
    {"", "RegexFullMatch", 1, 1, 1, 1, regex_full_match_infer, regex_full_match_kernel, 0,
     .id = KILN_OP_RegexFullMatch},
};

const kiln_op_def *kiln_ops_text(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(text_ops);
  return text_ops;
}
