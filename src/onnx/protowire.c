#include "onnx/protowire.h"

bool pw_decode_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
  const uint8_t *p = *pp;
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (p >= end) return false;
    uint8_t b = *p++;
    if (shift == 63 && b > 1) return false; /* bits past 64 */
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *pp = p;
      *out = v;
      return true;
    }
  }
  return false;
}

static size_t offset_of(const pw_reader *r, const uint8_t *p) { return (size_t)(p - r->base); }

static kiln_status_t truncated(const pw_reader *r, const uint8_t *p, const char *what) {
  return kiln_error(KILN_INVALID_MODEL, "truncated or overlong %s at byte %zu", what, offset_of(r, p));
}

/* Reads a tag at r->p into (number, wire). */
static kiln_status_t read_tag(pw_reader *r, uint32_t *number, int *wire) {
  const uint8_t *at = r->p;
  uint64_t tag;
  if (!pw_decode_varint(&r->p, r->end, &tag)) return truncated(r, at, "varint (field tag)");
  uint64_t num = tag >> 3;
  if (num == 0 || num > 0x1fffffff)
    return kiln_error(KILN_INVALID_MODEL, "invalid field number %llu at byte %zu", (unsigned long long)num,
                      offset_of(r, at));
  *number = (uint32_t)num;
  *wire = (int)(tag & 7);
  return NULL;
}

/* Reads the payload of a field whose tag was read; groups recurse. */
static kiln_status_t read_payload(pw_reader *r, uint32_t number, int wire, pw_field *f, int depth) {
  const uint8_t *at = r->p;
  switch (wire) {
    case PW_VARINT:
      if (!pw_decode_varint(&r->p, r->end, &f->u)) return truncated(r, at, "varint");
      return NULL;
    case PW_I64:
      if (r->end - r->p < 8)
        return kiln_error(KILN_INVALID_MODEL, "truncated fixed64 at byte %zu", offset_of(r, at));
      memcpy(&f->u, r->p, 8);
      r->p += 8;
      return NULL;
    case PW_I32: {
      if (r->end - r->p < 4)
        return kiln_error(KILN_INVALID_MODEL, "truncated fixed32 at byte %zu", offset_of(r, at));
      uint32_t v;
      memcpy(&v, r->p, 4);
      r->p += 4;
      f->u = v;
      return NULL;
    }
    case PW_LEN: {
      uint64_t n;
      if (!pw_decode_varint(&r->p, r->end, &n)) return truncated(r, at, "varint (length)");
      if (n > (uint64_t)(r->end - r->p))
        return kiln_error(KILN_INVALID_MODEL, "length %llu at byte %zu runs past the end of its message (%zu bytes left)",
                          (unsigned long long)n, offset_of(r, at), (size_t)(r->end - r->p));
      f->data = r->p;
      f->len = (size_t)n;
      r->p += n;
      return NULL;
    }
    case PW_SGROUP: {
      if (depth >= PW_MAX_GROUP_DEPTH)
        return kiln_error(KILN_INVALID_MODEL, "groups nested deeper than %d at byte %zu", PW_MAX_GROUP_DEPTH,
                          offset_of(r, at));
      for (;;) {
        if (r->p >= r->end)
          return kiln_error(KILN_INVALID_MODEL, "group %u started before byte %zu is never closed", number,
                            offset_of(r, at));
        uint32_t n2;
        int w2;
        KILN_TRY(read_tag(r, &n2, &w2));
        if (w2 == PW_EGROUP) {
          if (n2 != number)
            return kiln_error(KILN_INVALID_MODEL, "group %u closed as %u at byte %zu", number, n2, offset_of(r, r->p));
          return NULL;
        }
        pw_field inner;
        KILN_TRY(read_payload(r, n2, w2, &inner, depth + 1));
      }
    }
    case PW_EGROUP:
      return kiln_error(KILN_INVALID_MODEL, "unmatched end of group %u at byte %zu", number, offset_of(r, at));
    default:
      return kiln_error(KILN_INVALID_MODEL, "invalid wire type %d (field %u) at byte %zu", wire, number,
                        offset_of(r, at));
  }
}

