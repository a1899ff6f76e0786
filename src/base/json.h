/* json.h — a small JSON writer for the API's reports (src/api) and the CLI.
 *
 * Builds one JSON text in a kiln_strbuf: objects and arrays nest, commas are
 * placed by the writer, keys are given with each member (NULL inside arrays
 * and for the top-level value). Strings are escaped as RFC 8259 asks and
 * must be UTF-8: a byte that does not start or continue a valid sequence is
 * written as U+FFFD, so the text always parses. Numbers that JSON cannot
 * hold (NaN, infinities) are written as null. Out of memory is sticky, as
 * in the strbuf, and reported by kiln_json_finish. Nesting is at most
 * KILN_JSON_MAX_DEPTH deep (deeper calls are an internal error at finish).
 */
#ifndef KILN_BASE_JSON_H
#define KILN_BASE_JSON_H

#include "base/strbuf.h"

#define KILN_JSON_MAX_DEPTH 32

typedef struct kiln_json {
  kiln_strbuf sb;
  int depth;
  bool first[KILN_JSON_MAX_DEPTH]; /* per open level: no member written yet */
  bool overflow;                   /* nested too deep or closed too often */
} kiln_json;

void kiln_json_object_begin(kiln_json *j, const char *key);
void kiln_json_object_end(kiln_json *j);
void kiln_json_array_begin(kiln_json *j, const char *key);
void kiln_json_array_end(kiln_json *j);
void kiln_json_string(kiln_json *j, const char *key, const char *value); /* NULL value: null */
void kiln_json_int(kiln_json *j, const char *key, int64_t value);
void kiln_json_double(kiln_json *j, const char *key, double value);     /* %.17g; null when not finite */
void kiln_json_bool(kiln_json *j, const char *key, bool value);
void kiln_json_null(kiln_json *j, const char *key);
/* The finished text (owned by the caller: free) in *out; the writer is
 * reset. An error (out of memory, unbalanced nesting) frees the text. */
kiln_status_t kiln_json_finish(kiln_json *j, char **out);
void kiln_json_free(kiln_json *j);

/* Appends s as a quoted, escaped JSON string (NULL: ""). */
void kiln_json_escape(kiln_strbuf *sb, const char *s);

#endif
