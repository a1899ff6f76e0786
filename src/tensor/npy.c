#include "tensor/npy.h"

#include "tensor/zip.h"

#include "base/limits.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* The format (numpy/lib/format.py, NEP 1):
 *   "\x93NUMPY" major minor  header_len (u16 LE for 1.x, u32 LE for 2.x/3.x)
 *   header: a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), }
 *           padded with spaces and a final '\n'; latin-1 (1.x, 2.x) or UTF-8 (3.x)
 *   data:   the elements, C or Fortran order, in the descr's byte order. */
#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* No valid header of a rank <= KILN_MAX_RANK array comes close; the limit keeps
 * a hostile header length from allocating gigabytes. */
#define NPY_MAX_HEADER_LEN (1u << 20)
#define NPY_ALIGN 64
/* Fixed-width strings of width 0 need no data bytes: cap their count. */
#define NPY_MAX_EMPTY_STRINGS (1 << 20)

static bool host_is_little(void) {
  const uint16_t one = 1;
  uint8_t first;
  memcpy(&first, &one, 1);
  return first == 1;
}

/* What the header says about the data that follows it. */
typedef struct npy_header {
  kiln_dtype void_as; /* in: the dtype of a 'V<n>' descr (UNDEFINED: only V2, as BF16) */
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t numel;
  bool fortran;
  bool swap;          /* file byte order differs from the host's */
  char str_kind;      /* STRING: 'U' (UTF-32) or 'S' (bytes); 0 otherwise */
  size_t item_size;   /* bytes per element in the file */
  size_t swap_unit;   /* byte-swap granularity (complex: each half) */
  int64_t data_bytes; /* numel * item_size */
} npy_header;

/* ---- header parsing ------------------------------------------------------ */

typedef struct lexer {
  const char *start, *p, *end;
  const char *what; /* file name for messages */
} lexer;

/* Copies up to 40 bytes of s for an error message, non-printables as '?'. */
static const char *printable(const char *s, size_t n, char *buf, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 4 < cap && i < 40; i++)
    buf[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  if (n > 40 && k + 4 < cap) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
  buf[k] = 0;
  return buf;
}

static kiln_status_t lex_error(const lexer *lx, kiln_status_code code, const char *fmt, ...) KILN_PRINTF(3, 4);
static kiln_status_t lex_error(const lexer *lx, kiln_status_code code, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kiln_error(code, "%s: invalid .npy header: %s (at byte %td of the header)", lx->what, msg,
                    lx->p - lx->start);
}

static void skip_ws(lexer *lx) {
  while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r')) lx->p++;
}

static bool accept(lexer *lx, char c) {
  skip_ws(lx);
  if (lx->p < lx->end && *lx->p == c) {
    lx->p++;
    return true;
  }
  return false;
}

static kiln_status_t expect(lexer *lx, char c, const char *where) {
  if (accept(lx, c)) return NULL;
  return lex_error(lx, KILN_INVALID_ARGUMENT, "expected '%c' %s", c, where);
}

/* A quoted Python string without escapes: borrowed view into the header. */
static kiln_status_t parse_string(lexer *lx, const char **out_s, size_t *out_n) {
  skip_ws(lx);
  if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"'))
    return lex_error(lx, KILN_INVALID_ARGUMENT, "expected a quoted string");
  char quote = *lx->p++;
  const char *s = lx->p;
  while (lx->p < lx->end && *lx->p != quote) {
    if (*lx->p == '\\') return lex_error(lx, KILN_INVALID_ARGUMENT, "escape sequences in strings are not supported");
    if (*lx->p == '\n') break;
    lx->p++;
  }
  if (lx->p >= lx->end || *lx->p != quote) return lex_error(lx, KILN_INVALID_ARGUMENT, "unterminated string");
  *out_s = s;
  *out_n = (size_t)(lx->p - s);
  lx->p++;
  return NULL;
}

static bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool accept_word(lexer *lx, const char *word) {
  size_t n = strlen(word);
  skip_ws(lx);
  if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, word, n) != 0) return false;
  if (lx->p + n < lx->end && is_ident_char(lx->p[n])) return false;
  lx->p += n;
  return true;
}

static kiln_status_t parse_bool(lexer *lx, bool *out) {
  if (accept_word(lx, "True")) {
    *out = true;
    return NULL;
  }
  if (accept_word(lx, "False")) {
    *out = false;
    return NULL;
  }
  return lex_error(lx, KILN_INVALID_ARGUMENT, "'fortran_order' must be True or False");
}

/* A tuple of non-negative integers: (), (3,), (3, 4), (3L, 4L) from Python 2. */
static kiln_status_t parse_shape(lexer *lx, int *out_rank, int64_t *dims) {
  KILN_TRY(expect(lx, '(', "to open 'shape' (it must be a tuple)"));
  int rank = 0;
  bool trailing_comma = false;
  while (!accept(lx, ')')) {
    skip_ws(lx);
    if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9')
      return lex_error(lx, KILN_INVALID_ARGUMENT, "'shape' must hold non-negative integers");
    int64_t v = 0;
    while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
      int d = *lx->p - '0';
      if (v > (INT64_MAX - d) / 10) return lex_error(lx, KILN_INVALID_ARGUMENT, "dimension does not fit in int64");
      v = v * 10 + d;
      lx->p++;
    }
    if (lx->p < lx->end && (*lx->p == 'L' || *lx->p == 'l')) lx->p++;
    if (rank == KILN_MAX_RANK)
      return lex_error(lx, KILN_UNSUPPORTED, "rank above kiln's maximum of %d", KILN_MAX_RANK);
    dims[rank++] = v;
    trailing_comma = accept(lx, ',');
    if (!trailing_comma) {
      KILN_TRY(expect(lx, ')', "or ',' in 'shape'"));
      break;
    }
  }
  if (rank == 1 && !trailing_comma)
    return lex_error(lx, KILN_INVALID_ARGUMENT, "'shape' (n) is not a tuple; a 1-d shape is written (n,)");
  *out_rank = rank;
  return NULL;
}