kiln_status_t pw_next(pw_reader *r, pw_field *f, bool *more) {
  for (;;) {
    if (r->p >= r->end) {
      *more = false;
      return NULL;
    }
    memset(f, 0, sizeof *f);
    f->offset = offset_of(r, r->p);
    uint32_t number;
    int wire;
    KILN_TRY(read_tag(r, &number, &wire));
    KILN_TRY(read_payload(r, number, wire, f, 0));
    if (wire == PW_SGROUP) continue; /* no message field of ONNX is a group */
    f->number = number;
    f->wire = wire;
    *more = true;
    return NULL;
  }
}

static const char *wire_name(int wire) {
  switch (wire) {
    case PW_VARINT: return "varint";
    case PW_I64: return "fixed64";
    case PW_LEN: return "length-delimited";
    case PW_I32: return "fixed32";
    default: return "group";
  }
}

kiln_status_t pw_expect(const pw_field *f, int wire, const char *what) {
  if (f->wire == wire) return NULL;
  return kiln_error(KILN_INVALID_MODEL, "field '%s' (%u) at byte %zu is %s, expected %s", what, f->number, f->offset,
                    wire_name(f->wire), wire_name(wire));
}

kiln_status_t pw_dup_string(const pw_field *f, char **out) {
  char *s = malloc(f->len + 1);
  if (!s) return KILN_OOM();
  if (f->len) memcpy(s, f->data, f->len);
  s[f->len] = 0;
  *out = s;
  return NULL;
}

static int elem_size(int wire) { return wire == PW_I32 ? 4 : wire == PW_I64 ? 8 : 0; }

kiln_status_t pw_count_elems(const pw_reader *r, const pw_field *f, int elem_wire, int64_t *count) {
  if (f->wire == elem_wire) {
    (*count)++;
    return NULL;
  }
  if (f->wire != PW_LEN)
    return kiln_error(KILN_INVALID_MODEL, "repeated field %u at byte %zu is %s, expected %s or packed", f->number,
                      f->offset, wire_name(f->wire), wire_name(elem_wire));
  if (elem_wire == PW_VARINT) {
    /* Each varint ends with exactly one byte whose top bit is clear. */
    int64_t n = 0;
    for (size_t i = 0; i < f->len; i++) n += !(f->data[i] & 0x80);
    if (f->len && (f->data[f->len - 1] & 0x80)) {
      size_t start = f->len;
      while (start > 0 && (f->data[start - 1] & 0x80)) start--;
      return kiln_error(KILN_INVALID_MODEL, "truncated varint at byte %zu (packed field %u)",
                        (size_t)(f->data + start - r->base), f->number);
    }
    *count += n;
    return NULL;
  }
  int es = elem_size(elem_wire);
  if (f->len % (size_t)es)
    return kiln_error(KILN_INVALID_MODEL, "packed field %u at byte %zu has %zu bytes, not a multiple of %d", f->number,
                      f->offset, f->len, es);
  *count += (int64_t)(f->len / (size_t)es);
  return NULL;
}

