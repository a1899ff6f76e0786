/* limits.h — what a model may ask of the process: the largest tensor and the
 * longest run.
 *
 * A model file is untrusted input: it can declare a 10^12-element tensor or a
 * Loop of 2^31 iterations that is valid ONNX. Both limits turn such a request
 * into an error with a message instead of an allocation that brings the
 * machine down or a run that never returns.
 *
 *   KILN_MAX_TENSOR_BYTES=N[K|M|G]  the most bytes one tensor may hold
 *                                   (default 64 GiB)
 *   KILN_RUN_TIMEOUT=SECONDS        the longest one kiln_session_run may take
 *                                   (default: no limit)
 *
 * Both are read from the environment at first use; tools (the pipeline
 * fuzzer) may set them with kiln_limits_set before any session runs. The
 * time limit is checked between nodes (and between iterations of a Loop or
 * Scan body), so one long kernel finishes before the run stops; a run that
 * stops returns KILN_TIMEOUT and frees what it held.
 *
 * Thread-safety: the limits are process-wide and immutable once read; the
 * deadline is per thread (the thread that called kiln_session_run).
 */
#ifndef KILN_BASE_LIMITS_H
#define KILN_BASE_LIMITS_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln_limits {
  int64_t max_tensor_bytes; /* > 0 */
  double run_timeout_s;     /* 0: none */
} kiln_limits;

/* The limits in force. Never NULL. */
const kiln_limits *kiln_limits_get(void);
/* Replaces the limits (fields <= 0 keep their defaults). Not thread-safe:
 * call it before any session runs. */
void kiln_limits_set(const kiln_limits *limits);

/* Arms this thread's deadline for one run if none is armed; returns whether
 * this call armed it (pass that to kiln_run_deadline_end, so nested runs
 * keep the outermost deadline). */
bool kiln_run_deadline_begin(void);
void kiln_run_deadline_end(bool armed);
/* An error once this thread's armed deadline has passed, else NULL. Cheap
 * (one clock read) when armed, free when not. */
kiln_status_t kiln_run_deadline_check(void);

#endif