/* Size digits of a descr like "f4" / "U12": all of [s, s+n) must be digits. */
static bool parse_size(const char *s, size_t n, size_t *out) {
  if (n == 0 || n > 12) return false;
  size_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (size_t)(s[i] - '0');
  }
  *out = v;
  return true;
}

static kiln_status_t parse_descr(lexer *lx, const char *s, size_t n, npy_header *h) {
  char shown[64];
  printable(s, n, shown, sizeof shown);
  bool little = host_is_little();
  h->swap = false;
  h->str_kind = 0;
  /* Dtype names as descr: 'bfloat16' (kiln's convention before it wrote
   * '<V2') and ml_dtypes' names, little-endian data. */
  static const struct {
    const char *name;
    kiln_dtype dtype;
  } named[] = {
      {"bfloat16", KILN_DTYPE_BF16},          {"float8_e4m3fn", KILN_DTYPE_F8E4M3FN},
      {"float8_e4m3fnuz", KILN_DTYPE_F8E4M3FNUZ}, {"float8_e5m2", KILN_DTYPE_F8E5M2},
      {"float8_e5m2fnuz", KILN_DTYPE_F8E5M2FNUZ}, {"float8_e8m0fnu", KILN_DTYPE_F8E8M0},
      {"float4_e2m1fn", KILN_DTYPE_F4E2M1},   {"int4", KILN_DTYPE_I4},
      {"uint4", KILN_DTYPE_U4},               {"int2", KILN_DTYPE_I2},
      {"uint2", KILN_DTYPE_U2},
  };
  for (size_t k = 0; k < KILN_ARRAY_SIZE(named); k++) {
    if (strlen(named[k].name) == n && !memcmp(s, named[k].name, n)) {
      h->dtype = named[k].dtype;
      h->item_size = h->swap_unit = kiln_dtype_size(h->dtype);
      h->swap = !little && h->item_size > 1;
      return NULL;
    }
  }
  size_t i = 0;
  char order = '=';
  if (n > 0 && (s[0] == '<' || s[0] == '>' || s[0] == '=' || s[0] == '|')) order = s[i++];
  if (i >= n) return lex_error(lx, KILN_INVALID_ARGUMENT, "bad descr '%s'", shown);
  char kind = s[i++];
  size_t size = 0;
  bool has_size = parse_size(s + i, n - i, &size);
  if (kind == 'O')
    return lex_error(lx, KILN_UNSUPPORTED, "object arrays (descr '%s') are not supported", shown);
  if (kind == '?' && i == n) {
    kind = 'b';
    size = 1;
    has_size = true;
  }
  bool swap_order = (order == '>' && little) || (order == '<' && !little);
  if (kind == 'f' && has_size && size == 1) { /* np.save of ml_dtypes' float8_e5m2 (numpy cannot load it back) */
    h->dtype = KILN_DTYPE_F8E5M2;
    h->item_size = h->swap_unit = 1;
    return NULL;
  }
  if (kind == 'V' && has_size) {
    /* np.save writes ml_dtypes arrays (bfloat16, float8, int4, ...) as
     * untyped bytes: the caller says which dtype they are. */
    kiln_dtype dt = h->void_as ? h->void_as : size == 2 ? KILN_DTYPE_BF16 : KILN_DTYPE_UNDEFINED;
    if (dt == KILN_DTYPE_UNDEFINED || kiln_dtype_size(dt) != size ||
        !(dt == KILN_DTYPE_BF16 || kiln_dtype_is_narrow(dt)))
      return lex_error(lx, KILN_UNSUPPORTED,
                       "descr '%s' is untyped bytes (how numpy saves ml_dtypes arrays)%s%s", shown,
                       h->void_as ? " and does not fit " : ": a 1-byte one needs the dtype from the model",
                       h->void_as ? kiln_dtype_name(h->void_as) : "");
    h->dtype = dt;
    h->item_size = h->swap_unit = size;
    h->swap = swap_order && size > 1;
    return NULL;
  }
  if (!has_size) {
    if (kind == 'M' || kind == 'm' || kind == 'V')
      return lex_error(lx, KILN_UNSUPPORTED, "descr '%s' (datetime/void) is not supported", shown);
    return lex_error(lx, KILN_INVALID_ARGUMENT, "bad descr '%s'", shown);
  }
  static const struct {
    char kind;
    size_t size;
    kiln_dtype dtype;
  } table[] = {
      {'f', 2, KILN_DTYPE_F16}, {'f', 4, KILN_DTYPE_F32}, {'f', 8, KILN_DTYPE_F64},
      {'i', 1, KILN_DTYPE_I8},  {'i', 2, KILN_DTYPE_I16}, {'i', 4, KILN_DTYPE_I32},
      {'i', 8, KILN_DTYPE_I64}, {'u', 1, KILN_DTYPE_U8},  {'u', 2, KILN_DTYPE_U16},
      {'u', 4, KILN_DTYPE_U32}, {'u', 8, KILN_DTYPE_U64}, {'b', 1, KILN_DTYPE_BOOL},
      {'c', 8, KILN_DTYPE_C64}, {'c', 16, KILN_DTYPE_C128},
  };
  if (kind == 'U' || kind == 'S' || kind == 'a') {
    h->dtype = KILN_DTYPE_STRING;
    h->str_kind = kind == 'U' ? 'U' : 'S';
    h->item_size = kind == 'U' ? size * 4 : size;
    h->swap_unit = kind == 'U' ? 4 : 1;
    h->swap = kind == 'U' && swap_order;
    return NULL;
  }
  for (size_t k = 0; k < KILN_ARRAY_SIZE(table); k++) {
    if (table[k].kind == kind && table[k].size == size) {
      h->dtype = table[k].dtype;
      h->item_size = size;
      h->swap_unit = kind == 'c' ? size / 2 : size;
      h->swap = swap_order && h->swap_unit > 1;
      return NULL;
    }
  }
  if (strchr("fiubcMmV", kind))
    return lex_error(lx, KILN_UNSUPPORTED, "descr '%s' has no kiln dtype", shown);
  return lex_error(lx, KILN_INVALID_ARGUMENT, "bad descr '%s'", shown);
}