kiln_status_t pw_for_each_elem(const pw_reader *r, const pw_field *f, int elem_wire, pw_elem_fn fn, void *ctx) {
  if (f->wire == elem_wire) return fn(ctx, 0, f->u);
  if (f->wire != PW_LEN)
    return kiln_error(KILN_INVALID_MODEL, "repeated field %u at byte %zu is %s, expected %s or packed", f->number,
                      f->offset, wire_name(f->wire), wire_name(elem_wire));
  const uint8_t *p = f->data, *end = f->data + f->len;
  int64_t i = 0;
  if (elem_wire == PW_VARINT) {
    while (p < end) {
      const uint8_t *at = p;
      uint64_t v;
      if (!pw_decode_varint(&p, end, &v))
        return kiln_error(KILN_INVALID_MODEL, "truncated or overlong varint at byte %zu (packed field %u)",
                          (size_t)(at - r->base), f->number);
      KILN_TRY(fn(ctx, i++, v));
    }
    return NULL;
  }
  int es = elem_size(elem_wire);
  if (f->len % (size_t)es)
    return kiln_error(KILN_INVALID_MODEL, "packed field %u at byte %zu has %zu bytes, not a multiple of %d", f->number,
                      f->offset, f->len, es);
  for (; p < end; p += es) {
    uint64_t v = 0;
    if (es == 4) {
      uint32_t v32;
      memcpy(&v32, p, 4);
      v = v32;
    } else {
      memcpy(&v, p, 8);
    }
    KILN_TRY(fn(ctx, i++, v));
  }
  return NULL;
}

/* ---- writing ----------------------------------------------------------- */

void pw_writer_free(pw_writer *w) {
  free(w->data);
  memset(w, 0, sizeof *w);
}

bool pw_reserve(pw_writer *w, size_t n) {
  if (w->oom) return false;
  if (w->cap - w->len >= n) return true;
  size_t need = w->len + n;
  if (need < w->len) {
    w->oom = true;
    return false;
  }
  size_t cap = w->cap ? w->cap : 256;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      cap = need;
      break;
    }
    cap *= 2;
  }
  uint8_t *d = realloc(w->data, cap);
  if (!d) {
    w->oom = true;
    return false;
  }
  w->data = d;
  w->cap = cap;
  return true;
}

void pw_put_raw(pw_writer *w, const void *data, size_t n) {
  if (!n || !pw_reserve(w, n)) return;
  memcpy(w->data + w->len, data, n);
  w->len += n;
}

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static void encode_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p = (uint8_t)v;
}

void pw_put_varint(pw_writer *w, uint64_t v) {
  size_t n = varint_size(v);
  if (!pw_reserve(w, n)) return;
  encode_varint(w->data + w->len, v);
  w->len += n;
}

void pw_put_tag(pw_writer *w, uint32_t field, int wire) { pw_put_varint(w, ((uint64_t)field << 3) | (uint64_t)wire); }

void pw_put_varint_field(pw_writer *w, uint32_t field, uint64_t v) {
  pw_put_tag(w, field, PW_VARINT);
  pw_put_varint(w, v);
}

void pw_put_i64_field(pw_writer *w, uint32_t field, int64_t v) { pw_put_varint_field(w, field, (uint64_t)v); }

void pw_put_fixed32_field(pw_writer *w, uint32_t field, uint32_t v) {
  pw_put_tag(w, field, PW_I32);
  pw_put_raw(w, &v, 4);
}

void pw_put_fixed64_field(pw_writer *w, uint32_t field, uint64_t v) {
  pw_put_tag(w, field, PW_I64);
  pw_put_raw(w, &v, 8);
}

void pw_put_float_field(pw_writer *w, uint32_t field, float v) {
  uint32_t b;
  memcpy(&b, &v, 4);
  pw_put_fixed32_field(w, field, b);
}

void pw_put_bytes_field(pw_writer *w, uint32_t field, const void *data, size_t n) {
  pw_put_tag(w, field, PW_LEN);
  pw_put_varint(w, n);
  pw_put_raw(w, data, n);
}

void pw_put_string_field(pw_writer *w, uint32_t field, const char *s) {
  if (s) pw_put_bytes_field(w, field, s, strlen(s));
}

size_t pw_begin(pw_writer *w, uint32_t field) {
  pw_put_tag(w, field, PW_LEN);
  return w->len;
}

void pw_end(pw_writer *w, size_t mark) {
  if (w->oom) return;
  size_t body = w->len - mark;
  size_t k = varint_size(body);
  if (!pw_reserve(w, k)) return;
  memmove(w->data + mark + k, w->data + mark, body);
  encode_varint(w->data + mark, body);
  w->len += k;
}
