/* A small JSON writer (json.h). */
#include "base/json.h"

#include <math.h>

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when it is not one. */
static int utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  int n;
  unsigned min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, min = 0x10000;
  else return 0;
  unsigned cp = c & (0x3f >> (n - 1));
  for (int i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void kiln_json_escape(kiln_strbuf *sb, const char *s) {
  kiln_strbuf_puts(sb, "\"");
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  while (*p) {
    unsigned c = *p;
    if (c == '"') kiln_strbuf_puts(sb, "\\\"");
    else if (c == '\\') kiln_strbuf_puts(sb, "\\\\");
    else if (c == '\n') kiln_strbuf_puts(sb, "\\n");
    else if (c == '\r') kiln_strbuf_puts(sb, "\\r");
    else if (c == '\t') kiln_strbuf_puts(sb, "\\t");
    else if (c < 0x20 || c == 0x7f) kiln_strbuf_printf(sb, "\\u%04x", c);
    if (c < 0x80) {
      if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f) {
        char ch[2] = {(char)c, 0};
        kiln_strbuf_puts(sb, ch);
      }
      p++;
      continue;
    }
    int n = utf8_len(p);
    if (!n) {
      kiln_strbuf_puts(sb, "\\ufffd");
      p++;
      continue;
    }
    char seq[5] = {0};
    memcpy(seq, p, (size_t)n);
    kiln_strbuf_puts(sb, seq);
    p += n;
  }
  kiln_strbuf_puts(sb, "\"");
}

/* The comma and the key before a value. */
static void member(kiln_json *j, const char *key) {
  if (j->depth > 0) {
    if (!j->first[j->depth - 1]) kiln_strbuf_puts(&j->sb, ",");
    j->first[j->depth - 1] = false;
  }
  if (key) {
    kiln_json_escape(&j->sb, key);
    kiln_strbuf_puts(&j->sb, ":");
  }
}

static void open_level(kiln_json *j, const char *key, const char *bracket) {
  member(j, key);
  kiln_strbuf_puts(&j->sb, bracket);
  if (j->depth >= KILN_JSON_MAX_DEPTH) {
    j->overflow = true;
    return;
  }
  j->first[j->depth++] = true;
}

static void close_level(kiln_json *j, const char *bracket) {
  if (j->depth <= 0) j->overflow = true;
  else j->depth--;
  kiln_strbuf_puts(&j->sb, bracket);
}

void kiln_json_object_begin(kiln_json *j, const char *key) { open_level(j, key, "{"); }
void kiln_json_object_end(kiln_json *j) { close_level(j, "}"); }
void kiln_json_array_begin(kiln_json *j, const char *key) { open_level(j, key, "["); }
void kiln_json_array_end(kiln_json *j) { close_level(j, "]"); }

void kiln_json_string(kiln_json *j, const char *key, const char *value) {
  member(j, key);
  if (value) kiln_json_escape(&j->sb, value);
  else kiln_strbuf_puts(&j->sb, "null");
}

void kiln_json_int(kiln_json *j, const char *key, int64_t value) {
  member(j, key);
  kiln_strbuf_printf(&j->sb, "%lld", (long long)value);
}

void kiln_json_double(kiln_json *j, const char *key, double value) {
  member(j, key);
  if (isfinite(value)) kiln_strbuf_printf(&j->sb, "%.17g", value);
  else kiln_strbuf_puts(&j->sb, "null");
}

void kiln_json_bool(kiln_json *j, const char *key, bool value) {
  member(j, key);
  kiln_strbuf_puts(&j->sb, value ? "true" : "false");
}

void kiln_json_null(kiln_json *j, const char *key) {
  member(j, key);
  kiln_strbuf_puts(&j->sb, "null");
}

kiln_status_t kiln_json_finish(kiln_json *j, char **out) {
  *out = NULL;
  kiln_status_t st = kiln_strbuf_status(&j->sb);
  if (!st && (j->overflow || j->depth))
    st = kiln_error(KILN_INTERNAL, "unbalanced or too deep JSON (depth %d)", j->depth);
  if (st) {
    kiln_json_free(j);
    return st;
  }
  *out = kiln_strbuf_take(&j->sb);
  memset(j, 0, sizeof *j);
  return *out ? NULL : KILN_OOM();
}

void kiln_json_free(kiln_json *j) {
  kiln_strbuf_free(&j->sb);
  memset(j, 0, sizeof *j);
}
