/* strbuf.h — a growable string for code generators and reports. Sticky
 * out-of-memory: appends after a failed growth are dropped and
 * kiln_strbuf_status reports it. The buffer owns `data`. */
#ifndef KILN_BASE_STRBUF_H
#define KILN_BASE_STRBUF_H

#include "base/common.h"

typedef struct kiln_strbuf {
  char *data;
  size_t len, cap;
  bool oom;
} kiln_strbuf;

void kiln_strbuf_printf(kiln_strbuf *s, const char *fmt, ...) KILN_PRINTF(2, 3);
void kiln_strbuf_puts(kiln_strbuf *s, const char *str);
kiln_status_t kiln_strbuf_status(const kiln_strbuf *s);
/* Hands the string to the caller (free it); the strbuf is reset. */
char *kiln_strbuf_take(kiln_strbuf *s);
void kiln_strbuf_free(kiln_strbuf *s);

#endif
