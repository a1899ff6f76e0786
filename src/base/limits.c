/* Process-wide limits on what a model may ask for. See limits.h. */
#include "base/limits.h"

#include "base/common.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static kiln_limits g_limits = {KILN_MAX_TENSOR_BYTES, 0};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_set_by_tool;

static _Thread_local double t_deadline; /* CLOCK_MONOTONIC seconds; 0: none armed */

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* "123", "64K", "16M", "2G" -> bytes; <= 0 when malformed. */
static int64_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  while (isspace((unsigned char)*end)) end++;
  double scale = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K': scale = 1024.0; end++; break;
  case 'M': scale = 1024.0 * 1024; end++; break;
  case 'G': scale = 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (toupper((unsigned char)*end) == 'I') end++; /* KiB, MiB, GiB */
  if (toupper((unsigned char)*end) == 'B') end++;
  if (*end || end == s || !(v > 0) || v * scale > (double)KILN_MAX_TENSOR_BYTES) return 0;
  return (int64_t)(v * scale);
}

static void read_environment(void) {
  if (g_set_by_tool) return;
  const char *bytes = getenv("KILN_MAX_TENSOR_BYTES");
  if (bytes && *bytes) {
    int64_t b = parse_bytes(bytes);
    if (b > 0) g_limits.max_tensor_bytes = b;
    else fprintf(stderr, "kiln: warning: ignoring KILN_MAX_TENSOR_BYTES='%s' (want e.g. 512M, at most 64G)\n", bytes);
  }
  const char *secs = getenv("KILN_RUN_TIMEOUT");
  if (secs && *secs) {
    char *end;
    double s = strtod(secs, &end);
    if (*end == '\0' && s > 0) g_limits.run_timeout_s = s;
    else fprintf(stderr, "kiln: warning: ignoring KILN_RUN_TIMEOUT='%s' (want seconds > 0)\n", secs);
  }
}

const kiln_limits *kiln_limits_get(void) {
  pthread_once(&g_once, read_environment);
  return &g_limits;
}

void kiln_limits_set(const kiln_limits *limits) {
  g_set_by_tool = true;
  pthread_once(&g_once, read_environment);
  g_limits.max_tensor_bytes = limits->max_tensor_bytes > 0 ? KILN_MIN(limits->max_tensor_bytes, KILN_MAX_TENSOR_BYTES)
                                                           : KILN_MAX_TENSOR_BYTES;
  g_limits.run_timeout_s = limits->run_timeout_s > 0 ? limits->run_timeout_s : 0;
}

bool kiln_run_deadline_begin(void) {
  double limit = kiln_limits_get()->run_timeout_s;
  if (limit <= 0 || t_deadline > 0) return false;
  t_deadline = now_seconds() + limit;
  return true;
}

void kiln_run_deadline_end(bool armed) {
  if (armed) t_deadline = 0;
}

kiln_status_t kiln_run_deadline_check(void) {
  if (t_deadline <= 0 || now_seconds() < t_deadline) return NULL;
  return kiln_error(KILN_TIMEOUT, "the run took longer than its limit of %g s (KILN_RUN_TIMEOUT)",
                    kiln_limits_get()->run_timeout_s);
}
