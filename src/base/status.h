/* status.h — errors as values with a message.
 *
 * A kiln_status_t is NULL for success, or a heap object holding a code and a
 * formatted message. Context is prepended as the error propagates:
 *
 *   KILN_RETURN_IF_ERROR(load_node(...), "while loading node '%s'", name);
 *
 * turns "dims must be positive" into
 * "while loading node 'conv1': dims must be positive".
 * Whoever receives a non-NULL status owns it and must free or return it.
 */
#ifndef KILN_BASE_STATUS_H
#define KILN_BASE_STATUS_H

#include "kiln.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define KILN_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#define KILN_MUST_USE __attribute__((warn_unused_result))
#define KILN_RETURNS_NONNULL __attribute__((returns_nonnull))
#else
#define KILN_PRINTF(a, b)
#define KILN_MUST_USE
#define KILN_RETURNS_NONNULL
#endif

/* New error status. Never returns NULL (falls back to a static OOM status). */
kiln_status_t kiln_error(kiln_status_code code, const char *fmt, ...) KILN_PRINTF(2, 3) KILN_RETURNS_NONNULL;
kiln_status_t kiln_error_v(kiln_status_code code, const char *fmt, va_list ap) KILN_RETURNS_NONNULL;
/* Prepends "context: " to the message; consumes and returns `status`. */
kiln_status_t kiln_status_annotate(kiln_status_t status, const char *fmt, ...) KILN_PRINTF(2, 3);

#define KILN_OOM() kiln_error(KILN_OUT_OF_MEMORY, "out of memory at %s:%d", __FILE__, __LINE__)

#define KILN_RETURN_IF_ERROR(expr, ...)                     \
  do {                                                      \
    kiln_status_t kiln_st_ = (expr);                        \
    if (kiln_st_) return kiln_status_annotate(kiln_st_, __VA_ARGS__); \
  } while (0)

#define KILN_TRY(expr)                 \
  do {                                 \
    kiln_status_t kiln_st_ = (expr);   \
    if (kiln_st_) return kiln_st_;     \
  } while (0)

#endif
