#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_status_s {
  kiln_status_code code;
  char *message; /* owned */
};

/* Returned when even the error cannot be allocated; never freed. */
static struct kiln_status_s oom_status = {KILN_OUT_OF_MEMORY, "out of memory"};

kiln_status_t kiln_error_v(kiln_status_code code, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  struct kiln_status_s *st = malloc(sizeof *st);
  char *msg = malloc((size_t)n + 1);
  if (!st || !msg) {
    free(st);
    free(msg);
    return &oom_status;
  }
  vsnprintf(msg, (size_t)n + 1, fmt, ap);
  st->code = code;
  st->message = msg;
  return st;
}

kiln_status_t kiln_error(kiln_status_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t st = kiln_error_v(code, fmt, ap);
  va_end(ap);
  return st;
}

kiln_status_t kiln_status_annotate(kiln_status_t status, const char *fmt, ...) {
  if (!status || status == &oom_status) return status;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  if (!prefix[0]) return status;
  size_t a = strlen(prefix), b = strlen(status->message);
  char *msg = malloc(a + 2 + b + 1);
  if (!msg) return status;
  memcpy(msg, prefix, a);
  memcpy(msg + a, ": ", 2);
  memcpy(msg + a + 2, status->message, b + 1);
  free(status->message);
  status->message = msg;
  return status;
}

kiln_status_code kiln_status_code_of(kiln_status_t status) { return status ? status->code : KILN_OK; }

const char *kiln_status_message(kiln_status_t status) { return status ? status->message : "ok"; }

void kiln_status_free(kiln_status_t status) {
  if (!status || status == &oom_status) return;
  free(status->message);
  free(status);
}