static kiln_status_t parse_dict(const char *text, size_t len, const char *what, npy_header *h) {
  lexer lx = {text, text, text + len, what};
  bool seen_descr = false, seen_order = false, seen_shape = false;
  KILN_TRY(expect(&lx, '{', "to open the header dictionary"));
  while (!accept(&lx, '}')) {
    const char *key;
    size_t key_len;
    KILN_TRY(parse_string(&lx, &key, &key_len));
    KILN_TRY(expect(&lx, ':', "after a dictionary key"));
    bool *seen;
    if (key_len == 5 && !memcmp(key, "descr", 5)) {
      seen = &seen_descr;
      skip_ws(&lx);
      if (lx.p < lx.end && *lx.p == '[')
        return lex_error(&lx, KILN_UNSUPPORTED, "structured dtypes (a list descr) are not supported");
      const char *d;
      size_t dn;
      KILN_TRY(parse_string(&lx, &d, &dn));
      KILN_TRY(parse_descr(&lx, d, dn, h));
    } else if (key_len == 13 && !memcmp(key, "fortran_order", 13)) {
      seen = &seen_order;
      KILN_TRY(parse_bool(&lx, &h->fortran));
    } else if (key_len == 5 && !memcmp(key, "shape", 5)) {
      seen = &seen_shape;
      KILN_TRY(parse_shape(&lx, &h->rank, h->dims));
    } else {
      char shown[64];
      return lex_error(&lx, KILN_INVALID_ARGUMENT, "unexpected key '%s'", printable(key, key_len, shown, sizeof shown));
    }
    if (*seen) return lex_error(&lx, KILN_INVALID_ARGUMENT, "duplicate key");
    *seen = true;
    if (!accept(&lx, ',')) {
      KILN_TRY(expect(&lx, '}', "or ',' after a dictionary value"));
      break;
    }
  }
  skip_ws(&lx);
  if (lx.p != lx.end) return lex_error(&lx, KILN_INVALID_ARGUMENT, "unexpected bytes after the dictionary");
  if (!seen_descr || !seen_order || !seen_shape)
    return lex_error(&lx, KILN_INVALID_ARGUMENT, "missing key '%s'",
                     !seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape");
  h->numel = kiln_shape_numel(h->rank, h->dims);
  if (h->numel < 0 || !kiln_mul_i64(h->numel, (int64_t)h->item_size, &h->data_bytes) ||
      h->data_bytes > kiln_limits_get()->max_tensor_bytes) {
    char s[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: shape %s of dtype %s is too large", what,
                      kiln_shape_str(h->rank, h->dims, s, sizeof s), kiln_dtype_name(h->dtype));
  }
  if (h->dtype == KILN_DTYPE_STRING && h->item_size == 0 && h->numel > NPY_MAX_EMPTY_STRINGS)
    return kiln_error(KILN_UNSUPPORTED, "%s: %lld zero-width strings exceed the limit of %d", what,
                      (long long)h->numel, NPY_MAX_EMPTY_STRINGS);
  return NULL;
}

/* Magic, version and header length from the first bytes of a file.
 * *out_prefix_len is 10 (version 1) or 12 (versions 2 and 3). */
static kiln_status_t parse_prefix(const uint8_t *p, size_t n, const char *what, size_t *out_prefix_len,
                                  size_t *out_header_len) {
  if (n < NPY_MAGIC_LEN || memcmp(p, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: not a .npy file (bad magic)", what);
  if (n < NPY_MAGIC_LEN + 2) return kiln_error(KILN_INVALID_ARGUMENT, "%s: file ends inside the .npy preamble", what);
  int major = p[6], minor = p[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return kiln_error(KILN_UNSUPPORTED, "%s: unsupported .npy format version %d.%d", what, major, minor);
  size_t prefix = major == 1 ? 10 : 12;
  if (n < prefix) return kiln_error(KILN_INVALID_ARGUMENT, "%s: file ends inside the .npy preamble", what);
  size_t len = major == 1 ? (size_t)(p[8] | (p[9] << 8))
                          : (size_t)p[8] | ((size_t)p[9] << 8) | ((size_t)p[10] << 16) | ((size_t)p[11] << 24);
  if (len > NPY_MAX_HEADER_LEN)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: .npy header length %zu exceeds the limit of %u bytes", what, len,
                      NPY_MAX_HEADER_LEN);
  *out_prefix_len = prefix;
  *out_header_len = len;
  return NULL;
}

/* ---- data decoding -------------------------------------------------------- */

/* Walks a Fortran-order array in row-major order, yielding source indices. */
typedef struct fortran_iter {
  int rank;
  int64_t idx[KILN_MAX_RANK], stride[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  int64_t src;
} fortran_iter;

static void fortran_iter_init(fortran_iter *it, const npy_header *h) {
  it->rank = h->rank;
  it->src = 0;
  int64_t s = 1;
  for (int k = 0; k < h->rank; k++) {
    it->idx[k] = 0;
    it->dims[k] = h->dims[k];
    it->stride[k] = s;
    s *= h->dims[k]; /* bounded: numel was checked */
  }
}

/* Source index of the current element, then advance (row-major: last dim fastest). */
static int64_t fortran_iter_next(fortran_iter *it) {
  int64_t cur = it->src;
  for (int k = it->rank - 1; k >= 0; k--) {
    it->idx[k]++;
    it->src += it->stride[k];
    if (it->idx[k] < it->dims[k]) break;
    it->src -= it->idx[k] * it->stride[k];
    it->idx[k] = 0;
  }
  return cur;
}

static void swap_bytes(uint8_t *p, size_t nbytes, size_t unit) {
  for (size_t off = 0; off + unit <= nbytes; off += unit)
    for (size_t a = 0, b = unit - 1; a < b; a++, b--) {
      uint8_t t = p[off + a];
      p[off + a] = p[off + b];
      p[off + b] = t;
    }
}

/* In-place fixes once a numeric tensor holds the file's bytes in row-major order. */
static void finish_numeric(const npy_header *h, kiln_tensor *t) {
  size_t nbytes = (size_t)h->data_bytes;
  if (h->swap) swap_bytes(t->data, nbytes, h->swap_unit);
  if (h->dtype == KILN_DTYPE_BOOL) {
    uint8_t *b = t->data;
    for (size_t i = 0; i < nbytes; i++) b[i] = b[i] != 0;
  }
}

static size_t utf8_encode(uint32_t c, char *out) {
  if (c < 0x80) {
    out[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    out[0] = (char)(0xc0 | (c >> 6));
    out[1] = (char)(0x80 | (c & 0x3f));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = (char)(0xe0 | (c >> 12));
    out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[2] = (char)(0x80 | (c & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (c >> 18));
  out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
  out[3] = (char)(0x80 | (c & 0x3f));
  return 4;
}

static uint32_t load_u32(const uint8_t *p, bool swap) {
  uint32_t v;
  memcpy(&v, p, 4);
  if (swap) v = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
  return v;
}

/* One fixed-width element -> string element i. `scratch` holds item_size bytes of UTF-8. */
static kiln_status_t decode_string(const npy_header *h, const uint8_t *src, kiln_tensor *t, int64_t i,
                                   char *scratch, const char *what) {
  size_t len = 0;
  if (h->str_kind == 'S') {
    size_t n = h->item_size;
    while (n > 0 && src[n - 1] == 0) n--; /* NumPy drops trailing NULs */
    return n ? kiln_tensor_set_string(t, i, (const char *)src, n) : NULL; /* NULL element == "" */
  }
  size_t units = h->item_size / 4;
  while (units > 0 && load_u32(src + 4 * (units - 1), h->swap) == 0) units--;
  for (size_t k = 0; k < units; k++) {
    uint32_t c = load_u32(src + 4 * k, h->swap);
    if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: element %lld holds invalid code point 0x%x", what, (long long)i, c);
    len += utf8_encode(c, scratch + len);
  }
  return len ? kiln_tensor_set_string(t, i, scratch, len) : NULL;
}

/* File bytes (h->data_bytes of them, in file order) -> a new tensor. */
static kiln_status_t decode_data(const npy_header *h, const uint8_t *raw, const char *what, kiln_tensor **out) {
  kiln_tensor *t = NULL;
  KILN_TRY(kiln_tensor_new_uninit(h->dtype, h->rank, h->dims, &t));
  kiln_status_t st = NULL;
  fortran_iter it;
  fortran_iter_init(&it, h);
  if (h->dtype == KILN_DTYPE_STRING) {
    /* UTF-32 -> UTF-8 is at most 4 bytes per 4-byte unit: item_size bytes
     * suffice. Only with elements: then the file holds item_size bytes, while
     * an empty array may declare any width (fuzz finding: '<U26666666666'
     * of shape (0,) asked for 99 GiB of scratch). */
    char *scratch = h->numel > 0 ? malloc(h->item_size ? h->item_size : 1) : NULL;
    if (h->numel > 0 && !scratch) st = KILN_OOM();
    for (int64_t i = 0; !st && i < h->numel; i++) {
      int64_t s = h->fortran ? fortran_iter_next(&it) : i;
      st = decode_string(h, raw + (size_t)s * h->item_size, t, i, scratch, what);
    }
    free(scratch);
  } else {
    size_t item = h->item_size;
    if (!h->fortran || h->rank < 2) {
      if (h->data_bytes) memcpy(t->data, raw, (size_t)h->data_bytes);
    } else {
      uint8_t *dst = t->data;
      for (int64_t i = 0; i < h->numel; i++) memcpy(dst + (size_t)i * item, raw + (size_t)fortran_iter_next(&it) * item, item);
    }
    finish_numeric(h, t);
  }
  if (st) {
    kiln_tensor_release(t);
    return st;
  }
  *out = t;
  return NULL;
}

/* ---- reading -------------------------------------------------------------- */

kiln_status_t kiln_npy_read_buffer_named(const void *data, size_t size, const char *what, kiln_tensor **out) {
  return kiln_npy_read_buffer_as(data, size, what, KILN_DTYPE_UNDEFINED, out);
}

kiln_status_t kiln_npy_read_buffer_as(const void *data, size_t size, const char *what, kiln_dtype void_as,
                                      kiln_tensor **out) {
  if (!out) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_npy_read_buffer: NULL output");
  *out = NULL;
  if (!what) what = "<npy buffer>";
  if (!data && size) return kiln_error(KILN_INVALID_ARGUMENT, "%s: NULL data", what);
  const uint8_t *p = data;
  size_t prefix, header_len;
  KILN_TRY(parse_prefix(p, size, what, &prefix, &header_len));
  if (header_len > size - prefix)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: .npy header length %zu runs past the end of the %zu-byte file",
                      what, header_len, size);
  npy_header h;
  memset(&h, 0, sizeof h);
  h.void_as = void_as;
  KILN_TRY(parse_dict((const char *)p + prefix, header_len, what, &h));
  size_t avail = size - prefix - header_len;
  if ((uint64_t)h.data_bytes > avail) {
    char s[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: data is %zu bytes, but shape %s of dtype %s needs %lld", what,
                      avail, kiln_shape_str(h.rank, h.dims, s, sizeof s), kiln_dtype_name(h.dtype),
                      (long long)h.data_bytes);
  }
  return decode_data(&h, p + prefix + header_len, what, out);
}

kiln_status_t kiln_npy_read_buffer(const void *data, size_t size, kiln_tensor **out) {
  return kiln_npy_read_buffer_named(data, size, NULL, out);
}

static kiln_status_t read_exact(FILE *f, void *buf, size_t n, const char *path, const char *part) {
  size_t got = n ? fread(buf, 1, n, f) : 0;
  if (got == n) return NULL;
  if (ferror(f)) return kiln_error(KILN_IO_ERROR, "%s: read failed: %s", path, strerror(errno));
  return kiln_error(KILN_INVALID_ARGUMENT, "%s: file ends inside the %s (%zu of %zu bytes)", path, part, got, n);
}

/* Reads the data straight into the tensor for the common layout (numeric,
 * C order); otherwise through one buffer of the file's data size. */
static kiln_status_t read_file_data(FILE *f, const npy_header *h, const char *path, kiln_tensor **out) {
  size_t n = (size_t)h->data_bytes;
  if (h->dtype != KILN_DTYPE_STRING && (!h->fortran || h->rank < 2)) {
    kiln_tensor *t = NULL;
    KILN_TRY(kiln_tensor_new_uninit(h->dtype, h->rank, h->dims, &t));
    kiln_status_t st = read_exact(f, t->data, n, path, "array data");
    if (st) {
      kiln_tensor_release(t);
      return st;
    }
    finish_numeric(h, t);
    *out = t;
    return NULL;
  }
  uint8_t *raw = malloc(n ? n : 1);
  if (!raw) return kiln_error(KILN_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", path, n);
  kiln_status_t st = read_exact(f, raw, n, path, "array data");
  if (!st) st = decode_data(h, raw, path, out);
  free(raw);
  return st;
}

static kiln_status_t read_open_file(FILE *f, const char *path, kiln_dtype void_as, kiln_tensor **out) {
  uint8_t pre[12];
  size_t got = fread(pre, 1, sizeof pre, f);
  if (got < sizeof pre && ferror(f)) return kiln_error(KILN_IO_ERROR, "%s: read failed: %s", path, strerror(errno));
  size_t prefix, header_len;
  KILN_TRY(parse_prefix(pre, got, path, &prefix, &header_len));
  if (fseek(f, (long)prefix, SEEK_SET) != 0)
    return kiln_error(KILN_IO_ERROR, "%s: seek failed: %s", path, strerror(errno));
  char *text = malloc(header_len ? header_len : 1);
  if (!text) return KILN_OOM();
  kiln_status_t st = read_exact(f, text, header_len, path, ".npy header");
  npy_header h;
  memset(&h, 0, sizeof h);
  h.void_as = void_as;
  if (!st) st = parse_dict(text, header_len, path, &h);
  free(text);
  if (st) return st;
  /* Check the size before allocating: a header can claim gigabytes. */
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode)) {
    uint64_t avail = (uint64_t)sb.st_size > prefix + header_len ? (uint64_t)sb.st_size - prefix - header_len : 0;
    if ((uint64_t)h.data_bytes > avail) {
      char s[256];
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: data is %llu bytes, but shape %s of dtype %s needs %lld", path,
                        (unsigned long long)avail, kiln_shape_str(h.rank, h.dims, s, sizeof s),
                        kiln_dtype_name(h.dtype), (long long)h.data_bytes);
    }
  }
  return read_file_data(f, &h, path, out);
}

kiln_status_t kiln_npy_read_file(const char *path, kiln_tensor **out) {
  return kiln_npy_read_file_as(path, KILN_DTYPE_UNDEFINED, out);
}

kiln_status_t kiln_npy_read_file_as(const char *path, kiln_dtype void_as, kiln_tensor **out) {
  if (!path || !out) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_npy_read_file: NULL argument");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return kiln_error(KILN_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
  kiln_status_t st = read_open_file(f, path, void_as, out);
  fclose(f);
  return st;
}

/* ---- writing -------------------------------------------------------------- */

/* Where serialized bytes go: a file, memory, a CRC, a zip member. */
typedef struct npy_sink {
  kiln_status_t (*write)(void *ctx, const void *p, size_t n);
  void *ctx;
} npy_sink;

/* A tensor ready to serialize: the full header (preamble included) and sizes. */
typedef struct npy_prepared {
  const kiln_tensor *t;
  char *header;        /* preamble + dict + padding + '\n' */
  size_t header_size;
  size_t str_units;    /* STRING: UTF-32 units per element */
  uint64_t data_bytes;
} npy_prepared;

/* Next code point of UTF-8 s[*i..n), or -1 if malformed. */
static int32_t utf8_next(const uint8_t *s, size_t n, size_t *i) {
  uint8_t c = s[(*i)++];
  if (c < 0x80) return c;
  int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : -1;
  if (extra < 0 || c > 0xf4) return -1;
  uint32_t v = c & (0x3f >> extra);
  if ((size_t)extra > n - *i) return -1;
  for (int k = 0; k < extra; k++) {
    uint8_t b = s[(*i)++];
    if ((b & 0xc0) != 0x80) return -1;
    v = (v << 6) | (b & 0x3f);
  }
  static const uint32_t min_for[4] = {0, 0x80, 0x800, 0x10000};
  if (v < min_for[extra] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return -1;
  return (int32_t)v;
}

static kiln_status_t string_units(const char *s, int64_t index, size_t *out_units) {
  size_t n = s ? strlen(s) : 0, i = 0, units = 0;
  while (i < n) {
    if (utf8_next((const uint8_t *)s, n, &i) < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "string element %lld is not valid UTF-8", (long long)index);
    units++;
  }
  *out_units = units;
  return NULL;
}

static kiln_status_t prepare(const kiln_tensor *t, npy_prepared *pr) {
  memset(pr, 0, sizeof *pr);
  pr->t = t;
  if (!t) return kiln_error(KILN_INVALID_ARGUMENT, "NULL tensor");
  if (!kiln_dtype_is_valid((int)t->dtype) || t->rank < 0 || t->rank > KILN_MAX_RANK)
    return kiln_error(KILN_INVALID_ARGUMENT, "tensor has invalid dtype %d or rank %d", (int)t->dtype, t->rank);
  if (!t->data && t->numel > 0) return kiln_error(KILN_INVALID_ARGUMENT, "tensor has no data");
  char descr[32];
  size_t item = kiln_dtype_size(t->dtype);
  switch (t->dtype) {
    case KILN_DTYPE_F32: strcpy(descr, "<f4"); break;
    case KILN_DTYPE_F64: strcpy(descr, "<f8"); break;
    case KILN_DTYPE_F16: strcpy(descr, "<f2"); break;
    /* What np.save writes for ml_dtypes arrays: untyped bytes of the element's size. */
    case KILN_DTYPE_BF16: strcpy(descr, "<V2"); break;
    case KILN_DTYPE_F8E4M3FN: case KILN_DTYPE_F8E4M3FNUZ: case KILN_DTYPE_F8E5M2: case KILN_DTYPE_F8E5M2FNUZ:
    case KILN_DTYPE_F8E8M0: case KILN_DTYPE_F4E2M1: case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_U2:
    case KILN_DTYPE_I2: strcpy(descr, "<V1"); break;
    case KILN_DTYPE_I8: strcpy(descr, "|i1"); break;
    case KILN_DTYPE_U8: strcpy(descr, "|u1"); break;
    case KILN_DTYPE_I16: strcpy(descr, "<i2"); break;
    case KILN_DTYPE_U16: strcpy(descr, "<u2"); break;
    case KILN_DTYPE_I32: strcpy(descr, "<i4"); break;
    case KILN_DTYPE_U32: strcpy(descr, "<u4"); break;
    case KILN_DTYPE_I64: strcpy(descr, "<i8"); break;
    case KILN_DTYPE_U64: strcpy(descr, "<u8"); break;
    case KILN_DTYPE_BOOL: strcpy(descr, "|b1"); break;
    case KILN_DTYPE_C64: strcpy(descr, "<c8"); break;
    case KILN_DTYPE_C128: strcpy(descr, "<c16"); break;
    case KILN_DTYPE_STRING: {
      size_t longest = 1; /* NumPy's minimum width */
      for (int64_t i = 0; i < t->numel; i++) {
        size_t units;
        KILN_TRY(string_units(((char *const *)t->data)[i], i, &units));
        longest = KILN_MAX(longest, units);
      }
      pr->str_units = longest;
      item = 4 * longest;
      snprintf(descr, sizeof descr, "<U%zu", longest);
      break;
    }
    default:
      return kiln_error(KILN_UNSUPPORTED, "dtype %s cannot be written to .npy", kiln_dtype_name(t->dtype));
  }
  int64_t bytes;
  if (!kiln_mul_i64(t->numel, (int64_t)item, &bytes)) return kiln_error(KILN_INVALID_ARGUMENT, "tensor too large");
  pr->data_bytes = (uint64_t)bytes;
  /* "(2, 3)", "(5,)", "()" as Python prints tuples. */
  char shape[KILN_MAX_RANK * 22 + 4];
  size_t o = 0;
  shape[o++] = '(';
  for (int i = 0; i < t->rank; i++)
    o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  if (t->rank == 1) shape[o++] = ',';
  shape[o++] = ')';
  shape[o] = 0;
  char dict[sizeof shape + 96];
  int dn = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  /* Pad with spaces so the data starts on a 64-byte boundary; '\n' last. */
  size_t prefix = 10;
  size_t total = (prefix + (size_t)dn + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
  if (total - prefix > 0xffff) {
    prefix = 12;
    total = (prefix + (size_t)dn + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
  }
  char *hdr = malloc(total);
  if (!hdr) return KILN_OOM();
  size_t hl = total - prefix;
  memcpy(hdr, NPY_MAGIC, NPY_MAGIC_LEN);
  hdr[6] = prefix == 10 ? 1 : 2;
  hdr[7] = 0;
  for (size_t k = 0; k < prefix - 8; k++) hdr[8 + k] = (char)((hl >> (8 * k)) & 0xff);
  memcpy(hdr + prefix, dict, (size_t)dn);
  memset(hdr + prefix + dn, ' ', total - prefix - (size_t)dn - 1);
  hdr[total - 1] = '\n';
  pr->header = hdr;
  pr->header_size = total;
  return NULL;
}

static void prepared_free(npy_prepared *pr) {
  free(pr->header);
  pr->header = NULL;
}

/* Chunked output so per-element encodings (strings, byte swaps) make few sink calls. */
#define EMIT_CHUNK (64 * 1024)

static kiln_status_t emit(const npy_prepared *pr, npy_sink sink) {
  const kiln_tensor *t = pr->t;
  KILN_TRY(sink.write(sink.ctx, pr->header, pr->header_size));
  bool little = host_is_little();
  if (t->dtype != KILN_DTYPE_STRING && (little || kiln_dtype_size(t->dtype) == 1)) {
    return pr->data_bytes ? sink.write(sink.ctx, t->data, (size_t)pr->data_bytes) : NULL;
  }
  uint8_t *buf = malloc(EMIT_CHUNK);
  if (!buf) return KILN_OOM();
  kiln_status_t st = NULL;
  size_t used = 0;
  if (t->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; !st && i < t->numel; i++) {
      const char *s = ((char *const *)t->data)[i];
      size_t n = s ? strlen(s) : 0, pos = 0;
      for (size_t u = 0; !st && u < pr->str_units; u++) {
        uint32_t c = pos < n ? (uint32_t)utf8_next((const uint8_t *)s, n, &pos) : 0;
        for (int k = 0; k < 4; k++) buf[used++] = (uint8_t)(c >> (8 * k)); /* little-endian */
        if (used == EMIT_CHUNK) {
          st = sink.write(sink.ctx, buf, used);
          used = 0;
        }
      }
    }
  } else { /* big-endian host: swap into little-endian */
    size_t unit = kiln_dtype_size(t->dtype);
    if (t->dtype == KILN_DTYPE_C64 || t->dtype == KILN_DTYPE_C128) unit /= 2;
    const uint8_t *src = t->data;
    for (uint64_t off = 0; !st && off < pr->data_bytes; off += EMIT_CHUNK) {
      size_t n = (size_t)KILN_MIN((uint64_t)EMIT_CHUNK, pr->data_bytes - off);
      memcpy(buf, src + off, n);
      swap_bytes(buf, n, unit);
      st = sink.write(sink.ctx, buf, n);
    }
  }
  if (!st && used) st = sink.write(sink.ctx, buf, used);
  free(buf);
  return st;
}

typedef struct file_sink {
  FILE *f;
  const char *path;
} file_sink;

static kiln_status_t file_sink_write(void *ctx, const void *p, size_t n) {
  file_sink *fs = ctx;
  if (fwrite(p, 1, n, fs->f) != n) return kiln_error(KILN_IO_ERROR, "write failed: %s", strerror(errno));
  return NULL;
}

typedef struct memory_sink {
  uint8_t *buf;
  size_t used, cap;
} memory_sink;

static kiln_status_t memory_sink_write(void *ctx, const void *p, size_t n) {
  memory_sink *ms = ctx;
  if (n > ms->cap - ms->used) return kiln_error(KILN_INTERNAL, "npy: serialized size mismatch");
  memcpy(ms->buf + ms->used, p, n);
  ms->used += n;
  return NULL;
}

typedef struct crc_sink {
  uint32_t crc;
  uint64_t size;
} crc_sink;

static kiln_status_t crc_sink_write(void *ctx, const void *p, size_t n) {
  crc_sink *cs = ctx;
  cs->crc = kiln_crc32(cs->crc, p, n);
  cs->size += n;
  return NULL;
}

static kiln_status_t zip_sink_write(void *ctx, const void *p, size_t n) {
  return kiln_zip_writer_write(ctx, p, n);
}

kiln_status_t kiln_npy_write_buffer(const kiln_tensor *t, void **out_data, size_t *out_size) {
  if (!out_data || !out_size) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_npy_write_buffer: NULL output");
  *out_data = NULL;
  *out_size = 0;
  npy_prepared pr;
  KILN_RETURN_IF_ERROR(prepare(t, &pr), "npy buffer");
  uint64_t total = pr.header_size + pr.data_bytes;
  memory_sink ms = {malloc((size_t)total), 0, (size_t)total};
  kiln_status_t st = ms.buf ? emit(&pr, (npy_sink){memory_sink_write, &ms}) : KILN_OOM();
  prepared_free(&pr);
  if (st) {
    free(ms.buf);
    return st;
  }
  *out_data = ms.buf;
  *out_size = ms.used;
  return NULL;
}

kiln_status_t kiln_npy_write_file(const char *path, const kiln_tensor *t) {
  if (!path) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_npy_write_file: NULL path");
  npy_prepared pr;
  KILN_RETURN_IF_ERROR(prepare(t, &pr), "%s", path);
  FILE *f = fopen(path, "wb");
  if (!f) {
    prepared_free(&pr);
    return kiln_error(KILN_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
  }
  file_sink fs = {f, path};
  kiln_status_t st = emit(&pr, (npy_sink){file_sink_write, &fs});
  prepared_free(&pr);
  if (fclose(f) != 0 && !st) st = kiln_error(KILN_IO_ERROR, "close failed: %s", strerror(errno));
  if (st) {
    remove(path);
    return kiln_status_annotate(st, "%s", path);
  }
  return NULL;
}

/* ---- .npz ----------------------------------------------------------------- */

bool kiln_npz_supports_deflate(void) { return kiln_zip_supports_deflate(); }

void kiln_npz_free(int n, char **names, kiln_tensor **tensors) {
  for (int i = 0; i < n; i++) {
    if (names) free(names[i]);
    if (tensors) kiln_tensor_release(tensors[i]);
  }
  free(names);
  free(tensors);
}

static kiln_status_t read_member(const uint8_t *data, size_t size, const kiln_zip_entry *e, const char *what,
                                 kiln_tensor **out) {
  char *member = kiln_strfmt("%s: member '%s'", what, e->name);
  if (!member) return KILN_OOM();
  kiln_status_t st;
  if (e->method == 0) {
    const uint8_t *view;
    size_t n;
    st = kiln_zip_stored_view(data, size, e, what, &view, &n);
    if (!st) st = kiln_npy_read_buffer_named(view, n, member, out);
  } else {
    uint8_t *bytes;
    size_t n;
    st = kiln_zip_extract(data, size, e, what, &bytes, &n);
    if (!st) {
      st = kiln_npy_read_buffer_named(bytes, n, member, out);
      free(bytes);
    }
  }
  free(member);
  return st;
}

static kiln_status_t npz_read(const uint8_t *data, size_t size, const char *what, int *out_n, char ***out_names,
                              kiln_tensor ***out_tensors) {
  int n_entries;
  kiln_zip_entry *es;
  KILN_TRY(kiln_zip_list(data, size, what, &n_entries, &es));
  char **names = calloc((size_t)n_entries + 1, sizeof *names);
  kiln_tensor **ts = calloc((size_t)n_entries + 1, sizeof *ts);
  kiln_status_t st = names && ts ? NULL : KILN_OOM();
  int n = 0;
  for (int i = 0; !st && i < n_entries; i++) {
    const kiln_zip_entry *e = &es[i];
    size_t len = strlen(e->name);
    if (len > 0 && e->name[len - 1] == '/' && e->uncompressed_size == 0) continue; /* a folder */
    if (len > 4 && !strcmp(e->name + len - 4, ".npy")) len -= 4;
    names[n] = malloc(len + 1);
    if (!names[n]) {
      st = KILN_OOM();
      break;
    }
    memcpy(names[n], e->name, len);
    names[n][len] = 0;
    st = read_member(data, size, e, what, &ts[n]);
    n++;
  }
  kiln_zip_entries_free(n_entries, es);
  if (st) {
    kiln_npz_free(n, names, ts);
    return st;
  }
  *out_n = n;
  *out_names = names;
  *out_tensors = ts;
  return NULL;
}

kiln_status_t kiln_npz_read_buffer(const void *data, size_t size, int *out_n, char ***out_names,
                                   kiln_tensor ***out_tensors) {
  if (!out_n || !out_names || !out_tensors || (!data && size))
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_npz_read_buffer: NULL argument");
  *out_n = 0;
  *out_names = NULL;
  *out_tensors = NULL;
  return npz_read(data, size, "<npz buffer>", out_n, out_names, out_tensors);
}

kiln_status_t kiln_npz_read_file(const char *path, int *out_n, char ***out_names, kiln_tensor ***out_tensors) {
  if (!path || !out_n || !out_names || !out_tensors)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_npz_read_file: NULL argument");
  *out_n = 0;
  *out_names = NULL;
  *out_tensors = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return kiln_error(KILN_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fclose(f);
    return kiln_error(KILN_IO_ERROR, "%s: not a regular file", path);
  }
  size_t size = (size_t)sb.st_size;
  if (size == 0) {
    fclose(f);
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: empty file, not a zip archive", path);
  }
  /* Map the archive: stored members are parsed straight from the mapping. */
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
  fclose(f);
  if (map == MAP_FAILED) return kiln_error(KILN_IO_ERROR, "%s: cannot map: %s", path, strerror(errno));
  kiln_status_t st = npz_read(map, size, path, out_n, out_names, out_tensors);
  munmap(map, size);
  return st;
}

kiln_status_t kiln_npz_write_file(const char *path, int n, const char *const *names,
                                  const kiln_tensor *const *tensors) {
  if (!path || n < 0 || (n > 0 && (!names || !tensors)))
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_npz_write_file: NULL argument");
  for (int i = 0; i < n; i++) {
    if (!names[i] || !names[i][0]) return kiln_error(KILN_INVALID_ARGUMENT, "%s: array %d has an empty name", path, i);
    for (int j = 0; j < i; j++)
      if (!strcmp(names[i], names[j]))
        return kiln_error(KILN_INVALID_ARGUMENT, "%s: duplicate array name '%s'", path, names[i]);
  }
  kiln_zip_writer *w;
  KILN_TRY(kiln_zip_writer_open(path, &w));
  kiln_status_t st = NULL;
  for (int i = 0; !st && i < n; i++) {
    npy_prepared pr;
    st = prepare(tensors[i], &pr);
    if (st) {
      st = kiln_status_annotate(st, "%s: array '%s'", path, names[i]);
      break;
    }
    /* Two passes: the member's CRC goes in its local header, before the bytes. */
    crc_sink cs = {0, 0};
    st = emit(&pr, (npy_sink){crc_sink_write, &cs});
    char *member = st ? NULL : kiln_strfmt("%s.npy", names[i]);
    if (!st && !member) st = KILN_OOM();
    if (!st) st = kiln_zip_writer_begin(w, member, cs.size, cs.crc);
    if (!st) st = emit(&pr, (npy_sink){zip_sink_write, w});
    free(member);
    prepared_free(&pr);
  }
  if (st) {
    kiln_zip_writer_abort(w);
    return st;
  }
  return kiln_zip_writer_close(w);
}

/* ---- public API (include/kiln.h) --------------------------------------------- */

kiln_status_t kiln_tensor_load_npy(const char *path, kiln_tensor **out_tensor) {
  return kiln_npy_read_file(path, out_tensor);
}

kiln_status_t kiln_tensor_save_npy(const kiln_tensor *tensor, const char *path) {
  return kiln_npy_write_file(path, tensor);
}
