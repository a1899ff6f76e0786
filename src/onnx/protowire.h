/* protowire.h — the protobuf wire format, bounds-checked, no library.
 *
 * Reading: a pw_reader walks one message (a byte range inside a larger
 * buffer whose start, `base`, is kept so errors can name absolute byte
 * offsets). pw_next() yields one field at a time; groups (wire types 3/4,
 * deprecated but legal) are skipped with a nesting limit; every length is
 * checked against the end of the enclosing message before it is used.
 *
 *   pw_reader r = pw_reader_make(base, msg, msg_len);
 *   pw_field f;
 *   bool more;
 *   for (;;) {
 *     KILN_TRY(pw_next(&r, &f, &more));
 *     if (!more) break;
 *     switch (f.number) { case 1: ... }
 *   }
 *
 * Repeated scalar fields may arrive packed (one LEN field) or one element
 * per field; the pw_*_count / pw_*_at helpers accept both.
 *
 * Writing: a pw_writer is a growable byte buffer. Nested messages are
 * written in place: pw_begin() emits the tag and returns a mark, pw_end()
 * inserts the length prefix. Allocation failure sets `oom` and further
 * writes are ignored; check it once at the end.
 */
#ifndef KILN_ONNX_PROTOWIRE_H
#define KILN_ONNX_PROTOWIRE_H

#include "base/common.h"

enum { PW_VARINT = 0, PW_I64 = 1, PW_LEN = 2, PW_SGROUP = 3, PW_EGROUP = 4, PW_I32 = 5 };

/* Nesting limit for groups skipped as unknown fields. */
#define PW_MAX_GROUP_DEPTH 32

typedef struct pw_reader {
  const uint8_t *base; /* start of the whole buffer (for offsets in messages) */
  const uint8_t *p;    /* next byte */
  const uint8_t *end;  /* end of this message */
} pw_reader;

typedef struct pw_field {
  uint32_t number;
  int wire;             /* PW_VARINT, PW_I64, PW_LEN or PW_I32 */
  uint64_t u;           /* value for VARINT / I64 / I32 */
  const uint8_t *data;  /* LEN: payload (inside the buffer) */
  size_t len;           /* LEN: payload length */
  size_t offset;        /* byte offset of the tag from base */
} pw_field;

static inline pw_reader pw_reader_make(const uint8_t *base, const uint8_t *msg, size_t len) {
  pw_reader r = {base, msg, msg + len};
  return r;
}

/* Sub-reader over a LEN field's payload. */
static inline pw_reader pw_sub(const pw_reader *r, const pw_field *f) {
  return pw_reader_make(r->base, f->data, f->len);
}

/* Next field; *more = false at the end of the message. Errors name the
 * byte offset ("truncated varint at byte 1234"). */
kiln_status_t pw_next(pw_reader *r, pw_field *f, bool *more);

/* Decodes one varint at *p (< end), advancing *p; false when truncated or
 * longer than 10 bytes. */
bool pw_decode_varint(const uint8_t **p, const uint8_t *end, uint64_t *out);

/* Error unless f has wire type `wire`. `what` names the field. */
kiln_status_t pw_expect(const pw_field *f, int wire, const char *what);

/* A LEN field as a new NUL-terminated string (may hold inner NULs). */
kiln_status_t pw_dup_string(const pw_field *f, char **out);

/* Typed views of a scalar field value. */
static inline int64_t pw_as_i64(const pw_field *f) { return (int64_t)f->u; }
static inline int32_t pw_as_i32(const pw_field *f) { return (int32_t)(uint32_t)f->u; }
static inline float pw_as_float(const pw_field *f) {
  uint32_t b = (uint32_t)f->u;
  float x;
  memcpy(&x, &b, 4);
  return x;
}
static inline double pw_as_double(const pw_field *f) {
  double x;
  memcpy(&x, &f->u, 8);
  return x;
}

/* ---- repeated scalars: packed or not ----------------------------------
 * `elem_wire` is the element's wire type (PW_VARINT, PW_I32 or PW_I64).
 * A field of that wire type is one element; a LEN field is a packed run.
 * pw_count_elems adds the number of elements f holds to *count (error on
 * a malformed packed run: truncated varint, length not a multiple of the
 * element size, or another wire type). */
kiln_status_t pw_count_elems(const pw_reader *r, const pw_field *f, int elem_wire, int64_t *count);

/* Iterates the elements of one field (packed or single), calling
 * fn(ctx, index_within_field, raw_value) for each; raw_value is the varint
 * or the fixed-width bits. Stops at the first error fn returns. */
typedef kiln_status_t (*pw_elem_fn)(void *ctx, int64_t i, uint64_t raw);
kiln_status_t pw_for_each_elem(const pw_reader *r, const pw_field *f, int elem_wire, pw_elem_fn fn,
                               void *ctx);

/* ---- writing ----------------------------------------------------------- */

typedef struct pw_writer {
  uint8_t *data; /* owned (malloc) */
  size_t len, cap;
  bool oom;
} pw_writer;

void pw_writer_free(pw_writer *w);
/* Ensures room for n more bytes; false (and oom set) on failure. */
bool pw_reserve(pw_writer *w, size_t n);
void pw_put_raw(pw_writer *w, const void *data, size_t n);
void pw_put_varint(pw_writer *w, uint64_t v);
void pw_put_tag(pw_writer *w, uint32_t field, int wire);
void pw_put_varint_field(pw_writer *w, uint32_t field, uint64_t v);
void pw_put_i64_field(pw_writer *w, uint32_t field, int64_t v); /* as varint (int64) */
void pw_put_fixed32_field(pw_writer *w, uint32_t field, uint32_t v);
void pw_put_fixed64_field(pw_writer *w, uint32_t field, uint64_t v);
void pw_put_float_field(pw_writer *w, uint32_t field, float v);
void pw_put_bytes_field(pw_writer *w, uint32_t field, const void *data, size_t n);
/* NUL-terminated; NULL writes nothing. */
void pw_put_string_field(pw_writer *w, uint32_t field, const char *s);
/* Nested message: tag now, length prefix at pw_end. */
size_t pw_begin(pw_writer *w, uint32_t field);
void pw_end(pw_writer *w, size_t mark);

#endif
