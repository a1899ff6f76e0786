#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>

static bool reserve(kiln_strbuf *s, size_t extra) {
  if (s->oom) return false;
  if (s->len + extra + 1 <= s->cap) return true;
  size_t cap = s->cap ? s->cap : 256;
  while (cap < s->len + extra + 1) cap *= 2;
  char *n = realloc(s->data, cap);
  if (!n) {
    s->oom = true;
    return false;
  }
  s->data = n;
  s->cap = cap;
  return true;
}

void kiln_strbuf_printf(kiln_strbuf *s, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n >= 0 && reserve(s, (size_t)n)) {
    vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap2);
    s->len += (size_t)n;
  }
  va_end(ap2);
}

void kiln_strbuf_puts(kiln_strbuf *s, const char *str) {
  size_t n = strlen(str);
  if (!reserve(s, n)) return;
  memcpy(s->data + s->len, str, n + 1);
  s->len += n;
}

kiln_status_t kiln_strbuf_status(const kiln_strbuf *s) {
  return s->oom ? kiln_error(KILN_OUT_OF_MEMORY, "out of memory building a string") : NULL;
}

char *kiln_strbuf_take(kiln_strbuf *s) {
  char *d = s->data;
  if (!d) d = kiln_strdup("");
  s->data = NULL;
  s->len = s->cap = 0;
  return d;
}

void kiln_strbuf_free(kiln_strbuf *s) {
  free(s->data);
  s->data = NULL;
  s->len = s->cap = 0;
}
